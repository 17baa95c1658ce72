/* FedLC (Zhang et al., ICML 2022, "Federated Learning with Label
 * Distribution Skew via Logits Calibration"): each client trains on the
 * cross-entropy of calibrated logits, z_y - tau n_y^(-1/4), n_y a count of
 * class y's training samples, so a rare class's logit is pushed down in
 * training and the model learns to raise it; evaluation uses the plain
 * logits. The calibration is the step's per-class offset (the cross-entropy
 * stays fused into the backward pass).
 *
 * Whose counts: PFLlib's serverlc.py sums every client's (--lc-counts
 * global, its reading by default: the server gathers each client's label
 * counts once before training and sends the calibration back); the paper's
 * n_{m,y} are client m's own (--lc-counts local, nothing exchanged). A class
 * without samples gets -infinity (n^(-1/4) of 0): it leaves the softmax. With
 * --lc-tau 0 no offset is declared: FedAvg bit for bit. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "util/err.h"

typedef struct {
    float *global_offset; /* --lc-counts global: every client's counts; NULL for local */
} fedlc_state;

static bool local_counts(const pfl_config *cfg) { return cfg->algo.lc_counts && !strcmp(cfg->algo.lc_counts, "local"); }

static int fedlc_check(const pfl_config *cfg) {
    const char *c = cfg->algo.lc_counts;
    if (c && strcmp(c, "global") && strcmp(c, "local"))
        return pfl_err("--lc-counts '%s': expected global or local", c);
    return 0;
}

void pfl_fedlc_offsets(const double *counts, int C, float tau, float *offset) {
    for (int c = 0; c < C; c++) offset[c] = counts[c] > 0.0 ? (float)(-tau * pow(counts[c], -0.25)) : -INFINITY;
}

/* Adds the training label counts of `client` to counts. */
static void add_counts(const pfl_fl *fl, int client, double *counts) {
    const pfl_client_data *cd = &fl->part->clients[client];
    for (int i = 0; i < cd->n_train; i++) counts[fl->data->labels[cd->train[i]]] += 1.0;
}

/* The offsets of a client's training: the shared ones, or from its own counts into `own`. */
static const float *client_offsets(const pfl_fl *fl, int client, float *own) {
    const fedlc_state *s = fl->algo_state;
    if (s->global_offset) return s->global_offset;
    const int C = fl->model->classes;
    double *counts = pfl_calloc((size_t)C, sizeof(double));
    if (!counts) return NULL;
    add_counts(fl, client, counts);
    pfl_fedlc_offsets(counts, C, fl->cfg.algo.lc_tau, own);
    free(counts);
    return own;
}

static int fedlc_create(pfl_fl *fl) {
    fedlc_state *s = pfl_calloc(1, sizeof *s);
    if (!(fl->algo_state = s)) return -1;
    if (local_counts(&fl->cfg) || fl->cfg.algo.lc_tau == 0.0f) return 0; /* nothing to gather */
    const int C = fl->model->classes;
    double *counts = pfl_calloc((size_t)C, sizeof(double));
    if (!counts || !(s->global_offset = pfl_malloc(sizeof(float) * (size_t)C))) {
        free(counts);
        return -1;
    }
    for (int k = 0; k < fl->cfg.clients; k++) add_counts(fl, k, counts);
    pfl_fedlc_offsets(counts, C, fl->cfg.algo.lc_tau, s->global_offset);
    free(counts);
    return 0;
}

static void fedlc_destroy(pfl_fl *fl) {
    fedlc_state *s = fl->algo_state;
    if (s) free(s->global_offset);
    free(s);
    fl->algo_state = NULL;
}

static void fedlc_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    pfl_step step = pfl_step_default(fl);
    float *own = NULL;
    if (fl->cfg.algo.lc_tau != 0.0f) {
        if (!(own = pfl_malloc(sizeof(float) * (size_t)fl->model->classes))) return; /* this client does not train */
        step.ce_offset = client_offsets(fl, client, own);
        if (!step.ce_offset) {
            free(own);
            return;
        }
    }
    pfl_step_run(fl, client, w, model, &step, stats);
    free(own);
}

/* The exchange before training of the global reading: each client's C label
 * counts up and the C calibration floats down, once (not in any round's bytes). */
static void fedlc_report(const pfl_fl *fl, FILE *f, int what) {
    const fedlc_state *s = fl->algo_state;
    if (what != PFL_REPORT_SUMMARY || !s->global_offset) return;
    const uint64_t bytes = 4 * (uint64_t)fl->cfg.clients * (uint64_t)fl->model->classes;
    fprintf(f, ",\n  \"setup_bytes_up\": %llu,\n  \"setup_bytes_down\": %llu", (unsigned long long)bytes,
            (unsigned long long)bytes);
}

/* PFLlib's main.py: "-tau --tau, default=1.0" (MOON / FedCAC / FedLC). */
static const pfl_param fedlc_params[] = {
    {PFL_ALGO_PARAM(FLOAT, "lc-tau", lc_tau), .def = 1.0, .max = 1e3, .metavar = "F",
     .help = "tau of the logit calibration z_y - tau * n_y^(-1/4) (0: FedAvg)"},
    {PFL_ALGO_PARAM(STRING, "lc-counts", lc_counts), .def_text = "global", .metavar = "global|local",
     .help = "n_y counted over every client's training labels (PFLlib) or the client's own (the paper)"},
};

const pfl_algo pfl_algo_fedlc = {
    .name = "fedlc",
    .description = "FedLC: cross-entropy on logits calibrated by label counts, z_y - tau * n_y^(-1/4) (--lc-tau, "
                   "--lc-counts)",
    PFL_PARAMS(fedlc_params),
    .has_global = true,
    .check = fedlc_check,
    .create = fedlc_create,
    .destroy = fedlc_destroy,
    .local_train = fedlc_train,
    .report = fedlc_report,
};
