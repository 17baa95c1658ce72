/* What SCAFFOLD's and FedDyn's servers share: the spans of the model they
 * keep state over (the shared layers' parameters) and the mean of the
 * round's uploads their updates start from, uniform (their papers and
 * PFLlib) or weighted by training samples (FedAvg's). */
#ifndef PFL_ALGOS_SERVER_MEAN_H
#define PFL_ALGOS_SERVER_MEAN_H

#include "fl/method.h"

/* --server-mean: true for `samples`, false for `uniform` (the default, NULL). */
bool pfl_server_mean_by_samples(const pfl_config *cfg);
/* Refuses a --server-mean other than uniform or samples: -1 with one line. */
int pfl_server_mean_check(const pfl_config *cfg);

/* The parameters of the shared layers (fl->shared, extra blocks included),
 * adjacent layers joined into one span: where the server's state (SCAFFOLD's
 * c, FedDyn's h) and the clients' (c_i, the linear term) live; the rest of
 * such a vector stays zero. */
void pfl_shared_param_spans(const pfl_fl *fl, pfl_spans *out);

/* The mean of the n uploads into fl->global over the shared layers: with
 * `by_samples` FedAvg's (pfl_default_aggregate, so the same bits), else
 * each upload weighted 1/n, added in slot order; the running statistics
 * FedAvg's weighted mean either way (pfl_aggregate_state). */
void pfl_server_mean(pfl_fl *fl, const int *clients, int n, float *const *uploads, bool by_samples);

#endif
