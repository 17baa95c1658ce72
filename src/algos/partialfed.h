/* PartialFed's pieces (src/algos/partialfed.c), exposed for the tests. */
#ifndef PFL_ALGOS_PARTIALFED_H
#define PFL_ALGOS_PARTIALFED_H

#include "fl/method.h"

/* Client `client`'s strategy: 2 logits per layer, (load global, keep own). */
const float *pfl_partialfed_logits(const pfl_fl *fl, int client);

/* The temperature of the current round: tau * decay^(round - 1). */
float pfl_partialfed_tau(const pfl_fl *fl);

/* Each layer of `out` (parameters and running statistics) from `global`
 * where load[l], else from `own`. */
void pfl_partialfed_build(const pfl_model *m, const bool *load, const float *global, const float *own, float *out);

/* One strategy batch (in the worker's executor): draws a hard choice per
 * layer by Gumbel-softmax at temperature tau from `gumbel` (two draws per
 * layer, load then own), rebuilds the model from fl->global and `model` by
 * it (into w->aux) and steps the logits by --pf-lr on the loss through the
 * relaxed choice (straight-through). `model` is not changed. */
void pfl_partialfed_strategy_step(pfl_fl *fl, pfl_worker *w, const float *model, float *logits, float tau, pfl_rng *gumbel,
                                  float *loss, int *correct);

#endif
