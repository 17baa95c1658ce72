/* FedCAC (Wu, Liu, Niu, Zhu, Tang, ICCV 2023, "Bold but Cautious: Unlocking
 * the Potential of Personalized Federated Learning through Cautiously
 * Aggressive Collaboration"), as PFLlib has it (clientcac.py,
 * servercac.py; the authors' own code is FLAIR-Community/Fling's
 * fedcac_client.py and fedcac_group.py, the same steps).
 *
 * A client trains its model by SGD, then measures each parameter's
 * sensitivity as |(w - w_0) * w|, w_0 the model training started from, and
 * in every parameter tensor marks the top --cac-tau fraction as critical.
 * The server averages the uploads as FedAvg does (the global model) and,
 * for each client of the round, a customized global model: the plain mean
 * of the uploads of the clients whose critical positions overlap its own by
 * at least a threshold,
 *
 *   overlap(i, j) = 1 - |m_i xor m_j| / (2 |m_i|)
 *   threshold_r   = avg + (r / beta) (max - avg)   (over the round's pairs)
 *
 * which rises with the round r from the mean overlap to the largest, so a
 * client collaborates on its critical parameters with fewer clients as
 * training goes on. A client's model is its critical parameters from its
 * customized model and the others from the global model; that is what it
 * trains from and what is evaluated.
 *
 * Where pfl keeps things: the server knows what it sent each client, so it
 * measures the sensitivities itself from the upload and the model training
 * started from (the same floats the client would send as its mask; the
 * message count includes the mask, below). Masks (one bit a parameter) and
 * customized models are per-client stores of the server, checkpointed;
 * the clients keep nothing (--bn local or stats-local add what they keep).
 * docs/algorithms.md, "FedCAC", has the readings. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "util/err.h"

typedef struct {
    pfl_store *critical;   /* per client: its mask, a bit per parameter, 32 bits to a float slot */
    pfl_store *customized; /* per client: its customized global model's parameters */
    float *start;          /* scratch: the model a client's training started from (parameters) */
    uint32_t *keys;        /* scratch: a tensor's sensitivities as ordered keys */
    double *overlap;       /* scratch: n x n overlaps of the round's clients */
    uint32_t *words;       /* scratch: popcounts of the round's masks */
} cac_state;

/* Mask words of a model: one bit per parameter. */
static size_t mask_words(const pfl_model *m) { return (m->num_params + 31) / 32; }

/* The store's float slots hold the mask's 32-bit words bit for bit (memcpy, never arithmetic). */
static uint32_t word_at(const float *row, size_t w) {
    uint32_t u;
    memcpy(&u, row + w, sizeof u);
    return u;
}

static bool bit_at(const float *row, size_t j) { return (word_at(row, j / 32) >> (j % 32)) & 1u; }

static bool customize_first_round(const pfl_fl *fl) {
    const char *r = fl->cfg.algo.cac_round1;
    return r && !strcmp(r, "customized");
}

static int cac_check(const pfl_config *cfg) {
    const char *r = cfg->algo.cac_round1;
    if (r && strcmp(r, "initial") && strcmp(r, "customized"))
        return pfl_err("--cac-round1 '%s': expected initial or customized", r);
    const pfl_modules_config *m = &cfg->modules;
    if (m->ala || m->flayer_agg)
        return pfl_err("%s: fedcac already builds each client's starting model parameter by parameter (critical "
                       "ones from its customized model, the rest from the global one) and measures sensitivity "
                       "from it; a second mix with the client's old model would start training elsewhere",
                       m->ala ? "--ala" : "--flayer-agg");
    if (m->flayer_mask)
        return pfl_err("--flayer-mask: fedcac's customized models average whole client models and every "
                       "parameter's sensitivity is measured; a masked upload leaves the unsent ones unknown");
    return 0;
}

static int cac_create(pfl_fl *fl) {
    const pfl_model *m = fl->model;
    const int N = fl->cfg.clients;
    const size_t n = (size_t)pfl_clients_per_round(&fl->cfg);
    size_t largest = 1;
    for (int t = 0; t < m->num_tensors; t++)
        if (m->tensors[t].length > largest) largest = m->tensors[t].length;
    cac_state *s = pfl_calloc(1, sizeof *s);
    if (!(fl->algo_state = s)) return -1;
    float *no_mask = pfl_calloc(mask_words(m), sizeof(float)); /* all bits 0: no critical parameter yet */
    const bool made = no_mask &&
                      (s->critical = pfl_fl_store(fl, "fedcac-critical", N, mask_words(m), no_mask)) &&
                      (s->customized = pfl_fl_store(fl, "fedcac-customized", N, m->num_params, fl->global)) &&
                      (s->start = pfl_malloc(sizeof(float) * m->num_params)) &&
                      (s->keys = pfl_malloc(sizeof(uint32_t) * largest)) &&
                      (s->overlap = pfl_malloc(sizeof(double) * n * n)) &&
                      (s->words = pfl_malloc(sizeof(uint32_t) * n));
    free(no_mask);
    return made ? 0 : -1;
}

static void cac_destroy(pfl_fl *fl) {
    cac_state *s = fl->algo_state;
    free(s->start);
    free(s->keys);
    free(s->overlap);
    free(s->words);
    free(s);
    fl->algo_state = NULL;
}

/* ---- the client's model: critical parameters from its customized model ---- */

void pfl_fedcac_mix(const pfl_fl *fl, const float *mask, const float *customized, float *model) {
    const pfl_model *m = fl->model;
    for (int l = 0; l < m->num_layers; l++) {
        if (!fl->shared[l]) continue; /* --bn local: the client's own */
        const size_t off = m->layers[l].offset, end = off + m->layers[l].length;
        for (size_t j = off; j < end; j++)
            if (bit_at(mask, j)) model[j] = customized[j];
    }
}

/* The global model with the client's critical parameters from its customized model. */
static void build_model(pfl_fl *fl, int client, float *model) {
    cac_state *s = fl->algo_state;
    memcpy(model, fl->global, pfl_model_vector_len(fl->model) * sizeof(float));
    pfl_fedcac_mix(fl, pfl_store_read(s->critical, client), pfl_store_read(s->customized, client), model);
}

/* Stateful runs (--bn local or stats-local): what the server sends; the
 * round loop puts the client's own BatchNorm parts back. */
static void cac_receive(pfl_fl *fl, int client, const float *state, float *received) {
    (void)state;
    build_model(fl, client, received);
}

static void cac_init(pfl_fl *fl, int client, float *model) {
    if (fl->client_state) pfl_default_local_init(fl, client, model);
    else build_model(fl, client, model);
}

static const float *cac_personal_model(pfl_fl *fl, int client, float *scratch) {
    if (fl->client_state) return pfl_default_personal_model(fl, client, scratch);
    build_model(fl, client, scratch);
    return scratch;
}

/* ---- the critical parameters ---- */

/* The k-th smallest of a[0..n) (0-based), reordering a (Wirth's selection). */
static uint32_t kth_smallest(uint32_t *a, long n, long k) {
    long lo = 0, hi = n - 1;
    while (lo < hi) {
        const uint32_t pivot = a[k];
        long i = lo, j = hi;
        do {
            while (a[i] < pivot) i++;
            while (pivot < a[j]) j--;
            if (i <= j) {
                const uint32_t t = a[i];
                a[i] = a[j], a[j] = t;
                i++, j--;
            }
        } while (i <= j);
        if (j < k) lo = i;
        if (k < i) hi = j;
    }
    return a[k];
}

/* A non-negative float's bits order as the float does (NaN above +inf, as
 * torch.topk puts it). */
static uint32_t key_of(float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}

static float float_of(uint32_t u) {
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* PFLlib's evaluate_critical_parameter on one tensor of n parameters: c =
 * |(w - w0) * w|; the threshold is the int(tau * n)-th largest c (+inf when
 * that is none); a threshold at or below 1e-10 becomes the smallest c above
 * 1e-20 (when there is one); critical is c >= threshold. Sets bits
 * first..first+n-1 of mask_row. keys: n scratch words. */
void pfl_fedcac_select(const float *w, const float *w0, size_t n, double tau, uint32_t *keys, float *mask_row,
                       size_t first) {
    for (size_t j = 0; j < n; j++) keys[j] = key_of(fabsf((w[j] - w0[j]) * w[j]));
    const long nz = (long)(tau * (double)n);
    float thresh = nz > 0 ? float_of(kth_smallest(keys, (long)n, (long)n - nz)) : INFINITY;
    if (thresh <= 1e-10f) {
        float least = INFINITY;
        for (size_t j = 0; j < n; j++) {
            const float c = fabsf((w[j] - w0[j]) * w[j]);
            if (c > 1e-20f && c < least) least = c;
        }
        if (least < INFINITY) thresh = least; /* else every c is (about) zero: PFLlib keeps the threshold */
    }
    for (size_t j = 0; j < n; j++) {
        const size_t bit = first + j;
        uint32_t word = word_at(mask_row, bit / 32);
        if (fabsf((w[j] - w0[j]) * w[j]) >= thresh) word |= 1u << (bit % 32);
        else word &= ~(1u << (bit % 32));
        memcpy(mask_row + bit / 32, &word, sizeof word);
    }
}

/* The client's new mask from its upload and the model it started from,
 * which the server rebuilds from what it sent: the mask and customized
 * model it held, over the global model before this round's aggregation. */
static int update_mask(pfl_fl *fl, int client, const float *upload) {
    cac_state *s = fl->algo_state;
    const pfl_model *m = fl->model;
    memcpy(s->start, fl->global, sizeof(float) * m->num_params);
    pfl_fedcac_mix(fl, pfl_store_read(s->critical, client), pfl_store_read(s->customized, client), s->start);
    float *row = pfl_store_write(s->critical, client);
    if (!row) return -1; /* the store's error fails the round */
    memset(row, 0, sizeof(float) * mask_words(m));
    for (int l = 0; l < m->num_layers; l++) {
        if (!fl->shared[l]) continue;
        const pfl_layer *ly = &m->layers[l];
        for (int t = ly->first_tensor; t < ly->first_tensor + ly->num_tensors; t++) {
            const pfl_tensor *te = &m->tensors[t];
            pfl_fedcac_select(upload + te->offset, s->start + te->offset, te->length, fl->cfg.algo.cac_tau, s->keys,
                              row, te->offset);
        }
    }
    return 0;
}

/* ---- the customized global models ---- */

static uint32_t popcount_row(const float *row, size_t words) {
    uint32_t c = 0;
    for (size_t w = 0; w < words; w++) c += (uint32_t)__builtin_popcount(word_at(row, w));
    return c;
}

static uint32_t popcount_xor(const float *a, const float *b, size_t words) {
    uint32_t c = 0;
    for (size_t w = 0; w < words; w++) c += (uint32_t)__builtin_popcount(word_at(a, w) ^ word_at(b, w));
    return c;
}

double pfl_fedcac_threshold(const double *overlap, int n, int round, int beta) {
    double sum = 0.0, most = -INFINITY;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            if (i == j) continue;
            sum += overlap[i * n + j];
            if (overlap[i * n + j] > most) most = overlap[i * n + j];
        }
    const double avg = sum / ((double)(n - 1) * n);
    return avg + (double)round / beta * (most - avg);
}

/* overlap[i n + j] = 1 - |m_i xor m_j| / (2 |m_i|) over the round's clients
 * (0 for a client without critical parameters, where PFLlib divides by 0). */
static void overlaps(pfl_fl *fl, const int *clients, int n) {
    cac_state *s = fl->algo_state;
    const size_t words = mask_words(fl->model);
    for (int i = 0; i < n; i++) s->words[i] = popcount_row(pfl_store_read(s->critical, clients[i]), words);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double o = 0.0;
            if (i != j && s->words[i] > 0) {
                const uint32_t x = popcount_xor(pfl_store_read(s->critical, clients[i]),
                                                pfl_store_read(s->critical, clients[j]), words);
                o = 1.0 - (double)x / (2.0 * s->words[i]);
            }
            s->overlap[i * n + j] = o;
        }
}

/* Client k's customized model: the plain mean of its own upload and those of
 * the clients it overlaps by at least the threshold (PFLlib's sum in that
 * order, its own first, divided by their number). */
static int customize(pfl_fl *fl, const int *clients, int n, float *const *uploads, int k, double threshold) {
    cac_state *s = fl->algo_state;
    const pfl_model *m = fl->model;
    float *row = pfl_store_write(s->customized, clients[k]);
    if (!row) return -1;
    int count = 1;
    for (int j = 0; j < n; j++) count += j != k && s->overlap[k * n + j] >= threshold;
    for (int l = 0; l < m->num_layers; l++) {
        if (!fl->shared[l]) continue; /* never mixed, and under MPI not sent */
        const size_t off = m->layers[l].offset, end = off + m->layers[l].length;
        memcpy(row + off, uploads[k] + off, sizeof(float) * (end - off));
        for (int j = 0; j < n; j++)
            if (j != k && s->overlap[k * n + j] >= threshold)
                for (size_t i = off; i < end; i++) row[i] += uploads[j][i];
        for (size_t i = off; i < end; i++) row[i] /= (float)count;
    }
    return 0;
}

/* Masks from the uploads, FedAvg's global model, then (from round 2, or 1
 * with --cac-round1 customized) each client's customized model. */
static void cac_aggregate(pfl_fl *fl, const int *clients, int n, float *const *uploads) {
    cac_state *s = fl->algo_state;
    for (int k = 0; k < n; k++)
        if (update_mask(fl, clients[k], uploads[k])) return;
    pfl_default_aggregate(fl, clients, n, uploads);
    if (fl->round == 1 && !customize_first_round(fl)) return; /* PFLlib: no customization after round 1 */
    overlaps(fl, clients, n);
    const double threshold = n > 1 ? pfl_fedcac_threshold(s->overlap, n, fl->round, fl->cfg.algo.cac_beta) : 0.0;
    for (int k = 0; k < n; k++)
        if (customize(fl, clients, n, uploads, k, threshold)) return;
}

/* Down: the global model and, once the server made one, the customized
 * model; up: the model and the critical mask (a bit per shared parameter). */
static void cac_message_bytes(const pfl_fl *fl, int client, const uint8_t *sent, const float *upload, uint64_t *down,
                               uint64_t *up) {
    (void)upload;
    const cac_state *s = fl->algo_state;
    const pfl_model *m = fl->model;
    pfl_shared_message_bytes(fl, sent, down, up);
    uint64_t shared = 0;
    for (int l = 0; l < m->num_layers; l++)
        if (fl->shared[l]) shared += m->layers[l].length;
    if (pfl_store_touched(s->customized, client)) *down += 4 * shared;
    *up += (shared + 7) / 8;
}

static int cac_save(const pfl_fl *fl, pfl_ckpt_writer *w) {
    const cac_state *s = fl->algo_state;
    return pfl_store_save(s->critical, w, "fedcac.critical") || pfl_store_save(s->customized, w, "fedcac.customized")
               ? -1
               : 0;
}

static int cac_load(pfl_fl *fl, pfl_ckpt_reader *r) {
    cac_state *s = fl->algo_state;
    return pfl_store_load(s->critical, r, "fedcac.critical") || pfl_store_load(s->customized, r, "fedcac.customized")
               ? -1
               : 0;
}

/* The authors' run settings (Fling's argzoo/cifar10/cifar10_fedcac_resnet_config.py:
 * "tau = 0.5", "beta = 100"); PFLlib's main.py defaults (-tau 1.0, -bt 0.0) mark every
 * parameter critical and fail its own assert beta >= 1. */
static const pfl_param cac_params[] = {
    {PFL_ALGO_PARAM(DOUBLE, "cac-tau", cac_tau), .alias = "tau", .def = 0.5, .max = 1, .min_exclusive = true,
     .metavar = "F",
     .help = "ratio of critical parameters tau: the top tau of each parameter tensor by sensitivity |(w - w0) w|"},
    {PFL_ALGO_PARAM(INT, "cac-beta", cac_beta), .alias = "bt", .def = 100, .min = 1, .max = 1e9, .metavar = "N",
     .help = "beta: the collaboration threshold rises from the mean overlap to the largest over beta rounds"},
    {PFL_ALGO_PARAM(STRING, "cac-round1", cac_round1), .def_text = "initial", .metavar = "initial|customized",
     .help = "critical parameters after round 1: from the initial model (PFLlib) or a customized model (the "
             "authors' Fling code)"},
};

const pfl_algo pfl_algo_fedcac = {
    .name = "fedcac",
    .description = "FedCAC: critical parameters (top tau by sensitivity) averaged only with clients whose critical "
                   "positions overlap, the rest with all (--cac-tau, --cac-beta, --cac-round1)",
    PFL_PARAMS(cac_params),
    .has_global = true,
    .whole_uploads = true, /* MPI: its aggregate reads each upload (masks, customized models) */
    .check = cac_check,
    .create = cac_create,
    .destroy = cac_destroy,
    .receive = cac_receive,
    .local_init = cac_init,
    .aggregate = cac_aggregate,
    .personal_model = cac_personal_model,
    .message_bytes = cac_message_bytes,
    .save = cac_save,
    .load = cac_load,
};
