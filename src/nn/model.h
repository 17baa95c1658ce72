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

/* ResNet-18: 62 parameter tensors in 41 layers (every conv, BatchNorm and
 * Linear its own layer), 40 running-statistics tensors, 68 operations. */
#define PFL_MAX_OPS 128
#define PFL_MAX_TENSORS 96
#define PFL_MAX_LAYERS 64
#define PFL_MAX_STATE_TENSORS 64

typedef enum {
    PFL_OP_CONV2D,
    PFL_OP_LINEAR,
    PFL_OP_RELU,
    PFL_OP_MAXPOOL2D,
    PFL_OP_DROPOUT,
    PFL_OP_FLATTEN,
    PFL_OP_EMBED_MEAN, /* fastText: embedding of token ids averaged over the sequence (always the first op) */
    PFL_OP_BATCHNORM2D,
    PFL_OP_ADD,
    PFL_OP_AVGPOOL
} pfl_op_kind;

/* Ops run in index order; each reads the output of op `src` (the previous
 * op, except where a residual block branches), so the op list is a DAG in
 * topological order. */
typedef struct {
    pfl_op_kind kind;
    int in_c, in_h, in_w;    /* per-sample input shape (features: in_c, 1, 1) */
    int out_c, out_h, out_w; /* per-sample output shape */
    int kernel, stride, pad; /* conv and pool */
    float drop_p;            /* dropout */
    int vocab, padding_idx;  /* embed-mean: rows of the table, the padding row (-1: none) */
    int layer;               /* index in the layer table, -1 for no parameters */
    int src;                 /* the op whose output is the input; -1: the network input */
    int src2;                /* add: the op whose output is added to src's (the shortcut) */
} pfl_op;

/* How pfl_model_init_params fills a layer. */
typedef enum {
    PFL_INIT_UNIFORM = 0,  /* PyTorch's default for Conv2d and Linear: uniform in +-1/sqrt(fan_in) */
    PFL_INIT_KAIMING_OUT,  /* torchvision's ResNet convs: normal, std sqrt(2 / fan_out), fan_out = out x k x k */
    PFL_INIT_BATCHNORM,    /* weight 1, bias 0 (running mean 0, running variance 1) */
    PFL_INIT_EMBEDDING,    /* nn.Embedding: standard normal, the padding row zero */
    PFL_INIT_ZERO,         /* zeros (an extra block its method fills, e.g. from another layer) */
    PFL_INIT_NORMAL,       /* standard normal over the whole span: an extra block that is an nn.Embedding without
                            * padding (GPFL's category embeddings) */
} pfl_init_kind;

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
    /* Non-trained state (BatchNorm's running mean and variance): a span of
     * the state part of the model vector, `state_length` 0 for other layers. */
    size_t state_offset, state_length;
    int first_state, num_state_tensors;
    pfl_init_kind init;
    /* Extra blocks only (pfl_model_add_block): each client keeps its own,
     * the server never averages it; false: shared like any layer. */
    bool personal;
} pfl_layer;

/* The model vector an algorithm moves around is
 *
 *     [ trained parameters (num_params) | non-trained state (num_state) ]
 *
 * Gradients, optimizer buffers and everything that learns cover the first
 * num_params floats; the state (BatchNorm running statistics) follows, with
 * its own tensor table (state_tensors, offsets into the whole vector) and a
 * span per layer, so an algorithm decides explicitly whether a layer's
 * state is shared. Models without BatchNorm have num_state 0. */
typedef struct {
    char name[16];
    int in_c, in_h, in_w, classes;
    int num_ops;
    pfl_op ops[PFL_MAX_OPS];
    int num_tensors;
    pfl_tensor tensors[PFL_MAX_TENSORS];
    int num_layers;       /* the backbone's layers: what the forward runs and the layer flags count */
    int num_blocks;       /* extra blocks, rows num_layers .. num_layers + num_blocks - 1 of `layers` */
    pfl_layer layers[PFL_MAX_LAYERS];
    size_t num_params;
    int num_state_tensors;
    pfl_tensor state_tensors[PFL_MAX_STATE_TENSORS];
    size_t num_state;
} pfl_model;

/* Floats in a whole model vector: parameters, then state. */
static inline size_t pfl_model_vector_len(const pfl_model *m) { return m->num_params + m->num_state; }

/* ---- extra parameter blocks (docs/architecture.md, "Extra parameter blocks") ----
 * A method may give the model parameters the backbone's forward never reads
 * (FedCP's policy network and personal head): each block is a row of the
 * layer table after the backbone's layers, its tensors after the backbone's
 * parameters and before the state, so it trains, travels, is averaged or
 * kept like a layer, while num_layers (and every flag that counts layers)
 * stays the backbone's. */

/* Rows of the layer table: the backbone's layers, then the blocks. */
static inline int pfl_model_rows(const pfl_model *m) { return m->num_layers + m->num_blocks; }
/* Where the blocks begin: the backbone's parameters are [0, this). */
static inline size_t pfl_model_backbone_params(const pfl_model *m) {
    return m->num_blocks > 0 ? m->layers[m->num_layers].offset : m->num_params;
}

typedef struct {
    const char *name; /* the tensor's name, e.g. "cs.fc.weight" */
    int ndim;
    int shape[4];
} pfl_block_tensor;

/* After pfl_model_finish: appends block `name` of the n tensors `t`,
 * initialized as `init` says (a first tensor of shape out x in for
 * PFL_INIT_UNIFORM), `personal` as pfl_layer.personal. The state moves up
 * by the block's length. 0, or -1 with a message (too many rows or tensors). */
int pfl_model_add_block(pfl_model *m, const char *name, bool personal, pfl_init_kind init, int n,
                        const pfl_block_tensor *t);

/* ---- the model zoo (zoo.c): the named models ---- */

/* The zoo's names (built into pfl), for --help and error messages. */
extern const char *const pfl_model_names;
/* Every name pfl_model_build accepts: the zoo's, then the registered ones. */
const char *pfl_model_choices(void);

/* True when `name` is a model pfl_model_build knows (checked before any
 * data is loaded, so a typo fails fast). */
bool pfl_model_known(const char *name);

/* Builds the architecture `name` ("cnn", "dnn", "mlp", "mnist-cnn",
 * "cifar-cnn", "tsdp-cnn", "resnet18", "resnet18-cifar", "alexnet",
 * "fasttext[:V[:D]]"; docs/architecture.md lists them; or a model registered
 * with pfl_model_register) for inputs of in_c x in_h x in_w and `classes`
 * outputs. Returns 0, or -1 with a message. */
int pfl_model_build(pfl_model *m, const char *name, int in_c, int in_h, int in_w, int classes);

/* A named model: `build` appends the network's operations, with the
 * builder below, to a model pfl_model_build has begun for the data's input
 * shape and classes (m->in_c, m->in_h, m->in_w, m->classes); pfl_model_build
 * finishes it. `batchnorm`: it has BatchNorm layers (--bn auto reads it
 * before the model is built). */
typedef struct {
    const char *name;
    int (*build)(pfl_model *m);
    bool batchnorm;
} pfl_model_def;

/* Adds a model written outside pfl (a program linking libpfl registers it
 * before it runs anything): afterwards --model NAME, pfl_model_known and
 * pfl_model_build know it like one of the zoo. `def` must outlive every
 * run. Returns 0, or -1 with a message (a name that is not 1 to 15 letters,
 * digits and '-', a name taken, no build function, or more than
 * PFL_MAX_REGISTERED_MODELS models). Not thread-safe: register first. */
#define PFL_MAX_REGISTERED_MODELS 32
int pfl_model_register(const pfl_model_def *def);

/* fastText: "fasttext" is "fasttext:32000:512", PFLlib's AG News setting
 * (vocab_size 32000, feature_dim 512); "fasttext:V:D" sets the vocabulary
 * (rows of the embedding, <pad> and <unk> included) and the embedding
 * width. Built for 1 x 1 x L inputs (L token ids per sample). */
#define PFL_FASTTEXT_VOCAB 32000
#define PFL_FASTTEXT_DIM 512

/* True when the named model has BatchNorm layers (resnet18, resnet18-cifar). */
bool pfl_model_has_batchnorm(const char *name);

/* Rows of the model's embedding table (the vocabulary it reads), 0 for a
 * model that reads images. */
int pfl_model_vocab(const pfl_model *m);

/* ---- assembling a network op by op ----
 * The named models are built with these; tests use them for small networks.
 * Each appends to the model (reading the previous op's output) and returns
 * 0 or -1 with a message; `layer` names the layer and is the prefix of its
 * tensors ("layer1.0.conv1" -> "layer1.0.conv1.weight"). Call
 * pfl_model_finish last: it places the state after the parameters. */
int pfl_model_begin(pfl_model *m, const char *name, int in_c, int in_h, int in_w, int classes);
int pfl_model_conv(pfl_model *m, const char *layer, int out_c, int k, int stride, int pad, bool bias);
int pfl_model_batchnorm(pfl_model *m, const char *layer);
int pfl_model_relu(pfl_model *m);
int pfl_model_maxpool(pfl_model *m, int k, int stride, int pad);
int pfl_model_linear(pfl_model *m, const char *layer, int out_features);
/* The same, with the tensors named "<tensors>.weight" rather than after the
 * layer ("conv1" with tensors "conv1.0.*", as an nn.Sequential names them). */
int pfl_model_conv_named(pfl_model *m, const char *layer, const char *tensors, int out_c, int k, int stride, int pad,
                         bool bias);
int pfl_model_linear_named(pfl_model *m, const char *layer, const char *tensors, int out_features);
int pfl_model_flatten(pfl_model *m);
/* Dropout with probability p (active in training forwards with an rng). */
int pfl_model_dropout(pfl_model *m, float p);
/* fastText's nn.Embedding(vocab, dim, padding_idx) averaged over the
 * sequence; the first operation (token ids have no gradient). */
int pfl_model_embedding_mean(pfl_model *m, const char *layer, int vocab, int dim, int padding_idx);
/* AdaptiveAvgPool2d(1): C x H x W -> C x 1 x 1. */
int pfl_model_avgpool(pfl_model *m);
/* torchvision's BasicBlock "<prefix>": conv3x3(stride)-BN-ReLU-conv3x3-BN,
 * plus the shortcut (the block's input, or conv1x1(stride)-BN named
 * "<prefix>.downsample.0/1" when the stride or the width changes), then ReLU.
 * Convolutions have no bias; layers in PyTorch's parameter order. */
int pfl_model_basic_block(pfl_model *m, const char *prefix, int out_c, int stride);
int pfl_model_finish(pfl_model *m);

/* Floats per sample at the input. */
static inline long pfl_model_input_size(const pfl_model *m) { return (long)m->in_c * m->in_h * m->in_w; }

/* Fills a whole model vector (pfl_model_vector_len floats) as PyTorch
 * initializes the model: by default weights and biases uniform in
 * +-1/sqrt(fan_in) (kaiming_uniform with a = sqrt(5) gives the same bound);
 * each layer's pfl_init_kind says otherwise (ResNet's convs, BatchNorm, an
 * embedding table standard normal with its padding row zero as
 * nn.Embedding), and running means start at 0, running variances at 1. */
void pfl_model_init_params(const pfl_model *m, float *params, pfl_rng *rng);

typedef struct pfl_workspace pfl_workspace;

pfl_workspace *pfl_workspace_create(const pfl_model *m, int max_batch);
void pfl_workspace_free(pfl_workspace *ws);
int pfl_workspace_max_batch(const pfl_workspace *ws);
/* The input buffer of the workspace (max_batch x input size), where batches are gathered. */
float *pfl_workspace_input(pfl_workspace *ws);

/* Runs the network on B <= max_batch samples in x and returns the logits
 * (B x classes, inside the workspace). `params` is a whole model vector
 * (parameters, then state). `train` enables dropout, drawing masks
 * from `rng`; with train false or rng NULL dropout is the identity (as
 * PyTorch's eval mode), and so is its backward after such a forward.
 * BatchNorm follows `train` alone: batch statistics when training (PyTorch's
 * train mode), the running statistics of `params` otherwise. The forward
 * never writes `params`: a training forward records its batch statistics in
 * the workspace, and pfl_update_running_stats moves a vector's running
 * statistics with them. */
const float *pfl_forward(pfl_workspace *ws, const float *params, const float *x, int B, bool train, pfl_rng *rng);

/* After a training forward: PyTorch's update of every BatchNorm's running
 * mean and variance in `vector` (momentum 0.1, unbiased batch variance),
 * which is what nn.BatchNorm2d does during its training forward. Training
 * loops call it on the vector they train after each forward, so the running
 * statistics move once per batch as in PyTorch. Nothing happens after an
 * evaluation forward or for a model without BatchNorm. */
void pfl_update_running_stats(const pfl_workspace *ws, float *vector);

/* Forward plus the mean softmax cross-entropy over the batch. */
float pfl_forward_loss(pfl_workspace *ws, const float *params, const float *x, const uint8_t *labels, int B,
                       bool train, pfl_rng *rng);

/* pfl_forward_loss with the loss taken on logits + offset[c] per class
 * (FedRoD's balanced softmax: offset = log of the client's class counts; a
 * class at -INFINITY gets probability 0). The backward that follows is that
 * loss's: it reads the probabilities this forward left. */
float pfl_forward_loss_offset(pfl_workspace *ws, const float *params, const float *x, const uint8_t *labels, int B,
                              bool train, pfl_rng *rng, const float *offset);

/* After a forward: the mean softmax cross-entropy of its logits (+ offset
 * per class, or NULL), as pfl_forward_loss_offset takes it; the backward
 * then differentiates it. */
float pfl_workspace_xent(pfl_workspace *ws, const uint8_t *labels, const float *offset);

/* After a forward: its logits (B x classes), and the input the op of
 * parametric layer `layer` read (B x that op's input size; NULL when no op
 * holds the layer). Methods that put a second head on the features read
 * them here (FedRoD). */
const float *pfl_workspace_logits(const pfl_workspace *ws);
const float *pfl_workspace_layer_input(const pfl_workspace *ws, int layer);

/* After pfl_forward_loss on the same batch: accumulates the gradient of the
 * mean loss into grads (num_params floats). */
void pfl_backward(pfl_workspace *ws, const float *params, const uint8_t *labels, float *grads);

/* The backward pass below a layer, from a gradient its input: after a
 * forward, `dinput` (B x that op's input size) is the gradient of the loss
 * wrt the input of the op holding `layer` (what pfl_workspace_layer_input
 * returned); accumulates into grads the gradients of every layer below it.
 * For a method that computes its own output from the backbone's features
 * (FedCP). */
void pfl_backward_below(pfl_workspace *ws, const float *params, int layer, const float *dinput, float *grads);

/* Like pfl_backward, but only layers >= first_layer get gradients and the
 * ops below them are not visited (FedALA's weight learning, frozen bases). */
void pfl_backward_top(pfl_workspace *ws, const float *params, const uint8_t *labels, float *grads, int first_layer);

/* A loss on a layer's input features (FedPHP's MMD on the features below
 * the head): the features per sample that enter layer `layer` (the input of
 * its op), and, after a forward, where they lie in the workspace (B x that
 * many floats; the batch itself for a first layer that reads the input). */
long pfl_model_layer_input_size(const pfl_model *m, int layer);

/* pfl_backward_top for the loss ce_weight x (mean cross-entropy) + g(z), z
 * the features that entered layer `layer` in the forward and dfeatures =
 * dg/dz (B x pfl_model_layer_input_size floats): the gradient of g joins
 * the cross-entropy's where the backward reaches z. A term on the network
 * input (`layer` 0) or below `first_layer` changes no gradient that is
 * computed, and is left out. */
void pfl_backward_features(pfl_workspace *ws, const float *params, const uint8_t *labels, float *grads, int first_layer,
                           float ce_weight, int layer, const float *dfeatures);

/* The general backward: after a forward on `params`, accumulates into grads
 * the gradient of ce_weight x (mean cross-entropy, as the forward's loss
 * took it) plus n terms on features, term k's gradient d[k] on the features
 * entering layer layers[k] (B x pfl_model_layer_input_size floats), for the
 * layers from first_layer up. With ce_weight 0 the pass starts at the
 * highest term (`labels` unread); a term on the network input (layer 0) is
 * left out. At most PFL_MAX_INJECTIONS terms. pfl_backward_top,
 * pfl_backward_features and pfl_backward_below are its special cases. */
#define PFL_MAX_INJECTIONS 8
void pfl_backward_terms(pfl_workspace *ws, const float *params, const uint8_t *labels, float *grads, int first_layer,
                        float ce_weight, const int *layers, const float *const *d, int n);

/* Plain SGD fused into the backward pass: after pfl_forward_loss on the same
 * batch, updates params in place by p -= lr * g, g the gradient of the mean
 * loss, without a gradient buffer: each layer's input gradient is taken
 * from its weights before the step, then its weight-gradient product is
 * added straight into the weights (alpha = -lr). The same model as
 * pfl_backward into zeroed gradients followed by pfl_sgd_step (no momentum,
 * no weight decay), up to float rounding. Only for models whose parametric
 * layers are all Conv2d or Linear with bias (pfl_model_sgd_fusable); -1
 * with a message otherwise. */
int pfl_backward_sgd(pfl_workspace *ws, float *params, const uint8_t *labels, float lr);
bool pfl_model_sgd_fusable(const pfl_model *m);

/* fasttext: the distinct embedding rows the last forward's tokens read
 * (*rows points into the workspace); the gradient of every other row is
 * exactly zero, so plain SGD need only visit these. 0 without an embedding. */
int pfl_workspace_embedding_rows(const pfl_workspace *ws, const int **rows);

/* The index of the largest of z[0..n-1], the first on a tie (torch.argmax):
 * a predicted class. */
int pfl_argmax(const float *z, int n);
/* Counts how many of the B samples the last forward classified correctly
 * (pfl_argmax of the logits). */
int pfl_count_correct(const pfl_workspace *ws, const uint8_t *labels, int B);

#endif
