/* FedDBE, FedMTL and FedBN (src/algos/feddbe.c, fedmtl.c, fedbn.c):
 *
 *  - FedDBE's loss by hand: head W = I, b = 0, PRBM m = (0.5, 0),
 *    representations (1, 0) of class 0 and (0, 1) of class 1, g = 0,
 *    momentum 1, klw 2: r = (0.5, 0.5), MR = 2 x mean(0.5 x 0.25) = 0.25,
 *    head(h + m) = (1.5, 0) and (0.5, 1), CE = (0.201413 + 0.474077) / 2,
 *    and every gradient written below; the running mean with momentum 0.5;
 *  - its initialization period: with one batch per client and momentum 1
 *    each client's r is the mean representation of its training samples
 *    under the initial model, and g their mean weighted by samples (x
 *    momentum: 0.5 halves it);
 *  - FedMTL's scale 10^-f (f = floor(log10(dim) + 1) + 1: 10^-5 for the
 *    dnn's 2,003 numbers, 10^-7 for the cnn's 582,026), its gradient as a
 *    proximal term by hand (w = (1, 2), the other columns summing to (3, -1),
 *    m = 3: 2 w + 2 omega^2 (w + O) = (50/9, 44/9)), PFLlib's reading
 *    training as Local bit for bit, and --mtl-reg-grad's first step apart
 *    from Local's by exactly that term;
 *  - FedBN: --bn local by default, FedAvg's shared mode on a model without
 *    BatchNorm (and the same run as FedAvg's), fedavg --bn local there
 *    still refused, its refusals of the modes that share BatchNorm, and on
 *    a BatchNorm model the run of fedavg --bn local. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "check.h"
#include "fl/fl.h"
#include "nn/model.h"
#include "run/run.h"
#include "tiny.h"
#include "util/err.h"

/* ---- FedDBE ---- */

static void test_dbe_loss(void) {
    const float w[4] = {1, 0, 0, 1}, b[2] = {0, 0}, m[2] = {0.5f, 0}, h[4] = {1, 0, 0, 1}, g0[2] = {0, 0};
    const uint8_t y[2] = {0, 1};
    float gw[4] = {0}, gb[2] = {0}, gm[2] = {0}, dh[4], running[2] = {0, 0}, scratch[2 + 4];
    const pfl_feddbe_view v = {2, 2, w, b, m};
    const pfl_feddbe_grads g = {gw, gb, gm};
    int correct;
    const double loss = pfl_feddbe_loss(&v, &g, h, y, 2, running, g0, 1.0f, 2.0f, dh, &correct, scratch);
    CHECK(check_close(loss, (0.201413 + 0.474077) / 2 + 0.25, 1e-5), "loss %g, want 0.587745", loss);
    CHECK(correct == 2, "both classified right: %d", correct);
    CHECK(running[0] == 0.5f && running[1] == 0.5f, "r = the batch mean (0.5, 0.5): (%g, %g)", running[0], running[1]);
    /* d logits: (-0.091213, 0.091213) and (0.188771, -0.188771) */
    CHECK(check_close(gb[0], 0.097558, 1e-5) && check_close(gb[1], -0.097558, 1e-5), "head bias (%g, %g)", gb[0], gb[1]);
    CHECK(check_close(gw[0], -0.042434, 1e-5) && check_close(gw[1], 0.188771, 1e-5) &&
              check_close(gw[2], 0.042434, 1e-5) && check_close(gw[3], -0.188771, 1e-5),
          "head weight (%g %g %g %g): the head reads h + m", gw[0], gw[1], gw[2], gw[3]);
    CHECK(check_close(gm[0], 0.097558, 1e-5) && check_close(gm[1], -0.097558, 1e-5), "PRBM (%g, %g)", gm[0], gm[1]);
    /* dh = W^T dlogits + klw x momentum x (r - g) / (B D) = ... + (0.25, 0.25) */
    CHECK(check_close(dh[0], 0.158787, 1e-5) && check_close(dh[1], 0.341213, 1e-5) &&
              check_close(dh[2], 0.438771, 1e-5) && check_close(dh[3], 0.061229, 1e-5),
          "dh (%g %g %g %g)", dh[0], dh[1], dh[2], dh[3]);
    /* momentum 0.5 from r = (0.5, 0.5) and a batch mean (1, 1): (0.75, 0.75) */
    const float ones[4] = {1, 1, 1, 1};
    pfl_feddbe_loss(&v, &g, ones, y, 2, running, g0, 0.5f, 2.0f, dh, &correct, scratch);
    CHECK(running[0] == 0.75f && running[1] == 0.75f, "running mean (%g, %g)", running[0], running[1]);
}

/* g over three clients of one batch each (of 4, 8 and 8 samples: weights
 * 0.2, 0.4, 0.4): each r is momentum x the mean representation of the
 * client's samples under the initial model (the batch's forward comes
 * before its step). */
static void check_global_mean(float momentum) {
    pfl_config cfg = tiny_config(3);
    cfg.algo.dbe_momentum = momentum;
    cfg.batch = 8;
    const int n_train[3] = {4, 8, 8}, n_test[3] = {1, 1, 1};
    tiny_fed f;
    tiny_fed_init(&f, &pfl_algo_feddbe, cfg, n_train, n_test);
    const pfl_model *m = f.fl.model;
    const int L = m->num_layers;
    const long D = pfl_model_layer_input_size(m, L - 1);
    const float *g = pfl_feddbe_global_mean(&f.fl);
    double worst = 0.0;
    double *want = calloc((size_t)D, sizeof(double));
    for (int c = 0; c < 3; c++) {
        const int n = n_train[c];
        tiny_batch tb = tiny_batch_of(m, &f.d, f.part.clients[c].train, n);
        pfl_forward(tb.ws, f.fl.global, tb.x, n, true, NULL);
        const float *h = pfl_workspace_layer_input(tb.ws, L - 1);
        for (long d = 0; d < D; d++) {
            double mean = 0.0;
            for (int i = 0; i < n; i++) mean += h[i * D + d];
            want[d] += momentum * mean / n * (n / 20.0);
        }
        tiny_batch_free(&tb);
    }
    for (long d = 0; d < D; d++) worst = fmax(worst, fabs(want[d] - g[d]));
    CHECK(worst < 1e-6, "momentum %g: g off the hand mean by %g", (double)momentum, worst);
    double norm = 0.0;
    for (long d = 0; d < D; d++) norm += fabs(want[d]);
    CHECK(norm > 0.1, "the representation is not all zeros (%g)", norm);
    CHECK(f.fl.shared[L] == false && pfl_model_rows(m) == L + 1, "the PRBM: one block, kept by each client");
    free(want);
    tiny_fed_free(&f);
}

static void test_dbe_global_mean(void) {
    check_global_mean(1.0f);
    check_global_mean(0.5f);
}

/* ---- FedMTL ---- */

static void test_mtl_pieces(void) {
    pfl_model cnn, dnn;
    CHECK(pfl_model_build(&cnn, "cnn", 1, 28, 28, 10) == 0 && pfl_model_build(&dnn, "dnn", 1, 4, 4, 3) == 0, "models");
    CHECK(pfl_fedmtl_scale(&cnn) == 1e-7, "cnn: 10^-7 (%g)", pfl_fedmtl_scale(&cnn));
    CHECK(pfl_fedmtl_scale(&dnn) == 1e-5, "dnn: 10^-5 (%g)", pfl_fedmtl_scale(&dnn));
    const float w[2] = {1, 2}, others[2] = {3, -1};
    float mu, anchor[2];
    pfl_fedmtl_prox(1.0, 3, others, 2, &mu, anchor);
    for (int j = 0; j < 2; j++) {
        const double grad = mu * (w[j] - anchor[j]), want = j == 0 ? 50.0 / 9 : 44.0 / 9;
        CHECK(check_close(grad, want, 1e-6), "d/dw_%d of ||W||^2 + omega^2 sum_r S_r^2: %g, want %g", j, grad, want);
    }
}

static void run_fed(tiny_fed *f, const pfl_algo *algo, pfl_config cfg, const int *n_train, const int *n_test) {
    tiny_fed_init(f, algo, cfg, n_train, n_test);
    CHECK(pfl_fl_run(&f->fl, NULL, NULL) == 0, "%s: run: %s", algo->name, pfl_errmsg());
}

static void test_mtl_runs(void) {
    pfl_config cfg = tiny_config(3);
    cfg.rounds = 2;
    const int n_train[3] = {8, 4, 6}, n_test[3] = {2, 2, 2};
    tiny_fed mtl, local;
    run_fed(&mtl, &pfl_algo_fedmtl, cfg, n_train, n_test);
    run_fed(&local, &pfl_algo_local, cfg, n_train, n_test);
    CHECK(!memcmp(mtl.fl.personal_sha256, local.fl.personal_sha256, 32),
          "PFLlib's FedMTL (regularizer without gradient) trains as Local, bit for bit");
    tiny_fed_free(&mtl);
    tiny_fed_free(&local);

    /* --mtl-reg-grad, one batch from the initial model w0 that all three
     * clients hold: the step is Local's minus lr x 2 10^-5 (w0 + omega^2 x 3 w0) */
    cfg.rounds = 1;
    const int one[3] = {4, 4, 4};
    tiny_fed reg;
    tiny_fed_init(&local, &pfl_algo_local, cfg, one, n_test);
    cfg.algo.mtl_reg_grad = true;
    tiny_fed_init(&reg, &pfl_algo_fedmtl, cfg, one, n_test);
    const size_t P = local.m.num_params;
    float *w0 = tiny_floats(P);
    memcpy(w0, local.fl.global, P * sizeof(float));
    CHECK(pfl_fl_run(&local.fl, NULL, NULL) == 0 && pfl_fl_run(&reg.fl, NULL, NULL) == 0, "runs");
    const float *a = pfl_client_model(&local.fl, 0), *b = pfl_client_model(&reg.fl, 0);
    const double omega2 = (2.0 / 3) * (2.0 / 3), k = 0.1 * 2e-5 * (1.0 + 3.0 * omega2);
    double worst = 0.0, largest = 0.0;
    for (size_t j = 0; j < P; j++) {
        const double want = -k * w0[j];
        worst = fmax(worst, fabs(((double)b[j] - a[j]) - want));
        largest = fmax(largest, fabs(want));
    }
    CHECK(worst <= 2e-2 * largest + 1e-8, "the regularizer's step: off by %g of %g", worst, largest);
    free(w0);
    tiny_fed_free(&local);
    tiny_fed_free(&reg);
}

/* ---- FedBN ---- */

static const char *bn_of(const char *model, const char *extra) {
    static pfl_run_options o;
    char *argv[] = {"--algo", "fedbn", "--model", (char *)model, (char *)extra};
    if (pfl_run_options_parse(&o, extra ? 5 : 4, argv, false) || pfl_run_options_finish(&o)) return NULL;
    return o.bn;
}

static void test_fedbn_options(void) {
    const char *b = bn_of("resnet18", NULL);
    CHECK(b && !strcmp(b, "local"), "fedbn on resnet18: --bn local (%s)", b ? b : pfl_errmsg());
    b = bn_of("cnn", NULL);
    CHECK(b && !strcmp(b, "shared"), "fedbn on cnn (no BatchNorm): shared, FedAvg (%s)", b ? b : pfl_errmsg());
    b = bn_of("cnn", "--bn=local");
    CHECK(b && !strcmp(b, "shared"), "asked for by name: the same (%s)", b ? b : pfl_errmsg());
    static pfl_run_options o;
    char *argv[] = {"--algo", "fedavg", "--model", "cnn", "--bn", "local"};
    CHECK(pfl_run_options_parse(&o, 6, argv, false) == 0 && pfl_run_options_finish(&o) == 0 && !strcmp(o.bn, "local"),
          "fedavg --bn local stays local on cnn (pfl_fl_create refuses it)");
    pfl_config cfg = tiny_config(2);
    cfg.bn = PFL_BN_STATS_LOCAL;
    CHECK(pfl_algo_fedbn.check(&cfg) < 0 && strstr(pfl_errmsg(), "--bn stats-local"), "stats-local refused: %s",
          pfl_errmsg());
}

static void bn_model(pfl_model *m) {
    if (pfl_model_begin(m, "bn-tiny", 1, 4, 4, 3) || pfl_model_conv(m, "conv1", 4, 3, 1, 1, false) ||
        pfl_model_batchnorm(m, "bn1") || pfl_model_relu(m) || pfl_model_avgpool(m) || pfl_model_linear(m, "fc", 3) ||
        pfl_model_finish(m)) {
        fprintf(stderr, "model: %s\n", pfl_errmsg());
        exit(2);
    }
}

static void test_fedbn_runs(void) {
    pfl_config cfg = tiny_config(2);
    cfg.rounds = 2;
    const int n_train[2] = {8, 6}, n_test[2] = {2, 2};
    tiny_fed bn, avg;
    run_fed(&bn, &pfl_algo_fedbn, cfg, n_train, n_test); /* the dnn: no BatchNorm, shared */
    run_fed(&avg, &pfl_algo_fedavg, cfg, n_train, n_test);
    CHECK(!memcmp(bn.fl.global, avg.fl.global, pfl_model_vector_len(&bn.m) * sizeof(float)),
          "without BatchNorm fedbn is fedavg");
    tiny_fed_free(&bn), tiny_fed_free(&avg);

    tiny_fed_data(&bn, 2, n_train, n_test);
    tiny_fed_data(&avg, 2, n_train, n_test);
    bn_model(&bn.m), bn_model(&avg.m);
    pfl_config shared = cfg;
    CHECK(pfl_fl_create(&bn.fl, &shared, &bn.m, &bn.d, &bn.part, &pfl_algo_fedbn) < 0 &&
              strstr(pfl_errmsg(), "--bn shared"),
          "--bn shared on a BatchNorm model refused: %s", pfl_errmsg());
    cfg.bn = PFL_BN_LOCAL;
    tiny_fed_start(&bn, &pfl_algo_fedbn, &cfg);
    tiny_fed_start(&avg, &pfl_algo_fedavg, &cfg);
    CHECK(pfl_fl_run(&bn.fl, NULL, NULL) == 0 && pfl_fl_run(&avg.fl, NULL, NULL) == 0, "runs");
    CHECK(!memcmp(bn.fl.personal_sha256, avg.fl.personal_sha256, 32), "fedbn is fedavg --bn local");
    const pfl_layer *bn1 = &bn.m.layers[1];
    CHECK(!bn.fl.shared[1] && bn1->state_length > 0, "bn1 stays with each client");
    tiny_fed_free(&bn), tiny_fed_free(&avg);
}

int main(void) {
    test_dbe_loss();
    test_dbe_global_mean();
    test_mtl_pieces();
    test_mtl_runs();
    test_fedbn_options();
    test_fedbn_runs();
    TEST_MAIN_END();
}
