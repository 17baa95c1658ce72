/* FedGen's steps worked by hand.
 *
 *  - the head's cross-entropy: W = I (2 x 2), b = 0, z = (ln 3, 0), y = 0
 *    give logits (ln 3, 0), softmax (3/4, 1/4), loss log(4/3); with g =
 *    p - onehot = (-1/4, 1/4): dW = g z^T = [[-ln3/4, 0], [ln3/4, 0]],
 *    db = (-1/4, 1/4), dz = W^T g = (-1/4, 1/4);
 *  - the client's step: every training sample of class 0 (so every
 *    generated label is 0) and the generator's last layer set to weight 0,
 *    bias beta, so G(y') = beta for every sample whatever the noise: one SGD
 *    step from the global model is theta - lr (grad CE(batch) + grad
 *    CE(head(beta), 0)), the second term on the head only, and the loss is
 *    the sum of the two;
 *  - the server's first Adam step: with the same generator, the gradient
 *    of the generator's last bias is dz of CE(head(beta), 0) (the batch mean
 *    of B equal rows), so Adam's first step moves it by exactly -lr sign(dz)
 *    (m / sqrt(v) = g / |g|) and leaves the layers below (no gradient
 *    through a zero weight) as they were;
 *  - --flayer-mask refused. */
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

static void test_head_loss_by_hand(void) {
    const float head[6] = {1, 0, 0, 1, 0, 0};
    const float z[2] = {(float)log(3.0), 0};
    const uint8_t y[1] = {0};
    float dhead[6] = {0}, dz[2] = {0};
    const double loss = pfl_fedgen_head_loss(head, z, y, 1, 2, 2, dhead, dz);
    CHECK(fabs(loss - log(4.0 / 3.0)) < 1e-7, "head CE %.9g, want log(4/3)", loss);
    const double l3 = log(3.0) / 4.0;
    const double want_head[6] = {-l3, 0, l3, 0, -0.25, 0.25}, want_dz[2] = {-0.25, 0.25};
    for (int i = 0; i < 6; i++)
        CHECK(fabs(dhead[i] - want_head[i]) < 1e-7, "dhead[%d] %.9g, want %.9g", i, (double)dhead[i], want_head[i]);
    for (int i = 0; i < 2; i++)
        CHECK(fabs(dz[i] - want_dz[i]) < 1e-7, "dz[%d] %.9g, want %.9g", i, (double)dz[i], want_dz[i]);
}

/* One client whose training samples are all of class 0, and a generator
 * whose output is the constant beta. */
typedef struct {
    tiny_fed f;
    size_t head, gen_last;
    int D, hidden;
    float *beta;
} const_fed;

static void const_fed_init(const_fed *c, pfl_config cfg) {
    const int n_train[1] = {4}, n_test[1] = {2};
    tiny_fed_data(&c->f, 1, n_train, n_test);
    for (int i = 0; i < c->f.d.n; i++) c->f.d.labels[i] = 0;
    tiny_fed_start(&c->f, &pfl_algo_fedgen, &cfg);
    const pfl_model *m = &c->f.m;
    size_t len;
    float *gen = pfl_fedgen_generator(&c->f.fl, &len);
    c->D = (int)pfl_model_layer_input_size(m, m->num_layers - 1);
    c->head = m->layers[m->num_layers - 1].offset;
    c->hidden = cfg.algo.fedgen_hidden;
    const int in = cfg.algo.fedgen_noise_dim + m->classes, H = c->hidden;
    CHECK(len == (size_t)H * (in + 3) + (size_t)c->D * (H + 1), "generator of %zu parameters, want %d", len,
          H * (in + 3) + c->D * (H + 1));
    c->gen_last = len - (size_t)c->D * (size_t)(H + 1);
    memset(gen + c->gen_last, 0, sizeof(float) * (size_t)c->D * (size_t)H);
    c->beta = gen + c->gen_last + (size_t)c->D * (size_t)H;
    pfl_rng r = tiny_rng(3);
    tiny_fill(c->beta, (size_t)c->D, -1, 1, &r);
}

static pfl_config const_config(void) {
    pfl_config cfg = tiny_config(1);
    cfg.lr = 0.1f, cfg.batch = 4;
    cfg.algo.fedgen_noise_dim = 5, cfg.algo.fedgen_hidden = 6, cfg.algo.fedgen_lr = 0.01f;
    cfg.algo.fedgen_server_epochs = 1;
    return cfg;
}

static void test_client_step(void) {
    const_fed c;
    const pfl_config cfg = const_config();
    const_fed_init(&c, cfg);
    pfl_fl *fl = &c.f.fl;
    const pfl_model *m = &c.f.m;
    const size_t P = m->num_params;
    const int C = m->classes, B = 4;
    /* what the step should do: the batch's CE gradient plus the head's on beta (B equal rows, label 0) */
    tiny_batch b = tiny_batch_of(m, &c.f.d, c.f.part.clients[0].train, B);
    float *g = tiny_floats(P), *z = tiny_floats((size_t)B * (size_t)c.D);
    const double ce = pfl_forward_loss(b.ws, fl->global, b.x, b.y, B, true, NULL);
    pfl_backward(b.ws, fl->global, b.y, g);
    uint8_t y[4] = {0, 0, 0, 0};
    for (int i = 0; i < B; i++) memcpy(z + (size_t)i * c.D, c.beta, sizeof(float) * (size_t)c.D);
    const double gen = pfl_fedgen_head_loss(fl->global + c.head, z, y, B, c.D, C, g + c.head, NULL);
    CHECK(gen > 0.1, "CE on the generated features %g: the check proves little", gen);
    fl->round = 1;
    pfl_worker *w = &fl->workers[0];
    pfl_train_stats st = {0};
    pfl_default_local_init(fl, 0, w->model);
    fl->algo->local_train(fl, 0, w, w->model, &st);
    double off = 0.0;
    for (size_t i = 0; i < P; i++) off = fmax(off, fabs(w->model[i] - (fl->global[i] - cfg.lr * g[i])));
    CHECK(off < 1e-6, "fedgen's step is off by %g from theta - lr (grad CE + grad CE(head(G(y')), y'))", off);
    CHECK(fabs(st.loss_sum / B - (ce + gen)) < 1e-5, "reported loss %g, want CE + generated CE = %g", st.loss_sum / B,
          ce + gen);
    tiny_batch_free(&b);
    free(g), free(z);
    tiny_fed_free(&c.f);
}

static void test_server_first_adam_step(void) {
    const_fed c;
    const pfl_config cfg = const_config();
    const_fed_init(&c, cfg);
    pfl_fl *fl = &c.f.fl;
    const pfl_model *m = &c.f.m;
    size_t V;
    float *gen = pfl_fedgen_generator(fl, &V);
    float *before = tiny_floats(V), *dz = tiny_floats((size_t)c.D);
    memcpy(before, gen, V * sizeof(float));
    const uint8_t y[1] = {0};
    pfl_fedgen_head_loss(fl->global + c.head, c.beta, y, 1, c.D, m->classes, NULL, dz);
    fl->round = 1;
    pfl_fedgen_train_generator(fl);
    CHECK(tiny_same(gen, before, 0, c.gen_last), "the layers under a zero weight moved");
    const size_t bias = c.gen_last + (size_t)c.D * (size_t)c.hidden;
    int checked = 0;
    for (int j = 0; j < c.D; j++) {
        if (fabs(dz[j]) < 1e-3) continue;
        const double want = before[bias + j] - cfg.algo.fedgen_lr * (dz[j] > 0 ? 1.0 : -1.0);
        CHECK(fabs(gen[bias + j] - want) < 1e-6, "generator bias %d: %.9g, want %.9g (Adam's first step -lr sign(g))",
              j, (double)gen[bias + j], want);
        checked++;
    }
    CHECK(checked > c.D / 2, "only %d of %d biases have a gradient: the check proves little", checked, c.D);
    free(before), free(dz);
    tiny_fed_free(&c.f);
}

/* A round ends with the generator trained on the aggregated head. */
static void test_round_trains_generator(void) {
    const_fed c;
    const_fed_init(&c, const_config());
    size_t V;
    float *gen = pfl_fedgen_generator(&c.f.fl, &V);
    float *before = tiny_floats(V);
    memcpy(before, gen, V * sizeof(float));
    CHECK(pfl_fl_run(&c.f.fl, NULL, NULL) == 0, "run: %s", pfl_errmsg());
    CHECK(tiny_count_diff(gen, before, 0, V) > 0, "a round left the generator as it was");
    free(before);
    tiny_fed_free(&c.f);
}

/* The generator's gradient (fc1, BatchNorm on batch statistics, ReLU, fc,
 * then the head's cross-entropy) against finite differences, three classes
 * of labels drawn. */
typedef struct {
    pfl_fl *fl;
    pfl_rng rng;
} gen_loss_ctx;

static double gen_loss_of(void *p) {
    gen_loss_ctx *c = p;
    pfl_rng r = c->rng;
    return pfl_fedgen_generator_loss(c->fl, &r, NULL);
}

static void test_generator_gradient(void) {
    const int n_train[1] = {6}, n_test[1] = {2};
    pfl_config cfg = const_config();
    tiny_fed f;
    tiny_fed_init(&f, &pfl_algo_fedgen, cfg, n_train, n_test);
    size_t P;
    float *gen = pfl_fedgen_generator(&f.fl, &P);
    float *ana = tiny_floats(P), *num = tiny_floats(P);
    gen_loss_ctx c = {&f.fl, tiny_rng(8)};
    pfl_rng r = c.rng;
    pfl_fedgen_generator_loss(&f.fl, &r, ana);
    fd_all(num, gen, (long)P, 1e-3f, gen_loss_of, &c);
    check_grad("fedgen generator", num, ana, (long)P);
    free(ana), free(num);
    tiny_fed_free(&f);
}

static void test_mask_refused(void) {
    pfl_config cfg = const_config();
    cfg.modules.flayer_mask = true;
    CHECK(pfl_algo_fedgen.check(&cfg) != 0 && strstr(pfl_errmsg(), "--flayer-mask"),
          "fedgen --flayer-mask: not refused with a line naming the flag ('%s')", pfl_errmsg());
    cfg.modules.flayer_mask = false;
    CHECK(pfl_algo_fedgen.check(&cfg) == 0, "fedgen without a module refused: %s", pfl_errmsg());
}

int main(void) {
    test_head_loss_by_hand();
    test_client_step();
    test_server_first_adam_step();
    test_round_trains_generator();
    test_generator_gradient();
    test_mask_refused();
    TEST_MAIN_END();
}
