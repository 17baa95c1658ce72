#include "nn/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

const char *const pfl_model_names = "cnn, dnn, mlp, mnist-cnn, cifar-cnn, tsdp-cnn, fasttext[:VOCAB[:DIM]]";

/* ---- building the tables ---- */

static int add_tensor(pfl_model *m, const char *name, int ndim, const int *shape) {
    if (m->num_tensors >= PFL_MAX_TENSORS) return pfl_err("model %s: too many tensors", m->name);
    pfl_tensor *t = &m->tensors[m->num_tensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    t->length = 1;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        t->length *= (size_t)shape[i];
    }
    t->offset = m->num_params;
    m->num_params += t->length;
    return 0;
}

/* A parametric layer "<name>" with tensors "<prefix>.weight" and "<prefix>.bias"
 * (no bias when bias_len is 0: an embedding). */
static int add_layer(pfl_model *m, const char *name, const char *prefix, int wdim, const int *wshape, int bias_len) {
    if (m->num_layers >= PFL_MAX_LAYERS) return pfl_err("model %s: too many layers", m->name);
    pfl_layer *l = &m->layers[m->num_layers];
    snprintf(l->name, sizeof l->name, "%s", name);
    l->offset = m->num_params;
    l->first_tensor = m->num_tensors;
    char tname[40];
    snprintf(tname, sizeof tname, "%s.weight", prefix);
    if (add_tensor(m, tname, wdim, wshape)) return -1;
    l->num_tensors = 1;
    if (bias_len > 0) {
        snprintf(tname, sizeof tname, "%s.bias", prefix);
        if (add_tensor(m, tname, 1, &bias_len)) return -1;
        l->num_tensors = 2;
    }
    l->length = m->num_params - l->offset;
    return m->num_layers++;
}

static pfl_op *push_op(pfl_model *m, pfl_op_kind kind) {
    if (m->num_ops >= PFL_MAX_OPS) return NULL;
    pfl_op *op = &m->ops[m->num_ops];
    memset(op, 0, sizeof *op);
    op->kind = kind;
    op->layer = -1;
    if (m->num_ops == 0) {
        op->in_c = m->in_c, op->in_h = m->in_h, op->in_w = m->in_w;
    } else {
        const pfl_op *prev = &m->ops[m->num_ops - 1];
        op->in_c = prev->out_c, op->in_h = prev->out_h, op->in_w = prev->out_w;
    }
    op->out_c = op->in_c, op->out_h = op->in_h, op->out_w = op->in_w;
    m->num_ops++;
    return op;
}

static int add_conv(pfl_model *m, const char *name, const char *prefix, int out_c, int k, int stride, int pad) {
    pfl_op *op = push_op(m, PFL_OP_CONV2D);
    if (!op) return pfl_err("model %s: too many operations", m->name);
    op->kernel = k, op->stride = stride, op->pad = pad;
    op->out_c = out_c;
    op->out_h = (op->in_h + 2 * pad - k) / stride + 1;
    op->out_w = (op->in_w + 2 * pad - k) / stride + 1;
    if (op->out_h <= 0 || op->out_w <= 0)
        return pfl_err("model %s: input %dx%d too small for %s", m->name, m->in_h, m->in_w, name);
    int shape[4] = {out_c, op->in_c, k, k};
    op->layer = add_layer(m, name, prefix, 4, shape, out_c);
    return op->layer < 0 ? -1 : 0;
}

static int add_linear(pfl_model *m, const char *name, const char *prefix, int out_features) {
    pfl_op *op = push_op(m, PFL_OP_LINEAR);
    if (!op) return pfl_err("model %s: too many operations", m->name);
    op->in_c = op->in_c * op->in_h * op->in_w, op->in_h = op->in_w = 1;
    op->out_c = out_features, op->out_h = op->out_w = 1;
    int shape[2] = {out_features, op->in_c};
    op->layer = add_layer(m, name, prefix, 2, shape, out_features);
    return op->layer < 0 ? -1 : 0;
}

static int add_simple(pfl_model *m, pfl_op_kind kind) {
    pfl_op *op = push_op(m, kind);
    if (!op) return pfl_err("model %s: too many operations", m->name);
    if (kind == PFL_OP_FLATTEN) op->out_c = op->in_c * op->in_h * op->in_w, op->out_h = op->out_w = 1;
    return 0;
}

static int add_maxpool(pfl_model *m, int k, int stride) {
    pfl_op *op = push_op(m, PFL_OP_MAXPOOL2D);
    if (!op) return pfl_err("model %s: too many operations", m->name);
    op->kernel = k, op->stride = stride;
    op->out_h = (op->in_h - k) / stride + 1;
    op->out_w = (op->in_w - k) / stride + 1;
    return 0;
}

/* PFLlib's FedAvgCNN: the 4-layer CNN of FedAvg, FedALA and FLAYER.
 * PyTorch applies ReLU then max-pooling; pfl pools first. Both are exact
 * (no rounding) and commute — max(relu(x)) = relu(max(x)) — and the
 * gradients agree too (a window whose maximum is <= 0 passes nothing either
 * way), so the results are the same while ReLU touches a quarter of the
 * values. The PyTorch fixtures test this order. */
static int build_cnn(pfl_model *m) {
    if (add_conv(m, "conv1", "conv1.0", 32, 5, 1, 0) || add_maxpool(m, 2, 2) || add_simple(m, PFL_OP_RELU) ||
        add_conv(m, "conv2", "conv2.0", 64, 5, 1, 0) || add_maxpool(m, 2, 2) || add_simple(m, PFL_OP_RELU) ||
        add_simple(m, PFL_OP_FLATTEN) || add_linear(m, "fc1", "fc1.0", 512) || add_simple(m, PFL_OP_RELU) ||
        add_linear(m, "fc", "fc", m->classes))
        return -1;
    return 0;
}

/* PFLlib's DNN (pFedCFR's 2-layer DNN): hidden width 100. PFLlib ends it with
 * log_softmax before CrossEntropyLoss; log_softmax is idempotent, so plain
 * logits give the same loss, gradients and predictions. */
static int build_dnn(pfl_model *m, int hidden) {
    if (add_simple(m, PFL_OP_FLATTEN) || add_linear(m, "fc1", "fc1", hidden) || add_simple(m, PFL_OP_RELU) ||
        add_linear(m, "fc", "fc", m->classes))
        return -1;
    return 0;
}

static int add_dropout(pfl_model *m, float p) {
    pfl_op *op = push_op(m, PFL_OP_DROPOUT);
    if (!op) return pfl_err("model %s: too many operations", m->name);
    op->drop_p = p;
    return 0;
}

/* FedALP's MNIST-CNN and CIFAR10-CNN: "3 convolutional layers and 2 fully
 * connected layers"; the paper gives no widths. pfl uses the TensorFlow
 * CIFAR-10 tutorial CNN, the common 3-conv + 2-dense net: three 3x3 valid
 * convolutions of 32, 64, 64 channels, 2x2 max pooling after the first two,
 * a hidden Linear of `hidden` units (64) and the classifier. mnist-cnn and
 * cifar-cnn are the same net; the names say which input it is meant for
 * (28x28x1: 576 features into fc1, 32x32x3: 1024). As in build_cnn, pfl
 * pools before the ReLU (exact, same values and gradients). */
static int build_conv3(pfl_model *m, int hidden) {
    if (add_conv(m, "conv1", "conv1.0", 32, 3, 1, 0) || add_maxpool(m, 2, 2) || add_simple(m, PFL_OP_RELU) ||
        add_conv(m, "conv2", "conv2.0", 64, 3, 1, 0) || add_maxpool(m, 2, 2) || add_simple(m, PFL_OP_RELU) ||
        add_conv(m, "conv3", "conv3.0", 64, 3, 1, 0) || add_simple(m, PFL_OP_RELU) ||
        add_simple(m, PFL_OP_FLATTEN) || add_linear(m, "fc1", "fc1.0", hidden) || add_simple(m, PFL_OP_RELU) ||
        add_linear(m, "fc", "fc", m->classes))
        return -1;
    return 0;
}

/* FedTSDP's CNN: two 3x3 convolutions of 32 and 64 channels, Linear 512 and
 * the classifier, dropout 0.25 and 0.5. Pooling as the Keras CIFAR-10 CNN
 * (2x2 max pooling closing each convolution stage, Keras's default 'valid'
 * padding), dropout 0.25 after the convolutions and 0.5 after fc1's ReLU,
 * where Keras puts them. 32x32x3: 30, 15, 13, 6, so 2304 features into fc1;
 * 28x28x1: 26, 13, 11, 5, so 1600. Pool before ReLU as in build_cnn. */
static int build_tsdp(pfl_model *m) {
    if (add_conv(m, "conv1", "conv1.0", 32, 3, 1, 0) || add_maxpool(m, 2, 2) || add_simple(m, PFL_OP_RELU) ||
        add_conv(m, "conv2", "conv2.0", 64, 3, 1, 0) || add_maxpool(m, 2, 2) || add_simple(m, PFL_OP_RELU) ||
        add_dropout(m, 0.25f) || add_simple(m, PFL_OP_FLATTEN) || add_linear(m, "fc1", "fc1.0", 512) ||
        add_simple(m, PFL_OP_RELU) || add_dropout(m, 0.5f) || add_linear(m, "fc", "fc", m->classes))
        return -1;
    return 0;
}

/* PFLlib's fastText (models.py): nn.Embedding(vocab, dim, padding_idx=0),
 * the mean over all tokens, fc1 = Linear(dim, dim), fc = Linear(dim,
 * classes), log_softmax (dropped: idempotent before CrossEntropyLoss, as for
 * the dnn). There is no nonlinearity between fc1 and fc in PFLlib, so none
 * here. The embedding must be the first op: token ids have no gradient. */
static int build_fasttext(pfl_model *m, int vocab, int dim) {
    if (m->in_c != 1 || m->in_h != 1)
        return pfl_err("model fasttext reads token ids (1x1xL, a text dataset such as agnews), not %dx%dx%d inputs",
                       m->in_c, m->in_h, m->in_w);
    pfl_op *op = push_op(m, PFL_OP_EMBED_MEAN);
    if (!op) return pfl_err("model %s: too many operations", m->name);
    op->vocab = vocab, op->padding_idx = 0; /* PFLlib: padding_idx=0 */
    op->out_c = dim, op->out_h = op->out_w = 1;
    int shape[2] = {vocab, dim};
    op->layer = add_layer(m, "embedding", "embedding", 2, shape, 0);
    if (op->layer < 0 || add_linear(m, "fc1", "fc1", dim) || add_linear(m, "fc", "fc", m->classes)) return -1;
    return 0;
}

/* "fasttext", "fasttext:V" or "fasttext:V:D": 1 with *vocab, *dim set; 0
 * when the name is not fasttext's; -1 (with a message) when its options are
 * malformed. */
static int parse_fasttext(const char *name, int *vocab, int *dim) {
    *vocab = PFL_FASTTEXT_VOCAB, *dim = PFL_FASTTEXT_DIM;
    if (strncmp(name, "fasttext", 8) != 0 || (name[8] != '\0' && name[8] != ':')) return 0;
    const char *p = name + 8;
    long v[2] = {*vocab, *dim};
    for (int k = 0; k < 2 && *p == ':'; k++) {
        char *end;
        v[k] = strtol(p + 1, &end, 10);
        if (end == p + 1) break;
        p = end;
    }
    if (*p != '\0' || v[0] < 3 || v[0] > (1L << 24) || v[1] < 1 || v[1] > 65536)
        return pfl_err("--model %s: expected fasttext, fasttext:VOCAB or fasttext:VOCAB:DIM with 3 <= VOCAB <= %ld "
                       "(ids 0 and 1 are <pad> and <unk>) and 1 <= DIM <= 65536",
                       name, 1L << 24);
    *vocab = (int)v[0], *dim = (int)v[1];
    return 1;
}

static bool fasttext_known(const char *name) {
    int vocab, dim;
    return parse_fasttext(name, &vocab, &dim) == 1;
}

int pfl_model_vocab(const pfl_model *m) {
    return m->num_ops > 0 && m->ops[0].kind == PFL_OP_EMBED_MEAN ? m->ops[0].vocab : 0;
}

bool pfl_model_known(const char *name) {
    return strcmp(name, "cnn") == 0 || strcmp(name, "dnn") == 0 || strcmp(name, "mlp") == 0 ||
           strcmp(name, "mnist-cnn") == 0 || strcmp(name, "cifar-cnn") == 0 || strcmp(name, "tsdp-cnn") == 0 ||
           fasttext_known(name);
}

int pfl_model_build(pfl_model *m, const char *name, int in_c, int in_h, int in_w, int classes) {
    memset(m, 0, sizeof *m);
    if (in_c <= 0 || in_h <= 0 || in_w <= 0 || classes <= 1 || classes > 256)
        return pfl_err("model %s: bad input shape %dx%dx%d or class count %d", name, in_c, in_h, in_w, classes);
    snprintf(m->name, sizeof m->name, "%s", name);
    m->in_c = in_c, m->in_h = in_h, m->in_w = in_w, m->classes = classes;
    if (strcmp(name, "cnn") == 0) return build_cnn(m);
    if (strcmp(name, "dnn") == 0) return build_dnn(m, 100);
    /* FedALP's MNIST-NN / the FedAvg paper's 2NN width: one hidden layer of 200. */
    if (strcmp(name, "mlp") == 0) return build_dnn(m, 200);
    if (strcmp(name, "mnist-cnn") == 0 || strcmp(name, "cifar-cnn") == 0) return build_conv3(m, 64);
    if (strcmp(name, "tsdp-cnn") == 0) return build_tsdp(m);
    int vocab, dim, fasttext = parse_fasttext(name, &vocab, &dim);
    if (fasttext < 0) return -1;
    if (fasttext) {
        snprintf(m->name, sizeof m->name, "fasttext"); /* the options live in the op */
        return build_fasttext(m, vocab, dim);
    }
    return pfl_err("--model: unknown model '%s' (choose from %s)", name, pfl_model_names);
}

/* nn.Embedding's reset_parameters: N(0, 1), then the padding row zeroed. */
static void init_embedding(const pfl_op *op, float *table, pfl_rng *rng) {
    const size_t n = (size_t)op->vocab * (size_t)op->out_c;
    for (size_t i = 0; i < n; i++) table[i] = (float)pfl_rng_normal(rng);
    if (op->padding_idx >= 0)
        memset(table + (size_t)op->padding_idx * (size_t)op->out_c, 0, sizeof(float) * (size_t)op->out_c);
}

void pfl_model_init_params(const pfl_model *m, float *params, pfl_rng *rng) {
    for (int l = 0; l < m->num_layers; l++) {
        const pfl_layer *layer = &m->layers[l];
        const pfl_op *embed = pfl_model_vocab(m) > 0 && m->ops[0].layer == l ? &m->ops[0] : NULL;
        if (embed) {
            init_embedding(embed, params + layer->offset, rng);
            continue;
        }
        const pfl_tensor *w = &m->tensors[layer->first_tensor];
        size_t fan_in = w->length / (size_t)w->shape[0];
        float bound = 1.0f / sqrtf((float)fan_in);
        float *p = params + layer->offset;
        for (size_t i = 0; i < layer->length; i++) p[i] = (float)((2.0 * pfl_rng_uniform(rng) - 1.0) * bound);
    }
}

/* ---- workspace ---- */

struct pfl_workspace {
    const pfl_model *model;
    int max_batch;
    int batch;              /* B of the last forward */
    bool dropped;           /* the last forward drew dropout masks (train with an rng) */
    float *input;           /* max_batch x input size */
    const float *x;         /* input of the last forward */
    float *act[PFL_MAX_OPS];   /* outputs of each op */
    float *dact[PFL_MAX_OPS];  /* gradients wrt those outputs */
    float *scratch[PFL_MAX_OPS]; /* conv: unfolded input; dropout: mask */
    int *argmax[PFL_MAX_OPS];  /* maxpool winners */
    float *probs, *dlogits;
    int *rows, num_rows;       /* embedding rows the last forward read (fasttext) */
    uint8_t *row_mark;         /* vocab bytes, all zero between calls */
};

static long op_out_size(const pfl_op *op) { return (long)op->out_c * op->out_h * op->out_w; }

static pfl_conv_shape conv_shape(const pfl_op *op, int B) {
    pfl_conv_shape s = {B, op->in_c, op->in_h, op->in_w, op->out_c, op->kernel, op->stride, op->pad, op->out_h, op->out_w};
    return s;
}

pfl_workspace *pfl_workspace_create(const pfl_model *m, int max_batch) {
    pfl_workspace *ws = pfl_calloc(1, sizeof *ws);
    if (!ws) return NULL;
    ws->model = m;
    ws->max_batch = max_batch;
    const size_t B = (size_t)max_batch;
    bool ok = (ws->input = pfl_malloc(sizeof(float) * B * (size_t)pfl_model_input_size(m))) != NULL;
    for (int i = 0; ok && i < m->num_ops; i++) {
        const pfl_op *op = &m->ops[i];
        if (op->kind == PFL_OP_FLATTEN) continue; /* aliases its input */
        size_t n = B * (size_t)op_out_size(op);
        ok = (ws->act[i] = pfl_malloc(sizeof(float) * n)) && (ws->dact[i] = pfl_malloc(sizeof(float) * n));
        if (ok && op->kind == PFL_OP_CONV2D) {
            pfl_conv_shape s = conv_shape(op, max_batch);
            ok = (ws->scratch[i] = pfl_malloc(sizeof(float) * (size_t)pfl_conv2d_col_floats(&s))) != NULL;
        } else if (ok && op->kind == PFL_OP_DROPOUT) {
            ok = (ws->scratch[i] = pfl_malloc(sizeof(float) * n)) != NULL;
        } else if (ok && op->kind == PFL_OP_MAXPOOL2D) {
            ok = (ws->argmax[i] = pfl_malloc(sizeof(int) * n)) != NULL;
        }
    }
    const int vocab = pfl_model_vocab(m);
    if (ok && vocab > 0) {
        const long most = (long)max_batch * m->ops[0].in_w < vocab ? (long)max_batch * m->ops[0].in_w : vocab;
        ok = (ws->rows = pfl_malloc(sizeof(int) * (size_t)most)) && (ws->row_mark = pfl_calloc((size_t)vocab, 1));
    }
    size_t classes = (size_t)m->classes;
    ok = ok && (ws->probs = pfl_malloc(sizeof(float) * B * classes)) &&
         (ws->dlogits = pfl_malloc(sizeof(float) * B * classes));
    if (!ok) {
        pfl_workspace_free(ws);
        return NULL;
    }
    for (int i = 0; i < m->num_ops; i++)
        if (m->ops[i].kind == PFL_OP_FLATTEN) {
            /* Flatten changes only the shape: share the buffers of its input. */
            ws->act[i] = i ? ws->act[i - 1] : NULL;
            ws->dact[i] = i ? ws->dact[i - 1] : NULL;
        }
    return ws;
}

void pfl_workspace_free(pfl_workspace *ws) {
    if (!ws) return;
    for (int i = 0; i < ws->model->num_ops; i++) {
        if (ws->model->ops[i].kind == PFL_OP_FLATTEN) continue;
        free(ws->act[i]);
        free(ws->dact[i]);
        free(ws->scratch[i]);
        free(ws->argmax[i]);
    }
    free(ws->input);
    free(ws->probs);
    free(ws->dlogits);
    free(ws->rows);
    free(ws->row_mark);
    free(ws);
}

int pfl_workspace_max_batch(const pfl_workspace *ws) { return ws->max_batch; }

int pfl_workspace_embedding_rows(const pfl_workspace *ws, const int **rows) {
    *rows = ws->rows;
    return ws->rows ? ws->num_rows : 0;
}

float *pfl_workspace_input(pfl_workspace *ws) { return ws->input; }

/* Output buffer of op i, with the network input standing before op 0. A
 * leading Flatten has no buffer of its own and reads the input directly. */
static const float *op_input(const pfl_workspace *ws, int i) {
    while (i > 0 && ws->act[i - 1] == NULL) i--;
    return i == 0 ? ws->x : ws->act[i - 1];
}

static float *op_output(pfl_workspace *ws, int i) { return ws->act[i] ? ws->act[i] : (float *)op_input(ws, i); }

const float *pfl_forward(pfl_workspace *ws, const float *params, const float *x, int B, bool train, pfl_rng *rng) {
    const pfl_model *m = ws->model;
    ws->x = x;
    ws->batch = B;
    ws->dropped = train && rng != NULL;
    for (int i = 0; i < m->num_ops; i++) {
        const pfl_op *op = &m->ops[i];
        const float *in = op_input(ws, i);
        float *out = op_output(ws, i);
        const long n = (long)B * op_out_size(op);
        const float *w = op->layer >= 0 ? params + m->tensors[m->layers[op->layer].first_tensor].offset : NULL;
        const float *b = op->layer >= 0 && m->layers[op->layer].num_tensors > 1
                             ? params + m->tensors[m->layers[op->layer].first_tensor + 1].offset
                             : NULL;
        switch (op->kind) {
        case PFL_OP_CONV2D: {
            pfl_conv_shape s = conv_shape(op, B);
            pfl_conv2d_forward(out, ws->scratch[i], in, w, b, &s);
            break;
        }
        case PFL_OP_LINEAR:
            /* the op's gradient buffer is free during the forward pass */
            if (B <= 64) pfl_linear_forward_small(out, ws->dact[i], in, w, b, B, op->in_c, op->out_c);
            else pfl_linear_forward(out, in, w, b, B, op->in_c, op->out_c);
            break;
        case PFL_OP_RELU: pfl_relu_forward(out, in, n); break;
        case PFL_OP_MAXPOOL2D:
            pfl_maxpool2d_forward(out, ws->argmax[i], in, B, op->in_c, op->in_h, op->in_w, op->kernel, op->stride);
            break;
        case PFL_OP_DROPOUT:
            if (ws->dropped && op->drop_p > 0.0f) pfl_dropout_forward(out, ws->scratch[i], in, n, op->drop_p, rng);
            else
                memcpy(out, in, sizeof(float) * (size_t)n);
            break;
        case PFL_OP_FLATTEN: break;
        case PFL_OP_EMBED_MEAN:
            pfl_embed_mean_forward(out, in, w, B, op->in_w, op->vocab, op->out_c, op->padding_idx);
            ws->num_rows = pfl_embed_rows(ws->rows, ws->row_mark, in, (long)B * op->in_w, op->vocab, op->padding_idx);
            break;
        }
    }
    return op_output(ws, m->num_ops - 1);
}

float pfl_forward_loss(pfl_workspace *ws, const float *params, const float *x, const uint8_t *labels, int B,
                       bool train, pfl_rng *rng) {
    const float *logits = pfl_forward(ws, params, x, B, train, rng);
    return pfl_softmax_xent_forward(ws->probs, logits, labels, B, ws->model->classes);
}

/* Gradient buffer for the input of op i (the output gradient of op i-1),
 * NULL when op i reads the network input. */
static float *op_dinput(pfl_workspace *ws, int i) {
    while (i > 0 && ws->dact[i - 1] == NULL) i--;
    return i == 0 ? NULL : ws->dact[i - 1];
}

void pfl_backward(pfl_workspace *ws, const float *params, const uint8_t *labels, float *grads) {
    pfl_backward_top(ws, params, labels, grads, 0);
}

/* The op that holds layer `layer` (the first parametric op when none does). */
static int op_of_layer(const pfl_model *m, int layer) {
    for (int i = 0; i < m->num_ops; i++)
        if (m->ops[i].layer == layer) return i;
    return 0;
}

void pfl_backward_top(pfl_workspace *ws, const float *params, const uint8_t *labels, float *grads, int first_layer) {
    const pfl_model *m = ws->model;
    const int lowest = first_layer <= 0 ? 0 : op_of_layer(m, first_layer);
    const int B = ws->batch;
    const int last = m->num_ops - 1;
    float *dlogits = ws->dact[last] ? ws->dact[last] : ws->dlogits;
    pfl_softmax_xent_backward(dlogits, ws->probs, labels, B, m->classes);
    for (int i = last; i >= lowest; i--) {
        const pfl_op *op = &m->ops[i];
        if (op->kind == PFL_OP_FLATTEN) continue;
        const float *dout = ws->dact[i] ? ws->dact[i] : dlogits;
        /* NULL at the bottom: nobody needs the gradient wrt the data, nor
         * below the lowest layer that learns. */
        float *din = i == lowest ? NULL : op_dinput(ws, i);
        const float *in = op_input(ws, i);
        const long n = (long)B * op_out_size(op);
        size_t w_off = 0, b_off = 0;
        if (op->layer >= 0) {
            w_off = m->tensors[m->layers[op->layer].first_tensor].offset;
            if (m->layers[op->layer].num_tensors > 1) b_off = m->tensors[m->layers[op->layer].first_tensor + 1].offset;
        }
        switch (op->kind) {
        case PFL_OP_CONV2D: {
            pfl_conv_shape s = conv_shape(op, B);
            pfl_conv2d_backward(din, grads + w_off, grads + b_off, ws->scratch[i], dout, in, params + w_off, &s);
            break;
        }
        case PFL_OP_LINEAR:
            pfl_linear_backward(din, grads + w_off, grads + b_off, dout, in, params + w_off, B, op->in_c, op->out_c);
            break;
        case PFL_OP_RELU:
            if (din) pfl_relu_backward(din, dout, ws->act[i], n);
            break;
        case PFL_OP_MAXPOOL2D:
            if (din)
                pfl_maxpool2d_backward(din, dout, ws->argmax[i], B, op->in_c, op->in_h, op->in_w, op->kernel,
                                       op->stride);
            break;
        case PFL_OP_DROPOUT:
            /* after a forward without masks dropout was the identity */
            if (din && ws->dropped && op->drop_p > 0.0f) pfl_dropout_backward(din, dout, ws->scratch[i], n);
            else if (din) memcpy(din, dout, sizeof(float) * (size_t)n);
            break;
        case PFL_OP_FLATTEN: break;
        case PFL_OP_EMBED_MEAN:
            pfl_embed_mean_backward(grads + w_off, dout, in, B, op->in_w, op->vocab, op->out_c, op->padding_idx);
            break;
        }
    }
}

int pfl_count_correct(const pfl_workspace *ws, const uint8_t *labels, int B) {
    const pfl_model *m = ws->model;
    const float *logits = ws->act[m->num_ops - 1];
    int correct = 0;
    for (int n = 0; n < B; n++) {
        const float *z = logits + (long)n * m->classes;
        int best = 0;
        for (int c = 1; c < m->classes; c++)
            if (z[c] > z[best]) best = c;
        correct += best == labels[n];
    }
    return correct;
}
