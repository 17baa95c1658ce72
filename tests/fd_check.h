/* The finite-difference gradients and their check, shared by the layer tests
 * (test_layers.c, which explains the tolerance) and the text tests. Include
 * after check.h. */
#ifndef PFL_TESTS_FD_CHECK_H
#define PFL_TESTS_FD_CHECK_H

#include <math.h>
#include <stdio.h>

#include "check.h"

/* Relative to the largest analytic gradient entry (test_layers.c says why). */
#define FD_TOL 1e-2

static inline double max_abs(const float *a, long n) {
    double m = 0.0;
    for (long i = 0; i < n; i++)
        if (fabs(a[i]) > m) m = fabs(a[i]);
    return m;
}

/* max|num - ana| <= FD_TOL * max|ana|, printed llm.c style. */
static inline void check_grad(const char *what, const float *num, const float *ana, long n) {
    double scale = max_abs(ana, n), worst = 0.0;
    long worst_i = 0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)num[i] - (double)ana[i]);
        if (!(d <= worst)) worst = d, worst_i = i; /* NaN becomes the worst */
    }
    double rel = scale > 0.0 ? worst / scale : INFINITY;
    printf("  %-34s n=%-5ld max|grad| %.3e  max|fd - analytic| %.3e  rel %.2e  %s\n", what, n, scale, worst, rel,
           rel <= FD_TOL ? "ok" : "FAIL");
    CHECK(scale > 0.0, "%s: analytic gradient is all zeros, the check proves nothing", what);
    CHECK(rel <= FD_TOL, "%s: worst at %ld: fd %.6g analytic %.6g (rel %.3e)", what, worst_i, (double)num[worst_i],
          (double)ana[worst_i], rel);
}

typedef double (*loss_fn)(void *ctx);

/* Central difference of f with respect to x[i], dividing by the step that
 * float rounding actually allowed. */
static inline double fd_one(float *x, long i, float eps, loss_fn f, void *ctx) {
    const float save = x[i];
    const float hi = save + eps, lo = save - eps;
    x[i] = hi;
    const double lp = f(ctx);
    x[i] = lo;
    const double lm = f(ctx);
    x[i] = save;
    return (lp - lm) / ((double)hi - (double)lo);
}

/* fd_one for each of the n floats at x. */
static inline void fd_all(float *num, float *x, long n, float eps, loss_fn f, void *ctx) {
    for (long i = 0; i < n; i++) num[i] = (float)fd_one(x, i, eps, f, ctx);
}

#endif
