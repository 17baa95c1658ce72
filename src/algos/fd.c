/* FD, Federated Distillation (Jeong, Oh, Kim, Park, Kim, Bennis, 2018,
 * "Communication-Efficient On-Device Machine Learning: Federated
 * Distillation and Augmentation under Non-IID Private Data"), as PFLlib
 * runs it (clientfd.py, serverfd.py): the clients exchange per-class
 * average logits, not models.
 *
 *  - Each client keeps its whole model; no model leaves it.
 *  - Local training: CE(o, y) + lambda CE(o, t), o the logits and t the
 *    global average logit vector of the sample's class taken as the soft
 *    target of PyTorch's cross-entropy (-sum_c t_c log softmax(o)_c, the raw
 *    logits, not their softmax; --fd-target softmax: their softmax), or o
 *    itself, detached, where the class has none; no second term before the
 *    first global logits arrive. While it trains the client sums the logits
 *    each batch trained with, per class: its messages are their means.
 *  - The server's global logit vector of a class is the plain mean of the
 *    clients' of it, sent to every client.
 *  - The personalized model is the client's model.
 *
 * The logits ride in the message block (protos.h: a prototype set whose
 * dimension is the number of classes). docs/algorithms.md, "FD", has the
 * readings. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "algos/protos.h"
#include "util/err.h"

static int fd_blocks(const pfl_config *cfg, pfl_model *m) {
    (void)cfg;
    return pfl_protos_add_block(m, "fd.logits", m->classes, 0, NULL);
}

static int fd_check(const pfl_config *cfg) {
    const char *target = cfg->algo.fd_target;
    if (target && strcmp(target, "logits") != 0 && strcmp(target, "softmax") != 0)
        return pfl_err("--fd-target '%s': expected logits or softmax", target);
    return pfl_protos_refuse_modules(cfg, "fd", "exchanges per-class average logits, never a model");
}

/* Into p (C): softmax(z); returns log sum_c exp(z_c). */
static double softmax_of(const float *z, int C, double *p) {
    double zmax = -INFINITY, sum = 0.0;
    for (int c = 0; c < C; c++) zmax = z[c] > zmax ? z[c] : zmax;
    for (int c = 0; c < C; c++) sum += exp((double)z[c] - zmax);
    const double log_sum = log(sum) + zmax;
    for (int c = 0; c < C; c++) p[c] = exp((double)z[c] - log_sum);
    return log_sum;
}

double pfl_fd_soft_ce(const float *global, int C, const float *o, const uint8_t *labels, int B, bool softmax,
                      float *dz) {
    double p[256], t[256]; /* labels are bytes: C <= 256 */
    double loss = 0.0;
    for (int n = 0; n < B; n++) {
        const float *z = o + (size_t)n * C;
        /* the target: the class's global logits, or the sample's own (detached) */
        const float *target = pfl_protos_has(global, C, C, labels[n]) ? global + (size_t)labels[n] * C : z;
        if (softmax) softmax_of(target, C, t);
        else
            for (int c = 0; c < C; c++) t[c] = target[c];
        const double log_sum = softmax_of(z, C, p);
        double mass = 0.0;
        for (int c = 0; c < C; c++) mass += t[c];
        for (int c = 0; c < C; c++) {
            loss -= t[c] * ((double)z[c] - log_sum);
            dz[(size_t)n * C + c] += (float)((mass * p[c] - t[c]) / B);
        }
    }
    return loss / B;
}

typedef struct {
    const float *global; /* the global logits the client received */
    bool softmax;
} distill;

static double distill_term(void *ctx, const pfl_term_batch *b, float *dz, int *correct) {
    (void)correct;
    const distill *d = ctx;
    return pfl_fd_soft_ce(d->global, (int)b->n, b->z, b->labels, b->B, d->softmax, dz);
}

/* --fd-target softmax (NULL: the default, logits) */
static bool softmax_target(const pfl_config *cfg) { return cfg->algo.fd_target && !strcmp(cfg->algo.fd_target, "softmax"); }

/* CE + lambda CE toward the received global logits (the model's message
 * block); each batch's logits summed per class. */
static void fd_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    distill d = {pfl_protos_block_const(fl->model, model), softmax_target(&fl->cfg)};
    const pfl_loss_term kd = {.name = "fd's distillation toward the global logits", .at = PFL_AT_LOGITS,
                              .weight = fl->cfg.algo.fd_lambda, .value = distill_term, .ctx = &d};
    pfl_protos_train(fl, client, w, model, stats, PFL_AT_LOGITS, &kd);
}

/* PFLlib's main.py: -lam/--lamda 1.0. */
static const pfl_param fd_params[] = {
    {PFL_ALGO_PARAM(FLOAT, "fd-lambda", fd_lambda), .def = 1.0, .max = 1e6, .metavar = "F",
     .help = "weight lambda of the distillation term toward the global average logits of the sample's class"},
    {PFL_ALGO_PARAM(STRING, "fd-target", fd_target), .def_text = "logits", .metavar = "logits|softmax",
     .help = "the distillation's soft target: logits, the global average logits as they are (PFLlib) | softmax, "
             "their softmax (a distribution, as knowledge distillation's soft targets)"},
};

const pfl_algo pfl_algo_fd = {
    .name = "fd",
    .description = "FD (Federated Distillation): clients exchange per-class average logits, not models, and "
                   "distil toward the global ones (--fd-lambda, --fd-target)",
    PFL_PARAMS(fd_params),
    .has_global = false, /* no model is ever averaged */
    .stateful = true,
    .personal = pfl_personal_unshared, /* the whole backbone; the message block is what the server sends */
    .blocks = fd_blocks,
    .check = fd_check,
    .create = pfl_protos_exchange_create, /* the state: a stash of the logits a client just averaged */
    .destroy = pfl_protos_exchange_destroy,
    .receive = pfl_receive_unshared_own,
    .local_train = fd_train,
    .upload = pfl_protos_upload,
    .whole_uploads = true, /* MPI: its aggregate reads the uploads' message blocks */
    .gather_shared = true,  /* ... and nothing else the clients keep */
    .aggregate = pfl_protos_aggregate,
    .message_bytes = pfl_protos_message_bytes,
};
