/* Attentive message passing, shared by FedAMP (Huang et al. 2021, Eq. 6, on
 * whole models) and pFedCFR (Yang et al., Eq. 10, on each of the first r
 * layers): for n models x_1..x_n restricted to a span of the parameter
 * vector, client i's fused model is
 *
 *   u_i = (1 - sum_{j!=i} xi_ij) x_i + sum_{j!=i} xi_ij x_j,
 *   xi_ij = alpha * A'(||x_i - x_j||^2),  A(x) = 1 - exp(-x/sigma),
 *   A'(x) = exp(-x/sigma) / sigma,
 *
 * distances taken over the span only. Since exp(-x/sigma) <= 1, every
 * xi_ij <= alpha/sigma, so the own weight stays >= 0 whenever
 * (n - 1) * alpha / sigma <= 1 (the papers' alpha = 1e4, sigma = 1e6 give
 * at most 0.01 per neighbour). Where a row's neighbour weights sum above 1
 * the own weight would be negative (u_i extrapolates away from x_i; PFLlib
 * does not guard): pfl rescales that row's neighbour weights to sum to 1
 * and sets the own weight to 0, keeping u_i a convex combination as the
 * FedAMP analysis assumes, and reports how many rows it rescaled. */
#ifndef PFL_ALGOS_AMP_H
#define PFL_ALGOS_AMP_H

#include <stddef.h>

#include "fl/method.h"

/* The n x n weights (row i: client i's weights over the n models, summing
 * to 1, own weight on the diagonal) of models[k][off .. off+len). Returns
 * the number of rows whose neighbour weights summed above 1 (rescaled). */
int pfl_amp_weights(const float *const *models, int n, size_t off, size_t len, double alpha, double sigma,
                    double *xi);

/* out[i][off .. off+len) = sum_j xi[i*n + j] * models[j][off .. off+len);
 * no out[i] may alias a model. */
void pfl_amp_mix(float *const *out, const float *const *models, int n, size_t off, size_t len, const double *xi);

/* Both: the fused models of the span. xi is scratch of n*n doubles (it
 * holds the weights afterwards). Returns the count of rescaled rows. */
int pfl_amp_fuse(float *const *out, const float *const *models, int n, size_t off, size_t len, double alpha,
                 double sigma, double *xi);

/* Warns on stderr, once per run (*warned), when `rescaled` > 0. */
void pfl_amp_warn_rescaled(const pfl_fl *fl, bool *warned, const char *who, int rescaled);

/* Per-layer proximal terms coef[l]/2 * ||w_l - anchor[l]_l||^2 as a training
 * hook: grads of layer l += coef[l] * (params - anchor[l]) on that layer's
 * span (anchor[l] is a whole parameter vector, indexed by the layer's
 * offset; a layer with coef 0 or no anchor gets nothing). FedAMP: every
 * layer lambda/alpha toward u_i; pFedCFR: layers < r lambda/alpha toward
 * the fused layers, the rest mu toward the global mean. */
typedef struct {
    float coef[PFL_MAX_LAYERS];
    const float *anchor[PFL_MAX_LAYERS];
} pfl_layer_prox;

void pfl_layer_prox_hook(const void *ctx, const pfl_model *m, const float *params, float *grads);

/* FedAMP: client `client`'s cloud model u_i (a model vector), what the
 * server sends it. */
const float *pfl_fedamp_cloud_model(const pfl_fl *fl, int client);

#endif
