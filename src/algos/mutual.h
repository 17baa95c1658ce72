/* What FML and FedKD share (mutual.c): each client trains a model it keeps
 * and the model it exchanges on the same batches, each distilling the
 * other's predictions, as PFLlib's clientfml.py and clientkd.py do; both
 * servers average the exchanged models with equal weights. */
#ifndef PFL_ALGOS_MUTUAL_H
#define PFL_ALGOS_MUTUAL_H

#include <stdbool.h>

#include "fl/method.h"

/* The two KL terms between models P and Q on a batch of B rows of C logits
 * (zp, zq): *kl_qp = KL(softmax(zq) || softmax(zp)), P's distillation loss
 * with Q's prediction as its target, and *kl_pq = KL(softmax(zp) ||
 * softmax(zq)), each as PyTorch's nn.KLDivLoss() computes it (default
 * reduction: the sum over all B x C elements divided by B x C). Adds to gp
 * and gq (B x C each) the gradients of wp x kl_qp + wq x kl_pq with respect
 * to zp and zq. `live`: each target is differentiated too (PFLlib: the
 * softmax of the other model's output is not detached, so every term
 * reaches both models); else a term's target is held fixed (deep mutual
 * learning's reading: P learns from kl_qp alone, Q from kl_pq). */
void pfl_mutual_kl(const float *zp, const float *zq, int B, int C, float wp, float wq, bool live, float *gp, float *gq,
                   double *kl_qp, double *kl_pq);

/* The mean softmax cross-entropy of B rows of C logits against y. */
double pfl_mutual_xent(const float *z, const uint8_t *y, int B, int C);

/* torch.nn.utils.clip_grad_norm_(g, max_norm) on g[0..n) in the executor:
 * g times max_norm / (||g|| + 1e-6) when that is below 1 (host memory: the
 * methods' own batches run there). */
void pfl_mutual_clip(pfl_exec *x, pfl_xbuf *g, size_t n, float max_norm);

/* The gradient norm PFLlib's clients clip each model's gradient to
 * ("prevent divergency on specifical tasks"). */
#define PFL_MUTUAL_CLIP 10.0f

#endif
