/* The shared-layer spans and the upload mean of SCAFFOLD, FedDyn and FedNTD (server_mean.h). */
#include "algos/server_mean.h"

#include <cblas.h>
#include <string.h>

#include "util/err.h"

bool pfl_server_mean_by_samples(const pfl_config *cfg) {
    return cfg->algo.server_mean && !strcmp(cfg->algo.server_mean, "samples");
}

int pfl_server_mean_check(const pfl_config *cfg) {
    const char *m = cfg->algo.server_mean;
    if (m && strcmp(m, "uniform") && strcmp(m, "samples"))
        return pfl_err("--server-mean '%s': expected uniform or samples", m);
    return 0;
}

void pfl_shared_param_spans(const pfl_fl *fl, pfl_spans *out) {
    const pfl_model *m = fl->model;
    memset(out, 0, sizeof *out);
    for (int l = 0; l < pfl_model_rows(m); l++) {
        if (!fl->shared[l] || m->layers[l].length == 0) continue;
        const size_t off = m->layers[l].offset, len = m->layers[l].length;
        const int last = out->count - 1;
        if (last >= 0 && out->offset[last] + out->length[last] == off) out->length[last] += len;
        else out->offset[out->count] = off, out->length[out->count++] = len;
        out->floats += len;
    }
    out->whole = out->floats == m->num_params;
}

/* Element j of the span at `off`: the uniform mean over the uploads that
 * sent it (FLAYER's mask), or with flayer_mask_literal their sum over all
 * n; an element nobody sent keeps its value (pfl_default_aggregate's rules
 * with weights 1). */
static void uniform_span_masked(pfl_fl *fl, int n, float *const *uploads, size_t off, size_t len) {
    const bool literal = fl->cfg.modules.flayer_mask_literal;
    for (size_t j = off; j < off + len; j++) {
        double sum = 0.0;
        int senders = 0;
        for (int k = 0; k < n; k++)
            if (fl->sent[k][j]) sum += uploads[k][j], senders++;
        if (literal) fl->global[j] = (float)(sum / n);
        else if (senders > 0) fl->global[j] = (float)(sum / senders);
    }
}

void pfl_server_mean(pfl_fl *fl, const int *clients, int n, float *const *uploads, bool by_samples) {
    /* FedAvg's mean: all of it with `samples`, else the running statistics,
     * its parameters then replaced by the uniform mean */
    pfl_default_aggregate(fl, clients, n, uploads);
    if (by_samples || n <= 0) return;
    pfl_spans spans;
    pfl_shared_param_spans(fl, &spans);
    const float weight = (float)(1.0 / n);
    for (int s = 0; s < spans.count; s++) {
        if (fl->sent) {
            uniform_span_masked(fl, n, uploads, spans.offset[s], spans.length[s]);
            continue;
        }
        float *g = fl->global + spans.offset[s];
        memset(g, 0, spans.length[s] * sizeof(float));
        for (int k = 0; k < n; k++) cblas_saxpy((int)spans.length[s], weight, uploads[k] + spans.offset[s], 1, g, 1);
    }
}

/* The shared layers' parameters and running statistics a client sends, or
 * under FLAYER's mask those it sent and a bitmap of which: what
 * pfl_default_message_bytes counts for a method that does not gather. */
static uint64_t upload_bytes(const pfl_fl *fl, const uint8_t *sent) {
    const pfl_model *m = fl->model;
    uint64_t params = 0, state = 0, sent_params = 0;
    for (int l = 0; l < pfl_model_rows(m); l++) {
        if (!fl->shared[l]) continue;
        params += m->layers[l].length;
        if (pfl_state_shared(fl, l)) state += m->layers[l].state_length;
        for (size_t j = 0; sent && j < m->layers[l].length; j++) sent_params += sent[m->layers[l].offset + j] != 0;
    }
    return sent ? 4 * (sent_params + state) + (params + 7) / 8 : 4 * (params + state);
}

void pfl_server_mean_message_bytes(const pfl_fl *fl, int client, const uint8_t *sent, const float *upload,
                                   uint64_t *down, uint64_t *up) {
    pfl_default_message_bytes(fl, client, sent, upload, down, up);
    *up = upload_bytes(fl, sent);
}
