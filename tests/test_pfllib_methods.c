/* PFLlib's personalized methods FedCAC, FedAS, PFL-DA and FedGC
 * (src/algos/fedcac.c, fedas.c, pfl_da.c, fedgc.c), each distinctive step
 * worked by hand on a tiny model (tests/tiny.h: the "dnn" on 1x4x4 images of
 * 3 classes, fc1 16 -> 100, fc 100 -> 3):
 *
 *  - FedCAC: the critical parameters of a tensor (the top tau by
 *    |(w - w0) w|, the small-threshold rule, none, all); the collaboration
 *    threshold; two rounds of the server on uploads built so that clients 0
 *    and 1 share their critical positions and client 2 shares none: after
 *    round 1 the critical parameters come from the initial model (PFLlib) or
 *    the mean of the collaborators (--cac-round1 customized), after round 2
 *    from the mean of clients 0 and 1 for both of them and client 2's own
 *    upload for it; the messages;
 *  - FedAS: the alignment loss and its gradient; the local initialization
 *    (the received extractor after one SGD step on that loss toward the
 *    prototypes of the client's own model, against the engine's own backward;
 *    the client's head and statistics; nothing moves at rate 0); the Fisher
 *    trace against the engine's backward over the shuffled full batches; the
 *    aggregation weighted by the traces, and by samples when they sum to 0;
 *  - PFL-DA: the global head's cross-entropy and gradients; the
 *    regularizer's gradient; the two phases (the personal head as phase 1
 *    alone leaves it, the extractor and global head trained in phase 2);
 *    what is shared and sent;
 *  - FedGC: the prediction over the held classes; the server's correction
 *    on three clients' heads against its closed form; training leaves the
 *    rows of absent classes and the bias at zero. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "check.h"
#include "tiny.h"

static uint32_t mask_word(const float *row, size_t w) {
    uint32_t u;
    memcpy(&u, row + w, sizeof u);
    return u;
}

/* Two clients of n0 and n1 training samples and 4 test samples each. */
static pfl_fl *two_clients(tiny_fed *f, const pfl_algo *algo, pfl_config cfg, int n0, int n1) {
    const int n_train[2] = {n0, n1}, n_test[2] = {4, 4};
    tiny_fed_init(f, algo, cfg, n_train, n_test);
    return &f->fl;
}

/* ---- FedCAC ---- */

/* The first mask word of a 4-parameter tensor's selection at bit 0 of a clear mask. */
static uint32_t selected(const float *w, const float *w0, double tau) {
    float mask[1] = {0};
    uint32_t keys[4];
    pfl_fedcac_select(w, w0, 4, tau, keys, mask, 0);
    return mask_word(mask, 0);
}

static void test_cac_select_by_hand(void) {
    float mask[2];
    uint32_t keys[4];
    /* c = |(w - w0) w| = (1, 2, 0, 1.5): tau 0.5 keeps int(2) of them, threshold 1.5 */
    const float w[4] = {1, -2, 0.5f, 3}, w0[4] = {0, -1, 0.5f, 2.5f};
    CHECK(selected(w, w0, 0.5) == 0xAu, "tau 0.5: mask %#x, want {1, 3} = 0xa", selected(w, w0, 0.5));
    /* tau 0.75: int(3), threshold 1 */
    CHECK(selected(w, w0, 0.75) == 0xBu, "tau 0.75: mask %#x, want {0, 1, 3} = 0xb", selected(w, w0, 0.75));
    /* tau 0.2: int(0.8) = 0, threshold +inf: none; the bits of another tensor stay */
    const uint32_t other = 0x5u;
    memcpy(mask, &other, sizeof other);
    pfl_fedcac_select(w, w0, 4, 0.2, keys, mask, 8);
    CHECK(mask_word(mask, 0) == 0x5u, "tau 0.2: mask %#x, want the other tensor's 0x5 alone", mask_word(mask, 0));
    /* at bit 30: the tensor's bits run into the next word */
    memset(mask, 0, sizeof mask);
    pfl_fedcac_select(w, w0, 4, 0.5, keys, mask, 30);
    CHECK(mask_word(mask, 0) == 0x80000000u && mask_word(mask, 1) == 0x2u, "at bit 30: %#x %#x", mask_word(mask, 0),
          mask_word(mask, 1));
    /* c = (0, 0, 0, 1e-3): the int(2)-th largest is 0 <= 1e-10, so the threshold becomes 1e-3 */
    const float same[4] = {1, 1, 1, 1}, near[4] = {1, 1, 1, 0.999f};
    CHECK(selected(same, near, 0.5) == 0x8u, "one change: mask %#x, want {3}", selected(same, near, 0.5));
    /* no change at all: the threshold stays 0 and every c >= 0 is critical */
    CHECK(selected(same, same, 0.5) == 0xFu, "no change: mask %#x, want all four", selected(same, same, 0.5));
}

static void test_cac_threshold(void) {
    /* overlaps (diagonal unread): sum 2.75 over 6 pairs, max 1 */
    const double o[9] = {9, 1, 0, 1, 9, 0.5, 0, 0.25, 9};
    const double avg = 2.75 / 6, want = avg + 2.0 / 4 * (1 - avg);
    CHECK(check_close(pfl_fedcac_threshold(o, 3, 2, 4), want, 1e-12), "round 2, beta 4: %.9g, want %.9g",
          pfl_fedcac_threshold(o, 3, 2, 4), want);
    CHECK(check_close(pfl_fedcac_threshold(o, 3, 8, 4), avg + 2 * (1 - avg), 1e-12), "round 8, beta 4");
}

/* Client k's upload: the initial model plus, in every tensor of n, a change
 * `big` on the first n/2 elements (clients 0 and 1) or the last n/2 (client
 * 2), 1e-3 on the other n/2 and none on the middle one of an odd tensor. So
 * the critical halves are the big ones, clients 0 and 1 overlap fully and
 * client 2 not at all. */
static bool big_part(const pfl_model *m, size_t j, int k) {
    for (int t = 0; t < m->num_tensors; t++) {
        const pfl_tensor *te = &m->tensors[t];
        if (j < te->offset || j >= te->offset + te->length) continue;
        const size_t i = j - te->offset, h = te->length / 2;
        return k < 2 ? i < h : i >= te->length - h;
    }
    return false;
}

static bool middle(const pfl_model *m, size_t j) {
    for (int t = 0; t < m->num_tensors; t++) {
        const pfl_tensor *te = &m->tensors[t];
        if (j >= te->offset && j < te->offset + te->length)
            return te->length % 2 == 1 && j - te->offset == te->length / 2;
    }
    return false;
}

static void cac_uploads(const pfl_fl *fl, const float *initial, float **up) {
    const pfl_model *m = fl->model;
    const float big[3] = {1.0f, 2.0f, 1.5f};
    for (int k = 0; k < 3; k++)
        for (size_t j = 0; j < m->num_params; j++)
            up[k][j] = initial[j] + (middle(m, j) ? 0.0f : big_part(m, j, k) ? big[k] : 1e-3f);
}

/* The model client k holds: its critical half from `critical` (per client),
 * the rest from the global model. */
static size_t cac_mismatch(pfl_fl *fl, int k, const float *critical, float *scratch) {
    const pfl_model *m = fl->model;
    const float *pm = pfl_algo_fedcac.personal_model(fl, k, scratch);
    size_t bad = 0;
    for (size_t j = 0; j < m->num_params; j++) {
        const float want = big_part(m, j, k) && !middle(m, j) ? critical[j] : fl->global[j];
        bad += memcmp(&pm[j], &want, sizeof want) != 0;
    }
    return bad;
}

static void test_cac_rounds(const char *round1) {
    pfl_config cfg = tiny_config(3);
    cfg.algo.cac_tau = 0.5, cfg.algo.cac_beta = 100, cfg.algo.cac_round1 = round1;
    const int n_train[3] = {8, 8, 8}, n_test[3] = {4, 4, 4};
    tiny_fed f;
    tiny_fed_init(&f, &pfl_algo_fedcac, cfg, n_train, n_test);
    pfl_fl *fl = &f.fl;
    const size_t P = f.m.num_params;
    const bool customized = round1 && !strcmp(round1, "customized");
    float *initial = tiny_floats(P), *scratch = tiny_floats(P), *mean01 = tiny_floats(P), *up[3];
    memcpy(initial, fl->global, P * sizeof(float));
    for (int k = 0; k < 3; k++) up[k] = tiny_floats(P);
    cac_uploads(fl, initial, up);
    for (size_t j = 0; j < P; j++) mean01[j] = (up[0][j] + up[1][j]) / 2.0f; /* PFLlib: sum, then / float(2) */
    const int clients[3] = {0, 1, 2};
    uint64_t down = 0, up_bytes = 0;
    pfl_algo_fedcac.message_bytes(fl, 0, NULL, NULL, &down, &up_bytes);
    CHECK(down == 4 * P && up_bytes == 4 * P + (P + 7) / 8, "round 1 messages: %llu down, %llu up",
          (unsigned long long)down, (unsigned long long)up_bytes);

    fl->round = 1;
    pfl_algo_fedcac.aggregate(fl, clients, 3, up);
    size_t bad0 = cac_mismatch(fl, 0, customized ? mean01 : initial, scratch);
    size_t bad2 = cac_mismatch(fl, 2, customized ? up[2] : initial, scratch);
    CHECK(bad0 == 0 && bad2 == 0, "%s, after round 1: %zu and %zu floats of clients 0 and 2 differ", round1,
          bad0, bad2);

    fl->round = 2;
    pfl_algo_fedcac.message_bytes(fl, 0, NULL, NULL, &down, &up_bytes);
    CHECK(down == (customized ? 8 : 4) * P, "round 2: %llu bytes down", (unsigned long long)down);
    if (!customized) { /* round 2 from the models the server sent: the same masks, customized */
        pfl_algo_fedcac.aggregate(fl, clients, 3, up);
        bad0 = cac_mismatch(fl, 0, mean01, scratch);
        const size_t bad1 = cac_mismatch(fl, 1, mean01, scratch);
        bad2 = cac_mismatch(fl, 2, up[2], scratch);
        CHECK(bad0 == 0 && bad1 == 0 && bad2 == 0, "after round 2: %zu, %zu and %zu floats differ", bad0, bad1,
              bad2);
        pfl_algo_fedcac.message_bytes(fl, 0, NULL, NULL, &down, &up_bytes);
        CHECK(down == 8 * P, "round 3: %llu bytes down (global and customized)", (unsigned long long)down);
    }
    for (int k = 0; k < 3; k++) free(up[k]);
    free(initial), free(scratch), free(mean01);
    tiny_fed_free(&f);
}

static void test_refusals(void) {
    pfl_config cfg = tiny_config(2);
    cfg.modules.ala = true;
    CHECK(pfl_algo_fedcac.check(&cfg) != 0, "fedcac takes --ala");
    cfg.modules.ala = false, cfg.modules.flayer_mask = true;
    CHECK(pfl_algo_fedcac.check(&cfg) != 0, "fedcac takes --flayer-mask");
    cfg.modules.flayer_mask = false, cfg.algo.cac_round1 = "later";
    CHECK(pfl_algo_fedcac.check(&cfg) != 0 && strstr(pfl_errmsg(), "--cac-round1"), "a bad --cac-round1: %s",
          pfl_errmsg());
    cfg.algo.cac_round1 = "customized", cfg.modules.flayer_lr = true;
    CHECK(pfl_algo_fedcac.check(&cfg) == 0, "fedcac refuses --flayer-lr: %s", pfl_errmsg());
    /* FedGC: ALA's weights would learn on every class */
    pfl_config gc = tiny_config(2);
    gc.modules.ala = true;
    CHECK(pfl_algo_fedgc.check(&gc) != 0 && strstr(pfl_errmsg(), "--ala"), "fedgc takes --ala");
    gc.modules.ala = false, gc.modules.flayer_agg = gc.modules.flayer_mask = gc.modules.flayer_lr = true;
    CHECK(pfl_algo_fedgc.check(&gc) == 0, "fedgc refuses FLAYER's modules: %s", pfl_errmsg());
}

/* ---- FedAS ---- */

static void test_as_align_loss_by_hand(void) {
    /* class 0: rows (1, 2), (3, 4) toward (1, 1): errors 0 1 2 3, sum of squares 14 over 2 x 2 = 3.5;
     * class 1: (0, 1) toward (2, 2): errors -2 -1, 5 over 1 x 2 = 2.5 */
    const float f[6] = {1, 2, 3, 4, 0, 1}, proto[6] = {1, 1, 2, 2, 0, 0};
    const uint8_t y[3] = {0, 0, 1};
    const int in_batch[3] = {2, 1, 0};
    float df[6];
    const double loss = pfl_fedas_align_loss(f, y, 3, 2, proto, in_batch, df);
    const float want[6] = {0, 0.5f, 1, 1.5f, -2, -1}; /* 2 e / (n_c D) */
    CHECK(check_close(loss, 6.0, 1e-12), "loss %g, want 6", loss);
    for (int i = 0; i < 6; i++) CHECK(check_close(df[i], want[i], 1e-7), "df[%d] %g, want %g", i, df[i], want[i]);
}

/* One batch of 16 (the whole split), the executor gathering it in parts of
 * 8: the extractor is the global one after one SGD step on the alignment
 * loss, computed here with the engine on the whole batch. */
static void test_as_init(void) {
    pfl_config cfg = tiny_config(2);
    cfg.batch = 4, cfg.eval_batch = 8; /* max_batch 8 < 16 */
    cfg.algo.as_align_lr = 0.5f, cfg.algo.as_align_epochs = 1;
    tiny_fed f;
    pfl_fl *fl = two_clients(&f, &pfl_algo_fedas, cfg, 16, 8);
    const pfl_model *m = fl->model;
    const size_t V = pfl_model_vector_len(m), base = m->layers[1].offset, head = m->layers[1].length;
    const int D = 100, B = 16;
    CHECK(m->num_blocks == 1 && V == 2004 && fl->shared[2], "one shared float for the trace: %d blocks, %zu floats",
          m->num_blocks, V);
    float *own = pfl_client_model(fl, 0);
    pfl_rng r = tiny_rng(5);
    tiny_fill(own, V, -0.3, 0.3, &r);
    fl->round = 1;
    float *model = tiny_floats(V);
    pfl_algo_fedas.local_init(fl, 0, model);
    CHECK(tiny_same(model, own, base, head) && model[m->layers[2].offset] == 0.0f, "the head is the client's own");
    /* by the engine: prototypes of `own`, one step from the global extractor */
    tiny_batch tb = tiny_batch_of(m, fl->data, f.part.clients[0].train, B);
    double proto[3 * 100] = {0};
    int count[3] = {0};
    pfl_forward(tb.ws, own, tb.x, B, false, NULL);
    const float *h = pfl_workspace_layer_input(tb.ws, 1);
    for (int n = 0; n < B; n++) {
        count[tb.y[n]]++;
        for (int d = 0; d < D; d++) proto[tb.y[n] * D + d] += h[n * D + d];
    }
    pfl_forward(tb.ws, fl->global, tb.x, B, false, NULL);
    h = pfl_workspace_layer_input(tb.ws, 1);
    float *dh = tiny_floats((size_t)B * D), *grads = tiny_floats(m->num_params);
    for (int n = 0; n < B; n++)
        for (int d = 0; d < D; d++) {
            const double p = proto[tb.y[n] * D + d] / count[tb.y[n]];
            dh[n * D + d] = (float)(2.0 * (h[n * D + d] - p) / ((double)count[tb.y[n]] * D));
        }
    pfl_backward_below(tb.ws, fl->global, 1, dh, grads);
    size_t off = 0;
    for (size_t j = 0; j < base; j++) {
        const float want = fl->global[j] - 0.5f * grads[j];
        off += !check_close(model[j], want, 1e-5);
    }
    CHECK(off == 0, "%zu of %zu extractor parameters are not one alignment step from the global ones", off, base);
    CHECK(tiny_count_diff(model, fl->global, 0, base) > base / 4, "the alignment moved little");
    /* at rate 0 the extractor is the global one, bit for bit */
    fl->cfg.algo.as_align_lr = 0.0f;
    pfl_algo_fedas.local_init(fl, 0, model);
    CHECK(tiny_same(model, fl->global, 0, base), "rate 0 moved the extractor");
    tiny_batch_free(&tb);
    free(dh), free(grads), free(model);
    tiny_fed_free(&f);
}

/* 10 samples, batch 4: two full batches of the (seed, round, client, ALGO)
 * shuffle, the last 2 samples left out. */
static void test_as_fisher(void) {
    pfl_config cfg = tiny_config(2);
    tiny_fed f;
    pfl_fl *fl = two_clients(&f, &pfl_algo_fedas, cfg, 10, 6);
    const pfl_model *m = fl->model;
    fl->round = 3;
    const double trace = pfl_fedas_fisher_trace(fl, &fl->workers[0], 0, fl->global);
    int order[10];
    memcpy(order, f.part.clients[0].train, sizeof order);
    pfl_rng r = pfl_rng_stream(cfg.seed, 3, 0, PFL_RNG_ALGO);
    pfl_rng_shuffle(&r, order, 10);
    double want = 0.0;
    float *grads = tiny_floats(m->num_params);
    for (int b = 0; b < 2; b++) {
        tiny_batch tb = tiny_batch_of(m, fl->data, order + 4 * b, 4);
        memset(grads, 0, sizeof(float) * m->num_params);
        pfl_forward_loss(tb.ws, fl->global, tb.x, tb.y, 4, false, NULL);
        pfl_backward(tb.ws, fl->global, tb.y, grads);
        for (size_t j = 0; j < pfl_model_backbone_params(m); j++) want += (double)grads[j] * grads[j];
        tiny_batch_free(&tb);
    }
    CHECK(want > 0 && check_close(trace, want, 1e-5), "trace %.9g, by the engine %.9g", trace, want);
    free(grads);
    tiny_fed_free(&f);
}

static void test_as_aggregate(void) {
    pfl_config cfg = tiny_config(2);
    tiny_fed f;
    pfl_fl *fl = two_clients(&f, &pfl_algo_fedas, cfg, 8, 4);
    const size_t V = pfl_model_vector_len(fl->model), fisher = fl->model->layers[2].offset;
    float *up[2] = {tiny_floats(V), tiny_floats(V)};
    for (size_t j = 0; j < V; j++) up[0][j] = 1.0f, up[1][j] = 3.0f;
    up[0][fisher] = 1.0f, up[1][fisher] = 3.0f; /* weights 1/4, 3/4: 2.5 (by samples: 5/3) */
    const int clients[2] = {0, 1};
    pfl_algo_fedas.aggregate(fl, clients, 2, up);
    size_t bad = 0;
    for (size_t j = 0; j < fisher; j++) bad += fl->global[j] != 2.5f;
    CHECK(bad == 0 && fl->global[fisher] == 0.0f, "Fisher-weighted mean: %zu floats not 2.5, block %g", bad,
          fl->global[fisher]);
    up[0][fisher] = up[1][fisher] = 0.0f; /* no information: by samples */
    pfl_algo_fedas.aggregate(fl, clients, 2, up);
    CHECK(check_close(fl->global[0], 5.0 / 3.0, 1e-6), "traces 0: %g, want the sample-weighted 5/3", fl->global[0]);
    uint64_t down, up_bytes;
    pfl_algo_fedas.message_bytes(fl, 0, NULL, NULL, &down, &up_bytes);
    CHECK(down == 4 * (V - 1) && up_bytes == 4 * V, "messages %llu down, %llu up", (unsigned long long)down,
          (unsigned long long)up_bytes);
    free(up[0]), free(up[1]);
    tiny_fed_free(&f);
}

/* ---- PFL-DA ---- */

static void test_da_head_by_hand(void) {
    /* w = I, b = 0, h = (ln 3, 0): z = (ln 3, 0), softmax (3/4, 1/4), label 0 */
    const float w[4] = {1, 0, 0, 1}, b[2] = {0, 0}, h[2] = {(float)log(3.0), 0};
    const uint8_t y[1] = {0};
    float dw[4] = {0}, db[2] = {0}, dh[2] = {0};
    int correct;
    const double loss = pfl_da_head_xent(w, b, h, y, 1, 2, 2, dw, db, dh, &correct);
    CHECK(check_close(loss, -log(0.75), 1e-6) && correct == 1, "loss %g (want %g), correct %d", loss, -log(0.75),
          correct);
    CHECK(check_close(db[0], -0.25, 1e-6) && check_close(db[1], 0.25, 1e-6), "db %g %g", db[0], db[1]);
    CHECK(check_close(dw[0], -0.25 * log(3.0), 1e-6) && dw[1] == 0.0f && check_close(dw[2], 0.25 * log(3.0), 1e-6) &&
              dw[3] == 0.0f,
          "dw %g %g %g %g", dw[0], dw[1], dw[2], dw[3]);
    CHECK(check_close(dh[0], -0.25, 1e-6) && check_close(dh[1], 0.25, 1e-6), "dh %g %g", dh[0], dh[1]);
    /* lambda ||g - p||, p - g = (3, 4): lambda (p - g) / 5 */
    const float p[2] = {3, 5}, g[2] = {0, 1};
    float grads[2] = {1, 1};
    pfl_da_reg_grad(p, g, 2, 2.0f, grads);
    CHECK(check_close(grads[0], 1 + 1.2, 1e-6) && check_close(grads[1], 1 + 1.6, 1e-6), "reg grad %g %g", grads[0],
          grads[1]);
    pfl_da_reg_grad(p, p, 2, 2.0f, grads);
    CHECK(check_close(grads[0], 2.2, 1e-6), "at p = g the norm adds nothing: %g", grads[0]);
}

static void test_da_phases(void) {
    pfl_config cfg = tiny_config(2);
    cfg.momentum = 0.5f, cfg.weight_decay = 0.01f; /* a frozen row stays bitwise only if the step never steps it */
    tiny_fed f;
    pfl_fl *fl = two_clients(&f, &pfl_algo_pfl_da, cfg, 8, 6);
    const pfl_model *m = fl->model;
    const size_t V = pfl_model_vector_len(m), head = m->layers[1].offset, block = m->layers[2].offset;
    CHECK(!fl->shared[0] && !fl->shared[1] && fl->shared[2], "shared: %d %d %d", fl->shared[0], fl->shared[1],
          fl->shared[2]);
    CHECK(tiny_same(fl->global + block, fl->global + head, 0, 303), "the global head starts as the head");
    uint64_t down, up;
    pfl_default_message_bytes(fl, 0, NULL, NULL, &down, &up); /* pfl-da counts as every method does */
    CHECK(down == 4 * 303 && up == 4 * 303, "messages: %llu down, %llu up (the global head)",
          (unsigned long long)down, (unsigned long long)up);
    fl->round = 1;
    float *start = tiny_floats(V), *trained = tiny_floats(V), *phase1 = tiny_floats(V);
    pfl_default_local_init(fl, 0, start);
    memcpy(trained, start, V * sizeof(float));
    memcpy(phase1, start, V * sizeof(float));
    pfl_train_stats st = {0};
    pfl_algo_pfl_da.local_train(fl, 0, &fl->workers[0], trained, &st);
    /* phase 1 alone: the head, everything else frozen */
    bool frozen[PFL_MAX_LAYERS] = {true, false, true};
    pfl_step s = pfl_step_default(fl);
    s.opt.frozen = frozen;
    pfl_train_stats st1 = {0};
    pfl_step_run(fl, 0, &fl->workers[0], phase1, &s, &st1);
    CHECK(tiny_same(trained, phase1, head, 303), "the personal head is not what phase 1 alone leaves (%zu differ)",
          tiny_count_diff(trained, phase1, head, 303));
    CHECK(!tiny_same(phase1, start, head, 303), "phase 1 did not move the head");
    CHECK(tiny_count_diff(trained, start, 0, head) > head / 4, "phase 2 did not train the extractor");
    CHECK(tiny_count_diff(trained, start, block, 303) > 150, "phase 2 did not train the global head");
    CHECK(st.samples == 16, "two phases of 8 samples: %ld", st.samples);
    /* with its gradient, the regularizer pulls the head toward the global one */
    fl->cfg.algo.da_reg_grad = true, fl->cfg.algo.da_lambda = 1.0f;
    memcpy(phase1, start, V * sizeof(float));
    pfl_algo_pfl_da.local_train(fl, 0, &fl->workers[0], phase1, &st);
    CHECK(!tiny_same(phase1, trained, head, 303), "--da-reg-grad changed nothing");
    free(start), free(trained), free(phase1);
    tiny_fed_free(&f);
}

/* ---- FedGC ---- */

static void test_gc_predict(void) {
    const float z[3] = {0, -1, -2};
    const uint8_t held[3] = {0, 1, 1}, none[3] = {0, 0, 0};
    CHECK(pfl_fedgc_predict(z, held, 3) == 1, "the best held class is 1, not %d", pfl_fedgc_predict(z, held, 3));
    CHECK(pfl_fedgc_predict(z, none, 3) == -1, "no class held");
}

/* Clients 0 {0, 1}, 1 {1, 2}, 2 {0} with rows a0 = a1' = (1, 0), a1 = b1 =
 * (0, 1), b2 = (-1, 0), c0 = (1, 0) (the other 98 features 0): e_0 = (1, 0),
 * m_0 = 2; e_1 = (0, 1), m_1 = 2; e_2 = (-1, 0), m_2 = 1. Class 0 pushes
 * client 1's rows, Z_0 = e + e^0 + e^-1; class 1 pushes client 2's, Z_1 =
 * e + 1; class 2 pushes clients 0's and 2's, Z_2 = e + 1 + 2/e. */
static void test_gc_correction_by_hand(void) {
    pfl_config cfg = tiny_config(3);
    cfg.lr = 0.1f, cfg.algo.gc_lambda = 1.0f;
    const int n_train[3] = {2, 2, 1}, n_test[3] = {2, 0, 1}; /* labels i % 3: {0, 1}, {1, 2}, {0} */
    tiny_fed f;
    tiny_fed_init(&f, &pfl_algo_fedgc, cfg, n_train, n_test);
    pfl_fl *fl = &f.fl;
    const pfl_model *m = fl->model;
    const size_t V = pfl_model_vector_len(m), off = m->layers[1].offset;
    const int D = 100;
    float *up[3], *scratch = tiny_floats(V);
    const float rows[3][3][2] = {{{1, 0}, {0, 1}, {0, 0}}, {{0, 0}, {0, 1}, {-1, 0}}, {{1, 0}, {0, 0}, {0, 0}}};
    for (int k = 0; k < 3; k++) {
        up[k] = tiny_floats(V);
        memcpy(up[k], fl->global, V * sizeof(float));
        for (int c = 0; c < 3; c++) {
            memset(up[k] + off + (size_t)c * D, 0, sizeof(float) * D);
            up[k][off + (size_t)c * D] = rows[k][c][0], up[k][off + (size_t)c * D + 1] = rows[k][c][1];
        }
    }
    fl->round = 1;
    const int clients[3] = {0, 1, 2};
    pfl_algo_fedgc.aggregate(fl, clients, 3, up);
    const double e = exp(1.0), z0 = e + 1 + 1 / e, z1 = e + 1, z2 = e + 1 + 2 / e;
    /* corrected rows: w - 0.1 m_c exp(w.e_c) / Z_c e_c, over the classes c the client lacks */
    const double want[3][3][2] = {{{1 + 0.1 / e / z2, 0}, {0.1 / z2, 1}, {0, 0}},
                                  {{0, 0}, {-0.2 / z0, 1}, {-1 - 0.2 / e / z0, 0}},
                                  {{1 + 0.1 / e / z2, -0.2 / z1}, {0, 0}, {0, 0}}};
    for (int k = 0; k < 3; k++) {
        const float *pm = pfl_algo_fedgc.personal_model(fl, k, scratch);
        for (int c = 0; c < 3; c++) {
            const float *row = pm + off + (size_t)c * D;
            size_t rest = 0;
            for (int d = 2; d < D; d++) rest += row[d] != 0.0f;
            CHECK(check_close(row[0], want[k][c][0], 1e-6) && check_close(row[1], want[k][c][1], 1e-6) && rest == 0,
                  "client %d class %d: (%.9g, %.9g), by hand (%.9g, %.9g); %zu others nonzero", k, c, row[0], row[1],
                  want[k][c][0], want[k][c][1], rest);
        }
        size_t bias = 0;
        for (int c = 0; c < 3; c++) bias += pm[off + (size_t)D * 3 + c] != 0.0f;
        CHECK(bias == 0 && tiny_same(pm, fl->global, 0, off), "client %d: the global extractor, no bias", k);
    }
    /* the global head: the class means of the corrected rows */
    const double g0 = (want[0][0][0] + want[2][0][0]) / 2, g1 = (want[0][1][0] + want[1][1][0]) / 2;
    CHECK(check_close(fl->global[off], g0, 1e-6) && check_close(fl->global[off + D], g1, 1e-6) &&
              check_close(fl->global[off + 2 * D], want[1][2][0], 1e-6) &&
              check_close(fl->global[off + 1], want[2][0][1] / 2, 1e-6),
          "global head rows (%g, %g), %g, %g", fl->global[off], fl->global[off + 1], fl->global[off + D],
          fl->global[off + 2 * D]);
    uint64_t down, up_bytes;
    pfl_algo_fedgc.message_bytes(fl, 0, NULL, NULL, &down, &up_bytes);
    CHECK(down == 4 * (off + 2 * (uint64_t)D) && up_bytes == down, "client 0: %llu down, %llu up",
          (unsigned long long)down, (unsigned long long)up_bytes);
    for (int k = 0; k < 3; k++) free(up[k]);
    free(scratch);
    tiny_fed_free(&f);
}

/* Training with momentum and weight decay moves the held rows and the
 * extractor, never the row of a class the client lacks nor the bias. */
static void test_gc_training(void) {
    pfl_config cfg = tiny_config(2);
    cfg.momentum = 0.9f, cfg.weight_decay = 0.01f;
    tiny_fed f;
    pfl_fl *fl = two_clients(&f, &pfl_algo_fedgc, cfg, 2, 9);
    const pfl_model *m = fl->model;
    const size_t V = pfl_model_vector_len(m), off = m->layers[1].offset;
    const int D = 100;
    fl->round = 1;
    float *start = tiny_floats(V), *model = tiny_floats(V);
    pfl_algo_fedgc.local_init(fl, 0, start);
    memcpy(model, start, V * sizeof(float));
    size_t zero = 0;
    for (int d = 0; d < D; d++) zero += start[off + 2 * (size_t)D + d] == 0.0f;
    CHECK(zero == (size_t)D && start[off + 0] != 0.0f, "client 0's head: row 2 zero, row 0 drawn");
    fl->cfg.epochs = 3;
    pfl_train_stats st = {0};
    pfl_algo_fedgc.local_train(fl, 0, &fl->workers[0], model, &st);
    size_t moved_absent = 0, bias = 0;
    for (int d = 0; d < D; d++) moved_absent += model[off + 2 * (size_t)D + d] != 0.0f;
    for (int c = 0; c < 3; c++) bias += model[off + 3 * (size_t)D + c] != 0.0f;
    CHECK(moved_absent == 0 && bias == 0, "training moved %zu floats of the absent class's row, %zu biases",
          moved_absent, bias);
    CHECK(tiny_count_diff(model, start, off, 2 * (size_t)D) > (size_t)D, "the held rows did not move");
    CHECK(tiny_count_diff(model, start, 0, off) > off / 4, "the extractor did not move");
    free(start), free(model);
    tiny_fed_free(&f);
}

int main(void) {
    test_cac_select_by_hand();
    test_cac_threshold();
    test_cac_rounds(NULL);
    test_cac_rounds("customized");
    test_refusals();
    test_as_align_loss_by_hand();
    test_as_init();
    test_as_fisher();
    test_as_aggregate();
    test_da_head_by_hand();
    test_da_phases();
    test_gc_predict();
    test_gc_correction_by_hand();
    test_gc_training();
    TEST_MAIN_END();
}
