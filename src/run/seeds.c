/* Several seeds (run.h): the seed list of --seeds, and DIR/summary.json
 * over the seeds' own summaries (DIR/seed-N/summary.json): mean and std of
 * what a paper's table reports. experiment.c runs the seeds. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "run/run.h"
#include "util/err.h"
#include "util/json.h"
#include "util/safe_write.h"

/* ---- the list ---- */

/* One number of a seed list at *s (moves *s past it). */
static int seed_number(const char *text, const char **s, uint64_t *v) {
    if (**s < '0' || **s > '9') return pfl_err("--seeds '%s': expected a seed at '%s' (a list such as 1,2,3 or 1-5)", text, *s);
    char *end;
    errno = 0;
    const unsigned long long n = strtoull(*s, &end, 10);
    if (errno || n > 9007199254740992ULL) return pfl_err("--seeds '%s': seed out of range", text);
    *v = (uint64_t)n, *s = end;
    return 0;
}

int pfl_parse_seeds(const char *text, uint64_t **seeds, int *count) {
    uint64_t *list = pfl_malloc(sizeof(uint64_t) * PFL_MAX_SEEDS);
    if (!list) return -1;
    int n = 0;
    const char *s = text;
    for (;;) {
        uint64_t lo = 0, hi;
        if (seed_number(text, &s, &lo)) goto fail;
        hi = lo;
        if (*s == '-') {
            s++;
            if (seed_number(text, &s, &hi)) goto fail;
            if (hi < lo) {
                pfl_err("--seeds '%s': range %llu-%llu runs backwards", text, (unsigned long long)lo,
                        (unsigned long long)hi);
                goto fail;
            }
        }
        for (uint64_t v = lo;; v++) {
            for (int k = 0; k < n; k++)
                if (list[k] == v) {
                    pfl_err("--seeds '%s': seed %llu twice", text, (unsigned long long)v);
                    goto fail;
                }
            if (n == PFL_MAX_SEEDS) {
                pfl_err("--seeds '%s': more than %d seeds", text, PFL_MAX_SEEDS);
                goto fail;
            }
            list[n++] = v;
            if (v == hi) break;
        }
        if (*s == '\0') break;
        if (*s != ',') {
            pfl_err("--seeds '%s': unexpected '%c' (a list such as 1,2,3 or 1-5)", text, *s);
            goto fail;
        }
        s++;
    }
    if (seeds) *seeds = list, *count = n;
    else free(list);
    return 0;
fail:
    free(list);
    return -1;
}

/* ---- the summary over seeds ---- */

/* What summary.json gets a mean and std of: what papers' tables report. */
static const char *const seed_stats[] = {
    "best_local_acc",      "final_local_acc",      "best_global_acc",       "final_global_acc",
    "best_local_round",    "best_global_round",    "converged_local_round", "converged_global_round",
    "final_local_acc_p10", "final_local_acc_min",  "final_local_acc_std",   "seconds_per_round",
    "bytes_down_per_round", "bytes_up_per_round",  "rounds_run",
};
enum { NUM_SEED_STATS = (int)(sizeof seed_stats / sizeof seed_stats[0]) };

static bool is_seed_stat(const char *key) {
    for (int i = 0; i < NUM_SEED_STATS; i++)
        if (!strcmp(key, seed_stats[i])) return true;
    return false;
}

/* {"mean": m, "std": s, "values": [...]} of one key over the seeds' summaries:
 * the population std (numpy's np.std, which PFLlib's result tools print);
 * seeds where the value is null are left out of both (null when all are). */
static void write_stat(FILE *f, const char *key, json_t *const *runs, int n) {
    double sum = 0.0, dev2 = 0.0;
    int counted = 0;
    for (int i = 0; i < n; i++) {
        json_t *v = json_object_get(runs[i], key);
        if (json_is_number(v)) sum += json_number_value(v), counted++;
    }
    const double mean = counted ? sum / counted : NAN;
    /* two passes: sum(x^2)/n - mean^2 cancels badly for byte counts (~1e7), so
     * equal values could come out with a std of a few bytes */
    for (int i = 0; i < n; i++) {
        json_t *v = json_object_get(runs[i], key);
        if (json_is_number(v)) dev2 += (json_number_value(v) - mean) * (json_number_value(v) - mean);
    }
    const double var = counted ? dev2 / counted : NAN;
    fprintf(f, ",\n  \"%s\": {\"mean\": ", key);
    pfl_json_number(f, mean);
    fputs(", \"std\": ", f);
    pfl_json_number(f, counted ? sqrt(var) : NAN);
    fputs(", \"values\": [", f);
    for (int i = 0; i < n; i++) {
        json_t *v = json_object_get(runs[i], key);
        if (i) fputs(", ", f);
        if (json_is_number(v)) pfl_json_number(f, json_number_value(v));
        else fputs("null", f);
    }
    fputs("]}", f);
}

/* The first seed's fields that every seed has with the same value (the
 * configuration: algo, data, rounds, lr, the method's parameters, ...), as
 * they are; not the seed, the fingerprints or the timings. */
static void write_common_fields(FILE *f, json_t *const *runs, int n) {
    const char *key;
    json_t *value;
    json_object_foreach(runs[0], key, value) {
        if (is_seed_stat(key)) continue;
        bool same = true;
        for (int i = 1; i < n && same; i++) same = json_equal(value, json_object_get(runs[i], key));
        if (!same) continue;
        char *text = json_dumps(value, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(10));
        if (!text) continue;
        fprintf(f, ",\n  ");
        pfl_json_string(f, key);
        fprintf(f, ": %s", text);
        free(text);
    }
}

int pfl_seeds_summarize(const char *dir, const uint64_t *seeds, int n) {
    json_t **runs = pfl_calloc((size_t)n, sizeof(json_t *));
    if (!runs) return -1;
    int rc = -1;
    char path[4096];
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/seed-%llu/summary.json", dir, (unsigned long long)seeds[i]);
        json_error_t e;
        FILE *in = pfl_read_open(path); /* a FIFO there is refused, not waited on */
        if (!in) goto done;
        runs[i] = json_loadf(in, 0, &e);
        fclose(in);
        if (!runs[i] || !json_is_object(runs[i])) {
            pfl_err("%s: %s", path, runs[i] ? "not a JSON object" : e.text);
            goto done;
        }
    }
    snprintf(path, sizeof path, "%s/summary.json", dir);
    pfl_atomic_file a;
    if (pfl_atomic_open(&a, path)) goto done;
    fputs("{\n  \"seeds\": [", a.f);
    for (int i = 0; i < n; i++) fprintf(a.f, "%s%llu", i ? ", " : "", (unsigned long long)seeds[i]);
    fputs("],\n  \"runs\": [", a.f);
    for (int i = 0; i < n; i++) fprintf(a.f, "%s\"seed-%llu\"", i ? ", " : "", (unsigned long long)seeds[i]);
    fputc(']', a.f);
    write_common_fields(a.f, runs, n);
    for (int k = 0; k < NUM_SEED_STATS; k++) write_stat(a.f, seed_stats[k], runs, n);
    fputs("\n}\n", a.f);
    rc = pfl_atomic_commit(&a);
done:
    for (int i = 0; i < n; i++) json_decref(runs[i]);
    free(runs);
    return rc;
}
