/* The finite-difference gradient check shared by the layer tests
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

/* Central differences of loss(ctx) in each of the n floats at x (step 1e-2,
 * divided by the step as float rounding actually made it). */
static inline void fd_gradient(float *num, float *x, long n, double (*loss)(void *), void *ctx) {
    for (long i = 0; i < n; i++) {
        const float save = x[i];
        x[i] = save + 1e-2f;
        const double lp = loss(ctx);
        x[i] = save - 1e-2f;
        const double lm = loss(ctx);
        x[i] = save;
        num[i] = (float)((lp - lm) / (((double)save + 1e-2f) - ((double)save - 1e-2f)));
    }
}

#endif
