/* FedBN (Li, Jiang, Zhang, Kamp, Dou, ICLR 2021, "FedBN: Federated Learning
 * on Non-IID Features via Local Batch Normalization"): FedAvg in which every
 * BatchNorm layer -- its weight, bias and running statistics -- stays with
 * its client, "local batch normalization to alleviate the feature shift
 * before averaging models". pfl has it as `--bn local` on any method; this
 * is FedAvg under that mode by name, so tables can list it (PFLlib's
 * serverbn.py / clientbn.py: FedAvg whose clients skip the parameters named
 * `bn` when they receive the global model).
 *
 * On a model without BatchNorm there is nothing to keep local and FedBN is
 * FedAvg, bit for bit: its default --bn local then resolves to shared
 * (src/run/options.c), and the run says so after its last round. A --bn
 * mode that shares any part of a BatchNorm layer contradicts the method and
 * is refused. docs/algorithms.md, "FedBN". */
#include "algos/algos.h"
#include "util/err.h"

static int fedbn_check(const pfl_config *cfg) {
    if (cfg->bn == PFL_BN_STATS_LOCAL)
        return pfl_err("--bn stats-local: fedbn keeps BatchNorm's weight and bias local too (FedBN); "
                       "fedavg --bn stats-local averages them");
    return 0;
}

/* --bn shared reaches the method only when asked for (its default, local,
 * becomes shared on a model without BatchNorm alone). */
static int fedbn_create(pfl_fl *fl) {
    if (fl->cfg.bn == PFL_BN_SHARED && fl->model->num_state > 0)
        return pfl_err("--bn shared: fedbn keeps every BatchNorm layer local (FedBN); fedavg --bn shared averages "
                       "them");
    return 0;
}

static void fedbn_report(const pfl_fl *fl, FILE *f, int what) {
    if (what == PFL_REPORT_FINAL && fl->model->num_state == 0)
        fprintf(f, "fedbn: model %s has no BatchNorm layers, so nothing stayed local: this run is FedAvg's\n",
                fl->model->name);
}

const pfl_algo pfl_algo_fedbn = {
    .name = "fedbn",
    .description = "FedBN: FedAvg with every BatchNorm layer (weight, bias, running statistics) kept by its client "
                   "(= fedavg --bn local; FedAvg on a model without BatchNorm)",
    .run_defaults = (const char *const[]){"bn", "local", NULL},
    .has_global = true,
    .check = fedbn_check,
    .create = fedbn_create,
    .report = fedbn_report,
};
