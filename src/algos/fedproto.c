/* FedProto (Tan, Long, Liu, Zhou, Lu, Jiang, Zhang, AAAI 2022, "FedProto:
 * Federated Prototype Learning across Heterogeneous Clients"), as PFLlib
 * runs it (clientproto.py, serverproto.py): "the clients and server
 * communicate the abstract class prototypes instead of the gradients".
 *
 *  - Each client keeps its whole model; no model leaves it.
 *  - Local training: CE + lambda MSE(rep, p_y), rep the features entering
 *    the last layer and p_y the global prototype of the sample's class
 *    (rep itself, no term, where there is none; no term at all before the
 *    first prototypes arrive). While it trains the client sums the features
 *    each batch trained with, per class: its prototypes are their means.
 *  - The server's global prototype of a class is the plain mean of the
 *    clients' prototypes of it, sent to every client.
 *  - The personalized model classifies a sample by the nearest global
 *    prototype (mean squared distance of its features); before any
 *    prototypes, it classifies nothing (PFLlib scores 0).
 *
 * The prototypes ride in the message block (protos.h): the client's in its
 * upload, the global ones in the global model's block, which is all the
 * server sends. docs/algorithms.md, "FedProto", has the readings. */
#include <math.h>

#include "algos/algos.h"
#include "algos/protos.h"

static int feature_layer(const pfl_model *m) { return m->num_layers - 1; }
static int dim(const pfl_model *m) { return pfl_protos_dim(m); }

static int fedproto_blocks(const pfl_config *cfg, pfl_model *m) {
    (void)cfg;
    return pfl_protos_add_feature_block(m, "fedproto", "fedproto.protos");
}

static int fedproto_check(const pfl_config *cfg) {
    return pfl_protos_refuse_modules(cfg, "fedproto", "exchanges class prototypes, never a model");
}

/* CE + lambda MSE toward the received prototypes (the model's message
 * block); the features of every batch summed per class. */
static void fedproto_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    const pfl_model *m = fl->model;
    pfl_protos_target t = {pfl_protos_block_const(m, model), m->classes, dim(m)};
    const pfl_loss_term mse = {.name = "fedproto's distance to the global prototypes", .at = feature_layer(m),
                               .weight = fl->cfg.algo.proto_lambda, .value = pfl_protos_mse_value, .ctx = &t};
    pfl_protos_train(fl, client, w, model, stats, feature_layer(m), &mse);
}

int pfl_fedproto_nearest(const float *set, int C, int D, const float *z) {
    int best = -1;
    double best_d = INFINITY;
    for (int c = 0; c < C; c++) {
        if (!pfl_protos_has(set, C, D, c)) continue;
        double d2 = 0.0;
        for (int d = 0; d < D; d++) {
            const double e = (double)z[d] - set[(size_t)c * D + d];
            d2 += e * e;
        }
        if (d2 / D < best_d) best_d = d2 / D, best = c; /* the first of equals, as torch.argmin */
    }
    return best;
}

/* The nearest global prototype of each sample's features. */
static int fedproto_personal_correct(const pfl_fl *fl, pfl_exec *x, const float *params) {
    return pfl_protos_count_correct(fl, x, params, pfl_fedproto_nearest);
}

/* PFLlib's main.py: -lam/--lamda 1.0. */
static const pfl_param fedproto_params[] = {
    {PFL_ALGO_PARAM(FLOAT, "proto-lambda", proto_lambda), .def = 1.0, .max = 1e6, .metavar = "F",
     .help = "weight lambda of the regularizer: the mean squared distance of the features to their class's global "
             "prototype"},
};

const pfl_algo pfl_algo_fedproto = {
    .name = "fedproto",
    .description = "FedProto: clients exchange class prototypes, not models; local loss pulls features to the "
                   "global prototypes; nearest-prototype prediction (--proto-lambda)",
    PFL_PARAMS(fedproto_params),
    .has_global = false, /* no model is ever averaged */
    .stateful = true,
    .personal = pfl_personal_unshared, /* the whole backbone; the message block is what the server sends */
    .blocks = fedproto_blocks,
    .check = fedproto_check,
    .create = pfl_protos_exchange_create, /* the state: a stash of the prototypes a client just made */
    .destroy = pfl_protos_exchange_destroy,
    .receive = pfl_receive_unshared_own,
    .local_train = fedproto_train,
    .upload = pfl_protos_upload,
    .whole_uploads = true, /* MPI: its aggregate reads the uploads' message blocks */
    .gather_shared = true,  /* ... and nothing else the clients keep */
    .aggregate = pfl_protos_aggregate,
    .personal_correct = fedproto_personal_correct,
    .message_bytes = pfl_protos_message_bytes,
};
