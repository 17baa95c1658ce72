/* FedALP's pieces (Xie et al., "FedALP: An Adaptive Layer-Based Approach
 * for Improved Personalized Federated Learning"), exposed for the CLI's
 * summary and for the tests. The algorithm table is pfl_algo_fedalp
 * (algos.h); docs/algorithms.md explains the readings chosen. */
#ifndef PFL_ALGOS_FEDALP_H
#define PFL_ALGOS_FEDALP_H

#include <stdbool.h>

#include "fl/method.h"

/* Server state, in fl->algo_state. */
typedef struct {
    int groups;        /* M */
    int warmup;        /* T_pre: rounds 1..T_pre are FedAvg; clustering at the end of round T_pre */
    float beta;        /* personalization factor */
    bool clustered;    /* groups, models and psi are set */
    int *group;        /* per client: its group 0..M-1, or -1 (not clustered yet / not seen) */
    float *models;     /* M x num_params: the group models w_m */
    float *psi;        /* M x num_layers: Psi_m per layer */
    float *dirs;       /* M x num_params: D_m of the clustering round, to place clients that
                        * missed it (join < 1 or --drop-rate; NULL otherwise) */
    float *mix;        /* num_params scratch */
    double *acc;       /* num_params scratch */
    double *corr;      /* num_params scratch */
    /* --fedalp-all-tests: every client's test indices, and after
     * each evaluated round the mean over clients of its personalized
     * model's accuracy on all of them (NaN until computed) */
    int *all_tests, n_all_tests;
    double acc_all_tests;
} pfl_fedalp_state;

/* Algorithm 2's LayersWeight (Eq. 6-8): psi[l] = beta * delta_l / max(delta),
 * delta_l = ||update over layer l||_2 (weight and bias of the layer
 * together). A zero update gives psi = 0 for every layer. */
void pfl_fedalp_layer_weights(float *psi, const pfl_model *m, const float *update, float beta);

/* MixByLayer (Eq. 9-10): out = psi_l * wm + (1 - psi_l) * wg, layer by
 * layer; a layer with psi 0 is copied from wg and one with psi 1 from wm,
 * bitwise. */
void pfl_fedalp_mix(float *out, const pfl_model *m, const float *wm, const float *wg, const float *psi);

/* The state of a FedALP run, or NULL when fl does not run FedALP. */
pfl_fedalp_state *pfl_fedalp_state_of(const pfl_fl *fl);

/* T_pre from --warmup: a value below 1 is a fraction of the rounds
 * (rounded, at least 1), otherwise a count of rounds. */
int pfl_fedalp_warmup_rounds(double warmup, int rounds);

#endif
