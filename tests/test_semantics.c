/* The round's semantics (docs/evaluation.md, docs/algorithms.md),
 * on tiny in-memory federations (the 2-layer dnn):
 *
 *  - a local-init module mixes with what the method SENDS the client: after
 *    a broadcast, the layers below the mixed ones are exactly the method's
 *    `receive` output (FedAMP: its cloud model u_i, which moves from round
 *    to round and is not the initial model; pFedCFR: its fused layers;
 *    pFedMe and the others: the global model);
 *  - FedPer/FedRep + ALA or FLAYER's head mix: the client's own head stays,
 *    the top layer of what it receives (the base) is mixed;
 *  - --init-clients selected: only the next round's clients are
 *    re-initialized by the module; all: every client;
 *  - local_acc_joined: the personalized accuracy over the next round's
 *    clients, recomputed here; local_acc when every client joins;
 *  - --eval-moment after-train: the evaluated models are the ones training
 *    left; the same as after-init for methods whose broadcast never touches
 *    the personalized model (Ditto, FedAMP, pFedMe, Local), different for the
 *    others (pFedCFR, FedPer, FedAvg);
 *  - --step-budget: the split of --local-steps between two phases by hand,
 *    and Ditto's and FedRep's training equal to the two phases written out. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "algos/amp.h"
#include "check.h"
#include "fl/fl.h"
#include "modules/modules.h"
#include "tiny.h"
#include "util/err.h"

enum { CLIENTS = 4 };
static const int n_train[CLIENTS] = {12, 9, 14, 10}, n_test[CLIENTS] = {6, 6, 6, 6};

static pfl_config base_config(void) {
    pfl_config c = tiny_config(CLIENTS);
    c.rounds = 3, c.lr = 0.2f;
    pfl_algo_params *a = &c.algo;
    a->mu = 0.01f, a->lambda = 0.1f, a->personal_epochs = 1, a->head_epochs = 1;
    a->amp_alpha = 1.0f, a->amp_sigma = 10.0f, a->amp_lambda = 1.0f, a->cfr_layers = 1;
    a->pfedme_k = 2, a->pfedme_lambda = 15.0f, a->pfedme_lr = 0.01f, a->pfedme_beta = 1.0f;
    a->php_mu = 0.9f, a->php_lambda = 0.01f, a->ft_epochs = 1;
    pfl_modules_config *mod = &c.modules;
    mod->ala_p = 1, mod->ala_s = 100, mod->ala_eta = 1.0f, mod->ala_threshold = 0.1f, mod->ala_max_epochs = 12;
    return c;
}

/* ---- modules mix with what is sent ---- */

typedef struct {
    int stop;                   /* the round after which to check */
    const pfl_algo *algo;
    const char *module;
    float *received;            /* scratch model vector */
    float *state;               /* another */
    int checked;
} sent_check;

/* After round `stop`'s broadcast: every client's layer 0 (below ALA's and
 * FLAYER's one mixed layer) is the layer 0 the method sends it. */
static int check_lower_layers(pfl_fl *fl, void *ctx) {
    sent_check *s = ctx;
    if (fl->round != s->stop) return 0;
    const size_t lower = fl->model->layers[1].offset;
    for (int c = 0; c < CLIENTS; c++) {
        float *state = tiny_client_model(fl, c, s->state);
        if (fl->algo->receive) fl->algo->receive(fl, c, state, s->received);
        else memcpy(s->received, fl->global, pfl_model_vector_len(fl->model) * sizeof(float));
        CHECK(tiny_same(state, s->received, 0, lower), "%s %s: client %d's layer 0 is not what the method sends",
              s->algo->name, s->module, c);
        if (fl->algo == &pfl_algo_fedamp)
            CHECK(tiny_same(s->received, pfl_fedamp_cloud_model(fl, c), 0, lower), "fedamp sends u_%d", c);
    }
    s->checked = 1;
    return 1;
}

static void test_modules_mix_what_is_sent(void) {
    const pfl_algo *algos[] = {&pfl_algo_fedavg, &pfl_algo_fedprox, &pfl_algo_ditto, &pfl_algo_fedamp,
                               &pfl_algo_pfedcfr, &pfl_algo_pfedme};
    for (size_t i = 0; i < sizeof algos / sizeof algos[0]; i++)
        for (int m = 0; m < 2; m++) {
            pfl_config cfg = base_config();
            cfg.modules.ala = m == 0, cfg.modules.flayer_agg = m == 1;
            tiny_fed f;
            tiny_fed_init(&f, algos[i], cfg, n_train, n_test);
            const size_t V = pfl_model_vector_len(&f.m);
            sent_check s = {2, algos[i], m ? "--flayer-agg" : "--ala", tiny_floats(V), tiny_floats(V), 0};
            CHECK(pfl_fl_run_with(&f.fl, NULL, check_lower_layers, &s) == 0 && s.checked, "%s %s: run: %s",
                  algos[i]->name, s.module, pfl_errmsg());
            free(s.received), free(s.state);
            tiny_fed_free(&f);
        }
}

/* FedAMP's message moves: u_i after each round differs from the round
 * before and from the initial model. */
typedef struct {
    float *prev, *init;
    int changed, rounds;
} cloud_log;

static int log_cloud(pfl_fl *fl, void *ctx) {
    cloud_log *l = ctx;
    const size_t P = fl->model->num_params;
    const float *u = pfl_fedamp_cloud_model(fl, 0);
    if (fl->round > 0) {
        l->rounds++;
        l->changed += !tiny_same(u, l->prev, 0, P) && !tiny_same(u, l->init, 0, P);
    }
    memcpy(l->prev, u, P * sizeof(float));
    return 0;
}

static void test_fedamp_sends_a_moving_model(void) {
    pfl_config cfg = base_config();
    cfg.modules.ala = true;
    tiny_fed f;
    tiny_fed_init(&f, &pfl_algo_fedamp, cfg, n_train, n_test);
    const size_t P = f.m.num_params;
    cloud_log l = {tiny_floats(P), tiny_floats(P), 0, 0};
    memcpy(l.init, f.fl.global, P * sizeof(float));
    CHECK(pfl_fl_run_with(&f.fl, NULL, log_cloud, &l) == 0, "fedamp run: %s", pfl_errmsg());
    CHECK(l.rounds == 3 && l.changed == 3, "fedamp: u_0 moved in %d of %d rounds", l.changed, l.rounds);
    free(l.prev), free(l.init);
    tiny_fed_free(&f);
}

/* ---- FedPer / FedRep: the mixed layer is the top one of the base ---- */

typedef struct {
    int mixed, checked;
    float *state;               /* scratch model vector */
} head_check;

/* After round 2's broadcast: every client's head is its own (the global
 * head is never trained, so an own head differs from it), and layer 0, the
 * top layer of the base it received, was mixed by the module for some
 * client (not simply the global base, as it was when the module mixed the
 * head with itself and did nothing). */
static int check_heads(pfl_fl *fl, void *ctx) {
    head_check *h = ctx;
    if (fl->round != 2) return 0;
    const pfl_model *m = fl->model;
    const size_t base = m->layers[1].offset, head = m->num_params - base;
    for (int c = 0; c < CLIENTS; c++) {
        const float *state = tiny_client_model(fl, c, h->state);
        CHECK(!tiny_same(state, fl->global, base, head), "client %d's head was replaced by the global one", c);
        h->mixed += !tiny_same(state, fl->global, 0, base);
    }
    h->checked = 1;
    return 1;
}

static void test_private_head(void) {
    const pfl_algo *algos[] = {&pfl_algo_fedper, &pfl_algo_fedrep};
    for (int i = 0; i < 2; i++)
        for (int m = 0; m < 2; m++) {
            pfl_config cfg = base_config();
            cfg.modules.ala = m == 0, cfg.modules.flayer_agg = m == 1;
            tiny_fed f;
            tiny_fed_init(&f, algos[i], cfg, n_train, n_test);
            head_check h = {0, 0, tiny_floats(pfl_model_vector_len(&f.m))};
            CHECK(pfl_private_top_layers(&f.fl) == 1, "%s: one private layer", algos[i]->name);
            CHECK(pfl_fl_run_with(&f.fl, NULL, check_heads, &h) == 0 && h.checked, "%s run: %s", algos[i]->name,
                  pfl_errmsg());
            CHECK(h.mixed > 0, "%s %s: no client's base was mixed (the module did nothing)", algos[i]->name,
                  m ? "--flayer-agg" : "--ala");
            free(h.state);
            tiny_fed_free(&f);
        }
    /* the window functions, by hand on the dnn: 2 layers, the top one private */
    tiny_fed f;
    tiny_fed_data(&f, 1, n_train, n_test);
    const size_t base = f.m.layers[1].offset, P = f.m.num_params;
    size_t off, len;
    pfl_ala_window(&f.m, 1, 1, &off, &len);
    CHECK(off == 0 && len == base, "ALA window below a 1-layer head: layer 0 (%zu, %zu)", off, len);
    pfl_ala_window(&f.m, 1, 2, &off, &len);
    CHECK(len == 0, "no layer received: an empty window");
    pfl_ala_window(&f.m, 1, 0, &off, &len);
    CHECK(off == base && len == P - base, "no private layer: the top layer");
    float *local = tiny_floats(P), *received = tiny_floats(P), *before = tiny_floats(P);
    pfl_rng r = tiny_rng(3);
    tiny_fill(local, P, 0, 1, &r), tiny_fill(received, P, 2, 3, &r);
    memcpy(before, local, P * sizeof(float));
    pfl_flayer_mix_window(local, received, &f.m, 1, 1, 0.25f);
    size_t bad = 0;
    for (size_t i = 0; i < base; i++) bad += !check_close(local[i], 0.25 * before[i] + 0.75 * received[i], 1e-6);
    CHECK(bad == 0 && tiny_same(local, before, base, P - base), "FLAYER's mix below a private head");
    free(local), free(received), free(before);
    tiny_fed_free(&f);
}

/* ---- --init-clients, local_acc_joined ---- */

typedef struct {
    int checked, bad_joined;
    pfl_init_clients who;
    float *weights;             /* per client its ALA weights at the last round's end */
    float *model;               /* scratch model vector */
} init_check;

/* After each round: with ALA, the clients re-initialized at this broadcast
 * (the next round's, or every client with --init-clients all) learned their
 * ALA weights again, and the others' stayed as they were (training does not
 * touch them; at round 0 ALA skips every client, whose top layers are the
 * global ones). And local_acc_joined is the accuracy over the next round's
 * clients. */
static void check_init_clients(const pfl_round_metrics *m, const pfl_fl *cfl, void *ctx) {
    init_check *k = ctx;
    pfl_fl *fl = (pfl_fl *)cfl;
    const size_t len = pfl_store_row_len(fl->client_state) - fl->personal.floats;
    long correct = 0, test = 0;
    for (int c = 0; c < CLIENTS; c++) {
        const float *w = pfl_store_read(fl->client_state, c) + fl->personal.floats;
        const bool learned = !tiny_same(w, k->weights + len * (size_t)c, 0, len);
        memcpy(k->weights + len * (size_t)c, w, len * sizeof(float));
        if (m->round < 1) continue;
        const bool want = k->who == PFL_INIT_ALL || fl->joins_next[c];
        CHECK(learned == want, "round %d, client %d (next round: %d): re-initialized %d", m->round, c,
              fl->joins_next[c], learned);
        if (!fl->joins_next[c]) continue;
        const pfl_client_data *cd = &fl->part->clients[c];
        correct += pfl_count_correct_on(&fl->workers[0], fl, tiny_client_model(fl, c, k->model), cd->test, cd->n_test);
        test += cd->n_test;
    }
    if (m->round < 1) return;
    k->bad_joined += !(test > 0 && m->local_acc_joined == (double)correct / (double)test);
    k->checked++;
}

static void test_init_clients_and_joined(void) {
    for (int who = 0; who < 2; who++) {
        pfl_config cfg = base_config();
        cfg.join = 0.5, cfg.modules.ala = true, cfg.init_clients = who ? PFL_INIT_ALL : PFL_INIT_SELECTED;
        tiny_fed f;
        tiny_fed_init(&f, &pfl_algo_fedavg, cfg, n_train, n_test);
        const size_t len = pfl_store_row_len(f.fl.client_state) - f.fl.personal.floats;
        init_check k = {0, 0, cfg.init_clients, tiny_floats(len * CLIENTS), tiny_floats(pfl_model_vector_len(&f.m))};
        for (size_t i = 0; i < len * CLIENTS; i++) k.weights[i] = 1.0f; /* ALA's weights start at 1 */
        CHECK(pfl_fl_run(&f.fl, check_init_clients, &k) == 0 && k.checked == 3, "run: %s", pfl_errmsg());
        CHECK(k.bad_joined == 0, "local_acc_joined is not the next round's clients' accuracy (%d rounds)",
              k.bad_joined);
        free(k.weights), free(k.model);
        tiny_fed_free(&f);
    }
    /* every client joins: the joined accuracy is local_acc */
    pfl_config cfg = base_config();
    tiny_fed f;
    tiny_fed_init(&f, &pfl_algo_fedala, cfg, n_train, n_test);
    pfl_round_metrics m;
    CHECK(pfl_fl_run(&f.fl, NULL, NULL) == 0 && pfl_fl_evaluate(&f.fl, &m) == 0 && m.local_acc_joined == m.local_acc,
          "join 1: joined %g, local %g", m.local_acc_joined, m.local_acc);
    tiny_fed_free(&f);
}

/* ---- --eval-moment ---- */

static void digest_of(const pfl_algo *algo, pfl_eval_moment moment, uint8_t digest[32]) {
    pfl_config cfg = base_config();
    cfg.join = 0.75, cfg.eval_moment = moment;
    cfg.algo.reading = algo == &pfl_algo_fedphp ? "paper" : NULL; /* the inherited model, which training leaves */
    tiny_fed f;
    tiny_fed_init(&f, algo, cfg, n_train, n_test);
    CHECK(pfl_fl_run(&f.fl, NULL, NULL) == 0, "%s run: %s", algo->name, pfl_errmsg());
    memcpy(digest, f.fl.personal_sha256, 32);
    if (moment == PFL_EVAL_AFTER_TRAIN) {
        int trained = 0;
        for (int c = 0; c < CLIENTS; c++) trained += pfl_client_has_trained(&f.fl, c);
        CHECK(trained >= 3, "%s: %d clients marked trained after 3 rounds of 3", algo->name, trained);
    }
    tiny_fed_free(&f);
}

static void test_eval_moment(void) {
    /* the broadcast leaves the personalized model alone: both moments agree */
    const pfl_algo *same[] = {&pfl_algo_ditto, &pfl_algo_fedamp, &pfl_algo_pfedme, &pfl_algo_local, &pfl_algo_fedphp};
    /* the broadcast rebuilds it: they differ */
    const pfl_algo *differ[] = {&pfl_algo_pfedcfr, &pfl_algo_fedper, &pfl_algo_fedavg, &pfl_algo_fedala,
                                &pfl_algo_fedavg_c};
    for (int i = 0; i < 5; i++) {
        uint8_t a[32], b[32];
        digest_of(same[i], PFL_EVAL_AFTER_INIT, a), digest_of(same[i], PFL_EVAL_AFTER_TRAIN, b);
        CHECK(memcmp(a, b, 32) == 0, "%s: after-init and after-train models differ", same[i]->name);
        digest_of(differ[i], PFL_EVAL_AFTER_INIT, a), digest_of(differ[i], PFL_EVAL_AFTER_TRAIN, b);
        CHECK(memcmp(a, b, 32) != 0, "%s: after-init and after-train models agree", differ[i]->name);
    }
}

/* ---- --step-budget ---- */

static void test_split_by_hand(void) {
    tiny_fed f;
    pfl_config cfg = base_config();
    tiny_fed_init(&f, &pfl_algo_ditto, cfg, n_train, n_test);
    pfl_fl *fl = &f.fl;
    /* {epochs, K, first epochs, budget} -> {first steps, second steps, first epochs, second epochs} */
    const struct {
        int E, K, first;
        pfl_step_budget b;
        int s1, s2, e1, e2;
    } cases[] = {
        {1, 20, 2, PFL_BUDGET_TOTAL, 13, 7, 2, 1},  /* Ditto's 2 : 1 of 20 batches: 13.3 -> 13 */
        {1, 20, 5, PFL_BUDGET_TOTAL, 17, 3, 5, 1},  /* FedRep's 5 : 1: 16.7 -> 17 */
        {2, 10, 1, PFL_BUDGET_TOTAL, 7, 13, 1, 2},  /* 1 : 2 of 20: 6.67 -> 7 */
        {1, 1, 2, PFL_BUDGET_TOTAL, 1, 0, 2, 0},    /* one batch: the first phase, the second none */
        {1, 2, 9, PFL_BUDGET_TOTAL, 1, 1, 9, 1},    /* each phase keeps a batch */
        {1, 20, 0, PFL_BUDGET_TOTAL, 0, 20, 0, 1},  /* no first phase */
        {1, 20, 2, PFL_BUDGET_EACH, 40, 20, 2, 1},  /* the previous reading: K per epoch of each */
        {1, 0, 2, PFL_BUDGET_TOTAL, 0, 0, 2, 1},    /* no --local-steps: whole passes */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fl->cfg.epochs = cases[i].E, fl->cfg.algo.local_steps = cases[i].K, fl->cfg.step_budget = cases[i].b;
        pfl_step a = pfl_step_default(fl), b = pfl_step_default(fl);
        pfl_split_round_steps(fl, cases[i].first, &a, &b);
        CHECK(a.steps == cases[i].s1 && b.steps == cases[i].s2 && a.epochs == cases[i].e1 && b.epochs == cases[i].e2,
              "case %zu: steps %d + %d, epochs %d + %d", i, a.steps, b.steps, a.epochs, b.epochs);
    }
    tiny_fed_free(&f);
}

/* Ditto's and FedRep's training is the two phases with the split's batches,
 * written out here as local steps. */
static void test_two_phase_training(void) {
    for (int k = 0; k < 2; k++) {
        const pfl_algo *algo = k ? &pfl_algo_fedrep : &pfl_algo_ditto;
        pfl_config cfg = base_config();
        cfg.algo.local_steps = 5, cfg.algo.personal_epochs = 2, cfg.algo.head_epochs = 2;
        tiny_fed f;
        tiny_fed_init(&f, algo, cfg, n_train, n_test);
        pfl_fl *fl = &f.fl;
        fl->round = 1;
        const size_t V = pfl_model_vector_len(&f.m), P = f.m.num_params;
        const int first_head = pfl_first_head_layer(&f.m, cfg.algo.head_layers);
        float *model = tiny_floats(V), *want = tiny_floats(V), *want_personal = tiny_floats(V);
        memcpy(model, fl->global, V * sizeof(float)), memcpy(want, fl->global, V * sizeof(float));
        tiny_client_model(fl, 0, want_personal);
        pfl_step a = pfl_step_default(fl), b = pfl_step_default(fl);
        pfl_split_round_steps(fl, 2, &a, &b);
        CHECK(a.steps == 3 && b.steps == 2, "%s: 5 batches as 3 + 2 (%d + %d)", algo->name, a.steps, b.steps);
        pfl_train_stats s = {0}, t = {0};
        fl->algo->local_train(fl, 0, &fl->workers[0], model, &s);
        bool base_frozen[PFL_MAX_LAYERS] = {false}, head_frozen[PFL_MAX_LAYERS] = {false};
        for (int l = 0; l < f.m.num_layers; l++) base_frozen[l] = l < first_head, head_frozen[l] = l >= first_head;
        if (k == 0) { /* Ditto: the personal model with its proximal term, then the global copy */
            pfl_step_add_prox(&a, cfg.algo.lambda, fl->global, 0, P);
            a.shuffle = PFL_RNG_SHUFFLE_PERSONAL;
            pfl_step_run(fl, 0, &fl->workers[0], want_personal, &a, &t);
            pfl_step_run(fl, 0, &fl->workers[0], want, &b, &t);
            CHECK(tiny_same(model, want, 0, P), "ditto: the global copy trained %d batches", b.steps);
            CHECK(tiny_same(pfl_client_model(fl, 0), want_personal, 0, P), "ditto: the personal model trained %d",
                  a.steps);
        } else { /* FedRep: the head with the base frozen, then the base with the head frozen */
            a.opt.frozen = base_frozen;
            pfl_step_run(fl, 0, &fl->workers[0], want, &a, &t);
            b.opt.frozen = head_frozen, b.shuffle = PFL_RNG_SHUFFLE_PERSONAL;
            pfl_step_run(fl, 0, &fl->workers[0], want, &b, &t);
            CHECK(tiny_same(model, want, 0, P) && s.samples == t.samples, "fedrep: head %d then base %d batches",
                  a.steps, b.steps);
        }
        free(model), free(want), free(want_personal);
        tiny_fed_free(&f);
    }
}

int main(void) {
    test_modules_mix_what_is_sent();
    test_fedamp_sends_a_moving_model();
    test_private_head();
    test_init_clients_and_joined();
    test_eval_moment();
    test_split_by_hand();
    test_two_phase_training();
    TEST_MAIN_END();
}
