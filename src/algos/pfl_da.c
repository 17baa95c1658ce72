/* PFL-DA (Technometrics 2023, "Personalized
 * Federated Learning via Domain Adaptation with an Application to
 * Distributed 3D Printing"), as PFLlib has it (clientda.py, serverda.py).
 *
 * Each client keeps its whole model, a feature extractor (base) and a
 * personal head, and beside it a copy of the global head, the only part the
 * server sees: it averages the clients' global heads by training samples
 * and sends the mean back. A round of a client, each phase --epochs epochs:
 *
 *  1. the personal head on the cross-entropy of its model, the base frozen
 *     (PFLlib adds lambda ||global head - personal head|| computed from
 *     .data, which has no gradient; --da-reg-grad gives it one);
 *  2. the base and the global head together on the cross-entropy of the
 *     global head over the base's features, the personal head frozen.
 *
 * The personalized model is the base under the personal head; there is no
 * global model to evaluate (the server holds a head only). The global head
 * is an extra parameter block (shared: averaged, sent, counted in the
 * messages); every backbone layer is marked not shared, so the client store
 * keeps the whole backbone. docs/algorithms.md, "PFL-DA", has the readings. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "util/err.h"

static int head_row(const pfl_model *m) { return m->num_layers - 1; }
static int global_head_row(const pfl_model *m) { return m->num_layers; }
static int feature_dim(const pfl_model *m) { return (int)pfl_model_layer_input_size(m, head_row(m)); }

static int da_blocks(const pfl_config *cfg, pfl_model *m) {
    (void)cfg;
    const pfl_op *last = &m->ops[m->num_ops - 1];
    if (last->kind != PFL_OP_LINEAR || last->layer != head_row(m) || m->layers[head_row(m)].num_tensors != 2 ||
        m->classes > 256)
        return pfl_err("pfl-da: model %s: the global head needs a network ending in a Linear layer with bias (at "
                       "most 256 classes)",
                       m->name);
    const pfl_block_tensor head[] = {{"global_head.weight", 2, {m->classes, feature_dim(m)}},
                                     {"global_head.bias", 1, {m->classes}}};
    return pfl_model_add_block(m, "pfl-da.global_head", false, PFL_INIT_ZERO, 2, head);
}

/* The global head starts as a copy of the head (PFLlib's deepcopy of
 * model.head); the backbone stays with each client. */
static int da_create(pfl_fl *fl) {
    const pfl_model *m = fl->model;
    memcpy(fl->global + m->layers[global_head_row(m)].offset, fl->global + m->layers[head_row(m)].offset,
           m->layers[head_row(m)].length * sizeof(float));
    for (int l = 0; l < m->num_layers; l++) fl->shared[l] = false;
    return 0;
}

/* What the server sends, the global head, under the client's own backbone;
 * the round loop puts back the client's own running statistics. */
static void da_receive(pfl_fl *fl, int client, const float *state, float *received) {
    (void)client;
    const pfl_model *m = fl->model;
    const size_t base = pfl_model_backbone_params(m), V = pfl_model_vector_len(m);
    memcpy(received, state, base * sizeof(float));
    memcpy(received + base, fl->global + base, (V - base) * sizeof(float));
}

static int da_check(const pfl_config *cfg) {
    const pfl_modules_config *m = &cfg->modules;
    if (m->ala || m->flayer_agg)
        return pfl_err("%s: nothing to mix: pfl-da sends only the global head, an extra block the client's "
                       "network does not run; the client keeps its whole backbone",
                       m->ala ? "--ala" : "--flayer-agg");
    if (m->flayer_mask)
        return pfl_err("--flayer-mask: pfl-da uploads only the global head, an extra block, which FLAYER's mask "
                       "sends whole: the mask would change nothing");
    return 0;
}

/* ---- phase 2: the global head on the base's features ---- */

double pfl_da_head_xent(const float *w, const float *b, const float *h, const uint8_t *labels, int B, int D, int C,
                        float *dw, float *db, float *dh, int *correct) {
    double loss = 0.0;
    float z[256];
    *correct = 0;
    for (int n = 0; n < B; n++) {
        const float *x = h + (size_t)n * D;
        int best = 0;
        float top = -INFINITY;
        for (int c = 0; c < C; c++) {
            double acc = b[c];
            for (int d = 0; d < D; d++) acc += (double)w[(size_t)c * D + d] * x[d];
            z[c] = (float)acc;
            if (z[c] > top) top = z[c], best = c;
        }
        *correct += best == labels[n];
        double sum = 0.0;
        for (int c = 0; c < C; c++) sum += exp((double)(z[c] - top));
        loss += log(sum) + top - z[labels[n]];
        for (int c = 0; c < C; c++) { /* d (mean loss) / d z_c */
            const float g = (float)((exp((double)(z[c] - top)) / sum - (c == labels[n])) / B);
            db[c] += g;
            for (int d = 0; d < D; d++) {
                dw[(size_t)c * D + d] += g * x[d];
                dh[(size_t)n * D + d] += g * w[(size_t)c * D + d];
            }
        }
    }
    return loss / B;
}

/* A loss term at the head's input: the cross-entropy of the global head
 * (the block) on the features, its gradient into the block and the features. */
static double global_head_term(void *ctx, const pfl_term_batch *b, float *dz, int *correct) {
    const pfl_model *m = ctx;
    const int C = m->classes, D = (int)b->n;
    const size_t off = m->layers[global_head_row(m)].offset;
    return pfl_da_head_xent(b->params + off, b->params + off + (size_t)C * D, b->z, b->labels, b->B, D, C,
                            b->grads + off, b->grads + off + (size_t)C * D, dz, correct);
}

/* ---- phase 1's regularizer, read with a gradient ---- */

void pfl_da_reg_grad(const float *personal, const float *global, size_t n, float lambda, float *grads) {
    double sq = 0.0;
    for (size_t j = 0; j < n; j++) sq += ((double)personal[j] - global[j]) * ((double)personal[j] - global[j]);
    if (!(sq > 0.0)) return; /* at the global head the norm has no gradient; PyTorch's is 0 there */
    const double scale = lambda / sqrt(sq);
    for (size_t j = 0; j < n; j++) grads[j] += (float)(scale * ((double)personal[j] - global[j]));
}

typedef struct {
    float lambda;
} da_reg;

/* d/dp lambda ||g - p|| = lambda (p - g) / ||p - g|| on the personal head, the
 * global head held as it is (frozen in this phase). */
static void reg_term(void *ctx, const pfl_model *m, const float *params, float *grads) {
    const da_reg *r = ctx;
    const pfl_layer *p = &m->layers[head_row(m)], *g = &m->layers[global_head_row(m)];
    pfl_da_reg_grad(params + p->offset, params + g->offset, p->length, r->lambda, grads + p->offset);
}

static void da_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    const pfl_model *m = fl->model;
    bool head_only[PFL_MAX_LAYERS] = {false}, base_and_global[PFL_MAX_LAYERS] = {false};
    for (int l = 0; l < pfl_model_rows(m); l++) head_only[l] = l != head_row(m);
    base_and_global[head_row(m)] = true;
    pfl_step head = pfl_step_default(fl), base = pfl_step_default(fl);
    /* --local-steps K: the round's batches are shared by the two phases, epochs : epochs */
    pfl_split_round_steps(fl, fl->cfg.epochs, &head, &base);
    head.opt.frozen = head_only;
    da_reg reg = {fl->cfg.algo.da_lambda};
    if (fl->cfg.algo.da_reg_grad) pfl_step_add_grad(&head, reg_term, &reg);
    pfl_step_run(fl, client, w, model, &head, stats);
    base.opt.frozen = base_and_global;
    base.shuffle = PFL_RNG_SHUFFLE_PERSONAL; /* a second pass over the data: its own batch order */
    base.ce_weight = 0.0; /* the output is the global head's */
    const pfl_loss_term term = {.name = "pfl-da's global head",
                                .at = head_row(m),
                                .weight = 1.0f,
                                .value = global_head_term,
                                .ctx = (void *)m,
                                .predicts = true};
    pfl_step_add_term(&base, &term);
    pfl_step_run(fl, client, w, model, &base, stats);
}

/* PFLlib's -lam/--lamda default. */
static const pfl_param da_params[] = {
    {PFL_ALGO_PARAM(FLOAT, "da-lambda", da_lambda), .alias = "lam", .def = 1.0, .max = 1e6, .metavar = "F",
     .help = "lambda of lambda ||global head - personal head|| in the personal head's loss (no gradient, as "
             "PFLlib, unless --da-reg-grad)"},
    {PFL_ALGO_PARAM(BOOL, "da-reg-grad", da_reg_grad),
     .help = "give that term its gradient lambda (p - g) / ||p - g|| (PFLlib computes it from .data: none)"},
};

const pfl_algo pfl_algo_pfl_da = {
    .name = "pfl-da",
    .description = "PFL-DA: personal head, then extractor and a shared global head trained together; only the "
                   "global head is averaged (--da-lambda, --da-reg-grad)",
    PFL_PARAMS(da_params),
    .has_global = false,
    .stateful = true,
    .personal = pfl_personal_unshared, /* the whole backbone */
    .blocks = da_blocks,
    .check = da_check,
    .create = da_create,
    .receive = da_receive,
    .local_train = da_train,
};
