/* FML and FedKD, the methods that train a kept model and an exchanged one
 * on the same batches (src/algos/fml.c, fedkd.c, mutual.c):
 *
 *  - the two KL terms of mutual learning by hand: p = (1/2, 1/2) and
 *    q = (3/4, 1/4) give KL(q || p) = 0.130812 and KL(p || q) = 0.143841
 *    per row, over B x C = 2 elements, and logit gradients with the targets
 *    live (PFLlib) or held fixed (--fml-detach); gradient clipping;
 *  - one batch of FML's and one of FedKD's local step against central
 *    differences of the loss the method states (FML: alpha CE_p + (1 -
 *    alpha) KL(q || p) + beta CE_q + (1 - beta) KL(p || q); FedKD: CE_p +
 *    CE_q + (KL(q || p) + KL(p || q) + 2 MSE(h, W h_q)) / (CE_p + CE_q)),
 *    with respect to the personal model, the exchanged one and FedKD's W,
 *    each step read off the models it moved (one step at a small rate);
 *  - FedKD's compression by hand: the rank rule (PFLlib's strict "exceeds",
 *    its loop over the first k - 1 values, the paper's fallback to all k),
 *    the truncated SVD of [[2, 1], [1, 2]] (singular values 3 and 1) to
 *    [[1.5, 1.5], [1.5, 1.5]], of a 2 x 3 and a 3 x 2 matrix, of two kernel
 *    slices with one rank, the energy schedule, the bytes of a message of
 *    rank-one weights and the server's equal-weight mean of two uploads,
 *    each compressed before the mean is compressed again. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "algos/mutual.h"
#include "check.h"
#include "fd_check.h"
#include "fl/fl.h"
#include "nn/model.h"
#include "tiny.h"
#include "util/err.h"

/* ---- the KL terms and clipping ---- */

static void test_kl_by_hand(void) {
    const float zp[2] = {0.0f, 0.0f}, zq[2] = {(float)log(3.0), 0.0f};
    float gp[2] = {0}, gq[2] = {0};
    double kl_qp, kl_pq;
    pfl_mutual_kl(zp, zq, 1, 2, 1.0f, 1.0f, true, gp, gq, &kl_qp, &kl_pq);
    CHECK(check_close(kl_qp, 0.130812 / 2, 1e-5), "KL(q || p) %g, want 0.065406", kl_qp);
    CHECK(check_close(kl_pq, 0.143841 / 2, 1e-5), "KL(p || q) %g, want 0.0719205", kl_pq);
    /* live: d/dzp = (p - q)/2 + p (log p - log q - KL(p||q)) / 2 = (-0.262327, 0.262327);
     * d/dzq = (q - p)/2 + q (log q - log p - KL(q||p)) / 2 = (0.227995, -0.227995) */
    CHECK(check_close(gp[0], -0.262327, 1e-5) && check_close(gp[1], 0.262327, 1e-5), "live gp (%g, %g)", gp[0], gp[1]);
    CHECK(check_close(gq[0], 0.227995, 1e-5) && check_close(gq[1], -0.227995, 1e-5), "live gq (%g, %g)", gq[0], gq[1]);
    float dp[2] = {0}, dq[2] = {0};
    pfl_mutual_kl(zp, zq, 1, 2, 0.5f, 2.0f, false, dp, dq, &kl_qp, &kl_pq);
    /* held fixed: each model its own term, (p - q)/2 x 0.5 and (q - p)/2 x 2 */
    CHECK(check_close(dp[0], -0.0625, 1e-6) && check_close(dp[1], 0.0625, 1e-6), "fixed gp (%g, %g)", dp[0], dp[1]);
    CHECK(check_close(dq[0], 0.25, 1e-6) && check_close(dq[1], -0.25, 1e-6), "fixed gq (%g, %g)", dq[0], dq[1]);
    const uint8_t y[1] = {0};
    CHECK(check_close(pfl_mutual_xent(zq, y, 1, 2), -log(0.75), 1e-6), "cross-entropy -log 3/4");
}

static void test_clip(void) {
    tiny_fed f;
    const int n_train[1] = {4}, n_test[1] = {1};
    tiny_fed_init(&f, &pfl_algo_fml, tiny_config(1), n_train, n_test);
    pfl_worker *w = &f.fl.workers[0];
    float *g = pfl_exec_host(&w->grads);
    const size_t P = f.m.num_params;
    memset(g, 0, P * sizeof(float));
    g[0] = 30.0f, g[7] = 40.0f; /* norm 50: times 10 / (50 + 1e-6) */
    pfl_mutual_clip(w->exec, &w->grads, P, PFL_MUTUAL_CLIP);
    CHECK(check_close(g[0], 6.0, 1e-6) && check_close(g[7], 8.0, 1e-6), "clipped to norm 10: (%g, %g)", g[0], g[7]);
    g[0] = 3.0f, g[7] = 4.0f; /* norm 5: left alone */
    pfl_mutual_clip(w->exec, &w->grads, P, PFL_MUTUAL_CLIP);
    CHECK(g[0] == 3.0f && g[7] == 4.0f, "a norm below 10 is left alone: (%g, %g)", g[0], g[7]);
    tiny_fed_free(&f);
}

/* ---- one batch against central differences ---- */

/* The batch, both models (and FedKD's W), and which loss to differentiate. */
typedef struct {
    const pfl_model *m;
    pfl_workspace *ws;
    const float *x;
    const uint8_t *y;
    int B;
    float *p, *q, *wh;        /* personal (mentor), exchanged (meme, mentee), FedKD's W */
    const float *p0, *q0;     /* the starting models (a target held fixed) */
    double alpha, beta;
    bool fedkd, detach, of_p; /* detach: only the term of the model differentiated (of_p: the personal one) */
} batch_loss;

static void log_softmax_rows(const float *z, int B, int C, double *out) {
    for (int n = 0; n < B; n++) {
        double zmax = z[n * C], sum = 0.0;
        for (int c = 1; c < C; c++) zmax = fmax(zmax, z[n * C + c]);
        for (int c = 0; c < C; c++) sum += exp(z[n * C + c] - zmax);
        for (int c = 0; c < C; c++) out[n * C + c] = z[n * C + c] - zmax - log(sum);
    }
}

/* The mean cross-entropy and the KL (nn.KLDivLoss's mean over B x C) of log-probabilities. */
static double ce_of(const double *l, const uint8_t *y, int B, int C) {
    double s = 0.0;
    for (int n = 0; n < B; n++) s -= l[n * C + y[n]];
    return s / B;
}

static double kl_of(const double *lt, const double *ls, int B, int C) {
    double s = 0.0;
    for (int i = 0; i < B * C; i++) s += exp(lt[i]) * (lt[i] - ls[i]);
    return s / (B * C);
}

/* The logits (B x C, as log-probabilities) and, for FedKD, the features entering the head. */
static void run(batch_loss *b, const float *params, double *logp, double *h) {
    const int C = b->m->classes, L = b->m->num_layers;
    const float *z = pfl_forward(b->ws, params, b->x, b->B, true, NULL);
    log_softmax_rows(z, b->B, C, logp);
    if (!h) return;
    const long D = pfl_model_layer_input_size(b->m, L - 1);
    const float *f = pfl_workspace_layer_input(b->ws, L - 1);
    for (long i = 0; i < b->B * D; i++) h[i] = f[i];
}

static double the_loss(void *ctx) {
    batch_loss *b = ctx;
    const int B = b->B, C = b->m->classes;
    const long D = pfl_model_layer_input_size(b->m, b->m->num_layers - 1);
    double lp[64], lq[64], *h = calloc((size_t)(2 * B * D), sizeof(double)), *hq = h + B * D;
    /* with a target held fixed, the other model is the one the batch started from */
    run(b, b->detach && !b->of_p ? b->p0 : b->p, lp, h);
    run(b, b->detach && b->of_p ? b->q0 : b->q, lq, hq);
    const double ce_p = ce_of(lp, b->y, B, C), ce_q = ce_of(lq, b->y, B, C);
    const double kl_qp = kl_of(lq, lp, B, C), kl_pq = kl_of(lp, lq, B, C);
    double loss;
    if (b->fedkd) {
        double mse = 0.0;
        for (int n = 0; n < B; n++)
            for (long i = 0; i < D; i++) {
                double proj = 0.0;
                for (long j = 0; j < D; j++) proj += (double)b->wh[i * D + j] * hq[n * D + j];
                mse += (h[n * D + i] - proj) * (h[n * D + i] - proj);
            }
        mse /= (double)B * D;
        loss = ce_p + ce_q + (kl_qp + kl_pq + 2.0 * mse) / (ce_p + ce_q);
    } else if (b->detach) {
        loss = b->of_p ? b->alpha * ce_p + (1 - b->alpha) * kl_qp : b->beta * ce_q + (1 - b->beta) * kl_pq;
    } else {
        loss = b->alpha * ce_p + (1 - b->alpha) * kl_qp + b->beta * ce_q + (1 - b->beta) * kl_pq;
    }
    free(h);
    return loss;
}

/* (before - after) / lr: the gradient a plain SGD step used. */
static void step_of(const float *before, const float *after, size_t n, float lr, float *g) {
    for (size_t j = 0; j < n; j++) g[j] = (before[j] - after[j]) / lr;
}

/* One client with one batch of 4: its personal model pushed away from the
 * global one, one round of local training, and the three steps against
 * central differences of the loss. */
static void check_one_batch(const pfl_algo *algo, pfl_config cfg, bool detach, const char *label) {
    tiny_fed f;
    const int n_train[1] = {4}, n_test[1] = {1};
    tiny_fed_init(&f, algo, cfg, n_train, n_test);
    pfl_fl *fl = &f.fl;
    const pfl_model *m = fl->model;
    const size_t P = m->num_params, V = pfl_model_vector_len(m);
    const long D = pfl_model_layer_input_size(m, m->num_layers - 1);
    const bool fedkd = algo == &pfl_algo_fedkd;
    float *p = pfl_client_model(fl, 0), *p0 = tiny_floats(V), *q0 = tiny_floats(V), *wh0 = tiny_floats((size_t)(D * D));
    pfl_rng r = tiny_rng(11);
    for (size_t j = 0; j < P; j++) p[j] += (float)(0.4 * (pfl_rng_uniform(&r) - 0.5));
    memcpy(p0, p, V * sizeof(float));
    memcpy(q0, fl->global, V * sizeof(float));
    float *wh = NULL;
    if (fedkd) { /* W written before training (the client's own draw is then not made) */
        wh = pfl_store_write(fl->algo_stores[0], 0);
        tiny_fill(wh, (size_t)(D * D), -0.1, 0.1, &r);
        memcpy(wh0, wh, (size_t)(D * D) * sizeof(float));
    }
    fl->round = 1;
    pfl_worker *w = &fl->workers[0];
    pfl_train_stats stats = {0};
    algo->local_init(fl, 0, w->model);
    algo->local_train(fl, 0, w, w->model, &stats);
    CHECK(stats.samples == 4, "%s: one batch of 4 trained (%ld)", label, stats.samples);
    const float lr = cfg.lr, q_lr = fedkd ? cfg.algo.kd_mentee_lr : cfg.lr;
    float *gp = tiny_floats(P), *gq = tiny_floats(P), *gw = tiny_floats((size_t)(D * D)), *num = tiny_floats(P > (size_t)(D * D) ? P : (size_t)(D * D));
    step_of(p0, p, P, lr, gp);
    step_of(q0, w->model, P, q_lr, gq);
    if (fedkd) step_of(wh0, wh, (size_t)(D * D), lr, gw);

    const pfl_client_data *cd = &f.part.clients[0];
    tiny_batch tb = tiny_batch_of(m, &f.d, cd->train, 4);
    float *pp = tiny_floats(V), *qq = tiny_floats(V);
    memcpy(pp, p0, V * sizeof(float)), memcpy(qq, q0, V * sizeof(float));
    batch_loss b = {m, tb.ws, tb.x, tb.y, 4, pp, qq, wh0, p0, q0, cfg.algo.fml_alpha, cfg.algo.fml_beta, fedkd, detach, true};
    char what[96];
    fd_all(num, pp, (long)P, 1e-3f, the_loss, &b);
    snprintf(what, sizeof what, "%s: personal model", label);
    check_grad(what, num, gp, (long)P);
    b.of_p = false;
    fd_all(num, qq, (long)P, 1e-3f, the_loss, &b);
    snprintf(what, sizeof what, "%s: exchanged model", label);
    check_grad(what, num, gq, (long)P);
    if (fedkd) {
        fd_all(num, wh0, D * D, 1e-3f, the_loss, &b);
        snprintf(what, sizeof what, "%s: W", label);
        check_grad(what, num, gw, D * D);
    }
    tiny_batch_free(&tb);
    free(p0), free(q0), free(wh0), free(gp), free(gq), free(gw), free(num), free(pp), free(qq);
    tiny_fed_free(&f);
}

static void test_fml_batch(void) {
    pfl_config cfg = tiny_config(1);
    cfg.lr = 0.01f;
    cfg.algo.fml_alpha = 0.3f, cfg.algo.fml_beta = 0.6f;
    check_one_batch(&pfl_algo_fml, cfg, false, "fml, targets live");
    cfg.algo.fml_detach = true;
    check_one_batch(&pfl_algo_fml, cfg, true, "fml, targets fixed");
}

static void test_fedkd_batch(void) {
    pfl_config cfg = tiny_config(1);
    cfg.lr = 0.01f;
    cfg.algo.kd_mentee_lr = 0.02f; /* apart from --lr, so a swap shows */
    check_one_batch(&pfl_algo_fedkd, cfg, false, "fedkd");
}

/* ---- FedKD's compression ---- */

static void test_rank_rule(void) {
    const double sq2[4] = {0.5, 0.3, 0.15, 0.05};
    CHECK(pfl_fedkd_rank_rule(sq2, 4, 0.9, false) == 3, "0.95 of the energy in 3 values exceeds 0.9");
    CHECK(pfl_fedkd_rank_rule(sq2, 4, 0.5, false) == 2, "0.5 in 1 value does not exceed 0.5: 2");
    CHECK(pfl_fedkd_rank_rule(sq2, 4, 0.96, false) == 0, "PFLlib: none of the first 3 exceeds 0.96: 0");
    CHECK(pfl_fedkd_rank_rule(sq2, 4, 0.96, true) == 4, "the paper: all 4");
    CHECK(pfl_fedkd_rank_rule(sq2, 4, 0.9, true) == 3, "the paper agrees where a prefix does");
}

static void test_truncate(void) {
    float a[4] = {2, 1, 1, 2};
    CHECK(pfl_fedkd_truncate(a, 1, 2, 2, 0.85, false) == 1, "9 of 10 exceeds 0.85: rank 1");
    for (int i = 0; i < 4; i++) CHECK(check_close(a[i], 1.5, 1e-5), "3 (1,1)(1,1)^T / 2: a[%d] = %g", i, a[i]);
    float b[4] = {2, 1, 1, 2};
    CHECK(pfl_fedkd_truncate(b, 1, 2, 2, 0.95, false) == 0, "PFLlib: 9 of 10 does not exceed 0.95");
    CHECK(b[0] == 0 && b[1] == 0 && b[2] == 0 && b[3] == 0, "sent as zeros");
    float c[4] = {2, 1, 1, 2};
    CHECK(pfl_fedkd_truncate(c, 1, 2, 2, 0.95, true) == 2, "the paper: both values");
    CHECK(check_close(c[0], 2, 1e-5) && check_close(c[1], 1, 1e-5) && check_close(c[3], 2, 1e-5), "kept whole");
    /* 2 x 3 and 3 x 2 (rows and columns apart): singular values 3 and 1 */
    float wide[6] = {3, 0, 0, 0, 1, 0}, tall[6] = {0, 3, 1, 0, 0, 0};
    CHECK(pfl_fedkd_truncate(wide, 1, 2, 3, 0.8, false) == 1 && check_close(wide[0], 3, 1e-5) &&
              fabs(wide[4]) < 1e-6,
          "2 x 3: (%g .. %g)", wide[0], wide[4]);
    CHECK(pfl_fedkd_truncate(tall, 1, 3, 2, 0.8, false) == 1 && check_close(tall[1], 3, 1e-5) && fabs(tall[2]) < 1e-6,
          "3 x 2: (%g, %g)", tall[1], tall[2]);
    /* two slices, one rank over both: squares (9 + 1, 1 + 0), 10 of 11 exceeds 0.9 */
    float k[8] = {2, 1, 1, 2, 1, 0, 0, 0};
    CHECK(pfl_fedkd_truncate(k, 2, 2, 2, 0.9, false) == 1, "one rank for both slices");
    CHECK(check_close(k[0], 1.5, 1e-5) && check_close(k[3], 1.5, 1e-5), "first slice to rank 1");
    CHECK(check_close(k[4], 1, 1e-5) && fabs(k[5]) < 1e-6 && fabs(k[7]) < 1e-6, "second slice already rank 1");
    const float again[4] = {2, 1, 1, 2};
    CHECK(pfl_fedkd_rank(again, 1, 2, 2, 0.85, false) == 1 && pfl_fedkd_rank(again, 1, 2, 2, 0.95, false) == 0,
          "the rank alone agrees");
}

/* dnn on 1 x 4 x 4, 3 classes: fc1 100 x 16 (+100), fc 3 x 100 (+3). */
static void rank_one(float *w, int rows, int cols, int i, int j, float s) {
    memset(w, 0, sizeof(float) * (size_t)rows * cols);
    w[(size_t)i * cols + j] = s;
}

static void test_messages_and_mean(void) {
    pfl_config cfg = tiny_config(2);
    cfg.algo.kd_t_start = 0.85f, cfg.algo.kd_t_end = 0.95f, cfg.rounds = 10;
    const int n_train[2] = {4, 12}, n_test[2] = {1, 1};
    tiny_fed f;
    tiny_fed_init(&f, &pfl_algo_fedkd, cfg, n_train, n_test);
    pfl_fl *fl = &f.fl;
    CHECK(check_close(pfl_fedkd_energy(fl, 1), 0.85, 1e-6) && check_close(pfl_fedkd_energy(fl, 6), 0.90, 1e-6),
          "energy 0.85 in round 1, 0.90 in round 6");
    const pfl_model *m = fl->model;
    const size_t V = pfl_model_vector_len(m);
    const pfl_layer *fc1 = &m->layers[0], *fc = &m->layers[1];
    float *u1 = tiny_floats(V), *u2 = tiny_floats(V);
    pfl_rng r = tiny_rng(3);
    tiny_fill(u1, V, -1, 1, &r), tiny_fill(u2, V, -1, 1, &r);
    /* fc1: client 0 sends 3 e_0 e_0^T + e_2 e_2^T as rank one (9 of 10 exceeds 0.85), client 1 e_2 e_2^T */
    rank_one(u1 + fc1->offset, 100, 16, 0, 0, 3.0f);
    u1[fc1->offset + 2 * 16 + 2] = 1.0f;
    rank_one(u2 + fc1->offset, 100, 16, 2, 2, 1.0f);
    rank_one(u1 + fc->offset, 3, 100, 2, 5, 2.0f);
    rank_one(u2 + fc->offset, 3, 100, 2, 5, 4.0f);
    fl->round = 1;
    uint64_t down, up;
    pfl_algo_fedkd.message_bytes(fl, 0, NULL, u1, &down, &up);
    /* fc1 1 x (100 + 16 + 1), bias 100, fc 1 x (3 + 100 + 1), bias 3 */
    CHECK(up == 4 * (117 + 100 + 104 + 3), "up: rank-one weights as factors, %llu bytes", (unsigned long long)up);
    CHECK(down == 4 * V, "round 1 down: the initial model whole (%llu)", (unsigned long long)down);
    float *const uploads[2] = {u1, u2};
    const int clients[2] = {0, 1};
    float *expect = tiny_floats(V);
    for (size_t j = 0; j < V; j++) expect[j] = u1[j] * 0.5f + u2[j] * 0.5f; /* equal weights, not 4 : 12 */
    pfl_algo_fedkd.aggregate(fl, clients, 2, uploads);
    /* the mean of what the server reconstructs, 1.5 e_0 e_0^T + 0.5 e_2 e_2^T, compressed again: 2.25 of
     * 2.5 exceeds 0.85, so e_2 goes (sent uncompressed it would stay at 0.5; had client 0's upload gone
     * uncompressed, the mean 1.5 e_0 + 1 e_2 would have needed both values, e_2 at 1) */
    CHECK(check_close(fl->global[fc1->offset], 1.5, 1e-5) && fabs(fl->global[fc1->offset + 34]) < 1e-6,
          "fc1: (%g, %g), want 1.5 and 0", fl->global[fc1->offset], fl->global[fc1->offset + 34]);
    CHECK(check_close(fl->global[fc->offset + 2 * 100 + 5], 3.0, 1e-5), "fc: the mean of 2 and 4");
    CHECK(check_close(fl->global[fc1->offset + 1600 + 7], expect[fc1->offset + 1600 + 7], 1e-6) &&
              check_close(fl->global[V - 1], expect[V - 1], 1e-6),
          "biases: the plain equal-weight mean");
    fl->round = 2;
    pfl_algo_fedkd.message_bytes(fl, 0, NULL, u1, &down, &up);
    CHECK(down == 4 * (117 + 100 + 104 + 3), "down: the mean as compressed, %llu bytes", (unsigned long long)down);
    free(u1), free(u2), free(expect);
    tiny_fed_free(&f);
}

/* FML's server: the plain mean of the uploads, summed in double, each alike (not by the clients' 4 : 12 : 5
 * samples: three, so a float 1/3 weight would round differently); under FLAYER's mask each element over the
 * uploads that sent it, one nobody sent keeping its value. Bit for bit. */
static void test_fml_mean(void) {
    for (int masked = 0; masked <= 1; masked++) {
        pfl_config cfg = tiny_config(3);
        cfg.modules.flayer_mask = masked;
        const int n_train[3] = {4, 12, 5}, n_test[3] = {1, 1, 1};
        tiny_fed f;
        tiny_fed_init(&f, &pfl_algo_fml, cfg, n_train, n_test);
        pfl_fl *fl = &f.fl;
        const size_t V = pfl_model_vector_len(fl->model), P = fl->model->num_params;
        float *u[3], *before = tiny_floats(V);
        pfl_rng r = tiny_rng(5);
        for (int k = 0; k < 3; k++) u[k] = tiny_floats(V), tiny_fill(u[k], V, -1, 1, &r);
        memcpy(before, fl->global, V * sizeof(float));
        /* j % 4 == 1: all three send; 0, 3, 2: all but client 0, 1, 2; j % 7 == 6: none */
        for (int k = 0; masked && k < 3; k++)
            for (size_t j = 0; j < P; j++) fl->sent[k][j] = (j + (size_t)k) % 4 != 0 && j % 7 != 6;
        float *const uploads[3] = {u[0], u[1], u[2]};
        const int clients[3] = {0, 1, 2};
        fl->round = 1;
        pfl_algo_fml.aggregate(fl, clients, 3, uploads);
        size_t bad = 0;
        for (size_t j = 0; j < V; j++) {
            double sum = 0.0;
            int senders = 0;
            for (int k = 0; k < 3; k++)
                if (!masked || j >= P || fl->sent[k][j]) sum += u[k][j], senders++;
            const float want = senders > 0 ? (float)(sum / senders) : before[j];
            bad += memcmp(&fl->global[j], &want, sizeof want) != 0;
        }
        CHECK(bad == 0, "fml mean (mask %d): %zu of %zu elements differ from the plain mean in double", masked, bad,
              V);
        for (int k = 0; k < 3; k++) free(u[k]);
        free(before);
        tiny_fed_free(&f);
    }
}

int main(void) {
    test_kl_by_hand();
    test_clip();
    test_fml_batch();
    test_fedkd_batch();
    test_rank_rule();
    test_truncate();
    test_messages_and_mean();
    test_fml_mean();
    TEST_MAIN_END();
}
