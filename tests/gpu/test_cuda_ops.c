/* The CUDA backend against the CPU's arithmetic, on every zoo model's
 * shapes (scripts/gpu-check.sh runs it on a GPU machine; built only where
 * nvcc is, and skipped, exit 77, without a GPU).
 *
 * Per op: after a training forward and a backward on the GPU, each op's
 * output is recomputed on the CPU by src/nn's layer function from the GPU's
 * own input to that op, and its parameter and input gradients from the
 * GPU's input and output gradient, so each op is judged alone, not through
 * the rounding of the ops below it. Per model: the loss, the logits and the
 * whole one-batch gradient of the CUDA executor against the CPU executor's
 * on the same parameters and batch, the evaluation forward (BatchNorm's
 * running statistics), the running-statistics update, an SGD step with
 * momentum and weight decay, the fused backward-and-SGD step where the model
 * takes it, FLAYER's sums of squares and a proximal term.
 *
 * Every comparison is the relative error ||gpu - cpu|| / ||cpu|| (absolute
 * where cpu is all zero) against 1e-4; each prints one line. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "nn/layers.h"
#include "nn/model.h"
#include "util/err.h"
#include "util/rng.h"

#define TOL 1e-4

static int checks, failures;

static double rel_err(const float *gpu, const float *cpu, size_t n) {
    double d = 0.0, r = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double e = (double)gpu[i] - (double)cpu[i];
        d += e * e, r += (double)cpu[i] * cpu[i];
    }
    if (!isfinite(d)) return INFINITY;
    return r > 0.0 ? sqrt(d / r) : sqrt(d);
}

static void judge(const char *model, const char *what, const float *gpu, const float *cpu, size_t n) {
    const double e = rel_err(gpu, cpu, n);
    const int ok = e <= TOL;
    checks++, failures += !ok;
    printf("%-4s %-22s %-34s rel %.2e\n", ok ? "ok" : "FAIL", model, what, e);
}

static float *floats(size_t n) {
    float *p = calloc(n ? n : 1, sizeof(float));
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

static long out_size(const pfl_op *op) { return (long)op->out_c * op->out_h * op->out_w; }
static long in_size(const pfl_op *op) { return (long)op->in_c * op->in_h * op->in_w; }

static int readers(const pfl_model *m, int j) {
    int n = 0;
    for (int i = j + 1; i < m->num_ops; i++) n += (m->ops[i].src == j) + (m->ops[i].src2 == j);
    return n;
}

static const float *tensor(const pfl_model *m, const float *params, int layer, int k) {
    if (layer < 0 || k >= m->layers[layer].num_tensors) return NULL;
    return params + m->tensors[m->layers[layer].first_tensor + k].offset;
}

/* The GPU's output of op j (the batch for j = -1), read into dst. */
static void gpu_output(pfl_exec *g, int j, const float *batch, float *dst) {
    const pfl_model *m = g->model;
    while (j >= 0 && m->ops[j].kind == PFL_OP_FLATTEN) j = m->ops[j].src;
    if (j < 0) memcpy(dst, batch, sizeof(float) * (size_t)g->batch * (size_t)pfl_model_input_size(m));
    else g->be->read_op(g, j, false, dst);
}

static pfl_conv_shape conv_shape(const pfl_op *op, int B) {
    pfl_conv_shape s = {B, op->in_c, op->in_h, op->in_w, op->out_c, op->kernel, op->stride, op->pad, op->out_h, op->out_w};
    return s;
}

/* op i on the CPU from the GPU's inputs: out, and, given dout, din, dw, db
 * (dw, db accumulate into zeroed buffers). bn: mean, var, invstd scratch. */
typedef struct {
    float *in, *in2, *out, *dout, *din, *dw, *db, *scratch, *mask;
    int *argmax;
} op_bufs;

static void cpu_op(const pfl_model *m, int i, const float *params, int B, const op_bufs *b, pfl_rng *replay,
                   bool backward) {
    const pfl_op *op = &m->ops[i];
    const long n = (long)B * out_size(op);
    const float *w = tensor(m, params, op->layer, 0), *bias = tensor(m, params, op->layer, 1);
    switch (op->kind) {
    case PFL_OP_CONV2D: {
        pfl_conv_shape s = conv_shape(op, B);
        if (!backward) pfl_conv2d_forward_unfolded(b->out, b->scratch, b->in, w, bias, &s);
        else pfl_conv2d_backward_unfolded(b->din, b->dw, bias ? b->db : NULL, b->scratch, b->dout, b->in, w, &s);
        break;
    }
    case PFL_OP_LINEAR:
        if (!backward) pfl_linear_forward(b->out, b->in, w, bias, B, (int)in_size(op), op->out_c);
        else pfl_linear_backward(b->din, b->dw, b->db, b->dout, b->in, w, B, (int)in_size(op), op->out_c);
        break;
    case PFL_OP_RELU:
        if (!backward) pfl_relu_forward(b->out, b->in, n);
        else pfl_relu_backward(b->din, b->dout, b->out, n);
        break;
    case PFL_OP_MAXPOOL2D:
        if (!backward)
            pfl_maxpool2d_pad_forward(b->out, b->argmax, b->in, B, op->in_c, op->in_h, op->in_w, op->kernel,
                                      op->stride, op->pad);
        else
            pfl_maxpool2d_pad_backward(b->din, b->dout, b->argmax, B, op->in_c, op->in_h, op->in_w, op->kernel,
                                       op->stride, op->pad);
        break;
    case PFL_OP_DROPOUT:
        if (!backward) pfl_dropout_forward(b->out, b->mask, b->in, n, op->drop_p, replay);
        else pfl_dropout_backward(b->din, b->dout, b->mask, n);
        break;
    case PFL_OP_BATCHNORM2D: {
        const int C = op->out_c, HW = op->out_h * op->out_w;
        float *mean = b->scratch, *var = mean + C, *invstd = var + C;
        if (!backward) pfl_batchnorm_forward_train(b->out, mean, var, invstd, b->in, w, bias, B, C, HW);
        else pfl_batchnorm_backward(b->din, b->dw, b->db, b->dout, b->in, w, mean, invstd, B, C, HW, true);
        break;
    }
    case PFL_OP_ADD:
        if (!backward)
            for (long k = 0; k < n; k++) b->out[k] = b->in[k] + b->in2[k];
        else
            memcpy(b->din, b->dout, sizeof(float) * (size_t)n);
        break;
    case PFL_OP_AVGPOOL:
        if (!backward) pfl_avgpool_global_forward(b->out, b->in, B, op->in_c, op->in_h * op->in_w);
        else pfl_avgpool_global_backward(b->din, b->dout, B, op->in_c, op->in_h * op->in_w);
        break;
    case PFL_OP_EMBED_MEAN:
        if (!backward) pfl_embed_mean_forward(b->out, b->in, w, B, op->in_w, op->vocab, op->out_c, op->padding_idx);
        else pfl_embed_mean_backward(b->dw, b->dout, b->in, B, op->in_w, op->vocab, op->out_c, op->padding_idx);
        break;
    case PFL_OP_FLATTEN: break;
    }
}

static const char *kind_name(pfl_op_kind k) {
    static const char *names[] = {"conv2d", "linear", "relu", "maxpool", "dropout", "flatten", "embed-mean",
                                  "batchnorm", "add", "avgpool"};
    return names[k];
}

/* Every op of the model alone, after the GPU's training forward and backward. */
static void check_ops(const char *label, pfl_exec *g, const float *params, const float *grads_gpu, const float *batch,
                      uint64_t dropout_seed) {
    const pfl_model *m = g->model;
    const int B = g->batch;
    long most = pfl_model_input_size(m), col = 1;
    for (int i = 0; i < m->num_ops; i++) {
        const pfl_op *op = &m->ops[i];
        if (out_size(op) > most) most = out_size(op);
        if (op->kind == PFL_OP_CONV2D) {
            pfl_conv_shape s = conv_shape(op, B);
            if (pfl_conv2d_col_floats(&s) > col) col = pfl_conv2d_col_floats(&s);
        }
        if (op->kind == PFL_OP_BATCHNORM2D && 3 * op->out_c > col) col = 3 * op->out_c;
    }
    const size_t N = (size_t)B * (size_t)most;
    op_bufs b = {floats(N), floats(N), floats(N), floats(N), floats(N), floats(m->num_params), floats(m->num_params),
                 floats((size_t)col), floats(N), calloc(N, sizeof(int))};
    float *gpu = floats(N);
    pfl_rng replay = pfl_rng_stream(dropout_seed, PFL_RNG_NONE, PFL_RNG_NONE, PFL_RNG_DROPOUT);
    for (int i = 0; i < m->num_ops; i++) {
        const pfl_op *op = &m->ops[i];
        if (op->kind == PFL_OP_FLATTEN) continue;
        char what[64];
        const long n = (long)B * out_size(op);
        gpu_output(g, op->src, batch, b.in);
        if (op->kind == PFL_OP_ADD) gpu_output(g, op->src2, batch, b.in2);
        cpu_op(m, i, params, B, &b, &replay, false);
        g->be->read_op(g, i, false, gpu);
        snprintf(what, sizeof what, "op %d %s forward", i, kind_name(op->kind));
        judge(label, what, gpu, b.out, (size_t)n);
        /* backward from the GPU's gradient of this op's output */
        g->be->read_op(g, i, true, b.dout);
        memset(b.dw, 0, sizeof(float) * m->num_params), memset(b.db, 0, sizeof(float) * m->num_params);
        if (op->kind == PFL_OP_RELU) memcpy(b.out, gpu, sizeof(float) * (size_t)n); /* its backward reads its output */
        cpu_op(m, i, params, B, &b, &replay, true);
        if (op->layer >= 0) {
            const pfl_layer *l = &m->layers[op->layer];
            const pfl_tensor *t = &m->tensors[l->first_tensor];
            snprintf(what, sizeof what, "op %d %s weight grad", i, kind_name(op->kind));
            judge(label, what, grads_gpu + t->offset, b.dw, t->length);
            if (l->num_tensors > 1) {
                snprintf(what, sizeof what, "op %d %s bias grad", i, kind_name(op->kind));
                judge(label, what, grads_gpu + t[1].offset, b.db, t[1].length);
            }
        }
        int src = op->src;
        while (src >= 0 && m->ops[src].kind == PFL_OP_FLATTEN) src = m->ops[src].src;
        if (src >= 0 && readers(m, op->src) == 1 && op->kind != PFL_OP_EMBED_MEAN && op->kind != PFL_OP_ADD) {
            g->be->read_op(g, src, true, gpu);
            snprintf(what, sizeof what, "op %d %s input grad", i, kind_name(op->kind));
            judge(label, what, gpu, b.din, (size_t)B * (size_t)in_size(op));
        }
    }
    free(b.in), free(b.in2), free(b.out), free(b.dout), free(b.din), free(b.dw), free(b.db), free(b.scratch);
    free(b.mask), free(b.argmax), free(gpu);
}

typedef struct {
    const char *model;
    int c, h, w, classes, batch;
} model_case;

/* the batch: pixels in [-1, 1], or token ids (a few of them padding) */
static void make_batch(const pfl_model *m, int B, float *x, uint8_t *y, pfl_rng *rng) {
    const long s = pfl_model_input_size(m);
    const int vocab = pfl_model_vocab(m);
    for (long k = 0; k < (long)B * s; k++)
        x[k] = vocab ? (float)(pfl_rng_uniform(rng) < 0.2 ? 0 : (int)(pfl_rng_uniform(rng) * vocab))
                     : (float)(2.0 * pfl_rng_uniform(rng) - 1.0);
    for (int n = 0; n < B; n++) y[n] = (uint8_t)(pfl_rng_uniform(rng) * m->classes);
}

static pfl_exec *executor(const pfl_backend *be, const pfl_model *m, int B) {
    pfl_exec *x = pfl_exec_create(be, m, NULL, B);
    if (!x) {
        fprintf(stderr, "%s executor for %s: %s\n", be->name, m->name, pfl_errmsg());
        exit(1);
    }
    return x;
}

/* One model: the per-op checks, then the executors side by side. */
static void check_model(const model_case *mc) {
    pfl_model m;
    if (pfl_model_build(&m, mc->model, mc->c, mc->h, mc->w, mc->classes)) {
        fprintf(stderr, "%s: %s\n", mc->model, pfl_errmsg());
        exit(1);
    }
    char label[40];
    snprintf(label, sizeof label, "%s %dx%dx%d", mc->model, mc->c, mc->h, mc->w);
    const int B = mc->batch;
    const size_t V = pfl_model_vector_len(&m), P = m.num_params, S = (size_t)pfl_model_input_size(&m);
    pfl_rng rng = pfl_rng_stream(7, PFL_RNG_NONE, PFL_RNG_NONE, PFL_RNG_BENCH);
    float *params = floats(V), *x = floats((size_t)B * S), *gg = floats(P), *gc = floats(P);
    uint8_t *y = malloc((size_t)B);
    pfl_model_init_params(&m, params, &rng);
    make_batch(&m, B, x, y, &rng);
    pfl_exec *g = executor(&pfl_backend_cuda, &m, B), *c = executor(&pfl_backend_cpu, &m, B);
    pfl_xbuf pg = pfl_exec_view(g, params, V, false), pc = pfl_exec_view(c, params, V, false);
    pfl_xbuf dg, dc;
    if (pfl_exec_alloc(g, &dg, P) || pfl_exec_alloc(c, &dc, P)) exit(1);

    /* training forward with dropout masks from the same stream on both */
    pfl_exec_load(g, x, y, B), pfl_exec_load(c, x, y, B);
    pfl_rng dg_rng = pfl_rng_stream(11, PFL_RNG_NONE, PFL_RNG_NONE, PFL_RNG_DROPOUT);
    pfl_rng dc_rng = dg_rng;
    pfl_exec_forward(g, &pg, true, &dg_rng), pfl_exec_forward(c, &pc, true, &dc_rng);
    const float lg = pfl_exec_xent(g, NULL), lc = pfl_exec_xent(c, NULL);
    judge(label, "loss", &lg, &lc, 1);
    float *zg = floats((size_t)B * m.classes);
    const float *zc = pfl_exec_features(c, m.num_layers, NULL);
    judge(label, "logits (train)", pfl_exec_features(g, m.num_layers, zg), zc, (size_t)B * m.classes);
    pfl_exec_zero(g, &dg, 0, P), pfl_exec_zero(c, &dc, 0, P);
    pfl_exec_backward(g, &pg, &dg, 0, 1.0f, NULL, 0), pfl_exec_backward(c, &pc, &dc, 0, 1.0f, NULL, 0);
    pfl_exec_read(g, &dg, 0, gg, P), pfl_exec_read(c, &dc, 0, gc, P);
    judge(label, "one-batch gradient", gg, gc, P);
    check_ops(label, g, params, gg, x, 11);

    /* the running statistics, an SGD step with momentum and weight decay */
    float *vg = floats(V), *vc = floats(V);
    memcpy(vc, params, sizeof(float) * V);
    pfl_xbuf sg = pfl_exec_view(g, vg, V, true);
    pfl_exec_write(g, &sg, 0, params, V);
    pfl_exec_update_stats(g, &sg), pfl_exec_update_stats(c, &(pfl_xbuf){.host = vc, .n = V});
    pfl_xbuf velg, velc;
    if (pfl_exec_alloc(g, &velg, P) || pfl_exec_alloc(c, &velc, P)) exit(1);
    pfl_exec_zero(g, &velg, 0, P), pfl_exec_zero(c, &velc, 0, P);
    const pfl_sgd opt = {0.05f, 0.9f, 1e-3f};
    for (int k = 0; k < 2; k++) {
        pfl_exec_sgd(g, &sg, &dg, &velg, 0, P, &opt);
        pfl_exec_sgd(c, &(pfl_xbuf){.host = vc, .n = V}, &dc, &velc, 0, P, &opt);
    }
    pfl_exec_unview(g, &sg);
    judge(label, "running stats + 2 SGD steps", vg, vc, V);
    /* FLAYER's sums of squares, a proximal term toward the momentum buffer */
    const double qg = pfl_exec_sumsq(g, &dg, 0, P), qc = pfl_exec_sumsq(c, &dc, 0, P);
    const float fq[2] = {(float)qg, (float)qc};
    judge(label, "sum of squares", &fq[0], &fq[1], 1);
    pfl_exec_prox(g, &dg, &pg, &velg, 0.5f, 0, P), pfl_exec_prox(c, &dc, &pc, &velc, 0.5f, 0, P);
    pfl_exec_read(g, &dg, 0, gg, P), pfl_exec_read(c, &dc, 0, gc, P);
    judge(label, "proximal term", gg, gc, P);

    /* evaluation mode: BatchNorm on the running statistics, dropout off */
    pfl_exec_forward(g, &pg, false, NULL), pfl_exec_forward(c, &pc, false, NULL);
    judge(label, "logits (eval)", pfl_exec_features(g, m.num_layers, zg), pfl_exec_features(c, m.num_layers, NULL),
          (size_t)B * m.classes);
    /* the correct count against the GPU's own logits (the CPU's may break a near-tie otherwise) */
    int hits = 0;
    for (int n = 0; n < B; n++) hits += pfl_argmax(zg + (long)n * m.classes, m.classes) == y[n];
    const float cg = (float)pfl_exec_correct(g), ch = (float)hits;
    judge(label, "correct count (eval)", &cg, &ch, 1);

    /* the fused backward-and-SGD step */
    if (pfl_exec_can_fuse(g)) {
        float *fg = floats(V), *fc = floats(V);
        memcpy(fg, params, sizeof(float) * V), memcpy(fc, params, sizeof(float) * V);
        pfl_xbuf fvg = pfl_exec_view(g, fg, V, true), fvc = pfl_exec_view(c, fc, V, true);
        pfl_exec_forward(g, &fvg, true, NULL), pfl_exec_forward(c, &fvc, true, NULL);
        pfl_exec_xent(g, NULL), pfl_exec_xent(c, NULL);
        pfl_exec_backward_sgd(g, &fvg, 0.1f), pfl_exec_backward_sgd(c, &fvc, 0.1f);
        pfl_exec_unview(g, &fvg), pfl_exec_unview(c, &fvc);
        judge(label, "fused backward + SGD", fg, fc, V);
        free(fg), free(fc);
    }
    pfl_exec_unview(g, &pg), pfl_exec_unview(c, &pc);
    pfl_exec_free_buf(g, &dg), pfl_exec_free_buf(c, &dc), pfl_exec_free_buf(g, &velg), pfl_exec_free_buf(c, &velc);
    pfl_exec_destroy(g), pfl_exec_destroy(c);
    free(params), free(x), free(y), free(gg), free(gc), free(zg), free(vg), free(vc);
}

int main(void) {
    const pfl_backend *cuda = pfl_backend_find("cuda");
    if (!cuda || cuda->available()) {
        printf("skipped: %s\n", pfl_errmsg());
        return 77;
    }
    char what[320];
    cuda->describe(what, sizeof what);
    printf("CUDA backend on %s\n", what);
    static const model_case cases[] = {
        {"cnn", 1, 28, 28, 10, 10},           {"cnn", 3, 32, 32, 10, 10},       {"dnn", 1, 28, 28, 10, 10},
        {"mlp", 1, 28, 28, 10, 10},           {"mnist-cnn", 1, 28, 28, 10, 10}, {"cifar-cnn", 3, 32, 32, 10, 10},
        {"tsdp-cnn", 3, 32, 32, 10, 10},      {"alexnet", 3, 32, 32, 10, 10},   {"resnet18-cifar", 3, 32, 32, 10, 10},
        {"resnet18", 3, 64, 64, 200, 10},     {"fasttext:2000:64", 1, 1, 200, 4, 10},
        {"cnn", 1, 28, 28, 10, 100}, /* the evaluation batch */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_model(&cases[i]);
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
