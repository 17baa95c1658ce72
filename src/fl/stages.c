/* FedAvg's upload and aggregation, which every algorithm inherits, and what
 * --bn keeps local. (Its local init and personalized model, which for
 * stateful runs build a client's model, are in client_state.c with the
 * broadcast.) */
#include <cblas.h>
#include <string.h>

#include "fl/loop.h"

double pfl_fl_param(const pfl_fl *fl, const char *name) { return pfl_param_store_get(&fl->cfg.extra, name); }

void pfl_default_upload(pfl_fl *fl, int client, const float *model, float *upload) {
    (void)client;
    memcpy(upload, model, pfl_model_vector_len(fl->model) * sizeof(float));
}

void pfl_default_message_bytes(const pfl_fl *fl, int client, const uint8_t *sent, const float *upload, uint64_t *down,
                               uint64_t *up) {
    (void)client, (void)upload;
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
    if (fl->algo->whole_uploads) *up = 4 * (uint64_t)pfl_model_vector_len(m);
    else if (sent) *up = 4 * (sent_params + state) + (params + 7) / 8;
    else *up = *down;
}

/* ---- aggregation ---- */

static void aggregate_span_dense(pfl_fl *fl, const int *clients, int n, float *const *uploads, size_t off,
                                 size_t len, double total) {
    float *g = fl->global + off;
    memset(g, 0, len * sizeof(float));
    for (int k = 0; k < n; k++) {
        const float weight = (float)(fl->part->clients[clients[k]].n_train / total);
        cblas_saxpy((int)len, weight, uploads[k] + off, 1, g, 1);
    }
}

/* Element-wise weighted mean over the clients that sent each element; an
 * element nobody sent keeps its previous global value. */
static void aggregate_span_masked(pfl_fl *fl, const int *clients, int n, float *const *uploads, size_t off,
                                  size_t len) {
    float *g = fl->global + off;
    for (size_t j = 0; j < len; j++) {
        double sum = 0.0, weight = 0.0;
        for (int k = 0; k < n; k++)
            if (fl->sent[k][off + j]) {
                const double wk = fl->part->clients[clients[k]].n_train;
                sum += wk * uploads[k][off + j], weight += wk;
            }
        if (weight > 0.0) g[j] = (float)(sum / weight);
    }
}

/* Eq. 9 read literally: the weighted mean of the masked uploads, unsent
 * elements counting as zero. */
static void aggregate_span_literal(pfl_fl *fl, const int *clients, int n, float *const *uploads, size_t off,
                                   size_t len, double total) {
    float *g = fl->global + off;
    memset(g, 0, len * sizeof(float));
    for (int k = 0; k < n; k++) {
        const float weight = (float)(fl->part->clients[clients[k]].n_train / total);
        for (size_t j = 0; j < len; j++)
            if (fl->sent[k][off + j]) g[j] += weight * uploads[k][off + j];
    }
}

void pfl_default_aggregate(pfl_fl *fl, const int *clients, int n, float *const *uploads) {
    double total = 0.0;
    for (int k = 0; k < n; k++) total += fl->part->clients[clients[k]].n_train;
    if (total <= 0.0) return;
    const pfl_model *m = fl->model;
    for (int l = 0; l < pfl_model_rows(m); l++) { /* extra blocks too */
        if (!fl->shared[l]) continue;
        const size_t off = m->layers[l].offset, len = m->layers[l].length;
        if (!fl->sent) aggregate_span_dense(fl, clients, n, uploads, off, len, total);
        else if (fl->cfg.modules.flayer_mask_literal) aggregate_span_literal(fl, clients, n, uploads, off, len, total);
        else aggregate_span_masked(fl, clients, n, uploads, off, len);
    }
    pfl_aggregate_state(fl, clients, n, uploads);
}

/* ---- BatchNorm state ---- */

bool pfl_state_shared(const pfl_fl *fl, int l) { return fl->shared[l] && fl->cfg.bn == PFL_BN_SHARED; }

void pfl_aggregate_state(pfl_fl *fl, const int *clients, int n, float *const *uploads) {
    const pfl_model *m = fl->model;
    if (m->num_state == 0) return;
    double total = 0.0;
    for (int k = 0; k < n; k++) total += fl->part->clients[clients[k]].n_train;
    if (total <= 0.0) return;
    /* FLAYER's upload mask covers trained parameters only: running
     * statistics always travel whole */
    for (int l = 0; l < m->num_layers; l++)
        if (m->layers[l].state_length > 0 && pfl_state_shared(fl, l))
            aggregate_span_dense(fl, clients, n, uploads, m->layers[l].state_offset, m->layers[l].state_length, total);
}

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
