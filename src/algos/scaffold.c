/* SCAFFOLD (Karimireddy et al., ICML 2020, "SCAFFOLD: Stochastic Controlled
 * Averaging for Federated Learning", Algorithm 1 with Option II), as
 * PFLlib's clientscaffold.py / serverscaffold.py run it:
 *
 *   client i, each batch:  y_i <- y_i - eta_l (g_i(y_i) - c_i + c)
 *   after its K batches:   c_i+ = c_i - c + (x - y_i) / (K eta_l)
 *   server:                x <- x + eta_g mean_i (y_i - x)
 *                          c <- c + (1/N) sum_i (c_i+ - c_i)
 *
 * x the global model, c the server's control variate, c_i client i's (both
 * start at zero), K the batches the client trained, N the clients. The
 * correction c - c_i is a gradient term of the local step, declared only
 * when it is not zero, so a client whose controls are zero (every client in
 * round 1) takes FedAvg's step, fused into the backward pass, bit for bit.
 *
 * c is server state, the same on every process (the server step is
 * replicated under MPI); c_i lives with its client, in a per-client store
 * (lazy: zero until the client trains; checkpointed). The server does not
 * need c_i: with Option II, c_i+ - c_i = (x - y_i) / (K eta_l) - c is a
 * function of the upload and of what the server holds (K from the
 * partition: pfl_step_batches), and PFLlib's server computes it the same
 * way (`delta_yc`). The message bytes count it as sent, with c sent down,
 * as the paper's protocol has it: twice FedAvg's both ways. The mean is
 * uniform (--server-mean) as in the paper and PFLlib; `samples` is FedAvg's
 * weighted mean, so with --server-lr 1 round 1 is FedAvg's round. */
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "algos/server_mean.h"
#include "util/err.h"

typedef struct {
    float *c;        /* the server's control variate (num_params; zero outside the shared layers) */
    float *x;        /* scratch: the global model before an aggregation (num_params) */
    float *sum;      /* scratch: the round's sum of the controls' changes (num_params) */
    float *inv;      /* scratch: 1 / (K_k eta_l) of each upload of a round (0: the client trained no batch) */
    pfl_store *ci;   /* per client its control variate c_i (num_params), zero until it trains */
    pfl_spans spans; /* the shared layers' parameters: where the controls live */
} scaffold_state;

static int scaffold_check(const pfl_config *cfg) {
    const pfl_modules_config *m = &cfg->modules;
    if (m->ala || m->flayer_agg)
        return pfl_err("%s: scaffold's server derives a client's control variate from how far it trained from the "
                       "global model x (Option II: (x - y_i) / (K lr)); a local initialization starts it elsewhere",
                       m->ala ? "--ala" : "--flayer-agg");
    if (m->flayer_lr)
        return pfl_err("--flayer-lr: scaffold's control update (x - y_i) / (K lr) assumes one learning rate on every "
                       "layer");
    if (m->flayer_mask)
        return pfl_err("--flayer-mask: scaffold's server updates x and c from every parameter of an upload; a masked "
                       "upload leaves the unsent elements unknown");
    return pfl_server_mean_check(cfg);
}

static int scaffold_create(pfl_fl *fl) {
    const size_t P = fl->model->num_params;
    scaffold_state *s = pfl_calloc(1, sizeof *s);
    if (!(fl->algo_state = s)) return -1;
    pfl_shared_param_spans(fl, &s->spans);
    const int n = pfl_clients_per_round(&fl->cfg);
    float *zeros = pfl_calloc(P, sizeof(float));
    if (!zeros || !(s->c = pfl_calloc(P, sizeof(float))) || !(s->x = pfl_malloc(P * sizeof(float))) ||
        !(s->sum = pfl_malloc(P * sizeof(float))) ||
        !(s->inv = pfl_calloc((size_t)n, sizeof(float)))) {
        free(zeros);
        return -1;
    }
    s->ci = pfl_fl_store(fl, "scaffold-ci", fl->cfg.clients, P, zeros);
    free(zeros);
    return s->ci ? 0 : -1;
}

static void scaffold_destroy(pfl_fl *fl) {
    scaffold_state *s = fl->algo_state;
    if (s) free(s->c), free(s->x), free(s->sum), free(s->inv);
    free(s);
    fl->algo_state = NULL;
}

const float *pfl_scaffold_control(const pfl_fl *fl, int client) {
    const scaffold_state *s = fl->algo_state;
    return client < 0 ? s->c : pfl_store_read(s->ci, client);
}

/* 1 / (K eta_l) for client `client` this round; 0 when it trains no batch. */
static float inverse_steps_lr(const pfl_fl *fl, int client) {
    const pfl_step step = pfl_step_default(fl);
    const long K = pfl_step_batches(fl, &step, client);
    return K > 0 ? (float)(1.0 / ((double)K * step.opt.lr)) : 0.0f;
}

void pfl_scaffold_control_update(float *ci, const float *c, const float *x, const float *y, size_t off, size_t len,
                                 float inv) {
    for (size_t j = off; j < off + len; j++) ci[j] = ci[j] - c[j] + (x[j] - y[j]) * inv;
}

void pfl_scaffold_control_sum(float *acc, const float *c, const float *x, const float *y, float inv, size_t off,
                              size_t len) {
    if (inv == 0.0f) return; /* the client trained no batch: no control change */
    for (size_t j = off; j < off + len; j++) acc[j] += (x[j] - y[j]) * inv - c[j]; /* c_k+ - c_k */
}

void pfl_scaffold_control_mean(float *c, const float *acc, int N, size_t off, size_t len) {
    for (size_t j = off; j < off + len; j++) c[j] += acc[j] / (float)N;
}

/* The gradient term: g + (c - c_i), the correction precomputed in ctx. */
static void add_correction(void *ctx, const pfl_model *m, const float *params, float *grads) {
    (void)params;
    const float *d = ctx;
    for (size_t j = 0; j < m->num_params; j++) grads[j] += d[j];
}

/* d = c - c_i over the controls' spans (zero elsewhere); false when it is zero everywhere. */
static bool correction(const scaffold_state *s, const float *ci, float *d, size_t P) {
    memset(d, 0, P * sizeof(float));
    bool any = false;
    for (int k = 0; k < s->spans.count; k++)
        for (size_t j = s->spans.offset[k]; j < s->spans.offset[k] + s->spans.length[k]; j++)
            any |= (d[j] = s->c[j] - ci[j]) != 0.0f;
    return any;
}

static void scaffold_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    scaffold_state *s = fl->algo_state;
    float *d = w->aux;
    const bool corrected = correction(s, pfl_store_read(s->ci, client), d, fl->model->num_params);
    pfl_step step = pfl_step_default(fl);
    if (corrected) pfl_step_add_grad(&step, add_correction, d);
    pfl_step_run(fl, client, w, model, &step, stats);
    const float inv = inverse_steps_lr(fl, client);
    float *ci = inv != 0.0f ? pfl_store_write(s->ci, client) : NULL; /* NULL: no room, the store fails the round */
    for (int k = 0; ci && k < s->spans.count; k++)
        pfl_scaffold_control_update(ci, s->c, fl->global, model, s->spans.offset[k], s->spans.length[k], inv);
    pfl_store_release(s->ci, client);
}

/* What pfl_slot_sum hands the control sum: the round's uploads and what the
 * server holds (x as the clients had it). */
typedef struct {
    const scaffold_state *s;
    const float *x;
    float *const *uploads;
} control_sum;

static void add_control_change(void *ctx, int slot, float *acc) {
    const control_sum *cs = ctx;
    const pfl_spans *sp = &cs->s->spans;
    for (int k = 0; k < sp->count; k++)
        pfl_scaffold_control_sum(acc, cs->s->c, cs->x, cs->uploads[slot], cs->s->inv[slot], sp->offset[k],
                                 sp->length[k]);
}

static void scaffold_aggregate(pfl_fl *fl, const int *clients, int n, float *const *uploads) {
    scaffold_state *s = fl->algo_state;
    const float eta_g = fl->cfg.algo.server_lr;
    for (int k = 0; k < n; k++) s->inv[k] = inverse_steps_lr(fl, clients[k]);
    /* c from the controls' changes, with x and c as the clients had them: a
     * sum over the slots, along the ranks under MPI */
    memset(s->sum, 0, fl->model->num_params * sizeof(float));
    const control_sum cs = {s, fl->global, uploads};
    if (pfl_slot_sum(fl, n, &s->spans, s->sum, add_control_change, (void *)&cs)) return;
    for (int k = 0; k < s->spans.count; k++)
        pfl_scaffold_control_mean(s->c, s->sum, fl->cfg.clients, s->spans.offset[k], s->spans.length[k]);
    /* x + eta_g (mean - x); with eta_g = 1 the mean itself, FedAvg's bits under --server-mean samples */
    memcpy(s->x, fl->global, fl->model->num_params * sizeof(float));
    pfl_server_mean(fl, clients, n, uploads, pfl_server_mean_by_samples(&fl->cfg));
    if (eta_g == 1.0f) return;
    for (int k = 0; k < s->spans.count; k++)
        for (size_t j = s->spans.offset[k]; j < s->spans.offset[k] + s->spans.length[k]; j++)
            fl->global[j] = s->x[j] + eta_g * (fl->global[j] - s->x[j]);
}

/* Both ways: the model and a control variate (c down, c_i+ - c_i up), each
 * the shared layers' parameters. */
static void scaffold_message_bytes(const pfl_fl *fl, int client, const uint8_t *sent, const float *upload,
                                   uint64_t *down, uint64_t *up) {
    const scaffold_state *s = fl->algo_state;
    pfl_default_message_bytes(fl, client, sent, upload, down, up);
    *down += 4 * (uint64_t)s->spans.floats;
    *up += 4 * (uint64_t)s->spans.floats;
}

static int scaffold_save(const pfl_fl *fl, pfl_ckpt_writer *w) {
    const scaffold_state *s = fl->algo_state;
    return pfl_ckpt_put_f32(w, "scaffold.c", s->c, fl->model->num_params) || pfl_store_save(s->ci, w, "scaffold.ci")
               ? -1
               : 0;
}

static int scaffold_load(pfl_fl *fl, pfl_ckpt_reader *r) {
    scaffold_state *s = fl->algo_state;
    return pfl_ckpt_get_f32(r, "scaffold.c", s->c, fl->model->num_params) || pfl_store_load(s->ci, r, "scaffold.ci")
               ? -1
               : 0;
}

/* PFLlib's main.py: "-slr --server_learning_rate, default=1.0" (SCAFFOLD / FedGH), the paper's
 * experiments' global step size 1; the mean over the uploads is uniform in both. */
static const pfl_param scaffold_params[] = {
    {PFL_ALGO_PARAM(FLOAT, "server-lr", server_lr), .def = 1.0, .min = 0, .max = 1e3,
     .min_exclusive = true, .metavar = "F", .help = "global step size eta_g: x <- x + eta_g * mean(y_i - x)"},
    {PFL_ALGO_PARAM(STRING, "server-mean", server_mean), .def_text = "uniform", .metavar = "uniform|samples",
     .help = "the mean of the client updates: uniform, 1/|S| each (paper, PFLlib), or weighted by training samples "
             "(FedAvg's)"},
};

const pfl_algo pfl_algo_scaffold = {
    .name = "scaffold",
    .description = "SCAFFOLD: control variates c (server) and c_i (client) correct each local step by c - c_i "
                   "(Option II; --server-lr, --server-mean)",
    PFL_PARAMS(scaffold_params),
    .has_global = true,
    .check = scaffold_check,
    .create = scaffold_create,
    .destroy = scaffold_destroy,
    .local_train = scaffold_train,
    .aggregate = scaffold_aggregate,
    .message_bytes = scaffold_message_bytes,
    .save = scaffold_save,
    .load = scaffold_load,
};
