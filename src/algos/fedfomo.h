/* FedFomo's two steps (src/algos/fedfomo.c), exposed for the tests. */
#ifndef PFL_ALGOS_FEDFOMO_H
#define PFL_ALGOS_FEDFOMO_H

#include "fl/method.h"

/* The clients whose models `client` downloads now, ascending, into chosen
 * (room for every client): the M of highest affinity in its row of P among
 * those that have uploaded (ties: the lower client). Returns how many. */
/* P[client][other]: 1 on the diagonal at the start, plus the weights w_n
 * `client` gave `other`'s model at each initialization it then uploaded. */
double pfl_fedfomo_affinity(const pfl_fl *fl, int client, int other);

int pfl_fedfomo_downloads(const pfl_fl *fl, int client, int *chosen);

/* The weights w_n of the m models chosen[0..m) for `client`, against its
 * theta_old on its held-out samples, into weights[0..m); returns the sum of
 * the positive ones (0 when none is). */
double pfl_fedfomo_weights(pfl_fl *fl, pfl_worker *w, int client, const int *chosen, int m, double *weights);

#endif
