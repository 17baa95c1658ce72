/* The local step (step.h): minibatch SGD over a client's shuffled training
 * split, the loss, gradient and optimizer parts its method declared, on the
 * worker's executor. */
#include "fl/step.h"

#include <math.h> /* FedTSDP: pow */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "modules/modules.h"
#include "util/err.h"

/* FedTSDP: per-round learning-rate decay */
float pfl_lr_of_round(const pfl_fl *fl, int round) {
    const float d = fl->cfg.lr_decay;
    if (d == 0.0f || d == 1.0f || round <= 1) return fl->cfg.lr;
    return (float)((double)fl->cfg.lr * pow((double)d, (double)(round - 1)));
}

float pfl_round_lr(const pfl_fl *fl) { return pfl_lr_of_round(fl, fl->round); }

long pfl_epoch_steps(const pfl_fl *fl, int epochs) {
    return fl->cfg.algo.local_steps > 0 ? (long)epochs * fl->cfg.algo.local_steps : 0;
}

void pfl_split_round_steps(const pfl_fl *fl, int first_epochs, pfl_step *first, pfl_step *second) {
    const long K = fl->cfg.algo.local_steps;
    const int E = fl->cfg.epochs;
    first->epochs = first_epochs, second->epochs = E, first->steps = second->steps = 0;
    if (K <= 0) return; /* whole passes: each phase its own epochs */
    if (fl->cfg.step_budget == PFL_BUDGET_EACH) {
        first->steps = (int)(first_epochs * K), second->steps = (int)(E * K);
    } else {
        /* the round's E x K batches, divided first_epochs : E */
        const long total = (long)E * K, parts = (long)first_epochs + E;
        long a = parts > 0 ? (total * first_epochs * 2 + parts) / (2 * parts) : 0; /* rounded half up */
        if (first_epochs > 0 && a == 0 && total >= 2) a = 1;
        if (E > 0 && a == total && total >= 2) a = total - 1;
        first->steps = (int)a, second->steps = (int)(total - a);
    }
    /* a phase without a batch trains nothing (steps 0 with epochs 0) */
    if (first->steps == 0) first->epochs = 0;
    if (second->steps == 0) second->epochs = 0;
}

pfl_step pfl_step_default(const pfl_fl *fl) {
    pfl_step s = {
        .epochs = fl->cfg.epochs,
        .shuffle = PFL_RNG_SHUFFLE,
        .ce_weight = 1.0,
        .opt = {.lr = pfl_round_lr(fl), /* --lr-decay */
                .momentum = fl->cfg.momentum,
                .weight_decay = fl->cfg.weight_decay,
                .layer_lr = fl->cfg.modules.flayer_lr},
    };
    return s;
}

static int full(const char *what) { return pfl_err("local step: too many %s", what); }

int pfl_step_add_term(pfl_step *s, const pfl_loss_term *t) {
    if (s->num_terms >= PFL_STEP_MAX_TERMS) return full("loss terms");
    s->terms[s->num_terms++] = *t;
    return 0;
}

int pfl_step_add_prox(pfl_step *s, float mu, const float *anchor, size_t offset, size_t length) {
    if (s->num_prox >= PFL_STEP_MAX_PROX) return full("proximal terms");
    s->prox[s->num_prox++] = (pfl_prox_term){mu, anchor, offset, length};
    return 0;
}

int pfl_step_add_grad(pfl_step *s, void (*add)(void *ctx, const pfl_model *m, const float *params, float *grads),
                      void *ctx) {
    if (s->num_grads >= PFL_STEP_MAX_TERMS) return full("gradient terms");
    s->grads[s->num_grads++] = (pfl_grad_term){add, ctx};
    return 0;
}

int pfl_step_add_block(pfl_step *s, int at, void (*step)(void *ctx, const pfl_block_batch *b), void *ctx) {
    if (s->num_blocks >= PFL_STEP_MAX_TERMS) return full("blocks");
    s->blocks[s->num_blocks++] = (pfl_block_term){at, step, ctx};
    return 0;
}

const char *pfl_step_host_part(const pfl_step *s) {
    if (s->own) return "its batches are its own host-side work";
    if (s->num_terms) return s->terms[0].name ? s->terms[0].name : "a loss term of its own";
    if (s->num_grads) return "a gradient term of its own";
    if (s->num_blocks) return "a block trained beside the model";
    return NULL;
}

/* ---- what the step's declarations allow ---- */

static bool any_frozen(const pfl_model *m, const bool *frozen) {
    if (frozen)
        for (int l = 0; l < pfl_model_rows(m); l++)
            if (frozen[l]) return true;
    return false;
}

/* The lowest layer that learns: backward need not go below it. */
static int lowest_trained_layer(const pfl_model *m, const bool *frozen) {
    if (!frozen) return 0;
    for (int l = 0; l < m->num_layers; l++)
        if (!frozen[l]) return l;
    return m->num_layers;
}

/* Nothing but the cross-entropy reads or changes a gradient. */
static bool gradient_is_xent(const pfl_step *s) {
    return s->ce_weight == 1.0 && s->num_terms == 0 && s->num_prox == 0 && s->num_grads == 0;
}

/* fastText: with the cross-entropy alone and no momentum or weight decay,
 * a batch changes only the embedding rows its tokens read, since every
 * other row's gradient is exactly zero and p - lr * 0 is p. The step then
 * visits those rows alone, with the same arithmetic, so the result is
 * bitwise the dense step's at a small fraction of the cost (32000 x 512
 * table, ~100 rows per batch). Batches a method owns may leave other
 * gradients. The embedding's layer, or -1 for the dense step. */
static int sparse_embedding_layer(const pfl_fl *fl, const pfl_step *s) {
    const pfl_model *m = fl->model;
    if (!pfl_model_vocab(m) || s->opt.momentum != 0.0f || s->opt.weight_decay != 0.0f || s->opt.row_decay ||
        !gradient_is_xent(s) || s->own)
        return -1;
    const int l = m->ops[0].layer;
    return s->opt.frozen && s->opt.frozen[l] ? -1 : l;
}

/* Plain SGD on every row, one rate, nothing between the gradient and the
 * step: then the step is fused into the backward pass (the executor's
 * backward_sgd), skipping the gradient buffer, its zeroing and the
 * separate SGD pass. */
static bool fused_step(const pfl_fl *fl, pfl_exec *x, const pfl_step *s, int sparse_layer) {
    const pfl_step_optimizer *o = &s->opt;
    if (o->momentum != 0.0f || o->weight_decay != 0.0f || o->row_decay || o->layer_lr || sparse_layer >= 0 ||
        !gradient_is_xent(s) || any_frozen(fl->model, o->frozen))
        return false;
    return pfl_exec_can_fuse(x);
}

/* ---- one step ---- */

/* What a run of the step holds: its buffers and the rates it computed. */
typedef struct {
    pfl_fl *fl;
    pfl_worker *w;
    pfl_exec *x;
    const pfl_step *s;
    pfl_xbuf model, prox_anchor[PFL_STEP_MAX_PROX], refs[PFL_STEP_MAX_TERMS][PFL_STEP_MAX_REFS];
    float *ref_features[PFL_STEP_MAX_TERMS][PFL_STEP_MAX_REFS]; /* the references' features, copied out */
    float *dz[PFL_STEP_MAX_TERMS];                              /* each term's gradient */
    float *taps;                                                /* scratch for features a device gives back */
    float lrs[PFL_MAX_LAYERS];
    bool rates_set;
    int lowest, sparse;
    bool fused;
    size_t dense_from;
} step_run;

static long tap_size(const pfl_model *m, int at) {
    return at == PFL_AT_LOGITS ? m->classes : pfl_model_layer_input_size(m, at);
}

static int tap_layer(const pfl_model *m, int at) { return at == PFL_AT_LOGITS ? m->num_layers : at; }

static long largest_tap(const pfl_model *m) {
    long most = m->classes;
    for (int l = 0; l < m->num_layers; l++)
        if (pfl_model_layer_input_size(m, l) > most) most = pfl_model_layer_input_size(m, l);
    return most;
}

static int run_open(step_run *r, float *model) {
    const pfl_model *m = r->fl->model;
    const pfl_step *s = r->s;
    const size_t V = pfl_model_vector_len(m), B = (size_t)pfl_exec_max_batch(r->x);
    r->model = pfl_exec_view(r->x, model, V, true);
    for (int k = 0; k < s->num_prox; k++) /* an anchor may be only as long as its span reaches */
        r->prox_anchor[k] = pfl_exec_view_const(r->x, s->prox[k].anchor, s->prox[k].offset + s->prox[k].length);
    bool ok = (r->taps = pfl_malloc(sizeof(float) * B * (size_t)largest_tap(m))) != NULL;
    for (int t = 0; ok && t < s->num_terms; t++) {
        const size_t n = B * (size_t)tap_size(m, s->terms[t].at);
        ok = (r->dz[t] = pfl_malloc(sizeof(float) * n)) != NULL;
        for (int k = 0; ok && k < s->terms[t].num_refs; k++) {
            r->refs[t][k] = pfl_exec_view_const(r->x, s->terms[t].refs[k], V);
            ok = (r->ref_features[t][k] = pfl_malloc(sizeof(float) * n)) != NULL;
        }
    }
    return ok ? 0 : -1;
}

static void run_close(step_run *r) {
    const pfl_step *s = r->s;
    for (int t = 0; t < s->num_terms; t++) {
        for (int k = 0; k < s->terms[t].num_refs; k++) {
            if (r->refs[t][k].n) pfl_exec_unview(r->x, &r->refs[t][k]);
            free(r->ref_features[t][k]);
        }
        free(r->dz[t]);
    }
    for (int k = 0; k < s->num_prox; k++) pfl_exec_unview(r->x, &r->prox_anchor[k]);
    free(r->taps);
    pfl_exec_unview(r->x, &r->model); /* a device copy goes back to the host vector here */
}

/* The references' features at each term's point, from their forwards on
 * the batch, before the trained model's forward overwrites the workspace. */
static void reference_features(step_run *r, pfl_rng *dropout) {
    const pfl_step *s = r->s;
    const pfl_model *m = r->fl->model;
    for (int t = 0; t < s->num_terms; t++) {
        const pfl_loss_term *term = &s->terms[t];
        for (int k = 0; k < term->num_refs; k++) {
            pfl_exec_forward(r->x, &r->refs[t][k], term->refs_train, term->refs_train ? dropout : NULL);
            const size_t n = (size_t)r->x->batch * (size_t)tap_size(m, term->at);
            memcpy(r->ref_features[t][k], pfl_exec_features(r->x, tap_layer(m, term->at), r->taps),
                   sizeof(float) * n);
        }
    }
}

/* The blocks' steps on the forward's features and logits. */
static void step_blocks(step_run *r, const uint8_t *labels) {
    const pfl_step *s = r->s;
    const pfl_model *m = r->fl->model;
    for (int k = 0; k < s->num_blocks; k++) {
        const pfl_block_term *b = &s->blocks[k];
        const pfl_block_batch batch = {pfl_exec_features(r->x, tap_layer(m, b->at), r->taps),
                                       pfl_exec_features(r->x, m->num_layers, r->taps), labels, r->x->batch};
        b->step(b->ctx, &batch);
    }
}

/* The loss terms' values and gradients; the batch loss with them,
 * ce_weight x cross-entropy + sum of weight x value. *correct: a term's,
 * when one predicts. */
static float terms_loss(step_run *r, float ce, const uint8_t *labels, pfl_xinjection *inj, int *n_inj, int *correct) {
    const pfl_step *s = r->s;
    const pfl_model *m = r->fl->model;
    const int B = r->x->batch;
    double total = s->ce_weight * (double)ce;
    for (int t = 0; t < s->num_terms; t++) {
        const pfl_loss_term *term = &s->terms[t];
        const long n = tap_size(m, term->at);
        pfl_term_batch b = {pfl_exec_features(r->x, tap_layer(m, term->at), r->taps), {NULL}, labels, B, n,
                            r->model.host, pfl_exec_host(&r->w->grads)};
        for (int k = 0; k < term->num_refs; k++) b.refs[k] = r->ref_features[t][k];
        memset(r->dz[t], 0, sizeof(float) * (size_t)B * (size_t)n);
        int own_correct = 0;
        total += (double)term->weight * term->value(term->ctx, &b, r->dz[t], &own_correct);
        if (term->predicts) *correct = own_correct;
        if (term->weight != 1.0f)
            for (long k = 0; k < B * n; k++) r->dz[t][k] *= term->weight;
        /* a term on the logits joins as one on the input of the layer after the last: the logits' gradient */
        inj[(*n_inj)++] = (pfl_xinjection){tap_layer(m, term->at), r->dz[t]};
    }
    return s->num_terms ? (float)total : ce;
}

/* One SGD step, row by row so frozen rows stay bitwise unchanged and each
 * row can have its own rate and weight decay. */
static void optimizer_step(step_run *r) {
    const pfl_model *m = r->fl->model;
    const pfl_step_optimizer *o = &r->s->opt;
    for (int l = 0; l < pfl_model_rows(m); l++) {
        if (o->frozen && o->frozen[l]) continue;
        const size_t off = m->layers[l].offset;
        const pfl_sgd opt = {o->layer_lr && l < m->num_layers ? r->lrs[l] : o->lr, o->momentum,
                             o->row_decay ? o->row_decay[l] : o->weight_decay};
        if (l == r->sparse) pfl_exec_sgd_rows(r->x, &r->model, &r->w->grads, l, &opt);
        else pfl_exec_sgd(r->x, &r->model, &r->w->grads, &r->w->velocity, off, m->layers[l].length, &opt);
    }
}

/* FLAYER Eq. 4: eta_i^t from g_i^t, "the gradient vector of the i-th layer
 * at iteration t", t a round of Algorithm 1: the rates come from the first
 * batch's loss gradient of this training and hold for all of it (the
 * reference code sets them at the first batch of each epoch, and trains one
 * epoch a round). */
static void set_layer_rates(step_run *r) {
    const pfl_model *m = r->fl->model;
    double sq[PFL_MAX_LAYERS];
    for (int l = 0; l < m->num_layers; l++)
        sq[l] = pfl_exec_sumsq(r->x, &r->w->grads, m->layers[l].offset, m->layers[l].length);
    pfl_flayer_rates(r->lrs, m, sq, r->s->opt.lr);
    r->rates_set = true;
}

/* The batch in the executor: forward, loss, backward, step. Returns its
 * loss; counts its correct predictions into *correct. */
static float train_batch(step_run *r, pfl_rng *dropout, int *correct) {
    const pfl_step *s = r->s;
    const pfl_model *m = r->fl->model;
    pfl_worker *w = r->w;
    const size_t P = m->num_params;
    if (!r->fused) pfl_exec_zero(r->x, &w->grads, r->dense_from, P - r->dense_from);
    if (s->num_terms) reference_features(r, dropout);
    pfl_exec_forward(r->x, &r->model, true, dropout);
    float loss = s->ce_weight != 0.0 ? pfl_exec_xent(r->x, s->ce_offset) : 0.0f;
    const uint8_t *labels = pfl_exec_labels(r->x);
    if (s->num_blocks) step_blocks(r, labels);
    /* BatchNorm's running statistics move with every training batch,
     * frozen layers included, as in PyTorch's train mode */
    pfl_exec_update_stats(r->x, &r->model);
    *correct = -1;
    if (r->fused) {
        pfl_exec_backward_sgd(r->x, &r->model, s->opt.lr); /* cannot fail: fused_step asked the executor */
    } else {
        pfl_xinjection inj[PFL_STEP_MAX_TERMS];
        int n_inj = 0;
        loss = terms_loss(r, loss, labels, inj, &n_inj, correct);
        pfl_exec_backward(r->x, &r->model, &w->grads, r->lowest, (float)s->ce_weight, inj, n_inj);
        if (s->opt.layer_lr && !r->rates_set) set_layer_rates(r);
        for (int k = 0; k < s->num_prox; k++)
            pfl_exec_prox(r->x, &w->grads, &r->model, &r->prox_anchor[k], s->prox[k].mu, s->prox[k].offset,
                          s->prox[k].length);
        for (int k = 0; k < s->num_grads; k++)
            s->grads[k].add(s->grads[k].ctx, m, r->model.host, pfl_exec_host(&w->grads));
        optimizer_step(r);
    }
    if (*correct < 0) *correct = pfl_exec_correct(r->x);
    return loss;
}

void pfl_step_count(pfl_owned_batch *b, float loss, int correct, int n) {
    if (b->last_epoch) b->stats->last_epoch_correct += correct, b->stats->last_epoch_samples += n;
    b->stats->loss_sum += (double)loss * n;
    b->stats->samples += n;
}

/* The batch size of a step and the smallest batch it keeps. */
static int step_batch(const pfl_fl *fl, const pfl_step *s) { return s->batch > 0 ? s->batch : fl->cfg.batch; }
static int step_min_batch(const pfl_step *s) { return s->min_batch > 1 ? s->min_batch : 1; }

/* Batches one pass over n samples makes. */
static long batches_per_pass(const pfl_fl *fl, const pfl_step *s, int n) {
    const int batch = step_batch(fl, s);
    return n / batch + (n % batch >= step_min_batch(s));
}

long pfl_step_batches(const pfl_fl *fl, const pfl_step *s, int client) {
    const int n = s->samples ? s->n_samples : fl->part->clients[client].n_train;
    const long per_pass = batches_per_pass(fl, s, n);
    const long budget = s->steps > 0 ? s->steps : pfl_epoch_steps(fl, s->epochs);
    if (per_pass == 0) return 0;
    return budget > 0 ? budget : (long)s->epochs * per_pass;
}

void pfl_step_run(pfl_fl *fl, int client, pfl_worker *w, float *model, const pfl_step *s, pfl_train_stats *stats) {
    const pfl_client_data *cd = &fl->part->clients[client];
    /* FedFomo trains on its split without the validation part */
    const int *samples = s->samples ? s->samples : cd->train, n_samples = s->samples ? s->n_samples : cd->n_train;
    const pfl_model *m = fl->model;
    step_run r = {.fl = fl, .w = w, .x = w->exec, .s = s};
    /* a device backend cannot run host-side parts: the round loop stops the run with the reason */
    const char *host_part = pfl_exec_on_device(r.x) ? pfl_step_host_part(s) : NULL;
    if (host_part) {
        char why[160];
        snprintf(why, sizeof why, "its step has a host-side part: %s", host_part);
        pfl_exec_refuse(r.x, why);
        return;
    }
    r.lowest = lowest_trained_layer(m, s->opt.frozen);
    if (r.lowest >= m->num_layers && !s->own) return; /* everything frozen */
    const int batch = step_batch(fl, s), min_batch = step_min_batch(s);
    const int round = s->round > 0 ? s->round : fl->round;
    pfl_rng shuffle = pfl_rng_stream(fl->cfg.seed, round, client, s->shuffle);
    pfl_rng dropout = pfl_rng_stream(fl->cfg.seed, round, client, PFL_RNG_DROPOUT);
    if (run_open(&r, model)) {
        run_close(&r);
        return; /* out of memory: this client does not train */
    }
    /* fasttext: the embedding's gradient (layer 0, at offset 0) is zeroed
     * once here, then row by row after each step; the rest every step */
    r.sparse = sparse_embedding_layer(fl, s);
    r.dense_from = r.sparse >= 0 ? m->layers[r.sparse].offset + m->layers[r.sparse].length : 0;
    if (r.sparse >= 0) pfl_exec_zero(r.x, &w->grads, 0, r.dense_from);
    r.fused = fused_step(fl, r.x, s, r.sparse);
    if (s->opt.momentum != 0.0f) pfl_exec_zero(r.x, &w->velocity, 0, m->num_params); /* unread without momentum */
    memcpy(w->order, samples, sizeof(int) * (size_t)n_samples);
    /* With a step budget, passes over the data repeat until that many batches
     * are done; the "last epoch" is the pass in which training stops. */
    const long budget = s->steps > 0 ? s->steps : pfl_epoch_steps(fl, s->epochs);
    const long per_pass = batches_per_pass(fl, s, n_samples);
    const int passes = budget > 0 ? (per_pass ? (int)((budget + per_pass - 1) / per_pass) : 0) : s->epochs;
    long steps_left = budget > 0 ? budget : -1, index = 0;
    for (int epoch = 0; epoch < passes; epoch++) {
        const bool last_epoch = epoch == passes - 1;
        if (last_epoch) stats->last_epoch_correct = stats->last_epoch_samples = 0;
        pfl_rng_shuffle(&shuffle, w->order, (size_t)n_samples);
        for (int start = 0; start < n_samples && steps_left != 0; start += batch, steps_left--, index++) {
            const int B = n_samples - start < batch ? n_samples - start : batch;
            if (B < min_batch) break;
            if (s->own) {
                pfl_owned_batch b = {fl, client, w, r.x, &r.model, w->order + start, B, index, last_epoch, &dropout,
                                     stats};
                if (s->own(s->own_ctx, &b)) continue;
            }
            pfl_exec_gather(r.x, w->order + start, B);
            int correct;
            const float loss = train_batch(&r, &dropout, &correct);
            if (last_epoch) stats->last_epoch_correct += correct, stats->last_epoch_samples += B;
            stats->loss_sum += (double)loss * B;
            stats->samples += B;
            stats->fused_batches += r.fused;
        }
    }
    run_close(&r);
}
