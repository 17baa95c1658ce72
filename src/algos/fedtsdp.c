/* FedTSDP (Federated Two-Stage Decoupling with adaptive Personalization
 * layers; docs/algorithms.md has the readings of the paper in full).
 *
 *  - The server holds a public unlabeled set D_pub: the dataset's last
 *    --public samples, which the partition gives to no client (their labels
 *    are never read). Sampling weights W start uniform.
 *  - Every client trains its whole model from its cluster's shared prefix
 *    and its own remaining (personalization) layers, and uploads the whole
 *    model. Every client is in cluster 0 until the first clustering.
 *  - Stage one, every round: the server draws |D_B| public samples by W
 *    (weighted, without replacement), runs every uploaded model on them,
 *    takes the softmax outputs p_i (|D_B| x C per client) and computes the
 *    Hopkins statistic H of the m flattened outputs (Eq. 6, L2 distances,
 *    pfl_hopkins). When H > h_th: DBSCAN(eps1, minPts) on the m x m
 *    Jensen-Shannon matrix (Eq. 5, mean over samples of per-sample JS);
 *    stage two, inside each stage-one group, DBSCAN(eps2, minPts) on the
 *    weight distances ||w_i - w_j + Upsilon e|| (Eq. 9) of the whole
 *    uploaded models; the clusters are the union of the subgroups, and the
 *    noise points of a DBSCAN run form one group (--tsdp-noise-singletons:
 *    one each). Then W gets Eq. 7-8 on the batch and L_s *= psi (Eq. 11).
 *    The Hopkins sample is m~ = m / 10 unless --tsdp-hopkins-m says.
 *  - Aggregation: each cluster's shared prefix (with the running statistics
 *    of the BatchNorm layers in it, under --bn shared) is the sample-weighted
 *    mean of its members' uploads (the clusters of this round's clustering, or
 *    the previous ones when H <= h_th); L_s shrinks after it, so the layers
 *    that stop being shared stay as each client trained them.
 *  - A client receives its cluster's shared prefix over its own model
 *    (personalized model = its state). The global model is FedAvg's
 *    weighted mean of all uploads, all layers (reported as global accuracy).
 *  Only full participation (--join 1), as in the paper (delta = 1). With
 *  --drop-rate the clients that dropped out of a round are not clustered in
 *  it: when the others are re-clustered, each former cluster of the missing
 *  clients goes on as a cluster of its own with its shared model. */
#include "algos/fedtsdp.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "cluster/cluster.h"
#include "util/err.h"
#include "util/json.h"

pfl_fedtsdp_state *pfl_fedtsdp_state_of(const pfl_fl *fl) {
    return fl && fl->algo == &pfl_algo_fedtsdp ? fl->algo_state : NULL;
}

size_t pfl_fedtsdp_shared_end(const pfl_model *m, double shared_layers) {
    if (!(shared_layers > 0.0)) return 0;
    if (shared_layers >= m->num_layers) return m->num_params;
    /* a hair of tolerance so 4 * 0.5 = 2 is 2 layers, not 1.999... */
    const double ls = shared_layers + 1e-9;
    const int full = (int)floor(ls);
    if (full >= m->num_layers) return m->num_params;
    const pfl_layer *layer = &m->layers[full];
    const int t = (int)floor((ls - full) * layer->num_tensors);
    if (t <= 0) return layer->offset;
    if (t >= layer->num_tensors) return layer->offset + layer->length;
    return m->tensors[layer->first_tensor + t].offset;
}

void pfl_fedtsdp_update_weights(double *W, int n, const int *batch, int batch_size) {
    if (batch_size < 1) return;
    for (int b = 0; b < batch_size; b++) W[batch[b]] += (double)n / (double)batch_size;
    double sum = 0.0;
    for (int k = 0; k < n; k++) sum += W[k];
    if (sum > 0.0)
        for (int k = 0; k < n; k++) W[k] /= sum;
}

double pfl_fedtsdp_weight_distance(const float *a, const float *b, size_t dim, double upsilon) {
    double s = 0.0;
    for (size_t j = 0; j < dim; j++) {
        const double d = (double)a[j] - (double)b[j] + upsilon;
        s += d * d;
    }
    return sqrt(s);
}

int pfl_fedtsdp_two_stage(int *labels, const double *js, const float *const *models, int m, size_t dim,
                          double eps1, double eps2, int min_pts, bool noise_singletons, int *noise) {
    int *l1 = pfl_malloc(sizeof(int) * (size_t)m), *mem = pfl_malloc(sizeof(int) * (size_t)m);
    int *l2 = pfl_malloc(sizeof(int) * (size_t)m);
    double *dist = pfl_malloc(sizeof(double) * (size_t)m * (size_t)m);
    char *was_noise = pfl_calloc((size_t)m, 1);
    int rc = -1;
    if (!l1 || !mem || !l2 || !dist || !was_noise) goto done;
    const int k1 = pfl_dbscan(l1, js, m, eps1, min_pts);
    if (k1 < 0) goto done;
    /* stage-one noise: one group of all of them (DBSCAN's label -1 taken as
     * a label), or with noise_singletons a group each; numbered after the
     * clusters */
    int groups = k1;
    for (int i = 0; i < m; i++)
        if (l1[i] < 0) {
            l1[i] = noise_singletons ? groups++ : k1;
            was_noise[i] = 1;
        }
    for (int i = 0; i < m; i++) labels[i] = -1;
    int next = 0;
    /* groups in order of their lowest member, so numbering is by first appearance */
    for (int i = 0; i < m; i++) {
        if (labels[i] >= 0) continue;
        const int g = l1[i];
        int n = 0;
        for (int j = 0; j < m; j++)
            if (l1[j] == g) mem[n++] = j;
        if (n == 1) {
            labels[mem[0]] = next++;
            continue;
        }
        /* Eq. 9 inside the group; Upsilon makes ||a - b + u|| differ from
         * ||b - a + u|| in the last bits, so the lower index goes first */
        for (int a = 0; a < n; a++) {
            dist[(size_t)a * n + a] = 0.0;
            for (int b = a + 1; b < n; b++)
                dist[(size_t)a * n + b] = dist[(size_t)b * n + a] =
                    pfl_fedtsdp_weight_distance(models[mem[a]], models[mem[b]], dim, PFL_FEDTSDP_UPSILON);
        }
        const int k2 = pfl_dbscan(l2, dist, n, eps2, min_pts);
        if (k2 < 0) goto done;
        /* stage-two noise of the group: one subcluster, or (noise_singletons)
         * each its own label -1 - a */
        for (int a = 0; a < n; a++)
            if (l2[a] < 0) {
                l2[a] = noise_singletons ? -1 - a : k2;
                was_noise[mem[a]] = 1;
            }
        /* subclusters in order of first member */
        for (int a = 0; a < n; a++) {
            if (labels[mem[a]] >= 0) continue;
            const int id = next++;
            for (int b = a; b < n; b++)
                if (l2[b] == l2[a]) labels[mem[b]] = id;
        }
    }
    rc = next;
    if (noise) {
        *noise = 0;
        for (int i = 0; i < m; i++) *noise += was_noise[i];
    }
done:
    free(was_noise);
    free(l1);
    free(l2);
    free(mem);
    free(dist);
    return rc;
}

/* ---- setup ---- */

static void tsdp_destroy(pfl_fl *fl) {
    pfl_fedtsdp_state *s = fl->algo_state;
    free(s->W);
    free(s->cluster);
    free(s->models);
    free(s->probs);
    free(s->pub_x);
    free(s->pub_y);
    free(s->batch);
    free(s->scratch);
    free(s->labels1);
    free(s->hopkins);
    free(s->shared_hist);
    free(s->clustered);
    free(s->shrunk);
    free(s->changed);
    free(s->clusters_hist);
    free(s->noise_hist);
    free(s);
    fl->algo_state = NULL;
}

static int tsdp_create(pfl_fl *fl) {
    const pfl_config *cfg = &fl->cfg;
    const pfl_algo_params *a = &cfg->algo;
    const int N = cfg->clients, R = cfg->rounds;
    const size_t V = pfl_model_vector_len(fl->model);
    if (cfg->join != 1.0) return pfl_err("fedtsdp: --join %g: FedTSDP clusters every client every round (--join 1)", cfg->join);
    if (cfg->modules.ala || cfg->modules.flayer_agg || cfg->modules.flayer_mask)
        return pfl_err("fedtsdp: --ala, --flayer-agg and --flayer-mask are not supported");
    if (a->tsdp_public < 1 || a->tsdp_public >= fl->data->n)
        return pfl_err("fedtsdp: needs a public set: --public N (1..%d) or --public test", fl->data->n - 1);
    if (!(a->tsdp_eps1 > 0.0f) || !(a->tsdp_eps2 > 0.0f) || a->tsdp_min_pts < 1)
        return pfl_err("fedtsdp: --tsdp-eps1 and --tsdp-eps2 must be > 0 and --tsdp-min-pts >= 1");
    if (!(a->tsdp_psi > 0.0f && a->tsdp_psi <= 1.0f)) return pfl_err("fedtsdp: --tsdp-psi %g: must be in (0, 1]", a->tsdp_psi);
    if (!(a->tsdp_h_th >= 0.0f && a->tsdp_h_th <= 1.0f))
        return pfl_err("fedtsdp: --tsdp-hth %g: must be in [0, 1]", a->tsdp_h_th);
    if (a->tsdp_hopkins_m < 0) return pfl_err("fedtsdp: --tsdp-hopkins-m must be >= 0");
    if (!(a->tsdp_shared >= 0.0)) return pfl_err("fedtsdp: --tsdp-shared-layers must be >= 0");
    const int pub_start = fl->data->n - a->tsdp_public;
    for (int c = 0; c < N; c++) {
        const pfl_client_data *cd = &fl->part->clients[c];
        for (int i = 0; i < cd->n_train + cd->n_test; i++)
            if ((i < cd->n_train ? cd->train[i] : cd->test[i - cd->n_train]) >= pub_start)
                return pfl_err("fedtsdp: client %d holds sample %d of the public set [%d, %d); partition with the "
                               "public samples held out",
                               c, i < cd->n_train ? cd->train[i] : cd->test[i - cd->n_train], pub_start, fl->data->n);
    }
    pfl_fedtsdp_state *s = pfl_calloc(1, sizeof *s);
    if (!(fl->algo_state = s)) return -1;
    s->pub_start = pub_start, s->n_pub = a->tsdp_public;
    s->pub_batch = a->tsdp_public_batch > 0 ? a->tsdp_public_batch : cfg->batch;
    if (s->pub_batch > s->n_pub) s->pub_batch = s->n_pub;
    s->clusters = 1;
    s->shared_layers = a->tsdp_shared > 0.0 ? a->tsdp_shared : fl->model->num_layers;
    if (s->shared_layers > fl->model->num_layers) s->shared_layers = fl->model->num_layers;
    s->shared_end = pfl_fedtsdp_shared_end(fl->model, s->shared_layers);
    const size_t C = (size_t)fl->model->classes, B = (size_t)s->pub_batch;
    if (!(s->W = pfl_malloc(sizeof(double) * (size_t)s->n_pub)) || !(s->cluster = pfl_calloc((size_t)N, sizeof(int))) ||
        !(s->models = pfl_calloc((size_t)N, sizeof(float) * V)) || /* unused slots zero: checkpoints compare */
        !(s->probs = pfl_malloc(sizeof(float) * (size_t)N * B * C)) ||
        !(s->pub_x = pfl_malloc(sizeof(float) * B * (size_t)pfl_model_input_size(fl->model))) ||
        !(s->pub_y = pfl_malloc(B)) || !(s->batch = pfl_malloc(sizeof(int) * B)) ||
        !(s->scratch = pfl_malloc(sizeof(double) * (size_t)N * (size_t)N)) ||
        !(s->labels1 = pfl_malloc(sizeof(int) * (size_t)N)) ||
        !(s->hopkins = pfl_malloc(sizeof(double) * (size_t)(R + 1))) ||
        !(s->shared_hist = pfl_malloc(sizeof(double) * (size_t)(R + 1))) ||
        !(s->clustered = pfl_calloc((size_t)R + 1, sizeof(bool))) ||
        !(s->shrunk = pfl_calloc((size_t)R + 1, sizeof(bool))) ||
        !(s->changed = pfl_calloc((size_t)R + 1, sizeof(bool))) ||
        !(s->clusters_hist = pfl_malloc(sizeof(int) * (size_t)(R + 1))) ||
        !(s->noise_hist = pfl_malloc(sizeof(int) * (size_t)(R + 1))))
        return -1; /* pfl_fl_create destroys */
    for (int k = 0; k < s->n_pub; k++) s->W[k] = 1.0 / s->n_pub;
    for (int r = 0; r <= R; r++)
        s->hopkins[r] = NAN, s->shared_hist[r] = s->shared_layers, s->clusters_hist[r] = 1, s->noise_hist[r] = -1;
    memcpy(s->models, fl->global, sizeof(float) * V);
    return 0;
}

/* ---- clients ---- */

/* True when BatchNorm layer l's running statistics go with the shared
 * prefix: the whole layer is shared and --bn shares statistics (the
 * default, as every other method averages them; --bn stats-local and local
 * keep them with each client). */
static bool tsdp_stats_shared(const pfl_fl *fl, const pfl_fedtsdp_state *s, int l) {
    const pfl_layer *ly = &fl->model->layers[l];
    return ly->state_length > 0 && ly->offset + ly->length <= s->shared_end && pfl_state_shared(fl, l);
}

/* The cluster's shared prefix (with the statistics of its BatchNorm layers)
 * over the client's own model. */
static void tsdp_receive(pfl_fl *fl, int client, const float *state, float *received) {
    const pfl_fedtsdp_state *s = fl->algo_state;
    const pfl_model *m = fl->model;
    const size_t V = pfl_model_vector_len(m), end = s->shared_end;
    const float *theta = s->models + V * (size_t)s->cluster[client];
    memcpy(received, theta, end * sizeof(float));
    memcpy(received + end, state + end, (V - end) * sizeof(float));
    for (int l = 0; l < m->num_layers; l++)
        if (tsdp_stats_shared(fl, s, l))
            memcpy(received + m->layers[l].state_offset, theta + m->layers[l].state_offset,
                   m->layers[l].state_length * sizeof(float));
}

/* "the server sends clustered (shared) global model w_{L_j^s} (...) the
 * updated model parameters w_i will be returned back to the server": down is
 * the cluster's shared prefix (and the statistics that go with it), up the
 * whole model, which stage one runs on the public data. Counted before the
 * round's aggregation shrinks L_s, so down is what this round sent. */
static void tsdp_message_bytes(const pfl_fl *fl, int client, const uint8_t *sent, const float *upload, uint64_t *down,
                               uint64_t *up) {
    const pfl_fedtsdp_state *s = fl->algo_state;
    pfl_default_message_bytes(fl, client, sent, upload, down, up); /* up: the whole vector (whole_uploads) */
    uint64_t floats = s->shared_end;
    for (int l = 0; l < fl->model->num_layers; l++)
        if (tsdp_stats_shared(fl, s, l)) floats += fl->model->layers[l].state_length;
    *down = 4 * floats;
}

/* ---- stage one ---- */

/* |D_B| distinct public samples drawn with probabilities proportional to W. */
static void sample_batch(pfl_fedtsdp_state *s, pfl_rng *rng, double *w) {
    memcpy(w, s->W, sizeof(double) * (size_t)s->n_pub);
    double total = 0.0;
    for (int k = 0; k < s->n_pub; k++) total += w[k];
    for (int b = 0; b < s->pub_batch; b++) {
        double u = pfl_rng_uniform(rng) * total, acc = 0.0;
        int pick = -1, last = -1;
        for (int k = 0; k < s->n_pub; k++) {
            if (w[k] <= 0.0) continue;
            last = k, acc += w[k];
            if (u < acc) {
                pick = k;
                break;
            }
        }
        if (pick < 0) pick = last; /* rounding at the top end */
        if (pick < 0) { /* every weight used up (cannot happen with W > 0): take the first unused */
            for (int k = 0; k < s->n_pub && pick < 0; k++) {
                bool used = false;
                for (int c = 0; c < b; c++) used |= s->batch[c] == k;
                if (!used) pick = k;
            }
        }
        total -= w[pick] > 0.0 ? w[pick] : 0.0;
        w[pick] = 0.0;
        s->batch[b] = pick;
    }
}

/* Softmax outputs of each upload on the gathered public batch. */
static void infer(pfl_fl *fl, pfl_fedtsdp_state *s, int n, float *const *uploads) {
    const int B = s->pub_batch, C = fl->model->classes;
    const size_t in = (size_t)pfl_model_input_size(fl->model);
#pragma omp parallel for schedule(dynamic, 1) num_threads(fl->num_workers)
    for (int k = 0; k < n; k++) {
        pfl_exec *x = fl->workers[omp_get_thread_num()].exec;
        const int chunk = pfl_exec_max_batch(x);
        pfl_xbuf model = pfl_exec_view_const(x, uploads[k], pfl_model_vector_len(fl->model));
        float *scratch = pfl_malloc(sizeof(float) * (size_t)chunk * (size_t)C);
        for (int start = 0; scratch && start < B; start += chunk) {
            const int b = B - start < chunk ? B - start : chunk;
            pfl_exec_load(x, s->pub_x + (size_t)start * in, NULL, b);
            pfl_exec_forward(x, &model, false, NULL);
            const float *logits = pfl_exec_features(x, fl->model->num_layers, scratch);
            for (int i = 0; i < b; i++) {
                const float *z = logits + (size_t)i * C;
                float *p = s->probs + ((size_t)k * B + (size_t)(start + i)) * (size_t)C;
                double mx = z[0], sum = 0.0;
                for (int c = 1; c < C; c++) mx = z[c] > mx ? z[c] : mx;
                for (int c = 0; c < C; c++) sum += exp((double)z[c] - mx);
                for (int c = 0; c < C; c++) p[c] = (float)(exp((double)z[c] - mx) / sum);
            }
        }
        free(scratch);
        pfl_exec_unview(x, &model);
    }
}

/* --drop-rate: the clients that did not upload this round keep their shared
 * model when the others are re-clustered into clusters 0..k-1: each of their
 * former clusters gets the next free id with its model, and s->clusters
 * counts them. At most N clusters in all, as the models buffer holds. */
static int keep_missing_clients(pfl_fl *fl, pfl_fedtsdp_state *s, const int *clients, int n, int k) {
    const int N = fl->cfg.clients;
    const size_t V = pfl_model_vector_len(fl->model); /* the shared prefix and its statistics */
    int *new_id = pfl_malloc(sizeof(int) * (size_t)N), *old_of = pfl_malloc(sizeof(int) * (size_t)N);
    bool *arrived = pfl_calloc((size_t)N, sizeof(bool));
    float *kept = NULL;
    int rc = -1, moved = 0;
    if (!new_id || !old_of || !arrived) goto done;
    for (int i = 0; i < n; i++) arrived[clients[i]] = true;
    for (int c = 0; c < N; c++) new_id[c] = -1;
    for (int c = 0; c < N; c++)
        if (!arrived[c] && new_id[s->cluster[c]] < 0) old_of[moved] = s->cluster[c], new_id[s->cluster[c]] = k + moved, moved++;
    /* through a copy: a new id can be the old id of another moved cluster */
    if (!(kept = pfl_malloc(sizeof(float) * V * (size_t)(moved ? moved : 1)))) goto done;
    for (int t = 0; t < moved; t++) memcpy(kept + V * (size_t)t, s->models + V * (size_t)old_of[t], V * sizeof(float));
    for (int t = 0; t < moved; t++) memcpy(s->models + V * (size_t)(k + t), kept + V * (size_t)t, V * sizeof(float));
    for (int c = 0; c < N; c++)
        if (!arrived[c]) s->cluster[c] = new_id[s->cluster[c]];
    s->clusters = k + moved;
    rc = 0;
done:
    free(new_id);
    free(old_of);
    free(arrived);
    free(kept);
    return rc;
}

/* True when labelings a and b of n clients (labels in [0, n)) group them
 * the same way, whatever the numbering: a bijection maps one onto the other. */
static bool same_partition(const int *a, const int *b, int n, int *scratch) {
    int *fwd = scratch, *bwd = scratch + n;
    for (int i = 0; i < 2 * n; i++) scratch[i] = -1;
    for (int i = 0; i < n; i++) {
        if (fwd[a[i]] < 0 && bwd[b[i]] < 0) fwd[a[i]] = b[i], bwd[b[i]] = a[i];
        else if (fwd[a[i]] != b[i] || bwd[b[i]] != a[i]) return false;
    }
    return true;
}

/* Stage one and, when H > h_th, stage two: returns 1 when the clients were
 * re-clustered, 0 when not, -1 on failure. */
static int decouple(pfl_fl *fl, pfl_fedtsdp_state *s, const int *clients, int n, float *const *uploads) {
    const pfl_algo_params *a = &fl->cfg.algo;
    const int B = s->pub_batch, C = fl->model->classes;
    s->hopkins[fl->round] = NAN;
    if (n < 2) return 0;
    double *w = pfl_malloc(sizeof(double) * (size_t)s->n_pub);
    if (!w) return -1;
    pfl_rng draw = pfl_rng_stream(fl->cfg.seed, fl->round, 0, PFL_RNG_ALGO);
    sample_batch(s, &draw, w);
    free(w);
    for (int b = 0; b < B; b++) s->batch[b] += s->pub_start;
    pfl_dataset_gather(fl->data, s->batch, B, s->pub_x, s->pub_y); /* pub_y: never read */
    for (int b = 0; b < B; b++) s->batch[b] -= s->pub_start;
    infer(fl, s, n, uploads);
    double H;
    pfl_rng hop = pfl_rng_stream(fl->cfg.seed, fl->round, 1, PFL_RNG_ALGO);
    /* m~ "<< m": by default pfl_hopkins's m / 10 (at least 1), the usual
     * Hopkins sample; 2 of 20 clients (docs/algorithms.md) */
    const int hm = a->tsdp_hopkins_m > n ? n : a->tsdp_hopkins_m;
    if (pfl_hopkins(&H, s->probs, n, (size_t)B * (size_t)C, hm, &hop)) return -1;
    s->hopkins[fl->round] = H;
    if (!(H > (double)a->tsdp_h_th)) return 0;
    if (pfl_js_divergence_matrix(s->scratch, s->probs, n, (size_t)B, (size_t)C)) return -1;
    int noise;
    const int k = pfl_fedtsdp_two_stage(s->labels1, s->scratch, (const float *const *)uploads, n,
                                        fl->model->num_params, a->tsdp_eps1, a->tsdp_eps2, a->tsdp_min_pts,
                                        a->tsdp_noise_singletons, &noise);
    if (k < 0) return -1;
    const int N = fl->cfg.clients;
    int *before = pfl_malloc(sizeof(int) * 3 * (size_t)N);
    if (!before) return -1;
    memcpy(before, s->cluster, sizeof(int) * (size_t)N);
    if (n < N && keep_missing_clients(fl, s, clients, n, k)) {
        free(before);
        return -1;
    }
    for (int i = 0; i < n; i++) s->cluster[clients[i]] = s->labels1[i];
    if (n == N) s->clusters = k;
    s->noise_hist[fl->round] = noise;
    s->changed[fl->round] = !same_partition(before, s->cluster, N, before + N);
    free(before);
    pfl_fedtsdp_update_weights(s->W, s->n_pub, s->batch, B);
    return 1;
}

/* ---- aggregation ---- */

static void tsdp_aggregate(pfl_fl *fl, const int *clients, int n, float *const *uploads) {
    pfl_fedtsdp_state *s = fl->algo_state;
    const pfl_model *m = fl->model;
    const size_t V = pfl_model_vector_len(m);
    const int rc = decouple(fl, s, clients, n, uploads);
    if (rc < 0) fprintf(stderr, "[pfl] warning: fedtsdp: round %d: clustering failed (%s); clusters kept\n", fl->round,
                        pfl_errmsg());
    /* each cluster's shared prefix, and the running statistics of the
     * BatchNorm layers in it: the sample-weighted mean of its members */
    for (int c = 0; c < s->clusters && s->shared_end > 0; c++) {
        double total = 0.0;
        for (int k = 0; k < n; k++)
            if (s->cluster[clients[k]] == c) total += fl->part->clients[clients[k]].n_train;
        if (total <= 0.0) continue;
        float *theta = s->models + V * (size_t)c;
        memset(theta, 0, s->shared_end * sizeof(float));
        for (int l = 0; l < m->num_layers; l++)
            if (tsdp_stats_shared(fl, s, l)) memset(theta + m->layers[l].state_offset, 0, m->layers[l].state_length * sizeof(float));
        for (int k = 0; k < n; k++) {
            if (s->cluster[clients[k]] != c) continue;
            const float g = (float)(fl->part->clients[clients[k]].n_train / total);
            cblas_saxpy((int)s->shared_end, g, uploads[k], 1, theta, 1);
            for (int l = 0; l < m->num_layers; l++)
                if (tsdp_stats_shared(fl, s, l))
                    cblas_saxpy((int)m->layers[l].state_length, g, uploads[k] + m->layers[l].state_offset, 1,
                                theta + m->layers[l].state_offset, 1);
        }
    }
    if (rc == 1) s->clustered[fl->round] = true, s->num_clusterings++;
    /* Eq. 11, after this round's aggregation: at every clustering (the
     * text's "if two stages of decoupling is conducted"), or under
     * --tsdp-shrink-on-change only when it grouped the clients anew */
    if (rc == 1 && (!fl->cfg.algo.tsdp_shrink_on_change || s->changed[fl->round])) {
        s->shrunk[fl->round] = true;
        s->num_shrinks++;
        s->shared_layers *= (double)fl->cfg.algo.tsdp_psi;
        s->shared_end = pfl_fedtsdp_shared_end(m, s->shared_layers);
    }
    s->shared_hist[fl->round] = s->shared_layers;
    s->clusters_hist[fl->round] = s->clusters;
    pfl_default_aggregate(fl, clients, n, uploads);
}

/* ---- reports ---- */

static void tsdp_report(const pfl_fl *fl, FILE *f, int what) {
    const pfl_fedtsdp_state *s = fl->algo_state;
    const int r = fl->round;
    if (what == PFL_REPORT_TEXT) {
        if (r == 0) return;
        fprintf(f, "  H %.3f%s clusters %d L_s %.3f", s->hopkins[r], s->clustered[r] ? " (clustered)" : "",
                s->clusters, s->shared_layers);
    } else if (what == PFL_REPORT_METRICS) {
        fputs(",\"hopkins\":", f), pfl_json_number(f, s->hopkins[r]);
        fprintf(f, ",\"clustered\":%s,\"clusters\":%d,\"shared_layers\":", s->clustered[r] ? "true" : "false",
                s->clusters);
        pfl_json_number(f, s->shared_layers);
        fprintf(f, ",\"shared_params\":%zu", s->shared_end);
        /* what this round's clustering did, and the shrinks so far */
        if (s->noise_hist[r] >= 0) fprintf(f, ",\"noise_clients\":%d", s->noise_hist[r]);
        else fputs(",\"noise_clients\":null", f);
        fprintf(f, ",\"partition_changed\":%s,\"shrunk\":%s,\"shrinks\":%d", s->changed[r] ? "true" : "false",
                s->shrunk[r] ? "true" : "false", s->num_shrinks);
    } else if (what == PFL_REPORT_SUMMARY) {
        /* its flags are in the summary from its table; here what they came to */
        fprintf(f, ",\n  \"public_batch_samples\": %d", s->pub_batch);
        fprintf(f, ",\n  \"clusters\": %d,\n  \"shared_layers\": %.6g,\n  \"shared_params\": %zu", s->clusters,
                s->shared_layers, s->shared_end);
        fputs(",\n  \"client_clusters\": [", f);
        for (int c = 0; c < fl->cfg.clients; c++) fprintf(f, "%s%d", c ? ", " : "", s->cluster[c]);
        fputs("],\n  \"clustering_rounds\": [", f);
        for (int k = 1, first = 1; k <= fl->cfg.rounds; k++)
            if (s->clustered[k]) fprintf(f, "%s%d", first ? "" : ", ", k), first = 0;
        fputs("],\n  \"shrink_rounds\": [", f);
        for (int k = 1, first = 1; k <= fl->cfg.rounds; k++)
            if (s->shrunk[k]) fprintf(f, "%s%d", first ? "" : ", ", k), first = 0;
        fputs("],\n  \"partition_changed_rounds\": [", f);
        for (int k = 1, first = 1; k <= fl->cfg.rounds; k++)
            if (s->changed[k]) fprintf(f, "%s%d", first ? "" : ", ", k), first = 0;
        fputs("],\n  \"clusters_history\": [", f);
        for (int k = 1; k <= fl->cfg.rounds; k++) fprintf(f, "%s%d", k > 1 ? ", " : "", s->clusters_hist[k]);
        fputs("],\n  \"noise_history\": [", f); /* -1: no clustering that round */
        for (int k = 1; k <= fl->cfg.rounds; k++) fprintf(f, "%s%d", k > 1 ? ", " : "", s->noise_hist[k]);
        fputs("],\n  \"hopkins\": [", f);
        for (int k = 1; k <= fl->cfg.rounds; k++) fputs(k > 1 ? ", " : "", f), pfl_json_number(f, s->hopkins[k]);
        fputs("],\n  \"shared_layers_history\": [", f);
        for (int k = 1; k <= fl->cfg.rounds; k++) fprintf(f, "%s%.6g", k > 1 ? ", " : "", s->shared_hist[k]);
        fputs("]", f);
    }
}

/* Checkpoints: sampling weights, clusters and their models, L_s and the
 * per-round history (the public batch and outputs are scratch of a round). */
static int tsdp_save(const pfl_fl *fl, pfl_ckpt_writer *w) {
    const pfl_fedtsdp_state *s = fl->algo_state;
    const size_t N = (size_t)fl->cfg.clients, R1 = (size_t)fl->cfg.rounds + 1;
    return pfl_ckpt_put_f64(w, "fedtsdp.W", s->W, (size_t)s->n_pub) || pfl_ckpt_put_i32(w, "fedtsdp.cluster", s->cluster, N) ||
                   pfl_ckpt_put_int(w, "fedtsdp.clusters", s->clusters) ||
                   pfl_ckpt_put_double(w, "fedtsdp.shared_layers", s->shared_layers) ||
                   pfl_ckpt_put_f32(w, "fedtsdp.models", s->models, pfl_model_vector_len(fl->model) * N) ||
                   pfl_ckpt_put_f64(w, "fedtsdp.hopkins", s->hopkins, R1) ||
                   pfl_ckpt_put_f64(w, "fedtsdp.shared_history", s->shared_hist, R1) ||
                   pfl_ckpt_put_bool(w, "fedtsdp.clustered", s->clustered, R1) ||
                   pfl_ckpt_put_int(w, "fedtsdp.num_clusterings", s->num_clusterings) ||
                   pfl_ckpt_put_bool(w, "fedtsdp.shrunk", s->shrunk, R1) ||
                   pfl_ckpt_put_bool(w, "fedtsdp.changed", s->changed, R1) ||
                   pfl_ckpt_put_i32(w, "fedtsdp.clusters_history", s->clusters_hist, R1) ||
                   pfl_ckpt_put_i32(w, "fedtsdp.noise_history", s->noise_hist, R1) ||
                   pfl_ckpt_put_int(w, "fedtsdp.num_shrinks", s->num_shrinks)
               ? -1
               : 0;
}

static int tsdp_load(pfl_fl *fl, pfl_ckpt_reader *r) {
    pfl_fedtsdp_state *s = fl->algo_state;
    const size_t N = (size_t)fl->cfg.clients, R1 = (size_t)fl->cfg.rounds + 1;
    int64_t clusters, clusterings, shrinks;
    if (pfl_ckpt_get_f64(r, "fedtsdp.W", s->W, (size_t)s->n_pub) || pfl_ckpt_get_i32(r, "fedtsdp.cluster", s->cluster, N) ||
        pfl_ckpt_get_int(r, "fedtsdp.clusters", &clusters) ||
        pfl_ckpt_get_double(r, "fedtsdp.shared_layers", &s->shared_layers) ||
        pfl_ckpt_get_f32(r, "fedtsdp.models", s->models, pfl_model_vector_len(fl->model) * N) ||
        pfl_ckpt_get_f64(r, "fedtsdp.hopkins", s->hopkins, R1) ||
        pfl_ckpt_get_f64(r, "fedtsdp.shared_history", s->shared_hist, R1) ||
        pfl_ckpt_get_bool(r, "fedtsdp.clustered", s->clustered, R1) ||
        pfl_ckpt_get_int(r, "fedtsdp.num_clusterings", &clusterings) ||
        pfl_ckpt_get_bool(r, "fedtsdp.shrunk", s->shrunk, R1) || pfl_ckpt_get_bool(r, "fedtsdp.changed", s->changed, R1) ||
        pfl_ckpt_get_i32(r, "fedtsdp.clusters_history", s->clusters_hist, R1) ||
        pfl_ckpt_get_i32(r, "fedtsdp.noise_history", s->noise_hist, R1) ||
        pfl_ckpt_get_int(r, "fedtsdp.num_shrinks", &shrinks))
        return -1;
    if (clusters < 1 || clusters > (int64_t)N) return pfl_err("%s: fedtsdp: %lld clusters", r->path, (long long)clusters);
    for (size_t c = 0; c < N; c++)
        if (s->cluster[c] < 0 || s->cluster[c] >= clusters) return pfl_err("%s: fedtsdp.cluster: bad cluster", r->path);
    s->clusters = (int)clusters, s->num_clusterings = (int)clusterings, s->num_shrinks = (int)shrinks;
    s->shared_end = pfl_fedtsdp_shared_end(fl->model, s->shared_layers);
    return 0;
}

/* The paper's eps1 0.15, eps2 3.5, minPts 2, h_th 0.65, psi 0.98. */
static const pfl_param fedtsdp_params[] = {
    {PFL_ALGO_PARAM(INT, "public-batch", tsdp_public_batch), .def = 0, .max = 1e7, .metavar = "B",
     .help = "public samples drawn per round (0: --batch)"},
    {PFL_ALGO_PARAM(FLOAT, "tsdp-eps1", tsdp_eps1), .def = 0.15, .max = 1e12, .min_exclusive = true, .metavar = "F",
     .help = "DBSCAN eps of stage one (JS divergence)"},
    {PFL_ALGO_PARAM(FLOAT, "tsdp-eps2", tsdp_eps2), .def = 3.5, .max = 1e12, .min_exclusive = true, .metavar = "F",
     .help = "DBSCAN eps of stage two (L2 distance of weights)"},
    {PFL_ALGO_PARAM(INT, "tsdp-min-pts", tsdp_min_pts), .def = 2, .min = 1, .max = 1e7, .metavar = "K",
     .help = "DBSCAN minPts (counting the point)"},
    {PFL_ALGO_PARAM(FLOAT, "tsdp-hth", tsdp_h_th), .def = 0.65, .max = 1, .metavar = "F",
     .help = "cluster when the Hopkins statistic H > F"},
    {PFL_ALGO_PARAM(FLOAT, "tsdp-psi", tsdp_psi), .def = 0.98, .max = 1, .min_exclusive = true, .metavar = "F",
     .help = "shared layers L_s *= F each time both stages run"},
    {PFL_ALGO_PARAM(DOUBLE, "tsdp-shared-layers", tsdp_shared), .def = 0, .max = PFL_MAX_LAYERS, .metavar = "L|NAMES",
     .help = "initial shared layers L_s (0: all; a count in --layer-unit, or names: conv1,conv2)",
     .layers = PFL_LAYERS_FIRST_ROWS},
    {PFL_ALGO_PARAM(INT, "tsdp-hopkins-m", tsdp_hopkins_m), .def = 0, .max = 1e7, .metavar = "M",
     .help = "points the Hopkins statistic samples, m~ (0: a tenth of the clients, at least 1)"},
    {PFL_ALGO_PARAM(BOOL, "tsdp-shrink-on-change", tsdp_shrink_on_change),
     .help = "shrink L_s only at a clustering that changes the clients' grouping (default: at every clustering)"},
    {PFL_ALGO_PARAM(BOOL, "tsdp-noise-singletons", tsdp_noise_singletons),
     .help = "each DBSCAN noise client a cluster alone (default: a DBSCAN run's noise clients form one cluster)"},
};

const pfl_algo pfl_algo_fedtsdp = {
    .name = "fedtsdp",
    .description = "FedTSDP: two-stage clustering (JS divergence of predictions on public data when Hopkins "
                   "H > h_th, then weight distances), adaptive shared layers (--public, --tsdp-*)",
    PFL_PARAMS(fedtsdp_params),
    /* its public set: the original test files; a shared layer is shared whole, its running statistics too
     * (docs/algorithms.md, FedTSDP's BatchNorm) */
    .run_defaults = (const char *const[]){"public", "test", "bn", "shared", NULL},
    .has_global = true,
    .stateful = true,
    .create = tsdp_create,
    .destroy = tsdp_destroy,
    .receive = tsdp_receive,
    .whole_uploads = true, /* MPI: its aggregate reads whole uploads */
    .aggregate = tsdp_aggregate,
    .message_bytes = tsdp_message_bytes,
    .report = tsdp_report,
    .save = tsdp_save,
    .load = tsdp_load,
};
