/* Layers as plain functions, in the llm.c manner.
 *
 * Outputs come first, sizes last. Activations are row-major, one sample after
 * another; images are NCHW as in PyTorch, and parameter layouts are PyTorch's
 * (Linear weight [out][in], Conv2d weight [out][in][k][k]) so fixtures and
 * checkpoints carry over unchanged.
 *
 * Backward functions overwrite the input gradient `din` (skipped when NULL)
 * and ACCUMULATE into parameter gradients (`dw`, `db`), so a caller zeroes
 * parameter gradients once per step. */
#ifndef PFL_NN_LAYERS_H
#define PFL_NN_LAYERS_H

#include <stdbool.h>
#include <stdint.h>

#include "nn/conv_shape.h"
#include "nn/winograd.h" /* pfl_conv2d_winograd */
#include "util/rng.h"

/* out[B][out_dim] = in[B][in_dim] * w[out_dim][in_dim]^T + b */
void pfl_linear_forward(float *out, const float *in, const float *w, const float *b, int B, int in_dim, int out_dim);
/* The same result as pfl_linear_forward, faster for small batches
 * (B <= 64); `scratch` holds B * out_dim floats. */
void pfl_linear_forward_small(float *out, float *scratch, const float *in, const float *w, const float *b, int B,
                              int in_dim, int out_dim);
void pfl_linear_backward(float *din, float *dw, float *db, const float *dout, const float *in, const float *w,
                         int B, int in_dim, int out_dim);

/* nn.LayerNorm over one vector of n (eps 1e-5, biased variance):
 * out = w * hat + b, hat = (x - mean) * inv; keeps hat and returns inv for
 * the backward pass. */
double pfl_layernorm_forward(float *out, float *hat, const float *x, const float *w, const float *b, int n);
/* From d out (d, overwritten with d x) into dw, db (accumulated), given the
 * forward's hat and inv. */
void pfl_layernorm_backward(float *d, float *dw, float *db, const float *hat, double inv, const float *w, int n);
/* The backward pass of a Linear fused with a plain SGD step (p -= lr * g):
 * din from the weights before the step (skipped when NULL), then w and b
 * updated in place, without a gradient buffer (the weight-gradient GEMM
 * runs with alpha = -lr, beta = 1 into w). The same result as
 * pfl_linear_backward into zeroed gradients followed by pfl_sgd_step, up to
 * rounding (the bias bitwise). */
void pfl_linear_backward_sgd(float *din, float *w, float *b, const float *dout, const float *in, int B, int in_dim,
                             int out_dim, float lr);


/* Floats of scratch the convolution needs for s->B samples: one sample's
 * unfolded input (C*K*K rows by OH*OW columns), or, for outputs smaller
 * than 64 positions, a group of samples' and their outputs (layers.c); on
 * the Winograd path (winograd.h), its transformed filters, their gradient and a
 * block of transformed tiles, when larger. */
long pfl_conv2d_col_floats(const pfl_conv_shape *s);

/* Per sample, one GEMM w[OC][CKK] * col[CKK][OH*OW] (or Winograd, winograd.h).
 * The backward needs the forward's input `in` (it unfolds it again into
 * `col`) and, on the Winograd path, what that forward left in `col` (its
 * transformed filters): call it after the forward of the same `in` and `w`.
 * A convolution without bias (ResNet's) passes b = NULL to the forward and
 * db = NULL to the backward. */
void pfl_conv2d_forward(float *out, float *col, const float *in, const float *w, const float *b,
                        const pfl_conv_shape *s);
void pfl_conv2d_backward(float *din, float *dw, float *db, float *col, const float *dout, const float *in,
                         const float *w, const pfl_conv_shape *s);
/* The forward takes Winograd F(2x2, 5x5) when pfl_conv2d_winograd says so
 * (winograd.h), and the backward then that forward's adjoint. */
/* The forward and backward by unfolding whatever the shape (tests compare
 * the two paths). */
void pfl_conv2d_forward_unfolded(float *out, float *col, const float *in, const float *w, const float *b,
                                 const pfl_conv_shape *s);
void pfl_conv2d_backward_unfolded(float *din, float *dw, float *db, float *col, const float *dout, const float *in,
                                  const float *w, const pfl_conv_shape *s);
/* The backward fused with a plain SGD step, as pfl_linear_backward_sgd: din
 * from the weights before the step, then w and b (NULL: none) updated in
 * place (the weight-gradient GEMM runs with alpha = -lr into w). */
void pfl_conv2d_backward_sgd(float *din, float *w, float *b, float *col, const float *dout, const float *in,
                             const pfl_conv_shape *s, float lr);

/* Max pooling, window k, stride `stride`, no padding (floor mode, as PyTorch).
 * `argmax` (one int per output) records the winning input index. */
void pfl_maxpool2d_forward(float *out, int *argmax, const float *in, int B, int C, int H, int W, int k, int stride);
void pfl_maxpool2d_backward(float *din, const float *dout, const int *argmax, int B, int C, int H, int W, int k,
                            int stride);
/* The same with `pad` implicit -infinity on every side (PyTorch's
 * MaxPool2d(k, stride, padding), pad <= k / 2): output (H + 2 pad - k) /
 * stride + 1; padding never wins, so `argmax` holds real input positions. */
void pfl_maxpool2d_pad_forward(float *out, int *argmax, const float *in, int B, int C, int H, int W, int k, int stride,
                               int pad);
void pfl_maxpool2d_pad_backward(float *din, const float *dout, const int *argmax, int B, int C, int H, int W, int k,
                                int stride, int pad);

/* Global average pooling (AdaptiveAvgPool2d(1)): out[B][C] = the mean of
 * each HW plane. */
void pfl_avgpool_global_forward(float *out, const float *in, int B, int C, int HW);
void pfl_avgpool_global_backward(float *din, const float *dout, int B, int C, int HW);

/* BatchNorm2d (eps as PyTorch's 1e-5), per channel c over the B x HW values
 * of that channel: out = gamma[c] * (in - mean[c]) * invstd[c] + beta[c].
 *
 * Training (batch statistics): writes the batch mean, the biased variance
 * `var` (what normalizes) and invstd = 1 / sqrt(var + eps), each C floats,
 * which the backward and the running-statistics update read.
 * Evaluation: normalizes with the running statistics and writes the invstd
 * it used, so the same backward call serves both (with `batch_stats` false
 * the normalization is a fixed affine map per channel). */
#define PFL_BN_EPS 1e-5f
#define PFL_BN_MOMENTUM 0.1f
void pfl_batchnorm_forward_train(float *out, float *mean, float *var, float *invstd, const float *in,
                                 const float *gamma, const float *beta, int B, int C, int HW);
void pfl_batchnorm_forward_eval(float *out, float *invstd, const float *in, const float *gamma, const float *beta,
                                const float *running_mean, const float *running_var, int B, int C, int HW);
/* `mean` and `invstd` are what the forward normalized with (batch or running).
 * With batch_stats the gradient flows through the batch mean and variance too:
 *   din = gamma * invstd / N * (N dout - sum(dout) - xhat * sum(dout * xhat)),  N = B * HW;
 * without, din = gamma * invstd * dout. Both accumulate dgamma += sum(dout * xhat),
 * dbeta += sum(dout). */
void pfl_batchnorm_backward(float *din, float *dgamma, float *dbeta, const float *dout, const float *in,
                            const float *gamma, const float *mean, const float *invstd, int B, int C, int HW,
                            bool batch_stats);
/* PyTorch's running update after a training forward over n = B * HW values
 * per channel: running = (1 - momentum) running + momentum * batch, with the
 * unbiased variance var * n / (n - 1) (n = 1: the biased one, 0; PyTorch
 * refuses such a batch). */
void pfl_batchnorm_update_running(float *running_mean, float *running_var, const float *mean, const float *var,
                                  int C, long n, float momentum);

void pfl_relu_forward(float *out, const float *in, long n);
/* Uses the forward output: the gradient passes where out > 0. */
void pfl_relu_backward(float *din, const float *dout, const float *out, long n);

/* Inverted dropout (PyTorch's): kept values are scaled by 1/(1-p) during
 * training; `mask` stores the scale per element (0 or 1/(1-p)). */
void pfl_dropout_forward(float *out, float *mask, const float *in, long n, float p, pfl_rng *rng);
void pfl_dropout_backward(float *din, const float *dout, const float *mask, long n);

/* Embedding lookup averaged over the sequence: PyTorch's nn.Embedding
 * followed by .mean(1), as PFLlib's fastText. ids holds B x L token ids as
 * floats (exact below 2^24); out[B][dim] = (1/L) sum_t table[ids[b][t]].
 * The mean is over all L positions, padding included, as PFLlib's.
 * padding_idx (-1: none) is nn.Embedding's: that row is zero and gets no
 * gradient, so tokens equal to it are skipped (the row is only ever zero in
 * pfl: initialized so, and every update and average of zero gradients keeps
 * it there). Ids outside [0, vocab) are skipped likewise, so memory is never
 * read out of bounds; text datasets never produce them. There is no input
 * gradient: token ids are not differentiable. */
void pfl_embed_mean_forward(float *out, const float *ids, const float *table, int B, int L, int vocab, int dim,
                            int padding_idx);
void pfl_embed_mean_backward(float *dtable, const float *dout, const float *ids, int B, int L, int vocab, int dim,
                             int padding_idx);
/* The distinct rows that n token ids read (first appearance order) into
 * rows (room for min(n, vocab)); returns their count. Every other row of the
 * table gets a zero gradient from the batch. mark (vocab bytes) must be all
 * zero on entry and is left so. */
int pfl_embed_rows(int *rows, uint8_t *mark, const float *ids, long n, int vocab, int padding_idx);

/* Softmax cross-entropy averaged over the batch (PyTorch's CrossEntropyLoss).
 * Writes probabilities and returns the mean loss; the backward writes
 * dlogits = (probs - onehot) / B. */
float pfl_softmax_xent_forward(float *probs, const float *logits, const uint8_t *labels, int B, int classes);
/* The same loss on logits + offset[c] (NULL: none); a class whose offset
 * is -INFINITY gets probability 0 (FedRoD's balanced softmax, log 0). */
float pfl_softmax_xent_offset_forward(float *probs, const float *logits, const float *offset, const uint8_t *labels,
                                      int B, int classes);
void pfl_softmax_xent_backward(float *dlogits, const float *probs, const uint8_t *labels, int B, int classes);

/* Maximum mean discrepancy between two batches of n features, x and y (B x n
 * each), with PFLlib's mixture of Gaussian kernels (its FedPHP MMD, 'rbf'):
 *
 *   k(d) = sum over a in {10, 15, 20, 50} of exp(-d / (2a)),  d a squared distance,
 *   MMD  = mean over i, j of k(|x_i - x_j|^2) + k(|y_i - y_j|^2) - 2 k(|x_i - y_j|^2).
 *
 * Returns it (summed in double; distances taken as sums of squared
 * differences, which are never negative, where PFLlib expands them as
 * |a|^2 + |b|^2 - 2ab), and, when dx is not NULL, writes its gradient with
 * respect to x (y held fixed) into dx:
 *
 *   dMMD/dx_k = 4/B^2 sum_j [k'(|x_k - x_j|^2) (x_k - x_j) - k'(|x_k - y_j|^2) (x_k - y_j)]. */
double pfl_mmd_rbf(const float *x, const float *y, int B, long n, float *dx);

#endif
