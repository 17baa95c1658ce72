/* The wiring of SCAFFOLD, FedDyn, FedLC, FedNTD, MOON, FedGen, FedCross, FML
 * and FedKD on the uneven federation of tests/wiring.h (issue 40).
 *
 * Each test runs the method through the real round loop (four rounds at lr
 * 0.05, three of five clients a round, clients of 23, 7, 15, 11 and 30
 * samples, a class missing on three of them, every hyper-parameter of the
 * method away from 0 and 1) and, after every round, recomputes the next one
 * here from what the method's paper (and PFLlib's reading, docs/
 * algorithms.md) says, with the engine's pieces: the local step
 * (pfl_step_default plus the terms the method declares, written here),
 * means in double with the weights the method names, the server's state
 * (SCAFFOLD's controls, FedDyn's h and linear terms, MOON's previous models,
 * FedGen's generator and its Adam steps, FedCross's middleware models) kept
 * by the test itself, and the accuracy of the model the method scores,
 * against what the run reported for every client. FML and FedKD train
 * their two models by their own batch (its math is checked against central
 * differences in tests/test_mutual.c), so their rounds are replayed through
 * the method's local_train from the models the wiring says a client starts
 * from (the meme or mentee from the global model, the personal model from
 * what the client kept; FedKD's W rows are written before the run, so the
 * replay can put a client's back), and the rest is recomputed here: the
 * uniform mean, FedKD's SVD truncation of each upload and of the mean at
 * the round's energy (pfl_fedkd_truncate, checked in tests/test_mutual.c).
 *
 * Why a wrong wiring fails: the clients' sizes differ (a uniform mean is not
 * a mean by samples; a client's number of batches K differs, so a slot index
 * taken for a client index gives another K), a client comes back in a later
 * round (what it kept matters), the hyper-parameters are not 0 or 1 (one
 * ignored or replaced by 1 changes the numbers), and the personalized models
 * differ from the global one (scoring the wrong one shows). Comparisons are
 * to float rounding (wiring_close), never bitwise across two paths. */
#include "wiring.h"

#include "nn/layers.h"

enum { TRAD_ROUNDS = 4 };

/* ---- what every test shares ---- */

/* One round as the test computes it: the selected clients, the global model
 * the round starts from, what each selected client trains, the global model
 * the round should produce. */
typedef struct {
    int n, sel[WIRING_CLIENTS];
    float *start, *expected;
    float *trained[WIRING_CLIENTS];
} trad_round;

static void trad_round_make(trad_round *t, const wiring_fed *w) {
    memset(t, 0, sizeof *t);
    t->start = tiny_floats(w->V), t->expected = tiny_floats(w->V);
    for (int k = 0; k < WIRING_CLIENTS; k++) t->trained[k] = tiny_floats(w->V);
}

static void trad_round_free(trad_round *t) {
    free(t->start), free(t->expected);
    for (int k = 0; k < WIRING_CLIENTS; k++) free(t->trained[k]);
}

/* The clients of round r, and each one's copy of the global model as it stands. */
static void trad_begin(wiring_fed *w, trad_round *t, int r) {
    t->n = wiring_selected(w, r, t->sel);
    memcpy(t->start, w->f.fl.global, w->V * sizeof(float));
    for (int k = 0; k < t->n; k++) memcpy(t->trained[k], t->start, w->V * sizeof(float));
}

/* The expected global model: the mean of the trained models, by samples or uniform. */
static void trad_mean(const wiring_fed *w, trad_round *t, bool by_samples) {
    double weight[WIRING_CLIENTS];
    if (by_samples) wiring_sample_weights(t->sel, t->n, weight);
    else wiring_uniform_weights(t->n, weight);
    memcpy(t->expected, t->start, w->V * sizeof(float));
    wiring_mean(t->expected, t->trained, weight, t->n, 0, w->V);
}

static bool trad_global_is(wiring_fed *w, const float *expected, const char *what, int round) {
    const bool ok = wiring_close(w->f.fl.global, expected, 0, w->V);
    CHECK(ok, "%s round %d: the global model is not the expected one (max diff %g)", what, round,
          wiring_max_diff(w->f.fl.global, expected, 0, w->V));
    return ok;
}

/* What the run scored for every client is the accuracy of models[c] (NULL: the global model). */
static void trad_scored(wiring_fed *w, int round, const char *what, float *const *models) {
    const wiring_round *m = &w->rounds[round];
    CHECK(m->evaluated, "%s round %d: not evaluated", what, round);
    for (int c = 0; c < WIRING_CLIENTS; c++) {
        const double acc = wiring_accuracy(w, models ? models[c] : w->f.fl.global, c, true);
        CHECK(fabs(m->client_acc[c] - acc) < 1e-12, "%s round %d client %d: scored %g, the method's model %g", what,
              round, c, m->client_acc[c], acc);
    }
}

/* The number of batches a client's round makes: its epochs of ceil(n / batch). */
static long trad_batches(const wiring_fed *w, int client) {
    const pfl_config *c = &w->f.fl.cfg;
    return (long)c->epochs * ((wiring_train_n[client] + c->batch - 1) / c->batch);
}

/* A gradient term adding a fixed vector (ctx: P floats). */
static void add_vector(void *ctx, const pfl_model *m, const float *params, float *grads) {
    (void)params;
    const float *v = ctx;
    for (size_t j = 0; j < m->num_params; j++) grads[j] += v[j];
}

static bool any_nonzero(const float *v, size_t n) {
    for (size_t j = 0; j < n; j++)
        if (v[j] != 0.0f) return true;
    return false;
}

/* Runs the test's run to its end, every round checked: the hook's count. */
static void trad_run(wiring_fed *w, wiring_hook hook, void *ref, const int *checked, const char *what) {
    CHECK(wiring_run(w, hook, ref) == 0, "%s: the run failed", what);
    CHECK(*checked == w->f.fl.cfg.rounds, "%s: %d of %d rounds checked", what, *checked, w->f.fl.cfg.rounds);
}

/* A client picked in two rounds, so what it kept was used (the test's draw must have one). */
static bool trad_some_client_returns(wiring_fed *w) {
    int times[WIRING_CLIENTS] = {0};
    for (int r = 1; r <= w->f.fl.cfg.rounds; r++) {
        int sel[WIRING_CLIENTS];
        const int n = wiring_selected(w, r, sel);
        for (int k = 0; k < n; k++) times[sel[k]]++;
    }
    for (int c = 0; c < WIRING_CLIENTS; c++)
        if (times[c] >= 2) return true;
    return false;
}

static pfl_config trad_config(const pfl_algo *algo) {
    pfl_config cfg = wiring_config(algo, WIRING_DNN);
    cfg.rounds = TRAD_ROUNDS;
    return cfg;
}

/* ---- SCAFFOLD: y <- y - lr (g - c_i + c); c_i+ = c_i - c + (x - y) / (K lr); the server
 * x <- x + eta_g (uniform mean y - x), c <- c + (1/N) sum (c_i+ - c_i) ---- */

typedef struct {
    trad_round t;
    float *c, *ci[WIRING_CLIENTS], *ci_new[WIRING_CLIENTS], *c_new, *d;
    int checked;
} scaffold_ref;

static void scaffold_expect(wiring_fed *w, scaffold_ref *ref, int r) {
    const size_t P = w->P;
    const double eta_g = w->f.fl.cfg.algo.server_lr;
    trad_begin(w, &ref->t, r);
    memcpy(ref->c_new, ref->c, P * sizeof(float));
    for (int k = 0; k < WIRING_CLIENTS; k++) memcpy(ref->ci_new[k], ref->ci[k], P * sizeof(float));
    for (int k = 0; k < ref->t.n; k++) {
        const int client = ref->t.sel[k];
        pfl_step s = wiring_default_step(w, r);
        for (size_t j = 0; j < P; j++) ref->d[j] = ref->c[j] - ref->ci[client][j];
        if (any_nonzero(ref->d, P)) pfl_step_add_grad(&s, add_vector, ref->d);
        float *y = ref->t.trained[k];
        wiring_train(w, client, r, y, &s);
        const double inv = 1.0 / ((double)trad_batches(w, client) * s.opt.lr);
        for (size_t j = 0; j < P; j++) {
            const double change = ((double)ref->t.start[j] - y[j]) * inv - ref->c[j]; /* c_i+ - c_i */
            ref->ci_new[client][j] = (float)(ref->ci[client][j] + change);
            ref->c_new[j] = (float)(ref->c_new[j] + change / WIRING_CLIENTS);
        }
    }
    trad_mean(w, &ref->t, false);
    for (size_t j = 0; j < P; j++)
        ref->t.expected[j] = (float)(ref->t.start[j] + eta_g * ((double)ref->t.expected[j] - ref->t.start[j]));
}

static int scaffold_hook(wiring_fed *w, int round, void *ctx) {
    scaffold_ref *ref = ctx;
    if (round > 0) {
        trad_global_is(w, ref->t.expected, "scaffold", round);
        CHECK(wiring_close(pfl_scaffold_control(&w->f.fl, -1), ref->c_new, 0, w->P),
              "scaffold round %d: the server's control c (max diff %g)", round,
              wiring_max_diff(pfl_scaffold_control(&w->f.fl, -1), ref->c_new, 0, w->P));
        for (int k = 0; k < WIRING_CLIENTS; k++)
            CHECK(wiring_close(pfl_scaffold_control(&w->f.fl, k), ref->ci_new[k], 0, w->P),
                  "scaffold round %d: client %d's control c_i (max diff %g)", round, k,
                  wiring_max_diff(pfl_scaffold_control(&w->f.fl, k), ref->ci_new[k], 0, w->P));
        memcpy(ref->c, ref->c_new, w->P * sizeof(float));
        for (int k = 0; k < WIRING_CLIENTS; k++) memcpy(ref->ci[k], ref->ci_new[k], w->P * sizeof(float));
        ref->checked++;
    }
    trad_scored(w, round, "scaffold", NULL);
    if (round < w->f.fl.cfg.rounds) scaffold_expect(w, ref, round + 1);
    return 0;
}

static void test_scaffold(void) {
    pfl_config cfg = trad_config(&pfl_algo_scaffold);
    wiring_set(&cfg, &pfl_algo_scaffold, "server-lr", 0.7);
    wiring_fed w;
    wiring_init(&w, &pfl_algo_scaffold, &cfg, WIRING_DNN);
    CHECK(w.P == w.V && trad_some_client_returns(&w), "scaffold: a client trains twice, no running statistics");
    scaffold_ref ref;
    memset(&ref, 0, sizeof ref);
    trad_round_make(&ref.t, &w);
    ref.c = tiny_floats(w.P), ref.c_new = tiny_floats(w.P), ref.d = tiny_floats(w.P);
    for (int k = 0; k < WIRING_CLIENTS; k++) ref.ci[k] = tiny_floats(w.P), ref.ci_new[k] = tiny_floats(w.P);
    trad_run(&w, scaffold_hook, &ref, &ref.checked, "scaffold");
    CHECK(any_nonzero(ref.c, w.P), "scaffold: the server's control moved");
    for (int k = 0; k < WIRING_CLIENTS; k++) free(ref.ci[k]), free(ref.ci_new[k]);
    free(ref.c), free(ref.c_new), free(ref.d);
    trad_round_free(&ref.t);
    wiring_free(&w);
}

/* ---- FedDyn: client k minimizes L_k(w) - <grad_k, w> + alpha/2 ||w - x|| (PFLlib's norm; the paper's
 * square under --dyn-penalty squared), grad_k <- grad_k - alpha (w_k - x); the server
 * h <- h - alpha/N sum (w_k - x), x <- uniform mean w_k - h / alpha ---- */

typedef struct {
    float alpha;
    const float *anchor;
} norm_pull;

/* The gradient of alpha/2 ||w - anchor||: alpha/2 (w - anchor) / ||w - anchor||, none at w = anchor. */
static void add_norm_pull(void *ctx, const pfl_model *m, const float *params, float *grads) {
    const norm_pull *p = ctx;
    double sq = 0.0;
    for (size_t j = 0; j < m->num_params; j++) {
        const double d = (double)params[j] - p->anchor[j];
        sq += d * d;
    }
    if (sq == 0.0) return;
    for (size_t j = 0; j < m->num_params; j++)
        grads[j] += (float)(p->alpha / 2.0 / sqrt(sq) * ((double)params[j] - p->anchor[j]));
}

/* A gradient term subtracting a fixed vector: the linear term -<g, w>. */
static void subtract_vector(void *ctx, const pfl_model *m, const float *params, float *grads) {
    (void)params;
    const float *v = ctx;
    for (size_t j = 0; j < m->num_params; j++) grads[j] -= v[j];
}

typedef struct {
    trad_round t;
    bool squared;
    float *h, *h_new, *g[WIRING_CLIENTS], *g_new[WIRING_CLIENTS];
    int checked;
} feddyn_ref;

static void feddyn_expect(wiring_fed *w, feddyn_ref *ref, int r) {
    const size_t P = w->P;
    const float alpha = w->f.fl.cfg.algo.dyn_alpha;
    trad_begin(w, &ref->t, r);
    memcpy(ref->h_new, ref->h, P * sizeof(float));
    for (int k = 0; k < WIRING_CLIENTS; k++) memcpy(ref->g_new[k], ref->g[k], P * sizeof(float));
    double *drift = calloc(P, sizeof(double));
    for (int k = 0; k < ref->t.n; k++) {
        const int client = ref->t.sel[k];
        pfl_step s = wiring_default_step(w, r);
        norm_pull pull = {alpha, ref->t.start};
        if (ref->squared) pfl_step_add_prox(&s, alpha, ref->t.start, 0, P);
        else pfl_step_add_grad(&s, add_norm_pull, &pull);
        if (any_nonzero(ref->g[client], P)) pfl_step_add_grad(&s, subtract_vector, ref->g[client]);
        float *y = ref->t.trained[k];
        wiring_train(w, client, r, y, &s);
        for (size_t j = 0; j < P; j++) {
            const double d = (double)y[j] - ref->t.start[j];
            ref->g_new[client][j] = (float)(ref->g[client][j] - alpha * d);
            drift[j] += d;
        }
    }
    for (size_t j = 0; j < P; j++) ref->h_new[j] = (float)(ref->h[j] - alpha * drift[j] / WIRING_CLIENTS);
    trad_mean(w, &ref->t, false);
    for (size_t j = 0; j < P; j++) ref->t.expected[j] = (float)(ref->t.expected[j] - (double)ref->h_new[j] / alpha);
    free(drift);
}

static int feddyn_hook(wiring_fed *w, int round, void *ctx) {
    feddyn_ref *ref = ctx;
    const char *what = ref->squared ? "feddyn (squared)" : "feddyn";
    if (round > 0) {
        trad_global_is(w, ref->t.expected, what, round);
        CHECK(wiring_close(pfl_feddyn_state(&w->f.fl, -1), ref->h_new, 0, w->P), "%s round %d: h (max diff %g)",
              what, round, wiring_max_diff(pfl_feddyn_state(&w->f.fl, -1), ref->h_new, 0, w->P));
        for (int k = 0; k < WIRING_CLIENTS; k++)
            CHECK(wiring_close(pfl_feddyn_state(&w->f.fl, k), ref->g_new[k], 0, w->P),
                  "%s round %d: client %d's grad_k (max diff %g)", what, round, k,
                  wiring_max_diff(pfl_feddyn_state(&w->f.fl, k), ref->g_new[k], 0, w->P));
        memcpy(ref->h, ref->h_new, w->P * sizeof(float));
        for (int k = 0; k < WIRING_CLIENTS; k++) memcpy(ref->g[k], ref->g_new[k], w->P * sizeof(float));
        ref->checked++;
    }
    trad_scored(w, round, what, NULL);
    if (round < w->f.fl.cfg.rounds) feddyn_expect(w, ref, round + 1);
    return 0;
}

static void run_feddyn(bool squared) {
    pfl_config cfg = trad_config(&pfl_algo_feddyn);
    wiring_set(&cfg, &pfl_algo_feddyn, "dyn-alpha", 0.3);
    if (squared) cfg.algo.dyn_penalty = "squared";
    wiring_fed w;
    wiring_init(&w, &pfl_algo_feddyn, &cfg, WIRING_DNN);
    feddyn_ref ref;
    memset(&ref, 0, sizeof ref);
    ref.squared = squared;
    trad_round_make(&ref.t, &w);
    ref.h = tiny_floats(w.P), ref.h_new = tiny_floats(w.P);
    for (int k = 0; k < WIRING_CLIENTS; k++) ref.g[k] = tiny_floats(w.P), ref.g_new[k] = tiny_floats(w.P);
    trad_run(&w, feddyn_hook, &ref, &ref.checked, squared ? "feddyn (squared)" : "feddyn");
    CHECK(any_nonzero(ref.h, w.P), "feddyn: h moved");
    for (int k = 0; k < WIRING_CLIENTS; k++) free(ref.g[k]), free(ref.g_new[k]);
    free(ref.h), free(ref.h_new);
    trad_round_free(&ref.t);
    wiring_free(&w);
}

static void test_feddyn(void) {
    run_feddyn(false);
    run_feddyn(true);
}

/* ---- FedLC: cross-entropy of z_y - tau n_y^(-1/4), n_y the training labels of every client (PFLlib)
 * or the client's own (--lc-counts local; a class it lacks -infinity); FedAvg's server ---- */

typedef struct {
    trad_round t;
    bool local;
    int checked;
} fedlc_ref;

/* The training label counts of `client` (-1: every client), from the federation's data. */
static void trad_label_counts(const wiring_fed *w, int client, double *counts) {
    for (int c = 0; c < WIRING_CLASSES; c++) counts[c] = 0.0;
    for (int k = 0; k < WIRING_CLIENTS; k++) {
        const pfl_client_data *cd = &w->f.part.clients[k];
        if (client < 0 || k == client)
            for (int i = 0; i < cd->n_train; i++) counts[w->f.d.labels[cd->train[i]]] += 1.0;
    }
}

/* The calibration from the training label counts of `client` (-1: every client). */
static void fedlc_offsets(const wiring_fed *w, int client, float tau, float *offset) {
    double counts[WIRING_CLASSES];
    trad_label_counts(w, client, counts);
    for (int c = 0; c < WIRING_CLASSES; c++)
        offset[c] = counts[c] > 0 ? (float)(-tau * pow(counts[c], -0.25)) : -INFINITY;
}

static void fedlc_expect(wiring_fed *w, fedlc_ref *ref, int r) {
    trad_begin(w, &ref->t, r);
    for (int k = 0; k < ref->t.n; k++) {
        float offset[WIRING_CLASSES];
        fedlc_offsets(w, ref->local ? ref->t.sel[k] : -1, w->f.fl.cfg.algo.lc_tau, offset);
        pfl_step s = wiring_default_step(w, r);
        s.ce_offset = offset;
        wiring_train(w, ref->t.sel[k], r, ref->t.trained[k], &s);
    }
    trad_mean(w, &ref->t, true);
}

static int fedlc_hook(wiring_fed *w, int round, void *ctx) {
    fedlc_ref *ref = ctx;
    const char *what = ref->local ? "fedlc (local counts)" : "fedlc";
    if (round > 0 && trad_global_is(w, ref->t.expected, what, round)) ref->checked++;
    trad_scored(w, round, what, NULL);
    if (round < w->f.fl.cfg.rounds) fedlc_expect(w, ref, round + 1);
    return 0;
}

static void run_fedlc(bool local) {
    pfl_config cfg = trad_config(&pfl_algo_fedlc);
    wiring_set(&cfg, &pfl_algo_fedlc, "lc-tau", 0.4);
    if (local) cfg.algo.lc_counts = "local";
    wiring_fed w;
    wiring_init(&w, &pfl_algo_fedlc, &cfg, WIRING_DNN);
    fedlc_ref ref;
    memset(&ref, 0, sizeof ref);
    ref.local = local;
    trad_round_make(&ref.t, &w);
    trad_run(&w, fedlc_hook, &ref, &ref.checked, local ? "fedlc (local counts)" : "fedlc");
    trad_round_free(&ref.t);
    wiring_free(&w);
}

static void test_fedlc(void) {
    run_fedlc(false);
    run_fedlc(true);
}

/* ---- FedNTD: CE + beta KL over the not-true classes at temperature tau, the received global model
 * the teacher; the uniform mean (PFLlib) ---- */

typedef struct {
    trad_round t;
    float tau;
    int checked;
} fedntd_ref;

static double ntd_term(void *ctx, const pfl_term_batch *b, float *dz, int *correct) {
    (void)correct;
    const fedntd_ref *ref = ctx;
    return pfl_fedntd_loss(b->z, b->refs[0], b->labels, b->B, (int)b->n, ref->tau, dz);
}

static void fedntd_expect(wiring_fed *w, fedntd_ref *ref, int r) {
    trad_begin(w, &ref->t, r);
    const pfl_loss_term term = {.name = "the test's not-true distillation",
                                .at = PFL_AT_LOGITS,
                                .weight = w->f.fl.cfg.algo.ntd_beta,
                                .refs = {ref->t.start},
                                .num_refs = 1,
                                .value = ntd_term,
                                .ctx = ref};
    for (int k = 0; k < ref->t.n; k++) {
        pfl_step s = wiring_default_step(w, r);
        pfl_step_add_term(&s, &term);
        wiring_train(w, ref->t.sel[k], r, ref->t.trained[k], &s);
    }
    trad_mean(w, &ref->t, false);
}

static int fedntd_hook(wiring_fed *w, int round, void *ctx) {
    fedntd_ref *ref = ctx;
    if (round > 0 && trad_global_is(w, ref->t.expected, "fedntd", round)) ref->checked++;
    trad_scored(w, round, "fedntd", NULL);
    if (round < w->f.fl.cfg.rounds) fedntd_expect(w, ref, round + 1);
    return 0;
}

static void test_fedntd(void) {
    pfl_config cfg = trad_config(&pfl_algo_fedntd);
    wiring_set(&cfg, &pfl_algo_fedntd, "ntd-beta", 0.6);
    wiring_set(&cfg, &pfl_algo_fedntd, "ntd-tau", 2.5);
    wiring_fed w;
    wiring_init(&w, &pfl_algo_fedntd, &cfg, WIRING_DNN);
    fedntd_ref ref;
    memset(&ref, 0, sizeof ref);
    ref.tau = cfg.algo.ntd_tau;
    trad_round_make(&ref.t, &w);
    trad_run(&w, fedntd_hook, &ref, &ref.checked, "fedntd");
    trad_round_free(&ref.t);
    wiring_free(&w);
}

/* ---- MOON: CE + mu l_con on the representation entering the last layer, toward the received global
 * model's and away from the client's previous trained model's (the initial model before it trains);
 * FedAvg's server ---- */

typedef struct {
    trad_round t;
    float tau;
    float *prev[WIRING_CLIENTS], *prev_new[WIRING_CLIENTS];
    int checked;
} moon_ref;

static double moon_term(void *ctx, const pfl_term_batch *b, float *dz, int *correct) {
    (void)correct;
    const moon_ref *ref = ctx;
    return pfl_moon_contrastive(b->z, b->refs[0], b->refs[1], b->B, b->n, ref->tau, dz);
}

static void moon_expect(wiring_fed *w, moon_ref *ref, int r) {
    trad_begin(w, &ref->t, r);
    for (int k = 0; k < ref->t.n; k++) {
        const int client = ref->t.sel[k];
        const pfl_loss_term term = {.name = "the test's model-contrastive loss",
                                    .at = w->f.fl.model->num_layers - 1,
                                    .weight = w->f.fl.cfg.algo.moon_mu,
                                    .refs = {ref->t.start, ref->prev[client]},
                                    .num_refs = 2,
                                    .value = moon_term,
                                    .ctx = ref};
        pfl_step s = wiring_default_step(w, r);
        pfl_step_add_term(&s, &term);
        wiring_train(w, client, r, ref->t.trained[k], &s);
        memcpy(ref->prev_new[client], ref->t.trained[k], w->V * sizeof(float));
    }
    trad_mean(w, &ref->t, true);
}

static int moon_hook(wiring_fed *w, int round, void *ctx) {
    moon_ref *ref = ctx;
    if (round == 0)
        for (int k = 0; k < WIRING_CLIENTS; k++) {
            memcpy(ref->prev[k], w->f.fl.global, w->V * sizeof(float));
            memcpy(ref->prev_new[k], w->f.fl.global, w->V * sizeof(float));
        }
    if (round > 0) {
        if (trad_global_is(w, ref->t.expected, "moon", round)) ref->checked++;
        for (int k = 0; k < WIRING_CLIENTS; k++) memcpy(ref->prev[k], ref->prev_new[k], w->V * sizeof(float));
    }
    trad_scored(w, round, "moon", NULL);
    if (round < w->f.fl.cfg.rounds) moon_expect(w, ref, round + 1);
    return 0;
}

static void test_moon(void) {
    pfl_config cfg = trad_config(&pfl_algo_moon);
    wiring_set(&cfg, &pfl_algo_moon, "moon-mu", 0.7);
    wiring_set(&cfg, &pfl_algo_moon, "moon-tau", 0.4);
    wiring_fed w;
    wiring_init(&w, &pfl_algo_moon, &cfg, WIRING_DNN);
    CHECK(trad_some_client_returns(&w), "moon: a client trains twice");
    moon_ref ref;
    memset(&ref, 0, sizeof ref);
    ref.tau = cfg.algo.moon_tau;
    trad_round_make(&ref.t, &w);
    for (int k = 0; k < WIRING_CLIENTS; k++) ref.prev[k] = tiny_floats(w.V), ref.prev_new[k] = tiny_floats(w.V);
    trad_run(&w, moon_hook, &ref, &ref.checked, "moon");
    for (int k = 0; k < WIRING_CLIENTS; k++) free(ref.prev[k]), free(ref.prev_new[k]);
    trad_round_free(&ref.t);
    wiring_free(&w);
}

/* ---- FedGen: CE + CE(head(G(y')), y') with y' drawn by every client's label shares (its own
 * stream per round and client), G fixed on the client; the server: FedAvg's mean, then
 * --fedgen-server-epochs Adam steps of G against the NEW global model's head, at --fedgen-lr decayed
 * as the clients' rate ---- */

typedef struct {
    int noise, hidden, in, D, C;
    size_t w1, b1, gamma, beta, w2, b2, total;
} gen_shape;

static gen_shape gen_shape_of(int noise, int hidden, int D, int C) {
    gen_shape g = {noise, hidden, noise + C, D, C, 0, 0, 0, 0, 0, 0, 0};
    g.b1 = (size_t)hidden * (size_t)g.in;
    g.gamma = g.b1 + (size_t)hidden, g.beta = g.gamma + (size_t)hidden, g.w2 = g.beta + (size_t)hidden;
    g.b2 = g.w2 + (size_t)D * (size_t)hidden, g.total = g.b2 + (size_t)D;
    return g;
}

typedef struct {
    trad_round t;
    gen_shape g;
    double cdf[WIRING_CLASSES];
    size_t head;
    float *gen, *gen_prev, *gen_expected, *adam_m, *adam_v, *grad;
    int adam_steps, checked, round;
} fedgen_ref;

/* The generator as the paper's: Linear, BatchNorm1d on the batch (training mode), ReLU, Linear;
 * labels by the cdf, uniform noise beside each one-hot. Writes B x D features and B labels. */
static void gen_features(const fedgen_ref *ref, const float *p, pfl_rng *rng, int B, float *z, uint8_t *y) {
    const gen_shape *g = &ref->g;
    for (int i = 0; i < B; i++) {
        const double u = pfl_rng_uniform(rng);
        int c = 0;
        while (c < g->C - 1 && u >= ref->cdf[c]) c++;
        y[i] = (uint8_t)c;
    }
    double *in = calloc((size_t)B * g->in, sizeof(double)), *a = calloc((size_t)B * g->hidden, sizeof(double));
    for (int i = 0; i < B; i++) {
        for (int j = 0; j < g->noise; j++) in[(size_t)i * g->in + j] = pfl_rng_uniform(rng);
        in[(size_t)i * g->in + g->noise + y[i]] = 1.0;
    }
    for (int i = 0; i < B; i++)
        for (int h = 0; h < g->hidden; h++) {
            double v = p[g->b1 + h];
            for (int j = 0; j < g->in; j++) v += (double)p[g->w1 + (size_t)h * g->in + j] * in[(size_t)i * g->in + j];
            a[(size_t)i * g->hidden + h] = v;
        }
    for (int h = 0; h < g->hidden; h++) { /* BatchNorm on the batch's statistics (biased variance), then ReLU */
        double mean = 0, var = 0;
        for (int i = 0; i < B; i++) mean += a[(size_t)i * g->hidden + h] / B;
        for (int i = 0; i < B; i++) {
            const double d = a[(size_t)i * g->hidden + h] - mean;
            var += d * d / B;
        }
        for (int i = 0; i < B; i++) {
            double *ai = &a[(size_t)i * g->hidden + h];
            const double v = p[g->gamma + h] * (*ai - mean) / sqrt(var + PFL_BN_EPS) + p[g->beta + h];
            *ai = v > 0 ? v : 0;
        }
    }
    for (int i = 0; i < B; i++)
        for (int d = 0; d < g->D; d++) {
            double v = p[g->b2 + d];
            for (int h = 0; h < g->hidden; h++)
                v += (double)p[g->w2 + (size_t)d * g->hidden + h] * a[(size_t)i * g->hidden + h];
            z[(size_t)i * g->D + d] = (float)v;
        }
    free(in), free(a);
}

typedef struct {
    const fedgen_ref *ref;
    pfl_rng rng;
    int B;
    float *z;
    uint8_t *y;
} gen_client;

/* CE(head(G(y')), y'): the head's gradient into the model's. */
static double gen_term(void *ctx, const pfl_term_batch *b, float *dz, int *correct) {
    (void)dz, (void)correct;
    gen_client *c = ctx;
    const fedgen_ref *ref = c->ref;
    gen_features(ref, ref->gen, &c->rng, c->B, c->z, c->y);
    return pfl_fedgen_head_loss(b->params + ref->head, c->z, c->y, c->B, ref->g.D, ref->g.C, b->grads + ref->head,
                                NULL);
}

static void fedgen_expect_clients(wiring_fed *w, fedgen_ref *ref, int r) {
    const pfl_config *cfg = &w->f.fl.cfg;
    trad_begin(w, &ref->t, r);
    gen_client c;
    memset(&c, 0, sizeof c);
    c.ref = ref, c.B = cfg->batch;
    c.z = tiny_floats((size_t)cfg->batch * ref->g.D), c.y = tiny_alloc((size_t)cfg->batch);
    for (int k = 0; k < ref->t.n; k++) {
        c.rng = pfl_rng_stream(cfg->seed, r, ref->t.sel[k], PFL_RNG_ALGO);
        const pfl_loss_term term = {.name = "the test's generated features", .at = PFL_AT_LOGITS, .weight = 1.0f,
                                    .value = gen_term, .ctx = &c};
        pfl_step s = wiring_default_step(w, r);
        pfl_step_add_term(&s, &term);
        wiring_train(w, ref->t.sel[k], r, ref->t.trained[k], &s);
    }
    free(c.z), free(c.y);
    trad_mean(w, &ref->t, true);
}

/* torch.optim.Adam's step (betas 0.9, 0.999, eps 1e-8). */
static void trad_adam(float *p, const float *g, float *m, float *v, size_t n, int step, double lr) {
    const double c1 = 1.0 - pow(0.9, step), c2 = sqrt(1.0 - pow(0.999, step));
    for (size_t i = 0; i < n; i++) {
        m[i] = (float)(0.9 * m[i] + 0.1 * g[i]);
        v[i] = (float)(0.999 * v[i] + 0.001 * (double)g[i] * g[i]);
        p[i] = (float)(p[i] - lr / c1 * m[i] / (sqrt((double)v[i]) / c2 + 1e-8));
    }
}

/* Round r's generator: from the one before the round, the server's epochs against the global model
 * the round produced (which the hook sees), each one gradient of the method's generator loss (checked by
 * hand in tests/test_fedgen.c) at the test's parameters, on the round's server stream. */
static void fedgen_expect_generator(wiring_fed *w, fedgen_ref *ref, int r) {
    pfl_fl *fl = &w->f.fl;
    const size_t n = ref->g.total;
    memcpy(ref->gen_expected, ref->gen_prev, n * sizeof(float));
    memcpy(ref->gen_prev, ref->gen, n * sizeof(float)); /* the run's generator now, put back below */
    const double lr = fl->cfg.algo.fedgen_lr * pfl_lr_of_round(fl, r) / fl->cfg.lr;
    pfl_rng rng = pfl_rng_stream(fl->cfg.seed, r, PFL_RNG_NONE, PFL_RNG_ALGO);
    for (int e = 0; e < fl->cfg.algo.fedgen_server_epochs; e++) {
        memcpy(ref->gen, ref->gen_expected, n * sizeof(float));
        memset(ref->grad, 0, n * sizeof(float));
        pfl_fedgen_generator_loss(fl, &rng, ref->grad);
        trad_adam(ref->gen_expected, ref->grad, ref->adam_m, ref->adam_v, n, ++ref->adam_steps, lr);
    }
    memcpy(ref->gen, ref->gen_prev, n * sizeof(float));
}

static int fedgen_hook(wiring_fed *w, int round, void *ctx) {
    fedgen_ref *ref = ctx;
    size_t n;
    ref->gen = pfl_fedgen_generator(&w->f.fl, &n);
    CHECK(n == ref->g.total, "fedgen: a generator of %zu parameters, the test's %zu", n, ref->g.total);
    if (round > 0) {
        const bool global_ok = trad_global_is(w, ref->t.expected, "fedgen", round);
        fedgen_expect_generator(w, ref, round);
        /* not fc1's bias: BatchNorm right after it makes its gradient zero but for rounding, which Adam's
         * normalized step turns into a step of +-lr from the second epoch on */
        const size_t b1 = ref->g.b1, after = ref->g.gamma;
        const bool gen_ok = wiring_close(ref->gen, ref->gen_expected, 0, b1) &&
                            wiring_close(ref->gen, ref->gen_expected, after, n - after);
        CHECK(gen_ok, "fedgen round %d: the generator is not trained against the round's global head (max diff %g)",
              round, fmax(wiring_max_diff(ref->gen, ref->gen_expected, 0, b1),
                          wiring_max_diff(ref->gen, ref->gen_expected, after, n - after)));
        ref->checked += global_ok && gen_ok;
    }
    memcpy(ref->gen_prev, ref->gen, n * sizeof(float));
    trad_scored(w, round, "fedgen", NULL);
    if (round < w->f.fl.cfg.rounds) fedgen_expect_clients(w, ref, round + 1);
    return 0;
}

static void test_fedgen(void) {
    pfl_config cfg = trad_config(&pfl_algo_fedgen);
    wiring_set(&cfg, &pfl_algo_fedgen, "fedgen-noise-dim", 6);
    wiring_set(&cfg, &pfl_algo_fedgen, "fedgen-hidden", 10);
    wiring_set(&cfg, &pfl_algo_fedgen, "fedgen-lr", 0.02);
    wiring_set(&cfg, &pfl_algo_fedgen, "fedgen-server-epochs", 2);
    cfg.lr_decay = 0.8f; /* the generator's rate decays with the clients' */
    wiring_fed w;
    wiring_init(&w, &pfl_algo_fedgen, &cfg, WIRING_DNN);
    fedgen_ref ref;
    memset(&ref, 0, sizeof ref);
    const pfl_model *m = w.f.fl.model;
    ref.g = gen_shape_of(cfg.algo.fedgen_noise_dim, cfg.algo.fedgen_hidden,
                         (int)pfl_model_layer_input_size(m, m->num_layers - 1), m->classes);
    ref.head = m->layers[m->num_layers - 1].offset;
    double counts[WIRING_CLASSES], total = 0, cum = 0;
    trad_label_counts(&w, -1, counts);
    for (int c = 0; c < WIRING_CLASSES; c++) total += counts[c];
    for (int c = 0; c < WIRING_CLASSES; c++) ref.cdf[c] = (cum += counts[c]) / total;
    ref.gen_prev = tiny_floats(ref.g.total), ref.gen_expected = tiny_floats(ref.g.total);
    ref.adam_m = tiny_floats(ref.g.total), ref.adam_v = tiny_floats(ref.g.total), ref.grad = tiny_floats(ref.g.total);
    trad_round_make(&ref.t, &w);
    trad_run(&w, fedgen_hook, &ref, &ref.checked, "fedgen");
    free(ref.gen_prev), free(ref.gen_expected), free(ref.adam_m), free(ref.adam_v), free(ref.grad);
    trad_round_free(&ref.t);
    wiring_free(&w);
}

/* ---- FedCross: K middleware models (the round's clients), the k-th client of the round's shuffled
 * order training the k-th; the global model FedAvg's mean of the uploads; from round
 * --fedcross-first-stage + 1 each middleware model becomes alpha w_j + (1 - alpha) w_c, w_c the least
 * similar one before the step; before it every middleware model the global one ---- */

typedef struct {
    trad_round t;
    int K;
    float *mw[WIRING_CLIENTS];
    int checked;
} fedcross_ref;

/* The place in round r's dispatch of each selected client: the round's server stream shuffles 0..n-1. */
static void fedcross_dispatch(const wiring_fed *w, int r, int n, int *slot_of) {
    int order[WIRING_CLIENTS];
    for (int k = 0; k < n; k++) order[k] = k;
    pfl_rng rng = pfl_rng_stream(w->f.fl.cfg.seed, r, PFL_RNG_NONE, PFL_RNG_ALGO);
    pfl_rng_shuffle(&rng, order, (size_t)n);
    for (int slot = 0; slot < n; slot++) slot_of[order[slot]] = slot;
}

static void fedcross_expect(wiring_fed *w, fedcross_ref *ref, int r) {
    const pfl_config *cfg = &w->f.fl.cfg;
    const int K = ref->K;
    int slot_of[WIRING_CLIENTS];
    trad_begin(w, &ref->t, r);
    fedcross_dispatch(w, r, ref->t.n, slot_of);
    for (int k = 0; k < ref->t.n; k++) {
        memcpy(ref->t.trained[k], ref->mw[slot_of[k]], w->V * sizeof(float));
        pfl_step s = wiring_default_step(w, r);
        wiring_train(w, ref->t.sel[k], r, ref->t.trained[k], &s);
    }
    trad_mean(w, &ref->t, true);
    for (int k = 0; k < ref->t.n; k++) memcpy(ref->mw[slot_of[k]], ref->t.trained[k], w->V * sizeof(float));
    if (r - 1 < cfg->algo.fedcross_first_stage) {
        for (int j = 0; j < K; j++) memcpy(ref->mw[j], ref->t.expected, w->V * sizeof(float));
        return;
    }
    double sim[WIRING_CLIENTS * WIRING_CLIENTS] = {0};
    for (int a = 0; a < K; a++)
        for (int b = 0; b < K; b++)
            if (a != b) sim[a * K + b] = pfl_fedcross_similarity(w->f.fl.model, ref->mw[a], ref->mw[b]);
    float *before = tiny_floats(w->V * (size_t)K);
    for (int j = 0; j < K; j++) memcpy(before + (size_t)j * w->V, ref->mw[j], w->V * sizeof(float));
    const double alpha = cfg->algo.fedcross_alpha;
    for (int j = 0; j < K; j++) {
        const int c = pfl_fedcross_collaborator(sim, K, j, cfg->algo.fedcross_select, r);
        const float *wj = before + (size_t)j * w->V, *wc = before + (size_t)c * w->V;
        for (size_t i = 0; i < w->P; i++) ref->mw[j][i] = (float)(alpha * wj[i] + (1.0 - alpha) * wc[i]);
    }
    free(before);
}

static int fedcross_hook(wiring_fed *w, int round, void *ctx) {
    fedcross_ref *ref = ctx;
    if (round == 0)
        for (int j = 0; j < ref->K; j++) memcpy(ref->mw[j], w->f.fl.global, w->V * sizeof(float));
    if (round > 0) {
        bool ok = trad_global_is(w, ref->t.expected, "fedcross", round);
        for (int j = 0; j < ref->K; j++) {
            const float *got = pfl_fedcross_middleware(&w->f.fl, j);
            const bool same = wiring_close(got, ref->mw[j], 0, w->V);
            CHECK(same, "fedcross round %d: middleware model %d (max diff %g)", round, j,
                  wiring_max_diff(got, ref->mw[j], 0, w->V));
            ok = ok && same;
        }
        ref->checked += ok;
    }
    trad_scored(w, round, "fedcross", NULL);
    if (round < w->f.fl.cfg.rounds) fedcross_expect(w, ref, round + 1);
    return 0;
}

static void run_fedcross(int select) {
    pfl_config cfg = trad_config(&pfl_algo_fedcross);
    wiring_set(&cfg, &pfl_algo_fedcross, "fedcross-alpha", 0.8);
    wiring_set(&cfg, &pfl_algo_fedcross, "fedcross-first-stage", 1);
    wiring_set(&cfg, &pfl_algo_fedcross, "fedcross-select", select);
    wiring_fed w;
    wiring_init(&w, &pfl_algo_fedcross, &cfg, WIRING_DNN);
    fedcross_ref ref;
    memset(&ref, 0, sizeof ref);
    ref.K = pfl_clients_per_round(&cfg);
    for (int j = 0; j < ref.K; j++) ref.mw[j] = tiny_floats(w.V);
    trad_round_make(&ref.t, &w);
    trad_run(&w, fedcross_hook, &ref, &ref.checked, "fedcross");
    for (int j = 0; j < ref.K; j++) free(ref.mw[j]);
    trad_round_free(&ref.t);
    wiring_free(&w);
}

static void test_fedcross(void) {
    run_fedcross(1);
    run_fedcross(0);
}

/* ---- FML and FedKD: the client trains its personal model (kept, never sent; the one scored) and the
 * exchanged model (the meme, the mentee: from the global model each round, uploaded); the server's
 * mean is uniform, FedKD's of the SVD-compressed uploads, itself compressed at the round's energy ---- */

typedef struct {
    trad_round t;
    const pfl_algo *algo;
    float *personal[WIRING_CLIENTS], *personal_new[WIRING_CLIENTS], *saved;
    float *wh_saved;
    size_t DD;
    int checked;
} mutual_ref;

/* FedKD's W rows, written once before the run (the client's own draw is then not made), so the replay
 * can put them back. */
static pfl_store *fedkd_w(wiring_fed *w) { return w->f.fl.algo_stores[0]; }

/* Client `client`'s training of round r, replayed through the method's local_train from the global
 * model and the personal model it kept; the client's stores are put back afterwards. */
static void mutual_replay(wiring_fed *w, mutual_ref *ref, int client, int r, float *exchanged) {
    pfl_fl *fl = &w->f.fl;
    const bool fedkd = ref->algo == &pfl_algo_fedkd;
    float *state = pfl_client_model(fl, client);
    memcpy(ref->saved, state, w->V * sizeof(float));
    memcpy(state, ref->personal[client], w->V * sizeof(float));
    if (fedkd) {
        memcpy(ref->wh_saved, pfl_store_read(fedkd_w(w), client), ref->DD * sizeof(float));
        pfl_store_release(fedkd_w(w), client);
    }
    const int keep = fl->round;
    fl->round = r;
    pfl_train_stats st;
    memset(&st, 0, sizeof st);
    ref->algo->local_train(fl, client, &fl->workers[0], exchanged, &st);
    fl->round = keep;
    memcpy(ref->personal_new[client], pfl_client_model(fl, client), w->V * sizeof(float));
    memcpy(pfl_client_model(fl, client), ref->saved, w->V * sizeof(float));
    if (fedkd) {
        memcpy(pfl_store_write(fedkd_w(w), client), ref->wh_saved, ref->DD * sizeof(float));
        pfl_store_release(fedkd_w(w), client);
    }
}

/* FedKD's compression of a model vector at `energy`: every weight matrix (two dimensions, the first
 * above 1) truncated to the singular values PFLlib's rule keeps, unless all zero; the rest whole. */
static void fedkd_compress(const wiring_fed *w, float *v, double energy) {
    const pfl_model *m = w->f.fl.model;
    for (int l = 0; l < m->num_layers; l++)
        for (int t = 0; t < m->layers[l].num_tensors; t++) {
            const pfl_tensor *x = &m->tensors[m->layers[l].first_tensor + t];
            if (x->ndim != 2 || x->shape[0] <= 1 || !any_nonzero(v + x->offset, x->length)) continue;
            pfl_fedkd_truncate(v + x->offset, 1, x->shape[0], x->shape[1], energy, false);
        }
}

static void mutual_expect(wiring_fed *w, mutual_ref *ref, int r) {
    const pfl_config *cfg = &w->f.fl.cfg;
    const bool fedkd = ref->algo == &pfl_algo_fedkd;
    trad_begin(w, &ref->t, r);
    for (int k = 0; k < WIRING_CLIENTS; k++) memcpy(ref->personal_new[k], ref->personal[k], w->V * sizeof(float));
    for (int k = 0; k < ref->t.n; k++) mutual_replay(w, ref, ref->t.sel[k], r, ref->t.trained[k]);
    if (!fedkd) {
        trad_mean(w, &ref->t, false);
        return;
    }
    const pfl_algo_params *a = &cfg->algo;
    const double energy = a->kd_t_start + (double)(r - 1) / cfg->rounds * ((double)a->kd_t_end - a->kd_t_start);
    for (int k = 0; k < ref->t.n; k++) { /* what the server reconstructs of each upload */
        float *u = ref->t.trained[k];
        if (cfg->algo.kd_update)
            for (size_t j = 0; j < w->P; j++) u[j] -= ref->t.start[j];
        fedkd_compress(w, u, energy);
    }
    trad_mean(w, &ref->t, false); /* the mean of the reconstructions (with --kd-update, of the updates) */
    fedkd_compress(w, ref->t.expected, energy);
    if (cfg->algo.kd_update)
        for (size_t j = 0; j < w->P; j++) ref->t.expected[j] = ref->t.start[j] + ref->t.expected[j];
}

static int mutual_hook(wiring_fed *w, int round, void *ctx) {
    mutual_ref *ref = ctx;
    const char *what = ref->algo->name;
    float *held = tiny_floats(w->V);
    if (round == 0)
        for (int k = 0; k < WIRING_CLIENTS; k++) {
            memcpy(ref->personal[k], tiny_client_model(&w->f.fl, k, held), w->V * sizeof(float));
            memcpy(ref->personal_new[k], ref->personal[k], w->V * sizeof(float));
        }
    if (round > 0) {
        bool ok = trad_global_is(w, ref->t.expected, what, round);
        for (int k = 0; k < WIRING_CLIENTS; k++) {
            const bool same = wiring_close(tiny_client_model(&w->f.fl, k, held), ref->personal_new[k], 0, w->V);
            CHECK(same, "%s round %d: client %d's personal model is not the one it trained or kept (max diff %g)",
                  what, round, k, wiring_max_diff(held, ref->personal_new[k], 0, w->V));
            ok = ok && same;
            memcpy(ref->personal[k], ref->personal_new[k], w->V * sizeof(float));
        }
        ref->checked += ok;
        CHECK(wiring_differ(ref->personal[ref->t.sel[0]], w->f.fl.global, 0, w->V),
              "%s round %d: a personal model apart from the global one", what, round);
    }
    trad_scored(w, round, what, ref->personal);
    free(held);
    if (round < w->f.fl.cfg.rounds) mutual_expect(w, ref, round + 1);
    return 0;
}

static void run_mutual(const pfl_algo *algo, const pfl_config *cfg, const char *what) {
    wiring_fed w;
    wiring_init(&w, algo, cfg, WIRING_DNN);
    CHECK(trad_some_client_returns(&w), "%s: a client trains twice", what);
    mutual_ref ref;
    memset(&ref, 0, sizeof ref);
    ref.algo = algo;
    trad_round_make(&ref.t, &w);
    ref.saved = tiny_floats(w.V);
    for (int k = 0; k < WIRING_CLIENTS; k++) ref.personal[k] = tiny_floats(w.V), ref.personal_new[k] = tiny_floats(w.V);
    if (algo == &pfl_algo_fedkd) {
        const pfl_model *m = w.f.fl.model;
        const long D = pfl_model_layer_input_size(m, m->num_layers - 1);
        ref.DD = (size_t)(D * D);
        ref.wh_saved = tiny_floats(ref.DD);
        pfl_rng r = tiny_rng(5);
        for (int k = 0; k < WIRING_CLIENTS; k++) {
            tiny_fill(pfl_store_write(fedkd_w(&w), k), ref.DD, -0.1, 0.1, &r);
            pfl_store_release(fedkd_w(&w), k);
        }
    }
    trad_run(&w, mutual_hook, &ref, &ref.checked, what);
    for (int k = 0; k < WIRING_CLIENTS; k++) free(ref.personal[k]), free(ref.personal_new[k]);
    free(ref.saved), free(ref.wh_saved);
    trad_round_free(&ref.t);
    wiring_free(&w);
}

static void test_fml(void) {
    pfl_config cfg = trad_config(&pfl_algo_fml);
    wiring_set(&cfg, &pfl_algo_fml, "fml-alpha", 0.3);
    wiring_set(&cfg, &pfl_algo_fml, "fml-beta", 0.6);
    run_mutual(&pfl_algo_fml, &cfg, "fml");
}

static void test_fedkd(void) {
    pfl_config cfg = trad_config(&pfl_algo_fedkd);
    wiring_set(&cfg, &pfl_algo_fedkd, "kd-mentee-lr", 0.03);
    wiring_set(&cfg, &pfl_algo_fedkd, "kd-t-start", 0.6);
    wiring_set(&cfg, &pfl_algo_fedkd, "kd-t-end", 0.9);
    run_mutual(&pfl_algo_fedkd, &cfg, "fedkd");
    cfg.algo.kd_update = true; /* a switch: wiring_set takes numbers */
    run_mutual(&pfl_algo_fedkd, &cfg, "fedkd (update)");
}

int main(void) {
    test_scaffold();
    test_feddyn();
    test_fedlc();
    test_fedntd();
    test_moon();
    test_fedgen();
    test_fedcross();
    test_fml();
    test_fedkd();
    TEST_MAIN_END();
}
