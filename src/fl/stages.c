/* FedAvg's upload and aggregation, which every algorithm inherits, and what
 * --bn keeps local. (Its local init and personalized model, which for
 * stateful runs build a client's model, are in client_state.c with the
 * broadcast.) */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "fl/loop.h"
#include "util/err.h"

double pfl_fl_param(const pfl_fl *fl, const char *name) { return pfl_param_store_get(&fl->cfg.extra, name); }

void pfl_default_upload(pfl_fl *fl, int client, const float *model, float *upload) {
    (void)client;
    memcpy(upload, model, pfl_model_vector_len(fl->model) * sizeof(float));
}

void pfl_shared_message_bytes(const pfl_fl *fl, const uint8_t *sent, uint64_t *down, uint64_t *up) {
    const pfl_model *m = fl->model;
    uint64_t params = 0, state = 0, sent_params = 0;
    for (int l = 0; l < pfl_model_rows(m); l++) { /* extra blocks too */
        if (!fl->shared[l]) continue;
        const pfl_layer *ly = &m->layers[l];
        params += ly->length;
        if (pfl_state_shared(fl, l)) state += ly->state_length;
        if (sent)
            for (size_t j = 0; j < ly->length; j++) sent_params += sent[ly->offset + j] != 0;
    }
    *down = 4 * (params + state);
    *up = sent ? 4 * (sent_params + state) + (params + 7) / 8 : *down;
}

void pfl_default_message_bytes(const pfl_fl *fl, int client, const uint8_t *sent, const float *upload, uint64_t *down,
                               uint64_t *up) {
    (void)client, (void)upload;
    pfl_shared_message_bytes(fl, sent, down, up);
    if (fl->algo->whole_uploads) *up = 4 * (uint64_t)pfl_model_vector_len(fl->model);
}

/* ---- aggregation ----
 *
 * The weighted mean of the uploads is a sum over the upload slots in slot
 * order, element by element. In one process it runs over all of them; under
 * MPI (a reduction, fl->reducing) each client rank holds a consecutive
 * block of the slots (deal.c) and the running sum travels from rank to rank
 * in rank order: a rank receives the sum of the slots before its own,
 * continues it over its own and passes it on, and the last rank's result
 * goes to every rank. Each element then sees the very operations, in the
 * very order, of the one-process sum, so the result is the same bits. */

/* Where the element-wise sum of a span of the model vector accumulates:
 * into the global model itself (a plain or FLAYER's literal weighted sum),
 * or, for FLAYER's mean over the clients that sent each element, FML's plain
 * mean and the uniform literal mean, a sum and a weight per element in
 * double (`sum`, `weight`: the span's length). */
typedef struct {
    size_t off, len;
    bool masked;          /* fl->sent applies (trained parameters under the upload mask) */
    bool uniform;         /* each upload weighs 1 (a uniform mean), not its client's training samples */
    bool exact;           /* summed in double per element, whatever the mask's reading */
    bool over_total;      /* ... and divided by `total`, unsent elements as zero (the uniform literal mean), not by
                           * the senders' weight */
    double total;         /* the weights' sum over the round's slots */
    double *sum, *weight; /* the mean over senders only; NULL: into fl->global */
} agg_span;

/* Which mean of the uploads: FedAvg's (by training samples); the uniform
 * one of SCAFFOLD, FedDyn and FedNTD (parameters 1/n each, the running
 * statistics by samples); FML's plain mean, every shared element
 * (statistics too) summed in double over the uploads that sent it; or that
 * plain mean of the running statistics alone (FedKD, whose parameters are
 * its own sum). */
typedef enum { MEAN_SAMPLES, MEAN_UNIFORM, MEAN_PLAIN, MEAN_PLAIN_STATISTICS } mean_kind;

/* The spans the aggregation writes: the shared layers' parameters, then
 * their running statistics where shared (--bn shared). `fl->sent`,
 * flayer_mask_literal and the kind choose how a span sums (`samples`: the
 * round's total; n slots). Fills spans (room for 2 x rows) and returns how
 * many. */
static int aggregation_spans(const pfl_fl *fl, agg_span *spans, mean_kind kind, double samples, int n_slots) {
    const pfl_model *m = fl->model;
    const bool uniform = kind != MEAN_SAMPLES, plain = kind == MEAN_PLAIN || kind == MEAN_PLAIN_STATISTICS;
    /* the uniform mean under FLAYER's literal Eq. 9: sum over the senders in
     * double, over n (what pfl_server_mean has always computed) */
    const bool literal = kind == MEAN_UNIFORM && fl->sent && fl->cfg.modules.flayer_mask_literal;
    const double param_total = uniform ? (double)n_slots : samples;
    int n = 0;
    for (int l = 0; l < pfl_model_rows(m); l++) { /* extra blocks too */
        if (!fl->shared[l] || kind == MEAN_PLAIN_STATISTICS) continue;
        const size_t off = m->layers[l].offset, len = m->layers[l].length;
        /* the uniform mean over adjacent layers joined: cblas_saxpy's bits
         * depend on where a span starts and ends (its vector body and its
         * tail round differently), and these are the spans the uniform mean
         * has always summed over (SCAFFOLD's, FedDyn's and FedNTD's results) */
        if (uniform && n > 0 && spans[n - 1].off + spans[n - 1].len == off) spans[n - 1].len += len;
        else
            spans[n++] = (agg_span){.off = off, .len = len, .masked = fl->sent != NULL, .uniform = uniform,
                                    .exact = plain || literal, .over_total = literal, .total = param_total};
    }
    for (int l = 0; l < m->num_layers && (plain || samples > 0.0); l++) /* no samples: nothing to weigh them by */
        if (m->layers[l].state_length > 0 && pfl_state_shared(fl, l)) /* the mask covers trained parameters only */
            spans[n++] = (agg_span){.off = m->layers[l].state_offset, .len = m->layers[l].state_length,
                                    .uniform = plain, .exact = plain, .total = plain ? (double)n_slots : samples};
    return n;
}

static bool mean_over_senders(const pfl_fl *fl, const agg_span *s) {
    return s->masked && !fl->cfg.modules.flayer_mask_literal;
}

/* The span sums per element in double (`sum`, `weight`), not into fl->global. */
static bool sums_in_double(const pfl_fl *fl, const agg_span *s) { return s->exact || mean_over_senders(fl, s); }

/* Starts a span's sum at zero. */
static void span_start(pfl_fl *fl, const agg_span *s) {
    if (s->sum) {
        memset(s->sum, 0, s->len * sizeof(double));
        memset(s->weight, 0, s->len * sizeof(double));
    } else {
        memset(fl->global + s->off, 0, s->len * sizeof(float));
    }
}

/* Adds slots [first, end) to a span's sum, each weighted by its client's
 * training samples, or by 1 for a uniform span (over the span's total). */
static void span_add(pfl_fl *fl, const agg_span *s, const int *clients, float *const *uploads, int first, int end) {
    float *g = fl->global + s->off;
    const double total = s->total;
    for (int k = first; k < end; k++) {
        const float *u = uploads[k] + s->off;
        const double n_train = s->uniform ? 1.0 : fl->part->clients[clients[k]].n_train;
        if (s->sum) { /* Eq. 9 per element: the weighted mean over the clients that sent it */
            const uint8_t *sent = s->masked ? fl->sent[k] + s->off : NULL;
            for (size_t j = 0; j < s->len; j++)
                if (!sent || sent[j]) s->sum[j] += n_train * u[j], s->weight[j] += n_train;
        } else if (s->masked) { /* Eq. 9 read literally: unsent elements count as zero */
            const uint8_t *sent = fl->sent[k] + s->off;
            const float weight = (float)(n_train / total);
            for (size_t j = 0; j < s->len; j++)
                if (sent[j]) g[j] += weight * u[j];
        } else {
            cblas_saxpy((int)s->len, (float)(n_train / total), u, 1, g, 1);
        }
    }
}

/* The mean over senders from its sums; an element nobody sent keeps its
 * previous global value. */
static void span_finish(pfl_fl *fl, const agg_span *s) {
    if (!s->sum) return;
    float *g = fl->global + s->off;
    for (size_t j = 0; j < s->len; j++)
        if (s->over_total) g[j] = (float)(s->sum[j] / s->total);
        else if (s->weight[j] > 0.0) g[j] = (float)(s->sum[j] / s->weight[j]);
}

/* One process: every span over every slot, the mean over senders in pieces
 * of BLOCK elements (its sums need no more room). */
#define BLOCK 4096
static void aggregate_here(pfl_fl *fl, const agg_span *spans, int n_spans, const int *clients, int n,
                           float *const *uploads) {
    double sum[BLOCK], weight[BLOCK];
    for (int i = 0; i < n_spans; i++) {
        if (!sums_in_double(fl, &spans[i])) {
            span_start(fl, &spans[i]);
            span_add(fl, &spans[i], clients, uploads, 0, n);
            continue;
        }
        for (size_t at = 0; at < spans[i].len; at += BLOCK) {
            const size_t len = spans[i].len - at < BLOCK ? spans[i].len - at : BLOCK;
            agg_span piece = spans[i];
            piece.off += at, piece.len = len, piece.sum = sum, piece.weight = weight;
            span_start(fl, &piece);
            span_add(fl, &piece, clients, uploads, 0, n);
            span_finish(fl, &piece);
        }
    }
}

/* The running sum of span i, as it travels between ranks. */
static void span_sums(const pfl_fl *fl, const agg_span *s, void *parts[2], size_t bytes[2]) {
    parts[0] = s->sum ? (void *)s->sum : (void *)(fl->global + s->off), parts[1] = s->weight;
    bytes[0] = s->len * (s->sum ? sizeof(double) : sizeof(float)), bytes[1] = s->sum ? s->len * sizeof(double) : 0;
}

static int pass_sums(pfl_fl *fl, const agg_span *spans, int n_spans, int peer, bool send) {
    for (int i = 0; i < n_spans; i++) {
        void *parts[2];
        size_t bytes[2];
        span_sums(fl, &spans[i], parts, bytes);
        for (int p = 0; p < 2; p++)
            if (bytes[p] && (send ? pfl_transport_send(fl->cfg.transport, parts[p], bytes[p], peer)
                                  : pfl_transport_recv(fl->cfg.transport, parts[p], bytes[p], peer)))
                return -1;
    }
    return 0;
}

/* The nearest rank before (step -1) or after (+1) `rank` that holds slots, or -1. */
static int rank_with_slots(const int *slot_first, int size, int rank, int step) {
    for (int r = rank + step; r >= 0 && r < size; r += step)
        if (slot_first[r + 1] > slot_first[r]) return r;
    return -1;
}

/* This rank's place in the chain of a sum along the ranks: its slots
 * [first, end), the ranks with slots just before and after it (-1: none),
 * and the last rank with slots, whose result every rank receives. */
typedef struct {
    int first, end, before, after, last;
} chain_place;

static chain_place chain_place_here(const pfl_fl *fl) {
    const pfl_transport *t = fl->cfg.transport;
    const int *slot_first = fl->reducing, me = t->rank;
    return (chain_place){slot_first[me], slot_first[me + 1], rank_with_slots(slot_first, t->size, me, -1),
                         rank_with_slots(slot_first, t->size, me, +1), rank_with_slots(slot_first, t->size, t->size, -1)};
}

/* MPI: the sum along the ranks (see above); the mean over senders keeps
 * whole-span sums in double for the way. 0 or -1 with a message. */
static int aggregate_along_ranks(pfl_fl *fl, agg_span *spans, int n_spans, const int *clients, float *const *uploads) {
    pfl_transport *t = fl->cfg.transport;
    const chain_place at = chain_place_here(fl);
    int rc = 0;
    for (int i = 0; i < n_spans && rc == 0; i++)
        if (sums_in_double(fl, &spans[i]) &&
            (!(spans[i].sum = pfl_malloc(spans[i].len * sizeof(double))) ||
             !(spans[i].weight = pfl_malloc(spans[i].len * sizeof(double)))))
            rc = -1;
    if (rc == 0 && at.end > at.first) {
        if (at.before < 0)
            for (int i = 0; i < n_spans; i++) span_start(fl, &spans[i]);
        else rc = pass_sums(fl, spans, n_spans, at.before, false);
        for (int i = 0; i < n_spans && rc == 0; i++) span_add(fl, &spans[i], clients, uploads, at.first, at.end);
        if (rc == 0 && at.after >= 0) rc = pass_sums(fl, spans, n_spans, at.after, true);
        for (int i = 0; i < n_spans && rc == 0 && at.after < 0; i++) span_finish(fl, &spans[i]);
    }
    /* the result, from the last rank to all */
    for (int i = 0; i < n_spans && rc == 0; i++)
        rc = pfl_transport_share(t, fl->global + spans[i].off, spans[i].len * sizeof(float), at.last);
    for (int i = 0; i < n_spans; i++) free(spans[i].sum), free(spans[i].weight);
    return rc;
}

static void aggregate(pfl_fl *fl, const int *clients, int n, float *const *uploads, mean_kind kind) {
    double samples = 0.0;
    for (int k = 0; k < n; k++) samples += fl->part->clients[clients[k]].n_train;
    if (samples <= 0.0 && kind == MEAN_SAMPLES) return; /* (partitions give every client a training sample) */
    agg_span *spans = pfl_malloc(sizeof *spans * 2 * (size_t)pfl_model_rows(fl->model));
    if (!spans) {
        fl->reduce_failed = true;
        return;
    }
    const int n_spans = aggregation_spans(fl, spans, kind, samples, n);
    if (!fl->reducing) aggregate_here(fl, spans, n_spans, clients, n, uploads);
    else if (aggregate_along_ranks(fl, spans, n_spans, clients, uploads)) fl->reduce_failed = true;
    free(spans);
}

void pfl_default_aggregate(pfl_fl *fl, const int *clients, int n, float *const *uploads) {
    aggregate(fl, clients, n, uploads, MEAN_SAMPLES);
}

void pfl_uniform_aggregate(pfl_fl *fl, const int *clients, int n, float *const *uploads) {
    aggregate(fl, clients, n, uploads, MEAN_UNIFORM);
}

void pfl_plain_mean_aggregate(pfl_fl *fl, const int *clients, int n, float *const *uploads) {
    aggregate(fl, clients, n, uploads, MEAN_PLAIN);
}

void pfl_plain_mean_statistics(pfl_fl *fl, const int *clients, int n, float *const *uploads) {
    aggregate(fl, clients, n, uploads, MEAN_PLAIN_STATISTICS);
}

/* ---- a method's own sums over the slots (method.h) ---- */

/* MPI: the running sum's spans to (send) or from the rank `peer`. */
static int pass_spans(pfl_transport *t, const pfl_spans *spans, float *acc, int peer, bool send) {
    for (int i = 0; i < spans->count; i++) {
        void *at = acc + spans->offset[i];
        const size_t bytes = spans->length[i] * sizeof(float);
        if (send ? pfl_transport_send(t, at, bytes, peer) : pfl_transport_recv(t, at, bytes, peer)) return -1;
    }
    return 0;
}

int pfl_slot_sum(pfl_fl *fl, int n, const pfl_spans *spans, float *acc, pfl_slot_add add, void *ctx) {
    if (!fl->reducing) {
        for (int k = 0; k < n; k++) add(ctx, k, acc);
        return 0;
    }
    /* as aggregate_along_ranks: the slots' order kept from rank to rank */
    pfl_transport *t = fl->cfg.transport;
    const chain_place at = chain_place_here(fl);
    int rc = 0;
    if (at.end > at.first) {
        if (at.before >= 0) rc = pass_spans(t, spans, acc, at.before, false);
        for (int k = at.first; k < at.end && rc == 0; k++) add(ctx, k, acc);
        if (rc == 0 && at.after >= 0) rc = pass_spans(t, spans, acc, at.after, true);
    }
    for (int i = 0; i < spans->count && rc == 0 && at.last >= 0; i++)
        rc = pfl_transport_share(t, acc + spans->offset[i], spans->length[i] * sizeof(float), at.last);
    if (rc) fl->reduce_failed = true;
    return rc;
}

/* ---- BatchNorm state ---- */

bool pfl_state_shared(const pfl_fl *fl, int l) { return fl->shared[l] && fl->cfg.bn == PFL_BN_SHARED; }

void pfl_bn_mark_local(pfl_fl *fl) {
    if (fl->cfg.bn != PFL_BN_LOCAL) return;
    for (int l = 0; l < fl->model->num_layers; l++)
        if (fl->model->layers[l].state_length > 0) fl->shared[l] = false;
}

void pfl_keep_local_bn(const pfl_fl *fl, const float *own, float *received) {
    const pfl_model *m = fl->model;
    for (int l = 0; l < m->num_layers; l++) {
        const pfl_layer *ly = &m->layers[l];
        if (ly->state_length == 0) continue;
        if (fl->cfg.bn == PFL_BN_LOCAL) memcpy(received + ly->offset, own + ly->offset, ly->length * sizeof(float));
        if (!pfl_state_shared(fl, l))
            memcpy(received + ly->state_offset, own + ly->state_offset, ly->state_length * sizeof(float));
    }
}

/* ---- broadcast ---- */

int pfl_private_top_layers(const pfl_fl *fl) {
    int n = 0;
    for (int l = fl->model->num_layers - 1; l >= 0 && !fl->shared[l]; l--) n++;
    return n;
}
