/* APFL (Deng, Kamani & Mahdavi 2020, "Adaptive Personalized Federated
 * Learning"): each client keeps a local model v and a mixing weight alpha;
 * its personalized model mixes v with w,
 *
 *   v_bar = alpha v + (1 - alpha) w.
 *
 * w, the client's copy of the global model, trains as FedAvg's (w <- w - lr
 * grad f(w)), is uploaded and averaged. The two readings (--reading,
 * docs/algorithms.md) differ in v, alpha and the model scored:
 *
 *  - pfllib (the default; PFLlib's clientapfl.py): per batch v <- v - lr
 *    grad f(v) and, after both steps, alpha <- alpha - lr (<v - w, alpha
 *    grad f(v) + (1 - alpha) grad f(w)> + 0.02 alpha) (from FedTorch),
 *    clipped to [0, 1]; after training v becomes the mix alpha v + (1 -
 *    alpha) w with the trained w (parameters only), which is the model
 *    scored.
 *  - paper (Algorithm 1 with the adaptive alpha of its Section 3.2): per
 *    batch, from the same w, v, alpha: v <- v - lr alpha grad f(v_bar) (the
 *    chain rule through v_bar), alpha <- alpha - lr <v - w, grad f(v_bar)>
 *    clipped to [0, 1]; v stays v, and the model scored mixes it with the
 *    global model the client holds after the broadcast.
 *
 * v is the client's state (the whole model, trained in place like Ditto's v),
 * alpha lives in a per-client store of the method ("apfl-alpha"), both
 * checkpointed. Running statistics (BatchNorm): v's move with the batches v
 * (pfllib) or v_bar (paper) normalizes; the global model w takes the client's
 * own where --bn keeps them local (pfl_keep_local_bn), so the paper's mix of
 * v with it keeps the client's. */
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "util/err.h"

typedef struct {
    pfl_store *alpha; /* per client its alpha, one float (rows by client) */
} apfl_state;

static int apfl_create(pfl_fl *fl) {
    if (fl->cfg.modules.flayer_lr)
        return pfl_err("apfl: --flayer-lr is not supported (APFL trains with its own steps)");
    if (fl->cfg.eval_moment == PFL_EVAL_AFTER_TRAIN && pfl_reading_paper(&fl->cfg))
        return pfl_err("apfl: --eval-moment after-train is not supported with --reading paper (the personalized "
                       "model mixes v with the global model the client holds, which training does not leave)");
    apfl_state *s = pfl_calloc(1, sizeof *s);
    if (!(fl->algo_state = s)) return -1;
    const float alpha = fl->cfg.algo.apfl_alpha;
    return (s->alpha = pfl_fl_store(fl, "apfl-alpha", fl->cfg.clients, 1, &alpha)) ? 0 : -1;
}

static void apfl_destroy(pfl_fl *fl) {
    free(fl->algo_state);
    fl->algo_state = NULL;
}

void pfl_apfl_mix(float *out, const float *v, const float *w, float alpha, size_t n) {
    for (size_t j = 0; j < n; j++) out[j] = alpha * v[j] + (1.0f - alpha) * w[j];
}

static float clip01(double a) { return (float)(a < 0.0 ? 0.0 : a > 1.0 ? 1.0 : a); }

float pfl_apfl_alpha_step(float alpha, const float *v, const float *w, const float *grad_mix, size_t n, float lr) {
    double dot = 0.0;
    for (size_t j = 0; j < n; j++) dot += (double)(v[j] - w[j]) * grad_mix[j];
    return clip01((double)alpha - (double)lr * dot);
}

float pfl_apfl_alpha_step_pfllib(float alpha, const float *v, const float *w, const float *grad_v,
                                 const float *grad_w, size_t n, float lr) {
    double dot = 0.0;
    for (size_t j = 0; j < n; j++)
        dot += (double)(v[j] - w[j]) * ((double)alpha * grad_v[j] + (1.0 - (double)alpha) * grad_w[j]);
    return clip01((double)alpha - (double)lr * (dot + 0.02 * (double)alpha));
}

typedef struct {
    float *v, *alpha, lr;
    bool paper;
} apfl_batch_ctx;

/* The gradient of the batch's loss at `model` (a view) into grads, its running statistics moving `stats_of`;
 * the loss, and the correct count into *correct. */
static float batch_gradient(pfl_exec *x, pfl_xbuf *model, pfl_xbuf *grads, size_t P, pfl_rng *dropout,
                            pfl_xbuf *stats_of, int *correct) {
    pfl_exec_zero(x, grads, 0, P);
    pfl_exec_forward(x, model, true, dropout);
    const float loss = pfl_exec_xent(x, NULL);
    pfl_exec_update_stats(x, stats_of);
    *correct = pfl_exec_correct(x);
    pfl_exec_backward(x, model, grads, 0, 1.0f, NULL, 0);
    return loss;
}

float pfl_apfl_alpha(const pfl_fl *fl, int client) {
    const apfl_state *s = fl->algo_state;
    return pfl_store_read(s->alpha, client)[0];
}

/* One batch on w (the step's model), v and alpha, the method's own work on
 * host memory: the loss of w; the correct predictions of v_bar (paper) or v
 * (pfllib). --momentum and --weight-decay act on w as on FedAvg's model; v
 * takes plain steps (PFLlib's optimizer_per is plain SGD). */
static bool apfl_batch(void *ctx, pfl_owned_batch *b) {
    const apfl_batch_ctx *c = ctx;
    pfl_exec_gather(b->x, b->idx, b->B);
    const pfl_fl *fl = b->fl;
    pfl_worker *w = b->w;
    pfl_exec *x = b->x;
    const size_t P = fl->model->num_params, V = pfl_model_vector_len(fl->model);
    float *model = pfl_exec_host(b->model), *mix = w->aux;
    if (c->paper) pfl_apfl_mix(mix, c->v, model, *c->alpha, V); /* from w and v before this batch's steps */
    pfl_xbuf v_v = pfl_exec_view(x, c->v, V, true);
    int correct;
    const float loss = batch_gradient(x, b->model, &w->grads, P, b->dropout, b->model, &correct);
    const pfl_sgd global = {c->lr, fl->cfg.momentum, fl->cfg.weight_decay};
    if (c->paper) { /* Algorithm 1: v through the mix, alpha from the same w, v and gradient */
        pfl_xbuf mix_v = pfl_exec_view(x, mix, V, false);
        batch_gradient(x, &mix_v, &w->aux_grads, P, b->dropout, &v_v, &correct);
        pfl_exec_unview(x, &mix_v);
        const float next_alpha = pfl_apfl_alpha_step(*c->alpha, c->v, model, pfl_exec_host(&w->aux_grads), P, c->lr);
        const pfl_sgd personal = {c->lr * *c->alpha, 0.0f, 0.0f};
        pfl_exec_sgd(x, b->model, &w->grads, &w->velocity, 0, P, &global);
        pfl_exec_sgd(x, &v_v, &w->aux_grads, NULL, 0, P, &personal);
        *c->alpha = next_alpha;
    } else { /* PFLlib's clientapfl.py: w's step, v's on its own loss, then alpha from the stepped models */
        pfl_exec_sgd(x, b->model, &w->grads, &w->velocity, 0, P, &global);
        batch_gradient(x, &v_v, &w->aux_grads, P, b->dropout, &v_v, &correct);
        const pfl_sgd personal = {c->lr, 0.0f, 0.0f};
        pfl_exec_sgd(x, &v_v, &w->aux_grads, NULL, 0, P, &personal);
        *c->alpha = pfl_apfl_alpha_step_pfllib(*c->alpha, c->v, model, pfl_exec_host(&w->aux_grads),
                                               pfl_exec_host(&w->grads), P, c->lr);
    }
    pfl_exec_unview(x, &v_v);
    pfl_step_count(b, loss, correct, b->B);
    return true;
}

static void apfl_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    apfl_state *s = fl->algo_state;
    const bool paper = pfl_reading_paper(&fl->cfg);
    apfl_batch_ctx c = {pfl_client_model(fl, client), pfl_store_write(s->alpha, client), pfl_round_lr(fl), paper};
    if (!c.v || !c.alpha) return; /* no room: the store's error fails the round */
    pfl_step step = pfl_step_default(fl);
    step.own = apfl_batch, step.own_ctx = &c;
    pfl_step_run(fl, client, w, model, &step, stats);
    /* PFLlib: v becomes the mix with the trained w, over the parameters (its running statistics stay v's) */
    if (!paper) pfl_apfl_mix(c.v, c.v, model, *c.alpha, fl->model->num_params);
    pfl_store_release(s->alpha, client);
}

/* The global model w as the client holds it: what --bn keeps local is the client's own (from v). */
static void global_as_held(pfl_fl *fl, const float *v, float *out) {
    memcpy(out, fl->global, pfl_model_vector_len(fl->model) * sizeof(float));
    pfl_keep_local_bn(fl, v, out);
}

/* w, the copy trained and uploaded, starts from the global model. */
static void apfl_init(pfl_fl *fl, int client, float *model) {
    const float *v = pfl_client_model(fl, client);
    if (v) global_as_held(fl, v, model);
    else memcpy(model, fl->global, pfl_model_vector_len(fl->model) * sizeof(float));
}

/* v was trained in place; the copy of w is uploaded, not kept. */
static void apfl_finish(pfl_fl *fl, int client, const float *model, float *state) {
    (void)fl, (void)client, (void)model, (void)state;
}

/* pfllib: v (the mix training left); paper: alpha v + (1 - alpha) w, w the global model as the client holds it. */
static const float *apfl_personal_model(pfl_fl *fl, int client, float *scratch) {
    const apfl_state *s = fl->algo_state;
    const float *v = pfl_client_model_get(fl, client, scratch);
    if (!pfl_reading_paper(&fl->cfg)) return v;
    global_as_held(fl, v, scratch);
    pfl_apfl_mix(scratch, v, scratch, pfl_store_read(s->alpha, client)[0], pfl_model_vector_len(fl->model));
    return scratch;
}

static int apfl_save(const pfl_fl *fl, pfl_ckpt_writer *w) {
    const apfl_state *s = fl->algo_state;
    return pfl_store_save(s->alpha, w, "apfl.alpha");
}

static int apfl_load(pfl_fl *fl, pfl_ckpt_reader *r) {
    apfl_state *s = fl->algo_state;
    return pfl_store_load(s->alpha, r, "apfl.alpha");
}

/* PFLlib's default alpha (-al 1.0): v_bar starts as v, and alpha moves
 * from there. */
static const pfl_param apfl_params[] = {
    {PFL_ALGO_PARAM(FLOAT, "apfl-alpha", apfl_alpha), .def = 1.0, .max = 1.0, .metavar = "F",
     .help = "initial mixing weight alpha of the local model v in alpha v + (1 - alpha) w, in [0, 1]"},
    PFL_READING_PARAM("pfllib: v steps on f(v), alpha's gradient gains 0.02 alpha, v becomes the mix with the "
                      "trained w after training and is scored (clientapfl.py) | paper: v steps alpha grad f(v_bar), "
                      "v stays v, the scored mix takes the global w (Algorithm 1)"),
};

static int apfl_check(const pfl_config *cfg) { return pfl_check_reading(cfg); }

/* The parameters APFL adds beside the model every client trains: its v and alpha. */
static void apfl_report(const pfl_fl *fl, FILE *f, int what) {
    if (what == PFL_REPORT_SUMMARY) fprintf(f, ",\n  \"extra_params_per_client\": %zu", fl->model->num_params + 1);
}

const pfl_algo pfl_algo_apfl = {
    .name = "apfl",
    .description = "APFL: personalized model alpha v + (1 - alpha) w with a learned alpha (--apfl-alpha, --reading)",
    PFL_PARAMS(apfl_params),
    .has_global = true,
    .stateful = true,
    .keeps_state = true,
    .create = apfl_create,
    .check = apfl_check,
    .destroy = apfl_destroy,
    .local_init = apfl_init,
    .local_train = apfl_train,
    .finish = apfl_finish,
    .personal_model = apfl_personal_model,
    .report = apfl_report,
    .save = apfl_save,
    .load = apfl_load,
};
