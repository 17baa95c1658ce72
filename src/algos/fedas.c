/* FedAS (Yang, Huang, Ye, CVPR 2024, "FedAS: Bridging Inconsistency in
 * Personalized Federated Learning"), as PFLlib has it (clientas.py,
 * serveras.py, from the authors).
 *
 * Federated parameter alignment: a client about to train receives the
 * global model and aligns its feature extractor (every layer below the
 * head) to what its own model has learned: the class prototypes of its
 * training data under its current model (the mean features entering the
 * head, per class) are targets, and --as-align-epochs passes of SGD at
 * --as-align-lr (batches of 16) minimize sum over the batch's classes of
 * MSE(features of the class's samples, its prototype). The aligned
 * extractor replaces the client's; its head stays its own. It then trains
 * as FedAvg does.
 *
 * Client synchronization: after training the client computes the trace of
 * its Fisher information on its training data (the sum over batches of the
 * squared gradient of the batch's mean negative log-likelihood, evaluation
 * mode) and the server averages the whole uploaded models weighted by these
 * traces instead of by sample counts, so a client whose model learned
 * little counts little.
 *
 * The client's model is its state, untouched by the broadcast (only the
 * round's clients receive the global model, at their local initialization);
 * it is the personalized model evaluated. The trace travels in the upload
 * as an extra parameter block of one float ("fedas.fisher", which no
 * forward reads and the global model keeps at 0). docs/algorithms.md,
 * "FedAS", has the readings. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "fl/loop.h"
#include "util/err.h"

#define ALIGN_BATCH 16 /* PFLlib: load_train_data(batch_size=16) */

static int head_row(const pfl_model *m) { return m->num_layers - 1; }
static int fisher_row(const pfl_model *m) { return m->num_layers; }
static int feature_dim(const pfl_model *m) { return (int)pfl_model_layer_input_size(m, head_row(m)); }
/* The extractor's parameters: [0, this). */
static size_t base_params(const pfl_model *m) { return m->layers[head_row(m)].offset; }
static size_t fisher_at(const pfl_model *m) { return m->layers[fisher_row(m)].offset; }

static int as_blocks(const pfl_config *cfg, pfl_model *m) {
    (void)cfg;
    if (m->num_layers < 2 || m->classes > 256)
        return pfl_err("fedas: model %s: the alignment needs a feature extractor below the head (and at most 256 "
                       "classes)",
                       m->name);
    const pfl_block_tensor fisher[] = {{"fisher_trace", 1, {1}}};
    return pfl_model_add_block(m, "fedas.fisher", false, PFL_INIT_ZERO, 1, fisher);
}

static int as_check(const pfl_config *cfg) {
    const pfl_modules_config *m = &cfg->modules;
    if (m->ala || m->flayer_agg)
        return pfl_err("%s: fedas's local initialization is its parameter alignment, the received extractor "
                       "trained toward the client's prototypes under the client's own head; a module's mix of the "
                       "received model would be overwritten by it",
                       m->ala ? "--ala" : "--flayer-agg");
    return 0;
}

/* ---- parameter alignment ---- */

/* The class prototypes of a client's training data under `model`: the mean
 * features entering the head per class (evaluation mode, --eval-batch at a
 * time, sums in double); has[c] whether the client has class c. */
static void prototypes(pfl_fl *fl, pfl_worker *w, int client, const float *model, float *proto, bool *has) {
    const pfl_model *m = fl->model;
    const pfl_client_data *cd = &fl->part->clients[client];
    const int C = m->classes, D = feature_dim(m);
    double *sum = pfl_calloc((size_t)C * D, sizeof(double));
    float *scratch = pfl_malloc(sizeof(float) * (size_t)fl->cfg.eval_batch * D);
    long *count = pfl_calloc((size_t)C, sizeof(long));
    if (sum && scratch && count) {
        pfl_xbuf p = pfl_exec_view_const(w->exec, model, pfl_model_vector_len(m));
        for (int start = 0; start < cd->n_train; start += fl->cfg.eval_batch) {
            const int B = cd->n_train - start < fl->cfg.eval_batch ? cd->n_train - start : fl->cfg.eval_batch;
            pfl_exec_gather(w->exec, cd->train + start, B);
            pfl_exec_forward(w->exec, &p, false, NULL);
            const float *f = pfl_exec_features(w->exec, head_row(m), scratch);
            const uint8_t *y = pfl_exec_labels(w->exec);
            for (int n = 0; n < B; n++) {
                count[y[n]]++;
                for (int d = 0; d < D; d++) sum[(size_t)y[n] * D + d] += f[(size_t)n * D + d];
            }
        }
        pfl_exec_unview(w->exec, &p);
    }
    for (int c = 0; c < C; c++) {
        has[c] = count && count[c] > 0;
        for (int d = 0; d < D; d++)
            proto[(size_t)c * D + d] = has[c] ? (float)(sum[(size_t)c * D + d] / count[c]) : 0.0f;
    }
    free(sum);
    free(scratch);
    free(count);
}

double pfl_fedas_align_loss(const float *f, const uint8_t *y, int B, int D, const float *proto, const int *in_batch,
                            float *df) {
    double loss = 0.0;
    for (int n = 0; n < B; n++) {
        const float *p = proto + (size_t)y[n] * D;
        const double scale = 1.0 / ((double)in_batch[y[n]] * D);
        for (int d = 0; d < D; d++) {
            const double e = (double)f[(size_t)n * D + d] - p[d];
            loss += scale * e * e;
            df[(size_t)n * D + d] = (float)(2.0 * scale * e);
        }
    }
    return loss;
}

typedef struct {
    const float *proto;
    float *features, *df; /* max_batch x D scratch */
    float lr;
} align_ctx;

/* One alignment batch, the model in evaluation mode as PFLlib's (the mode
 * its Fisher pass leaves): the loss over the whole batch, gathered in parts
 * of at most the executor's max_batch, its gradient into the extractor
 * only, one plain SGD step there. */
static bool align_batch(void *ctx, pfl_owned_batch *b) {
    const align_ctx *a = ctx;
    const pfl_model *m = b->fl->model;
    const int D = feature_dim(m), part = pfl_exec_max_batch(b->x);
    int in_batch[256] = {0};
    for (int n = 0; n < b->B; n++) in_batch[b->fl->data->labels[b->idx[n]]]++;
    pfl_exec_zero(b->x, &b->w->grads, 0, base_params(m));
    double loss = 0.0;
    for (int start = 0; start < b->B; start += part) {
        const int n = b->B - start < part ? b->B - start : part;
        pfl_exec_gather(b->x, b->idx + start, n);
        pfl_exec_forward(b->x, b->model, false, NULL);
        const float *f = pfl_exec_features(b->x, head_row(m), a->features);
        loss += pfl_fedas_align_loss(f, pfl_exec_labels(b->x), n, D, a->proto, in_batch, a->df);
        const pfl_xinjection inj = {head_row(m), a->df};
        pfl_exec_backward(b->x, b->model, &b->w->grads, 0, 0.0f, &inj, 1);
    }
    const pfl_sgd plain = {a->lr, 0.0f, 0.0f};
    pfl_exec_sgd(b->x, b->model, &b->w->grads, NULL, 0, base_params(m), &plain);
    pfl_step_count(b, (float)loss, 0, b->B);
    return true;
}

/* What the client receives, the global model's extractor (its own layers
 * where the run shares none: --bn local), aligned to the client's
 * prototypes, under the client's own head, with its own running statistics
 * (PFLlib replaces the extractor's parameters() only). */
static void as_init(pfl_fl *fl, int client, float *model) {
    const pfl_model *m = fl->model;
    pfl_worker *w = pfl_fl_worker_here(fl);
    const float *own = pfl_client_model(fl, client);
    if (!own) return; /* no room: the store's error fails the round */
    const int C = m->classes, D = feature_dim(m), max_batch = pfl_exec_max_batch(w->exec);
    float *proto = pfl_malloc(sizeof(float) * (size_t)C * D);
    bool has[256];
    align_ctx a = {proto, pfl_malloc(sizeof(float) * (size_t)max_batch * D),
                   pfl_malloc(sizeof(float) * (size_t)max_batch * D), fl->cfg.algo.as_align_lr};
    memcpy(model, fl->global, sizeof(float) * base_params(m));
    for (int l = 0; l < head_row(m); l++) {
        const pfl_layer *ly = &m->layers[l];
        if (!fl->shared[l]) memcpy(model + ly->offset, own + ly->offset, sizeof(float) * ly->length);
    }
    if (proto && a.features && a.df) {
        prototypes(fl, w, client, own, proto, has);
        const int n = fl->part->clients[client].n_train;
        pfl_step s = pfl_step_default(fl);
        s.epochs = fl->cfg.algo.as_align_epochs;
        s.steps = s.epochs * (n / ALIGN_BATCH); /* whole passes, also under --local-steps */
        s.batch = s.min_batch = ALIGN_BATCH;     /* PFLlib's loader drops the last, smaller batch */
        s.shuffle = PFL_RNG_SHUFFLE_PERSONAL;    /* a pass of its own: its own batch order */
        s.own = align_batch, s.own_ctx = &a;
        pfl_train_stats ignored = {0};
        if (s.steps > 0) pfl_step_run(fl, client, w, model, &s, &ignored);
    }
    /* the client's head and running statistics; the block is written after training */
    memcpy(model + base_params(m), own + base_params(m),
           sizeof(float) * (pfl_model_vector_len(m) - base_params(m)));
    model[fisher_at(m)] = 0.0f;
    free(proto);
    free(a.features);
    free(a.df);
}

/* ---- local training and the Fisher information ---- */

/* Sum over the client's full batches (shuffled, --batch, PFLlib's
 * drop_last) of ||grad of the batch's mean NLL||^2 over the extractor and
 * head, the model in evaluation mode. */
double pfl_fedas_fisher_trace(pfl_fl *fl, pfl_worker *w, int client, const float *model) {
    const pfl_model *m = fl->model;
    const pfl_client_data *cd = &fl->part->clients[client];
    const int batch = fl->cfg.batch;
    memcpy(w->order, cd->train, sizeof(int) * (size_t)cd->n_train);
    pfl_rng r = pfl_rng_stream(fl->cfg.seed, fl->round, client, PFL_RNG_ALGO);
    pfl_rng_shuffle(&r, w->order, (size_t)cd->n_train);
    pfl_xbuf p = pfl_exec_view_const(w->exec, model, pfl_model_vector_len(m));
    double trace = 0.0;
    for (int start = 0; start + batch <= cd->n_train; start += batch) {
        pfl_exec_gather(w->exec, w->order + start, batch);
        pfl_exec_forward(w->exec, &p, false, NULL);
        pfl_exec_xent(w->exec, NULL);
        pfl_exec_zero(w->exec, &w->grads, 0, m->num_params);
        pfl_exec_backward(w->exec, &p, &w->grads, 0, 1.0f, NULL, 0);
        trace += pfl_exec_sumsq(w->exec, &w->grads, 0, pfl_model_backbone_params(m));
    }
    pfl_exec_unview(w->exec, &p);
    return trace;
}

/* FedAvg's step, then the trace into the model's block (which no forward
 * reads, so training leaves it alone), for the upload to carry. */
static void as_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    pfl_default_local_train(fl, client, w, model, stats);
    model[fisher_at(fl->model)] = (float)pfl_fedas_fisher_trace(fl, w, client, model);
}

/* ---- client synchronization ---- */

/* The uploads weighted by their Fisher traces over the shared parameters
 * (with FLAYER's mask, each element over the clients that sent it); the
 * running statistics by sample counts, FedAvg's (pfl's; PFLlib's global
 * model keeps its first upload's buffers). A round whose traces sum to no
 * positive number (every gradient zero) keeps FedAvg's sample weights. */
static void as_aggregate(pfl_fl *fl, const int *clients, int n, float *const *uploads) {
    const pfl_model *m = fl->model;
    const size_t fisher = fisher_at(m);
    double total = 0.0;
    for (int k = 0; k < n; k++) total += uploads[k][fisher];
    pfl_default_aggregate(fl, clients, n, uploads);
    for (int l = 0; l < fisher_row(m) && total > 0.0 && isfinite(total); l++) {
        if (!fl->shared[l]) continue;
        const size_t off = m->layers[l].offset, len = m->layers[l].length;
        float *g = fl->global + off;
        if (!fl->sent) {
            memset(g, 0, sizeof(float) * len);
            for (int k = 0; k < n; k++)
                cblas_saxpy((int)len, (float)(uploads[k][fisher] / total), uploads[k] + off, 1, g, 1);
            continue;
        }
        for (size_t j = 0; j < len; j++) {
            double sum = 0.0, weight = 0.0;
            for (int k = 0; k < n; k++) {
                if (!fl->sent[k][off + j]) continue;
                sum += uploads[k][fisher] * (double)uploads[k][off + j];
                weight += uploads[k][fisher];
            }
            if (weight > 0.0) g[j] = (float)(sum / weight);
        }
    }
    fl->global[fisher] = 0.0f;
}

/* Down: the global model (to the round's clients); up: the model and the trace (the block). */
static void as_message_bytes(const pfl_fl *fl, int client, const uint8_t *sent, const float *upload, uint64_t *down,
                               uint64_t *up) {
    (void)client, (void)upload;
    pfl_shared_message_bytes(fl, sent, down, up);
    *down -= 4; /* the block is no message down */
}

/* PFLlib's clientas.py: torch.optim.SGD(model.base.parameters(), lr=0.01), "Iterate for 1 epochs". */
static const pfl_param as_params[] = {
    {PFL_ALGO_PARAM(FLOAT, "as-align-lr", as_align_lr), .def = 0.01, .max = 1e3, .metavar = "F",
     .help = "learning rate of the parameter alignment of the received extractor to the client's prototypes"},
    {PFL_ALGO_PARAM(INT, "as-align-epochs", as_align_epochs), .def = 1, .max = 1e5, .metavar = "E",
     .help = "passes over the client's data of that alignment (batches of 16)"},
};

const pfl_algo pfl_algo_fedas = {
    .name = "fedas",
    .description = "FedAS: the received extractor aligned to the client's class prototypes; uploads averaged by "
                   "their Fisher information (--as-align-lr, --as-align-epochs)",
    PFL_PARAMS(as_params),
    .has_global = true,
    .stateful = true,
    .keeps_state = true,
    .whole_uploads = true, /* MPI: its aggregate weighs each upload by the trace it carries */
    .blocks = as_blocks,
    .check = as_check,
    .local_init = as_init,
    .local_train = as_train,
    .aggregate = as_aggregate,
    .message_bytes = as_message_bytes,
};
