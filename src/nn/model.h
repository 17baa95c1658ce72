/* A model is a vector cut into layers (DESIGN.md §1).
 *
 * pfl_model describes an architecture only: its operations with fixed
 * per-sample shapes, the tensor table (name, shape, offset, length of each
 * parameter tensor inside one flat float vector) and the layer table (each
 * parametric layer is a contiguous span of tensors, input to output). The
 * parameters themselves live in whatever vector the caller owns (a global
 * model, a client's personal model, a worker's copy), so one architecture
 * serves any number of parameter vectors.
 *
 * A pfl_workspace holds activations, their gradients and scratch for batches
 * of up to max_batch samples; it belongs to one worker thread. */
#ifndef PFL_NN_MODEL_H
#define PFL_NN_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nn/layers.h"
#include "util/rng.h"

#define PFL_MAX_OPS 32
#define PFL_MAX_TENSORS 32
#define PFL_MAX_LAYERS 16

typedef enum {
    PFL_OP_CONV2D,
    PFL_OP_LINEAR,
    PFL_OP_RELU,
    PFL_OP_MAXPOOL2D,
    PFL_OP_DROPOUT,
    PFL_OP_FLATTEN,
    PFL_OP_EMBED_MEAN /* fastText: embedding of token ids averaged over the sequence (always the first op) */
} pfl_op_kind;

typedef struct {
    pfl_op_kind kind;
    int in_c, in_h, in_w;    /* per-sample input shape (features: in_c, 1, 1) */
    int out_c, out_h, out_w; /* per-sample output shape */
    int kernel, stride, pad; /* conv and pool */
    float drop_p;            /* dropout */
    int vocab, padding_idx;  /* embed-mean: rows of the table, the padding row (-1: none) */
    int layer;               /* index in the layer table, -1 for no parameters */
} pfl_op;

typedef struct {
    char name[40];   /* PyTorch's state_dict key, e.g. "conv1.0.weight" */
    int ndim;
    int shape[4];
    size_t offset, length;
} pfl_tensor;

typedef struct {
    char name[32];   /* e.g. "conv1" */
    size_t offset, length;
    int first_tensor, num_tensors;
} pfl_layer;

typedef struct {
    char name[16];
    int in_c, in_h, in_w, classes;
    int num_ops;
    pfl_op ops[PFL_MAX_OPS];
    int num_tensors;
    pfl_tensor tensors[PFL_MAX_TENSORS];
    int num_layers;
    pfl_layer layers[PFL_MAX_LAYERS];
    size_t num_params;
} pfl_model;

/* Names accepted by pfl_model_build, for --help and error messages. */
extern const char *const pfl_model_names;

/* True when `name` is a model pfl_model_build knows (checked before any
 * data is loaded, so a typo fails fast). */
bool pfl_model_known(const char *name);

/* Builds the architecture `name` ("cnn", "dnn", "mlp", "mnist-cnn",
 * "cifar-cnn", "tsdp-cnn", "fasttext[:V[:D]]"; docs/architecture.md lists them) for inputs of
 * in_c x in_h x in_w and `classes` outputs. Returns 0, or -1 with a message. */
int pfl_model_build(pfl_model *m, const char *name, int in_c, int in_h, int in_w, int classes);

/* fastText: "fasttext" is "fasttext:32000:512", PFLlib's AG News setting
 * (vocab_size 32000, feature_dim 512); "fasttext:V:D" sets the vocabulary
 * (rows of the embedding, <pad> and <unk> included) and the embedding
 * width. Built for 1 x 1 x L inputs (L token ids per sample). */
#define PFL_FASTTEXT_VOCAB 32000
#define PFL_FASTTEXT_DIM 512

/* Rows of the model's embedding table (the vocabulary it reads), 0 for a
 * model that reads images. */
int pfl_model_vocab(const pfl_model *m);

/* Floats per sample at the input. */
static inline long pfl_model_input_size(const pfl_model *m) { return (long)m->in_c * m->in_h * m->in_w; }

/* PyTorch's default initialization: weights and biases uniform in
 * +-1/sqrt(fan_in) (kaiming_uniform with a = sqrt(5) gives the same bound);
 * an embedding table standard normal with its padding row zero (nn.Embedding). */
void pfl_model_init_params(const pfl_model *m, float *params, pfl_rng *rng);

typedef struct pfl_workspace pfl_workspace;

pfl_workspace *pfl_workspace_create(const pfl_model *m, int max_batch);
void pfl_workspace_free(pfl_workspace *ws);
int pfl_workspace_max_batch(const pfl_workspace *ws);
/* The input buffer of the workspace (max_batch x input size), where batches are gathered. */
float *pfl_workspace_input(pfl_workspace *ws);

/* Runs the network on B <= max_batch samples in x and returns the logits
 * (B x classes, inside the workspace). `train` enables dropout, drawing masks
 * from `rng`; with train false or rng NULL dropout is the identity (as
 * PyTorch's eval mode), and so is its backward after such a forward. */
const float *pfl_forward(pfl_workspace *ws, const float *params, const float *x, int B, bool train, pfl_rng *rng);

/* Forward plus the mean softmax cross-entropy over the batch. */
float pfl_forward_loss(pfl_workspace *ws, const float *params, const float *x, const uint8_t *labels, int B,
                       bool train, pfl_rng *rng);

/* After pfl_forward_loss on the same batch: accumulates the gradient of the
 * mean loss into grads (num_params floats). */
void pfl_backward(pfl_workspace *ws, const float *params, const uint8_t *labels, float *grads);

/* Like pfl_backward, but only layers >= first_layer get gradients and the
 * ops below them are not visited (FedALA's weight learning, frozen bases). */
void pfl_backward_top(pfl_workspace *ws, const float *params, const uint8_t *labels, float *grads, int first_layer);

/* fasttext: the distinct embedding rows the last forward's tokens read
 * (*rows points into the workspace); the gradient of every other row is
 * exactly zero, so plain SGD need only visit these. 0 without an embedding. */
int pfl_workspace_embedding_rows(const pfl_workspace *ws, const int **rows);

/* Counts how many of the B samples the last forward classified correctly
 * (argmax of the logits, first maximum on ties, as torch.argmax). */
int pfl_count_correct(const pfl_workspace *ws, const uint8_t *labels, int B);

#endif
