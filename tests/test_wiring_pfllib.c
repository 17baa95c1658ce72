/* The wiring of PFLlib's personalized methods FedDBE, FedMTL, FedCAC, FedAS,
 * PFL-DA and FedGC on the uneven federation (tests/wiring.h): five clients
 * of unequal sizes, classes missing on some, three rounds at lr > 0 with
 * three of five clients a round. Each round is computed again here from what
 * the run held after the round before (its global model, and what this test
 * expects each client to hold): the clients the round selects, each trained
 * by the step its method's reading says, written out with the engine's
 * pieces (pfl_step_default, loss terms, proximal and gradient terms), then
 * the server's steps in double (means by samples, by Fisher traces, plain
 * means of collaborators, the class-embedding correction). The test then
 * checks, after every round:
 *
 *  - the server's state (the global model, the global head, the customized
 *    and corrected heads as the clients' models show them);
 *  - what each client holds after the broadcast (its personal parts as it
 *    trained them, the shared parts as the server sent them), the clients
 *    that did not train this round too;
 *  - what the run scored for each client: the accuracy of the model the
 *    method should score, computed here.
 *
 * Why a wrong wiring fails here: the clients' sizes differ (a uniform mean
 * is not a mean by samples, a slot is not a client: the round's slots 0..2
 * are other clients than the ones selected), the clients that sit out a
 * round must keep their state, several rounds follow one another (a state
 * reset at a broadcast, or a statistic taken from the wrong model, shows in
 * the next round), and every hyper-parameter is set to a value neither 0 nor
 * 1 nor its default (so one ignored or replaced by a constant changes the
 * numbers). Comparisons are to float rounding (wiring_close), never bitwise
 * across two computations. */
#include "wiring.h"

enum { NC = WIRING_CLIENTS, MAX_D = 128 };

/* ---- shared pieces ---- */

static float **new_vectors(int n, size_t len) {
    float **v = tiny_alloc(sizeof(float *) * (size_t)n);
    for (int k = 0; k < n; k++) v[k] = tiny_floats(len);
    return v;
}

static void free_vectors(float **v, int n) {
    for (int k = 0; k < n; k++) free(v[k]);
    free(v);
}

static int head_row(const wiring_fed *w) { return w->f.fl.model->num_layers - 1; }
/* the method's one extra block, when it has one */
static int block_row(const wiring_fed *w) { return w->f.fl.model->num_layers; }
static int feature_dim(const wiring_fed *w) { return (int)pfl_model_layer_input_size(w->f.fl.model, head_row(w)); }

/* The run's scores after round `round` are the accuracies of models[c] (personal: counted as the method counts
 * a personalized model). */
static void check_scores(wiring_fed *w, int round, float *const *models, bool personal, const char *what) {
    const wiring_round *m = &w->rounds[round];
    for (int c = 0; c < NC; c++) {
        const double acc = wiring_accuracy(w, models[c], c, personal);
        CHECK(fabs(m->client_acc[c] - acc) < 1e-12, "%s round %d client %d: scored %g, the model it should score %g",
              what, round, c, m->client_acc[c], acc);
    }
}

/* The client's personalized model as the method's personal_model hook builds it (methods whose clients keep
 * nothing: the server's state makes it). */
static float *method_personal(wiring_fed *w, int client, float *out) {
    pfl_fl *fl = &w->f.fl;
    float *scratch = fl->workers[0].model;
    const float *p = fl->algo->personal_model ? fl->algo->personal_model(fl, client, scratch)
                                              : pfl_default_personal_model(fl, client, scratch);
    memcpy(out, p, w->V * sizeof(float));
    return out;
}

/* Every row (the blocks' too) frozen but `except`. */
static void freeze_all_but(const wiring_fed *w, bool *frozen, int except) {
    for (int l = 0; l < pfl_model_rows(w->f.fl.model); l++) frozen[l] = l != except;
}

/* ==== FedDBE: the PRBM each client keeps under the shared model; MR toward the global mean ==== */

#define DBE_MOMENTUM 0.3f
#define DBE_KLW 4.0f

typedef struct {
    const pfl_model *m;
    const float *global_mean;
    float running[MAX_D], scratch[MAX_D + 2 * WIRING_CLASSES];
} dbe_term_ctx;

/* The paper's loss at the head's input: CE(head(h + m)) + klw MR, at the test's momentum and klw, the running
 * mean from 0 (the ctx is fresh for each client's training). */
static double dbe_value(void *ctx, const pfl_term_batch *b, float *dz, int *correct) {
    dbe_term_ctx *t = ctx;
    const pfl_model *m = t->m;
    const int D = (int)b->n, C = m->classes;
    const size_t ho = m->layers[m->num_layers - 1].offset, po = m->layers[m->num_layers].offset;
    const pfl_feddbe_view v = {D, C, b->params + ho, b->params + ho + (size_t)C * D, b->params + po};
    const pfl_feddbe_grads g = {b->grads + ho, b->grads + ho + (size_t)C * D, b->grads + po};
    return pfl_feddbe_loss(&v, &g, b->z, b->labels, b->B, t->running, t->global_mean, DBE_MOMENTUM, DBE_KLW, dz,
                           correct, t->scratch);
}

typedef struct {
    float *expected, **trained, *prbm[NC], *buf, *folded, global_mean[MAX_D];
    int rounds_checked, scored_checked, prbm_moved;
} dbe_ref;

typedef struct {
    float running[MAX_D];
    int D;
} dbe_tracker;

/* r <- (1 - momentum) r + momentum mean_b(h), h the features entering the head. */
static void dbe_track(void *ctx, const pfl_block_batch *b) {
    dbe_tracker *t = ctx;
    for (int d = 0; d < t->D; d++) {
        double mean = 0.0;
        for (int n = 0; n < b->B; n++) mean += b->features[(size_t)n * t->D + d];
        t->running[d] = (float)((1.0 - DBE_MOMENTUM) * t->running[d] + DBE_MOMENTUM * (mean / b->B));
    }
}

/* The initialization period, before round 1: every client trains the initial model once (plain cross-entropy,
 * no PRBM) tracking r; g is the mean of the r's by training samples. */
static void dbe_global_mean(wiring_fed *w, dbe_ref *ref) {
    const int D = feature_dim(w);
    double acc[MAX_D] = {0}, total = 0.0;
    bool frozen[PFL_MAX_LAYERS] = {false};
    frozen[block_row(w)] = true;
    for (int c = 0; c < NC; c++) {
        dbe_tracker t = {{0}, D};
        memcpy(ref->buf, w->f.fl.global, w->V * sizeof(float));
        pfl_step s = wiring_default_step(w, 0);
        s.opt.frozen = frozen;
        pfl_step_add_block(&s, head_row(w), dbe_track, &t);
        wiring_train(w, c, 0, ref->buf, &s);
        for (int d = 0; d < D; d++) acc[d] += wiring_train_n[c] * (double)t.running[d];
        total += wiring_train_n[c];
    }
    for (int d = 0; d < D; d++) ref->global_mean[d] = (float)(acc[d] / total);
}

static size_t dbe_prbm_off(const wiring_fed *w) { return wiring_layer_off(w, block_row(w)); }

/* Client c's model: the global model with its PRBM. */
static void dbe_model_of(const wiring_fed *w, const dbe_ref *ref, int c, float *out) {
    memcpy(out, w->f.fl.global, w->V * sizeof(float));
    memcpy(out + dbe_prbm_off(w), ref->prbm[c], sizeof(float) * (size_t)feature_dim(w));
}

/* head(h + m) = W h + (b + W m): the personalized model as a plain network, its PRBM folded into the head's
 * bias (and zeroed), so its accuracy is counted without the method's own output. */
static void dbe_fold(const wiring_fed *w, const float *model, float *out) {
    const int D = feature_dim(w), C = WIRING_CLASSES;
    const size_t ho = wiring_layer_off(w, head_row(w)), po = dbe_prbm_off(w);
    memcpy(out, model, w->V * sizeof(float));
    for (int c = 0; c < C; c++) {
        double acc = model[ho + (size_t)C * D + c];
        for (int d = 0; d < D; d++) acc += (double)model[ho + (size_t)c * D + d] * model[po + d];
        out[ho + (size_t)C * D + c] = (float)acc;
    }
    memset(out + po, 0, sizeof(float) * (size_t)D);
}

static void dbe_expect(wiring_fed *w, dbe_ref *ref, int r) {
    int sel[NC];
    const int n = wiring_selected(w, r, sel);
    const size_t po = dbe_prbm_off(w);
    double weight[NC];
    for (int k = 0; k < n; k++) {
        dbe_model_of(w, ref, sel[k], ref->trained[k]);
        dbe_term_ctx t = {w->f.fl.model, ref->global_mean, {0}, {0}};
        pfl_step s = wiring_default_step(w, r);
        s.ce_weight = 0.0;
        const pfl_loss_term term = {.name = "the test's FedDBE loss", .at = head_row(w), .weight = 1.0f,
                                    .value = dbe_value, .ctx = &t, .predicts = true};
        pfl_step_add_term(&s, &term);
        wiring_train(w, sel[k], r, ref->trained[k], &s);
    }
    wiring_sample_weights(sel, n, weight);
    memcpy(ref->expected, w->f.fl.global, w->V * sizeof(float));
    wiring_mean(ref->expected, ref->trained, weight, n, 0, po); /* the PRBM is no part of the mean */
    for (int k = 0; k < n; k++)
        memcpy(ref->prbm[sel[k]], ref->trained[k] + po, sizeof(float) * (size_t)feature_dim(w));
}

static int dbe_hook(wiring_fed *w, int round, void *ctx) {
    dbe_ref *ref = ctx;
    const size_t po = dbe_prbm_off(w);
    const int D = feature_dim(w);
    if (round == 0) {
        dbe_global_mean(w, ref);
        CHECK(wiring_close(pfl_feddbe_global_mean(&w->f.fl), ref->global_mean, 0, (size_t)D),
              "feddbe: the global mean is not the sample-weighted mean of the clients' running means after one "
              "training of the initial model (max diff %g)",
              wiring_max_diff(pfl_feddbe_global_mean(&w->f.fl), ref->global_mean, 0, (size_t)D));
    }
    if (round > 0) {
        CHECK(wiring_close(w->f.fl.global, ref->expected, 0, w->V),
              "feddbe round %d: the global model is not the sample-weighted mean of the selected clients trained on "
              "CE(head(h + m)) + klw MR (max diff %g)",
              round, wiring_max_diff(w->f.fl.global, ref->expected, 0, w->V));
        for (int c = 0; c < NC; c++) {
            wiring_client_model(w, c, ref->buf);
            CHECK(wiring_close(ref->buf, w->f.fl.global, 0, po), "feddbe round %d client %d: its shared model is not "
                  "the global one", round, c);
            CHECK(wiring_close(ref->buf + po, ref->prbm[c], 0, (size_t)D),
                  "feddbe round %d client %d: its PRBM is not the one it trained last (max diff %g)", round, c,
                  wiring_max_diff(ref->buf + po, ref->prbm[c], 0, (size_t)D));
            float zero[MAX_D] = {0};
            ref->prbm_moved += wiring_differ(ref->prbm[c], zero, 0, (size_t)D);
        }
        ref->rounds_checked++;
    }
    if (w->rounds[round].evaluated) {
        for (int c = 0; c < NC; c++) {
            dbe_model_of(w, ref, c, ref->buf);
            dbe_fold(w, ref->buf, ref->folded);
            const double acc = wiring_accuracy(w, ref->folded, c, false);
            CHECK(fabs(w->rounds[round].client_acc[c] - acc) < 1e-12,
                  "feddbe round %d client %d: scored %g, head(h + m) of its model %g", round, c,
                  w->rounds[round].client_acc[c], acc);
        }
        ref->scored_checked++;
    }
    if (round < w->f.fl.cfg.rounds) dbe_expect(w, ref, round + 1);
    return 0;
}

static void test_feddbe(void) {
    const pfl_algo *a = &pfl_algo_feddbe;
    pfl_config cfg = wiring_config(a, WIRING_DNN);
    wiring_set(&cfg, a, "dbe-momentum", DBE_MOMENTUM);
    wiring_set(&cfg, a, "dbe-klw", DBE_KLW);
    cfg.lr = 0.1f;
    wiring_fed w;
    wiring_init(&w, a, &cfg, WIRING_DNN);
    CHECK(feature_dim(&w) <= MAX_D, "feddbe: the test's buffers");
    dbe_ref ref = {tiny_floats(w.V), new_vectors(NC, w.V), {NULL}, tiny_floats(w.V), tiny_floats(w.V), {0}, 0, 0, 0};
    for (int c = 0; c < NC; c++) ref.prbm[c] = tiny_floats((size_t)feature_dim(&w)); /* zeros at first */
    CHECK(wiring_run(&w, dbe_hook, &ref) == 0, "feddbe: the run failed");
    CHECK(ref.rounds_checked == cfg.rounds && ref.scored_checked == cfg.rounds + 1,
          "feddbe: %d rounds and %d evaluations checked", ref.rounds_checked, ref.scored_checked);
    CHECK(ref.prbm_moved > 0, "feddbe: no client's PRBM moved from zero");
    for (int c = 0; c < NC; c++) free(ref.prbm[c]);
    free_vectors(ref.trained, NC);
    free(ref.expected), free(ref.buf), free(ref.folded);
    wiring_free(&w);
}

/* ==== FedMTL: each client its own model; --mtl-reg-grad pulls it toward the round's W ==== */

typedef struct {
    bool reg;
    double scale;
    float *model[NC], *server[NC], **trained, *anchor, *buf;
    int rounds_checked, scored_checked;
} mtl_ref;

/* PFLlib's 10^-f, f = floor(log10(dim) + 1) + 1, dim the state_dict's length (each BatchNorm's counter too). */
static double mtl_scale(const wiring_fed *w) {
    const pfl_model *m = w->f.fl.model;
    size_t dim = w->V;
    for (int l = 0; l < m->num_layers; l++) dim += m->layers[l].state_length > 0;
    return pow(10.0, -((int)(log10((double)dim) + 1.0) + 1));
}

/* The gradient of 10^-f (||W||^2 + sum_r (omega sum_c W_rc)^2) at w's column as a proximal term mu (w - anchor):
 * the other columns are the server's copies of the round's other selected clients. */
static void mtl_add_reg(wiring_fed *w, mtl_ref *ref, const int *sel, int n, int client, pfl_step *s) {
    const size_t P = w->f.fl.model->num_params;
    const double omega = 1.0 - 1.0 / n, w2 = omega * omega;
    for (size_t j = 0; j < P; j++) {
        double others = 0.0;
        for (int k = 0; k < n; k++)
            if (sel[k] != client) others += ref->server[sel[k]][j];
        ref->anchor[j] = (float)(-w2 / (1.0 + w2) * others);
    }
    pfl_step_add_prox(s, (float)(2.0 * ref->scale * (1.0 + w2)), ref->anchor, 0, P);
}

static void mtl_expect(wiring_fed *w, mtl_ref *ref, int r) {
    int sel[NC];
    const int n = wiring_selected(w, r, sel);
    for (int k = 0; k < n; k++) {
        memcpy(ref->trained[k], ref->model[sel[k]], w->V * sizeof(float));
        pfl_step s = wiring_default_step(w, r);
        if (ref->reg) mtl_add_reg(w, ref, sel, n, sel[k], &s);
        wiring_train(w, sel[k], r, ref->trained[k], &s);
    }
    for (int k = 0; k < n; k++) {
        memcpy(ref->model[sel[k]], ref->trained[k], w->V * sizeof(float));
        memcpy(ref->server[sel[k]], ref->trained[k], w->V * sizeof(float));
    }
}

static int mtl_hook(wiring_fed *w, int round, void *ctx) {
    mtl_ref *ref = ctx;
    for (int c = 0; c < NC; c++) {
        wiring_client_model(w, c, ref->buf);
        CHECK(wiring_close(ref->buf, ref->model[c], 0, w->V),
              "fedmtl%s round %d client %d: its model is not the one it trained from its own (max diff %g)",
              ref->reg ? " --mtl-reg-grad" : "", round, c, wiring_max_diff(ref->buf, ref->model[c], 0, w->V));
    }
    if (round > 0) ref->rounds_checked++;
    if (w->rounds[round].evaluated) {
        check_scores(w, round, ref->model, true, ref->reg ? "fedmtl --mtl-reg-grad" : "fedmtl");
        ref->scored_checked++;
    }
    if (round < w->f.fl.cfg.rounds) mtl_expect(w, ref, round + 1);
    return 0;
}

/* reg: --mtl-reg-grad on the BatchNorm model (whose 10^-3 makes the pull visible), at a larger rate. */
static void test_fedmtl(bool reg) {
    const pfl_algo *a = &pfl_algo_fedmtl;
    const wiring_model kind = reg ? WIRING_BN : WIRING_DNN;
    pfl_config cfg = wiring_config(a, kind);
    if (reg) cfg.algo.mtl_reg_grad = true, cfg.lr = 0.2f; /* a switch: no number to set */
    wiring_fed w;
    wiring_init(&w, a, &cfg, kind);
    mtl_ref ref = {reg, mtl_scale(&w), {NULL}, {NULL}, new_vectors(NC, w.V), tiny_floats(w.V), tiny_floats(w.V), 0, 0};
    for (int c = 0; c < NC; c++) { /* every client, and the server's copy of it, starts at the initial model */
        ref.model[c] = wiring_copy_global(&w);
        ref.server[c] = wiring_copy_global(&w);
    }
    CHECK(wiring_run(&w, mtl_hook, &ref) == 0, "fedmtl: the run failed");
    CHECK(ref.rounds_checked == cfg.rounds && ref.scored_checked == cfg.rounds + 1,
          "fedmtl: %d rounds and %d evaluations checked", ref.rounds_checked, ref.scored_checked);
    for (int c = 0; c < NC; c++) free(ref.model[c]), free(ref.server[c]);
    free_vectors(ref.trained, NC);
    free(ref.anchor), free(ref.buf);
    wiring_free(&w);
}

/* ==== FedCAC: critical parameters from a customized model of overlapping collaborators ==== */

#define CAC_TAU 0.3
#define CAC_BETA 2

typedef struct {
    bool round1; /* --cac-round1 customized: customized models from round 1 on */
    float *expected, **trained, **start, *custom[NC], *buf, *model_c[NC], *sorted, *sens;
    bool *mask[NC];
    int rounds_checked, scored_checked, collaborations;
} cac_ref;

static int desc_floats(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

/* PFLlib's evaluate_critical_parameter on one tensor: |(w - w0) w| at or above the int(tau n)-th largest (a
 * threshold at or below 1e-10 lowered to the smallest above 1e-20). */
static void cac_critical(cac_ref *ref, const float *wt, const float *w0, size_t n, bool *critical) {
    for (size_t j = 0; j < n; j++) ref->sens[j] = fabsf((wt[j] - w0[j]) * wt[j]);
    memcpy(ref->sorted, ref->sens, n * sizeof(float));
    qsort(ref->sorted, n, sizeof(float), desc_floats);
    const long top = (long)(CAC_TAU * (double)n);
    float thresh = top > 0 ? ref->sorted[top - 1] : INFINITY;
    if (thresh <= 1e-10f) {
        float least = INFINITY;
        for (size_t j = 0; j < n; j++)
            if (ref->sens[j] > 1e-20f && ref->sens[j] < least) least = ref->sens[j];
        if (least < INFINITY) thresh = least;
    }
    for (size_t j = 0; j < n; j++) critical[j] = ref->sens[j] >= thresh;
}

/* Client c's model: the global model with its critical parameters from its customized model. */
static void cac_model_of(const wiring_fed *w, const cac_ref *ref, int c, const float *global, float *out) {
    memcpy(out, global, w->V * sizeof(float));
    for (size_t j = 0; j < w->f.fl.model->num_params; j++)
        if (ref->mask[c][j]) out[j] = ref->custom[c][j];
}

/* The customized models of the round's clients: each the plain mean of its own upload and those of the
 * clients whose critical positions overlap its own by at least avg + r / beta (max - avg). */
static void cac_customize(const wiring_fed *w, cac_ref *ref, const int *sel, int n, int r) {
    const size_t P = w->f.fl.model->num_params;
    double overlap[NC][NC], sum = 0.0, most = -INFINITY;
    for (int i = 0; i < n; i++) {
        long own = 0;
        for (size_t j = 0; j < P; j++) own += ref->mask[sel[i]][j];
        for (int k = 0; k < n; k++) {
            long differ = 0;
            for (size_t j = 0; j < P; j++) differ += ref->mask[sel[i]][j] != ref->mask[sel[k]][j];
            overlap[i][k] = k != i && own > 0 ? 1.0 - (double)differ / (2.0 * (double)own) : 0.0;
            if (k == i) continue;
            sum += overlap[i][k];
            if (overlap[i][k] > most) most = overlap[i][k];
        }
    }
    const double avg = sum / ((double)(n - 1) * n), threshold = avg + (double)r / CAC_BETA * (most - avg);
    for (int i = 0; i < n; i++) {
        bool with[NC];
        int count = 0;
        for (int k = 0; k < n; k++) count += with[k] = k == i || overlap[i][k] >= threshold;
        ref->collaborations += count - 1;
        for (size_t j = 0; j < P; j++) {
            double s = 0.0;
            for (int k = 0; k < n; k++)
                if (with[k]) s += ref->trained[k][j];
            ref->custom[sel[i]][j] = (float)(s / count);
        }
    }
}

static void cac_expect(wiring_fed *w, cac_ref *ref, int r) {
    const pfl_model *m = w->f.fl.model;
    int sel[NC];
    const int n = wiring_selected(w, r, sel);
    double weight[NC];
    for (int k = 0; k < n; k++) {
        cac_model_of(w, ref, sel[k], w->f.fl.global, ref->start[k]);
        memcpy(ref->trained[k], ref->start[k], w->V * sizeof(float));
        pfl_step s = wiring_default_step(w, r);
        wiring_train(w, sel[k], r, ref->trained[k], &s);
        for (int t = 0; t < m->num_tensors; t++) /* per tensor, a weight and a bias apart */
            cac_critical(ref, ref->trained[k] + m->tensors[t].offset, ref->start[k] + m->tensors[t].offset,
                         m->tensors[t].length, ref->mask[sel[k]] + m->tensors[t].offset);
    }
    wiring_sample_weights(sel, n, weight);
    memcpy(ref->expected, w->f.fl.global, w->V * sizeof(float));
    wiring_mean(ref->expected, ref->trained, weight, n, 0, w->V);
    if (r > 1 || ref->round1) cac_customize(w, ref, sel, n, r); /* --cac-round1 initial: not in round 1 */
}

static int cac_hook(wiring_fed *w, int round, void *ctx) {
    cac_ref *ref = ctx;
    if (round > 0) {
        CHECK(wiring_close(w->f.fl.global, ref->expected, 0, w->V),
              "fedcac%s round %d: the global model is not the sample-weighted mean of the uploads (max diff %g)",
              ref->round1 ? " --cac-round1 customized" : "", round,
              wiring_max_diff(w->f.fl.global, ref->expected, 0, w->V));
        ref->rounds_checked++;
    }
    for (int c = 0; c < NC; c++) {
        cac_model_of(w, ref, c, w->f.fl.global, ref->model_c[c]);
        method_personal(w, c, ref->buf);
        CHECK(wiring_close(ref->buf, ref->model_c[c], 0, w->V),
              "fedcac%s round %d client %d: its model is not the global one with its critical parameters from its "
              "customized model (max diff %g)",
              ref->round1 ? " --cac-round1 customized" : "", round, c, wiring_max_diff(ref->buf, ref->model_c[c], 0, w->V));
    }
    if (w->rounds[round].evaluated) {
        check_scores(w, round, ref->model_c, true, ref->round1 ? "fedcac --cac-round1 customized" : "fedcac");
        ref->scored_checked++;
    }
    if (round < w->f.fl.cfg.rounds) cac_expect(w, ref, round + 1);
    return 0;
}

static void test_fedcac(bool round1) {
    const pfl_algo *a = &pfl_algo_fedcac;
    pfl_config cfg = wiring_config(a, WIRING_DNN);
    wiring_set(&cfg, a, "cac-tau", CAC_TAU);
    wiring_set(&cfg, a, "cac-beta", CAC_BETA);
    if (round1) cfg.algo.cac_round1 = "customized";
    wiring_fed w;
    wiring_init(&w, a, &cfg, WIRING_DNN);
    const size_t P = w.f.fl.model->num_params;
    cac_ref ref = {round1, tiny_floats(w.V), new_vectors(NC, w.V), new_vectors(NC, w.V), {NULL}, tiny_floats(w.V), {NULL},
                   tiny_floats(P), tiny_floats(P), {NULL}, 0, 0, 0};
    for (int c = 0; c < NC; c++) { /* no critical parameter yet; the customized models start at the initial one */
        ref.mask[c] = tiny_alloc(P * sizeof(bool));
        ref.custom[c] = wiring_copy_global(&w);
        ref.model_c[c] = tiny_floats(w.V);
    }
    CHECK(wiring_run(&w, cac_hook, &ref) == 0, "fedcac: the run failed");
    CHECK(ref.rounds_checked == cfg.rounds && ref.scored_checked == cfg.rounds + 1,
          "fedcac: %d rounds and %d evaluations checked", ref.rounds_checked, ref.scored_checked);
    CHECK(ref.collaborations > 0, "fedcac: no client collaborated with another on its critical parameters");
    for (int c = 0; c < NC; c++) free(ref.mask[c]), free(ref.custom[c]), free(ref.model_c[c]);
    free_vectors(ref.trained, NC), free_vectors(ref.start, NC);
    free(ref.expected), free(ref.buf), free(ref.sorted), free(ref.sens);
    wiring_free(&w);
}

/* ==== FedAS: the received extractor aligned to the client's prototypes; means by Fisher traces ==== */

#define AS_LR 0.03f
#define AS_EPOCHS 2
#define AS_BATCH 16

typedef struct {
    double sum[WIRING_CLASSES][MAX_D];
    long count[WIRING_CLASSES];
    int D;
} proto_sums;

static void proto_block(void *ctx, const pfl_block_batch *b) {
    proto_sums *p = ctx;
    for (int n = 0; n < b->B; n++) {
        p->count[b->labels[n]]++;
        for (int d = 0; d < p->D; d++) p->sum[b->labels[n]][d] += b->features[(size_t)n * p->D + d];
    }
}

/* The class prototypes of the client's training data under `model`: one pass at rate 0, the features entering
 * the head summed by a block. */
static void as_prototypes(wiring_fed *w, int client, int r, const float *model, float *proto) {
    float *copy = wiring_copy_global(w);
    memcpy(copy, model, w->V * sizeof(float));
    proto_sums p;
    memset(&p, 0, sizeof p);
    p.D = feature_dim(w);
    pfl_step s = wiring_default_step(w, r);
    s.epochs = 1, s.opt.lr = 0.0f;
    pfl_step_add_block(&s, head_row(w), proto_block, &p);
    wiring_train(w, client, r, copy, &s);
    for (int c = 0; c < WIRING_CLASSES; c++)
        for (int d = 0; d < p.D; d++)
            proto[(size_t)c * p.D + d] = p.count[c] ? (float)(p.sum[c][d] / (double)p.count[c]) : 0.0f;
    free(copy);
}

/* sum over the batch's classes of the MSE of their samples' features to their prototype. */
static double align_value(void *ctx, const pfl_term_batch *b, float *dz, int *correct) {
    const float *proto = ctx;
    const int D = (int)b->n;
    int in_batch[WIRING_CLASSES] = {0};
    for (int n = 0; n < b->B; n++) in_batch[b->labels[n]]++;
    double loss = 0.0;
    for (int n = 0; n < b->B; n++) {
        const double scale = 1.0 / ((double)in_batch[b->labels[n]] * D);
        for (int d = 0; d < D; d++) {
            const double e = (double)b->z[(size_t)n * D + d] - proto[(size_t)b->labels[n] * D + d];
            loss += scale * e * e;
            dz[(size_t)n * D + d] = (float)(2.0 * scale * e);
        }
    }
    *correct = 0;
    return loss;
}

/* The alignment: --as-align-epochs passes of plain SGD at --as-align-lr on the extractor, batches of 16 (the
 * last smaller one left out) in the stream of a second pass. */
static void as_align(wiring_fed *w, int client, int r, float *model, const float *proto) {
    const int steps = AS_EPOCHS * (wiring_train_n[client] / AS_BATCH);
    if (steps == 0) return;
    bool frozen[PFL_MAX_LAYERS] = {false};
    frozen[head_row(w)] = frozen[block_row(w)] = true;
    pfl_step s = wiring_default_step(w, r);
    s.epochs = AS_EPOCHS, s.steps = steps, s.batch = s.min_batch = AS_BATCH;
    s.shuffle = PFL_RNG_SHUFFLE_PERSONAL, s.ce_weight = 0.0, s.opt.lr = AS_LR, s.opt.frozen = frozen;
    const pfl_loss_term term = {.name = "the test's alignment", .at = head_row(w), .weight = 1.0f,
                                .value = align_value, .ctx = (void *)proto};
    pfl_step_add_term(&s, &term);
    wiring_train(w, client, r, model, &s);
}

/* The trace of the Fisher information: over the full batches of --batch in the ALGO stream's order, the squared
 * norm of the batch's mean-NLL gradient, read off one SGD step at rate 1 from `model`. */
static double as_trace(wiring_fed *w, int client, int r, const float *model) {
    const pfl_client_data *cd = &w->f.part.clients[client];
    const int batch = w->f.fl.cfg.batch;
    const size_t P = wiring_layer_off(w, block_row(w));
    int order[64]; /* the federation's largest client trains on 30 */
    memcpy(order, cd->train, sizeof(int) * (size_t)cd->n_train);
    pfl_rng rng = pfl_rng_stream(w->f.fl.cfg.seed, r, client, PFL_RNG_ALGO);
    pfl_rng_shuffle(&rng, order, (size_t)cd->n_train);
    float *stepped = tiny_floats(w->V);
    double trace = 0.0;
    for (int start = 0; start + batch <= cd->n_train; start += batch) {
        memcpy(stepped, model, w->V * sizeof(float));
        pfl_step s = wiring_default_step(w, r);
        s.epochs = 1, s.samples = order + start, s.n_samples = batch, s.opt.lr = 1.0f;
        wiring_train(w, client, r, stepped, &s);
        for (size_t j = 0; j < P; j++) trace += ((double)model[j] - stepped[j]) * ((double)model[j] - stepped[j]);
    }
    free(stepped);
    return trace;
}

typedef struct {
    float *model[NC], **trained, *expected, *buf, *proto;
    double trace[NC];
    int rounds_checked, scored_checked, aligned;
} as_ref;

static void as_expect(wiring_fed *w, as_ref *ref, int r) {
    int sel[NC];
    const int n = wiring_selected(w, r, sel);
    const size_t fisher = wiring_layer_off(w, block_row(w)), base = wiring_layer_off(w, head_row(w));
    for (int k = 0; k < n; k++) {
        const int c = sel[k];
        float *m = ref->trained[k];
        memcpy(m, ref->model[c], w->V * sizeof(float));  /* its own head */
        memcpy(m, w->f.fl.global, base * sizeof(float)); /* the received extractor */
        as_prototypes(w, c, r, ref->model[c], ref->proto);
        as_align(w, c, r, m, ref->proto);
        ref->aligned += wiring_train_n[c] >= AS_BATCH;
        m[fisher] = 0.0f;
        pfl_step s = wiring_default_step(w, r);
        wiring_train(w, c, r, m, &s);
        ref->trace[k] = as_trace(w, c, r, m);
        m[fisher] = (float)ref->trace[k];
    }
    memcpy(ref->expected, w->f.fl.global, w->V * sizeof(float));
    wiring_mean(ref->expected, ref->trained, ref->trace, n, 0, fisher);
    ref->expected[fisher] = 0.0f;
    for (int k = 0; k < n; k++) memcpy(ref->model[sel[k]], ref->trained[k], w->V * sizeof(float));
}

static int as_hook(wiring_fed *w, int round, void *ctx) {
    as_ref *ref = ctx;
    const size_t fisher = wiring_layer_off(w, block_row(w));
    if (round > 0) {
        CHECK(wiring_close(w->f.fl.global, ref->expected, 0, w->V),
              "fedas round %d: the global model is not the Fisher-weighted mean of the aligned and trained uploads "
              "(max diff %g)",
              round, wiring_max_diff(w->f.fl.global, ref->expected, 0, w->V));
        ref->rounds_checked++;
    }
    for (int c = 0; c < NC; c++) {
        wiring_client_model(w, c, ref->buf);
        CHECK(wiring_close(ref->buf, ref->model[c], 0, fisher),
              "fedas round %d client %d: its model is not the one its last alignment and training made (max diff %g)",
              round, c, wiring_max_diff(ref->buf, ref->model[c], 0, fisher));
    }
    if (w->rounds[round].evaluated) {
        check_scores(w, round, ref->model, true, "fedas");
        ref->scored_checked++;
    }
    if (round < w->f.fl.cfg.rounds) as_expect(w, ref, round + 1);
    return 0;
}

static void test_fedas(void) {
    const pfl_algo *a = &pfl_algo_fedas;
    pfl_config cfg = wiring_config(a, WIRING_DNN);
    wiring_set(&cfg, a, "as-align-lr", AS_LR);
    wiring_set(&cfg, a, "as-align-epochs", AS_EPOCHS);
    cfg.eval_batch = AS_BATCH; /* the executor's batch holds an alignment batch whole, in the method and here */
    wiring_fed w;
    wiring_init(&w, a, &cfg, WIRING_DNN);
    CHECK(feature_dim(&w) <= MAX_D, "fedas: the test's buffers");
    as_ref ref = {{NULL}, new_vectors(NC, w.V), tiny_floats(w.V), tiny_floats(w.V),
                  tiny_floats((size_t)WIRING_CLASSES * (size_t)feature_dim(&w)), {0}, 0, 0, 0};
    for (int c = 0; c < NC; c++) ref.model[c] = wiring_copy_global(&w);
    CHECK(wiring_run(&w, as_hook, &ref) == 0, "fedas: the run failed");
    CHECK(ref.rounds_checked == cfg.rounds && ref.scored_checked == cfg.rounds + 1,
          "fedas: %d rounds and %d evaluations checked", ref.rounds_checked, ref.scored_checked);
    CHECK(ref.aligned > 0, "fedas: no client had a batch of 16 to align on");
    for (int c = 0; c < NC; c++) free(ref.model[c]);
    free_vectors(ref.trained, NC);
    free(ref.expected), free(ref.buf), free(ref.proto);
    wiring_free(&w);
}

/* ==== PFL-DA: the personal head, then the base and the shared global head ==== */

#define DA_LAMBDA 0.3f

/* lambda (p - g) / ||p - g|| on the personal head p, g the global head (the block). */
static void da_reg(void *ctx, const pfl_model *m, const float *params, float *grads) {
    const float lambda = *(const float *)ctx;
    const pfl_layer *p = &m->layers[m->num_layers - 1], *g = &m->layers[m->num_layers];
    double sq = 0.0;
    for (size_t j = 0; j < p->length; j++) {
        const double d = (double)params[p->offset + j] - params[g->offset + j];
        sq += d * d;
    }
    if (!(sq > 0.0)) return;
    for (size_t j = 0; j < p->length; j++)
        grads[p->offset + j] += (float)(lambda / sqrt(sq) * ((double)params[p->offset + j] - params[g->offset + j]));
}

typedef struct {
    bool reg; /* --da-reg-grad */
    float *model[NC], **trained, *expected, *buf, *swapped;
    int rounds_checked, scored_checked;
} da_ref;

/* One client's round: phase 1 the personal head (the rest frozen) with the regularizer's gradient; phase 2 is
 * FedAvg's step on the network whose head is the global head (the personal head set aside), in a second
 * pass's batch order. */
static void da_train_client(wiring_fed *w, da_ref *ref, int client, int r, float *m) {
    const int head = head_row(w), block = block_row(w);
    const size_t ho = wiring_layer_off(w, head), bo = wiring_layer_off(w, block), hl = wiring_layer_len(w, head);
    bool frozen[PFL_MAX_LAYERS] = {false};
    float lambda = DA_LAMBDA;
    freeze_all_but(w, frozen, head);
    pfl_step s1 = wiring_default_step(w, r);
    s1.opt.frozen = frozen;
    if (ref->reg) pfl_step_add_grad(&s1, da_reg, &lambda); /* PFLlib's reading: a constant, no gradient */
    wiring_train(w, client, r, m, &s1);
    memcpy(ref->swapped, m, w->V * sizeof(float));
    memcpy(ref->swapped + ho, m + bo, hl * sizeof(float));
    bool block_only[PFL_MAX_LAYERS] = {false};
    block_only[block] = true;
    pfl_step s2 = wiring_default_step(w, r);
    s2.shuffle = PFL_RNG_SHUFFLE_PERSONAL, s2.opt.frozen = block_only;
    wiring_train(w, client, r, ref->swapped, &s2);
    memcpy(m, ref->swapped, ho * sizeof(float));
    memcpy(m + bo, ref->swapped + ho, hl * sizeof(float));
}

static void da_expect(wiring_fed *w, da_ref *ref, int r) {
    int sel[NC];
    const int n = wiring_selected(w, r, sel);
    const size_t bo = wiring_layer_off(w, block_row(w)), bl = wiring_layer_len(w, block_row(w));
    double weight[NC];
    for (int k = 0; k < n; k++) {
        float *m = ref->trained[k];
        memcpy(m, ref->model[sel[k]], w->V * sizeof(float));
        memcpy(m + bo, w->f.fl.global + bo, bl * sizeof(float)); /* the global head received */
        da_train_client(w, ref, sel[k], r, m);
    }
    wiring_sample_weights(sel, n, weight);
    memcpy(ref->expected, w->f.fl.global, w->V * sizeof(float));
    wiring_mean(ref->expected, ref->trained, weight, n, bo, bl);
    for (int k = 0; k < n; k++) memcpy(ref->model[sel[k]], ref->trained[k], w->V * sizeof(float));
}

static int da_hook(wiring_fed *w, int round, void *ctx) {
    da_ref *ref = ctx;
    const size_t bo = wiring_layer_off(w, block_row(w)), bl = wiring_layer_len(w, block_row(w));
    if (round > 0) {
        CHECK(wiring_close(w->f.fl.global + bo, ref->expected + bo, 0, bl),
              "pfl-da%s round %d: the global head is not the sample-weighted mean of the uploaded ones (max diff %g)",
              ref->reg ? " --da-reg-grad" : "", round, wiring_max_diff(w->f.fl.global + bo, ref->expected + bo, 0, bl));
        ref->rounds_checked++;
    }
    for (int c = 0; c < NC; c++) {
        wiring_client_model(w, c, ref->buf);
        CHECK(wiring_close(ref->buf, ref->model[c], 0, bo),
              "pfl-da%s round %d client %d: its backbone is not the one it trained (max diff %g)",
              ref->reg ? " --da-reg-grad" : "", round, c,
              wiring_max_diff(ref->buf, ref->model[c], 0, bo));
        CHECK(wiring_close(ref->buf + bo, w->f.fl.global + bo, 0, bl),
              "pfl-da round %d client %d: its global head is not the server's", round, c);
    }
    if (w->rounds[round].evaluated) {
        check_scores(w, round, ref->model, true, ref->reg ? "pfl-da --da-reg-grad" : "pfl-da");
        ref->scored_checked++;
    }
    if (round < w->f.fl.cfg.rounds) da_expect(w, ref, round + 1);
    return 0;
}

static void test_pfl_da(bool reg) {
    const pfl_algo *a = &pfl_algo_pfl_da;
    pfl_config cfg = wiring_config(a, WIRING_MLP3);
    wiring_set(&cfg, a, "da-lambda", DA_LAMBDA);
    cfg.algo.da_reg_grad = reg; /* with its gradient lambda matters; without, it must change nothing */
    wiring_fed w;
    wiring_init(&w, a, &cfg, WIRING_MLP3);
    da_ref ref = {reg, {NULL}, new_vectors(NC, w.V), tiny_floats(w.V), tiny_floats(w.V), tiny_floats(w.V), 0, 0};
    for (int c = 0; c < NC; c++) ref.model[c] = wiring_copy_global(&w); /* each backbone starts at the initial one */
    CHECK(wiring_run(&w, da_hook, &ref) == 0, "pfl-da: the run failed");
    CHECK(ref.rounds_checked == cfg.rounds && ref.scored_checked == cfg.rounds + 1,
          "pfl-da: %d rounds and %d evaluations checked", ref.rounds_checked, ref.scored_checked);
    for (int c = 0; c < NC; c++) free(ref.model[c]);
    free_vectors(ref.trained, NC);
    free(ref.expected), free(ref.buf), free(ref.swapped);
    wiring_free(&w);
}

/* ==== FedGC: each client's head over its own classes, kept and corrected by the server ==== */

#define GC_LAMBDA 0.4f

static void gc_no_bias(void *ctx, const pfl_model *m, const float *params, float *grads) {
    (void)ctx, (void)params;
    const pfl_layer *h = &m->layers[m->num_layers - 1];
    const size_t W = (size_t)m->classes * (size_t)pfl_model_layer_input_size(m, m->num_layers - 1);
    memset(grads + h->offset + W, 0, sizeof(float) * (h->length - W));
}

typedef struct {
    float *head[NC], **trained, *expected, *buf, *model_c[NC];
    int rounds_checked, scored_checked;
} gc_ref;

static bool holds(int client, int c) { return wiring_holds[client] >> c & 1u; }

/* Client c's model: the global extractor under its own head, no bias. */
static void gc_model_of(const wiring_fed *w, const gc_ref *ref, int c, const float *global, float *out) {
    const size_t ho = wiring_layer_off(w, head_row(w)), W = (size_t)WIRING_CLASSES * (size_t)feature_dim(w);
    memcpy(out, global, w->V * sizeof(float));
    memcpy(out + ho, ref->head[c], W * sizeof(float));
    memset(out + ho + W, 0, sizeof(float) * (wiring_layer_len(w, head_row(w)) - W));
}

/* e_c: the mean of class c's rows over the clients that hold it. */
static void gc_embeddings(const gc_ref *ref, int D, double *e) {
    for (int c = 0; c < WIRING_CLASSES; c++) {
        int m = 0;
        for (int d = 0; d < D; d++) e[c * D + d] = 0.0;
        for (int j = 0; j < NC; j++) {
            if (!holds(j, c)) continue;
            m++;
            for (int d = 0; d < D; d++) e[c * D + d] += ref->head[j][c * D + d];
        }
        for (int d = 0; d < D && m > 0; d++) e[c * D + d] /= m;
    }
}

static double gc_dot(const float *w, const double *e, int D) {
    double s = 0.0;
    for (int d = 0; d < D; d++) s += (double)w[d] * e[d];
    return s;
}

/* One SGD step at lr x lambda on sum_c m_c -log(exp(e_c.e_c) / (exp(e_c.e_c) + sum_{j lacks c} sum_{r in j}
 * exp(w_jr.e_c))), e_c held fixed, on every client's head. */
static void gc_correct_heads(gc_ref *ref, int D, float lr) {
    double e[WIRING_CLASSES * MAX_D], z[WIRING_CLASSES];
    int m[WIRING_CLASSES] = {0};
    gc_embeddings(ref, D, e);
    for (int c = 0; c < WIRING_CLASSES; c++) {
        for (int j = 0; j < NC; j++) m[c] += holds(j, c);
        double ee = 0.0;
        for (int d = 0; d < D; d++) ee += e[c * D + d] * e[c * D + d];
        z[c] = exp(ee);
        for (int j = 0; j < NC; j++)
            for (int r = 0; r < WIRING_CLASSES && !holds(j, c); r++)
                if (holds(j, r)) z[c] += exp(gc_dot(ref->head[j] + r * D, e + c * D, D));
    }
    double grad[WIRING_CLASSES * MAX_D];
    for (int j = 0; j < NC; j++) {
        memset(grad, 0, sizeof grad);
        for (int c = 0; c < WIRING_CLASSES; c++)
            for (int r = 0; r < WIRING_CLASSES && !holds(j, c) && m[c] > 0; r++) {
                if (!holds(j, r)) continue;
                const double p = m[c] * exp(gc_dot(ref->head[j] + r * D, e + c * D, D)) / z[c];
                for (int d = 0; d < D; d++) grad[r * D + d] += p * e[c * D + d];
            }
        for (int i = 0; i < WIRING_CLASSES * D; i++) ref->head[j][i] = (float)(ref->head[j][i] - lr * grad[i]);
    }
}

/* Client j's head as nn.Linear(D, C_j, bias=False) starts: uniform in +-1/sqrt(D), row by row over the classes
 * it holds, from its own stream (seed, 0, j, ALGO); the rows of the classes it lacks zero. */
static void gc_initial_heads(const wiring_fed *w, gc_ref *ref) {
    const int D = feature_dim(w);
    const double bound = 1.0 / sqrt((double)D);
    for (int j = 0; j < NC; j++) {
        pfl_rng rng = pfl_rng_stream(w->f.fl.cfg.seed, 0, j, PFL_RNG_ALGO);
        for (int c = 0; c < WIRING_CLASSES; c++)
            for (int d = 0; d < D; d++)
                ref->head[j][c * D + d] = holds(j, c) ? (float)(bound * (2.0 * pfl_rng_uniform(&rng) - 1.0)) : 0.0f;
    }
}

static void gc_expect(wiring_fed *w, gc_ref *ref, int r) {
    int sel[NC];
    const int n = wiring_selected(w, r, sel), D = feature_dim(w);
    const size_t ho = wiring_layer_off(w, head_row(w)), W = (size_t)WIRING_CLASSES * (size_t)D;
    double weight[NC];
    for (int k = 0; k < n; k++) {
        float offset[WIRING_CLASSES];
        for (int c = 0; c < WIRING_CLASSES; c++) offset[c] = holds(sel[k], c) ? 0.0f : -INFINITY;
        gc_model_of(w, ref, sel[k], w->f.fl.global, ref->trained[k]);
        pfl_step s = wiring_default_step(w, r);
        s.ce_offset = offset;
        pfl_step_add_grad(&s, gc_no_bias, NULL);
        wiring_train(w, sel[k], r, ref->trained[k], &s);
    }
    wiring_sample_weights(sel, n, weight);
    memcpy(ref->expected, w->f.fl.global, w->V * sizeof(float));
    wiring_mean(ref->expected, ref->trained, weight, n, 0, ho); /* the extractor */
    for (int k = 0; k < n; k++)
        for (int c = 0; c < WIRING_CLASSES; c++)
            if (holds(sel[k], c)) memcpy(ref->head[sel[k]] + c * D, ref->trained[k] + ho + c * D, sizeof(float) * D);
    gc_correct_heads(ref, D, w->f.fl.cfg.lr * GC_LAMBDA);
    double e[WIRING_CLASSES * MAX_D];
    gc_embeddings(ref, D, e);
    for (size_t i = 0; i < W; i++) ref->expected[ho + i] = (float)e[i];
    memset(ref->expected + ho + W, 0, sizeof(float) * (wiring_layer_len(w, head_row(w)) - W));
}

static int gc_hook(wiring_fed *w, int round, void *ctx) {
    gc_ref *ref = ctx;
    if (round > 0) {
        CHECK(wiring_close(w->f.fl.global, ref->expected, 0, w->V),
              "fedgc round %d: the global model is not the sample-weighted extractor under the corrected heads' "
              "class embeddings (max diff %g)",
              round, wiring_max_diff(w->f.fl.global, ref->expected, 0, w->V));
        ref->rounds_checked++;
    }
    for (int c = 0; c < NC; c++) {
        gc_model_of(w, ref, c, w->f.fl.global, ref->model_c[c]);
        method_personal(w, c, ref->buf);
        CHECK(wiring_close(ref->buf, ref->model_c[c], 0, w->V),
              "fedgc round %d client %d: its model is not the global extractor under its own corrected head (max "
              "diff %g)",
              round, c, wiring_max_diff(ref->buf, ref->model_c[c], 0, w->V));
    }
    if (w->rounds[round].evaluated) {
        check_scores(w, round, ref->model_c, true, "fedgc");
        ref->scored_checked++;
    }
    if (round < w->f.fl.cfg.rounds) gc_expect(w, ref, round + 1);
    return 0;
}

static void test_fedgc(void) {
    const pfl_algo *a = &pfl_algo_fedgc;
    pfl_config cfg = wiring_config(a, WIRING_DNN);
    wiring_set(&cfg, a, "gc-lambda", GC_LAMBDA);
    wiring_fed w;
    wiring_init(&w, a, &cfg, WIRING_DNN);
    CHECK(feature_dim(&w) <= MAX_D, "fedgc: the test's buffers");
    const size_t W = (size_t)WIRING_CLASSES * (size_t)feature_dim(&w);
    gc_ref ref = {{NULL}, new_vectors(NC, w.V), tiny_floats(w.V), tiny_floats(w.V), {NULL}, 0, 0};
    for (int c = 0; c < NC; c++) ref.head[c] = tiny_floats(W), ref.model_c[c] = tiny_floats(w.V);
    gc_initial_heads(&w, &ref);
    CHECK(wiring_run(&w, gc_hook, &ref) == 0, "fedgc: the run failed");
    CHECK(ref.rounds_checked == cfg.rounds && ref.scored_checked == cfg.rounds + 1,
          "fedgc: %d rounds and %d evaluations checked", ref.rounds_checked, ref.scored_checked);
    for (int c = 0; c < NC; c++) free(ref.head[c]), free(ref.model_c[c]);
    free_vectors(ref.trained, NC);
    free(ref.expected), free(ref.buf);
    wiring_free(&w);
}

int main(void) {
    test_feddbe();
    test_fedmtl(false);
    test_fedmtl(true);
    test_fedcac(false);
    test_fedcac(true);
    test_fedas();
    test_pfl_da(true);
    test_pfl_da(false);
    test_fedgc();
    TEST_MAIN_END();
}
