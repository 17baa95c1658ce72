/* The shared-layer spans and the upload mean of SCAFFOLD, FedDyn and FedNTD (server_mean.h). */
#include "algos/server_mean.h"

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
        if (!fl->shared[l]) continue;
        /* --bn local: a BatchNorm layer is each client's own, though the run
         * marks it so (pfl_bn_mark_local) only after the method's create,
         * where SCAFFOLD and FedDyn take these spans */
        if (fl->cfg.bn == PFL_BN_LOCAL && l < m->num_layers && m->layers[l].state_length > 0) continue;
        pfl_spans_add(out, m->layers[l].offset, m->layers[l].length);
    }
    out->whole = out->floats == m->num_params;
}

bool pfl_spans_nonzero(const float *v, const pfl_spans *sp) {
    for (int k = 0; k < sp->count; k++)
        for (size_t j = sp->offset[k]; j < sp->offset[k] + sp->length[k]; j++)
            if (v[j] != 0.0f) return true;
    return false;
}

void pfl_server_mean(pfl_fl *fl, const int *clients, int n, float *const *uploads, bool by_samples) {
    (by_samples ? pfl_default_aggregate : pfl_uniform_aggregate)(fl, clients, n, uploads);
}
