#include "nn/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

/* bench/step_bench.c times every op by defining these before it includes
 * this file; in the library they are nothing. */
#ifndef PFL_OP_CLOCK_BEGIN
#define PFL_OP_CLOCK_BEGIN()
#define PFL_OP_CLOCK_END(op, backward)
#endif

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

/* Opens layer `name`; its tensors follow, then end_layer. */
static int begin_layer(pfl_model *m, const char *name) {
    if (m->num_layers >= PFL_MAX_LAYERS) return pfl_err("model %s: too many layers", m->name);
    pfl_layer *l = &m->layers[m->num_layers];
    memset(l, 0, sizeof *l);
    snprintf(l->name, sizeof l->name, "%s", name);
    l->offset = m->num_params;
    l->first_tensor = m->num_tensors;
    l->first_state = m->num_state_tensors;
    l->state_offset = m->num_state;
    return 0;
}

static int end_layer(pfl_model *m) {
    pfl_layer *l = &m->layers[m->num_layers];
    l->num_tensors = m->num_tensors - l->first_tensor;
    l->length = m->num_params - l->offset;
    l->num_state_tensors = m->num_state_tensors - l->first_state;
    l->state_length = m->num_state - l->state_offset;
    return m->num_layers++;
}

/* A parametric layer "<name>" with tensors "<prefix>.weight" and "<prefix>.bias". */
static int add_layer(pfl_model *m, const char *name, const char *prefix, int wdim, const int *wshape, int bias_len) {
    if (begin_layer(m, name)) return -1;
    char tname[40];
    snprintf(tname, sizeof tname, "%s.weight", prefix);
    if (add_tensor(m, tname, wdim, wshape)) return -1;
    if (bias_len > 0) { /* 0: a convolution without bias, an embedding */
        snprintf(tname, sizeof tname, "%s.bias", prefix);
        if (add_tensor(m, tname, 1, &bias_len)) return -1;
    }
    return end_layer(m);
}

/* A running-statistics tensor "<prefix>.<what>" of n floats. Its offset is
 * relative to the state part until pfl_model_finish places that part after
 * the parameters. */
static int add_state_tensor(pfl_model *m, const char *prefix, const char *what, int n) {
    if (m->num_state_tensors >= PFL_MAX_STATE_TENSORS) return pfl_err("model %s: too many state tensors", m->name);
    pfl_tensor *t = &m->state_tensors[m->num_state_tensors++];
    snprintf(t->name, sizeof t->name, "%s.%s", prefix, what);
    t->ndim = 1;
    t->shape[0] = n;
    t->length = (size_t)n;
    t->offset = m->num_state;
    m->num_state += t->length;
    return 0;
}

/* Appends an op reading the output of op `src` (-1: the network input). */
static pfl_op *push_op_from(pfl_model *m, pfl_op_kind kind, int src) {
    if (m->num_ops >= PFL_MAX_OPS) return NULL;
    pfl_op *op = &m->ops[m->num_ops];
    memset(op, 0, sizeof *op);
    op->kind = kind;
    op->layer = -1;
    op->src = src;
    op->src2 = -1;
    if (src < 0) {
        op->in_c = m->in_c, op->in_h = m->in_h, op->in_w = m->in_w;
    } else {
        const pfl_op *prev = &m->ops[src];
        op->in_c = prev->out_c, op->in_h = prev->out_h, op->in_w = prev->out_w;
    }
    op->out_c = op->in_c, op->out_h = op->in_h, op->out_w = op->in_w;
    m->num_ops++;
    return op;
}

static pfl_op *push_op(pfl_model *m, pfl_op_kind kind) { return push_op_from(m, kind, m->num_ops - 1); }

/* A Conv2d reading op `src`, with or without bias. */
static int add_conv_from(pfl_model *m, int src, const char *name, const char *prefix, int out_c, int k, int stride,
                         int pad, bool bias) {
    pfl_op *op = push_op_from(m, PFL_OP_CONV2D, src);
    if (!op) return pfl_err("model %s: too many operations", m->name);
    if (out_c <= 0 || k <= 0 || stride <= 0 || pad < 0)
        return pfl_err("model %s: %s: bad convolution (out %d, kernel %d, stride %d, padding %d)", m->name, name, out_c,
                       k, stride, pad);
    op->kernel = k, op->stride = stride, op->pad = pad;
    op->out_c = out_c;
    op->out_h = (op->in_h + 2 * pad - k) / stride + 1;
    op->out_w = (op->in_w + 2 * pad - k) / stride + 1;
    if (op->out_h <= 0 || op->out_w <= 0)
        return pfl_err("model %s: input %dx%d too small for %s", m->name, m->in_h, m->in_w, name);
    int shape[4] = {out_c, op->in_c, k, k};
    op->layer = add_layer(m, name, prefix, 4, shape, bias ? out_c : 0);
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

static int add_maxpool_pad(pfl_model *m, int k, int stride, int pad) {
    pfl_op *op = push_op(m, PFL_OP_MAXPOOL2D);
    if (!op) return pfl_err("model %s: too many operations", m->name);
    if (k <= 0 || stride <= 0 || pad < 0 || 2 * pad > k)
        return pfl_err("model %s: bad max pooling (kernel %d, stride %d, padding %d; padding at most half the kernel)",
                       m->name, k, stride, pad);
    op->kernel = k, op->stride = stride, op->pad = pad;
    op->out_h = (op->in_h + 2 * pad - k) / stride + 1;
    op->out_w = (op->in_w + 2 * pad - k) / stride + 1;
    if (op->out_h <= 0 || op->out_w <= 0)
        return pfl_err("model %s: input %dx%d too small for a %dx%d max pooling", m->name, m->in_h, m->in_w, k, k);
    return 0;
}

/* BatchNorm2d reading op `src`: weight and bias (trained), running mean and
 * variance (state). */
static int add_batchnorm_from(pfl_model *m, int src, const char *prefix) {
    pfl_op *op = push_op_from(m, PFL_OP_BATCHNORM2D, src);
    if (!op) return pfl_err("model %s: too many operations", m->name);
    const int C = op->in_c;
    if (begin_layer(m, prefix)) return -1;
    char tname[40];
    snprintf(tname, sizeof tname, "%s.weight", prefix);
    if (add_tensor(m, tname, 1, &C)) return -1;
    snprintf(tname, sizeof tname, "%s.bias", prefix);
    if (add_tensor(m, tname, 1, &C)) return -1;
    if (add_state_tensor(m, prefix, "running_mean", C) || add_state_tensor(m, prefix, "running_var", C)) return -1;
    m->layers[m->num_layers].init = PFL_INIT_BATCHNORM;
    op->layer = end_layer(m);
    return 0;
}

int pfl_model_vocab(const pfl_model *m) {
    return m->num_ops > 0 && m->ops[0].kind == PFL_OP_EMBED_MEAN ? m->ops[0].vocab : 0;
}

/* ---- assembling a network op by op (model.h) ---- */

int pfl_model_begin(pfl_model *m, const char *name, int in_c, int in_h, int in_w, int classes) {
    memset(m, 0, sizeof *m);
    if (in_c <= 0 || in_h <= 0 || in_w <= 0 || classes <= 1 || classes > 256)
        return pfl_err("model %s: bad input shape %dx%dx%d or class count %d", name, in_c, in_h, in_w, classes);
    snprintf(m->name, sizeof m->name, "%s", name);
    m->in_c = in_c, m->in_h = in_h, m->in_w = in_w, m->classes = classes;
    return 0;
}

int pfl_model_conv(pfl_model *m, const char *layer, int out_c, int k, int stride, int pad, bool bias) {
    return add_conv_from(m, m->num_ops - 1, layer, layer, out_c, k, stride, pad, bias);
}

int pfl_model_batchnorm(pfl_model *m, const char *layer) { return add_batchnorm_from(m, m->num_ops - 1, layer); }

int pfl_model_relu(pfl_model *m) { return add_simple(m, PFL_OP_RELU); }

int pfl_model_maxpool(pfl_model *m, int k, int stride, int pad) { return add_maxpool_pad(m, k, stride, pad); }

int pfl_model_linear(pfl_model *m, const char *layer, int out_features) {
    return add_linear(m, layer, layer, out_features);
}

int pfl_model_avgpool(pfl_model *m) {
    pfl_op *op = push_op(m, PFL_OP_AVGPOOL);
    if (!op) return pfl_err("model %s: too many operations", m->name);
    op->out_h = op->out_w = 1;
    return 0;
}

int pfl_model_conv_named(pfl_model *m, const char *layer, const char *tensors, int out_c, int k, int stride, int pad,
                         bool bias) {
    return add_conv_from(m, m->num_ops - 1, layer, tensors, out_c, k, stride, pad, bias);
}

int pfl_model_linear_named(pfl_model *m, const char *layer, const char *tensors, int out_features) {
    return add_linear(m, layer, tensors, out_features);
}

int pfl_model_flatten(pfl_model *m) { return add_simple(m, PFL_OP_FLATTEN); }

int pfl_model_dropout(pfl_model *m, float p) {
    pfl_op *op = push_op(m, PFL_OP_DROPOUT);
    if (!op) return pfl_err("model %s: too many operations", m->name);
    op->drop_p = p;
    return 0;
}

int pfl_model_embedding_mean(pfl_model *m, const char *layer, int vocab, int dim, int padding_idx) {
    if (m->num_ops != 0) return pfl_err("model %s: an embedding must be the first operation", m->name);
    pfl_op *op = push_op(m, PFL_OP_EMBED_MEAN);
    if (!op) return pfl_err("model %s: too many operations", m->name);
    op->vocab = vocab, op->padding_idx = padding_idx;
    op->out_c = dim, op->out_h = op->out_w = 1;
    int shape[2] = {vocab, dim};
    op->layer = add_layer(m, layer, layer, 2, shape, 0);
    if (op->layer < 0) return -1;
    m->layers[op->layer].init = PFL_INIT_EMBEDDING;
    return 0;
}

/* out = output of op a + output of op b (same shape). */
static int add_sum(pfl_model *m, int a, int b) {
    pfl_op *op = push_op_from(m, PFL_OP_ADD, a);
    if (!op) return pfl_err("model %s: too many operations", m->name);
    const pfl_op *ob = &m->ops[b];
    if (ob->out_c != op->in_c || ob->out_h != op->in_h || ob->out_w != op->in_w)
        return pfl_err("model %s: residual sum of %dx%dx%d and %dx%dx%d", m->name, op->in_c, op->in_h, op->in_w,
                       ob->out_c, ob->out_h, ob->out_w);
    op->src2 = b;
    return 0;
}

int pfl_model_basic_block(pfl_model *m, const char *prefix, int out_c, int stride) {
    char name[32];
    const int input = m->num_ops - 1; /* the block's input x */
    const int in_c = input < 0 ? m->in_c : m->ops[input].out_c;
#define NAME(suffix) (snprintf(name, sizeof name, "%s.%s", prefix, suffix), name)
    if (add_conv_from(m, input, NAME("conv1"), name, out_c, 3, stride, 1, false) ||
        add_batchnorm_from(m, m->num_ops - 1, NAME("bn1")) || add_simple(m, PFL_OP_RELU) ||
        add_conv_from(m, m->num_ops - 1, NAME("conv2"), name, out_c, 3, 1, 1, false) ||
        add_batchnorm_from(m, m->num_ops - 1, NAME("bn2")))
        return -1;
    const int main_path = m->num_ops - 1;
    int shortcut = input;
    if (stride != 1 || in_c != out_c) {
        if (add_conv_from(m, input, NAME("downsample.0"), name, out_c, 1, stride, 0, false) ||
            add_batchnorm_from(m, m->num_ops - 1, NAME("downsample.1")))
            return -1;
        shortcut = m->num_ops - 1;
    }
#undef NAME
    if (shortcut < 0) return pfl_err("model %s: %s: a residual block cannot start at the input", m->name, prefix);
    return add_sum(m, main_path, shortcut) || add_simple(m, PFL_OP_RELU) ? -1 : 0;
}

int pfl_model_finish(pfl_model *m) {
    if (m->num_ops == 0) return pfl_err("model %s: no operations", m->name);
    const pfl_op *last = &m->ops[m->num_ops - 1];
    if ((long)last->out_c * last->out_h * last->out_w != m->classes)
        return pfl_err("model %s: the last operation gives %d x %d x %d values for %d classes", m->name, last->out_c,
                       last->out_h, last->out_w, m->classes);
    /* the state follows the parameters in the model vector */
    for (int t = 0; t < m->num_state_tensors; t++) m->state_tensors[t].offset += m->num_params;
    for (int l = 0; l < m->num_layers; l++) m->layers[l].state_offset += m->num_params;
    return 0;
}

int pfl_model_add_block(pfl_model *m, const char *name, bool personal, pfl_init_kind init, int n,
                        const pfl_block_tensor *t) {
    if (pfl_model_rows(m) >= PFL_MAX_LAYERS) return pfl_err("model %s: too many layers for block %s", m->name, name);
    const size_t before = m->num_params;
    /* the row after the backbone's layers and earlier blocks */
    pfl_layer *l = &m->layers[pfl_model_rows(m)];
    memset(l, 0, sizeof *l);
    snprintf(l->name, sizeof l->name, "%s", name);
    l->offset = m->num_params, l->first_tensor = m->num_tensors;
    l->first_state = m->num_state_tensors, l->state_offset = m->num_params + m->num_state; /* moved below */
    for (int k = 0; k < n; k++)
        if (add_tensor(m, t[k].name, t[k].ndim, t[k].shape)) return -1;
    l->num_tensors = n, l->length = m->num_params - l->offset, l->init = init, l->personal = personal;
    /* the state follows the parameters, which grew */
    const size_t grew = m->num_params - before;
    for (int k = 0; k < m->num_state_tensors; k++) m->state_tensors[k].offset += grew;
    for (int k = 0; k < pfl_model_rows(m); k++) m->layers[k].state_offset += grew;
    m->num_blocks++;
    return 0;
}

/* nn.Embedding's reset_parameters: N(0, 1), then the padding row zeroed. */
static void init_embedding(const pfl_op *op, float *table, pfl_rng *rng) {
    const size_t n = (size_t)op->vocab * (size_t)op->out_c;
    for (size_t i = 0; i < n; i++) table[i] = (float)pfl_rng_normal(rng);
    if (op->padding_idx >= 0)
        memset(table + (size_t)op->padding_idx * (size_t)op->out_c, 0, sizeof(float) * (size_t)op->out_c);
}

void pfl_model_init_params(const pfl_model *m, float *params, pfl_rng *rng) {
    /* the blocks after the backbone: the backbone's draws are the same with or without them */
    for (int l = 0; l < pfl_model_rows(m); l++) {
        const pfl_layer *layer = &m->layers[l];
        const pfl_tensor *w = &m->tensors[layer->first_tensor];
        float *p = params + layer->offset;
        if (layer->init == PFL_INIT_ZERO) {
            memset(p, 0, sizeof(float) * layer->length);
        } else if (layer->init == PFL_INIT_NORMAL) {
            for (size_t i = 0; i < layer->length; i++) p[i] = (float)pfl_rng_normal(rng);
        } else if (layer->init == PFL_INIT_EMBEDDING) {
            init_embedding(&m->ops[0], p, rng); /* the embedding is always the first op */
        } else if (layer->init == PFL_INIT_BATCHNORM) {
            const size_t C = w->length; /* weight 1, bias 0 */
            for (size_t i = 0; i < layer->length; i++) p[i] = i < C ? 1.0f : 0.0f;
        } else if (layer->init == PFL_INIT_KAIMING_OUT) {
            /* weight only: torchvision's ResNet convolutions have no bias */
            const size_t fan_out = w->length / (size_t)w->shape[1];
            const double std = sqrt(2.0 / (double)fan_out);
            for (size_t i = 0; i < layer->length; i++) p[i] = (float)(std * pfl_rng_normal(rng));
        } else {
            size_t fan_in = w->length / (size_t)w->shape[0];
            float bound = 1.0f / sqrtf((float)fan_in);
            for (size_t i = 0; i < layer->length; i++) p[i] = (float)((2.0 * pfl_rng_uniform(rng) - 1.0) * bound);
        }
    }
    /* running means 0, running variances 1 */
    for (int t = 0; t < m->num_state_tensors; t++) {
        const pfl_tensor *st = &m->state_tensors[t];
        const size_t len = strlen(st->name), tail = strlen("running_var");
        const float v = len >= tail && strcmp(st->name + len - tail, "running_var") == 0 ? 1.0f : 0.0f;
        for (size_t i = 0; i < st->length; i++) params[st->offset + i] = v;
    }
}

/* ---- workspace ----
 *
 * Each op owns an output buffer and its gradient, except ops that work in
 * place: Flatten (only the shape changes) and a ReLU right after a
 * BatchNorm or a residual sum that nothing else reads (neither backward
 * needs its own output, so the ReLU may overwrite it: a third less memory
 * in a ResNet). */

struct pfl_workspace {
    const pfl_model *model;
    int max_batch;
    int batch;              /* B of the last forward */
    bool dropped;           /* the last forward drew dropout masks (train with an rng) */
    bool batch_stats;       /* the last forward normalized with batch statistics (train) */
    float *input;           /* max_batch x input size */
    const float *x;         /* input of the last forward */
    float *act[PFL_MAX_OPS];   /* outputs of each op (NULL: a Flatten of the input) */
    float *dact[PFL_MAX_OPS];  /* gradients wrt those outputs */
    bool owns[PFL_MAX_OPS];    /* act and dact were allocated for this op (not shared in place) */
    bool written[PFL_MAX_OPS]; /* backward: the output gradient holds a first contribution */
    float *scratch[PFL_MAX_OPS]; /* conv: unfolded input; dropout: mask; batchnorm: mean, var, invstd */
    int *argmax[PFL_MAX_OPS];  /* maxpool winners */
    float *gsum;            /* the gradient of an output read by several ops, before it is added */
    float *probs, *dlogits;
    float *dlogits_sum;     /* several terms' gradients on the logits, summed */
    int *rows, num_rows;       /* embedding rows the last forward read (fasttext) */
    uint8_t *row_mark;         /* vocab bytes, all zero between calls */
};

static long op_out_size(const pfl_op *op) { return (long)op->out_c * op->out_h * op->out_w; }

static pfl_conv_shape conv_shape(const pfl_op *op, int B) {
    pfl_conv_shape s = {B, op->in_c, op->in_h, op->in_w, op->out_c, op->kernel, op->stride, op->pad, op->out_h, op->out_w};
    return s;
}

/* How many ops read op j's output. */
static int readers(const pfl_model *m, int j) {
    int n = 0;
    for (int i = j + 1; i < m->num_ops; i++) n += (m->ops[i].src == j) + (m->ops[i].src2 == j);
    return n;
}

/* Whether op i reuses its input's buffers (see above). */
static bool in_place(const pfl_model *m, int i) {
    const pfl_op *op = &m->ops[i];
    if (op->kind == PFL_OP_FLATTEN) return true;
    if (op->kind != PFL_OP_RELU || op->src < 0) return false;
    const pfl_op_kind k = m->ops[op->src].kind;
    return (k == PFL_OP_BATCHNORM2D || k == PFL_OP_ADD) && readers(m, op->src) == 1;
}

static int alloc_op(pfl_workspace *ws, int i) {
    const pfl_model *m = ws->model;
    const pfl_op *op = &m->ops[i];
    const size_t B = (size_t)ws->max_batch, n = B * (size_t)op_out_size(op);
    if (!(ws->act[i] = pfl_malloc(sizeof(float) * n)) || !(ws->dact[i] = pfl_malloc(sizeof(float) * n))) return -1;
    ws->owns[i] = true;
    if (op->kind == PFL_OP_CONV2D) {
        pfl_conv_shape s = conv_shape(op, ws->max_batch);
        return (ws->scratch[i] = pfl_malloc(sizeof(float) * (size_t)pfl_conv2d_col_floats(&s))) ? 0 : -1;
    }
    if (op->kind == PFL_OP_DROPOUT) return (ws->scratch[i] = pfl_malloc(sizeof(float) * n)) ? 0 : -1;
    if (op->kind == PFL_OP_MAXPOOL2D) return (ws->argmax[i] = pfl_malloc(sizeof(int) * n)) ? 0 : -1;
    if (op->kind == PFL_OP_BATCHNORM2D) return (ws->scratch[i] = pfl_malloc(sizeof(float) * 3 * (size_t)op->out_c)) ? 0 : -1;
    return 0;
}

pfl_workspace *pfl_workspace_create(const pfl_model *m, int max_batch) {
    pfl_workspace *ws = pfl_calloc(1, sizeof *ws);
    if (!ws) return NULL;
    ws->model = m;
    ws->max_batch = max_batch;
    const size_t B = (size_t)max_batch;
    bool ok = (ws->input = pfl_malloc(sizeof(float) * B * (size_t)pfl_model_input_size(m))) != NULL;
    long shared_max = 0; /* the largest output read by several ops */
    for (int i = 0; ok && i < m->num_ops; i++) {
        if (readers(m, i) > 1 && op_out_size(&m->ops[i]) > shared_max) shared_max = op_out_size(&m->ops[i]);
        if (in_place(m, i)) {
            /* the input's buffers (NULL for a Flatten of the network input) */
            const int src = m->ops[i].src;
            ws->act[i] = src >= 0 ? ws->act[src] : NULL;
            ws->dact[i] = src >= 0 ? ws->dact[src] : NULL;
        } else {
            ok = alloc_op(ws, i) == 0;
        }
    }
    size_t classes = (size_t)m->classes;
    ok = ok && (ws->probs = pfl_malloc(sizeof(float) * B * classes)) &&
         (ws->dlogits = pfl_malloc(sizeof(float) * B * classes)) &&
         (ws->dlogits_sum = pfl_malloc(sizeof(float) * B * classes)) &&
         (shared_max == 0 || (ws->gsum = pfl_malloc(sizeof(float) * B * (size_t)shared_max)));
    const int vocab = pfl_model_vocab(m);
    if (ok && vocab > 0) {
        const long most = (long)max_batch * m->ops[0].in_w < vocab ? (long)max_batch * m->ops[0].in_w : vocab;
        ok = (ws->rows = pfl_malloc(sizeof(int) * (size_t)most)) && (ws->row_mark = pfl_calloc((size_t)vocab, 1));
    }
    if (!ok) {
        pfl_workspace_free(ws);
        return NULL;
    }
    return ws;
}

void pfl_workspace_free(pfl_workspace *ws) {
    if (!ws) return;
    for (int i = 0; i < ws->model->num_ops; i++) {
        if (ws->owns[i]) free(ws->act[i]), free(ws->dact[i]);
        free(ws->scratch[i]);
        free(ws->argmax[i]);
    }
    free(ws->input);
    free(ws->probs);
    free(ws->dlogits);
    free(ws->dlogits_sum);
    free(ws->gsum);
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

/* The output of op j; j = -1 is the network input, and a Flatten of the
 * network input (a NULL buffer) is the input too. */
static const float *output_of(const pfl_workspace *ws, int j) {
    while (j >= 0 && ws->act[j] == NULL) j = ws->model->ops[j].src;
    return j < 0 ? ws->x : ws->act[j];
}

/* The gradient buffer of op j's output, NULL for the network input. */
static float *grad_of(const pfl_workspace *ws, int j) {
    while (j >= 0 && ws->dact[j] == NULL) j = ws->model->ops[j].src;
    return j < 0 ? NULL : ws->dact[j];
}

static const float *layer_tensor(const pfl_model *m, const float *params, int layer, int k) {
    if (layer < 0 || k >= m->layers[layer].num_tensors) return NULL;
    return params + m->tensors[m->layers[layer].first_tensor + k].offset;
}

static void batchnorm_forward(pfl_workspace *ws, int i, const float *params, const float *in, float *out, int B) {
    const pfl_model *m = ws->model;
    const pfl_op *op = &m->ops[i];
    const int C = op->out_c, HW = op->out_h * op->out_w;
    const float *gamma = layer_tensor(m, params, op->layer, 0), *beta = layer_tensor(m, params, op->layer, 1);
    float *mean = ws->scratch[i], *var = mean + C, *invstd = var + C;
    if (ws->batch_stats) {
        pfl_batchnorm_forward_train(out, mean, var, invstd, in, gamma, beta, B, C, HW);
    } else {
        const float *running = params + m->layers[op->layer].state_offset;
        memcpy(mean, running, sizeof(float) * (size_t)C); /* the backward's centre */
        pfl_batchnorm_forward_eval(out, invstd, in, gamma, beta, running, running + C, B, C, HW);
    }
}

const float *pfl_forward(pfl_workspace *ws, const float *params, const float *x, int B, bool train, pfl_rng *rng) {
    const pfl_model *m = ws->model;
    ws->x = x;
    ws->batch = B;
    ws->dropped = train && rng != NULL;
    ws->batch_stats = train;
    for (int i = 0; i < m->num_ops; i++) {
        const pfl_op *op = &m->ops[i];
        if (op->kind == PFL_OP_FLATTEN) continue;
        const float *in = output_of(ws, op->src);
        float *out = ws->act[i];
        const long n = (long)B * op_out_size(op);
        const float *w = layer_tensor(m, params, op->layer, 0), *b = layer_tensor(m, params, op->layer, 1);
        PFL_OP_CLOCK_BEGIN();
        switch (op->kind) {
        case PFL_OP_CONV2D: {
            pfl_conv_shape s = conv_shape(op, B);
            pfl_conv2d_forward(out, ws->scratch[i], in, w, b, &s);
            break;
        }
        case PFL_OP_LINEAR:
            /* the op's gradient buffer is free during the forward pass */
            if (B <= 64) pfl_linear_forward_small(out, ws->dact[i], in, w, b, B, op->in_c * op->in_h * op->in_w, op->out_c);
            else pfl_linear_forward(out, in, w, b, B, op->in_c * op->in_h * op->in_w, op->out_c);
            break;
        case PFL_OP_RELU: pfl_relu_forward(out, in, n); break;
        case PFL_OP_MAXPOOL2D:
            pfl_maxpool2d_pad_forward(out, ws->argmax[i], in, B, op->in_c, op->in_h, op->in_w, op->kernel, op->stride,
                                      op->pad);
            break;
        case PFL_OP_DROPOUT:
            if (ws->dropped && op->drop_p > 0.0f) pfl_dropout_forward(out, ws->scratch[i], in, n, op->drop_p, rng);
            else
                memcpy(out, in, sizeof(float) * (size_t)n);
            break;
        case PFL_OP_BATCHNORM2D: batchnorm_forward(ws, i, params, in, out, B); break;
        case PFL_OP_ADD: {
            const float *other = output_of(ws, op->src2);
            for (long k = 0; k < n; k++) out[k] = in[k] + other[k];
            break;
        }
        case PFL_OP_AVGPOOL: pfl_avgpool_global_forward(out, in, B, op->in_c, op->in_h * op->in_w); break;
        case PFL_OP_EMBED_MEAN:
            pfl_embed_mean_forward(out, in, w, B, op->in_w, op->vocab, op->out_c, op->padding_idx);
            ws->num_rows = pfl_embed_rows(ws->rows, ws->row_mark, in, (long)B * op->in_w, op->vocab, op->padding_idx);
            break;
        case PFL_OP_FLATTEN: break;
        }
        PFL_OP_CLOCK_END(i, false);
    }
    return output_of(ws, m->num_ops - 1);
}

void pfl_update_running_stats(const pfl_workspace *ws, float *vector) {
    if (!ws->batch_stats) return;
    const pfl_model *m = ws->model;
    for (int i = 0; i < m->num_ops; i++) {
        const pfl_op *op = &m->ops[i];
        if (op->kind != PFL_OP_BATCHNORM2D) continue;
        const int C = op->out_c;
        float *running = vector + m->layers[op->layer].state_offset;
        const float *mean = ws->scratch[i], *var = mean + C;
        pfl_batchnorm_update_running(running, running + C, mean, var, C, (long)ws->batch * op->out_h * op->out_w,
                                     PFL_BN_MOMENTUM);
    }
}

float pfl_forward_loss(pfl_workspace *ws, const float *params, const float *x, const uint8_t *labels, int B,
                       bool train, pfl_rng *rng) {
    const float *logits = pfl_forward(ws, params, x, B, train, rng);
    return pfl_softmax_xent_forward(ws->probs, logits, labels, B, ws->model->classes);
}

float pfl_forward_loss_offset(pfl_workspace *ws, const float *params, const float *x, const uint8_t *labels, int B,
                              bool train, pfl_rng *rng, const float *offset) {
    const float *logits = pfl_forward(ws, params, x, B, train, rng);
    return pfl_softmax_xent_offset_forward(ws->probs, logits, offset, labels, B, ws->model->classes);
}

float pfl_workspace_xent(pfl_workspace *ws, const uint8_t *labels, const float *offset) {
    return pfl_softmax_xent_offset_forward(ws->probs, pfl_workspace_logits(ws), offset, labels, ws->batch,
                                           ws->model->classes);
}

const float *pfl_workspace_logits(const pfl_workspace *ws) { return output_of(ws, ws->model->num_ops - 1); }

const float *pfl_workspace_layer_input(const pfl_workspace *ws, int layer) {
    for (int i = 0; i < ws->model->num_ops; i++)
        if (ws->model->ops[i].layer == layer) return output_of(ws, ws->model->ops[i].src);
    return NULL;
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

/* Where the backward of an op writes the gradient for its input `src`:
 * NULL when nobody needs it (the network input, or below the lowest op
 * visited); the input's own gradient buffer for the first contribution;
 * ws->gsum for later ones (several ops read that output: residual blocks),
 * which gradient_done adds in. */
static float *gradient_target(pfl_workspace *ws, int src, int lowest) {
    if (src < lowest) return NULL;
    if (!ws->written[src]) {
        ws->written[src] = true;
        return grad_of(ws, src);
    }
    return ws->gsum;
}

static void gradient_done(pfl_workspace *ws, int src, const float *target) {
    if (!target || target != ws->gsum) return;
    float *g = grad_of(ws, src);
    const long n = (long)ws->batch * op_out_size(&ws->model->ops[src]);
    for (long k = 0; k < n; k++) g[k] += target[k];
}

static void op_backward(pfl_workspace *ws, int i, const float *params, float *grads, float *din, const float *dout) {
    const pfl_model *m = ws->model;
    const pfl_op *op = &m->ops[i];
    const int B = ws->batch;
    const float *in = output_of(ws, op->src);
    const long n = (long)B * op_out_size(op);
    float *dw = NULL, *db = NULL;
    if (op->layer >= 0) {
        const pfl_layer *l = &m->layers[op->layer];
        dw = grads + m->tensors[l->first_tensor].offset;
        db = l->num_tensors > 1 ? grads + m->tensors[l->first_tensor + 1].offset : NULL;
    }
    const float *w = layer_tensor(m, params, op->layer, 0);
    switch (op->kind) {
    case PFL_OP_CONV2D: {
        pfl_conv_shape s = conv_shape(op, B);
        pfl_conv2d_backward(din, dw, db, ws->scratch[i], dout, in, w, &s);
        break;
    }
    case PFL_OP_LINEAR:
        pfl_linear_backward(din, dw, db, dout, in, w, B, op->in_c * op->in_h * op->in_w, op->out_c);
        break;
    case PFL_OP_RELU:
        if (din) pfl_relu_backward(din, dout, ws->act[i], n);
        break;
    case PFL_OP_MAXPOOL2D:
        if (din)
            pfl_maxpool2d_pad_backward(din, dout, ws->argmax[i], B, op->in_c, op->in_h, op->in_w, op->kernel,
                                       op->stride, op->pad);
        break;
    case PFL_OP_DROPOUT:
        /* after a forward without masks dropout was the identity */
        if (din && ws->dropped && op->drop_p > 0.0f) pfl_dropout_backward(din, dout, ws->scratch[i], n);
        else if (din) memcpy(din, dout, sizeof(float) * (size_t)n);
        break;
    case PFL_OP_BATCHNORM2D: {
        const float *mean = ws->scratch[i], *invstd = mean + 2 * op->out_c;
        pfl_batchnorm_backward(din, dw, db, dout, in, w, mean, invstd, B, op->out_c, op->out_h * op->out_w,
                               ws->batch_stats);
        break;
    }
    case PFL_OP_ADD: /* the first operand; the shortcut is done by the caller */
        if (din) memcpy(din, dout, sizeof(float) * (size_t)n);
        break;
    case PFL_OP_AVGPOOL:
        if (din) pfl_avgpool_global_backward(din, dout, B, op->in_c, op->in_h * op->in_w);
        break;
    case PFL_OP_EMBED_MEAN: /* token ids have no gradient: the table's alone */
        pfl_embed_mean_backward(dw, dout, in, B, op->in_w, op->vocab, op->out_c, op->padding_idx);
        break;
    case PFL_OP_FLATTEN: break;
    }
}

/* A parametric op's backward fused with the SGD step p -= lr * g: its input
 * gradient from the weights before the step, then its weights updated in
 * `params`. Ops without parameters go through op_backward. */
static void op_backward_sgd(pfl_workspace *ws, int i, float *params, float lr, float *din, const float *dout) {
    const pfl_model *m = ws->model;
    const pfl_op *op = &m->ops[i];
    if (op->layer < 0) {
        op_backward(ws, i, params, NULL, din, dout);
        return;
    }
    float *w = params + m->tensors[m->layers[op->layer].first_tensor].offset;
    float *b = m->layers[op->layer].num_tensors > 1 ? params + m->tensors[m->layers[op->layer].first_tensor + 1].offset
                                                    : NULL;
    const float *in = output_of(ws, op->src);
    if (op->kind == PFL_OP_CONV2D) {
        pfl_conv_shape s = conv_shape(op, ws->batch);
        pfl_conv2d_backward_sgd(din, w, b, ws->scratch[i], dout, in, &s, lr);
    } else { /* PFL_OP_LINEAR: pfl_model_sgd_fusable admits no other */
        pfl_linear_backward_sgd(din, w, b, dout, in, ws->batch, op->in_c * op->in_h * op->in_w,
                                op->out_c, lr);
    }
}

bool pfl_model_sgd_fusable(const pfl_model *m) {
    for (int i = 0; i < m->num_ops; i++) {
        const pfl_op *op = &m->ops[i];
        if (op->layer >= 0 && op->kind != PFL_OP_CONV2D && op->kind != PFL_OP_LINEAR) return false;
        if (op->kind == PFL_OP_LINEAR && m->layers[op->layer].num_tensors < 2) return false;
    }
    return true;
}

long pfl_model_layer_input_size(const pfl_model *m, int layer) {
    const pfl_op *op = &m->ops[op_of_layer(m, layer)];
    return (long)op->in_c * op->in_h * op->in_w;
}

/* What a backward pass computes besides the cross-entropy's gradient: its
 * weight, and the gradients of terms on the inputs of some ops (ops[k] gets
 * d[k]; none when n is 0). */
typedef struct {
    float ce_weight;
    int n;
    int ops[PFL_MAX_INJECTIONS];
    const float *d[PFL_MAX_INJECTIONS];
} extra_terms;

/* Adds the terms' gradients on op i's input to that input's gradient, which
 * the op's backward has just written. */
static void join_terms(pfl_workspace *ws, const extra_terms *extra, int i) {
    if (!extra) return;
    const pfl_op *op = &ws->model->ops[i];
    for (int k = 0; k < extra->n; k++) {
        if (extra->ops[k] != i) continue;
        float *g = grad_of(ws, op->src);
        const long n = (long)ws->batch * op->in_c * op->in_h * op->in_w;
        for (long j = 0; j < n; j++) g[j] += extra->d[k][j];
    }
}

/* The ops from `top` down to `lowest`, whose output gradients (from top's
 * on) the caller has written and marked: into `grads` (which accumulate),
 * or, with grads NULL, fused with the SGD step of rate lr on `update` (the
 * same vector as params). `dlogits` stands for the last op's gradient when
 * it has no buffer of its own; `extra` (or NULL) adds terms' gradients on
 * some ops' inputs. */
static void backward_range(pfl_workspace *ws, const float *params, float *grads, int top, int lowest, float *update,
                           float lr, const float *dlogits, const extra_terms *extra) {
    const pfl_model *m = ws->model;
    const int B = ws->batch;
    for (int i = top; i >= lowest; i--) {
        const pfl_op *op = &m->ops[i];
        if (op->kind == PFL_OP_FLATTEN) {
            /* its gradient already lies in its input's buffer */
            if (op->src >= 0) ws->written[op->src] = ws->written[i];
            continue;
        }
        const float *dout = grad_of(ws, i) ? grad_of(ws, i) : dlogits;
        float *din = gradient_target(ws, op->src, lowest);
        PFL_OP_CLOCK_BEGIN();
        if (grads) op_backward(ws, i, params, grads, din, dout);
        else op_backward_sgd(ws, i, update, lr, din, dout);
        PFL_OP_CLOCK_END(i, true);
        gradient_done(ws, op->src, din);
        if (din) join_terms(ws, extra, i);
        if (op->kind == PFL_OP_ADD) {
            float *d2 = gradient_target(ws, op->src2, lowest);
            if (d2) memcpy(d2, dout, sizeof(float) * (size_t)B * (size_t)op_out_size(op));
            gradient_done(ws, op->src2, d2);
        }
    }
}

/* The backward pass from the loss down to op `lowest` (backward_range):
 * the cross-entropy's gradient weighted by extra->ce_weight when given (0:
 * none), plus the gradient a term on the logits gives (dlogits_add, or NULL). */
static void backward_ops(pfl_workspace *ws, const float *params, const uint8_t *labels, float *grads, int lowest,
                         float *update, float lr, const extra_terms *extra, const float *dlogits_add) {
    const pfl_model *m = ws->model;
    const int last = m->num_ops - 1;
    const long n = (long)ws->batch * m->classes;
    float *dlogits = grad_of(ws, last) ? grad_of(ws, last) : ws->dlogits;
    if (!extra || extra->ce_weight != 0.0f) {
        pfl_softmax_xent_backward(dlogits, ws->probs, labels, ws->batch, m->classes);
        if (extra && extra->ce_weight != 1.0f)
            for (long k = 0; k < n; k++) dlogits[k] *= extra->ce_weight;
        if (dlogits_add)
            for (long k = 0; k < n; k++) dlogits[k] += dlogits_add[k];
    } else {
        memcpy(dlogits, dlogits_add, sizeof(float) * (size_t)n);
    }
    memset(ws->written, 0, sizeof ws->written);
    ws->written[last] = true;
    backward_range(ws, params, grads, last, lowest, update, lr, dlogits, extra);
}

/* Without the cross-entropy or a term on the logits: the backward starts at
 * the input of the highest op a term reaches, from that term's gradient,
 * the others joining where the pass reaches them. */
static void backward_from_terms(pfl_workspace *ws, const float *params, float *grads, int lowest,
                                const extra_terms *extra) {
    const pfl_model *m = ws->model;
    int k_top = 0;
    for (int k = 1; k < extra->n; k++)
        if (extra->ops[k] > extra->ops[k_top]) k_top = k;
    const pfl_op *op = &m->ops[extra->ops[k_top]];
    float *g = grad_of(ws, op->src);
    if (!g || op->src < lowest) return; /* the term is on the network input, or below what learns */
    memcpy(g, extra->d[k_top], sizeof(float) * (size_t)ws->batch * (size_t)op->in_c * (size_t)op->in_h * (size_t)op->in_w);
    memset(ws->written, 0, sizeof ws->written);
    ws->written[op->src] = true;
    extra_terms rest = *extra;
    rest.n = 0;
    for (int k = 0; k < extra->n; k++)
        if (k != k_top) rest.ops[rest.n] = extra->ops[k], rest.d[rest.n++] = extra->d[k];
    backward_range(ws, params, grads, op->src, lowest, NULL, 0.0f, NULL, &rest);
}

void pfl_backward_below(pfl_workspace *ws, const float *params, int layer, const float *dinput, float *grads) {
    const int l = layer;
    const float *d = dinput;
    pfl_backward_terms(ws, params, NULL, grads, 0, 0.0f, &l, &d, 1);
}

void pfl_backward_top(pfl_workspace *ws, const float *params, const uint8_t *labels, float *grads, int first_layer) {
    /* Gradients wrt the data are never needed, nor below the lowest layer
     * that learns: ops below `lowest` are not visited and get nothing. */
    const int lowest = first_layer <= 0 ? 0 : op_of_layer(ws->model, first_layer);
    backward_ops(ws, params, labels, grads, lowest, NULL, 0.0f, NULL, NULL);
}

void pfl_backward_features(pfl_workspace *ws, const float *params, const uint8_t *labels, float *grads, int first_layer,
                           float ce_weight, int layer, const float *dfeatures) {
    pfl_backward_terms(ws, params, labels, grads, first_layer, ce_weight, &layer, &dfeatures, 1);
}

void pfl_backward_terms(pfl_workspace *ws, const float *params, const uint8_t *labels, float *grads, int first_layer,
                        float ce_weight, const int *layers, const float *const *d, int n) {
    const pfl_model *m = ws->model;
    const int lowest = first_layer <= 0 ? 0 : op_of_layer(m, first_layer);
    extra_terms extra = {.ce_weight = ce_weight};
    const float *on_logits = NULL;
    float *sum = NULL; /* several terms on the logits: their gradients summed */
    for (int k = 0; k < n; k++) {
        if (layers[k] >= m->num_layers) { /* the logits */
            if (!on_logits) {
                on_logits = d[k];
            } else {
                if (!sum) sum = memcpy(ws->dlogits_sum, on_logits, sizeof(float) * (size_t)ws->batch * m->classes);
                for (long j = 0; j < (long)ws->batch * m->classes; j++) sum[j] += d[k][j];
                on_logits = sum;
            }
        } else if (layers[k] > 0 && extra.n < PFL_MAX_INJECTIONS) { /* a term on the network input changes nothing */
            extra.ops[extra.n] = op_of_layer(m, layers[k]), extra.d[extra.n++] = d[k];
        }
    }
    if (ce_weight != 0.0f || on_logits) backward_ops(ws, params, labels, grads, lowest, NULL, 0.0f, &extra, on_logits);
    else if (extra.n > 0) backward_from_terms(ws, params, grads, lowest, &extra);
}

int pfl_backward_sgd(pfl_workspace *ws, float *params, const uint8_t *labels, float lr) {
    if (!pfl_model_sgd_fusable(ws->model))
        return pfl_err("model %s: a layer other than Conv2d or Linear with bias cannot take a fused SGD step",
                       ws->model->name);
    backward_ops(ws, params, labels, NULL, 0, params, lr, NULL, NULL);
    return 0;
}

int pfl_argmax(const float *z, int n) {
    int best = 0;
    for (int c = 1; c < n; c++)
        if (z[c] > z[best]) best = c;
    return best;
}

int pfl_count_correct(const pfl_workspace *ws, const uint8_t *labels, int B) {
    const pfl_model *m = ws->model;
    const float *logits = output_of(ws, m->num_ops - 1);
    int correct = 0;
    for (int n = 0; n < B; n++) correct += pfl_argmax(logits + (long)n * m->classes, m->classes) == labels[n];
    return correct;
}
