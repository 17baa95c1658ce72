/* APPLE's pieces (src/algos/apple.c), exposed for the tests. */
#ifndef PFL_ALGOS_APPLE_H
#define PFL_ALGOS_APPLE_H

#include "fl/method.h"

/* Client `client`'s DR vector p_i (clients floats) and the server's copy of
 * its core model (a model vector), as they stand. */
const float *pfl_apple_dr(const pfl_fl *fl, int client);
const float *pfl_apple_core(const pfl_fl *fl, int client);

/* lambda(r) of the current round: the loss scheduler over the first
 * floor(L * rounds) rounds, 0 after (--reading pfllib: one round later,
 * round 1 pulling with 1). */
double pfl_apple_lambda(const pfl_fl *fl);

/* w = sum_j p[j] c_j on the parameters, with `own` as client's core, and
 * own's running statistics. */
void pfl_apple_personal(const pfl_fl *fl, int client, const float *p, const float *own, float *w);

/* One batch (in the worker's executor) of APPLE's training; `model` holds
 * w = sum_j p[j] c_j with `core` as client's (pfl_apple_personal) on entry,
 * and again for the p and core it leaves on exit: the gradient g of the
 * batch's loss at w, then p_j -= eta_2 (<g, c_j> + lambda_mu (p_j - p0_j))
 * and core -= lr scale p[client] g (the run's SGD), both from the same g. */
void pfl_apple_step(pfl_fl *fl, int client, pfl_worker *w, float *core, float *p, float *model, double lambda_mu,
                    pfl_rng *dropout, float *loss, int *correct);

/* The same batch as PFLlib's clientapple.py does it (--reading pfllib): `model`
 * is rebuilt as sum_j p[j] c_j (`core` as client's) and keeps that mix, its
 * running statistics moving with the batch; from its gradient g, core -= lr
 * scale p[client] g first, then p_j -= eta_2 (mean over the parameter
 * tensors of mean(g . c_j) + lambda_mu (p_j - p0_j)), c_client the stepped
 * core. */
void pfl_apple_step_pfllib(pfl_fl *fl, int client, pfl_worker *w, float *core, float *p, float *model,
                           double lambda_mu, pfl_rng *dropout, float *loss, int *correct);

#endif
