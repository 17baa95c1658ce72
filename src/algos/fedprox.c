/* FedProx (Li et al. 2020): FedAvg whose local loss adds mu/2 ||w - w_global||^2,
 * anchoring each client to the global model it received (PFLlib's
 * PerturbedGradientDescent: grad + mu * (w - w_global)): a proximal term of
 * the local step. */
#include "algos/algos.h"
#include "algos/prox.h"

void pfl_fedprox_local_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    pfl_step s = pfl_step_default(fl);
    pfl_step_add_prox(&s, fl->cfg.algo.mu, fl->global, 0, fl->model->num_params);
    pfl_step_run(fl, client, w, model, &s, stats);
}

/* FedALA's appendix: "For FedProx, we set the parameter for proximal term mu to 0.001". */
static const pfl_param fedprox_params[] = {
    {PFL_ALGO_PARAM(FLOAT, "mu", mu), .def = 0.001, .max = 1e6, .metavar = "F",
     .help = "proximal coefficient mu toward the global model"},
};

const pfl_algo pfl_algo_fedprox = {
    .name = "fedprox",
    .description = "FedProx: FedAvg with a proximal term mu toward the global model (--mu)",
    PFL_PARAMS(fedprox_params),
    .has_global = true,
    .local_train = pfl_fedprox_local_train,
};
