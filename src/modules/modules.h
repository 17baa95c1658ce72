/* Pieces of layer-wise pFL methods that any algorithm can switch on
 * (DESIGN.md §2): FedALA's adaptive local aggregation (ALA) and FLAYER's
 * accuracy-weighted head mix, per-layer learning rates and upload mask.
 * They work on parameter vectors and the model's layer table; the round loop
 * (src/fl) decides when to call them. */
#ifndef PFL_MODULES_MODULES_H
#define PFL_MODULES_MODULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <stdio.h>

#include "backend/backend.h"
#include "data/data.h"
#include "modules/config.h"
#include "nn/model.h"
#include "util/report.h"
#include "util/rng.h"

/* ---- the modules as the experiment sees them ----
 *
 * Each module has a switch (--ala, --flayer-agg, ...) and the flags that
 * tune it, declared here beside its code as the methods declare theirs; a
 * method switches modules on by itself with pfl_algo.modules (FedALA is
 * FedAvg + ALA). A module's flags are refused in a run where it is off. */

/* The start phase over n clients, from each one's epochs and seconds
 * (epochs 0: not run yet): how many ran it, their epochs and their wall
 * times summed (the time one worker would take for them all). FedALA's
 * Table 3 times the start phase apart ("7+116 min"). */
typedef struct {
    int clients;
    long epochs;
    int min_epochs, max_epochs;
    double seconds;
} pfl_ala_start_totals;
pfl_ala_start_totals pfl_ala_start_sum(const long *epochs, const double *seconds, int n);

/* What a module's report hook sees. */
typedef struct {
    const pfl_model *model;
    const pfl_modules_config *cfg;
    const pfl_algo_params *algo;  /* head_layers (FLAYER's head mix) */
    int clients;
    const pfl_ala_start_totals *ala_start; /* ALA's start phase over every client, after the last round */
} pfl_module_view;

typedef struct {
    const char *name;             /* "ala" */
    size_t switch_offset;         /* its switch, a bool in pfl_modules_config */
    unsigned bit;                 /* PFL_MODULE_*: the bit of pfl_algo.modules that switches it on */
    const pfl_param *params;      /* params[0] is the switch; the others tune the module */
    int num_params;
    /* Optional output (util/report.h), as pfl_algo.report: what the module
     * did, for the summary or the progress lines. */
    void (*report)(const pfl_module_view *v, FILE *f, int what);
} pfl_module;

extern const pfl_module pfl_module_ala, pfl_module_flayer_agg, pfl_module_flayer_lr, pfl_module_flayer_mask;
/* NULL-terminated. */
extern const pfl_module *const pfl_modules[];

/* True when the module is on: its switch is set, or the method's modules bits say so. */
bool pfl_module_on(const pfl_module *m, const pfl_modules_config *cfg, unsigned algo_modules);

/* ---- ALA (FedALA, Zhang et al. 2023, Algorithm 1 and Eq. 2-5) ---- */

typedef struct {
    int p;                  /* top layers mixed element-wise (1: the output layer) */
    float s;                /* percent of the training split used to learn W */
    float eta;              /* learning rate of W */
    float threshold;        /* convergence: std of the last 10 epoch losses (each its last full batch's) below this */
    int max_epochs;         /* bound on the first active round's epochs */
    int batch;              /* batch size (the local one) */
    int private_layers;     /* top layers the client keeps as its own (never received, e.g. FedPer's head):
                             * the p mixed layers are the top p below them; 0: none */
} pfl_ala_config;

/* One client's ALA state: W over the top p layers, kept across rounds. */
typedef struct {
    float *weights;         /* span length floats, started at 1 */
    bool started;           /* W has been trained to convergence once */
} pfl_ala_client;

/* What ALA borrows from the caller's worker: its executor (the client's
 * data, forward and backward) and buffers. The weights are learned on host
 * memory (the gradient's, pfl_exec_host), so ALA runs where the executor
 * computes on the host. */
typedef struct {
    pfl_exec *exec;
    float *temp;            /* a model vector: the mixed model being trained */
    pfl_xbuf *grads;        /* num_params, in the executor's memory */
    int *order;             /* room for the client's training split */
} pfl_ala_buffers;

/* What one ALA call did, for logs and tests. */
typedef struct {
    bool skipped;           /* global equals local: nothing to learn */
    int epochs;             /* epochs of weight learning */
    bool hit_max;           /* the first round stopped at max_epochs, not at convergence */
    float last_loss;
    bool start_phase;       /* this call was the start phase (trained until convergence) */
    double seconds;         /* wall time of the weight learning */
} pfl_ala_report;


/* The span [offset, offset + length) of the top p layers. */
void pfl_ala_span(const pfl_model *m, int p, size_t *offset, size_t *length);
/* The span of the p layers below the top `private_layers` ones (the top p
 * of what a client receives): empty when no layer is left below them. */
void pfl_ala_window(const pfl_model *m, int p, int private_layers, size_t *offset, size_t *length);

int pfl_ala_client_init(pfl_ala_client *c, const pfl_model *m, int p);
/* The same for the window below `private_layers` top layers. */
int pfl_ala_client_init_window(pfl_ala_client *c, const pfl_model *m, int p, int private_layers);
void pfl_ala_client_free(pfl_ala_client *c);

/* Local initialization: on return `local` holds the lower layers of `global`
 * and, on the p mixed layers (the top p, or the top p below
 * cfg->private_layers, whose values `local` keeps), local + (global - local) * W with W learned on a
 * random s% of the training split (train[0..n_train)): per batch,
 * W <- clip(W - eta * grad(loss at the mixed model) * (global - local), 0, 1).
 * Until W has been trained once, it trains until the loss converges (or
 * max_epochs); afterwards one epoch. Skipped (local = global everywhere)
 * while the top layers of global and local are equal. */
pfl_ala_report pfl_ala_apply(pfl_ala_client *c, const pfl_ala_config *cfg, const pfl_model *m, const int *train,
                             int n_train, const float *global, float *local, const pfl_ala_buffers *buf, pfl_rng *rng);

/* One weight-learning step on given gradients (exposed for tests):
 * W <- clip(W - eta * grad * (global - local), 0, 1) over n elements. */
void pfl_ala_weight_step(float *weights, const float *grad, const float *global, const float *local, float eta,
                         size_t n);

/* ---- FLAYER (Eq. 2-9) ---- */

/* Eq. 2: base layers from `received`, head layers (the last `head`) mixed as
 * acc * local + (1 - acc) * received. Writes into local. */
void pfl_flayer_mix_head(float *local, const float *received, const pfl_model *m, int head, float acc);
/* The same with the mixed layers the `head` below the top `private_layers`
 * ones (whose values `local` keeps): the head of what the client receives. */
void pfl_flayer_mix_window(float *local, const float *received, const pfl_model *m, int head, int private_layers,
                           float acc);

/* Eq. 4: lr_i = lr * (1 + log(1 + 1/||g_i||_2) * i / L), i = 1..L over the
 * layer table (input to output), from the current gradient. Writes L rates. */
void pfl_flayer_layer_lrs(float *lrs, const pfl_model *m, const float *grads, float lr);
/* The same from each layer's squared gradient norm sq[l] (what a backend
 * computes where the gradient lives). */
void pfl_flayer_rates(float *lrs, const pfl_model *m, const double *sq, float lr);

/* Eq. 5: UP_i = min(max(i / L, 0.1), 1). */
double pfl_flayer_upload_fraction(int i, int L);

/* Eq. 6-8: per layer, flags (sent[j] = 1) the ceil(UP_i * n_i) elements with
 * the largest |trained - start| (ties broken by position). `scratch` needs
 * the largest layer's length in floats. Returns the number of flags set. */
size_t pfl_flayer_mask(uint8_t *sent, const pfl_model *m, const float *trained, const float *start, float *scratch);

#endif
