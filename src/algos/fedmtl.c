/* FedMTL as PFLlib has it (servermtl.py, clientmtl.py: "FedMTL (not
 * MOCHA)", after Smith et al., NeurIPS 2017, "Federated Multi-Task
 * Learning"). Each client keeps its own model, which it never replaces with
 * anything the server sends (PFLlib's set_parameters takes no model). Each
 * round the server stacks the selected clients' models, as they stand, into
 * the columns of W (dim x m, m the clients a round selects) and sends W with
 * omega = 1 - 1/m (the square root of the [0][0] element of (I - 11^T/m)^2);
 * client k trains its model w on
 *
 *   CE + 10^-f (||W||_F^2 + sum_r (omega sum_c W_rc)^2),  W's column k = w,
 *
 * f = floor(log10(dim) + 1) + 1 (10^-7 for the cnn's 582,026 numbers).
 *
 * Two readings (docs/algorithms.md, "FedMTL"): PFLlib writes w into W from
 * model.state_dict(), whose tensors are detached, so the regularizer adds a
 * constant to the loss and no gradient: FedMTL trains each model on its
 * cross-entropy alone, as Local does (the default). --mtl-reg-grad lets the
 * gradient through w's column, 10^-f (2 w + 2 omega^2 S), S = sum_c W_rc
 * (the model the loss written above asks for), as a proximal term: with
 * O = S - w the other columns,
 *
 *   10^-f (2 w + 2 omega^2 (w + O)) = mu (w - a),
 *   mu = 2 10^-f (1 + omega^2),  a = -omega^2 O / (1 + omega^2).
 *
 * The other columns are the server's latest copy of each selected client's
 * model (its last upload, or the initial model), a per-client store of the
 * method's, checkpointed. Messages (PFLlib's): each selected client's model
 * up, W (m models) down. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "fl/fl.h" /* pfl_select_clients: the round's selection, W's columns */
#include "util/err.h"

typedef struct {
    pfl_store *models; /* --mtl-reg-grad: per client, its model as the server last received it */
} fedmtl_state;

static size_t vector_len(const pfl_fl *fl) { return pfl_model_vector_len(fl->model); }

/* The server reads whole uploads; a masked one would leave W's elements unknown. */
static int fedmtl_check(const pfl_config *cfg) {
    if (cfg->modules.flayer_mask)
        return pfl_err("--flayer-mask: fedmtl's server stacks each client's whole model into W for the others; a "
                       "masked upload leaves the unsent elements unknown");
    return 0;
}

/* No layer is averaged: each client's model is its own (--ala and
 * --flayer-agg then find nothing sent to mix; pfl_fl_create says so). */
static int fedmtl_create(pfl_fl *fl) {
    for (int l = 0; l < pfl_model_rows(fl->model); l++) fl->shared[l] = false;
    fedmtl_state *s = pfl_calloc(1, sizeof *s);
    if (!(fl->algo_state = s)) return -1;
    if (!fl->cfg.algo.mtl_reg_grad) return 0;
    return (s->models = pfl_fl_store(fl, "fedmtl-models", fl->cfg.clients, vector_len(fl), fl->global)) ? 0 : -1;
}

static void fedmtl_destroy(pfl_fl *fl) {
    free(fl->algo_state);
    fl->algo_state = NULL;
}

double pfl_fedmtl_scale(const pfl_model *m) {
    /* PFLlib flattens the state_dict: parameters, running statistics and
     * each BatchNorm's num_batches_tracked */
    size_t dim = pfl_model_vector_len(m);
    for (int l = 0; l < m->num_layers; l++) dim += m->layers[l].state_length > 0;
    const int f = (int)(log10((double)dim) + 1.0) + 1;
    return pow(10.0, -f);
}

void pfl_fedmtl_prox(double scale, int m, const float *others, size_t n, float *mu, float *anchor) {
    const double omega = 1.0 - 1.0 / m, w2 = omega * omega;
    *mu = (float)(2.0 * scale * (1.0 + w2));
    for (size_t j = 0; j < n; j++) anchor[j] = (float)(-w2 / (1.0 + w2) * others[j]);
}

/* The sum of the other selected clients' columns of W, into `others` (P floats). */
static int other_columns(pfl_fl *fl, int client, float *others) {
    const fedmtl_state *s = fl->algo_state;
    const size_t P = fl->model->num_params;
    int *selected = pfl_malloc(sizeof(int) * (size_t)fl->cfg.clients);
    if (!selected) return -1;
    const int m = pfl_select_clients(&fl->cfg, fl->round, selected); /* PFLlib's W: every selected client */
    memset(others, 0, P * sizeof(float));
    for (int k = 0; k < m; k++) {
        if (selected[k] == client) continue;
        const float *w = pfl_store_read(s->models, selected[k]);
        for (size_t j = 0; j < P; j++) others[j] += w[j];
    }
    free(selected);
    return m;
}

static void fedmtl_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    pfl_step s = pfl_step_default(fl);
    if (fl->cfg.algo.mtl_reg_grad) {
        const int m = other_columns(fl, client, w->aux);
        if (m < 0) return; /* out of memory: this client does not train */
        float mu;
        pfl_fedmtl_prox(pfl_fedmtl_scale(fl->model), m, w->aux, fl->model->num_params, &mu, w->aux);
        pfl_step_add_prox(&s, mu, w->aux, 0, fl->model->num_params);
    }
    pfl_step_run(fl, client, w, model, &s, stats);
}

/* The server keeps each client's model as uploaded: next round's W. */
static void fedmtl_aggregate(pfl_fl *fl, const int *clients, int n, float *const *uploads) {
    const fedmtl_state *s = fl->algo_state;
    if (!s->models) return; /* PFLlib's reading: W is sent but changes no training */
    for (int k = 0; k < n; k++) {
        float *row = pfl_store_write(s->models, clients[k]);
        if (!row) return; /* the store's error fails the round */
        memcpy(row, uploads[k], sizeof(float) * vector_len(fl));
    }
}

/* PFLlib's messages: the client's model up; W, the m selected clients'
 * models, down (omega is 1 - 1/m, a number the client knows). */
static void fedmtl_message_bytes(const pfl_fl *fl, int client, const uint8_t *sent, const float *upload, uint64_t *down,
                                 uint64_t *up) {
    (void)client, (void)sent, (void)upload;
    const uint64_t model = 4 * (uint64_t)vector_len(fl);
    *up = model;
    *down = (uint64_t)pfl_clients_per_round(&fl->cfg) * model;
}

static int fedmtl_save(const pfl_fl *fl, pfl_ckpt_writer *w) {
    const fedmtl_state *s = fl->algo_state;
    return s->models ? pfl_store_save(s->models, w, "fedmtl.models") : 0;
}

static int fedmtl_load(pfl_fl *fl, pfl_ckpt_reader *r) {
    fedmtl_state *s = fl->algo_state;
    return s->models ? pfl_store_load(s->models, r, "fedmtl.models") : 0;
}

static const pfl_param fedmtl_params[] = {
    {PFL_ALGO_PARAM(BOOL, "mtl-reg-grad", mtl_reg_grad),
     .help = "let the regularizer 10^-f (||W||^2 + sum_r (omega sum_c W_rc)^2) reach the model through its own "
             "column of W (PFLlib copies a detached state_dict there: no gradient, each client trains as Local)"},
};

const pfl_algo pfl_algo_fedmtl = {
    .name = "fedmtl",
    .description = "FedMTL (PFLlib's, not MOCHA): each client its own model, regularized toward the round's "
                   "stack W of client models (--mtl-reg-grad; PFLlib's regularizer has no gradient)",
    PFL_PARAMS(fedmtl_params),
    .has_global = false,
    .stateful = true,
    .keeps_state = true,
    .whole_uploads = true,
    .check = fedmtl_check,
    .create = fedmtl_create,
    .destroy = fedmtl_destroy,
    .local_train = fedmtl_train,
    .aggregate = fedmtl_aggregate,
    .message_bytes = fedmtl_message_bytes,
    .save = fedmtl_save,
    .load = fedmtl_load,
};
