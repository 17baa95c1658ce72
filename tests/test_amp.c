/* FedAMP and pFedCFR (src/algos/amp.c, fedamp.c, pfedcfr.c):
 *
 *  - the message-passing weights and fused vectors of 3 clients against
 *    numbers written out by hand (A'(x) = exp(-x/sigma)/sigma), on a span
 *    inside a longer vector, at the paper's scale (alpha 1e4, sigma 1e6),
 *    and the rescaling when the neighbour weights sum above 1;
 *  - pFedCFR's server step on the tiny dnn (2 layers, r = 1): layer 0 fused
 *    per client with layer-0 distances only, layer 1 the plain (unweighted)
 *    mean, the client's model [fused layer 0, global layer 1] after the
 *    broadcast; FedAMP's fusion on whole models, only for the uploaders;
 *  - the penalty gradients (lambda/alpha)(v - v_fused) and mu(v - v_global)
 *    on the right layers, and pFedCFR's/FedAMP's local training equal to
 *    pfl_local_sgd with those hooks written out here;
 *  - --local-steps: exactly K batches. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "algos/amp.h"
#include "check.h"
#include "fl/fl.h"
#include "nn/model.h"
#include "tiny.h"
#include "util/err.h"

static pfl_config amp_config(int clients) {
    pfl_config c = tiny_config(clients);
    c.algo.amp_alpha = 1.0f, c.algo.amp_sigma = 10.0f, c.algo.amp_lambda = 1.0f;
    c.algo.mu = 0.001f, c.algo.cfr_layers = 1;
    return c;
}

/* ---- the fusion, by hand ---- */

static void test_fuse_hand(void) {
    /* span [1, 3) of 4-vectors; elements 0 and 3 are outside it */
    float x0[4] = {9, 0, 0, 9}, x1[4] = {9, 1, 0, 9}, x2[4] = {9, 0, 2, 9};
    const float *models[3] = {x0, x1, x2};
    float o0[4] = {-1, -1, -1, -1}, o1[4] = {-1, -1, -1, -1}, o2[4] = {-1, -1, -1, -1};
    float *out[3] = {o0, o1, o2};
    double xi[9];
    /* alpha 0.5, sigma 1: xi_ij = 0.5 exp(-d_ij); d01 = 1, d02 = 4, d12 = 5 */
    int rescaled = pfl_amp_fuse(out, models, 3, 1, 2, 0.5, 1.0, xi);
    CHECK(rescaled == 0, "no rescaling: %d", rescaled);
    const double x01 = 0.5 * 0.36787944117144233, x02 = 0.5 * 0.018315638888734179, x12 = 0.5 * 0.006737946999085467;
    const double want[9] = {1 - x01 - x02, x01, x02, x01, 1 - x01 - x12, x12, x02, x12, 1 - x02 - x12};
    for (int i = 0; i < 9; i++) CHECK(check_close(xi[i], want[i], 1e-12), "xi[%d] %.15g want %.15g", i, xi[i], want[i]);
    /* u_0 = xi01 x1 + xi02 x2 (x0 = 0 on the span) = (x01, 2 x02) */
    CHECK(check_close(o0[1], x01, 1e-6) && check_close(o0[2], 2 * x02, 1e-6), "u0 (%g %g)", o0[1], o0[2]);
    /* u_1 = xi11 (1,0) + xi12 (0,2) */
    CHECK(check_close(o1[1], 1 - x01 - x12, 1e-6) && check_close(o1[2], 2 * x12, 1e-6), "u1 (%g %g)", o1[1], o1[2]);
    /* u_2 = xi21 (1,0) + xi22 (0,2) */
    CHECK(check_close(o2[1], x12, 1e-6) && check_close(o2[2], 2 * (1 - x02 - x12), 1e-6), "u2 (%g %g)", o2[1], o2[2]);
    CHECK(o0[0] == -1 && o0[3] == -1 && o1[0] == -1 && o2[3] == -1, "outside the span untouched");

    /* the papers' scale: alpha 1e4, sigma 1e6: xi = 0.01 exp(-d/1e6) */
    float y0[1] = {0}, y1[1] = {1000}, y2[1] = {0};   /* d01 = d12 = 1e6, d02 = 0 */
    const float *ys[3] = {y0, y1, y2};
    float p0[1], p1[1], p2[1];
    float *ps[3] = {p0, p1, p2};
    rescaled = pfl_amp_fuse(ps, ys, 3, 0, 1, 1e4, 1e6, xi);
    const double e1 = 0.01 * 0.36787944117144233;
    CHECK(rescaled == 0 && check_close(xi[1], e1, 1e-12) && check_close(xi[2], 0.01, 1e-12) &&
              check_close(xi[0], 1 - e1 - 0.01, 1e-12) && check_close(xi[4], 1 - 2 * e1, 1e-12),
          "paper scale: %g %g %g %g", xi[0], xi[1], xi[2], xi[4]);
    CHECK(check_close(p0[0], 1000 * e1, 1e-4) && check_close(p1[0], 1000 * (1 - 2 * e1), 1e-3),
          "paper scale fused %g %g", p0[0], p1[0]);

    /* neighbour weights above 1 (alpha 10, sigma 1, equal models: 10 each)
     * are rescaled to sum to 1, own weight 0 */
    float z[1] = {3};
    const float *zs[3] = {z, z, z};
    rescaled = pfl_amp_fuse(ps, zs, 3, 0, 1, 10.0, 1.0, xi);
    CHECK(rescaled == 3, "rescaled rows %d", rescaled);
    CHECK(xi[0] == 0.0 && check_close(xi[1], 0.5, 1e-12) && check_close(xi[2], 0.5, 1e-12), "row 0: %g %g %g", xi[0],
          xi[1], xi[2]);
    CHECK(check_close(p0[0], 3, 1e-6), "convex combination of equal models: %g", p0[0]);
}

/* ---- the server steps ---- */

/* Row i of the fusion, written out independently of amp.c. */
static void fuse_ref(const float *const *x, int n, int i, size_t off, size_t len, double alpha, double sigma,
                     double *out) {
    double wsum = 0.0;
    for (size_t e = 0; e < len; e++) out[e] = 0.0;
    for (int j = 0; j < n; j++) {
        if (j == i) continue;
        double d = 0.0;
        for (size_t e = off; e < off + len; e++) d += ((double)x[i][e] - x[j][e]) * ((double)x[i][e] - x[j][e]);
        const double w = alpha * exp(-d / sigma) / sigma;
        wsum += w;
        for (size_t e = 0; e < len; e++) out[e] += w * x[j][off + e];
    }
    for (size_t e = 0; e < len; e++) out[e] += (1.0 - wsum) * x[i][off + e];
}

static void test_pfedcfr_server(void) {
    pfl_config cfg = amp_config(3);
    const int n_train[3] = {8, 4, 12}, n_test[3] = {4, 4, 4};
    tiny_fed f;
    tiny_fed_init(&f, &pfl_algo_pfedcfr, cfg, n_train, n_test);
    pfl_fl *fl = &f.fl;
    const pfl_model *m = &f.m;
    const size_t P = m->num_params, L0 = m->layers[0].length, off1 = m->layers[1].offset;
    CHECK(m->layers[0].offset == 0 && off1 == L0 && off1 + m->layers[1].length == P, "layers contiguous");
    pfl_rng r = tiny_rng(5);
    float *up[3];
    for (int k = 0; k < 3; k++) up[k] = tiny_floats(P), tiny_fill(up[k], P, -0.1, 0.1, &r);
    /* layer 1 of client 2 far away: a whole-model distance would change the weights of layer 0 */
    for (size_t i = off1; i < P; i++) up[2][i] += 3.0f;
    const int clients[3] = {0, 1, 2};
    fl->round = 1;
    fl->algo->aggregate(fl, clients, 3, up);
    double *ref = malloc(sizeof(double) * P);
    size_t bad_mean = 0;
    for (size_t i = 0; i < P; i++) {
        const double mean = ((double)up[0][i] + up[1][i] + up[2][i]) / 3.0; /* 1/N, not by samples */
        bad_mean += !check_close(fl->global[i], mean, 1e-6);
    }
    CHECK(bad_mean == 0, "global = plain mean: %zu elements off", bad_mean);
    pfl_worker *w = &fl->workers[0];
    float *built = tiny_floats(pfl_model_vector_len(m)); /* a client's model, built from what it keeps */
    for (int c = 0; c < 3; c++) {
        pfl_fl_receive(fl, c, w);
        const float *state = pfl_client_model_get(fl, c, built);
        fuse_ref((const float *const *)up, 3, c, 0, L0, cfg.algo.amp_alpha, cfg.algo.amp_sigma, ref);
        size_t bad0 = 0;
        for (size_t e = 0; e < L0; e++) bad0 += !check_close(state[e], ref[e], 1e-5);
        CHECK(bad0 == 0, "client %d: layer 0 fused with layer-0 weights (%zu off)", c, bad0);
        CHECK(tiny_same(state, fl->global, off1, P - off1), "client %d: layer 1 = global mean", c);
        CHECK(tiny_count_diff(state, fl->global, 0, L0) > 0, "client %d: layer 0 personal", c);
    }
    /* whole-model fusion would differ: client 2 is far on layer 1 */
    fuse_ref((const float *const *)up, 3, 0, 0, P, cfg.algo.amp_alpha, cfg.algo.amp_sigma, ref);
    const float *state0 = pfl_client_model_get(fl, 0, built);
    CHECK(!check_close(state0[0], ref[0], 1e-7) || !check_close(state0[1], ref[1], 1e-7),
          "layer-wise weights differ from whole-model ones");
    free(ref);
    free(built);
    for (int k = 0; k < 3; k++) free(up[k]);
    tiny_fed_free(&f);
}

static void test_fedamp_server(void) {
    pfl_config cfg = amp_config(3);
    cfg.algo.amp_sigma = 100.0f;
    const int n_train[3] = {8, 4, 12}, n_test[3] = {4, 4, 4};
    tiny_fed f;
    tiny_fed_init(&f, &pfl_algo_fedamp, cfg, n_train, n_test);
    pfl_fl *fl = &f.fl;
    const size_t P = f.m.num_params;
    CHECK(!fl->algo->has_global && fl->client_state && fl->personal.whole,
          "fedamp: stateful with whole personal models, no global model");
    float *before = tiny_floats(P);
    memcpy(before, pfl_client_model(fl, 1), P * sizeof(float));
    pfl_rng r = tiny_rng(6);
    float *up[2];
    for (int k = 0; k < 2; k++) up[k] = tiny_floats(P), tiny_fill(up[k], P, -0.1, 0.1, &r);
    const int clients[2] = {0, 2};
    fl->round = 1;
    fl->algo->aggregate(fl, clients, 2, up);
    /* the fused u_i is the anchor of the proximal term: read it through training's hook below;
     * here, the client's state w_i is untouched by the broadcast */
    pfl_fl_receive(fl, 0, &fl->workers[0]);
    CHECK(tiny_same(pfl_client_model(fl, 1), before, 0, P), "w_1 untouched");
    /* train client 0 with lr and compare against the hook toward the reference u_0 */
    double *ref = malloc(sizeof(double) * P);
    fuse_ref((const float *const *)up, 2, 0, 0, P, cfg.algo.amp_alpha, cfg.algo.amp_sigma, ref);
    float *u0 = tiny_floats(P);
    for (size_t i = 0; i < P; i++) u0[i] = (float)ref[i];
    pfl_worker *w = &fl->workers[0];
    float *a = tiny_floats(P), *b = tiny_floats(P);
    memcpy(a, pfl_client_model(fl, 0), P * sizeof(float));
    memcpy(b, a, P * sizeof(float));
    pfl_train_stats s1 = {0}, s2 = {0};
    fl->algo->local_train(fl, 0, w, a, &s1);
    pfl_step o = pfl_step_default(fl);
    pfl_step_add_prox(&o, cfg.algo.amp_lambda / cfg.algo.amp_alpha, u0, 0, P);
    pfl_step_run(fl, 0, w, b, &o, &s2);
    size_t bad = 0;
    for (size_t i = 0; i < P; i++) bad += !check_close(a[i], b[i], 1e-6);
    CHECK(bad == 0, "fedamp training = SGD with lambda/alpha (w - u_0), u_0 fused on whole models (%zu off)", bad);
    free(ref), free(u0), free(a), free(b), free(before);
    for (int k = 0; k < 2; k++) free(up[k]);
    tiny_fed_free(&f);
}

/* ---- the penalty gradients ---- */

static void test_cfr_hook(void) {
    pfl_config cfg = amp_config(2);
    cfg.algo.amp_alpha = 4.0f, cfg.algo.amp_lambda = 2.0f, cfg.algo.mu = 0.25f;
    cfg.momentum = 0.5f;
    const int n_train[2] = {9, 6}, n_test[2] = {3, 3};
    tiny_fed f;
    tiny_fed_init(&f, &pfl_algo_pfedcfr, cfg, n_train, n_test);
    pfl_fl *fl = &f.fl;
    const pfl_model *m = &f.m;
    const size_t P = m->num_params, off1 = m->layers[1].offset;
    pfl_rng r = tiny_rng(8);
    float *fused = tiny_floats(P), *params = tiny_floats(P), *grads = tiny_floats(P);
    tiny_fill(fused, P, -1, 1, &r), tiny_fill(params, P, -1, 1, &r), tiny_fill(fl->global, P, -1, 1, &r);
    /* the executor's proximal terms alone, as pFedCFR sets them up: lambda/alpha = 0.5 on layer 0, mu = 0.25
     * on layer 1 */
    pfl_exec *x = fl->workers[0].exec;
    for (size_t i = 0; i < P; i++) grads[i] = 1.0f;
    pfl_xbuf gv = pfl_exec_view(x, grads, P, true), pv = pfl_exec_view_const(x, params, P);
    pfl_xbuf fv = pfl_exec_view_const(x, fused, P), glv = pfl_exec_view_const(x, fl->global, P);
    pfl_exec_prox(x, &gv, &pv, &fv, 0.5f, 0, off1);
    pfl_exec_prox(x, &gv, &pv, &glv, 0.25f, off1, P - off1);
    pfl_exec_unview(x, &gv), pfl_exec_unview(x, &pv), pfl_exec_unview(x, &fv), pfl_exec_unview(x, &glv);
    size_t bad = 0;
    for (size_t i = 0; i < P; i++) {
        const double want = 1.0 + (i < off1 ? 0.5 * ((double)params[i] - fused[i]) : 0.25 * ((double)params[i] - fl->global[i]));
        bad += !check_close(grads[i], want, 1e-6);
    }
    CHECK(bad == 0, "prox terms: (lambda/alpha)(v - v_fused) on layer 0, mu (v - v_global) on layer 1 (%zu off)", bad);

    /* pFedCFR's training uses exactly that hook: give the server fused
     * layers (a round of aggregation), then train both ways */
    float *up[2];
    for (int k = 0; k < 2; k++) up[k] = tiny_floats(P), tiny_fill(up[k], P, -0.2, 0.2, &r);
    const int clients[2] = {0, 1};
    fl->round = 1;
    fl->algo->aggregate(fl, clients, 2, up);
    pfl_worker *w = &fl->workers[0];
    pfl_fl_receive(fl, 1, w);
    float *built = tiny_floats(pfl_model_vector_len(m));
    const float *state = pfl_client_model_get(fl, 1, built); /* [fused layer 0, global layer 1] */
    fl->round = 2;
    float *a = tiny_floats(P), *b = tiny_floats(P);
    memcpy(a, state, P * sizeof(float));
    memcpy(b, state, P * sizeof(float));
    /* perturb the start so the penalties are not zero at step 1 */
    for (size_t i = 0; i < P; i += 7) a[i] += 0.3f, b[i] += 0.3f;
    pfl_train_stats s1 = {0}, s2 = {0};
    fl->algo->local_train(fl, 1, w, a, &s1);
    pfl_step o = pfl_step_default(fl);
    pfl_step_add_prox(&o, 0.5f, state, 0, off1);
    pfl_step_add_prox(&o, 0.25f, fl->global, off1, P - off1);
    pfl_step_run(fl, 1, w, b, &o, &s2);
    CHECK(tiny_same(a, b, 0, P), "pfedcfr training = SGD with prox terms toward [fused, global] (%zu differ)",
          tiny_count_diff(a, b, 0, P));
    /* and the coefficients matter: swapped, the result differs */
    o.prox[0].mu = 0.25f, o.prox[1].mu = 0.5f;
    memcpy(b, state, P * sizeof(float));
    for (size_t i = 0; i < P; i += 7) b[i] += 0.3f;
    pfl_step_run(fl, 1, w, b, &o, &s2);
    CHECK(!tiny_same(a, b, 0, P), "swapped coefficients give another model");
    for (int k = 0; k < 2; k++) free(up[k]);
    free(fused), free(params), free(grads), free(a), free(b), free(built);
    tiny_fed_free(&f);
}

/* ---- local steps ---- */

static int hook_calls;
static void count_hook(void *ctx, const pfl_model *m, const float *params, float *grads) {
    (void)ctx, (void)m, (void)params, (void)grads;
    hook_calls++;
}

static void test_local_steps(void) {
    pfl_config cfg = amp_config(1);
    const int n_train[1] = {10}, n_test[1] = {2}; /* batch 4: 3 batches a pass (4, 4, 2) */
    tiny_fed f;
    tiny_fed_init(&f, &pfl_algo_fedavg, cfg, n_train, n_test);
    pfl_fl *fl = &f.fl;
    const size_t P = f.m.num_params;
    float *model = tiny_floats(P);
    pfl_step o = pfl_step_default(fl);
    pfl_step_add_grad(&o, count_hook, NULL);
    const int steps[4] = {1, 3, 5, 7};
    const long samples[4] = {4, 10, 18, 24};
    for (int t = 0; t < 4; t++) {
        memcpy(model, fl->global, P * sizeof(float));
        pfl_train_stats s = {0};
        hook_calls = 0;
        o.steps = steps[t], o.epochs = 1;
        pfl_step_run(fl, 0, &fl->workers[0], model, &o, &s);
        CHECK(hook_calls == steps[t] && s.samples == samples[t], "steps %d: %d batches, %ld samples", steps[t],
              hook_calls, s.samples);
        CHECK(s.last_epoch_samples > 0 && s.last_epoch_samples <= 10, "steps %d: last pass %ld samples", steps[t],
              s.last_epoch_samples);
    }
    /* steps 0: epochs as before */
    hook_calls = 0;
    o.steps = 0, o.epochs = 2;
    pfl_train_stats s = {0};
    pfl_step_run(fl, 0, &fl->workers[0], model, &o, &s);
    CHECK(hook_calls == 6 && s.samples == 20 && s.last_epoch_samples == 10, "epochs 2: %d batches", hook_calls);
    /* steps equal to one pass = one epoch, bitwise */
    float *a = tiny_floats(P), *b = tiny_floats(P);
    memcpy(a, fl->global, P * sizeof(float)), memcpy(b, fl->global, P * sizeof(float));
    o.num_grads = 0;
    o.steps = 3, o.epochs = 1;
    pfl_step_run(fl, 0, &fl->workers[0], a, &o, &s);
    o.steps = 0;
    pfl_step_run(fl, 0, &fl->workers[0], b, &o, &s);
    CHECK(tiny_same(a, b, 0, P), "3 steps = 1 epoch of 3 batches");
    /* --local-steps 2: each of 2 epochs is 2 batches (4 + 4, then 2 + 4 after the reshuffle) */
    fl->cfg.algo.local_steps = 2;
    hook_calls = 0;
    pfl_step_add_grad(&o, count_hook, NULL);
    o.steps = 0, o.epochs = 2;
    s = (pfl_train_stats){0};
    pfl_step_run(fl, 0, &fl->workers[0], model, &o, &s);
    CHECK(hook_calls == 4 && s.samples == 14 && s.last_epoch_samples == 4, "local-steps 2, epochs 2: %d batches, %ld samples",
          hook_calls, s.samples);
    free(a), free(b), free(model);
    tiny_fed_free(&f);
}

/* pFedMe has its own loop: --local-steps K bounds its batches too (each with
 * --pfedme-k inner steps, counted once in the samples). */
static void test_pfedme_local_steps(void) {
    pfl_config cfg = amp_config(1);
    cfg.algo.pfedme_k = 2, cfg.algo.pfedme_lambda = 15, cfg.algo.pfedme_lr = 0.01f, cfg.algo.pfedme_beta = 1;
    const int n_train[1] = {10}, n_test[1] = {2};
    const int budgets[3] = {0, 1, 5};
    const long samples[3] = {10, 4, 18};
    for (int t = 0; t < 3; t++) {
        cfg.algo.local_steps = budgets[t];
        tiny_fed f;
        tiny_fed_init(&f, &pfl_algo_pfedme, cfg, n_train, n_test);
        pfl_fl *fl = &f.fl;
        float *model = tiny_floats(pfl_model_vector_len(&f.m));
        pfl_algo_pfedme.local_init(fl, 0, model);
        pfl_train_stats s = {0};
        pfl_algo_pfedme.local_train(fl, 0, &fl->workers[0], model, &s);
        CHECK(s.samples == samples[t], "pfedme local-steps %d: %ld samples, expected %ld", budgets[t], s.samples,
              samples[t]);
        free(model);
        tiny_fed_free(&f);
    }
}

/* ---- a whole run, both algorithms ---- */

static void test_runs(void) {
    const pfl_algo *algos[2] = {&pfl_algo_fedamp, &pfl_algo_pfedcfr};
    for (int k = 0; k < 2; k++) {
        pfl_config cfg = amp_config(3);
        cfg.rounds = 2, cfg.algo.local_steps = 2, cfg.join = 0.67;
        const int n_train[3] = {8, 4, 12}, n_test[3] = {4, 4, 4};
        tiny_fed f;
        tiny_fed_init(&f, algos[k], cfg, n_train, n_test);
        CHECK(pfl_fl_run(&f.fl, NULL, NULL) == 0, "%s runs", algos[k]->name);
        tiny_fed_free(&f);
    }
}

int main(void) {
    test_fuse_hand();
    test_pfedcfr_server();
    test_fedamp_server();
    test_cfr_hook();
    test_pfedme_local_steps();
    test_local_steps();
    test_runs();
    TEST_MAIN_END();
}
