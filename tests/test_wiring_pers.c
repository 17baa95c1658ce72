/* Wiring tests of apfl, fedrod, fedcp, gpfl, perfedavg, fedphp, fedfomo,
 * apple and partialfed on the uneven federation (tests/wiring.h; the
 * pattern of tests/test_wiring_fedavg.c). Each test follows the run round by
 * round and recomputes here, from what the method's paper (or the PFLlib
 * reading docs/algorithms.md documents) says, what every client and the
 * server should hold after the round: the clients the round selects, each
 * trained from what it should start from (the global model, its own model,
 * a mix of the two, a partial initialization, a combination of downloaded
 * models) by the step the method says (pfl_step_default plus its loss
 * terms, blocks or owned batches, written here), the server's mean by
 * training samples over the shared rows only, and what each client keeps.
 * It then checks against the run:
 *
 *  - the global model (or the server's per-client models), which fails a
 *    uniform mean (the clients' sizes differ: 23, 7, 15, 11, 30), a wrong
 *    starting point, a hyper-parameter ignored (each is set away from its
 *    default and from 0 and 1) or steps in the wrong order;
 *  - what each client holds after the broadcast (its personal parts as it
 *    trained them, the shared parts as the server sent them);
 *  - the model scored: every client's reported accuracy equals the accuracy
 *    of the model the method should score, recomputed here, and where the
 *    method builds one, the personalized vector itself.
 *
 * Three rounds (five for FedFomo, whose affinities need uploads to choose
 * among) at lr 0.05, --join 0.6 (APPLE: 1, it is cross-silo), so the
 * selections differ between rounds and a slot index is not a client index;
 * a class missing on some clients makes per-class statistics matter.
 * Comparisons are to float rounding (wiring_close), never bitwise. */
#include "wiring.h"

#include "algos/apple.h"
#include "algos/fedfomo.h"
#include "algos/partialfed.h"

enum { N = WIRING_CLIENTS };

/* ---- shared pieces ---- */

typedef struct {
    float *client[N]; /* per client: what the test expects it to hold (a whole vector) */
    float *expected;  /* the global model the round should produce */
    float *upload[N]; /* per slot: the upload */
    int checked;      /* rounds whose results were compared */
} pers_ref;

static void pers_ref_init(pers_ref *r, const wiring_fed *w) {
    for (int c = 0; c < N; c++) {
        r->client[c] = tiny_floats(w->V);
        memcpy(r->client[c], w->f.fl.global, w->V * sizeof(float));
        r->upload[c] = tiny_floats(w->V);
    }
    r->expected = tiny_floats(w->V);
    memcpy(r->expected, w->f.fl.global, w->V * sizeof(float));
    r->checked = 0;
}

static void pers_ref_free(pers_ref *r) {
    for (int c = 0; c < N; c++) free(r->client[c]), free(r->upload[c]);
    free(r->expected);
}

/* expected = the global model with every row not in `personal` replaced by the mean by training samples of
 * the n uploads (the personal rows keep the server's previous values). */
static void pers_mean_rows(wiring_fed *w, pers_ref *r, const int *sel, int n, const bool *personal) {
    double weight[N];
    wiring_sample_weights(sel, n, weight);
    memcpy(r->expected, w->f.fl.global, w->V * sizeof(float));
    const pfl_model *m = w->f.fl.model;
    for (int l = 0; l < pfl_model_rows(m); l++)
        if (!personal || !personal[l]) wiring_mean(r->expected, r->upload, weight, n, m->layers[l].offset, m->layers[l].length);
}

static void pers_check_global(wiring_fed *w, const char *name, int round, const float *expected) {
    CHECK(wiring_close(w->f.fl.global, expected, 0, w->V),
          "%s round %d: the global model is not the sample-weighted mean of the selected clients' uploads (max diff %g)",
          name, round, wiring_max_diff(w->f.fl.global, expected, 0, w->V));
}

/* The client's model as the run holds it now against the expected one. */
static void pers_check_held(wiring_fed *w, const char *name, int round, int c, const float *expected) {
    float *held = tiny_floats(w->V);
    wiring_client_model(w, c, held);
    CHECK(wiring_close(held, expected, 0, w->V), "%s round %d client %d: the model it holds is not the expected one (max diff %g)",
          name, round, c, wiring_max_diff(held, expected, 0, w->V));
    free(held);
}

/* The personalized model the method builds for evaluation (its personal_model hook, as the run's evaluation
 * calls it); it must be the expected one, to float rounding. */
static const float *pers_personal(wiring_fed *w, const char *name, int round, int c, const float *expected) {
    pfl_fl *fl = &w->f.fl;
    const float *p = (fl->algo->personal_model ? fl->algo->personal_model : pfl_default_personal_model)(
        fl, c, fl->workers[0].model);
    CHECK(wiring_close(p, expected, 0, w->V), "%s round %d client %d: the personalized model is not the expected one (max diff %g)",
          name, round, c, wiring_max_diff(p, expected, 0, w->V));
    return p;
}

/* The model scored: the personalized model is the expected one, and what the run scored for client c is its
 * accuracy (counted on the run's own vector, so a near tie between two roundings cannot flip a sample). */
static void pers_check_scored(wiring_fed *w, const char *name, int round, int c, const float *expected) {
    const double acc = wiring_accuracy(w, pers_personal(w, name, round, c, expected), c, true);
    CHECK(fabs(w->rounds[round].client_acc[c] - acc) < 1e-12, "%s round %d client %d: scored %g, the expected model's %g",
          name, round, c, w->rounds[round].client_acc[c], acc);
}

/* The training-sample count of class y on client c. */
static int pers_class_count(const wiring_fed *w, int c, int y) {
    const pfl_client_data *cd = &w->f.part.clients[c];
    int n = 0;
    for (int i = 0; i < cd->n_train; i++) n += w->f.d.labels[cd->train[i]] == y;
    return n;
}

/* The gradient of the mean cross-entropy of `params` on samples idx[0..n) into grads (host), a training
 * forward; returns the loss. */
static float pers_gradient(pfl_fl *fl, pfl_exec *x, const float *params, pfl_xbuf *grads, const int *idx, int n,
                           pfl_rng *dropout) {
    const size_t P = fl->model->num_params, V = pfl_model_vector_len(fl->model);
    pfl_exec_gather(x, idx, n);
    pfl_xbuf p = pfl_exec_view_const(x, params, V);
    pfl_exec_zero(x, grads, 0, P);
    pfl_exec_forward(x, &p, true, dropout);
    const float loss = pfl_exec_xent(x, NULL);
    pfl_exec_backward(x, &p, grads, 0, 1.0f, NULL, 0);
    pfl_exec_unview(x, &p);
    return loss;
}

static void pers_descend(float *params, const float *g, size_t P, double step) {
    for (size_t i = 0; i < P; i++) params[i] = (float)((double)params[i] - step * (double)g[i]);
}

/* Correct predictions of a method's own output on a batch of B samples whose features entering the backbone's
 * output layer are h (B x D). */
typedef int (*pers_predict)(const wiring_fed *w, const float *params, const float *h, const uint8_t *labels, int B);

/* The accuracy of `params` on the client's test split through `predict`, computed here from the backbone's
 * features (evaluation mode), not through the method's personal_correct. */
static double pers_accuracy_by(wiring_fed *w, const float *params, int c, pers_predict predict) {
    pfl_fl *fl = &w->f.fl;
    pfl_exec *x = fl->workers[0].exec;
    const pfl_client_data *cd = &fl->part->clients[c];
    const int E = fl->cfg.eval_batch, L = fl->model->num_layers;
    float *scratch = tiny_floats((size_t)E * (size_t)pfl_model_layer_input_size(fl->model, L - 1));
    pfl_xbuf p = pfl_exec_view_const(x, params, w->V);
    long correct = 0;
    for (int at = 0; at < cd->n_test; at += E) {
        const int B = cd->n_test - at < E ? cd->n_test - at : E;
        pfl_exec_gather(x, cd->test + at, B);
        pfl_exec_forward(x, &p, false, NULL);
        correct += predict(w, params, pfl_exec_features(x, L - 1, scratch), pfl_exec_labels(x), B);
    }
    pfl_exec_unview(x, &p);
    free(scratch);
    return (double)correct / cd->n_test;
}

static void pers_check_scored_by(wiring_fed *w, const char *name, int round, int c, const float *expected,
                                 pers_predict predict) {
    const double acc = pers_accuracy_by(w, pers_personal(w, name, round, c, expected), c, predict);
    CHECK(fabs(w->rounds[round].client_acc[c] - acc) < 1e-12, "%s round %d client %d: scored %g, its own output gives %g",
          name, round, c, w->rounds[round].client_acc[c], acc);
}

static void pers_run(wiring_fed *w, const char *name, wiring_hook hook, pers_ref *ref, int rounds) {
    CHECK(wiring_run(w, hook, ref) == 0, "%s: the run failed", name);
    CHECK(ref->checked == rounds + 1, "%s: %d of %d evaluations checked", name, ref->checked, rounds + 1);
}

/* ---- FedRoD: the balanced-softmax generic model averaged, a personal head per client ---- */

typedef struct {
    pers_ref r;
    float *head[N], *grad; /* each client's personal head (the output layer's weight then bias) */
    int D;
} fedrod_ref;

typedef struct {
    float *head, *grad, lr;
    int D;
} fedrod_block;

static void fedrod_block_step(void *ctx, const pfl_block_batch *b) {
    const fedrod_block *h = ctx;
    pfl_fedrod_head_step(h->head, b->features, b->logits, b->labels, b->B, h->D, WIRING_CLASSES, h->lr, h->grad);
}

/* Round `round`: each selected client trains the global model with the balanced softmax (log of its
 * training counts per class added to the logits) and its personal head beside it. */
static void fedrod_expect(wiring_fed *w, fedrod_ref *f, int round) {
    int sel[N];
    const int n = wiring_selected(w, round, sel), out = w->f.fl.model->num_layers - 1;
    for (int k = 0; k < n; k++) {
        const int c = sel[k];
        float offset[WIRING_CLASSES];
        for (int y = 0; y < WIRING_CLASSES; y++) {
            const int count = pers_class_count(w, c, y);
            offset[y] = count > 0 ? logf((float)count) : -INFINITY;
        }
        memcpy(f->r.upload[k], w->f.fl.global, w->V * sizeof(float));
        pfl_step s = wiring_default_step(w, round);
        s.ce_offset = offset;
        fedrod_block blk = {f->head[c], f->grad, s.opt.lr, f->D};
        pfl_step_add_block(&s, out, fedrod_block_step, &blk);
        wiring_train(w, c, round, f->r.upload[k], &s);
    }
    pers_mean_rows(w, &f->r, sel, n, NULL);
}

static int fedrod_hook(wiring_fed *w, int round, void *ctx) {
    fedrod_ref *f = ctx;
    const pfl_layer *out = &w->f.fl.model->layers[w->f.fl.model->num_layers - 1];
    if (round > 0) pers_check_global(w, "fedrod", round, f->r.expected);
    for (int c = 0; c < N; c++) { /* the global model with the output layer W_g + W_p, b_g + b_p */
        float *p = f->r.client[c];
        memcpy(p, w->f.fl.global, w->V * sizeof(float));
        for (size_t j = 0; j < out->length; j++) p[out->offset + j] += f->head[c][j];
        pers_check_scored(w, "fedrod", round, c, p);
    }
    f->r.checked++;
    if (round < w->f.fl.cfg.rounds) fedrod_expect(w, f, round + 1);
    return 0;
}

static void test_fedrod(void) {
    pfl_config cfg = wiring_config(&pfl_algo_fedrod, WIRING_MLP3);
    wiring_fed w;
    wiring_init(&w, &pfl_algo_fedrod, &cfg, WIRING_MLP3);
    fedrod_ref f;
    pers_ref_init(&f.r, &w);
    const pfl_layer *out = &w.f.fl.model->layers[w.f.fl.model->num_layers - 1];
    f.D = (int)(out->length / WIRING_CLASSES) - 1;
    f.grad = tiny_floats(out->length);
    for (int c = 0; c < N; c++) { /* PFLlib: a copy of the initial generic head */
        f.head[c] = tiny_floats(out->length);
        memcpy(f.head[c], w.f.fl.global + out->offset, out->length * sizeof(float));
    }
    pers_run(&w, "fedrod", fedrod_hook, &f.r, cfg.rounds);
    for (int c = 0; c < N; c++) free(f.head[c]);
    free(f.grad);
    pers_ref_free(&f.r);
    wiring_free(&w);
}

/* ---- Per-FedAvg (first-order, PFLlib's reading): meta-steps on D, D'; personalized by alpha steps ---- */

typedef struct {
    float alpha, beta;
} perfedavg_sizes;

/* One meta-step on a chunk of 2 x --batch samples, its halves D and D': w' = w - alpha grad f(w; D),
 * w <- w - beta grad f(w'; D'). */
static bool perfedavg_meta_batch(void *ctx, pfl_owned_batch *b) {
    const perfedavg_sizes *s = ctx;
    pfl_fl *fl = b->fl;
    const size_t P = fl->model->num_params, V = pfl_model_vector_len(fl->model);
    float *model = pfl_exec_host(b->model), *inner = b->w->aux;
    const int first = b->B / 2 + b->B % 2;
    pers_gradient(fl, b->x, model, &b->w->grads, b->idx, first, b->dropout);
    memcpy(inner, model, V * sizeof(float));
    pers_descend(inner, pfl_exec_host(&b->w->grads), P, s->alpha);
    pers_gradient(fl, b->x, inner, &b->w->aux_grads, b->idx + first, b->B - first, b->dropout);
    pers_descend(model, pfl_exec_host(&b->w->aux_grads), P, s->beta);
    return true;
}

/* The personalized model for round `round`: `steps` gradient steps of size alpha on batches of --batch of
 * the client's training split, in the order of the stream (seed, round, client, ADAPT). */
static void perfedavg_personalize(wiring_fed *w, int c, int round, float *model, float alpha, int steps) {
    pfl_fl *fl = &w->f.fl;
    pfl_worker *wk = &fl->workers[0];
    const pfl_client_data *cd = &fl->part->clients[c];
    const int B = fl->cfg.batch;
    int *order = malloc(sizeof(int) * (size_t)cd->n_train);
    memcpy(order, cd->train, sizeof(int) * (size_t)cd->n_train);
    pfl_rng rng = pfl_rng_stream(fl->cfg.seed, round, c, PFL_RNG_ADAPT);
    for (int s = 0, start = cd->n_train; s < steps; s++, start += B) {
        if (start >= cd->n_train) pfl_rng_shuffle(&rng, order, (size_t)cd->n_train), start = 0;
        const int n = cd->n_train - start < B ? cd->n_train - start : B;
        pers_gradient(fl, wk->exec, model, &wk->grads, order + start, n, &rng);
        pers_descend(model, pfl_exec_host(&wk->grads), fl->model->num_params, alpha);
    }
    free(order);
}

typedef struct {
    pers_ref r;
    perfedavg_sizes sizes;
    int steps;
} perfedavg_ref;

static void perfedavg_expect(wiring_fed *w, perfedavg_ref *f, int round) {
    int sel[N];
    const int n = wiring_selected(w, round, sel), B = w->f.fl.cfg.batch;
    for (int k = 0; k < n; k++) {
        const int c = sel[k], n_train = wiring_train_n[c];
        /* chunks of 2 B, a last one of fewer than 2 samples left out; PFLlib trains twice a round */
        const int per_pass = n_train / (2 * B) + (n_train % (2 * B) >= 2);
        memcpy(f->r.upload[k], w->f.fl.global, w->V * sizeof(float));
        pfl_step s = wiring_default_step(w, round);
        s.batch = 2 * B, s.min_batch = 2, s.steps = 2 * per_pass * w->f.fl.cfg.epochs;
        s.own = perfedavg_meta_batch, s.own_ctx = &f->sizes;
        wiring_train(w, c, round, f->r.upload[k], &s);
    }
    pers_mean_rows(w, &f->r, sel, n, NULL);
}

static int perfedavg_hook(wiring_fed *w, int round, void *ctx) {
    perfedavg_ref *f = ctx;
    if (round > 0) pers_check_global(w, "perfedavg", round, f->r.expected);
    for (int c = 0; c < N; c++) {
        memcpy(f->r.client[c], w->f.fl.global, w->V * sizeof(float));
        perfedavg_personalize(w, c, round + 1, f->r.client[c], f->sizes.alpha, f->steps);
        CHECK(wiring_differ(f->r.client[c], w->f.fl.global, 0, w->V), "perfedavg: the personalization moved nothing");
        pers_check_scored(w, "perfedavg", round, c, f->r.client[c]);
    }
    f->r.checked++;
    if (round < w->f.fl.cfg.rounds) perfedavg_expect(w, f, round + 1);
    return 0;
}

static void test_perfedavg(void) {
    pfl_config cfg = wiring_config(&pfl_algo_perfedavg, WIRING_DNN);
    wiring_set(&cfg, &pfl_algo_perfedavg, "perfedavg-alpha", 0.02);
    wiring_set(&cfg, &pfl_algo_perfedavg, "perfedavg-beta", 0.07);
    wiring_set(&cfg, &pfl_algo_perfedavg, "perfedavg-steps", 3);
    wiring_fed w;
    wiring_init(&w, &pfl_algo_perfedavg, &cfg, WIRING_DNN);
    perfedavg_ref f = {.sizes = {0.02f, 0.07f}, .steps = 3};
    pers_ref_init(&f.r, &w);
    pers_run(&w, "perfedavg", perfedavg_hook, &f.r, cfg.rounds);
    pers_ref_free(&f.r);
    wiring_free(&w);
}

/* ---- FedPHP (PFLlib's reading): a client holds (1 - mu_r) G + mu_r S, trains it with an MMD toward G ---- */

typedef struct {
    pers_ref r; /* r.client: each client's last trained model S */
    float mu, lambda;
    float *mix;
} fedphp_ref;

/* mu_r = mu (r - 1) / R; out = (1 - mu_r) G + mu_r S. */
static void fedphp_mix(const wiring_fed *w, const fedphp_ref *f, const float *S, int round, float *out) {
    const double mu = (double)f->mu * (round - 1) / w->f.fl.cfg.rounds;
    for (size_t i = 0; i < w->V; i++) out[i] = (float)((1.0 - mu) * w->f.fl.global[i] + mu * S[i]);
}

static double fedphp_mmd(void *ctx, const pfl_term_batch *b, float *dz, int *correct) {
    (void)ctx, (void)correct;
    return pfl_mmd_rbf(b->z, b->refs[0], b->B, b->n, dz);
}

static void fedphp_expect(wiring_fed *w, fedphp_ref *f, int round, float *teacher) {
    int sel[N];
    const int n = wiring_selected(w, round, sel);
    memcpy(teacher, w->f.fl.global, w->V * sizeof(float));
    for (int k = 0; k < n; k++) {
        const int c = sel[k];
        fedphp_mix(w, f, f->r.client[c], round, f->r.upload[k]);
        pfl_step s = wiring_default_step(w, round);
        s.ce_weight = 1.0 - (double)f->lambda;
        const pfl_loss_term mmd = {.name = "MMD toward the global model", .at = w->f.fl.model->num_layers - 1,
                                   .weight = f->lambda, .refs = {teacher}, .num_refs = 1, .refs_train = true,
                                   .value = fedphp_mmd};
        pfl_step_add_term(&s, &mmd);
        wiring_train(w, c, round, f->r.upload[k], &s);
    }
    pers_mean_rows(w, &f->r, sel, n, NULL);
    for (int k = 0; k < n; k++) memcpy(f->r.client[sel[k]], f->r.upload[k], w->V * sizeof(float));
}

typedef struct {
    fedphp_ref *f;
    float *teacher;
} fedphp_ctx;

static int fedphp_hook(wiring_fed *w, int round, void *ctx) {
    fedphp_ctx *h = ctx;
    fedphp_ref *f = h->f;
    if (round > 0) pers_check_global(w, "fedphp", round, f->r.expected);
    for (int c = 0; c < N; c++) {
        pers_check_held(w, "fedphp", round, c, f->r.client[c]); /* S, its last trained model */
        fedphp_mix(w, f, f->r.client[c], round + 1, f->mix);     /* scored: the mix it holds for the next round */
        pers_check_scored(w, "fedphp", round, c, f->mix);
    }
    f->r.checked++;
    if (round < w->f.fl.cfg.rounds) fedphp_expect(w, f, round + 1, h->teacher);
    return 0;
}

static void test_fedphp(void) {
    pfl_config cfg = wiring_config(&pfl_algo_fedphp, WIRING_MLP3);
    wiring_set(&cfg, &pfl_algo_fedphp, "php-mu", 0.7);
    wiring_set(&cfg, &pfl_algo_fedphp, "php-lambda", 0.3);
    wiring_fed w;
    wiring_init(&w, &pfl_algo_fedphp, &cfg, WIRING_MLP3);
    fedphp_ref f = {.mu = 0.7f, .lambda = 0.3f};
    pers_ref_init(&f.r, &w);
    f.mix = tiny_floats(w.V);
    fedphp_ctx h = {&f, tiny_floats(w.V)};
    CHECK(wiring_run(&w, fedphp_hook, &h) == 0, "fedphp: the run failed");
    CHECK(f.r.checked == cfg.rounds + 1, "fedphp: %d evaluations checked", f.r.checked);
    free(h.teacher), free(f.mix);
    pers_ref_free(&f.r);
    wiring_free(&w);
}


/* ---- APFL (PFLlib's reading): w trains as FedAvg's, v beside it, alpha learned; v becomes the mix ---- */

typedef struct {
    float *v, *alpha, lr;
} apfl_batch_ref;

/* One batch: w's step, v's step on its own loss, then alpha from the stepped models (clientapfl.py):
 * alpha <- clip(alpha - lr (<v - w, alpha grad f(v) + (1 - alpha) grad f(w)> + 0.02 alpha)). */
static bool apfl_ref_batch(void *ctx, pfl_owned_batch *b) {
    apfl_batch_ref *a = ctx;
    pfl_fl *fl = b->fl;
    const size_t P = fl->model->num_params;
    float *model = pfl_exec_host(b->model);
    const float *gw = pfl_exec_host(&b->w->grads), *gv = pfl_exec_host(&b->w->aux_grads);
    pers_gradient(fl, b->x, model, &b->w->grads, b->idx, b->B, b->dropout);
    pers_descend(model, gw, P, a->lr);
    pers_gradient(fl, b->x, a->v, &b->w->aux_grads, b->idx, b->B, b->dropout);
    pers_descend(a->v, gv, P, a->lr);
    const double alpha = *a->alpha;
    double dot = 0.0;
    for (size_t j = 0; j < P; j++) dot += ((double)a->v[j] - model[j]) * (alpha * gv[j] + (1.0 - alpha) * gw[j]);
    const double next = alpha - a->lr * (dot + 0.02 * alpha);
    *a->alpha = (float)(next < 0.0 ? 0.0 : next > 1.0 ? 1.0 : next);
    return true;
}

typedef struct {
    pers_ref r; /* r.client: each client's v */
    float alpha[N];
} apfl_ref;

static void apfl_expect(wiring_fed *w, apfl_ref *f, int round) {
    int sel[N];
    const int n = wiring_selected(w, round, sel);
    for (int k = 0; k < n; k++) {
        const int c = sel[k];
        float *v = f->r.client[c], *wk = f->r.upload[k];
        memcpy(wk, w->f.fl.global, w->V * sizeof(float)); /* w starts from the global model */
        pfl_step s = wiring_default_step(w, round);
        apfl_batch_ref a = {v, &f->alpha[c], s.opt.lr};
        s.own = apfl_ref_batch, s.own_ctx = &a;
        wiring_train(w, c, round, wk, &s);
        const double al = f->alpha[c]; /* v <- alpha v + (1 - alpha) w */
        for (size_t j = 0; j < w->P; j++) v[j] = (float)(al * v[j] + (1.0 - al) * wk[j]);
    }
    pers_mean_rows(w, &f->r, sel, n, NULL);
}

static int apfl_hook(wiring_fed *w, int round, void *ctx) {
    apfl_ref *f = ctx;
    if (round > 0) pers_check_global(w, "apfl", round, f->r.expected);
    for (int c = 0; c < N; c++) {
        pers_check_held(w, "apfl", round, c, f->r.client[c]);
        CHECK(check_close(pfl_apfl_alpha(&w->f.fl, c), f->alpha[c], 1e-5), "apfl round %d client %d: alpha %g, expected %g",
              round, c, (double)pfl_apfl_alpha(&w->f.fl, c), (double)f->alpha[c]);
        pers_check_scored(w, "apfl", round, c, f->r.client[c]);
    }
    f->r.checked++;
    if (round < w->f.fl.cfg.rounds) apfl_expect(w, f, round + 1);
    return 0;
}

static void test_apfl(void) {
    pfl_config cfg = wiring_config(&pfl_algo_apfl, WIRING_DNN);
    wiring_set(&cfg, &pfl_algo_apfl, "apfl-alpha", 0.4);
    wiring_fed w;
    wiring_init(&w, &pfl_algo_apfl, &cfg, WIRING_DNN);
    apfl_ref f;
    pers_ref_init(&f.r, &w);
    for (int c = 0; c < N; c++) f.alpha[c] = 0.4f;
    pers_run(&w, "apfl", apfl_hook, &f.r, cfg.rounds);
    bool moved = false; /* alpha learned on the clients that trained */
    for (int c = 0; c < N; c++) moved |= fabsf(f.alpha[c] - 0.4f) > 1e-4f;
    CHECK(moved, "apfl: alpha never moved");
    pers_ref_free(&f.r);
    wiring_free(&w);
}

/* ---- FedFomo: a client of the next round starts from its downloads weighted by first-order improvement ---- */

typedef struct {
    pers_ref r;           /* r.client: what each client holds */
    float *server[N];     /* each client's latest upload */
    bool has[N];
    float *old[N];        /* theta_old: where its last training started */
    double aff[N][N];     /* P, 1 on the diagonal at the start */
    double pending[N][N]; /* the weights of its last initialization, added to P when it uploads */
    int M;
    float val;
} fomo_ref;

static int fomo_val_count(const fomo_ref *f, int c) { return (int)floorf(f->val * (float)wiring_train_n[c]); }

/* The mean cross-entropy of `params` over the client's held-out samples (its training split's last ones),
 * evaluation mode. */
static double fomo_val_loss(wiring_fed *w, const fomo_ref *f, int c, const float *params) {
    pfl_fl *fl = &w->f.fl;
    pfl_exec *x = fl->workers[0].exec;
    const pfl_client_data *cd = &fl->part->clients[c];
    const int n = fomo_val_count(f, c), *idx = cd->train + cd->n_train - n, E = fl->cfg.eval_batch;
    pfl_xbuf p = pfl_exec_view_const(x, params, w->V);
    double sum = 0.0;
    for (int at = 0; at < n; at += E) {
        const int B = n - at < E ? n - at : E;
        pfl_exec_gather(x, idx + at, B);
        pfl_exec_forward(x, &p, false, NULL);
        sum += (double)pfl_exec_xent(x, NULL) * B;
    }
    pfl_exec_unview(x, &p);
    return n > 0 ? sum / n : 0.0;
}

/* The broadcast before round `round` for a client that joins it: its M downloads of highest affinity
 * (ties: the lower client), the weights against theta_old, the combination of the positive ones. */
static void fomo_receive_ref(wiring_fed *w, fomo_ref *f, int c) {
    int chosen[N], m = 0;
    for (int j = 0; j < N; j++)
        if (f->has[j]) chosen[m++] = j;
    for (int i = 1; i < m; i++) /* by affinity, descending, stable */
        for (int j = i; j > 0 && f->aff[c][chosen[j]] > f->aff[c][chosen[j - 1]]; j--) {
            const int t = chosen[j];
            chosen[j] = chosen[j - 1], chosen[j - 1] = t;
        }
    if (m > f->M) m = f->M;
    double weight[N], positive = 0.0;
    const double base = fomo_val_loss(w, f, c, f->old[c]);
    for (int j = 0; j < N; j++) f->pending[c][j] = 0.0;
    for (int k = 0; k < m; k++) {
        const float *theta = f->server[chosen[k]];
        double d2 = 0.0;
        for (size_t i = 0; i < w->P; i++) d2 += ((double)theta[i] - f->old[c][i]) * ((double)theta[i] - f->old[c][i]);
        weight[k] = (base - fomo_val_loss(w, f, c, theta)) / (sqrt(d2) + 1e-5);
        f->pending[c][chosen[k]] = weight[k];
        if (weight[k] > 0.0) positive += weight[k];
    }
    if (!(positive > 0.0)) return;
    for (size_t i = 0; i < w->P; i++) {
        double acc = 0.0;
        for (int k = 0; k < m; k++)
            if (weight[k] > 0.0) acc += weight[k] / positive * f->server[chosen[k]][i];
        f->r.client[c][i] = (float)acc;
    }
}

/* Round `round`: each selected client trains from what it holds on its split less the held-out part,
 * keeps the trained model, uploads it; its row of P gains its pending weights. */
static void fomo_train_ref(wiring_fed *w, fomo_ref *f, int round) {
    int sel[N];
    const int n = wiring_selected(w, round, sel);
    for (int k = 0; k < n; k++) {
        const int c = sel[k];
        const pfl_client_data *cd = &w->f.fl.part->clients[c];
        memcpy(f->old[c], f->r.client[c], w->V * sizeof(float));
        pfl_step s = wiring_default_step(w, round);
        s.samples = cd->train, s.n_samples = cd->n_train - fomo_val_count(f, c);
        wiring_train(w, c, round, f->r.client[c], &s);
        for (int j = 0; j < N; j++) f->aff[c][j] += f->pending[c][j];
    }
    for (int k = 0; k < n; k++) {
        memcpy(f->server[sel[k]], f->r.client[sel[k]], w->V * sizeof(float));
        f->has[sel[k]] = true;
    }
}

static int fomo_hook(wiring_fed *w, int round, void *ctx) {
    fomo_ref *f = ctx;
    if (round < w->f.fl.cfg.rounds) { /* the broadcast for the next round has run */
        int sel[N];
        const int n = wiring_selected(w, round + 1, sel);
        for (int k = 0; k < n; k++) fomo_receive_ref(w, f, sel[k]);
    }
    for (int c = 0; c < N; c++) {
        pers_check_held(w, "fedfomo", round, c, f->r.client[c]);
        pers_check_scored(w, "fedfomo", round, c, f->r.client[c]);
        for (int j = 0; j < N; j++)
            CHECK(check_close(pfl_fedfomo_affinity(&w->f.fl, c, j), f->aff[c][j], 1e-4),
                  "fedfomo round %d: P[%d][%d] %g, expected %g", round, c, j, pfl_fedfomo_affinity(&w->f.fl, c, j),
                  f->aff[c][j]);
    }
    f->r.checked++;
    if (round < w->f.fl.cfg.rounds) fomo_train_ref(w, f, round + 1);
    return 0;
}

static void test_fedfomo(void) {
    pfl_config cfg = wiring_config(&pfl_algo_fedfomo, WIRING_DNN);
    cfg.rounds = 6;
    wiring_set(&cfg, &pfl_algo_fedfomo, "fomo-m", 3);
    wiring_set(&cfg, &pfl_algo_fedfomo, "fomo-val", 0.3);
    wiring_fed w;
    wiring_init(&w, &pfl_algo_fedfomo, &cfg, WIRING_DNN);
    fomo_ref f = {.M = 3, .val = 0.3f};
    pers_ref_init(&f.r, &w);
    for (int c = 0; c < N; c++) {
        f.server[c] = tiny_floats(w.V), f.old[c] = tiny_floats(w.V);
        memcpy(f.old[c], w.f.fl.global, w.V * sizeof(float));
        f.aff[c][c] = 1.0;
    }
    pers_run(&w, "fedfomo", fomo_hook, &f.r, cfg.rounds);
    for (int c = 0; c < N; c++) free(f.server[c]), free(f.old[c]);
    pers_ref_free(&f.r);
    wiring_free(&w);
}

/* Sets the run's round to `round` while a method's own piece that reads it runs; returns the one it had. */
static int pers_enter(wiring_fed *w, int round) {
    const int keep = w->f.fl.round;
    w->f.fl.round = round;
    return keep;
}

/* ---- APPLE (PFLlib's reading): cores and DR vectors, every client every round ---- */

typedef struct {
    pers_ref r; /* r.client: each client's core */
    float p[N][N];
    float mu, L;
} apple_ref;

typedef struct {
    float *core, *p;
    double lambda_mu;
} apple_batch_ref;

/* Each batch: PFLlib's step (pfl_apple_step_pfllib: w_i rebuilt from the cores, the core's step, then p_i's). */
static bool apple_ref_batch(void *ctx, pfl_owned_batch *b) {
    apple_batch_ref *a = ctx;
    pfl_exec_gather(b->x, b->idx, b->B);
    float loss;
    int correct;
    pfl_apple_step_pfllib(b->fl, b->client, b->w, a->core, a->p, pfl_exec_host(b->model), a->lambda_mu, b->dropout,
                          &loss, &correct);
    return true;
}

/* lambda of round r as PFLlib's clients pull with it: 1 in rounds 1 and 2 (set at the end of a round from
 * that round's index), then the cos schedule over the first floor(L R) rounds. */
static double apple_lambda(const wiring_fed *w, const apple_ref *f, int round) {
    if (round <= 1) return 1.0;
    const int last = (int)(f->L * (float)w->f.fl.cfg.rounds), r = round - 2;
    if (r >= last) return 0.0;
    return (cos(3.14159265358979323846 * r / last) + 1.0) / 2.0;
}

static void apple_expect(wiring_fed *w, apple_ref *f, int round) {
    int sel[N];
    const int n = wiring_selected(w, round, sel);
    CHECK(n == N, "apple: every client joins every round");
    float *core = tiny_floats(w->V);
    const int keep = pers_enter(w, round);
    for (int c = 0; c < N; c++) {
        memcpy(core, f->r.client[c], w->V * sizeof(float));
        pfl_step s = wiring_default_step(w, round);
        apple_batch_ref a = {core, f->p[c], apple_lambda(w, f, round) * f->mu};
        s.own = apple_ref_batch, s.own_ctx = &a;
        wiring_train(w, c, round, f->r.upload[c], &s);
    }
    w->f.fl.round = keep;
    for (int c = 0; c < N; c++) memcpy(f->r.client[c], f->r.upload[c], w->V * sizeof(float)); /* the new core: w_i */
    free(core);
}

static int apple_hook(wiring_fed *w, int round, void *ctx) {
    apple_ref *f = ctx;
    for (int c = 0; c < N; c++) {
        const float *core = pfl_apple_core(&w->f.fl, c), *p = pfl_apple_dr(&w->f.fl, c);
        CHECK(wiring_close(core, f->r.client[c], 0, w->V), "apple round %d client %d: the server's core (max diff %g)",
              round, c, wiring_max_diff(core, f->r.client[c], 0, w->V));
        CHECK(wiring_close(p, f->p[c], 0, N), "apple round %d client %d: its DR vector (max diff %g)", round, c,
              wiring_max_diff(p, f->p[c], 0, N));
        pers_check_held(w, "apple", round, c, f->r.client[c]);
        pers_check_scored(w, "apple", round, c, f->r.client[c]);
    }
    f->r.checked++;
    if (round < w->f.fl.cfg.rounds) apple_expect(w, f, round + 1);
    return 0;
}

static void test_apple(void) {
    pfl_config cfg = wiring_config(&pfl_algo_apple, WIRING_DNN);
    cfg.join = 1.0;
    wiring_set(&cfg, &pfl_algo_apple, "apple-dr-lr", 0.03);
    wiring_set(&cfg, &pfl_algo_apple, "apple-mu", 0.4);
    wiring_set(&cfg, &pfl_algo_apple, "apple-l", 0.7);
    wiring_fed w;
    wiring_init(&w, &pfl_algo_apple, &cfg, WIRING_DNN);
    apple_ref f = {.mu = 0.4f, .L = 0.7f};
    pers_ref_init(&f.r, &w);
    for (int c = 0; c < N; c++)
        for (int j = 0; j < N; j++) f.p[c][j] = 1.0f / N; /* PFLlib's self.ps */
    pers_run(&w, "apple", apple_hook, &f.r, cfg.rounds);
    pers_ref_free(&f.r);
    wiring_free(&w);
}

/* ---- PartialFed: per layer the global or the own layer by a learned strategy; f_m model, f_s strategy batches ---- */

typedef struct {
    pers_ref r; /* r.client: each client's own model */
    float logits[N][2 * PFL_MAX_LAYERS];
    float *init;
    int fm, fs;
    float tau, decay;
} partialfed_ref;

/* The partial initialization: layer l from the global model when its logit to load is at least the one to keep. */
static void partialfed_init_ref(const wiring_fed *w, const partialfed_ref *f, int c, float *out) {
    const pfl_model *m = w->f.fl.model;
    memcpy(out, f->r.client[c], w->V * sizeof(float));
    for (int l = 0; l < m->num_layers; l++)
        if (f->logits[c][2 * l] >= f->logits[c][2 * l + 1])
            memcpy(out + m->layers[l].offset, w->f.fl.global + m->layers[l].offset, m->layers[l].length * sizeof(float));
}

typedef struct {
    const partialfed_ref *f;
    float *logits, tau;
    pfl_rng gumbel;
} partialfed_batch_ref;

/* Of every f_m + f_s batches the first f_m are SGD on the model, the last f_s a strategy step. */
static bool partialfed_ref_batch(void *ctx, pfl_owned_batch *b) {
    partialfed_batch_ref *p = ctx;
    if (b->index % (p->f->fm + p->f->fs) < p->f->fm) return false;
    pfl_exec_gather(b->x, b->idx, b->B);
    float loss;
    int correct;
    pfl_partialfed_strategy_step(b->fl, b->w, pfl_exec_host(b->model), p->logits, p->tau, &p->gumbel, &loss, &correct);
    return true;
}

static void partialfed_expect(wiring_fed *w, partialfed_ref *f, int round) {
    int sel[N];
    const int n = wiring_selected(w, round, sel);
    for (int k = 0; k < n; k++) {
        const int c = sel[k];
        partialfed_init_ref(w, f, c, f->r.upload[k]);
        pfl_step s = wiring_default_step(w, round);
        partialfed_batch_ref p = {f, f->logits[c], (float)(f->tau * pow(f->decay, round - 1)),
                                  pfl_rng_stream(w->f.fl.cfg.seed, round, c, PFL_RNG_ALGO)};
        s.own = partialfed_ref_batch, s.own_ctx = &p;
        wiring_train(w, c, round, f->r.upload[k], &s);
    }
    pers_mean_rows(w, &f->r, sel, n, NULL);
    for (int k = 0; k < n; k++) memcpy(f->r.client[sel[k]], f->r.upload[k], w->V * sizeof(float));
}

static int partialfed_hook(wiring_fed *w, int round, void *ctx) {
    partialfed_ref *f = ctx;
    const int L = w->f.fl.model->num_layers;
    if (round > 0) pers_check_global(w, "partialfed", round, f->r.expected);
    for (int c = 0; c < N; c++) {
        pers_check_held(w, "partialfed", round, c, f->r.client[c]);
        CHECK(wiring_close(pfl_partialfed_logits(&w->f.fl, c), f->logits[c], 0, 2 * (size_t)L),
              "partialfed round %d client %d: its strategy (max diff %g)", round, c,
              wiring_max_diff(pfl_partialfed_logits(&w->f.fl, c), f->logits[c], 0, 2 * (size_t)L));
        partialfed_init_ref(w, f, c, f->init);
        pers_check_scored(w, "partialfed", round, c, f->init);
    }
    f->r.checked++;
    if (round < w->f.fl.cfg.rounds) partialfed_expect(w, f, round + 1);
    return 0;
}

static void test_partialfed(void) {
    pfl_config cfg = wiring_config(&pfl_algo_partialfed, WIRING_MLP3);
    wiring_set(&cfg, &pfl_algo_partialfed, "pf-tau", 3.0);
    wiring_set(&cfg, &pfl_algo_partialfed, "pf-tau-decay", 0.8);
    wiring_set(&cfg, &pfl_algo_partialfed, "pf-fm", 2);
    wiring_set(&cfg, &pfl_algo_partialfed, "pf-fs", 1);
    wiring_set(&cfg, &pfl_algo_partialfed, "pf-lr", 40.0);
    wiring_fed w;
    wiring_init(&w, &pfl_algo_partialfed, &cfg, WIRING_MLP3);
    partialfed_ref f = {.fm = 2, .fs = 1, .tau = 3.0f, .decay = 0.8f};
    memset(f.logits, 0, sizeof f.logits);
    pers_ref_init(&f.r, &w);
    f.init = tiny_floats(w.V);
    pers_run(&w, "partialfed", partialfed_hook, &f.r, cfg.rounds);
    /* the strategies learned: some client keeps one of its own layers */
    int kept = 0;
    for (int c = 0; c < N; c++)
        for (int l = 0; l < w.f.fl.model->num_layers; l++) kept += f.logits[c][2 * l] < f.logits[c][2 * l + 1];
    CHECK(kept > 0, "partialfed: no client keeps a layer of its own");
    free(f.init);
    pers_ref_free(&f.r);
    wiring_free(&w);
}

/* ---- FedCP: a policy routes the features to a personal and the global head; 0.5 heads uploaded ---- */

/* The rows of FedCP's model vector: the global head (the backbone's output layer), the personal head, the
 * policy's Linear and LayerNorm blocks after it. */
static pfl_fedcp_view fedcp_view_ref(const pfl_model *m, const float *v) {
    const int L = m->num_layers, C = m->classes, D = (int)pfl_model_layer_input_size(m, L - 1);
    const float *g = v + m->layers[L - 1].offset, *p = v + m->layers[L].offset, *fc = v + m->layers[L + 1].offset,
                *ln = v + m->layers[L + 2].offset;
    const pfl_fedcp_view view = {D, C, g, g + (size_t)C * D, p, p + (size_t)C * D, fc, fc + 2 * (size_t)D * D,
                                 ln, ln + 2 * (size_t)D};
    return view;
}

/* FedCP's output without Gumbel noise: the policy routes h to the personal and the global head. */
static int fedcp_predict(const wiring_fed *w, const float *params, const float *h, const uint8_t *labels, int B) {
    const pfl_model *m = w->f.fl.model;
    const pfl_fedcp_view v = fedcp_view_ref(m, params);
    float ctx[32], scratch[12 * 32], out[WIRING_CLASSES], pm[32];
    pfl_fedcp_context(v.wp, v.C, v.D, ctx);
    int correct = 0;
    for (int n = 0; n < B; n++) {
        pfl_fedcp_sample(&v, ctx, h + (size_t)n * v.D, NULL, labels[n], 1.0f, out, pm, scratch, NULL, NULL);
        correct += pfl_argmax(out, v.C) == labels[n];
    }
    return correct;
}

typedef struct {
    const pfl_fl *fl;
    float lambda, *ctx, gumbel[64], scratch[12 * 32], out[WIRING_CLASSES], pm[32];
    pfl_rng noise;
} fedcp_term_ref;

/* The loss on the features h entering the global head: per sample the policy's routing (Gumbel noise as
 * torch draws it, -log(E), E ~ Exp(1)) and the cross-entropy of the two heads' sum, plus lambda MMD(h, h_base). */
static double fedcp_term_value(void *ctx, const pfl_term_batch *b, float *dz, int *correct) {
    fedcp_term_ref *t = ctx;
    const pfl_model *m = t->fl->model;
    const pfl_fedcp_view v = fedcp_view_ref(m, b->params);
    const pfl_fedcp_view gv = fedcp_view_ref(m, b->grads);
    const pfl_fedcp_grads g = {(float *)gv.wp, (float *)gv.bp, (float *)gv.fw, (float *)gv.fb, (float *)gv.lw, (float *)gv.lb};
    double loss = 0.0;
    *correct = 0;
    for (int n = 0; n < b->B; n++) {
        for (int i = 0; i < 2 * v.D; i++) {
            const double e = -log(1.0 - pfl_rng_uniform(&t->noise));
            t->gumbel[i] = (float)-log(e > 1e-30 ? e : 1e-30);
        }
        loss += pfl_fedcp_sample(&v, t->ctx, b->z + (size_t)n * v.D, t->gumbel, b->labels[n], 1.0f / b->B, t->out, t->pm,
                                 t->scratch, &g, dz + (size_t)n * v.D);
        *correct += pfl_argmax(t->out, v.C) == b->labels[n];
    }
    return (float)(loss / b->B + pfl_fedcp_mmd(b->z, b->refs[0], b->B, v.D, t->lambda, dz));
}

typedef struct {
    pers_ref r;       /* r.client: each client's model as it should hold it */
    float *head[N];   /* each client's personal head */
    float *base;
    float lambda;
} fedcp_ref;

static void fedcp_expect(wiring_fed *w, fedcp_ref *f, int round) {
    const pfl_model *m = w->f.fl.model;
    const int L = m->num_layers;
    const pfl_layer *hg = &m->layers[L - 1], *hp = &m->layers[L];
    int sel[N];
    const int n = wiring_selected(w, round, sel);
    for (int k = 0; k < n; k++) {
        const int c = sel[k];
        float *u = f->r.upload[k], ctx[32];
        memcpy(u, w->f.fl.global, w->V * sizeof(float)); /* the global model with its own personal head */
        memcpy(u + hp->offset, f->head[c], hp->length * sizeof(float));
        memcpy(f->base, u, w->V * sizeof(float));
        pfl_fedcp_context(u + hp->offset, m->classes, (int)pfl_model_layer_input_size(m, L - 1), ctx);
        fedcp_term_ref t = {.fl = &w->f.fl, .lambda = f->lambda, .ctx = ctx,
                            .noise = pfl_rng_stream(w->f.fl.cfg.seed, round, c, PFL_RNG_ALGO)};
        pfl_step s = wiring_default_step(w, round);
        s.ce_weight = 0.0;
        const pfl_loss_term term = {.name = "fedcp (test)", .at = L - 1, .weight = 1.0f, .refs = {f->base}, .num_refs = 1,
                                    .refs_train = true, .value = fedcp_term_value, .ctx = &t, .predicts = true};
        pfl_step_add_term(&s, &term);
        bool frozen[PFL_MAX_LAYERS] = {false};
        frozen[L - 1] = true; /* the global head learns nothing locally */
        s.opt.frozen = frozen;
        wiring_train(w, c, round, u, &s);
        memcpy(f->head[c], u + hp->offset, hp->length * sizeof(float));
        for (size_t j = 0; j < hg->length; j++) u[hg->offset + j] = 0.5f * u[hp->offset + j] + 0.5f * u[hg->offset + j];
    }
    bool personal[PFL_MAX_LAYERS] = {false};
    personal[L] = true;
    pers_mean_rows(w, &f->r, sel, n, personal);
}

static int fedcp_hook(wiring_fed *w, int round, void *ctx) {
    fedcp_ref *f = ctx;
    const pfl_layer *hp = &w->f.fl.model->layers[w->f.fl.model->num_layers];
    if (round > 0) pers_check_global(w, "fedcp", round, f->r.expected);
    for (int c = 0; c < N; c++) {
        memcpy(f->r.client[c], w->f.fl.global, w->V * sizeof(float));
        memcpy(f->r.client[c] + hp->offset, f->head[c], hp->length * sizeof(float));
        pers_check_held(w, "fedcp", round, c, f->r.client[c]);
        pers_check_scored_by(w, "fedcp", round, c, f->r.client[c], fedcp_predict);
    }
    f->r.checked++;
    if (round < w->f.fl.cfg.rounds) fedcp_expect(w, f, round + 1);
    return 0;
}

static void test_fedcp(void) {
    pfl_config cfg = wiring_config(&pfl_algo_fedcp, WIRING_MLP3);
    wiring_set(&cfg, &pfl_algo_fedcp, "fedcp-lambda", 2.5);
    cfg.weight_decay = 0.01f; /* so a global head left trainable would move */
    wiring_fed w;
    wiring_init(&w, &pfl_algo_fedcp, &cfg, WIRING_MLP3);
    fedcp_ref f = {.lambda = 2.5f};
    pers_ref_init(&f.r, &w);
    const pfl_layer *hp = &w.f.fl.model->layers[w.f.fl.model->num_layers];
    for (int c = 0; c < N; c++) { /* each personal head starts as the initial global head */
        f.head[c] = tiny_floats(hp->length);
        memcpy(f.head[c], w.f.fl.global + w.f.fl.model->layers[w.f.fl.model->num_layers - 1].offset,
               hp->length * sizeof(float));
    }
    f.base = tiny_floats(w.V);
    pers_run(&w, "fedcp", fedcp_hook, &f.r, cfg.rounds);
    for (int c = 0; c < N; c++) free(f.head[c]);
    free(f.base);
    pers_ref_free(&f.r);
    wiring_free(&w);
}

/* ---- GPFL: the valve, the category embeddings and the conditions; the head stays with each client ---- */

/* The rows of GPFL's model vector: the head (the backbone's output layer), then the GCE, the valve's gamma
 * and beta nets (Linear, LayerNorm each) and the two conditions. */
static pfl_gpfl_view gpfl_view_ref(const pfl_model *m, const float *v) {
    const int L = m->num_layers, C = m->classes, D = (int)pfl_model_layer_input_size(m, L - 1);
    const float *row[7];
    for (int i = 0; i < 7; i++) row[i] = v + m->layers[L - 1 + i].offset;
    const size_t DD = (size_t)D * D;
    const pfl_gpfl_view view = {D, C, row[0], row[0] + (size_t)C * D, row[1],
                                {row[2], row[2] + DD, row[3], row[3] + D}, {row[4], row[4] + DD, row[5], row[5] + D},
                                row[6], row[6] + D};
    return view;
}

/* GPFL's output: its head on the valve's personalized features CoV(h, p_i). */
static int gpfl_predict(const wiring_fed *w, const float *params, const float *h, const uint8_t *labels, int B) {
    const pfl_gpfl_view v = gpfl_view_ref(w->f.fl.model, params);
    float *fp = tiny_floats((size_t)B * v.D), *scratch = tiny_floats(6 * (size_t)v.D + 2);
    pfl_gpfl_valve(&v, v.cond_p, h, B, fp, scratch);
    int correct = 0;
    for (int n = 0; n < B; n++) {
        float z[WIRING_CLASSES];
        for (int y = 0; y < v.C; y++) {
            double acc = v.head_b[y];
            for (int d = 0; d < v.D; d++) acc += (double)v.head_w[(size_t)y * v.D + d] * fp[(size_t)n * v.D + d];
            z[y] = (float)acc;
        }
        correct += pfl_argmax(z, v.C) == labels[n];
    }
    free(fp), free(scratch);
    return correct;
}

typedef struct {
    const pfl_fl *fl;
    float lambda, *emb_frozen, *logits, *scratch;
} gpfl_term_ref;

static double gpfl_term_value(void *ctx, const pfl_term_batch *b, float *dz, int *correct) {
    gpfl_term_ref *t = ctx;
    const pfl_model *m = t->fl->model;
    const pfl_gpfl_view v = gpfl_view_ref(m, b->params), gv = gpfl_view_ref(m, b->grads);
    const pfl_gpfl_grads g = {(float *)gv.head_w, (float *)gv.head_b, (float *)gv.emb,
                              {(float *)gv.gamma.w, (float *)gv.gamma.b, (float *)gv.gamma.ln_w, (float *)gv.gamma.ln_b},
                              {(float *)gv.beta.w, (float *)gv.beta.b, (float *)gv.beta.ln_w, (float *)gv.beta.ln_b}};
    const float loss = pfl_gpfl_loss(&v, t->emb_frozen, t->lambda, b->z, b->labels, b->B, t->logits, &g, dz, t->scratch);
    *correct = 0;
    for (int n = 0; n < b->B; n++) *correct += pfl_argmax(t->logits + (size_t)n * v.C, v.C) == b->labels[n];
    return loss;
}

typedef struct {
    pers_ref r;      /* r.client: each client's model as it should hold it */
    float *own[N];   /* each client's model as it last trained it (head and conditions are what it keeps) */
    float lambda, mu;
} gpfl_ref;

/* The rows a client keeps: the head and the conditions. */
static bool gpfl_personal_row(const pfl_model *m, int l) { return l == m->num_layers - 1 || l == m->num_layers + 5; }

static void gpfl_held(const wiring_fed *w, const gpfl_ref *f, int c, float *out) {
    const pfl_model *m = w->f.fl.model;
    memcpy(out, w->f.fl.global, w->V * sizeof(float));
    for (int l = 0; l < pfl_model_rows(m); l++)
        if (gpfl_personal_row(m, l))
            memcpy(out + m->layers[l].offset, f->own[c] + m->layers[l].offset, m->layers[l].length * sizeof(float));
}

static void gpfl_expect(wiring_fed *w, gpfl_ref *f, int round) {
    const pfl_model *m = w->f.fl.model;
    const int L = m->num_layers, C = m->classes, D = (int)pfl_model_layer_input_size(m, L - 1), B = w->f.fl.cfg.batch;
    int sel[N];
    const int n = wiring_selected(w, round, sel);
    float *mem = tiny_floats((size_t)C * D + (size_t)B * C + pfl_gpfl_scratch(B, C, D));
    for (int k = 0; k < n; k++) {
        const int c = sel[k];
        float *u = f->r.upload[k];
        gpfl_held(w, f, c, u);
        gpfl_term_ref t = {&w->f.fl, f->lambda, mem, mem + (size_t)C * D, mem + (size_t)C * D + (size_t)B * C};
        memcpy(t.emb_frozen, u + m->layers[L].offset, (size_t)C * D * sizeof(float)); /* the GCE as received */
        pfl_step s = wiring_default_step(w, round);
        s.ce_weight = 0.0;
        const pfl_loss_term term = {.name = "gpfl (test)", .at = L - 1, .weight = 1.0f, .value = gpfl_term_value,
                                    .ctx = &t, .predicts = true};
        pfl_step_add_term(&s, &term);
        bool frozen[PFL_MAX_LAYERS] = {false};
        float decay[PFL_MAX_LAYERS];
        for (int l = 0; l < pfl_model_rows(m); l++) decay[l] = l < L ? w->f.fl.cfg.weight_decay : f->mu;
        frozen[L + 5] = true; /* the conditions are no parameters */
        s.opt.frozen = frozen, s.opt.row_decay = decay;
        wiring_train(w, c, round, u, &s);
        /* then the conditions from the trained GCE: generic the mean embedding, personalized by its class shares */
        const float *emb = u + m->layers[L].offset;
        float *cond = u + m->layers[L + 5].offset;
        for (int d = 0; d < D; d++) {
            double g = 0.0, p = 0.0;
            for (int y = 0; y < C; y++) {
                g += emb[(size_t)y * D + d] / C;
                p += (double)pers_class_count(w, c, y) / wiring_train_n[c] * emb[(size_t)y * D + d];
            }
            cond[d] = (float)g, cond[D + d] = (float)p;
        }
        memcpy(f->own[c], u, w->V * sizeof(float));
    }
    bool personal[PFL_MAX_LAYERS];
    for (int l = 0; l < pfl_model_rows(m); l++) personal[l] = gpfl_personal_row(m, l);
    pers_mean_rows(w, &f->r, sel, n, personal);
    free(mem);
}

static int gpfl_hook(wiring_fed *w, int round, void *ctx) {
    gpfl_ref *f = ctx;
    if (round > 0) pers_check_global(w, "gpfl", round, f->r.expected);
    for (int c = 0; c < N; c++) {
        gpfl_held(w, f, c, f->r.client[c]);
        pers_check_held(w, "gpfl", round, c, f->r.client[c]);
        pers_check_scored_by(w, "gpfl", round, c, f->r.client[c], gpfl_predict);
    }
    f->r.checked++;
    if (round < w->f.fl.cfg.rounds) gpfl_expect(w, f, round + 1);
    return 0;
}

static void test_gpfl(void) {
    pfl_config cfg = wiring_config(&pfl_algo_gpfl, WIRING_MLP3);
    wiring_set(&cfg, &pfl_algo_gpfl, "gpfl-lambda", 0.05);
    wiring_set(&cfg, &pfl_algo_gpfl, "gpfl-mu", 0.3);
    cfg.weight_decay = 0.01f; /* the backbone's decay, not the blocks' mu */
    wiring_fed w;
    wiring_init(&w, &pfl_algo_gpfl, &cfg, WIRING_MLP3);
    gpfl_ref f = {.lambda = 0.05f, .mu = 0.3f};
    pers_ref_init(&f.r, &w);
    for (int c = 0; c < N; c++) {
        f.own[c] = tiny_floats(w.V);
        memcpy(f.own[c], w.f.fl.global, w.V * sizeof(float));
    }
    pers_run(&w, "gpfl", gpfl_hook, &f.r, cfg.rounds);
    for (int c = 0; c < N; c++) free(f.own[c]);
    pers_ref_free(&f.r);
    wiring_free(&w);
}

int main(void) {
    test_fedcp();
    test_gpfl();
    test_apple();
    test_partialfed();
    test_apfl();
    test_fedfomo();
    test_fedrod();
    test_perfedavg();
    test_fedphp();
    TEST_MAIN_END();
}
