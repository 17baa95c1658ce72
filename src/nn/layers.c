#include "nn/layers.h"

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <string.h>

/* ---- Linear ---- */

/* y[0..n) += alpha * x[0..n) */
static void axpy(float *y, float alpha, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] += alpha * x[i];
}

void pfl_linear_forward(float *out, const float *in, const float *w, const float *b, int B, int in_dim, int out_dim) {
    for (int n = 0; n < B; n++) memcpy(out + (long)n * out_dim, b, sizeof(float) * (size_t)out_dim);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, out_dim, in_dim, 1.0f, in, in_dim, w, in_dim, 1.0f, out,
                out_dim);
}

void pfl_linear_forward_small(float *out, float *scratch, const float *in, const float *w, const float *b, int B,
                              int in_dim, int out_dim) {
    /* scratch[O][B] = w[O][I] * in^T: with few samples OpenBLAS packs the
     * small `in` instead of the large weight matrix, about twice as fast. */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, out_dim, B, in_dim, 1.0f, w, in_dim, in, in_dim, 0.0f, scratch,
                B);
    for (int n = 0; n < B; n++)
        for (int o = 0; o < out_dim; o++) out[(long)n * out_dim + o] = scratch[(long)o * B + n] + b[o];
}

void pfl_linear_backward(float *din, float *dw, float *db, const float *dout, const float *in, const float *w,
                         int B, int in_dim, int out_dim) {
    for (int n = 0; n < B; n++) axpy(db, 1.0f, dout + (long)n * out_dim, out_dim);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out_dim, in_dim, B, 1.0f, dout, out_dim, in, in_dim, 1.0f, dw,
                in_dim);
    if (din)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, in_dim, out_dim, 1.0f, dout, out_dim, w, in_dim, 0.0f,
                    din, in_dim);
}

/* ---- Embedding, mean over tokens ---- */

/* The row of a token, or -1 for padding and ids outside the table. */
static int embed_row(float v, int vocab, int padding_idx) {
    if (!(v >= 0.0f && v < (float)vocab)) return -1; /* also NaN */
    const int id = (int)v;
    return id == padding_idx ? -1 : id;
}

void pfl_embed_mean_forward(float *out, const float *ids, const float *table, int B, int L, int vocab, int dim,
                            int padding_idx) {
    for (int n = 0; n < B; n++) {
        float *o = out + (long)n * dim;
        memset(o, 0, sizeof(float) * (size_t)dim);
        for (int t = 0; t < L; t++) {
            const int id = embed_row(ids[(long)n * L + t], vocab, padding_idx);
            if (id >= 0) axpy(o, 1.0f, table + (long)id * dim, dim);
        }
        for (int d = 0; d < dim; d++) o[d] /= (float)L; /* sum / L, as torch's mean */
    }
}

void pfl_embed_mean_backward(float *dtable, const float *dout, const float *ids, int B, int L, int vocab, int dim,
                             int padding_idx) {
    const float inv_L = 1.0f / (float)L;
    for (int n = 0; n < B; n++)
        for (int t = 0; t < L; t++) {
            const int id = embed_row(ids[(long)n * L + t], vocab, padding_idx);
            if (id >= 0) axpy(dtable + (long)id * dim, inv_L, dout + (long)n * dim, dim);
        }
}

int pfl_embed_rows(int *rows, uint8_t *mark, const float *ids, long n, int vocab, int padding_idx) {
    int count = 0;
    for (long i = 0; i < n; i++) {
        const int id = embed_row(ids[i], vocab, padding_idx);
        if (id >= 0 && !mark[id]) mark[id] = 1, rows[count++] = id;
    }
    for (int k = 0; k < count; k++) mark[rows[k]] = 0;
    return count;
}

/* ---- Conv2d ----
 *
 * Each sample is unfolded (im2col) into `col` and multiplied at once,
 * w[OC][CKK] * col[CKK][P], straight into the NCHW activation: no
 * transposes. The backward unfolds each sample again rather than keeping
 * every sample's columns from the forward pass: unfolding is cheap, and the
 * columns it rereads are then hot in L2 instead of coming back from L3 (and
 * the workspace holds one sample's columns instead of a batch's). */

long pfl_conv2d_col_floats(const pfl_conv_shape *s) { return (long)s->C * s->K * s->K * s->OH * s->OW; }

/* The output columns ox whose input column ox*stride - pad + kx lies inside
 * [0, W): [*lo, *hi). Computing the range once per row keeps the copy loops
 * free of bounds tests. */
static void valid_columns(const pfl_conv_shape *s, int kx, int *lo, int *hi) {
    int first = s->pad - kx; /* smallest ox*stride allowed */
    *lo = first <= 0 ? 0 : (first + s->stride - 1) / s->stride;
    int last = s->W - 1 + s->pad - kx; /* largest ox*stride allowed */
    *hi = last < 0 ? 0 : last / s->stride + 1;
    if (*hi > s->OW) *hi = s->OW;
    if (*lo > *hi) *lo = *hi;
}

/* Unfolds one sample into col[CKK][P], P = OH*OW; rows are (c, ky, kx) in
 * the order of the weight's inner dimensions. The geometry is copied into
 * locals and the buffers are restrict so the short row copies (8 floats in
 * the CNN's second convolution) compile to plain vector moves. */
static void im2col(float *restrict col, const float *restrict img, const pfl_conv_shape *s) {
    const int C = s->C, H = s->H, W = s->W, K = s->K, OH = s->OH, OW = s->OW, pad = s->pad, stride = s->stride;
    for (int c = 0; c < C; c++) {
        const float *restrict plane = img + (long)c * H * W;
        for (int ky = 0; ky < K; ky++)
            for (int kx = 0; kx < K; kx++) {
                float *restrict dst = col + ((long)(c * K + ky) * K + kx) * OH * OW;
                int lo, hi;
                valid_columns(s, kx, &lo, &hi);
                for (int oy = 0; oy < OH; oy++, dst += OW) {
                    const int iy = oy * stride - pad + ky;
                    if (iy < 0 || iy >= H) {
                        for (int ox = 0; ox < OW; ox++) dst[ox] = 0.0f;
                        continue;
                    }
                    /* an index, not a pointer: it may be negative where ox < lo */
                    const long base = (long)iy * W - pad + kx;
                    for (int ox = 0; ox < lo; ox++) dst[ox] = 0.0f;
                    if (stride == 1) {
                        const float *restrict src = plane + (base + lo);
                        for (int i = 0; i < hi - lo; i++) dst[lo + i] = src[i];
                    } else {
                        for (int ox = lo; ox < hi; ox++) dst[ox] = plane[base + (long)ox * stride];
                    }
                    for (int ox = hi; ox < OW; ox++) dst[ox] = 0.0f;
                }
            }
    }
}

/* The adjoint of im2col: adds the columns back into the image gradient. */
static void col2im(float *restrict img, const float *restrict col, const pfl_conv_shape *s) {
    const int C = s->C, H = s->H, W = s->W, K = s->K, OH = s->OH, OW = s->OW, pad = s->pad, stride = s->stride;
    memset(img, 0, sizeof(float) * (size_t)C * H * W);
    for (int c = 0; c < C; c++) {
        float *restrict plane = img + (long)c * H * W;
        for (int ky = 0; ky < K; ky++)
            for (int kx = 0; kx < K; kx++) {
                const float *restrict src = col + ((long)(c * K + ky) * K + kx) * OH * OW;
                int lo, hi;
                valid_columns(s, kx, &lo, &hi);
                for (int oy = 0; oy < OH; oy++, src += OW) {
                    const int iy = oy * stride - pad + ky;
                    if (iy < 0 || iy >= H) continue;
                    const long base = (long)iy * W - pad + kx;
                    if (stride == 1) {
                        float *restrict dst = plane + (base + lo);
                        for (int i = 0; i < hi - lo; i++) dst[i] += src[lo + i];
                    } else {
                        for (int ox = lo; ox < hi; ox++) plane[base + (long)ox * stride] += src[ox];
                    }
                }
            }
    }
}

/* Sum of a row with 8 independent partial sums: a single running sum is
 * bound by the latency of each add. */
static float row_sum(const float *x, long n) {
    float acc[8] = {0};
    long i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += x[i + l];
    float sum = 0.0f;
    for (int l = 0; l < 8; l++) sum += acc[l];
    for (; i < n; i++) sum += x[i];
    return sum;
}

void pfl_conv2d_forward(float *out, float *col, const float *in, const float *w, const float *b,
                        const pfl_conv_shape *s) {
    const long P = (long)s->OH * s->OW, in_size = (long)s->C * s->H * s->W;
    const int CKK = s->C * s->K * s->K;
    for (int n = 0; n < s->B; n++) {
        float *out_n = out + (long)n * s->OC * P;
        im2col(col, in + n * in_size, s);
        for (int oc = 0; oc < s->OC; oc++)
            for (long p = 0; p < P; p++) out_n[oc * P + p] = b[oc];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s->OC, (int)P, CKK, 1.0f, w, CKK, col, (int)P, 1.0f,
                    out_n, (int)P);
    }
}

void pfl_conv2d_backward(float *din, float *dw, float *db, float *col, const float *dout, const float *in,
                         const float *w, const pfl_conv_shape *s) {
    const long P = (long)s->OH * s->OW, in_size = (long)s->C * s->H * s->W;
    const int CKK = s->C * s->K * s->K;
    for (int n = 0; n < s->B; n++) {
        const float *dout_n = dout + (long)n * s->OC * P;
        for (int oc = 0; oc < s->OC; oc++) db[oc] += row_sum(dout_n + oc * P, P);
        im2col(col, in + n * in_size, s);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s->OC, CKK, (int)P, 1.0f, dout_n, (int)P, col, (int)P,
                    1.0f, dw, CKK);
        if (!din) continue;
        /* the columns are spent: reuse them for the unfolded input gradient */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, CKK, (int)P, s->OC, 1.0f, w, CKK, dout_n, (int)P, 0.0f,
                    col, (int)P);
        col2im(din + n * in_size, col, s);
    }
}

/* The CNN's 2x2/2 pooling, without the generic window loops: 4 compares per
 * output, strict '>' so the first maximum wins as in the generic path. */
static void maxpool2x2(float *out, int *argmax, const float *src, int H, int W) {
    const int OH = H / 2, OW = W / 2;
    for (int oy = 0; oy < OH; oy++) {
        const float *r0 = src + (2 * oy) * W, *r1 = r0 + W;
        for (int ox = 0; ox < OW; ox++) {
            int i = 2 * ox;
            float best = r0[i];
            int at = (2 * oy) * W + i;
            if (r0[i + 1] > best) best = r0[i + 1], at = (2 * oy) * W + i + 1;
            if (r1[i] > best) best = r1[i], at = (2 * oy + 1) * W + i;
            if (r1[i + 1] > best) best = r1[i + 1], at = (2 * oy + 1) * W + i + 1;
            out[oy * OW + ox] = best;
            argmax[oy * OW + ox] = at;
        }
    }
}

void pfl_maxpool2d_forward(float *out, int *argmax, const float *in, int B, int C, int H, int W, int k, int stride) {
    const int OH = (H - k) / stride + 1, OW = (W - k) / stride + 1;
    for (long plane = 0; plane < (long)B * C; plane++) {
        const float *src = in + plane * H * W;
        float *dst = out + plane * OH * OW;
        int *arg = argmax + plane * OH * OW;
        if (k == 2 && stride == 2) {
            maxpool2x2(dst, arg, src, H, W);
            continue;
        }
        for (int oy = 0; oy < OH; oy++)
            for (int ox = 0; ox < OW; ox++) {
                float best = -FLT_MAX;
                int best_i = (oy * stride) * W + ox * stride;
                for (int ky = 0; ky < k; ky++)
                    for (int kx = 0; kx < k; kx++) {
                        int i = (oy * stride + ky) * W + ox * stride + kx;
                        if (src[i] > best) {
                            best = src[i];
                            best_i = i;
                        }
                    }
                dst[oy * OW + ox] = best;
                arg[oy * OW + ox] = best_i;
            }
    }
}

void pfl_maxpool2d_backward(float *din, const float *dout, const int *argmax, int B, int C, int H, int W, int k,
                            int stride) {
    const int OH = (H - k) / stride + 1, OW = (W - k) / stride + 1;
    memset(din, 0, sizeof(float) * (size_t)B * C * H * W);
    for (long plane = 0; plane < (long)B * C; plane++) {
        float *dst = din + plane * H * W;
        const float *src = dout + plane * OH * OW;
        const int *arg = argmax + plane * OH * OW;
        for (int o = 0; o < OH * OW; o++) dst[arg[o]] += src[o];
    }
}

/* Written as selects the compiler turns into vector max/blend: signs are
 * random, so a real branch would mispredict half the time. */
void pfl_relu_forward(float *out, const float *in, long n) {
    for (long i = 0; i < n; i++) {
        float v = in[i];
        out[i] = v > 0.0f ? v : 0.0f;
    }
}

void pfl_relu_backward(float *din, const float *dout, const float *out, long n) {
    /* A bit mask instead of a select: GCC keeps a select as a branch here,
     * and a multiply by 0/1 would turn an infinite gradient into NaN. */
    for (long i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &dout[i], sizeof bits);
        bits &= -(uint32_t)(out[i] > 0.0f);
        memcpy(&din[i], &bits, sizeof bits);
    }
}

void pfl_dropout_forward(float *out, float *mask, const float *in, long n, float p, pfl_rng *rng) {
    const float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    for (long i = 0; i < n; i++) {
        mask[i] = pfl_rng_uniform(rng) >= p ? scale : 0.0f;
        out[i] = in[i] * mask[i];
    }
}

void pfl_dropout_backward(float *din, const float *dout, const float *mask, long n) {
    for (long i = 0; i < n; i++) din[i] = dout[i] * mask[i];
}

float pfl_softmax_xent_forward(float *probs, const float *logits, const uint8_t *labels, int B, int classes) {
    double total = 0.0;
    for (int n = 0; n < B; n++) {
        const float *z = logits + (long)n * classes;
        float *p = probs + (long)n * classes;
        float zmax = z[0];
        for (int c = 1; c < classes; c++) zmax = z[c] > zmax ? z[c] : zmax;
        double sum = 0.0;
        for (int c = 0; c < classes; c++) {
            p[c] = expf(z[c] - zmax);
            sum += p[c];
        }
        for (int c = 0; c < classes; c++) p[c] = (float)(p[c] / sum);
        /* log-sum-exp form: exact even when the true class's probability underflows */
        total += log(sum) + zmax - z[labels[n]];
    }
    return (float)(total / B);
}

void pfl_softmax_xent_backward(float *dlogits, const float *probs, const uint8_t *labels, int B, int classes) {
    const float inv_b = 1.0f / (float)B;
    for (int n = 0; n < B; n++) {
        for (int c = 0; c < classes; c++) dlogits[(long)n * classes + c] = probs[(long)n * classes + c] * inv_b;
        dlogits[(long)n * classes + labels[n]] -= inv_b;
    }
}
