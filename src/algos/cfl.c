/* CFL (Sattler, Mueller, Samek 2020, Algorithm 1 and Section III; the
 * reference code github.com/felisat/clustered-federated-learning).
 *
 * The server keeps one model per cluster; every client starts in cluster 0,
 * whose model is the initial global model. Each round:
 *
 *  - a client trains from its cluster's model theta_c and uploads its model;
 *    its update is dw_i = w_i - theta_c;
 *  - per cluster: mean_norm = ||sum_i g_i dw_i|| (g_i = n_i / sum of the
 *    cluster's n, data weights) and max_norm = max_i ||dw_i||. When
 *    mean_norm < eps1 (the cluster's model is near a stationary point of the
 *    joint objective) and max_norm > eps2 (some clients are still far from
 *    stationary for themselves), the round is past --cfl-warmup and the
 *    cluster has at least PFL_CFL_MIN_SPLIT members, it is bi-partitioned by
 *    the cosine similarities of its members' updates (complete linkage on
 *    -similarity, pfl_cfl_bipartition); one side keeps the id, the other
 *    gets the next one;
 *  - every cluster (split this round or not) gets the weighted mean of its
 *    members' uploads, theta_c + sum_i g_i dw_i, computed as FedAvg does;
 *  - the global model is FedAvg's weighted mean of all uploads
 *    (pfl_default_aggregate), i.e. the data-weighted mean of the cluster
 *    models: before any split it is the one cluster model (bitwise equal),
 *    and CFL is FedAvg until its first split.
 *
 * The personalized model of a client is its cluster's model. Only full
 * participation (--join 1) is supported, as in the paper's experiments: the
 * bipartition must see every member's update. With --drop-rate, the members
 * that dropped out of a round are not seen: a split divides the members that
 * arrived, and the others stay in the cluster under its old id. */
#include "algos/cfl.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "util/err.h"

pfl_cfl_state *pfl_cfl_state_of(const pfl_fl *fl) {
    return fl && fl->algo == &pfl_algo_cfl ? fl->algo_state : NULL;
}

bool pfl_cfl_should_split(double mean_norm, double max_norm, int size, int round, float eps1, float eps2,
                          int warmup) {
    return mean_norm < (double)eps1 && max_norm > (double)eps2 && size >= PFL_CFL_MIN_SPLIT && round > warmup;
}

int pfl_cfl_bipartition(int *labels, double *sim, int n) {
    if (n < 2) return pfl_err("cfl: a bipartition needs at least 2 points, got %d", n);
    /* d = -sim; cluster k is alive while active[k]; labels[i] = cluster of i */
    char *active = pfl_malloc((size_t)n);
    if (!active) return -1;
    for (int i = 0; i < n; i++) {
        labels[i] = i, active[i] = 1;
        for (int j = 0; j < n; j++) sim[(size_t)i * n + j] = -sim[(size_t)i * n + j];
    }
    for (int alive = n; alive > 2; alive--) {
        int ba = -1, bb = -1;
        double best = INFINITY;
        for (int a = 0; a < n; a++) {
            if (!active[a]) continue;
            for (int b = a + 1; b < n; b++)
                if (active[b] && (ba < 0 || sim[(size_t)a * n + b] < best)) best = sim[(size_t)a * n + b], ba = a, bb = b;
        }
        /* complete linkage: the merged cluster is as far from k as the farther part */
        for (int k = 0; k < n; k++) {
            if (!active[k] || k == ba || k == bb) continue;
            double d = fmax(sim[(size_t)ba * n + k], sim[(size_t)bb * n + k]);
            sim[(size_t)ba * n + k] = sim[(size_t)k * n + ba] = d;
        }
        active[bb] = 0;
        for (int i = 0; i < n; i++)
            if (labels[i] == bb) labels[i] = ba;
    }
    free(active);
    const int first = labels[0];
    for (int i = 0; i < n; i++) labels[i] = labels[i] == first ? 0 : 1;
    return 0;
}

static void cfl_destroy(pfl_fl *fl) {
    pfl_cfl_state *s = fl->algo_state;
    free(s->cluster);
    free(s->models);
    free(s->mean_norm);
    free(s->max_norm);
    free(s->splits);
    free(s->members);
    free(s->norm2);
    free(s);
    fl->algo_state = NULL;
}

static int cfl_create(pfl_fl *fl) {
    const pfl_config *cfg = &fl->cfg;
    const int N = cfg->clients;
    const size_t P = pfl_model_vector_len(fl->model); /* cluster models are whole vectors */
    if (cfg->join != 1.0) return pfl_err("cfl: --join %g: CFL needs every client every round (--join 1)", cfg->join);
    if (!(cfg->algo.cfl_eps1 >= 0.0f) || !(cfg->algo.cfl_eps2 >= 0.0f))
        return pfl_err("cfl: --cfl-eps1 and --cfl-eps2 must be >= 0");
    if (cfg->algo.cfl_warmup < 0) return pfl_err("--cfl-warmup %d: must be >= 0", cfg->algo.cfl_warmup);
    if (cfg->modules.ala || cfg->modules.flayer_agg || cfg->modules.flayer_mask)
        return pfl_err("cfl: --ala, --flayer-agg and --flayer-mask are not supported (CFL trains from its "
                       "cluster's model and needs the full updates)");
    if (cfg->bn != PFL_BN_SHARED)
        return pfl_err("cfl: --bn local and stats-local are not supported (CFL trains from its cluster's model, "
                       "not the client's own)");
    pfl_cfl_state *s = pfl_calloc(1, sizeof *s);
    if (!(fl->algo_state = s)) return -1;
    s->eps1 = cfg->algo.cfl_eps1, s->eps2 = cfg->algo.cfl_eps2, s->warmup = cfg->algo.cfl_warmup;
    s->clusters = 1;
    if (!(s->cluster = pfl_calloc((size_t)N, sizeof(int))) || !(s->models = pfl_malloc(sizeof(float) * P)) ||
        !(s->mean_norm = pfl_malloc(sizeof(double) * (size_t)N)) ||
        !(s->max_norm = pfl_malloc(sizeof(double) * (size_t)N)) ||
        !(s->splits = pfl_calloc((size_t)N, sizeof *s->splits)) || !(s->members = pfl_malloc(sizeof(int) * (size_t)N)) ||
        !(s->norm2 = pfl_malloc(sizeof(double) * (size_t)N)))
        return -1;
    memcpy(s->models, fl->global, sizeof(float) * P);
    for (int c = 0; c < N; c++) s->mean_norm[c] = s->max_norm[c] = -1.0;
    return 0;
}

static float *cluster_model(const pfl_fl *fl, const pfl_cfl_state *s, int c) {
    return s->models + pfl_model_vector_len(fl->model) * (size_t)c;
}

static void cfl_local_init(pfl_fl *fl, int client, float *model) {
    const pfl_cfl_state *s = fl->algo_state;
    memcpy(model, cluster_model(fl, s, s->cluster[client]), pfl_model_vector_len(fl->model) * sizeof(float));
}

static const float *cfl_personal_model(pfl_fl *fl, int client, float *scratch) {
    (void)scratch;
    const pfl_cfl_state *s = fl->algo_state;
    return cluster_model(fl, s, s->cluster[client]);
}

/* Members (upload slots) of cluster c this round; returns their count. */
static int members_of(const pfl_cfl_state *s, const int *clients, int n, int c, int *out) {
    int m = 0;
    for (int k = 0; k < n; k++)
        if (s->cluster[clients[k]] == c) out[m++] = k;
    return m;
}

/* The norms of cluster c's updates: fills s->norm2 per member and the
 * cluster's mean and max norms. */
static void update_norms(pfl_fl *fl, pfl_cfl_state *s, const int *clients, float *const *uploads, int m, int c) {
    const size_t P = fl->model->num_params;
    const float *theta = cluster_model(fl, s, c);
    double total = 0.0, mean2 = 0.0;
    for (int a = 0; a < m; a++) total += fl->part->clients[clients[s->members[a]]].n_train, s->norm2[a] = 0.0;
    for (size_t j = 0; j < P; j++) {
        double mean = 0.0;
        for (int a = 0; a < m; a++) {
            const double d = (double)uploads[s->members[a]][j] - (double)theta[j];
            s->norm2[a] += d * d;
            if (total > 0.0) mean += fl->part->clients[clients[s->members[a]]].n_train / total * d;
        }
        mean2 += mean * mean;
    }
    double max2 = 0.0;
    for (int a = 0; a < m; a++) max2 = fmax(max2, s->norm2[a]);
    s->mean_norm[c] = sqrt(mean2), s->max_norm[c] = sqrt(max2);
}

/* Cuts cluster c's m members in two by their updates' cosine similarities. */
static int split(pfl_fl *fl, pfl_cfl_state *s, const int *clients, float *const *uploads, int m, int c) {
    const size_t P = fl->model->num_params;
    const float *theta = cluster_model(fl, s, c);
    int *labels = pfl_malloc(sizeof(int) * (size_t)m);
    double *sim = pfl_malloc(sizeof(double) * (size_t)m * (size_t)m);
    float *grown = NULL;
    int rc = -1;
    if (!labels || !sim) goto done;
    for (int a = 0; a < m; a++) {
        sim[(size_t)a * m + a] = 1.0;
        for (int b = a + 1; b < m; b++) {
            const float *ua = uploads[s->members[a]], *ub = uploads[s->members[b]];
            double dot = 0.0;
            for (size_t j = 0; j < P; j++) dot += ((double)ua[j] - theta[j]) * ((double)ub[j] - theta[j]);
            const double den = sqrt(s->norm2[a] * s->norm2[b]);
            double cs = den > 0.0 ? dot / den : 0.0;
            cs = cs > 1.0 ? 1.0 : (cs < -1.0 ? -1.0 : cs);
            sim[(size_t)a * m + b] = sim[(size_t)b * m + a] = cs;
        }
    }
    if (pfl_cfl_bipartition(labels, sim, m)) goto done;
    const int id = s->clusters;
    const size_t V = pfl_model_vector_len(fl->model);
    if (!(grown = realloc(s->models, sizeof(float) * V * (size_t)(id + 1)))) {
        pfl_err("out of memory");
        goto done;
    }
    s->models = grown;
    memcpy(cluster_model(fl, s, id), cluster_model(fl, s, c), sizeof(float) * V);
    for (int a = 0; a < m; a++)
        if (labels[a]) s->cluster[clients[s->members[a]]] = id;
    s->splits[s->num_splits++] =
        (pfl_cfl_split){fl->round, c, id, m, s->mean_norm[c], s->max_norm[c]};
    s->mean_norm[id] = s->mean_norm[c], s->max_norm[id] = s->max_norm[c];
    s->clusters++;
    rc = 0;
done:
    free(labels);
    free(sim);
    return rc;
}

/* theta_c = weighted mean of its members' uploads, layer by layer as
 * pfl_default_aggregate sums (so one cluster of everyone equals it bitwise). */
static void cluster_mean(pfl_fl *fl, pfl_cfl_state *s, const int *clients, float *const *uploads, int m, int c) {
    const pfl_model *mdl = fl->model;
    float *theta = cluster_model(fl, s, c);
    double total = 0.0;
    for (int a = 0; a < m; a++) total += fl->part->clients[clients[s->members[a]]].n_train;
    if (total <= 0.0) return;
    for (int l = 0; l < mdl->num_layers; l++)
        for (int part = 0; part < 2; part++) { /* the parameters, then the running statistics */
            const size_t off = part ? mdl->layers[l].state_offset : mdl->layers[l].offset;
            const size_t len = part ? mdl->layers[l].state_length : mdl->layers[l].length;
            if (len == 0) continue;
            memset(theta + off, 0, len * sizeof(float));
            for (int a = 0; a < m; a++) {
                const float weight = (float)(fl->part->clients[clients[s->members[a]]].n_train / total);
                cblas_saxpy((int)len, weight, uploads[s->members[a]] + off, 1, theta + off, 1);
            }
        }
}

static void cfl_aggregate(pfl_fl *fl, const int *clients, int n, float *const *uploads) {
    pfl_cfl_state *s = fl->algo_state;
    const int before = s->clusters;
    for (int c = 0; c < before; c++) {
        const int m = members_of(s, clients, n, c, s->members);
        if (m == 0) continue;
        update_norms(fl, s, clients, uploads, m, c);
        if (pfl_cfl_should_split(s->mean_norm[c], s->max_norm[c], m, fl->round, s->eps1, s->eps2, s->warmup) &&
            split(fl, s, clients, uploads, m, c))
            fprintf(stderr, "[pfl] warning: cfl: splitting cluster %d failed (%s); it stays whole\n", c, pfl_errmsg());
    }
    for (int c = 0; c < s->clusters; c++) {
        const int m = members_of(s, clients, n, c, s->members);
        if (m > 0) cluster_mean(fl, s, clients, uploads, m, c);
    }
    pfl_default_aggregate(fl, clients, n, uploads);
}

/* Checkpoints: the clusters, their models, last norms and the splits so far. */
static int cfl_save(const pfl_fl *fl, pfl_ckpt_writer *w) {
    const pfl_cfl_state *s = fl->algo_state;
    const int N = fl->cfg.clients;
    const size_t V = pfl_model_vector_len(fl->model); /* cluster models are whole vectors */
    int *split_ints = pfl_malloc(sizeof(int) * 4 * (size_t)(s->num_splits + 1));
    double *split_norms = pfl_malloc(sizeof(double) * 2 * (size_t)(s->num_splits + 1));
    int rc = -1;
    if (!split_ints || !split_norms) goto done;
    for (int k = 0; k < s->num_splits; k++) {
        const pfl_cfl_split *p = &s->splits[k];
        int *i = split_ints + 4 * k;
        i[0] = p->round, i[1] = p->cluster, i[2] = p->new_cluster, i[3] = p->size;
        split_norms[2 * k] = p->mean_norm, split_norms[2 * k + 1] = p->max_norm;
    }
    rc = pfl_ckpt_put_int(w, "cfl.clusters", s->clusters) || pfl_ckpt_put_i32(w, "cfl.cluster", s->cluster, (size_t)N) ||
                 pfl_ckpt_put_f32(w, "cfl.models", s->models, V * (size_t)s->clusters) ||
                 pfl_ckpt_put_f64(w, "cfl.mean_norm", s->mean_norm, (size_t)N) ||
                 pfl_ckpt_put_f64(w, "cfl.max_norm", s->max_norm, (size_t)N) ||
                 pfl_ckpt_put_int(w, "cfl.num_splits", s->num_splits) ||
                 pfl_ckpt_put_i32(w, "cfl.split_ids", split_ints, 4 * (size_t)s->num_splits) ||
                 pfl_ckpt_put_f64(w, "cfl.split_norms", split_norms, 2 * (size_t)s->num_splits)
             ? -1
             : 0;
done:
    free(split_ints);
    free(split_norms);
    return rc;
}

static int cfl_load(pfl_fl *fl, pfl_ckpt_reader *r) {
    pfl_cfl_state *s = fl->algo_state;
    const int N = fl->cfg.clients;
    const size_t V = pfl_model_vector_len(fl->model); /* cluster models are whole vectors */
    int64_t clusters, num_splits;
    if (pfl_ckpt_get_int(r, "cfl.clusters", &clusters) || pfl_ckpt_get_int(r, "cfl.num_splits", &num_splits)) return -1;
    /* every split adds one cluster, and there are at most N clusters */
    if (clusters < 1 || clusters > N || num_splits != clusters - 1)
        return pfl_err("%s: cfl: %lld clusters after %lld splits (of %d clients)", r->path, (long long)clusters,
                       (long long)num_splits, N);
    float *models = realloc(s->models, sizeof(float) * V * (size_t)clusters);
    if (!models) return pfl_err("out of memory");
    s->models = models;
    s->clusters = (int)clusters, s->num_splits = (int)num_splits;
    int *split_ints = pfl_malloc(sizeof(int) * 4 * (size_t)(num_splits + 1));
    double *split_norms = pfl_malloc(sizeof(double) * 2 * (size_t)(num_splits + 1));
    int rc = -1;
    if (!split_ints || !split_norms || pfl_ckpt_get_i32(r, "cfl.cluster", s->cluster, (size_t)N) ||
        pfl_ckpt_get_f32(r, "cfl.models", s->models, V * (size_t)clusters) ||
        pfl_ckpt_get_f64(r, "cfl.mean_norm", s->mean_norm, (size_t)N) ||
        pfl_ckpt_get_f64(r, "cfl.max_norm", s->max_norm, (size_t)N) ||
        pfl_ckpt_get_i32(r, "cfl.split_ids", split_ints, 4 * (size_t)num_splits) ||
        pfl_ckpt_get_f64(r, "cfl.split_norms", split_norms, 2 * (size_t)num_splits))
        goto done;
    for (int c = 0; c < N; c++)
        if (s->cluster[c] < 0 || s->cluster[c] >= s->clusters) {
            pfl_err("%s: cfl.cluster: client %d in cluster %d of %d", r->path, c, s->cluster[c], s->clusters);
            goto done;
        }
    for (int k = 0; k < s->num_splits; k++) {
        const int *i = split_ints + 4 * k;
        s->splits[k] = (pfl_cfl_split){i[0], i[1], i[2], i[3], split_norms[2 * k], split_norms[2 * k + 1]};
    }
    rc = 0;
done:
    free(split_ints);
    free(split_norms);
    return rc;
}

/* The summary: the cluster of each client at the end, each cluster's last
 * update norms (to tune the thresholds) and the splits, in order. */
static void cfl_summary(const pfl_fl *fl, FILE *f) {
    const pfl_cfl_state *s = fl->algo_state;
    fprintf(f, ",\n  \"clusters\": %d", s->clusters);
    fputs(",\n  \"client_clusters\": [", f);
    for (int c = 0; c < fl->cfg.clients; c++) fprintf(f, "%s%d", c ? ", " : "", s->cluster[c]);
    fputs("],\n  \"cluster_mean_norms\": [", f);
    for (int c = 0; c < s->clusters; c++) fprintf(f, "%s%.6g", c ? ", " : "", s->mean_norm[c]);
    fputs("],\n  \"cluster_max_norms\": [", f);
    for (int c = 0; c < s->clusters; c++) fprintf(f, "%s%.6g", c ? ", " : "", s->max_norm[c]);
    fputs("],\n  \"split_rounds\": [", f);
    for (int k = 0; k < s->num_splits; k++) fprintf(f, "%s%d", k ? ", " : "", s->splits[k].round);
    fputs("],\n  \"splits\": [", f);
    for (int k = 0; k < s->num_splits; k++) {
        const pfl_cfl_split *p = &s->splits[k];
        fprintf(f, "%s{\"round\": %d, \"cluster\": %d, \"new_cluster\": %d, \"size\": %d, \"mean_norm\": %.6g, "
                   "\"max_norm\": %.6g}",
                k ? ", " : "", p->round, p->cluster, p->new_cluster, p->size, p->mean_norm, p->max_norm);
    }
    fputs("]", f);
}

/* After the run, a line with the clusters it found and when it split. */
static void cfl_final(const pfl_fl *fl, FILE *f) {
    const pfl_cfl_state *s = fl->algo_state;
    fprintf(f, "[pfl] cfl: %d cluster%s, client clusters [", s->clusters, s->clusters == 1 ? "" : "s");
    for (int c = 0; c < fl->cfg.clients; c++) fprintf(f, "%s%d", c ? " " : "", s->cluster[c]);
    fputs("], splits at rounds [", f);
    for (int k = 0; k < s->num_splits; k++) fprintf(f, "%s%d", k ? " " : "", s->splits[k].round);
    fputs("]\n", f);
}

static void cfl_report(const pfl_fl *fl, FILE *f, int what) {
    if (what == PFL_REPORT_SUMMARY) cfl_summary(fl, f);
    else if (what == PFL_REPORT_FINAL) cfl_final(fl, f);
}

/* The reference code's eps1 0.4, eps2 1.6, splits after round 20. */
static const pfl_param cfl_params[] = {
    {PFL_ALGO_PARAM(FLOAT, "cfl-eps1", cfl_eps1), .def = 0.4, .max = 1e12, .metavar = "F",
     .help = "split a cluster when the norm of its mean update is below this (setting-dependent)"},
    {PFL_ALGO_PARAM(FLOAT, "cfl-eps2", cfl_eps2), .def = 1.6, .max = 1e12, .metavar = "F",
     .help = "... and its largest client update norm is above this (setting-dependent)"},
    {PFL_ALGO_PARAM(INT, "cfl-warmup", cfl_warmup), .def = 20, .max = 1e7, .metavar = "R",
     .help = "no split in rounds 1..R"},
};

const pfl_algo pfl_algo_cfl = {
    .name = "cfl",
    .description = "CFL: clustered FL, clusters bi-partitioned by the cosine similarity of updates when the mean "
                   "update is small and the largest is not (--cfl-eps1, --cfl-eps2, --cfl-warmup)",
    PFL_PARAMS(cfl_params),
    /* CFL trains from its cluster's model: no BatchNorm of its own would stay */
    .run_defaults = (const char *const[]){"bn", "shared", NULL},
    .has_global = true,
    .create = cfl_create,
    .destroy = cfl_destroy,
    .local_init = cfl_local_init,
    .whole_uploads = true, /* MPI: its aggregate reads whole uploads */
    .aggregate = cfl_aggregate,
    .personal_model = cfl_personal_model,
    .report = cfl_report,
    .save = cfl_save,
    .load = cfl_load,
};
