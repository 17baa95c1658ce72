/* ALA: FedALA's adaptive local aggregation (Zhang et al., AAAI 2023). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "modules/modules.h"
#include "util/err.h"
#include "util/json.h"

/* The paper (and PFLlib) judge convergence on the last 10 epoch losses. */
#define ALA_LOSS_WINDOW 10

static double ala_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void pfl_ala_span(const pfl_model *m, int p, size_t *offset, size_t *length) { pfl_ala_window(m, p, 0, offset, length); }

void pfl_ala_window(const pfl_model *m, int p, int private_layers, size_t *offset, size_t *length) {
    int end = m->num_layers - private_layers;
    if (end < 0) end = 0;
    int first = end - p;
    if (first < 0) first = 0;
    const size_t stop = end < m->num_layers ? m->layers[end].offset : pfl_model_backbone_params(m);
    *offset = first < end ? m->layers[first].offset : stop;
    *length = stop - *offset;
}

int pfl_ala_client_init(pfl_ala_client *c, const pfl_model *m, int p) { return pfl_ala_client_init_window(c, m, p, 0); }

int pfl_ala_client_init_window(pfl_ala_client *c, const pfl_model *m, int p, int private_layers) {
    size_t offset, length;
    pfl_ala_window(m, p, private_layers, &offset, &length);
    c->started = false;
    c->weights = pfl_malloc(sizeof(float) * (length ? length : 1));
    if (!c->weights) return -1;
    for (size_t i = 0; i < length; i++) c->weights[i] = 1.0f;
    return 0;
}

void pfl_ala_client_free(pfl_ala_client *c) {
    free(c->weights);
    c->weights = NULL;
}

void pfl_ala_weight_step(float *weights, const float *grad, const float *global, const float *local, float eta,
                         size_t n) {
    for (size_t i = 0; i < n; i++) {
        float w = weights[i] - eta * grad[i] * (global[i] - local[i]);
        weights[i] = w < 0.0f ? 0.0f : (w > 1.0f ? 1.0f : w);
    }
}

/* temp = local + (global - local) * W on the span. */
static void mix(float *temp, const float *local, const float *global, const float *weights, size_t n) {
    for (size_t i = 0; i < n; i++) temp[i] = local[i] + (global[i] - local[i]) * weights[i];
}

static double std_of_last(const double *v, int n, int window) {
    double mean = 0.0, var = 0.0;
    for (int i = n - window; i < n; i++) mean += v[i];
    mean /= window;
    for (int i = n - window; i < n; i++) var += (v[i] - mean) * (v[i] - mean);
    return sqrt(var / window);
}

/* One epoch of weight learning over the sampled indices; returns the mean
 * batch loss, and in *last_full the loss of its last full batch (of its
 * only batch when the sample is smaller than one), each loss taken before
 * its batch's step. */
static double learn_epoch(pfl_ala_client *c, const pfl_ala_config *cfg, const pfl_model *m, const int *idx, int n,
                          const float *global, const float *local, size_t offset, size_t length,
                          const pfl_ala_buffers *buf, double *last_full) {
    double loss_sum = 0.0;
    int batches = 0;
    const int end = m->num_layers - cfg->private_layers < 0 ? 0 : m->num_layers - cfg->private_layers;
    const int first_top = end - cfg->p < 0 ? 0 : end - cfg->p;
    pfl_exec *x = buf->exec;
    /* The weight step runs on the host: on a device the window's gradient
     * comes down and the mixed window goes up each batch (a few thousand
     * floats); on the CPU both are the buffers themselves. */
    const bool device = pfl_exec_on_device(x);
    float *window_grad = device ? pfl_malloc(sizeof(float) * (length ? length : 1)) : NULL;
    if (device && !window_grad) return 0.0;
    pfl_xbuf temp = pfl_exec_view(x, buf->temp, pfl_model_vector_len(m), true);
    for (int start = 0; start < n; start += cfg->batch) {
        int B = n - start < cfg->batch ? n - start : cfg->batch;
        pfl_exec_gather(x, idx + start, B);
        pfl_exec_zero(x, buf->grads, offset, m->num_params - offset); /* the window and above */
        /* training mode without an rng: BatchNorm normalizes with batch
         * statistics as PFLlib's ALA does (the local model it copies is left
         * in train mode by the previous round's training), dropout is the
         * identity; the temporary model's running statistics are not kept */
        pfl_exec_forward(x, &temp, true, NULL);
        const double loss = pfl_exec_xent(x, NULL);
        loss_sum += loss;
        if (B == cfg->batch || start == 0) *last_full = loss;
        pfl_exec_backward(x, &temp, buf->grads, first_top, 1.0f, NULL, 0);
        if (device) pfl_exec_read(x, buf->grads, offset, window_grad, length);
        const float *grad = device ? window_grad : pfl_exec_host(buf->grads) + offset;
        pfl_ala_weight_step(c->weights, grad, global + offset, local + offset, cfg->eta, length);
        mix(buf->temp + offset, local + offset, global + offset, c->weights, length);
        pfl_exec_write(x, &temp, offset, buf->temp + offset, length); /* the CPU's is that memory: no copy */
        batches++;
    }
    pfl_exec_unview(x, &temp);
    free(window_grad);
    return batches ? loss_sum / batches : 0.0;
}

pfl_ala_report pfl_ala_apply(pfl_ala_client *c, const pfl_ala_config *cfg, const pfl_model *m, const int *train,
                             int n_train, const float *global, float *local, const pfl_ala_buffers *buf, pfl_rng *rng) {
    pfl_ala_report report = {0};
    size_t offset, length;
    pfl_ala_window(m, cfg->p, cfg->private_layers, &offset, &length);
    /* The lower layers always come from the global model (the client's own
     * top layers above the window stay as they are). */
    memcpy(local, global, sizeof(float) * offset);
    if (length == 0 || memcmp(local + offset, global + offset, sizeof(float) * length) == 0 || n_train == 0) {
        report.skipped = true;
        return report;
    }
    /* A random s% of the training split; the batch order inside it is fixed. */
    int n = (int)((double)cfg->s / 100.0 * n_train);
    if (n < 1) n = 1;
    memcpy(buf->order, train, sizeof(int) * (size_t)n_train);
    pfl_rng_shuffle(rng, buf->order, (size_t)n_train);

    memcpy(buf->temp, local, sizeof(float) * pfl_model_vector_len(m));
    mix(buf->temp + offset, local + offset, global + offset, c->weights, length);
    /* The start phase trains "until convergence": until the std of the last
     * 10 epochs' losses is below the threshold, each epoch's loss being its
     * last full batch's, as PFLlib records it (losses.append(loss_value.item())
     * after the epoch's loop, its loader dropping a partial last batch). The
     * batch order is fixed, so that is the loss of one fixed batch at the
     * weights the epoch reached, where an epoch's mean averages over
     * weights that kept moving through it. */
    double losses[4096];
    const int max_epochs = cfg->max_epochs < 4096 ? cfg->max_epochs : 4096;
    const double t0 = ala_now();
    for (;;) {
        double last_full = 0.0;
        double loss = learn_epoch(c, cfg, m, buf->order, n, global, local, offset, length, buf, &last_full);
        losses[report.epochs++] = last_full;
        report.last_loss = (float)loss;
        if (c->started) break; /* later rounds: one epoch */
        if (report.epochs > ALA_LOSS_WINDOW &&
            std_of_last(losses, report.epochs, ALA_LOSS_WINDOW) < cfg->threshold)
            break;
        if (report.epochs >= max_epochs) {
            report.hit_max = true;
            break;
        }
    }
    report.start_phase = !c->started, report.seconds = ala_now() - t0;
    c->started = true;
    memcpy(local + offset, buf->temp + offset, sizeof(float) * length);
    return report;
}

pfl_ala_start_totals pfl_ala_start_sum(const long *epochs, const double *seconds, int n) {
    pfl_ala_start_totals t = {0, 0, 0, 0, 0.0};
    for (int c = 0; c < n; c++) {
        if (epochs[c] <= 0) continue; /* its start phase has not run */
        const int e = (int)epochs[c];
        t.min_epochs = t.clients == 0 || e < t.min_epochs ? e : t.min_epochs;
        t.max_epochs = e > t.max_epochs ? e : t.max_epochs;
        t.clients++, t.epochs += e, t.seconds += seconds[c];
    }
    return t;
}

/* ---- the module's flags and report ---- */

static const pfl_param ala_params[] = {
    {PFL_MODULES_PARAM(BOOL, "ala", ala), .help = "module: FedALA's adaptive local aggregation, any algorithm"},
    {PFL_MODULES_PARAM(INT, "ala-p", ala_p), .def = 1, .min = 1, .max = PFL_MAX_LAYERS, .metavar = "P|NAMES",
     .help = "ALA: top layers mixed element-wise (a count in --layer-unit, or names: fc, layer4.*)",
     .layers = PFL_LAYERS_TOP_ROWS},
    {PFL_MODULES_PARAM(FLOAT, "ala-s", ala_s), .def = 80, .min = 0, .max = 100, .min_exclusive = true,
     .metavar = "PCT", .help = "ALA: percent of the training split to learn on"},
    {PFL_MODULES_PARAM(FLOAT, "ala-eta", ala_eta), .def = 1.0, .min = 0, .max = 1e6, .min_exclusive = true,
     .metavar = "F", .help = "ALA: learning rate of the weights"},
    {PFL_MODULES_PARAM(FLOAT, "ala-threshold", ala_threshold), .def = 0.1, .min = 0, .max = 1e6,
     .min_exclusive = true, .metavar = "F",
     .help = "ALA: its start phase (a client's first ALA) trains until the std of the last 10 epochs' "
             "last-batch losses is below this"},
    {PFL_MODULES_PARAM(INT, "ala-max-epochs", ala_max_epochs), .def = 100, .min = 1, .max = 4096, .metavar = "E",
     .help = "ALA: bound on the start phase's epochs (warns when reached)"},
};

/* The summary: the weights each client learns (FedALA's Table 6 counts
 * them as "Param."), the span of the top p layers; and the start phase,
 * which FedALA's Table 3 times apart ("7+116 min"): the clients that ran
 * it, their epochs, and its wall time summed over them (inside the rounds'
 * time). The end-of-run lines say the same. */
static void ala_report(const pfl_module_view *v, FILE *f, int what) {
    const pfl_ala_start_totals *t = v->ala_start;
    if (what == PFL_REPORT_SUMMARY) {
        size_t offset, length;
        pfl_ala_span(v->model, v->cfg->ala_p, &offset, &length);
        fprintf(f, ",\n  \"ala_weights\": %zu", length);
        if (!t) return;
        fprintf(f, ",\n  \"ala_start_clients\": %d,\n  \"ala_start_epochs_mean\": ", t->clients);
        pfl_json_number(f, t->clients ? (double)t->epochs / t->clients : NAN);
        fprintf(f, ",\n  \"ala_start_epochs_min\": %d,\n  \"ala_start_epochs_max\": %d,\n  \"ala_start_seconds\": ",
                t->min_epochs, t->max_epochs);
        pfl_json_number(f, t->seconds);
    } else if (what == PFL_REPORT_FINAL && t && t->clients > 0) {
        fprintf(f, "[pfl] ala: start phase on %d clients, %.2f epochs on average (%d-%d), %.1f s in all\n",
                t->clients, (double)t->epochs / t->clients, t->min_epochs, t->max_epochs, t->seconds);
    }
}

const pfl_module pfl_module_ala = {
    .name = "ala",
    .switch_offset = offsetof(pfl_modules_config, ala),
    .bit = PFL_MODULE_ALA,
    PFL_PARAMS(ala_params),
    .report = ala_report,
};
