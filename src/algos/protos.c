/* Class prototypes as messages (protos.h): collecting them, averaging
 * them, the squared-distance term toward them, and the message block that
 * carries them. */
#include "algos/protos.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "util/err.h"

#define NORMALIZE_EPS 1e-12 /* F.normalize's default */

int pfl_protos_feature_dim(const pfl_model *m) { return (int)pfl_model_layer_input_size(m, m->num_layers - 1); }

int pfl_protos_add_block(pfl_model *m, const char *name, int D, int n_extra, const pfl_block_tensor *extra) {
    enum { MAX_TENSORS = 4 };
    if (n_extra > MAX_TENSORS - 2) return pfl_err("%s: too many tensors in the message block", name);
    pfl_block_tensor t[MAX_TENSORS] = {{"protos", 2, {m->classes, D}}, {"present", 1, {m->classes}}};
    for (int k = 0; k < n_extra; k++) t[2 + k] = extra[k];
    return pfl_model_add_block(m, name, false, PFL_INIT_ZERO, 2 + n_extra, t);
}

int pfl_protos_add_feature_block(pfl_model *m, const char *method, const char *name) {
    if (m->num_layers < 2)
        return pfl_err("%s: model %s has one layer, so no features below its last layer to make prototypes of",
                       method, m->name);
    return pfl_protos_add_block(m, name, pfl_protos_feature_dim(m), 0, NULL);
}

float *pfl_protos_block(const pfl_model *m, float *vector) { return vector + m->layers[m->num_layers].offset; }

const float *pfl_protos_block_const(const pfl_model *m, const float *vector) {
    return vector + m->layers[m->num_layers].offset;
}

/* ---- collecting ---- */

int pfl_proto_sums_init(pfl_proto_sums *s, int C, int D) {
    s->C = C, s->D = D;
    s->sum = pfl_calloc((size_t)C * (size_t)D, sizeof(double));
    s->count = pfl_calloc((size_t)C, sizeof(long));
    if (s->sum && s->count) return 0;
    pfl_proto_sums_free(s);
    return -1;
}

void pfl_proto_sums_free(pfl_proto_sums *s) {
    free(s->sum);
    free(s->count);
    s->sum = NULL, s->count = NULL;
}

void pfl_proto_sums_add(pfl_proto_sums *s, const float *z, const uint8_t *labels, int B, bool normalize) {
    const int D = s->D;
    for (int n = 0; n < B; n++) {
        const float *row = z + (size_t)n * D;
        double scale = 1.0;
        if (normalize) {
            double sq = 0.0;
            for (int d = 0; d < D; d++) sq += (double)row[d] * row[d];
            scale = 1.0 / (sqrt(sq) > NORMALIZE_EPS ? sqrt(sq) : NORMALIZE_EPS);
        }
        double *sum = s->sum + (size_t)labels[n] * D;
        for (int d = 0; d < D; d++) sum[d] += normalize ? (double)(float)(row[d] * scale) : (double)row[d];
        s->count[labels[n]]++;
    }
}

void pfl_proto_sums_mean(const pfl_proto_sums *s, float *set) {
    const int C = s->C, D = s->D;
    float *present = set + (size_t)C * D;
    for (int c = 0; c < C; c++) {
        present[c] = s->count[c] > 0 ? 1.0f : 0.0f;
        for (int d = 0; d < D; d++)
            set[(size_t)c * D + d] = s->count[c] > 0 ? (float)(s->sum[(size_t)c * D + d] / (double)s->count[c]) : 0.0f;
    }
}

void pfl_proto_sums_step(void *ctx, const pfl_block_batch *b) {
    pfl_proto_sums_add(ctx, b->features, b->labels, b->B, false);
}

static long rows_at(const pfl_model *m, int at) {
    return at == PFL_AT_LOGITS ? m->classes : pfl_model_layer_input_size(m, at);
}

void pfl_protos_each_batch(pfl_fl *fl, pfl_worker *w, int client, const float *model, int at,
                           void (*add)(void *ctx, const float *z, const uint8_t *labels, int B), void *ctx) {
    const pfl_model *m = fl->model;
    const pfl_client_data *cd = &fl->part->clients[client];
    const int layer = at == PFL_AT_LOGITS ? m->num_layers : at, eb = fl->cfg.eval_batch;
    float *scratch = pfl_malloc(sizeof(float) * (size_t)eb * (size_t)rows_at(m, at));
    if (!scratch) return; /* out of memory: no rows */
    pfl_exec *x = w->exec;
    pfl_xbuf params = pfl_exec_view_const(x, model, pfl_model_vector_len(m));
    for (int start = 0; start < cd->n_train; start += eb) {
        const int B = cd->n_train - start < eb ? cd->n_train - start : eb;
        pfl_exec_gather(x, cd->train + start, B);
        pfl_exec_forward(x, &params, false, NULL);
        add(ctx, pfl_exec_features(x, layer, scratch), pfl_exec_labels(x), B);
    }
    pfl_exec_unview(x, &params);
    free(scratch);
}

typedef struct {
    pfl_proto_sums sums;
    bool normalize;
} split_sums;

static void add_to_sums(void *ctx, const float *z, const uint8_t *labels, int B) {
    split_sums *s = ctx;
    pfl_proto_sums_add(&s->sums, z, labels, B, s->normalize);
}

int pfl_protos_of_split(pfl_fl *fl, pfl_worker *w, int client, const float *model, int at, bool normalize,
                        float *set) {
    split_sums s = {.normalize = normalize};
    if (pfl_proto_sums_init(&s.sums, fl->model->classes, (int)rows_at(fl->model, at))) return -1;
    pfl_protos_each_batch(fl, w, client, model, at, add_to_sums, &s);
    pfl_proto_sums_mean(&s.sums, set);
    pfl_proto_sums_free(&s.sums);
    return 0;
}

/* ---- the server ---- */

void pfl_protos_mean(const pfl_model *m, float *const *uploads, int n, int D, float *out) {
    const int C = m->classes;
    float *present = out + (size_t)C * D;
    double *sum = pfl_malloc(sizeof(double) * (size_t)D);
    memset(out, 0, sizeof(float) * pfl_protos_len(C, D));
    if (!sum) return; /* out of memory: no prototype this round */
    for (int c = 0; c < C; c++) {
        int have = 0;
        memset(sum, 0, sizeof(double) * (size_t)D);
        for (int k = 0; k < n; k++) {
            const float *set = pfl_protos_block_const(m, uploads[k]);
            if (!pfl_protos_has(set, C, D, c)) continue;
            for (int d = 0; d < D; d++) sum[d] += set[(size_t)c * D + d];
            have++;
        }
        if (!have) continue;
        for (int d = 0; d < D; d++) out[(size_t)c * D + d] = (float)(sum[d] / have);
        present[c] = 1.0f;
    }
    free(sum);
}

/* ---- the local loss ---- */

double pfl_protos_mse(const float *set, int C, int D, const float *z, const uint8_t *labels, int B, float *dz) {
    const double scale = 1.0 / ((double)B * D);
    double sq = 0.0;
    for (int n = 0; n < B; n++) {
        if (!pfl_protos_has(set, C, D, labels[n])) continue; /* its row is rep itself: no loss, no gradient */
        const float *p = set + (size_t)labels[n] * D, *row = z + (size_t)n * D;
        for (int d = 0; d < D; d++) {
            const double e = (double)row[d] - p[d];
            sq += e * e;
            dz[(size_t)n * D + d] += (float)(2.0 * e * scale);
        }
    }
    return sq * scale;
}

double pfl_protos_mse_value(void *ctx, const pfl_term_batch *b, float *dz, int *correct) {
    (void)correct;
    const pfl_protos_target *t = ctx;
    return pfl_protos_mse(t->set, t->C, t->D, b->z, b->labels, b->B, dz);
}

int pfl_protos_count_correct(const pfl_fl *fl, pfl_exec *x, const float *params,
                             int (*predict)(const float *set, int C, int D, const float *z)) {
    const pfl_model *m = fl->model;
    const int C = m->classes, D = pfl_protos_dim(m), B = x->batch;
    const float *set = pfl_protos_block_const(m, params);
    float *scratch = pfl_malloc(sizeof(float) * (size_t)B * (size_t)D);
    if (!scratch) return 0;
    const float *z = pfl_exec_features(x, m->num_layers - 1, scratch);
    const uint8_t *labels = pfl_exec_labels(x);
    int correct = 0;
    for (int n = 0; n < B; n++) correct += predict(set, C, D, z + (size_t)n * D) == labels[n];
    free(scratch);
    return correct;
}

/* ---- bytes ---- */

int pfl_protos_count(const float *set, int C, int D) {
    int n = 0;
    for (int c = 0; c < C; c++) n += pfl_protos_has(set, C, D, c);
    return n;
}

uint64_t pfl_protos_bytes(const float *set, int C, int D) {
    return (uint64_t)pfl_protos_count(set, C, D) * 4 * ((uint64_t)D + 1);
}

uint64_t pfl_protos_client_bytes(const pfl_fl *fl, int client, int D) {
    const pfl_client_data *cd = &fl->part->clients[client];
    bool seen[256] = {false}; /* labels are bytes */
    int classes = 0;
    for (int i = 0; i < cd->n_train; i++) {
        const uint8_t y = fl->data->labels[cd->train[i]];
        classes += !seen[y];
        seen[y] = true;
    }
    return (uint64_t)classes * 4 * ((uint64_t)D + 1);
}

/* ---- the hooks' shared parts ---- */

int pfl_protos_dim(const pfl_model *m) { return m->tensors[m->layers[m->num_layers].first_tensor].shape[1]; }

int pfl_protos_stash_init(pfl_protos_stash *s, const pfl_fl *fl, size_t len) {
    s->len = len;
    s->sets = pfl_calloc((size_t)fl->num_workers * len, sizeof(float));
    return s->sets ? 0 : -1;
}

void pfl_protos_stash_free(pfl_protos_stash *s) {
    free(s->sets);
    s->sets = NULL;
}

float *pfl_protos_stash_here(const pfl_protos_stash *s, pfl_fl *fl) {
    return s->sets + (size_t)pfl_fl_worker_here(fl)->id * s->len;
}

int pfl_protos_exchange_setup(pfl_fl *fl, pfl_protos_stash *stash) {
    for (int l = 0; l < fl->model->num_layers; l++) fl->shared[l] = false;
    return pfl_protos_stash_init(stash, fl, pfl_protos_len(fl->model->classes, pfl_protos_dim(fl->model)));
}

void pfl_receive_unshared_own(pfl_fl *fl, int client, const float *state, float *received) {
    (void)client;
    const pfl_model *m = fl->model;
    memcpy(received, fl->global, pfl_model_vector_len(m) * sizeof(float));
    for (int l = 0; l < pfl_model_rows(m); l++) {
        const pfl_layer *row = &m->layers[l];
        if (!fl->shared[l]) memcpy(received + row->offset, state + row->offset, row->length * sizeof(float));
    }
}

int pfl_protos_exchange_create(pfl_fl *fl) {
    pfl_protos_stash *s = pfl_calloc(1, sizeof *s);
    return (fl->algo_state = s) ? pfl_protos_exchange_setup(fl, s) : -1;
}

void pfl_protos_exchange_destroy(pfl_fl *fl) {
    pfl_protos_stash_free(fl->algo_state);
    free(fl->algo_state);
    fl->algo_state = NULL;
}

void pfl_protos_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats, int at,
                      const pfl_loss_term *term) {
    const pfl_model *m = fl->model;
    const int C = m->classes, D = pfl_protos_dim(m);
    pfl_proto_sums sums;
    if (pfl_proto_sums_init(&sums, C, D)) return; /* out of memory: this client does not train */
    pfl_step s = pfl_step_default(fl);
    bool frozen[PFL_MAX_LAYERS] = {false};
    frozen[m->num_layers] = true; /* the message block */
    s.opt.frozen = frozen;
    pfl_step_add_block(&s, at, pfl_proto_sums_step, &sums);
    if (pfl_protos_count(pfl_protos_block_const(m, model), C, D) > 0) pfl_step_add_term(&s, term);
    pfl_step_run(fl, client, w, model, &s, stats);
    pfl_proto_sums_mean(&sums, pfl_protos_stash_here(fl->algo_state, fl));
    pfl_proto_sums_free(&sums);
}

void pfl_protos_upload(pfl_fl *fl, int client, const float *model, float *upload) {
    (void)client;
    const pfl_protos_stash *s = fl->algo_state;
    memcpy(upload, model, pfl_model_vector_len(fl->model) * sizeof(float));
    memcpy(pfl_protos_block(fl->model, upload), pfl_protos_stash_here(s, fl), s->len * sizeof(float));
}

void pfl_protos_aggregate(pfl_fl *fl, const int *clients, int n, float *const *uploads) {
    (void)clients;
    const pfl_model *m = fl->model;
    pfl_protos_mean(m, uploads, n, pfl_protos_dim(m), pfl_protos_block(m, fl->global));
}

void pfl_protos_message_bytes(const pfl_fl *fl, int client, const uint8_t *sent, const float *upload, uint64_t *down,
                                uint64_t *up) {
    (void)sent, (void)upload;
    const pfl_model *m = fl->model;
    const int D = pfl_protos_dim(m);
    *down = pfl_protos_bytes(pfl_protos_block_const(m, fl->global), m->classes, D);
    *up = pfl_protos_client_bytes(fl, client, D);
}

int pfl_protos_refuse_modules(const pfl_config *cfg, const char *method, const char *why) {
    const pfl_modules_config *m = &cfg->modules;
    const char *flag = m->ala ? "--ala" : m->flayer_agg ? "--flayer-agg" : m->flayer_mask ? "--flayer-mask" : NULL;
    if (!flag) return 0;
    return pfl_err("%s: %s %s, so there is %s", flag, method, why,
                   m->flayer_mask ? "no uploaded model to mask" : "no received model to mix with the client's");
}
