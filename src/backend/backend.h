/* The executor a worker trains and evaluates with, behind a backend
 * interface (docs/architecture.md, "The local step and the backend").
 *
 * A backend is a small table of functions (pfl_backend) that runs a model's
 * operations on one kind of device: buffers in its memory, copies to and
 * from host vectors, the batch, forward and backward, the losses, the
 * optimizer step. The CPU backend (cpu.c) is today's engine (src/nn); a
 * device backend implements the same table. Nothing above this layer names a
 * backend: the local step (src/fl/step.c), the round loop's evaluation and
 * the modules call pfl_exec_*, which dispatch through the table, as ggml's
 * model code calls ggml_backend_* and never ggml-cpu or ggml-cuda.
 *
 * One executor per worker thread: it holds the model's workspace
 * (activations and their gradients), the batch, and the buffers it hands
 * out. Vectors the executor computes on are pfl_xbuf: either its own
 * (pfl_exec_alloc) or a view of a host vector (pfl_exec_view), which on the
 * CPU is that host memory itself (no copy: a model trains in place) and on a
 * device a copy made when the view is taken and, for a view taken to
 * change, copied back when it is closed (pfl_exec_unview). So a client's
 * model goes to the device once when its training starts and back once when
 * it ends. Code that must compute on a buffer with its own loops (a
 * method's host-side batch work) asks for its host memory with
 * pfl_exec_host, which a device backend does not give: its executor then
 * records a refusal, as it does for a step with host-side parts
 * (pfl_step_host_part), and the round loop stops the run with one line
 * naming the method. The CUDA backend is cuda.cu (docs/architecture.md,
 * "The CUDA backend"). */
#ifndef PFL_BACKEND_BACKEND_H
#define PFL_BACKEND_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/data.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "util/rng.h"

typedef struct pfl_exec pfl_exec;

/* A vector in an executor's memory: n floats. `host` is the memory on the
 * host when the backend computes there (the CPU), else NULL; `dev` is the
 * backend's own handle. Views (pfl_exec_view) live on the caller's stack. */
typedef struct {
    float *host;
    void *dev;
    size_t n;
    bool owned;      /* allocated by the executor (freed by pfl_exec_free_buf) */
    bool writeback;  /* a device view of a host vector that is copied back when closed */
    float *origin;   /* a view: the host vector it shows */
    pfl_exec *exec;  /* a device buffer: its executor (pfl_exec_host refuses through it) */
} pfl_xbuf;

/* Where a gradient joins the backward pass: the features entering layer
 * `layer` (the input of its op), `d` (B x pfl_model_layer_input_size
 * floats, host memory) their gradient. */
typedef struct {
    int layer;
    const float *d;
} pfl_xinjection;

/* What a backend implements. Every function receives the executor; the
 * backend keeps its own state in exec->impl. */
typedef struct pfl_backend {
    const char *name;                 /* "cpu", "cuda" */
    /* Its buffers are not host memory (pfl_exec_host gives none). */
    bool device;
    /* Whether this machine can run it; else -1 with a message naming why. */
    int (*available)(void);
    /* What it runs on, for the run's first line ("NVIDIA H100 80GB HBM3
     * (132 SMs, 79 GiB), CUDA runtime 13.0, ..."); NULL: nothing to say. */
    void (*describe)(char *buf, size_t size);
    /* The backend's part of an executor for `m` on batches of up to
     * max_batch samples of `data`; 0 or -1 with a message. */
    int (*create)(pfl_exec *x);
    void (*destroy)(pfl_exec *x);
    /* ---- buffers ---- */
    int (*alloc)(pfl_exec *x, pfl_xbuf *b, size_t n);
    void (*free_buf)(pfl_exec *x, pfl_xbuf *b);
    int (*view)(pfl_exec *x, pfl_xbuf *b, float *host, size_t n, bool writeback);
    void (*unview)(pfl_exec *x, pfl_xbuf *b);
    void (*write)(pfl_exec *x, pfl_xbuf *b, size_t off, const float *src, size_t n);
    void (*read)(pfl_exec *x, const pfl_xbuf *b, size_t off, float *dst, size_t n);
    void (*zero)(pfl_exec *x, pfl_xbuf *b, size_t off, size_t n);
    /* ---- the batch ---- */
    /* samples idx[0..B) of the executor's dataset, normalized as pfl_dataset_gather */
    void (*gather)(pfl_exec *x, const int *idx, int B);
    /* B samples given as host floats (a public set), with labels or NULL */
    void (*load)(pfl_exec *x, const float *inputs, const uint8_t *labels, int B);
    const uint8_t *(*labels)(pfl_exec *x);      /* host copy of the batch's labels */
    /* ---- compute ---- */
    void (*forward)(pfl_exec *x, const pfl_xbuf *params, bool train, pfl_rng *rng);
    float (*xent)(pfl_exec *x, const float *offset);
    int (*correct)(pfl_exec *x);
    /* host memory of the features entering `layer` after the last forward
     * (the logits for layer == num_layers), or NULL (then read them) */
    const float *(*tap)(pfl_exec *x, int layer);
    void (*read_tap)(pfl_exec *x, int layer, float *dst);
    void (*update_stats)(pfl_exec *x, pfl_xbuf *vector);
    void (*backward)(pfl_exec *x, const pfl_xbuf *params, pfl_xbuf *grads, int lowest_layer, float ce_weight,
                     const pfl_xinjection *inj, int n_inj);
    /* plain SGD fused into the backward pass; -1 when the model cannot */
    int (*backward_sgd)(pfl_exec *x, pfl_xbuf *params, float lr);
    void (*sgd)(pfl_exec *x, pfl_xbuf *params, pfl_xbuf *grads, pfl_xbuf *velocity, size_t off, size_t n,
                const pfl_sgd *opt);
    /* the embedding rows the last forward read, stepped and their gradients zeroed again */
    void (*sgd_rows)(pfl_exec *x, pfl_xbuf *params, pfl_xbuf *grads, int layer, const pfl_sgd *opt);
    /* grads[off..off+n) += mu (params - anchor) */
    void (*prox)(pfl_exec *x, pfl_xbuf *grads, const pfl_xbuf *params, const pfl_xbuf *anchor, float mu, size_t off,
                 size_t n);
    /* sum of squares of b[off..off+n), in double */
    double (*sumsq)(pfl_exec *x, const pfl_xbuf *b, size_t off, size_t n);
    /* Checks only (tests/gpu): op `op`'s output after the last forward, or
     * (grad) the gradient of that output after the last backward, B x the
     * op's output size floats into dst; NULL where the backend keeps no such
     * buffer of its own (the CPU works some ops in place). */
    void (*read_op)(pfl_exec *x, int op, bool grad, float *dst);
} pfl_backend;

struct pfl_exec {
    const pfl_backend *be;
    const pfl_model *model;
    const pfl_dataset *data;
    int max_batch;
    int batch;            /* B of the current batch */
    bool tf32;            /* TF32 matrix products allowed (pfl_backend_set_tf32 when it was created) */
    void *impl;           /* the backend's */
    /* A device executor asked for host memory it does not have
     * (pfl_exec_host) or for a step with host parts (pfl_exec_refuse):
     * what, for the one line that stops the run; NULL: nothing refused.
     * `mirrors` are the stand-in host vectors handed out meanwhile. */
    char refused[160];
    struct pfl_exec_mirror *mirrors;
};

/* The backends built into this pfl ("cpu", and "cuda" when built with it),
 * by name; NULL with a message naming the ones there are (and, for "cuda"
 * in a pfl built without it, how to build it). */
const pfl_backend *pfl_backend_find(const char *name);
/* The backends this pfl has, comma-separated ("cpu, cuda"). */
const char *pfl_backend_names(void);
extern const pfl_backend pfl_backend_cpu;
#ifdef PFL_CUDA
extern const pfl_backend pfl_backend_cuda;
#endif

/* TF32 tensor-core arithmetic for a device backend's float32 matrix
 * products (--tf32): faster, about 3 decimal digits. Off by default, so a
 * device run's numbers stay within float32 rounding of the CPU's. Set before
 * executors are created (pfl_fl_create); it holds for the process. */
void pfl_backend_set_tf32(bool on);
bool pfl_backend_tf32(void);

/* An executor of backend `be` for model m on batches of up to max_batch
 * samples of `data` (NULL: only pfl_exec_load feeds it). NULL with a message. */
pfl_exec *pfl_exec_create(const pfl_backend *be, const pfl_model *m, const pfl_dataset *data, int max_batch);
void pfl_exec_destroy(pfl_exec *x);
static inline int pfl_exec_max_batch(const pfl_exec *x) { return x->max_batch; }

/* ---- buffers ---- */
int pfl_exec_alloc(pfl_exec *x, pfl_xbuf *b, size_t n);
void pfl_exec_free_buf(pfl_exec *x, pfl_xbuf *b);
/* A view of host vector `host` (n floats); `writeback`: what the executor
 * writes into it reaches `host` (at once on the CPU, by unview on a
 * device). Close every view with pfl_exec_unview. */
pfl_xbuf pfl_exec_view(pfl_exec *x, float *host, size_t n, bool writeback);
/* A view that is only read (writeback false). */
pfl_xbuf pfl_exec_view_const(pfl_exec *x, const float *host, size_t n);
void pfl_exec_unview(pfl_exec *x, pfl_xbuf *b);
/* The host memory of b. A device backend has none: its executor then
 * records the refusal (pfl_exec_refusal) and hands out a zeroed stand-in
 * of b->n floats, so that a method's host-side work runs harmlessly until
 * the round loop stops the run with one line. */
float *pfl_exec_host(const pfl_xbuf *b);
/* Whether the executor's buffers live on a device (no host memory). */
static inline bool pfl_exec_on_device(const pfl_exec *x) { return x->be->device; }
/* Records that work the executor cannot do was asked of it, and why ("its
 * step has a host-side part: fedphp's MMD"); the first one is kept. */
void pfl_exec_refuse(pfl_exec *x, const char *why);
/* Why work was refused, or NULL. */
static inline const char *pfl_exec_refusal(const pfl_exec *x) { return x->refused[0] ? x->refused : NULL; }
void pfl_exec_write(pfl_exec *x, pfl_xbuf *b, size_t off, const float *src, size_t n);
void pfl_exec_read(pfl_exec *x, const pfl_xbuf *b, size_t off, float *dst, size_t n);
void pfl_exec_zero(pfl_exec *x, pfl_xbuf *b, size_t off, size_t n);

/* ---- the batch: at most max_batch samples (more is a bug of the caller, which stops the program) ---- */
void pfl_exec_gather(pfl_exec *x, const int *idx, int B);
void pfl_exec_load(pfl_exec *x, const float *inputs, const uint8_t *labels, int B);
const uint8_t *pfl_exec_labels(pfl_exec *x);

/* ---- compute, on the current batch ---- */
/* The network on the batch: training mode (batch statistics; dropout masks
 * from rng when given) or evaluation mode. Never writes params. */
void pfl_exec_forward(pfl_exec *x, const pfl_xbuf *params, bool train, pfl_rng *rng);
/* After a forward: the mean softmax cross-entropy of its logits (+ offset
 * per class: FedRoD's balanced softmax; NULL: none), which the backward
 * then differentiates. */
float pfl_exec_xent(pfl_exec *x, const float *offset);
/* After a forward: samples whose argmax logit is their label. */
int pfl_exec_correct(pfl_exec *x);
/* After a forward: the features entering `layer` (num_layers: the logits),
 * B x pfl_model_layer_input_size floats (classes for the logits), in host
 * memory the executor owns until the next forward, or copied to `scratch`
 * (room for them) on a backend that computes elsewhere. */
const float *pfl_exec_features(pfl_exec *x, int layer, float *scratch);
/* After a training forward: PyTorch's update of the running statistics in `vector`. */
void pfl_exec_update_stats(pfl_exec *x, pfl_xbuf *vector);
/* After a forward on `params`: accumulates into grads (num_params) the
 * gradient of ce_weight x the cross-entropy pfl_exec_xent took (ce_weight 0:
 * none) plus the terms whose gradients inj[] give, for the layers from
 * lowest_layer up (nothing below is visited). */
void pfl_exec_backward(pfl_exec *x, const pfl_xbuf *params, pfl_xbuf *grads, int lowest_layer, float ce_weight,
                       const pfl_xinjection *inj, int n_inj);
/* Whether the model admits the fused backward-and-SGD step (every layer a
 * Conv2d or a Linear with bias), and that step: p -= lr g of the
 * cross-entropy, without a gradient buffer. */
bool pfl_exec_can_fuse(const pfl_exec *x);
int pfl_exec_backward_sgd(pfl_exec *x, pfl_xbuf *params, float lr);
/* SGD (torch.optim.SGD) on params[off..off+n) from grads, velocity (may be
 * an empty buffer without momentum). */
void pfl_exec_sgd(pfl_exec *x, pfl_xbuf *params, pfl_xbuf *grads, pfl_xbuf *velocity, size_t off, size_t n,
                  const pfl_sgd *opt);
/* fastText: SGD on the embedding rows the last forward read, whose
 * gradients are then zeroed (every other row's gradient is exactly zero). */
void pfl_exec_sgd_rows(pfl_exec *x, pfl_xbuf *params, pfl_xbuf *grads, int layer, const pfl_sgd *opt);
void pfl_exec_prox(pfl_exec *x, pfl_xbuf *grads, const pfl_xbuf *params, const pfl_xbuf *anchor, float mu, size_t off,
                   size_t n);
double pfl_exec_sumsq(pfl_exec *x, const pfl_xbuf *b, size_t off, size_t n);

#endif
