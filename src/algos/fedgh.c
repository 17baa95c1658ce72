/* FedGH (Yi, Wang, Liu, Shi, Yu, ACM MM 2023, "FedGH: Heterogeneous
 * Federated Learning with Generalized Global Header"), as PFLlib runs it
 * (clientgh.py, servergh.py): the server trains a generalized global
 * header, the model's last layer, from the clients' class-wise average
 * representations.
 *
 *  - Each client keeps its base (every layer below the last); at every
 *    round the server's header replaces the client's own.
 *  - Local training: the whole model by CE, as FedAvg's. The client then
 *    sends its prototypes: the per-class means of the features entering the
 *    header over its training split, the model in evaluation mode.
 *  - The server trains the header on the round's (prototype, class) pairs,
 *    shuffled, in batches of --batch: one pass of SGD at --gh-server-lr on
 *    the cross-entropy of header(prototype), from the header it sent
 *    (--gh-start global), or, as PFLlib's server, whose header is client
 *    0's model.head itself, from client 0's header as its training left it
 *    when client 0 trained this round (--gh-start client0, the default).
 *  - The personalized model is the client's base under the global header.
 *
 * The prototypes ride in the upload's message block (protos.h); the
 * header is the global model's last layer. docs/algorithms.md, "FedGH",
 * has the readings. */
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "algos/protos.h"
#include "util/err.h"

static int head_layer(const pfl_model *m) { return m->num_layers - 1; }

/* --gh-start client0 (NULL: the default) */
static bool from_client0(const pfl_fl *fl) {
    return !fl->cfg.algo.gh_start || strcmp(fl->cfg.algo.gh_start, "client0") == 0;
}

static int fedgh_blocks(const pfl_config *cfg, pfl_model *m) {
    (void)cfg;
    const pfl_op *last = &m->ops[m->num_ops - 1];
    if (m->num_layers < 2 || last->kind != PFL_OP_LINEAR || last->layer != head_layer(m) ||
        m->layers[head_layer(m)].num_tensors != 2 || m->layers[head_layer(m)].state_length != 0)
        return pfl_err("fedgh: model %s: the global header needs a network ending in a Linear layer with bias, "
                       "over at least one layer of its own",
                       m->name);
    return pfl_protos_add_block(m, "fedgh.protos", pfl_protos_feature_dim(m), 0, NULL);
}

static int fedgh_check(const pfl_config *cfg) {
    const pfl_modules_config *mod = &cfg->modules;
    const char *start = cfg->algo.gh_start;
    if (start && strcmp(start, "client0") != 0 && strcmp(start, "global") != 0)
        return pfl_err("--gh-start '%s': expected client0 or global", start);
    if (mod->flayer_mask)
        return pfl_err("--flayer-mask: fedgh's server reads the clients' prototypes, not their models, so there is "
                       "no uploaded model to mask");
    return 0;
}

/* The base stays with each client; the header and the message block are shared. */
static int fedgh_create(pfl_fl *fl) {
    pfl_protos_stash *s = pfl_calloc(1, sizeof *s);
    if (!(fl->algo_state = s)) return -1;
    for (int l = 0; l < head_layer(fl->model); l++) fl->shared[l] = false;
    return pfl_protos_stash_init(s, fl, pfl_protos_len(fl->model->classes, pfl_protos_dim(fl->model)));
}

/* FedAvg's local training (the message block frozen), then the prototypes. */
static void fedgh_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    const pfl_model *m = fl->model;
    pfl_step s = pfl_step_default(fl);
    bool frozen[PFL_MAX_LAYERS] = {false};
    frozen[m->num_layers] = true; /* the message block */
    s.opt.frozen = frozen;
    pfl_step_run(fl, client, w, model, &s, stats);
    pfl_protos_of_split(fl, w, client, model, head_layer(m), false, pfl_protos_stash_here(fl->algo_state, fl));
}

void pfl_fedgh_train_header(float *head, const float *protos, const uint8_t *labels, const int *order, int n, int D,
                            int C, int batch, float lr) {
    float *mem = pfl_malloc(sizeof(float) * ((size_t)batch * ((size_t)D + C) + (size_t)(D + 1) * C));
    uint8_t *y = pfl_malloc((size_t)batch);
    if (mem && y) {
        float *x = mem, *zeros = x + (size_t)batch * D, *grad = zeros + (size_t)batch * C;
        memset(zeros, 0, sizeof(float) * (size_t)batch * C);
        for (int start = 0; start < n; start += batch) {
            const int B = n - start < batch ? n - start : batch;
            for (int i = 0; i < B; i++) {
                memcpy(x + (size_t)i * D, protos + (size_t)order[start + i] * D, sizeof(float) * (size_t)D);
                y[i] = labels[order[start + i]];
            }
            /* SGD on the batch's mean cross-entropy of head(x): FedRoD's head step with no logits beside it */
            pfl_fedrod_head_step(head, x, zeros, y, B, D, C, lr, grad);
        }
    }
    free(mem);
    free(y);
}

/* The round's (prototype, class) pairs in slot then class order, shuffled
 * (PFLlib's DataLoader(shuffle=True)), train the header in the global model. */
static void fedgh_aggregate(pfl_fl *fl, const int *clients, int n, float *const *uploads) {
    const pfl_model *m = fl->model;
    const int C = m->classes, D = pfl_protos_dim(m);
    const pfl_layer *head = &m->layers[head_layer(m)];
    float *protos = pfl_malloc(sizeof(float) * (size_t)n * C * D);
    uint8_t *labels = pfl_malloc((size_t)n * C);
    int *order = pfl_malloc(sizeof(int) * (size_t)n * C), pairs = 0;
    if (protos && labels && order) {
        for (int k = 0; k < n; k++) {
            const float *set = pfl_protos_block_const(m, uploads[k]);
            for (int c = 0; c < C; c++) {
                if (!pfl_protos_has(set, C, D, c)) continue;
                memcpy(protos + (size_t)pairs * D, set + (size_t)c * D, sizeof(float) * (size_t)D);
                labels[pairs] = (uint8_t)c, order[pairs] = pairs;
                pairs++;
            }
            /* PFLlib: the server's header is client 0's, which its local training moved */
            if (clients[k] == 0 && from_client0(fl))
                memcpy(fl->global + head->offset, uploads[k] + head->offset, sizeof(float) * head->length);
        }
        pfl_rng rng = pfl_rng_stream(fl->cfg.seed, fl->round, PFL_RNG_NONE, PFL_RNG_ALGO);
        pfl_rng_shuffle(&rng, order, (size_t)pairs);
        pfl_fedgh_train_header(fl->global + head->offset, protos, labels, order, pairs, D, C, fl->cfg.batch,
                               fl->cfg.algo.gh_server_lr);
    }
    free(protos);
    free(labels);
    free(order);
}

/* Down: the header; up: one prototype per class the client has, and
 * under --gh-start client0 client 0's trained header, which the server's
 * training starts from. */
static void fedgh_message_bytes(const pfl_fl *fl, int client, const uint8_t *sent, const float *upload, uint64_t *down,
                                uint64_t *up) {
    (void)sent, (void)upload;
    const pfl_model *m = fl->model;
    const uint64_t header = 4 * (uint64_t)m->layers[head_layer(m)].length;
    *down = header;
    *up = pfl_protos_client_bytes(fl, client, pfl_protos_dim(m)) + (client == 0 && from_client0(fl) ? header : 0);
}

/* PFLlib's main.py: -slr/--server_learning_rate 1.0 ("SCAFFOLD / FedGH"). */
static const pfl_param fedgh_params[] = {
    {PFL_ALGO_PARAM(FLOAT, "gh-server-lr", gh_server_lr), .def = 1.0, .max = 1e6, .metavar = "F",
     .help = "learning rate of the server's SGD on the global header, one pass over the round's prototypes"},
    {PFL_ALGO_PARAM(STRING, "gh-start", gh_start), .def_text = "client0", .metavar = "client0|global",
     .help = "the header the server's training starts from: client0, client 0's header after its local training "
             "when it trained (PFLlib, whose server header is client 0's) | global, the header it last sent"},
};

const pfl_algo pfl_algo_fedgh = {
    .name = "fedgh",
    .description = "FedGH: personal bases; a global header trained on the server from the clients' class "
                   "prototypes (--gh-server-lr, --gh-start)",
    PFL_PARAMS(fedgh_params),
    .has_global = false, /* the global base is never trained */
    .stateful = true,
    .personal = pfl_personal_unshared, /* the base */
    .blocks = fedgh_blocks,
    .check = fedgh_check,
    .create = fedgh_create,
    .destroy = pfl_protos_exchange_destroy,
    .receive = pfl_receive_unshared_own,
    .local_train = fedgh_train,
    .upload = pfl_protos_upload,
    .whole_uploads = true, /* MPI: its aggregate reads the uploads' message blocks */
    .gather_shared = true,  /* ... and nothing else the clients keep */
    .aggregate = fedgh_aggregate,
    .message_bytes = fedgh_message_bytes,
};
