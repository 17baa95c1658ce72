/* The distinctive steps of FedFomo, APPLE and PartialFed on the
 * tiny federation of tests/tiny.h ("dnn": fc1 16->100 = layer 0, fc 100->3 =
 * layer 1, PyTorch's order: weight, then bias), checked against numbers
 * worked out here from the papers' formulas, not from pfl's code:
 *
 *  - FedFomo: w_n = (L(theta_old) - L(theta_n)) / (||theta_n - theta_old||
 *    + 1e-5) on the held-out sample, for models whose output is a constant
 *    bias (so the loss is a closed form); the start is the positive weights'
 *    combination; P's row gains the weights once the client uploads; M
 *    picks the highest affinities; M models down in the message bytes;
 *  - APPLE: one batch's DR-vector and core step under each --reading
 *    (paper: the exact <g, c_j>, w_i = sum_j p_j c_j kept; pfllib: the core
 *    first, per-tensor means, w_i rebuilt), the 'cos' loss scheduler of
 *    each, the starting DR vector, what a client uploads and is scored on;
 *  - PartialFed: the temperature schedule, the layer gate (the partial
 *    initialization by the more likely choice), and one strategy step
 *    (Gumbel draw, straight-through gradient) redone here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "algos/apple.h"
#include "algos/fedfomo.h"
#include "algos/partialfed.h"
#include "check.h"
#include "fl/fl.h"
#include "nn/model.h"
#include "tiny.h"

/* the output bias of the dnn: the last 3 floats of layer 1 */
static float *out_bias(const pfl_model *m, float *v) { return v + m->layers[1].offset + m->layers[1].length - 3; }

/* cross-entropy of a constant output b for label y */
static double ce(const double b[3], int y) { return log(exp(b[0]) + exp(b[1]) + exp(b[2])) - b[y]; }

/* ---- FedFomo ---- */

static void test_fedfomo_weights(void) {
    /* 4 clients of 4 training samples; --fomo-val 0.25 holds out the last one: client 0's sample 3, label 0 */
    const int n_train[4] = {4, 4, 4, 4}, n_test[4] = {3, 3, 3, 3};
    pfl_config cfg = tiny_config(4);
    cfg.algo.fomo_val = 0.25f, cfg.algo.fomo_m = 0;
    tiny_fed f;
    tiny_fed_init(&f, &pfl_algo_fedfomo, cfg, n_train, n_test);
    pfl_fl *fl = &f.fl;
    const pfl_model *m = &f.m;
    const size_t V = pfl_model_vector_len(m);
    CHECK(m->layers[1].length == 303, "fc holds %zu floats, want 300 weights + 3 biases", m->layers[1].length);
    CHECK(f.part.clients[0].train[3] % 3 == 0, "client 0's held-out sample has label 0");

    /* theta_old: every parameter 0 (output bias 0: loss ln 3); uploads theta_n = theta_old with output bias
     * (a, 0, 0), a = 0, 1, -1, 2 for clients 0..3 */
    float *old = tiny_floats(V), *ups[4], *model = tiny_floats(V);
    CHECK(pfl_client_model_set(fl, 0, old) == 0, "client store");
    pfl_algo_fedfomo.local_init(fl, 0, model); /* theta_old = the start of the client's training */
    const double a[4] = {0, 1, -1, 2};
    for (int k = 0; k < 4; k++) {
        ups[k] = tiny_floats(V);
        out_bias(m, ups[k])[0] = (float)a[k];
    }
    const int clients[4] = {0, 1, 2, 3};
    pfl_algo_fedfomo.aggregate(fl, clients, 4, ups);

    const double b0[3] = {0, 0, 0}, L_old = ce(b0, 0);
    double want[4], positive = 0.0;
    for (int k = 0; k < 4; k++) {
        const double b[3] = {a[k], 0, 0};
        want[k] = (L_old - ce(b, 0)) / (fabs(a[k]) + 1e-5);
        if (want[k] > 0) positive += want[k];
    }
    int chosen[4];
    double w[4];
    const int n = pfl_fedfomo_downloads(fl, 0, chosen);
    CHECK(n == 4 && chosen[0] == 0 && chosen[3] == 3, "M = every client: %d models", n);
    const double got_positive = pfl_fedfomo_weights(fl, &fl->workers[0], 0, chosen, n, w);
    for (int k = 0; k < 4; k++)
        CHECK(check_close(w[k], want[k], 1e-5), "w_%d = %.7f, want %.7f", k, w[k], want[k]);
    CHECK(w[2] < 0 && w[0] == 0.0, "the worse model weighs below 0, the unchanged one 0");
    CHECK(check_close(got_positive, positive, 1e-5), "positive sum %g, want %g", got_positive, positive);

    /* the local initialization: (w_1 theta_1 + w_3 theta_3) / (w_1 + w_3): output bias 0 is (w_1 + 2 w_3) / (...) */
    fl->joins_next[0] = true;
    float *received = fl->workers[0].received;
    pfl_algo_fedfomo.receive(fl, 0, old, received);
    const double b_start = (want[1] * 1 + want[3] * 2) / (want[1] + want[3]);
    CHECK(check_close(out_bias(m, received)[0], b_start, 1e-5), "start bias %g, want %g", out_bias(m, received)[0],
          b_start);
    CHECK(tiny_count_diff(received, old, 0, V) == 1, "the start differs from theta_old in that bias only");
    /* P's row gains the weights when the client uploads (finish), not before */
    CHECK(pfl_fedfomo_affinity(fl, 0, 1) == 0.0 && pfl_fedfomo_affinity(fl, 0, 0) == 1.0, "P before the upload");
    pfl_algo_fedfomo.finish(fl, 0, received, model);
    for (int k = 0; k < 4; k++)
        CHECK(check_close(pfl_fedfomo_affinity(fl, 0, k), (k == 0) + want[k], 1e-6), "P[0][%d] = %g, want %g", k,
              pfl_fedfomo_affinity(fl, 0, k), (k == 0) + want[k]);
    /* M = 2: its own (1) and client 1 (w_1 ~ 0.547) above client 3 (w_3 ~ 0.430) and client 2 (< 0) */
    fl->cfg.algo.fomo_m = 2;
    CHECK(pfl_fedfomo_downloads(fl, 0, chosen) == 2 && chosen[0] == 0 && chosen[1] == 1, "M = 2 picks %d, %d",
          chosen[0], chosen[1]);
    /* FedALA's Table 3: (1 + M) models per round, M down */
    uint64_t down, up;
    pfl_algo_fedfomo.message_bytes(fl, 0, NULL, NULL, &down, &up);
    CHECK(down == 2 * 4 * (uint64_t)V && up == 4 * (uint64_t)V, "bytes %llu down, %llu up",
          (unsigned long long)down, (unsigned long long)up);
    for (int k = 0; k < 4; k++) free(ups[k]);
    free(old), free(model);
    tiny_fed_free(&f);
}

/* ---- APPLE ---- */

static void test_apple_lambda(const char *reading) {
    const int n_train[2] = {4, 4}, n_test[2] = {2, 2};
    pfl_config cfg = tiny_config(2);
    cfg.rounds = 10, cfg.algo.apple_l = 0.2f; /* the pull lasts floor(0.2 x 10) = 2 rounds */
    cfg.algo.reading = reading;
    tiny_fed f;
    tiny_fed_init(&f, &pfl_algo_apple, cfg, n_train, n_test);
    const bool paper = !strcmp(reading, "paper");
    /* paper: (cos(pi (r-1) / 2) + 1) / 2 in rounds 1, 2, then 0; PFLlib sets lambda at the end of round R
     * (0-based) from R, so round r pulls with the scheduler's r - 2 and round 1 with its initial 1 */
    const double want_paper[6] = {0, 1.0, 0.5, 0.0, 0.0, 0.0}, want_pfllib[6] = {0, 1.0, 1.0, 0.5, 0.0, 0.0};
    for (int r = 1; r <= 5; r++) {
        f.fl.round = r;
        const double want = paper ? want_paper[r] : want_pfllib[r];
        CHECK(check_close(pfl_apple_lambda(&f.fl), want, 1e-12), "--reading %s, round %d: lambda %g, want %g",
              reading, r, pfl_apple_lambda(&f.fl), want);
    }
    f.fl.cfg.algo.apple_scheduler = "exp";
    f.fl.round = paper ? 2 : 3;
    CHECK(check_close(pfl_apple_lambda(&f.fl), sqrt(0.001), 1e-12), "--reading %s: exp: 0.001^(1/2)", reading);
    tiny_fed_free(&f);
}

/* Three different cores on APPLE's server, as uploads (parameters uniform in +-0.3 from `seed`); free each. */
static void apple_three_cores(pfl_fl *fl, float *cores[3], uint64_t seed) {
    const size_t P = fl->model->num_params, V = pfl_model_vector_len(fl->model);
    pfl_rng r = tiny_rng(seed);
    for (int j = 0; j < 3; j++) {
        cores[j] = tiny_floats(V);
        tiny_fill(cores[j], P, -0.3, 0.3, &r);
    }
    const int clients[3] = {0, 1, 2};
    pfl_algo_apple.aggregate(fl, clients, 3, cores);
}

/* APPLE's hand-worked step: three clients of 4, 8 and 12 training samples, lr 0.1, eta_2 0.01, mu 0.1, the core's
 * rate scaled by N (--apple-core-scale 0). */
static void apple_step_fed(tiny_fed *f, const char *reading) {
    const int n_train[3] = {4, 8, 12}, n_test[3] = {2, 2, 2};
    pfl_config cfg = tiny_config(3);
    cfg.lr = 0.1f, cfg.algo.apple_dr_lr = 0.01f, cfg.algo.apple_mu = 0.1f, cfg.algo.apple_core_scale = 0.0f;
    cfg.algo.reading = reading;
    tiny_fed_init(f, &pfl_algo_apple, cfg, n_train, n_test);
}

static void test_apple_step(void) {
    enum { N = 3 };
    tiny_fed f;
    apple_step_fed(&f, "paper");
    pfl_fl *fl = &f.fl;
    const size_t P = f.m.num_params, V = pfl_model_vector_len(&f.m);
    /* p_i starts at the data shares p0 = (4, 8, 12) / 24 (the authors' init_pss) */
    const float *p_start = pfl_apple_dr(fl, 1);
    CHECK(check_close(p_start[0], 1.0 / 6, 1e-7) && check_close(p_start[2], 0.5, 1e-7), "p0 = (%g, %g, %g)",
          p_start[0], p_start[1], p_start[2]);
    float *cores[N];
    apple_three_cores(fl, cores, 5);
    /* client 1 trains with p = (0.2, 0.5, 0.3) and its core c_1 */
    const int me = 1;
    float p[N] = {0.2f, 0.5f, 0.3f}, *core = tiny_floats(V), *model = tiny_floats(V), *w = tiny_floats(V);
    float *g = tiny_floats(P);
    memcpy(core, cores[me], V * sizeof(float));
    for (size_t i = 0; i < P; i++) w[i] = p[0] * cores[0][i] + p[1] * cores[1][i] + p[2] * cores[2][i];
    pfl_apple_personal(fl, me, p, core, model);
    size_t off = 0;
    for (size_t i = 0; i < P; i++) off += !check_close(model[i], w[i], 1e-6);
    CHECK(off == 0, "w_i = sum_j p_j c_j: %zu elements off", off);

    /* the gradient of the batch's loss at w, by the model's own backward (the step is what is tested) */
    pfl_worker *wk = &fl->workers[0];
    const int B = 4;
    tiny_batch tb = tiny_batch_of(fl->model, fl->data, f.part.clients[me].train, B);
    pfl_forward_loss(tb.ws, model, tb.x, tb.y, B, true, NULL);
    pfl_backward(tb.ws, model, tb.y, g);
    tiny_batch_free(&tb);
    const double lambda_mu = 0.5 * 0.1, p0[N] = {4.0 / 24, 8.0 / 24, 12.0 / 24};
    double p_want[N];
    for (int j = 0; j < N; j++) {
        double dot = 0;
        for (size_t i = 0; i < P; i++) dot += (double)g[i] * cores[j][i];
        p_want[j] = p[j] - 0.01 * (dot + lambda_mu * (p[j] - p0[j]));
    }
    /* the core: c_1 - lr N p_11 g (--apple-core-scale 0: N = 3), no momentum */
    float loss;
    int correct;
    pfl_rng dropout = tiny_rng(1);
    pfl_exec_gather(wk->exec, f.part.clients[me].train, B); /* the same batch, in the worker's executor */
    pfl_apple_step(fl, me, wk, core, p, model, lambda_mu, &dropout, &loss, &correct);
    for (int j = 0; j < N; j++) CHECK(check_close(p[j], p_want[j], 1e-6), "p_%d = %.8f, want %.8f", j, p[j], p_want[j]);
    CHECK(p[0] != 0.2f, "the DR vector moved");
    off = 0;
    for (size_t i = 0; i < P; i++) off += !check_close(core[i], cores[me][i] - 0.1 * 3 * 0.5 * g[i], 1e-6);
    CHECK(off == 0, "core - lr N p_ii g: %zu elements off", off);
    /* the model is w for the new p and core */
    off = 0;
    for (size_t i = 0; i < P; i++)
        off += !check_close(model[i], p_want[0] * cores[0][i] + p_want[1] * core[i] + p_want[2] * cores[2][i], 1e-5);
    CHECK(off == 0, "w after the step: %zu elements off", off);
    /* APPLE downloads every core: N models down, one up */
    uint64_t down, up;
    pfl_algo_apple.message_bytes(fl, 0, NULL, NULL, &down, &up);
    CHECK(down == N * 4 * (uint64_t)V && up == 4 * (uint64_t)V, "bytes %llu down", (unsigned long long)down);
    for (int j = 0; j < N; j++) free(cores[j]);
    free(core), free(model), free(w), free(g);
    tiny_fed_free(&f);
}


/* --reading pfllib, PFLlib's clientapple.py: p_i starts at 1/N; a batch rebuilds w = sum_j p_j c_j, steps the
 * core c_1 - lr N p_11 g first, then p_j - eta_2 (mean over the 4 tensors of mean(g . c_j) + lambda mu (p_j -
 * p0_j)) with the stepped core for j = 1; w stays the mix it was built as. */
static void test_apple_step_pfllib(void) {
    enum { N = 3 };
    tiny_fed f;
    apple_step_fed(&f, "pfllib");
    pfl_fl *fl = &f.fl;
    const pfl_model *m = &f.m;
    const size_t P = m->num_params, V = pfl_model_vector_len(m);
    const float *p_start = pfl_apple_dr(fl, 2);
    CHECK(p_start[0] == 1.0f / 3 && p_start[1] == 1.0f / 3 && p_start[2] == 1.0f / 3, "p starts at 1/N: (%g, %g, %g)",
          p_start[0], p_start[1], p_start[2]);
    float *cores[N];
    apple_three_cores(fl, cores, 5);
    pfl_rng r = tiny_rng(15);
    const int me = 1;
    float p[N] = {0.2f, 0.5f, 0.3f}, *core = tiny_floats(V), *model = tiny_floats(V), *w = tiny_floats(V);
    float *g = tiny_floats(P), *core_want = tiny_floats(P);
    memcpy(core, cores[me], V * sizeof(float));
    tiny_fill(model, P, 5, 6, &r); /* whatever the model held: the batch rebuilds it */
    for (size_t i = 0; i < P; i++) w[i] = p[0] * cores[0][i] + p[1] * cores[1][i] + p[2] * cores[2][i];
    const int B = 4;
    tiny_batch tb = tiny_batch_of(fl->model, fl->data, f.part.clients[me].train, B);
    pfl_forward_loss(tb.ws, w, tb.x, tb.y, B, true, NULL);
    pfl_backward(tb.ws, w, tb.y, g);
    tiny_batch_free(&tb);
    for (size_t i = 0; i < P; i++) core_want[i] = (float)(cores[me][i] - 0.1 * 3 * 0.5 * g[i]);
    const double lambda_mu = 0.5 * 0.1, p0[N] = {4.0 / 24, 8.0 / 24, 12.0 / 24};
    double p_want[N];
    CHECK(m->num_tensors == 4, "dnn: %d parameter tensors, want 4", m->num_tensors);
    for (int j = 0; j < N; j++) {
        const float *c = j == me ? core_want : cores[j];
        double mean = 0;
        for (int t = 0; t < m->num_tensors; t++) {
            double dot = 0;
            for (size_t i = m->tensors[t].offset; i < m->tensors[t].offset + m->tensors[t].length; i++)
                dot += (double)g[i] * c[i];
            mean += dot / (double)m->tensors[t].length / m->num_tensors;
        }
        p_want[j] = p[j] - 0.01 * (mean + lambda_mu * (p[j] - p0[j]));
    }
    float loss;
    int correct;
    pfl_rng dropout = tiny_rng(1);
    pfl_worker *wk = &fl->workers[0];
    pfl_exec_gather(wk->exec, f.part.clients[me].train, B);
    pfl_apple_step_pfllib(fl, me, wk, core, p, model, lambda_mu, &dropout, &loss, &correct);
    for (int j = 0; j < N; j++)
        CHECK(check_close(p[j], p_want[j], 1e-7), "pfllib: p_%d = %.9f, want %.9f", j, p[j], p_want[j]);
    CHECK(p[0] != 0.2f, "pfllib: the DR vector moved");
    size_t off = 0, mix_off = 0;
    for (size_t i = 0; i < P; i++) off += !check_close(core[i], core_want[i], 1e-6);
    for (size_t i = 0; i < P; i++) mix_off += !check_close(model[i], w[i], 1e-6);
    CHECK(off == 0, "pfllib: core - lr N p_ii g: %zu elements off", off);
    CHECK(mix_off == 0, "pfllib: the model is the mix the batch was built as: %zu elements off", mix_off);
    for (int j = 0; j < N; j++) free(cores[j]);
    free(core), free(model), free(w), free(g), free(core_want);
    tiny_fed_free(&f);
}

/* What a client uploads and is scored on. paper: its trained core up, and the broadcast makes its model
 * sum_j p_j c_j over every new core; pfllib: w_i as its last batch built it up (a one-batch client: from p
 * and the cores before the batch), and its model is that, its own core. */
static void test_apple_upload_and_scored(const char *reading) {
    enum { N = 3 };
    const int n_train[N] = {4, 8, 12}, n_test[N] = {2, 2, 2};
    pfl_config cfg = tiny_config(N);
    cfg.lr = 0.1f, cfg.algo.apple_dr_lr = 0.01f, cfg.algo.apple_mu = 0.1f, cfg.algo.reading = reading;
    tiny_fed f;
    tiny_fed_init(&f, &pfl_algo_apple, cfg, n_train, n_test);
    pfl_fl *fl = &f.fl;
    const size_t P = f.m.num_params, V = pfl_model_vector_len(&f.m);
    const bool paper = !strcmp(reading, "paper");
    float *cores[N];
    apple_three_cores(fl, cores, 6);
    /* client 0 has one batch (4 samples, --batch 4) */
    const int me = 0;
    pfl_worker *wk = &fl->workers[0];
    float p[N], *mix = tiny_floats(V), *model = wk->model;
    memcpy(p, pfl_apple_dr(fl, me), sizeof p);
    for (size_t i = 0; i < P; i++) mix[i] = p[0] * cores[0][i] + p[1] * cores[1][i] + p[2] * cores[2][i];
    fl->round = 1;
    pfl_fl_receive(fl, me, wk);
    float *scratch = tiny_floats(V);
    const float *scored = pfl_default_personal_model(fl, me, scratch);
    size_t off = 0;
    for (size_t i = 0; i < P; i++) off += !check_close(scored[i], paper ? mix[i] : cores[me][i], 1e-6);
    CHECK(off == 0, "--reading %s: the model scored is %s (%zu elements off)", reading,
          paper ? "sum_j p_j c_j" : "the client's own core", off);
    CHECK(paper ? !tiny_same(scored, cores[me], 0, P) : tiny_same(scored, cores[me], 0, P),
          "--reading %s: the scored model %s the core", reading, paper ? "differs from" : "is");
    pfl_algo_apple.local_init ? pfl_algo_apple.local_init(fl, me, model) : pfl_default_local_init(fl, me, model);
    pfl_train_stats st = {0};
    pfl_algo_apple.local_train(fl, me, wk, model, &st);
    CHECK(st.samples == 4, "one batch of 4: %ld samples", st.samples);
    const float *p_after = pfl_apple_dr(fl, me);
    CHECK(p_after[1] != p[1], "--reading %s: the DR vector moved", reading);
    off = 0;
    if (paper) { /* the trained core: w's gradient moved it, and it is not the mix */
        CHECK(!tiny_same(model, cores[me], 0, P) && !tiny_same(model, mix, 0, P), "paper: uploads the trained core");
    } else {
        for (size_t i = 0; i < P; i++) off += !check_close(model[i], mix[i], 1e-6);
        CHECK(off == 0, "pfllib: uploads w_i as the batch built it (%zu elements off)", off);
    }
    for (int j = 0; j < N; j++) free(cores[j]);
    free(mix), free(scratch);
    tiny_fed_free(&f);
}

/* ---- PartialFed ---- */

static void test_partialfed_tau(void) {
    const int n_train[2] = {4, 4}, n_test[2] = {2, 2};
    pfl_config cfg = tiny_config(2);
    cfg.algo.pf_tau = 5.0f, cfg.algo.pf_tau_decay = 0.965f, cfg.algo.pf_fm = 8, cfg.algo.pf_fs = 2;
    tiny_fed f;
    tiny_fed_init(&f, &pfl_algo_partialfed, cfg, n_train, n_test);
    f.fl.round = 1;
    CHECK(check_close(pfl_partialfed_tau(&f.fl), 5.0, 1e-6), "round 1: tau %g", pfl_partialfed_tau(&f.fl));
    f.fl.round = 3;
    CHECK(check_close(pfl_partialfed_tau(&f.fl), 5.0 * 0.965 * 0.965, 1e-6), "round 3: tau %g, want 4.656125",
          pfl_partialfed_tau(&f.fl));
    f.fl.round = 101;
    CHECK(check_close(pfl_partialfed_tau(&f.fl), 5.0 * pow(0.965, 100), 1e-6), "round 101: tau %g, want 0.1392",
          pfl_partialfed_tau(&f.fl));
    tiny_fed_free(&f);
}

/* PartialFed on two clients of 8 training samples: tau 5 decaying by 0.965 a round, the strategy's rate 1, f_m
 * model batches then f_s strategy batches. */
static void partialfed_fed(tiny_fed *f, int fm, int fs) {
    const int n_train[2] = {8, 8}, n_test[2] = {2, 2};
    pfl_config cfg = tiny_config(2);
    cfg.algo.pf_tau = 5.0f, cfg.algo.pf_tau_decay = 0.965f, cfg.algo.pf_fm = fm, cfg.algo.pf_fs = fs;
    cfg.algo.pf_lr = 1.0f;
    tiny_fed_init(f, &pfl_algo_partialfed, cfg, n_train, n_test);
}

static void test_partialfed_gate_and_step(void) {
    tiny_fed f;
    partialfed_fed(&f, 8, 2);
    pfl_fl *fl = &f.fl;
    const pfl_model *m = &f.m;
    const size_t P = m->num_params, V = pfl_model_vector_len(m), l1 = m->layers[1].offset;
    float *own = tiny_floats(V), *out = tiny_floats(V), *g = tiny_floats(P);
    pfl_rng r = tiny_rng(9);
    tiny_fill(own, P, -0.5, 0.5, &r);
    tiny_fill(fl->global, P, -0.5, 0.5, &r);

    /* the gate: layer 0 from the global model, layer 1 kept */
    const bool load[2] = {true, false};
    pfl_partialfed_build(m, load, fl->global, own, out);
    CHECK(tiny_same(out, fl->global, 0, l1) && tiny_same(out, own, l1, P - l1), "layer 0 global, layer 1 own");
    /* the server sends the global model (no receive hook); the partial initialization with zero logits (a tie)
     * loads every layer over the client's own model, which the broadcast leaves as it is */
    CHECK(pfl_algo_partialfed.receive == NULL && pfl_algo_partialfed.keeps_state, "sends the global model");
    CHECK(pfl_client_model_set(fl, 0, own) == 0, "client store");
    pfl_algo_partialfed.local_init(fl, 0, out);
    CHECK(tiny_same(out, fl->global, 0, P), "zero logits: the whole global model");
    CHECK(tiny_same(pfl_algo_partialfed.personal_model(fl, 0, g), fl->global, 0, P), "and so is its personal model");
    memset(g, 0, P * sizeof(float)); /* the scratch above; gradients below accumulate */

    /* one strategy step, redone: u -> Gumbel g = -log(-log u) per (load, own), y_load = sigmoid((z_l + g_l - z_o -
     * g_o) / tau), hard choice = the larger; then dz_load = y (1 - y) / tau <grad_l, global_l - own_l> */
    float z[4] = {0.3f, -0.2f, -0.1f, 0.4f}, z0[4];
    memcpy(z0, z, sizeof z);
    const float tau = 2.0f;
    pfl_rng gumbel = tiny_rng(11), replay = tiny_rng(11);
    double y[2];
    bool hard[2];
    for (int l = 0; l < 2; l++) {
        double gl[2];
        for (int k = 0; k < 2; k++) gl[k] = -log(-log(pfl_rng_uniform(&replay) + 0x1.0p-54));
        const double d = ((z0[2 * l] + gl[0]) - (z0[2 * l + 1] + gl[1])) / tau;
        y[l] = 1.0 / (1.0 + exp(-d));
        hard[l] = d >= 0;
    }
    pfl_worker *wk = &fl->workers[0];
    const int B = 4;
    tiny_batch tb = tiny_batch_of(fl->model, fl->data, f.part.clients[0].train, B);
    pfl_partialfed_build(m, hard, fl->global, own, out);
    pfl_forward_loss(tb.ws, out, tb.x, tb.y, B, true, NULL);
    pfl_backward(tb.ws, out, tb.y, g);
    tiny_batch_free(&tb);
    float loss;
    int correct;
    pfl_exec_gather(wk->exec, f.part.clients[0].train, B);
    pfl_partialfed_strategy_step(fl, wk, own, z, tau, &gumbel, &loss, &correct);
    for (int l = 0; l < 2; l++) {
        const size_t a = m->layers[l].offset, e = a + m->layers[l].length;
        double dy = 0;
        for (size_t i = a; i < e; i++) dy += (double)g[i] * ((double)fl->global[i] - own[i]);
        const double dz = y[l] * (1 - y[l]) / tau * dy;
        CHECK(check_close(z[2 * l], z0[2 * l] - dz, 1e-6) && check_close(z[2 * l + 1], z0[2 * l + 1] + dz, 1e-6),
              "layer %d: logits (%g, %g), want (%g, %g)", l, z[2 * l], z[2 * l + 1], z0[2 * l] - dz, z0[2 * l + 1] + dz);
        CHECK(z[2 * l] != z0[2 * l], "layer %d: the logits moved", l);
    }
    free(own), free(out), free(g);
    tiny_fed_free(&f);
}

/* The turns: of every f_m + f_s batches the first f_m train the model (the step's SGD) and the last f_s the
 * strategy. A client of exactly f_m = 2 batches (f_s = 1) never reaches a strategy batch: its logits stay 0 and
 * its model trains as FedAvg's two batches. */
static void test_partialfed_turns(void) {
    tiny_fed f;
    partialfed_fed(&f, 2, 1);
    pfl_fl *fl = &f.fl;
    const size_t V = pfl_model_vector_len(&f.m);
    float *a = tiny_floats(V), *b = tiny_floats(V);
    fl->round = 1;
    pfl_worker *w = &fl->workers[0];
    pfl_algo_partialfed.local_init(fl, 0, a);
    memcpy(b, a, V * sizeof(float));
    pfl_train_stats st = {0}, st_fedavg = {0};
    pfl_algo_partialfed.local_train(fl, 0, w, a, &st);
    const pfl_step fedavg = pfl_step_default(fl);
    pfl_step_run(fl, 0, w, b, &fedavg, &st_fedavg);
    const float *z = pfl_partialfed_logits(fl, 0);
    int moved = 0;
    for (int l = 0; l < f.m.num_layers; l++) moved += z[2 * l] != 0.0f || z[2 * l + 1] != 0.0f;
    size_t off = 0;
    for (size_t i = 0; i < V; i++) off += !check_close(a[i], b[i], 1e-6);
    CHECK(st.samples == 8 && moved == 0, "f_m = 2 batches of 2: %ld samples, the strategy of %d layers moved",
          st.samples, moved);
    CHECK(off == 0 && !tiny_same(a, fl->global, 0, V), "the model batches are not FedAvg's SGD (%zu floats off)", off);
    free(a), free(b);
    tiny_fed_free(&f);
}

int main(void) {
    test_fedfomo_weights();
    test_apple_lambda("paper");
    test_apple_lambda("pfllib");
    test_apple_step();
    test_apple_step_pfllib();
    test_apple_upload_and_scored("paper");
    test_apple_upload_and_scored("pfllib");
    test_partialfed_tau();
    test_partialfed_gate_and_step();
    test_partialfed_turns();
    TEST_MAIN_END();
}
