/* The RDP accountant (src/modules/rdp.c) against the values Google's
 * dp_accounting publishes in its tests (python/dp_accounting/dp_accounting/
 * rdp/rdp_privacy_accountant_test.py at 0b109e9), to their tolerances:
 *
 *  - test_compute_rdp_poisson_sampled_gaussian: q 0.01, sigma 2.5, 50
 *    steps, orders 5, 50, 100, inf: 2.18075656e-03, 2.38460375e-02,
 *    1.67416308e02, inf (rtol 1e-4); at its fractional orders 1.5 and 2.5
 *    no more than its values (an upper bound there, below), and log A_alpha
 *    against the integral it is, computed here by quadrature, on a grid of
 *    q, sigma and fractional and integer orders (1e-4);
 *  - test_compute_epsilon_delta_pure_dp: rdp 1.1 at orders 2..32, delta
 *    1e-5: epsilon 1.32783806176 at order 32 (the conversion);
 *  - test_compute_epsilon_delta_gaussian: no sampling (q 1), sigma
 *    4.530877117, orders 1.000 to 99.999 by 0.001: epsilon 1 at delta 1e-6;
 *  - q 0 is free, sigma 0 is not private, steps compose by adding, and a
 *    fractional order next to an integer agrees with the integer's sum. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "modules/rdp.h"

/* log A_alpha = log of the integral over z of N(z; 0, sigma^2) ((1 - q) + q exp((2z - 1) / (2 sigma^2)))^alpha,
 * by the trapezoid rule in log space over a range holding all its mass: the exact value the series must give. */
static double log_a_by_integral(double q, double sigma, double alpha) {
    const int N = 2000000;
    const double lo = -40 * sigma - 10, hi = 40 * sigma + 2 * alpha + 10, h = (hi - lo) / N;
    double top = -INFINITY;
    for (int pass = 0; pass < 2; pass++) {
        double sum = 0;
        for (int k = 0; k <= N; k++) {
            const double z = lo + k * h;
            const double x = (2 * z - 1) / (2 * sigma * sigma); /* log of q e^x + (1 - q), stably */
            const double mix = x > 0 ? x + log(q + (1 - q) * exp(-x)) : log1p(q * expm1(x));
            const double l = -z * z / (2 * sigma * sigma) - log(sigma * sqrt(2 * 3.141592653589793)) + alpha * mix;
            if (pass == 0) top = fmax(top, l);
            else sum += exp(l - top) * (k == 0 || k == N ? 0.5 : 1.0);
        }
        if (pass == 1) return top + log(sum * h);
    }
    return NAN;
}

/* dp_accounting's published RDP at the integer orders; at the fractional ones the exact integral, for
 * dp_accounting's current series adds the terms' absolute values (_compute_log_a_frac: _log_add of
 * _log_comb, where the generalized binomial coefficients turn negative past i = alpha + 1), an upper bound:
 * its 6.70579741e-04 at order 1.5 is 3.2 % above the integral's 6.5007e-04, which pfl's series (the signed
 * one of Mironov, Talwar and Zhang, Sec. 3.3, as TF Privacy had it) gives. */
static void test_published_rdp(void) {
    const double orders[] = {1.5, 2.5, 5, 50, 100};
    const double want[] = {6.70579741e-04, 1.08548710e-03, 2.18075656e-03, 2.38460375e-02, 1.67416308e02};
    for (int k = 0; k < 5; k++) {
        const double got = 50 * pfl_rdp_subsampled_gaussian(0.01, 2.5, orders[k]);
        if (orders[k] == floor(orders[k]))
            CHECK(fabs(got - want[k]) <= 1e-4 * want[k], "rdp q 0.01 sigma 2.5 x 50 at order %g: %.9g, published %.9g",
                  orders[k], got, want[k]);
        else
            CHECK(got <= want[k] * (1 + 1e-4), "rdp at order %g: %.9g, not above dp_accounting's bound %.9g", orders[k],
                  got, want[k]);
    }
    CHECK(isinf(pfl_rdp_subsampled_gaussian(0.01, 2.5, INFINITY)), "rdp at order inf: inf");
    /* the series against the integral: dp_accounting's own grid (test_compute_log_a_equals_mp), where the
     * integrand stays within double's range, and the order above */
    const double grid[][3] = {{0.01, 2.5, 1.5}, {1e-4, 1, 1.5}, {1e-3, 1, 2}, {1e-6, 1, 27}, {0.01, 10, 20},
                              {0.1, 100, 20.5}, {0.3, 1.2, 3.7}, {0.05, 0.8, 12.25}};
    for (size_t k = 0; k < sizeof grid / sizeof grid[0]; k++) {
        const double q = grid[k][0], sigma = grid[k][1], alpha = grid[k][2];
        const double series = pfl_rdp_subsampled_gaussian(q, sigma, alpha) * (alpha - 1);
        const double exact = log_a_by_integral(q, sigma, alpha);
        CHECK(fabs(series - exact) <= 1e-4 * fabs(exact) + 1e-12,
              "log A at q %g sigma %g order %g: series %.10g, integral %.10g", q, sigma, alpha, series, exact);
    }
}

static void test_pure_dp_conversion(void) {
    double orders[31], rdp[31], order = 0;
    for (int k = 0; k < 31; k++) orders[k] = k + 2, rdp[k] = 1.1;
    const double eps = pfl_rdp_epsilon(orders, rdp, 31, 1e-5, &order);
    CHECK(fabs(eps - 1.32783806176) < 1e-7 && order == 32, "pure dp: epsilon %.11f at order %g, published 1.32783806176 at 32",
          eps, order);
}

static void test_gaussian_exact(void) {
    enum { N = 99000 };
    double *orders = malloc(sizeof(double) * N), *rdp = malloc(sizeof(double) * N);
    for (int i = 0; i < N; i++) {
        orders[i] = 0.001 * (i + 1000);
        rdp[i] = pfl_rdp_subsampled_gaussian(1.0, 4.530877117, orders[i]);
    }
    const double eps = pfl_rdp_epsilon(orders, rdp, N, 1e-6, NULL);
    CHECK(fabs(eps - 1.0) < 1e-7, "gaussian sigma 4.530877117, delta 1e-6: epsilon %.9f, published 1", eps);
    free(orders), free(rdp);
}

static void test_edges_and_composition(void) {
    pfl_rdp_accountant a;
    pfl_rdp_init(&a);
    CHECK(a.n == PFL_RDP_DEFAULT_ORDERS && fabs(a.orders[0] - 1.1) < 1e-12 && a.orders[98] == 10.9 &&
              a.orders[99] == 12 && a.orders[a.n - 1] == 63,
          "default orders 1.1 .. 10.9, 12 .. 63");
    pfl_rdp_compose(&a, 0.0, 1.0, 1000);
    CHECK(pfl_rdp_accountant_epsilon(&a, 1e-5, NULL) == 0.0, "q 0: epsilon 0");
    pfl_rdp_compose(&a, 0.5, 0.0, 1);
    CHECK(isinf(pfl_rdp_accountant_epsilon(&a, 1e-5, NULL)), "sigma 0: epsilon inf");
    pfl_rdp_accountant b, c;
    pfl_rdp_init(&b), pfl_rdp_init(&c);
    pfl_rdp_compose(&b, 0.02, 1.1, 300);
    for (int s = 0; s < 300; s++) pfl_rdp_compose(&c, 0.02, 1.1, 1);
    double worst = 0;
    for (size_t k = 0; k < b.n; k++) worst = fmax(worst, fabs(b.rdp[k] - c.rdp[k]) / b.rdp[k]);
    CHECK(worst < 1e-12, "300 steps at once and one at a time: relative difference %g", worst);
    const double e1 = pfl_rdp_accountant_epsilon(&b, 1e-5, NULL);
    pfl_rdp_compose(&b, 0.02, 1.1, 300);
    CHECK(e1 > 0 && pfl_rdp_accountant_epsilon(&b, 1e-5, NULL) > e1, "epsilon grows with the steps (%g)", e1);
    /* the fractional series next to an integer order agrees with the binomial sum */
    const double at3 = pfl_rdp_subsampled_gaussian(0.05, 0.8, 3.0), near3 = pfl_rdp_subsampled_gaussian(0.05, 0.8, 3.0 + 1e-9);
    CHECK(fabs(at3 - near3) <= 1e-6 * at3, "order 3 (binomial sum) %.12g, order 3 + 1e-9 (series) %.12g", at3, near3);
    /* no sampling: the Gaussian's alpha / (2 sigma^2) */
    CHECK(fabs(pfl_rdp_subsampled_gaussian(1.0, 2.0, 5.0) - 5.0 / 8.0) < 1e-15, "q 1: alpha / (2 sigma^2)");
}

int main(void) {
    test_published_rdp();
    test_pure_dp_conversion();
    test_gaussian_exact();
    test_edges_and_composition();
    TEST_MAIN_END();
}
