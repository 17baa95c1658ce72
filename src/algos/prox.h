/* FedProx's local training, which FedProx-C reuses after its fine-tuning. */
#ifndef PFL_ALGOS_PROX_H
#define PFL_ALGOS_PROX_H

#include "fl/method.h"

/* FedAvg's step with the proximal term mu/2 ||w - w_global||^2 (--mu) toward
 * the global model: its gradient mu (w - w_global) joins every parameter's
 * (PFLlib's PerturbedGradientDescent). */
void pfl_fedprox_local_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats);

#endif
