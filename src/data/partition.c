/* Partitions: dataset indices -> per-client train/test index lists.
 *
 * iid, pat and dir follow PFLlib's generator (dataset_utils.py:
 * separate_data, then split_data); onelabel, shards, dirc and cfr follow the
 * generators the papers cite (see their sections below). numpy's global
 * random state is replaced by keyed streams: one PFL_RNG_PARTITION stream for
 * the scheme and one PFL_RNG_SPLIT stream per client for its train/test
 * split, so a partition is a pure function of (dataset, spec, clients, seed).
 *
 * Two kinds of scheme:
 *  - pooled (iid, pat, dir, onelabel, shards): the scheme fills `order` (the
 *    assigned sample indices, grouped by client; iid, pat and dir assign
 *    every sample, the others may leave some out) and `sizes`; the split
 *    then shuffles each client's run in place and takes its head as train
 *    and its tail as test. Every sample goes to at most one client.
 *  - pre-split (dirc, cfr): as their generators do, train samples come from
 *    the dataset's train files and test samples from its test files; the
 *    scheme lays out each client's train samples then its test samples and
 *    fixes the train count. A sample may recur (dirc draws with replacement,
 *    cfr starts a class over when it runs out), so these allocate their own
 *    storage, sized by what they drew. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h"
#include "util/err.h"
#include "util/rng.h"

const char *const pfl_partition_forms =
    "iid | pat[:K] | dir[:A[:MIN]] | onelabel[:TRAIN/TEST] | shards[:K] | dirc[:A] | cfr[:K] | pfllib";

#define ACCEPTED_FORMS                                                                                         \
    "iid, pat, pat:K (K >= 1 classes per client), dir, dir:A or dir:A:MIN (per-class Dirichlet alpha A > 0, at "  \
    "least MIN >= 2 samples per client, default 40), onelabel or onelabel:TRAIN/TEST (one class per client, "      \
    "TRAIN and TEST samples each, default 500/100), shards or shards:K (K >= 1 label-sorted shards per client, "   \
    "default 2), dirc or dirc:A (per-client Dirichlet class mix, alpha A > 0, default 0.1), cfr or cfr:K "         \
    "(pFedCFR/Ditto: K labels per client, default 5, lognormal sizes), pfllib (the clients of --data pfllib:DIR, "  \
    "as its files hold them)"

/* ---- parsing ---- */

static void spec_defaults(pfl_partition_spec *spec) {
    spec->kind = PFL_PART_IID;
    spec->classes_per_client = 2;
    spec->shards_per_client = 2; /* McMahan et al.: "assigned each of 100 clients 2 shards" */
    spec->alpha = 0.1;
    spec->min_samples = 40; /* PFLlib: batch_size / (1 - train_size) = 10 / 0.25 */
    spec->train_fraction = 0.75;
    spec->max_tries = 100;
    spec->holdout = 0; /* FedTSDP */
    spec->train_per_client = 500; /* FedALP: "500 training samples and 100 test samples" */
    spec->test_per_client = 100;
}

static int parse_error(const char *text) {
    return pfl_err("--partition: '%s' is not valid (accepted: %s)", text, ACCEPTED_FORMS);
}

/* A decimal integer in [lo, hi] starting at s (no sign, no blanks); *end
 * gets the first character after it. Returns 0 or -1. */
static int parse_int(const char *s, const char **end, long lo, long hi, int *out) {
    if (*s < '0' || *s > '9') return -1;
    char *e;
    long v = strtol(s, &e, 10);
    if (v < lo || v > hi) return -1;
    *end = e;
    *out = (int)v;
    return 0;
}

/* A finite alpha > 0 at s; *end gets the first character after it. */
static int parse_alpha(const char *s, char **end, double *out) {
    double alpha = strtod(s, end);
    if (*end == s || !(alpha > 0) || !isfinite(alpha)) return -1;
    *out = alpha;
    return 0;
}

/* "name" alone or "name:..." ; returns the text after the colon, "" for
 * the bare name, or NULL when text is not this scheme. */
static const char *scheme_args(const char *text, const char *name) {
    size_t n = strlen(name);
    if (strncmp(text, name, n) != 0) return NULL;
    if (text[n] == '\0') return text + n;
    if (text[n] == ':') return text[n + 1] ? text + n + 1 : NULL; /* "name:" is malformed */
    return NULL;
}

/* The schemes whose one argument is a count K: pat:K, cfr:K, shards:K. */
static int parse_count_scheme(pfl_partition_spec *spec, const char *text, const char *a, pfl_partition_kind kind,
                              int *count) {
    spec->kind = kind;
    const char *end;
    if (*a == '\0') return strchr(text, ':') ? parse_error(text) : 0;
    if (parse_int(a, &end, 1, 1000000, count) || *end) return parse_error(text);
    return 0;
}

int pfl_partition_parse(pfl_partition_spec *spec, const char *text) {
    spec_defaults(spec);
    if (!text) return parse_error("");
    if (strcmp(text, "iid") == 0) return 0;
    if (strcmp(text, "pfllib") == 0) return spec->kind = PFL_PART_PFLLIB, 0;
    const char *a, *end;
    char *e;
    if ((a = scheme_args(text, "pat")))
        return parse_count_scheme(spec, text, a, PFL_PART_PAT, &spec->classes_per_client);
    if ((a = scheme_args(text, "cfr"))) {
        spec->classes_per_client = 5; /* Ditto's generator: class_per_user = 5 */
        return parse_count_scheme(spec, text, a, PFL_PART_CFR, &spec->classes_per_client);
    }
    if ((a = scheme_args(text, "shards")))
        return parse_count_scheme(spec, text, a, PFL_PART_SHARDS, &spec->shards_per_client);
    if ((a = scheme_args(text, "dirc"))) {
        spec->kind = PFL_PART_DIRC;
        if (*a == '\0') return strchr(text, ':') ? parse_error(text) : 0;
        if (parse_alpha(a, &e, &spec->alpha) || *e) return parse_error(text);
        return 0;
    }
    if ((a = scheme_args(text, "dir"))) {
        spec->kind = PFL_PART_DIR;
        if (*a == '\0') return strchr(text, ':') ? parse_error(text) : 0;
        if (parse_alpha(a, &e, &spec->alpha) || (*e && *e != ':')) return parse_error(text);
        /* dir:A:MIN; 2 is the least a 75/25 split can cut into train and test. */
        if (*e == ':' && (parse_int(e + 1, &end, 2, 100000000, &spec->min_samples) || *end)) return parse_error(text);
        return 0;
    }
    if ((a = scheme_args(text, "onelabel"))) {
        spec->kind = PFL_PART_ONELABEL;
        if (*a == '\0') return strchr(text, ':') ? parse_error(text) : 0;
        if (parse_int(a, &end, 1, 100000000, &spec->train_per_client) || *end != '/' ||
            parse_int(end + 1, &end, 1, 100000000, &spec->test_per_client) || *end)
            return parse_error(text);
        return 0;
    }
    return parse_error(text);
}

const char *pfl_partition_resolve(const char *data, const char *partition) {
    const bool folder = data && !strncmp(data, "pfllib:", 7);
    return folder && partition && !strcmp(partition, "pat") ? "pfllib" : partition;
}

/* The spec as the user wrote it, for messages ("--partition dir:0.01: ..."). */
static const char *spec_text(const pfl_partition_spec *spec, char *buf, size_t size) {
    if (spec->kind == PFL_PART_PAT)
        snprintf(buf, size, "pat:%d", spec->classes_per_client);
    else if (spec->kind == PFL_PART_CFR)
        snprintf(buf, size, "cfr:%d", spec->classes_per_client);
    else if (spec->kind == PFL_PART_SHARDS)
        snprintf(buf, size, "shards:%d", spec->shards_per_client);
    else if (spec->kind == PFL_PART_DIRC)
        snprintf(buf, size, "dirc:%g", spec->alpha);
    else if (spec->kind == PFL_PART_DIR && spec->min_samples != 40)
        snprintf(buf, size, "dir:%g:%d", spec->alpha, spec->min_samples);
    else if (spec->kind == PFL_PART_DIR)
        snprintf(buf, size, "dir:%g", spec->alpha);
    else if (spec->kind == PFL_PART_ONELABEL)
        snprintf(buf, size, "onelabel:%d/%d", spec->train_per_client, spec->test_per_client);
    else if (spec->kind == PFL_PART_PFLLIB)
        snprintf(buf, size, "pfllib");
    else
        snprintf(buf, size, "iid");
    return buf;
}

/* ---- helpers ---- */

/* Indices grouped by class, each group in dataset order (PFLlib's
 * idxs[dataset_label == i]); group k is byclass[start[k] .. start[k+1]). */
static int group_by_class(const pfl_dataset *d, int *byclass, int *start) {
    memset(start, 0, sizeof *start * ((size_t)d->classes + 1));
    for (int i = 0; i < d->n; i++) {
        if (d->labels[i] >= d->classes)
            return pfl_err("%s: sample %d has label %d but the dataset has %d classes", d->name, i, d->labels[i],
                           d->classes);
        start[d->labels[i] + 1]++;
    }
    for (int k = 0; k < d->classes; k++) start[k + 1] += start[k];
    int *fill = pfl_malloc(sizeof *fill * (size_t)d->classes);
    if (!fill) return -1;
    memcpy(fill, start, sizeof *fill * (size_t)d->classes);
    for (int i = 0; i < d->n; i++) byclass[fill[d->labels[i]]++] = i;
    free(fill);
    return 0;
}

/* ---- iid ---- */

/* Shuffled indices dealt into near-equal contiguous chunks. */
static int make_iid(const pfl_dataset *d, int nc, pfl_rng *r, int *order, int *sizes) {
    for (int i = 0; i < d->n; i++) order[i] = i;
    pfl_rng_shuffle(r, order, (size_t)d->n);
    for (int j = 0; j < nc; j++) sizes[j] = d->n / nc + (j < d->n % nc);
    return 0;
}

/* ---- pat: PFLlib's pathological split, unbalanced mode ---- */

/* np.random.randint(low, high) with float bounds (truncated, low inclusive,
 * high exclusive); PFLlib would raise when low >= high, we take low. */
static int rand_between(pfl_rng *r, double low_f, double high_f) {
    long low = (long)low_f, high = (long)high_f;
    if (low >= high) return (int)low;
    return (int)(low + (long)pfl_rng_below(r, (uint64_t)(high - low)));
}

typedef struct {
    int client, start, len; /* a run of byclass[] handed to one client */
} pat_run;

/* Hands out the runs of class k to the first `limit` clients that still
 * take classes. Returns the number of runs, or -1. */
static int pat_class(const pfl_partition_spec *spec, const pfl_dataset *d, int nc, int k, const int *start,
                     int *cnt, int limit, pfl_rng *r, pat_run *runs, int *sel) {
    int nsel = 0;
    for (int j = 0; j < nc && nsel < limit; j++)
        if (cnt[j] > 0) sel[nsel++] = j;
    int num_all = start[k + 1] - start[k];
    if (nsel == 0) {
        if (num_all == 0) return 0;
        char buf[32];
        return pfl_err("--partition %s: class %d of %s gets no client (each of the %d clients already holds its "
                       "classes); use more clients or a larger K",
                       spec_text(spec, buf, sizeof buf), k, d->name, nc);
    }
    double num_per = (double)num_all / nsel;
    double low = fmax(num_per / 10, (double)spec->min_samples / d->classes);
    int given = 0;
    for (int s = 0; s < nsel; s++) {
        int take = num_all - given; /* the last client gets the remainder */
        if (s < nsel - 1) {
            int draw = rand_between(r, low, num_per);
            /* Only when low >= high can draws overrun the class; clamp so
             * every count stays a real run of this class. */
            take = draw < take ? draw : take;
        }
        runs[s] = (pat_run){sel[s], start[k] + given, take};
        given += take;
        cnt[sel[s]]--;
    }
    return nsel;
}

static int make_pat(const pfl_partition_spec *spec, const pfl_dataset *d, int nc, pfl_rng *r, const int *byclass,
                    const int *start, int *order, int *sizes) {
    char buf[32];
    const int K = spec->classes_per_client, C = d->classes;
    if (K > C)
        return pfl_err("--partition %s: %d classes per client but %s has only %d classes; use pat:K with K <= %d",
                       spec_text(spec, buf, sizeof buf), K, d->name, C, C);
    /* PFLlib: selected_clients[:int(np.ceil((num_clients/num_classes)*class_per_client))] */
    double lim = ceil((double)nc / C * K);
    int limit = lim < nc ? (int)lim : nc;
    int *cnt = pfl_malloc(sizeof *cnt * (size_t)nc);
    int *sel = pfl_malloc(sizeof *sel * (size_t)nc);
    pat_run *runs = pfl_malloc(sizeof *runs * (size_t)C * (size_t)limit);
    int *nruns = pfl_calloc((size_t)C, sizeof *nruns);
    int rc = -1;
    if (!cnt || !sel || !runs || !nruns) goto out;
    for (int j = 0; j < nc; j++) cnt[j] = K, sizes[j] = 0;
    for (int k = 0; k < C; k++) {
        nruns[k] = pat_class(spec, d, nc, k, start, cnt, limit, r, runs + (size_t)k * limit, sel);
        if (nruns[k] < 0) goto out;
        for (int s = 0; s < nruns[k]; s++) sizes[runs[(size_t)k * limit + s].client] += runs[(size_t)k * limit + s].len;
    }
    for (int j = 0; j < nc; j++)
        if (sizes[j] == 0) {
            pfl_err("--partition %s: client %d of %d gets no data (%s has %d classes, each given to at most %d "
                    "clients); use fewer clients or a different K",
                    spec_text(spec, buf, sizeof buf), j, nc, d->name, C, limit);
            goto out;
        }
    /* Lay out each client's runs in class order (PFLlib's np.append). */
    int *pos = sel; /* reuse: write offset per client */
    for (int j = 0, off = 0; j < nc; off += sizes[j], j++) pos[j] = off;
    for (int k = 0; k < C; k++)
        for (int s = 0; s < nruns[k]; s++) {
            const pat_run *run = &runs[(size_t)k * limit + s];
            memcpy(order + pos[run->client], byclass + run->start, sizeof *order * (size_t)run->len);
            pos[run->client] += run->len;
        }
    rc = 0;
out:
    free(cnt);
    free(sel);
    free(runs);
    free(nruns);
    return rc;
}

/* ---- dir: PFLlib's Dirichlet split ---- */

/* log of a Gamma(shape, 1) draw. For shape < 1 this is the boost
 * Gamma(a) = Gamma(a+1) * U^(1/a) taken in logs (the same draws as
 * pfl_rng_gamma), because for tiny alpha U^(1/a) underflows to 0 and every
 * proportion would become 0/0. */
static double log_gamma_draw(pfl_rng *r, double shape) {
    if (shape >= 1.0) return log(pfl_rng_gamma(r, shape));
    double u = pfl_rng_uniform(r);
    if (u < 1e-300) u = 1e-300;
    return log(pfl_rng_gamma(r, shape + 1.0)) + log(u) / shape;
}

typedef struct {
    const pfl_dataset *d;
    int nc;
    double alpha;
    const int *byclass, *start;
    int *work;    /* byclass, each class shuffled in this try */
    int *cuts;    /* classes x (nc + 1) piece boundaries within each class */
    long *held;   /* samples per client so far in this try */
    double *prop; /* nc proportions (log-space first) */
    int nonempty; /* clients with any sample in this try */
} dir_state;

/* Dirichlet(alpha) proportions with clients already holding >= N/nc samples
 * zeroed, then normalized. Works in logs and normalizes by the largest
 * eligible term, so the sum is >= 1 and never 0. */
static void dir_proportions(dir_state *s, pfl_rng *r) {
    const int nc = s->nc;
    int eligible = 0;
    for (int j = 0; j < nc; j++) {
        s->prop[j] = log_gamma_draw(r, s->alpha); /* all nc drawn, as numpy's dirichlet does */
        eligible += s->held[j] * nc < s->d->n;    /* PFLlib: len(idx_j) < N/num_clients */
    }
    /* With no eligible client left (only possible once every sample is
     * placed) keep them all rather than divide by zero. */
    double best = -INFINITY, sum = 0;
    for (int j = 0; j < nc; j++) {
        if (eligible && s->held[j] * nc >= s->d->n) s->prop[j] = -INFINITY;
        if (s->prop[j] > best) best = s->prop[j];
    }
    for (int j = 0; j < nc; j++) sum += s->prop[j] = exp(s->prop[j] - best);
    for (int j = 0; j < nc; j++) s->prop[j] /= sum;
}

/* One pass over all classes; returns the smallest client size. */
static long dir_try(dir_state *s, pfl_rng *r) {
    const int nc = s->nc;
    memset(s->held, 0, sizeof *s->held * (size_t)nc);
    for (int k = 0; k < s->d->classes; k++) {
        int base = s->start[k], len = s->start[k + 1] - base;
        memcpy(s->work + base, s->byclass + base, sizeof *s->work * (size_t)len);
        pfl_rng_shuffle(r, s->work + base, (size_t)len);
        dir_proportions(s, r);
        int *cut = s->cuts + (size_t)k * (nc + 1);
        double cum = 0;
        cut[0] = 0;
        for (int j = 0; j < nc - 1; j++) {
            cum += s->prop[j];
            int c = (int)(cum * len); /* (np.cumsum(p) * len).astype(int)[:-1] */
            cut[j + 1] = c < cut[j] ? cut[j] : c > len ? len : c;
        }
        cut[nc] = len;
        for (int j = 0; j < nc; j++) s->held[j] += cut[j + 1] - cut[j];
    }
    long smallest = s->held[0];
    s->nonempty = 0;
    for (int j = 0; j < nc; j++) {
        if (s->held[j] < smallest) smallest = s->held[j];
        s->nonempty += s->held[j] > 0;
    }
    return smallest;
}

/* Lays out the accepted try: each client's pieces in class order. */
static void dir_layout(const dir_state *s, int *order, int *sizes) {
    const int nc = s->nc;
    for (int j = 0; j < nc; j++) sizes[j] = (int)s->held[j];
    long off = 0;
    for (int j = 0; j < nc; j++)
        for (int k = 0; k < s->d->classes; k++) {
            const int *cut = s->cuts + (size_t)k * (nc + 1);
            int n = cut[j + 1] - cut[j];
            memcpy(order + off, s->work + s->start[k] + cut[j], sizeof *order * (size_t)n);
            off += n;
        }
}

static int make_dir(const pfl_partition_spec *spec, const pfl_dataset *d, int nc, pfl_rng *r, const int *byclass,
                    const int *start, int *order, int *sizes) {
    char buf[32];
    spec_text(spec, buf, sizeof buf);
    if ((long)nc * spec->min_samples > d->n)
        return pfl_err("--partition %s: %d clients x %d samples minimum needs %ld samples but %s has %d; use fewer "
                       "clients",
                       buf, nc, spec->min_samples, (long)nc * spec->min_samples, d->name, d->n);
    dir_state s = {d, nc, spec->alpha, byclass, start, NULL, NULL, NULL, NULL, 0};
    s.work = pfl_malloc(sizeof *s.work * (size_t)d->n);
    s.cuts = pfl_malloc(sizeof *s.cuts * (size_t)d->classes * ((size_t)nc + 1));
    s.held = pfl_malloc(sizeof *s.held * (size_t)nc);
    s.prop = pfl_malloc(sizeof *s.prop * (size_t)nc);
    int rc = -1;
    if (s.work && s.cuts && s.held && s.prop) {
        /* PFLlib retries until the minimum is met, forever if it cannot be;
         * we stop after max_tries and report the best try's smallest client. */
        long smallest = -1, best = -1, nonempty_sum = 0;
        int t = 0;
        for (; t < spec->max_tries && smallest < spec->min_samples; t++) {
            smallest = dir_try(&s, r);
            if (smallest > best) best = smallest;
            nonempty_sum += s.nonempty;
        }
        if (smallest >= spec->min_samples) {
            dir_layout(&s, order, sizes);
            rc = 0;
        } else if (best == 0) {
            /* A lower minimum cannot help: some client got nothing in every
             * try. At tiny alpha each class goes almost whole to one client
             * (and one holding N/clients samples takes no more), so only
             * about `classes` clients ever get data. */
            pfl_err("--partition %s: after %d tries some client still has fewer than %d samples (smallest: 0; on "
                    "average only %.1f of the %d clients got any sample); use fewer clients or a larger alpha",
                    buf, spec->max_tries, spec->min_samples, (double)nonempty_sum / t, nc);
        } else {
            pfl_err("--partition %s: after %d tries some client still has fewer than %d samples (smallest: %ld); "
                    "use fewer clients, a larger alpha or a lower minimum (dir:A:MIN)",
                    buf, spec->max_tries, spec->min_samples, best);
        }
    }
    free(s.work);
    free(s.cuts);
    free(s.held);
    free(s.prop);
    return rc;
}

/* ---- onelabel: FedALP's MNIST / Fashion-MNIST split ---- */

/* FedALP (after Fraboni et al.): "100 clients, where each client has 500
 * training samples and 100 test samples that consist of only one digit. Each
 * digit is owned by 10 clients." Client j holds class j mod classes
 * (round-robin, so with clients a multiple of the class count every class
 * has clients/classes clients; otherwise the first clients % classes classes
 * have one more). Each class is shuffled and dealt out in runs of
 * TRAIN + TEST samples, so no sample is used twice; split_clients then
 * shuffles each run with the client's stream and takes TRAIN as train. */
static int make_onelabel(const pfl_partition_spec *spec, const pfl_dataset *d, int nc, pfl_rng *r,
                         const int *byclass, const int *start, int *order, int *sizes) {
    char buf[48];
    const int C = d->classes;
    const long per = (long)spec->train_per_client + spec->test_per_client;
    int worst = -1; /* the class furthest short, to name in the message */
    long worst_gap = 0;
    for (int k = 0; k < C; k++) {
        long owners = nc / C + (k < nc % C), gap = owners * per - (start[k + 1] - start[k]);
        if (gap > worst_gap) worst = k, worst_gap = gap;
    }
    if (worst >= 0) {
        long owners = nc / C + (worst < nc % C);
        return pfl_err("--partition %s: class %d has %d samples, %ld clients need %ld; lower the counts or use "
                       "fewer clients",
                       spec_text(spec, buf, sizeof buf), worst, start[worst + 1] - start[worst], owners, owners * per);
    }
    int *work = pfl_malloc(sizeof *work * (size_t)d->n);
    int *used = pfl_calloc((size_t)C, sizeof *used);
    if (!work || !used) {
        free(work);
        free(used);
        return -1;
    }
    memcpy(work, byclass, sizeof *work * (size_t)d->n);
    for (int k = 0; k < C; k++) pfl_rng_shuffle(r, work + start[k], (size_t)(start[k + 1] - start[k]));
    for (int j = 0; j < nc; j++) {
        int k = j % C;
        memcpy(order + (size_t)j * per, work + start[k] + used[k], sizeof *order * (size_t)per);
        used[k] += (int)per;
        sizes[j] = (int)per;
    }
    free(work);
    free(used);
    return 0;
}

/* ---- shards: FedAvg's pathological split (McMahan et al. 2017) ---- */

/* McMahan et al.: "sort the data by digit label, divide it into 200 shards
 * of size 300, and assign each of 100 clients 2 shards". Samples sorted by
 * label, ties in dataset order (byclass); S = K x clients shards of
 * floor(n / S) samples; shard i starts at floor(i n / S), so the fewer than
 * S samples left over are spread one per gap rather than all cut from the
 * last class. The shard ids are shuffled and client j takes shuffled
 * [jK, jK + K): the same distribution as drawing K shards without
 * replacement client after client, as the reference code does. A shard
 * straddles two classes only where a class is not a whole number of
 * shards, so a client has at most K classes when each class is (CIFAR-10,
 * 20 clients, K = 2: shards of 1,500, classes of 6,000) and at most 2K
 * otherwise. */
static int make_shards(const pfl_partition_spec *spec, const pfl_dataset *d, int nc, pfl_rng *r, const int *byclass,
                       int *order, int *sizes) {
    char buf[32];
    const int K = spec->shards_per_client;
    const long S = (long)K * nc, size = d->n / S;
    if (size * K < 2)
        return pfl_err("--partition %s: %d clients x %d shards = %ld shards of %ld sample(s) of the %d in %s, too "
                       "few for a train/test split; use fewer clients or a smaller K",
                       spec_text(spec, buf, sizeof buf), nc, K, S, size, d->n, d->name);
    int *ids = pfl_malloc(sizeof *ids * (size_t)S); /* size >= 1, so S <= n fits an int */
    if (!ids) return -1;
    for (int i = 0; i < (int)S; i++) ids[i] = i;
    pfl_rng_shuffle(r, ids, (size_t)S);
    long off = 0;
    for (int j = 0; j < nc; j++) {
        for (int t = 0; t < K; t++) {
            long first = (long)ids[(long)j * K + t] * d->n / S;
            memcpy(order + off, byclass + first, sizeof *order * (size_t)size);
            off += size;
        }
        sizes[j] = (int)(size * K);
    }
    free(ids);
    return 0;
}

/* ---- pre-split schemes: train samples from the train files, test from the test files ---- */

/* Class k's samples from the train files are byclass[start[k] .. mid[k]),
 * those from the test files byclass[mid[k] .. start[k + 1]) (byclass keeps
 * dataset order within a class, and the train files come first). */
static int file_pools(const pfl_partition_spec *spec, const pfl_dataset *d, const int *byclass, const int *start,
                      int *mid) {
    char buf[32];
    spec_text(spec, buf, sizeof buf);
    if (d->from_train_files <= 0)
        return pfl_err("--partition %s: draws train samples from the train files and test samples from the test "
                       "files, but %s has no samples known to come from train files; use another partition",
                       buf, d->name);
    if (d->from_train_files >= d->n)
        return pfl_err("--partition %s: draws test samples from the test files, but none of %s's are left (held "
                       "out as the public set?); use --public 0 or another partition",
                       buf, d->name);
    for (int k = 0; k < d->classes; k++) {
        int m = start[k];
        while (m < start[k + 1] && byclass[m] < d->from_train_files) m++;
        mid[k] = m;
    }
    return 0;
}

/* Splits n samples over the classes in proportion to p: floor(p_k n) each,
 * then one more to each of the classes with the largest fractional parts
 * (ties: the lower class) until n are given. A class with p_k = 0 gets
 * none, since fewer than `left` classes can never be short of one. */
static void apportion(const double *p, int classes, int n, int *count) {
    int left = n;
    for (int k = 0; k < classes; k++) left -= count[k] = (int)floor(p[k] * n);
    for (; left > 0; left--) {
        int best = -1;
        double best_frac = -1;
        for (int k = 0; k < classes; k++) {
            double frac = p[k] * n - count[k];
            if (frac > best_frac) best = k, best_frac = frac;
        }
        count[best]++;
    }
}

/* ---- dirc: FedALP's CIFAR-10 split, Fraboni et al.'s per-client Dirichlet ---- */

/* Fraboni et al.'s unbalanced sizes for 100 clients on CIFAR-10: 100, 250,
 * 500, 750 and 1000 train samples (20, 50, 100, 150, 200 test samples) for
 * 10, 30, 30, 20 and 10 clients: 0.2, 0.5, 1, 1.5 and 2 times the even
 * share of the 50,000 train (10,000 test) files over 100 clients. pfl keeps
 * both for other datasets and client counts: client j is in tier
 * TIER_OF_DECILE[10 j / clients] and gets TENTHS[tier] / 10 even shares. */
static const int DIRC_TIER_OF_DECILE[10] = {0, 1, 1, 1, 2, 2, 2, 3, 3, 4};
static const int DIRC_TENTHS[5] = {2, 5, 10, 15, 20};

static int dirc_size(long pool, int nc, int j) {
    return (int)(DIRC_TENTHS[DIRC_TIER_OF_DECILE[(long)j * 10 / nc]] * pool / (10L * nc));
}

/* Draws `count` samples of one class with replacement from its pool. */
static int draw_with_replacement(const int *pool, int len, int count, pfl_rng *r, int *out) {
    if (count > 0 && len == 0) return -1;
    for (int i = 0; i < count; i++) out[i] = pool[pfl_rng_below(r, (uint64_t)len)];
    return 0;
}

/* Each client's share of each class: p_j ~ Dir(alpha, ..., alpha) in logs
 * (log_gamma_draw), so that at alpha = 0.001 the largest term is 1 and the
 * others underflow to 0 rather than all to 0/0. */
static void dirc_mix(const pfl_dataset *d, int nc, double alpha, pfl_rng *r, double *mix) {
    const int C = d->classes;
    for (int j = 0; j < nc; j++) {
        double *p = mix + (size_t)j * C, best = -INFINITY, sum = 0;
        for (int k = 0; k < C; k++) best = fmax(best, p[k] = log_gamma_draw(r, alpha));
        for (int k = 0; k < C; k++) sum += p[k] = exp(p[k] - best);
        for (int k = 0; k < C; k++) p[k] /= sum;
    }
}

/* Fraboni et al. (clustered sampling, the split FedALP says it uses; their
 * read_db.py create_CIFAR10_dirichlet / partition_CIFAR_dataset): a matrix
 * of per-client class mixes ~ Dir(alpha), then for every client
 * round(mix x size) samples of each class drawn with replacement
 * (np.random.choice) from that class of the train files, then the same
 * from the test files with the test size. pfl rounds by largest remainder
 * where the code truncates and gives the remainder to the last class (see
 * docs/algorithms.md). Layout: client j's train draws, then its test draws. */
static int make_dirc(const pfl_partition_spec *spec, const pfl_dataset *d, int nc, pfl_rng *r, const int *byclass,
                     const int *start, int **storage, int *sizes, int *n_train) {
    char buf[32];
    spec_text(spec, buf, sizeof buf);
    const int C = d->classes;
    int *mid = pfl_malloc(sizeof *mid * (size_t)C);
    if (!mid) return -1;
    if (file_pools(spec, d, byclass, start, mid)) {
        free(mid);
        return -1;
    }
    const long pool[2] = {d->from_train_files, d->n - d->from_train_files};
    for (int f = 0; f < 2; f++)
        if (dirc_size(pool[f], nc, 0) < 1) {
            free(mid);
            return pfl_err("--partition %s: the smallest clients get 0.2 x %ld / %d < 1 %s samples; use at most %ld "
                           "clients",
                           buf, pool[f], nc, f ? "test" : "train", (pool[0] < pool[1] ? pool[0] : pool[1]) / 5);
        }
    long total = 0;
    for (int j = 0; j < nc; j++) {
        n_train[j] = dirc_size(pool[0], nc, j);
        sizes[j] = n_train[j] + dirc_size(pool[1], nc, j);
        total += sizes[j];
    }
    double *mix = pfl_malloc(sizeof *mix * (size_t)nc * C);
    int *count = pfl_malloc(sizeof *count * (size_t)C);
    *storage = total <= 0x7fffffff ? pfl_malloc(sizeof **storage * (size_t)total) : NULL;
    int rc = -1;
    if (!mix || !count || !*storage) {
        if (total > 0x7fffffff) pfl_err("--partition %s: %ld draws are too many; use fewer clients", buf, total);
        goto out;
    }
    dirc_mix(d, nc, spec->alpha, r, mix);
    for (int f = 0; f < 2; f++) { /* all clients' train draws, then all test draws, as the code does */
        long at = 0; /* client j's run: its train draws, then its test draws */
        for (int j = 0; j < nc; at += sizes[j], j++) {
            int n = f ? sizes[j] - n_train[j] : n_train[j], *out = *storage + at + (f ? n_train[j] : 0);
            apportion(mix + (size_t)j * C, C, n, count);
            for (int k = 0; k < C; k++) {
                const int *from = byclass + (f ? mid[k] : start[k]);
                int len = f ? start[k + 1] - mid[k] : mid[k] - start[k];
                if (draw_with_replacement(from, len, count[k], r, out)) {
                    pfl_err("--partition %s: client %d draws class %d, which %s's %s files lack; use another "
                            "partition",
                            buf, j, k, d->name, f ? "test" : "train");
                    goto out;
                }
                out += count[k];
            }
        }
    }
    rc = 0;
out:
    free(mid);
    free(mix);
    free(count);
    return rc;
}

/* ---- cfr: pFedCFR's split, i.e. Ditto's generator ---- */

/* pFedCFR: "by using the heterogeneous data construction rules in [19]
 * [Ditto], we first assign corresponding labels to each client, then divide
 * the number of samples using the strategy of combining lognormal
 * distribution and random factor". Ditto's generator (litian96/ditto,
 * data/fmnist/create_dataset.py: 500 users, Fashion-MNIST), for any client
 * count and dataset:
 *
 *   num[u] ~ lognormal(3, 1) + 10, scaled so that the num sum to the
 *     train-file samples (Ditto: 60000);
 *   client u holds labels l = (u + t) mod classes, t < K (Ditto: 5);
 *   props ~ lognormal(1, 1), one per label of u, normalized;
 *   label t gets int(props[t] num[u]) + 1 train samples and
 *     int(props[t] num[u] / R) + 1 test samples, R = train-file over
 *     test-file samples (Ditto: 6 = 60000 / 10000);
 *   those are the next samples of class l in file order (train from the
 *     train files, test from the test files); when they would run past the
 *     class's end the class starts over at its first sample (Ditto's
 *     idx = 0), so samples recur across clients. A run longer than the whole
 *     class is cut to the class (Python's slice cuts Ditto's images there).
 *
 * Layout: client u's train runs, then its test runs, label by label. */
typedef struct {
    int at, len; /* a run of byclass[] */
} cfr_run;

/* The next `want` samples of a class whose pool is byclass[lo .. hi), the
 * class's read position in *pos (relative to lo). */
static cfr_run cfr_take(int lo, int hi, long want, long *pos) {
    long len = hi - lo;
    if (want > len) want = len;
    if (*pos + want > len) *pos = 0;
    cfr_run run = {lo + (int)*pos, (int)want};
    *pos += want;
    return run;
}

static int make_cfr(const pfl_partition_spec *spec, const pfl_dataset *d, int nc, pfl_rng *r, const int *byclass,
                    const int *start, int **storage, int *sizes, int *n_train) {
    char buf[32];
    spec_text(spec, buf, sizeof buf);
    const int K = spec->classes_per_client, C = d->classes;
    if (K > C)
        return pfl_err("--partition %s: %d labels per client but %s has only %d classes; use cfr:K with K <= %d", buf,
                       K, d->name, C, C);
    const size_t pairs = (size_t)nc * K;
    int *mid = pfl_malloc(sizeof *mid * (size_t)C);
    long *pos = pfl_calloc(2 * (size_t)C, sizeof *pos); /* read position per class, train then test */
    double *num = pfl_malloc(sizeof *num * (size_t)nc), *props = pfl_malloc(sizeof *props * (size_t)K);
    cfr_run *runs = pfl_malloc(sizeof *runs * 2 * pairs); /* (u, t): train run at 2(uK + t), test run next */
    int rc = -1;
    if (!mid || !pos || !num || !props || !runs || file_pools(spec, d, byclass, start, mid)) goto out;
    for (int k = 0; k < C; k++)
        if (mid[k] == start[k] || mid[k] == start[k + 1]) {
            /* Only classes some client holds matter; with K < C every class is someone's once nc >= C. */
            int held = 0;
            for (int u = 0; u < nc && !held; u++) held = (k - u % C + C) % C < K;
            if (held) {
                pfl_err("--partition %s: class %d has no sample in the %s files of %s; use another partition", buf,
                        k, mid[k] == start[k] ? "train" : "test", d->name);
                goto out;
            }
        }
    const double train_files = d->from_train_files, ratio = train_files / (d->n - d->from_train_files);
    double sum = 0;
    for (int u = 0; u < nc; u++) sum += num[u] = exp(3.0 + pfl_rng_normal(r)) + 10.0;
    for (int u = 0; u < nc; u++) num[u] = train_files * num[u] / sum;
    long total = 0;
    for (int u = 0; u < nc; u++) {
        double psum = 0;
        for (int t = 0; t < K; t++) psum += props[t] = exp(1.0 + pfl_rng_normal(r));
        n_train[u] = sizes[u] = 0;
        for (int t = 0; t < K; t++) {
            int l = (u + t) % C;
            double share = props[t] / psum * num[u];
            cfr_run *run = runs + 2 * ((size_t)u * K + t);
            run[0] = cfr_take(start[l], mid[l], (long)share + 1, &pos[l]);
            run[1] = cfr_take(mid[l], start[l + 1], (long)(share / ratio) + 1, &pos[C + l]);
            n_train[u] += run[0].len;
            sizes[u] += run[0].len + run[1].len;
        }
        total += sizes[u];
    }
    if (total > 0x7fffffff) {
        pfl_err("--partition %s: %ld samples dealt are too many; use fewer clients", buf, total);
        goto out;
    }
    if (!(*storage = pfl_malloc(sizeof **storage * (size_t)total))) goto out;
    int *out = *storage;
    for (int u = 0; u < nc; u++)
        for (int f = 0; f < 2; f++)
            for (int t = 0; t < K; t++) {
                const cfr_run *run = runs + 2 * ((size_t)u * K + t) + f;
                memcpy(out, byclass + run->at, sizeof *out * (size_t)run->len);
                out += run->len;
            }
    rc = 0;
out:
    free(mid);
    free(pos);
    free(num);
    free(props);
    free(runs);
    return rc;
}

/* ---- common ---- */

static int check_args(const pfl_dataset *d, const pfl_partition_spec *spec, int nc) {
    char buf[32];
    if (!d || d->n < 1 || d->classes < 1 || !d->labels) return pfl_err("partition: the dataset is empty");
    if (nc < 1) return pfl_err("--clients %d: need at least 1 client", nc);
    if (nc > d->n) return pfl_err("--clients %d: more clients than the %d samples of %s", nc, d->n, d->name);
    if (!(spec->train_fraction > 0 && spec->train_fraction < 1))
        return pfl_err("partition: train fraction %g must be strictly between 0 and 1", spec->train_fraction);
    if ((spec->kind == PFL_PART_PAT || spec->kind == PFL_PART_CFR) && spec->classes_per_client < 1)
        return pfl_err("--partition %s: K must be >= 1", spec_text(spec, buf, sizeof buf));
    if (spec->kind == PFL_PART_SHARDS && spec->shards_per_client < 1)
        return pfl_err("--partition %s: K must be >= 1", spec_text(spec, buf, sizeof buf));
    if ((spec->kind == PFL_PART_DIR || spec->kind == PFL_PART_DIRC) && (!(spec->alpha > 0) || !isfinite(spec->alpha)))
        return pfl_err("--partition %s: alpha must be > 0", spec_text(spec, buf, sizeof buf));
    if (spec->kind == PFL_PART_DIR && spec->max_tries < 1)
        return pfl_err("--partition %s: max_tries must be >= 1", spec_text(spec, buf, sizeof buf));
    if (spec->min_samples < 0) return pfl_err("partition: min_samples %d is negative", spec->min_samples);
    if (spec->kind == PFL_PART_ONELABEL && (spec->train_per_client < 1 || spec->test_per_client < 1))
        return pfl_err("--partition onelabel:%d/%d: TRAIN and TEST must be >= 1", spec->train_per_client,
                       spec->test_per_client);
    return 0;
}

static int presplit(const pfl_partition_spec *spec) {
    return spec->kind == PFL_PART_DIRC || spec->kind == PFL_PART_CFR;
}

/* Runs the scheme: fills p->storage (pooled schemes: d->n entries, allocated
 * here; pre-split ones allocate what they drew), sizes and, for pre-split
 * schemes, each client's train count. */
static int run_scheme(const pfl_partition_spec *spec, const pfl_dataset *d, int nc, uint64_t seed, pfl_partition *p,
                      int *sizes, int *n_train) {
    pfl_rng r = pfl_rng_stream(seed, PFL_RNG_NONE, PFL_RNG_NONE, PFL_RNG_PARTITION);
    if (!presplit(spec) && !(p->storage = pfl_malloc(sizeof *p->storage * (size_t)d->n))) return -1;
    if (spec->kind == PFL_PART_IID) return make_iid(d, nc, &r, p->storage, sizes);
    int *byclass = pfl_malloc(sizeof *byclass * (size_t)d->n);
    int *start = pfl_malloc(sizeof *start * ((size_t)d->classes + 1));
    int rc = -1;
    if (byclass && start && group_by_class(d, byclass, start) == 0) {
        if (spec->kind == PFL_PART_PAT)
            rc = make_pat(spec, d, nc, &r, byclass, start, p->storage, sizes);
        else if (spec->kind == PFL_PART_DIR)
            rc = make_dir(spec, d, nc, &r, byclass, start, p->storage, sizes);
        else if (spec->kind == PFL_PART_ONELABEL)
            rc = make_onelabel(spec, d, nc, &r, byclass, start, p->storage, sizes);
        else if (spec->kind == PFL_PART_SHARDS)
            rc = make_shards(spec, d, nc, &r, byclass, p->storage, sizes);
        else if (spec->kind == PFL_PART_DIRC)
            rc = make_dirc(spec, d, nc, &r, byclass, start, &p->storage, sizes, n_train);
        else
            rc = make_cfr(spec, d, nc, &r, byclass, start, &p->storage, sizes, n_train);
    }
    free(byclass);
    free(start);
    return rc;
}

/* sklearn's train_test_split(train_size=f): n_train = floor(f * n), the rest
 * is test, after shuffling with the client's own stream. onelabel fixes
 * n_train itself (TRAIN of the client's TRAIN + TEST samples); pre-split
 * schemes fix it too and shuffle train and test each on its own, since
 * they come from different files. */
static int split_clients(pfl_partition *p, const pfl_partition_spec *spec, const int *sizes, const int *fixed_train,
                         uint64_t seed) {
    int *at = p->storage;
    for (int j = 0; j < p->num_clients; j++) {
        int n = sizes[j];
        int n_train = presplit(spec)                     ? fixed_train[j]
                      : spec->kind == PFL_PART_ONELABEL ? spec->train_per_client
                                                        : (int)floor(spec->train_fraction * n),
            n_test = n - n_train;
        if (n_train < 1 || n_test < 1)
            return pfl_err("partition: client %d has %d sample(s), too few for a %g/%g train/test split; use fewer "
                           "clients",
                           j, n, spec->train_fraction, 1 - spec->train_fraction);
        pfl_rng r = pfl_rng_stream(seed, PFL_RNG_NONE, j, PFL_RNG_SPLIT);
        if (presplit(spec)) {
            pfl_rng_shuffle(&r, at, (size_t)n_train);
            pfl_rng_shuffle(&r, at + n_train, (size_t)n_test);
        } else {
            pfl_rng_shuffle(&r, at, (size_t)n);
        }
        p->clients[j] = (pfl_client_data){n_train, n_test, at, at + n_train};
        at += n;
    }
    return 0;
}

/* FedTSDP: the scheme sees the dataset without its held-out trailing samples. */
static int partition_view(const pfl_dataset *d, const pfl_partition_spec *spec, pfl_dataset *view) {
    if (!d) return pfl_err("partition: no dataset");
    *view = *d;
    if (spec->holdout == 0) return 0;
    if (spec->holdout < 0 || spec->holdout >= d->n)
        return pfl_err("partition: cannot hold out %d of the %d samples", spec->holdout, d->n);
    view->n -= spec->holdout;
    if (view->from_train_files > view->n) view->from_train_files = view->n;
    return 0;
}

/* ---- pfllib: a PFLlib folder's own clients ---- */

/* The clients as the folder's files hold them: the samples lie client after
 * client, each its train samples then its test samples (data.h). Nothing is
 * drawn, and no other scheme may re-split them. */
static int make_own(pfl_partition *p, const pfl_dataset *d, const pfl_partition_spec *spec, int nc) {
    char buf[32];
    if (spec->kind != PFL_PART_PFLLIB)
        return pfl_err("--partition %s: the data is a PFLlib folder, split over its clients already (--partition "
                       "pfllib, the default for it)",
                       spec_text(spec, buf, sizeof buf));
    if (!d->own_clients)
        return pfl_err("--partition pfllib: takes the clients of a PFLlib folder (--data pfllib:DIR); %s has none",
                       d->name);
    if (spec->holdout)
        return pfl_err("--public: every sample of a PFLlib folder belongs to a client; none can be held out");
    if (nc != d->own_clients)
        return pfl_err("--clients %d: the PFLlib folder holds %d clients (num_clients in its config.json); pass "
                       "--clients %d",
                       nc, d->own_clients, d->own_clients);
    p->storage = pfl_malloc(sizeof *p->storage * (size_t)d->n);
    p->clients = pfl_calloc((size_t)nc, sizeof *p->clients);
    if (!p->storage || !p->clients) return -1;
    p->num_clients = nc;
    for (int i = 0; i < d->n; i++) p->storage[i] = i;
    for (int j = 0, at = 0; j < nc; j++) {
        const int n_train = d->own_counts[2 * j], n_test = d->own_counts[2 * j + 1];
        p->clients[j] = (pfl_client_data){n_train, n_test, p->storage + at, p->storage + at + n_train};
        at += n_train + n_test;
    }
    return 0;
}

int pfl_partition_make(pfl_partition *p, const pfl_dataset *d, const pfl_partition_spec *spec, int num_clients,
                       uint64_t seed) {
    memset(p, 0, sizeof *p);
    if (d && (d->own_clients || spec->kind == PFL_PART_PFLLIB)) {
        if (make_own(p, d, spec, num_clients) == 0) return 0;
        pfl_partition_free(p);
        return -1;
    }
    pfl_dataset view = {0};
    if (partition_view(d, spec, &view) || check_args(&view, spec, num_clients) < 0) return -1;
    int *sizes = pfl_malloc(sizeof *sizes * (size_t)num_clients);
    int *n_train = pfl_malloc(sizeof *n_train * (size_t)num_clients);
    p->clients = pfl_calloc((size_t)num_clients, sizeof *p->clients);
    p->num_clients = num_clients;
    int rc = -1;
    if (sizes && n_train && p->clients && run_scheme(spec, &view, num_clients, seed, p, sizes, n_train) == 0)
        rc = split_clients(p, spec, sizes, n_train, seed);
    free(sizes);
    free(n_train);
    if (rc < 0) pfl_partition_free(p);
    return rc;
}

void pfl_partition_free(pfl_partition *p) {
    if (!p) return;
    free(p->clients);
    free(p->storage);
    memset(p, 0, sizeof *p);
}

/* ---- description ---- */

static void describe_dirc(const pfl_dataset *d, double alpha, int nc, char *buf, size_t size, int len) {
    const long pool[2] = {d->from_train_files, d->n - d->from_train_files};
    len += snprintf(buf + len, size - (size_t)len,
                    "each client's class mix ~ Dir(%g) (Fraboni et al., as FedALP); samples drawn with "
                    "replacement, train from the train files, test from the test files; train/test sizes",
                    alpha);
    for (int tier = 0, j = 0; tier < 5 && len < (int)size; tier++) {
        int first = j;
        while (j < nc && DIRC_TIER_OF_DECILE[(long)j * 10 / nc] == tier) j++;
        if (j > first)
            len += snprintf(buf + len, size - (size_t)len, "%s %d/%d for clients %d-%d", tier ? "," : "",
                            dirc_size(pool[0], nc, first), dirc_size(pool[1], nc, first), first, j - 1);
    }
}

const char *pfl_partition_describe(const pfl_partition_spec *spec, const pfl_dataset *d_in, int nc, char *buf,
                                   size_t size) {
    char name[32];
    pfl_dataset view = {0};
    int len = snprintf(buf, size, "%s: ", spec_text(spec, name, sizeof name));
    if (partition_view(d_in, spec, &view) || nc < 1 || len < 0 || (size_t)len >= size) return buf;
    const pfl_dataset *d = &view;
    const int f = (int)lround(spec->train_fraction * 100);
    switch (spec->kind) {
    case PFL_PART_IID:
        snprintf(buf + len, size - (size_t)len, "shuffled, dealt in near-equal parts; each client %d/%d train/test",
                 f, 100 - f);
        break;
    case PFL_PART_PAT:
        snprintf(buf + len, size - (size_t)len,
                 "PFLlib's pathological split: %d classes per client, unbalanced sizes; each client %d/%d train/test",
                 spec->classes_per_client, f, 100 - f);
        break;
    case PFL_PART_DIR:
        snprintf(buf + len, size - (size_t)len,
                 "PFLlib's per-class Dirichlet(%g): each class spread over the clients, at least %d samples per "
                 "client; each client %d/%d train/test",
                 spec->alpha, spec->min_samples, f, 100 - f);
        break;
    case PFL_PART_ONELABEL:
        snprintf(buf + len, size - (size_t)len,
                 "one class per client (client j: class j mod %d), %d train + %d test samples each (FedALP)",
                 d->classes, spec->train_per_client, spec->test_per_client);
        break;
    case PFL_PART_SHARDS: {
        long S = (long)spec->shards_per_client * nc, per = d->n / S;
        snprintf(buf + len, size - (size_t)len,
                 "sorted by label, cut into %ld shards of %ld samples, %d dealt to each client at random "
                 "(McMahan et al.); %ld samples unassigned; each client %d/%d train/test",
                 S, per, spec->shards_per_client, d->n - S * per, f, 100 - f);
        break;
    }
    case PFL_PART_DIRC:
        describe_dirc(d, spec->alpha, nc, buf, size, len);
        break;
    case PFL_PART_PFLLIB:
        snprintf(buf + len, size - (size_t)len, "the PFLlib folder's own %d clients, train and test as its files "
                 "hold them", d->own_clients);
        break;
    case PFL_PART_CFR:
        snprintf(buf + len, size - (size_t)len,
                 "Ditto's generator (pFedCFR): client j holds labels (j + t) mod %d, t < %d; sizes lognormal(3, 1) + "
                 "10 scaled to the %d train-file samples, split over its labels by lognormal(1, 1); test = train / "
                 "%.3g from the test files (+1 per label); a class that runs out starts over",
                 d->classes, spec->classes_per_client, d->from_train_files,
                 d->n > d->from_train_files ? (double)d->from_train_files / (d->n - d->from_train_files) : 0.0);
        break;
    }
    return buf;
}
