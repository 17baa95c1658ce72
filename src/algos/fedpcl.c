/* FedPCL (Tan, Long, Liu, Zhou, Lu, Zhang, NeurIPS 2022, "Federated
 * Learning from Pre-Trained Models: A Contrastive Learning Approach"), as
 * PFLlib runs it without pre-trained models (clientpcl.py, serverpcl.py):
 * the clients learn their own backbones by prototype-wise contrastive
 * learning and exchange only class prototypes.
 *
 *  - The model is the backbone without its last layer (PFLlib's
 *    model.fc = nn.Identity()): r = F.normalize(features entering the last
 *    layer). Each client keeps its whole model; no model leaves it.
 *  - A client's prototypes are the per-class means of r over its training
 *    split, the model in evaluation mode, made after its training; the
 *    first time a client is selected it only makes them (PFLlib trains a
 *    client once it has prototypes).
 *  - The server keeps every client's latest prototypes; the global
 *    prototype of a class is the plain mean of this round's uploads of it;
 *    every client's set is then padded with the global prototypes of the
 *    classes it lacks (a client that never uploaded: the global set), and
 *    the global set and all the clients' sets go to every client.
 *  - Local loss: L_g + L_p, L_g the cross-entropy of r . G^T / tau over the
 *    global prototypes G, L_p the mean over every client j of the
 *    cross-entropy of r . P_j^T / tau over client j's set; the gradient
 *    clipped to norm 10 (PFLlib's clip_grad_norm_), SGD at --lr.
 *  - The personalized model predicts argmax_c r . p_c over the client's own
 *    padded set (0 for a class without one); a client that never uploaded
 *    predicts nothing and counts 0 of its whole test split (PFLlib counts 0 of
 *    1e-5 samples, leaving it out of the accuracy: docs/algorithms.md).
 *
 * The client's prototypes ride in its upload's message block (protos.h),
 * the global ones in the global model's; the clients' sets are the
 * server's state here. docs/algorithms.md, "FedPCL", has the readings. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "algos/protos.h"
#include "util/err.h"

#define NORMALIZE_EPS 1e-12 /* F.normalize's default */
#define CLIP_NORM 10.0      /* PFLlib: clip_grad_norm_(self.model.parameters(), 10) "to prevent divergency" */

typedef struct {
    pfl_protos_stash stash; /* first: the prototypes a client just made, which its upload sends */
    float *sets;            /* clients x set: each client's set as the server holds it (padded) */
    bool *uploaded;         /* per client: it has uploaded once, so it trains when selected */
} fedpcl_state;

static int feature_layer(const pfl_model *m) { return m->num_layers - 1; }
static size_t set_len(const pfl_model *m) { return pfl_protos_len(m->classes, pfl_protos_dim(m)); }

static int fedpcl_blocks(const pfl_config *cfg, pfl_model *m) {
    (void)cfg;
    return pfl_protos_add_feature_block(m, "fedpcl", "fedpcl.protos");
}

static int fedpcl_check(const pfl_config *cfg) {
    return pfl_protos_refuse_modules(cfg, "fedpcl", "exchanges class prototypes, never a model");
}

static int fedpcl_create(pfl_fl *fl) {
    fedpcl_state *s = pfl_calloc(1, sizeof *s);
    if (!(fl->algo_state = s)) return -1;
    const size_t N = (size_t)fl->cfg.clients;
    if (pfl_protos_exchange_setup(fl, &s->stash) || !(s->sets = pfl_calloc(N * set_len(fl->model), sizeof(float))) ||
        !(s->uploaded = pfl_calloc(N, sizeof(bool))))
        return -1;
    return 0;
}

static void fedpcl_destroy(pfl_fl *fl) {
    fedpcl_state *s = fl->algo_state;
    pfl_protos_stash_free(&s->stash);
    free(s->sets);
    free(s->uploaded);
    free(s);
    fl->algo_state = NULL;
}

const float *pfl_fedpcl_set(const pfl_fl *fl, int client) {
    const fedpcl_state *s = fl->algo_state;
    return s->sets + (size_t)client * set_len(fl->model);
}

/* ---- the loss ---- */

/* r = z / max(||z||, eps) (D); returns the divisor. */
static double normalize(const float *z, int D, float *r) {
    double sq = 0.0;
    for (int d = 0; d < D; d++) sq += (double)z[d] * z[d];
    const double norm = sqrt(sq) > NORMALIZE_EPS ? sqrt(sq) : NORMALIZE_EPS;
    for (int d = 0; d < D; d++) r[d] = (float)(z[d] / norm);
    return norm;
}

/* The cross-entropy of r . P^T / tau over the set's classes for label y,
 * and `scale` times its gradient added into dr (D); 0 when the set lacks y. */
static double contrast(const float *set, int C, int D, const float *r, int y, double tau, double scale, float *dr,
                       double *logits) {
    if (!pfl_protos_has(set, C, D, y)) return 0.0;
    double zmax = -INFINITY, sum = 0.0;
    for (int c = 0; c < C; c++) {
        if (!pfl_protos_has(set, C, D, c)) continue;
        double dot = 0.0;
        for (int d = 0; d < D; d++) dot += (double)r[d] * set[(size_t)c * D + d];
        logits[c] = dot / tau, zmax = logits[c] > zmax ? logits[c] : zmax;
    }
    for (int c = 0; c < C; c++)
        if (pfl_protos_has(set, C, D, c)) sum += exp(logits[c] - zmax);
    for (int c = 0; c < C; c++) {
        if (!pfl_protos_has(set, C, D, c)) continue;
        const double g = scale * (exp(logits[c] - zmax) / sum - (c == y)) / tau;
        for (int d = 0; d < D; d++) dr[d] += (float)(g * set[(size_t)c * D + d]);
    }
    return log(sum) + zmax - logits[y];
}

double pfl_fedpcl_loss(const float *global, const float *sets, int clients, int C, int D, double tau, const float *z,
                       const uint8_t *labels, int B, float *dz) {
    float *r = pfl_malloc(sizeof(float) * 2 * (size_t)D);
    double *logits = pfl_malloc(sizeof(double) * (size_t)C);
    if (!r || !logits) {
        free(r), free(logits);
        return 0.0;
    }
    float *dr = r + D;
    const size_t len = pfl_protos_len(C, D);
    double loss = 0.0;
    for (int n = 0; n < B; n++) {
        const double norm = normalize(z + (size_t)n * D, D, r);
        memset(dr, 0, sizeof(float) * (size_t)D);
        loss += contrast(global, C, D, r, labels[n], tau, 1.0 / B, dr, logits); /* L_g */
        for (int j = 0; j < clients; j++)                                          /* L_p */
            loss += contrast(sets + (size_t)j * len, C, D, r, labels[n], tau, 1.0 / ((double)B * clients), dr,
                             logits) /
                    clients;
        /* through the normalization: dz = (dr - r <r, dr>) / ||z|| */
        double dot = 0.0;
        if (norm > NORMALIZE_EPS)
            for (int d = 0; d < D; d++) dot += (double)r[d] * dr[d];
        for (int d = 0; d < D; d++) dz[(size_t)n * D + d] += (float)((dr[d] - r[d] * dot) / norm);
    }
    free(r), free(logits);
    return loss / B;
}

typedef struct {
    const pfl_fl *fl;
    const float *global; /* the global prototypes the client received */
} pcl_term;

static double pcl_term_value(void *ctx, const pfl_term_batch *b, float *dz, int *correct) {
    (void)correct;
    const pcl_term *t = ctx;
    const fedpcl_state *s = t->fl->algo_state;
    return pfl_fedpcl_loss(t->global, s->sets, t->fl->cfg.clients, t->fl->model->classes, (int)b->n,
                           t->fl->cfg.algo.pcl_tau, b->z, b->labels, b->B, dz);
}

void pfl_fedpcl_clip(void *ctx, const pfl_model *m, const float *params, float *grads) {
    (void)ctx, (void)params;
    double sq = 0.0;
    for (size_t i = 0; i < m->num_params; i++) sq += (double)grads[i] * grads[i];
    const double coef = CLIP_NORM / (sqrt(sq) + 1e-6);
    if (coef < 1.0)
        for (size_t i = 0; i < m->num_params; i++) grads[i] = (float)(grads[i] * coef);
}

/* The set the personalized model uses after this training: the client's
 * new prototypes, padded with the received global ones. */
static void pad(float *set, const float *global, int C, int D) {
    float *present = set + (size_t)C * D;
    for (int c = 0; c < C; c++)
        if (!pfl_protos_has(set, C, D, c) && pfl_protos_has(global, C, D, c)) {
            memcpy(set + (size_t)c * D, global + (size_t)c * D, sizeof(float) * (size_t)D);
            present[c] = 1.0f;
        }
}

/* A client that has uploaded before trains on L_g + L_p (the last layer,
 * which PFLlib replaces by the identity, and the message block frozen);
 * every client then makes its prototypes. */
static void fedpcl_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    fedpcl_state *s = fl->algo_state;
    const pfl_model *m = fl->model;
    const int C = m->classes, D = pfl_protos_dim(m);
    float *block = pfl_protos_block(m, model), *mine = pfl_protos_stash_here(&s->stash, fl);
    if (s->uploaded[client]) {
        pfl_step step = pfl_step_default(fl);
        step.ce_weight = 0.0;
        bool frozen[PFL_MAX_LAYERS] = {false};
        frozen[m->num_layers - 1] = frozen[m->num_layers] = true;
        step.opt.frozen = frozen;
        pcl_term t = {fl, block};
        const pfl_loss_term term = {.name = "fedpcl's prototype-wise contrastive loss", .at = feature_layer(m),
                                    .weight = 1.0f, .value = pcl_term_value, .ctx = &t};
        pfl_step_add_term(&step, &term);
        pfl_step_add_grad(&step, pfl_fedpcl_clip, NULL);
        pfl_step_run(fl, client, w, model, &step, stats);
    }
    if (pfl_protos_of_split(fl, w, client, model, feature_layer(m), true, mine)) return; /* out of memory */
    memcpy(block, mine, sizeof(float) * set_len(m));
    pad(block, pfl_protos_block_const(m, fl->global), C, D);
}

/* The global set, then each uploading client's set, then every set padded. */
static void fedpcl_aggregate(pfl_fl *fl, const int *clients, int n, float *const *uploads) {
    fedpcl_state *s = fl->algo_state;
    const pfl_model *m = fl->model;
    const int C = m->classes, D = pfl_protos_dim(m);
    const size_t len = set_len(m);
    pfl_protos_aggregate(fl, clients, n, uploads);
    for (int k = 0; k < n; k++) {
        memcpy(s->sets + (size_t)clients[k] * len, pfl_protos_block_const(m, uploads[k]), sizeof(float) * len);
        s->uploaded[clients[k]] = true;
    }
    const float *global = pfl_protos_block_const(m, fl->global);
    for (int c = 0; c < fl->cfg.clients; c++) pad(s->sets + (size_t)c * len, global, C, D);
}

/* The client's own padded set as the server holds it, in the message block
 * of its model (none before its first upload). */
static const float *fedpcl_personal_model(pfl_fl *fl, int client, float *scratch) {
    const fedpcl_state *s = fl->algo_state;
    const pfl_model *m = fl->model;
    const float *own = pfl_client_model_get(fl, client, scratch);
    if (own != scratch) memcpy(scratch, own, pfl_model_vector_len(m) * sizeof(float));
    float *block = pfl_protos_block(m, scratch);
    if (s->uploaded[client]) memcpy(block, pfl_fedpcl_set(fl, client), sizeof(float) * set_len(m));
    else memset(block, 0, sizeof(float) * set_len(m));
    return scratch;
}

int pfl_fedpcl_predict(const float *set, int C, int D, const float *z) {
    if (pfl_protos_count(set, C, D) == 0) return -1;
    double r_norm = 0.0, best = 0.0;
    for (int d = 0; d < D; d++) r_norm += (double)z[d] * z[d];
    r_norm = sqrt(r_norm) > NORMALIZE_EPS ? sqrt(r_norm) : NORMALIZE_EPS;
    int arg = 0;
    for (int c = 0; c < C; c++) {
        double dot = 0.0; /* torch.zeros: 0 for a class without a prototype */
        if (pfl_protos_has(set, C, D, c))
            for (int d = 0; d < D; d++) dot += (double)(float)(z[d] / r_norm) * set[(size_t)c * D + d];
        if (c == 0 || dot > best) best = dot, arg = c; /* the first of equals, as torch.argmax */
    }
    return arg;
}

static int fedpcl_personal_correct(const pfl_fl *fl, pfl_exec *x, const float *params) {
    return pfl_protos_count_correct(fl, x, params, pfl_fedpcl_predict);
}

/* Down: the global set and every client's set, as the client received them
 * for this round (before this round's aggregation); up: its prototypes. */
static void fedpcl_message_bytes(const pfl_fl *fl, int client, const uint8_t *sent, const float *upload, uint64_t *down,
                                uint64_t *up) {
    const pfl_model *m = fl->model;
    const int C = m->classes, D = pfl_protos_dim(m);
    pfl_protos_message_bytes(fl, client, sent, upload, down, up);
    /* counted here for each client (the clients train in parallel): N x C presence flags */
    for (int c = 0; c < fl->cfg.clients; c++) *down += pfl_protos_bytes(pfl_fedpcl_set(fl, c), C, D);
}

static int fedpcl_save(const pfl_fl *fl, pfl_ckpt_writer *w) {
    const fedpcl_state *s = fl->algo_state;
    const size_t N = (size_t)fl->cfg.clients;
    return pfl_ckpt_put_f32(w, "fedpcl.sets", s->sets, N * set_len(fl->model)) ||
                   pfl_ckpt_put_bool(w, "fedpcl.uploaded", s->uploaded, N)
               ? -1
               : 0;
}

static int fedpcl_load(pfl_fl *fl, pfl_ckpt_reader *r) {
    fedpcl_state *s = fl->algo_state;
    const size_t N = (size_t)fl->cfg.clients;
    return pfl_ckpt_get_f32(r, "fedpcl.sets", s->sets, N * set_len(fl->model)) ||
                   pfl_ckpt_get_bool(r, "fedpcl.uploaded", s->uploaded, N)
               ? -1
               : 0;
}

/* PFLlib's main.py: -tau/--tau 1.0. */
static const pfl_param fedpcl_params[] = {
    {PFL_ALGO_PARAM(FLOAT, "pcl-tau", pcl_tau), .def = 1.0, .min = 0, .min_exclusive = true, .max = 1e6,
     .metavar = "F", .help = "temperature tau of the similarities r . p / tau in the contrastive losses"},
};

const pfl_algo pfl_algo_fedpcl = {
    .name = "fedpcl",
    .description = "FedPCL (without pre-trained models): prototype-wise contrastive learning against the global "
                   "and every client's class prototypes; prototypes exchanged, not models (--pcl-tau)",
    PFL_PARAMS(fedpcl_params),
    .has_global = false, /* no model is ever averaged */
    .stateful = true,
    .personal = pfl_personal_unshared, /* the whole backbone; the message block is what the server sends */
    .blocks = fedpcl_blocks,
    .check = fedpcl_check,
    .create = fedpcl_create,
    .destroy = fedpcl_destroy,
    .receive = pfl_receive_unshared_own,
    .local_train = fedpcl_train,
    .upload = pfl_protos_upload,
    .whole_uploads = true, /* MPI: its aggregate reads the uploads' message blocks */
    .gather_shared = true,  /* ... and nothing else the clients keep */
    .aggregate = fedpcl_aggregate,
    .personal_model = fedpcl_personal_model,
    .personal_correct = fedpcl_personal_correct,
    .message_bytes = fedpcl_message_bytes,
    .save = fedpcl_save,
    .load = fedpcl_load,
};
