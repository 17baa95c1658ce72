/* APFL (Deng, Kamani & Mahdavi 2020, "Adaptive Personalized Federated
 * Learning"): each client keeps a local model v and a mixing weight alpha;
 * its personalized model is the mix
 *
 *   v_bar = alpha v + (1 - alpha) w
 *
 * of v with the global model w. On every batch (Algorithm 1, with the
 * adaptive alpha of its Section 3.2), from the same w, v, alpha:
 *
 *   w     <- w - lr grad f(w)                       (the client's copy of the global model, uploaded)
 *   v     <- v - lr alpha grad f(v_bar)             (the chain rule through v_bar)
 *   alpha <- alpha - lr <v - w, grad f(v_bar)>      (d f(v_bar) / d alpha), clipped to [0, 1]
 *
 * v is the client's state (the whole model, trained in place like Ditto's v),
 * alpha lives in a per-client store of the method ("apfl-alpha"), both
 * checkpointed. The server averages w as FedAvg does. The personalized model
 * evaluated is alpha v + (1 - alpha) w with w the global model the client
 * holds after the broadcast. Running statistics (BatchNorm) mix like the
 * parameters; v's move with the batches v_bar normalizes. */
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
    if (fl->cfg.eval_moment == PFL_EVAL_AFTER_TRAIN)
        return pfl_err("apfl: --eval-moment after-train is not supported (the personalized model mixes v with "
                       "the global model the client holds, which training does not leave)");
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

float pfl_apfl_alpha_step(float alpha, const float *v, const float *w, const float *grad_mix, size_t n, float lr) {
    double dot = 0.0;
    for (size_t j = 0; j < n; j++) dot += (double)(v[j] - w[j]) * grad_mix[j];
    const double next = (double)alpha - (double)lr * dot;
    return (float)(next < 0.0 ? 0.0 : next > 1.0 ? 1.0 : next);
}

typedef struct {
    float *v, *alpha, lr;
} apfl_batch_ctx;

/* One batch of Algorithm 1 on w (the step's model), v and alpha, the
 * method's own work on host memory: the loss of w, v_bar's correct
 * predictions. */
static bool apfl_batch(void *ctx, pfl_owned_batch *b) {
    const apfl_batch_ctx *c = ctx;
    pfl_exec_gather(b->x, b->idx, b->B);
    const pfl_fl *fl = b->fl;
    const pfl_model *m = fl->model;
    pfl_worker *w = b->w;
    pfl_exec *x = b->x;
    const size_t P = m->num_params, V = pfl_model_vector_len(m);
    float *model = pfl_exec_host(b->model), *v = c->v, *mix = w->aux;
    pfl_apfl_mix(mix, v, model, *c->alpha, V); /* from w and v before this batch's steps */
    pfl_xbuf mix_v = pfl_exec_view(x, mix, V, false), v_v = pfl_exec_view(x, v, V, true);
    pfl_exec_zero(x, &w->grads, 0, P);
    pfl_exec_forward(x, b->model, true, b->dropout);
    const float loss = pfl_exec_xent(x, NULL);
    pfl_exec_update_stats(x, b->model);
    pfl_exec_backward(x, b->model, &w->grads, 0, 1.0f, NULL, 0);
    pfl_exec_zero(x, &w->aux_grads, 0, P);
    pfl_exec_forward(x, &mix_v, true, b->dropout);
    pfl_exec_xent(x, NULL);
    pfl_exec_update_stats(x, &v_v);
    const int correct = pfl_exec_correct(x);
    pfl_exec_backward(x, &mix_v, &w->aux_grads, 0, 1.0f, NULL, 0);
    const float next_alpha = pfl_apfl_alpha_step(*c->alpha, v, model, pfl_exec_host(&w->aux_grads), P, c->lr);
    /* --momentum and --weight-decay act on w as on FedAvg's model; v takes
     * plain steps (PFLlib's optimizer_per is plain SGD) */
    const pfl_sgd global = {c->lr, fl->cfg.momentum, fl->cfg.weight_decay}, personal = {c->lr * *c->alpha, 0.0f, 0.0f};
    pfl_exec_sgd(x, b->model, &w->grads, &w->velocity, 0, P, &global);
    pfl_exec_sgd(x, &v_v, &w->aux_grads, NULL, 0, P, &personal);
    *c->alpha = next_alpha;
    pfl_exec_unview(x, &v_v);
    pfl_exec_unview(x, &mix_v);
    pfl_step_count(b, loss, correct, b->B);
    return true;
}

static void apfl_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    apfl_state *s = fl->algo_state;
    apfl_batch_ctx c = {pfl_client_model(fl, client), pfl_store_write(s->alpha, client), pfl_round_lr(fl)};
    if (!c.v || !c.alpha) return; /* no room: the store's error fails the round */
    pfl_step step = pfl_step_default(fl);
    step.own = apfl_batch, step.own_ctx = &c;
    pfl_step_run(fl, client, w, model, &step, stats);
    pfl_store_release(s->alpha, client);
}

/* w, the copy trained and uploaded, starts from the global model. */
static void apfl_init(pfl_fl *fl, int client, float *model) {
    (void)client;
    memcpy(model, fl->global, pfl_model_vector_len(fl->model) * sizeof(float));
}

/* v was trained in place; the copy of w is uploaded, not kept. */
static void apfl_finish(pfl_fl *fl, int client, const float *model, float *state) {
    (void)fl, (void)client, (void)model, (void)state;
}

static const float *apfl_personal_model(pfl_fl *fl, int client, float *scratch) {
    const apfl_state *s = fl->algo_state;
    const float *v = pfl_client_model_get(fl, client, scratch);
    pfl_apfl_mix(scratch, v, fl->global, pfl_store_read(s->alpha, client)[0], pfl_model_vector_len(fl->model));
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
};

/* The parameters APFL adds beside the model every client trains: its v and alpha. */
static void apfl_report(const pfl_fl *fl, FILE *f, int what) {
    if (what == PFL_REPORT_SUMMARY) fprintf(f, ",\n  \"extra_params_per_client\": %zu", fl->model->num_params + 1);
}

const pfl_algo pfl_algo_apfl = {
    .name = "apfl",
    .description = "APFL: personalized model alpha v + (1 - alpha) w with a learned alpha (--apfl-alpha)",
    PFL_PARAMS(apfl_params),
    .has_global = true,
    .stateful = true,
    .keeps_state = true,
    .create = apfl_create,
    .destroy = apfl_destroy,
    .local_init = apfl_init,
    .local_train = apfl_train,
    .finish = apfl_finish,
    .personal_model = apfl_personal_model,
    .report = apfl_report,
    .save = apfl_save,
    .load = apfl_load,
};
