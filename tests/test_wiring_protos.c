/* The wiring of the methods that exchange class prototypes (FedProto, FD,
 * FedPCL, FedGH, FedPAC; src/algos/protos.c and each method's file) on the
 * uneven federation of tests/wiring.h.
 *
 * Each test runs a method through the real round loop and, after every
 * round, computes the round again here from what the test itself holds (the
 * model each client should hold, the global model, the server's state),
 * with the method's step written out from the engine's pieces (the default
 * step, its frozen rows, a loss term, a gradient term, a block collecting
 * the features training sees) and the server's step written out in double:
 * the clients the round selects, their local training, their prototypes
 * (and FedPAC's statistics), the server's plain means, FedGH's header SGD,
 * FedPAC's program. It then checks the run against it: the global model,
 * every client's model (its own parts kept, the shared parts what the
 * server sent), FedPCL's per-client sets, and the accuracy the run scored
 * for every client against the one of the model the method scores
 * (nearest prototype, FedPCL's own padded set, the client's base under the
 * global header, the global extractor under the client's own classifier).
 *
 * Why a wrong wiring fails here: the clients hold different classes
 * (client 1 only 0-1, client 3 only 2-3), so per-class means over the
 * clients that have a class differ from means over all, and padding
 * matters; the clients' sizes differ (23, 7, 15, 11, 30), so a uniform mean
 * is not a mean by samples; three of five clients a round, so a slot index
 * is not a client index and a stale client shows; three rounds at lr 0.05,
 * so what a client keeps, and every statistic taken before or after
 * training, changes the next round; every hyper-parameter is set to a value
 * other than 0 and 1 (a parameter ignored gives another model). */
#include "wiring.h"

#include "algos/protos.h"

enum { N = WIRING_CLIENTS, C = WIRING_CLASSES };
/* room of the fixed buffers: WIRING_MLP3's features are 8 wide, its head 8 x 4 + 4 */
enum { MAX_D = 16, MAX_SET = C * (MAX_D + 1), MAX_HEAD = 128, MAX_TRAIN = 64 };

typedef struct proto_ref proto_ref;
struct proto_ref {
    wiring_fed *w;
    int L, D;              /* backbone layers; the prototypes' dimension */
    size_t V, block_off, set_len, head_off, head_len;
    bool personal[PFL_MAX_LAYERS]; /* rows a client keeps; the others it receives from the server */
    float *global;         /* the global model the run should hold */
    float *own[N];         /* per client: its own rows (the others unused) */
    float *trained[N];     /* per slot: this round's trained model */
    float *sets[N];        /* per slot: the set (prototypes) the client sends */
    float *scratch, *expect;
    int sel[N], n_sel;
    void (*round)(proto_ref *R, int r);                     /* round r from what the test holds */
    double (*accuracy)(proto_ref *R, int c, float *model);  /* what the method scores for client c */
    void (*check)(proto_ref *R, int r);                     /* the method's own state after round r */
    double (*other)(proto_ref *R, int c, float *model);     /* a model a wrong wiring would score, or NULL */
    int scored_apart;      /* evaluations where `other` scored another accuracy than the method's model */
    void *method;
    const char *name;
    int rounds_checked, scored_checked;
};

/* ---- pieces every method's reference uses ---- */

/* Width of the rows at `at`: a layer's input, or the logits. */
static int width_at(const pfl_model *m, int at) {
    return at == PFL_AT_LOGITS ? m->classes : (int)pfl_model_layer_input_size(m, at);
}

/* The rows at `at` of samples idx[0..n) under params (n x width), in
 * evaluation mode and batches of --eval-batch. */
static void rows_of(wiring_fed *w, const float *params, const int *idx, int n, int at, float *out) {
    pfl_fl *fl = &w->f.fl;
    pfl_exec *x = fl->workers[0].exec;
    const int layer = at == PFL_AT_LOGITS ? fl->model->num_layers : at, width = width_at(fl->model, at);
    const int eb = fl->cfg.eval_batch;
    float *scratch = tiny_floats((size_t)eb * (size_t)width);
    pfl_xbuf p = pfl_exec_view_const(x, params, w->V);
    for (int start = 0; start < n; start += eb) {
        const int B = n - start < eb ? n - start : eb;
        pfl_exec_gather(x, idx + start, B);
        pfl_exec_forward(x, &p, false, NULL);
        memcpy(out + (size_t)start * width, pfl_exec_features(x, layer, scratch), sizeof(float) * (size_t)B * width);
    }
    pfl_exec_unview(x, &p);
    free(scratch);
}

static void labels_of(const wiring_fed *w, const int *idx, int n, uint8_t *out) {
    for (int i = 0; i < n; i++) out[i] = w->f.d.labels[idx[i]];
}

/* Per-class sums of rows in double; the set of their means. */
typedef struct {
    double sum[C][MAX_D];
    long count[C];
    int D;
} class_sums;

static void sums_add(class_sums *s, const float *z, const uint8_t *y, int B, bool normalize) {
    for (int n = 0; n < B; n++) {
        const float *row = z + (size_t)n * s->D;
        double sq = 0.0;
        for (int d = 0; d < s->D; d++) sq += (double)row[d] * row[d];
        const double norm = normalize ? fmax(sqrt(sq), 1e-12) : 1.0;
        for (int d = 0; d < s->D; d++) s->sum[y[n]][d] += normalize ? (double)(float)(row[d] / norm) : row[d];
        s->count[y[n]]++;
    }
}

static void sums_set(const class_sums *s, float *set) {
    memset(set, 0, sizeof(float) * pfl_protos_len(C, s->D));
    for (int c = 0; c < C; c++) {
        if (!s->count[c]) continue;
        for (int d = 0; d < s->D; d++) set[(size_t)c * s->D + d] = (float)(s->sum[c][d] / (double)s->count[c]);
        set[(size_t)C * s->D + c] = 1.0f;
    }
}

/* A block of the local step: the rows each training batch trains with. */
static void sums_step(void *ctx, const pfl_block_batch *b) { sums_add(ctx, b->features, b->labels, b->B, false); }

/* The client's class means of the rows at `at` over its training split,
 * in evaluation mode (normalized rows first when `normalize`). */
static void split_means(proto_ref *R, const float *model, int client, int at, bool normalize, float *set) {
    const pfl_client_data *cd = &R->w->f.part.clients[client];
    const int width = width_at(R->w->f.fl.model, at);
    float *z = tiny_floats((size_t)cd->n_train * width);
    uint8_t y[MAX_TRAIN];
    rows_of(R->w, model, cd->train, cd->n_train, at, z);
    labels_of(R->w, cd->train, cd->n_train, y);
    class_sums s = {.D = width};
    sums_add(&s, z, y, cd->n_train, normalize);
    sums_set(&s, set);
    free(z);
}

static bool has(const float *set, int D, int c) { return set[(size_t)C * D + c] != 0.0f; }
static int count_present(const float *set, int D) {
    int k = 0;
    for (int c = 0; c < C; c++) k += has(set, D, c);
    return k;
}

/* out: per class, the plain mean of sets[0..n)'s prototypes of it over
 * the sets that have it (every client once). */
static void plain_mean(float *const *sets, int n, int D, float *out) {
    memset(out, 0, sizeof(float) * pfl_protos_len(C, D));
    for (int c = 0; c < C; c++) {
        int have = 0;
        for (int k = 0; k < n; k++) have += has(sets[k], D, c);
        if (!have) continue;
        for (int d = 0; d < D; d++) {
            double s = 0.0;
            for (int k = 0; k < n; k++)
                if (has(sets[k], D, c)) s += sets[k][(size_t)c * D + d];
            out[(size_t)c * D + d] = (float)(s / have);
        }
        out[(size_t)C * D + c] = 1.0f;
    }
}

static float *block_of(const proto_ref *R, float *model) { return model + R->block_off; }

/* The model client c should hold: the global one, its own rows over it. */
static void expected_model(const proto_ref *R, int c, float *out) {
    const pfl_model *m = R->w->f.fl.model;
    memcpy(out, R->global, R->V * sizeof(float));
    for (int l = 0; l < pfl_model_rows(m); l++)
        if (R->personal[l]) memcpy(out + m->layers[l].offset, R->own[c] + m->layers[l].offset, m->layers[l].length * sizeof(float));
}

/* Samples of client c's test split whose predict(set, z) is their label,
 * z the rows at `at` of `model`, over its test split's size. */
static double predicted_accuracy(proto_ref *R, int c, const float *model, int at, const float *set,
                                 int (*predict)(const float *set, int C, int D, const float *z)) {
    const pfl_client_data *cd = &R->w->f.part.clients[c];
    const int width = width_at(R->w->f.fl.model, at);
    float *z = tiny_floats((size_t)cd->n_test * width);
    uint8_t y[MAX_TRAIN];
    rows_of(R->w, model, cd->test, cd->n_test, at, z);
    labels_of(R->w, cd->test, cd->n_test, y);
    int correct = 0;
    for (int i = 0; i < cd->n_test; i++) correct += predict(set, C, width, z + (size_t)i * width) == y[i];
    free(z);
    return (double)correct / cd->n_test;
}

/* The backbone's own output (FD, FedGH, FedPAC). */
static double logits_accuracy(proto_ref *R, int c, float *model) { return wiring_accuracy(R->w, model, c, false); }

static void ref_init(proto_ref *R, wiring_fed *w, const char *name) {
    const pfl_model *m = w->f.fl.model;
    memset(R, 0, sizeof *R);
    R->w = w, R->name = name;
    R->L = m->num_layers, R->D = pfl_protos_dim(m), R->V = w->V;
    R->block_off = m->layers[R->L].offset, R->set_len = pfl_protos_len(C, R->D);
    R->head_off = m->layers[R->L - 1].offset, R->head_len = m->layers[R->L - 1].length;
    if (R->D > MAX_D || width_at(m, PFL_AT_LOGITS) > MAX_D || R->head_len > MAX_HEAD) {
        fprintf(stderr, "%s: a model too wide for this test's buffers\n", name);
        exit(2);
    }
    R->global = wiring_copy_global(w);
    R->scratch = tiny_floats(R->V), R->expect = tiny_floats(R->V);
    for (int k = 0; k < N; k++) {
        R->own[k] = wiring_copy_global(w);
        R->trained[k] = tiny_floats(R->V);
        R->sets[k] = tiny_floats(pfl_model_vector_len(m)); /* room for FedPAC's whole message */
    }
}

static void ref_free(proto_ref *R) {
    for (int k = 0; k < N; k++) free(R->own[k]), free(R->trained[k]), free(R->sets[k]);
    free(R->global), free(R->scratch), free(R->expect);
}

/* The model the run holds for client c: its stored one (stateful methods)
 * or its personalized model (FedPAC: the global extractor under its
 * classifier). */
static const float *run_client_model(proto_ref *R, int c) {
    pfl_fl *fl = &R->w->f.fl;
    if (fl->client_state) return wiring_client_model(R->w, c, R->scratch);
    if (!fl->algo->personal_model) return NULL;
    const float *p = fl->algo->personal_model(fl, c, R->scratch);
    if (p != R->scratch) memcpy(R->scratch, p, R->V * sizeof(float));
    return R->scratch;
}

/* After round r: the global model and every client's model against the
 * round computed here. */
static void check_models(proto_ref *R, int r) {
    pfl_fl *fl = &R->w->f.fl;
    CHECK(wiring_close(fl->global, R->global, 0, R->V), "%s round %d: the global model is not the server's step (max diff %g)",
          R->name, r, wiring_max_diff(fl->global, R->global, 0, R->V));
    for (int c = 0; c < N; c++) {
        const float *got = run_client_model(R, c);
        CHECK(got != NULL, "%s round %d client %d: no model of its own to check", R->name, r, c);
        if (!got) continue;
        expected_model(R, c, R->expect);
        CHECK(wiring_close(got, R->expect, 0, R->V),
              "%s round %d client %d: its model is not its own trained rows under what the server sent (max diff %g)",
              R->name, r, c, wiring_max_diff(got, R->expect, 0, R->V));
    }
}

static int ref_hook(wiring_fed *w, int round, void *ctx) {
    proto_ref *R = ctx;
    const wiring_round *m = &w->rounds[round];
    if (round > 0) {
        R->round(R, round);
        CHECK(m->selected == R->n_sel, "%s round %d: %d selected, %d expected", R->name, round, m->selected, R->n_sel);
        check_models(R, round);
        if (R->check) R->check(R, round);
        R->rounds_checked++;
    }
    if (m->evaluated) {
        for (int c = 0; c < N; c++) {
            expected_model(R, c, R->expect);
            const double acc = R->accuracy(R, c, R->expect);
            CHECK(fabs(m->client_acc[c] - acc) < 1e-12, "%s round %d client %d: scored %g, the method's model %g",
                  R->name, round, c, m->client_acc[c], acc);
            if (R->other) R->scored_apart += fabs(R->other(R, c, R->expect) - acc) > 1e-12;
        }
        R->scored_checked++;
    }
    return 0;
}

/* Runs `algo` on the federation with cfg, checking every round against R. */
static void run_checked(const pfl_algo *algo, pfl_config *cfg, const char *name, void (*setup)(proto_ref *R),
                        void *method) {
    wiring_fed w;
    wiring_init(&w, algo, cfg, WIRING_MLP3);
    CHECK(w.V == w.P, "%s: the model has no running statistics", name);
    proto_ref R;
    ref_init(&R, &w, name);
    R.method = method;
    setup(&R);
    CHECK(wiring_run(&w, ref_hook, &R) == 0, "%s: the run failed", name);
    CHECK(R.rounds_checked == cfg->rounds && R.scored_checked == cfg->rounds + 1, "%s: %d rounds and %d evaluations checked",
          name, R.rounds_checked, R.scored_checked);
    /* the federation tells the scored model from the one a wrong wiring would score */
    CHECK(!R.other || R.scored_apart > 0, "%s: the other model scored alike everywhere", name);
    ref_free(&R);
    wiring_free(&w);
}

/* ---- FedProto and FD: the backbone the client's own, the set the server's ---- */

typedef struct {
    int at;          /* the rows collected and regularized: features entering the last layer, or the logits */
    float lambda;
    bool fd, softmax; /* FD's distillation (softmax targets), else FedProto's distance */
} exchange;

typedef struct {
    const float *set;
    bool softmax;
} fd_target;

static double fd_value(void *ctx, const pfl_term_batch *b, float *dz, int *correct) {
    (void)correct;
    const fd_target *t = ctx;
    return pfl_fd_soft_ce(t->set, (int)b->n, b->z, b->labels, b->B, t->softmax, dz);
}

/* Round r: each selected client trains its own backbone from what it held
 * with the global set it received (CE + lambda term, the term only once
 * there are prototypes), collecting the rows its batches trained with; the
 * server's set is their plain mean. */
static void exchange_round(proto_ref *R, int r) {
    const exchange *e = R->method;
    R->n_sel = wiring_selected(R->w, r, R->sel);
    float received[MAX_SET];
    memcpy(received, block_of(R, R->global), R->set_len * sizeof(float));
    for (int k = 0; k < R->n_sel; k++) {
        const int c = R->sel[k];
        expected_model(R, c, R->trained[k]);
        pfl_step s = wiring_default_step(R->w, r);
        bool frozen[PFL_MAX_LAYERS] = {false};
        frozen[R->L] = true;
        s.opt.frozen = frozen;
        class_sums sums = {.D = R->D};
        pfl_step_add_block(&s, e->at, sums_step, &sums);
        pfl_protos_target mse = {received, C, R->D};
        fd_target kd = {received, e->softmax};
        const pfl_loss_term term = {.name = "reference term", .at = e->at, .weight = e->lambda,
                                    .value = e->fd ? fd_value : pfl_protos_mse_value, .ctx = e->fd ? (void *)&kd : &mse};
        if (count_present(received, R->D) > 0) pfl_step_add_term(&s, &term);
        wiring_train(R->w, c, r, R->trained[k], &s);
        sums_set(&sums, R->sets[k]);
    }
    plain_mean(R->sets, R->n_sel, R->D, block_of(R, R->global));
    for (int k = 0; k < R->n_sel; k++) memcpy(R->own[R->sel[k]], R->trained[k], R->V * sizeof(float));
}

/* FedProto scores the nearest global prototype of the features (none
 * before the first prototypes: 0). */
static double fedproto_accuracy(proto_ref *R, int c, float *model) {
    return predicted_accuracy(R, c, model, R->L - 1, block_of(R, model), pfl_fedproto_nearest);
}

static void exchange_setup(proto_ref *R) {
    for (int l = 0; l < R->L; l++) R->personal[l] = true;
    R->round = exchange_round;
    R->accuracy = ((exchange *)R->method)->fd ? logits_accuracy : fedproto_accuracy;
    R->other = ((exchange *)R->method)->fd ? NULL : logits_accuracy; /* FedProto: not the backbone's logits */
}

static void test_fedproto_wiring(void) {
    pfl_config cfg = wiring_config(&pfl_algo_fedproto, WIRING_MLP3);
    wiring_set(&cfg, &pfl_algo_fedproto, "proto-lambda", 0.7);
    exchange e = {.at = 2, .lambda = 0.7f}; /* MLP3: the features entering fc3, its layer 2 */
    run_checked(&pfl_algo_fedproto, &cfg, "fedproto", exchange_setup, &e);
}

static void test_fd_wiring(void) {
    for (int softmax = 0; softmax < 2; softmax++) {
        pfl_config cfg = wiring_config(&pfl_algo_fd, WIRING_MLP3);
        wiring_set(&cfg, &pfl_algo_fd, "fd-lambda", 0.6);
        cfg.algo.fd_target = softmax ? "softmax" : "logits";
        exchange e = {.at = PFL_AT_LOGITS, .lambda = 0.6f, .fd = true, .softmax = softmax};
        run_checked(&pfl_algo_fd, &cfg, softmax ? "fd (softmax targets)" : "fd", exchange_setup, &e);
    }
}

/* ---- FedPCL: contrastive training against the server's sets ---- */

typedef struct {
    double tau;
    float *sets;      /* N x set: each client's set as the server holds it (padded) */
    bool uploaded[N];
} pcl;

typedef struct {
    const float *global;
    const pcl *p;
    int D;
} pcl_ctx;

static double pcl_value(void *ctx, const pfl_term_batch *b, float *dz, int *correct) {
    (void)correct;
    const pcl_ctx *t = ctx;
    return pfl_fedpcl_loss(t->global, t->p->sets, N, C, t->D, t->p->tau, b->z, b->labels, b->B, dz);
}

/* set's missing classes from `from` */
static void pad_from(float *set, const float *from, int D) {
    for (int c = 0; c < C; c++)
        if (!has(set, D, c) && has(from, D, c)) {
            memcpy(set + (size_t)c * D, from + (size_t)c * D, sizeof(float) * (size_t)D);
            set[(size_t)C * D + c] = 1.0f;
        }
}

/* Round r: a selected client that has uploaded before trains L_g + L_p
 * (no cross-entropy, the last layer and the block frozen, the gradient
 * clipped); every one then sends its normalized class means under the
 * trained model. The server: the plain mean, each sender's set under its
 * client, every set padded with the global one. */
static void fedpcl_round(proto_ref *R, int r) {
    pcl *p = R->method;
    R->n_sel = wiring_selected(R->w, r, R->sel);
    float received[MAX_SET];
    memcpy(received, block_of(R, R->global), R->set_len * sizeof(float));
    for (int k = 0; k < R->n_sel; k++) {
        const int c = R->sel[k];
        expected_model(R, c, R->trained[k]);
        if (p->uploaded[c]) {
            pfl_step s = wiring_default_step(R->w, r);
            s.ce_weight = 0.0;
            bool frozen[PFL_MAX_LAYERS] = {false};
            frozen[R->L - 1] = frozen[R->L] = true;
            s.opt.frozen = frozen;
            pcl_ctx t = {received, p, R->D};
            const pfl_loss_term term = {.name = "reference L_g + L_p", .at = R->L - 1, .weight = 1.0f,
                                        .value = pcl_value, .ctx = &t};
            pfl_step_add_term(&s, &term);
            pfl_step_add_grad(&s, pfl_fedpcl_clip, NULL);
            wiring_train(R->w, c, r, R->trained[k], &s);
        }
        split_means(R, R->trained[k], c, R->L - 1, true, R->sets[k]);
    }
    float *global = block_of(R, R->global);
    plain_mean(R->sets, R->n_sel, R->D, global);
    for (int k = 0; k < R->n_sel; k++) {
        memcpy(p->sets + (size_t)R->sel[k] * R->set_len, R->sets[k], R->set_len * sizeof(float));
        p->uploaded[R->sel[k]] = true;
        memcpy(R->own[R->sel[k]], R->trained[k], R->V * sizeof(float));
    }
    for (int c = 0; c < N; c++) pad_from(p->sets + (size_t)c * R->set_len, global, R->D);
}

/* The server's set of every client, and the one its personalized model
 * carries: its own padded set (none before it uploaded), not the global one. */
static void fedpcl_check(proto_ref *R, int r) {
    const pcl *p = R->method;
    pfl_fl *fl = &R->w->f.fl;
    float none[MAX_SET] = {0};
    for (int c = 0; c < N; c++) {
        const float *got = pfl_fedpcl_set(fl, c), *want = p->sets + (size_t)c * R->set_len;
        CHECK(wiring_close(got, want, 0, R->set_len), "fedpcl round %d client %d: the server's set (max diff %g)", r, c,
              wiring_max_diff(got, want, 0, R->set_len));
        const float *personal = fl->algo->personal_model ? fl->algo->personal_model(fl, c, R->scratch) : NULL;
        if (!p->uploaded[c]) want = none;
        CHECK(personal && wiring_close(personal + R->block_off, want, 0, R->set_len),
              "fedpcl round %d client %d: the personalized model's prototypes are not its own padded set", r, c);
    }
}

/* argmax r . p_c over the client's own padded set; nothing before it uploaded. */
static double fedpcl_accuracy(proto_ref *R, int c, float *model) {
    const pcl *p = R->method;
    float none[MAX_SET] = {0};
    return predicted_accuracy(R, c, model, R->L - 1, p->uploaded[c] ? p->sets + (size_t)c * R->set_len : none,
                              pfl_fedpcl_predict);
}

static void fedpcl_setup(proto_ref *R) {
    pcl *p = R->method;
    p->sets = tiny_floats((size_t)N * R->set_len);
    for (int l = 0; l < R->L; l++) R->personal[l] = true;
    R->round = fedpcl_round, R->accuracy = fedpcl_accuracy, R->check = fedpcl_check;
}

static void test_fedpcl_wiring(void) {
    pfl_config cfg = wiring_config(&pfl_algo_fedpcl, WIRING_MLP3);
    wiring_set(&cfg, &pfl_algo_fedpcl, "pcl-tau", 0.5);
    pcl p = {.tau = 0.5};
    run_checked(&pfl_algo_fedpcl, &cfg, "fedpcl", fedpcl_setup, &p);
    free(p.sets);
}

/* ---- FedGH: personal bases under the server's header ---- */

typedef struct {
    float lr;
    bool from_client0;
} gh;

/* Round r: each selected client trains its base under the global header
 * by CE, then sends its class means (evaluation mode, trained model); the
 * server trains the header by SGD at --gh-server-lr over the round's
 * (prototype, class) pairs shuffled, from client 0's trained header when
 * it trained (client0) or from the header it sent. */
static void fedgh_round(proto_ref *R, int r) {
    const gh *g = R->method;
    const int D = R->D;
    R->n_sel = wiring_selected(R->w, r, R->sel);
    float protos[N * C * MAX_D];
    uint8_t labels[N * C];
    int order[N * C], pairs = 0;
    float *header = R->global + R->head_off, start[MAX_HEAD];
    memcpy(start, header, R->head_len * sizeof(float)); /* the header every client receives */
    for (int k = 0; k < R->n_sel; k++) {
        const int c = R->sel[k];
        expected_model(R, c, R->trained[k]);
        pfl_step s = wiring_default_step(R->w, r);
        bool frozen[PFL_MAX_LAYERS] = {false};
        frozen[R->L] = true;
        s.opt.frozen = frozen;
        wiring_train(R->w, c, r, R->trained[k], &s);
        split_means(R, R->trained[k], c, R->L - 1, false, R->sets[k]);
        for (int y = 0; y < C; y++) {
            if (!has(R->sets[k], D, y)) continue;
            memcpy(protos + (size_t)pairs * D, R->sets[k] + (size_t)y * D, sizeof(float) * (size_t)D);
            labels[pairs] = (uint8_t)y, order[pairs] = pairs;
            pairs++;
        }
        if (c == 0 && g->from_client0) memcpy(start, R->trained[k] + R->head_off, R->head_len * sizeof(float));
        memcpy(R->own[c], R->trained[k], R->V * sizeof(float));
    }
    memcpy(header, start, R->head_len * sizeof(float));
    pfl_rng rng = pfl_rng_stream(R->w->f.fl.cfg.seed, r, PFL_RNG_NONE, PFL_RNG_ALGO);
    pfl_rng_shuffle(&rng, order, (size_t)pairs);
    pfl_fedgh_train_header(header, protos, labels, order, pairs, D, C, R->w->f.fl.cfg.batch, g->lr);
}

static void fedgh_setup(proto_ref *R) {
    for (int l = 0; l < R->L - 1; l++) R->personal[l] = true;
    R->round = fedgh_round, R->accuracy = logits_accuracy;
}

static void test_fedgh_wiring(void) {
    for (int reading = 0; reading < 2; reading++) {
        pfl_config cfg = wiring_config(&pfl_algo_fedgh, WIRING_MLP3);
        wiring_set(&cfg, &pfl_algo_fedgh, "gh-server-lr", 0.3);
        cfg.algo.gh_start = reading ? "global" : "client0";
        gh g = {0.3f, !reading};
        run_checked(&pfl_algo_fedgh, &cfg, reading ? "fedgh (--gh-start global)" : "fedgh", fedgh_setup, &g);
    }
}

/* ---- FedPAC: the extractor averaged, each client's classifier combined ---- */

typedef struct {
    float lambda;
    float v[N], *h[N]; /* per slot: the statistics it sent */
} pac;

/* V and h of client c's training split under `model` (the extractor it received). */
static void pac_statistics(proto_ref *R, int c, const float *model, float *v, float *h) {
    const pfl_client_data *cd = &R->w->f.part.clients[c];
    float *f = tiny_floats((size_t)cd->n_train * R->D);
    uint8_t y[MAX_TRAIN];
    rows_of(R->w, model, cd->train, cd->n_train, R->L - 1, f);
    labels_of(R->w, cd->train, cd->n_train, y);
    CHECK(pfl_fedpac_statistics(f, y, cd->n_train, C, R->D, v, h) == 0, "fedpac: the statistics");
    free(f);
}

/* One pass on the classifier by CE (extractor frozen), then --epochs on
 * the extractor (classifier frozen, its own batch order) by CE + lambda
 * MSE to the received prototypes, when there are some. */
static void pac_train(proto_ref *R, int c, int r, float *model, float lambda) {
    float received[MAX_SET];
    memcpy(received, block_of(R, model), R->set_len * sizeof(float));
    pfl_step head = wiring_default_step(R->w, r), base = wiring_default_step(R->w, r);
    pfl_split_round_steps(&R->w->f.fl, 1, &head, &base);
    bool base_frozen[PFL_MAX_LAYERS] = {false}, head_frozen[PFL_MAX_LAYERS] = {false};
    for (int l = 0; l <= R->L; l++) base_frozen[l] = l != R->L - 1, head_frozen[l] = l >= R->L - 1;
    head.opt.frozen = base_frozen, base.opt.frozen = head_frozen;
    base.shuffle = PFL_RNG_SHUFFLE_PERSONAL;
    pfl_protos_target t = {received, C, R->D};
    const pfl_loss_term align = {.name = "reference alignment", .at = R->L - 1, .weight = lambda,
                                 .value = pfl_protos_mse_value, .ctx = &t};
    if (count_present(received, R->D) > 0) pfl_step_add_term(&base, &align);
    wiring_train(R->w, c, r, model, &head);
    wiring_train(R->w, c, r, model, &base);
}

/* Client i's program: alpha^T (diag(V) + D_i) alpha over the simplex,
 * D_i[a][b] = <h_i - h_a, h_i - h_b>; its classifier sum_j alpha_j phi_j
 * (alpha_j <= 1e-3 left out), or its own when there is no solution. */
static void pac_classifier(proto_ref *R, int i, float *out) {
    const pac *p = R->method;
    const int n = R->n_sel;
    const size_t CD = (size_t)C * R->D;
    double P[N * N], alpha[N];
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) {
            double dot = 0.0;
            for (size_t j = 0; j < CD; j++)
                dot += ((double)p->h[i][j] - p->h[a][j]) * ((double)p->h[i][j] - p->h[b][j]);
            P[a * n + b] = dot + (a == b ? p->v[a] : 0.0);
        }
    if (pfl_fedpac_simplex_qp(P, n, alpha) != 0) {
        memcpy(out, R->trained[i] + R->head_off, R->head_len * sizeof(float));
        return;
    }
    for (size_t e = 0; e < R->head_len; e++) {
        double s = 0.0;
        for (int j = 0; j < n; j++)
            if (alpha[j] > 1e-3) s += alpha[j] * R->trained[j][R->head_off + e];
        out[e] = (float)s;
    }
}

/* Round r: each selected client starts from the global extractor under
 * its own classifier, takes its statistics there, trains, and sends its
 * class means (evaluation mode, trained model); the server averages the
 * models by training samples, the prototypes plainly, and gives each
 * sender the classifier of its program. */
static void fedpac_round(proto_ref *R, int r) {
    pac *p = R->method;
    R->n_sel = wiring_selected(R->w, r, R->sel);
    for (int k = 0; k < R->n_sel; k++) {
        const int c = R->sel[k];
        expected_model(R, c, R->trained[k]);
        pac_statistics(R, c, R->trained[k], &p->v[k], p->h[k]);
        pac_train(R, c, r, R->trained[k], p->lambda);
        split_means(R, R->trained[k], c, R->L - 1, false, R->sets[k]);
    }
    double weight[N];
    wiring_sample_weights(R->sel, R->n_sel, weight);
    wiring_mean(R->global, R->trained, weight, R->n_sel, 0, R->block_off);
    float *block = block_of(R, R->global);
    memset(block, 0, (R->V - R->block_off) * sizeof(float)); /* V and h: nothing on the server's side */
    plain_mean(R->sets, R->n_sel, R->D, block);
    for (int k = 0; k < R->n_sel; k++) pac_classifier(R, k, R->own[R->sel[k]] + R->head_off);
}

/* The global model, its classifier the mean of the trained ones (not what FedPAC scores). */
static double global_accuracy(proto_ref *R, int c, float *model) {
    (void)model;
    return wiring_accuracy(R->w, R->global, c, false);
}

static void fedpac_setup(proto_ref *R) {
    pac *p = R->method;
    for (int k = 0; k < N; k++) p->h[k] = tiny_floats((size_t)C * R->D);
    R->personal[R->L - 1] = true; /* the classifier the server gave the client */
    R->round = fedpac_round, R->accuracy = logits_accuracy, R->other = global_accuracy;
}

static void test_fedpac_wiring(void) {
    pfl_config cfg = wiring_config(&pfl_algo_fedpac, WIRING_MLP3);
    wiring_set(&cfg, &pfl_algo_fedpac, "proto-lambda", 0.4);
    pac p = {.lambda = 0.4f};
    run_checked(&pfl_algo_fedpac, &cfg, "fedpac", fedpac_setup, &p);
    for (int k = 0; k < N; k++) free(p.h[k]);
}

int main(void) {
    test_fedproto_wiring();
    test_fd_wiring();
    test_fedpcl_wiring();
    test_fedgh_wiring();
    test_fedpac_wiring();
    TEST_MAIN_END();
}
