/* FedKD (Wu, Wu, Lyu, Qi, Huang, Xie, Nat. Commun. 13, 2032 (2022),
 * "Communication-efficient federated learning via knowledge
 * distillation"), as PFLlib has it (serverkd.py, clientkd.py): each client
 * keeps a mentor (its personal model, never sent) and trains it together
 * with the mentee (the shared model, a copy of the global one) on the same
 * batches, by adaptive mutual distillation; what is exchanged is compressed
 * by a truncated SVD.
 *
 * The loss of a batch, from mentor p (features h, logits z_p) and mentee q
 * (h_q, z_q), with CE_p + CE_q = S held live (not detached, as PFLlib):
 *
 *   mentor: CE_p + KL(q || p) / S + MSE(h, W h_q) / S
 *   mentee: CE_q + KL(p || q) / S + MSE(h, W h_q) / S
 *
 * W a per-client D x D map without bias (PFLlib's W_h, trained beside them
 * at --lr), each KL PyTorch's KLDivLoss (mean over batch x classes), MSE the
 * mean over batch x D; the three take one SGD step on the gradient of the
 * sum of both losses (PFLlib back-propagates both into everything), each
 * gradient clipped to norm 10: the mentor and W at --lr, the mentee at
 * --kd-mentee-lr.
 *
 * Compression, in round r with energy T_r = T_start + (r - 1) / R (T_end -
 * T_start): every exchanged tensor of at least two dimensions whose first
 * is above 1 (a Linear's weight; a convolution's, as out x in slices of
 * kh x kw with one rank for all) is sent as the SVD factors of its first t
 * singular values, t the fewest whose squares exceed T_r of the total; the
 * rest whole. The client compresses its trained mentee; the server averages
 * the reconstructions with equal weights, compresses the mean and sends it:
 * the new global model is that reconstruction. Readings (docs/algorithms.md,
 * "FedKD"): PFLlib compresses the weights and looks for t among the first
 * k - 1 values, sending a tensor that needs all k as zeros; --kd-update
 * compresses the update (trained minus global, and the mean update) as the
 * paper's gradients, --kd-paper-rank keeps all k then.
 *
 * The client compresses, the server reconstructs: here the server applies
 * the client's compression to the upload it receives (the same function of
 * the same floats, on every MPI rank), and message_bytes counts the factors.
 * The personalized model is the mentor, the client's state (the whole
 * model, trained in place); W lives in a per-client store of the method. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "algos/mutual.h"
#include "algos/server_mean.h"
#include "nn/blas.h"
#include "util/err.h"

typedef struct {
    pfl_store *wh;       /* per client its W: D x D, row-major (nn.Linear(D, D, bias=False).weight) */
    int64_t down_bytes;  /* the global model as the server last compressed it; 0 before round 1's aggregation
                          * (round 1 sends the initial model whole) */
    float *mean;         /* aggregation: the mean of the reconstructed uploads (a model vector) */
    float *one;          /* ... and one upload's reconstruction */
} fedkd_state;

static int head_row(const pfl_model *m) { return m->num_layers - 1; }
static int feature_dim(const pfl_model *m) { return (int)pfl_model_layer_input_size(m, head_row(m)); }

double pfl_fedkd_energy(const pfl_fl *fl, int round) {
    const pfl_algo_params *a = &fl->cfg.algo;
    const int R = fl->cfg.rounds > 0 ? fl->cfg.rounds : 1;
    return (double)a->kd_t_start + (double)(round - 1) / R * ((double)a->kd_t_end - a->kd_t_start);
}

/* ---- the compression ---- */

int pfl_fedkd_rank_rule(const double *sq2, int k, double energy, bool paper_rank) {
    double total = 0.0, prefix = 0.0;
    for (int i = 0; i < k; i++) total += sq2[i];
    for (int n = 0; n < k; n++) { /* PFLlib: for singular_value_num in range(len(sigma)) */
        if (prefix > energy * total) return n;
        prefix += sq2[n];
    }
    return paper_rank ? k : 0;
}

/* Whether tensor t is sent as SVD factors (PFLlib: param.shape[0] > 1 and
 * len(param.shape) > 1), and as which slices of rows x cols. */
static bool factored(const pfl_tensor *t, int *slices, int *rows, int *cols) {
    if (t->ndim < 2 || t->shape[0] <= 1) return false;
    *slices = t->ndim == 4 ? t->shape[0] * t->shape[1] : 1;
    *rows = t->ndim == 4 ? t->shape[2] : t->shape[0];
    *cols = t->ndim == 4 ? t->shape[3] : (int)(t->length / (size_t)t->shape[0]);
    return true;
}

static bool all_zero(const float *a, size_t n) {
    for (size_t j = 0; j < n; j++)
        if (a[j] != 0.0f) return false;
    return true;
}

/* The squared singular values of every slice summed per index into sq2 (k
 * doubles), and with u, s, vt non-NULL each slice's factors (k = min(rows,
 * cols): slices x rows x k, slices x k, slices x k x cols). */
static int slice_svds(const float *a, int slices, int rows, int cols, double *sq2, float *u, float *s, float *vt) {
    const int k = rows < cols ? rows : cols;
    const size_t area = (size_t)rows * cols;
    float *copy = pfl_malloc(sizeof(float) * (area + (size_t)k));
    if (!copy) return -1;
    float *values = copy + area;
    memset(sq2, 0, sizeof(double) * (size_t)k);
    for (int i = 0; i < slices; i++) {
        memcpy(copy, a + (size_t)i * area, sizeof(float) * area);
        float *si = s ? s + (size_t)i * k : values;
        if (pfl_svd(copy, rows, cols, si, u ? u + (size_t)i * rows * k : NULL, vt ? vt + (size_t)i * k * cols : NULL)) {
            free(copy);
            return pfl_err("fedkd: the SVD of a %d x %d matrix failed (LAPACK's sgesdd)", rows, cols);
        }
        for (int j = 0; j < k; j++) sq2[j] += (double)si[j] * si[j];
    }
    free(copy);
    return 0;
}

int pfl_fedkd_rank(const float *a, int slices, int rows, int cols, double energy, bool paper_rank) {
    const int k = rows < cols ? rows : cols;
    double *sq2 = pfl_malloc(sizeof(double) * (size_t)k);
    if (!sq2 || slice_svds(a, slices, rows, cols, sq2, NULL, NULL, NULL)) {
        free(sq2);
        return -1;
    }
    const int t = pfl_fedkd_rank_rule(sq2, k, energy, paper_rank);
    free(sq2);
    return t;
}

int pfl_fedkd_truncate(float *a, int slices, int rows, int cols, double energy, bool paper_rank) {
    const int k = rows < cols ? rows : cols;
    const size_t per_u = (size_t)rows * k, per_vt = (size_t)k * cols;
    double *sq2 = pfl_malloc(sizeof(double) * (size_t)k);
    float *u = pfl_malloc(sizeof(float) * (size_t)slices * (per_u + per_vt + (size_t)k));
    if (!sq2 || !u) {
        free(sq2), free(u);
        return -1;
    }
    float *vt = u + (size_t)slices * per_u, *s = vt + (size_t)slices * per_vt;
    int t = -1;
    if (slice_svds(a, slices, rows, cols, sq2, u, s, vt) == 0) {
        t = pfl_fedkd_rank_rule(sq2, k, energy, paper_rank);
        for (int i = 0; i < slices; i++) { /* a = u[:, :t] diag(s[:t]) vt[:t, :] */
            float *ui = u + (size_t)i * per_u, *out = a + (size_t)i * rows * cols;
            for (int r = 0; r < rows; r++)
                for (int j = 0; j < t; j++) ui[(size_t)r * k + j] *= s[(size_t)i * k + j];
            if (t == 0) memset(out, 0, sizeof(float) * (size_t)rows * cols);
            else
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, cols, t, 1.0f, ui, k,
                            vt + (size_t)i * per_vt, cols, 0.0f, out, cols);
        }
    }
    free(sq2), free(u);
    return t;
}

/* What sending tensor t of vector v costs (4 bytes a float), compressed at
 * `energy`, and with `truncate` the tensor replaced in v by what the
 * receiver reconstructs. -1 when an SVD failed. */
static int64_t tensor_message(float *v, const pfl_tensor *t, double energy, bool paper_rank, bool truncate) {
    int slices, rows, cols;
    float *a = v + t->offset;
    if (!factored(t, &slices, &rows, &cols) || all_zero(a, t->length)) /* PFLlib sends a zero tensor whole */
        return 4 * (int64_t)t->length;
    const int r = truncate ? pfl_fedkd_truncate(a, slices, rows, cols, energy, paper_rank)
                           : pfl_fedkd_rank(a, slices, rows, cols, energy, paper_rank);
    return r < 0 ? -1 : 4 * (int64_t)slices * r * (rows + cols + 1);
}

/* The message of model vector v (its shared layers' parameters, each tensor
 * compressed, and their shared running statistics whole), in bytes; with
 * `truncate` v becomes what the receiver reconstructs. -1 on failure. */
static int64_t vector_message(const pfl_fl *fl, float *v, double energy, bool truncate) {
    const pfl_model *m = fl->model;
    int64_t bytes = 0;
    for (int l = 0; l < pfl_model_rows(m); l++) {
        if (!fl->shared[l]) continue;
        const pfl_layer *ly = &m->layers[l];
        for (int i = ly->first_tensor; i < ly->first_tensor + ly->num_tensors; i++) {
            const int64_t b = tensor_message(v, &m->tensors[i], energy, fl->cfg.algo.kd_paper_rank, truncate);
            if (b < 0) return -1;
            bytes += b;
        }
        if (l < m->num_layers && pfl_state_shared(fl, l)) bytes += 4 * (int64_t)ly->state_length;
    }
    return bytes;
}

/* Over the shared parameters: v -= global (--kd-update: the exchanged update). */
static void minus_global(const pfl_fl *fl, float *v) {
    const pfl_model *m = fl->model;
    for (int l = 0; l < pfl_model_rows(m); l++)
        if (fl->shared[l])
            for (size_t j = m->layers[l].offset; j < m->layers[l].offset + m->layers[l].length; j++)
                v[j] -= fl->global[j];
}

/* ---- the server ---- */

static void warn_uncompressed(void) {
    fprintf(stderr, "pfl: fedkd: %s; that message is counted and applied uncompressed\n", pfl_errmsg());
}

/* The equal-weight mean of the uploads as the server reconstructs them,
 * compressed again for the clients: the new global model (or, with
 * --kd-update, the global model plus that of the updates). */
/* What pfl_slot_sum hands the mean's sum: the round's uploads and how to reconstruct them. */
typedef struct {
    const pfl_fl *fl;
    fedkd_state *s;
    const pfl_spans *spans; /* the shared layers' parameters, what the mean covers */
    float *const *uploads;
    double energy;
    float weight; /* 1/n: the mean's equal weights */
} decompressed_sum;

/* Adds slot k's upload as the server reconstructs it (compressed, then
 * back), times 1/n, over the shared parameters. */
static void add_decompressed(void *ctx, int slot, float *acc) {
    const decompressed_sum *c = ctx;
    const pfl_spans *sp = c->spans;
    memcpy(c->s->one, c->uploads[slot], pfl_model_vector_len(c->fl->model) * sizeof(float));
    if (c->fl->cfg.algo.kd_update) minus_global(c->fl, c->s->one);
    if (vector_message(c->fl, c->s->one, c->energy, true) < 0) warn_uncompressed();
    for (int i = 0; i < sp->count; i++)
        for (size_t j = sp->offset[i]; j < sp->offset[i] + sp->length[i]; j++) acc[j] += c->s->one[j] * c->weight;
}

static void fedkd_aggregate(pfl_fl *fl, const int *clients, int n, float *const *uploads) {
    fedkd_state *s = fl->algo_state;
    const size_t V = pfl_model_vector_len(fl->model);
    const double energy = pfl_fedkd_energy(fl, fl->round);
    const bool update = fl->cfg.algo.kd_update;
    /* the mean of the reconstructed uploads: a sum over the slots, along the ranks under MPI */
    pfl_spans spans;
    pfl_shared_param_spans(fl, &spans); /* the shared layers as they are now */
    memset(s->mean, 0, V * sizeof(float));
    const decompressed_sum c = {fl, s, &spans, uploads, energy, 1.0f / (float)n};
    if (pfl_slot_sum(fl, n, &spans, s->mean, add_decompressed, (void *)&c)) return;
    const int64_t down = vector_message(fl, s->mean, energy, true);
    if (down < 0) warn_uncompressed();
    s->down_bytes = down;
    for (int i = 0; i < spans.count; i++)
        for (size_t j = spans.offset[i]; j < spans.offset[i] + spans.length[i]; j++)
            fl->global[j] = update ? fl->global[j] + s->mean[j] : s->mean[j];
    /* running statistics: the plain mean, never compressed */
    pfl_plain_mean_statistics(fl, clients, n, uploads);
}

/* Up: the client's trained mentee (or its update) as compressed; down: the
 * global model as the server compressed it last (round 1: the initial
 * model, whole). */
static void fedkd_message_bytes(const pfl_fl *fl, int client, const uint8_t *sent, const float *upload, uint64_t *down,
                                uint64_t *up) {
    const fedkd_state *s = fl->algo_state;
    pfl_default_message_bytes(fl, client, sent, upload, down, up);
    if (s->down_bytes > 0) *down = (uint64_t)s->down_bytes;
    const size_t V = pfl_model_vector_len(fl->model);
    float *v = pfl_malloc(V * sizeof(float));
    if (!v) return; /* out of memory: counted whole */
    memcpy(v, upload, V * sizeof(float));
    if (fl->cfg.algo.kd_update) minus_global(fl, v);
    const int64_t bytes = vector_message(fl, v, pfl_fedkd_energy(fl, fl->round), false);
    if (bytes >= 0) *up = (uint64_t)bytes;
    free(v);
}

/* ---- the client ---- */

typedef struct {
    float *mentor; /* the client's personal model, trained in place */
    float *wh;     /* its W */
    float *scratch;
} kd_batch_ctx;

/* W, PyTorch's default for nn.Linear(D, D, bias=False): uniform in
 * +-1/sqrt(D), each client's own draw. */
static void init_wh(const pfl_fl *fl, int client, float *wh) {
    const int D = feature_dim(fl->model);
    pfl_rng r = pfl_rng_stream(fl->cfg.seed, PFL_RNG_NONE, client, PFL_RNG_ALGO);
    const double bound = 1.0 / sqrt((double)D);
    for (size_t j = 0; j < (size_t)D * D; j++) wh[j] = (float)((2.0 * pfl_rng_uniform(&r) - 1.0) * bound);
}

/* MSE(h, W h_q) over B x D and its gradients: into dh and dhq (B x D,
 * scaled by `scale`) and dw (D x D, scaled). proj: B x D scratch. */
static double hidden_loss(const float *h, const float *hq, const float *w, int B, int D, double scale, float *dh,
                          float *dhq, float *dw, float *proj) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, D, D, 1.0f, hq, D, w, D, 0.0f, proj, D);
    const double elements = (double)B * D;
    double mse = 0.0;
    for (size_t j = 0; j < (size_t)B * D; j++) {
        const double diff = (double)h[j] - proj[j];
        mse += diff * diff;
        dh[j] = (float)(scale * 2.0 * diff / elements);
        proj[j] = -dh[j]; /* d / d(W h_q) */
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, D, D, 1.0f, proj, D, w, D, 0.0f, dhq, D);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, D, D, B, 1.0f, proj, D, hq, D, 0.0f, dw, D);
    return mse / elements;
}

static bool fedkd_batch(void *ctx, pfl_owned_batch *b) {
    const kd_batch_ctx *c = ctx;
    pfl_fl *fl = b->fl;
    const pfl_model *m = fl->model;
    pfl_worker *w = b->w;
    pfl_exec *x = b->x;
    const size_t P = m->num_params, V = pfl_model_vector_len(m), DD = (size_t)feature_dim(m) * feature_dim(m);
    const int B = b->B, C = m->classes, D = feature_dim(m), L = m->num_layers;
    const size_t BC = (size_t)B * C, BD = (size_t)B * D;
    float *zq = c->scratch, *gp = zq + BC, *gq = gp + BC, *hq = gq + BC, *dh = hq + BD, *dhq = dh + BD,
          *proj = dhq + BD, *dw = proj + BD, *tap = dw + DD;
    pfl_exec_gather(x, b->idx, B);
    /* the mentee first: its logits and features kept, its masks kept to repeat its forward */
    pfl_rng mentee_masks = *b->dropout;
    pfl_exec_forward(x, b->model, true, b->dropout);
    memcpy(zq, pfl_exec_features(x, L, tap), sizeof(float) * BC);
    memcpy(hq, pfl_exec_features(x, L - 1, tap), sizeof(float) * BD);
    pfl_exec_update_stats(x, b->model);
    const uint8_t *labels = pfl_exec_labels(x);
    const double ce_q = pfl_mutual_xent(zq, labels, B, C);
    pfl_xbuf mentor = pfl_exec_view(x, c->mentor, V, true);
    pfl_exec_forward(x, &mentor, true, b->dropout);
    pfl_exec_update_stats(x, &mentor);
    const double ce_p = pfl_exec_xent(x, NULL), S = ce_p + ce_q;
    const int correct = pfl_exec_correct(x);
    /* the distillation terms over S, live both ways; S's own gradient scales the cross-entropies */
    memset(gp, 0, sizeof(float) * 2 * BC);
    double kl_qp, kl_pq;
    pfl_mutual_kl(pfl_exec_features(x, L, tap), zq, B, C, (float)(1.0 / S), (float)(1.0 / S), true, gp, gq, &kl_qp,
                  &kl_pq);
    const double mse = hidden_loss(pfl_exec_features(x, L - 1, tap), hq, c->wh, B, D, 2.0 / S, dh, dhq, dw, proj);
    const double A = kl_qp + kl_pq + 2.0 * mse, ce_weight = 1.0 - A / (S * S);
    const pfl_xinjection into_p[2] = {{L, gp}, {L - 1, dh}}, into_q[2] = {{L, gq}, {L - 1, dhq}};
    pfl_exec_zero(x, &w->aux_grads, 0, P);
    pfl_exec_backward(x, &mentor, &w->aux_grads, 0, (float)ce_weight, into_p, 2);
    pfl_exec_forward(x, b->model, true, &mentee_masks);
    pfl_exec_xent(x, NULL);
    pfl_exec_zero(x, &w->grads, 0, P);
    pfl_exec_backward(x, b->model, &w->grads, 0, (float)ce_weight, into_q, 2);
    pfl_mutual_clip(x, &w->aux_grads, P, PFL_MUTUAL_CLIP);
    pfl_mutual_clip(x, &w->grads, P, PFL_MUTUAL_CLIP);
    double sq = 0.0;
    for (size_t j = 0; j < DD; j++) sq += (double)dw[j] * dw[j];
    const double clip = PFL_MUTUAL_CLIP / (sqrt(sq) + 1e-6);
    const float lr = pfl_round_lr(fl), mentee_lr = fl->cfg.algo.kd_mentee_lr * (lr / fl->cfg.lr);
    for (size_t j = 0; j < DD; j++) c->wh[j] -= lr * (clip < 1.0 ? (float)clip * dw[j] : dw[j]);
    const pfl_sgd plain = {lr, 0.0f, 0.0f}, mentee = {mentee_lr, fl->cfg.momentum, fl->cfg.weight_decay};
    pfl_exec_sgd(x, &mentor, &w->aux_grads, NULL, 0, P, &plain);
    pfl_exec_sgd(x, b->model, &w->grads, &w->velocity, 0, P, &mentee);
    pfl_exec_unview(x, &mentor);
    pfl_step_count(b, (float)(ce_p + (kl_qp + mse) / S), correct, B);
    return true;
}

static void fedkd_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    fedkd_state *s = fl->algo_state;
    const pfl_model *m = fl->model;
    const size_t B = (size_t)fl->cfg.batch, C = (size_t)m->classes, D = (size_t)feature_dim(m);
    const bool fresh = !pfl_store_touched(s->wh, client);
    kd_batch_ctx c = {pfl_client_model(fl, client), pfl_store_write(s->wh, client),
                      pfl_malloc(sizeof(float) * (3 * B * C + 4 * B * D + D * D + B * (C > D ? C : D)))};
    if (c.mentor && c.wh && c.scratch) { /* else: no room (the store's error fails the round) or no memory */
        if (fresh) init_wh(fl, client, c.wh);
        pfl_step step = pfl_step_default(fl);
        step.own = fedkd_batch, step.own_ctx = &c;
        pfl_step_run(fl, client, w, model, &step, stats);
    }
    free(c.scratch);
    pfl_store_release(s->wh, client);
}

/* The mentee starts from the global model (the reconstruction every client holds). */
static void fedkd_init(pfl_fl *fl, int client, float *model) {
    (void)client;
    memcpy(model, fl->global, pfl_model_vector_len(fl->model) * sizeof(float));
}

/* The mentor was trained in place; the mentee is uploaded, not kept. */
static void fedkd_finish(pfl_fl *fl, int client, const float *model, float *state) {
    (void)fl, (void)client, (void)model, (void)state;
}

/* ---- setup, checkpoints, outputs ---- */

static int fedkd_check(const pfl_config *cfg) {
    if (cfg->modules.flayer_lr)
        return pfl_err("--flayer-lr: fedkd trains its mentor, mentee and W with its own steps on each batch");
    if (cfg->modules.flayer_mask)
        return pfl_err("--flayer-mask: fedkd sends each tensor as SVD factors of the whole tensor; a mask of "
                       "elements has nothing to select");
    if (cfg->algo.kd_t_end < cfg->algo.kd_t_start)
        return pfl_err("--kd-t-end %g: below --kd-t-start %g (the energy kept grows over the rounds)",
                       cfg->algo.kd_t_end, cfg->algo.kd_t_start);
    return 0;
}

static int fedkd_create(pfl_fl *fl) {
    const pfl_model *m = fl->model;
    const pfl_op *last = &m->ops[m->num_ops - 1];
    if (last->kind != PFL_OP_LINEAR || last->layer != head_row(m))
        return pfl_err("fedkd: model %s: W maps the features entering a final Linear layer, which it lacks", m->name);
    fedkd_state *s = pfl_calloc(1, sizeof *s);
    if (!(fl->algo_state = s)) return -1;
    const size_t V = pfl_model_vector_len(m), DD = (size_t)feature_dim(m) * feature_dim(m);
    float *zeros = pfl_calloc(DD, sizeof(float));
    if (!zeros || !(s->mean = pfl_malloc(2 * V * sizeof(float)))) {
        free(zeros);
        return -1;
    }
    s->one = s->mean + V;
    s->wh = pfl_fl_store(fl, "fedkd-wh", fl->cfg.clients, DD, zeros); /* drawn per client at its first training */
    free(zeros);
    return s->wh ? 0 : -1;
}

static void fedkd_destroy(pfl_fl *fl) {
    fedkd_state *s = fl->algo_state;
    free(s->mean);
    free(s);
    fl->algo_state = NULL;
}

static int fedkd_save(const pfl_fl *fl, pfl_ckpt_writer *w) {
    const fedkd_state *s = fl->algo_state;
    return pfl_store_save(s->wh, w, "fedkd.wh") || pfl_ckpt_put_int(w, "fedkd.down_bytes", s->down_bytes) ? -1 : 0;
}

static int fedkd_load(pfl_fl *fl, pfl_ckpt_reader *r) {
    fedkd_state *s = fl->algo_state;
    if (pfl_store_load(s->wh, r, "fedkd.wh") || pfl_ckpt_get_int(r, "fedkd.down_bytes", &s->down_bytes)) return -1;
    if (s->down_bytes < 0) return pfl_err("%s: fedkd: a message of %lld bytes", r->path, (long long)s->down_bytes);
    return 0;
}

/* W, the parameters each client adds beside its two models. */
static void fedkd_report(const pfl_fl *fl, FILE *f, int what) {
    if (what != PFL_REPORT_SUMMARY) return;
    const size_t D = (size_t)feature_dim(fl->model);
    fprintf(f, ",\n  \"extra_params_per_client\": %zu", fl->model->num_params + D * D);
}

/* PFLlib's main.py: -mlr 0.005, -Ts 0.95, -Te 0.98. */
static const pfl_param fedkd_params[] = {
    {PFL_ALGO_PARAM(FLOAT, "kd-mentee-lr", kd_mentee_lr), .def = 0.005, .min = 0, .max = 1e3, .min_exclusive = true,
     .metavar = "F", .help = "learning rate of the mentee, the model exchanged (the mentor and W train at --lr)"},
    {PFL_ALGO_PARAM(FLOAT, "kd-t-start", kd_t_start), .def = 0.95, .max = 1, .metavar = "F",
     .help = "T_start: the energy (share of squared singular values) the SVD keeps in round 1"},
    {PFL_ALGO_PARAM(FLOAT, "kd-t-end", kd_t_end), .def = 0.98, .max = 1, .metavar = "F",
     .help = "T_end: the energy it would keep after the last round (linear in between)"},
    {PFL_ALGO_PARAM(BOOL, "kd-update", kd_update),
     .help = "compress the update (trained mentee minus the global model, and the mean update), the paper's "
             "gradients (PFLlib compresses the weights)"},
    {PFL_ALGO_PARAM(BOOL, "kd-paper-rank", kd_paper_rank),
     .help = "keep every singular value when fewer do not reach the energy (PFLlib then sends the tensor as zeros)"},
};

const pfl_algo pfl_algo_fedkd = {
    .name = "fedkd",
    .description = "FedKD: a personal mentor and a shared mentee by adaptive mutual distillation, the mentee sent "
                   "as truncated SVD factors (--kd-*)",
    PFL_PARAMS(fedkd_params),
    .has_global = true,
    .stateful = true,
    .keeps_state = true,
    .check = fedkd_check,
    .create = fedkd_create,
    .destroy = fedkd_destroy,
    .local_init = fedkd_init,
    .local_train = fedkd_train,
    .finish = fedkd_finish,
    .aggregate = fedkd_aggregate,
    .message_bytes = fedkd_message_bytes,
    .report = fedkd_report,
    .save = fedkd_save,
    .load = fedkd_load,
};
