/* FedFomo (Zhang et al., ICLR 2021, "Personalized Federated Learning with
 * First Order Model Optimization"), as FedALA's appendix runs it ("we set
 * the number of received local models M to the total number of clients")
 * and PFLlib implements it (clientfomo.py, serverfomo.py).
 *
 * The server keeps the latest upload of every client. A client about to
 * train downloads M of them (the M highest of its row of the affinity
 * matrix P, its own among them), holds out the last --fomo-val of its
 * training split, and weighs each downloaded model n by its first-order
 * improvement over the model its previous local training started from,
 * theta_old:
 *
 *   w_n = (L_val(theta_old) - L_val(theta_n)) / (||theta_n - theta_old|| + 1e-5)
 *
 * Its new starting point is sum_n max(w_n, 0) theta_n / sum_n max(w_n, 0)
 * (its own model when no weight is positive); it trains on the rest of its
 * split and uploads the whole model; P's row gains the w_n. That starting
 * point is its personalized model (docs/evaluation.md: the model after the
 * local initialization). There is no global model. Where the weighing runs:
 * at the broadcast, for the clients of the next round (the local
 * initialization), on the worker whose `received` buffer the hook fills.
 * docs/algorithms.md has the readings and choices. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "algos/fedfomo.h"
#include "util/err.h"

/* Per-client state is in stores (src/fl/store.h: lazy rows, in a file under --client-state, checkpointed by
 * the written rows); the run frees them. */
typedef struct {
    pfl_store *models;   /* per client (all of them, the server's): its latest upload, what the server sends */
    bool *has_model;     /* per client: it has uploaded once */
    pfl_store *baseline; /* per client: theta_old */
    pfl_store *affinity; /* per client (the server's): 2 x clients floats, its row of P less the identity P
                          * starts from (PFLlib: torch.diag(torch.ones(num_clients))), then the w_n of its last
                          * initialization, added to P once it uploads (PFLlib adds them when the server
                          * receives the client's model) */
    int *order;          /* workers x clients: scratch for choosing the downloads ... */
    double *weights;     /* workers x clients: ... and their weights */
} fomo_state;

/* The flags and modules FedFomo cannot run with: one line each, before anything is made. */
static int fomo_check(const pfl_config *cfg) {
    const pfl_modules_config *m = &cfg->modules;
    if (m->ala || m->flayer_agg)
        return pfl_err("%s: fedfomo downloads multiple client models and starts from its own weighted combination "
                       "of them, so there is no one received model to mix with (FedALA, Table 4: ALA applied to "
                       "every method 'except for FedFomo and APPLE (as they download multiple client models)')",
                       m->ala ? "--ala" : "--flayer-agg");
    if (m->flayer_mask)
        return pfl_err("--flayer-mask: fedfomo's server sends each client's whole upload to the others; a masked "
                       "upload leaves the unsent elements unknown");
    return 0;
}

static size_t vector_len(const pfl_fl *fl) { return pfl_model_vector_len(fl->model); }

/* The held-out part of a client's training split: its last floor(fomo_val * n) samples (PFLlib:
 * train_data[-int(0.2 * len):]); training uses the rest. */
static int val_count(const pfl_fl *fl, int client) {
    return (int)floorf(fl->cfg.algo.fomo_val * (float)fl->part->clients[client].n_train);
}

static const float *model_of(const fomo_state *s, int client) { return pfl_store_read(s->models, client); }

static int fomo_create(pfl_fl *fl) {
    const int N = fl->cfg.clients;
    const size_t V = vector_len(fl);
    fomo_state *s = pfl_calloc(1, sizeof *s);
    if (!(fl->algo_state = s)) return -1;
    float *zeros = pfl_calloc(2 * (size_t)N, sizeof(float));
    const bool made = zeros && (s->models = pfl_fl_store(fl, "fedfomo-models", N, V, fl->global)) &&
                      (s->baseline = pfl_fl_store(fl, "fedfomo-old", N, V, fl->global)) &&
                      (s->affinity = pfl_fl_store(fl, "fedfomo-affinity", N, 2 * (size_t)N, zeros)) &&
                      (s->has_model = pfl_calloc((size_t)N, sizeof(bool))) &&
                      (s->order = pfl_malloc(sizeof(int) * (size_t)N * (size_t)fl->num_workers)) &&
                      (s->weights = pfl_malloc(sizeof(double) * (size_t)N * (size_t)fl->num_workers));
    free(zeros);
    return made ? 0 : -1;
}

static void fomo_destroy(pfl_fl *fl) {
    fomo_state *s = fl->algo_state;
    free(s->has_model);
    free(s->order);
    free(s->weights);
    free(s);
    fl->algo_state = NULL;
}

double pfl_fedfomo_affinity(const pfl_fl *fl, int client, int other) {
    const fomo_state *s = fl->algo_state;
    return (double)pfl_store_read(s->affinity, client)[other] + (client == other ? 1.0 : 0.0);
}

/* How many models a client downloads now: M (every client's, with --fomo-m 0), at most as many as
 * the server holds (none before the first uploads, as PFLlib's M_ = min(M, len(uploaded_ids))). */
static int download_count(const pfl_fl *fl) {
    const fomo_state *s = fl->algo_state;
    int held = 0;
    for (int c = 0; c < fl->cfg.clients; c++) held += s->has_model[c];
    const int M = fl->cfg.algo.fomo_m > 0 ? fl->cfg.algo.fomo_m : fl->cfg.clients;
    return M < held ? M : held;
}

int pfl_fedfomo_downloads(const pfl_fl *fl, int client, int *chosen) {
    const fomo_state *s = fl->algo_state;
    const int N = fl->cfg.clients, m = download_count(fl);
    int n = 0;
    for (int c = 0; c < N; c++)
        if (s->has_model[c]) chosen[n++] = c;
    /* the m highest affinities (ties: the lower client first), by insertion */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && pfl_fedfomo_affinity(fl, client, chosen[j]) >
                                     pfl_fedfomo_affinity(fl, client, chosen[j - 1]);
             j--) {
            const int t = chosen[j];
            chosen[j] = chosen[j - 1], chosen[j - 1] = t;
        }
    /* then in client order, so the combination sums in the same order everywhere */
    for (int i = 1; i < m; i++)
        for (int j = i; j > 0 && chosen[j] < chosen[j - 1]; j--) {
            const int t = chosen[j];
            chosen[j] = chosen[j - 1], chosen[j - 1] = t;
        }
    return m;
}

/* The mean loss over the held-out samples, the model in evaluation mode, run in batches of
 * --eval-batch. PFLlib's recalculate_loss averages batch means over batches of --batch, which is
 * this mean whenever --batch divides the held-out count (its last batch is otherwise smaller). */
static double val_loss(const pfl_fl *fl, pfl_worker *w, const int *idx, int n, const float *model) {
    double sum = 0.0;
    pfl_xbuf params = pfl_exec_view_const(w->exec, model, vector_len(fl));
    for (int start = 0; start < n; start += fl->cfg.eval_batch) {
        const int B = n - start < fl->cfg.eval_batch ? n - start : fl->cfg.eval_batch;
        pfl_exec_gather(w->exec, idx + start, B);
        pfl_exec_forward(w->exec, &params, false, NULL);
        sum += (double)pfl_exec_xent(w->exec, NULL) * B;
    }
    pfl_exec_unview(w->exec, &params);
    return n > 0 ? sum / n : 0.0;
}

static double distance(const float *a, const float *b, size_t n) {
    double d2 = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)a[i] - (double)b[i];
        d2 += d * d;
    }
    return sqrt(d2);
}

double pfl_fedfomo_weights(pfl_fl *fl, pfl_worker *w, int client, const int *chosen, int m, double *weights) {
    const fomo_state *s = fl->algo_state;
    const pfl_client_data *cd = &fl->part->clients[client];
    const size_t P = fl->model->num_params;
    const int n_val = val_count(fl, client);
    const int *val = cd->train + (cd->n_train - n_val);
    const float *old = pfl_store_read(s->baseline, client);
    const double base = val_loss(fl, w, val, n_val, old);
    double positive = 0.0;
    for (int k = 0; k < m; k++) {
        const float *theta = model_of(s, chosen[k]);
        /* PFLlib: (L - recalculate_loss(received_model)) / (torch.norm(params_dif) + 1e-5), parameters only */
        weights[k] = n_val > 0 ? (base - val_loss(fl, w, val, n_val, theta)) / (distance(theta, old, P) + 1e-5) : 0.0;
        if (weights[k] > 0.0) positive += weights[k];
    }
    return positive;
}

/* The worker whose buffer `received` is: pfl_fl_receive fills w->received, and the weighing needs
 * that worker's workspace and batch buffers. */
static pfl_worker *worker_of(pfl_fl *fl, const float *received) {
    for (int k = 0; k < fl->num_workers; k++)
        if (fl->workers[k].received == received) return &fl->workers[k];
    return &fl->workers[0];
}

/* The local initialization, for a client of the next round: the weighted combination of the
 * models it downloads (parameters; the running statistics stay its own, as PFLlib combines
 * parameters() only), or its own model when none improves on theta_old. Clients that will not
 * train keep their model, as PFLlib's clients combine at the start of their training only. */
static void fomo_receive(pfl_fl *fl, int client, const float *state, float *received) {
    fomo_state *s = fl->algo_state;
    const int N = fl->cfg.clients;
    const size_t P = fl->model->num_params, V = vector_len(fl);
    memcpy(received, state, sizeof(float) * V);
    if (!fl->joins_next[client]) return;
    pfl_worker *w = worker_of(fl, received);
    int *chosen = s->order + (size_t)N * (size_t)w->id;
    double *weights = s->weights + (size_t)N * (size_t)w->id;
    const int m = pfl_fedfomo_downloads(fl, client, chosen);
    const double positive = pfl_fedfomo_weights(fl, w, client, chosen, m, weights);
    pfl_store_release(s->baseline, client);
    float *pending = pfl_store_write(s->affinity, client);
    if (!pending) return; /* the store's error fails the round */
    pending += N;
    memset(pending, 0, sizeof(float) * (size_t)N);
    for (int k = 0; k < m; k++) pending[chosen[k]] = (float)weights[k];
    if (!(positive > 0.0)) return; /* PFLlib's weight_scale returns no weights: the model stays */
    memset(received, 0, sizeof(float) * P);
    for (int k = 0; k < m; k++) {
        if (!(weights[k] > 0.0)) continue;
        const float coef = (float)(weights[k] / positive), *theta = model_of(s, chosen[k]);
        for (size_t i = 0; i < P; i++) received[i] += coef * theta[i];
    }
}

/* theta_old of the next weighing: the model this training starts from (PFLlib's clone_model(model,
 * old_model) right after the combination). */
static void fomo_init(pfl_fl *fl, int client, float *model) {
    const fomo_state *s = fl->algo_state;
    pfl_default_local_init(fl, client, model);
    float *old = pfl_store_write(s->baseline, client);
    if (!old) return; /* the store's error fails the round */
    memcpy(old, model, sizeof(float) * vector_len(fl));
    pfl_store_release(s->baseline, client);
}

/* Local SGD on the training split without its held-out part. */
static void fomo_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats) {
    const pfl_client_data *cd = &fl->part->clients[client];
    pfl_step s = pfl_step_default(fl);
    s.samples = cd->train, s.n_samples = cd->n_train - val_count(fl, client);
    pfl_step_run(fl, client, w, model, &s, stats);
}

/* The client uploaded: its row of P gains the weights of its last initialization. */
static void fomo_finish(pfl_fl *fl, int client, const float *model, float *state) {
    fomo_state *s = fl->algo_state;
    const int N = fl->cfg.clients;
    memcpy(state, model, sizeof(float) * vector_len(fl));
    float *row = pfl_store_write(s->affinity, client);
    if (!row) return; /* the store's error fails the round */
    for (int c = 0; c < N; c++) row[c] += row[N + c];
}

/* The server keeps every upload whole, to send it on. */
static void fomo_aggregate(pfl_fl *fl, const int *clients, int n, float *const *uploads) {
    fomo_state *s = fl->algo_state;
    const size_t V = vector_len(fl);
    for (int k = 0; k < n; k++) {
        float *row = pfl_store_write(s->models, clients[k]);
        if (!row) return; /* the store's error fails the round */
        memcpy(row, uploads[k], sizeof(float) * V);
        s->has_model[clients[k]] = true;
    }
}

/* FedALA's Table 3, "(1+M)*Sigma": M models down (the ones the client's last initialization
 * downloaded: the server held no more models then than now, the aggregation of this round
 * comes after this count), one up. */
static void fomo_message_bytes(const pfl_fl *fl, int client, const uint8_t *sent, const float *upload, uint64_t *down,
                               uint64_t *up) {
    (void)client, (void)sent, (void)upload;
    const uint64_t model = 4 * (uint64_t)vector_len(fl);
    *down = (uint64_t)download_count(fl) * model;
    *up = model;
}

/* Checkpoints: the server's models and P with the pending weights, each client's theta_old. */
static int fomo_save(const pfl_fl *fl, pfl_ckpt_writer *w) {
    const fomo_state *s = fl->algo_state;
    return pfl_store_save(s->models, w, "fedfomo.models") ||
                   pfl_ckpt_put_bool(w, "fedfomo.has_model", s->has_model, (size_t)fl->cfg.clients) ||
                   pfl_store_save(s->baseline, w, "fedfomo.old") || pfl_store_save(s->affinity, w, "fedfomo.affinity")
               ? -1
               : 0;
}

static int fomo_load(pfl_fl *fl, pfl_ckpt_reader *r) {
    fomo_state *s = fl->algo_state;
    return pfl_store_load(s->models, r, "fedfomo.models") ||
                   pfl_ckpt_get_bool(r, "fedfomo.has_model", s->has_model, (size_t)fl->cfg.clients) ||
                   pfl_store_load(s->baseline, r, "fedfomo.old") || pfl_store_load(s->affinity, r, "fedfomo.affinity")
               ? -1
               : 0;
}

/* FedALA's appendix: "For FedFomo, we set the number of received local models M to the total
 * number of clients" (0 here: every client's, whatever --clients is). The validation share is
 * PFLlib's clientFomo val_ratio = 0.2 (FedALA's appendix gives none). */
static const pfl_param fomo_params[] = {
    {PFL_ALGO_PARAM(INT, "fomo-m", fomo_m), .def = 0, .max = 1e7, .metavar = "M",
     .help = "client models a client downloads, the M of highest affinity (0: every client's)"},
    {PFL_ALGO_PARAM(FLOAT, "fomo-val", fomo_val), .def = 0.2, .max = 1, .min_exclusive = true, .metavar = "F",
     .help = "share of a client's training split held out to weigh the downloaded models (the rest trains)"},
};

const pfl_algo pfl_algo_fedfomo = {
    .name = "fedfomo",
    .description = "FedFomo: start from the downloaded client models weighted by their first-order validation "
                   "improvement (--fomo-m, --fomo-val)",
    PFL_PARAMS(fomo_params),
    .has_global = false,
    .stateful = true,
    .whole_uploads = true, /* MPI: the server keeps every upload whole to send it on */
    .create = fomo_create,
    .check = fomo_check,
    .destroy = fomo_destroy,
    .receive = fomo_receive,
    .local_init = fomo_init,
    .local_train = fomo_train,
    .finish = fomo_finish,
    .aggregate = fomo_aggregate,
    .message_bytes = fomo_message_bytes,
    .save = fomo_save,
    .load = fomo_load,
};
