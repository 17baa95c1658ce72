/* Tiny in-memory fixtures for the module and algorithm tests: a synthetic
 * dataset of c x h x w byte images, a hand-made partition (client k gets the
 * next n_train[k] samples for training, then n_test[k] for testing), a
 * FedAvg-like config, and a few vector helpers. Nothing here reads files. */
#ifndef PFL_TESTS_TINY_H
#define PFL_TESTS_TINY_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"
#include "fl/fl.h"
#include "fl/loop.h"
#include "nn/model.h"
#include "util/err.h"
#include "util/rng.h"

static inline void *tiny_alloc(size_t bytes) {
    void *p = calloc(bytes ? bytes : 1, 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

static inline float *tiny_floats(size_t n) { return tiny_alloc(n * sizeof(float)); }

static inline pfl_rng tiny_rng(uint64_t seed) { return pfl_rng_stream(seed, PFL_RNG_NONE, PFL_RNG_NONE, PFL_RNG_BENCH); }

/* n samples with random pixels and labels i % classes. */
static inline pfl_dataset tiny_dataset(int n, int c, int h, int w, int classes, uint64_t seed) {
    pfl_dataset d;
    memset(&d, 0, sizeof d);
    snprintf(d.name, sizeof d.name, "tiny");
    d.n = n, d.c = c, d.h = h, d.w = w, d.classes = classes;
    const size_t s = (size_t)c * (size_t)h * (size_t)w;
    d.pixels = tiny_alloc((size_t)n * s);
    d.labels = tiny_alloc((size_t)n);
    pfl_rng r = tiny_rng(seed);
    for (size_t i = 0; i < (size_t)n * s; i++) d.pixels[i] = (uint8_t)pfl_rng_below(&r, 256);
    for (int i = 0; i < n; i++) d.labels[i] = (uint8_t)(i % classes);
    return d;
}

static inline void tiny_dataset_free(pfl_dataset *d) {
    free(d->pixels);
    free(d->labels);
    memset(d, 0, sizeof *d);
}

/* Client k: train = the next n_train[k] indices, test = the n_test[k] after. */
static inline pfl_partition tiny_partition(int clients, const int *n_train, const int *n_test) {
    pfl_partition p;
    memset(&p, 0, sizeof p);
    p.num_clients = clients;
    p.clients = tiny_alloc(sizeof(pfl_client_data) * (size_t)clients);
    int total = 0;
    for (int k = 0; k < clients; k++) total += n_train[k] + n_test[k];
    p.storage = tiny_alloc(sizeof(int) * (size_t)(total ? total : 1));
    int next = 0;
    for (int k = 0; k < clients; k++) {
        pfl_client_data *cd = &p.clients[k];
        cd->n_train = n_train[k], cd->n_test = n_test[k];
        cd->train = p.storage + next;
        cd->test = cd->train + n_train[k];
        for (int i = 0; i < n_train[k] + n_test[k]; i++) p.storage[next + i] = next + i;
        next += n_train[k] + n_test[k];
    }
    return p;
}

static inline void tiny_partition_free(pfl_partition *p) {
    free(p->clients);
    free(p->storage);
    memset(p, 0, sizeof *p);
}

static inline pfl_config tiny_config(int clients) {
    pfl_config c;
    memset(&c, 0, sizeof c);
    c.clients = clients;
    c.join = 1.0;
    c.rounds = 1;
    c.epochs = 1;
    c.batch = 4;
    c.eval_batch = 4;
    c.lr = 0.1f;
    c.seed = 7;
    c.threads = 1;
    c.eval_every = 1;
    c.algo.head_layers = 1;
    c.algo.head_epochs = 2;
    c.algo.personal_epochs = 1;
    return c;
}

static inline void tiny_fill(float *a, size_t n, double lo, double hi, pfl_rng *r) {
    for (size_t i = 0; i < n; i++) a[i] = (float)(lo + (hi - lo) * pfl_rng_uniform(r));
}

/* True when a[off..off+n) and b[off..off+n) are bitwise equal. */
static inline int tiny_same(const float *a, const float *b, size_t off, size_t n) {
    return memcmp(a + off, b + off, n * sizeof(float)) == 0;
}

/* Number of elements of [off, off+n) that differ bitwise. */
static inline size_t tiny_count_diff(const float *a, const float *b, size_t off, size_t n) {
    size_t d = 0;
    for (size_t i = off; i < off + n; i++) d += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return d;
}

/* A client's model as it holds it now (stateful runs), copied into out
 * (pfl_client_model_get builds it there, or returns the stored one). */
static inline float *tiny_client_model(pfl_fl *fl, int client, float *out) {
    const float *m = pfl_client_model_get(fl, client, out);
    if (m != out) memcpy(out, m, pfl_model_vector_len(fl->model) * sizeof(float));
    return out;
}

/* A tiny model with BatchNorm on c x h x w images of 3 classes: conv1 (4
 * channels, 3 x 3) - bn1 - ReLU - global average pooling - fc (layers conv1,
 * bn1, fc). */
static inline void tiny_bn_model(pfl_model *m, int c, int h, int w) {
    if (pfl_model_begin(m, "bn-tiny", c, h, w, 3) || pfl_model_conv(m, "conv1", 4, 3, 1, 1, false) ||
        pfl_model_batchnorm(m, "bn1") || pfl_model_relu(m) || pfl_model_avgpool(m) || pfl_model_linear(m, "fc", 3) ||
        pfl_model_finish(m)) {
        fprintf(stderr, "bn-tiny: %s\n", pfl_errmsg());
        exit(2);
    }
}

/* A tiny federation: the "dnn" model on 1x4x4 images of 3 classes, a
 * synthetic dataset and a hand-made partition (client k: n_train[k] train
 * then n_test[k] test samples). tiny_fed_data builds the data, and
 * tiny_fed_start creates the federated state for an algorithm. */
typedef struct {
    pfl_model m;
    pfl_dataset d;
    pfl_partition part;
    pfl_fl fl;
} tiny_fed;

static inline void tiny_fed_data(tiny_fed *f, int clients, const int *n_train, const int *n_test) {
    memset(f, 0, sizeof *f);
    int total = 0;
    for (int k = 0; k < clients; k++) total += n_train[k] + n_test[k];
    if (pfl_model_build(&f->m, "dnn", 1, 4, 4, 3)) exit(2);
    f->d = tiny_dataset(total, 1, 4, 4, 3, 99);
    f->part = tiny_partition(clients, n_train, n_test);
}

static inline void tiny_fed_start(tiny_fed *f, const pfl_algo *algo, const pfl_config *cfg) {
    if (pfl_fl_create(&f->fl, cfg, &f->m, &f->d, &f->part, algo)) {
        fprintf(stderr, "pfl_fl_create(%s): %s\n", algo->name, pfl_errmsg());
        exit(2);
    }
}

static inline void tiny_fed_init(tiny_fed *f, const pfl_algo *algo, pfl_config cfg, const int *n_train,
                                 const int *n_test) {
    tiny_fed_data(f, cfg.clients, n_train, n_test);
    tiny_fed_start(f, algo, &cfg);
}

static inline void tiny_fed_free(tiny_fed *f) {
    pfl_fl_destroy(&f->fl);
    tiny_partition_free(&f->part);
    tiny_dataset_free(&f->d);
}


/* A batch of the data's samples idx[0..n) and a workspace to run the model
 * on it directly (the engine's functions, below the executor). */
typedef struct {
    pfl_workspace *ws;
    float *x;
    uint8_t *y;
} tiny_batch;

static inline tiny_batch tiny_batch_of(const pfl_model *m, const pfl_dataset *d, const int *idx, int n) {
    tiny_batch b = {pfl_workspace_create(m, n), tiny_floats((size_t)n * (size_t)pfl_model_input_size(m)),
                    tiny_alloc((size_t)n)};
    if (!b.ws) exit(2);
    pfl_dataset_gather(d, idx, n, b.x, b.y);
    return b;
}

static inline void tiny_batch_free(tiny_batch *b) {
    pfl_workspace_free(b->ws);
    free(b->x), free(b->y);
}

#endif
