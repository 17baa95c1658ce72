/* FedPAC (Xu, Tong, Huang, ICLR 2023, "Personalized Federated Learning
 * with Feature Alignment and Classifier Collaboration"), as PFLlib runs it
 * (clientpac.py, serverpac.py; the authors' JianXu95/FedPAC beside it).
 *
 *  - The model is a feature extractor (every layer below the last), shared
 *    and averaged as FedAvg's, and a classifier (the last layer) that the
 *    server combines per client.
 *  - A selected client first computes, with the extractor it received, the
 *    statistics of its features f over its training split: h_k = p_k mu_k
 *    (p_k its share of class k, mu_k the class's mean feature) and the
 *    variance term V = (sum_k p_k E_k ||f||^2 - p_k^2 ||mu_k||^2) / n.
 *  - Local training: one pass on the classifier (extractor frozen) by CE,
 *    then --epochs on the extractor (classifier frozen) by CE + lambda
 *    MSE(f, c_y), c_y the global prototype of the sample's class (none
 *    before the first prototypes); then its prototypes, the per-class mean
 *    features in evaluation mode.
 *  - The server averages the extractors by training samples, the
 *    prototypes plainly (PFLlib's proto_aggregation), and gives each
 *    uploading client i the classifier sum_j alpha_ij phi_j over the
 *    round's trained classifiers phi_j, alpha_i the minimizer of
 *    alpha^T (diag(V) + D_i) alpha over the simplex, D_i[j][j'] =
 *    sum_k <h_i[k] - h_j[k], h_i[k] - h_j'[k]>, weights below 1e-3 zeroed
 *    (not renormalized); where the program has no solution, the client's
 *    own classifier. PFLlib solves it with cvxpy; pfl solves it exactly
 *    (pfl_fedpac_simplex_qp, an active-set method).
 *  - The personalized model is the global extractor under the client's
 *    classifier from the server.
 *
 * The prototypes and statistics ride in the upload's message block
 * (protos.h), the global prototypes in the global model's; the clients'
 * classifiers are the server's per-client store. docs/algorithms.md,
 * "FedPAC", has the readings. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "algos/protos.h"
#include "util/err.h"

#define ZERO_WEIGHT 1e-3 /* PFLlib: alpha = [(i)*(i>eps) for i in alpha], eps = 1e-3 */

typedef struct {
    pfl_protos_stash stash; /* first: the message a client just made (prototypes, V, h), which its upload sends */
    pfl_store *heads;       /* per client: the classifier the server gave it (the initial one until then) */
} fedpac_state;

static int head_layer(const pfl_model *m) { return m->num_layers - 1; }
static const pfl_layer *head_of(const pfl_model *m) { return &m->layers[head_layer(m)]; }

/* The message: the prototype set (C (D + 1)), then V (1), then h (C x D). */
static size_t message_len(int C, int D) { return pfl_protos_len(C, D) + 1 + (size_t)C * D; }

static int fedpac_blocks(const pfl_config *cfg, pfl_model *m) {
    (void)cfg;
    if (m->num_layers < 2)
        return pfl_err("fedpac: model %s has one layer, so no feature extractor below its classifier", m->name);
    const int D = pfl_protos_feature_dim(m);
    const pfl_block_tensor stats[] = {{"V", 1, {1}}, {"h", 2, {m->classes, D}}};
    return pfl_protos_add_block(m, "fedpac.message", D, 2, stats);
}

static int fedpac_check(const pfl_config *cfg) {
    const pfl_modules_config *mod = &cfg->modules;
    if (mod->ala || mod->flayer_agg)
        return pfl_err("%s: fedpac's classifier comes from the server's combination of the clients' classifiers and "
                       "the client keeps no model of its own, so there is nothing to mix",
                       mod->ala ? "--ala" : "--flayer-agg");
    if (mod->flayer_mask)
        return pfl_err("--flayer-mask: fedpac's server combines the clients' whole classifiers and statistics; a "
                       "masked upload leaves the unsent elements unknown");
    return 0;
}

static int fedpac_create(pfl_fl *fl) {
    const pfl_model *m = fl->model;
    fedpac_state *s = pfl_calloc(1, sizeof *s);
    if (!(fl->algo_state = s)) return -1;
    if (pfl_protos_stash_init(&s->stash, fl, message_len(m->classes, pfl_protos_dim(m)))) return -1;
    s->heads = pfl_fl_store(fl, "fedpac-heads", fl->cfg.clients, head_of(m)->length, fl->global + head_of(m)->offset);
    return s->heads ? 0 : -1;
}

static void fedpac_destroy(pfl_fl *fl) {
    fedpac_state *s = fl->algo_state;
    pfl_protos_stash_free(&s->stash);
    free(s);
    fl->algo_state = NULL;
}

/* The client's model: the global extractor (with its own --bn parts when
 * it keeps some) under its classifier from the server. The global model's
 * own classifier, which the default aggregation averages, is never used. */
static const float *fedpac_model(pfl_fl *fl, int client, float *out) {
    const fedpac_state *s = fl->algo_state;
    const pfl_model *m = fl->model;
    const float *from = fl->client_state ? pfl_client_model_get(fl, client, out) : fl->global;
    if (from != out) memcpy(out, from, pfl_model_vector_len(m) * sizeof(float));
    memcpy(out + head_of(m)->offset, pfl_store_read(s->heads, client), head_of(m)->length * sizeof(float));
    pfl_store_release(s->heads, client);
    return out;
}

static void fedpac_init(pfl_fl *fl, int client, float *model) { fedpac_model(fl, client, model); }

/* ---- the statistics ---- */

typedef struct {
    pfl_proto_sums sums; /* per class: sum of f, count */
    double *sq;          /* per class: sum of ||f||^2 */
} stats_acc;

static void add_stats(void *ctx, const float *z, const uint8_t *labels, int B) {
    stats_acc *a = ctx;
    const int D = a->sums.D;
    for (int n = 0; n < B; n++)
        for (int d = 0; d < D; d++) a->sq[labels[n]] += (double)z[(size_t)n * D + d] * z[(size_t)n * D + d];
    pfl_proto_sums_add(&a->sums, z, labels, B, false);
}

/* V and h from the per-class sums (clientpac.py's statistics_extraction:
 * trace(F_k^T F_k) / n_k is the class's mean of ||f||^2). */
static void finish_stats(const stats_acc *a, float *v, float *h) {
    const int C = a->sums.C, D = a->sums.D;
    long n = 0;
    for (int c = 0; c < C; c++) n += a->sums.count[c];
    double var = 0.0;
    memset(h, 0, sizeof(float) * (size_t)C * D);
    for (int c = 0; c < C && n > 0; c++) {
        const long nk = a->sums.count[c];
        if (nk == 0) continue;
        const double p = (double)nk / n;
        double mu2 = 0.0;
        for (int d = 0; d < D; d++) {
            const double mu = a->sums.sum[(size_t)c * D + d] / nk;
            mu2 += mu * mu;
            h[(size_t)c * D + d] = (float)(p * mu);
        }
        var += p * a->sq[c] / nk - p * p * mu2;
    }
    *v = n > 0 ? (float)(var / n) : 0.0f;
}

static int stats_init(stats_acc *a, int C, int D) {
    a->sq = pfl_calloc((size_t)C, sizeof(double));
    if (a->sq && !pfl_proto_sums_init(&a->sums, C, D)) return 0;
    free(a->sq);
    return -1;
}

static void stats_free(stats_acc *a) {
    pfl_proto_sums_free(&a->sums);
    free(a->sq);
}

int pfl_fedpac_statistics(const float *f, const uint8_t *labels, int n, int C, int D, float *v, float *h) {
    stats_acc a;
    if (stats_init(&a, C, D)) return -1;
    add_stats(&a, f, labels, n);
    finish_stats(&a, v, h);
    stats_free(&a);
    return 0;
}

/* ---- local training ---- */

/* The statistics under the received extractor, one pass on the classifier,
 * --epochs on the extractor with the alignment term, then the prototypes. */
static void fedpac_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    fedpac_state *s = fl->algo_state;
    const pfl_model *m = fl->model;
    const int C = m->classes, D = pfl_protos_dim(m), L = m->num_layers;
    float *message = pfl_protos_stash_here(&s->stash, fl), *v = message + pfl_protos_len(C, D), *h = v + 1;
    stats_acc a;
    if (stats_init(&a, C, D)) return; /* out of memory: this client does not train */
    pfl_protos_each_batch(fl, w, client, model, head_layer(m), add_stats, &a);
    finish_stats(&a, v, h);
    stats_free(&a);

    bool base_frozen[PFL_MAX_LAYERS] = {false}, head_frozen[PFL_MAX_LAYERS] = {false};
    for (int l = 0; l < L; l++) base_frozen[l] = l < L - 1, head_frozen[l] = l == L - 1;
    base_frozen[L] = head_frozen[L] = true; /* the message block */
    pfl_step head = pfl_step_default(fl), base = pfl_step_default(fl);
    pfl_split_round_steps(fl, 1, &head, &base); /* PFLlib: one pass on the classifier, then the epochs */
    head.opt.frozen = base_frozen;
    pfl_step_run(fl, client, w, model, &head, stats);
    base.opt.frozen = head_frozen;
    base.shuffle = PFL_RNG_SHUFFLE_PERSONAL; /* a second pass over the data: its own batch order */
    pfl_protos_target t = {pfl_protos_block_const(m, model), C, D};
    const pfl_loss_term align = {.name = "fedpac's feature alignment to the global prototypes", .at = head_layer(m),
                                 .weight = fl->cfg.algo.proto_lambda, .value = pfl_protos_mse_value, .ctx = &t};
    if (pfl_protos_count(t.set, C, D) > 0) pfl_step_add_term(&base, &align);
    pfl_step_run(fl, client, w, model, &base, stats);
    pfl_protos_of_split(fl, w, client, model, head_layer(m), false, message);
}

/* ---- the server ---- */

/* Solves the equality-constrained subproblem on the free variables F of
 * the active-set method: Q_FF p - nu 1 = -g_F, 1^T p = 0, by Gaussian
 * elimination with partial pivoting on the (f + 1)-square system a (its
 * last column the right side). -1 when singular. */
static int solve_kkt(double *a, int f, double scale, double *p, double *nu) {
    const int n = f + 1, cols = n + 1;
    for (int col = 0; col < n; col++) {
        int piv = col;
        for (int r = col + 1; r < n; r++)
            if (fabs(a[r * cols + col]) > fabs(a[piv * cols + col])) piv = r;
        if (fabs(a[piv * cols + col]) <= 1e-13 * scale) return -1;
        for (int c = 0; c < cols && piv != col; c++) {
            const double t = a[col * cols + c];
            a[col * cols + c] = a[piv * cols + c], a[piv * cols + c] = t;
        }
        for (int r = 0; r < n; r++) {
            if (r == col) continue;
            const double k = a[r * cols + col] / a[col * cols + col];
            for (int c = col; c < cols; c++) a[r * cols + c] -= k * a[col * cols + c];
        }
    }
    for (int r = 0; r < f; r++) p[r] = a[r * cols + n] / a[r * cols + r];
    *nu = a[f * cols + n] / a[f * cols + f];
    return 0;
}

int pfl_fedpac_simplex_qp(const double *P, int n, double *x) {
    double scale = 0.0;
    for (int i = 0; i < n * n; i++) scale = fabs(P[i]) > scale ? fabs(P[i]) : scale;
    int *free_idx = pfl_malloc(sizeof(int) * (size_t)n), rc = -1;
    bool *is_free = pfl_calloc((size_t)n, sizeof(bool));
    double *g = pfl_malloc(sizeof(double) * (size_t)n), *p = pfl_malloc(sizeof(double) * (size_t)n);
    double *a = pfl_malloc(sizeof(double) * (size_t)(n + 1) * (size_t)(n + 2));
    if (!free_idx || !is_free || !g || !p || !a) goto done;
    /* start at the vertex of the smallest diagonal entry, every other bound active */
    int start = 0;
    for (int i = 1; i < n; i++) start = P[i * n + i] < P[start * n + start] ? i : start;
    for (int i = 0; i < n; i++) x[i] = i == start;
    is_free[start] = true;
    if (scale == 0.0) { /* a zero objective: every point of the simplex is a minimizer */
        rc = 0;
        goto done;
    }
    for (int iter = 0; iter < 50 * n + 50; iter++) {
        for (int i = 0; i < n; i++) {
            g[i] = 0.0;
            for (int j = 0; j < n; j++) g[i] += P[i * n + j] * x[j];
        }
        int f = 0;
        for (int i = 0; i < n; i++)
            if (is_free[i]) free_idx[f++] = i;
        const int cols = f + 2;
        for (int r = 0; r < f; r++) {
            for (int c = 0; c < f; c++) a[r * cols + c] = P[free_idx[r] * n + free_idx[c]];
            a[r * cols + f] = -1.0, a[r * cols + f + 1] = -g[free_idx[r]];
        }
        for (int c = 0; c < f; c++) a[f * cols + c] = 1.0;
        a[f * cols + f] = a[f * cols + f + 1] = 0.0;
        double nu, step = 0.0;
        if (solve_kkt(a, f, scale, p, &nu)) goto done;
        for (int r = 0; r < f; r++) step = fabs(p[r]) > step ? fabs(p[r]) : step;
        if (step <= 1e-12) {
            /* stationary on the free set: the active bounds' multipliers g_i - nu */
            int worst = -1;
            double lowest = -1e-12 * scale;
            for (int i = 0; i < n; i++)
                if (!is_free[i] && g[i] - nu < lowest) lowest = g[i] - nu, worst = i;
            if (worst < 0) {
                rc = 0;
                goto done;
            }
            is_free[worst] = true;
            continue;
        }
        /* the longest step toward the subproblem's minimizer that stays feasible */
        double alpha = 1.0;
        int blocking = -1;
        for (int r = 0; r < f; r++)
            if (p[r] < 0.0 && -x[free_idx[r]] / p[r] < alpha) alpha = -x[free_idx[r]] / p[r], blocking = free_idx[r];
        for (int r = 0; r < f; r++) x[free_idx[r]] += alpha * p[r];
        if (blocking >= 0) x[blocking] = 0.0, is_free[blocking] = false;
    }
done:
    free(free_idx);
    free(is_free);
    free(g);
    free(p);
    free(a);
    return rc;
}

void pfl_fedpac_qp_matrix(const double *gram, const float *v, int n, int i, double *P) {
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++)
            P[a * n + b] = gram[i * n + i] - gram[i * n + a] - gram[i * n + b] + gram[a * n + b] + (a == b ? v[a] : 0.0);
}

/* gram[a][b] = <h_a, h_b> over the uploads' flattened h (C x D each). */
static void gram_of(const pfl_model *m, float *const *uploads, int n, size_t CD, double *gram) {
    const size_t at = pfl_protos_len(m->classes, pfl_protos_dim(m)) + 1;
    for (int a = 0; a < n; a++)
        for (int b = a; b < n; b++) {
            const float *ha = pfl_protos_block_const(m, uploads[a]) + at, *hb = pfl_protos_block_const(m, uploads[b]) + at;
            double dot = 0.0;
            for (size_t j = 0; j < CD; j++) dot += (double)ha[j] * hb[j];
            gram[a * n + b] = gram[b * n + a] = dot;
        }
}

void pfl_fedpac_combine(const double *alpha, int n, float *const *uploads, size_t offset, size_t len, float *out) {
    memset(out, 0, len * sizeof(float));
    for (int j = 0; j < n; j++) {
        const float weight = alpha[j] > ZERO_WEIGHT ? (float)alpha[j] : 0.0f;
        if (weight == 0.0f) continue;
        for (size_t e = 0; e < len; e++) out[e] += weight * uploads[j][offset + e];
    }
}

/* Client i's classifier: the combination of the uploads', or its own. */
static void combine_heads(fedpac_state *s, const pfl_model *m, int client, const double *alpha, float *const *uploads,
                          int n, int own) {
    const pfl_layer *head = head_of(m);
    float *row = pfl_store_write(s->heads, client);
    if (!row) return; /* the store's error fails the round */
    if (alpha) pfl_fedpac_combine(alpha, n, uploads, head->offset, head->length, row);
    else memcpy(row, uploads[own] + head->offset, head->length * sizeof(float));
    pfl_store_release(s->heads, client);
}

static void fedpac_aggregate(pfl_fl *fl, const int *clients, int n, float *const *uploads) {
    fedpac_state *s = fl->algo_state;
    const pfl_model *m = fl->model;
    const int C = m->classes, D = pfl_protos_dim(m);
    const size_t CD = (size_t)C * D;
    /* the extractor (and, unused, the classifier), weighted by training samples */
    pfl_default_aggregate(fl, clients, n, uploads);
    float *global = pfl_protos_block(m, fl->global);
    memset(global, 0, message_len(C, D) * sizeof(float));
    pfl_protos_mean(m, uploads, n, D, global);
    double *gram = pfl_malloc(sizeof(double) * (size_t)n * n), *P = pfl_malloc(sizeof(double) * (size_t)n * n);
    double *alpha = pfl_malloc(sizeof(double) * (size_t)n);
    float *v = pfl_malloc(sizeof(float) * (size_t)n);
    if (gram && P && alpha && v) {
        for (int k = 0; k < n; k++) v[k] = pfl_protos_block_const(m, uploads[k])[pfl_protos_len(C, D)];
        gram_of(m, uploads, n, CD, gram);
        for (int i = 0; i < n; i++) {
            pfl_fedpac_qp_matrix(gram, v, n, i, P);
            const bool solved = pfl_fedpac_simplex_qp(P, n, alpha) == 0;
            combine_heads(s, m, clients[i], solved ? alpha : NULL, uploads, n, i);
        }
    }
    free(gram), free(P), free(alpha), free(v);
}

/* Down: the extractor, the client's classifier and the global prototypes;
 * up: extractor, classifier, prototypes, V and h. */
static void fedpac_message_bytes(const pfl_fl *fl, int client, const uint8_t *sent, const float *upload, uint64_t *down,
                                uint64_t *up) {
    (void)sent, (void)upload;
    const pfl_model *m = fl->model;
    const int C = m->classes, D = pfl_protos_dim(m);
    uint64_t model = pfl_model_backbone_params(m);
    for (int l = 0; l < m->num_layers; l++)
        if (pfl_state_shared(fl, l)) model += m->layers[l].state_length;
    *down = 4 * model + pfl_protos_bytes(pfl_protos_block_const(m, fl->global), C, D);
    *up = 4 * model + pfl_protos_client_bytes(fl, client, D) + 4 * (1 + (uint64_t)C * D);
}

static int fedpac_save(const pfl_fl *fl, pfl_ckpt_writer *w) {
    const fedpac_state *s = fl->algo_state;
    return pfl_store_save(s->heads, w, "fedpac.heads");
}

static int fedpac_load(pfl_fl *fl, pfl_ckpt_reader *r) {
    fedpac_state *s = fl->algo_state;
    return pfl_store_load(s->heads, r, "fedpac.heads");
}

/* PFLlib's main.py: -lam/--lamda 1.0 (the authors' code: "self.lam = args.lam  # 1.0 for mse_loss"). */
static const pfl_param fedpac_params[] = {
    {PFL_ALGO_PARAM(FLOAT, "proto-lambda", proto_lambda), .def = 1.0, .max = 1e6, .metavar = "F",
     .help = "weight lambda of the feature alignment: the mean squared distance of the features to their class's "
             "global prototype"},
};

const pfl_algo pfl_algo_fedpac = {
    .name = "fedpac",
    .description = "FedPAC: extractor averaged and aligned to global class prototypes; each client's classifier a "
                   "combination of the clients' weighted by a quadratic program (--proto-lambda)",
    PFL_PARAMS(fedpac_params),
    .has_global = false, /* the classifiers are per client */
    .blocks = fedpac_blocks,
    .check = fedpac_check,
    .create = fedpac_create,
    .destroy = fedpac_destroy,
    .local_init = fedpac_init,
    .local_train = fedpac_train,
    .upload = pfl_protos_upload,
    .whole_uploads = true, /* MPI: its aggregate reads the uploads' message blocks */
    .aggregate = fedpac_aggregate,
    .personal_model = fedpac_model,
    .message_bytes = fedpac_message_bytes,
    .save = fedpac_save,
    .load = fedpac_load,
};
