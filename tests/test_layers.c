/* The nn engine checked against itself and against arithmetic done by hand:
 *
 *  - every layer's forward against a naive double-precision reference, and
 *    its backward against central finite differences of its forward;
 *    (linear, conv2d over many geometries, maxpool, relu, softmax
 *    cross-entropy), dropout's mask statistics and its backward;
 *  - the whole models' backward against finite differences of the loss
 *    (see test_model_fd), batches smaller than the workspace, accumulation;
 *  - SGD against torch.optim.SGD, parameter counts and tensor names against
 *    PFLlib's models.
 * tests/test_model.c compares the same engine against PyTorch itself.
 *
 * Finite differences. A layer's backward is checked through the scalar
 * L = sum_i r_i * out_i with fixed random r (so dL/dout = r is what we feed
 * the backward), accumulated in double. Each coordinate is perturbed by +-eps
 * in float and (L+ - L-) divided by the step actually taken after rounding.
 * We check  max_i |numeric_i - analytic_i| <= FD_TOL * max_i |analytic_i|.
 *
 * Why FD_TOL = 1e-2 relative to the LARGEST gradient. The numeric
 * derivative's error has two parts: truncation, O(eps^2 * f'''), which is
 * zero for the layers that are linear in the perturbed argument (linear,
 * conv, and relu/maxpool away from their kinks, which the inputs keep clear
 * of) and ~1e-5 for softmax cross-entropy at eps = 1e-2; and rounding: the
 * layer outputs are float32, so L carries an error of about 1e-7 * sum|r_i
 * out_i| that is divided by 2 eps. That rounding error is the same for every
 * coordinate, so it is fair to measure it against the gradient's scale, not
 * against each entry (entries near zero would otherwise fail on noise). With
 * these sizes it comes to at most ~5e-5 of the largest gradient (measured;
 * printed below), while a wrong
 * index, a missing term, a transposed weight or a stride/padding slip moves
 * entries by O(1) of that scale: 1e-2 sits between with room on both sides.
 * The worst value of each check is printed, so a drift shows before a fail. */
#include <float.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fd_check.h" /* FD_TOL, check_grad, fd_one, fd_all */
#include "nn/layers.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "util/err.h"
#include "util/rng.h"

#ifndef FD_EPS_MODEL /* -DFD_EPS_MODEL=... to explore; see test_model_fd */
#define FD_EPS_MODEL 3e-4f
#endif

/* ---- helpers ---- */

static pfl_rng test_rng(uint64_t seed) { return pfl_rng_stream(seed, PFL_RNG_NONE, PFL_RNG_NONE, PFL_RNG_BENCH); }

static float *falloc(long n) {
    float *p = calloc((size_t)(n > 0 ? n : 1), sizeof(float));
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

static void fill_uniform(float *a, long n, double lo, double hi, pfl_rng *r) {
    for (long i = 0; i < n; i++) a[i] = (float)(lo + (hi - lo) * pfl_rng_uniform(r));
}

/* Uniform values whose magnitude is at least `gap` (clear of ReLU's kink). */
static void fill_away_from_zero(float *a, long n, double gap, double hi, pfl_rng *r) {
    for (long i = 0; i < n; i++) {
        double m = gap + (hi - gap) * pfl_rng_uniform(r);
        a[i] = (float)(pfl_rng_uniform(r) < 0.5 ? -m : m);
    }
}

/* Distinct values: a shuffled ladder with steps of `step`, centred on 0, so
 * max-pool windows have no ties or near-ties closer than `step`. */
static void fill_distinct(float *a, long n, double step, pfl_rng *r) {
    int *idx = malloc(sizeof(int) * (size_t)n);
    if (!idx) exit(2);
    for (long i = 0; i < n; i++) idx[i] = (int)i;
    pfl_rng_shuffle(r, idx, (size_t)n);
    for (long i = 0; i < n; i++) a[i] = (float)((idx[i] - n / 2) * step);
    free(idx);
}

static double dot_d(const float *a, const float *b, long n) {
    double s = 0.0;
    for (long i = 0; i < n; i++) s += (double)a[i] * (double)b[i];
    return s;
}

/* Forward outputs against a double reference: |a - ref| <= tol * max|ref|. */
static void check_values(const char *what, const float *a, const double *ref, long n, double tol) {
    double scale = 0.0, worst = 0.0;
    for (long i = 0; i < n; i++) {
        if (fabs(ref[i]) > scale) scale = fabs(ref[i]);
        double d = fabs((double)a[i] - ref[i]);
        if (!(d <= worst)) worst = d;
    }
    CHECK(worst <= tol * (scale > 0 ? scale : 1.0), "%s: max|diff| %.3e against max|ref| %.3e", what, worst, scale);
}

/* ---- linear ---- */

typedef struct {
    int B, in_dim, out_dim;
    float *in, *w, *b, *out, *r;
} linear_ctx;

static double linear_loss(void *p) {
    linear_ctx *c = p;
    pfl_linear_forward(c->out, c->in, c->w, c->b, c->B, c->in_dim, c->out_dim);
    return dot_d(c->out, c->r, (long)c->B * c->out_dim);
}

static void test_linear(int B, int in_dim, int out_dim, uint64_t seed) {
    char what[96];
    printf("linear B=%d %d->%d\n", B, in_dim, out_dim);
    pfl_rng r = test_rng(seed);
    const long nx = (long)B * in_dim, nw = (long)out_dim * in_dim, ny = (long)B * out_dim;
    linear_ctx c = {B, in_dim, out_dim, falloc(nx), falloc(nw), falloc(out_dim), falloc(ny), falloc(ny)};
    fill_uniform(c.in, nx, -1, 1, &r);
    fill_uniform(c.w, nw, -1, 1, &r);
    fill_uniform(c.b, out_dim, -1, 1, &r);
    fill_uniform(c.r, ny, -1, 1, &r);

    /* forward against the definition */
    double *ref = malloc(sizeof(double) * (size_t)ny);
    for (int n = 0; n < B; n++)
        for (int o = 0; o < out_dim; o++) {
            double s = c.b[o];
            for (int i = 0; i < in_dim; i++) s += (double)c.in[(long)n * in_dim + i] * c.w[(long)o * in_dim + i];
            ref[(long)n * out_dim + o] = s;
        }
    pfl_linear_forward(c.out, c.in, c.w, c.b, B, in_dim, out_dim);
    snprintf(what, sizeof what, "linear %d->%d forward", in_dim, out_dim);
    check_values(what, c.out, ref, ny, 1e-5);
    free(ref);

    /* backward: din is overwritten, dw and db accumulate onto what is there */
    float *din = falloc(nx), *dw = falloc(nw), *db = falloc(out_dim);
    float *dw0 = falloc(nw), *db0 = falloc(out_dim);
    fill_uniform(din, nx, 100, 200, &r); /* garbage that must disappear */
    fill_uniform(dw0, nw, -1, 1, &r);
    fill_uniform(db0, out_dim, -1, 1, &r);
    memcpy(dw, dw0, sizeof(float) * (size_t)nw);
    memcpy(db, db0, sizeof(float) * (size_t)out_dim);
    pfl_linear_backward(din, dw, db, c.r, c.in, c.w, B, in_dim, out_dim);
    for (long i = 0; i < nw; i++) dw[i] -= dw0[i];
    for (int i = 0; i < out_dim; i++) db[i] -= db0[i];

    float *num = falloc(nx > nw ? nx : nw);
    fd_all(num, c.in, nx, 1e-2f, linear_loss, &c);
    check_grad("linear dx", num, din, nx);
    fd_all(num, c.w, nw, 1e-2f, linear_loss, &c);
    check_grad("linear dW (accumulated)", num, dw, nw);
    fd_all(num, c.b, out_dim, 1e-2f, linear_loss, &c);
    check_grad("linear db (accumulated)", num, db, out_dim);

    /* din may be NULL, and the parameter gradients stay the same */
    float *dw2 = falloc(nw), *db2 = falloc(out_dim);
    pfl_linear_backward(NULL, dw2, db2, c.r, c.in, c.w, B, in_dim, out_dim);
    double dd = 0.0;
    for (long i = 0; i < nw; i++) dd = fmax(dd, fabs(dw2[i] - dw[i]));
    for (int i = 0; i < out_dim; i++) dd = fmax(dd, fabs(db2[i] - db[i]));
    CHECK(dd <= 1e-5, "linear backward with din NULL: parameter gradients differ by %.3e", dd);

    free(num), free(din), free(dw), free(db), free(dw0), free(db0), free(dw2), free(db2);
    free(c.in), free(c.w), free(c.b), free(c.out), free(c.r);
}

/* A shape where the layer runs as slices of output rows (layers.c: GEMMs
 * under OpenBLAS's small-matrix bound; here 96 rows, the last slice 24):
 * forward, the small-batch forward, backward and the fused SGD step
 * against double references. */
static void test_linear_slices(int B, int in_dim, int out_dim, uint64_t seed) {
    printf("linear in slices B=%d %d->%d\n", B, in_dim, out_dim);
    pfl_rng r = test_rng(seed);
    const long nx = (long)B * in_dim, nw = (long)out_dim * in_dim, ny = (long)B * out_dim;
    float *in = falloc(nx), *w = falloc(nw), *b = falloc(out_dim), *out = falloc(ny), *dout = falloc(ny);
    float *scratch = falloc(ny), *din = falloc(nx), *dw = falloc(nw), *db = falloc(out_dim);
    double *ref_y = malloc(sizeof(double) * (size_t)ny), *ref_dx = calloc((size_t)nx, sizeof(double)),
           *ref_dw = calloc((size_t)nw, sizeof(double)), *ref_w = malloc(sizeof(double) * (size_t)nw);
    fill_uniform(in, nx, -1, 1, &r);
    fill_uniform(w, nw, -0.05f, 0.05f, &r);
    fill_uniform(b, out_dim, -1, 1, &r);
    fill_uniform(dout, ny, -1, 1, &r);
    for (int n = 0; n < B; n++)
        for (int o = 0; o < out_dim; o++) {
            double y = b[o];
            const double g = dout[(long)n * out_dim + o];
            for (int i = 0; i < in_dim; i++) {
                const long k = (long)o * in_dim + i, x = (long)n * in_dim + i;
                y += (double)in[x] * w[k];
                ref_dx[x] += g * w[k];
                ref_dw[k] += g * in[x];
            }
            ref_y[(long)n * out_dim + o] = y;
        }
    pfl_linear_forward(out, in, w, b, B, in_dim, out_dim);
    check_values("linear slices forward", out, ref_y, ny, 1e-5);
    pfl_linear_forward_small(out, scratch, in, w, b, B, in_dim, out_dim);
    check_values("linear slices forward (small batch)", out, ref_y, ny, 1e-5);
    pfl_linear_backward(din, dw, db, dout, in, w, B, in_dim, out_dim);
    check_values("linear slices din", din, ref_dx, nx, 1e-5);
    check_values("linear slices dw", dw, ref_dw, nw, 1e-5);
    const float lr = 0.1f;
    for (long k = 0; k < nw; k++) ref_w[k] = w[k] - lr * ref_dw[k];
    memset(din, 0, sizeof(float) * (size_t)nx);
    pfl_linear_backward_sgd(din, w, b, dout, in, B, in_dim, out_dim, lr);
    check_values("linear slices fused SGD din", din, ref_dx, nx, 1e-5);
    check_values("linear slices fused SGD weights", w, ref_w, nw, 1e-5);
    free(in), free(w), free(b), free(out), free(dout), free(scratch), free(din), free(dw), free(db);
    free(ref_y), free(ref_dx), free(ref_dw), free(ref_w);
}

/* ---- conv2d ---- */

typedef struct {
    pfl_conv_shape s;
    float *in, *w, *b, *out, *col, *r;
} conv_ctx;

static double conv_loss(void *p) {
    conv_ctx *c = p;
    pfl_conv2d_forward(c->out, c->col, c->in, c->w, c->b, &c->s);
    return dot_d(c->out, c->r, (long)c->s.B * c->s.OC * c->s.OH * c->s.OW);
}

/* The direct definition in double (zero padding, cross-correlation). */
static void conv_reference(double *ref, const float *in, const float *w, const float *b, const pfl_conv_shape *sp) {
    const pfl_conv_shape s = *sp;
    const int C = s.C, H = s.H, W = s.W, K = s.K, OC = s.OC, stride = s.stride, pad = s.pad;
    for (int n = 0; n < s.B; n++)
        for (int oc = 0; oc < OC; oc++)
            for (int oy = 0; oy < s.OH; oy++)
                for (int ox = 0; ox < s.OW; ox++) {
                    double acc = b ? b[oc] : 0.0;
                    for (int ch = 0; ch < C; ch++)
                        for (int ky = 0; ky < K; ky++)
                            for (int kx = 0; kx < K; kx++) {
                                int iy = oy * stride - pad + ky, ix = ox * stride - pad + kx;
                                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                                acc += (double)w[((oc * C + ch) * K + ky) * K + kx] *
                                       in[(((long)n * C + ch) * H + iy) * W + ix];
                            }
                    ref[(((long)n * OC + oc) * s.OH + oy) * s.OW + ox] = acc;
                }
}

/* bias false: a convolution without bias (ResNet's), b and db NULL. Small
 * outputs (under 64 positions) take the grouped path (layers.c). */
static void test_conv_bias(int B, int C, int H, int W, int OC, int K, int stride, int pad, bool bias, uint64_t seed) {
    pfl_conv_shape s = {B, C, H, W, OC, K, stride, pad, (H + 2 * pad - K) / stride + 1, (W + 2 * pad - K) / stride + 1};
    char geo[96], what[128];
    snprintf(geo, sizeof geo, "conv B=%d %dx%dx%d->%d k%d s%d p%d (out %dx%d)%s", B, C, H, W, OC, K, stride, pad,
             s.OH, s.OW, bias ? "" : " no bias");
    printf("%s\n", geo);
    pfl_rng r = test_rng(seed);
    const long nx = (long)B * C * H * W, nw = (long)OC * C * K * K, ny = (long)B * OC * s.OH * s.OW;
    conv_ctx c = {s, falloc(nx), falloc(nw), falloc(OC), falloc(ny), falloc(pfl_conv2d_col_floats(&s)), falloc(ny)};
    fill_uniform(c.in, nx, -1, 1, &r);
    fill_uniform(c.w, nw, -1, 1, &r);
    fill_uniform(c.b, OC, -1, 1, &r);
    fill_uniform(c.r, ny, -1, 1, &r);
    float *bias_buf = c.b;
    if (!bias) c.b = NULL;

    /* forward against the direct definition (zero padding, cross-correlation) */
    double *ref = malloc(sizeof(double) * (size_t)ny);
    conv_reference(ref, c.in, c.w, c.b, &s);
    pfl_conv2d_forward(c.out, c.col, c.in, c.w, c.b, &s);
    snprintf(what, sizeof what, "%s forward", geo);
    check_values(what, c.out, ref, ny, 1e-5);
    free(ref);

    /* backward after a forward; dw, db accumulate, din is overwritten */
    float *din = falloc(nx), *dw = falloc(nw), *db = falloc(OC), *dw0 = falloc(nw), *db0 = falloc(OC);
    fill_uniform(din, nx, 100, 200, &r);
    fill_uniform(dw0, nw, -1, 1, &r);
    fill_uniform(db0, OC, -1, 1, &r);
    memcpy(dw, dw0, sizeof(float) * (size_t)nw);
    memcpy(db, db0, sizeof(float) * (size_t)OC);
    pfl_conv2d_forward(c.out, c.col, c.in, c.w, c.b, &s);
    pfl_conv2d_backward(din, dw, bias ? db : NULL, c.col, c.r, c.in, c.w, &s);
    for (long i = 0; i < nw; i++) dw[i] -= dw0[i];
    for (int i = 0; i < OC; i++) db[i] -= db0[i];

    float *num = falloc(nx > nw ? nx : nw);
    fd_all(num, c.in, nx, 1e-2f, conv_loss, &c);
    check_grad("conv dx", num, din, nx);
    fd_all(num, c.w, nw, 1e-2f, conv_loss, &c);
    check_grad("conv dW (accumulated)", num, dw, nw);
    if (bias) {
        fd_all(num, c.b, OC, 1e-2f, conv_loss, &c);
        check_grad("conv db (accumulated)", num, db, OC);
    }

    /* din NULL: same parameter gradients */
    float *dw2 = falloc(nw), *db2 = falloc(OC);
    pfl_conv2d_forward(c.out, c.col, c.in, c.w, c.b, &s);
    pfl_conv2d_backward(NULL, dw2, bias ? db2 : NULL, c.col, c.r, c.in, c.w, &s);
    double dd = 0.0;
    for (long i = 0; i < nw; i++) dd = fmax(dd, fabs(dw2[i] - dw[i]));
    for (int i = 0; i < OC; i++) dd = fmax(dd, fabs(db2[i] - db[i]));
    CHECK(dd <= 1e-4 * fmax(1.0, max_abs(dw, nw)), "%s: backward with din NULL: parameter gradients differ by %.3e",
          geo, dd);

    free(num), free(din), free(dw), free(db), free(dw0), free(db0), free(dw2), free(db2);
    free(c.in), free(c.w), free(bias_buf), free(c.out), free(c.col), free(c.r);
}

static void test_conv(int B, int C, int H, int W, int OC, int K, int stride, int pad, uint64_t seed) {
    test_conv_bias(B, C, H, W, OC, K, stride, pad, true, seed);
}

/* The Winograd forward (5x5, stride 1, no padding, even outputs, >= 16
 * channels) against the unfolded forward and the double reference, on
 * uniform(-1, 1) data. Winograd's float32 error grows with the transforms'
 * constants (B^T's up to 5, G's 16/15): measured max|diff| / max|ref| was
 * 1.3e-6, 8.9e-7 and 6.5e-7 on the three shapes below (3.3e-6, 1.9e-6 and
 * 2.3e-6 with the textbook points +-2), against 1.9e-7 to 5.4e-7 for the
 * unfolded path. The tolerance stays 1e-5, that of every conv forward test
 * above; one wrong matrix entry gives errors of order 1e-1. */
static void test_conv_winograd(int B, int C, int H, int W, int OC, bool bias, uint64_t seed) {
    pfl_conv_shape s = {B, C, H, W, OC, 5, 1, 0, H - 4, W - 4};
    char what[128];
    snprintf(what, sizeof what, "winograd conv B=%d %dx%dx%d->%d k5 (out %dx%d)%s", B, C, H, W, OC, s.OH, s.OW,
             bias ? "" : " no bias");
    printf("%s\n", what);
    CHECK(pfl_conv2d_winograd(&s), "%s: the Winograd path should apply", what);
    pfl_rng r = test_rng(seed);
    const long nx = (long)B * C * H * W, nw = (long)OC * C * 25, ny = (long)B * OC * s.OH * s.OW;
    float *in = falloc(nx), *w = falloc(nw), *b = falloc(OC), *col = falloc(pfl_conv2d_col_floats(&s));
    float *wino = falloc(ny), *unfolded = falloc(ny);
    double *ref = malloc(sizeof(double) * (size_t)ny);
    fill_uniform(in, nx, -1, 1, &r);
    fill_uniform(w, nw, -1, 1, &r);
    fill_uniform(b, OC, -1, 1, &r);
    conv_reference(ref, in, w, bias ? b : NULL, &s);
    pfl_conv2d_forward(wino, col, in, w, bias ? b : NULL, &s);
    pfl_conv2d_forward_unfolded(unfolded, col, in, w, bias ? b : NULL, &s);
    double scale = 0.0, err_wino = 0.0, err_unf = 0.0;
    for (long i = 0; i < ny; i++) {
        scale = fmax(scale, fabs(ref[i]));
        err_wino = fmax(err_wino, fabs(wino[i] - ref[i]));
        err_unf = fmax(err_unf, fabs(unfolded[i] - ref[i]));
    }
    printf("  max|diff|/max|ref|: winograd %.2e, unfolded %.2e\n", err_wino / scale, err_unf / scale);
    check_values(what, wino, ref, ny, 1e-5);
    free(in), free(w), free(b), free(col), free(wino), free(unfolded), free(ref);
}

/* The backward of a stride-1 unpadded convolution in double: din and dw
 * (no bias) for the output gradient dout. */
static void conv_backward_reference(double *din, double *dw, const float *dout, const float *in, const float *w,
                                    const pfl_conv_shape *s) {
    const int C = s->C, H = s->H, W = s->W, K = s->K, OC = s->OC;
    memset(din, 0, sizeof(double) * (size_t)s->B * C * H * W);
    memset(dw, 0, sizeof(double) * (size_t)OC * C * K * K);
    for (int n = 0; n < s->B; n++)
        for (int oc = 0; oc < OC; oc++)
            for (int oy = 0; oy < s->OH; oy++)
                for (int ox = 0; ox < s->OW; ox++) {
                    const double g = dout[(((long)n * OC + oc) * s->OH + oy) * s->OW + ox];
                    for (int ch = 0; ch < C; ch++)
                        for (int ky = 0; ky < K; ky++)
                            for (int kx = 0; kx < K; kx++) {
                                const long i = (((long)n * C + ch) * H + oy + ky) * W + ox + kx,
                                           k = ((long)(oc * C + ch) * K + ky) * K + kx;
                                din[i] += g * w[k];
                                dw[k] += g * in[i];
                            }
                }
}

/* The Winograd backward (the forward's adjoint, layers.c) against the
 * double reference and the unfolded backward, then fused with SGD against
 * the same step taken by hand. Measured max|diff| / max|ref| on the shapes
 * below: din 7e-7 to 1.3e-6, dw 6e-7 to 1.3e-6 (unfolded: 1e-7 to 3e-7);
 * the tolerance is the forward's 1e-5. */
static void test_conv_winograd_backward(int B, int C, int H, int W, int OC, uint64_t seed) {
    pfl_conv_shape s = {B, C, H, W, OC, 5, 1, 0, H - 4, W - 4};
    char what[128];
    snprintf(what, sizeof what, "winograd conv backward B=%d %dx%dx%d->%d k5", B, C, H, W, OC);
    printf("%s\n", what);
    pfl_rng r = test_rng(seed);
    const long nx = (long)B * C * H * W, nw = (long)OC * C * 25, ny = (long)B * OC * s.OH * s.OW;
    float *in = falloc(nx), *w = falloc(nw), *dout = falloc(ny), *out = falloc(ny);
    float *col = falloc(pfl_conv2d_col_floats(&s)), *din = falloc(nx), *dw = falloc(nw), *din_u = falloc(nx),
          *dw_u = falloc(nw), *db = falloc(OC), *wstep = falloc(nw), *bstep = falloc(OC), *din_sgd = falloc(nx);
    double *din_ref = malloc(sizeof(double) * (size_t)nx), *dw_ref = malloc(sizeof(double) * (size_t)nw);
    fill_uniform(in, nx, 0, 1, &r); /* post-ReLU, as the CNN's */
    fill_uniform(w, nw, -0.1f, 0.1f, &r);
    fill_uniform(dout, ny, -1e-3f, 1e-3f, &r);
    conv_backward_reference(din_ref, dw_ref, dout, in, w, &s);
    pfl_conv2d_forward(out, col, in, w, NULL, &s);
    pfl_conv2d_backward(din, dw, NULL, col, dout, in, w, &s);
    pfl_conv2d_backward_unfolded(din_u, dw_u, NULL, col, dout, in, w, &s);
    double scale_x = 0, scale_w = 0, ex = 0, ew = 0, ex_u = 0, ew_u = 0;
    for (long i = 0; i < nx; i++) {
        scale_x = fmax(scale_x, fabs(din_ref[i]));
        ex = fmax(ex, fabs(din[i] - din_ref[i])), ex_u = fmax(ex_u, fabs(din_u[i] - din_ref[i]));
    }
    for (long i = 0; i < nw; i++) {
        scale_w = fmax(scale_w, fabs(dw_ref[i]));
        ew = fmax(ew, fabs(dw[i] - dw_ref[i])), ew_u = fmax(ew_u, fabs(dw_u[i] - dw_ref[i]));
    }
    printf("  max|diff|/max|ref|: din winograd %.2e unfolded %.2e, dw winograd %.2e unfolded %.2e\n", ex / scale_x,
           ex_u / scale_x, ew / scale_w, ew_u / scale_w);
    check_values("winograd din", din, din_ref, nx, 1e-5);
    check_values("winograd dw", dw, dw_ref, nw, 1e-5);

    /* fused: din from the weights before the step, w -= lr dw, b -= lr db */
    const float lr = 0.5f;
    fill_uniform(bstep, OC, -1, 1, &r);
    memcpy(wstep, w, sizeof(float) * (size_t)nw);
    memset(db, 0, sizeof(float) * (size_t)OC);
    memset(dw, 0, sizeof(float) * (size_t)nw); /* the backward accumulates */
    pfl_conv2d_backward(NULL, dw, db, col, dout, in, w, &s);
    float *b_expect = falloc(OC);
    for (int i = 0; i < OC; i++) b_expect[i] = bstep[i] - lr * db[i];
    pfl_conv2d_forward(out, col, in, wstep, bstep, &s);
    pfl_conv2d_backward_sgd(din_sgd, wstep, bstep, col, dout, in, &s, lr);
    double dx = 0, dwd = 0, dbd = 0;
    for (long i = 0; i < nx; i++) dx = fmax(dx, fabs(din_sgd[i] - din[i]));
    for (long i = 0; i < nw; i++) dwd = fmax(dwd, fabs(wstep[i] - (w[i] - lr * dw[i])));
    for (int i = 0; i < OC; i++) dbd = fmax(dbd, fabs(bstep[i] - b_expect[i]));
    CHECK(dx == 0.0, "%s: fused SGD din differs from the separate backward's by %.3e", what, dx);
    CHECK(dwd <= 1e-7 * max_abs(w, nw), "%s: fused SGD weights off the separate step by %.3e", what, dwd);
    CHECK(dbd == 0.0, "%s: fused SGD bias differs by %.3e", what, dbd);
    free(in), free(w), free(dout), free(out), free(col), free(din), free(dw), free(din_u), free(dw_u), free(db);
    free(wstep), free(bstep), free(din_sgd), free(din_ref), free(dw_ref), free(b_expect);
}

/* ---- max pooling ---- */

typedef struct {
    int B, C, H, W, k, stride, OH, OW, pad;
    float *in, *out, *r;
    int *argmax;
} pool_ctx;

static double pool_loss(void *p) {
    pool_ctx *c = p;
    if (c->pad) pfl_maxpool2d_pad_forward(c->out, c->argmax, c->in, c->B, c->C, c->H, c->W, c->k, c->stride, c->pad);
    else pfl_maxpool2d_forward(c->out, c->argmax, c->in, c->B, c->C, c->H, c->W, c->k, c->stride);
    return dot_d(c->out, c->r, (long)c->B * c->C * c->OH * c->OW);
}

/* pad > 0 goes through the padded functions (ResNet's 3x3/2 pooling, padding 1). */
static void test_maxpool_pad(int B, int C, int H, int W, int k, int stride, int pad, uint64_t seed) {
    pool_ctx c = {B, C, H, W, k, stride, (H + 2 * pad - k) / stride + 1, (W + 2 * pad - k) / stride + 1, pad, NULL, NULL, NULL, NULL};
    printf("maxpool B=%d C=%d %dx%d k%d s%d p%d (out %dx%d)\n", B, C, H, W, k, stride, pad, c.OH, c.OW);
    pfl_rng r = test_rng(seed);
    const long nx = (long)B * C * H * W, ny = (long)B * C * c.OH * c.OW;
    c.in = falloc(nx), c.out = falloc(ny), c.r = falloc(ny);
    c.argmax = malloc(sizeof(int) * (size_t)ny);
    /* steps of 0.01 against eps 1e-3: no window's winner can change */
    fill_distinct(c.in, nx, 0.01, &r);
    fill_uniform(c.r, ny, -1, 1, &r);

    pool_loss(&c);
    int fwd_ok = 1;
    for (long plane = 0; plane < (long)B * C; plane++)
        for (int oy = 0; oy < c.OH; oy++)
            for (int ox = 0; ox < c.OW; ox++) {
                float best = -FLT_MAX;
                int best_i = -1;
                for (int ky = 0; ky < k; ky++)
                    for (int kx = 0; kx < k; kx++) {
                        const int iy = oy * stride - pad + ky, ix = ox * stride - pad + kx;
                        if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue; /* padding never wins */
                        int i = iy * W + ix;
                        if (c.in[plane * H * W + i] > best) best = c.in[plane * H * W + i], best_i = i;
                    }
                long o = (plane * c.OH + oy) * c.OW + ox;
                fwd_ok &= c.out[o] == best && c.argmax[o] == best_i;
            }
    CHECK(fwd_ok, "maxpool forward: maxima or argmax wrong");

    float *din = falloc(nx), *num = falloc(nx);
    fill_uniform(din, nx, 100, 200, &r);
    if (pad) pfl_maxpool2d_pad_backward(din, c.r, c.argmax, B, C, H, W, k, stride, pad);
    else pfl_maxpool2d_backward(din, c.r, c.argmax, B, C, H, W, k, stride);
    fd_all(num, c.in, nx, 1e-3f, pool_loss, &c);
    check_grad(k > stride ? "maxpool dx (overlapping windows)" : "maxpool dx", num, din, nx);
    free(din), free(num), free(c.in), free(c.out), free(c.r), free(c.argmax);
}

static void test_maxpool(int B, int C, int H, int W, int k, int stride, uint64_t seed) {
    test_maxpool_pad(B, C, H, W, k, stride, 0, seed);
}

/* ---- global average pooling ---- */

typedef struct {
    int B, C, HW;
    float *in, *out, *r;
} avg_ctx;

static double avg_loss(void *p) {
    avg_ctx *c = p;
    pfl_avgpool_global_forward(c->out, c->in, c->B, c->C, c->HW);
    return dot_d(c->out, c->r, (long)c->B * c->C);
}

static void test_avgpool(int B, int C, int H, int W, uint64_t seed) {
    printf("global average pooling B=%d C=%d %dx%d\n", B, C, H, W);
    pfl_rng r = test_rng(seed);
    avg_ctx c = {B, C, H * W, falloc((long)B * C * H * W), falloc((long)B * C), falloc((long)B * C)};
    const long nx = (long)B * C * H * W;
    fill_uniform(c.in, nx, -1, 1, &r);
    fill_uniform(c.r, (long)B * C, -1, 1, &r);
    avg_loss(&c);
    double *ref = malloc(sizeof(double) * (size_t)B * C);
    for (long plane = 0; plane < (long)B * C; plane++) {
        double acc = 0.0;
        for (int i = 0; i < H * W; i++) acc += c.in[plane * H * W + i];
        ref[plane] = acc / (H * W);
    }
    check_values("avgpool forward", c.out, ref, (long)B * C, 1e-6);
    float *din = falloc(nx), *num = falloc(nx);
    fill_uniform(din, nx, 100, 200, &r);
    pfl_avgpool_global_backward(din, c.r, B, C, H * W);
    fd_all(num, c.in, nx, 1e-2f, avg_loss, &c);
    check_grad("avgpool dx", num, din, nx);
    free(ref), free(din), free(num), free(c.in), free(c.out), free(c.r);
}

/* ---- BatchNorm2d ----
 *
 * Training mode normalizes with the batch's own statistics, so every output
 * depends on every input of its channel: the finite differences below go
 * through the mean and variance, which is what the backward's extra terms
 * are for. Evaluation mode is an affine map per channel. */

typedef struct {
    int B, C, HW;
    bool train;
    float *in, *out, *gamma, *beta, *rmean, *rvar, *mean, *var, *invstd, *r;
} bn_ctx;

static double bn_loss(void *p) {
    bn_ctx *c = p;
    if (c->train)
        pfl_batchnorm_forward_train(c->out, c->mean, c->var, c->invstd, c->in, c->gamma, c->beta, c->B, c->C, c->HW);
    else {
        pfl_batchnorm_forward_eval(c->out, c->invstd, c->in, c->gamma, c->beta, c->rmean, c->rvar, c->B, c->C, c->HW);
        memcpy(c->mean, c->rmean, sizeof(float) * (size_t)c->C);
    }
    return dot_d(c->out, c->r, (long)c->B * c->C * c->HW);
}

static void test_batchnorm(int B, int C, int H, int W, bool train, uint64_t seed) {
    const int HW = H * W;
    const long nx = (long)B * C * HW;
    printf("batchnorm %s B=%d C=%d %dx%d\n", train ? "training (batch statistics)" : "evaluation (running statistics)",
           B, C, H, W);
    pfl_rng r = test_rng(seed);
    bn_ctx c = {B, C, HW, train, falloc(nx), falloc(nx), falloc(C), falloc(C), falloc(C), falloc(C), falloc(C),
                falloc(C), falloc(C), falloc(nx)};
    /* channels with their own offset and spread, far from mean 0 / var 1 */
    for (int ch = 0; ch < C; ch++) {
        const double mu = 4.0 * pfl_rng_uniform(&r) - 2.0, sd = 0.2 + 2.0 * pfl_rng_uniform(&r);
        for (int n = 0; n < B; n++)
            for (int i = 0; i < HW; i++) c.in[((long)n * C + ch) * HW + i] = (float)(mu + sd * (2.0 * pfl_rng_uniform(&r) - 1.0));
    }
    fill_uniform(c.gamma, C, 0.5, 1.5, &r);
    fill_uniform(c.beta, C, -0.5, 0.5, &r);
    fill_uniform(c.rmean, C, -1, 1, &r);
    fill_uniform(c.rvar, C, 0.5, 2, &r);
    fill_uniform(c.r, nx, -1, 1, &r);

    /* forward against the definition in double */
    bn_loss(&c);
    double *ref = malloc(sizeof(double) * (size_t)nx);
    for (int ch = 0; ch < C; ch++) {
        double mu = 0.0, v = 0.0;
        const double N = (double)B * HW;
        for (int n = 0; n < B; n++)
            for (int i = 0; i < HW; i++) mu += c.in[((long)n * C + ch) * HW + i];
        mu /= N;
        for (int n = 0; n < B; n++)
            for (int i = 0; i < HW; i++) v += pow(c.in[((long)n * C + ch) * HW + i] - mu, 2);
        v /= N;
        if (!train) mu = c.rmean[ch], v = c.rvar[ch];
        for (int n = 0; n < B; n++)
            for (int i = 0; i < HW; i++) {
                const long k = ((long)n * C + ch) * HW + i;
                ref[k] = c.gamma[ch] * (c.in[k] - mu) / sqrt(v + 1e-5) + c.beta[ch];
            }
        if (train)
            CHECK(fabs(c.mean[ch] - mu) <= 1e-6 * (1 + fabs(mu)) && fabs(c.var[ch] - v) <= 1e-5 * v,
                  "batchnorm: channel %d batch mean %.7g var %.7g, expected %.7g %.7g", ch, (double)c.mean[ch],
                  (double)c.var[ch], mu, v);
    }
    check_values(train ? "batchnorm train forward" : "batchnorm eval forward", c.out, ref, nx, 1e-5);

    /* backward: din overwritten, dgamma and dbeta accumulated */
    float *din = falloc(nx), *dg = falloc(C), *db = falloc(C), *num = falloc(nx);
    fill_uniform(din, nx, 100, 200, &r);
    for (int ch = 0; ch < C; ch++) dg[ch] = 0.25f, db[ch] = -0.5f;
    bn_loss(&c);
    pfl_batchnorm_backward(din, dg, db, c.r, c.in, c.gamma, c.mean, c.invstd, B, C, HW, train);
    for (int ch = 0; ch < C; ch++) dg[ch] -= 0.25f, db[ch] += 0.5f;
    fd_all(num, c.in, nx, 1e-2f, bn_loss, &c);
    check_grad(train ? "batchnorm dx (through batch stats)" : "batchnorm dx", num, din, nx);
    fd_all(num, c.gamma, C, 1e-2f, bn_loss, &c);
    check_grad("batchnorm dgamma (accumulated)", num, dg, C);
    fd_all(num, c.beta, C, 1e-2f, bn_loss, &c);
    check_grad("batchnorm dbeta (accumulated)", num, db, C);

    if (train) {
        /* PyTorch's update: momentum 0.1, unbiased variance of the N = B*HW values */
        float rm[64], rv[64];
        memcpy(rm, c.rmean, sizeof(float) * (size_t)C), memcpy(rv, c.rvar, sizeof(float) * (size_t)C);
        bn_loss(&c);
        pfl_batchnorm_update_running(rm, rv, c.mean, c.var, C, (long)B * HW, 0.1f);
        double worst = 0.0;
        const double N = (double)B * HW;
        for (int ch = 0; ch < C; ch++) {
            const double em = 0.9 * c.rmean[ch] + 0.1 * c.mean[ch];
            const double ev = 0.9 * c.rvar[ch] + 0.1 * c.var[ch] * N / (N - 1);
            worst = fmax(worst, fmax(fabs(rm[ch] - em), fabs(rv[ch] - ev)));
        }
        printf("  running statistics update vs 0.9 old + 0.1 batch (unbiased var): max diff %.2e\n", worst);
        CHECK(worst <= 1e-6, "batchnorm running update off by %.3e", worst);
    }
    free(ref), free(din), free(dg), free(db), free(num);
    free(c.in), free(c.out), free(c.gamma), free(c.beta), free(c.rmean), free(c.rvar), free(c.mean), free(c.var),
        free(c.invstd), free(c.r);
}

/* ---- relu ---- */

typedef struct {
    long n;
    float *in, *out, *r;
} relu_ctx;

static double relu_loss(void *p) {
    relu_ctx *c = p;
    pfl_relu_forward(c->out, c->in, c->n);
    return dot_d(c->out, c->r, c->n);
}

static void test_relu(void) {
    printf("relu\n");
    pfl_rng r = test_rng(41);
    const long n = 500;
    relu_ctx c = {n, falloc(n), falloc(n), falloc(n)};
    fill_away_from_zero(c.in, n, 0.05, 1.0, &r); /* |x| >= 0.05 >> eps */
    fill_uniform(c.r, n, -1, 1, &r);
    pfl_relu_forward(c.out, c.in, n);
    int ok = 1;
    for (long i = 0; i < n; i++) ok &= c.out[i] == (c.in[i] > 0 ? c.in[i] : 0.0f);
    CHECK(ok, "relu forward is not max(x, 0)");
    float *din = falloc(n), *num = falloc(n);
    pfl_relu_backward(din, c.r, c.out, n);
    fd_all(num, c.in, n, 1e-3f, relu_loss, &c);
    check_grad("relu dx", num, din, n);
    /* in place, as a caller may do (c.out is recomputed: fd_all left it at a perturbed point) */
    pfl_relu_forward(c.out, c.in, n);
    memcpy(num, c.in, sizeof(float) * (size_t)n);
    pfl_relu_forward(num, num, n);
    CHECK(memcmp(num, c.out, sizeof(float) * (size_t)n) == 0, "relu forward in place differs");
    free(din), free(num), free(c.in), free(c.out), free(c.r);
}

/* ---- dropout ---- */

static void test_dropout(float p, uint64_t seed) {
    printf("dropout p=%.2f\n", (double)p);
    const long n = 200000;
    pfl_rng r = test_rng(seed);
    float *in = falloc(n), *out = falloc(n), *mask = falloc(n), *dout = falloc(n), *din = falloc(n);
    fill_away_from_zero(in, n, 0.1, 1.0, &r); /* no zeros, so out == 0 means dropped */
    fill_uniform(dout, n, -1, 1, &r);
    pfl_rng dr = test_rng(seed + 1);
    pfl_dropout_forward(out, mask, in, n, p, &dr);
    const float scale = 1.0f / (1.0f - p);
    long kept = 0, bad_mask = 0, bad_out = 0;
    for (long i = 0; i < n; i++) {
        if (mask[i] != 0.0f) kept++;
        if (mask[i] != 0.0f && mask[i] != scale) bad_mask++;
        if (out[i] != in[i] * mask[i]) bad_out++;
    }
    double frac = (double)kept / (double)n, sigma = sqrt((double)p * (1.0 - p) / (double)n);
    printf("  kept %.5f (expected %.5f, sigma %.1e)\n", frac, 1.0 - p, sigma);
    /* 6 sigma: a correct implementation fails about once in 5e8 seeds */
    CHECK(fabs(frac - (1.0 - p)) <= 6 * sigma + 1e-12, "dropout p=%g: kept fraction %.5f", (double)p, frac);
    CHECK(bad_mask == 0, "dropout p=%g: %ld mask values neither 0 nor 1/(1-p) = %g", (double)p, bad_mask,
          (double)scale);
    CHECK(bad_out == 0, "dropout p=%g: %ld outputs differ from in * mask", (double)p, bad_out);
    /* the expectation is preserved: mean(out / in) ~ 1 */
    double ratio = 0.0;
    for (long i = 0; i < n; i++) ratio += out[i] / in[i];
    ratio /= (double)n;
    CHECK(p == 0.0f || fabs(ratio - 1.0) <= 6 * sigma * scale, "dropout p=%g: E[out/in] = %.5f", (double)p, ratio);

    fill_uniform(din, n, 100, 200, &r);
    pfl_dropout_backward(din, dout, mask, n);
    long bad_back = 0;
    for (long i = 0; i < n; i++) bad_back += din[i] != dout[i] * mask[i];
    CHECK(bad_back == 0, "dropout backward: %ld values differ from mask * dout", bad_back);

    /* same stream, same mask */
    float *mask2 = falloc(n);
    pfl_rng dr2 = test_rng(seed + 1);
    pfl_dropout_forward(out, mask2, in, n, p, &dr2);
    CHECK(memcmp(mask, mask2, sizeof(float) * (size_t)n) == 0, "dropout is not reproducible from its stream");
    free(in), free(out), free(mask), free(mask2), free(dout), free(din);
}

/* ---- softmax cross-entropy ---- */

typedef struct {
    int B, classes;
    float *logits, *probs;
    const uint8_t *labels;
} xent_ctx;

static double xent_loss(void *p) {
    xent_ctx *c = p;
    return pfl_softmax_xent_forward(c->probs, c->logits, c->labels, c->B, c->classes);
}

static void test_softmax_xent(void) {
    printf("softmax cross-entropy\n");
    /* By hand: sample 0, logits (1,2,3), label 2: log(e+e^2+e^3) - 3 = log(1 + e^-1 + e^-2)
     * = 0.4076059644; sample 1, logits (0,0,0), label 1: log 3 = 1.0986122887. Mean 0.7531091266.
     * softmax(1,2,3) = (0.0900305732, 0.2447284711, 0.6652409558). */
    const float logits[6] = {1, 2, 3, 0, 0, 0};
    const uint8_t labels[2] = {2, 1};
    float probs[6], dl[6];
    float loss = pfl_softmax_xent_forward(probs, logits, labels, 2, 3);
    printf("  tiny case: loss %.9f, by hand 0.753109127\n", (double)loss);
    CHECK(fabs(loss - 0.7531091266) <= 1e-6, "loss %.9f, expected 0.7531091266", (double)loss);
    const double p0[3] = {0.0900305732, 0.2447284711, 0.6652409558};
    for (int c = 0; c < 3; c++) {
        CHECK(fabs(probs[c] - p0[c]) <= 1e-6, "probs[0][%d] = %.9f, expected %.9f", c, (double)probs[c], p0[c]);
        CHECK(fabs(probs[3 + c] - 1.0 / 3) <= 1e-6, "probs[1][%d] = %.9f, expected 1/3", c, (double)probs[3 + c]);
    }
    pfl_softmax_xent_backward(dl, probs, labels, 2, 3);
    const double expect[6] = {p0[0] / 2, p0[1] / 2, (p0[2] - 1) / 2, 1.0 / 6, 1.0 / 6 - 0.5, 1.0 / 6};
    for (int i = 0; i < 6; i++)
        CHECK(fabs(dl[i] - expect[i]) <= 1e-6, "dlogits[%d] = %.9f, expected %.9f", i, (double)dl[i], expect[i]);

    /* large logits: no overflow, and the loss of a confidently wrong sample is
     * the logit gap (log-sum-exp form) */
    const float big[4] = {1000, 0, -1000, 500};
    const uint8_t big_labels[2] = {1, 0};
    float big_probs[4];
    float big_loss = pfl_softmax_xent_forward(big_probs, big, big_labels, 2, 2);
    /* sample 0: 1000 + log(1 + e^-1000) - 0 = 1000; sample 1: 500 + log(1 + e^-1500) + 1000 = 1500 */
    CHECK(isfinite(big_loss) && fabs(big_loss - 1250.0) <= 1e-3, "large logits: loss %.6f, expected 1250",
          (double)big_loss);
    CHECK(big_probs[0] == 1.0f && big_probs[1] == 0.0f && big_probs[3] == 1.0f, "large logits: probs wrong");

    /* dlogits against finite differences on a random case */
    enum { B = 5, K = 7 };
    pfl_rng r = test_rng(51);
    float z[B * K], pr[B * K], d[B * K], num[B * K];
    uint8_t y[B];
    fill_uniform(z, B * K, -3, 3, &r);
    for (int n = 0; n < B; n++) y[n] = (uint8_t)pfl_rng_below(&r, K);
    xent_ctx c = {B, K, z, pr, y};
    pfl_softmax_xent_forward(pr, z, y, B, K);
    pfl_softmax_xent_backward(d, pr, y, B, K);
    fd_all(num, z, B * K, 1e-2f, xent_loss, &c);
    check_grad("softmax xent dlogits", num, d, B * K);
    /* each row of dlogits sums to 0 */
    double rowsum = 0.0;
    for (int n = 0; n < B; n++) {
        double s = 0.0;
        for (int k = 0; k < K; k++) s += d[n * K + k];
        rowsum = fmax(rowsum, fabs(s));
    }
    CHECK(rowsum <= 1e-6, "dlogits rows sum to %.3e, not 0", rowsum);
}

/* ---- whole models ---- */

typedef struct {
    pfl_workspace *ws;
    float *params, *x;
    uint8_t *y;
    int B, classes;
} model_ctx;

/* Mean cross-entropy in double. */
static double xent_d(const float *z, const uint8_t *y, int B, int K) {
    double total = 0.0;
    for (int n = 0; n < B; n++) {
        const float *zn = z + (long)n * K;
        double zmax = zn[0], sum = 0.0;
        for (int k = 1; k < K; k++) zmax = fmax(zmax, zn[k]);
        for (int k = 0; k < K; k++) sum += exp((double)zn[k] - zmax);
        total += log(sum) + zmax - zn[y[n]];
    }
    return total / B;
}

/* The mean cross-entropy of pfl_forward's logits, in double: the same
 * function as pfl_forward_loss without rounding the loss (~2.3) to float,
 * which would put +-1.2e-7 of noise into every difference. */
static double model_loss(void *p) {
    model_ctx *c = p;
    return xent_d(pfl_forward(c->ws, c->params, c->x, c->B, true, NULL), c->y, c->B, c->classes);
}

typedef struct {
    pfl_model m;
    float *params, *x;
    uint8_t *y;
} model_case;

/* Parameters (a whole model vector), inputs and labels for the model in
 * mc->m. BatchNorm weights and biases start at 1 and 0; they are spread
 * around those so that no gradient term vanishes by symmetry. */
static int model_case_init(model_case *mc, int B, uint64_t seed) {
    const pfl_model *m = &mc->m;
    const long in = pfl_model_input_size(m);
    pfl_rng r = test_rng(seed);
    mc->params = falloc((long)pfl_model_vector_len(m));
    pfl_model_init_params(m, mc->params, &r);
    for (int l = 0; l < m->num_layers; l++)
        if (m->layers[l].init == PFL_INIT_BATCHNORM)
            for (size_t i = 0; i < m->layers[l].length; i++) mc->params[m->layers[l].offset + i] += (float)(0.5 * pfl_rng_uniform(&r) - 0.25);
    mc->x = falloc((long)B * in);
    fill_uniform(mc->x, (long)B * in, -1, 1, &r);
    mc->y = malloc((size_t)B);
    for (int n = 0; n < B; n++) mc->y[n] = (uint8_t)pfl_rng_below(&r, (uint64_t)m->classes);
    return 0;
}

static int model_case_make(model_case *mc, const char *name, int C, int H, int W, int classes, int B, uint64_t seed) {
    if (pfl_model_build(&mc->m, name, C, H, W, classes)) {
        CHECK(0, "pfl_model_build(%s): %s", name, pfl_errmsg());
        return -1;
    }
    return model_case_init(mc, B, seed);
}

static void model_case_free(model_case *mc) { free(mc->params), free(mc->x), free(mc->y); }

/* A replay of the model's forward with the public layer functions, on the
 * test's own buffers (the workspace is opaque), as pfl_forward runs it. It
 * records the forward's discrete decisions, the "branch": for every ReLU
 * whether each input is positive, for every max pool which input wins each
 * window (signature layout: per op, bytes for a ReLU, ints for a pool). Given
 * `frozen`, it applies those recorded decisions instead of deciding afresh:
 * the network restricted to one linear region, a smooth function that equals
 * the network at the point recorded and has the same gradient there.
 * Returns the signature's length in bytes (sig may be NULL to size it) and
 * writes the logits when `logits` is not NULL. */
static long replay_forward(const pfl_model *m, const float *params, const float *x, int B, uint8_t *sig,
                           const uint8_t *frozen, float *logits) {
    long len = 0;
    float *outs[PFL_MAX_OPS] = {NULL};
    bool owned[PFL_MAX_OPS] = {false};
    for (int i = 0; i < m->num_ops; i++) {
        const pfl_op *op = &m->ops[i];
        const float *cur = op->src < 0 ? x : outs[op->src];
        const long n_out = (long)B * op->out_c * op->out_h * op->out_w;
        const pfl_layer *ly = op->layer >= 0 ? &m->layers[op->layer] : NULL;
        const float *w = ly ? params + m->tensors[ly->first_tensor].offset : NULL;
        const float *b = ly && ly->num_tensors > 1 ? params + m->tensors[ly->first_tensor + 1].offset : NULL;
        if (op->kind == PFL_OP_FLATTEN || op->kind == PFL_OP_DROPOUT) {
            /* dropout: identity outside training; the models here have none */
            outs[i] = (float *)cur;
            continue;
        }
        float *out = falloc(n_out);
        outs[i] = out, owned[i] = true;
        switch (op->kind) {
        case PFL_OP_CONV2D: {
            pfl_conv_shape s = {B, op->in_c, op->in_h, op->in_w, op->out_c, op->kernel, op->stride, op->pad,
                                op->out_h, op->out_w};
            float *col = falloc(pfl_conv2d_col_floats(&s));
            pfl_conv2d_forward(out, col, cur, w, b, &s);
            free(col);
            break;
        }
        case PFL_OP_LINEAR:
            pfl_linear_forward(out, cur, w, b, B, op->in_c * op->in_h * op->in_w, op->out_c);
            break;
        case PFL_OP_RELU:
            if (frozen)
                for (long j = 0; j < n_out; j++) out[j] = frozen[len + j] ? cur[j] : 0.0f;
            else
                pfl_relu_forward(out, cur, n_out);
            for (long j = 0; j < n_out; j++)
                if (sig) sig[len + j] = cur[j] > 0.0f;
            len += n_out;
            break;
        case PFL_OP_MAXPOOL2D: {
            int *arg = malloc(sizeof(int) * (size_t)n_out);
            if (frozen) {
                const long in_plane = (long)op->in_h * op->in_w, out_plane = (long)op->out_h * op->out_w;
                memcpy(arg, frozen + len, sizeof(int) * (size_t)n_out);
                for (long o = 0; o < n_out; o++) out[o] = cur[o / out_plane * in_plane + arg[o]];
            } else {
                pfl_maxpool2d_pad_forward(out, arg, cur, B, op->in_c, op->in_h, op->in_w, op->kernel, op->stride,
                                          op->pad);
            }
            if (sig) memcpy(sig + len, arg, sizeof(int) * (size_t)n_out);
            len += (long)sizeof(int) * n_out;
            free(arg);
            break;
        }
        case PFL_OP_BATCHNORM2D: { /* training mode, as model_loss runs pfl_forward */
            float *stats = falloc(3L * op->out_c);
            pfl_batchnorm_forward_train(out, stats, stats + op->out_c, stats + 2 * op->out_c, cur, w, b, B, op->out_c,
                                        op->out_h * op->out_w);
            free(stats);
            break;
        }
        case PFL_OP_ADD:
            for (long j = 0; j < n_out; j++) out[j] = cur[j] + outs[op->src2][j];
            break;
        case PFL_OP_AVGPOOL: pfl_avgpool_global_forward(out, cur, B, op->in_c, op->in_h * op->in_w); break;
        case PFL_OP_DROPOUT:
        case PFL_OP_FLATTEN: break;
        case PFL_OP_EMBED_MEAN: /* fasttext; tests/test_text.c checks it */
            pfl_embed_mean_forward(out, cur, w, B, op->in_w, op->vocab, op->out_c, op->padding_idx);
            break;
        }
    }
    if (logits) memcpy(logits, outs[m->num_ops - 1], sizeof(float) * (size_t)B * (size_t)m->classes);
    for (int i = 0; i < m->num_ops; i++)
        if (owned[i]) free(outs[i]);
    return len;
}

typedef struct {
    const pfl_model *m;
    float *params, *x, *logits;
    uint8_t *y;
    const uint8_t *frozen;
    int B;
} branch_ctx;

static double branch_loss(void *p) {
    branch_ctx *c = p;
    replay_forward(c->m, c->params, c->x, c->B, NULL, c->frozen, c->logits);
    return xent_d(c->logits, c->y, c->B, c->m->classes);
}

/* pfl_backward against central differences, for the cnn on 1x28x28 (B=3)
 * and 3x32x32 and for dnn and mlp: every entry of a small tensor, else its
 * largest-gradient entry plus `per_tensor` random ones.
 *
 * A whole network is harder to difference than one layer:
 *  - Noise. pfl_forward_loss returns the loss (~2.3) as a float, whose
 *    rounding alone (+-1.2e-7) divided by 2 eps swamps small gradients, so
 *    the loss is recomputed in double from pfl_forward's logits (the same
 *    function, not rounded). What remains is the float32 rounding inside the
 *    forward, ~1e-8 in the loss, i.e. ~1e-8 / (2 eps) in a derivative.
 *  - Kinks. Moving one conv1 weight or bias moves thousands of ReLU inputs
 *    and pooling contests downstream, so one of them is almost always within
 *    eps; the difference quotient is then off by about that unit's gradient,
 *    whatever eps is (measured: 2-3% of the tensor's largest gradient for
 *    conv biases at every eps from 1e-3 to 1e-4, while below 1e-4 the noise
 *    takes over). Such a coordinate tests the finite difference, not the
 *    backward.
 * So each coordinate gets two checks:
 *  1. direct: central difference of pfl_forward's loss, eps = 3e-4, when the
 *     +eps and -eps forwards take the same branch (same ReLU signs, same
 *     pooling winners); coordinates at kinks are counted and left out. This
 *     is the plain check; it covers the fc layers and conv2 fully,
 *     but for conv1 at 1x28x28, B=3, every sampled coordinate is at a kink
 *     (on 3x32x32, B=2, about half survive).
 *  2. branch: central difference, eps = 1e-2, of the network frozen on the
 *     branch of the unperturbed point (see replay_forward), built from the
 *     same pfl layer functions and checked to give pfl_forward's logits.
 *     Its gradient at that point IS the network's gradient, it has no kinks,
 *     and at eps = 1e-2 its noise is ~1e-6 absolute, so every coordinate is
 *     checked.
 * Both use FD_TOL relative to the largest |gradient| among the coordinates
 * checked (the direct check's noise, ~2e-5, is 1e-3 of that or less). */
static void model_fd_check(model_case *mc_in, const char *name, int B, int per_tensor, uint64_t seed);

static void test_model_fd(const char *name, int C, int H, int W, int classes, int B, int per_tensor, uint64_t seed) {
    printf("model %s %dx%dx%d, %d classes, B=%d: backward vs finite differences of the loss\n", name, C, H, W,
           classes, B);
    model_case mc;
    if (model_case_make(&mc, name, C, H, W, classes, B, seed)) return;
    model_fd_check(&mc, name, B, per_tensor, seed);
}

/* The checks of test_model_fd on a model case (freed here). */
static void model_fd_check(model_case *mc_in, const char *name, int B, int per_tensor, uint64_t seed) {
    model_case mc = *mc_in;
    const int classes = mc.m.classes;
    pfl_workspace *ws = pfl_workspace_create(&mc.m, B);
    CHECK(ws != NULL, "workspace: %s", pfl_errmsg());
    if (!ws) {
        model_case_free(&mc);
        return;
    }
    float *grads = falloc((long)mc.m.num_params);
    model_ctx c = {ws, mc.params, mc.x, mc.y, B, classes};
    float loss = pfl_forward_loss(ws, mc.params, mc.x, mc.y, B, true, NULL);
    pfl_backward(ws, mc.params, mc.y, grads);
    CHECK(fabs(loss - model_loss(&c)) <= 1e-6 * loss, "%s: pfl_forward_loss %.9g, cross-entropy of its logits %.9g",
          name, (double)loss, model_loss(&c));

    /* the replay is pfl_forward, and so is the frozen replay at the recorded point */
    const long sig_len = replay_forward(&mc.m, mc.params, mc.x, B, NULL, NULL, NULL);
    uint8_t *center = malloc((size_t)sig_len), *sig_hi = malloc((size_t)sig_len), *sig_lo = malloc((size_t)sig_len);
    float *replay = falloc((long)B * classes), *frozen = falloc((long)B * classes);
    replay_forward(&mc.m, mc.params, mc.x, B, center, NULL, replay);
    replay_forward(&mc.m, mc.params, mc.x, B, NULL, center, frozen);
    const float *z = pfl_forward(ws, mc.params, mc.x, B, true, NULL); /* training mode, as model_loss */
    double dz = 0.0, dzf = 0.0;
    for (long i = 0; i < (long)B * classes; i++) dz = fmax(dz, fabs(z[i] - replay[i]));
    for (long i = 0; i < (long)B * classes; i++) dzf = fmax(dzf, fabs(z[i] - frozen[i]));
    CHECK(dz <= 1e-6 && dzf <= 1e-6, "%s: the test's replay differs from pfl_forward by %.3e (frozen: %.3e)", name,
          dz, dzf);
    branch_ctx bc = {&mc.m, mc.params, mc.x, frozen, mc.y, center, B};

    const float eps_direct = FD_EPS_MODEL, eps_branch = 1e-2f;
    pfl_rng r = test_rng(seed + 100);
    for (int t = 0; t < mc.m.num_tensors; t++) {
        const pfl_tensor *tt = &mc.m.tensors[t];
        const float *g = grads + tt->offset;
        float *p = mc.params + tt->offset;
        long big = 0;
        for (long i = 1; i < (long)tt->length; i++)
            if (fabs(g[i]) > fabs(g[big])) big = i;
        const int all = per_tensor + 1 >= (int)tt->length;
        const int k = all ? (int)tt->length : per_tensor + 1;
        float *num = falloc(k), *ana = falloc(k), *bnum = falloc(k), *bana = falloc(k);
        int direct = 0, kinks = 0;
        for (int j = 0; j < k; j++) {
            long i = all ? j : j == 0 ? big : (long)pfl_rng_below(&r, tt->length);
            bnum[j] = (float)fd_one(p, i, eps_branch, branch_loss, &bc);
            bana[j] = g[i];
            const float save = p[i];
            p[i] = save + eps_direct;
            replay_forward(&mc.m, mc.params, mc.x, B, sig_hi, NULL, NULL);
            p[i] = save - eps_direct;
            replay_forward(&mc.m, mc.params, mc.x, B, sig_lo, NULL, NULL);
            p[i] = save;
            if (memcmp(sig_hi, sig_lo, (size_t)sig_len) != 0) {
                kinks++;
                continue;
            }
            num[direct] = (float)fd_one(p, i, eps_direct, model_loss, &c);
            ana[direct++] = g[i];
        }
        char what[96];
        snprintf(what, sizeof what, "%s %s branch (%d of %zu)", name, tt->name, k, tt->length);
        check_grad(what, bnum, bana, k);
        snprintf(what, sizeof what, "%s %s direct (%d at kinks)", name, tt->name, kinks);
        if (direct)
            check_grad(what, num, ana, direct);
        else
            printf("  %-34s all %d coordinates at kinks, branch check only\n", what, k);
        free(num), free(ana), free(bnum), free(bana);
    }
    free(center), free(sig_hi), free(sig_lo), free(replay), free(frozen), free(grads);
    pfl_workspace_free(ws);
    model_case_free(&mc);
}

static double max_rel_diff(const float *a, const float *b, long n) {
    double scale = max_abs(b, n), worst = 0.0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= worst)) worst = d;
    }
    return scale > 0 ? worst / scale : worst;
}

/* A batch smaller than the workspace's max_batch, after a full-size batch has
 * run through it, gives what a workspace sized exactly gives; and pfl_backward
 * accumulates into grads. */
static void test_model_batches(const char *name, int C, int H, int W, int classes, uint64_t seed) {
    const int B = 3, MAXB = 7;
    printf("model %s: batch %d in a workspace for %d, and accumulation\n", name, B, MAXB);
    model_case mc;
    if (model_case_make(&mc, name, C, H, W, classes, MAXB, seed)) return;
    const long P = (long)mc.m.num_params, L = (long)B * classes;
    pfl_workspace *exact = pfl_workspace_create(&mc.m, B), *big = pfl_workspace_create(&mc.m, MAXB);
    CHECK(exact && big, "workspace: %s", pfl_errmsg());
    if (!exact || !big) goto out;
    CHECK(pfl_workspace_max_batch(big) == MAXB, "max_batch %d", pfl_workspace_max_batch(big));
    float *g_exact = falloc(P), *g_big = falloc(P), *g_full = falloc(P), *logits_exact = falloc(L);

    /* fill every buffer of the big workspace with a full batch first */
    pfl_forward_loss(big, mc.params, mc.x, mc.y, MAXB, true, NULL);
    pfl_backward(big, mc.params, mc.y, g_full);

    float loss_exact = pfl_forward_loss(exact, mc.params, mc.x, mc.y, B, true, NULL);
    memcpy(logits_exact, pfl_forward(exact, mc.params, mc.x, B, false, NULL), sizeof(float) * (size_t)L);
    pfl_forward_loss(exact, mc.params, mc.x, mc.y, B, true, NULL);
    pfl_backward(exact, mc.params, mc.y, g_exact);

    /* the small batch read from the workspace's own input buffer, as training does */
    float *xin = pfl_workspace_input(big);
    memcpy(xin, mc.x, sizeof(float) * (size_t)B * (size_t)pfl_model_input_size(&mc.m));
    const float *logits_big = pfl_forward(big, mc.params, xin, B, false, NULL);
    double dlog = max_rel_diff(logits_big, logits_exact, L);
    float loss_big = pfl_forward_loss(big, mc.params, xin, mc.y, B, true, NULL);
    pfl_backward(big, mc.params, mc.y, g_big);
    double dgrad = max_rel_diff(g_big, g_exact, P);
    printf("  B=%d in max_batch %d vs exact: logits %.2e, loss %.9g vs %.9g, grads %.2e (relative to max)\n", B,
           MAXB, dlog, (double)loss_big, (double)loss_exact, dgrad);
    /* the same arithmetic on the same sizes: only reordering could differ */
    CHECK(dlog <= 1e-6, "%s: logits of a small batch depend on max_batch (%.3e)", name, dlog);
    CHECK(fabs(loss_big - loss_exact) <= 1e-6 * fabs(loss_exact), "%s: loss %.9g vs %.9g", name, (double)loss_big,
          (double)loss_exact);
    CHECK(dgrad <= 1e-6, "%s: gradients of a small batch depend on max_batch (%.3e)", name, dgrad);
    double dfull = max_rel_diff(g_big, g_full, P);
    CHECK(dfull > 1e-3, "%s: the small batch's gradient equals the full batch's; the batch size is ignored", name);

    /* accumulation: a second forward+backward into the same grads doubles them */
    float *g2 = falloc(P);
    memcpy(g2, g_exact, sizeof(float) * (size_t)P);
    pfl_forward_loss(exact, mc.params, mc.x, mc.y, B, true, NULL);
    pfl_backward(exact, mc.params, mc.y, g2);
    for (long i = 0; i < P; i++) g_big[i] = 2.0f * g_exact[i];
    double dacc = max_rel_diff(g2, g_big, P);
    printf("  backward twice vs 2 x once: %.2e\n", dacc);
    CHECK(dacc <= 1e-6, "%s: pfl_backward does not accumulate (twice vs 2x once: %.3e)", name, dacc);

    /* count_correct agrees with an argmax over the logits */
    pfl_forward(exact, mc.params, mc.x, B, false, NULL);
    int correct = 0;
    for (int n = 0; n < B; n++) {
        int best = 0;
        for (int k = 1; k < classes; k++)
            if (logits_exact[n * classes + k] > logits_exact[n * classes + best]) best = k;
        correct += best == mc.y[n];
    }
    CHECK(pfl_count_correct(exact, mc.y, B) == correct, "%s: count_correct %d, expected %d", name,
          pfl_count_correct(exact, mc.y, B), correct);
    free(g2), free(g_exact), free(g_big), free(g_full), free(logits_exact);
out:
    pfl_workspace_free(exact);
    pfl_workspace_free(big);
    model_case_free(&mc);
}

/* ---- dropout inside a model (tsdp-cnn) ---- */

/* Without an rng (or with train false) dropout is the identity, forward and
 * backward; with one, the masks change the logits, come again from the same
 * stream state, and the backward is the forward's: the directional derivative
 * of the loss along the gradient, at fixed masks, matches a finite difference. */
static void test_model_dropout(void) {
    const int B = 2, C = 3, H = 32, W = 32, K = 10;
    printf("model tsdp-cnn: dropout in training, identity outside it\n");
    model_case mc;
    if (model_case_make(&mc, "tsdp-cnn", C, H, W, K, B, 81)) return;
    const long P = (long)mc.m.num_params, L = (long)B * K;
    pfl_workspace *ws = pfl_workspace_create(&mc.m, B);
    CHECK(ws != NULL, "workspace: %s", pfl_errmsg());
    if (!ws) goto out;
    float *eval = falloc(L), *tr1 = falloc(L), *tr2 = falloc(L), *g_eval = falloc(P), *g_null = falloc(P);
    memcpy(eval, pfl_forward(ws, mc.params, mc.x, B, false, NULL), sizeof(float) * (size_t)L);
    pfl_rng r1 = test_rng(5), r2 = test_rng(5);
    memcpy(tr1, pfl_forward(ws, mc.params, mc.x, B, true, &r1), sizeof(float) * (size_t)L);
    memcpy(tr2, pfl_forward(ws, mc.params, mc.x, B, true, &r2), sizeof(float) * (size_t)L);
    double d_tr = max_rel_diff(tr1, eval, L), d_rep = max_rel_diff(tr1, tr2, L);
    const float *nul = pfl_forward(ws, mc.params, mc.x, B, true, NULL);
    double d_null = max_rel_diff(nul, eval, L);
    /* backward after a train-mode forward (stale masks in the workspace), then eval forward + backward */
    pfl_rng r3 = test_rng(6);
    pfl_forward_loss(ws, mc.params, mc.x, mc.y, B, true, &r3);
    float *g_tr = falloc(P);
    pfl_backward(ws, mc.params, mc.y, g_tr);
    pfl_forward_loss(ws, mc.params, mc.x, mc.y, B, false, NULL);
    pfl_backward(ws, mc.params, mc.y, g_eval);
    pfl_forward_loss(ws, mc.params, mc.x, mc.y, B, true, NULL);
    pfl_backward(ws, mc.params, mc.y, g_null);
    double d_g = max_rel_diff(g_null, g_eval, P), d_gtr = max_rel_diff(g_tr, g_eval, P);
    /* FD along the train-mode gradient with the same masks (same rng state each time) */
    double gg = 0.0;
    for (long i = 0; i < P; i++) gg += (double)g_tr[i] * g_tr[i];
    const double eps = 1e-3 / sqrt(gg);
    float *pp = falloc(P), *pm = falloc(P);
    for (long i = 0; i < P; i++) pp[i] = mc.params[i] + (float)(eps * g_tr[i]), pm[i] = mc.params[i] - (float)(eps * g_tr[i]);
    pfl_rng rp = test_rng(6), rm = test_rng(6);
    double lp = xent_d(pfl_forward(ws, pp, mc.x, B, true, &rp), mc.y, B, K);
    double lm = xent_d(pfl_forward(ws, pm, mc.x, B, true, &rm), mc.y, B, K);
    double fd = (lp - lm) / (2 * eps), rel = fabs(fd - gg) / gg;
    printf("  train vs eval logits %.2e, same stream twice %.2e, no rng vs eval %.2e; grads: no rng vs eval "
           "%.2e, train vs eval %.2e; directional FD %.6g vs |g|^2 %.6g (rel %.2e)\n",
           d_tr, d_rep, d_null, d_g, d_gtr, fd, gg, rel);
    CHECK(d_tr > 1e-3, "tsdp-cnn: training-mode dropout left the logits unchanged (%.3e)", d_tr);
    CHECK(d_rep == 0.0, "tsdp-cnn: same rng state, different logits (%.3e)", d_rep);
    CHECK(d_null == 0.0 && d_g == 0.0, "tsdp-cnn: no rng is not eval mode (logits %.3e, grads %.3e)", d_null, d_g);
    CHECK(d_gtr > 1e-3, "tsdp-cnn: train-mode gradient equals eval's (%.3e)", d_gtr);
    CHECK(rel <= 1e-2, "tsdp-cnn: train-mode backward is not the masked forward's gradient (FD rel %.3e)", rel);
    free(eval), free(tr1), free(tr2), free(g_eval), free(g_null), free(g_tr), free(pp), free(pm);
out:
    pfl_workspace_free(ws);
    model_case_free(&mc);
}

/* ---- architecture tables ---- */

static void test_model_tables(const char *name, int C, int H, int W, int classes, size_t expect_params,
                              const char *const *names, int num_names) {
    pfl_model m;
    int ok = pfl_model_build(&m, name, C, H, W, classes) == 0;
    CHECK(ok, "pfl_model_build(%s, %dx%dx%d): %s", name, C, H, W, pfl_errmsg());
    if (!ok) return;
    printf("model %s %dx%dx%d/%d: %zu params, %d tensors, %d layers\n", name, C, H, W, classes, m.num_params,
           m.num_tensors, m.num_layers);
    CHECK(m.num_params == expect_params, "%s %dx%dx%d: %zu params, PyTorch has %zu", name, C, H, W, m.num_params,
          expect_params);
    CHECK(m.num_tensors == num_names, "%s: %d tensors, expected %d", name, m.num_tensors, num_names);
    size_t off = 0;
    for (int t = 0; t < m.num_tensors && t < num_names; t++) {
        const pfl_tensor *tt = &m.tensors[t];
        CHECK(strcmp(tt->name, names[t]) == 0, "%s tensor %d is '%s', PyTorch's state_dict has '%s'", name, t,
              tt->name, names[t]);
        size_t len = 1;
        for (int d = 0; d < tt->ndim; d++) len *= (size_t)tt->shape[d];
        CHECK(tt->offset == off && tt->length == len, "%s: tensor %s at %zu+%zu, expected %zu+%zu", name, tt->name,
              tt->offset, tt->length, off, len);
        off += tt->length;
    }
    CHECK(off == m.num_params, "%s: tensors cover %zu of %zu params", name, off, m.num_params);
    /* layers: contiguous spans of whole tensors, input to output, covering the vector */
    size_t loff = 0;
    int tnext = 0;
    for (int l = 0; l < m.num_layers; l++) {
        const pfl_layer *ly = &m.layers[l];
        const pfl_tensor *first = &m.tensors[ly->first_tensor];
        const pfl_tensor *last = &m.tensors[ly->first_tensor + ly->num_tensors - 1];
        CHECK(ly->first_tensor == tnext && ly->offset == loff && first->offset == ly->offset &&
                  last->offset + last->length == ly->offset + ly->length,
              "%s: layer %s is not a contiguous span of its tensors", name, ly->name);
        tnext += ly->num_tensors;
        loff += ly->length;
    }
    CHECK(loff == m.num_params && tnext == m.num_tensors, "%s: layers do not cover the vector", name);

    /* PyTorch's default init: everything within +-1/sqrt(fan_in) of its layer, and spread over it */
    float *p = falloc((long)m.num_params);
    pfl_rng r = test_rng(7);
    pfl_model_init_params(&m, p, &r);
    for (int l = 0; l < m.num_layers; l++) {
        const pfl_layer *ly = &m.layers[l];
        const pfl_tensor *w = &m.tensors[ly->first_tensor];
        double bound = 1.0 / sqrt((double)(w->length / (size_t)w->shape[0]));
        double mx = max_abs(p + ly->offset, (long)ly->length);
        CHECK(mx <= bound && mx >= 0.9 * bound, "%s layer %s: init max |p| %.4g, bound %.4g", name, ly->name, mx,
              bound);
    }
    free(p);
}

static void test_models(void) {
    const char *const cnn[] = {"conv1.0.weight", "conv1.0.bias", "conv2.0.weight", "conv2.0.bias",
                               "fc1.0.weight",   "fc1.0.bias",   "fc.weight",      "fc.bias"};
    const char *const dnn[] = {"fc1.weight", "fc1.bias", "fc.weight", "fc.bias"};
    test_model_tables("cnn", 1, 28, 28, 10, 582026, cnn, 8);
    test_model_tables("cnn", 3, 32, 32, 10, 878538, cnn, 8);
    test_model_tables("dnn", 1, 28, 28, 10, 79510, dnn, 4);
    test_model_tables("mlp", 1, 28, 28, 10, 159010, dnn, 4);
    /* counts printed by scripts/make_fixtures.py's torch modules (Conv3CNN, TSDPCNN) */
    const char *const conv3[] = {"conv1.0.weight", "conv1.0.bias", "conv2.0.weight", "conv2.0.bias",
                                 "conv3.0.weight", "conv3.0.bias", "fc1.0.weight",   "fc1.0.bias",
                                 "fc.weight",      "fc.bias"};
    test_model_tables("mnist-cnn", 1, 28, 28, 10, 93322, conv3, 10);
    test_model_tables("cifar-cnn", 3, 32, 32, 10, 122570, conv3, 10);
    test_model_tables("cifar-cnn", 1, 28, 28, 10, 93322, conv3, 10); /* the same net as mnist-cnn */
    test_model_tables("tsdp-cnn", 3, 32, 32, 10, 1204682, cnn, 8);
    test_model_tables("tsdp-cnn", 1, 28, 28, 10, 843658, cnn, 8);
    test_model_dropout();
    pfl_model m;
    CHECK(pfl_model_build(&m, "resnet", 1, 28, 28, 10) < 0, "unknown model accepted");
    CHECK(pfl_model_build(&m, "cnn", 1, 8, 8, 10) < 0, "cnn on 8x8 (too small for two 5x5 convs) accepted");
    CHECK(pfl_model_build(&m, "dnn", 1, 28, 28, 1) < 0, "one class accepted");
    CHECK(pfl_model_build(&m, "mnist-cnn", 1, 12, 12, 10) < 0, "mnist-cnn on 12x12 (no room for conv3) accepted");
    CHECK(pfl_model_known("mnist-cnn") && pfl_model_known("cifar-cnn") && pfl_model_known("tsdp-cnn") &&
              !pfl_model_known("tsdp"),
          "pfl_model_known disagrees with pfl_model_build");
}

/* ---- a small residual network (the builder API, BatchNorm, residual blocks, average pooling) ---- */

/* 3x8x8 inputs: a Conv-BN-ReLU stem (no bias), an identity basic block, a
 * block that halves the size and widens (1x1 downsample shortcut), global
 * average pooling, Linear: every new op, both kinds of shortcut, an output
 * read by two ops. */
static int build_mini_resnet(pfl_model *m) {
    if (pfl_model_begin(m, "mini-resnet", 3, 8, 8, 5) || pfl_model_conv(m, "conv1", 4, 3, 1, 1, false) ||
        pfl_model_batchnorm(m, "bn1") || pfl_model_relu(m) || pfl_model_basic_block(m, "layer1.0", 4, 1) ||
        pfl_model_basic_block(m, "layer2.0", 6, 2) || pfl_model_avgpool(m) || pfl_model_linear(m, "fc", 5) ||
        pfl_model_finish(m)) {
        CHECK(0, "building the small residual network: %s", pfl_errmsg());
        return -1;
    }
    return 0;
}

static void test_residual_tables(void) {
    pfl_model m;
    if (build_mini_resnet(&m)) return;
    static const char *const names[] = {
        "conv1.weight",          "bn1.weight",           "bn1.bias",           "layer1.0.conv1.weight",
        "layer1.0.bn1.weight",   "layer1.0.bn1.bias",    "layer1.0.conv2.weight", "layer1.0.bn2.weight",
        "layer1.0.bn2.bias",     "layer2.0.conv1.weight", "layer2.0.bn1.weight", "layer2.0.bn1.bias",
        "layer2.0.conv2.weight", "layer2.0.bn2.weight",  "layer2.0.bn2.bias",  "layer2.0.downsample.0.weight",
        "layer2.0.downsample.1.weight", "layer2.0.downsample.1.bias", "fc.weight", "fc.bias"};
    const int T = (int)(sizeof names / sizeof names[0]);
    printf("small residual network: %zu parameters, %zu state, %d ops, %d layers\n", m.num_params, m.num_state,
           m.num_ops, m.num_layers);
    CHECK(m.num_tensors == T, "%d tensors, expected %d", m.num_tensors, T);
    for (int t = 0; t < T && t < m.num_tensors; t++)
        CHECK(strcmp(m.tensors[t].name, names[t]) == 0, "tensor %d is %s, expected %s", t, m.tensors[t].name, names[t]);
    /* BN layers: 2 tensors and a running-statistics span after the parameters, in layer order */
    size_t state_next = m.num_params;
    int bn_layers = 0;
    for (int l = 0; l < m.num_layers; l++) {
        const pfl_layer *ly = &m.layers[l];
        if (ly->init != PFL_INIT_BATCHNORM) {
            CHECK(ly->state_length == 0, "layer %s has state", ly->name);
            continue;
        }
        bn_layers++;
        const int C = m.tensors[ly->first_tensor].shape[0];
        CHECK(ly->num_tensors == 2 && ly->state_offset == state_next && ly->state_length == 2 * (size_t)C &&
                  ly->num_state_tensors == 2,
              "layer %s: state span %zu+%zu, expected %zu+%d", ly->name, ly->state_offset, ly->state_length,
              state_next, 2 * C);
        CHECK(strstr(m.state_tensors[ly->first_state].name, "running_mean") &&
                  strstr(m.state_tensors[ly->first_state + 1].name, "running_var"),
              "layer %s: state tensors %s, %s", ly->name, m.state_tensors[ly->first_state].name,
              m.state_tensors[ly->first_state + 1].name);
        state_next += ly->state_length;
    }
    CHECK(bn_layers == 6 && state_next == pfl_model_vector_len(&m), "%d BatchNorm layers, state ends at %zu of %zu",
          bn_layers, state_next, pfl_model_vector_len(&m));
    /* init: BatchNorm 1 and 0, running mean 0 and variance 1 */
    float *v = falloc((long)pfl_model_vector_len(&m));
    pfl_rng r = test_rng(3);
    pfl_model_init_params(&m, v, &r);
    int init_ok = 1;
    for (int l = 0; l < m.num_layers; l++) {
        const pfl_layer *ly = &m.layers[l];
        if (ly->init != PFL_INIT_BATCHNORM) continue;
        const size_t C = ly->length / 2;
        for (size_t i = 0; i < ly->length; i++) init_ok &= v[ly->offset + i] == (i < C ? 1.0f : 0.0f);
        for (size_t i = 0; i < ly->state_length; i++) init_ok &= v[ly->state_offset + i] == (i < C ? 0.0f : 1.0f);
    }
    CHECK(init_ok, "BatchNorm init is not weight 1, bias 0, running mean 0, running variance 1");
    free(v);
    CHECK(pfl_model_basic_block(&m, "x", 4, 1) < 0 || m.num_ops > 0, "unreachable");
    pfl_model bad;
    CHECK(pfl_model_begin(&bad, "bad", 3, 8, 8, 5) == 0 && pfl_model_basic_block(&bad, "layer1.0", 3, 1) < 0,
          "a residual block on the network input with an identity shortcut was accepted");
    CHECK(pfl_model_begin(&bad, "bad", 3, 8, 8, 5) == 0 && pfl_model_conv(&bad, "c", 4, 3, 1, 1, false) == 0 &&
              pfl_model_finish(&bad) < 0,
          "a network whose output is not `classes` values was accepted");
}

/* Backward against finite differences (BatchNorm in training mode: the
 * batch statistics move with every parameter), a batch in a larger
 * workspace, accumulation, pfl_backward_top, and what training mode does
 * and does not change. */
static void test_residual_model(void) {
    const int B = 3;
    printf("small residual network 3x8x8, B=%d: backward vs finite differences (BatchNorm in training mode)\n", B);
    model_case mc;
    if (build_mini_resnet(&mc.m) || model_case_init(&mc, 7, 91)) return;
    model_case fd = mc;
    fd.params = falloc((long)pfl_model_vector_len(&mc.m));
    memcpy(fd.params, mc.params, sizeof(float) * pfl_model_vector_len(&mc.m));
    fd.x = falloc((long)B * pfl_model_input_size(&mc.m));
    memcpy(fd.x, mc.x, sizeof(float) * (size_t)B * (size_t)pfl_model_input_size(&mc.m));
    fd.y = malloc((size_t)B);
    memcpy(fd.y, mc.y, (size_t)B);
    model_fd_check(&fd, "mini-resnet", B, 40, 92); /* frees fd */

    const pfl_model *m = &mc.m;
    const long P = (long)m->num_params, V = (long)pfl_model_vector_len(m), L = (long)B * m->classes;
    pfl_workspace *exact = pfl_workspace_create(m, B), *big = pfl_workspace_create(m, 7);
    CHECK(exact && big, "workspace: %s", pfl_errmsg());
    if (!exact || !big) goto out;
    float *g1 = falloc(P), *g2 = falloc(P), *g_top = falloc(P), *z1 = falloc(L), *saved = falloc(V);

    /* a smaller batch in a bigger workspace, after a full one */
    pfl_forward_loss(big, mc.params, mc.x, mc.y, 7, true, NULL);
    pfl_backward(big, mc.params, mc.y, g2);
    memset(g2, 0, sizeof(float) * (size_t)P);
    memcpy(z1, pfl_forward(exact, mc.params, mc.x, B, true, NULL), sizeof(float) * (size_t)L);
    pfl_forward_loss(exact, mc.params, mc.x, mc.y, B, true, NULL);
    pfl_backward(exact, mc.params, mc.y, g1);
    double dz = max_rel_diff(pfl_forward(big, mc.params, mc.x, B, true, NULL), z1, L);
    pfl_forward_loss(big, mc.params, mc.x, mc.y, B, true, NULL);
    pfl_backward(big, mc.params, mc.y, g2);
    double dg = max_rel_diff(g2, g1, P);
    printf("  B=%d in a workspace for 7: logits %.2e, grads %.2e\n", B, dz, dg);
    CHECK(dz <= 1e-6 && dg <= 1e-6, "results depend on the workspace size (logits %.3e, grads %.3e)", dz, dg);

    /* accumulation: twice = 2 x once */
    pfl_forward_loss(exact, mc.params, mc.x, mc.y, B, true, NULL);
    pfl_backward(exact, mc.params, mc.y, g2);
    for (long i = 0; i < P; i++) g2[i] -= 2.0f * g1[i];
    double dacc = max_abs(g2, P) / max_abs(g1, P);
    CHECK(dacc <= 1e-6, "backward does not accumulate (%.3e)", dacc);

    /* backward_top from layer2.0.conv2: the layers above get the full
     * backward's gradients, the layers below nothing (the downsample path,
     * later in op order than conv2's input, must not write below) */
    int first = -1;
    for (int l = 0; l < m->num_layers; l++)
        if (strcmp(m->layers[l].name, "layer2.0.conv2") == 0) first = l;
    pfl_forward_loss(exact, mc.params, mc.x, mc.y, B, true, NULL);
    pfl_backward_top(exact, mc.params, mc.y, g_top, first);
    const size_t split = m->layers[first].offset;
    double d_above = max_rel_diff(g_top + split, g1 + split, P - (long)split), below = max_abs(g_top, (long)split);
    printf("  backward_top from layer %s: above %.2e, below max |g| %.1e\n", m->layers[first].name, d_above, below);
    CHECK(d_above <= 1e-6 && below == 0.0, "backward_top: above differs by %.3e, below has %.3e", d_above, below);

    /* training mode: batch statistics (logits differ from evaluation mode),
     * the vector untouched by the forward, running statistics moved only by
     * pfl_update_running_stats, and evaluation mode follows them */
    memcpy(saved, mc.params, sizeof(float) * (size_t)V);
    memcpy(z1, pfl_forward(exact, mc.params, mc.x, B, false, NULL), sizeof(float) * (size_t)L);
    double d_mode = max_rel_diff(pfl_forward(exact, mc.params, mc.x, B, true, NULL), z1, L);
    CHECK(memcmp(saved, mc.params, sizeof(float) * (size_t)V) == 0, "a forward wrote the model vector");
    pfl_update_running_stats(exact, mc.params);
    CHECK(memcmp(saved, mc.params, sizeof(float) * (size_t)P) == 0, "the running-statistics update moved parameters");
    const double moved = max_rel_diff(mc.params + P, saved + P, V - P);
    double d_eval = max_rel_diff(pfl_forward(exact, mc.params, mc.x, B, false, NULL), z1, L);
    memcpy(g2, mc.params + P, sizeof(float) * (size_t)(V - P));
    pfl_update_running_stats(exact, mc.params); /* after an evaluation forward: nothing */
    const int eval_kept = memcmp(g2, mc.params + P, sizeof(float) * (size_t)(V - P)) == 0;
    printf("  train vs eval logits %.2e; running statistics moved %.2e; eval logits after the update moved %.2e\n",
           d_mode, moved, d_eval);
    CHECK(d_mode > 1e-3 && moved > 1e-3 && d_eval > 1e-4 && eval_kept,
          "BatchNorm modes: train vs eval %.3e, update %.3e, eval after update %.3e, update after eval %s", d_mode,
          moved, d_eval, eval_kept ? "kept" : "moved");
    free(g1), free(g2), free(g_top), free(z1), free(saved);
out:
    pfl_workspace_free(exact);
    pfl_workspace_free(big);
    model_case_free(&mc);
}

/* ---- SGD ---- */

static void test_sgd(void) {
    printf("sgd\n");
    /* Expected values printed by torch.optim.SGD(lr=0.1, momentum, weight_decay) from
     * p = (1, -2, 0.5, 0) with the three gradients below, one step each. By hand for
     * p[0], momentum 0.9, no decay: v = 0.1, p = 0.99; v = 0.9*0.1 - 0.2 = -0.11,
     * p = 0.99 + 0.011 = 1.001; v = 0.9*(-0.11) + 0.3 = 0.201, p = 1.001 - 0.0201 = 0.9809. */
    const float g[3][4] = {{0.1f, 0.2f, -0.3f, 0.0f}, {-0.2f, 0.05f, 0.1f, 0.4f}, {0.3f, -0.1f, 0.0f, -0.2f}};
    const struct {
        float mu, wd;
        float expect[3][4];
    } cases[] = {
        {0.0f, 0.0f, {{0.99000001f, -2.01999998f, 0.530000031f, 0.0f},
                      {1.00999999f, -2.0250001f, 0.520000041f, -0.0400000028f},
                      {0.979999959f, -2.0150001f, 0.520000041f, -0.0200000014f}}},
        {0.0f, 0.01f, {{0.989000022f, -2.01799989f, 0.529500008f, 0.0f},
                       {1.00801098f, -2.02098179f, 0.51897049f, -0.0400000028f},
                       {0.977002978f, -2.00896072f, 0.518451512f, -0.0199600011f}}},
        {0.9f, 0.0f, {{0.99000001f, -2.01999998f, 0.530000031f, 0.0f},
                      {1.00100005f, -2.04299998f, 0.547000051f, -0.0400000028f},
                      {0.980900049f, -2.05369997f, 0.562300026f, -0.0560000017f}}},
        {0.9f, 0.01f, {{0.989000022f, -2.01799989f, 0.529500008f, 0.0f},
                       {0.99811101f, -2.03718185f, 0.545520484f, -0.0400000028f},
                       {0.975312769f, -2.04240847f, 0.559393406f, -0.0559599996f}}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int with_velocity = 0; with_velocity < 2; with_velocity++) {
            if (cases[c].mu != 0.0f && !with_velocity) continue; /* momentum needs its buffer */
            float p[4] = {1.0f, -2.0f, 0.5f, 0.0f}, v[4] = {0};
            pfl_sgd opt = {0.1f, cases[c].mu, cases[c].wd};
            double worst = 0.0;
            for (int s = 0; s < 3; s++) {
                pfl_sgd_step(p, g[s], with_velocity ? v : NULL, 4, &opt);
                for (int i = 0; i < 4; i++) worst = fmax(worst, fabs(p[i] - cases[c].expect[s][i]));
            }
            printf("  momentum %.1f weight decay %.2f velocity %s: max |pfl - torch| %.2e\n", (double)cases[c].mu,
                   (double)cases[c].wd, with_velocity ? "buffer" : "NULL", worst);
            CHECK(worst <= 1e-6, "sgd momentum %g wd %g: off by %.3e from torch", (double)cases[c].mu,
                  (double)cases[c].wd, worst);
        }
    }
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* keep report lines and FAIL lines (stderr) in order */
    test_linear(3, 7, 5, 1);
    test_linear(1, 1, 1, 2);
    test_linear(4, 33, 17, 3);
    test_linear_slices(10, 1024, 600, 4);

    /* geometries: padding 0/1/2, stride 1/2/3, non-square, several samples,
     * even kernel, a 1x1 output, a floor-mode remainder */
    test_conv(2, 3, 7, 9, 4, 3, 1, 1, 11);
    test_conv(3, 2, 8, 6, 5, 3, 2, 1, 12);
    test_conv(2, 2, 9, 7, 3, 5, 2, 2, 13);
    test_conv(2, 1, 6, 5, 2, 2, 2, 0, 14);
    test_conv(1, 3, 5, 5, 2, 5, 1, 0, 15);
    test_conv(2, 2, 10, 7, 3, 4, 3, 2, 16);
    test_conv(3, 1, 12, 12, 4, 5, 1, 0, 17); /* the cnn's first layer, scaled down */
    test_conv(1, 16, 6, 8, 16, 5, 1, 0, 18); /* Winograd forward: the backward against its finite differences */
    test_conv_winograd(10, 32, 12, 12, 64, true, 19); /* the cnn's second layer */
    test_conv_winograd(2, 17, 10, 14, 19, false, 20); /* 30 tiles and 17 channels: partial lanes */
    test_conv_winograd(1, 16, 6, 6, 16, true, 21);    /* one tile */
    test_conv_winograd_backward(10, 32, 12, 12, 64, 22); /* the cnn's second layer: 4 blocks of samples */
    test_conv_winograd_backward(2, 17, 10, 14, 19, 23);  /* partial lanes and tile rows */

    test_maxpool(2, 3, 8, 6, 2, 2, 21);
    test_maxpool(2, 2, 7, 9, 2, 2, 22); /* odd sizes: last row and column dropped */
    test_maxpool(1, 2, 7, 8, 3, 2, 23); /* overlapping windows: one input can win twice */
    test_maxpool(2, 1, 5, 6, 3, 1, 24);
    test_maxpool_pad(2, 2, 8, 8, 3, 2, 1, 25); /* ResNet's stem pooling */
    test_maxpool_pad(1, 2, 7, 5, 3, 2, 1, 26); /* odd sizes: windows hanging over two edges */
    test_avgpool(2, 3, 4, 5, 27);
    test_avgpool(3, 2, 1, 1, 28);

    test_batchnorm(3, 4, 3, 5, true, 41);
    test_batchnorm(3, 4, 3, 5, false, 42);
    test_batchnorm(4, 3, 1, 1, true, 43); /* one value per sample: ResNet's last stage on 32x32 */
    test_conv_bias(2, 3, 6, 6, 4, 3, 1, 1, false, 44);
    test_conv_bias(6, 2, 4, 4, 3, 3, 1, 1, false, 45); /* 16 positions: groups of 4 samples, 4 + 2 */
    test_conv_bias(5, 3, 3, 3, 4, 1, 2, 0, true, 46);  /* 1x1 stride 2 (a downsample), 2x2 output */

    test_relu();
    test_dropout(0.3f, 31);
    test_dropout(0.5f, 32);
    test_dropout(0.0f, 33);
    test_softmax_xent();

    test_models();
    test_model_fd("cnn", 1, 28, 28, 10, 3, 24, 61);
    test_model_fd("cnn", 3, 32, 32, 10, 2, 12, 62);
    test_model_fd("dnn", 1, 28, 28, 10, 3, 24, 63);
    test_model_fd("mlp", 1, 28, 28, 10, 3, 24, 64);
    test_model_batches("cnn", 1, 28, 28, 10, 71);
    test_model_batches("dnn", 1, 28, 28, 10, 72);
    test_model_batches("mlp", 1, 28, 28, 10, 73);
    test_model_fd("mnist-cnn", 1, 28, 28, 10, 2, 12, 65);
    test_model_fd("cifar-cnn", 3, 32, 32, 10, 2, 12, 66);
    test_model_fd("tsdp-cnn", 3, 32, 32, 10, 2, 12, 67); /* no rng: dropout is the identity */
    test_model_batches("mnist-cnn", 1, 28, 28, 10, 74);
    test_model_batches("tsdp-cnn", 3, 32, 32, 10, 75);
    test_residual_tables();
    test_residual_model();

    test_sgd();
    TEST_MAIN_END();
}
