/* FedDyn (Acar et al., ICLR 2021, "Federated Learning Based on Dynamic
 * Regularization", Algorithm 1), as PFLlib's clientdyn.py / serverdyn.py
 * run it. Client k minimizes
 *
 *   L_k(w) - <grad_k, w> + alpha/2 ||w - w_global||^2
 *
 * from the global model, then grad_k <- grad_k - alpha (w_k - w_global)
 * (grad_k, the paper's grad L_k(theta_k^{t-1}), starts at zero); the server
 * keeps h <- h - alpha/N sum_k (w_k - w_global) over the round's uploads and
 * sends w_global = mean_k w_k - h / alpha. PFLlib's penalty is alpha/2
 * ||w - w_global|| (torch.norm, not squared), its reading by default
 * (--dyn-penalty norm); `squared` is the paper's, a proximal term of the
 * local step.
 *
 * Every part is declared only when it is not zero: with --dyn-alpha 0 there
 * is no penalty, grad_k and h stay zero and the server's correction is
 * skipped, so the run is FedAvg's step fused into the backward pass and,
 * under --server-mean samples, FedAvg's mean: FedAvg bit for bit. The mean
 * is uniform by default, as in the paper and PFLlib.
 *
 * h is server state, the same on every process; grad_k lives with its
 * client, in a per-client store (lazy, checkpointed). Both cover the shared
 * layers' parameters. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "algos/server_mean.h"
#include "util/err.h"

typedef struct {
    float *h;        /* the server state (num_params; zero outside the shared layers) */
    float *sum;      /* scratch: the round's sum of the uploads' drift from the global model (num_params) */
    pfl_store *grad; /* per client its linear term's vector grad_k (num_params), zero until it trains */
    pfl_spans spans; /* the shared layers' parameters */
} feddyn_state;

/* The penalty of the norm reading: its spans and the model it pulls toward. */
typedef struct {
    const feddyn_state *s;
    const float *global;
    float alpha;
} norm_penalty;

static bool squared_penalty(const pfl_config *cfg) {
    return cfg->algo.dyn_penalty && !strcmp(cfg->algo.dyn_penalty, "squared");
}

static int feddyn_check(const pfl_config *cfg) {
    if (cfg->modules.flayer_mask)
        return pfl_err("--flayer-mask: feddyn's server state h and mean read every parameter of an upload; a masked "
                       "upload leaves the unsent elements unknown");
    const char *p = cfg->algo.dyn_penalty;
    if (p && strcmp(p, "norm") && strcmp(p, "squared"))
        return pfl_err("--dyn-penalty '%s': expected norm or squared", p);
    return pfl_server_mean_check(cfg);
}

static int feddyn_create(pfl_fl *fl) {
    const size_t P = fl->model->num_params;
    feddyn_state *s = pfl_calloc(1, sizeof *s);
    if (!(fl->algo_state = s)) return -1;
    pfl_shared_param_spans(fl, &s->spans);
    if (!(s->h = pfl_calloc(P, sizeof(float))) || !(s->sum = pfl_malloc(P * sizeof(float)))) return -1;
    s->grad = pfl_fl_store(fl, "feddyn-grad", fl->cfg.clients, P, s->h); /* zero rows */
    return s->grad ? 0 : -1;
}

static void feddyn_destroy(pfl_fl *fl) {
    feddyn_state *s = fl->algo_state;
    if (s) free(s->h), free(s->sum);
    free(s);
    fl->algo_state = NULL;
}

const float *pfl_feddyn_state(const pfl_fl *fl, int client) {
    const feddyn_state *s = fl->algo_state;
    return client < 0 ? s->h : pfl_store_read(s->grad, client);
}

void pfl_feddyn_client_update(float *grad, const float *w, const float *global, size_t off, size_t len, float alpha) {
    for (size_t j = off; j < off + len; j++) grad[j] = grad[j] - alpha * (w[j] - global[j]);
}

void pfl_feddyn_state_sum(float *acc, const float *w, const float *global, size_t off, size_t len) {
    for (size_t j = off; j < off + len; j++) acc[j] += w[j] - global[j];
}

void pfl_feddyn_state_step(float *h, const float *acc, int N, float alpha, size_t off, size_t len) {
    for (size_t j = off; j < off + len; j++) h[j] -= alpha * (acc[j] / (float)N);
}

/* PFLlib's alpha/2 ||w - w_global|| over the spans: its gradient alpha/2 (w - w_global) / ||w - w_global||,
 * zero where the two are equal (torch's at a zero norm). */
static void add_norm_penalty(void *ctx, const pfl_model *m, const float *params, float *grads) {
    (void)m;
    const norm_penalty *p = ctx;
    const pfl_spans *sp = &p->s->spans;
    double sq = 0.0;
    for (int k = 0; k < sp->count; k++)
        for (size_t j = sp->offset[k]; j < sp->offset[k] + sp->length[k]; j++) {
            const double d = (double)params[j] - p->global[j];
            sq += d * d;
        }
    if (sq == 0.0) return;
    const float scale = (float)(p->alpha / 2.0 / sqrt(sq));
    for (int k = 0; k < sp->count; k++)
        for (size_t j = sp->offset[k]; j < sp->offset[k] + sp->length[k]; j++)
            grads[j] += scale * (params[j] - p->global[j]);
}

/* The linear term -<grad_k, w>: its gradient -grad_k. */
static void subtract_linear(void *ctx, const pfl_model *m, const float *params, float *grads) {
    (void)params;
    const float *g = ctx;
    for (size_t j = 0; j < m->num_params; j++) grads[j] -= g[j];
}

static void feddyn_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    feddyn_state *s = fl->algo_state;
    const float alpha = fl->cfg.algo.dyn_alpha;
    pfl_step step = pfl_step_default(fl);
    norm_penalty norm = {s, fl->global, alpha};
    if (alpha != 0.0f) {
        if (!squared_penalty(&fl->cfg)) pfl_step_add_grad(&step, add_norm_penalty, &norm);
        else
            for (int k = 0; k < s->spans.count; k++)
                pfl_step_add_prox(&step, alpha, fl->global, s->spans.offset[k], s->spans.length[k]);
    }
    const float *grad = pfl_store_read(s->grad, client);
    if (pfl_store_touched(s->grad, client) && pfl_spans_nonzero(grad, &s->spans))
        pfl_step_add_grad(&step, subtract_linear, (void *)grad);
    pfl_step_run(fl, client, w, model, &step, stats);
    float *row = alpha != 0.0f ? pfl_store_write(s->grad, client) : NULL; /* NULL: no room, the round fails */
    for (int k = 0; row && k < s->spans.count; k++)
        pfl_feddyn_client_update(row, model, fl->global, s->spans.offset[k], s->spans.length[k], alpha);
    pfl_store_release(s->grad, client);
}

/* What pfl_slot_sum hands h's sum: the round's uploads and the global model they left. */
typedef struct {
    const feddyn_state *s;
    const float *global;
    float *const *uploads;
} state_sum;

static void add_drift(void *ctx, int slot, float *acc) {
    const state_sum *ss = ctx;
    const pfl_spans *sp = &ss->s->spans;
    for (int k = 0; k < sp->count; k++)
        pfl_feddyn_state_sum(acc, ss->uploads[slot], ss->global, sp->offset[k], sp->length[k]);
}

static void feddyn_aggregate(pfl_fl *fl, const int *clients, int n, float *const *uploads) {
    feddyn_state *s = fl->algo_state;
    const float alpha = fl->cfg.algo.dyn_alpha;
    if (alpha != 0.0f) { /* h from the uploads' drift: a sum over the slots, along the ranks under MPI */
        memset(s->sum, 0, fl->model->num_params * sizeof(float));
        const state_sum ss = {s, fl->global, uploads};
        if (pfl_slot_sum(fl, n, &s->spans, s->sum, add_drift, (void *)&ss)) return;
        for (int k = 0; k < s->spans.count; k++)
            pfl_feddyn_state_step(s->h, s->sum, fl->cfg.clients, alpha, s->spans.offset[k], s->spans.length[k]);
    }
    pfl_server_mean(fl, clients, n, uploads, pfl_server_mean_by_samples(&fl->cfg));
    if (alpha == 0.0f) return; /* h is zero: the mean is the model */
    const float inv = 1.0f / alpha;
    for (int k = 0; k < s->spans.count; k++)
        for (size_t j = s->spans.offset[k]; j < s->spans.offset[k] + s->spans.length[k]; j++)
            fl->global[j] -= inv * s->h[j];
}

static int feddyn_save(const pfl_fl *fl, pfl_ckpt_writer *w) {
    const feddyn_state *s = fl->algo_state;
    return pfl_ckpt_put_f32(w, "feddyn.h", s->h, fl->model->num_params) || pfl_store_save(s->grad, w, "feddyn.grad")
               ? -1
               : 0;
}

static int feddyn_load(pfl_fl *fl, pfl_ckpt_reader *r) {
    feddyn_state *s = fl->algo_state;
    return pfl_ckpt_get_f32(r, "feddyn.h", s->h, fl->model->num_params) || pfl_store_load(s->grad, r, "feddyn.grad")
               ? -1
               : 0;
}

/* The authors' example_cifar_10.py (alpemreacar/FedDyn): "alpha_coef = 1e-2". PFLlib's FedDyn reads
 * -al too, default 1.0 (main.py, listed under APFL and FedCross): --dyn-alpha 1 is PFLlib's run. The
 * penalty is PFLlib's, the mean uniform: a combination neither reference ran (docs/algorithms.md). */
static const pfl_param feddyn_params[] = {
    {PFL_ALGO_PARAM(FLOAT, "dyn-alpha", dyn_alpha), .def = 0.01, .max = 1e6, .metavar = "F",
     .help = "alpha, the coefficient of the dynamic regularizer (0, with --server-mean samples: FedAvg)"},
    {PFL_ALGO_PARAM(STRING, "dyn-penalty", dyn_penalty), .def_text = "norm", .metavar = "norm|squared",
     .help = "the pull toward the global model: alpha/2 ||w - w_global|| (PFLlib) or its square (the paper)"},
    {PFL_ALGO_PARAM(STRING, "server-mean", server_mean), .def_text = "uniform", .metavar = "uniform|samples",
     .help = "the mean of the client models: uniform, 1/|P_t| each (paper, PFLlib), or weighted by training "
             "samples (FedAvg's)"},
};

const pfl_algo pfl_algo_feddyn = {
    .name = "feddyn",
    .description = "FedDyn: a dynamic regularizer -<grad_k, w> + alpha/2 ||w - w_global|| per client, the server "
                   "state h corrects the mean (--dyn-alpha, --dyn-penalty, --server-mean)",
    PFL_PARAMS(feddyn_params),
    .has_global = true,
    .check = feddyn_check,
    .create = feddyn_create,
    .destroy = feddyn_destroy,
    .local_train = feddyn_train,
    .aggregate = feddyn_aggregate,
    .save = feddyn_save,
    .load = feddyn_load,
};
