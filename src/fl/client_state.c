/* What a client keeps between rounds (DESIGN.md §3): the method declares the
 * personal parts of the model vector (pfl_algo.personal), the round loop adds
 * what --bn and the local-init modules keep, and the client store holds those
 * spans only, with ALA's weights after them. A client's model is built when
 * it is needed: what the method sends it now, its own parts written over it.
 * docs/architecture.md, "The client store", has the design. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl/fl.h"
#include "fl/loop.h"
#include "modules/modules.h"
#include "util/err.h"

/* A client's row in a per-client store is its number; under MPI only its
 * home writes it (rows nobody wrote cost nothing). */
static int row_of(const pfl_fl *fl, int client) {
    (void)fl;
    return client;
}

pfl_worker *pfl_fl_worker_here(pfl_fl *fl) {
    const int t = omp_get_thread_num();
    return &fl->workers[t < fl->num_workers ? t : 0];
}

/* ---- the personal parts ---- */

void pfl_personal_unshared(const pfl_fl *fl, bool *params, bool *stats) {
    (void)stats; /* the round loop adds the running statistics the server does not average */
    for (int l = 0; l < pfl_model_rows(fl->model); l++) /* a personal extra block too */
        if (!fl->shared[l]) params[l] = true;
}

static void personal_whole(const pfl_fl *fl, bool *params, bool *stats) {
    for (int l = 0; l < pfl_model_rows(fl->model); l++) params[l] = stats[l] = true;
}

void pfl_spans_add(pfl_spans *s, size_t offset, size_t length) {
    if (length == 0) return;
    if (s->count > 0 && s->offset[s->count - 1] + s->length[s->count - 1] == offset) {
        s->length[s->count - 1] += length;
    } else {
        s->offset[s->count] = offset, s->length[s->count] = length;
        s->count++;
    }
    s->floats += length;
}

/* The layers [first, end) a local-init module mixes: the top `top` layers
 * below the `private_layers` the client never receives. */
static void mark_window(const pfl_model *m, int top, int private_layers, bool *params) {
    const int end = m->num_layers - private_layers < 0 ? 0 : m->num_layers - private_layers;
    for (int l = end - top < 0 ? 0 : end - top; l < end; l++) params[l] = true;
}

/* What a client keeps: the method's declaration, what --bn keeps local
 * (what pfl_keep_local_bn copies from a client's own model), and the layers
 * the local-init modules mix (ALA's top p, FLAYER's head, below the layers
 * the method keeps private). */
static void personal_spans(const pfl_fl *fl, pfl_spans *out) {
    const pfl_model *m = fl->model;
    const pfl_modules_config *mod = &fl->cfg.modules;
    bool params[PFL_MAX_LAYERS] = {false}, stats[PFL_MAX_LAYERS] = {false};
    if (!fl->algo->stateful) pfl_personal_unshared(fl, params, stats); /* made stateful by --bn or a module */
    else (fl->algo->personal ? fl->algo->personal : personal_whole)(fl, params, stats);
    for (int l = 0; l < m->num_layers; l++) {
        if (m->layers[l].state_length == 0) continue;
        if (fl->cfg.bn == PFL_BN_LOCAL) params[l] = true;
        if (!pfl_state_shared(fl, l)) stats[l] = true;
    }
    const int own = pfl_private_top_layers(fl);
    if (mod->ala) mark_window(m, mod->ala_p, own, params);
    if (mod->flayer_agg) mark_window(m, fl->cfg.algo.head_layers, own, params);
    memset(out, 0, sizeof *out);
    for (int l = 0; l < pfl_model_rows(m); l++)
        if (params[l]) pfl_spans_add(out, m->layers[l].offset, m->layers[l].length);
    for (int l = 0; l < m->num_layers; l++)
        if (stats[l]) pfl_spans_add(out, m->layers[l].state_offset, m->layers[l].state_length);
    out->whole = out->floats == pfl_model_vector_len(m);
}

/* model's personal parts, packed into row */
static void gather_spans(const pfl_spans *s, const float *model, float *row) {
    for (int i = 0; i < s->count; i++) {
        memcpy(row, model + s->offset[i], s->length[i] * sizeof(float));
        row += s->length[i];
    }
}

/* row's packed parts, written over model */
static void scatter_spans(const pfl_spans *s, const float *row, float *model) {
    for (int i = 0; i < s->count; i++) {
        memcpy(model + s->offset[i], row, s->length[i] * sizeof(float));
        row += s->length[i];
    }
}

/* ---- the stores ---- */

static size_t ala_weights_len(const pfl_fl *fl) {
    size_t offset, length;
    pfl_ala_window(fl->model, fl->cfg.modules.ala_p, pfl_private_top_layers(fl), &offset, &length);
    return length;
}

/* A client's row of client_state: its personal parts, then (--ala) its ALA
 * weights, which start at 1. */
static int create_client_state(pfl_fl *fl, int rows) {
    personal_spans(fl, &fl->personal);
    if (fl->algo->keeps_state && !fl->personal.whole)
        return pfl_err("%s: keeps_state needs the whole model personal (pfl_algo.personal NULL)", fl->algo->name);
    const size_t ala = fl->cfg.modules.ala ? ala_weights_len(fl) : 0, row = fl->personal.floats + ala;
    float *initial = pfl_malloc(sizeof(float) * (row ? row : 1));
    if (!initial) return -1;
    gather_spans(&fl->personal, fl->global, initial);
    for (size_t i = fl->personal.floats; i < row; i++) initial[i] = 1.0f;
    fl->client_state = pfl_store_create(fl->cfg.client_state_dir, "clients", rows, row, initial);
    free(initial);
    if (!fl->client_state) return -1;
    if (fl->cfg.modules.ala && (!(fl->ala_started = pfl_calloc((size_t)fl->cfg.clients, sizeof(bool))) ||
                                !(fl->ala_start_epochs = pfl_calloc((size_t)fl->cfg.clients, sizeof(long))) ||
                                !(fl->ala_start_seconds = pfl_calloc((size_t)fl->cfg.clients, sizeof(double)))))
        return -1;
    return 0;
}

int pfl_fl_create_stores(pfl_fl *fl, bool stateful) {
    const int rows = fl->cfg.clients;
    if (fl->cfg.eval_moment == PFL_EVAL_AFTER_TRAIN &&
        !(fl->trained = pfl_store_create(fl->cfg.client_state_dir, "trained", rows, pfl_model_vector_len(fl->model),
                                         fl->global)))
        return -1;
    return stateful ? create_client_state(fl, rows) : 0;
}

void pfl_fl_free_stores(pfl_fl *fl) {
    pfl_store_free(fl->client_state);
    pfl_store_free(fl->trained);
    for (int i = 0; i < fl->num_algo_stores; i++) pfl_store_free(fl->algo_stores[i]);
    free(fl->ala_started);
    free(fl->ala_start_epochs);
    free(fl->ala_start_seconds);
    fl->client_state = fl->trained = NULL, fl->ala_started = NULL, fl->num_algo_stores = 0;
    fl->ala_start_epochs = NULL, fl->ala_start_seconds = NULL;
}

pfl_store *pfl_fl_store(pfl_fl *fl, const char *name, int rows, size_t row_len, const float *initial) {
    if (rows != fl->cfg.clients)
        return pfl_err("%s: store %s has %d rows; a per-client store has one per client (%d)", fl->algo->name, name,
                       rows, fl->cfg.clients),
               NULL;
    if (fl->num_algo_stores == PFL_FL_MAX_STORES)
        return pfl_err("%s: more than %d per-client stores", fl->algo->name, PFL_FL_MAX_STORES), NULL;
    pfl_store *s = pfl_store_create(fl->cfg.client_state_dir, name, rows, row_len, initial);
    if (s) fl->algo_stores[fl->num_algo_stores++] = s;
    return s;
}

uint64_t pfl_fl_state_bytes(const pfl_fl *fl) {
    uint64_t bytes = 0;
    if (fl->client_state) bytes += pfl_store_bytes(fl->client_state);
    if (fl->trained) bytes += pfl_store_bytes(fl->trained);
    for (int i = 0; i < fl->num_algo_stores; i++) bytes += pfl_store_bytes(fl->algo_stores[i]);
    return bytes;
}

int pfl_fl_store_failed(const pfl_fl *fl) {
    const pfl_store *all[2 + PFL_FL_MAX_STORES] = {fl->client_state, fl->trained};
    for (int i = 0; i < fl->num_algo_stores; i++) all[2 + i] = fl->algo_stores[i];
    for (int i = 0; i < 2 + fl->num_algo_stores; i++)
        if (all[i] && pfl_store_error(all[i])[0]) return pfl_err("%s", pfl_store_error(all[i]));
    return 0;
}

void pfl_fl_release_client(pfl_fl *fl, int client) {
    if (fl->client_state) pfl_store_release(fl->client_state, row_of(fl, client));
    if (fl->trained) pfl_store_release(fl->trained, row_of(fl, client));
}

/* ---- a client's model ---- */

float *pfl_client_model(const pfl_fl *fl, int client) {
    if (!fl->client_state || !fl->personal.whole) return NULL;
    return pfl_store_write(fl->client_state, row_of(fl, client));
}

const float *pfl_client_model_get(pfl_fl *fl, int client, float *out) {
    const float *row = pfl_store_read(fl->client_state, row_of(fl, client));
    if (fl->personal.whole) return row;
    if (fl->algo->receive) {
        /* `own` is zero outside the personal spans, which are the only part
         * of `state` a receive hook reads */
        float *own = pfl_fl_worker_here(fl)->own;
        scatter_spans(&fl->personal, row, own);
        fl->algo->receive(fl, client, own, out);
    } else {
        memcpy(out, fl->global, pfl_model_vector_len(fl->model) * sizeof(float));
    }
    scatter_spans(&fl->personal, row, out);
    return out;
}

/* FedAvg's local init and personalized model (fl.h), here with the models
 * they build for stateful runs */
void pfl_default_local_init(pfl_fl *fl, int client, float *model) {
    const float *from = fl->client_state ? pfl_client_model_get(fl, client, model) : fl->global;
    if (from != model) memcpy(model, from, pfl_model_vector_len(fl->model) * sizeof(float));
}

const float *pfl_default_personal_model(pfl_fl *fl, int client, float *scratch) {
    return fl->client_state ? pfl_client_model_get(fl, client, scratch) : fl->global;
}

int pfl_client_model_set(pfl_fl *fl, int client, const float *model) {
    float *row = pfl_store_write(fl->client_state, row_of(fl, client));
    if (!row) return pfl_err("%s", pfl_store_error(fl->client_state));
    gather_spans(&fl->personal, model, row);
    return 0;
}

bool pfl_client_has_trained(const pfl_fl *fl, int client) {
    return fl->trained && pfl_store_touched(fl->trained, row_of(fl, client));
}

/* After local training: the client's state becomes the trained model
 * (`finish` by default), and under --eval-moment after-train the trained
 * personalized model is kept whole. */
void pfl_fl_keep_trained(pfl_fl *fl, int client, pfl_worker *w) {
    const pfl_algo *algo = fl->algo;
    const size_t V = pfl_model_vector_len(fl->model);
    if (fl->client_state) {
        if (!algo->finish) {
            pfl_client_model_set(fl, client, w->model); /* a failure is the store's error, seen after the round */
        } else if (fl->personal.whole) {
            float *state = pfl_client_model(fl, client);
            if (state) algo->finish(fl, client, w->model, state);
        } else {
            float *state = w->aux;
            const float *now = pfl_client_model_get(fl, client, state);
            if (now != state) memcpy(state, now, V * sizeof(float));
            algo->finish(fl, client, w->model, state);
            pfl_client_model_set(fl, client, state);
        }
    }
    if (fl->trained) { /* the personalized model as training left it: the trained model, or the state `finish` kept */
        const float *personal = fl->client_state && algo->finish ? pfl_client_model_get(fl, client, w->aux) : w->model;
        float *row = pfl_store_write(fl->trained, row_of(fl, client));
        if (row) memcpy(row, personal, V * sizeof(float));
    }
    pfl_fl_release_client(fl, client);
}

/* ---- the broadcast ---- */

/* Client `client` receives what the method sends it (`receive`: FedAvg the
 * global model, FedAMP its cloud model u_i, FedPer the global base under
 * the client's own head, ...): its state becomes that, or, when a local-init
 * module is on (ALA, or FLAYER's accuracy-weighted head mix), the module's
 * mix of it with the client's previous model, on the top layers of what it
 * received (below the layers it never receives, which stay its own).
 *
 * Without a module, a client whose state stays (keeps_state) or is kept in
 * parts has nothing to do: the personal parts are by definition the ones the
 * broadcast leaves, and the rest is built from what the method sends when the
 * model is next needed (pfl_client_model_get). */
void pfl_fl_receive(pfl_fl *fl, int client, pfl_worker *w) {
    const pfl_algo *algo = fl->algo;
    const pfl_modules_config *mod = &fl->cfg.modules;
    const bool module = mod->ala || mod->flayer_agg, whole = fl->personal.whole;
    if (!module && (algo->keeps_state || !whole)) return;
    float *stored = pfl_store_write(fl->client_state, row_of(fl, client));
    if (!stored) return; /* the store's error fails the round */
    /* the client's model as a whole vector: the stored one, or its personal
     * parts over the global model (a module overwrites all the rest) */
    float *state = whole ? stored : w->model;
    const size_t P = fl->model->num_params, V = pfl_model_vector_len(fl->model);
    if (!whole) {
        memcpy(state, fl->global, V * sizeof(float));
        scatter_spans(&fl->personal, stored, state);
    }
    if (algo->receive) algo->receive(fl, client, state, w->received);
    else memcpy(w->received, fl->global, V * sizeof(float));
    pfl_keep_local_bn(fl, state, w->received);
    /* the modules mix trained parameters; the running statistics are the
     * received ones (own where they are not shared) */
    if (module) memcpy(state + P, w->received + P, (V - P) * sizeof(float));
    if (mod->ala) {
        pfl_ala_client ala = {stored + fl->personal.floats, fl->ala_started[client]};
        pfl_ala_config cfg = {mod->ala_p, mod->ala_s, mod->ala_eta, mod->ala_threshold, mod->ala_max_epochs,
                              fl->cfg.batch, pfl_private_top_layers(fl)};
        pfl_ala_buffers buf = {w->exec, w->aux, &w->aux_grads, w->order};
        pfl_rng rng = pfl_rng_stream(fl->cfg.seed, fl->round, client, PFL_RNG_ALA);
        const pfl_client_data *cd = &fl->part->clients[client];
        pfl_ala_report r =
            pfl_ala_apply(&ala, &cfg, fl->model, cd->train, cd->n_train, w->received, state, &buf, &rng);
        fl->ala_started[client] = ala.started;
        if (r.start_phase) fl->ala_start_epochs[client] = r.epochs, fl->ala_start_seconds[client] = r.seconds;
        if (r.hit_max)
            fprintf(stderr,
                    "[pfl] warning: client %d: ALA weights did not converge in %d epochs (loss std above %g); "
                    "raise --ala-max-epochs or --ala-threshold\n",
                    client, r.epochs, (double)mod->ala_threshold);
    } else if (mod->flayer_agg) {
        pfl_flayer_mix_window(state, w->received, fl->model, fl->cfg.algo.head_layers, pfl_private_top_layers(fl),
                              fl->local_acc[client]);
    } else {
        memcpy(state, w->received, V * sizeof(float));
    }
    if (!whole) gather_spans(&fl->personal, state, stored);
    pfl_fl_release_client(fl, client);
}

int pfl_fl_sum_ala_start(pfl_fl *fl) {
    const int N = fl->cfg.clients;
    memset(&fl->ala_start, 0, sizeof fl->ala_start);
    if (!fl->ala_started) return 0;
    long *v = pfl_calloc(2 * (size_t)N, sizeof(long));
    double *seconds = pfl_calloc((size_t)N, sizeof(double));
    int rc = v && seconds ? 0 : -1;
    /* MPI: each owner holds its clients' figures, the others zeros; seconds
     * travel as whole microseconds so the sum is exact in any order */
    for (int c = 0; c < N && rc == 0; c++)
        v[c] = fl->ala_start_epochs[c], v[N + c] = lround(fl->ala_start_seconds[c] * 1e6);
    if (rc == 0) rc = pfl_transport_sum_longs(fl->cfg.transport, v, 2 * (size_t)N);
    if (rc == 0) {
        for (int c = 0; c < N; c++) seconds[c] = (double)v[N + c] * 1e-6;
        fl->ala_start = pfl_ala_start_sum(v, seconds, N);
    }
    free(v);
    free(seconds);
    return rc;
}
