/* The uneven test federation of the wiring tests (tests/test_wiring_*.c):
 * a federation made so that a wrongly wired method cannot pass by luck.
 *
 *  - five clients of unequal sizes (23, 7, 15, 11, 30 training samples;
 *    9, 4, 7, 5, 12 test samples), so a uniform mean is not a mean by
 *    samples and a batch of 5 leaves a smaller last batch;
 *  - four classes, not all on every client (client 1 holds classes 0-1,
 *    client 2 classes 1-3, client 3 classes 2-3; clients 0 and 4 all four,
 *    in unequal shares), so per-class statistics and a missing class matter;
 *  - images a model can learn (each class its own pixel pattern plus noise),
 *    so accuracies move from round to round and the personalized models
 *    differ from the global one;
 *  - three rounds at lr 0.05, --join 0.6 (three of five clients a round,
 *    drawn from the run's SELECT stream), one thread.
 *
 * A wiring test runs a method here through the real round loop
 * (wiring_run), and checks what it did against a small round computed
 * independently in the test: the clients the round selects
 * (pfl_select_clients), local training by pfl_step_run with the step the
 * method's paper says (wiring_train), means computed here in double
 * (wiring_mean), and accuracies of the model the method should score
 * (wiring_accuracy) against the ones the run reported (wiring_round's
 * client_acc). Comparisons are to float rounding (wiring_close), never
 * bitwise across two paths, so no assertion depends on the BLAS kernel. */
#ifndef PFL_TESTS_WIRING_H
#define PFL_TESTS_WIRING_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "check.h"
#include "fl/fl.h"
#include "fl/loop.h"
#include "modules/modules.h"
#include "nn/model.h"
#include "tiny.h"
#include "util/err.h"
#include "util/params.h"

enum { WIRING_CLIENTS = 5, WIRING_CLASSES = 4, WIRING_ROUNDS_MAX = 16 };
static const int wiring_train_n[WIRING_CLIENTS] = {23, 7, 15, 11, 30};
static const int wiring_test_n[WIRING_CLIENTS] = {9, 4, 7, 5, 12};
/* bit c: the client holds class c */
static const unsigned wiring_holds[WIRING_CLIENTS] = {0xF, 0x3, 0xE, 0xC, 0xF};

/* The models a wiring test can run on 1 x 4 x 4 images of 4 classes. */
typedef enum {
    WIRING_DNN,  /* the zoo's "dnn": fc1 16 -> 100, ReLU, fc 100 -> 4 (two layers) */
    WIRING_MLP3, /* fc1 16 -> 12, ReLU, fc2 12 -> 8, ReLU, fc3 8 -> 4: three layers, for head/base splits */
    WIRING_BN,   /* conv1 (4 channels, 3 x 3, padding 1), bn1, ReLU, global average pooling, fc 4 -> 4 */
} wiring_model;

/* The label of a client's i-th sample: its held classes in turn, the first
 * held class twice as often, so the clients' class shares differ. */
static inline uint8_t wiring_label(int client, int i) {
    int held[WIRING_CLASSES], h = 0;
    for (int c = 0; c < WIRING_CLASSES; c++)
        if (wiring_holds[client] >> c & 1u) held[h++] = c;
    const int slot = i % (h + 1);
    return (uint8_t)held[slot == h ? 0 : slot];
}

/* Class c's pattern: each pixel +-1, from a fixed stream; a sample is
 * 128 + 50 pattern + noise of +-45, so classes overlap a little. */
static inline void wiring_data(pfl_dataset *d, pfl_partition *part) {
    int total = 0;
    for (int k = 0; k < WIRING_CLIENTS; k++) total += wiring_train_n[k] + wiring_test_n[k];
    *d = tiny_dataset(total, 1, 4, 4, WIRING_CLASSES, 4242);
    *part = tiny_partition(WIRING_CLIENTS, wiring_train_n, wiring_test_n);
    signed char pattern[WIRING_CLASSES][16];
    pfl_rng r = tiny_rng(77);
    for (int c = 0; c < WIRING_CLASSES; c++)
        for (int p = 0; p < 16; p++) pattern[c][p] = pfl_rng_below(&r, 2) ? 1 : -1;
    for (int k = 0; k < WIRING_CLIENTS; k++) {
        const pfl_client_data *cd = &part->clients[k];
        for (int i = 0; i < cd->n_train + cd->n_test; i++) {
            const int s = cd->train[i]; /* train then test: consecutive (tiny_partition) */
            const uint8_t y = wiring_label(k, i);
            d->labels[s] = y;
            for (int p = 0; p < 16; p++) {
                const int v = 128 + 50 * pattern[y][p] + (int)pfl_rng_below(&r, 91) - 45;
                d->pixels[(size_t)s * 16 + (size_t)p] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
        }
    }
}

static inline void wiring_build_model(pfl_model *m, wiring_model kind) {
    int rc;
    switch (kind) {
    case WIRING_MLP3:
        rc = pfl_model_begin(m, "mlp3-tiny", 1, 4, 4, WIRING_CLASSES) || pfl_model_linear(m, "fc1", 12) ||
             pfl_model_relu(m) || pfl_model_linear(m, "fc2", 8) || pfl_model_relu(m) ||
             pfl_model_linear(m, "fc3", WIRING_CLASSES) || pfl_model_finish(m);
        break;
    case WIRING_BN:
        rc = pfl_model_begin(m, "bn-tiny4", 1, 4, 4, WIRING_CLASSES) || pfl_model_conv(m, "conv1", 4, 3, 1, 1, false) ||
             pfl_model_batchnorm(m, "bn1") || pfl_model_relu(m) || pfl_model_avgpool(m) ||
             pfl_model_linear(m, "fc", WIRING_CLASSES) || pfl_model_finish(m);
        break;
    default: rc = pfl_model_build(m, "dnn", 1, 4, 4, WIRING_CLASSES); break;
    }
    if (rc) {
        fprintf(stderr, "wiring model: %s\n", pfl_errmsg());
        exit(2);
    }
}

/* Writes every default of `algo`'s own flags into cfg->algo (the values
 * `pfl run --algo NAME` starts from; "auto" ones resolved for `model_name`).
 * Module flags keep what the caller set. */
static inline void wiring_algo_defaults(pfl_config *cfg, const pfl_algo *algo, const char *model_name) {
    pfl_param_blocks b = {{NULL}, NULL};
    b.at[PFL_BLOCK_ALGO] = &cfg->algo;
    b.at[PFL_BLOCK_MODULES] = &cfg->modules;
    for (int i = 0; i < algo->num_params; i++) {
        const pfl_param *p = &algo->params[i];
        if (p->block != PFL_BLOCK_ALGO) continue;
        if (pfl_param_reset(p, &b) || (pfl_param_is_auto(p, &b) && pfl_param_resolve_auto(p, &b, model_name))) {
            fprintf(stderr, "wiring: %s --%s: %s\n", algo->name, p->name, pfl_errmsg());
            exit(2);
        }
    }
}

/* Sets `algo`'s flag --name to v in cfg (its own flags and the modules'),
 * as `pfl run --name v` would; exits on a flag the method does not have. */
static inline void wiring_set(pfl_config *cfg, const pfl_algo *algo, const char *name, double v) {
    pfl_param_blocks b = {{NULL}, NULL};
    b.at[PFL_BLOCK_ALGO] = &cfg->algo;
    b.at[PFL_BLOCK_MODULES] = &cfg->modules;
    for (int i = 0; i < algo->num_params; i++)
        if (!strcmp(algo->params[i].name, name)) {
            if (pfl_param_set_number(&algo->params[i], &b, v)) {
                fprintf(stderr, "wiring: %s --%s %g: %s\n", algo->name, name, v, pfl_errmsg());
                exit(2);
            }
            return;
        }
    fprintf(stderr, "wiring: %s has no flag --%s\n", algo->name, name);
    exit(2);
}

/* The run's configuration before a test changes it: the method's own
 * defaults, five clients, three a round, 3 rounds of 1 epoch at lr 0.05,
 * batch 5, evaluated every round, one thread. */
static inline pfl_config wiring_config(const pfl_algo *algo, wiring_model kind) {
    pfl_config c = tiny_config(WIRING_CLIENTS);
    c.join = 0.6, c.rounds = 3, c.epochs = 1, c.batch = 5, c.eval_batch = 7, c.lr = 0.05f, c.seed = 13;
    c.threads = 1, c.eval_every = 1;
    wiring_algo_defaults(&c, algo, kind == WIRING_DNN ? "dnn" : kind == WIRING_MLP3 ? "mlp3-tiny" : "bn-tiny4");
    return c;
}

/* What the round loop reported after round r (0: before training). */
typedef struct {
    bool seen, evaluated;
    double local_acc, global_acc, train_loss;
    double client_acc[WIRING_CLIENTS];
    int selected;
} wiring_round;

typedef struct wiring_fed wiring_fed;
/* Called after round `round`'s report (0: the evaluation before training);
 * return 0 to go on, 1 to stop, -1 to fail the run. */
typedef int (*wiring_hook)(wiring_fed *w, int round, void *ctx);

struct wiring_fed {
    tiny_fed f;         /* f.fl is the run */
    wiring_model kind;
    size_t P, V;        /* parameters, whole vector (parameters and running statistics) */
    wiring_round rounds[WIRING_ROUNDS_MAX + 1];
    wiring_hook hook;
    void *ctx;
};

static inline void wiring_init(wiring_fed *w, const pfl_algo *algo, const pfl_config *cfg, wiring_model kind) {
    memset(w, 0, sizeof *w);
    w->kind = kind;
    wiring_build_model(&w->f.m, kind);
    wiring_data(&w->f.d, &w->f.part);
    if (cfg->rounds > WIRING_ROUNDS_MAX) {
        fprintf(stderr, "wiring: at most %d rounds\n", WIRING_ROUNDS_MAX);
        exit(2);
    }
    tiny_fed_start(&w->f, algo, cfg);
    w->P = w->f.fl.model->num_params;
    w->V = pfl_model_vector_len(w->f.fl.model);
}

static inline void wiring_free(wiring_fed *w) { tiny_fed_free(&w->f); }

static inline void wiring_report(const pfl_round_metrics *m, const pfl_fl *fl, void *ctx) {
    (void)fl;
    wiring_fed *w = ctx;
    if (m->round < 0 || m->round > WIRING_ROUNDS_MAX) return;
    wiring_round *r = &w->rounds[m->round];
    r->seen = true, r->evaluated = m->evaluated;
    r->local_acc = m->local_acc, r->global_acc = m->global_acc, r->train_loss = m->train_loss;
    r->selected = m->selected;
    for (int k = 0; k < WIRING_CLIENTS; k++) r->client_acc[k] = m->client_acc ? m->client_acc[k] : NAN;
}

static inline int wiring_after(pfl_fl *fl, void *ctx) {
    wiring_fed *w = ctx;
    return w->hook ? w->hook(w, fl->round, w->ctx) : 0;
}

/* Runs every round, calling hook (may be NULL) after each; 0, or -1 with
 * the run's message printed. */
static inline int wiring_run(wiring_fed *w, wiring_hook hook, void *ctx) {
    w->hook = hook, w->ctx = ctx;
    const int rc = pfl_fl_run_with(&w->f.fl, wiring_report, wiring_after, w);
    if (rc) fprintf(stderr, "wiring run (%s): %s\n", w->f.fl.algo->name, pfl_errmsg());
    return rc;
}

/* The clients round r selects, ascending (the round loop's draw); count. */
static inline int wiring_selected(const wiring_fed *w, int round, int *out) {
    return pfl_select_clients(&w->f.fl.cfg, round, out);
}

/* Trains `model` in place as round `round`'s local training of `client`
 * with step s (its stream keyed by that round and client, as the run's),
 * on worker 0; call it between rounds (from a hook), when no client trains. */
static inline void wiring_train(wiring_fed *w, int client, int round, float *model, pfl_step *s) {
    pfl_train_stats st;
    memset(&st, 0, sizeof st);
    s->round = round;
    pfl_step_run(&w->f.fl, client, &w->f.fl.workers[0], model, s, &st);
}

/* FedAvg's step for round `round` (--epochs, --lr with its decay). */
static inline pfl_step wiring_default_step(wiring_fed *w, int round) {
    const int keep = w->f.fl.round;
    w->f.fl.round = round;
    pfl_step s = pfl_step_default(&w->f.fl);
    w->f.fl.round = keep;
    s.round = round;
    return s;
}

/* out[off..off+len) = sum_k weight[k] vecs[k][..] / sum_k weight[k], in double. */
static inline void wiring_mean(float *out, float *const *vecs, const double *weight, int n, size_t off, size_t len) {
    double total = 0;
    for (int k = 0; k < n; k++) total += weight[k];
    for (size_t j = off; j < off + len; j++) {
        double s = 0;
        for (int k = 0; k < n; k++) s += weight[k] * (double)vecs[k][j];
        out[j] = (float)(s / total);
    }
}

/* The training-sample counts of clients[0..n) as weights; or 1 each. */
static inline void wiring_sample_weights(const int *clients, int n, double *weight) {
    for (int k = 0; k < n; k++) weight[k] = wiring_train_n[clients[k]];
}
static inline void wiring_uniform_weights(int n, double *weight) {
    for (int k = 0; k < n; k++) weight[k] = 1.0;
}

/* The largest |a - b| over [off, off + n). */
static inline double wiring_max_diff(const float *a, const float *b, size_t off, size_t n) {
    double m = 0;
    for (size_t i = off; i < off + n; i++) {
        const double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d; /* NaN wins */
    }
    return m;
}

/* True when a and b agree on [off, off + n) to float rounding of a few
 * steps (1e-5 relative to the larger of 1 and |b|). */
static inline bool wiring_close(const float *a, const float *b, size_t off, size_t n) {
    for (size_t i = off; i < off + n; i++)
        if (!check_close(a[i], b[i], 1e-5)) return false;
    return true;
}

/* True when a and b differ somewhere on [off, off + n) by more than rounding. */
static inline bool wiring_differ(const float *a, const float *b, size_t off, size_t n) {
    return wiring_max_diff(a, b, off, n) > 1e-4;
}

/* Accuracy of `params` on the client's test split (personal: through the
 * method's personal_correct, as a personalized model is counted). */
static inline double wiring_accuracy(wiring_fed *w, const float *params, int client, bool personal) {
    pfl_fl *fl = &w->f.fl;
    const pfl_client_data *cd = &fl->part->clients[client];
    const long c = personal ? pfl_count_correct_personal(&fl->workers[0], fl, params, cd->test, cd->n_test)
                            : pfl_count_correct_on(&fl->workers[0], fl, params, cd->test, cd->n_test);
    return (double)c / (double)cd->n_test;
}

/* The client's model as it holds it now (stateful runs), into out. */
static inline float *wiring_client_model(wiring_fed *w, int client, float *out) {
    return tiny_client_model(&w->f.fl, client, out);
}

/* A copy of the global model (whole vector), for a hook to keep. */
static inline float *wiring_copy_global(const wiring_fed *w) {
    float *g = tiny_floats(w->V);
    memcpy(g, w->f.fl.global, w->V * sizeof(float));
    return g;
}

/* The range of layer l's parameters in the model vector. */
static inline size_t wiring_layer_off(const wiring_fed *w, int l) { return w->f.fl.model->layers[l].offset; }
static inline size_t wiring_layer_len(const wiring_fed *w, int l) { return w->f.fl.model->layers[l].length; }

#endif
