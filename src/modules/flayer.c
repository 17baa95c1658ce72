/* FLAYER's layer-wise pieces (Eq. 2, 4, 5-9). */
#include <math.h>
#include <string.h>

#include "modules/modules.h"

void pfl_flayer_mix_head(float *local, const float *received, const pfl_model *m, int head, float acc) {
    pfl_flayer_mix_window(local, received, m, head, 0, acc);
}

void pfl_flayer_mix_window(float *local, const float *received, const pfl_model *m, int head, int private_layers,
                           float acc) {
    int end = m->num_layers - private_layers;
    if (end < 0) end = 0;
    const int first_head = end - head < 0 ? 0 : end - head;
    const size_t base = first_head < m->num_layers ? m->layers[first_head].offset : pfl_model_backbone_params(m);
    const size_t stop = end < m->num_layers ? m->layers[end].offset : pfl_model_backbone_params(m);
    memcpy(local, received, sizeof(float) * base);
    for (size_t i = base; i < stop; i++) local[i] = acc * local[i] + (1.0f - acc) * received[i];
}

void pfl_flayer_layer_lrs(float *lrs, const pfl_model *m, const float *grads, float lr) {
    double sq[PFL_MAX_LAYERS];
    for (int l = 0; l < m->num_layers; l++) {
        const float *g = grads + m->layers[l].offset;
        sq[l] = 0.0;
        for (size_t j = 0; j < m->layers[l].length; j++) sq[l] += (double)g[j] * g[j];
    }
    pfl_flayer_rates(lrs, m, sq, lr);
}

void pfl_flayer_rates(float *lrs, const pfl_model *m, const double *sq, float lr) {
    const int L = m->num_layers;
    for (int l = 0; l < L; l++) {
        double norm = sqrt(sq[l]);
        /* A layer with no gradient does not move whatever its rate; keep the
         * base rate rather than an infinite one. */
        double factor = norm > 0.0 ? 1.0 + log1p(1.0 / norm) * (double)(l + 1) / L : 1.0;
        lrs[l] = (float)(lr * factor);
    }
}

double pfl_flayer_upload_fraction(int i, int L) {
    double up = (double)i / L;
    if (up < 0.1) up = 0.1;
    return up > 1.0 ? 1.0 : up;
}

static void swap(float *a, float *b) {
    float t = *a;
    *a = *b;
    *b = t;
}

static float median3(float a, float b, float c) {
    if (a > b) swap(&a, &b);
    if (b > c) swap(&b, &c);
    return a > b ? a : b;
}

/* The value at position k (from 0) of v[0..n) sorted descending; reorders v.
 * Quickselect with a three-way partition, so runs of equal values end it
 * instead of looping; deterministic, O(n) expected. */
static float kth_largest(float *v, size_t n, size_t k) {
    size_t lo = 0, hi = n;
    for (;;) {
        if (hi - lo == 1) return v[lo];
        const float pivot = median3(v[lo], v[lo + (hi - lo) / 2], v[hi - 1]);
        /* [lo, gt) > pivot, [gt, lt) == pivot, [lt, hi) < pivot */
        size_t gt = lo, i = lo, lt = hi;
        while (i < lt) {
            if (v[i] > pivot) swap(&v[i++], &v[gt++]);
            else if (v[i] < pivot) swap(&v[i], &v[--lt]);
            else i++;
        }
        if (k < gt) hi = gt;
        else if (k < lt) return pivot;
        else lo = lt;
    }
}

size_t pfl_flayer_mask(uint8_t *sent, const pfl_model *m, const float *trained, const float *start, float *scratch) {
    const int L = m->num_layers;
    size_t total = 0;
    for (int l = 0; l < L; l++) {
        const size_t off = m->layers[l].offset, n = m->layers[l].length;
        /* ceil(UP_i * n) in integers: i/L * n in floating point can land just
         * above a whole number and send one element too many */
        const size_t i = (size_t)l + 1;
        size_t k = 10 * i < (size_t)L ? (n + 9) / 10 : (i * n + (size_t)L - 1) / (size_t)L;
        if (k > n) k = n;
        if (k == n) {
            memset(sent + off, 1, n);
            total += n;
            continue;
        }
        memset(sent + off, 0, n);
        if (k == 0) continue;
        for (size_t j = 0; j < n; j++) scratch[j] = fabsf(trained[off + j] - start[off + j]);
        const float threshold = kth_largest(scratch, n, k - 1);
        size_t taken = 0;
        for (size_t j = 0; j < n; j++)
            if (fabsf(trained[off + j] - start[off + j]) > threshold) sent[off + j] = 1, taken++;
        for (size_t j = 0; j < n && taken < k; j++)
            if (!sent[off + j] && fabsf(trained[off + j] - start[off + j]) == threshold) sent[off + j] = 1, taken++;
        total += taken;
    }
    /* extra parameter blocks (FedCP's, GPFL's) are no layer the rates address: sent whole */
    const size_t blocks = pfl_model_backbone_params(m);
    memset(sent + blocks, 1, m->num_params - blocks);
    return total + (m->num_params - blocks);
}

/* ---- the modules' flags and reports ---- */

static const pfl_param flayer_agg_params[] = {
    {PFL_MODULES_PARAM(BOOL, "flayer-agg", flayer_agg),
     .help = "module: FLAYER's head init A*local + (1-A)*global, A = last local accuracy"},
    {PFL_ALGO_PARAM(INT, "head-layers", head_layers), .def = 1, .min = 1, .max = PFL_MAX_LAYERS, .metavar = "S|NAMES",
     .help = "layers in the head FLAYER's mix initializes (s; a count in --layer-unit, or names)",
     .layers = PFL_LAYERS_TOP_ROWS},
};

static const pfl_param flayer_lr_params[] = {
    {PFL_MODULES_PARAM(BOOL, "flayer-lr", flayer_lr), .help = "module: FLAYER's per-layer learning rates"},
};

static const pfl_param flayer_mask_params[] = {
    {PFL_MODULES_PARAM(BOOL, "flayer-mask", flayer_mask), .help = "module: FLAYER's per-layer top-k upload mask"},
    {PFL_MODULES_PARAM(BOOL, "flayer-mask-literal", flayer_mask_literal),
     .help = "aggregate masked uploads as Eq. 9 reads (unsent elements count as 0); switches the mask on"},
};

/* The summary: the fraction of each layer's parameters a client uploads (Eq. 5). */
static void flayer_mask_report(const pfl_module_view *v, FILE *f, int what) {
    if (what != PFL_REPORT_SUMMARY) return;
    fputs(",\n  \"flayer_upload_fractions\": [", f);
    for (int l = 0; l < v->model->num_layers; l++)
        fprintf(f, "%s%.6g", l ? ", " : "", pfl_flayer_upload_fraction(l + 1, v->model->num_layers));
    fputs("]", f);
}

const pfl_module pfl_module_flayer_agg = {
    .name = "flayer-agg",
    .switch_offset = offsetof(pfl_modules_config, flayer_agg),
    .bit = PFL_MODULE_FLAYER_AGG,
    PFL_PARAMS(flayer_agg_params),
};

const pfl_module pfl_module_flayer_lr = {
    .name = "flayer-lr",
    .switch_offset = offsetof(pfl_modules_config, flayer_lr),
    .bit = PFL_MODULE_FLAYER_LR,
    PFL_PARAMS(flayer_lr_params),
};

const pfl_module pfl_module_flayer_mask = {
    .name = "flayer-mask",
    .switch_offset = offsetof(pfl_modules_config, flayer_mask),
    .bit = PFL_MODULE_FLAYER_MASK,
    PFL_PARAMS(flayer_mask_params),
    .report = flayer_mask_report,
};
