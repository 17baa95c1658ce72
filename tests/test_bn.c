/* BatchNorm's state in federated rounds (--bn): what the server averages,
 * what a client keeps when it builds its model from the global one, that
 * local training moves the running statistics of the model it trains, and
 * which methods refuse local BatchNorm. A tiny federation on 3x6x6 images
 * with a Conv-BN-ReLU-AvgPool-Linear model (layers conv1, bn1, fc). */
#include <stdio.h>
#include <string.h>

#include "algos/algos.h"
#include "check.h"
#include "run/run.h"
#include "tiny.h"

static const char *mode_name(pfl_bn_mode mode) {
    return mode == PFL_BN_SHARED ? "shared" : mode == PFL_BN_LOCAL ? "local" : "stats-local";
}

typedef struct {
    pfl_model m;
    pfl_dataset d;
    pfl_partition part;
    pfl_fl fl;
} bn_fed;

static const int n_train[2] = {6, 10}, n_test[2] = {3, 3};

static void bn_fed_start(bn_fed *f, const pfl_algo *algo, pfl_bn_mode mode) {
    memset(f, 0, sizeof *f);
    tiny_bn_model(&f->m, 3, 6, 6);
    f->d = tiny_dataset(n_train[0] + n_test[0] + n_train[1] + n_test[1], 3, 6, 6, 3, 5);
    f->part = tiny_partition(2, n_train, n_test);
    pfl_config cfg = tiny_config(2);
    cfg.bn = mode;
    if (pfl_fl_create(&f->fl, &cfg, &f->m, &f->d, &f->part, algo)) {
        fprintf(stderr, "pfl_fl_create: %s\n", pfl_errmsg());
        exit(2);
    }
}

static void bn_fed_free(bn_fed *f) {
    pfl_fl_destroy(&f->fl);
    tiny_partition_free(&f->part);
    tiny_dataset_free(&f->d);
}

/* max |a - b| over [off, off + n) */
static double max_diff(const float *a, const float *b, size_t off, size_t n) {
    double d = 0.0;
    for (size_t i = off; i < off + n; i++) d = fmax(d, fabs((double)a[i] - (double)b[i]));
    return d;
}

/* pfl_default_aggregate: conv1 and fc always averaged by training samples;
 * bn1's weight and bias averaged unless --bn local; bn1's running
 * statistics averaged only with --bn shared, else the global model keeps
 * its own. */
static void test_aggregate(pfl_bn_mode mode) {
    bn_fed f;
    bn_fed_start(&f, &pfl_algo_fedavg, mode);
    const pfl_model *m = &f.m;
    const size_t V = pfl_model_vector_len(m);
    const pfl_layer *bn = &m->layers[1];
    CHECK(bn->state_length == 8 && m->num_state == 8 && V == m->num_params + 8, "bn1: state %zu, model state %zu",
          bn->state_length, m->num_state);
    pfl_rng r = tiny_rng(11);
    float *up0 = tiny_floats(V), *up1 = tiny_floats(V), *before = tiny_floats(V), *want = tiny_floats(V);
    tiny_fill(up0, V, -1, 1, &r), tiny_fill(up1, V, -1, 1, &r), tiny_fill(f.fl.global, V, -1, 1, &r);
    memcpy(before, f.fl.global, V * sizeof(float));
    for (size_t i = 0; i < V; i++) want[i] = (6.0f / 16.0f) * up0[i] + (10.0f / 16.0f) * up1[i];
    float *const uploads[2] = {up0, up1};
    const int clients[2] = {0, 1};
    pfl_default_aggregate(&f.fl, clients, 2, uploads);
    const float *g = f.fl.global;
    const bool params_shared = mode != PFL_BN_LOCAL, state_shared = mode == PFL_BN_SHARED;
    const double d_conv = max_diff(g, want, m->layers[0].offset, m->layers[0].length);
    const double d_fc = max_diff(g, want, m->layers[2].offset, m->layers[2].length);
    const double d_bn = max_diff(g, params_shared ? want : before, bn->offset, bn->length);
    const double d_state = max_diff(g, state_shared ? want : before, bn->state_offset, bn->state_length);
    printf("aggregate, --bn %s: conv1 %.1e, fc %.1e, bn1 %s %.1e, running statistics %s %.1e\n", mode_name(mode),
           d_conv, d_fc, params_shared ? "averaged" : "kept", d_bn, state_shared ? "averaged" : "kept", d_state);
    CHECK(d_conv <= 1e-6 && d_fc <= 1e-6, "--bn %s: conv1/fc not the weighted mean (%.3e, %.3e)", mode_name(mode),
          d_conv, d_fc);
    CHECK(d_bn <= 1e-6, "--bn %s: bn1 weight/bias wrong (%.3e)", mode_name(mode), d_bn);
    CHECK(d_state <= 1e-6, "--bn %s: running statistics wrong (%.3e)", mode_name(mode), d_state);
    CHECK(f.fl.shared[1] == params_shared && f.fl.shared[0] && f.fl.shared[2], "--bn %s: shared flags %d %d %d",
          mode_name(mode), f.fl.shared[0], f.fl.shared[1], f.fl.shared[2]);
    CHECK((f.fl.client_state != NULL) == (mode != PFL_BN_SHARED),
          "--bn %s: fedavg should keep client models only when BatchNorm stays local", mode_name(mode));
    free(up0), free(up1), free(before), free(want);
    bn_fed_free(&f);
}

/* Broadcast: a client's model becomes the global one, except what --bn
 * keeps local (bitwise). */
static void test_receive(pfl_bn_mode mode) {
    bn_fed f;
    bn_fed_start(&f, &pfl_algo_fedper, mode); /* stateful in every mode; head = fc */
    const pfl_model *m = &f.m;
    const size_t V = pfl_model_vector_len(m);
    const pfl_layer *bn = &m->layers[1], *fc = &m->layers[2];
    pfl_rng r = tiny_rng(12);
    float *own = tiny_floats(V);
    tiny_fill(f.fl.global, V, -1, 1, &r), tiny_fill(own, V, -1, 1, &r);
    float *state = tiny_floats(V);
    CHECK(pfl_client_model_set(&f.fl, 0, own) == 0, "set: %s", pfl_errmsg());
    pfl_fl_receive(&f.fl, 0, &f.fl.workers[0]);
    tiny_client_model(&f.fl, 0, state);
    const float *g = f.fl.global;
    const bool keep_params = mode == PFL_BN_LOCAL, keep_state = mode != PFL_BN_SHARED;
    int ok = tiny_same(state, g, m->layers[0].offset, m->layers[0].length) &&
             tiny_same(state, keep_params ? own : g, bn->offset, bn->length) &&
             tiny_same(state, keep_state ? own : g, bn->state_offset, bn->state_length) &&
             tiny_same(state, own, fc->offset, fc->length); /* FedPer's head */
    printf("receive, --bn %s: conv1 global, bn1 %s, running statistics %s, head own: %s\n", mode_name(mode),
           keep_params ? "own" : "global", keep_state ? "own" : "global", ok ? "ok" : "FAIL");
    CHECK(ok, "--bn %s: the received model is wrong", mode_name(mode));
    /* the store keeps the head and what --bn keeps local, nothing else */
    const size_t kept = fc->length + (keep_params ? bn->length : 0) + (keep_state ? bn->state_length : 0);
    CHECK(f.fl.personal.floats == kept, "--bn %s: the store keeps %zu floats a client, not %zu", mode_name(mode),
          f.fl.personal.floats, kept);
    free(own), free(state);
    bn_fed_free(&f);
}

/* Local training moves the running statistics of the model it trains
 * (once per batch) and leaves the global model's alone. */
static void test_training_moves_state(void) {
    bn_fed f;
    bn_fed_start(&f, &pfl_algo_fedavg, PFL_BN_SHARED);
    const pfl_model *m = &f.m;
    const size_t V = pfl_model_vector_len(m), P = m->num_params;
    float *model = tiny_floats(V), *global_before = tiny_floats(V);
    memcpy(global_before, f.fl.global, V * sizeof(float));
    pfl_default_local_init(&f.fl, 1, model);
    pfl_train_stats st = {0};
    pfl_default_local_train(&f.fl, 1, &f.fl.workers[0], model, &st);
    const size_t state_moved = tiny_count_diff(model, global_before, P, V - P);
    printf("local training: %ld samples, running statistics moved in %zu of %zu values\n", st.samples, state_moved,
           V - P);
    CHECK(st.samples == n_train[1] && state_moved == V - P, "training left running statistics (%zu of %zu moved)",
          state_moved, V - P);
    CHECK(tiny_same(f.fl.global, global_before, 0, V), "training a copy changed the global model");
    free(model), free(global_before);
    bn_fed_free(&f);
}

/* Methods that start local training from something other than the
 * client's own model refuse --bn local and stats-local. */
static void test_refusals(void) {
    const pfl_algo *refuse[] = {&pfl_algo_pfedme, &pfl_algo_cfl, &pfl_algo_fedalp};
    for (size_t i = 0; i < sizeof refuse / sizeof refuse[0]; i++) {
        bn_fed f;
        memset(&f, 0, sizeof f);
        tiny_bn_model(&f.m, 3, 6, 6);
        f.d = tiny_dataset(22, 3, 6, 6, 3, 5);
        f.part = tiny_partition(2, n_train, n_test);
        pfl_config cfg = tiny_config(2);
        cfg.bn = PFL_BN_LOCAL;
        cfg.algo.groups = 1, cfg.algo.beta = 0.5f, cfg.algo.warmup = 1; /* fedalp */
        cfg.algo.pfedme_k = 1, cfg.algo.pfedme_beta = 1.0f;             /* pfedme */
        const int rc = pfl_fl_create(&f.fl, &cfg, &f.m, &f.d, &f.part, refuse[i]);
        printf("%s with --bn local: %s\n", refuse[i]->name, rc ? pfl_errmsg() : "accepted");
        CHECK(rc < 0 && strstr(pfl_errmsg(), "--bn"), "%s accepted --bn local", refuse[i]->name);
        if (rc == 0) pfl_fl_destroy(&f.fl);
        tiny_partition_free(&f.part);
        tiny_dataset_free(&f.d);
    }
}

/* A whole FedBN round: the global model's BatchNorm never changes, each
 * client keeps its own. */
static void test_fedbn_round(void) {
    bn_fed f;
    bn_fed_start(&f, &pfl_algo_fedavg, PFL_BN_LOCAL);
    const pfl_model *m = &f.m;
    const size_t V = pfl_model_vector_len(m);
    const pfl_layer *bn = &m->layers[1];
    float *before = tiny_floats(V);
    memcpy(before, f.fl.global, V * sizeof(float));
    CHECK(pfl_fl_run(&f.fl, NULL, NULL) == 0, "run: %s", pfl_errmsg());
    float *c0 = tiny_client_model(&f.fl, 0, tiny_floats(V)), *c1 = tiny_client_model(&f.fl, 1, tiny_floats(V));
    const int global_bn_kept = tiny_same(f.fl.global, before, bn->offset, bn->length) &&
                               tiny_same(f.fl.global, before, bn->state_offset, bn->state_length);
    const int others_moved = !tiny_same(f.fl.global, before, m->layers[0].offset, m->layers[0].length);
    const int clients_differ = !tiny_same(c0, c1, bn->offset, bn->length) &&
                               !tiny_same(c0, c1, bn->state_offset, bn->state_length);
    const int conv_shared = tiny_same(c0, f.fl.global, 0, m->layers[0].length) &&
                            tiny_same(c1, f.fl.global, 0, m->layers[0].length);
    printf("FedBN round: global bn1 kept %d, conv1 moved %d, clients' bn1 differ %d, clients hold the global conv1 %d\n",
           global_bn_kept, others_moved, clients_differ, conv_shared);
    CHECK(global_bn_kept && others_moved && clients_differ && conv_shared, "FedBN round wrong");
    free(before), free(c0), free(c1);
    bn_fed_free(&f);
}

/* FedTSDP: a shared BatchNorm layer goes to the cluster with its
 * running statistics, averaged in the cluster as every other method averages
 * them under --bn shared; --bn stats-local and local keep each client's own.
 * One cluster (h_th 1: never re-clustered), every layer shared (L_s = 3). */
static void test_fedtsdp(pfl_bn_mode mode) {
    bn_fed f;
    memset(&f, 0, sizeof f);
    tiny_bn_model(&f.m, 3, 6, 6);
    enum { PUB = 8 };
    f.d = tiny_dataset(22 + PUB, 3, 6, 6, 3, 5); /* the last 8 samples: the server's public set */
    f.part = tiny_partition(2, n_train, n_test);
    pfl_config cfg = tiny_config(2);
    cfg.bn = mode;
    cfg.algo.tsdp_public = PUB, cfg.algo.tsdp_public_batch = 4, cfg.algo.tsdp_h_th = 1.0f;
    cfg.algo.tsdp_eps1 = 0.15f, cfg.algo.tsdp_eps2 = 3.5f, cfg.algo.tsdp_min_pts = 2, cfg.algo.tsdp_psi = 0.98f;
    if (pfl_fl_create(&f.fl, &cfg, &f.m, &f.d, &f.part, &pfl_algo_fedtsdp)) {
        fprintf(stderr, "pfl_fl_create: %s\n", pfl_errmsg());
        exit(2);
    }
    const pfl_model *m = &f.m;
    const size_t V = pfl_model_vector_len(m);
    const pfl_layer *bn = &m->layers[1];
    pfl_rng r = tiny_rng(13);
    float *up0 = tiny_floats(V), *up1 = tiny_floats(V), *own = tiny_floats(V), *want = tiny_floats(V);
    tiny_fill(up0, V, -1, 1, &r), tiny_fill(up1, V, -1, 1, &r), tiny_fill(own, V, -1, 1, &r);
    for (size_t i = 0; i < V; i++) want[i] = (6.0f / 16.0f) * up0[i] + (10.0f / 16.0f) * up1[i];
    float *const uploads[2] = {up0, up1};
    const int clients[2] = {0, 1};
    f.fl.round = 1;
    f.fl.algo->aggregate(&f.fl, clients, 2, uploads);
    float *state = pfl_client_model(&f.fl, 0);
    memcpy(state, own, V * sizeof(float));
    pfl_fl_receive(&f.fl, 0, &f.fl.workers[0]);
    const bool keep_params = mode == PFL_BN_LOCAL, keep_state = mode != PFL_BN_SHARED;
    const double d_conv = max_diff(state, want, m->layers[0].offset, m->layers[0].length);
    const double d_bn = max_diff(state, keep_params ? own : want, bn->offset, bn->length);
    const double d_state = max_diff(state, keep_state ? own : want, bn->state_offset, bn->state_length);
    printf("fedtsdp, --bn %s: conv1 %.1e, bn1 %s %.1e, running statistics %s %.1e\n", mode_name(mode), d_conv,
           keep_params ? "own" : "cluster mean", d_bn, keep_state ? "own" : "cluster mean", d_state);
    CHECK(d_conv <= 1e-6 && d_bn <= 1e-6, "fedtsdp --bn %s: shared parameters wrong (%.3e, %.3e)", mode_name(mode),
          d_conv, d_bn);
    CHECK(d_state <= 1e-6, "fedtsdp --bn %s: running statistics wrong (%.3e)", mode_name(mode), d_state);
    free(up0), free(up1), free(own), free(want);
    bn_fed_free(&f);
}

/* A client's personalized model takes what --bn keeps local from the client's own state, never from the
 * global model, whose local parts are never aggregated (they stay the initial ones): for every method that
 * runs under the mode, after two rounds, overwriting the global model's running statistics (and under --bn
 * local its BatchNorm weight and bias) leaves every client's personalized model bit for bit as it was. Each
 * method at its own defaults (its flag table), under each --reading it has, two clients, every client every
 * round; FedRoD's personalized model (the global model with a summed head) holds the client's own statistics. */
static bool has_param(const pfl_algo *algo, const char *name) {
    for (int i = 0; i < algo->num_params; i++)
        if (!strcmp(algo->params[i].name, name)) return true;
    return false;
}

/* The methods that refuse the mode: pFedMe, CFL and FedALP train from a model not the client's own; FedBN keeps
 * BatchNorm's weight and bias local by definition, so refuses stats-local. */
static bool refuses_bn(const pfl_algo *algo, pfl_bn_mode mode) {
    return algo == &pfl_algo_pfedme || algo == &pfl_algo_cfl || algo == &pfl_algo_fedalp ||
           (algo == &pfl_algo_fedbn && mode == PFL_BN_STATS_LOCAL);
}

static void test_personal_bn_is_own(pfl_bn_mode mode) {
    enum { PUB = 8 };
    int checked = 0, refused = 0, methods = 0;
    for (int run = 0; pfl_algos[run / 2]; run++) {
        const pfl_algo *algo = pfl_algos[run / 2];
        const char *reading = run % 2 ? "paper" : "pfllib";
        if (run % 2 && !has_param(algo, "reading")) continue;
        methods += run % 2 == 0;
        bn_fed f;
        memset(&f, 0, sizeof f);
        tiny_bn_model(&f.m, 3, 6, 6);
        f.d = tiny_dataset(22 + PUB, 3, 6, 6, 3, 5); /* FedTSDP's public set: the last 8 */
        f.part = tiny_partition(2, n_train, n_test);
        pfl_run_options o;
        if (pfl_run_options_init(&o, algo)) {
            fprintf(stderr, "%s: %s\n", algo->name, pfl_errmsg());
            exit(2);
        }
        pfl_config cfg = o.cfg;
        const pfl_config tiny = tiny_config(2);
        cfg.clients = 2, cfg.join = 1.0, cfg.rounds = 2, cfg.epochs = 1, cfg.batch = 4, cfg.eval_batch = 4;
        cfg.lr = 0.1f, cfg.seed = 7, cfg.threads = 1, cfg.eval_every = 1, cfg.bn = mode;
        cfg.algo.layer_unit = tiny.algo.layer_unit, cfg.algo.cfr_layers = 1, cfg.algo.groups = 1;
        cfg.algo.tsdp_public = PUB, cfg.algo.tsdp_public_batch = 4, cfg.algo.fine_tune_epochs = 1;
        cfg.algo.pf_fm = 1, cfg.algo.pf_fs = 1, cfg.algo.reading = reading;
        cfg.algo.fine_tune_at = "every"; /* FedBABU fine-tunes when asked, not from the last round's kept models */
        if (pfl_fl_create(&f.fl, &cfg, &f.m, &f.d, &f.part, algo)) {
            printf("%s --bn %s: refused (%s)\n", algo->name, mode_name(mode), pfl_errmsg());
            CHECK(refuses_bn(algo, mode), "%s refuses --bn %s: %s", algo->name, mode_name(mode), pfl_errmsg());
            CHECK(!has_param(algo, "reading"), "%s has readings and refuses --bn", algo->name);
            refused++;
            tiny_partition_free(&f.part);
            tiny_dataset_free(&f.d);
            continue;
        }
        pfl_fl *fl = &f.fl;
        CHECK(pfl_fl_run(fl, NULL, NULL) == 0, "%s --bn %s runs: %s", algo->name, mode_name(mode), pfl_errmsg());
        fl->cfg.rounds++; /* the models as a round before the last has them (FedBABU keeps its last round's) */
        const pfl_model *m = fl->model;
        const size_t V = pfl_model_vector_len(m);
        const pfl_layer *bn = &m->layers[1];
        float *before[2] = {tiny_floats(V), tiny_floats(V)};
        const float *(*personal)(pfl_fl *, int, float *) =
            algo->personal_model ? algo->personal_model : pfl_default_personal_model;
        for (int c = 0; c < 2; c++) memcpy(before[c], personal(fl, c, fl->workers[0].model), V * sizeof(float));
        if (algo == &pfl_algo_fedrod) {
            float *own = tiny_client_model(fl, 1, tiny_floats(V));
            CHECK(tiny_same(before[1], own, bn->state_offset, bn->state_length) &&
                      !tiny_same(before[1], fl->global, bn->state_offset, bn->state_length),
                  "fedrod --bn %s: the personalized model's running statistics are not the client's own",
                  mode_name(mode));
            free(own);
        }
        for (size_t i = 0; i < bn->state_length; i++) fl->global[bn->state_offset + i] = 7.0f;
        if (mode == PFL_BN_LOCAL)
            for (size_t i = 0; i < bn->length; i++) fl->global[bn->offset + i] = -3.0f;
        size_t differ = 0;
        for (int c = 0; c < 2; c++)
            differ += tiny_count_diff(personal(fl, c, fl->workers[0].model), before[c], 0, V);
        printf("%s --bn %s%s%s: the personalized models read %zu floats of the global model's local BatchNorm\n",
               algo->name, mode_name(mode), has_param(algo, "reading") ? " --reading " : "",
               has_param(algo, "reading") ? reading : "", differ);
        CHECK(differ == 0, "%s --bn %s (--reading %s): the personalized models change in %zu floats with the global "
              "model's local BatchNorm", algo->name, mode_name(mode), reading, differ);
        checked++;
        free(before[0]), free(before[1]);
        bn_fed_free(&f);
    }
    const int refusing = 3 + (mode == PFL_BN_STATS_LOCAL); /* pFedMe, CFL, FedALP; FedBN under stats-local */
    CHECK(methods == pfl_algo_count() && refused == refusing && checked >= methods - refused + 4,
          "--bn %s: %d of %d methods, %d runs checked, %d refused", mode_name(mode), methods, pfl_algo_count(), checked,
          refused);
}

/* SCAFFOLD's control variate c and FedDyn's h cover the shared parameters:
 * under --bn local not bn1's weight and bias, which each client keeps
 * (their spans are taken in the method's create, before the run marks the
 * BatchNorm layers local); under --bn shared they do. One aggregation of
 * two hand-made uploads that differ from the global model everywhere. */
static void test_server_state_spans(pfl_bn_mode mode) {
    const pfl_algo *algos[2] = {&pfl_algo_scaffold, &pfl_algo_feddyn};
    for (int a = 0; a < 2; a++) {
        bn_fed f;
        memset(&f, 0, sizeof f);
        tiny_bn_model(&f.m, 3, 6, 6);
        f.d = tiny_dataset(n_train[0] + n_test[0] + n_train[1] + n_test[1], 3, 6, 6, 3, 5);
        f.part = tiny_partition(2, n_train, n_test);
        pfl_config cfg = tiny_config(2);
        cfg.bn = mode, cfg.algo.server_lr = 1.0f, cfg.algo.dyn_alpha = 0.5f;
        if (pfl_fl_create(&f.fl, &cfg, &f.m, &f.d, &f.part, algos[a])) {
            fprintf(stderr, "pfl_fl_create: %s\n", pfl_errmsg());
            exit(2);
        }
        pfl_fl *fl = &f.fl;
        const size_t V = pfl_model_vector_len(&f.m);
        float *u0 = tiny_floats(V), *u1 = tiny_floats(V);
        for (size_t j = 0; j < V; j++) u0[j] = fl->global[j] + 0.25f, u1[j] = fl->global[j] - 0.75f;
        float *const uploads[2] = {u0, u1};
        const int clients[2] = {0, 1};
        fl->round = 1;
        fl->algo->aggregate(fl, clients, 2, uploads);
        const float *state = a == 0 ? pfl_scaffold_control(fl, -1) : pfl_feddyn_state(fl, -1);
        const pfl_layer *conv = &f.m.layers[0], *bn = &f.m.layers[1];
        size_t conv_zero = 0, bn_nonzero = 0;
        for (size_t j = conv->offset; j < conv->offset + conv->length; j++) conv_zero += state[j] == 0.0f;
        for (size_t j = bn->offset; j < bn->offset + bn->length; j++) bn_nonzero += state[j] != 0.0f;
        CHECK(conv_zero == 0, "%s --bn %s: the server state is zero on %zu of conv1's %zu parameters", algos[a]->name,
              mode_name(mode), conv_zero, conv->length);
        if (mode == PFL_BN_LOCAL)
            CHECK(bn_nonzero == 0, "%s --bn local: the server state covers %zu of bn1's %zu parameters, which the "
                                   "clients keep",
                  algos[a]->name, bn_nonzero, bn->length);
        else
            CHECK(bn_nonzero == bn->length, "%s --bn %s: the server state covers %zu of bn1's %zu shared parameters",
                  algos[a]->name, mode_name(mode), bn_nonzero, bn->length);
        free(u0), free(u1);
        bn_fed_free(&f);
    }
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const pfl_bn_mode modes[] = {PFL_BN_SHARED, PFL_BN_LOCAL, PFL_BN_STATS_LOCAL};
    for (int i = 0; i < 3; i++) test_aggregate(modes[i]);
    for (int i = 0; i < 3; i++) test_receive(modes[i]);
    test_training_moves_state();
    test_refusals();
    test_fedbn_round();
    for (int i = 0; i < 3; i++) test_fedtsdp(modes[i]);
    test_personal_bn_is_own(PFL_BN_STATS_LOCAL);
    test_personal_bn_is_own(PFL_BN_LOCAL);
    test_server_state_spans(PFL_BN_LOCAL);
    test_server_state_spans(PFL_BN_SHARED);
    TEST_MAIN_END();
}
