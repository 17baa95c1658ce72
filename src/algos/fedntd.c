/* FedNTD (Lee et al., NeurIPS 2022, "Preservation of the Global Knowledge
 * by Not-True Distillation in Federated Learning"): each client trains on
 *
 *   CE(z, y) + beta * tau^2 * KL(softmax(t_nt / tau) || softmax(z_nt / tau)),
 *
 * z its logits, t the received global model's on the same batch (a fixed
 * teacher: evaluation mode), and _nt the logits without the true class's:
 * the local model keeps the global model's view of the classes a sample is
 * not, and learns its own on the class it is. The KL is the batch mean
 * (PFLlib's KLDivLoss(reduction="batchmean")); tau^2 is PFLlib's factor,
 * which the authors' criterion.py leaves out: at the default tau 1 the two
 * agree, and otherwise --ntd-beta b/tau^2 gives theirs. A loss term on the
 * logits, with the global model as its reference; --ntd-beta 0 declares none.
 *
 * The server averages the uploads uniformly, as PFLlib's serverntd.py does
 * (its add_parameters divides by the number of clients joined); the
 * authors' server weighs them by training samples, FedAvg's mean
 * (--server-mean samples, with which --ntd-beta 0 is FedAvg bit for bit). */
#include <math.h>

#include "algos/algos.h"
#include "algos/server_mean.h"

double pfl_fedntd_loss(const float *z, const float *t, const uint8_t *labels, int B, int C, float tau, float *dz) {
    const double T = tau;
    double total = 0.0;
    for (int s = 0; s < B; s++) {
        const float *zs = z + (size_t)s * C, *ts = t + (size_t)s * C;
        const int y = labels[s];
        double zmax = -INFINITY, tmax = -INFINITY, zsum = 0.0, tsum = 0.0;
        for (int c = 0; c < C; c++)
            if (c != y) zmax = fmax(zmax, zs[c] / T), tmax = fmax(tmax, ts[c] / T);
        for (int c = 0; c < C; c++)
            if (c != y) zsum += exp(zs[c] / T - zmax), tsum += exp(ts[c] / T - tmax);
        for (int c = 0; c < C; c++) {
            if (c == y) continue;
            const double log_pl = zs[c] / T - zmax - log(zsum), log_pg = ts[c] / T - tmax - log(tsum);
            const double pg = exp(log_pg);
            if (pg > 0.0) total += pg * (log_pg - log_pl);
            dz[(size_t)s * C + c] = (float)(T * (exp(log_pl) - pg) / B); /* tau^2 * (1/tau) (p_l - p_g) / B */
        }
    }
    return T * T * total / B;
}

static double ntd_value(void *ctx, const pfl_term_batch *b, float *dz, int *correct) {
    (void)correct;
    const float *tau = ctx;
    return pfl_fedntd_loss(b->z, b->refs[0], b->labels, b->B, (int)b->n, *tau, dz);
}

static int fedntd_check(const pfl_config *cfg) { return pfl_server_mean_check(cfg); }

static void fedntd_aggregate(pfl_fl *fl, const int *clients, int n, float *const *uploads) {
    pfl_server_mean(fl, clients, n, uploads, pfl_server_mean_by_samples(&fl->cfg));
}

static void fedntd_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    const pfl_algo_params *a = &fl->cfg.algo;
    pfl_step step = pfl_step_default(fl);
    float tau = a->ntd_tau;
    const pfl_loss_term term = {.name = "fedntd's not-true distillation",
                                .at = PFL_AT_LOGITS,
                                .weight = a->ntd_beta,
                                .refs = {fl->global},
                                .num_refs = 1,
                                .value = ntd_value,
                                .ctx = &tau};
    if (a->ntd_beta != 0.0f) pfl_step_add_term(&step, &term);
    pfl_step_run(fl, client, w, model, &step, stats);
}

/* The authors' config/fedntd.json (Lee-Gihun/FedNTD): "params": {"tau": 1, "beta": 1}; PFLlib's main.py
 * -bt default 0.0 is documented for other methods and would make FedNTD FedAvg. The mean is PFLlib's. */
static const pfl_param fedntd_params[] = {
    {PFL_ALGO_PARAM(FLOAT, "ntd-beta", ntd_beta), .def = 1.0, .max = 1e6, .metavar = "F",
     .help = "beta, the weight of the not-true distillation loss (0, with --server-mean samples: FedAvg)"},
    {PFL_ALGO_PARAM(FLOAT, "ntd-tau", ntd_tau), .def = 1.0, .min = 0.01, .max = 100, .metavar = "F",
     .help = "tau, the softmax temperature of the not-true logits of both models"},
    {PFL_ALGO_PARAM(STRING, "server-mean", server_mean), .def_text = "uniform", .metavar = "uniform|samples",
     .help = "the mean of the client models: uniform (PFLlib) or weighted by training samples (the authors', "
             "FedAvg's)"},
};

const pfl_algo pfl_algo_fedntd = {
    .name = "fedntd",
    .description = "FedNTD: cross-entropy plus beta x the KL between the global and local softmax over the "
                   "not-true classes (--ntd-beta, --ntd-tau, --server-mean)",
    PFL_PARAMS(fedntd_params),
    .has_global = true,
    .check = fedntd_check,
    .local_train = fedntd_train,
    .aggregate = fedntd_aggregate,
};
