/* FedCross's server worked by hand.
 *
 *  - collaborators among K = 3 models with similarities s01 = 0.9,
 *    s02 = 0.2, s12 = 0.5: the least similar (strategy 1) of 0 is 2, of 1
 *    is 2, of 2 is 0; the most similar (2) of 0 is 1, of 1 is 0, of 2 is 1;
 *    in turn (0) model j's is j + 1 in round 1 and j + 2 in round 2 (mod 3);
 *  - the similarity of a model with itself is L + 1 (every layer's cosine
 *    1, the last layer's counted twice); with its last layer negated,
 *    (L - 1) - 2;
 *  - a round: the two clients' uploads u_0, u_1 replace their middleware
 *    models (each client's slot its place in the round's random order), and
 *    each model becomes alpha u_own + (1 - alpha) u_other (with two models
 *    each is the other's collaborator); a client's training starts from its
 *    middleware model; in the first stage every model becomes the global one;
 *  - --drop-rate and a single client a round refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "check.h"
#include "fl/fl.h"
#include "nn/model.h"
#include "tiny.h"
#include "util/err.h"

static void test_collaborators_by_hand(void) {
    const double sim[9] = {0, 0.9, 0.2, 0.9, 0, 0.5, 0.2, 0.5, 0};
    const int least[3] = {2, 2, 0}, most[3] = {1, 0, 1};
    for (int j = 0; j < 3; j++) {
        CHECK(pfl_fedcross_collaborator(sim, 3, j, 1, 1) == least[j], "least similar to %d: %d, want %d", j,
              pfl_fedcross_collaborator(sim, 3, j, 1, 1), least[j]);
        CHECK(pfl_fedcross_collaborator(sim, 3, j, 2, 1) == most[j], "most similar to %d: %d, want %d", j,
              pfl_fedcross_collaborator(sim, 3, j, 2, 1), most[j]);
        CHECK(pfl_fedcross_collaborator(sim, 3, j, 0, 1) == (j + 1) % 3, "in turn, round 1: %d's is %d", j,
              pfl_fedcross_collaborator(sim, 3, j, 0, 1));
        CHECK(pfl_fedcross_collaborator(sim, 3, j, 0, 2) == (j + 2) % 3, "in turn, round 2: %d's is %d", j,
              pfl_fedcross_collaborator(sim, 3, j, 0, 2));
    }
}

static void test_similarity_by_hand(void) {
    pfl_model m;
    CHECK(pfl_model_build(&m, "dnn", 1, 4, 4, 3) == 0, "dnn: %s", pfl_errmsg());
    const int L = m.num_layers;
    const size_t P = m.num_params;
    float *a = tiny_floats(P), *b = tiny_floats(P);
    pfl_rng r = tiny_rng(2);
    tiny_fill(a, P, -1, 1, &r);
    memcpy(b, a, P * sizeof(float));
    CHECK(fabs(pfl_fedcross_similarity(&m, a, b) - (L + 1)) < 1e-9, "similarity with itself %g, want L + 1 = %d",
          pfl_fedcross_similarity(&m, a, b), L + 1);
    const pfl_layer *last = &m.layers[L - 1];
    for (size_t i = last->offset; i < last->offset + last->length; i++) b[i] = -b[i];
    CHECK(fabs(pfl_fedcross_similarity(&m, a, b) - (L - 3)) < 1e-9, "last layer negated: %g, want (L - 1) - 2 = %d",
          pfl_fedcross_similarity(&m, a, b), L - 3);
    free(a), free(b);
}

static pfl_config cross_config(void) {
    pfl_config cfg = tiny_config(2);
    cfg.algo.fedcross_alpha = 0.75f, cfg.algo.fedcross_select = 1, cfg.algo.fedcross_first_stage = 0;
    return cfg;
}

/* One round's server step on two hand-made uploads. */
static void round_by_hand(int first_stage) {
    const int n_train[2] = {4, 4}, n_test[2] = {2, 2}, clients[2] = {0, 1};
    pfl_config cfg = cross_config();
    cfg.algo.fedcross_first_stage = first_stage;
    tiny_fed f;
    tiny_fed_init(&f, &pfl_algo_fedcross, cfg, n_train, n_test);
    pfl_fl *fl = &f.fl;
    const size_t V = pfl_model_vector_len(&f.m);
    fl->round = 1;
    const int slot0 = pfl_fedcross_slot(&fl->cfg, 1, 0), slot1 = pfl_fedcross_slot(&fl->cfg, 1, 1);
    CHECK(slot0 >= 0 && slot1 >= 0 && slot0 + slot1 == 1, "slots %d and %d, want 0 and 1", slot0, slot1);
    float *u[2] = {tiny_floats(V), tiny_floats(V)}, *start = tiny_floats(V);
    pfl_rng r = tiny_rng(4);
    tiny_fill(u[0], V, -1, 1, &r), tiny_fill(u[1], V, -1, 1, &r);
    fl->algo->aggregate(fl, clients, 2, u);
    double off = 0.0, mean_off = 0.0;
    for (int c = 0; c < 2; c++) {
        const float *w = pfl_fedcross_middleware(fl, c == 0 ? slot0 : slot1);
        for (size_t i = 0; i < V; i++) {
            const double want = first_stage ? fl->global[i] : 0.75 * u[c][i] + 0.25 * u[1 - c][i];
            off = fmax(off, fabs(w[i] - want));
        }
    }
    for (size_t i = 0; i < V; i++) mean_off = fmax(mean_off, fabs(fl->global[i] - 0.5 * (u[0][i] + u[1][i])));
    CHECK(off < 1e-6, "first stage %d: a middleware model is off by %g from %s", first_stage, off,
          first_stage ? "the global model" : "alpha u_own + (1 - alpha) u_other");
    CHECK(mean_off < 1e-6, "the global model is off by %g from the uploads' mean", mean_off);
    /* the next round's training starts from the client's middleware model */
    fl->round = 2;
    fl->algo->local_init(fl, 1, start);
    CHECK(memcmp(start, pfl_fedcross_middleware(fl, pfl_fedcross_slot(&fl->cfg, 2, 1)), V * sizeof(float)) == 0,
          "client 1 does not start from its middleware model");
    free(u[0]), free(u[1]), free(start);
    tiny_fed_free(&f);
}

static void test_refusals(void) {
    pfl_config cfg = cross_config();
    cfg.drop_rate = 0.3;
    CHECK(pfl_algo_fedcross.check(&cfg) != 0 && strstr(pfl_errmsg(), "--drop-rate"), "--drop-rate not refused: '%s'",
          pfl_errmsg());
    cfg = cross_config();
    cfg.join = 0.5;
    CHECK(pfl_algo_fedcross.check(&cfg) != 0 && strstr(pfl_errmsg(), "--join"), "one client a round not refused");
    cfg = cross_config();
    cfg.modules.ala = true;
    CHECK(pfl_algo_fedcross.check(&cfg) != 0 && strstr(pfl_errmsg(), "--ala"), "--ala not refused");
}

int main(void) {
    test_collaborators_by_hand();
    test_similarity_by_hand();
    round_by_hand(0);
    round_by_hand(1);
    test_refusals();
    TEST_MAIN_END();
}
