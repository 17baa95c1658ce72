/* pFedMe (T Dinh, Tran, Nguyen, NeurIPS 2020, "Personalized Federated
 * Learning with Moreau Envelopes"), Algorithm 1, as PFLlib's clientpFedMe and
 * serverpFedMe run it.
 *
 * Client i receives w = w_g. Its personal model theta starts at w too; for
 * every batch D of --epochs passes over its shuffled training split:
 *
 *   K times (--pfedme-k):  theta <- theta - plr * (grad f(theta; D) + lambda (theta - w))
 *                          (the personal problem min f_i(theta) + lambda/2 ||theta - w||^2,
 *                           solved approximately by K steps of rate plr = --pfedme-lr)
 *   then:                  w <- w - lr * lambda * (w - theta)      (lr = --lr, the paper's eta)
 *
 * theta carries over from batch to batch (PFLlib keeps it in self.model; the
 * paper warm-starts the inner solver the same way). The client uploads w; its
 * personalized model, evaluated, is the last theta (PFLlib's
 * personalized_params, used by test_metrics_personalized), kept as the
 * client's state: a client that is not selected keeps its previous theta, as
 * in PFLlib. The server averages the uploads by data size (PFLlib's
 * aggregate_parameters; the paper's plain mean over S clients is the same
 * for equal client sizes) and mixes, w_g <- (1 - beta) w_g + beta * mean
 * (--pfedme-beta; beta = 1 is FedAvg's aggregation bitwise).
 *
 * SGD momentum does not apply (pFedMe's optimizer has none); --weight-decay
 * is added to the inner gradient as PFLlib's optimizer adds its mu * theta. */
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "util/err.h"

typedef struct {
    float *prev;   /* model vector: the global model before aggregation */
} pfedme_state;

static int pfedme_create(pfl_fl *fl) {
    const pfl_algo_params *a = &fl->cfg.algo;
    if (a->pfedme_k < 1) return pfl_err("--pfedme-k %d: must be at least 1", a->pfedme_k);
    if (!(a->pfedme_lambda >= 0.0f) || !(a->pfedme_lr >= 0.0f))
        return pfl_err("pfedme: --pfedme-lambda and --pfedme-lr must be >= 0");
    if (!(a->pfedme_beta >= 0.0f && a->pfedme_beta <= 1.0f))
        return pfl_err("--pfedme-beta %g: must be in [0, 1]", (double)a->pfedme_beta);
    const pfl_modules_config *mod = &fl->cfg.modules;
    if (fl->cfg.bn != PFL_BN_SHARED)
        return pfl_err("pfedme: --bn local and stats-local are not supported (pFedMe restarts theta from the global "
                       "model every round, so nothing of the client's BatchNorm would stay)");
    if (mod->flayer_lr)
        return pfl_err("pfedme: --flayer-lr is not supported (pFedMe's inner steps on theta have their own rate "
                       "--pfedme-lr, and its step on w has no gradient)");
    pfedme_state *s = pfl_calloc(1, sizeof *s);
    if (!(fl->algo_state = s)) return -1;
    if (!(s->prev = pfl_malloc(pfl_model_vector_len(fl->model) * sizeof(float)))) return -1;
    return 0;
}

static void pfedme_destroy(pfl_fl *fl) {
    pfedme_state *s = fl->algo_state;
    free(s->prev);
    free(s);
    fl->algo_state = NULL;
}

/* w starts as the global model; theta (the client's state) is reset to it.
 * With a local-init module (--ala, --flayer-agg) the broadcast has already
 * mixed the global model with the client's theta into its state: both start
 * from that mix. */
static void pfedme_init(pfl_fl *fl, int client, float *model) {
    const size_t V = pfl_model_vector_len(fl->model);
    float *theta = pfl_client_model(fl, client);
    if (!theta) return; /* no room for it: the round fails */
    const bool mixed = fl->cfg.modules.ala || fl->cfg.modules.flayer_agg;
    if (!mixed) memcpy(theta, fl->global, V * sizeof(float));
    memcpy(model, theta, V * sizeof(float));
}

typedef struct {
    float *theta;
} pfedme_batch_ctx;

/* One batch: K steps of theta on the batch's loss plus lambda/2 ||theta -
 * w||^2, then w moves toward theta (the method's own work on host memory). */
static bool pfedme_batch(void *ctx, pfl_owned_batch *b) {
    const pfedme_batch_ctx *c = ctx;
    pfl_exec_gather(b->x, b->idx, b->B);
    const pfl_fl *fl = b->fl;
    const pfl_algo_params *a = &fl->cfg.algo;
    const size_t P = fl->model->num_params;
    const float plr = a->pfedme_lr, lambda = a->pfedme_lambda, wd = fl->cfg.weight_decay;
    const float outer = pfl_round_lr(fl) * lambda; /* FedTSDP: --lr-decay */
    pfl_exec *x = b->x;
    float *model = pfl_exec_host(b->model), *theta = c->theta, *g = pfl_exec_host(&b->w->grads);
    pfl_xbuf theta_v = pfl_exec_view(x, theta, pfl_model_vector_len(fl->model), true);
    for (int k = 0; k < a->pfedme_k; k++) {
        pfl_exec_zero(x, &b->w->grads, 0, P);
        pfl_exec_forward(x, &theta_v, true, b->dropout);
        const float loss = pfl_exec_xent(x, NULL);
        pfl_exec_update_stats(x, &theta_v);
        if (k == 0) pfl_step_count(b, loss, pfl_exec_correct(x), b->B); /* the batch as it arrives */
        pfl_exec_backward(x, &theta_v, &b->w->grads, 0, 1.0f, NULL, 0);
        for (size_t j = 0; j < P; j++) theta[j] -= plr * (g[j] + lambda * (theta[j] - model[j]) + wd * theta[j]);
    }
    for (size_t j = 0; j < P; j++) model[j] -= outer * (model[j] - theta[j]);
    pfl_exec_unview(x, &theta_v);
    return true;
}

static void pfedme_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    pfedme_batch_ctx c = {pfl_client_model(fl, client)};
    if (!c.theta) return;
    /* --local-steps K: K batches an epoch (pFedMe's own "local epochs" are batches) */
    pfl_step step = pfl_step_default(fl);
    step.own = pfedme_batch, step.own_ctx = &c;
    pfl_step_run(fl, client, w, model, &step, stats);
    /* w is never run: it uploads the running statistics theta's batches
     * gathered (PFLlib uploads its model, whose buffers theta updated) */
    const size_t P = fl->model->num_params, V = pfl_model_vector_len(fl->model);
    memcpy(model + P, c.theta + P, (V - P) * sizeof(float));
}

/* theta was trained in place as the client's state; w is only uploaded. */
static void pfedme_finish(pfl_fl *fl, int client, const float *model, float *state) {
    (void)fl, (void)client, (void)model, (void)state;
}

static void pfedme_aggregate(pfl_fl *fl, const int *clients, int n, float *const *uploads) {
    pfedme_state *s = fl->algo_state;
    const size_t P = pfl_model_vector_len(fl->model); /* the mix covers the running statistics too */
    const float beta = fl->cfg.algo.pfedme_beta;
    memcpy(s->prev, fl->global, P * sizeof(float));
    pfl_default_aggregate(fl, clients, n, uploads);
    if (beta == 1.0f) return;
    for (size_t j = 0; j < P; j++) fl->global[j] = (1.0f - beta) * s->prev[j] + beta * fl->global[j];
}

/* FedALA's appendix: "For pFedMe, we set its personalized learning rate to
 * 0.01, the additional parameter beta to 1.0, the regularization parameter
 * lambda to 15 and the number of local computation K to 5". */
static const pfl_param pfedme_params[] = {
    {PFL_ALGO_PARAM(INT, "pfedme-k", pfedme_k), .def = 5, .min = 1, .max = 1e5, .metavar = "K",
     .help = "inner steps on the personal model per batch"},
    {PFL_ALGO_PARAM(FLOAT, "pfedme-lambda", pfedme_lambda), .def = 15, .max = 1e6, .metavar = "F",
     .help = "lambda, Moreau-envelope coefficient lambda/2 ||theta - w||^2"},
    {PFL_ALGO_PARAM(FLOAT, "pfedme-lr", pfedme_lr), .def = 0.01, .max = 1e3, .metavar = "F",
     .help = "personal learning rate of the inner steps"},
    {PFL_ALGO_PARAM(FLOAT, "pfedme-beta", pfedme_beta), .def = 1.0, .max = 1, .metavar = "F",
     .help = "server mix w_g = (1 - beta) w_g + beta * mean of uploads"},
};

const pfl_algo pfl_algo_pfedme = {
    .name = "pfedme",
    .description = "pFedMe: Moreau-envelope personal models theta (K inner steps), local w <- w - lr lambda (w - theta), "
                   "server mix beta (--pfedme-k, --pfedme-lambda, --pfedme-lr, --pfedme-beta)",
    PFL_PARAMS(pfedme_params),
    /* pFedMe restarts theta from the global model: no BatchNorm of its own would stay */
    .run_defaults = (const char *const[]){"bn", "shared", NULL},
    .has_global = true,
    .stateful = true,
    .keeps_state = true,
    .create = pfedme_create,
    .destroy = pfedme_destroy,
    .local_init = pfedme_init,
    .local_train = pfedme_train,
    .finish = pfedme_finish,
    .aggregate = pfedme_aggregate,
};
