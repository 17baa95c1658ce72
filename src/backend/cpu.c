/* The CPU backend: pfl's own engine (src/nn) on host memory. Buffers are
 * host vectors, views are the host vectors themselves, and every operation
 * is the function of src/nn that the round loop called before there were
 * backends, in the same order, so the numbers are those bits. */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "nn/layers.h"
#include "util/err.h"

typedef struct {
    pfl_workspace *ws;
    float *x;            /* the gathered batch (max_batch x input size) */
    uint8_t *y;          /* its labels */
    const float *inputs; /* the batch the next forward reads: x, or what pfl_exec_load gave */
    const uint8_t *labels;
} cpu_exec;

static cpu_exec *impl(pfl_exec *x) { return x->impl; }

static int cpu_create(pfl_exec *x) {
    cpu_exec *c = pfl_calloc(1, sizeof *c);
    if (!c) return -1;
    x->impl = c;
    const size_t sample = (size_t)pfl_model_input_size(x->model);
    if (!(c->ws = pfl_workspace_create(x->model, x->max_batch)) ||
        !(c->x = pfl_malloc((size_t)x->max_batch * sample * sizeof(float))) ||
        !(c->y = pfl_malloc((size_t)x->max_batch))) {
        pfl_workspace_free(c->ws);
        free(c->x), free(c->y), free(c);
        return pfl_err("out of memory for a worker's workspace (model %s, batch %d)", x->model->name, x->max_batch);
    }
    return 0;
}

static void cpu_destroy(pfl_exec *x) {
    cpu_exec *c = impl(x);
    pfl_workspace_free(c->ws);
    free(c->x), free(c->y), free(c);
}

static int cpu_alloc(pfl_exec *x, pfl_xbuf *b, size_t n) {
    (void)x;
    memset(b, 0, sizeof *b);
    if (!(b->host = pfl_malloc((n ? n : 1) * sizeof(float)))) return -1;
    b->n = n, b->owned = true;
    return 0;
}

static void cpu_free_buf(pfl_exec *x, pfl_xbuf *b) {
    (void)x;
    free(b->host);
}

static int cpu_view(pfl_exec *x, pfl_xbuf *b, float *host, size_t n, bool writeback) {
    (void)x;
    *b = (pfl_xbuf){.host = host, .n = n, .writeback = writeback, .origin = host};
    return 0;
}

static void cpu_unview(pfl_exec *x, pfl_xbuf *b) { (void)x, (void)b; }

static void cpu_write(pfl_exec *x, pfl_xbuf *b, size_t off, const float *src, size_t n) {
    (void)x;
    if (b->host + off != src) memcpy(b->host + off, src, n * sizeof(float));
}

static void cpu_read(pfl_exec *x, const pfl_xbuf *b, size_t off, float *dst, size_t n) {
    (void)x;
    if (b->host + off != dst) memcpy(dst, b->host + off, n * sizeof(float));
}

static void cpu_zero(pfl_exec *x, pfl_xbuf *b, size_t off, size_t n) {
    (void)x;
    memset(b->host + off, 0, n * sizeof(float));
}

static void cpu_gather(pfl_exec *x, const int *idx, int B) {
    cpu_exec *c = impl(x);
    pfl_dataset_gather(x->data, idx, B, c->x, c->y);
    c->inputs = c->x, c->labels = c->y;
}

static void cpu_load(pfl_exec *x, const float *inputs, const uint8_t *labels, int B) {
    (void)B;
    cpu_exec *c = impl(x);
    c->inputs = inputs, c->labels = labels;
}

static const uint8_t *cpu_labels(pfl_exec *x) { return impl(x)->labels; }

static void cpu_forward(pfl_exec *x, const pfl_xbuf *params, bool train, pfl_rng *rng) {
    cpu_exec *c = impl(x);
    pfl_forward(c->ws, params->host, c->inputs, x->batch, train, rng);
}

static float cpu_xent(pfl_exec *x, const float *offset) {
    cpu_exec *c = impl(x);
    return pfl_workspace_xent(c->ws, c->labels, offset);
}

static int cpu_correct(pfl_exec *x) { return pfl_count_correct(impl(x)->ws, impl(x)->labels, x->batch); }

static const float *cpu_tap(pfl_exec *x, int layer) {
    const pfl_workspace *ws = impl(x)->ws;
    return layer >= x->model->num_layers ? pfl_workspace_logits(ws) : pfl_workspace_layer_input(ws, layer);
}

static void cpu_read_tap(pfl_exec *x, int layer, float *dst) {
    const long n = layer >= x->model->num_layers ? x->model->classes : pfl_model_layer_input_size(x->model, layer);
    memcpy(dst, cpu_tap(x, layer), sizeof(float) * (size_t)x->batch * (size_t)n);
}

static void cpu_update_stats(pfl_exec *x, pfl_xbuf *vector) { pfl_update_running_stats(impl(x)->ws, vector->host); }

static void cpu_backward(pfl_exec *x, const pfl_xbuf *params, pfl_xbuf *grads, int lowest_layer, float ce_weight,
                         const pfl_xinjection *inj, int n_inj) {
    cpu_exec *c = impl(x);
    int layers[PFL_MAX_INJECTIONS];
    const float *d[PFL_MAX_INJECTIONS];
    const int n = n_inj < PFL_MAX_INJECTIONS ? n_inj : PFL_MAX_INJECTIONS;
    for (int k = 0; k < n; k++) layers[k] = inj[k].layer, d[k] = inj[k].d;
    pfl_backward_terms(c->ws, params->host, c->labels, grads->host, lowest_layer, ce_weight, layers, d, n);
}

static int cpu_backward_sgd(pfl_exec *x, pfl_xbuf *params, float lr) {
    cpu_exec *c = impl(x);
    return pfl_backward_sgd(c->ws, params->host, c->labels, lr);
}

static void cpu_sgd(pfl_exec *x, pfl_xbuf *params, pfl_xbuf *grads, pfl_xbuf *velocity, size_t off, size_t n,
                    const pfl_sgd *opt) {
    (void)x;
    pfl_sgd_step(params->host + off, grads->host + off, velocity && velocity->host ? velocity->host + off : NULL, n,
                 opt);
}

static void cpu_sgd_rows(pfl_exec *x, pfl_xbuf *params, pfl_xbuf *grads, int layer, const pfl_sgd *opt) {
    const int *rows;
    const int n = pfl_workspace_embedding_rows(impl(x)->ws, &rows);
    const pfl_model *m = x->model;
    const size_t dim = (size_t)m->ops[0].out_c, off = m->layers[layer].offset;
    for (int k = 0; k < n; k++) {
        const size_t at = off + (size_t)rows[k] * dim;
        pfl_sgd_step(params->host + at, grads->host + at, NULL, dim, opt);
        memset(grads->host + at, 0, sizeof(float) * dim);
    }
}

static void cpu_prox(pfl_exec *x, pfl_xbuf *grads, const pfl_xbuf *params, const pfl_xbuf *anchor, float mu,
                     size_t off, size_t n) {
    (void)x;
    float *g = grads->host + off;
    const float *p = params->host + off, *a = anchor->host + off;
    for (size_t i = 0; i < n; i++) g[i] += mu * (p[i] - a[i]);
}

static double cpu_sumsq(pfl_exec *x, const pfl_xbuf *b, size_t off, size_t n) {
    (void)x;
    const float *g = b->host + off;
    double sq = 0.0;
    for (size_t j = 0; j < n; j++) sq += (double)g[j] * g[j];
    return sq;
}

const pfl_backend pfl_backend_cpu = {
    .name = "cpu",
    .create = cpu_create,
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free_buf = cpu_free_buf,
    .view = cpu_view,
    .unview = cpu_unview,
    .write = cpu_write,
    .read = cpu_read,
    .zero = cpu_zero,
    .gather = cpu_gather,
    .load = cpu_load,
    .labels = cpu_labels,
    .forward = cpu_forward,
    .xent = cpu_xent,
    .correct = cpu_correct,
    .tap = cpu_tap,
    .read_tap = cpu_read_tap,
    .update_stats = cpu_update_stats,
    .backward = cpu_backward,
    .backward_sgd = cpu_backward_sgd,
    .sgd = cpu_sgd,
    .sgd_rows = cpu_sgd_rows,
    .prox = cpu_prox,
    .sumsq = cpu_sumsq,
};
