/* The executor's dispatch: each pfl_exec_* function calls its backend's. */
#include "backend/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

static const pfl_backend *const backends[] = {&pfl_backend_cpu,
#ifdef PFL_CUDA
                                               &pfl_backend_cuda,
#endif
                                               NULL};

const char *pfl_backend_names(void) {
    static char names[64];
    names[0] = '\0';
    for (int i = 0; backends[i]; i++) {
        strncat(names, i ? ", " : "", sizeof names - strlen(names) - 1);
        strncat(names, backends[i]->name, sizeof names - strlen(names) - 1);
    }
    return names;
}

const pfl_backend *pfl_backend_find(const char *name) {
    for (int i = 0; backends[i]; i++)
        if (!strcmp(backends[i]->name, name)) return backends[i];
    if (!strcmp(name, "cuda"))
        pfl_err("--device cuda: this pfl was built without the CUDA backend (build it where nvcc is on PATH: make)");
    else
        pfl_err("--device %s: not a backend of this pfl (it has: %s)", name, pfl_backend_names());
    return NULL;
}


/* A stand-in host vector handed to code that asked a device executor for
 * host memory (pfl_exec_host); freed with the executor. */
struct pfl_exec_mirror {
    struct pfl_exec_mirror *next;
    float data[];
};

void pfl_exec_refuse(pfl_exec *x, const char *why) {
    if (!x->refused[0]) snprintf(x->refused, sizeof x->refused, "%s", why);
}

float *pfl_exec_host(const pfl_xbuf *b) {
    if (b->host || !b->exec) return b->host;
    pfl_exec *x = b->exec;
    pfl_exec_refuse(x, "it computes on host memory with loops of its own");
    struct pfl_exec_mirror *m = calloc(1, sizeof *m + sizeof(float) * (b->n ? b->n : 1));
    if (!m) abort(); /* nothing sensible is left to do without a stand-in */
    m->next = x->mirrors, x->mirrors = m;
    return m->data;
}

static bool tf32_on;
void pfl_backend_set_tf32(bool on) { tf32_on = on; }
bool pfl_backend_tf32(void) { return tf32_on; }

pfl_exec *pfl_exec_create(const pfl_backend *be, const pfl_model *m, const pfl_dataset *data, int max_batch) {
    if (be->available && be->available()) return NULL;
    pfl_exec *x = pfl_calloc(1, sizeof *x);
    if (!x) return NULL;
    x->be = be, x->model = m, x->data = data, x->max_batch = max_batch, x->tf32 = tf32_on;
    if (be->create(x)) {
        free(x);
        return NULL;
    }
    return x;
}

void pfl_exec_destroy(pfl_exec *x) {
    if (!x) return;
    x->be->destroy(x);
    while (x->mirrors) {
        struct pfl_exec_mirror *next = x->mirrors->next;
        free(x->mirrors);
        x->mirrors = next;
    }
    free(x);
}

int pfl_exec_alloc(pfl_exec *x, pfl_xbuf *b, size_t n) { return x->be->alloc(x, b, n); }
void pfl_exec_free_buf(pfl_exec *x, pfl_xbuf *b) {
    if (b->owned) x->be->free_buf(x, b);
    memset(b, 0, sizeof *b);
}

pfl_xbuf pfl_exec_view(pfl_exec *x, float *host, size_t n, bool writeback) {
    pfl_xbuf b = {0};
    if (x->be->view(x, &b, host, n, writeback)) memset(&b, 0, sizeof b);
    return b;
}

pfl_xbuf pfl_exec_view_const(pfl_exec *x, const float *host, size_t n) {
    /* not written through: the cast only lets one struct type carry both kinds of view */
    return pfl_exec_view(x, (float *)(uintptr_t)host, n, false);
}

void pfl_exec_unview(pfl_exec *x, pfl_xbuf *b) {
    x->be->unview(x, b);
    memset(b, 0, sizeof *b);
}

void pfl_exec_write(pfl_exec *x, pfl_xbuf *b, size_t off, const float *src, size_t n) { x->be->write(x, b, off, src, n); }
void pfl_exec_read(pfl_exec *x, const pfl_xbuf *b, size_t off, float *dst, size_t n) { x->be->read(x, b, off, dst, n); }
void pfl_exec_zero(pfl_exec *x, pfl_xbuf *b, size_t off, size_t n) { x->be->zero(x, b, off, n); }

/* A batch larger than the executor was made for is a bug of its caller
 * (a method's owned batches must gather in parts of at most max_batch):
 * stop at once rather than write past the buffers. */
static void check_batch(const pfl_exec *x, int B) {
    if (B >= 0 && B <= x->max_batch) return;
    fprintf(stderr, "pfl: internal error: a batch of %d samples for an executor of at most %d\n", B, x->max_batch);
    abort();
}

void pfl_exec_gather(pfl_exec *x, const int *idx, int B) {
    check_batch(x, B);
    x->batch = B;
    x->be->gather(x, idx, B);
}

void pfl_exec_load(pfl_exec *x, const float *inputs, const uint8_t *labels, int B) {
    check_batch(x, B);
    x->batch = B;
    x->be->load(x, inputs, labels, B);
}

const uint8_t *pfl_exec_labels(pfl_exec *x) { return x->be->labels(x); }

void pfl_exec_forward(pfl_exec *x, const pfl_xbuf *params, bool train, pfl_rng *rng) {
    x->be->forward(x, params, train, rng);
}

float pfl_exec_xent(pfl_exec *x, const float *offset) { return x->be->xent(x, offset); }
int pfl_exec_correct(pfl_exec *x) { return x->be->correct(x); }

const float *pfl_exec_features(pfl_exec *x, int layer, float *scratch) {
    const float *f = x->be->tap(x, layer);
    if (f) return f;
    x->be->read_tap(x, layer, scratch);
    return scratch;
}

void pfl_exec_update_stats(pfl_exec *x, pfl_xbuf *vector) { x->be->update_stats(x, vector); }

void pfl_exec_backward(pfl_exec *x, const pfl_xbuf *params, pfl_xbuf *grads, int lowest_layer, float ce_weight,
                       const pfl_xinjection *inj, int n_inj) {
    x->be->backward(x, params, grads, lowest_layer, ce_weight, inj, n_inj);
}

bool pfl_exec_can_fuse(const pfl_exec *x) { return x->be->backward_sgd && pfl_model_sgd_fusable(x->model); }
int pfl_exec_backward_sgd(pfl_exec *x, pfl_xbuf *params, float lr) { return x->be->backward_sgd(x, params, lr); }

void pfl_exec_sgd(pfl_exec *x, pfl_xbuf *params, pfl_xbuf *grads, pfl_xbuf *velocity, size_t off, size_t n,
                  const pfl_sgd *opt) {
    x->be->sgd(x, params, grads, velocity, off, n, opt);
}

void pfl_exec_sgd_rows(pfl_exec *x, pfl_xbuf *params, pfl_xbuf *grads, int layer, const pfl_sgd *opt) {
    x->be->sgd_rows(x, params, grads, layer, opt);
}

void pfl_exec_prox(pfl_exec *x, pfl_xbuf *grads, const pfl_xbuf *params, const pfl_xbuf *anchor, float mu, size_t off,
                   size_t n) {
    x->be->prox(x, grads, params, anchor, mu, off, n);
}

double pfl_exec_sumsq(pfl_exec *x, const pfl_xbuf *b, size_t off, size_t n) { return x->be->sumsq(x, b, off, n); }
