/* MOON's model-contrastive loss worked by hand, and its local step.
 *
 *  - two samples of two features, tau = 0.5: z = (1, 0) with z_glob = (1, 0)
 *    and z_prev = (0, 1) (cosines 1 and 0, so t = (0 - 1) / tau = -2 and
 *    l = log(1 + e^-2)); z = (3, 4) with z_glob = (4, -3) and z_prev = (3, 4)
 *    (cosines 0 and 1, t = 2, l = log(1 + e^2)). The batch mean is
 *    (log(1 + e^-2) + log(1 + e^2)) / 2 = log(1 + e^2) - 1. Gradients, with
 *    d cos(z, r) / dz = r / (|z| |r|) - cos z / |z|^2 and dl/dz = sigmoid(t) /
 *    tau (dcos_prev - dcos_glob) / B: for the first sample dcos_glob = 0 and
 *    dcos_prev = (0, 1), so dz = sigmoid(-2) (0, 1); for the second dcos_prev
 *    = 0 and dcos_glob = (4, -3) / 25, so dz = sigmoid(2) (-0.16, 0.12);
 *  - the same loss against finite differences on random features;
 *  - one local step of the method through its hooks is one SGD step on CE +
 *    mu l_con, the global and previous models' features computed apart, and
 *    the trained model becomes the client's previous model; before any
 *    training the previous model is the initial global one;
 *  - a model with no layer below its head is refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "check.h"
#include "fd_check.h"
#include "fl/fl.h"
#include "nn/model.h"
#include "tiny.h"
#include "util/err.h"

static double sigmoid(double t) { return 1.0 / (1.0 + exp(-t)); }

static void test_contrastive_by_hand(void) {
    const float z[4] = {1, 0, 3, 4}, glob[4] = {1, 0, 4, -3}, prev[4] = {0, 1, 3, 4};
    float dz[4];
    const double loss = pfl_moon_contrastive(z, glob, prev, 2, 2, 0.5f, dz);
    CHECK(fabs(loss - (log(1.0 + exp(2.0)) - 1.0)) < 1e-12, "l_con %.15g, want log(1 + e^2) - 1 = %.15g", loss,
          log(1.0 + exp(2.0)) - 1.0);
    const double want[4] = {0.0, sigmoid(-2.0), -0.16 * sigmoid(2.0), 0.12 * sigmoid(2.0)};
    for (int j = 0; j < 4; j++)
        CHECK(fabs(dz[j] - want[j]) < 1e-7, "dl/dz[%d] = %.9g, want %.9g", j, (double)dz[j], want[j]);
    /* the temperature divides the difference of the cosines: tau = 1 gives log(1 + e) - 1/2 */
    CHECK(fabs(pfl_moon_contrastive(z, glob, prev, 2, 2, 1.0f, NULL) - (log(1.0 + exp(1.0)) - 0.5)) < 1e-12,
          "tau 1: l_con is not log(1 + e) - 1/2");
}

typedef struct {
    float *z;
    const float *glob, *prev;
    int B;
    long n;
    float tau;
} contrastive_ctx;

static double contrastive_of(void *p) {
    const contrastive_ctx *c = p;
    return pfl_moon_contrastive(c->z, c->glob, c->prev, c->B, c->n, c->tau, NULL);
}

static void test_contrastive_gradient(void) {
    enum { B = 3, N = 5 };
    float z[B * N], glob[B * N], prev[B * N], dz[B * N], num[B * N];
    pfl_rng r = tiny_rng(5);
    tiny_fill(z, B * N, -1, 1, &r), tiny_fill(glob, B * N, -1, 1, &r), tiny_fill(prev, B * N, -1, 1, &r);
    contrastive_ctx c = {z, glob, prev, B, N, 0.5f};
    pfl_moon_contrastive(z, glob, prev, B, N, c.tau, dz);
    fd_all(num, z, B * N, 1e-3f, contrastive_of, &c);
    check_grad("moon l_con", num, dz, B * N);
}

/* One local step: CE + mu l_con from the global model, the references the
 * global model and the client's previous one (both in evaluation mode). */
static void test_local_step(void) {
    const int n_train[1] = {4}, n_test[1] = {2};
    const float mu = 2.0f, lr = 0.1f;
    tiny_fed f;
    pfl_config cfg = tiny_config(1);
    cfg.lr = lr, cfg.batch = 4, cfg.algo.moon_mu = mu, cfg.algo.moon_tau = 0.5f;
    tiny_fed_init(&f, &pfl_algo_moon, cfg, n_train, n_test);
    pfl_fl *fl = &f.fl;
    const size_t P = f.m.num_params, V = pfl_model_vector_len(&f.m);
    /* a global model other than the initial one (the previous model of a client that never trained) */
    float *initial = tiny_floats(V);
    memcpy(initial, fl->global, V * sizeof(float));
    pfl_rng r = tiny_rng(11);
    tiny_fill(fl->global, P, -0.5, 0.5, &r);
    /* the batch: the whole split (the mean loss does not depend on its order) */
    tiny_batch b = tiny_batch_of(&f.m, &f.d, f.part.clients[0].train, 4);
    const int layer = f.m.num_layers - 1;
    const long n = pfl_model_layer_input_size(&f.m, layer);
    float *z_glob = tiny_floats(4 * (size_t)n), *z_prev = tiny_floats(4 * (size_t)n), *dz = tiny_floats(4 * (size_t)n);
    float *g = tiny_floats(P), *g_ce = tiny_floats(P);
    pfl_forward(b.ws, fl->global, b.x, 4, false, NULL);
    memcpy(z_glob, pfl_workspace_layer_input(b.ws, layer), sizeof(float) * 4 * (size_t)n);
    pfl_forward(b.ws, initial, b.x, 4, false, NULL);
    memcpy(z_prev, pfl_workspace_layer_input(b.ws, layer), sizeof(float) * 4 * (size_t)n);
    /* the trained model's forward is the global model's, so z = z_glob: the pull is 0 but the push is not */
    const double ce = pfl_forward_loss(b.ws, fl->global, b.x, b.y, 4, true, NULL);
    const double con = pfl_moon_contrastive(pfl_workspace_layer_input(b.ws, layer), z_glob, z_prev, 4, n, 0.5f, dz);
    for (long k = 0; k < 4 * n; k++) dz[k] *= mu;
    pfl_backward_features(b.ws, fl->global, b.y, g, 0, 1.0f, layer, dz);
    pfl_backward(b.ws, fl->global, b.y, g_ce);
    fl->round = 1;
    pfl_worker *w = &fl->workers[0];
    pfl_train_stats st = {0};
    pfl_default_local_init(fl, 0, w->model);
    fl->algo->local_train(fl, 0, w, w->model, &st);
    double off = 0.0, con_part = 0.0;
    for (size_t i = 0; i < P; i++) {
        off = fmax(off, fabs(w->model[i] - (fl->global[i] - lr * g[i])));
        con_part = fmax(con_part, fabs(g[i] - g_ce[i]));
    }
    CHECK(off < 1e-6, "moon's step is off by %g from theta - lr x the gradient of CE + mu l_con", off);
    CHECK(con_part > 1e-3, "the contrastive term moves the gradient by only %g: the check proves little", con_part);
    CHECK(fabs(st.loss_sum / 4.0 - (ce + mu * con)) < 1e-5, "reported loss %g, want CE + mu l_con = %g",
          st.loss_sum / 4.0, ce + mu * con);
    /* the trained model is the previous one of the next training: with the
     * global model set to it too, z = z_glob = z_prev, so l_con = log 2 with
     * no gradient, and the step is the cross-entropy's alone */
    memcpy(initial, w->model, V * sizeof(float));
    memcpy(fl->global, initial, V * sizeof(float));
    memset(g_ce, 0, P * sizeof(float));
    const double ce2 = pfl_forward_loss(b.ws, initial, b.x, b.y, 4, true, NULL);
    pfl_backward(b.ws, initial, b.y, g_ce);
    pfl_train_stats st2 = {0};
    pfl_default_local_init(fl, 0, w->model);
    fl->algo->local_train(fl, 0, w, w->model, &st2);
    off = 0.0;
    for (size_t i = 0; i < P; i++) off = fmax(off, fabs(w->model[i] - (initial[i] - lr * g_ce[i])));
    CHECK(off < 1e-6, "second training: off by %g from the cross-entropy's step (previous model not the trained one?)",
          off);
    CHECK(fabs(st2.loss_sum / 4.0 - (ce2 + mu * log(2.0))) < 1e-5, "second training: loss %g, want CE + mu log 2 = %g",
          st2.loss_sum / 4.0, ce2 + mu * log(2.0));
    tiny_batch_free(&b);
    free(initial), free(z_glob), free(z_prev), free(dz), free(g), free(g_ce);
    tiny_fed_free(&f);
}

static void test_one_layer_refused(void) {
    const int n_train[1] = {4}, n_test[1] = {2};
    pfl_config cfg = tiny_config(1);
    cfg.algo.moon_mu = 1.0f, cfg.algo.moon_tau = 0.5f;
    tiny_fed f;
    tiny_fed_data(&f, 1, n_train, n_test);
    memset(&f.m, 0, sizeof f.m);
    CHECK(pfl_model_begin(&f.m, "linear", 1, 4, 4, 3) == 0 && pfl_model_linear(&f.m, "fc", 3) == 0 &&
              pfl_model_finish(&f.m) == 0,
          "one-layer model");
    const int rc = pfl_fl_create(&f.fl, &cfg, &f.m, &f.d, &f.part, &pfl_algo_moon);
    CHECK(rc != 0 && strstr(pfl_errmsg(), "one layer"), "moon on a one-layer model: rc %d, message '%s'", rc,
          rc ? pfl_errmsg() : "");
    if (rc == 0) pfl_fl_destroy(&f.fl);
    memset(&f.fl, 0, sizeof f.fl);
    tiny_fed_free(&f);
}

int main(void) {
    test_contrastive_by_hand();
    test_contrastive_gradient();
    test_local_step();
    test_one_layer_refused();
    TEST_MAIN_END();
}
