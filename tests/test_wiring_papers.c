/* The wiring of FedALA and FLAYER (the modules ALA and FLAYER's head mix,
 * per-layer rates and upload mask), FedAMP, pFedCFR, pFedMe, FedALP, CFL
 * and FedTSDP on the uneven federation (tests/wiring.h).
 *
 * Each test runs the method through the real round loop and, from a hook
 * after every round, computes the next round again here from what the
 * paper says, with the engine's pieces only (pfl_step_run with the step the
 * paper names, the module functions pfl_ala_apply and pfl_flayer_mask, the
 * clustering primitives), means in double over the selected clients with
 * the method's weights: what every client holds after the broadcast (its
 * personal parts as it trained them, the shared parts as the server sent
 * them), the server's models, and the accuracy the run reported for each
 * client, which must be that of the model the method scores.
 *
 * Why a wrong wiring fails here: the clients' sizes differ (23, 7, 15, 11,
 * 30), so a uniform mean is not a mean by samples, and a slot index is not
 * a client index (three of five clients a round, drawn anew each round);
 * classes are missing on some clients, so personalized models differ from
 * the global one and from each other; three or four rounds at lr 0.05, so
 * what a client keeps across a broadcast matters in a later round; and
 * every hyper-parameter is set away from 0 and 1 (and from its default), so
 * one ignored or applied to the wrong quantity changes the models. CFL and
 * FedTSDP run at --join 1 (they refuse less); the others at --join 0.6. */
#include "algos/amp.h"
#include "algos/cfl.h"
#include "algos/fedalp.h"
#include "algos/fedtsdp.h"
#include "cluster/cluster.h"
#include "wiring.h"

/* ---- shared pieces ---- */

typedef struct {
    float *v[WIRING_CLIENTS];
} per_client;

static void per_client_alloc(per_client *p, size_t n) {
    for (int c = 0; c < WIRING_CLIENTS; c++) p->v[c] = tiny_floats(n);
}

static void per_client_free(per_client *p) {
    for (int c = 0; c < WIRING_CLIENTS; c++) free(p->v[c]);
}

/* The model the run scores for client c (its personal_model hook, or the
 * model the client holds). */
static const float *scored_model(wiring_fed *w, int c, float *scratch) {
    pfl_fl *fl = &w->f.fl;
    if (fl->algo->personal_model) return fl->algo->personal_model(fl, c, scratch);
    return wiring_client_model(w, c, scratch);
}

/* After round `round`: every client's scored model is want[c] (to float
 * rounding), and the accuracy the run reported for it is that model's. */
static void check_scored(wiring_fed *w, int round, const char *who, float *const *want) {
    float *scratch = tiny_floats(w->V);
    for (int c = 0; c < WIRING_CLIENTS; c++) {
        const float *got = scored_model(w, c, scratch);
        CHECK(wiring_close(got, want[c], 0, w->V),
              "%s round %d client %d: the scored model is not the expected one (max diff %g)", who, round, c,
              wiring_max_diff(got, want[c], 0, w->V));
        if (!w->rounds[round].evaluated) continue;
        const double acc = wiring_accuracy(w, got, c, true);
        CHECK(fabs(w->rounds[round].client_acc[c] - acc) < 1e-12, "%s round %d client %d: scored %g, its model's %g",
              who, round, c, w->rounds[round].client_acc[c], acc);
    }
    free(scratch);
}

static void check_global(wiring_fed *w, int round, const char *who, const float *want, size_t len) {
    CHECK(wiring_close(w->f.fl.global, want, 0, len), "%s round %d: the global model is not the expected one (max diff %g)",
          who, round, wiring_max_diff(w->f.fl.global, want, 0, len));
}

/* Trains `model` as round r's local training of `client` with step s; the
 * training accuracy of its last epoch (FLAYER's A) in *acc if not NULL. */
static void train_stats(wiring_fed *w, int client, int round, float *model, pfl_step *s, float *acc) {
    pfl_train_stats st;
    memset(&st, 0, sizeof st);
    s->round = round;
    pfl_step_run(&w->f.fl, client, &w->f.fl.workers[0], model, s, &st);
    if (acc && st.last_epoch_samples > 0) *acc = (float)st.last_epoch_correct / (float)st.last_epoch_samples;
}

/* dst = src outside [off, off + len) (what the server sends), dst's own inside. */
static void keep_span(float *dst, const float *src, size_t V, size_t off, size_t len) {
    memcpy(dst, src, off * sizeof(float));
    memcpy(dst + off + len, src + off + len, (V - off - len) * sizeof(float));
}

static void copy_vec(float *dst, const float *src, size_t n) { memcpy(dst, src, n * sizeof(float)); }

/* The state every reference below keeps: the expected client models (as
 * scored after the broadcast), the expected global model, round scratch. */
typedef struct {
    per_client model, trained;
    float *global;
    int rounds_checked;
} ref_base;

static void ref_base_init(ref_base *b, const wiring_fed *w) {
    per_client_alloc(&b->model, w->V);
    per_client_alloc(&b->trained, w->V);
    b->global = wiring_copy_global(w);
    for (int c = 0; c < WIRING_CLIENTS; c++) copy_vec(b->model.v[c], w->f.fl.global, w->V);
    b->rounds_checked = 0;
}

static void ref_base_free(ref_base *b) {
    per_client_free(&b->model);
    per_client_free(&b->trained);
    free(b->global);
}

/* ---- FedALA: ALA at the broadcast (Algorithm 1; docs/algorithms.md "ALA") ----
 * FedAvg's rounds; a client keeps the top --ala-p layers (and its weights
 * W); the clients of the next round only get the global model below the
 * window and ALA's mix of it with their own layers in the window, W learned
 * until convergence the first time and one epoch afterwards. */

typedef struct {
    ref_base b;
    per_client weights;
    bool started[WIRING_CLIENTS];
    size_t off, len;
    pfl_ala_config ala;
} ala_ref;

static void ala_expect(wiring_fed *w, ala_ref *ref, int r) {
    pfl_fl *fl = &w->f.fl;
    int sel[WIRING_CLIENTS], next[WIRING_CLIENTS];
    double weight[WIRING_CLIENTS];
    const int n = wiring_selected(w, r, sel);
    for (int k = 0; k < n; k++) {
        copy_vec(ref->b.trained.v[k], ref->b.model.v[sel[k]], w->V);
        pfl_step s = wiring_default_step(w, r);
        wiring_train(w, sel[k], r, ref->b.trained.v[k], &s);
    }
    wiring_sample_weights(sel, n, weight);
    wiring_mean(ref->b.global, ref->b.trained.v, weight, n, 0, w->V);
    for (int k = 0; k < n; k++) copy_vec(ref->b.model.v[sel[k]], ref->b.trained.v[k], w->V);
    for (int c = 0; c < WIRING_CLIENTS; c++) keep_span(ref->b.model.v[c], ref->b.global, w->V, ref->off, ref->len);
    const int nn = wiring_selected(w, r + 1, next);
    pfl_worker *wk = &fl->workers[0];
    pfl_ala_buffers buf = {wk->exec, wk->aux, &wk->aux_grads, wk->order};
    for (int k = 0; k < nn; k++) {
        const int c = next[k];
        pfl_ala_client cl = {ref->weights.v[c], ref->started[c]};
        pfl_rng rng = pfl_rng_stream(fl->cfg.seed, r, c, PFL_RNG_ALA);
        const pfl_client_data *cd = &fl->part->clients[c];
        pfl_ala_apply(&cl, &ref->ala, fl->model, cd->train, cd->n_train, ref->b.global, ref->b.model.v[c], &buf, &rng);
        ref->started[c] = cl.started;
    }
}

static int ala_hook(wiring_fed *w, int round, void *ctx) {
    ala_ref *ref = ctx;
    if (round > 0) check_global(w, round, "fedala", ref->b.global, w->V);
    check_scored(w, round, "fedala", ref->b.model.v);
    ref->b.rounds_checked++;
    if (round < w->f.fl.cfg.rounds) ala_expect(w, ref, round + 1);
    return 0;
}

static void test_fedala_round(void) {
    pfl_config cfg = wiring_config(&pfl_algo_fedala, WIRING_MLP3);
    cfg.modules.ala_p = 2, cfg.modules.ala_s = 60, cfg.modules.ala_eta = 0.7f;
    cfg.modules.ala_threshold = 0.02f, cfg.modules.ala_max_epochs = 14;
    wiring_fed w;
    wiring_init(&w, &pfl_algo_fedala, &cfg, WIRING_MLP3);
    ala_ref ref;
    ref_base_init(&ref.b, &w);
    pfl_ala_window(w.f.fl.model, cfg.modules.ala_p, 0, &ref.off, &ref.len);
    per_client_alloc(&ref.weights, ref.len);
    for (int c = 0; c < WIRING_CLIENTS; c++) {
        ref.started[c] = false;
        for (size_t i = 0; i < ref.len; i++) ref.weights.v[c][i] = 1.0f;
    }
    ref.ala = (pfl_ala_config){cfg.modules.ala_p, cfg.modules.ala_s, cfg.modules.ala_eta, cfg.modules.ala_threshold,
                               cfg.modules.ala_max_epochs, cfg.batch, 0};
    CHECK(wiring_run(&w, ala_hook, &ref) == 0, "fedala: the run failed");
    CHECK(ref.b.rounds_checked == cfg.rounds + 1, "fedala: %d rounds checked", ref.b.rounds_checked);
    /* the personalized models differ from the global one (ALA mixed something) */
    float *m = tiny_floats(w.V);
    int differ = 0;
    for (int c = 0; c < WIRING_CLIENTS; c++) differ += wiring_differ(wiring_client_model(&w, c, m), w.f.fl.global, 0, w.V);
    CHECK(differ >= 3, "fedala: only %d clients' models differ from the global one", differ);
    /* a start phase stopped at convergence, before --ala-max-epochs: the threshold decided it */
    int converged = 0;
    for (int c = 0; c < WIRING_CLIENTS; c++)
        converged += w.f.fl.ala_start_epochs[c] > 0 && w.f.fl.ala_start_epochs[c] < cfg.modules.ala_max_epochs;
    CHECK(converged > 0, "fedala: no start phase converged before --ala-max-epochs");
    free(m);
    per_client_free(&ref.weights);
    ref_base_free(&ref.b);
    wiring_free(&w);
}

/* ---- FLAYER: head mix, per-layer rates, upload mask (docs/algorithms.md "FLAYER") ----
 * A client keeps its head (--head-layers); the clients of the next round
 * get the global base and A * own head + (1 - A) * global head, A the
 * training accuracy of its last local epoch (0 before it trained); local
 * SGD with the per-layer rates (the engine's step under --flayer-lr); the
 * upload masked per layer by the largest changes from where training
 * started; each element the sample-weighted mean over the clients that
 * sent it, the previous global value where none did. */

typedef struct {
    ref_base b;
    float acc[WIRING_CLIENTS];
    uint8_t *sent[WIRING_CLIENTS];
    float *start, *scratch;
    size_t off, len; /* the head */
    int masked_out;  /* elements some upload left out (the mask did something) */
} flayer_ref;

/* Each element: the mean by samples over the uploads that sent it. */
static void masked_mean(float *global, float *const *up, uint8_t *const *sent, const int *sel, int n, size_t P) {
    for (size_t j = 0; j < P; j++) {
        double sum = 0, total = 0;
        for (int k = 0; k < n; k++)
            if (sent[k][j]) sum += wiring_train_n[sel[k]] * (double)up[k][j], total += wiring_train_n[sel[k]];
        if (total > 0) global[j] = (float)(sum / total);
    }
}

static void flayer_expect(wiring_fed *w, flayer_ref *ref, int r) {
    pfl_fl *fl = &w->f.fl;
    int sel[WIRING_CLIENTS], next[WIRING_CLIENTS];
    const int n = wiring_selected(w, r, sel);
    for (int k = 0; k < n; k++) {
        copy_vec(ref->start, ref->b.model.v[sel[k]], w->V);
        copy_vec(ref->b.trained.v[k], ref->start, w->V);
        pfl_step s = wiring_default_step(w, r);
        train_stats(w, sel[k], r, ref->b.trained.v[k], &s, &ref->acc[sel[k]]);
        const size_t sent = pfl_flayer_mask(ref->sent[k], fl->model, ref->b.trained.v[k], ref->start, ref->scratch);
        ref->masked_out += sent < w->P;
    }
    masked_mean(ref->b.global, ref->b.trained.v, ref->sent, sel, n, w->P);
    for (int k = 0; k < n; k++) copy_vec(ref->b.model.v[sel[k]], ref->b.trained.v[k], w->V);
    for (int c = 0; c < WIRING_CLIENTS; c++) keep_span(ref->b.model.v[c], ref->b.global, w->V, ref->off, ref->len);
    const int nn = wiring_selected(w, r + 1, next);
    for (int k = 0; k < nn; k++) {
        float *m = ref->b.model.v[next[k]];
        const float a = ref->acc[next[k]];
        for (size_t i = ref->off; i < ref->off + ref->len; i++) m[i] = a * m[i] + (1.0f - a) * ref->b.global[i];
    }
}

static int flayer_hook(wiring_fed *w, int round, void *ctx) {
    flayer_ref *ref = ctx;
    if (round > 0) check_global(w, round, "flayer", ref->b.global, w->V);
    check_scored(w, round, "flayer", ref->b.model.v);
    ref->b.rounds_checked++;
    if (round < w->f.fl.cfg.rounds) flayer_expect(w, ref, round + 1);
    return 0;
}

static void test_flayer_round(void) {
    pfl_config cfg = wiring_config(&pfl_algo_flayer, WIRING_MLP3);
    cfg.algo.head_layers = 2;
    wiring_fed w;
    wiring_init(&w, &pfl_algo_flayer, &cfg, WIRING_MLP3);
    flayer_ref ref;
    memset(&ref, 0, sizeof ref);
    ref_base_init(&ref.b, &w);
    for (int k = 0; k < WIRING_CLIENTS; k++) ref.sent[k] = calloc(w.P, 1);
    ref.start = tiny_floats(w.V), ref.scratch = tiny_floats(w.V);
    ref.off = wiring_layer_off(&w, 1), ref.len = w.P - ref.off;
    CHECK(wiring_run(&w, flayer_hook, &ref) == 0, "flayer: the run failed");
    CHECK(ref.b.rounds_checked == cfg.rounds + 1 && ref.masked_out > 0, "flayer: %d rounds checked, %d masked uploads",
          ref.b.rounds_checked, ref.masked_out);
    for (int k = 0; k < WIRING_CLIENTS; k++) free(ref.sent[k]);
    free(ref.start), free(ref.scratch);
    ref_base_free(&ref.b);
    wiring_free(&w);
}

/* ---- pFedMe (Algorithm 1; docs/algorithms.md "pFedMe") ----
 * A selected client starts w and theta at the global model; per batch K
 * steps theta <- theta - plr (grad f(theta) + lambda (theta - w)), then
 * w <- w - lr lambda (w - theta); it uploads w and keeps theta, its
 * personalized model (a client not selected keeps its last theta); the
 * server's w_g <- (1 - beta) w_g + beta * the mean of the uploads by samples. */

typedef struct {
    float *theta;
    int K;
    float lambda, plr, lr;
} pfedme_batch_ref;

/* One batch of pFedMe's local problem, written from the paper with the executor. */
static bool pfedme_ref_batch(void *ctx, pfl_owned_batch *b) {
    const pfedme_batch_ref *c = ctx;
    const size_t P = b->fl->model->num_params;
    pfl_exec *x = b->x;
    float *wv = pfl_exec_host(b->model), *g = pfl_exec_host(&b->w->grads);
    pfl_exec_gather(x, b->idx, b->B);
    pfl_xbuf theta = pfl_exec_view(x, c->theta, pfl_model_vector_len(b->fl->model), true);
    for (int k = 0; k < c->K; k++) {
        pfl_exec_zero(x, &b->w->grads, 0, P);
        pfl_exec_forward(x, &theta, true, b->dropout);
        (void)pfl_exec_xent(x, NULL);
        pfl_exec_backward(x, &theta, &b->w->grads, 0, 1.0f, NULL, 0);
        for (size_t j = 0; j < P; j++) c->theta[j] -= c->plr * (g[j] + c->lambda * (c->theta[j] - wv[j]));
    }
    for (size_t j = 0; j < P; j++) wv[j] -= c->lr * c->lambda * (wv[j] - c->theta[j]);
    pfl_exec_unview(x, &theta);
    return true;
}

typedef struct {
    ref_base b;
    float beta;
} pfedme_ref;

static void pfedme_expect(wiring_fed *w, pfedme_ref *ref, int r) {
    const pfl_config *cfg = &w->f.fl.cfg;
    int sel[WIRING_CLIENTS];
    double weight[WIRING_CLIENTS];
    const int n = wiring_selected(w, r, sel);
    for (int k = 0; k < n; k++) {
        float *theta = ref->b.model.v[sel[k]];
        copy_vec(theta, ref->b.global, w->V);
        copy_vec(ref->b.trained.v[k], ref->b.global, w->V);
        pfedme_batch_ref bc = {theta, cfg->algo.pfedme_k, cfg->algo.pfedme_lambda, cfg->algo.pfedme_lr, cfg->lr};
        pfl_step s = wiring_default_step(w, r);
        s.own = pfedme_ref_batch, s.own_ctx = &bc;
        wiring_train(w, sel[k], r, ref->b.trained.v[k], &s);
    }
    wiring_sample_weights(sel, n, weight);
    float *mean = tiny_floats(w->V);
    wiring_mean(mean, ref->b.trained.v, weight, n, 0, w->V);
    for (size_t j = 0; j < w->V; j++)
        ref->b.global[j] = (float)((1.0 - ref->beta) * ref->b.global[j] + ref->beta * (double)mean[j]);
    free(mean);
}

static int pfedme_hook(wiring_fed *w, int round, void *ctx) {
    pfedme_ref *ref = ctx;
    if (round > 0) check_global(w, round, "pfedme", ref->b.global, w->V);
    check_scored(w, round, "pfedme", ref->b.model.v);
    ref->b.rounds_checked++;
    if (round < w->f.fl.cfg.rounds) pfedme_expect(w, ref, round + 1);
    return 0;
}

static void test_pfedme_round(void) {
    pfl_config cfg = wiring_config(&pfl_algo_pfedme, WIRING_DNN);
    wiring_set(&cfg, &pfl_algo_pfedme, "pfedme-k", 3);
    wiring_set(&cfg, &pfl_algo_pfedme, "pfedme-lambda", 2.5);
    wiring_set(&cfg, &pfl_algo_pfedme, "pfedme-lr", 0.03);
    wiring_set(&cfg, &pfl_algo_pfedme, "pfedme-beta", 0.6);
    cfg.bn = PFL_BN_SHARED;
    wiring_fed w;
    wiring_init(&w, &pfl_algo_pfedme, &cfg, WIRING_DNN);
    pfedme_ref ref;
    ref_base_init(&ref.b, &w);
    ref.beta = cfg.algo.pfedme_beta;
    CHECK(wiring_run(&w, pfedme_hook, &ref) == 0, "pfedme: the run failed");
    CHECK(ref.b.rounds_checked == cfg.rounds + 1, "pfedme: %d rounds checked", ref.b.rounds_checked);
    ref_base_free(&ref.b);
    wiring_free(&w);
}

/* ---- FedAMP (Eq. 6-8; docs/algorithms.md "FedAMP") ----
 * A client keeps its own w_i (the broadcast leaves it) and trains it with
 * the proximal term lambda/alpha toward its cloud model u_i; after the
 * uploads, each uploader's u_i is the attentive mix of the round's uploads,
 * xi_ij = alpha exp(-||w_i - w_j||^2 / sigma) / sigma; the scored model is w_i. */

/* u_i of each of the n uploads, written out in double. */
static void amp_fuse_ref(float *const *out, float *const *up, int n, size_t off, size_t len, double alpha,
                         double sigma) {
    double xi[WIRING_CLIENTS][WIRING_CLIENTS];
    for (int i = 0; i < n; i++) {
        double sum = 0;
        for (int j = 0; j < n; j++) {
            if (j == i) continue;
            double d2 = 0;
            for (size_t e = off; e < off + len; e++) d2 += ((double)up[i][e] - up[j][e]) * ((double)up[i][e] - up[j][e]);
            sum += xi[i][j] = alpha * exp(-d2 / sigma) / sigma;
        }
        CHECK(sum < 1.0, "amp: the test's weights sum to %g (rescaled rows are not what it checks)", sum);
        xi[i][i] = 1.0 - sum;
    }
    for (int i = 0; i < n; i++)
        for (size_t e = off; e < off + len; e++) {
            double v = 0;
            for (int j = 0; j < n; j++) v += xi[i][j] * up[j][e];
            out[i][e] = (float)v;
        }
}

typedef struct {
    ref_base b;      /* model: w_i */
    per_client u;    /* u_i */
    float *fused[WIRING_CLIENTS];
    int moved;
} fedamp_ref;

static void fedamp_expect(wiring_fed *w, fedamp_ref *ref, int r) {
    const pfl_algo_params *a = &w->f.fl.cfg.algo;
    int sel[WIRING_CLIENTS];
    const int n = wiring_selected(w, r, sel);
    for (int k = 0; k < n; k++) {
        copy_vec(ref->b.trained.v[k], ref->b.model.v[sel[k]], w->V);
        pfl_step s = wiring_default_step(w, r);
        pfl_step_add_prox(&s, a->amp_lambda / a->amp_alpha, ref->u.v[sel[k]], 0, w->P);
        wiring_train(w, sel[k], r, ref->b.trained.v[k], &s);
    }
    amp_fuse_ref(ref->fused, ref->b.trained.v, n, 0, w->P, a->amp_alpha, a->amp_sigma);
    for (int k = 0; k < n; k++) {
        ref->moved += wiring_differ(ref->fused[k], ref->b.trained.v[k], 0, w->P); /* the messages weigh something */
        copy_vec(ref->b.model.v[sel[k]], ref->b.trained.v[k], w->V);
        copy_vec(ref->u.v[sel[k]], ref->fused[k], w->P);
    }
}

static int fedamp_hook(wiring_fed *w, int round, void *ctx) {
    fedamp_ref *ref = ctx;
    check_scored(w, round, "fedamp", ref->b.model.v);
    for (int c = 0; c < WIRING_CLIENTS; c++) {
        const float *u = pfl_fedamp_cloud_model(&w->f.fl, c);
        CHECK(wiring_close(u, ref->u.v[c], 0, w->P), "fedamp round %d client %d: u_i is not the expected fusion (max diff %g)",
              round, c, wiring_max_diff(u, ref->u.v[c], 0, w->P));
    }
    ref->b.rounds_checked++;
    if (round < w->f.fl.cfg.rounds) fedamp_expect(w, ref, round + 1);
    return 0;
}

static void test_fedamp_round(void) {
    pfl_config cfg = wiring_config(&pfl_algo_fedamp, WIRING_DNN);
    wiring_set(&cfg, &pfl_algo_fedamp, "amp-alpha", 0.3);
    wiring_set(&cfg, &pfl_algo_fedamp, "amp-sigma", 2.0);
    wiring_set(&cfg, &pfl_algo_fedamp, "amp-lambda", 0.45);
    wiring_fed w;
    wiring_init(&w, &pfl_algo_fedamp, &cfg, WIRING_DNN);
    fedamp_ref ref;
    ref_base_init(&ref.b, &w);
    ref.moved = 0;
    per_client_alloc(&ref.u, w.V);
    for (int c = 0; c < WIRING_CLIENTS; c++) copy_vec(ref.u.v[c], w.f.fl.global, w.V), ref.fused[c] = tiny_floats(w.V);
    CHECK(wiring_run(&w, fedamp_hook, &ref) == 0, "fedamp: the run failed");
    CHECK(ref.b.rounds_checked == cfg.rounds + 1 && ref.moved > 0, "fedamp: %d rounds checked, %d fused models moved",
          ref.b.rounds_checked, ref.moved);
    for (int c = 0; c < WIRING_CLIENTS; c++) free(ref.fused[c]);
    per_client_free(&ref.u);
    ref_base_free(&ref.b);
    wiring_free(&w);
}

/* ---- pFedCFR (Eq. 10-15, Algorithm 1; docs/algorithms.md "pFedCFR") ----
 * Every client's model is its fused first r layers over the global rest;
 * it trains with lambda/alpha toward its fused layers and mu toward the
 * global rest; the global model is the PLAIN mean of the uploads (Eq. 12);
 * each uploader's layer l < r is fused with distances on layer l alone. */

typedef struct {
    ref_base b;
    per_client fused; /* per client its fused layers [0, span) */
    float *out[WIRING_CLIENTS];
    size_t span;
    int r;
} cfr_ref;

static void cfr_model_of(cfr_ref *ref, const wiring_fed *w, int c) {
    copy_vec(ref->b.model.v[c], ref->fused.v[c], ref->span);
    copy_vec(ref->b.model.v[c] + ref->span, ref->b.global + ref->span, w->V - ref->span);
}

static void cfr_expect(wiring_fed *w, cfr_ref *ref, int r) {
    const pfl_algo_params *a = &w->f.fl.cfg.algo;
    int sel[WIRING_CLIENTS];
    double weight[WIRING_CLIENTS];
    const int n = wiring_selected(w, r, sel);
    for (int k = 0; k < n; k++) {
        copy_vec(ref->b.trained.v[k], ref->b.model.v[sel[k]], w->V);
        pfl_step s = wiring_default_step(w, r);
        pfl_step_add_prox(&s, a->amp_lambda / a->amp_alpha, ref->fused.v[sel[k]], 0, ref->span);
        pfl_step_add_prox(&s, a->mu, ref->b.global, ref->span, w->P - ref->span);
        wiring_train(w, sel[k], r, ref->b.trained.v[k], &s);
    }
    wiring_uniform_weights(n, weight);
    wiring_mean(ref->b.global, ref->b.trained.v, weight, n, 0, w->V);
    for (int l = 0; l < ref->r; l++)
        amp_fuse_ref(ref->out, ref->b.trained.v, n, wiring_layer_off(w, l), wiring_layer_len(w, l), a->amp_alpha,
                     a->amp_sigma);
    for (int k = 0; k < n; k++) copy_vec(ref->fused.v[sel[k]], ref->out[k], ref->span);
    for (int c = 0; c < WIRING_CLIENTS; c++) cfr_model_of(ref, w, c);
}

static int cfr_hook(wiring_fed *w, int round, void *ctx) {
    cfr_ref *ref = ctx;
    if (round > 0) check_global(w, round, "pfedcfr", ref->b.global, w->V);
    check_scored(w, round, "pfedcfr", ref->b.model.v);
    ref->b.rounds_checked++;
    if (round < w->f.fl.cfg.rounds) cfr_expect(w, ref, round + 1);
    return 0;
}

static void test_pfedcfr_round(void) {
    pfl_config cfg = wiring_config(&pfl_algo_pfedcfr, WIRING_MLP3);
    wiring_set(&cfg, &pfl_algo_pfedcfr, "cfr-layers", 2);
    wiring_set(&cfg, &pfl_algo_pfedcfr, "amp-alpha", 0.3);
    wiring_set(&cfg, &pfl_algo_pfedcfr, "amp-sigma", 0.8);
    wiring_set(&cfg, &pfl_algo_pfedcfr, "amp-lambda", 0.45);
    wiring_set(&cfg, &pfl_algo_pfedcfr, "mu", 0.35);
    wiring_fed w;
    wiring_init(&w, &pfl_algo_pfedcfr, &cfg, WIRING_MLP3);
    cfr_ref ref;
    ref_base_init(&ref.b, &w);
    ref.r = cfg.algo.cfr_layers, ref.span = wiring_layer_off(&w, ref.r);
    per_client_alloc(&ref.fused, w.V);
    for (int c = 0; c < WIRING_CLIENTS; c++) copy_vec(ref.fused.v[c], w.f.fl.global, w.V), ref.out[c] = tiny_floats(w.V);
    CHECK(wiring_run(&w, cfr_hook, &ref) == 0, "pfedcfr: the run failed");
    CHECK(ref.b.rounds_checked == cfg.rounds + 1, "pfedcfr: %d rounds checked", ref.b.rounds_checked);
    for (int c = 0; c < WIRING_CLIENTS; c++) free(ref.out[c]);
    per_client_free(&ref.fused);
    ref_base_free(&ref.b);
    wiring_free(&w);
}

/* ---- FedALP (Algorithms 1-2, Eq. 3-10; docs/algorithms.md "FedALP") ----
 * Rounds up to T_pre are FedAvg; at the end of round T_pre the uploaders'
 * updates are clustered (cosine similarities, Ward on their rows, M
 * groups), D_m their in-group sample-weighted mean update, Psi_m = beta
 * delta_m / max delta_m per layer. Later, a client of group m trains from
 * W_new = MixByLayer(w_m, w_g, Psi_m) (the global model without a group);
 * w_m += its members' in-group sample-weighted updates from W_new; w_g
 * moves by every participant's sample-weighted update from where it
 * started; a client without a group joins the one whose D_m is most like
 * its update. The scored model is the mix of its group (w_g without one). */

enum { ALP_L = 3 };

typedef struct {
    ref_base b;
    int group[WIRING_CLIENTS];
    per_client wm, dir;        /* group models, clustering directions D_m */
    float psi[WIRING_CLIENTS][ALP_L];
    float *mix, *start[WIRING_CLIENTS];
    bool clustered;
    int warmup, groups;
    float beta;
} alp_ref;

static void alp_mix(const wiring_fed *w, float *out, const float *wm, const float *wg, const float *psi) {
    copy_vec(out, wg, w->V);
    for (int l = 0; l < ALP_L; l++)
        for (size_t j = wiring_layer_off(w, l); j < wiring_layer_off(w, l) + wiring_layer_len(w, l); j++)
            out[j] = psi[l] == 1.0f ? wm[j] : psi[l] * wm[j] + (1.0f - psi[l]) * wg[j];
}

static void alp_start(const wiring_fed *w, const alp_ref *ref, int c, float *out) {
    if (ref->clustered && ref->group[c] >= 0) alp_mix(w, out, ref->wm.v[ref->group[c]], ref->b.global, ref->psi[ref->group[c]]);
    else copy_vec(out, ref->b.global, w->V);
}

static double alp_cos(const float *a, const float *b, size_t n) {
    double dot = 0, aa = 0, bb = 0;
    for (size_t j = 0; j < n; j++) dot += (double)a[j] * b[j], aa += (double)a[j] * a[j], bb += (double)b[j] * b[j];
    return aa > 0 && bb > 0 ? dot / sqrt(aa * bb) : 0;
}

/* Algorithm 2 on the round's updates up[k] - g0 (in place). */
static void alp_cluster(wiring_fed *w, alp_ref *ref, const int *sel, int n, float *const *up, const float *g0) {
    for (int k = 0; k < n; k++)
        for (size_t j = 0; j < w->P; j++) up[k][j] -= g0[j];
    double rho[WIRING_CLIENTS * WIRING_CLIENTS];
    pfl_merge merges[WIRING_CLIENTS];
    int labels[WIRING_CLIENTS];
    CHECK(pfl_cosine_similarity_matrix(rho, (const float *const *)up, n, w->P) == 0 &&
              pfl_ward_linkage_points(merges, rho, n, (size_t)n) == 0 && pfl_cluster_cut(labels, merges, n, ref->groups) == 0,
          "fedalp: the reference's clustering failed");
    for (int k = 0; k < n; k++) ref->group[sel[k]] = labels[k];
    for (int m = 0; m < ref->groups; m++) {
        double total = 0, delta[ALP_L], max = 0;
        for (int k = 0; k < n; k++) total += labels[k] == m ? wiring_train_n[sel[k]] : 0;
        for (size_t j = 0; j < w->P; j++) {
            double d = 0;
            for (int k = 0; k < n; k++) d += labels[k] == m ? wiring_train_n[sel[k]] / total * up[k][j] : 0;
            ref->dir.v[m][j] = (float)d;
        }
        for (int l = 0; l < ALP_L; l++) {
            double sq = 0;
            for (size_t j = wiring_layer_off(w, l); j < wiring_layer_off(w, l) + wiring_layer_len(w, l); j++)
                sq += (double)ref->dir.v[m][j] * ref->dir.v[m][j];
            delta[l] = sqrt(sq), max = fmax(max, delta[l]);
        }
        for (int l = 0; l < ALP_L; l++) ref->psi[m][l] = (float)(ref->beta * delta[l] / max);
        copy_vec(ref->wm.v[m], ref->b.global, w->V);
    }
    ref->clustered = true;
}

/* Algorithm 1 lines 5-11 on the round's uploads, each from start[k]. */
static void alp_group_round(wiring_fed *w, alp_ref *ref, const int *sel, int n, float *const *up) {
    double total = 0;
    for (int k = 0; k < n; k++) total += wiring_train_n[sel[k]];
    for (int m = 0; m < ref->groups; m++) {
        double in_group = 0;
        for (int k = 0; k < n; k++) in_group += ref->group[sel[k]] == m ? wiring_train_n[sel[k]] : 0;
        if (in_group == 0) continue;
        alp_mix(w, ref->mix, ref->wm.v[m], ref->b.global, ref->psi[m]);
        for (size_t j = 0; j < w->P; j++) {
            double d = 0;
            for (int k = 0; k < n; k++)
                if (ref->group[sel[k]] == m) d += wiring_train_n[sel[k]] / in_group * ((double)up[k][j] - ref->mix[j]);
            ref->wm.v[m][j] = (float)(ref->wm.v[m][j] + d);
        }
    }
    float *diff = tiny_floats(w->P);
    for (int k = 0; k < n; k++) {
        if (ref->group[sel[k]] >= 0) continue;
        int best = 0;
        double best_cos = -2;
        for (size_t j = 0; j < w->P; j++) diff[j] = up[k][j] - ref->b.global[j];
        for (int m = 0; m < ref->groups; m++) {
            const double c = alp_cos(diff, ref->dir.v[m], w->P);
            if (c > best_cos) best_cos = c, best = m;
        }
        ref->group[sel[k]] = best;
    }
    free(diff);
    for (size_t j = 0; j < w->P; j++) {
        double d = 0;
        for (int k = 0; k < n; k++) d += wiring_train_n[sel[k]] / total * ((double)up[k][j] - ref->start[k][j]);
        ref->b.global[j] = (float)(ref->b.global[j] + d);
    }
}

static void alp_expect(wiring_fed *w, alp_ref *ref, int r) {
    int sel[WIRING_CLIENTS];
    double weight[WIRING_CLIENTS];
    const int n = wiring_selected(w, r, sel);
    for (int k = 0; k < n; k++) {
        alp_start(w, ref, sel[k], ref->start[k]);
        copy_vec(ref->b.trained.v[k], ref->start[k], w->V);
        pfl_step s = wiring_default_step(w, r);
        wiring_train(w, sel[k], r, ref->b.trained.v[k], &s);
    }
    if (ref->clustered) {
        alp_group_round(w, ref, sel, n, ref->b.trained.v);
    } else {
        copy_vec(ref->mix, ref->b.global, w->V);
        wiring_sample_weights(sel, n, weight);
        wiring_mean(ref->b.global, ref->b.trained.v, weight, n, 0, w->V);
        if (r >= ref->warmup) alp_cluster(w, ref, sel, n, ref->b.trained.v, ref->mix);
    }
    for (int c = 0; c < WIRING_CLIENTS; c++) alp_start(w, ref, c, ref->b.model.v[c]);
}

static int alp_hook(wiring_fed *w, int round, void *ctx) {
    alp_ref *ref = ctx;
    const pfl_fedalp_state *s = pfl_fedalp_state_of(&w->f.fl);
    if (round > 0) check_global(w, round, "fedalp", ref->b.global, w->V);
    for (int c = 0; c < WIRING_CLIENTS && ref->clustered; c++)
        CHECK(s->group[c] == ref->group[c], "fedalp round %d: client %d in group %d, expected %d", round, c, s->group[c],
              ref->group[c]);
    check_scored(w, round, "fedalp", ref->b.model.v);
    ref->b.rounds_checked++;
    if (round < w->f.fl.cfg.rounds) alp_expect(w, ref, round + 1);
    return 0;
}

static void test_fedalp_round(void) {
    pfl_config cfg = wiring_config(&pfl_algo_fedalp, WIRING_MLP3);
    cfg.rounds = 4;
    wiring_set(&cfg, &pfl_algo_fedalp, "groups", 2);
    wiring_set(&cfg, &pfl_algo_fedalp, "beta", 0.75);
    wiring_set(&cfg, &pfl_algo_fedalp, "warmup", 0.4); /* T_pre = round(0.4 x 4) = 2 */
    wiring_fed w;
    wiring_init(&w, &pfl_algo_fedalp, &cfg, WIRING_MLP3);
    alp_ref ref;
    memset(&ref, 0, sizeof ref);
    ref_base_init(&ref.b, &w);
    per_client_alloc(&ref.wm, w.V);
    per_client_alloc(&ref.dir, w.V);
    ref.mix = tiny_floats(w.V);
    for (int c = 0; c < WIRING_CLIENTS; c++) ref.group[c] = -1, ref.start[c] = tiny_floats(w.V);
    ref.warmup = 2, ref.groups = cfg.algo.groups, ref.beta = cfg.algo.beta;
    CHECK(wiring_run(&w, alp_hook, &ref) == 0, "fedalp: the run failed");
    CHECK(ref.b.rounds_checked == cfg.rounds + 1 && ref.clustered, "fedalp: %d rounds checked, clustered %d",
          ref.b.rounds_checked, ref.clustered);
    for (int c = 0; c < WIRING_CLIENTS; c++) free(ref.start[c]);
    free(ref.mix);
    per_client_free(&ref.wm);
    per_client_free(&ref.dir);
    ref_base_free(&ref.b);
    wiring_free(&w);
}

/* ---- CFL (Algorithm 1; docs/algorithms.md "CFL") ----
 * Every client trains from its cluster's model; per cluster, the norm of
 * the sample-weighted mean update and the largest update norm decide a
 * split (past the warm-up, at least 3 members), the cosine similarities of
 * the updates bi-partition it; each cluster becomes the sample-weighted
 * mean of its members' uploads; the global model is the mean of all by
 * samples; a client scores its cluster's model. */

typedef struct {
    ref_base b;
    int cluster[WIRING_CLIENTS], clusters, splits;
    per_client cm; /* cluster models */
    double mean_norm[WIRING_CLIENTS], max_norm[WIRING_CLIENTS];
    float eps1, eps2;
    int warmup;
} cfl_ref;

static void cfl_split_ref(wiring_fed *w, cfl_ref *ref, const int *mem, int m, int c, float *const *up) {
    double sim[WIRING_CLIENTS * WIRING_CLIENTS];
    int labels[WIRING_CLIENTS];
    const float *theta = ref->cm.v[c];
    for (int a = 0; a < m; a++)
        for (int b = 0; b < m; b++) {
            double dot = 0, na = 0, nb = 0;
            for (size_t j = 0; j < w->P; j++) {
                const double da = (double)up[mem[a]][j] - theta[j], db = (double)up[mem[b]][j] - theta[j];
                dot += da * db, na += da * da, nb += db * db;
            }
            sim[a * m + b] = a == b ? 1.0 : fmin(1.0, fmax(-1.0, dot / sqrt(na * nb)));
        }
    CHECK(pfl_cfl_bipartition(labels, sim, m) == 0, "cfl: the reference's bipartition failed");
    const int id = ref->clusters++;
    copy_vec(ref->cm.v[id], theta, w->V);
    for (int a = 0; a < m; a++)
        if (labels[a]) ref->cluster[mem[a]] = id;
    ref->mean_norm[id] = ref->mean_norm[c], ref->max_norm[id] = ref->max_norm[c];
    ref->splits++;
}

static void cfl_expect(wiring_fed *w, cfl_ref *ref, int r) {
    int sel[WIRING_CLIENTS];
    double weight[WIRING_CLIENTS];
    const int n = wiring_selected(w, r, sel); /* every client: sel[k] = k */
    for (int k = 0; k < n; k++) {
        copy_vec(ref->b.trained.v[k], ref->cm.v[ref->cluster[k]], w->V);
        pfl_step s = wiring_default_step(w, r);
        wiring_train(w, k, r, ref->b.trained.v[k], &s);
    }
    float *const *up = ref->b.trained.v;
    const int before = ref->clusters;
    for (int c = 0; c < before; c++) {
        int mem[WIRING_CLIENTS], m = 0;
        double total = 0, mean2 = 0, max2 = 0;
        for (int k = 0; k < n; k++)
            if (ref->cluster[k] == c) mem[m++] = k, total += wiring_train_n[k];
        if (m == 0) continue;
        for (int a = 0; a < m; a++) {
            double sq = 0;
            for (size_t j = 0; j < w->P; j++) sq += ((double)up[mem[a]][j] - ref->cm.v[c][j]) * ((double)up[mem[a]][j] - ref->cm.v[c][j]);
            max2 = fmax(max2, sq);
        }
        for (size_t j = 0; j < w->P; j++) {
            double d = 0;
            for (int a = 0; a < m; a++) d += wiring_train_n[mem[a]] / total * ((double)up[mem[a]][j] - ref->cm.v[c][j]);
            mean2 += d * d;
        }
        ref->mean_norm[c] = sqrt(mean2), ref->max_norm[c] = sqrt(max2);
        if (ref->mean_norm[c] < ref->eps1 && ref->max_norm[c] > ref->eps2 && m >= 3 && r > ref->warmup)
            cfl_split_ref(w, ref, mem, m, c, up);
    }
    for (int c = 0; c < ref->clusters; c++) {
        int mem[WIRING_CLIENTS], m = 0;
        for (int k = 0; k < n; k++)
            if (ref->cluster[k] == c) mem[m++] = k;
        float *vec[WIRING_CLIENTS];
        for (int a = 0; a < m; a++) vec[a] = up[mem[a]], weight[a] = wiring_train_n[mem[a]];
        if (m > 0) wiring_mean(ref->cm.v[c], vec, weight, m, 0, w->V);
    }
    wiring_sample_weights(sel, n, weight);
    wiring_mean(ref->b.global, up, weight, n, 0, w->V);
    for (int c = 0; c < WIRING_CLIENTS; c++) copy_vec(ref->b.model.v[c], ref->cm.v[ref->cluster[c]], w->V);
}

static int cfl_hook(wiring_fed *w, int round, void *ctx) {
    cfl_ref *ref = ctx;
    const pfl_cfl_state *s = pfl_cfl_state_of(&w->f.fl);
    if (round > 0) check_global(w, round, "cfl", ref->b.global, w->V);
    CHECK(s->clusters == ref->clusters, "cfl round %d: %d clusters, expected %d", round, s->clusters, ref->clusters);
    for (int c = 0; c < WIRING_CLIENTS; c++)
        CHECK(s->cluster[c] == ref->cluster[c], "cfl round %d: client %d in cluster %d, expected %d", round, c,
              s->cluster[c], ref->cluster[c]);
    for (int c = 0; c < ref->clusters && round > 0; c++)
        CHECK(check_close(s->mean_norm[c], ref->mean_norm[c], 1e-5) && check_close(s->max_norm[c], ref->max_norm[c], 1e-5),
              "cfl round %d cluster %d: update norms %g, %g, expected %g, %g", round, c, s->mean_norm[c], s->max_norm[c],
              ref->mean_norm[c], ref->max_norm[c]);
    check_scored(w, round, "cfl", ref->b.model.v);
    ref->b.rounds_checked++;
    if (round < w->f.fl.cfg.rounds) cfl_expect(w, ref, round + 1);
    return 0;
}

static void test_cfl_round(void) {
    pfl_config cfg = wiring_config(&pfl_algo_cfl, WIRING_DNN);
    cfg.join = 1.0, cfg.rounds = 4;
    /* update norms here are about 0.1-0.3: eps1 above every mean norm and eps2 below the largest ones, so the
     * warm-up and the member count decide when a cluster splits */
    wiring_set(&cfg, &pfl_algo_cfl, "cfl-eps1", 50);
    wiring_set(&cfg, &pfl_algo_cfl, "cfl-eps2", 0.05);
    wiring_set(&cfg, &pfl_algo_cfl, "cfl-warmup", 2);
    cfg.bn = PFL_BN_SHARED;
    wiring_fed w;
    wiring_init(&w, &pfl_algo_cfl, &cfg, WIRING_DNN);
    cfl_ref ref;
    memset(&ref, 0, sizeof ref);
    ref_base_init(&ref.b, &w);
    per_client_alloc(&ref.cm, w.V);
    copy_vec(ref.cm.v[0], w.f.fl.global, w.V);
    ref.clusters = 1, ref.eps1 = cfg.algo.cfl_eps1, ref.eps2 = cfg.algo.cfl_eps2, ref.warmup = cfg.algo.cfl_warmup;
    CHECK(wiring_run(&w, cfl_hook, &ref) == 0, "cfl: the run failed");
    CHECK(ref.b.rounds_checked == cfg.rounds + 1 && ref.splits >= 1, "cfl: %d rounds checked, %d splits",
          ref.b.rounds_checked, ref.splits);
    per_client_free(&ref.cm);
    ref_base_free(&ref.b);
    wiring_free(&w);
}

/* ---- FedTSDP (docs/algorithms.md "FedTSDP") ----
 * Every client (--join 1) trains from its cluster's shared prefix (the
 * first L_s layers) over its own remaining layers; the server clusters the
 * uploads in two stages when the Hopkins statistic H exceeds --tsdp-hth
 * (the clustering itself is tests/test_fedtsdp.c's), each cluster's shared
 * prefix becomes the sample-weighted mean of its members' uploads, and L_s
 * shrinks by psi AFTER that aggregation, so a layer that stops being shared
 * stays as each client trained it. The scored model is the client's. */

enum { TSDP_PUBLIC = 24 };

/* The uneven federation with TSDP_PUBLIC more samples at the end of the
 * dataset, held by no client: the server's public set. */
static void tsdp_init(wiring_fed *w, const pfl_config *cfg) {
    memset(w, 0, sizeof *w);
    w->kind = WIRING_MLP3;
    wiring_build_model(&w->f.m, w->kind);
    pfl_dataset d;
    wiring_data(&d, &w->f.part);
    w->f.d = tiny_dataset(d.n + TSDP_PUBLIC, 1, 4, 4, WIRING_CLASSES, 515);
    memcpy(w->f.d.pixels, d.pixels, (size_t)d.n * 16);
    memcpy(w->f.d.labels, d.labels, (size_t)d.n);
    tiny_dataset_free(&d);
    tiny_fed_start(&w->f, &pfl_algo_fedtsdp, cfg);
    w->P = w->f.fl.model->num_params;
    w->V = pfl_model_vector_len(w->f.fl.model);
}

typedef struct {
    ref_base b;
    double shared;   /* L_s as this round starts */
    float psi, hth;
    int clusterings, skipped;
} tsdp_ref;

/* Round r's training, from the models the clients hold now (checked). */
static void tsdp_train(wiring_fed *w, tsdp_ref *ref, int r) {
    for (int k = 0; k < WIRING_CLIENTS; k++) {
        copy_vec(ref->b.trained.v[k], ref->b.model.v[k], w->V);
        pfl_step s = wiring_default_step(w, r);
        wiring_train(w, k, r, ref->b.trained.v[k], &s);
    }
}

/* After round r: its clustering (the run's), the cluster prefixes, L_s, the clients' models. */
static void tsdp_check_round(wiring_fed *w, tsdp_ref *ref, int r) {
    const pfl_fedtsdp_state *s = pfl_fedtsdp_state_of(&w->f.fl);
    const pfl_model *m = w->f.fl.model;
    const bool clustered = s->hopkins[r] > (double)ref->hth;
    CHECK(s->clustered[r] == clustered, "fedtsdp round %d: H %g against h_th %g, clustered %d", r, s->hopkins[r],
          (double)ref->hth, s->clustered[r]);
    ref->clusterings += clustered, ref->skipped += !clustered;
    const size_t end = pfl_fedtsdp_shared_end(m, ref->shared);
    for (int c = 0; c < s->clusters; c++) {
        float *vec[WIRING_CLIENTS], *want = tiny_floats(w->V);
        double weight[WIRING_CLIENTS];
        int n = 0;
        for (int k = 0; k < WIRING_CLIENTS; k++)
            if (s->cluster[k] == c) vec[n] = ref->b.trained.v[k], weight[n++] = wiring_train_n[k];
        if (n > 0) {
            wiring_mean(want, vec, weight, n, 0, end);
            const float *got = s->models + w->V * (size_t)c;
            CHECK(wiring_close(got, want, 0, end), "fedtsdp round %d cluster %d: the shared prefix is not its members' "
                  "mean by samples (max diff %g)", r, c, wiring_max_diff(got, want, 0, end));
        }
        free(want);
    }
    if (clustered) ref->shared *= ref->psi;
    CHECK(fabs(s->shared_layers - ref->shared) < 1e-9, "fedtsdp round %d: L_s %g, expected %g", r, s->shared_layers,
          ref->shared);
    const size_t after = pfl_fedtsdp_shared_end(m, ref->shared);
    for (int k = 0; k < WIRING_CLIENTS; k++) {
        copy_vec(ref->b.model.v[k], ref->b.trained.v[k], w->V);
        copy_vec(ref->b.model.v[k], s->models + w->V * (size_t)s->cluster[k], after);
    }
    double weight[WIRING_CLIENTS];
    int sel[WIRING_CLIENTS];
    wiring_sample_weights(sel, wiring_selected(w, r, sel), weight);
    wiring_mean(ref->b.global, ref->b.trained.v, weight, WIRING_CLIENTS, 0, w->V);
}

static int tsdp_hook(wiring_fed *w, int round, void *ctx) {
    tsdp_ref *ref = ctx;
    if (round > 0) {
        tsdp_check_round(w, ref, round);
        check_global(w, round, "fedtsdp", ref->b.global, w->V);
    }
    check_scored(w, round, "fedtsdp", ref->b.model.v);
    ref->b.rounds_checked++;
    if (round < w->f.fl.cfg.rounds) tsdp_train(w, ref, round + 1);
    return 0;
}

static void test_fedtsdp_round(void) {
    pfl_config cfg = wiring_config(&pfl_algo_fedtsdp, WIRING_MLP3);
    cfg.join = 1.0, cfg.rounds = 4, cfg.bn = PFL_BN_SHARED;
    cfg.algo.tsdp_public = TSDP_PUBLIC;
    wiring_set(&cfg, &pfl_algo_fedtsdp, "public-batch", 8);
    wiring_set(&cfg, &pfl_algo_fedtsdp, "tsdp-hth", 0.5);
    wiring_set(&cfg, &pfl_algo_fedtsdp, "tsdp-psi", 0.6);
    wiring_set(&cfg, &pfl_algo_fedtsdp, "tsdp-shared-layers", 2.5);
    wiring_set(&cfg, &pfl_algo_fedtsdp, "tsdp-eps1", 0.05);
    wiring_set(&cfg, &pfl_algo_fedtsdp, "tsdp-eps2", 0.1);
    wiring_set(&cfg, &pfl_algo_fedtsdp, "tsdp-min-pts", 2);
    wiring_fed w;
    tsdp_init(&w, &cfg);
    tsdp_ref ref;
    memset(&ref, 0, sizeof ref);
    ref_base_init(&ref.b, &w);
    ref.shared = cfg.algo.tsdp_shared, ref.psi = cfg.algo.tsdp_psi, ref.hth = cfg.algo.tsdp_h_th;
    CHECK(wiring_run(&w, tsdp_hook, &ref) == 0, "fedtsdp: the run failed");
    /* H crosses h_th both ways (round 2 clusters, the others do not: H 0.46, 0.83, 0.46, 0.43), and
     * the clustering makes two clusters, so a mean within clusters is not the global one */
    CHECK(ref.b.rounds_checked == cfg.rounds + 1 && ref.clusterings > 0 && ref.skipped > 0 &&
              pfl_fedtsdp_state_of(&w.f.fl)->clusters >= 2,
          "fedtsdp: %d rounds checked, %d clusterings, %d rounds without, %d clusters", ref.b.rounds_checked,
          ref.clusterings, ref.skipped, pfl_fedtsdp_state_of(&w.f.fl)->clusters);
    ref_base_free(&ref.b);
    wiring_free(&w);
}

int main(void) {
    test_fedala_round();
    test_flayer_round();
    test_pfedme_round();
    test_fedamp_round();
    test_pfedcfr_round();
    test_fedalp_round();
    test_cfl_round();
    test_fedtsdp_round();
    TEST_MAIN_END();
}
