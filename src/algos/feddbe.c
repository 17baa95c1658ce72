/* FedDBE (Zhang, Hua, Cao, Wang, Song, Xue, Ma, Guan, NeurIPS 2023,
 * "Eliminating Domain Bias for Federated Learning in Representation Space"):
 * FedAvg plus the Domain Bias Eliminator, two pieces on the representation
 * h the base gives the head (the features entering the last layer):
 *
 *  - PRBM, a personalized representation bias memory: a vector m of the
 *    representation's size that each client keeps and trains; the head reads
 *    h + m. It is an extra parameter block of the model kept by each client
 *    ("feddbe.prbm", zeros at first: PFLlib's client_mean);
 *  - MR, mean regularization: klw x mean_d 0.5 (r_d - g_d)^2, r a running
 *    mean of the batches' mean representation, r <- (1 - mu) r + mu mean_b(h)
 *    (reset to 0 when local training starts; its old value is held fixed,
 *    PFLlib's detach_running), g the global mean, which the server computes
 *    once before round 1 from every client's r after one local training of
 *    the initial model (PFLlib's "initialization period": plain
 *    cross-entropy, weighted by training samples) and never changes.
 *
 * The local loss is CE(head(h + m)) + klw MR; the model (base and head, the
 * head reading h + m) is averaged as FedAvg does. The personalized model is
 * the global model with the client's m; the global model is evaluated
 * without it. PFLlib: serverdbe.py, clientdbe.py (the authors' TsingZ0/DBE
 * is the same code). docs/algorithms.md, "FedDBE". */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "util/err.h"

typedef struct {
    float *global_mean; /* g: D floats, before round 1 */
} feddbe_state;

static int head_row(const pfl_model *m) { return m->num_layers - 1; }
static int prbm_row(const pfl_model *m) { return m->num_layers; } /* the one extra block */
static int feature_dim(const pfl_model *m) { return (int)pfl_model_layer_input_size(m, head_row(m)); }

/* The parts of a model vector FedDBE's loss reads, and the same of its gradient. */
static pfl_feddbe_view view_of(const pfl_model *m, const float *v) {
    const pfl_layer *head = &m->layers[head_row(m)];
    const int D = feature_dim(m), C = m->classes;
    return (pfl_feddbe_view){D, C, v + head->offset, v + head->offset + (size_t)C * D, v + m->layers[prbm_row(m)].offset};
}

static pfl_feddbe_grads grads_of(const pfl_model *m, float *g) {
    const pfl_layer *head = &m->layers[head_row(m)];
    return (pfl_feddbe_grads){g + head->offset, g + head->offset + (size_t)m->classes * feature_dim(m),
                              g + m->layers[prbm_row(m)].offset};
}

static int feddbe_blocks(const pfl_config *cfg, pfl_model *m) {
    (void)cfg;
    const pfl_op *last = &m->ops[m->num_ops - 1];
    if (last->kind != PFL_OP_LINEAR || last->layer != m->num_layers - 1 || m->layers[last->layer].num_tensors != 2)
        return pfl_err("feddbe: model %s: the head that reads h + m must be a final Linear layer with bias", m->name);
    const pfl_block_tensor prbm[] = {{"client_mean", 1, {feature_dim(m)}}};
    return pfl_model_add_block(m, "feddbe.prbm", true, PFL_INIT_ZERO, 1, prbm);
}

/* ALA learns its weights on the backbone's output head(h); FedDBE's model is head(h + m). */
static int feddbe_check(const pfl_config *cfg) {
    if (cfg->modules.ala)
        return pfl_err("--ala: feddbe's output is its head on h + m (the client's PRBM); ALA learns its weights on "
                       "the backbone's own output head(h), a network feddbe never runs");
    return 0;
}

/* What a client receives: the global model with its own PRBM. */
static void feddbe_receive(pfl_fl *fl, int client, const float *state, float *received) {
    (void)client;
    const pfl_model *m = fl->model;
    const pfl_layer *prbm = &m->layers[prbm_row(m)];
    memcpy(received, fl->global, pfl_model_vector_len(m) * sizeof(float));
    memcpy(received + prbm->offset, state + prbm->offset, prbm->length * sizeof(float));
}

/* ---- the loss ---- */

static void head_forward(const pfl_feddbe_view *v, const float *h, float *shifted, float *logits) {
    for (int d = 0; d < v->D; d++) shifted[d] = h[d] + v->prbm[d];
    for (int c = 0; c < v->C; c++) {
        double acc = v->head_b[c];
        for (int d = 0; d < v->D; d++) acc += (double)v->head_w[(size_t)c * v->D + d] * shifted[d];
        logits[c] = (float)acc;
    }
}

/* log-softmax's gradient of the batch-mean cross-entropy: p - onehot over B; returns -log p_y. */
static double xent_grad(const float *z, int C, int y, int B, float *g) {
    float zmax = z[0];
    for (int c = 1; c < C; c++) zmax = z[c] > zmax ? z[c] : zmax;
    double sum = 0.0;
    for (int c = 0; c < C; c++) sum += exp((double)(z[c] - zmax));
    for (int c = 0; c < C; c++) g[c] = (float)((exp((double)(z[c] - zmax)) / sum - (c == y)) / B);
    return log(sum) - (double)(z[y] - zmax);
}

double pfl_feddbe_loss(const pfl_feddbe_view *v, const pfl_feddbe_grads *g, const float *h, const uint8_t *y, int B,
                       float *running, const float *global_mean, float momentum, float klw, float *dh, int *correct,
                       float *scratch) {
    const int D = v->D, C = v->C;
    float *shifted = scratch, *logits = shifted + D, *dlogits = logits + C;
    /* MR: the running mean moves with this batch's mean, through which alone the gradient flows */
    double reg = 0.0;
    for (int d = 0; d < D; d++) {
        double mean = 0.0;
        for (int n = 0; n < B; n++) mean += h[(size_t)n * D + d];
        running[d] = (float)((1.0 - momentum) * running[d] + momentum * (mean / B));
        const double diff = (double)running[d] - global_mean[d];
        reg += 0.5 * diff * diff;
        if (dh)
            for (int n = 0; n < B; n++) dh[(size_t)n * D + d] = (float)(klw * momentum * diff / ((double)B * D));
    }
    double ce = 0.0;
    *correct = 0;
    for (int n = 0; n < B; n++) {
        const float *hn = h + (size_t)n * D;
        head_forward(v, hn, shifted, logits);
        *correct += pfl_argmax(logits, C) == y[n];
        ce += xent_grad(logits, C, y[n], B, dlogits) / B;
        if (!dh) continue;
        for (int c = 0; c < C; c++) {
            g->head_b[c] += dlogits[c];
            for (int d = 0; d < D; d++) g->head_w[(size_t)c * D + d] += dlogits[c] * shifted[d];
        }
        for (int d = 0; d < D; d++) {
            double back = 0.0; /* d loss / d (h + m) */
            for (int c = 0; c < C; c++) back += (double)v->head_w[(size_t)c * D + d] * dlogits[c];
            dh[(size_t)n * D + d] += (float)back;
            g->prbm[d] += (float)back;
        }
    }
    return ce + (double)klw * reg / D;
}

typedef struct {
    const pfl_fl *fl;
    float *running, *scratch;
} dbe_term;

static double dbe_term_value(void *ctx, const pfl_term_batch *b, float *dz, int *correct) {
    const dbe_term *t = ctx;
    const pfl_fl *fl = t->fl;
    const feddbe_state *s = fl->algo_state;
    const pfl_feddbe_view v = view_of(fl->model, b->params);
    const pfl_feddbe_grads g = grads_of(fl->model, b->grads);
    return pfl_feddbe_loss(&v, &g, b->z, b->labels, b->B, t->running, s->global_mean, fl->cfg.algo.dbe_momentum,
                           fl->cfg.algo.dbe_klw, dz, correct, t->scratch);
}

/* CE(head(h + m)) + klw MR on the features entering the head; SGD on every
 * row, the PRBM's included (PFLlib's opt_client_mean, at --lr). */
static void feddbe_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    const pfl_model *m = fl->model;
    const int D = feature_dim(m);
    float *mem = pfl_calloc((size_t)2 * D + 2 * (size_t)m->classes, sizeof(float)); /* r starts at 0 */
    if (!mem) return; /* out of memory: this client does not train */
    dbe_term t = {fl, mem, mem + D};
    pfl_step s = pfl_step_default(fl);
    s.ce_weight = 0.0;
    const pfl_loss_term term = {.name = "feddbe's PRBM and mean regularizer", .at = head_row(m), .weight = 1.0f,
                                .value = dbe_term_value, .ctx = &t, .predicts = true};
    pfl_step_add_term(&s, &term);
    pfl_step_run(fl, client, w, model, &s, stats);
    free(mem);
}

/* ---- the initialization period: the global mean ---- */

typedef struct {
    float momentum, *running;
    int D;
} mean_tracker;

/* The running mean of the representation over a training's batches (no loss of its own). */
static void track_mean(void *ctx, const pfl_block_batch *b) {
    mean_tracker *t = ctx;
    for (int d = 0; d < t->D; d++) {
        double mean = 0.0;
        for (int n = 0; n < b->B; n++) mean += b->features[(size_t)n * t->D + d];
        t->running[d] = (float)((1.0 - t->momentum) * t->running[d] + t->momentum * (mean / b->B));
    }
}

/* Client `client`'s r after one local training (plain cross-entropy, the
 * PRBM not yet in play) of the initial model, PFLlib's clients in the
 * server's constructor; the trained model is dropped (round 1 sends the
 * global model). */
static void initial_running_mean(pfl_fl *fl, int client, pfl_worker *w, float *running) {
    const pfl_model *m = fl->model;
    bool frozen[PFL_MAX_LAYERS] = {false};
    frozen[prbm_row(m)] = true;
    mean_tracker t = {fl->cfg.algo.dbe_momentum, running, feature_dim(m)};
    pfl_step s = pfl_step_default(fl);
    s.opt.frozen = frozen;
    pfl_step_add_block(&s, head_row(m), track_mean, &t);
    memcpy(w->model, fl->global, pfl_model_vector_len(m) * sizeof(float));
    pfl_train_stats stats = {0};
    pfl_step_run(fl, client, w, w->model, &s, &stats);
}

/* g = sum_k n_k r_k / sum_k n_k over every client. Every MPI rank computes
 * it from every client (the data is on each), as it runs the server's steps. */
static int global_mean(pfl_fl *fl, float *g) {
    const int N = fl->cfg.clients, D = feature_dim(fl->model);
    float *r = pfl_calloc((size_t)N * D, sizeof(float));
    if (!r) return -1;
#pragma omp parallel for schedule(dynamic, 1) num_threads(fl->num_workers)
    for (int c = 0; c < N; c++) initial_running_mean(fl, c, &fl->workers[omp_get_thread_num()], r + (size_t)c * D);
    double total = 0.0;
    for (int c = 0; c < N; c++) total += fl->part->clients[c].n_train;
    for (int d = 0; d < D; d++) {
        double acc = 0.0;
        for (int c = 0; c < N; c++) acc += fl->part->clients[c].n_train / total * r[(size_t)c * D + d];
        g[d] = (float)acc;
    }
    free(r);
    return 0;
}

static int feddbe_create(pfl_fl *fl) {
    feddbe_state *s = pfl_calloc(1, sizeof *s);
    if (!(fl->algo_state = s)) return -1;
    if (!(s->global_mean = pfl_malloc(sizeof(float) * (size_t)feature_dim(fl->model)))) return -1;
    return global_mean(fl, s->global_mean);
}

static void feddbe_destroy(pfl_fl *fl) {
    feddbe_state *s = fl->algo_state;
    free(s->global_mean);
    free(s);
    fl->algo_state = NULL;
}

const float *pfl_feddbe_global_mean(const pfl_fl *fl) { return ((const feddbe_state *)fl->algo_state)->global_mean; }

/* ---- evaluation and outputs ---- */

/* The personalized model's output: its head on h + m. */
static int feddbe_personal_correct(const pfl_fl *fl, pfl_exec *x, const float *params) {
    const pfl_model *m = fl->model;
    const int D = feature_dim(m), C = m->classes, B = x->batch;
    float *mem = pfl_malloc(sizeof(float) * ((size_t)B * D + D + C));
    if (!mem) return 0;
    const pfl_feddbe_view v = view_of(m, params);
    const float *h = pfl_exec_features(x, head_row(m), mem);
    const uint8_t *labels = pfl_exec_labels(x);
    int correct = 0;
    for (int n = 0; n < B; n++) {
        head_forward(&v, h + (size_t)n * D, mem + (size_t)B * D, mem + (size_t)B * D + D);
        correct += pfl_argmax(mem + (size_t)B * D + D, C) == labels[n];
    }
    free(mem);
    return correct;
}

/* The PRBM each client adds, and the initialization period's messages:
 * each client's r up and g down once, before round 1 (not in any round's
 * bytes). */
static void feddbe_report(const pfl_fl *fl, FILE *f, int what) {
    if (what != PFL_REPORT_SUMMARY) return;
    const uint64_t D = (uint64_t)feature_dim(fl->model), N = (uint64_t)fl->cfg.clients;
    fprintf(f, ",\n  \"extra_params_per_client\": %llu", (unsigned long long)D);
    fprintf(f, ",\n  \"init_bytes_up\": %llu,\n  \"init_bytes_down\": %llu", (unsigned long long)(4 * D * N),
            (unsigned long long)(4 * D * N));
}

/* The authors' run_me.sh (TsingZ0/DBE), its Fashion-MNIST cnn run: "-mo 1
 * -klw 50"; PFLlib's main.py defaults (-mo 0.1, -klw 0.0) are shared
 * defaults that switch MR off. */
static const pfl_param feddbe_params[] = {
    {PFL_ALGO_PARAM(FLOAT, "dbe-momentum", dbe_momentum), .def = 1.0, .max = 1.0, .metavar = "F",
     .help = "momentum of MR's running mean of the representation, r <- (1 - mo) r + mo mean(h), in [0, 1]"},
    {PFL_ALGO_PARAM(FLOAT, "dbe-klw", dbe_klw), .def = 50.0, .max = 1e6, .metavar = "F",
     .help = "weight of the mean regularization (MR) toward the global mean representation"},
};

const pfl_algo pfl_algo_feddbe = {
    .name = "feddbe",
    .description = "FedDBE: FedAvg with a personal representation bias (PRBM) under the head and the "
                   "representation's mean regularized toward the global one (--dbe-*)",
    PFL_PARAMS(feddbe_params),
    .has_global = true,
    .stateful = true,
    .personal = pfl_personal_unshared, /* the PRBM */
    .blocks = feddbe_blocks,
    .check = feddbe_check,
    .create = feddbe_create,
    .destroy = feddbe_destroy,
    .receive = feddbe_receive,
    .local_train = feddbe_train,
    .personal_correct = feddbe_personal_correct,
    .report = feddbe_report,
};
