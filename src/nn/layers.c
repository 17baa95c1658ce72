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

/* Output rows per GEMM. OpenBLAS (0.3.17 and later on x86-64) runs a GEMM
 * of at most about 1e6 multiply-adds (M*N*K) through its small-matrix
 * kernels, which read the operands where they lie; above that it packs
 * both, copying the whole weight matrix on every call. With few samples
 * (PFLlib's batch 10) that copy is most of the work, so the layer runs as
 * slices of output rows under the bound: on the cnn's fc1 (batch 10,
 * 1024 -> 512) the forward, input gradient and SGD update together went
 * from 1020 to 390 us in 96-row slices (measured on this project's
 * machine). With more samples the slices would get thin and lose (batch
 * 50: no gain), so under 32 rows the layer stays one GEMM. */
#define LINEAR_SMALL_GEMM 1000000L
#define LINEAR_MIN_SLICE 32

static int linear_slice(int B, int in_dim, int out_dim) {
    const long rows = LINEAR_SMALL_GEMM / ((long)(B > 0 ? B : 1) * (in_dim > 0 ? in_dim : 1)) / 16 * 16;
    return rows >= LINEAR_MIN_SLICE && rows < out_dim ? (int)rows : out_dim;
}

static int slice_rows(int o0, int slice, int out_dim) { return out_dim - o0 < slice ? out_dim - o0 : slice; }

void pfl_linear_forward(float *out, const float *in, const float *w, const float *b, int B, int in_dim, int out_dim) {
    for (int n = 0; n < B; n++) memcpy(out + (long)n * out_dim, b, sizeof(float) * (size_t)out_dim);
    const int slice = linear_slice(B, in_dim, out_dim);
    for (int o0 = 0; o0 < out_dim; o0 += slice)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, slice_rows(o0, slice, out_dim), in_dim, 1.0f, in,
                    in_dim, w + (long)o0 * in_dim, in_dim, 1.0f, out + o0, out_dim);
}

void pfl_linear_forward_small(float *out, float *scratch, const float *in, const float *w, const float *b, int B,
                              int in_dim, int out_dim) {
    /* scratch[O][B] = w[O][I] * in^T: with few samples OpenBLAS packs the
     * small `in` instead of the large weight matrix, about twice as fast
     * when the GEMM is large enough to be packed at all (see above). */
    const int slice = linear_slice(B, in_dim, out_dim);
    for (int o0 = 0; o0 < out_dim; o0 += slice)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, slice_rows(o0, slice, out_dim), B, in_dim, 1.0f,
                    w + (long)o0 * in_dim, in_dim, in, in_dim, 0.0f, scratch + (long)o0 * B, B);
    for (int n = 0; n < B; n++)
        for (int o = 0; o < out_dim; o++) out[(long)n * out_dim + o] = scratch[(long)o * B + n] + b[o];
}

/* din = dout * w, slice by slice of w's rows (the inner dimension). */
static void linear_input_grad(float *din, const float *dout, const float *w, int B, int in_dim, int out_dim) {
    const int slice = linear_slice(B, in_dim, out_dim);
    for (int o0 = 0; o0 < out_dim; o0 += slice)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, in_dim, slice_rows(o0, slice, out_dim), 1.0f,
                    dout + o0, out_dim, w + (long)o0 * in_dim, in_dim, o0 == 0 ? 0.0f : 1.0f, din, in_dim);
}

/* dw += alpha * dout^T * in, slice by slice of dw's rows. */
static void linear_weight_grad(float *dw, float alpha, const float *dout, const float *in, int B, int in_dim,
                               int out_dim) {
    const int slice = linear_slice(B, in_dim, out_dim);
    for (int o0 = 0; o0 < out_dim; o0 += slice)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, slice_rows(o0, slice, out_dim), in_dim, B, alpha,
                    dout + o0, out_dim, in, in_dim, 1.0f, dw + (long)o0 * in_dim, in_dim);
}

void pfl_linear_backward(float *din, float *dw, float *db, const float *dout, const float *in, const float *w,
                         int B, int in_dim, int out_dim) {
    for (int n = 0; n < B; n++) axpy(db, 1.0f, dout + (long)n * out_dim, out_dim);
    linear_weight_grad(dw, 1.0f, dout, in, B, in_dim, out_dim);
    if (din) linear_input_grad(din, dout, w, B, in_dim, out_dim);
}

void pfl_linear_backward_sgd(float *din, float *w, float *b, const float *dout, const float *in, int B, int in_dim,
                             int out_dim, float lr) {
    if (din) linear_input_grad(din, dout, w, B, in_dim, out_dim); /* from the weights before the step */
    for (int o = 0; o < out_dim; o++) { /* the bias gradient summed as pfl_linear_backward does */
        float g = 0.0f;
        for (int n = 0; n < B; n++) g += dout[(long)n * out_dim + o];
        b[o] -= lr * g;
    }
    linear_weight_grad(w, -lr, dout, in, B, in_dim, out_dim); /* the weight-gradient GEMM straight into w */
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
 * the workspace holds one sample's columns instead of a batch's).
 *
 * Small outputs (ResNet's and AlexNet's late stages: 4x4, 2x2, 1x1) make
 * that GEMM a matrix-vector product that rereads the whole weight matrix
 * for every sample. There, samples go through in groups whose columns sit
 * side by side, col[CKK][g][P], so one GEMM covers g samples (at least
 * CONV_GROUP_COLUMNS columns) and goes through a [OC][g*P] buffer to and
 * from NCHW. */

#define CONV_GROUP_COLUMNS 64

/* Samples per GEMM: 1 when one sample's output has CONV_GROUP_COLUMNS
 * positions or more. */
static int conv_group(const pfl_conv_shape *s) {
    const long P = (long)s->OH * s->OW;
    if (P >= CONV_GROUP_COLUMNS) return 1;
    const long g = (CONV_GROUP_COLUMNS + P - 1) / P;
    return g < s->B ? (int)g : (s->B > 0 ? s->B : 1);
}

long pfl_conv2d_col_floats(const pfl_conv_shape *s) {
    const long P = (long)s->OH * s->OW, g = conv_group(s);
    const long unfold = (long)s->C * s->K * s->K * P * g + (g > 1 ? (long)s->OC * P * g : 0);
    /* the backward unfolds in the same buffer */
    const long wino = pfl_conv2d_winograd(s) ? pfl_winograd_floats(s) : 0;
    return wino > unfold ? wino : unfold;
}

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

/* Unfolds one sample into col[CKK][P], P = OH*OW, rows `ld` floats apart
 * (P, or g*P in a group); rows are (c, ky, kx) in
 * the order of the weight's inner dimensions. The geometry is copied into
 * locals and the buffers are restrict so the short row copies (8 floats in
 * the CNN's second convolution) compile to plain vector moves. */
static void im2col(float *restrict col, const float *restrict img, const pfl_conv_shape *s, long ld) {
    const int C = s->C, H = s->H, W = s->W, K = s->K, OH = s->OH, OW = s->OW, pad = s->pad, stride = s->stride;
    for (int c = 0; c < C; c++) {
        const float *restrict plane = img + (long)c * H * W;
        for (int ky = 0; ky < K; ky++)
            for (int kx = 0; kx < K; kx++) {
                float *restrict dst = col + ((long)(c * K + ky) * K + kx) * ld;
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
static void col2im(float *restrict img, const float *restrict col, const pfl_conv_shape *s, long ld) {
    const int C = s->C, H = s->H, W = s->W, K = s->K, OH = s->OH, OW = s->OW, pad = s->pad, stride = s->stride;
    memset(img, 0, sizeof(float) * (size_t)C * H * W);
    for (int c = 0; c < C; c++) {
        float *restrict plane = img + (long)c * H * W;
        for (int ky = 0; ky < K; ky++)
            for (int kx = 0; kx < K; kx++) {
                const float *restrict src = col + ((long)(c * K + ky) * K + kx) * ld;
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

/* Samples [n0, n0 + g) in one GEMM (see above): out through tmp[OC][g*P]. */
static void conv_forward_group(float *out, float *col, const float *in, const float *w, const float *b,
                               const pfl_conv_shape *s, int n0, int g) {
    const long P = (long)s->OH * s->OW, in_size = (long)s->C * s->H * s->W, ld = g * P;
    const int CKK = s->C * s->K * s->K;
    float *tmp = col + (long)CKK * ld;
    for (int j = 0; j < g; j++) im2col(col + j * P, in + (n0 + j) * in_size, s, ld);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s->OC, (int)ld, CKK, 1.0f, w, CKK, col, (int)ld, 0.0f, tmp,
                (int)ld);
    for (int j = 0; j < g; j++) {
        float *out_n = out + (long)(n0 + j) * s->OC * P;
        for (int oc = 0; oc < s->OC; oc++) {
            const float bias = b ? b[oc] : 0.0f, *t = tmp + oc * ld + j * P;
            for (long p = 0; p < P; p++) out_n[oc * P + p] = t[p] + bias;
        }
    }
}

void pfl_conv2d_forward(float *out, float *col, const float *in, const float *w, const float *b,
                        const pfl_conv_shape *s) {
    if (pfl_conv2d_winograd(s)) pfl_winograd_forward(out, col, in, w, b, s);
    else pfl_conv2d_forward_unfolded(out, col, in, w, b, s);
}

void pfl_conv2d_forward_unfolded(float *out, float *col, const float *in, const float *w, const float *b,
                                 const pfl_conv_shape *s) {
    const long P = (long)s->OH * s->OW, in_size = (long)s->C * s->H * s->W;
    const int CKK = s->C * s->K * s->K, g = conv_group(s);
    if (g > 1) {
        for (int n0 = 0; n0 < s->B; n0 += g) conv_forward_group(out, col, in, w, b, s, n0, s->B - n0 < g ? s->B - n0 : g);
        return;
    }
    for (int n = 0; n < s->B; n++) {
        float *out_n = out + (long)n * s->OC * P;
        im2col(col, in + n * in_size, s, P);
        for (int oc = 0; oc < s->OC; oc++)
            for (long p = 0; p < P; p++) out_n[oc * P + p] = b ? b[oc] : 0.0f;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s->OC, (int)P, CKK, 1.0f, w, CKK, col, (int)P, 1.0f,
                    out_n, (int)P);
    }
}

/* The output gradient of samples [n0, n0 + g) as one [OC][g*P] matrix: the
 * sample's own block of dout when g is 1, else gathered into tmp. */
static const float *group_dout(float *tmp, const float *dout, const pfl_conv_shape *s, int n0, int g) {
    const long P = (long)s->OH * s->OW, ld = g * P;
    if (g == 1) return dout + (long)n0 * s->OC * P;
    for (int j = 0; j < g; j++)
        for (int oc = 0; oc < s->OC; oc++)
            memcpy(tmp + oc * ld + j * P, dout + ((long)(n0 + j) * s->OC + oc) * P, sizeof(float) * (size_t)P);
    return tmp;
}

/* dw += alpha * dout * col^T over the batch, sample by sample (or group by
 * group), unfolding each input again into col. */
static void conv_weight_grad(float *dw, float alpha, float *col, const float *dout, const float *in,
                             const pfl_conv_shape *s) {
    const long P = (long)s->OH * s->OW, in_size = (long)s->C * s->H * s->W;
    const int CKK = s->C * s->K * s->K, G = conv_group(s);
    for (int n0 = 0; n0 < s->B; n0 += G) {
        const int g = s->B - n0 < G ? s->B - n0 : G;
        const long ld = g * P;
        for (int j = 0; j < g; j++) im2col(col + j * P, in + (n0 + j) * in_size, s, ld);
        const float *d = group_dout(col + (long)CKK * ld, dout, s, n0, g);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s->OC, CKK, (int)ld, alpha, d, (int)ld, col, (int)ld, 1.0f,
                    dw, CKK);
    }
}

/* din = the input gradient, from w^T * dout unfolded in col, then folded back. */
static void conv_input_grad(float *din, float *col, const float *dout, const float *w, const pfl_conv_shape *s) {
    const long P = (long)s->OH * s->OW, in_size = (long)s->C * s->H * s->W;
    const int CKK = s->C * s->K * s->K, G = conv_group(s);
    for (int n0 = 0; n0 < s->B; n0 += G) {
        const int g = s->B - n0 < G ? s->B - n0 : G;
        const long ld = g * P;
        const float *d = group_dout(col + (long)CKK * ld, dout, s, n0, g);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, CKK, (int)ld, s->OC, 1.0f, w, CKK, d, (int)ld, 0.0f, col,
                    (int)ld);
        for (int j = 0; j < g; j++) col2im(din + (n0 + j) * in_size, col + j * P, s, ld);
    }
}

/* The bias gradient of channel oc: its output gradients summed sample by
 * sample, in one order for the fused and the separate step. */
static float conv_bias_grad(float acc, const float *dout, const pfl_conv_shape *s, int oc) {
    const long P = (long)s->OH * s->OW;
    for (int n = 0; n < s->B; n++) acc += row_sum(dout + ((long)n * s->OC + oc) * P, P);
    return acc;
}

void pfl_conv2d_backward(float *din, float *dw, float *db, float *col, const float *dout, const float *in,
                         const float *w, const pfl_conv_shape *s) {
    if (!pfl_conv2d_winograd(s)) {
        pfl_conv2d_backward_unfolded(din, dw, db, col, dout, in, w, s);
        return;
    }
    if (db)
        for (int oc = 0; oc < s->OC; oc++) db[oc] = conv_bias_grad(db[oc], dout, s, oc);
    pfl_winograd_backward(din, dw, 1.0f, col, dout, in, s);
}

void pfl_conv2d_backward_unfolded(float *din, float *dw, float *db, float *col, const float *dout, const float *in,
                                  const float *w, const pfl_conv_shape *s) {
    if (db)
        for (int oc = 0; oc < s->OC; oc++) db[oc] = conv_bias_grad(db[oc], dout, s, oc);
    conv_weight_grad(dw, 1.0f, col, dout, in, s);
    if (din) conv_input_grad(din, col, dout, w, s);
}

void pfl_conv2d_backward_sgd(float *din, float *w, float *b, float *col, const float *dout, const float *in,
                             const pfl_conv_shape *s, float lr) {
    if (pfl_conv2d_winograd(s)) {
        pfl_winograd_backward(din, w, -lr, col, dout, in, s); /* din from the forward's U: the weights before the step */
    } else {
        if (din) conv_input_grad(din, col, dout, w, s); /* from the weights before the step */
        conv_weight_grad(w, -lr, col, dout, in, s);
    }
    if (b)
        for (int oc = 0; oc < s->OC; oc++) b[oc] -= lr * conv_bias_grad(0.0f, dout, s, oc);
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

/* One plane, any window, stride and padding: positions outside the input
 * are skipped (PyTorch pads with -infinity), so the winner is always a real
 * input; strict '>' keeps the first maximum. */
static void maxpool_plane(float *dst, int *arg, const float *src, int H, int W, int k, int stride, int pad, int OH,
                          int OW) {
    for (int oy = 0; oy < OH; oy++)
        for (int ox = 0; ox < OW; ox++) {
            const int y0 = oy * stride - pad, x0 = ox * stride - pad;
            const int ylo = y0 < 0 ? 0 : y0, yhi = y0 + k > H ? H : y0 + k;
            const int xlo = x0 < 0 ? 0 : x0, xhi = x0 + k > W ? W : x0 + k;
            float best = -FLT_MAX;
            int best_i = ylo * W + xlo;
            for (int y = ylo; y < yhi; y++)
                for (int x = xlo; x < xhi; x++)
                    if (src[y * W + x] > best) best = src[y * W + x], best_i = y * W + x;
            dst[oy * OW + ox] = best;
            arg[oy * OW + ox] = best_i;
        }
}

void pfl_maxpool2d_pad_forward(float *out, int *argmax, const float *in, int B, int C, int H, int W, int k, int stride,
                               int pad) {
    const int OH = (H + 2 * pad - k) / stride + 1, OW = (W + 2 * pad - k) / stride + 1;
    for (long plane = 0; plane < (long)B * C; plane++) {
        const float *src = in + plane * H * W;
        float *dst = out + plane * OH * OW;
        int *arg = argmax + plane * OH * OW;
        if (k == 2 && stride == 2 && pad == 0) maxpool2x2(dst, arg, src, H, W);
        else maxpool_plane(dst, arg, src, H, W, k, stride, pad, OH, OW);
    }
}

void pfl_maxpool2d_forward(float *out, int *argmax, const float *in, int B, int C, int H, int W, int k, int stride) {
    pfl_maxpool2d_pad_forward(out, argmax, in, B, C, H, W, k, stride, 0);
}

void pfl_maxpool2d_pad_backward(float *din, const float *dout, const int *argmax, int B, int C, int H, int W, int k,
                                int stride, int pad) {
    const int OH = (H + 2 * pad - k) / stride + 1, OW = (W + 2 * pad - k) / stride + 1;
    memset(din, 0, sizeof(float) * (size_t)B * C * H * W);
    for (long plane = 0; plane < (long)B * C; plane++) {
        float *dst = din + plane * H * W;
        const float *src = dout + plane * OH * OW;
        const int *arg = argmax + plane * OH * OW;
        for (int o = 0; o < OH * OW; o++) dst[arg[o]] += src[o];
    }
}

void pfl_maxpool2d_backward(float *din, const float *dout, const int *argmax, int B, int C, int H, int W, int k,
                            int stride) {
    pfl_maxpool2d_pad_backward(din, dout, argmax, B, C, H, W, k, stride, 0);
}

/* ---- global average pooling ---- */

void pfl_avgpool_global_forward(float *out, const float *in, int B, int C, int HW) {
    for (long plane = 0; plane < (long)B * C; plane++) out[plane] = row_sum(in + plane * HW, HW) / (float)HW;
}

void pfl_avgpool_global_backward(float *din, const float *dout, int B, int C, int HW) {
    const float scale = 1.0f / (float)HW;
    for (long plane = 0; plane < (long)B * C; plane++) {
        const float g = dout[plane] * scale;
        float *d = din + plane * HW;
        for (int i = 0; i < HW; i++) d[i] = g;
    }
}

/* ---- BatchNorm2d ----
 *
 * A channel's values are B planes of HW floats, one per sample. Sums run in
 * double: a channel of the CIFAR ResNet's first stage holds B * 1024 values,
 * and the variance is taken around the mean in a second pass (no
 * cancellation). */

static double channel_sum(const float *in, int B, int C, int HW, int c) {
    double s = 0.0;
    for (int n = 0; n < B; n++) s += row_sum(in + ((long)n * C + c) * HW, HW);
    return s;
}

/* y = (x - mu) * scale + shift over channel c: centring first keeps the
 * precision when the mean is large against the spread. */
static void normalize_channel(float *out, const float *in, int B, int C, int HW, int c, float mu, float scale,
                              float shift) {
    for (int n = 0; n < B; n++) {
        const float *x = in + ((long)n * C + c) * HW;
        float *y = out + ((long)n * C + c) * HW;
        for (int i = 0; i < HW; i++) y[i] = (x[i] - mu) * scale + shift;
    }
}

void pfl_batchnorm_forward_train(float *out, float *mean, float *var, float *invstd, const float *in,
                                 const float *gamma, const float *beta, int B, int C, int HW) {
    const double N = (double)B * HW;
    for (int c = 0; c < C; c++) {
        const double mu = channel_sum(in, B, C, HW, c) / N;
        double ss = 0.0;
        for (int n = 0; n < B; n++) {
            const float *x = in + ((long)n * C + c) * HW;
            for (int i = 0; i < HW; i++) ss += ((double)x[i] - mu) * ((double)x[i] - mu);
        }
        const double v = ss / N, is = 1.0 / sqrt(v + (double)PFL_BN_EPS);
        mean[c] = (float)mu, var[c] = (float)v, invstd[c] = (float)is;
        normalize_channel(out, in, B, C, HW, c, (float)mu, (float)(gamma[c] * is), beta[c]);
    }
}

void pfl_batchnorm_forward_eval(float *out, float *invstd, const float *in, const float *gamma, const float *beta,
                                const float *running_mean, const float *running_var, int B, int C, int HW) {
    for (int c = 0; c < C; c++) {
        const double is = 1.0 / sqrt((double)running_var[c] + (double)PFL_BN_EPS);
        invstd[c] = (float)is;
        normalize_channel(out, in, B, C, HW, c, running_mean[c], (float)(gamma[c] * is), beta[c]);
    }
}

void pfl_batchnorm_backward(float *din, float *dgamma, float *dbeta, const float *dout, const float *in,
                            const float *gamma, const float *mean, const float *invstd, int B, int C, int HW,
                            bool batch_stats) {
    const double N = (double)B * HW;
    for (int c = 0; c < C; c++) {
        const double mu = mean[c], is = invstd[c];
        double sum_dy = 0.0, sum_dy_xhat = 0.0;
        for (int n = 0; n < B; n++) {
            const long base = ((long)n * C + c) * HW;
            for (int i = 0; i < HW; i++) {
                const double dy = dout[base + i];
                sum_dy += dy;
                sum_dy_xhat += dy * ((double)in[base + i] - mu) * is;
            }
        }
        dgamma[c] += (float)sum_dy_xhat;
        dbeta[c] += (float)sum_dy;
        if (!din) continue;
        /* din = a * dout + b * (x - mu) + d per channel, with xhat = (x - mu) * is:
         * a = gamma * is; batch statistics add b = -a * is * mean(dout * xhat)
         * and d = -a * mean(dout) */
        const double a = gamma[c] * is;
        const double b = batch_stats ? -a * is * (sum_dy_xhat / N) : 0.0, d = batch_stats ? -a * (sum_dy / N) : 0.0;
        const float fa = (float)a, fb = (float)b, fd = (float)d, fmu = (float)mu;
        for (int n = 0; n < B; n++) {
            const long base = ((long)n * C + c) * HW;
            for (int i = 0; i < HW; i++) din[base + i] = fa * dout[base + i] + fb * (in[base + i] - fmu) + fd;
        }
    }
}

void pfl_batchnorm_update_running(float *running_mean, float *running_var, const float *mean, const float *var,
                                  int C, long n, float momentum) {
    const double unbias = n > 1 ? (double)n / (double)(n - 1) : 1.0;
    for (int c = 0; c < C; c++) {
        running_mean[c] = (1.0f - momentum) * running_mean[c] + momentum * mean[c];
        running_var[c] = (1.0f - momentum) * running_var[c] + momentum * (float)(var[c] * unbias);
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

float pfl_softmax_xent_offset_forward(float *probs, const float *logits, const float *offset, const uint8_t *labels,
                                      int B, int classes) {
    if (!offset) return pfl_softmax_xent_forward(probs, logits, labels, B, classes);
    double total = 0.0;
    for (int n = 0; n < B; n++) {
        const float *z = logits + (long)n * classes;
        float *p = probs + (long)n * classes;
        float zmax = -INFINITY;
        for (int c = 0; c < classes; c++)
            if (!isinf(offset[c]) && z[c] + offset[c] > zmax) zmax = z[c] + offset[c];
        double sum = 0.0;
        for (int c = 0; c < classes; c++) {
            p[c] = isinf(offset[c]) ? 0.0f : expf(z[c] + offset[c] - zmax);
            sum += p[c];
        }
        for (int c = 0; c < classes; c++) p[c] = (float)(p[c] / sum);
        total += log(sum) + zmax - (z[labels[n]] + offset[labels[n]]);
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

/* ---- maximum mean discrepancy (FedPHP) ---- */

/* PFLlib's bandwidths of the 'rbf' mixture. */
static const double mmd_bandwidths[] = {10.0, 15.0, 20.0, 50.0};

static double squared_distance(const float *a, const float *b, long n) {
    double d = 0.0;
    for (long i = 0; i < n; i++) {
        const double t = (double)a[i] - (double)b[i];
        d += t * t;
    }
    return d;
}

static double mmd_kernel(double d) {
    double k = 0.0;
    for (int i = 0; i < 4; i++) k += exp(-d / (2.0 * mmd_bandwidths[i]));
    return k;
}

/* dk/dd */
static double mmd_kernel_slope(double d) {
    double k = 0.0;
    for (int i = 0; i < 4; i++) k -= exp(-d / (2.0 * mmd_bandwidths[i])) / (2.0 * mmd_bandwidths[i]);
    return k;
}

double pfl_mmd_rbf(const float *x, const float *y, int B, long n, float *dx) {
    if (B <= 0) return 0.0;
    const double scale = 1.0 / ((double)B * (double)B);
    double sum = 0.0;
    for (int i = 0; i < B; i++)
        for (int j = 0; j < B; j++) {
            const float *xi = x + (long)i * n, *xj = x + (long)j * n, *yi = y + (long)i * n, *yj = y + (long)j * n;
            sum += mmd_kernel(squared_distance(xi, xj, n)) + mmd_kernel(squared_distance(yi, yj, n)) -
                   2.0 * mmd_kernel(squared_distance(xi, yj, n));
        }
    if (!dx) return sum * scale;
    for (int k = 0; k < B; k++) {
        const float *xk = x + (long)k * n;
        float *g = dx + (long)k * n;
        for (long f = 0; f < n; f++) g[f] = 0.0f;
        for (int j = 0; j < B; j++) {
            const float *xj = x + (long)j * n, *yj = y + (long)j * n;
            const double sx = 4.0 * scale * mmd_kernel_slope(squared_distance(xk, xj, n));
            const double sy = 4.0 * scale * mmd_kernel_slope(squared_distance(xk, yj, n));
            for (long f = 0; f < n; f++)
                g[f] += (float)(sx * ((double)xk[f] - (double)xj[f]) - sy * ((double)xk[f] - (double)yj[f]));
        }
    }
    return sum * scale;
}

double pfl_layernorm_forward(float *out, float *hat, const float *x, const float *w, const float *b, int n) {
    double mean = 0.0, var = 0.0;
    for (int k = 0; k < n; k++) mean += x[k];
    mean /= n;
    for (int k = 0; k < n; k++) var += ((double)x[k] - mean) * ((double)x[k] - mean);
    const double inv = 1.0 / sqrt(var / n + 1e-5); /* nn.LayerNorm's eps */
    for (int k = 0; k < n; k++) {
        hat[k] = (float)((x[k] - mean) * inv);
        out[k] = w[k] * hat[k] + b[k];
    }
    return inv;
}

void pfl_layernorm_backward(float *d, float *dw, float *db, const float *hat, double inv, const float *w, int n) {
    double m1 = 0.0, m2 = 0.0; /* means of d hat and d hat * hat */
    for (int k = 0; k < n; k++) {
        dw[k] += d[k] * hat[k];
        db[k] += d[k];
        d[k] *= w[k]; /* now d hat */
        m1 += d[k], m2 += (double)d[k] * hat[k];
    }
    m1 /= n, m2 /= n;
    for (int k = 0; k < n; k++) d[k] = (float)(inv * (d[k] - m1 - hat[k] * m2)); /* now d x */
}
