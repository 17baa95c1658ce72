/* CFL (Sattler, Mueller, Samek, "Clustered Federated Learning: Model-Agnostic
 * Distributed Multitask Optimization Under Privacy Constraints", IEEE TNNLS
 * 2020), exposed for the CLI's summary and the tests. The algorithm table is
 * pfl_algo_cfl (algos.h); docs/algorithms.md explains the readings chosen. */
#ifndef PFL_ALGOS_CFL_H
#define PFL_ALGOS_CFL_H

#include <stdbool.h>

#include "fl/method.h"

/* A cluster of fewer members than this never splits (the reference code's
 * len(cluster) > 2). */
#define PFL_CFL_MIN_SPLIT 3

/* One split: at the end of `round`, cluster `cluster` (size members) was cut
 * in two; one part kept its id, the other became `new_cluster`. */
typedef struct {
    int round, cluster, new_cluster, size;
    double mean_norm, max_norm;
} pfl_cfl_split;

/* Server state, in fl->algo_state. */
typedef struct {
    float eps1, eps2;       /* split when mean-update norm < eps1 and max update norm > eps2 */
    int warmup;             /* no split in rounds 1..warmup */
    int clusters;           /* clusters so far (ids 0..clusters-1) */
    int *cluster;           /* per client: its cluster id */
    float *models;          /* clusters x model vector: the cluster models */
    double *mean_norm;      /* per cluster: ||weighted mean update|| of its last round with members, or -1 */
    double *max_norm;       /* per cluster: max client update norm of that round, or -1 */
    pfl_cfl_split *splits;  /* the splits, in order (at most clients - 1) */
    int num_splits;
    int *members;           /* scratch: upload slots of one cluster */
    double *norm2;          /* scratch: per member squared update norms */
} pfl_cfl_state;

/* The split criterion: mean_norm < eps1 and max_norm > eps2, for a cluster of
 * at least PFL_CFL_MIN_SPLIT members, after the warm-up rounds. */
bool pfl_cfl_should_split(double mean_norm, double max_norm, int size, int round, float eps1, float eps2,
                          int warmup);

/* Bipartition of n >= 2 points from their n x n cosine similarities (row
 * major, symmetric), as the reference code does it: complete-linkage
 * agglomerative clustering on the distances -sim (scikit-learn's
 * AgglomerativeClustering(affinity="precomputed", linkage="complete").fit(-S))
 * stopped at two clusters. labels[i] is 0 or 1, point 0 on side 0, both
 * sides non-empty. Ties merge the pair with the lowest indices first. sim is
 * overwritten (it holds the linkage distances). O(n^3). Returns 0, or -1
 * (out of memory, or n < 2) with a message. */
int pfl_cfl_bipartition(int *labels, double *sim, int n);

/* The state of a CFL run, or NULL when fl does not run CFL. */
pfl_cfl_state *pfl_cfl_state_of(const pfl_fl *fl);

#endif
