/* What the servers of SCAFFOLD, FedDyn and FedNTD share: the mean of the
 * round's uploads, uniform (SCAFFOLD's and FedDyn's papers, and PFLlib's
 * code for all three) or weighted by training samples (FedAvg's, and
 * FedNTD's authors' code), and the spans of the model SCAFFOLD and FedDyn
 * keep state over (the shared layers' parameters). */
#ifndef PFL_ALGOS_SERVER_MEAN_H
#define PFL_ALGOS_SERVER_MEAN_H

#include "fl/method.h"

/* --server-mean: true for `samples`, false for `uniform` (the default, NULL). */
bool pfl_server_mean_by_samples(const pfl_config *cfg);
/* Refuses a --server-mean other than uniform or samples: -1 with one line. */
int pfl_server_mean_check(const pfl_config *cfg);

/* The parameters of the shared layers (fl->shared, extra blocks included;
 * under --bn local not the BatchNorm layers, even before the run marks them
 * local), adjacent layers joined into one span: where the server's state
 * (SCAFFOLD's c, FedDyn's h) and the clients' (c_i, the linear term) live;
 * the rest of such a vector stays zero. */
void pfl_shared_param_spans(const pfl_fl *fl, pfl_spans *out);

/* True when v is not zero somewhere within the spans (a client's state that
 * would add a term to its step: FedDyn's grad_k, FedADMM's alpha_i). */
bool pfl_spans_nonzero(const float *v, const pfl_spans *sp);

/* The mean of the n uploads into fl->global over the shared layers: with
 * `by_samples` FedAvg's (pfl_default_aggregate, so the same bits), else
 * uniform (pfl_uniform_aggregate: each upload weighted 1/n, added in slot
 * order; under FLAYER's mask 1 over the uploads that sent an element); the
 * running statistics FedAvg's weighted mean either way. Both are sums along
 * the ranks under MPI, so none of the three methods gathers the uploads. */
void pfl_server_mean(pfl_fl *fl, const int *clients, int n, float *const *uploads, bool by_samples);

#endif
