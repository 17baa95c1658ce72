/* The methods that change the model, each by its distinctive part,
 * on the tiny federation of tests/tiny.h (the "dnn" model: fc1 16->100,
 * fc 100->3, 1x4x4 images, labels i % 3):
 *
 *  - FedRoD: the balanced softmax loss and its gradient against a hand
 *    computation; a client's log class counts; one personal-head step worked
 *    by hand; the personalized model (summed heads) gives out_g + out_p.
 *  - FedBABU: local training leaves the head bitwise unchanged and moves the
 *    body; after rounds the global head is bitwise the initial one; the
 *    personalized model is the global one fine-tuned, head included; by
 *    default the fine-tuning is one round's local training (--epochs).
 *  - LG-FedAvg: the base stays local, the head is shared; receive takes the
 *    base from the client and the head from the server; after a round the
 *    global base is bitwise the initial one and the head moved.
 *  - APFL: the mix and the alpha step against numbers worked by hand
 *    (clipping included), and the alpha gradient <v - w, grad f(v_bar)>
 *    against a central difference of the loss in alpha. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "check.h"
#include "fl/fl.h"
#include "nn/layers.h"
#include "nn/model.h"
#include "run/run.h"
#include "tiny.h"
#include "util/err.h"

/* ---- FedRoD ---- */

static void test_balanced_softmax(void) {
    /* logits (1, 0, -1), class counts (2, 1, 0): the loss is cross-entropy on
     * (1 + ln 2, 0, -inf), i.e. softmax over two classes with weights 2e and 1 */
    const float z[3] = {1.0f, 0.0f, -1.0f}, offset[3] = {logf(2.0f), 0.0f, -INFINITY};
    const uint8_t label1[1] = {1}, label0[1] = {0};
    float probs[3], dz[3];
    const double e = exp(1.0);
    float loss = pfl_softmax_xent_offset_forward(probs, z, offset, label1, 1, 3);
    CHECK(check_close(loss, log(2 * e + 1), 1e-6), "balanced loss, label 1: %g, by hand %g", loss, log(2 * e + 1));
    CHECK(check_close(probs[0], 2 * e / (2 * e + 1), 1e-6) && check_close(probs[1], 1 / (2 * e + 1), 1e-6) &&
              probs[2] == 0.0f,
          "balanced probabilities %g %g %g", probs[0], probs[1], probs[2]);
    pfl_softmax_xent_backward(dz, probs, label1, 1, 3);
    CHECK(check_close(dz[0], 2 * e / (2 * e + 1), 1e-6) && check_close(dz[1], 1 / (2 * e + 1) - 1, 1e-6) &&
              dz[2] == 0.0f,
          "balanced gradient %g %g %g", dz[0], dz[1], dz[2]);
    loss = pfl_softmax_xent_offset_forward(probs, z, offset, label0, 1, 3);
    CHECK(check_close(loss, log(2 * e + 1) - (1 + log(2.0)), 1e-6), "balanced loss, label 0: %g", loss);
    /* no offset: plain cross-entropy, the same bits as the plain function */
    float plain[3];
    const float a = pfl_softmax_xent_offset_forward(probs, z, NULL, label0, 1, 3);
    const float b = pfl_softmax_xent_forward(plain, z, label0, 1, 3);
    CHECK(a == b && memcmp(probs, plain, sizeof plain) == 0, "NULL offset differs from the plain loss");
    /* equal counts shift every logit alike: the plain loss */
    const float same[3] = {logf(5.0f), logf(5.0f), logf(5.0f)};
    const float c = pfl_softmax_xent_offset_forward(probs, z, same, label1, 1, 3);
    const float d = pfl_softmax_xent_forward(plain, z, label1, 1, 3);
    CHECK(check_close(c, d, 1e-6), "equal counts: %g vs plain %g", c, d);
}

static void test_fedrod_head_step(void) {
    /* D = 1, C = 2, one sample h = 2 of class 0, head 0, generic logits 0:
     * p = (1/2, 1/2), dz = (-1/2, 1/2), dW = dz h = (-1, 1), db = dz; lr 0.1 */
    float head[4] = {0}, grad[4];
    const float h[1] = {2.0f}, generic[2] = {0.0f, 0.0f};
    const uint8_t y[1] = {0};
    pfl_fedrod_head_step(head, h, generic, y, 1, 1, 2, 0.1f, grad);
    CHECK(check_close(head[0], 0.1, 1e-7) && check_close(head[1], -0.1, 1e-7) && check_close(head[2], 0.05, 1e-7) &&
              check_close(head[3], -0.05, 1e-7),
          "head step: W %g %g b %g %g, by hand 0.1 -0.1 0.05 -0.05", head[0], head[1], head[2], head[3]);
    /* the generic logits enter the softmax: generic (ln 3, 0) gives p = (3/4, 1/4) */
    float head2[4] = {0};
    const float generic2[2] = {logf(3.0f), 0.0f};
    pfl_fedrod_head_step(head2, h, generic2, y, 1, 1, 2, 1.0f, grad);
    CHECK(check_close(head2[2], 0.25, 1e-6) && check_close(head2[3], -0.25, 1e-6) &&
              check_close(head2[0], 0.5, 1e-6),
          "head step with generic logits: b %g %g W %g", head2[2], head2[3], head2[0]);
}

/* FedRoD's generic model trains on the balanced softmax: client 0's 4
 * samples have labels 0, 1, 2, 0 (counts 2, 1, 1), so its local step is the
 * step of the cross-entropy on the logits + (ln 2, 0, 0), built here from the
 * step's parts with those offsets, and not plain FedAvg's step. */
static void test_fedrod_balanced_step(void) {
    pfl_config cfg = tiny_config(1);
    const int n_train[1] = {4}, n_test[1] = {2};
    tiny_fed f;
    tiny_fed_init(&f, &pfl_algo_fedrod, cfg, n_train, n_test);
    pfl_fl *fl = &f.fl;
    const size_t V = pfl_model_vector_len(&f.m);
    int counts[3] = {0};
    for (int i = 0; i < 4; i++) counts[f.d.labels[f.part.clients[0].train[i]]]++;
    CHECK(counts[0] == 2 && counts[1] == 1 && counts[2] == 1, "labels: counts %d %d %d", counts[0], counts[1],
          counts[2]);
    const float offset[3] = {logf(2.0f), 0.0f, 0.0f};
    float *rod = tiny_floats(V), *balanced = tiny_floats(V), *plain = tiny_floats(V);
    memcpy(rod, fl->global, V * sizeof(float)), memcpy(balanced, rod, V * sizeof(float));
    memcpy(plain, rod, V * sizeof(float));
    fl->round = 1;
    pfl_worker *w = &fl->workers[0];
    pfl_train_stats st = {0};
    pfl_algo_fedrod.local_train(fl, 0, w, rod, &st);
    pfl_step s = pfl_step_default(fl);
    s.ce_offset = offset;
    pfl_step_run(fl, 0, w, balanced, &s, &st);
    const pfl_step fedavg = pfl_step_default(fl);
    pfl_step_run(fl, 0, w, plain, &fedavg, &st);
    CHECK(tiny_same(rod, balanced, 0, V), "fedrod's generic step is not the balanced softmax's (%zu floats differ)",
          tiny_count_diff(rod, balanced, 0, V));
    CHECK(!tiny_same(rod, plain, 0, V), "fedrod's generic step is plain cross-entropy's");
    free(rod), free(balanced), free(plain);
    tiny_fed_free(&f);
}

static void test_fedrod_model(void) {
    pfl_config cfg = tiny_config(2);
    const int n_train[2] = {4, 6}, n_test[2] = {3, 3};
    tiny_fed f;
    tiny_fed_init(&f, &pfl_algo_fedrod, cfg, n_train, n_test);
    pfl_fl *fl = &f.fl;
    const pfl_model *m = &f.m;
    const size_t P = m->num_params;
    /* client 0 trains on samples 0..3: labels 0, 1, 2, 0 */
    float offset[3];
    pfl_fedrod_log_counts(fl, 0, offset);
    CHECK(offset[0] == logf(2.0f) && offset[1] == 0.0f && offset[2] == 0.0f, "log counts %g %g %g", offset[0],
          offset[1], offset[2]);
    CHECK(fl->client_state == NULL && fl->shared[0] && fl->shared[1], "fedrod shares the whole model");

    /* a round: the personal head of client 0 moves; its personalized model's
     * logits are the global model's plus the personal head's on the features */
    float *initial_head = tiny_floats(303);
    memcpy(initial_head, fl->global + m->layers[1].offset, 303 * sizeof(float));
    CHECK(pfl_fl_run(fl, NULL, NULL) == 0, "fedrod runs: %s", pfl_errmsg());
    float *personal = tiny_floats(P);
    const float *pm = pfl_algo_fedrod.personal_model(fl, 0, personal);
    CHECK(pm == personal, "fedrod builds the personalized model in scratch");
    const pfl_layer *out = &m->layers[1];
    const int D = 100, C = 3;
    float head[303];
    for (size_t j = 0; j < out->length; j++) head[j] = personal[out->offset + j] - fl->global[out->offset + j];
    size_t moved = 0, held = 0;
    for (size_t j = 0; j < out->length; j++) moved += head[j] != initial_head[j], held += head[j] != 0.0f;
    CHECK(out->length == 303 && moved > 0, "personal head of client 0 not trained");
    CHECK(held > out->length / 2, "the personalized output layer is the generic one: %zu of %zu entries hold a head",
          held, out->length);
    CHECK(tiny_same(personal, fl->global, 0, out->offset), "personalized body is not the global one");
    const int idx[2] = {8, 9};
    tiny_batch tb = tiny_batch_of(fl->model, fl->data, idx, 2);
    float g[6], feat[200], mixed[6];
    memcpy(g, pfl_forward(tb.ws, fl->global, tb.x, 2, false, NULL), sizeof g);
    memcpy(feat, pfl_workspace_layer_input(tb.ws, 1), sizeof feat);
    memcpy(mixed, pfl_forward(tb.ws, personal, tb.x, 2, false, NULL), sizeof mixed);
    tiny_batch_free(&tb);
    for (int n = 0; n < 2; n++)
        for (int c = 0; c < C; c++) {
            double p = head[(size_t)D * C + c];
            for (int d = 0; d < D; d++) p += (double)head[(size_t)c * D + d] * feat[n * D + d];
            CHECK(check_close(mixed[n * C + c], g[n * C + c] + p, 1e-4), "sample %d class %d: %g, out_g + out_p %g",
                  n, c, mixed[n * C + c], g[n * C + c] + p);
        }
    free(personal), free(initial_head);
    tiny_fed_free(&f);
}

/* ---- FedBABU ---- */

static void test_fedbabu(void) {
    pfl_config cfg = tiny_config(2);
    cfg.momentum = 0.9f, cfg.weight_decay = 0.01f; /* would move a frozen layer the step touched */
    cfg.rounds = 2;
    cfg.algo.fine_tune_epochs = 2;
    const int n_train[2] = {8, 6}, n_test[2] = {4, 4};
    tiny_fed f;
    tiny_fed_init(&f, &pfl_algo_fedbabu, cfg, n_train, n_test);
    pfl_fl *fl = &f.fl;
    const pfl_model *m = &f.m;
    const size_t P = m->num_params, head = m->layers[1].offset;
    CHECK(fl->shared[0] && !fl->shared[1], "fedbabu averages the body only");
    float *initial = tiny_floats(P), *model = tiny_floats(P), *scratch = tiny_floats(P);
    memcpy(initial, fl->global, P * sizeof(float));
    memcpy(model, fl->global, P * sizeof(float));
    fl->round = 1;
    pfl_train_stats st = {0};
    pfl_algo_fedbabu.local_train(fl, 0, &fl->workers[0], model, &st);
    CHECK(tiny_same(model, initial, head, P - head), "fedbabu training moved the head in %zu elements",
          tiny_count_diff(model, initial, head, P - head));
    CHECK(tiny_count_diff(model, initial, 0, head) > head / 4, "fedbabu training did not move the body");
    fl->round = 0;
    CHECK(pfl_fl_run(fl, NULL, NULL) == 0, "fedbabu runs: %s", pfl_errmsg());
    CHECK(tiny_same(fl->global, initial, head, P - head), "global head is not bitwise the initial one");
    CHECK(!tiny_same(fl->global, initial, 0, head), "global body did not move");
    const float *personal = pfl_algo_fedbabu.personal_model(fl, 1, scratch);
    CHECK(tiny_count_diff(personal, fl->global, head, P - head) > 0, "fine-tuning did not move the head");
    CHECK(tiny_count_diff(personal, fl->global, 0, head) > 0, "fine-tuning did not move the body");
    /* the fine-tuned model is the same each time it is asked for (the digest asks again): the last round's
     * kept, and built afresh with --fine-tune-at every where the round is not the last */
    float *again = tiny_floats(P);
    memcpy(again, personal, P * sizeof(float));
    CHECK(tiny_same(pfl_algo_fedbabu.personal_model(fl, 1, scratch), again, 0, P), "fine-tuning is not repeatable");
    fl->cfg.rounds = 3, fl->cfg.algo.fine_tune_at = "every";
    CHECK(tiny_same(pfl_algo_fedbabu.personal_model(fl, 1, scratch), again, 0, P),
          "the kept fine-tuned model is not the one fine-tuning builds");
    /* --fine-tune-at last (the default): before the last round a client is scored on the model it holds */
    fl->round = 1;
    CHECK(!tiny_same(pfl_algo_fedbabu.personal_model(fl, 1, scratch), fl->global, 0, P),
          "--fine-tune-at every: round 1 is not fine-tuned");
    fl->cfg.algo.fine_tune_at = "last";
    CHECK(tiny_same(pfl_algo_fedbabu.personal_model(fl, 1, scratch), fl->global, 0, P),
          "--fine-tune-at last: round 1 scores a fine-tuned model");
    free(initial), free(model), free(scratch), free(again);
    tiny_fed_free(&f);
}

/* FedBABU's default fine-tuning costs one round's local training (the authors' ft_ep = local_ep), not
 * PFLlib's 10 epochs, which made a 3-round run cost 3.5 times LG-FedAvg's (issue 28). */
static void test_fedbabu_default_fine_tuning(void) {
    const pfl_param *fte = pfl_run_param_named(&pfl_algo_fedbabu, "fine-tune-epochs", NULL);
    const pfl_param *epochs = pfl_run_param_named(&pfl_algo_fedbabu, "epochs", NULL);
    CHECK(fte && epochs, "fedbabu has --fine-tune-epochs and --epochs");
    if (fte && epochs)
        CHECK(fte->def == epochs->def, "--fine-tune-epochs defaults to %g, --epochs to %g", fte->def, epochs->def);
}

/* ---- LG-FedAvg ---- */

static void test_lgfedavg(void) {
    pfl_config cfg = tiny_config(2);
    const int n_train[2] = {8, 6}, n_test[2] = {4, 4};
    tiny_fed f;
    tiny_fed_init(&f, &pfl_algo_lgfedavg, cfg, n_train, n_test);
    pfl_fl *fl = &f.fl;
    const size_t P = f.m.num_params, head = f.m.layers[1].offset;
    CHECK(!fl->shared[0] && fl->shared[1], "lgfedavg shares the head only");
    CHECK(fl->client_state && !fl->personal.whole && fl->personal.floats == head,
          "lgfedavg keeps its base (%zu floats, want %zu)", fl->personal.floats, head);
    float *state = tiny_floats(P), *received = tiny_floats(P), *initial = tiny_floats(P);
    memcpy(initial, fl->global, P * sizeof(float));
    pfl_rng r = tiny_rng(5);
    tiny_fill(state, P, 1, 2, &r);
    tiny_fill(received, P, 7, 8, &r);
    pfl_algo_lgfedavg.receive(fl, 0, state, received);
    CHECK(tiny_same(received, state, 0, head), "received base is not the client's own");
    CHECK(tiny_same(received, fl->global, head, P - head), "received head is not the global one");
    CHECK(pfl_fl_run(fl, NULL, NULL) == 0, "lgfedavg runs: %s", pfl_errmsg());
    CHECK(tiny_same(fl->global, initial, 0, head), "the global base moved: it is never aggregated");
    CHECK(!tiny_same(fl->global, initial, head, P - head), "the global head did not move");
    /* each client's model: its own trained base under the global head */
    float *a = tiny_floats(P), *b = tiny_floats(P);
    tiny_client_model(fl, 0, a);
    tiny_client_model(fl, 1, b);
    CHECK(tiny_same(a, fl->global, head, P - head) && tiny_same(b, fl->global, head, P - head),
          "a client's head is not the global one");
    CHECK(!tiny_same(a, b, 0, head) && !tiny_same(a, initial, 0, head), "the clients' bases are not their own");
    free(state), free(received), free(initial), free(a), free(b);
    tiny_fed_free(&f);
}

/* ---- APFL ---- */

static void test_apfl_alpha(void) {
    const float v[2] = {1.0f, 2.0f}, w[2] = {0.0f, 1.0f}, g[2] = {0.5f, -1.0f};
    float mix[2];
    pfl_apfl_mix(mix, v, w, 0.25f, 2);
    CHECK(mix[0] == 0.25f && mix[1] == 1.25f, "mix %g %g, by hand 0.25 1.25", mix[0], mix[1]);
    /* <v - w, g> = 1 * 0.5 + 1 * (-1) = -0.5: alpha 0.5 + 0.1 * 0.5 = 0.55 */
    float a = pfl_apfl_alpha_step(0.5f, v, w, g, 2, 0.1f);
    CHECK(check_close(a, 0.55, 1e-7), "alpha step %g, by hand 0.55", a);
    CHECK(pfl_apfl_alpha_step(0.99f, v, w, g, 2, 0.1f) == 1.0f, "alpha not clipped at 1");
    const float g2[2] = {3.0f, 1.0f}; /* <v - w, g2> = 4: 0.2 - 0.4 < 0 */
    CHECK(pfl_apfl_alpha_step(0.2f, v, w, g2, 2, 0.1f) == 0.0f, "alpha not clipped at 0");

    /* the alpha gradient is d f(alpha v + (1 - alpha) w) / d alpha: against a
     * central difference on a tiny batch */
    pfl_config cfg = tiny_config(1);
    const int n_train[1] = {6}, n_test[1] = {2};
    tiny_fed f;
    tiny_fed_init(&f, &pfl_algo_apfl, cfg, n_train, n_test);
    const size_t P = f.m.num_params;
    float *vv = tiny_floats(P), *ww = tiny_floats(P), *mixed = tiny_floats(P), *grads = tiny_floats(P);
    pfl_rng r = tiny_rng(3);
    tiny_fill(vv, P, -0.3, 0.3, &r);
    tiny_fill(ww, P, -0.3, 0.3, &r);
    const int idx[4] = {0, 1, 2, 3};
    tiny_batch wk = tiny_batch_of(&f.m, f.fl.data, idx, 4);
    const float alpha = 0.4f;
    pfl_apfl_mix(mixed, vv, ww, alpha, P);
    pfl_forward_loss(wk.ws, mixed, wk.x, wk.y, 4, false, NULL);
    pfl_backward(wk.ws, mixed, wk.y, grads);
    double dot = 0.0;
    for (size_t j = 0; j < P; j++) dot += (double)(vv[j] - ww[j]) * grads[j];
    const float h = 1e-3f; /* small enough that no ReLU changes side */
    pfl_apfl_mix(mixed, vv, ww, alpha + h, P);
    const double up = pfl_forward_loss(wk.ws, mixed, wk.x, wk.y, 4, false, NULL);
    pfl_apfl_mix(mixed, vv, ww, alpha - h, P);
    const double down = pfl_forward_loss(wk.ws, mixed, wk.x, wk.y, 4, false, NULL);
    tiny_batch_free(&wk);
    const double fd = (up - down) / (2 * h);
    CHECK(fabs(dot - fd) <= 2e-3 * (fabs(fd) > 1 ? fabs(fd) : 1), "alpha gradient %g, central difference %g", dot,
          fd);
    CHECK(check_close(pfl_apfl_alpha_step(alpha, vv, ww, grads, P, 0.01f), alpha - 0.01 * dot, 1e-5),
          "the alpha step does not use that gradient");

    /* a round of APFL: the uploaded w trains as FedAvg's does, v and alpha move */
    cfg.algo.apfl_alpha = 0.5f, cfg.algo.reading = "paper";
    pfl_fl_destroy(&f.fl);
    tiny_fed_start(&f, &pfl_algo_apfl, &cfg);
    float *initial = tiny_floats(P), *personal = tiny_floats(P);
    memcpy(initial, f.fl.global, P * sizeof(float));
    CHECK(pfl_fl_run(&f.fl, NULL, NULL) == 0, "apfl runs: %s", pfl_errmsg());
    const float *v0 = pfl_client_model(&f.fl, 0);
    CHECK(v0 && !tiny_same(v0, initial, 0, P), "v did not train");
    /* the personalized model is alpha v + (1 - alpha) w_global, alpha now moved from 0.5 */
    pfl_algo_apfl.personal_model(&f.fl, 0, personal);
    double num = 0.0, den = 0.0; /* least-squares alpha of personal - w = alpha (v - w) */
    for (size_t j = 0; j < P; j++) {
        const double d = (double)v0[j] - f.fl.global[j];
        num += d * ((double)personal[j] - f.fl.global[j]), den += d * d;
    }
    const double fitted = num / den;
    CHECK(fitted >= 0.0 && fitted <= 1.0 && fabs(fitted - 0.5) > 1e-6, "fitted alpha %g", fitted);
    free(initial), free(personal);
    free(vv), free(ww), free(mixed), free(grads);
    tiny_fed_free(&f);
}

/* PFLlib's alpha step by hand: v = (1, 2), w = (0, 1), grad_v = (0.5, -1), grad_w = (1, 1), alpha 0.5:
 * <v - w, 0.5 grad_v + 0.5 grad_w> = 0.75 + 0 = 0.75, + 0.02 x 0.5 = 0.76; alpha 0.5 - 0.1 x 0.76 = 0.424. */
static void test_apfl_alpha_pfllib(void) {
    const float v[2] = {1.0f, 2.0f}, w[2] = {0.0f, 1.0f}, gv[2] = {0.5f, -1.0f}, gw[2] = {1.0f, 1.0f};
    const float a = pfl_apfl_alpha_step_pfllib(0.5f, v, w, gv, gw, 2, 0.1f);
    CHECK(check_close(a, 0.424, 1e-7), "pfllib alpha step %g, by hand 0.424", a);
    const float big[2] = {-10.0f, -10.0f};
    CHECK(pfl_apfl_alpha_step_pfllib(0.5f, v, w, big, big, 2, 0.1f) == 1.0f, "pfllib alpha not clipped at 1");
    CHECK(pfl_apfl_alpha_step_pfllib(0.0f, v, w, gv, w, 2, 0.1f) == 0.0f, "pfllib alpha not clipped at 0");
}

/* One batch of each reading on a client with one batch (4 samples, --batch 4), v, w = the global model and
 * alpha 0.4 set here, against the steps redone by hand:
 *   paper:  w' = w - lr g(w), v' = v - lr alpha g(v_bar), alpha' = alpha - lr <v - w, g(v_bar)>, v_bar = alpha
 *           v + (1 - alpha) w; scored: alpha' v' + (1 - alpha') w_global;
 *   pfllib: w' = w - lr g(w), v' = v - lr g(v), alpha' = alpha - lr (<v' - w', alpha g(v) + (1 - alpha) g(w)> +
 *           0.02 alpha), then v'' = alpha' v' + (1 - alpha') w', which is scored. */
static void test_apfl_batch(const char *reading) {
    const bool paper = !strcmp(reading, "paper");
    pfl_config cfg = tiny_config(1);
    cfg.algo.apfl_alpha = 0.4f, cfg.algo.reading = reading, cfg.lr = 0.1f;
    const int n_train[1] = {4}, n_test[1] = {2};
    tiny_fed f;
    tiny_fed_init(&f, &pfl_algo_apfl, cfg, n_train, n_test);
    pfl_fl *fl = &f.fl;
    const size_t P = f.m.num_params, V = pfl_model_vector_len(&f.m);
    pfl_rng r = tiny_rng(21);
    float *v = pfl_client_model(fl, 0), *v0 = tiny_floats(V), *w0 = tiny_floats(V), *mix = tiny_floats(V);
    tiny_fill(v, P, -0.3, 0.3, &r);
    tiny_fill(fl->global, P, -0.3, 0.3, &r);
    memcpy(v0, v, V * sizeof(float)), memcpy(w0, fl->global, V * sizeof(float));
    const double a = 0.4, lr = 0.1;
    float *gw = tiny_floats(P), *gv = tiny_floats(P);
    tiny_batch tb = tiny_batch_of(&f.m, fl->data, f.part.clients[0].train, 4);
    pfl_forward_loss(tb.ws, w0, tb.x, tb.y, 4, true, NULL);
    pfl_backward(tb.ws, w0, tb.y, gw);
    pfl_apfl_mix(mix, v0, w0, (float)a, V);
    pfl_forward_loss(tb.ws, paper ? mix : v0, tb.x, tb.y, 4, true, NULL);
    pfl_backward(tb.ws, paper ? mix : v0, tb.y, gv);
    tiny_batch_free(&tb);
    double *w1 = calloc(P, sizeof(double)), *v1 = calloc(P, sizeof(double)), dot = 0.0;
    for (size_t j = 0; j < P; j++) {
        w1[j] = w0[j] - lr * gw[j];
        v1[j] = v0[j] - lr * (paper ? a : 1.0) * gv[j];
        dot += paper ? ((double)v0[j] - w0[j]) * gv[j] : (v1[j] - w1[j]) * (a * gv[j] + (1 - a) * gw[j]);
    }
    double a1 = a - lr * (dot + (paper ? 0.0 : 0.02 * a));
    a1 = a1 < 0 ? 0 : a1 > 1 ? 1 : a1;
    float *model = fl->workers[0].model;
    pfl_algo_apfl.local_init(fl, 0, model);
    pfl_train_stats st = {0};
    pfl_algo_apfl.local_train(fl, 0, &fl->workers[0], model, &st);
    size_t w_off = 0, v_off = 0, s_off = 0;
    for (size_t j = 0; j < P; j++) {
        w_off += !check_close(model[j], w1[j], 1e-6);
        const double v_want = paper ? v1[j] : a1 * v1[j] + (1 - a1) * w1[j];
        v_off += !check_close(v[j], v_want, 1e-6);
    }
    float *scratch = tiny_floats(V);
    const float *scored = pfl_algo_apfl.personal_model(fl, 0, scratch);
    for (size_t j = 0; j < P; j++) {
        const double want = paper ? a1 * v1[j] + (1 - a1) * w0[j] : a1 * v1[j] + (1 - a1) * w1[j];
        s_off += !check_close(scored[j], want, 1e-5);
    }
    printf("apfl --reading %s: alpha 0.4 -> %.6f (by hand %.6f); w %zu, v %zu, scored %zu elements off\n", reading,
           pfl_apfl_alpha(fl, 0), a1, w_off, v_off, s_off);
    CHECK(st.samples == 4, "--reading %s: one batch of 4 (%ld samples)", reading, st.samples);
    CHECK(check_close(pfl_apfl_alpha(fl, 0), a1, 1e-6) && a1 != a, "--reading %s: alpha %.7f, by hand %.7f", reading,
          pfl_apfl_alpha(fl, 0), a1);
    CHECK(w_off == 0, "--reading %s: w' = w - lr g(w): %zu elements off", reading, w_off);
    CHECK(v_off == 0, "--reading %s: v: %zu elements off", reading, v_off);
    CHECK(s_off == 0, "--reading %s: the scored model: %zu elements off", reading, s_off);
    free(v0), free(w0), free(mix), free(gw), free(gv), free(w1), free(v1), free(scratch);
    tiny_fed_free(&f);
}

int main(void) {
    test_balanced_softmax();
    test_fedrod_head_step();
    test_fedrod_balanced_step();
    test_fedrod_model();
    test_fedbabu();
    test_fedbabu_default_fine_tuning();
    test_lgfedavg();
    test_apfl_alpha();
    test_apfl_alpha_pfllib();
    test_apfl_batch("paper");
    test_apfl_batch("pfllib");
    TEST_MAIN_END();
}
