/* pFedCFR (Yang et al., "Cross-fusion rule for personalized federated
 * learning", Eq. 9-15 and Algorithm 1). A layer is a unit of --layer-unit
 * (nn/layer_units.h): by default a row of the layer table (weight and bias
 * together), with tensors the paper's count (its ResNet-18 "L = 64",
 * docs/algorithms.md); r = --cfr-layers units.
 *
 * Server, after the uploads nu_n of the round's clients:
 *  - layers l < r (the paper's l <= r, 1-based): per-client fusion (Eq. 10)
 *    with distances and weights computed on that layer alone,
 *      nu_{n,l} <- (1 - alpha sum_{m!=n} A'(||nu_{n,l} - nu_{m,l}||^2)) nu_{n,l}
 *                  + alpha sum_{m!=n} A'(||nu_{n,l} - nu_{m,l}||^2) nu_{m,l},
 *    (src/algos/amp.c, shared with FedAMP), kept per client by the server;
 *  - layers l >= r: nu_global,l = the plain mean (1/N, Eq. 12, not weighted
 *    by sample counts) of the uploads;
 *  - the global model's layers < r (which the paper does not define) are the
 *    plain mean as well: it is the generic model whose accuracy is reported.
 * Allocation (Algorithm 1 lines 10-12, Fig. 1): every client's model becomes
 * [its fused layers < r, global layers >= r]; that is its state, the
 * personalized model evaluated (before the next round's training, PFLlib's
 * order), and the starting point of local training, which minimizes Eq. 15:
 *   F_n(nu) + lambda/(2 alpha) sum_{l<r} ||nu_l - nu_{n,l}^fused||^2
 *           + mu/2 sum_{l>=r} ||nu_l - nu_{global,l}||^2
 * for --epochs epochs of --local-steps batches (the paper: 10 batches).
 * Only clients that uploaded get new fused layers; the others keep theirs.
 * The server holds clients x (parameters of layers < r) floats, in a
 * per-client store (the fused layers of a client never fused are the initial
 * model's and cost nothing; --client-state puts them in a file). */
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "algos/amp.h"
#include "nn/layer_units.h"
#include "util/err.h"

typedef struct {
    int r;         /* fused layers (units) [0, r) */
    size_t span;   /* parameters of layers [0, r) (they come first) */
    size_t unit_offset[PFL_MAX_TENSORS + 1]; /* where each unit starts; [r] = span */
    pfl_store *fused; /* per client its fused layers, span floats; the run frees it */
    double *xi;    /* scratch weights between the round's clients */
    float **out;   /* scratch pointers, one per client of a round */
    bool warned;
} cfr_state;

static const float *fused_of(const cfr_state *s, int client) { return pfl_store_read(s->fused, client); }

static int cfr_create(pfl_fl *fl) {
    const pfl_model *m = fl->model;
    const int N = fl->cfg.clients, r = fl->cfg.algo.cfr_layers;
    int first[PFL_MAX_TENSORS + 1];
    const int units = pfl_unit_bounds(m, (pfl_layer_unit)fl->cfg.algo.layer_unit, first);
    if (r < 0 || r > units)
        return pfl_err("--cfr-layers %d: %s has %d %s", r, m->name, units,
                       pfl_layer_unit_name((pfl_layer_unit)fl->cfg.algo.layer_unit));
    if (!(fl->cfg.algo.amp_alpha > 0.0f) || !(fl->cfg.algo.amp_sigma > 0.0f))
        return pfl_err("pfedcfr: --amp-alpha and --amp-sigma must be > 0");
    if (fl->cfg.modules.flayer_mask)
        return pfl_err("pfedcfr: --flayer-mask is not supported (its first layers are fused from whole client "
                       "layers and the rest is a plain mean of whole uploads; a masked upload leaves elements unknown)");
    cfr_state *s = pfl_calloc(1, sizeof *s);
    if (!(fl->algo_state = s)) return -1;
    s->r = r;
    for (int u = 0; u <= r; u++) s->unit_offset[u] = first[u] < m->num_tensors ? m->tensors[first[u]].offset : m->num_params;
    s->span = s->unit_offset[r];
    const size_t n = (size_t)pfl_clients_per_round(&fl->cfg); /* the most uploads a round fuses */
    if (!(s->fused = pfl_fl_store(fl, "pfedcfr-fused", N, s->span, fl->global)) ||
        !(s->xi = pfl_malloc(sizeof(double) * n * n)) || !(s->out = pfl_calloc(n, sizeof(float *))))
        return -1;
    return 0;
}

static void cfr_destroy(pfl_fl *fl) {
    cfr_state *s = fl->algo_state;
    free(s->xi);
    free(s->out);
    free(s);
    fl->algo_state = NULL;
}

/* The client's model: its fused layers < r, the global layers >= r. */
static void cfr_receive(pfl_fl *fl, int client, const float *state, float *received) {
    (void)state;
    const cfr_state *s = fl->algo_state;
    memcpy(received, fused_of(s, client), sizeof(float) * s->span);
    memcpy(received + s->span, fl->global + s->span, sizeof(float) * (pfl_model_vector_len(fl->model) - s->span));
}

/* Eq. 15's penalties, proximal terms of the local step: lambda/alpha toward
 * the fused layers on [0, span), mu toward the global model on the rest (a
 * unit may end inside a row). */
static void cfr_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    const cfr_state *s = fl->algo_state;
    const pfl_algo_params *a = &fl->cfg.algo;
    const float fused_coef = a->amp_lambda / a->amp_alpha, global_coef = a->mu;
    pfl_step o = pfl_step_default(fl);
    /* the first r layers toward their fused values, the rest toward the generic model */
    if (fused_coef != 0.0f) pfl_step_add_prox(&o, fused_coef, fused_of(s, client), 0, s->span);
    if (global_coef != 0.0f) pfl_step_add_prox(&o, global_coef, fl->global, s->span, fl->model->num_params - s->span);
    pfl_step_run(fl, client, w, model, &o, stats);
}

static void cfr_aggregate(pfl_fl *fl, const int *clients, int n, float *const *uploads) {
    cfr_state *s = fl->algo_state;
    const pfl_model *m = fl->model;
    if (n <= 0) return;
    /* the generic model: plain mean on every layer, running statistics too */
    for (size_t i = 0; i < pfl_model_vector_len(m); i++) {
        double sum = 0.0;
        for (int k = 0; k < n; k++) sum += uploads[k][i];
        fl->global[i] = (float)(sum / n);
    }
    /* the personalized layers, each layer its own fusion weights */
    for (int k = 0; k < n; k++)
        if (!(s->out[k] = pfl_store_write(s->fused, clients[k]))) return; /* no room: the round fails */
    int rescaled = 0;
    for (int u = 0; u < s->r; u++)
        rescaled += pfl_amp_fuse(s->out, (const float *const *)uploads, n, s->unit_offset[u],
                                 s->unit_offset[u + 1] - s->unit_offset[u], fl->cfg.algo.amp_alpha,
                                 fl->cfg.algo.amp_sigma, s->xi);
    for (int k = 0; k < n; k++) pfl_store_release(s->fused, clients[k]);
    pfl_amp_warn_rescaled(fl, &s->warned, "pfedcfr", rescaled);
}

/* Checkpoints: the clients' fused layers so far, and whether the warning was given. */
static int cfr_save(const pfl_fl *fl, pfl_ckpt_writer *w) {
    const cfr_state *s = fl->algo_state;
    return pfl_store_save(s->fused, w, "pfedcfr.fused") || pfl_ckpt_put_bool(w, "pfedcfr.warned", &s->warned, 1) ? -1
                                                                                                                  : 0;
}

static int cfr_load(pfl_fl *fl, pfl_ckpt_reader *r) {
    cfr_state *s = fl->algo_state;
    return pfl_store_load(s->fused, r, "pfedcfr.fused") || pfl_ckpt_get_bool(r, "pfedcfr.warned", &s->warned, 1) ? -1
                                                                                                                 : 0;
}

/* The paper (Sec. IV-A): "the convergence coefficient alpha_t and the
 * personalized penalty coefficient lambda in (11) are set to 10^4 and 1,
 * respectively, and the hyperparameter sigma in A(x) is set to 10^6, and the
 * generic penalty term coefficient mu in (13) is set to 0.001 ... the core
 * parameter personalized fusion threshold r in Algorithm 1 is set to 1 and 2
 * in the DNN and CNN, respectively." */
static double cfr_layers_of(const char *model) { return !strcmp(model, "cnn") ? 2 : 1; }

static const pfl_param pfedcfr_params[] = {
    {PFL_ALGO_PARAM(FLOAT, "amp-alpha", amp_alpha), .def = 1e4, .max = 1e12, .min_exclusive = true, .metavar = "F",
     .help = "convergence coefficient alpha_t of the fusion (Eq. 10)"},
    {PFL_ALGO_PARAM(FLOAT, "amp-sigma", amp_sigma), .def = 1e6, .max = 1e12, .min_exclusive = true, .metavar = "F",
     .help = "sigma of A(x) = 1 - exp(-x/sigma)"},
    {PFL_ALGO_PARAM(FLOAT, "amp-lambda", amp_lambda), .def = 1.0, .max = 1e6, .metavar = "F",
     .help = "lambda: personalized penalty lambda/alpha toward the fused layers (Eq. 11)"},
    {PFL_ALGO_PARAM(FLOAT, "mu", mu), .def = 0.001, .max = 1e6, .metavar = "F",
     .help = "generic penalty mu toward the global layers >= r (Eq. 13)"},
    {PFL_ALGO_PARAM(INT, "cfr-layers", cfr_layers), .max = PFL_MAX_LAYERS, .metavar = "R|auto|NAMES",
     .help = "r: the first R layers (units of --layer-unit, each fused on its own) fused per client, the rest "
             "averaged (auto: the paper's 2 rows for the cnn, 1 for the dnn and any other model; or names: layer1.*)",
     .auto_value = cfr_layers_of, .def_auto = true, .layers = PFL_LAYERS_FIRST_UNITS},
};

const pfl_algo pfl_algo_pfedcfr = {
    .name = "pfedcfr",
    .description = "pFedCFR: first --cfr-layers layers fused per client by message passing, the rest averaged; "
                   "proximal terms lambda/alpha and mu (--amp-*, --mu, --local-steps)",
    PFL_PARAMS(pfedcfr_params),
    .has_global = true,
    .stateful = true,
    .personal = pfl_personal_unshared, /* nothing of the model: its fused layers are the server's */
    .create = cfr_create,
    .destroy = cfr_destroy,
    .receive = cfr_receive,
    .local_train = cfr_train,
    .whole_uploads = true, /* MPI: its aggregate reads whole uploads */
    .aggregate = cfr_aggregate,
    .save = cfr_save,
    .load = cfr_load,
};
