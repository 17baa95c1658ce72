/* FedADMM (Gong, Li, Freris, ICDE 2022, "FedADMM: A Robust Federated Deep
 * Learning Framework with Adaptivity to System Heterogeneity"), as its
 * authors' code (YonghaiGong/FedADMM, src/update.py, federated_main.py) and
 * FL-bench (src/client/fedadmm.py, src/server/fedadmm.py at 06e658b) run it.
 * Client i, from the global model theta, minimizes its augmented Lagrangian
 *
 *   f_i(w) + <alpha_i, w - theta> + rho/2 ||w - theta||^2
 *
 * (each batch: grad + alpha_i + rho (w - theta)) for E local epochs, E drawn
 * uniformly from 1..--epochs each time it trains (the paper's system
 * heterogeneity: "tolerating variable amount of work"; --admm-epochs fixed
 * trains --epochs), then updates its dual variable and sends the change of
 * its augmented model:
 *
 *   alpha_i <- alpha_i + rho (w_i - theta)
 *   Delta_i  = (w_i - theta) + (alpha_i+ - alpha_i) / rho  = 2 (w_i - theta)
 *
 * (the code starts each round's w from theta, so w_prev = theta; pfl sends
 * theta + Delta_i as the upload, so the server's mean is a model's mean
 * and reduces under MPI). The server: theta <- theta + eta mean_i Delta_i,
 * the mean uniform (the code's average_weights; FL-bench weighs by samples:
 * --server-mean samples), eta --server-lr until round --admm-target-round,
 * --admm-eta2 after (the code: `if epoch >= target_round: eta = eta_2`,
 * epoch counted from 0).
 *
 * alpha_i lives with its client (a per-client store, zero until it trains;
 * checkpointed); the server keeps nothing but theta. No setting gives FedAvg
 * exactly: rho must be above 0 (Delta divides by it), and the update is
 * twice the client's move. */
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "algos/server_mean.h"
#include "util/err.h"

typedef struct {
    pfl_store *alpha; /* per client its dual variable alpha_i (num_params), zero until it trains */
    float *x;         /* scratch: the global model before an aggregation (whole vector) */
    pfl_spans spans;  /* the shared layers' parameters: where alpha and Delta live */
} fedadmm_state;

static bool random_epochs(const pfl_config *cfg) {
    return !cfg->algo.admm_epochs || !strcmp(cfg->algo.admm_epochs, "random");
}

static int fedadmm_check(const pfl_config *cfg) {
    const pfl_modules_config *m = &cfg->modules;
    if (m->ala || m->flayer_agg)
        return pfl_err("%s: fedadmm's update Delta_i = 2 (w_i - theta) counts the client's move from theta (the "
                       "authors' code starts every client there); a local initialization starts it elsewhere",
                       m->ala ? "--ala" : "--flayer-agg");
    const char *e = cfg->algo.admm_epochs;
    if (e && strcmp(e, "random") && strcmp(e, "fixed"))
        return pfl_err("--admm-epochs '%s': expected random or fixed", e);
    return pfl_server_mean_check(cfg);
}

static int fedadmm_create(pfl_fl *fl) {
    const size_t P = fl->model->num_params;
    fedadmm_state *s = pfl_calloc(1, sizeof *s);
    if (!(fl->algo_state = s)) return -1;
    pfl_shared_param_spans(fl, &s->spans);
    float *zeros = pfl_calloc(P, sizeof(float));
    if (!zeros || !(s->x = pfl_malloc(pfl_model_vector_len(fl->model) * sizeof(float)))) {
        free(zeros);
        return -1;
    }
    s->alpha = pfl_fl_store(fl, "fedadmm-alpha", fl->cfg.clients, P, zeros);
    free(zeros);
    return s->alpha ? 0 : -1;
}

static void fedadmm_destroy(pfl_fl *fl) {
    fedadmm_state *s = fl->algo_state;
    if (s) free(s->x);
    free(s);
    fl->algo_state = NULL;
}

const float *pfl_fedadmm_dual(const pfl_fl *fl, int client) {
    const fedadmm_state *s = fl->algo_state;
    return pfl_store_read(s->alpha, client);
}

int pfl_fedadmm_epochs(const pfl_fl *fl, int client) {
    const int E = fl->cfg.epochs;
    if (!random_epochs(&fl->cfg) || E <= 1) return E;
    pfl_rng r = pfl_rng_stream(fl->cfg.seed, fl->round, client, PFL_RNG_ALGO);
    return 1 + (int)pfl_rng_below(&r, (uint64_t)E); /* the code's random.randint(1, local_ep) */
}

/* The gradient term alpha_i (ctx: its row). */
static void add_dual(void *ctx, const pfl_model *m, const float *params, float *grads) {
    (void)params;
    const float *alpha = ctx;
    for (size_t j = 0; j < m->num_params; j++) grads[j] += alpha[j];
}

void pfl_fedadmm_dual_update(float *alpha, const float *w, const float *theta, float rho, size_t off, size_t len) {
    for (size_t j = off; j < off + len; j++) alpha[j] += rho * (w[j] - theta[j]);
}

static void fedadmm_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    fedadmm_state *s = fl->algo_state;
    const float rho = fl->cfg.algo.admm_rho;
    pfl_step step = pfl_step_default(fl);
    step.epochs = pfl_fedadmm_epochs(fl, client);
    for (int k = 0; k < s->spans.count; k++)
        pfl_step_add_prox(&step, rho, fl->global, s->spans.offset[k], s->spans.length[k]);
    const float *alpha = pfl_store_read(s->alpha, client);
    if (pfl_store_touched(s->alpha, client) && pfl_spans_nonzero(alpha, &s->spans))
        pfl_step_add_grad(&step, add_dual, (void *)alpha);
    pfl_step_run(fl, client, w, model, &step, stats);
    float *row = pfl_store_write(s->alpha, client); /* NULL: no room, the store fails the round */
    for (int k = 0; row && k < s->spans.count; k++)
        pfl_fedadmm_dual_update(row, model, fl->global, rho, s->spans.offset[k], s->spans.length[k]);
    pfl_store_release(s->alpha, client);
}

/* theta + Delta_i = theta + 2 (w_i - theta) on the spans (in double); the rest as FedAvg's upload. */
static void fedadmm_upload(pfl_fl *fl, int client, const float *model, float *upload) {
    const fedadmm_state *s = fl->algo_state;
    pfl_default_upload(fl, client, model, upload);
    for (int k = 0; k < s->spans.count; k++)
        for (size_t j = s->spans.offset[k]; j < s->spans.offset[k] + s->spans.length[k]; j++)
            upload[j] = (float)((double)fl->global[j] + 2.0 * ((double)model[j] - fl->global[j]));
}

double pfl_fedadmm_server_lr(const pfl_fl *fl) {
    const pfl_algo_params *a = &fl->cfg.algo;
    return fl->round - 1 >= a->admm_target_round ? a->admm_eta2 : a->server_lr;
}

static void fedadmm_aggregate(pfl_fl *fl, const int *clients, int n, float *const *uploads) {
    fedadmm_state *s = fl->algo_state;
    if (n == 0) return;
    memcpy(s->x, fl->global, pfl_model_vector_len(fl->model) * sizeof(float));
    pfl_server_mean(fl, clients, n, uploads, pfl_server_mean_by_samples(&fl->cfg)); /* theta + mean Delta */
    const double eta = pfl_fedadmm_server_lr(fl);
    for (int k = 0; k < s->spans.count; k++)
        for (size_t j = s->spans.offset[k]; j < s->spans.offset[k] + s->spans.length[k]; j++)
            fl->global[j] = (float)((double)s->x[j] + eta * ((double)fl->global[j] - s->x[j]));
}

static int fedadmm_save(const pfl_fl *fl, pfl_ckpt_writer *w) {
    const fedadmm_state *s = fl->algo_state;
    return pfl_store_save(s->alpha, w, "fedadmm.alpha");
}

static int fedadmm_load(pfl_fl *fl, pfl_ckpt_reader *r) {
    fedadmm_state *s = fl->algo_state;
    return pfl_store_load(s->alpha, r, "fedadmm.alpha");
}

/* The authors' options.py and FL-bench's get_hyperparams: --rho 0.01, --eta 1, --eta_2 0.5, --target_round
 * 60, --fixed 0 (random local epochs). Their mean: uniform (the code), by samples (FL-bench). */
static const pfl_param fedadmm_params[] = {
    {PFL_ALGO_PARAM(FLOAT, "admm-rho", admm_rho), .def = 0.01, .min = 0, .min_exclusive = true, .max = 1e6,
     .metavar = "F", .help = "rho, the augmented Lagrangian's penalty (the dual step)"},
    {PFL_ALGO_PARAM(FLOAT, "server-lr", server_lr), .def = 1.0, .min = 0, .max = 1e3, .min_exclusive = true,
     .metavar = "F", .help = "eta, the server's step along the mean augmented update until --admm-target-round"},
    {PFL_ALGO_PARAM(FLOAT, "admm-eta2", admm_eta2), .def = 0.5, .min = 0, .max = 1e3, .min_exclusive = true,
     .metavar = "F", .help = "eta after round --admm-target-round"},
    {PFL_ALGO_PARAM(INT, "admm-target-round", admm_target_round), .def = 60, .min = 0, .max = 1e9, .metavar = "R",
     .help = "the rounds run at --server-lr before --admm-eta2 takes over"},
    {PFL_ALGO_PARAM(STRING, "admm-epochs", admm_epochs), .def_text = "random", .metavar = "random|fixed",
     .help = "each training's local epochs: uniform in 1..--epochs (the paper's and the code's) or --epochs"},
    {PFL_ALGO_PARAM(STRING, "server-mean", server_mean), .def_text = "uniform", .metavar = "uniform|samples",
     .help = "the mean of the augmented updates: uniform (the authors' code) or by training samples (FL-bench)"},
};

const pfl_algo pfl_algo_fedadmm = {
    .name = "fedadmm",
    .description = "FedADMM: each client minimizes its augmented Lagrangian with a dual variable of its own, the "
                   "server steps along the mean change of the augmented models (--admm-rho, --server-lr)",
    PFL_PARAMS(fedadmm_params),
    .has_global = true,
    .check = fedadmm_check,
    .create = fedadmm_create,
    .destroy = fedadmm_destroy,
    .local_train = fedadmm_train,
    .upload = fedadmm_upload,
    .aggregate = fedadmm_aggregate,
    .save = fedadmm_save,
    .load = fedadmm_load,
};
