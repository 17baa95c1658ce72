/* Server optimizers on the round's mean update: FedAvgM (Hsu, Qi and Brown
 * 2019, "Measuring the Effects of Non-Identical Data Distribution for
 * Federated Visual Classification") and FedOpt's FedAdam, FedYogi and
 * FedAdagrad (Reddi et al., ICLR 2021, "Adaptive Federated Optimization",
 * Algorithm 2). The clients train as FedAvg's; the server takes the round's
 * mean update
 *
 *   Delta = mean_i (w_i - x)        (x the global model the clients received)
 *
 * and moves x along it with an optimizer of its own, whose state lives on
 * the server (the same on every process; checkpointed):
 *
 *   FedAvgM:    v <- beta v + Delta,        x <- x + eta v
 *               (Nesterov, FL-bench's:      x <- x + eta (Delta + beta v))
 *   FedAdam:    m <- b1 m + (1 - b1) Delta, v <- b2 v + (1 - b2) Delta^2
 *   FedYogi:    m as FedAdam's,             v <- v - (1 - b2) Delta^2 sign(v - Delta^2)
 *   FedAdagrad: m as FedAdam's,             v <- v + Delta^2
 *   the three:  x <- x + eta m / (sqrt(v) + tau),  v starting at tau^2, m at 0
 *
 * Hsu et al.'s sign convention is the pseudo-gradient x - mean w_i with
 * x <- x - v; the one above is the same update. Delta is the mean the
 * run's --server-mean names: FedAvg's mean by training samples for FedAvgM
 * (the paper's FedAvg, FL-bench's weights), uniform 1/|S| for FedOpt
 * (Algorithm 2: "Delta_t = 1/|S| sum Delta_i^t"; FL-bench weighs by
 * samples: --server-mean samples). The mean runs through
 * pfl_server_mean (a reduction under MPI), so only the mean meets the
 * server state, and the module's masks mean as they do for FedAvg: an
 * element no client sent keeps x, its Delta is 0.
 *
 * The step is computed in double from the float models, and its state is
 * kept in double: with beta = 0 and eta = 1, FedAvgM's x + (mean - x) is the
 * mean itself, FedAvg bit for bit; so is FedAdam's and FedYogi's with
 * b1 = 0, b2 = 1 (v stays tau^2), tau = 0.5 (sqrt(0.25) exact),
 * eta = 2 tau = 1 and --server-mean samples (FedAvg's weights). Only the shared layers' parameters are stepped
 * (pfl_shared_param_spans); the running statistics are FedAvg's mean. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "algos/server_mean.h"
#include "util/err.h"

typedef struct {
    pfl_server_opt_kind kind;
    double *m;       /* FedAvgM's velocity v, FedOpt's first moment m (num_params; zero outside the spans) */
    double *v;       /* FedOpt's second moment v (num_params), tau^2 to start; NULL for FedAvgM */
    float *x;        /* scratch: the global model before the round's mean (whole vector) */
    pfl_spans spans; /* the shared layers' parameters: what the server steps */
} server_opt_state;

static pfl_server_opt_kind kind_of(const pfl_fl *fl) {
    const char *name = fl->algo->name;
    return !strcmp(name, "fedadam")   ? PFL_SERVER_ADAM
           : !strcmp(name, "fedyogi") ? PFL_SERVER_YOGI
           : !strcmp(name, "fedadagrad") ? PFL_SERVER_ADAGRAD
                                         : PFL_SERVER_MOMENTUM;
}

pfl_server_opt_hp pfl_server_opt_hp_of(const pfl_config *cfg) {
    const pfl_algo_params *a = &cfg->algo;
    return (pfl_server_opt_hp){.eta = a->server_lr,
                               .momentum = a->server_momentum,
                               .nesterov = a->server_nesterov,
                               .beta1 = a->server_beta1,
                               .beta2 = a->server_beta2,
                               .tau = a->server_tau};
}

/* One element's step: x the global value the clients received, mean what the
 * round's mean made of it, m and v the state; returns the new global value. */
static double step_element(pfl_server_opt_kind kind, const pfl_server_opt_hp *hp, double x, double mean, double *m,
                           double *v) {
    const double delta = mean - x;
    if (kind == PFL_SERVER_MOMENTUM) {
        *m = hp->momentum * *m + delta;
        return x + hp->eta * (hp->nesterov ? delta + hp->momentum * *m : *m);
    }
    *m = hp->beta1 * *m + (1.0 - hp->beta1) * delta;
    const double d2 = delta * delta;
    switch (kind) {
    case PFL_SERVER_ADAM: *v = hp->beta2 * *v + (1.0 - hp->beta2) * d2; break;
    case PFL_SERVER_YOGI: *v -= (1.0 - hp->beta2) * d2 * (*v > d2 ? 1.0 : *v < d2 ? -1.0 : 0.0); break;
    default: *v += d2; break; /* Adagrad */
    }
    return x + hp->eta * *m / (sqrt(*v) + hp->tau);
}

void pfl_server_opt_step(pfl_server_opt_kind kind, const pfl_server_opt_hp *hp, const float *x, float *global,
                         double *m, double *v, size_t off, size_t len) {
    double none = 0.0;
    for (size_t j = off; j < off + len; j++)
        global[j] = (float)step_element(kind, hp, x[j], global[j], &m[j], v ? &v[j] : &none);
}

static int server_opt_check(const pfl_config *cfg) { return pfl_server_mean_check(cfg); }

static int server_opt_create(pfl_fl *fl) {
    const size_t P = fl->model->num_params;
    server_opt_state *s = pfl_calloc(1, sizeof *s);
    if (!(fl->algo_state = s)) return -1;
    s->kind = kind_of(fl);
    pfl_shared_param_spans(fl, &s->spans);
    if (!(s->m = pfl_calloc(P, sizeof(double))) ||
        !(s->x = pfl_malloc(pfl_model_vector_len(fl->model) * sizeof(float))))
        return -1;
    if (s->kind != PFL_SERVER_MOMENTUM) {
        if (!(s->v = pfl_malloc(P * sizeof(double)))) return -1;
        const double tau = fl->cfg.algo.server_tau;
        for (size_t j = 0; j < P; j++) s->v[j] = tau * tau; /* Algorithm 2: v_{-1} >= tau^2 */
    }
    return 0;
}

static void server_opt_destroy(pfl_fl *fl) {
    server_opt_state *s = fl->algo_state;
    if (s) free(s->m), free(s->v), free(s->x);
    free(s);
    fl->algo_state = NULL;
}

static void server_opt_aggregate(pfl_fl *fl, const int *clients, int n, float *const *uploads) {
    server_opt_state *s = fl->algo_state;
    if (n == 0) return; /* no update this round: no step, the state stays */
    memcpy(s->x, fl->global, pfl_model_vector_len(fl->model) * sizeof(float));
    pfl_server_mean(fl, clients, n, uploads, pfl_server_mean_by_samples(&fl->cfg));
    const pfl_server_opt_hp hp = pfl_server_opt_hp_of(&fl->cfg);
    for (int k = 0; k < s->spans.count; k++)
        pfl_server_opt_step(s->kind, &hp, s->x, fl->global, s->m, s->v, s->spans.offset[k], s->spans.length[k]);
}

const double *pfl_server_opt_state(const pfl_fl *fl, bool second) {
    const server_opt_state *s = fl->algo_state;
    return second ? s->v : s->m;
}

/* Section names "<algo>.m" and "<algo>.v". */
static int server_opt_save(const pfl_fl *fl, pfl_ckpt_writer *w) {
    const server_opt_state *s = fl->algo_state;
    char name[48];
    snprintf(name, sizeof name, "%s.m", fl->algo->name);
    if (pfl_ckpt_put_f64(w, name, s->m, fl->model->num_params)) return -1;
    snprintf(name, sizeof name, "%s.v", fl->algo->name);
    return s->v ? pfl_ckpt_put_f64(w, name, s->v, fl->model->num_params) : 0;
}

static int server_opt_load(pfl_fl *fl, pfl_ckpt_reader *r) {
    server_opt_state *s = fl->algo_state;
    char name[48];
    snprintf(name, sizeof name, "%s.m", fl->algo->name);
    if (pfl_ckpt_get_f64(r, name, s->m, fl->model->num_params)) return -1;
    snprintf(name, sizeof name, "%s.v", fl->algo->name);
    return s->v ? pfl_ckpt_get_f64(r, name, s->v, fl->model->num_params) : 0;
}

#define SERVER_MEAN_PARAM(DEFAULT, WHY)                                                                               \
    {PFL_ALGO_PARAM(STRING, "server-mean", server_mean), .def_text = DEFAULT, .metavar = "uniform|samples",            \
     .help = "the mean update Delta over the round's clients: " WHY}

/* Hsu et al.: FedAvgM's server step is x <- x - v with v <- beta v + Delta w, i.e. a server learning rate of 1
 * (Flower's server_learning_rate 1.0, FL-bench's SGD(lr=1.0)); beta 0.9 is FL-bench's default
 * (--server_momentum 0.9) and among the paper's grid. Heavy-ball momentum is the paper's; FL-bench's
 * torch.optim.SGD(..., nesterov=True) is --server-nesterov. */
static const pfl_param fedavgm_params[] = {
    {PFL_ALGO_PARAM(FLOAT, "server-momentum", server_momentum), .def = 0.9, .max = 0.999999, .metavar = "F",
     .help = "beta, the server momentum: v <- beta v + Delta, x <- x + eta v (0 with --server-lr 1: FedAvg)"},
    {PFL_ALGO_PARAM(FLOAT, "server-lr", server_lr), .def = 1.0, .min = 0, .max = 1e3, .min_exclusive = true,
     .metavar = "F", .help = "eta, the server's step size along v (the paper's and FL-bench's 1)"},
    {PFL_ALGO_PARAM(BOOL, "server-nesterov", server_nesterov),
     .help = "Nesterov's momentum, x <- x + eta (Delta + beta v), as FL-bench's torch SGD(nesterov=True)"},
    SERVER_MEAN_PARAM("samples", "weighted by training samples (FedAvg's, the paper and FL-bench) or uniform"),
};

/* Reddi et al.'s experiments use beta_1 = 0.9 and beta_2 = 0.99 and tune eta and tau per task (as recalled: the
 * paper's text is not in this project's library, so this is unchecked against it); eta 0.1 and tau 1e-3 are FL-bench's defaults (src/server/fedopt.py: --server_lr 1e-1,
 * --tau 1e-3; its --beta2 0.999 and its v starting at 0 are FL-bench's own, not the paper's). */
#define FEDOPT_PARAMS(BETA2)                                                                                          \
    {PFL_ALGO_PARAM(FLOAT, "server-lr", server_lr), .def = 0.1, .min = 0, .max = 1e3, .min_exclusive = true,          \
     .metavar = "F", .help = "eta, the server's step size: x <- x + eta m / (sqrt(v) + tau)"},                       \
        {PFL_ALGO_PARAM(FLOAT, "server-beta1", server_beta1), .def = 0.9, .max = 0.999999, .metavar = "F",            \
         .help = "beta_1, the decay of the first moment m (the paper's 0.9)"},                                        \
        BETA2{PFL_ALGO_PARAM(FLOAT, "server-tau", server_tau), .def = 1e-3, .min = 0, .max = 1e3,                     \
              .min_exclusive = true, .metavar = "F", .help = "tau, the adaptivity (v starts at tau^2)"},               \
        SERVER_MEAN_PARAM("uniform", "uniform, 1/|S| each (the paper), or weighted by training samples (FL-bench)")

#define FEDOPT_BETA2                                                                                                  \
    {PFL_ALGO_PARAM(FLOAT, "server-beta2", server_beta2), .def = 0.99, .max = 1, .metavar = "F",                     \
     .help = "beta_2, the decay of the second moment v (the paper's 0.99)"},

static const pfl_param fedadam_params[] = {FEDOPT_PARAMS(FEDOPT_BETA2)};
static const pfl_param fedyogi_params[] = {FEDOPT_PARAMS(FEDOPT_BETA2)};
static const pfl_param fedadagrad_params[] = {FEDOPT_PARAMS()};

#define SERVER_OPT_HOOKS                                                                                              \
    .has_global = true, .check = server_opt_check, .create = server_opt_create, .destroy = server_opt_destroy,       \
    .aggregate = server_opt_aggregate, .save = server_opt_save, .load = server_opt_load

const pfl_algo pfl_algo_fedavgm = {
    .name = "fedavgm",
    .description = "FedAvgM: FedAvg whose server moves the global model with momentum on the mean update "
                   "(--server-momentum, --server-lr, --server-nesterov)",
    PFL_PARAMS(fedavgm_params),
    SERVER_OPT_HOOKS,
};

const pfl_algo pfl_algo_fedadam = {
    .name = "fedadam",
    .description = "FedAdam (FedOpt): Adam on the server over the mean update (--server-lr, --server-beta1, "
                   "--server-beta2, --server-tau)",
    PFL_PARAMS(fedadam_params),
    SERVER_OPT_HOOKS,
};

const pfl_algo pfl_algo_fedyogi = {
    .name = "fedyogi",
    .description = "FedYogi (FedOpt): Yogi on the server over the mean update (--server-lr, --server-beta1, "
                   "--server-beta2, --server-tau)",
    PFL_PARAMS(fedyogi_params),
    SERVER_OPT_HOOKS,
};

const pfl_algo pfl_algo_fedadagrad = {
    .name = "fedadagrad",
    .description = "FedAdagrad (FedOpt): Adagrad on the server over the mean update (--server-lr, "
                   "--server-beta1, --server-tau)",
    PFL_PARAMS(fedadagrad_params),
    SERVER_OPT_HOOKS,
};
