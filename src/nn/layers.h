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

#include <stdint.h>

#include "util/rng.h"

/* out[B][out_dim] = in[B][in_dim] * w[out_dim][in_dim]^T + b */
void pfl_linear_forward(float *out, const float *in, const float *w, const float *b, int B, int in_dim, int out_dim);
/* The same result as pfl_linear_forward, faster for small batches
 * (B <= 64); `scratch` holds B * out_dim floats. */
void pfl_linear_forward_small(float *out, float *scratch, const float *in, const float *w, const float *b, int B,
                              int in_dim, int out_dim);
void pfl_linear_backward(float *din, float *dw, float *db, const float *dout, const float *in, const float *w,
                         int B, int in_dim, int out_dim);

/* The geometry of one Conv2d with a square kernel. */
typedef struct {
    int B;              /* batch */
    int C, H, W;        /* input channels and size */
    int OC, K;          /* output channels, kernel size */
    int stride, pad;
    int OH, OW;         /* output size: (H + 2 pad - K) / stride + 1 */
} pfl_conv_shape;

/* Floats of scratch the convolution needs: one sample's unfolded input
 * (C*K*K rows by OH*OW columns). */
long pfl_conv2d_col_floats(const pfl_conv_shape *s);

/* Per sample, one GEMM w[OC][CKK] * col[CKK][OH*OW]. The backward needs the
 * forward's input `in` (it unfolds it again into `col`). */
void pfl_conv2d_forward(float *out, float *col, const float *in, const float *w, const float *b,
                        const pfl_conv_shape *s);
void pfl_conv2d_backward(float *din, float *dw, float *db, float *col, const float *dout, const float *in,
                         const float *w, const pfl_conv_shape *s);

/* Max pooling, window k, stride `stride`, no padding (floor mode, as PyTorch).
 * `argmax` (one int per output) records the winning input index. */
void pfl_maxpool2d_forward(float *out, int *argmax, const float *in, int B, int C, int H, int W, int k, int stride);
void pfl_maxpool2d_backward(float *din, const float *dout, const int *argmax, int B, int C, int H, int W, int k,
                            int stride);

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
void pfl_softmax_xent_backward(float *dlogits, const float *probs, const uint8_t *labels, int B, int classes);

#endif
