/* The traditional methods SCAFFOLD, FedDyn, FedLC and FedNTD, each by its
 * distinctive step, worked by hand or against FedAvg's step, on the tiny
 * federation of tests/tiny.h (the "dnn" model: fc1 16->100, fc 100->3, 2003
 * parameters; client 0 trains on 4 samples, client 1 on 6, batch 4, so
 * client 0 trains 1 batch a round and client 1 2; lr 0.1):
 *
 *  - SCAFFOLD: the client's and the server's control updates by hand; round
 *    1 (zero controls) under --server-mean samples and --server-lr 1 is
 *    FedAvg's bit for bit, round 2 is not; after round 1 each c_i is
 *    (x - y_i) / (K_i lr) of the model FedAvg's step trains, with K_i from
 *    the partition, and c the mean of the c_i (the server's and the
 *    clients' computations agree); a corrected step differs from FedAvg's
 *    by lr (c - c_i); the server step x + eta_g (mean - x) and the c update
 *    on hand-made uploads (two of three clients: c moves by 1/N of the sum).
 *  - FedDyn: its client and server updates by hand; --dyn-alpha 0 under
 *    --server-mean samples is FedAvg bit for bit over 3 rounds; the server's
 *    h (1/N of the sum) and correction on hand-made uploads over two rounds; a step differs
 *    from FedAvg's by lr (alpha/2 d/|d| - grad_k) (PFLlib's norm) or lr
 *    (alpha d - grad_k) (the paper's square), d = w - w_global.
 *  - FedLC: the offsets -tau n^(-1/4) by hand; a step is FedAvg's step with
 *    the offsets of every client's label counts (global) or of its own
 *    (local); --lc-tau 0 is FedAvg bit for bit.
 *  - FedNTD: the not-true distillation loss and gradient by hand (tau 1 and
 *    2) and against finite differences; --ntd-beta 0 under --server-mean
 *    samples is FedAvg bit for bit, under PFLlib's uniform mean not; that
 *    uniform mean under FLAYER's mask (1 over the uploads that sent an
 *    element, or the literal sum over all) by hand. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "check.h"
#include "fd_check.h"
#include "fl/fl.h"
#include "tiny.h"
#include "util/err.h"

static const int n_train[2] = {4, 6}, n_test[2] = {3, 3};
#define LR 0.1f

/* Two clients, every method's parameters at their defaults. */
static pfl_config config(int rounds) {
    pfl_config cfg = tiny_config(2);
    cfg.rounds = rounds;
    cfg.lr = LR;
    pfl_algo_params *a = &cfg.algo;
    a->server_lr = 1.0f, a->dyn_alpha = 0.01f, a->lc_tau = 1.0f, a->ntd_beta = 1.0f, a->ntd_tau = 1.0f;
    return cfg;
}

/* The global model after `cfg.rounds` rounds of `algo`, into out (P floats). */
static void final_global(const pfl_algo *algo, pfl_config cfg, float *out) {
    tiny_fed f;
    tiny_fed_init(&f, algo, cfg, n_train, n_test);
    CHECK(pfl_fl_run(&f.fl, NULL, NULL) == 0, "%s runs: %s", algo->name, pfl_errmsg());
    memcpy(out, f.fl.global, f.m.num_params * sizeof(float));
    tiny_fed_free(&f);
}

/* FedAvg's step (pfl_step_default) of `client` in the current round from `start`, into out. */
static void fedavg_step(pfl_fl *fl, int client, const float *start, float *out) {
    pfl_train_stats st = {0};
    memcpy(out, start, pfl_model_vector_len(fl->model) * sizeof(float));
    const pfl_step s = pfl_step_default(fl);
    pfl_step_run(fl, client, &fl->workers[0], out, &s, &st);
}

/* The method's local training of `client` in the current round from `start`, into out. */
static void method_step(pfl_fl *fl, int client, const float *start, float *out) {
    pfl_train_stats st = {0};
    memcpy(out, start, pfl_model_vector_len(fl->model) * sizeof(float));
    fl->algo->local_train(fl, client, &fl->workers[0], out, &st);
}

/* Elements j of [0, n) where |(a_j - b_j) - want_j| > tol. */
static size_t count_off(const float *a, const float *b, const double *want, size_t n, double tol) {
    size_t bad = 0;
    for (size_t j = 0; j < n; j++) bad += !(fabs(((double)a[j] - b[j]) - want[j]) <= tol);
    return bad;
}

/* ---- SCAFFOLD ---- */

static void test_scaffold_by_hand(void) {
    /* c_i = (1, -2), c = (0.5, 0.5), x = (1, 1), y = (0.75, 1.25), K lr = 0.2 (inv 5):
     * c_i - c + (x - y) inv = (1 - 0.5 + 1.25, -2 - 0.5 - 1.25) = (1.75, -3.75) */
    float ci[2] = {1.0f, -2.0f};
    const float c[2] = {0.5f, 0.5f}, x[2] = {1.0f, 1.0f}, y[2] = {0.75f, 1.25f};
    pfl_scaffold_control_update(ci, c, x, y, 0, 2, 5.0f);
    CHECK(ci[0] == 1.75f && ci[1] == -3.75f, "client control (%g, %g), by hand (1.75, -3.75)", ci[0], ci[1]);
    /* server, N = 4: uploads (0.75, 1.25) inv 5 and (1, 0.5) inv 2.5, and one that trained no batch (inv 0):
     * c_k+ - c_k = (1.25 - 0.5, -1.25 - 0.5) and (0 - 0.5, 1.25 - 0.5): sum (0.25, -1), c + sum/4 */
    float cs[2] = {0.5f, 0.5f};
    const float y1[2] = {1.0f, 0.5f}, idle[2] = {9.0f, 9.0f};
    const float *ys[3] = {y, y1, idle};
    const float inv[3] = {5.0f, 2.5f, 0.0f};
    float sum[2] = {0.0f, 0.0f}; /* the slots' sum, in slot order (pfl_slot_sum's order) */
    for (int k = 0; k < 3; k++) pfl_scaffold_control_sum(sum, cs, x, ys[k], inv[k], 0, 2);
    pfl_scaffold_control_mean(cs, sum, 4, 0, 2);
    CHECK(cs[0] == 0.5625f && cs[1] == 0.25f, "server control (%g, %g), by hand (0.5625, 0.25)", cs[0], cs[1]);
}

static void test_scaffold_round_one_is_fedavg(void) {
    const size_t P = 2003;
    float *avg = tiny_floats(P), *sc = tiny_floats(P);
    pfl_config cfg = config(1);
    final_global(&pfl_algo_fedavg, cfg, avg);
    cfg.algo.server_mean = "samples";
    final_global(&pfl_algo_scaffold, cfg, sc);
    CHECK(tiny_same(avg, sc, 0, P), "scaffold, zero controls, --server-lr 1, samples: round 1 differs from FedAvg's "
                                    "in %zu elements",
          tiny_count_diff(avg, sc, 0, P));
    cfg.algo.server_mean = NULL; /* uniform: clients of 4 and 6 samples weigh alike */
    final_global(&pfl_algo_scaffold, cfg, sc);
    CHECK(!tiny_same(avg, sc, 0, P), "scaffold's uniform mean is FedAvg's");
    cfg.rounds = 2, cfg.algo.server_mean = "samples";
    final_global(&pfl_algo_fedavg, cfg, avg);
    final_global(&pfl_algo_scaffold, cfg, sc);
    CHECK(!tiny_same(avg, sc, 0, P), "scaffold's round 2 (controls no longer zero) is FedAvg's");
    free(avg), free(sc);
}

static void test_scaffold_controls(void) {
    tiny_fed f;
    pfl_config cfg = config(1);
    tiny_fed_init(&f, &pfl_algo_scaffold, cfg, n_train, n_test);
    pfl_fl *fl = &f.fl;
    const size_t P = f.m.num_params, V = pfl_model_vector_len(&f.m);
    float *x0 = tiny_floats(V), *y = tiny_floats(V), *c0 = tiny_floats(P), *c1 = tiny_floats(P);
    memcpy(x0, fl->global, V * sizeof(float));
    CHECK(pfl_fl_run(fl, NULL, NULL) == 0, "scaffold runs: %s", pfl_errmsg());
    memcpy(c0, pfl_scaffold_control(fl, 0), P * sizeof(float));
    memcpy(c1, pfl_scaffold_control(fl, 1), P * sizeof(float));
    /* each client's round-1 model is FedAvg's step (no correction yet); K_0 = 1, K_1 = 2 (6 samples, batch 4) */
    fl->round = 1;
    const float *ci[2] = {c0, c1};
    const double inv[2] = {1.0 / (1 * LR), 1.0 / (2 * LR)};
    for (int k = 0; k < 2; k++) {
        fedavg_step(fl, k, x0, y);
        size_t bad = 0, zero = 0;
        for (size_t j = 0; j < P; j++) {
            bad += !check_close(ci[k][j], ((double)x0[j] - y[j]) * inv[k], 1e-5);
            zero += ci[k][j] == 0.0f;
        }
        CHECK(bad == 0 && zero < P / 2, "client %d: c_i is (x - y_i) / (K_i lr) in %zu of %zu elements (%zu zero)", k,
              P - bad, P, zero);
    }
    /* the server's c, from the uploads alone: (c_0 + c_1) / N, N = 2 */
    const float *c = pfl_scaffold_control(fl, -1);
    size_t bad = 0;
    for (size_t j = 0; j < P; j++) bad += !check_close(c[j], 0.5 * ((double)c0[j] + c1[j]), 1e-5);
    CHECK(bad == 0, "server c differs from the mean of the clients' c_i in %zu elements", bad);

    /* round 2, client 0 (one batch): y_fedavg - y_scaffold = lr (c - c_0) */
    fl->round = 2;
    float *start = tiny_floats(V), *ys = tiny_floats(V);
    double *want = calloc(P, sizeof(double));
    memcpy(start, fl->global, V * sizeof(float));
    for (size_t j = 0; j < P; j++) want[j] = (double)LR * ((double)c[j] - c0[j]);
    fedavg_step(fl, 0, start, y);
    method_step(fl, 0, start, ys);
    size_t off = count_off(y, ys, want, P, 1e-6);
    CHECK(off == 0, "corrected step: y_fedavg - y_scaffold != lr (c - c_i) in %zu of %zu elements", off, P);
    free(x0), free(y), free(c0), free(c1), free(start), free(ys), free(want);
    tiny_fed_free(&f);
}

/* x, uploads y_0 and y_1 as patterns over the parameters (the running statistics: none in the dnn). */
static void patterns(float *x, float *y0, float *y1, size_t P) {
    for (size_t j = 0; j < P; j++) {
        x[j] = (float)((double)(j % 7) * 0.25 - 0.5);
        y0[j] = x[j] + (float)((double)(j % 5) * 0.125 - 0.25);
        y1[j] = x[j] - (float)((double)(j % 3) * 0.5 - 0.5);
    }
}

/* Three clients, of which two upload: the controls divide by N = 3, the mean by the 2 uploads. */
static const int three_train[3] = {4, 6, 5}, three_test[3] = {3, 3, 3};

static void test_scaffold_server(void) {
    tiny_fed f;
    pfl_config cfg = config(1);
    cfg.clients = 3, cfg.algo.server_lr = 2.0f;
    tiny_fed_init(&f, &pfl_algo_scaffold, cfg, three_train, three_test);
    pfl_fl *fl = &f.fl;
    const size_t P = f.m.num_params;
    float *x = tiny_floats(P), *y0 = tiny_floats(P), *y1 = tiny_floats(P);
    patterns(x, y0, y1, P);
    memcpy(fl->global, x, P * sizeof(float));
    fl->round = 1;
    const int clients[2] = {0, 1};
    float *uploads[2] = {y0, y1};
    fl->algo->aggregate(fl, clients, 2, uploads);
    /* x + 2 (uniform mean - x); c = (1/3) ((x - y_0) / (1 lr) + (x - y_1) / (2 lr)) */
    const float *c = pfl_scaffold_control(fl, -1);
    size_t bad_x = 0, bad_c = 0;
    for (size_t j = 0; j < P; j++) {
        const double mean = 0.5 * ((double)y0[j] + y1[j]);
        bad_x += !check_close(fl->global[j], x[j] + 2.0 * (mean - x[j]), 1e-6);
        bad_c += !check_close(c[j], (((double)x[j] - y0[j]) / LR + ((double)x[j] - y1[j]) / (2 * LR)) / 3.0, 1e-5);
    }
    CHECK(bad_x == 0, "x + eta_g (mean - x): %zu of %zu elements differ", bad_x, P);
    CHECK(bad_c == 0, "server control on hand-made uploads: %zu of %zu elements differ", bad_c, P);
    free(x), free(y0), free(y1);
    tiny_fed_free(&f);
}

/* ---- FedDyn ---- */

static void test_feddyn_by_hand(void) {
    /* grad_k = (0.5, -1), w = (2, 0), w_global = (1, 1), alpha 0.25: grad_k - alpha (w - w_global) = (0.25, -0.75) */
    float grad[2] = {0.5f, -1.0f};
    const float w[2] = {2.0f, 0.0f}, g[2] = {1.0f, 1.0f};
    pfl_feddyn_client_update(grad, w, g, 0, 2, 0.25f);
    CHECK(grad[0] == 0.25f && grad[1] == -0.75f, "client update (%g, %g), by hand (0.25, -0.75)", grad[0], grad[1]);
    /* h = (0, 1), uploads (2, 0) and (0, 3), N = 4, alpha 0.5: sum (w_k - w_global) = (0, 1),
     * h - 0.5 (0, 1) / 4 = (0, 0.875) */
    float h[2] = {0.0f, 1.0f};
    const float w1[2] = {0.0f, 3.0f};
    const float *ws[2] = {w, w1};
    float sum[2] = {0.0f, 0.0f}; /* the slots' sum, in slot order (pfl_slot_sum's order) */
    for (int k = 0; k < 2; k++) pfl_feddyn_state_sum(sum, ws[k], g, 0, 2);
    pfl_feddyn_state_step(h, sum, 4, 0.5f, 0, 2);
    CHECK(h[0] == 0.0f && h[1] == 0.875f, "server state (%g, %g), by hand (0, 0.875)", h[0], h[1]);
}

static void test_feddyn_alpha_zero_is_fedavg(void) {
    const size_t P = 2003;
    float *avg = tiny_floats(P), *dyn = tiny_floats(P);
    pfl_config cfg = config(3);
    final_global(&pfl_algo_fedavg, cfg, avg);
    cfg.algo.server_mean = "samples", cfg.algo.dyn_alpha = 0.0f;
    final_global(&pfl_algo_feddyn, cfg, dyn);
    CHECK(tiny_same(avg, dyn, 0, P), "feddyn --dyn-alpha 0 --server-mean samples: 3 rounds differ from FedAvg's in "
                                     "%zu elements",
          tiny_count_diff(avg, dyn, 0, P));
    cfg.algo.dyn_penalty = "squared";
    final_global(&pfl_algo_feddyn, cfg, dyn);
    CHECK(tiny_same(avg, dyn, 0, P), "feddyn --dyn-alpha 0 --dyn-penalty squared differs from FedAvg");
    cfg.algo.dyn_alpha = 0.1f;
    final_global(&pfl_algo_feddyn, cfg, dyn);
    CHECK(!tiny_same(avg, dyn, 0, P), "feddyn --dyn-alpha 0.1 is FedAvg");
    free(avg), free(dyn);
}

static void test_feddyn_server(void) {
    tiny_fed f;
    pfl_config cfg = config(1);
    const float alpha = 0.5f;
    cfg.clients = 3, cfg.algo.dyn_alpha = alpha;
    tiny_fed_init(&f, &pfl_algo_feddyn, cfg, three_train, three_test);
    pfl_fl *fl = &f.fl;
    const size_t P = f.m.num_params;
    float *x = tiny_floats(P), *y0 = tiny_floats(P), *y1 = tiny_floats(P);
    double *h = calloc(P, sizeof(double));
    patterns(x, y0, y1, P);
    memcpy(fl->global, x, P * sizeof(float));
    const int clients[2] = {0, 1};
    float *uploads[2] = {y0, y1};
    for (int round = 1; round <= 2; round++) {
        /* h <- h - alpha/N sum (y_k - x), N = 3; w_global = uniform mean of the 2 uploads - h / alpha */
        float *prev = tiny_floats(P);
        memcpy(prev, fl->global, P * sizeof(float));
        fl->round = round;
        fl->algo->aggregate(fl, clients, 2, uploads);
        const float *hs = pfl_feddyn_state(fl, -1);
        size_t bad_h = 0, bad_g = 0;
        for (size_t j = 0; j < P; j++) {
            h[j] -= alpha / 3.0 * (((double)y0[j] - prev[j]) + ((double)y1[j] - prev[j]));
            bad_h += !check_close(hs[j], h[j], 1e-5);
            bad_g += !check_close(fl->global[j], 0.5 * ((double)y0[j] + y1[j]) - h[j] / alpha, 1e-5);
        }
        CHECK(bad_h == 0, "round %d: h differs from the hand computation in %zu of %zu elements", round, bad_h, P);
        CHECK(bad_g == 0, "round %d: mean - h / alpha differs in %zu of %zu elements", round, bad_g, P);
        free(prev);
    }
    free(x), free(y0), free(y1), free(h);
    tiny_fed_free(&f);
}

/* A step of client 0 (one batch) from w_global + d, d = (3, 4) on the first two parameters (|d| = 5), in round
 * 2 (grad_0 from round 1): y_fedavg - y_feddyn = lr (penalty gradient - grad_0). */
static void check_feddyn_step(const char *penalty) {
    tiny_fed f;
    pfl_config cfg = config(1);
    const float alpha = 1.0f;
    cfg.algo.dyn_alpha = alpha, cfg.algo.dyn_penalty = penalty;
    tiny_fed_init(&f, &pfl_algo_feddyn, cfg, n_train, n_test);
    pfl_fl *fl = &f.fl;
    const size_t P = f.m.num_params, V = pfl_model_vector_len(&f.m);
    CHECK(pfl_fl_run(fl, NULL, NULL) == 0, "feddyn runs: %s", pfl_errmsg());
    float *g0 = tiny_floats(P), *start = tiny_floats(V), *yf = tiny_floats(V), *yd = tiny_floats(V);
    double *want = calloc(P, sizeof(double));
    memcpy(g0, pfl_feddyn_state(fl, 0), P * sizeof(float));
    size_t zero = 0;
    for (size_t j = 0; j < P; j++) zero += g0[j] == 0.0f;
    CHECK(zero < P / 2, "%s: grad_0 is zero in %zu of %zu elements after round 1", penalty, zero, P);
    memcpy(start, fl->global, V * sizeof(float));
    start[0] += 3.0f, start[1] += 4.0f;
    const bool squared = !strcmp(penalty, "squared");
    for (size_t j = 0; j < P; j++) {
        const double d = (double)start[j] - fl->global[j];
        want[j] = (double)LR * ((squared ? alpha * d : alpha / 2.0 * d / 5.0) - g0[j]);
    }
    fl->round = 2;
    fedavg_step(fl, 0, start, yf);
    method_step(fl, 0, start, yd);
    const size_t off = count_off(yf, yd, want, P, 2e-6);
    CHECK(off == 0, "%s: y_fedavg - y_feddyn != lr (penalty gradient - grad_0) in %zu of %zu elements", penalty, off,
          P);
    free(g0), free(start), free(yf), free(yd), free(want);
    tiny_fed_free(&f);
}

static void test_feddyn_step(void) {
    check_feddyn_step("norm");
    check_feddyn_step("squared");
}

/* ---- FedLC ---- */

static void test_fedlc_offsets(void) {
    /* tau 2, counts 16, 1, 0, 81: -2/2, -2/1, -inf, -2/3 */
    const double counts[4] = {16, 1, 0, 81};
    float off[4];
    pfl_fedlc_offsets(counts, 4, 2.0f, off);
    CHECK(off[0] == -1.0f && off[1] == -2.0f && off[2] == -INFINITY && check_close(off[3], -2.0 / 3.0, 1e-7),
          "offsets %g %g %g %g, by hand -1 -2 -inf -0.6667", off[0], off[1], off[2], off[3]);
}

/* FedLC's step of client 0 against FedAvg's step with the offsets of counts n (tau 1). */
static void check_fedlc_step(const char *counts, const double n[3]) {
    tiny_fed f;
    pfl_config cfg = config(1);
    cfg.algo.lc_counts = counts;
    tiny_fed_init(&f, &pfl_algo_fedlc, cfg, n_train, n_test);
    pfl_fl *fl = &f.fl;
    const size_t V = pfl_model_vector_len(&f.m);
    float *want = tiny_floats(V), *got = tiny_floats(V), *plain = tiny_floats(V);
    float offset[3];
    for (int c = 0; c < 3; c++) offset[c] = (float)(-1.0 / sqrt(sqrt(n[c])));
    fl->round = 1;
    pfl_step s = pfl_step_default(fl);
    s.ce_offset = offset;
    pfl_train_stats st = {0};
    memcpy(want, fl->global, V * sizeof(float));
    pfl_step_run(fl, 0, &fl->workers[0], want, &s, &st);
    method_step(fl, 0, fl->global, got);
    fedavg_step(fl, 0, fl->global, plain);
    size_t bad = 0;
    for (size_t j = 0; j < V; j++) bad += !check_close(got[j], want[j], 1e-6);
    CHECK(bad == 0, "--lc-counts %s: the step differs from one with offsets -n^(-1/4) in %zu of %zu elements", counts,
          bad, V);
    CHECK(!tiny_same(got, plain, 0, V), "--lc-counts %s: the calibrated step is FedAvg's", counts);
    free(want), free(got), free(plain);
    tiny_fed_free(&f);
}

static void test_fedlc_step(void) {
    /* labels i % 3: client 0 trains on samples 0-3 (labels 0 1 2 0), client 1 on 7-12 (1 2 0 1 2 0) */
    const double every[3] = {4, 3, 3}, own[3] = {2, 1, 1};
    check_fedlc_step("global", every);
    check_fedlc_step("local", own);
    const size_t P = 2003;
    float *avg = tiny_floats(P), *lc = tiny_floats(P);
    pfl_config cfg = config(2);
    final_global(&pfl_algo_fedavg, cfg, avg);
    cfg.algo.lc_tau = 0.0f;
    final_global(&pfl_algo_fedlc, cfg, lc);
    CHECK(tiny_same(avg, lc, 0, P), "fedlc --lc-tau 0 differs from FedAvg in %zu elements",
          tiny_count_diff(avg, lc, 0, P));
    free(avg), free(lc);
}

/* ---- FedNTD ---- */

static void test_fedntd_by_hand(void) {
    /* label 0; local not-true logits (0, ln 3) -> (1/4, 3/4), the teacher's (ln 3, 0) -> (3/4, 1/4):
     * KL = 3/4 ln 3 - 1/4 ln 3 = ln(3) / 2; dz = tau (p_l - p_g) / B = (0, -1/2, 1/2). At tau 2 the logits
     * doubled give the same softmax: loss tau^2 ln(3) / 2, dz (0, -1, 1). */
    const float l3 = logf(3.0f);
    for (int tau = 1; tau <= 2; tau++) {
        const float z[3] = {5.0f, 0.0f, tau * l3}, t[3] = {-7.0f, tau * l3, 0.0f};
        const uint8_t y[1] = {0};
        float dz[3] = {0};
        const double loss = pfl_fedntd_loss(z, t, y, 1, 3, (float)tau, dz);
        CHECK(check_close(loss, tau * tau * log(3.0) / 2.0, 1e-6), "tau %d: loss %g, by hand %g", tau, loss,
              tau * tau * log(3.0) / 2.0);
        CHECK(dz[0] == 0.0f && check_close(dz[1], -0.5 * tau, 1e-6) && check_close(dz[2], 0.5 * tau, 1e-6),
              "tau %d: gradient (%g, %g, %g), by hand (0, %g, %g)", tau, dz[0], dz[1], dz[2], -0.5 * tau, 0.5 * tau);
    }
}

typedef struct {
    float *z, *t;
    uint8_t *y;
    int B, C;
    float tau;
    float *scratch;
} ntd_case;

static double ntd_loss_of(void *ctx) {
    ntd_case *c = ctx;
    memset(c->scratch, 0, sizeof(float) * (size_t)c->B * c->C);
    return pfl_fedntd_loss(c->z, c->t, c->y, c->B, c->C, c->tau, c->scratch);
}

static void test_fedntd_gradient(void) {
    enum { B = 3, C = 5 };
    float z[B * C], t[B * C], dz[B * C] = {0}, num[B * C], scratch[B * C];
    uint8_t y[B] = {0, 3, 4};
    pfl_rng r = tiny_rng(5);
    tiny_fill(z, B * C, -2, 2, &r);
    tiny_fill(t, B * C, -2, 2, &r);
    ntd_case c = {z, t, y, B, C, 1.5f, scratch};
    pfl_fedntd_loss(z, t, y, B, C, c.tau, dz);
    for (long i = 0; i < B * C; i++) num[i] = (float)fd_one(z, i, 1e-2f, ntd_loss_of, &c);
    check_grad("fedntd not-true distillation", num, dz, B * C);

    const size_t P = 2003;
    float *avg = tiny_floats(P), *ntd = tiny_floats(P);
    pfl_config cfg = config(2);
    final_global(&pfl_algo_fedavg, cfg, avg);
    cfg.algo.ntd_beta = 0.0f, cfg.algo.server_mean = "samples";
    final_global(&pfl_algo_fedntd, cfg, ntd);
    CHECK(tiny_same(avg, ntd, 0, P), "fedntd --ntd-beta 0 --server-mean samples differs from FedAvg in %zu elements",
          tiny_count_diff(avg, ntd, 0, P));
    cfg.algo.ntd_beta = 1.0f;
    final_global(&pfl_algo_fedntd, cfg, ntd);
    CHECK(!tiny_same(avg, ntd, 0, P), "fedntd --ntd-beta 1 is FedAvg");
    cfg.algo.ntd_beta = 0.0f, cfg.algo.server_mean = NULL; /* PFLlib's uniform mean: clients of 4 and 6 samples */
    final_global(&pfl_algo_fedntd, cfg, ntd);
    CHECK(!tiny_same(avg, ntd, 0, P), "fedntd's uniform mean is FedAvg's");
    free(avg), free(ntd);
}

/* FedNTD's uniform mean under FLAYER's mask: 1 over the uploads that sent an element; an element nobody sent
 * keeps its value; the literal Eq. 9 reading sums the sent elements over all n. */
static void test_uniform_masked_mean(void) {
    for (int literal = 0; literal <= 1; literal++) {
        tiny_fed f;
        pfl_config cfg = config(1);
        cfg.modules.flayer_mask = true, cfg.modules.flayer_mask_literal = literal;
        tiny_fed_init(&f, &pfl_algo_fedntd, cfg, n_train, n_test);
        pfl_fl *fl = &f.fl;
        const size_t P = f.m.num_params;
        float *x = tiny_floats(P), *y0 = tiny_floats(P), *y1 = tiny_floats(P);
        patterns(x, y0, y1, P);
        memcpy(fl->global, x, P * sizeof(float));
        /* j % 3 == 0: both send, 1: client 0, 2: client 1; none when j % 5 == 4 */
        for (size_t j = 0; j < P; j++)
            fl->sent[0][j] = j % 3 != 2 && j % 5 != 4, fl->sent[1][j] = j % 3 != 1 && j % 5 != 4;
        const int clients[2] = {0, 1};
        float *uploads[2] = {y0, y1};
        fl->round = 1;
        fl->algo->aggregate(fl, clients, 2, uploads);
        size_t bad = 0;
        for (size_t j = 0; j < P; j++) {
            const double sum =
                j % 5 == 4 ? 0.0 : (j % 3 != 2 ? (double)y0[j] : 0.0) + (j % 3 != 1 ? (double)y1[j] : 0.0);
            const double want = literal ? sum / 2.0 : j % 5 == 4 ? x[j] : j % 3 == 0 ? sum / 2.0 : sum;
            bad += !check_close(fl->global[j], want, 1e-6);
        }
        CHECK(bad == 0, "uniform masked mean (literal %d): %zu of %zu elements differ from the hand computation",
              literal, bad, P);
        free(x), free(y0), free(y1);
        tiny_fed_free(&f);
    }
}

/* The same literal reading over three uploads, bit for bit: each element the double sum of the uploads that sent
 * it over n = 3 (a float 1/3 weight added in float would round differently; two uploads cannot tell, 1/2 being
 * exact). */
static void test_uniform_literal_three(void) {
    tiny_fed f;
    pfl_config cfg = config(1);
    cfg.clients = 3, cfg.modules.flayer_mask = true, cfg.modules.flayer_mask_literal = true;
    tiny_fed_init(&f, &pfl_algo_fedntd, cfg, three_train, three_test);
    pfl_fl *fl = &f.fl;
    const size_t P = f.m.num_params;
    float *u[3];
    pfl_rng r = tiny_rng(11);
    for (int k = 0; k < 3; k++) u[k] = tiny_floats(P), tiny_fill(u[k], P, -1, 1, &r);
    for (int k = 0; k < 3; k++)
        for (size_t j = 0; j < P; j++) fl->sent[k][j] = (j + (size_t)k) % 3 != 0 && j % 5 != 4;
    float *const uploads[3] = {u[0], u[1], u[2]};
    const int clients[3] = {0, 1, 2};
    fl->round = 1;
    fl->algo->aggregate(fl, clients, 3, uploads);
    size_t bad = 0;
    for (size_t j = 0; j < P; j++) {
        double sum = 0.0;
        for (int k = 0; k < 3; k++)
            if (fl->sent[k][j]) sum += u[k][j];
        const float want = (float)(sum / 3);
        bad += memcmp(&fl->global[j], &want, sizeof want) != 0;
    }
    CHECK(bad == 0, "uniform literal mean of 3: %zu of %zu elements differ from sum / 3 in double", bad, P);
    for (int k = 0; k < 3; k++) free(u[k]);
    tiny_fed_free(&f);
}

int main(void) {
    test_scaffold_by_hand();
    test_scaffold_round_one_is_fedavg();
    test_scaffold_controls();
    test_scaffold_server();
    test_feddyn_by_hand();
    test_feddyn_alpha_zero_is_fedavg();
    test_feddyn_server();
    test_feddyn_step();
    test_fedlc_offsets();
    test_fedlc_step();
    test_fedntd_by_hand();
    test_fedntd_gradient();
    test_uniform_masked_mean();
    test_uniform_literal_three();
    TEST_MAIN_END();
}
