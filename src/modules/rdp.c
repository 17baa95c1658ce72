/* Rényi DP of the subsampled Gaussian mechanism (rdp.h). The sums follow
 * Mironov, Talwar and Zhang (2019), Section 3.3, in log space so that
 * nothing overflows: A_alpha for an integer alpha is the binomial sum
 *
 *   sum_{i=0}^{alpha} C(alpha, i) q^i (1-q)^(alpha-i) exp((i^2 - i) / (2 sigma^2)),
 *
 * and for a fractional alpha the two series over i = 0, 1, ... of the
 * generalized binomial coefficients, each term weighted by a Gaussian tail
 * (erfc) on either side of z0 = sigma^2 log(1/q - 1) + 1/2, summed until both
 * terms fall below e^-30 (as dp_accounting's _compute_log_a_frac). */
#include "modules/rdp.h"

#include <math.h>

/* C11 has neither M_PI nor M_SQRT2 */
static const double LOG_PI = 1.1447298858494002, SQRT2 = 1.4142135623730951;

/* log(e^a + e^b) */
static double log_add(double a, double b) {
    if (a == -INFINITY) return b;
    if (b == -INFINITY) return a;
    const double hi = a > b ? a : b, lo = a > b ? b : a;
    return hi + log1p(exp(lo - hi));
}

/* log(e^a - e^b), a >= b; -INFINITY when they are equal */
static double log_sub(double a, double b) {
    if (b == -INFINITY) return a;
    if (a <= b) return -INFINITY;
    return b + log(expm1(a - b));
}

/* log(erfc(x)), with the asymptotic series where erfc underflows */
static double log_erfc(double x) {
    const double r = erfc(x);
    if (r > 0.0) return log(r);
    const double x2 = x * x;
    return -0.5 * LOG_PI - log(x) - x2 - 0.5 / x2 + 0.625 / (x2 * x2) - 37.0 / 24.0 / (x2 * x2 * x2) +
           353.0 / 64.0 / (x2 * x2 * x2 * x2);
}

static double log_a_int(double q, double sigma, int alpha) {
    double log_a = -INFINITY;
    for (int i = 0; i <= alpha; i++) {
        const double log_coef = lgamma(alpha + 1.0) - lgamma(i + 1.0) - lgamma(alpha - i + 1.0);
        const double s = log_coef + i * log(q) + (alpha - i) * log1p(-q) + ((double)i * i - i) / (2 * sigma * sigma);
        log_a = log_add(log_a, s);
    }
    return log_a;
}

static double log_a_frac(double q, double sigma, double alpha) {
    double log_a0 = -INFINITY, log_a1 = -INFINITY;
    const double z0 = sigma * sigma * log(1.0 / q - 1.0) + 0.5;
    double coef = 1.0; /* C(alpha, i), the generalized binomial coefficient, by its recurrence */
    for (int i = 0; i < 1000000; i++) {
        const double log_coef = log(fabs(coef)), j = alpha - i;
        const double log_t0 = log_coef + i * log(q) + j * log1p(-q);
        const double log_t1 = log_coef + j * log(q) + i * log1p(-q);
        const double log_e0 = log(0.5) + log_erfc((i - z0) / (SQRT2 * sigma));
        const double log_e1 = log(0.5) + log_erfc((z0 - j) / (SQRT2 * sigma));
        const double log_s0 = log_t0 + ((double)i * i - i) / (2 * sigma * sigma) + log_e0;
        const double log_s1 = log_t1 + (j * j - j) / (2 * sigma * sigma) + log_e1;
        if (coef > 0) {
            log_a0 = log_add(log_a0, log_s0);
            log_a1 = log_add(log_a1, log_s1);
        } else {
            log_a0 = log_sub(log_a0, log_s0);
            log_a1 = log_sub(log_a1, log_s1);
        }
        if ((log_s0 > log_s1 ? log_s0 : log_s1) < -30) break;
        coef *= (alpha - i) / (i + 1.0);
        if (coef == 0.0) break; /* alpha an integer after all: the series ends */
    }
    return log_add(log_a0, log_a1);
}

double pfl_rdp_subsampled_gaussian(double q, double sigma, double alpha) {
    if (q <= 0.0) return 0.0;
    if (sigma <= 0.0 || isinf(alpha)) return INFINITY;
    if (q >= 1.0) return alpha / (2 * sigma * sigma);
    const double log_a = alpha == floor(alpha) && alpha <= 1e6 ? log_a_int(q, sigma, (int)alpha)
                                                               : log_a_frac(q, sigma, alpha);
    return log_a / (alpha - 1.0);
}

double pfl_rdp_epsilon(const double *orders, const double *rdp, size_t n, double delta, double *order) {
    double best = INFINITY, at = NAN;
    for (size_t k = 0; k < n; k++) {
        const double a = orders[k], r = rdp[k];
        double eps;
        if (delta * delta + expm1(-r) > 0.0) eps = 0.0; /* delta <= sqrt(1 - exp(-KL)) already */
        else if (a > 1.01) eps = r + log1p(-1.0 / a) - log(delta * a) / (a - 1.0);
        else eps = INFINITY; /* the bound is unstable as alpha -> 1 */
        if (eps < best) best = eps, at = a;
    }
    if (order) *order = at;
    return best > 0.0 ? best : 0.0;
}

void pfl_rdp_default_orders(double *orders) {
    size_t k = 0;
    for (int x = 1; x < 100; x++) orders[k++] = 1.0 + x / 10.0;
    for (int a = 12; a < 64; a++) orders[k++] = a;
}

void pfl_rdp_init(pfl_rdp_accountant *a) {
    a->n = PFL_RDP_DEFAULT_ORDERS;
    pfl_rdp_default_orders(a->orders);
    for (size_t k = 0; k < a->n; k++) a->rdp[k] = 0.0;
}

void pfl_rdp_compose(pfl_rdp_accountant *a, double q, double sigma, double steps) {
    for (size_t k = 0; k < a->n; k++) a->rdp[k] += steps * pfl_rdp_subsampled_gaussian(q, sigma, a->orders[k]);
}

double pfl_rdp_accountant_epsilon(const pfl_rdp_accountant *a, double delta, double *order) {
    return pfl_rdp_epsilon(a->orders, a->rdp, a->n, delta, order);
}
