/* GPFL (src/algos/gpfl.c):
 *
 *  - the conditions, the valve (CoV) on two conditions and two feature
 *    rows, the angle-level and the magnitude-level guidance, worked by hand
 *    at D = 2;
 *  - every gradient of GPFL's batch loss (into the features, the head, the
 *    embeddings and both conditional nets) and of the angle-level guidance
 *    alone against central differences;
 *  - the batch loss against its parts summed by hand over a batch of 3 (the
 *    personalized route into the head, the generic route into the guidance,
 *    means over the batch, the magnitude term's norm over the whole batch);
 *  - the blocks in a round of two clients: rows and sharing rules, the head
 *    never uploaded (the global head stays the initial one), the extractor,
 *    CoV and GCE the 4 : 6 mean of what the clients trained, and each
 *    client's conditions computed from the embeddings it trained and its
 *    class shares. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "check.h"
#include "tiny.h"

/* Conditions: emb = (1, 2), (3, -4); weights 1/2, 1/2 give (2, -1); the
 * shares 1/4, 3/4 give (1/4 + 9/4, 2/4 - 12/4) = (2.5, -2.5). */
static void test_conditions_by_hand(void) {
    const float emb[4] = {1, 2, 3, -4}, half[2] = {0.5f, 0.5f}, share[2] = {0.25f, 0.75f};
    float g[2], p[2];
    pfl_gpfl_condition(emb, half, 2, 2, g);
    pfl_gpfl_condition(emb, share, 2, 2, p);
    CHECK(g[0] == 2.0f && g[1] == -1.0f, "generic condition %g %g, want 2 -1", g[0], g[1]);
    CHECK(p[0] == 2.5f && p[1] == -2.5f, "personalized condition %g %g, want 2.5 -2.5", p[0], p[1]);
}

/* The valve at D = 2. gamma net: W = I, b = 0, LayerNorm weight 0.5, bias
 * 0; beta net: W = -I, b = 0, LayerNorm weight 2, bias -1.
 * Condition c = (1, -1): gamma's Linear gives (1, -1), ReLU (1, 0), mean
 * 1/2, variance 1/4, so LayerNorm gives (s, -s), s = 0.5 / sqrt(0.25 +
 * 1e-5), and gamma = (s/2, -s/2); beta's Linear gives (-1, 1), ReLU (0, 1),
 * normalized (-s, s), beta = (-1 - 2s, -1 + 2s).
 *   h = (4, -3):  4 (1 + s/2) - 1 - 2s = 3;  -3 (1 - s/2) - 1 + 2s = -4 + 3.5 s < 0 -> 0
 *   h = (0.5, 2): 0.5 (1 + s/2) - 1 - 2s < 0 -> 0;  2 (1 - s/2) - 1 + 2s = 1 + s
 * Condition 0: both Linears give 0, ReLU 0, variance 0, LayerNorm gives
 * its bias: gamma = 0, beta = (-1, -1), so out = ReLU(h - 1):
 *   (3, 0) and (0, 1). */
static void test_valve_by_hand(void) {
    const float eye[4] = {1, 0, 0, 1}, neg[4] = {-1, 0, 0, -1}, zero[2] = {0, 0};
    const float half[2] = {0.5f, 0.5f}, two[2] = {2, 2}, minus1[2] = {-1, -1};
    pfl_gpfl_view v;
    memset(&v, 0, sizeof v);
    v.D = 2, v.C = 2;
    v.gamma = (pfl_gpfl_net){eye, zero, half, zero};
    v.beta = (pfl_gpfl_net){neg, zero, two, minus1};
    const float h[4] = {4, -3, 0.5f, 2}, c[2] = {1, -1};
    float out[4], scratch[6 * 2 + 2];
    pfl_gpfl_valve(&v, c, h, 2, out, scratch);
    const double s = 0.5 / sqrt(0.25 + 1e-5);
    CHECK(check_close(out[0], 3.0, 1e-6) && out[1] == 0.0f, "row 1: %.9g %.9g, by hand 3 0", out[0], out[1]);
    CHECK(out[2] == 0.0f && check_close(out[3], 1.0 + s, 1e-6), "row 2: %.9g %.9g, by hand 0 %.9g", out[2], out[3],
          1.0 + s);
    pfl_gpfl_valve(&v, zero, h, 2, out, scratch);
    CHECK(out[0] == 3.0f && out[1] == 0.0f && out[2] == 0.0f && out[3] == 1.0f, "condition 0: %g %g %g %g", out[0],
          out[1], out[2], out[3]);
}

/* Angle level: x = (3, 0), e_0 = (2, 0), e_1 = (0, 5): the cosines are
 * (1, 0), so label 0 costs log(e + 1) - 1 = log(1 + 1/e) and label 1
 * log(e + 1). Magnitude level over the batch x = (3, 0), (0, 1), labels 0,
 * 1, toward e: the differences (1, 0), (0, -4), lambda sqrt(1 + 16) (one
 * norm of the whole batch, not 1 + 4 of the rows). */
static void test_guidance_by_hand(void) {
    const float x[4] = {3, 0, 0, 1}, emb[4] = {2, 0, 0, 5};
    const uint8_t y0[1] = {0}, y1[1] = {1}, y01[2] = {0, 1};
    float scratch[64];
    CHECK(pfl_gpfl_angle_scratch(2, 2) <= 64, "scratch");
    float a0 = pfl_gpfl_angle_loss(x, emb, y0, 1, 2, 2, NULL, NULL, scratch);
    float a1 = pfl_gpfl_angle_loss(x, emb, y1, 1, 2, 2, NULL, NULL, scratch);
    CHECK(check_close(a0, log1p(exp(-1.0)), 1e-6), "angle loss, label 0: %.9g, by hand %.9g", a0, log1p(exp(-1.0)));
    CHECK(check_close(a1, log1p(exp(1.0)), 1e-6), "angle loss, label 1: %.9g, by hand %.9g", a1, log1p(exp(1.0)));
    const float m = pfl_gpfl_magnitude_loss(x, emb, y01, 2, 2, 0.5f, NULL);
    CHECK(check_close(m, 0.5 * sqrt(17.0), 1e-6), "magnitude %.9g, by hand %.9g", m, 0.5 * sqrt(17.0));
}

/* A random batch of B = 3 samples, D = 3 features, C = 2 classes. */
enum { B = 3, D = 3, C = 2 };
typedef struct {
    float head_w[C * D], head_b[C], emb[C * D];
    float gw[D * D], gb[D], glw[D], glb[D], bw[D * D], bb[D], blw[D], blb[D];
    float cond_g[D], cond_p[D], frozen[C * D], h[B * D];
} batch_params;
static const uint8_t labels[B] = {1, 0, 1};

static pfl_gpfl_view view_of(const batch_params *s) {
    const pfl_gpfl_view v = {D,
                             C,
                             s->head_w,
                             s->head_b,
                             s->emb,
                             {s->gw, s->gb, s->glw, s->glb},
                             {s->bw, s->bb, s->blw, s->blb},
                             s->cond_g,
                             s->cond_p};
    return v;
}

static double loss_of(const batch_params *s) {
    const pfl_gpfl_view v = view_of(s);
    float logits[B * C], scratch[512];
    return pfl_gpfl_loss(&v, s->frozen, 0.3f, s->h, labels, B, logits, NULL, NULL, scratch);
}

static void check_fd(batch_params *s, float *x, float analytic, const char *what) {
    const float keep = *x, step = 1e-2f;
    *x = keep + step;
    const double up = loss_of(s);
    *x = keep - step;
    const double down = loss_of(s);
    *x = keep;
    const double fd = (up - down) / (2.0 * step);
    CHECK(fabs(analytic - fd) <= 2e-3 * (fabs(fd) > 0.1 ? fabs(fd) : 0.1), "%s: gradient %g, central difference %g",
          what, analytic, fd);
}

static void test_gradients(void) {
    CHECK(pfl_gpfl_scratch(B, C, D) <= 512, "scratch %zu", pfl_gpfl_scratch(B, C, D));
    batch_params s;
    pfl_rng r = tiny_rng(11);
    float *all = (float *)&s;
    for (size_t i = 0; i < sizeof s / sizeof(float); i++) all[i] = (float)(2.0 * pfl_rng_uniform(&r) - 1.0);
    for (int d = 0; d < D; d++) s.glw[d] += 1.5f, s.blw[d] += 1.5f; /* LayerNorm weights away from 0 */
    for (int i = 0; i < B * D; i++) s.h[i] += 1.0f;                   /* mostly past the valve's ReLU */
    batch_params gs;
    memset(&gs, 0, sizeof gs);
    const pfl_gpfl_grads g = {gs.head_w, gs.head_b, gs.emb, {gs.gw, gs.gb, gs.glw, gs.glb},
                              {gs.bw, gs.bb, gs.blw, gs.blb}};
    const pfl_gpfl_view v = view_of(&s);
    float logits[B * C], scratch[512];
    const float loss = pfl_gpfl_loss(&v, s.frozen, 0.3f, s.h, labels, B, logits, &g, gs.h, scratch);
    CHECK(check_close(loss, loss_of(&s), 1e-6), "the loss with and without gradients differ");
    for (int i = 0; i < B * D; i++) check_fd(&s, &s.h[i], gs.h[i], "feature");
    for (int i = 0; i < C * D; i++) {
        check_fd(&s, &s.head_w[i], gs.head_w[i], "head weight");
        check_fd(&s, &s.emb[i], gs.emb[i], "category embedding");
    }
    for (int c = 0; c < C; c++) check_fd(&s, &s.head_b[c], gs.head_b[c], "head bias");
    for (int i = 0; i < D * D; i++) {
        check_fd(&s, &s.gw[i], gs.gw[i], "gamma Linear weight");
        check_fd(&s, &s.bw[i], gs.bw[i], "beta Linear weight");
    }
    for (int d = 0; d < D; d++) {
        check_fd(&s, &s.gb[d], gs.gb[d], "gamma Linear bias");
        check_fd(&s, &s.glw[d], gs.glw[d], "gamma LayerNorm weight");
        check_fd(&s, &s.glb[d], gs.glb[d], "gamma LayerNorm bias");
        check_fd(&s, &s.bb[d], gs.bb[d], "beta Linear bias");
        check_fd(&s, &s.blw[d], gs.blw[d], "beta LayerNorm weight");
        check_fd(&s, &s.blb[d], gs.blb[d], "beta LayerNorm bias");
    }
    /* the two routes both reach the nets: not one of them alone */
    double gamma_grad = 0.0;
    for (int i = 0; i < D * D; i++) gamma_grad += fabs(gs.gw[i]);
    CHECK(gamma_grad > 0.0, "no gradient reached the gamma net");

    /* the angle-level guidance alone */
    float x[B * D], dx[B * D] = {0}, demb[C * D] = {0}, sc[64];
    for (int i = 0; i < B * D; i++) x[i] = (float)(2.0 * pfl_rng_uniform(&r) - 1.0);
    pfl_gpfl_angle_loss(x, s.emb, labels, B, C, D, dx, demb, sc);
    for (int i = 0; i < B * D; i++) {
        const float keep = x[i];
        x[i] = keep + 1e-2f;
        const double up = pfl_gpfl_angle_loss(x, s.emb, labels, B, C, D, NULL, NULL, sc);
        x[i] = keep - 1e-2f;
        const double down = pfl_gpfl_angle_loss(x, s.emb, labels, B, C, D, NULL, NULL, sc);
        x[i] = keep;
        const double fd = (up - down) / 2e-2;
        CHECK(fabs(dx[i] - fd) <= 2e-3 * (fabs(fd) > 0.1 ? fabs(fd) : 0.1), "angle gradient %g, difference %g", dx[i],
              fd);
    }
}

/* The blocks in a round of two clients (dnn: fc1 16 -> 100, fc 100 -> 3). */
/* The whole batch loss from its parts, each summed here in double over a
 * batch of B = 3 with two different conditions: the cross-entropy of the
 * head on the personalized route CoV(h, p), the mean over the batch, plus
 * the angle-level guidance on the generic route CoV(h, g) (the mean of
 * -log softmax_c cos(f_G, e_c) at the label), plus lambda times the norm of
 * f_G - e_y over the whole batch. With the conditions swapped the loss
 * differs, so a swap of the routes would fail here. */
static double hand_loss(const batch_params *s, const pfl_gpfl_view *v, float lambda) {
    float fp[B * D], fg[B * D], scratch[512];
    pfl_gpfl_valve(v, v->cond_p, s->h, B, fp, scratch);
    pfl_gpfl_valve(v, v->cond_g, s->h, B, fg, scratch);
    double ce = 0.0, angle = 0.0, sq = 0.0;
    for (int n = 0; n < B; n++) {
        double z[C], zmax = -1e300, sum = 0.0;
        for (int c = 0; c < C; c++) {
            z[c] = s->head_b[c];
            for (int d = 0; d < D; d++) z[c] += (double)s->head_w[c * D + d] * fp[n * D + d];
            zmax = z[c] > zmax ? z[c] : zmax;
        }
        for (int c = 0; c < C; c++) sum += exp(z[c] - zmax);
        ce += -(z[labels[n]] - zmax - log(sum));
        double nx = 0.0, cosv[C], csum = 0.0;
        for (int d = 0; d < D; d++) nx += (double)fg[n * D + d] * fg[n * D + d];
        for (int c = 0; c < C; c++) {
            double dot = 0.0, ne = 0.0;
            for (int d = 0; d < D; d++) dot += (double)fg[n * D + d] * s->emb[c * D + d], ne += (double)s->emb[c * D + d] * s->emb[c * D + d];
            cosv[c] = dot / (fmax(sqrt(nx), 1e-12) * fmax(sqrt(ne), 1e-12));
            csum += exp(cosv[c]);
        }
        angle += -(cosv[labels[n]] - log(csum));
        for (int d = 0; d < D; d++) {
            const double diff = (double)fg[n * D + d] - s->frozen[labels[n] * D + d];
            sq += diff * diff;
        }
    }
    return ce / B + angle / B + lambda * sqrt(sq);
}

static void test_loss_by_parts(void) {
    batch_params s;
    pfl_rng r = tiny_rng(23);
    float *all = (float *)&s;
    for (size_t i = 0; i < sizeof s / sizeof(float); i++) all[i] = (float)(2.0 * pfl_rng_uniform(&r) - 1.0);
    for (int d = 0; d < D; d++) s.glw[d] += 1.5f, s.blw[d] += 1.5f;
    for (int i = 0; i < B * D; i++) s.h[i] += 1.0f;
    const pfl_gpfl_view v = view_of(&s);
    float logits[B * C], scratch[512];
    const double want = hand_loss(&s, &v, 0.3f);
    const float got = pfl_gpfl_loss(&v, s.frozen, 0.3f, s.h, labels, B, logits, NULL, NULL, scratch);
    CHECK(check_close(got, want, 1e-5), "batch loss %.9g, from its parts by hand %.9g", got, want);
    pfl_gpfl_view swapped = v;
    swapped.cond_g = v.cond_p, swapped.cond_p = v.cond_g;
    const double other = hand_loss(&s, &swapped, 0.3f);
    CHECK(fabs(other - want) > 1e-3, "the routes' conditions make no difference (%.9g, %.9g): the test is blind",
          want, other);
}

static void test_blocks_in_a_round(void) {
    pfl_config cfg = tiny_config(2);
    cfg.algo.gpfl_lambda = 0.01f, cfg.algo.gpfl_mu = 0.1f;
    cfg.eval_moment = PFL_EVAL_AFTER_TRAIN; /* keeps each client's model as training left it */
    const int n_train[2] = {4, 6}, n_test[2] = {3, 3};
    tiny_fed f;
    tiny_fed_init(&f, &pfl_algo_gpfl, cfg, n_train, n_test);
    pfl_fl *fl = &f.fl;
    const pfl_model *m = fl->model;
    CHECK(f.m.num_blocks == 0 && m != &f.m, "the caller's model is left as it was");
    CHECK(m->num_layers == 2 && m->num_blocks == 6 && pfl_model_rows(m) == 8, "layers %d, blocks %d", m->num_layers,
          m->num_blocks);
    const pfl_layer *head = &m->layers[1], *gce = &m->layers[2], *cond = &m->layers[7];
    CHECK(gce->length == 300 && m->layers[3].length == 10100 && m->layers[4].length == 200 &&
              m->layers[5].length == 10100 && m->layers[6].length == 200 && cond->length == 200,
          "block lengths");
    CHECK(m->num_params == f.m.num_params + 300 + 2 * 10300 + 200, "parameters %zu", m->num_params);
    CHECK(fl->shared[0] && !fl->shared[1] && fl->shared[2] && fl->shared[3] && fl->shared[4] && fl->shared[5] &&
              fl->shared[6] && !fl->shared[7],
          "sharing: the extractor, GCE and CoV shared; head and conditions personal");
    const size_t V = pfl_model_vector_len(m);
    float *initial = tiny_floats(V);
    memcpy(initial, fl->global, V * sizeof(float));
    for (size_t j = 0; j < cond->length; j++) CHECK(initial[cond->offset + j] == 0.0f, "conditions start at 0");
    CHECK(initial[m->layers[4].offset] == 1.0f && initial[m->layers[4].offset + 100] == 0.0f, "LayerNorm 1, 0");
    double big = 0.0; /* N(0, 1) embeddings, not the Linear's +-1/sqrt(100) */
    for (size_t j = 0; j < gce->length; j++) big = fmax(big, fabs(initial[gce->offset + j]));
    CHECK(big > 1.0, "embeddings look standard normal (largest %g)", big);

    CHECK(pfl_fl_run(fl, NULL, NULL) == 0, "gpfl runs: %s", pfl_errmsg());
    CHECK(tiny_same(fl->global, initial, head->offset, head->length), "the global head moved: heads are personal");
    CHECK(tiny_same(fl->global, initial, cond->offset, cond->length), "the global conditions moved");
    const float *t0 = pfl_store_read(fl->trained, 0), *t1 = pfl_store_read(fl->trained, 1);
    float *c0 = tiny_client_model(fl, 0, tiny_floats(V)), *c1 = tiny_client_model(fl, 1, tiny_floats(V));
    CHECK(!tiny_same(t0, initial, head->offset, head->length) && !tiny_same(t0, t1, head->offset, head->length),
          "the heads trained, one per client");
    /* the shared rows of the global model: 0.4 x client 0's + 0.6 x client 1's trained values */
    double worst = 0.0;
    for (int l = 0; l < pfl_model_rows(m); l++) {
        if (!fl->shared[l]) continue;
        for (size_t j = m->layers[l].offset; j < m->layers[l].offset + m->layers[l].length; j++) {
            const double e = fabs(fl->global[j] - (0.4 * t0[j] + 0.6 * t1[j]));
            worst = e > worst ? e : worst;
        }
    }
    CHECK(worst < 1e-6, "shared rows off the 4 : 6 mean of the trained ones by %g", worst);
    CHECK(!tiny_same(fl->global, initial, m->layers[3].offset, m->layers[3].length), "the CoV trained");
    /* client k's conditions: from the embeddings it trained, with its class
     * shares (labels i % 3: client 0 has 0 1 2 0, client 1 has 1 2 0 1 2 0) */
    const float uniform[3] = {1.0f / 3, 1.0f / 3, 1.0f / 3}, share0[3] = {0.5f, 0.25f, 0.25f};
    const float *trained[2] = {t0, t1}, *shares[2] = {share0, uniform};
    float *client[2] = {c0, c1}, want[200];
    for (int k = 0; k < 2; k++) {
        pfl_gpfl_condition(trained[k] + gce->offset, uniform, 3, 100, want);
        pfl_gpfl_condition(trained[k] + gce->offset, shares[k], 3, 100, want + 100);
        CHECK(!memcmp(client[k] + cond->offset, want, sizeof want), "client %d: conditions", k);
        CHECK(tiny_same(client[k], trained[k], head->offset, head->length),
              "client %d: the personalized model's head is the one it trained", k);
    }
    CHECK(!tiny_same(c0, c1, cond->offset + 100, 100), "personalized conditions differ between the clients");
    free(initial), free(c0), free(c1);
    tiny_fed_free(&f);
}

/* The conditions are fixed while a client trains (PFLlib computes them in
 * set_GCE, between rounds): with every sample alike, a client of two batches
 * trains as one of one batch trained twice with its conditions put back in
 * between, weight decay mu on every extra block but them (lambda 0, so the
 * magnitude target, fixed per training, plays no part). */
static void test_conditions_fixed_in_training(void) {
    pfl_config cfg = tiny_config(2);
    cfg.algo.gpfl_lambda = 0.0f, cfg.algo.gpfl_mu = 0.1f, cfg.lr = 0.1f, cfg.batch = 4;
    const int n_train[2] = {4, 8}, n_test[2] = {2, 2};
    tiny_fed f;
    tiny_fed_data(&f, 2, n_train, n_test);
    for (int i = 1; i < f.d.n; i++) memcpy(f.d.pixels + (size_t)i * 16, f.d.pixels, 16), f.d.labels[i] = 0;
    f.d.labels[0] = 0;
    tiny_fed_start(&f, &pfl_algo_gpfl, &cfg);
    pfl_fl *fl = &f.fl;
    const pfl_model *m = fl->model;
    const pfl_layer *cond = &m->layers[7];
    const size_t V = pfl_model_vector_len(m);
    float *start = tiny_floats(V), *once = tiny_floats(V), *twice = tiny_floats(V);
    memcpy(start, fl->global, V * sizeof(float));
    pfl_rng r = tiny_rng(8);
    tiny_fill(start + cond->offset, cond->length, 0.5, 1.5, &r);
    memcpy(once, start, V * sizeof(float)), memcpy(twice, start, V * sizeof(float));
    fl->round = 1;
    pfl_worker *w = &fl->workers[0];
    pfl_train_stats st = {0};
    pfl_algo_gpfl.local_train(fl, 0, w, once, &st);
    memcpy(once + cond->offset, start + cond->offset, cond->length * sizeof(float));
    pfl_algo_gpfl.local_train(fl, 0, w, once, &st);
    pfl_algo_gpfl.local_train(fl, 1, w, twice, &st);
    CHECK(st.samples == 16, "4 + 4 + 8 samples trained, not %ld", st.samples);
    CHECK(!tiny_same(once, start, 0, cond->offset), "the model did not train");
    CHECK(tiny_same(once, twice, 0, V), "two batches are not one batch twice with the conditions held (%zu floats)",
          tiny_count_diff(once, twice, 0, V));
    free(start), free(once), free(twice);
    tiny_fed_free(&f);
}

int main(void) {
    test_conditions_by_hand();
    test_valve_by_hand();
    test_guidance_by_hand();
    test_gradients();
    test_loss_by_parts();
    test_blocks_in_a_round();
    test_conditions_fixed_in_training();
    TEST_MAIN_END();
}
