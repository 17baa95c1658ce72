/* FedTSDP (federated two-stage decoupling with adaptive personalization
 * layers): see fedtsdp.c and docs/algorithms.md. */
#ifndef PFL_ALGOS_FEDTSDP_H
#define PFL_ALGOS_FEDTSDP_H

#include <stdbool.h>
#include <stddef.h>

#include "fl/method.h"

typedef struct {
    int pub_start, n_pub;   /* the public set: dataset samples [pub_start, pub_start + n_pub) */
    int pub_batch;          /* |D_B| */
    double *W;              /* n_pub sampling weights, summing to 1 (Eq. 7-8) */
    int *cluster;           /* per client: its cluster (all 0 before the first clustering) */
    int clusters;
    double shared_layers;   /* L_s */
    size_t shared_end;      /* parameters [0, shared_end) are shared (pfl_fedtsdp_shared_end) */
    float *models;          /* clients x model vector: each cluster's shared prefix, and the running
                             * statistics of the BatchNorm layers inside it (tsdp_stats_shared) */
    float *probs;           /* clients x pub_batch x classes: softmax outputs on the public batch */
    float *pub_x;           /* pub_batch x input size */
    uint8_t *pub_y;         /* gathered but never read: the public set is unlabeled */
    int *batch;             /* pub_batch indices into the dataset */
    double *scratch;        /* clients x clients */
    int *labels1;           /* clients: the last clustering */
    /* per round 0..R (index = round): H (NaN where not computed), whether
     * both stages ran, whether L_s shrank, whether the clustering changed
     * the partition, L_s and the number of clusters after the round, and
     * the DBSCAN noise clients of its clustering (-1: none ran) */
    double *hopkins, *shared_hist;
    bool *clustered, *shrunk, *changed;
    int *clusters_hist, *noise_hist;
    int num_clusterings, num_shrinks;
} pfl_fedtsdp_state;

/* The state of a FedTSDP run, or NULL for another algorithm. */
pfl_fedtsdp_state *pfl_fedtsdp_state_of(const pfl_fl *fl);

/* How a fractional number of shared layers L_s maps to parameters: the first
 * floor(L_s) layers are shared whole, and of the next layer the first
 * floor(frac(L_s) x its tensor count) tensors (PyTorch's parameter order,
 * weight before bias), so with 2-tensor layers L_s = 3.92 shares 3 layers
 * and the 4th layer's weight, not its bias: the paper's "4 to 3.5". Returns
 * the end of the shared prefix of the parameter vector (0..num_params). */
size_t pfl_fedtsdp_shared_end(const pfl_model *m, double shared_layers);

/* Eq. 7-8: W_k += n / |batch| for each k of the batch (indices into W),
 * then W /= sum W. */
void pfl_fedtsdp_update_weights(double *W, int n, const int *batch, int batch_size);

/* The two stages on m clients: stage one DBSCAN(eps1, min_pts) on the m x m
 * JS matrix js; stage two, inside each stage-one group, DBSCAN(eps2,
 * min_pts) on the Eq. 9 distances of the clients' parameter vectors
 * (models[i], dim floats). DBSCAN's noise points (label -1) of a run form
 * one group of their own, as grouping clients by label does; with
 * noise_singletons each noise point is a group alone. labels[i] gets the
 * final cluster, numbered by first appearance (client 0 is in cluster 0);
 * *noise (if not NULL) the clients that were noise in either stage.
 * Returns the number of clusters or -1. */
int pfl_fedtsdp_two_stage(int *labels, const double *js, const float *const *models, int m, size_t dim,
                          double eps1, double eps2, int min_pts, bool noise_singletons, int *noise);

/* Eq. 9: ||a - b + upsilon e||_2 over dim floats. */
double pfl_fedtsdp_weight_distance(const float *a, const float *b, size_t dim, double upsilon);

#define PFL_FEDTSDP_UPSILON 1e-8

#endif
