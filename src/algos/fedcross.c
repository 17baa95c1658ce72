/* FedCross (Hu, Chen, Wang, Wei, Ding, Li, ICDE 2024, "FedCross: Towards
 * Accurate Federated Learning via Multi-Model Cross-Aggregation"), as
 * PFLlib's servercross.py runs it: the server keeps K middleware models (K
 * the clients of a round), all the initial model at first. Each round:
 *
 *  - the selected clients, in a random order, each train one middleware
 *    model (the k-th client the k-th model), which their upload replaces;
 *  - the global model is FedAvg's mean of the uploads (the model evaluated);
 *  - the similarity of every two middleware models is the sum over layers of
 *    the cosine of their parameters (the last layer counted twice, as
 *    PFLlib's loop counts it), and each model j is replaced by
 *    alpha w_j + (1 - alpha) w_c, w_c its collaborator: the least similar
 *    model (--fedcross-select 1, the default), a rotating one (0) or the
 *    most similar one (2); all from the models before this step;
 *  - before round --fedcross-first-stage + 1 every middleware model becomes
 *    the global one instead.
 *
 * The middleware models are server state, the same on every rank (every
 * upload travels whole), checkpointed. docs/algorithms.md has the readings. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "fl/fl.h" /* pfl_select_clients: method.h does not tell a hook the round's clients */
#include "util/err.h"

typedef struct {
    int K;
    float *models; /* K whole model vectors */
} fedcross_state;

static float *middleware(const fedcross_state *s, const pfl_fl *fl, int k) {
    return s->models + (size_t)k * pfl_model_vector_len(fl->model);
}

static int fedcross_check(const pfl_config *cfg) {
    const pfl_modules_config *m = &cfg->modules;
    if (pfl_clients_per_round(cfg) < 2)
        return pfl_err("--join %g: fedcross cross-aggregates the round's middleware models, one per client, so it "
                       "needs at least 2 clients a round",
                       cfg->join);
    if (cfg->drop_rate > 0.0)
        return pfl_err("--drop-rate %g: fedcross gives each selected client one middleware model, which a client "
                       "that drops out would never return (PFLlib: 'client_drop_rate should be 0')",
                       cfg->drop_rate);
    if (m->ala || m->flayer_agg)
        return pfl_err("%s: a fedcross client receives a middleware model, not the global one the module mixes "
                       "with its own",
                       m->ala ? "--ala" : "--flayer-agg");
    if (m->flayer_mask)
        return pfl_err("--flayer-mask: fedcross's middleware models are the clients' whole uploads");
    return 0;
}

static int fedcross_create(pfl_fl *fl) {
    fedcross_state *s = pfl_calloc(1, sizeof *s);
    if (!(fl->algo_state = s)) return -1;
    s->K = pfl_clients_per_round(&fl->cfg);
    const size_t V = pfl_model_vector_len(fl->model);
    if (!(s->models = pfl_malloc(sizeof(float) * V * (size_t)s->K))) return -1;
    for (int k = 0; k < s->K; k++) memcpy(middleware(s, fl, k), fl->global, V * sizeof(float));
    return 0;
}

static void fedcross_destroy(pfl_fl *fl) {
    fedcross_state *s = fl->algo_state;
    if (s) free(s->models);
    free(s);
    fl->algo_state = NULL;
}

int pfl_fedcross_slot(const pfl_config *cfg, int round, int client) {
    int *selected = pfl_malloc(sizeof(int) * (size_t)cfg->clients * 2);
    if (!selected) return -1;
    int *order = selected + cfg->clients;
    const int n = pfl_select_clients(cfg, round, selected);
    for (int k = 0; k < n; k++) order[k] = k;
    pfl_rng r = pfl_rng_stream(cfg->seed, round, PFL_RNG_NONE, PFL_RNG_ALGO);
    pfl_rng_shuffle(&r, order, (size_t)n);
    int slot = -1;
    for (int k = 0; k < n; k++)
        if (selected[order[k]] == client) slot = k;
    free(selected);
    return slot;
}

/* The client trains the middleware model its place in the round's random order gives it. */
static void fedcross_init(pfl_fl *fl, int client, float *model) {
    const fedcross_state *s = fl->algo_state;
    const int slot = pfl_fedcross_slot(&fl->cfg, fl->round, client);
    memcpy(model, slot >= 0 ? middleware(s, fl, slot) : fl->global, pfl_model_vector_len(fl->model) * sizeof(float));
}

static double cosine(const float *a, const float *b, size_t n) {
    double ab = 0.0, aa = 0.0, bb = 0.0;
    for (size_t i = 0; i < n; i++) ab += (double)a[i] * b[i], aa += (double)a[i] * a[i], bb += (double)b[i] * b[i];
    return ab / (fmax(sqrt(aa), 1e-8) * fmax(sqrt(bb), 1e-8));
}

double pfl_fedcross_similarity(const pfl_model *m, const float *a, const float *b) {
    double s = 0.0;
    for (int l = 0; l < m->num_layers; l++) {
        const size_t off = m->layers[l].offset, len = m->layers[l].length;
        s += cosine(a + off, b + off, len);
        if (l == m->num_layers - 1) s += cosine(a + off, b + off, len);
    }
    return s;
}

int pfl_fedcross_collaborator(const double *sim, int K, int j, int strategy, int round) {
    const double *row = sim + (size_t)j * (size_t)K; /* row[j] is 0, as PFLlib's table leaves it */
    if (strategy == 0) return (j + (round - 1) % (K - 1) + 1) % K;
    int best = strategy == 2 ? 0 : (j + 1) % K;
    for (int p = 0; p < K; p++) {
        if (strategy == 2 ? row[p] > row[best] : (row[p] < row[best] && p != j)) best = p;
    }
    return best;
}

/* w_j <- alpha w_j + (1 - alpha) w_c over the parameters, every j from the models before the step. */
static void cross_aggregate(pfl_fl *fl, fedcross_state *s) {
    const pfl_model *m = fl->model;
    const int K = s->K;
    const size_t V = pfl_model_vector_len(m), P = m->num_params;
    const double alpha = fl->cfg.algo.fedcross_alpha;
    double *sim = pfl_calloc((size_t)K * (size_t)K, sizeof(double));
    float *before = pfl_malloc(sizeof(float) * V * (size_t)K);
    if (!sim || !before) {
        free(sim), free(before);
        return; /* out of memory: the middleware models stay as trained */
    }
    memcpy(before, s->models, sizeof(float) * V * (size_t)K);
    for (int k = 0; k < K; k++)
        for (int j = 0; j < k; j++)
            sim[(size_t)k * K + j] = sim[(size_t)j * K + k] =
                pfl_fedcross_similarity(m, before + (size_t)k * V, before + (size_t)j * V);
    for (int j = 0; j < K; j++) {
        const int c = pfl_fedcross_collaborator(sim, K, j, fl->cfg.algo.fedcross_select, fl->round);
        const float *wj = before + (size_t)j * V, *wc = before + (size_t)c * V;
        float *out = middleware(s, fl, j);
        for (size_t i = 0; i < P; i++) out[i] = (float)(alpha * wj[i] + (1.0 - alpha) * wc[i]);
    }
    free(sim), free(before);
}

static void fedcross_aggregate(pfl_fl *fl, const int *clients, int n, float *const *uploads) {
    fedcross_state *s = fl->algo_state;
    const size_t V = pfl_model_vector_len(fl->model);
    for (int k = 0; k < n; k++) {
        const int slot = pfl_fedcross_slot(&fl->cfg, fl->round, clients[k]);
        if (slot >= 0) memcpy(middleware(s, fl, slot), uploads[k], V * sizeof(float));
    }
    pfl_default_aggregate(fl, clients, n, uploads);
    if (fl->round - 1 >= fl->cfg.algo.fedcross_first_stage) {
        cross_aggregate(fl, s);
    } else {
        for (int k = 0; k < s->K; k++) memcpy(middleware(s, fl, k), fl->global, V * sizeof(float));
    }
}

const float *pfl_fedcross_middleware(const pfl_fl *fl, int k) { return middleware(fl->algo_state, fl, k); }

static int fedcross_save(const pfl_fl *fl, pfl_ckpt_writer *w) {
    const fedcross_state *s = fl->algo_state;
    return pfl_ckpt_put_f32(w, "fedcross.middleware", s->models, pfl_model_vector_len(fl->model) * (size_t)s->K);
}

static int fedcross_load(pfl_fl *fl, pfl_ckpt_reader *r) {
    fedcross_state *s = fl->algo_state;
    return pfl_ckpt_get_f32(r, "fedcross.middleware", s->models, pfl_model_vector_len(fl->model) * (size_t)s->K);
}

/* PFLlib's main.py: -ca 0.99, -cmss 1, -fsb 0. */
static const pfl_param fedcross_params[] = {
    {PFL_ALGO_PARAM(FLOAT, "fedcross-alpha", fedcross_alpha), .def = 0.99, .max = 1, .metavar = "F",
     .help = "alpha, the weight a middleware model keeps of itself in the cross-aggregation"},
    {PFL_ALGO_PARAM(INT, "fedcross-select", fedcross_select), .def = 1, .min = 0, .max = 2, .metavar = "S",
     .help = "collaborative model selection: 0 in turn, 1 the least similar (lowest cosine), 2 the most similar"},
    {PFL_ALGO_PARAM(INT, "fedcross-first-stage", fedcross_first_stage), .def = 0, .min = 0, .max = 1000000,
     .metavar = "R", .help = "rounds whose middleware models all become the global model before cross-aggregation "
                             "begins"},
};

const pfl_algo pfl_algo_fedcross = {
    .name = "fedcross",
    .description = "FedCross: one middleware model per client of a round, cross-aggregated with a collaborator "
                   "(--fedcross-*)",
    PFL_PARAMS(fedcross_params),
    .has_global = true,
    .whole_uploads = true,
    .check = fedcross_check,
    .create = fedcross_create,
    .destroy = fedcross_destroy,
    .local_init = fedcross_init,
    .aggregate = fedcross_aggregate,
    .save = fedcross_save,
    .load = fedcross_load,
};
