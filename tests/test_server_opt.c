/* The server optimizers FedAvgM, FedAdam, FedYogi and FedAdagrad
 * (src/algos/server_opt.c) and FedADMM (src/algos/fedadmm.c), issue 45:
 *
 *  - their step by hand on two elements, x = (1, -2) and the round's mean
 *    (2, -2), so Delta = (1, 0), with beta_1 0.5, beta_2 0.75, tau 0.5 and
 *    v starting at tau^2 = 0.25: FedAdam's v = (0.4375, 0.1875) and
 *    x_0 = 1 + 0.5 / (sqrt(0.4375) + 0.5); FedYogi's v = (0.5, 0.25) (v < Delta^2
 *    grows, v > Delta^2 = 0 stays) and x_0 = 1 + 0.5 / (sqrt(0.5) + 0.5) = sqrt 2;
 *    FedAdagrad's v = (1.25, 0.25), x_0 = 1 + 0.5 / (sqrt(1.25) + 0.5) =
 *    1 + 1 / (1 + sqrt 5); FedAvgM's heavy ball and Nesterov from a velocity
 *    that is not zero; a second step from the first one's state;
 *  - the wiring, on the uneven federation of tests/wiring.h (four rounds at
 *    lr 0.05, clients of 23, 7, 15, 11 and 30 samples, every hyper-parameter
 *    away from its default, 0 and 1): after each round the test trains the
 *    round's clients from the global model with FedAvg's step, takes their
 *    mean with the weights the method names (FedAvgM: by samples; FedOpt:
 *    uniform; each also with the other --server-mean), steps its own copy
 *    of the server state in double as the papers write it, and compares the
 *    global model, the server's m and v, and what the run scored for every
 *    client (the global model: these methods personalize nothing);
 *  - FedADMM on the same federation at 3 local epochs, drawn per client and
 *    round from the client's own stream (or fixed): the test trains each
 *    client with its own copy of alpha_i and rho (w - theta), keeps alpha_i,
 *    takes the uniform mean of theta + 2 (w - theta) and the server's step,
 *    whose rate changes after --admm-target-round; it compares the global
 *    model, every client's alpha_i and what was scored. */
#include "wiring.h"

enum { OPT_ROUNDS = 4 };

static void expect_near(double got, double want, const char *what) {
    CHECK(fabs(got - want) < 1e-6, "%s: %.9f, by hand %.9f", what, got, want);
}

/* x = (1, -2), the round's mean (2, -2), beta_1 0.5, beta_2 0.75, tau 0.5, eta 1, v from tau^2. */
static void test_fedopt_by_hand(void) {
    const pfl_server_opt_hp hp = {.eta = 1, .beta1 = 0.5, .beta2 = 0.75, .tau = 0.5};
    const struct {
        pfl_server_opt_kind kind;
        const char *name;
        double v0, v1, x0;
    } cases[] = {
        {PFL_SERVER_ADAM, "fedadam", 0.4375, 0.1875, 1.0 + 0.5 / (sqrt(0.4375) + 0.5)},
        {PFL_SERVER_YOGI, "fedyogi", 0.5, 0.25, sqrt(2.0)},
        {PFL_SERVER_ADAGRAD, "fedadagrad", 1.25, 0.25, 1.0 + 1.0 / (1.0 + sqrt(5.0))},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const float x[2] = {1.0f, -2.0f};
        float global[2] = {2.0f, -2.0f};
        double m[2] = {0, 0}, v[2] = {0.25, 0.25};
        pfl_server_opt_step(cases[i].kind, &hp, x, global, m, v, 0, 2);
        char what[64];
        snprintf(what, sizeof what, "%s m_0", cases[i].name), expect_near(m[0], 0.5, what);
        snprintf(what, sizeof what, "%s m_1", cases[i].name), expect_near(m[1], 0.0, what);
        snprintf(what, sizeof what, "%s v_0", cases[i].name), expect_near(v[0], cases[i].v0, what);
        snprintf(what, sizeof what, "%s v_1", cases[i].name), expect_near(v[1], cases[i].v1, what);
        snprintf(what, sizeof what, "%s x_0", cases[i].name), expect_near(global[0], cases[i].x0, what);
        snprintf(what, sizeof what, "%s x_1 (Delta 0, m 0)", cases[i].name), expect_near(global[1], -2.0, what);
    }
    /* a second FedAdam step from the first one's state: x = (1.5, 0), mean (1, 1), Delta = (-0.5, 1):
     * m = (0.5 * 0.5 - 0.25, 0.5) = (0, 0.5), v = (0.75 * 0.4375 + 0.0625, 0.75 * 0.1875 + 0.25) */
    const float x[2] = {1.5f, 0.0f};
    float global[2] = {1.0f, 1.0f};
    double m[2] = {0.5, 0.0}, v[2] = {0.4375, 0.1875};
    pfl_server_opt_step(PFL_SERVER_ADAM, &hp, x, global, m, v, 0, 2);
    expect_near(m[0], 0.0, "fedadam step 2 m_0"), expect_near(m[1], 0.5, "fedadam step 2 m_1");
    expect_near(v[0], 0.390625, "fedadam step 2 v_0"), expect_near(v[1], 0.390625, "fedadam step 2 v_1");
    expect_near(global[0], 1.5, "fedadam step 2 x_0 (m 0: no move)");
    expect_near(global[1], 0.5 / (0.625 + 0.5), "fedadam step 2 x_1");
}

/* FedAvgM: x = (1, -2), mean (1.5, -2.5), Delta = (0.5, -0.5), beta 0.5, eta 2, velocity (0.2, 0):
 * v = (0.6, -0.5); heavy ball x + 2 v = (2.2, -3); Nesterov x + 2 (Delta + 0.5 v) = (2.6, -3.5). */
static void test_fedavgm_by_hand(void) {
    for (int nesterov = 0; nesterov <= 1; nesterov++) {
        const pfl_server_opt_hp hp = {.eta = 2, .momentum = 0.5, .nesterov = nesterov};
        const float x[2] = {1.0f, -2.0f};
        float global[2] = {1.5f, -2.5f};
        double m[2] = {0.2, 0.0};
        pfl_server_opt_step(PFL_SERVER_MOMENTUM, &hp, x, global, m, NULL, 0, 2);
        expect_near(m[0], 0.6, "fedavgm v_0"), expect_near(m[1], -0.5, "fedavgm v_1");
        expect_near(global[0], nesterov ? 2.6 : 2.2, nesterov ? "fedavgm nesterov x_0" : "fedavgm x_0");
        expect_near(global[1], nesterov ? -3.5 : -3.0, nesterov ? "fedavgm nesterov x_1" : "fedavgm x_1");
    }
    /* only [off, off + len) moves */
    const pfl_server_opt_hp hp = {.eta = 1, .momentum = 0.9};
    const float x[3] = {0, 0, 0};
    float global[3] = {1, 1, 1};
    double m[3] = {0, 0, 0};
    pfl_server_opt_step(PFL_SERVER_MOMENTUM, &hp, x, global, m, NULL, 1, 1);
    CHECK(global[0] == 1 && global[2] == 1 && m[0] == 0 && m[2] == 0 && m[1] == 1.0,
          "fedavgm steps only its span: global (%g %g %g), v (%g %g %g)", global[0], global[1], global[2], m[0], m[1],
          m[2]);
}

/* ---- the wiring: the test's own server, in double, as the papers write it ---- */

typedef struct {
    const pfl_algo *algo;
    bool by_samples;
    double *m, *v; /* the test's server state (P) */
    float *start, *expected, *trained[WIRING_CLIENTS];
    int checked;
} opt_ref;

static void opt_expect(wiring_fed *w, opt_ref *ref, int r) {
    const pfl_algo_params *a = &w->f.fl.cfg.algo;
    int sel[WIRING_CLIENTS];
    const int n = wiring_selected(w, r, sel);
    memcpy(ref->start, w->f.fl.global, w->V * sizeof(float));
    for (int k = 0; k < n; k++) {
        memcpy(ref->trained[k], ref->start, w->V * sizeof(float));
        pfl_step s = wiring_default_step(w, r);
        wiring_train(w, sel[k], r, ref->trained[k], &s);
    }
    double weight[WIRING_CLIENTS], total = 0;
    for (int k = 0; k < n; k++) total += weight[k] = ref->by_samples ? wiring_train_n[sel[k]] : 1.0;
    const bool momentum = ref->algo == &pfl_algo_fedavgm;
    for (size_t j = 0; j < w->P; j++) {
        double mean = 0;
        for (int k = 0; k < n; k++) mean += weight[k] * ref->trained[k][j];
        const double x = ref->start[j], delta = mean / total - x;
        double *m = &ref->m[j], *v = &ref->v[j], next;
        if (momentum) { /* Hsu et al.: v <- beta v + Delta w, x <- x - v, in the sign of Delta = mean - x */
            *m = a->server_momentum * *m + delta;
            next = x + a->server_lr * (a->server_nesterov ? delta + a->server_momentum * *m : *m);
        } else { /* Reddi et al., Algorithm 2 */
            *m = a->server_beta1 * *m + (1 - a->server_beta1) * delta;
            const double d2 = delta * delta;
            if (ref->algo == &pfl_algo_fedadam) *v = a->server_beta2 * *v + (1 - a->server_beta2) * d2;
            else if (ref->algo == &pfl_algo_fedyogi) *v = *v - (1 - a->server_beta2) * d2 * (*v > d2 ? 1 : -1);
            else *v = *v + d2;
            next = x + a->server_lr * *m / (sqrt(*v) + a->server_tau);
        }
        ref->expected[j] = (float)next;
    }
}

static int opt_hook(wiring_fed *w, int round, void *ctx) {
    opt_ref *ref = ctx;
    const char *name = ref->algo->name;
    if (round > 0) {
        CHECK(wiring_close(w->f.fl.global, ref->expected, 0, w->P), "%s round %d: the global model (max diff %g)",
              name, round, wiring_max_diff(w->f.fl.global, ref->expected, 0, w->P));
        const double *m = pfl_server_opt_state(&w->f.fl, false), *v = pfl_server_opt_state(&w->f.fl, true);
        double dm = 0, dv = 0;
        for (size_t j = 0; j < w->P; j++) {
            dm = fmax(dm, fabs(m[j] - ref->m[j]) / fmax(1e-3, fabs(ref->m[j])));
            if (v) dv = fmax(dv, fabs(v[j] - ref->v[j]) / fmax(1e-6, fabs(ref->v[j])));
        }
        CHECK(dm < 1e-3, "%s round %d: the server's first moment m (largest relative diff %g)", name, round, dm);
        CHECK(dv < 1e-3, "%s round %d: the server's second moment v (largest relative diff %g)", name, round, dv);
        CHECK((v != NULL) == (ref->algo != &pfl_algo_fedavgm), "%s: a second moment exactly for FedOpt", name);
        ref->checked++;
    }
    /* scored: the global model, for every client */
    const wiring_round *m = &w->rounds[round];
    CHECK(m->evaluated, "%s round %d: evaluated", name, round);
    for (int c = 0; c < WIRING_CLIENTS; c++) {
        const double acc = wiring_accuracy(w, w->f.fl.global, c, true);
        CHECK(fabs(m->client_acc[c] - acc) < 1e-12, "%s round %d client %d: scored %g, the global model's %g", name,
              round, c, m->client_acc[c], acc);
    }
    if (round < w->f.fl.cfg.rounds) opt_expect(w, ref, round + 1);
    return 0;
}

/* The method with its flags away from defaults, 0 and 1; `other_mean`: the --server-mean it does not default to. */
static void run_wiring(const pfl_algo *algo, bool other_mean) {
    pfl_config cfg = wiring_config(algo, WIRING_DNN);
    cfg.rounds = OPT_ROUNDS;
    const bool momentum = algo == &pfl_algo_fedavgm;
    if (momentum) {
        wiring_set(&cfg, algo, "server-momentum", 0.7);
        wiring_set(&cfg, algo, "server-lr", 0.8);
    } else {
        wiring_set(&cfg, algo, "server-lr", 0.03);
        wiring_set(&cfg, algo, "server-beta1", 0.6);
        if (algo != &pfl_algo_fedadagrad) wiring_set(&cfg, algo, "server-beta2", 0.8);
        wiring_set(&cfg, algo, "server-tau", 0.02);
    }
    bool by_samples = momentum;
    if (other_mean) by_samples = !by_samples, cfg.algo.server_mean = by_samples ? "samples" : "uniform";
    wiring_fed w;
    wiring_init(&w, algo, &cfg, WIRING_DNN);
    opt_ref ref = {.algo = algo, .by_samples = by_samples};
    ref.m = calloc(w.P, sizeof(double)), ref.v = malloc(w.P * sizeof(double));
    for (size_t j = 0; j < w.P; j++) ref.v[j] = (double)cfg.algo.server_tau * cfg.algo.server_tau;
    ref.start = tiny_floats(w.V), ref.expected = tiny_floats(w.V);
    for (int k = 0; k < WIRING_CLIENTS; k++) ref.trained[k] = tiny_floats(w.V);
    CHECK(wiring_run(&w, opt_hook, &ref) == 0, "%s: the run", algo->name);
    CHECK(ref.checked == OPT_ROUNDS, "%s: %d of %d rounds checked", algo->name, ref.checked, OPT_ROUNDS);
    free(ref.m), free(ref.v), free(ref.start), free(ref.expected);
    for (int k = 0; k < WIRING_CLIENTS; k++) free(ref.trained[k]);
    wiring_free(&w);
}

/* --server-nesterov, and a round with no update (every client dropped): no step, the state stays. */
static void test_fedavgm_nesterov(void) {
    pfl_config cfg = wiring_config(&pfl_algo_fedavgm, WIRING_DNN);
    cfg.rounds = OPT_ROUNDS;
    wiring_set(&cfg, &pfl_algo_fedavgm, "server-momentum", 0.6);
    cfg.algo.server_nesterov = true; /* a switch: wiring_set takes numbers */
    wiring_fed w;
    wiring_init(&w, &pfl_algo_fedavgm, &cfg, WIRING_DNN);
    opt_ref ref = {.algo = &pfl_algo_fedavgm, .by_samples = true};
    ref.m = calloc(w.P, sizeof(double)), ref.v = calloc(w.P, sizeof(double));
    ref.start = tiny_floats(w.V), ref.expected = tiny_floats(w.V);
    for (int k = 0; k < WIRING_CLIENTS; k++) ref.trained[k] = tiny_floats(w.V);
    CHECK(wiring_run(&w, opt_hook, &ref) == 0, "fedavgm --server-nesterov: the run");
    CHECK(ref.checked == OPT_ROUNDS, "fedavgm --server-nesterov: %d rounds checked", ref.checked);
    /* no uploads: the aggregation leaves the global model and the velocity */
    float *before = wiring_copy_global(&w);
    const double m0 = pfl_server_opt_state(&w.f.fl, false)[0];
    CHECK(m0 != 0.0, "fedavgm: the velocity moved");
    pfl_algo_fedavgm.aggregate(&w.f.fl, NULL, 0, NULL);
    CHECK(!memcmp(before, w.f.fl.global, w.V * sizeof(float)) && pfl_server_opt_state(&w.f.fl, false)[0] == m0,
          "fedavgm: a round without uploads takes no step");
    free(before);
    free(ref.m), free(ref.v), free(ref.start), free(ref.expected);
    for (int k = 0; k < WIRING_CLIENTS; k++) free(ref.trained[k]);
    wiring_free(&w);
}

/* ---- FedADMM: client i from theta with E random epochs, grad + alpha_i + rho (w - theta); alpha_i += rho (w - theta);
 * upload theta + 2 (w - theta); server theta + eta_r (uniform mean - theta), eta_r = eta2 from round target + 1 ---- */

typedef struct {
    bool fixed;
    float *alpha[WIRING_CLIENTS], *start, *expected, *trained[WIRING_CLIENTS];
    int checked, epochs_seen[4]; /* how often each E (1..3) was drawn */
} admm_ref;

static void admm_add_vector(void *ctx, const pfl_model *m, const float *params, float *grads) {
    (void)params;
    const float *v = ctx;
    for (size_t j = 0; j < m->num_params; j++) grads[j] += v[j];
}

static void admm_expect(wiring_fed *w, admm_ref *ref, int r) {
    const pfl_config *cfg = &w->f.fl.cfg;
    const pfl_algo_params *a = &cfg->algo;
    int sel[WIRING_CLIENTS];
    const int n = wiring_selected(w, r, sel);
    memcpy(ref->start, w->f.fl.global, w->V * sizeof(float));
    double mean_sum[4096] = {0}; /* the uploads' sum (P <= 4096 on the dnn of 16 -> 100 -> 4) */
    CHECK(w->P <= 4096, "fedadmm: the test's buffers hold the model");
    for (int k = 0; k < n; k++) {
        const int c = sel[k];
        int E = cfg->epochs;
        if (!ref->fixed) { /* the authors' random.randint(1, local_ep), from the client's own stream */
            pfl_rng rng = pfl_rng_stream(cfg->seed, r, c, PFL_RNG_ALGO);
            E = 1 + (int)pfl_rng_below(&rng, (uint64_t)cfg->epochs);
        }
        ref->epochs_seen[E <= 3 ? E : 0]++;
        pfl_step s = wiring_default_step(w, r);
        s.epochs = E;
        pfl_step_add_prox(&s, a->admm_rho, ref->start, 0, w->P);
        bool dual = false;
        for (size_t j = 0; j < w->P; j++) dual |= ref->alpha[c][j] != 0.0f;
        if (dual) pfl_step_add_grad(&s, admm_add_vector, ref->alpha[c]);
        float *y = ref->trained[k];
        memcpy(y, ref->start, w->V * sizeof(float));
        wiring_train(w, c, r, y, &s);
        for (size_t j = 0; j < w->P; j++) {
            ref->alpha[c][j] += a->admm_rho * (y[j] - ref->start[j]);
            mean_sum[j] += (double)ref->start[j] + 2.0 * ((double)y[j] - ref->start[j]); /* uniform weights */
        }
    }
    const double eta = r - 1 >= a->admm_target_round ? a->admm_eta2 : a->server_lr;
    for (size_t j = 0; j < w->P; j++)
        ref->expected[j] = (float)(ref->start[j] + eta * (mean_sum[j] / n - ref->start[j]));
}

static int admm_hook(wiring_fed *w, int round, void *ctx) {
    admm_ref *ref = ctx;
    if (round > 0) {
        CHECK(wiring_close(w->f.fl.global, ref->expected, 0, w->P), "fedadmm round %d: the global model (max diff %g)",
              round, wiring_max_diff(w->f.fl.global, ref->expected, 0, w->P));
        for (int c = 0; c < WIRING_CLIENTS; c++)
            CHECK(wiring_close(pfl_fedadmm_dual(&w->f.fl, c), ref->alpha[c], 0, w->P),
                  "fedadmm round %d: client %d's dual variable (max diff %g)", round, c,
                  wiring_max_diff(pfl_fedadmm_dual(&w->f.fl, c), ref->alpha[c], 0, w->P));
        ref->checked++;
    }
    const wiring_round *m = &w->rounds[round];
    for (int c = 0; c < WIRING_CLIENTS; c++) {
        const double acc = wiring_accuracy(w, w->f.fl.global, c, true);
        CHECK(m->evaluated && fabs(m->client_acc[c] - acc) < 1e-12,
              "fedadmm round %d client %d: scored %g, the global model's %g", round, c, m->client_acc[c], acc);
    }
    if (round < w->f.fl.cfg.rounds) admm_expect(w, ref, round + 1);
    return 0;
}

static void test_fedadmm(bool fixed) {
    pfl_config cfg = wiring_config(&pfl_algo_fedadmm, WIRING_DNN);
    cfg.rounds = OPT_ROUNDS, cfg.epochs = 3;
    wiring_set(&cfg, &pfl_algo_fedadmm, "admm-rho", 0.3);
    wiring_set(&cfg, &pfl_algo_fedadmm, "server-lr", 0.8);
    wiring_set(&cfg, &pfl_algo_fedadmm, "admm-eta2", 0.6);
    wiring_set(&cfg, &pfl_algo_fedadmm, "admm-target-round", 2);
    if (fixed) cfg.algo.admm_epochs = "fixed";
    wiring_fed w;
    wiring_init(&w, &pfl_algo_fedadmm, &cfg, WIRING_DNN);
    admm_ref ref = {.fixed = fixed};
    ref.start = tiny_floats(w.V), ref.expected = tiny_floats(w.V);
    for (int k = 0; k < WIRING_CLIENTS; k++) ref.trained[k] = tiny_floats(w.V), ref.alpha[k] = tiny_floats(w.P);
    CHECK(wiring_run(&w, admm_hook, &ref) == 0, "fedadmm: the run");
    CHECK(ref.checked == OPT_ROUNDS, "fedadmm: %d of %d rounds checked", ref.checked, OPT_ROUNDS);
    if (fixed) CHECK(ref.epochs_seen[3] > 0 && !ref.epochs_seen[1] && !ref.epochs_seen[2], "fedadmm fixed: 3 epochs");
    else
        CHECK((ref.epochs_seen[1] > 0) + (ref.epochs_seen[2] > 0) + (ref.epochs_seen[3] > 0) >= 2,
              "fedadmm: the local epochs vary (1: %d, 2: %d, 3: %d times)", ref.epochs_seen[1], ref.epochs_seen[2],
              ref.epochs_seen[3]);
    for (int k = 0; k < WIRING_CLIENTS; k++) free(ref.trained[k]), free(ref.alpha[k]);
    free(ref.start), free(ref.expected);
    wiring_free(&w);
}

/* The dual step by hand (the rate schedule is checked through the wiring test's global model only). */
static void test_fedadmm_by_hand(void) {
    float alpha[2] = {0.5f, -1.0f};
    const float w[2] = {2.0f, 1.0f}, theta[2] = {1.0f, 3.0f};
    pfl_fedadmm_dual_update(alpha, w, theta, 0.25f, 0, 2);
    expect_near(alpha[0], 0.75, "fedadmm alpha_0 + rho (w - theta)");
    expect_near(alpha[1], -1.5, "fedadmm alpha_1 + rho (w - theta)");
}

int main(void) {
    test_fedopt_by_hand();
    test_fedavgm_by_hand();
    const pfl_algo *algos[] = {&pfl_algo_fedavgm, &pfl_algo_fedadam, &pfl_algo_fedyogi, &pfl_algo_fedadagrad};
    for (int i = 0; i < 4; i++) {
        run_wiring(algos[i], false);
        run_wiring(algos[i], true);
    }
    test_fedavgm_nesterov();
    test_fedadmm_by_hand();
    test_fedadmm(false);
    test_fedadmm(true);
    TEST_MAIN_END();
}
