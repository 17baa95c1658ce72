/* Rényi differential privacy of the Poisson-subsampled Gaussian mechanism,
 * and its conversion to (epsilon, delta) (issue 43's accountant).
 *
 *   Mironov, "Rényi Differential Privacy", CSF 2017: the Gaussian mechanism
 *   of noise multiplier sigma is (alpha, alpha / (2 sigma^2))-RDP, and RDP
 *   composes by adding.
 *   Mironov, Talwar, Zhang, "Rényi Differential Privacy of the Sampled
 *   Gaussian Mechanism", 2019, Sections 3.3 (integer alpha: a binomial sum)
 *   and 3.3-3.4 (fractional alpha: two series with erfc tails): the RDP of
 *   one step that samples each record with probability q, under add/remove-
 *   one neighbours, is log(A_alpha) / (alpha - 1).
 *   Canonne, Kamath, Steinke 2020 and Asoodeh et al. 2020 (the conversion of
 *   Google's dp_accounting, compute_epsilon): epsilon = rdp + log(1 - 1/alpha)
 *   - log(delta alpha) / (alpha - 1), the smallest over the orders, 0 where
 *   delta^2 > 1 - exp(-rdp).
 *
 * The numbers agree with dp_accounting's published tests to 1e-4 relative
 * (tests/test_rdp.c). Everything is in double; nothing here allocates. */
#ifndef PFL_MODULES_RDP_H
#define PFL_MODULES_RDP_H

#include <stddef.h>

/* Opacus's and dp_accounting's default orders: 1.1, 1.2, ..., 10.9, then
 * 12, 13, ..., 63 (151 orders). */
enum { PFL_RDP_DEFAULT_ORDERS = 151 };
void pfl_rdp_default_orders(double *orders);

/* The RDP at order alpha (> 1, or INFINITY) of one step of the Gaussian
 * mechanism of noise multiplier sigma, each record sampled with
 * probability q in [0, 1]: 0 at q = 0, INFINITY at sigma = 0, alpha /
 * (2 sigma^2) at q = 1. */
double pfl_rdp_subsampled_gaussian(double q, double sigma, double alpha);

/* The smallest epsilon over n orders of the accumulated rdp[] for delta in
 * (0, 1); *order gets the order that gave it (may be NULL). INFINITY when no
 * order gives a finite one. */
double pfl_rdp_epsilon(const double *orders, const double *rdp, size_t n, double delta, double *order);

/* An accountant: the RDP so far at each of its orders. */
typedef struct {
    double orders[PFL_RDP_DEFAULT_ORDERS];
    double rdp[PFL_RDP_DEFAULT_ORDERS];
    size_t n;
} pfl_rdp_accountant;

/* Starts at zero on the default orders. */
void pfl_rdp_init(pfl_rdp_accountant *a);
/* Adds `steps` steps of the subsampled Gaussian (q, sigma). */
void pfl_rdp_compose(pfl_rdp_accountant *a, double q, double sigma, double steps);
/* Its epsilon for delta (pfl_rdp_epsilon). */
double pfl_rdp_accountant_epsilon(const pfl_rdp_accountant *a, double delta, double *order);

#endif
