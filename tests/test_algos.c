/* Algorithm stages on a tiny in-memory federation (1x4x4 images, 3 classes,
 * the "dnn" model: fc1 16->100, fc 100->3):
 *
 *  - FedRep: a phase with frozen layers leaves them bitwise unchanged (also
 *    under momentum and weight decay) and moves the others; the whole local
 *    training moves both parts; the base/head split.
 *  - The server's aggregation (pfl_default_aggregate): masked (weighted mean
 *    over the senders of each element, unsent elements keep the global
 *    value), Eq. 9 read literally, dense, and unshared layers, against sums
 *    written out here.
 *  - FedProx's gradient hook, FedProx with mu = 0 equal to FedAvg bitwise,
 *    FedPer/FedRep's receive (global base, own head). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "check.h"
#include "fl/fl.h"
#include "nn/model.h"
#include "tiny.h"
#include "util/err.h"

/* ---- FedRep ---- */

static void test_fedrep_frozen(void) {
    pfl_config cfg = tiny_config(2);
    /* momentum and weight decay would move a frozen layer if the step
     * touched it at all */
    cfg.momentum = 0.9f, cfg.weight_decay = 0.01f;
    const int n_train[2] = {8, 6}, n_test[2] = {4, 4};
    tiny_fed f;
    tiny_fed_init(&f, &pfl_algo_fedrep, cfg, n_train, n_test);
    pfl_fl *fl = &f.fl;
    const pfl_model *m = &f.m;
    const size_t P = m->num_params;
    CHECK(m->num_layers == 2, "dnn layers: %d", m->num_layers);
    const int first_head = pfl_first_head_layer(m, 1);
    CHECK(first_head == 1, "head 1: first head layer %d", first_head);
    CHECK(pfl_first_head_layer(m, 0) == 2 && pfl_first_head_layer(m, 2) == 0 && pfl_first_head_layer(m, 5) == 0 &&
              pfl_first_head_layer(m, -1) == 2,
          "pfl_first_head_layer clamps");
    const size_t base = m->layers[1].offset; /* 16*100 + 100 */
    CHECK(base == 1700 && P == 2003, "split at %zu of %zu", base, P);
    CHECK(fl->shared[0] && !fl->shared[1], "fedrep shares the base only (%d %d)", fl->shared[0], fl->shared[1]);
    CHECK(fl->client_state != NULL && !fl->personal.whole && fl->personal.floats == P - base,
          "fedrep is stateful and keeps its head only (%zu floats)", fl->client_state ? fl->personal.floats : 0);

    fl->round = 1;
    pfl_worker *w = &fl->workers[0];
    float *model = tiny_floats(P), *before = tiny_floats(P);
    memcpy(model, fl->global, P * sizeof(float));
    memcpy(before, model, P * sizeof(float));

    /* head phase: base frozen */
    bool base_frozen[PFL_MAX_LAYERS] = {true, false}, head_frozen[PFL_MAX_LAYERS] = {false, true};
    pfl_step o = pfl_step_default(fl);
    o.epochs = 2;
    o.opt.frozen = base_frozen;
    pfl_train_stats st = {0};
    pfl_step_run(fl, 0, w, model, &o, &st);
    CHECK(tiny_same(model, before, 0, base), "base frozen: base changed in %zu elements",
          tiny_count_diff(model, before, 0, base));
    size_t head_moved = tiny_count_diff(model, before, base, P - base);
    CHECK(head_moved > (P - base) / 2, "base frozen: head moved in only %zu of %zu", head_moved, P - base);
    CHECK(st.samples == 2 * 8, "head phase saw %ld samples, want 16", st.samples);

    /* base phase: head frozen */
    memcpy(before, model, P * sizeof(float));
    o.epochs = 1;
    o.opt.frozen = head_frozen;
    memset(&st, 0, sizeof st);
    pfl_step_run(fl, 1, w, model, &o, &st);
    CHECK(tiny_same(model, before, base, P - base), "head frozen: head changed in %zu elements",
          tiny_count_diff(model, before, base, P - base));
    size_t base_moved = tiny_count_diff(model, before, 0, base);
    CHECK(base_moved > base / 4, "head frozen: base moved in only %zu of %zu", base_moved, base);
    CHECK(st.samples == 6, "base phase (client 1) saw %ld samples, want 6", st.samples);

    /* everything frozen: nothing moves, nothing counted */
    bool all[PFL_MAX_LAYERS] = {true, true};
    memcpy(before, model, P * sizeof(float));
    o.opt.frozen = all;
    memset(&st, 0, sizeof st);
    pfl_step_run(fl, 0, w, model, &o, &st);
    CHECK(tiny_same(model, before, 0, P) && st.samples == 0, "all frozen: model moved or samples %ld", st.samples);

    /* the algorithm's local training runs both phases: head_epochs (2) on
     * the head, then epochs (1) on the base; both parts move */
    memcpy(model, fl->global, P * sizeof(float));
    memcpy(before, model, P * sizeof(float));
    memset(&st, 0, sizeof st);
    pfl_algo_fedrep.local_train(fl, 0, w, model, &st);
    CHECK(tiny_count_diff(model, before, 0, base) > base / 4, "fedrep: base did not move");
    CHECK(tiny_count_diff(model, before, base, P - base) > (P - base) / 2, "fedrep: head did not move");
    CHECK(st.samples == 8 * (2 + 1), "fedrep: %ld samples, want 24", st.samples);
    /* ... and is exactly those two phases: --head-epochs on the head with the base frozen, then --epochs on the
     * base with the head frozen, in a batch order of its own */
    float *want = tiny_floats(P);
    memcpy(want, fl->global, P * sizeof(float));
    pfl_step head_phase = pfl_step_default(fl), base_phase = pfl_step_default(fl);
    head_phase.epochs = 2, head_phase.opt.frozen = base_frozen;
    base_phase.opt.frozen = head_frozen, base_phase.shuffle = PFL_RNG_SHUFFLE_PERSONAL;
    pfl_train_stats ignored = {0};
    pfl_step_run(fl, 0, w, want, &head_phase, &ignored);
    pfl_step_run(fl, 0, w, want, &base_phase, &ignored);
    CHECK(tiny_same(model, want, 0, P), "fedrep's round is not its two phases (%zu floats differ)",
          tiny_count_diff(model, want, 0, P));
    free(want);

    /* FedRep's head phase equals a run where only the head is trainable:
     * with head_epochs = 0 the head must stay put (only the base phase runs) */
    fl->cfg.algo.head_epochs = 0;
    memcpy(model, fl->global, P * sizeof(float));
    memset(&st, 0, sizeof st);
    pfl_algo_fedrep.local_train(fl, 0, w, model, &st);
    CHECK(tiny_same(model, fl->global, base, P - base), "fedrep head_epochs 0: head moved");
    CHECK(!tiny_same(model, fl->global, 0, base), "fedrep head_epochs 0: base did not move");
    fl->cfg.algo.head_epochs = 2;

    free(model), free(before);
    tiny_fed_free(&f);
}

/* ---- aggregation ---- */

/* Three clients with 2, 3 and 5 training samples; uploads and flags made by
 * hand; the expected global computed here in double. */
static void test_aggregate(void) {
    pfl_config cfg = tiny_config(3);
    cfg.modules.flayer_mask = true;
    const int n_train[3] = {2, 3, 5}, n_test[3] = {1, 1, 1};
    tiny_fed f;
    tiny_fed_init(&f, &pfl_algo_fedavg, cfg, n_train, n_test);
    pfl_fl *fl = &f.fl;
    const size_t P = f.m.num_params, split = f.m.layers[1].offset;
    CHECK(fl->sent && fl->sent[0] && fl->sent[1] && fl->sent[2], "mask on: one flag slot per selected client");

    float *up[3], *prev = tiny_floats(P), *want = tiny_floats(P);
    for (int k = 0; k < 3; k++) up[k] = tiny_floats(P);
    pfl_rng r = tiny_rng(77);
    for (int k = 0; k < 3; k++) tiny_fill(up[k], P, -1, 1, &r);
    tiny_fill(prev, P, 5, 6, &r); /* far from any upload: a kept value shows */
    /* element j's senders: bit k of (j % 8) says client slot k sent it, so
     * every pattern (nobody, one, two, all three) occurs */
    for (int k = 0; k < 3; k++)
        for (size_t j = 0; j < P; j++) fl->sent[k][j] = (uint8_t)(((j % 8) >> k) & 1);
    const int clients[3] = {0, 1, 2};
    const double wt[3] = {2, 3, 5};

    /* (a), (b): masked, all layers shared */
    memcpy(fl->global, prev, P * sizeof(float));
    pfl_default_aggregate(fl, clients, 3, up);
    double worst = 0.0;
    size_t kept_bad = 0, kept = 0;
    for (size_t j = 0; j < P; j++) {
        double s = 0.0, wsum = 0.0;
        for (int k = 0; k < 3; k++)
            if ((j % 8) >> k & 1) s += wt[k] * up[k][j], wsum += wt[k];
        if (wsum == 0.0) {
            kept++;
            kept_bad += memcmp(&fl->global[j], &prev[j], sizeof(float)) != 0;
        } else {
            worst = fmax(worst, fabs(fl->global[j] - s / wsum));
        }
    }
    CHECK(worst <= 1e-6, "masked: max error %g against the senders' weighted mean", worst);
    CHECK(kept > 200 && kept_bad == 0, "masked: %zu of %zu unsent elements lost the previous global", kept_bad, kept);
    /* one element by hand: j = 3 (slots 0, 1 sent): (2 u0 + 3 u1) / 5 */
    CHECK(check_close(fl->global[3], (2.0 * up[0][3] + 3.0 * up[1][3]) / 5.0, 1e-6), "masked j=3");
    /* j = 4 (only slot 2 sent): its upload itself */
    CHECK(check_close(fl->global[4], up[2][4], 1e-7), "masked j=4");

    /* two of the three clients (0 and 2), in slots 0 and 1: weights 2 and 5 */
    memcpy(fl->global, prev, P * sizeof(float));
    const int two[2] = {0, 2};
    float *up2[2] = {up[0], up[1]};
    pfl_default_aggregate(fl, two, 2, up2);
    worst = 0.0;
    kept_bad = 0;
    for (size_t j = 0; j < P; j++) {
        const double wt2[2] = {2, 5};
        double s = 0.0, wsum = 0.0;
        for (int k = 0; k < 2; k++)
            if ((j % 8) >> k & 1) s += wt2[k] * up2[k][j], wsum += wt2[k];
        if (wsum == 0.0) kept_bad += memcmp(&fl->global[j], &prev[j], sizeof(float)) != 0;
        else worst = fmax(worst, fabs(fl->global[j] - s / wsum));
    }
    CHECK(worst <= 1e-6 && kept_bad == 0, "masked, clients {0,2}: error %g, %zu kept wrong", worst, kept_bad);

    /* (e) with the mask: an unshared layer keeps the previous global */
    memcpy(fl->global, prev, P * sizeof(float));
    fl->shared[1] = false;
    pfl_default_aggregate(fl, clients, 3, up);
    CHECK(tiny_same(fl->global, prev, split, P - split), "masked: unshared layer changed");
    CHECK(tiny_count_diff(fl->global, prev, 0, split) > split / 2, "masked: shared layer not aggregated");
    fl->shared[1] = true;

    /* (c) Eq. 9 literally: sum_k n_k/n * m_k * u_k over all clients */
    fl->cfg.modules.flayer_mask_literal = true;
    memcpy(fl->global, prev, P * sizeof(float));
    pfl_default_aggregate(fl, clients, 3, up);
    worst = 0.0;
    size_t zeros_bad = 0;
    for (size_t j = 0; j < P; j++) {
        double s = 0.0;
        for (int k = 0; k < 3; k++)
            if ((j % 8) >> k & 1) s += wt[k] / 10.0 * up[k][j];
        worst = fmax(worst, fabs(fl->global[j] - s));
        if (j % 8 == 0) zeros_bad += fl->global[j] != 0.0f;
    }
    CHECK(worst <= 1e-6, "literal: max error %g", worst);
    CHECK(zeros_bad == 0, "literal: %zu unsent-by-all elements are not 0", zeros_bad);
    CHECK(check_close(fl->global[3], (2.0 * up[0][3] + 3.0 * up[1][3]) / 10.0, 1e-6), "literal j=3");
    fl->cfg.modules.flayer_mask_literal = false;

    /* (d) without masks: the plain weighted mean */
    uint8_t **sent = fl->sent;
    fl->sent = NULL;
    memcpy(fl->global, prev, P * sizeof(float));
    pfl_default_aggregate(fl, clients, 3, up);
    worst = 0.0;
    for (size_t j = 0; j < P; j++)
        worst = fmax(worst, fabs(fl->global[j] - (2.0 * up[0][j] + 3.0 * up[1][j] + 5.0 * up[2][j]) / 10.0));
    CHECK(worst <= 1e-6, "dense: max error %g", worst);

    /* (e) dense: unshared layers keep the previous global */
    memcpy(fl->global, prev, P * sizeof(float));
    fl->shared[0] = false;
    pfl_default_aggregate(fl, clients, 3, up);
    CHECK(tiny_same(fl->global, prev, 0, split), "dense: unshared layer changed");
    worst = 0.0;
    for (size_t j = split; j < P; j++)
        worst = fmax(worst, fabs(fl->global[j] - (2.0 * up[0][j] + 3.0 * up[1][j] + 5.0 * up[2][j]) / 10.0));
    CHECK(worst <= 1e-6, "dense, shared layer: max error %g", worst);
    fl->shared[0] = true;
    fl->sent = sent;

    for (int k = 0; k < 3; k++) free(up[k]);
    free(prev), free(want);
    tiny_fed_free(&f);
}

/* ---- FedProx ---- */

static void test_prox_hook(void) {
    pfl_model m;
    if (pfl_model_build(&m, "dnn", 1, 4, 4, 3)) exit(2);
    const size_t P = m.num_params;
    float *params = tiny_floats(P), *anchor = tiny_floats(P), *g = tiny_floats(P), *g0 = tiny_floats(P);
    pfl_rng r = tiny_rng(5);
    tiny_fill(params, P, -1, 1, &r);
    tiny_fill(anchor, P, -1, 1, &r);
    tiny_fill(g0, P, -1, 1, &r);
    memcpy(g, g0, P * sizeof(float));
    /* the CPU executor's proximal term, g += mu (w - anchor), on the whole vector */
    pfl_exec *x = pfl_exec_create(&pfl_backend_cpu, &m, NULL, 1);
    if (!x) exit(2);
    pfl_xbuf gv = pfl_exec_view(x, g, P, true), pv = pfl_exec_view_const(x, params, P), av = pfl_exec_view_const(x, anchor, P);
    pfl_exec_prox(x, &gv, &pv, &av, 0.25f, 0, P);
    double worst = 0.0;
    for (size_t i = 0; i < P; i++) worst = fmax(worst, fabs(g[i] - (g0[i] + 0.25 * ((double)params[i] - anchor[i]))));
    CHECK(worst <= 1e-6, "prox term: max error %g", worst);
    /* by hand: g = 1, w = 2, anchor = 0.5, mu = 0.25 -> 1 + 0.25 * 1.5 = 1.375 */
    params[7] = 2.0f, anchor[7] = 0.5f, g[7] = 1.0f;
    pfl_exec_prox(x, &gv, &pv, &av, 0.25f, 7, 1);
    CHECK(g[7] == 1.375f, "prox term by hand: %g", g[7]);
    /* mu = 0 adds nothing; a span leaves the rest alone */
    memcpy(g, g0, P * sizeof(float));
    pfl_exec_prox(x, &gv, &pv, &av, 0.0f, 0, P);
    CHECK(tiny_same(g, g0, 0, P), "mu = 0 changed the gradient");
    pfl_exec_prox(x, &gv, &pv, &av, 0.5f, 10, 5);
    CHECK(tiny_same(g, g0, 0, 10) && tiny_same(g, g0, 15, P - 15) && !tiny_same(g, g0, 10, 5),
          "a span's term changed only that span");
    pfl_exec_unview(x, &gv), pfl_exec_unview(x, &pv), pfl_exec_unview(x, &av);
    pfl_exec_destroy(x);
    free(params), free(anchor), free(g), free(g0);
}

/* One client's local training under `algo` from a given start. */
static void local_train_once(const pfl_algo *algo, float mu, int client, const float *start, float *out) {
    pfl_config cfg = tiny_config(2);
    cfg.epochs = 2;
    cfg.momentum = 0.5f;
    cfg.algo.mu = mu;
    const int n_train[2] = {9, 7}, n_test[2] = {2, 2};
    tiny_fed f;
    tiny_fed_init(&f, algo, cfg, n_train, n_test);
    const size_t P = f.m.num_params;
    /* the anchor (the global model) differs from the start, so a proximal
     * term with mu > 0 pulls from the first step */
    memcpy(out, start, P * sizeof(float));
    for (size_t i = 0; i < P; i++) f.fl.global[i] = start[i] + 0.5f;
    f.fl.round = 3;
    pfl_train_stats st = {0};
    (algo->local_train ? algo->local_train : pfl_default_local_train)(&f.fl, client, &f.fl.workers[0], out, &st);
    tiny_fed_free(&f);
}

static void test_fedprox_vs_fedavg(void) {
    pfl_model m;
    if (pfl_model_build(&m, "dnn", 1, 4, 4, 3)) exit(2);
    const size_t P = m.num_params;
    float *start = tiny_floats(P), *a = tiny_floats(P), *b = tiny_floats(P), *c = tiny_floats(P);
    pfl_rng r = tiny_rng(8);
    pfl_model_init_params(&m, start, &r);
    local_train_once(&pfl_algo_fedavg, 0.0f, 1, start, a);
    local_train_once(&pfl_algo_fedprox, 0.0f, 1, start, b);
    CHECK(!tiny_same(a, start, 0, P), "fedavg did not train");
    CHECK(tiny_same(a, b, 0, P), "fedprox with mu = 0 differs from fedavg in %zu elements",
          tiny_count_diff(a, b, 0, P));
    /* with mu > 0 the proximal term changes the result, toward the anchor */
    local_train_once(&pfl_algo_fedprox, 1.0f, 1, start, c);
    CHECK(tiny_count_diff(a, c, 0, P) > P / 2, "fedprox with mu = 1 equals fedavg");
    double da = 0.0, dc = 0.0;
    for (size_t i = 0; i < P; i++) {
        double anchor = (double)start[i] + 0.5f;
        da += (a[i] - anchor) * (a[i] - anchor), dc += (c[i] - anchor) * (c[i] - anchor);
    }
    CHECK(dc < da, "mu = 1 should end closer to the anchor (%g vs %g)", sqrt(dc), sqrt(da));
    free(start), free(a), free(b), free(c);
}

/* ---- FedPer / FedRep receive ---- */

static void test_receive_base(const pfl_algo *algo) {
    pfl_config cfg = tiny_config(2);
    const int n_train[2] = {4, 4}, n_test[2] = {2, 2};
    tiny_fed f;
    tiny_fed_init(&f, algo, cfg, n_train, n_test);
    pfl_fl *fl = &f.fl;
    const size_t P = f.m.num_params, base = f.m.layers[1].offset;
    CHECK(fl->shared[0] && !fl->shared[1], "%s: shares the base only", algo->name);
    float *state = tiny_floats(P), *received = tiny_floats(P);
    pfl_rng r = tiny_rng(13);
    tiny_fill(fl->global, P, -1, 0, &r);
    tiny_fill(state, P, 1, 2, &r);
    tiny_fill(received, P, 7, 8, &r);
    pfl_receive_base(fl, 1, state, received);
    CHECK(tiny_same(received, fl->global, 0, base), "%s: base is not the global one", algo->name);
    CHECK(tiny_same(received, state, base, P - base), "%s: head is not the client's own", algo->name);

    /* through the broadcast stage: the client's model becomes global base +
     * its own head (its store keeps the head, the base comes from the
     * global model when the model is built) */
    float *own = tiny_floats(P);
    tiny_fill(own, P, 3, 4, &r);
    memcpy(state, own, P * sizeof(float));
    CHECK(pfl_client_model_set(fl, 1, own) == 0, "%s: set: %s", algo->name, pfl_errmsg());
    pfl_fl_receive(fl, 1, &fl->workers[0]);
    CHECK(pfl_client_model_get(fl, 1, own) == own, "%s: a head-only store builds the model", algo->name);
    CHECK(tiny_same(own, fl->global, 0, base), "%s: after receive, base is not the global one", algo->name);
    CHECK(tiny_same(own, state, base, P - base), "%s: after receive, head is not the client's own", algo->name);

    /* head_layers = 2 (the whole model): nothing comes from the global model */
    fl->cfg.algo.head_layers = 2;
    pfl_receive_base(fl, 1, state, received);
    CHECK(tiny_same(received, state, 0, P), "%s: head 2: received is not the own model", algo->name);
    /* head_layers = 0: everything from the global model */
    fl->cfg.algo.head_layers = 0;
    pfl_receive_base(fl, 1, state, received);
    CHECK(tiny_same(received, fl->global, 0, P), "%s: head 0: received is not the global model", algo->name);
    free(state), free(received), free(own);
    tiny_fed_free(&f);
}

int main(void) {
    test_fedrep_frozen();
    test_aggregate();
    test_prox_hook();
    test_fedprox_vs_fedavg();
    test_receive_base(&pfl_algo_fedper);
    test_receive_base(&pfl_algo_fedrep);
    TEST_MAIN_END();
}
