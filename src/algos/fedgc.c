/* FedGC (Niu & Deng, AAAI 2022, "Federated Learning for Face Recognition
 * with Gradient Correction"), as PFLlib has it (clientgc.py, servergc.py).
 *
 * Each client's classifier covers only the classes it holds (its "class
 * embeddings", a bias-free Linear of C_k rows) and never leaves the server's
 * hands for the others: the server keeps every client's head. A round:
 *
 *  - the server sends the global feature extractor and the client's own head;
 *  - the client trains both by SGD on the cross-entropy over its classes;
 *  - the server averages the extractors (FedAvg), takes back the heads, and
 *    corrects every client's head by one SGD step (rate --lr x --gc-lambda)
 *    on the softmax-based regularizer
 *
 *      Reg = sum_c m_c -log( exp(e_c.e_c) /
 *                            (exp(e_c.e_c) + sum_{j lacks c} sum_{r in j} exp(w_{j,r}.e_c)) )
 *
 *    with e_c the mean of the rows for class c of the m_c clients that hold
 *    it, held fixed (PFLlib sums the term once per such row, and builds e_c
 *    from .data): it pushes the rows of the clients that lack c away from c.
 *
 * pfl's model vector has one C-class head; a client's head is that head
 * with the rows of the classes it lacks at zero, the bias at zero, and those
 * classes out of its softmax (the step's ce_offset at -INFINITY) and out of
 * its predictions (fedgc_correct: a class whose row is all zero is one the
 * client lacks). The server's heads are a per-client store, checkpointed.
 * --ala is refused (its weights learn on all classes); FLAYER's modules are
 * honoured (the head mix leaves a lacking class's row at zero).
 * The global model evaluated is the averaged extractor under the class
 * means e_c (pfl's: PFLlib evaluates no global model). docs/algorithms.md,
 * "FedGC", has the readings. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "util/err.h"

typedef struct {
    pfl_store *heads; /* per client (the server's copy): its head's C x D weight, rows of the classes it lacks 0 */
    uint8_t *holds;   /* clients x C: the client has training samples of the class */
    int *holders;     /* per class: how many clients hold it (m_c) */
    double *emb;      /* C x D: the class embeddings e_c */
    double *log_z;    /* per class: log(exp(e_c.e_c) + sum over the clients lacking it) */
    float *grad;      /* C x D: one client's gradient */
} gc_state;

static int head_layer(const pfl_model *m) { return m->num_layers - 1; }
static int feature_dim(const pfl_model *m) { return (int)pfl_model_layer_input_size(m, head_layer(m)); }
static size_t head_weights(const pfl_model *m) { return (size_t)m->classes * (size_t)feature_dim(m); }

static const uint8_t *holds_of(const pfl_fl *fl, int client) {
    const gc_state *s = fl->algo_state;
    return s->holds + (size_t)client * (size_t)fl->model->classes;
}

/* ---- the client's model: the global extractor under its own head ---- */

/* Writes the client's head (the server's copy) into a model vector: its
 * weight rows, the bias zero (PFLlib's heads have none). */
static void put_head(const pfl_fl *fl, int client, float *model) {
    const gc_state *s = fl->algo_state;
    const pfl_layer *h = &fl->model->layers[head_layer(fl->model)];
    const size_t W = head_weights(fl->model);
    memcpy(model + h->offset, pfl_store_read(s->heads, client), sizeof(float) * W);
    memset(model + h->offset + W, 0, sizeof(float) * (h->length - W));
}

static void build_model(pfl_fl *fl, int client, float *model) {
    memcpy(model, fl->global, pfl_model_vector_len(fl->model) * sizeof(float));
    put_head(fl, client, model);
}

/* Stateful runs (a module, --bn local or stats-local): what the server sends. */
static void gc_receive(pfl_fl *fl, int client, const float *state, float *received) {
    (void)state;
    build_model(fl, client, received);
}

static void gc_init(pfl_fl *fl, int client, float *model) {
    if (fl->client_state) pfl_default_local_init(fl, client, model);
    else build_model(fl, client, model);
}

static const float *gc_personal_model(pfl_fl *fl, int client, float *scratch) {
    if (fl->client_state) return pfl_default_personal_model(fl, client, scratch);
    build_model(fl, client, scratch);
    return scratch;
}

int pfl_fedgc_predict(const float *logits, const uint8_t *held, int C) {
    int best = -1;
    for (int c = 0; c < C; c++)
        if (held[c] && (best < 0 || logits[c] > logits[best])) best = c;
    return best;
}

/* Correct predictions of a client's model: the argmax over the classes its
 * head has a row for (a row all zero, bias included, is a class it lacks). */
static int gc_correct(const pfl_fl *fl, pfl_exec *x, const float *params) {
    const pfl_model *m = fl->model;
    const int C = m->classes, D = feature_dim(m), B = x->batch;
    const pfl_layer *h = &m->layers[head_layer(m)];
    uint8_t held[256];
    for (int c = 0; c < C; c++) {
        const float *row = params + h->offset + (size_t)c * D;
        held[c] = h->length > head_weights(m) && params[h->offset + head_weights(m) + c] != 0.0f;
        for (int d = 0; d < D && !held[c]; d++) held[c] = row[d] != 0.0f;
    }
    float *scratch = pfl_malloc(sizeof(float) * (size_t)B * C);
    if (!scratch) return 0;
    const float *logits = pfl_exec_features(x, m->num_layers, scratch);
    const uint8_t *labels = pfl_exec_labels(x);
    int correct = 0;
    for (int n = 0; n < B; n++) correct += pfl_fedgc_predict(logits + (size_t)n * C, held, C) == labels[n];
    free(scratch);
    return correct;
}

/* ---- local training: cross-entropy over the client's classes ---- */

/* The head's bias stays zero: PFLlib's heads are bias-free. */
static void no_bias_step(void *ctx, const pfl_model *m, const float *params, float *grads) {
    (void)ctx, (void)params;
    const pfl_layer *h = &m->layers[head_layer(m)];
    const size_t W = head_weights(m);
    memset(grads + h->offset + W, 0, sizeof(float) * (h->length - W));
}

static void gc_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    const int C = fl->model->classes;
    const uint8_t *held = holds_of(fl, client);
    float offset[256];
    for (int c = 0; c < C; c++) offset[c] = held[c] ? 0.0f : -INFINITY;
    pfl_step s = pfl_step_default(fl);
    s.ce_offset = offset;
    if (fl->model->layers[head_layer(fl->model)].length > head_weights(fl->model))
        pfl_step_add_grad(&s, no_bias_step, NULL);
    pfl_step_run(fl, client, w, model, &s, stats);
}

/* ---- the server: heads back, the correction step ---- */

/* e_c, the mean of the rows for c over the clients that hold it (client
 * order; 0 for a class nobody holds). */
static void class_embeddings(pfl_fl *fl) {
    gc_state *s = fl->algo_state;
    const int C = fl->model->classes, D = feature_dim(fl->model), N = fl->cfg.clients;
    memset(s->emb, 0, sizeof(double) * (size_t)C * D);
    for (int j = 0; j < N; j++) {
        const float *head = pfl_store_read(s->heads, j);
        for (int c = 0; c < C; c++)
            if (holds_of(fl, j)[c])
                for (int d = 0; d < D; d++) s->emb[(size_t)c * D + d] += head[(size_t)c * D + d];
    }
    for (int c = 0; c < C; c++)
        for (int d = 0; d < D && s->holders[c] > 0; d++) s->emb[(size_t)c * D + d] /= s->holders[c];
}

static double dot_row(const float *w, const double *e, int D) {
    double acc = 0.0;
    for (int d = 0; d < D; d++) acc += (double)w[d] * e[d];
    return acc;
}

static double dot_d(const double *a, const double *b, int D) {
    double acc = 0.0;
    for (int d = 0; d < D; d++) acc += a[d] * b[d];
    return acc;
}

static double log_add(double a, double b) {
    const double hi = a > b ? a : b, lo = a > b ? b : a;
    return lo == -INFINITY ? hi : hi + log1p(exp(lo - hi));
}

/* log(exp(e_c.e_c) + sum_{j lacks c} sum_{r in j} exp(w_{j,r}.e_c)) per class. */
static void normalizers(pfl_fl *fl) {
    gc_state *s = fl->algo_state;
    const int C = fl->model->classes, D = feature_dim(fl->model), N = fl->cfg.clients;
    for (int c = 0; c < C; c++) {
        const double *e = s->emb + (size_t)c * D;
        s->log_z[c] = s->holders[c] > 0 ? dot_d(e, e, D) : -INFINITY;
    }
    for (int j = 0; j < N; j++) {
        const float *head = pfl_store_read(s->heads, j);
        const uint8_t *held = holds_of(fl, j);
        for (int c = 0; c < C; c++) {
            if (held[c] || s->holders[c] == 0) continue;
            const double *e = s->emb + (size_t)c * D;
            for (int r = 0; r < C; r++)
                if (held[r]) s->log_z[c] = log_add(s->log_z[c], dot_row(head + (size_t)r * D, e, D));
        }
    }
}

void pfl_fedgc_correct(pfl_fl *fl) {
    gc_state *s = fl->algo_state;
    const int C = fl->model->classes, D = feature_dim(fl->model), N = fl->cfg.clients;
    const float lr = fl->cfg.lr * fl->cfg.algo.gc_lambda;
    class_embeddings(fl);
    normalizers(fl);
    for (int j = 0; j < N; j++) {
        const uint8_t *held = holds_of(fl, j);
        const float *head = pfl_store_read(s->heads, j);
        memset(s->grad, 0, sizeof(float) * (size_t)C * D);
        bool any = false;
        /* d Reg / d w_{j,r} = sum over the classes c that j lacks of m_c softmax_c(w_{j,r}) e_c */
        for (int c = 0; c < C; c++) {
            if (held[c] || s->holders[c] == 0) continue;
            const double *e = s->emb + (size_t)c * D;
            for (int r = 0; r < C; r++) {
                if (!held[r]) continue;
                const double p = s->holders[c] * exp(dot_row(head + (size_t)r * D, e, D) - s->log_z[c]);
                for (int d = 0; d < D; d++) s->grad[(size_t)r * D + d] += (float)(p * e[d]);
                any = true;
            }
        }
        if (!any) continue;
        float *row = pfl_store_write(s->heads, j);
        if (!row) return; /* the store's error fails the round */
        for (size_t i = 0; i < (size_t)C * D; i++) row[i] -= lr * s->grad[i];
    }
}

/* The global model's head: the class embeddings of the corrected heads, no bias. */
static void global_head(pfl_fl *fl) {
    const gc_state *s = fl->algo_state;
    const pfl_layer *h = &fl->model->layers[head_layer(fl->model)];
    const size_t W = head_weights(fl->model);
    class_embeddings(fl);
    for (size_t i = 0; i < W; i++) fl->global[h->offset + i] = (float)s->emb[i];
    memset(fl->global + h->offset + W, 0, sizeof(float) * (h->length - W));
}

/* FedAvg on the extractor, the uploaded heads (what the mask sent of them)
 * into the server's copies, the correction, the class embeddings as the
 * global head. */
static void gc_aggregate(pfl_fl *fl, const int *clients, int n, float *const *uploads) {
    gc_state *s = fl->algo_state;
    const pfl_model *m = fl->model;
    const int C = m->classes, D = feature_dim(m);
    const size_t off = m->layers[head_layer(m)].offset;
    pfl_default_aggregate(fl, clients, n, uploads); /* the head's mean is replaced below */
    for (int k = 0; k < n; k++) {
        float *row = pfl_store_write(s->heads, clients[k]);
        if (!row) return;
        const uint8_t *held = holds_of(fl, clients[k]);
        for (int c = 0; c < C; c++)
            for (int d = 0; held[c] && d < D; d++) {
                const size_t i = (size_t)c * D + d;
                if (!fl->sent || fl->sent[k][off + i]) row[i] = uploads[k][off + i];
            }
    }
    pfl_fedgc_correct(fl);
    global_head(fl);
}

/* Each way: the shared layers but the head, and the client's C_k rows of it. */
static void gc_message_bytes(const pfl_fl *fl, int client, const uint8_t *sent, const float *upload, uint64_t *down,
                               uint64_t *up) {
    (void)upload;
    const pfl_model *m = fl->model;
    const int C = m->classes, D = feature_dim(m);
    uint64_t rows = 0;
    for (int c = 0; c < C; c++) rows += holds_of(fl, client)[c];
    pfl_shared_message_bytes(fl, sent, down, up);
    *down = *down - 4 * (uint64_t)m->layers[head_layer(m)].length + 4 * rows * (uint64_t)D;
    if (!sent) *up = *down; /* under FLAYER's mask: what the mask sent */
}

static int gc_check(const pfl_config *cfg) {
    if (cfg->modules.ala)
        return pfl_err("--ala: ALA learns its weights on the softmax over all the model's classes, and a fedgc "
                       "client classifies among the classes it holds (its own head's rows)");
    return 0;
}

/* ---- state ---- */

/* Client j's head as PFLlib's nn.Linear(D, C_j, bias=False) starts:
 * uniform in +-1/sqrt(D), its own draw (row by row over the classes it
 * holds, from the (seed, 0, j, ALGO) stream). */
static int initial_heads(pfl_fl *fl) {
    gc_state *s = fl->algo_state;
    const int C = fl->model->classes, D = feature_dim(fl->model);
    const double bound = 1.0 / sqrt((double)D);
    for (int j = 0; j < fl->cfg.clients; j++) {
        float *row = pfl_store_write(s->heads, j);
        if (!row) return pfl_err("fedgc: %s", pfl_store_error(s->heads));
        pfl_rng r = pfl_rng_stream(fl->cfg.seed, 0, j, PFL_RNG_ALGO);
        for (int c = 0; c < C; c++)
            for (int d = 0; holds_of(fl, j)[c] && d < D; d++)
                row[(size_t)c * D + d] = (float)(bound * (2.0 * pfl_rng_uniform(&r) - 1.0));
        pfl_store_release(s->heads, j);
    }
    return 0;
}

static int gc_create(pfl_fl *fl) {
    const pfl_model *m = fl->model;
    const pfl_op *last = &m->ops[m->num_ops - 1];
    if (last->kind != PFL_OP_LINEAR || last->layer != head_layer(m) || m->classes > 256)
        return pfl_err("fedgc: model %s: the per-client heads need a network ending in a Linear layer (at most "
                       "256 classes)",
                       m->name);
    const int N = fl->cfg.clients, C = m->classes, D = feature_dim(m);
    gc_state *s = pfl_calloc(1, sizeof *s);
    if (!(fl->algo_state = s)) return -1;
    float *zeros = pfl_calloc(head_weights(m), sizeof(float));
    const bool made = zeros && (s->heads = pfl_fl_store(fl, "fedgc-heads", N, head_weights(m), zeros)) &&
                      (s->holds = pfl_calloc((size_t)N * C, 1)) && (s->holders = pfl_calloc((size_t)C, sizeof(int))) &&
                      (s->emb = pfl_malloc(sizeof(double) * (size_t)C * D)) &&
                      (s->log_z = pfl_malloc(sizeof(double) * (size_t)C)) &&
                      (s->grad = pfl_malloc(sizeof(float) * (size_t)C * D));
    free(zeros);
    if (!made) return -1;
    for (int j = 0; j < N; j++) {
        const pfl_client_data *cd = &fl->part->clients[j];
        for (int i = 0; i < cd->n_train; i++) s->holds[(size_t)j * C + fl->data->labels[cd->train[i]]] = 1;
        for (int c = 0; c < C; c++) s->holders[c] += s->holds[(size_t)j * C + c];
    }
    if (initial_heads(fl)) return -1;
    global_head(fl);
    return 0;
}

static void gc_destroy(pfl_fl *fl) {
    gc_state *s = fl->algo_state;
    free(s->holds);
    free(s->holders);
    free(s->emb);
    free(s->log_z);
    free(s->grad);
    free(s);
    fl->algo_state = NULL;
}

static int gc_save(const pfl_fl *fl, pfl_ckpt_writer *w) {
    const gc_state *s = fl->algo_state;
    return pfl_store_save(s->heads, w, "fedgc.heads");
}

static int gc_load(pfl_fl *fl, pfl_ckpt_reader *r) {
    gc_state *s = fl->algo_state;
    return pfl_store_load(s->heads, r, "fedgc.heads");
}

/* PFLlib: server_learning_rate = local_learning_rate * lamda, -lam's default 1.0. */
static const pfl_param gc_params[] = {
    {PFL_ALGO_PARAM(FLOAT, "gc-lambda", gc_lambda), .alias = "lam", .def = 1.0, .max = 1e6, .metavar = "F",
     .help = "the server's classifier correction steps at --lr times this"},
};

const pfl_algo pfl_algo_fedgc = {
    .name = "fedgc",
    .description = "FedGC: each client's head covers its own classes; the server corrects the heads by a softmax "
                   "regularizer over the class embeddings (--gc-lambda)",
    PFL_PARAMS(gc_params),
    .has_global = true,
    .whole_uploads = true, /* MPI: its aggregate reads each client's uploaded head */
    .check = gc_check,
    .create = gc_create,
    .destroy = gc_destroy,
    .receive = gc_receive,
    .local_init = gc_init,
    .local_train = gc_train,
    .aggregate = gc_aggregate,
    .personal_model = gc_personal_model,
    .personal_correct = gc_correct,
    .message_bytes = gc_message_bytes,
    .save = gc_save,
    .load = gc_load,
};
