/* Reading run folders back (results.h): summary.json and metrics.jsonl,
 * of one run or of a run over several seeds, with libjansson. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "run/results.h"
#include "util/err.h"
#include "util/safe_write.h" /* pfl_read_open: regular files only */

struct pfl_run_summary {
    json_t *json;
};

/* A value of key in [lo, hi], a number or a {mean, values} over seeds (each
 * checked), or absent or null; else -1 naming the file and the key: an
 * accuracy of -5 would print as -500.00 %, one of 1e308 as inf. */
static int check_range(const char *path, json_t *j, const char *key, double lo, double hi) {
    json_t *v = json_object_get(j, key);
    if (json_is_object(v)) {
        if (check_range(path, v, "mean", lo, hi)) return -1;
        json_t *values = json_object_get(v, "values"), *x;
        size_t i;
        json_array_foreach(values, i, x) if (json_is_number(x) && !(json_number_value(x) >= lo && json_number_value(x) <= hi))
            return pfl_err("%s: %s: a value %g outside [%g, %g] (not a summary pfl wrote)", path, key, json_number_value(x),
                           lo, hi);
        return 0;
    }
    if (!json_is_number(v)) return 0;
    const double d = json_number_value(v);
    if (d >= lo && d <= hi) return 0;
    return pfl_err("%s: %s %g outside [%g, %g] (not a summary pfl wrote)", path, key, d, lo, hi);
}

/* What pfl table and pfl plot show of a summary, checked before it is shown. */
static int check_summary(const char *path, json_t *j) {
    static const char *const accuracies[] = {"best_local_acc", "final_local_acc", "best_global_acc", "final_global_acc"};
    for (size_t k = 0; k < sizeof accuracies / sizeof accuracies[0]; k++)
        if (check_range(path, j, accuracies[k], 0.0, 1.0)) return -1;
    return check_range(path, j, "seconds_per_round", 0.0, 1e9) || check_range(path, j, "converged_local_round", 0.0, 1e9);
}

pfl_run_summary *pfl_summary_load(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/summary.json", dir);
    json_error_t e;
    FILE *in = pfl_read_open(path); /* a FIFO there is refused, not waited on */
    if (!in) return NULL;
    json_t *j = json_loadf(in, 0, &e);
    fclose(in);
    if (!j || !json_is_object(j)) {
        json_decref(j);
        pfl_err("%s: %s", path, j ? "not a JSON object" : e.text);
        return NULL;
    }
    if (check_summary(path, j)) {
        json_decref(j);
        return NULL;
    }
    pfl_run_summary *s = pfl_malloc(sizeof *s);
    if (!s) {
        json_decref(j);
        return NULL;
    }
    s->json = j;
    return s;
}

void pfl_summary_free(pfl_run_summary *s) {
    if (!s) return;
    json_decref(s->json);
    free(s);
}

pfl_stat pfl_summary_stat(const pfl_run_summary *s, const char *key) {
    pfl_stat st = {NAN, NAN, 0};
    json_t *v = json_object_get(s->json, key);
    if (json_is_number(v)) return (pfl_stat){json_number_value(v), 0.0, 1};
    if (!json_is_object(v)) return st;
    json_t *mean = json_object_get(v, "mean"), *std = json_object_get(v, "std"), *values = json_object_get(v, "values");
    if (!json_is_number(mean)) return st;
    st.mean = json_number_value(mean);
    st.std = json_is_number(std) ? json_number_value(std) : NAN;
    size_t i;
    json_t *x;
    json_array_foreach(values, i, x) st.n += json_is_number(x);
    return st;
}

int pfl_summary_seeds(const pfl_run_summary *s) {
    json_t *seeds = json_object_get(s->json, "seeds");
    return json_is_array(seeds) ? (int)json_array_size(seeds) : 1;
}

int pfl_summary_rounds(const pfl_run_summary *s) {
    json_t *r = json_object_get(s->json, "rounds");
    return json_is_integer(r) ? (int)json_integer_value(r) : -1;
}

const char *pfl_summary_string(const pfl_run_summary *s, const char *key) {
    return json_string_value(json_object_get(s->json, key));
}

/* ---- curves ---- */

static double number_or_nan(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* One metrics.jsonl: its rounds and accuracies, as far as whole lines go. */
int pfl_series_load(pfl_series *s, const char *path) {
    memset(s, 0, sizeof *s);
    FILE *f = pfl_read_open(path);
    if (!f) return -1;
    char *line = NULL;
    size_t cap = 0, room = 0;
    ssize_t len;
    int rc = 0;
    while (rc == 0 && (len = getline(&line, &cap, f)) > 0) {
        if (line[len - 1] != '\n') break; /* a line being written */
        json_error_t e;
        json_t *j = json_loadb(line, (size_t)len, 0, &e);
        json_t *round = json_object_get(j, "round");
        if (!json_is_integer(round)) {
            rc = pfl_err("%s:%d: not a metrics line (%s)", path, s->n + 1, j ? "no round" : e.text);
        } else {
            if ((size_t)s->n == room) {
                room = room ? 2 * room : 256;
                int *r = realloc(s->round, sizeof(int) * room);
                double *l = r ? realloc(s->local, sizeof(double) * room) : NULL;
                double *g = l ? realloc(s->global, sizeof(double) * room) : NULL;
                double *t = g ? realloc(s->loss, sizeof(double) * room) : NULL;
                if (r) s->round = r;
                if (l) s->local = l;
                if (g) s->global = g;
                if (t) s->loss = t;
                if (!t) rc = pfl_err("out of memory");
            }
            if (rc == 0) {
                s->round[s->n] = (int)json_integer_value(round);
                s->local[s->n] = number_or_nan(j, "local_acc");
                s->global[s->n] = number_or_nan(j, "global_acc");
                s->loss[s->n] = number_or_nan(j, "train_loss");
                s->n++;
            }
        }
        json_decref(j);
    }
    free(line);
    fclose(f);
    if (rc == 0 && s->n == 0) rc = pfl_err("%s: no evaluation yet", path);
    return rc;
}

void pfl_series_free(pfl_series *s) {
    free(s->round), free(s->local), free(s->global), free(s->loss);
    memset(s, 0, sizeof *s);
}

static bool is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int seed_of(const char *name) {
    if (strncmp(name, "seed-", 5) || !name[5]) return -1;
    for (const char *c = name + 5; *c; c++)
        if (*c < '0' || *c > '9') return -1;
    return atoi(name + 5);
}

static int by_seed(const void *a, const void *b) {
    const int x = seed_of(*(char *const *)a), y = seed_of(*(char *const *)b);
    return (x > y) - (x < y);
}

char **pfl_run_metrics_files(const char *dir, int *n) {
    char path[4200];
    *n = 0;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    char **files = NULL;
    if (is_file(path)) {
        if ((files = pfl_calloc(1, sizeof(char *))) && (files[0] = strdup(path))) *n = 1;
        return files;
    }
    DIR *d = opendir(dir);
    if (!d) {
        pfl_err("%s: not a run folder (no metrics.jsonl, no seed-N/)", dir);
        return NULL;
    }
    struct dirent *e;
    int room = 0;
    while ((e = readdir(d))) {
        if (seed_of(e->d_name) < 0) continue;
        snprintf(path, sizeof path, "%s/%s/metrics.jsonl", dir, e->d_name);
        if (!is_file(path)) continue;
        if (*n == room) {
            char **grown = realloc(files, sizeof(char *) * (size_t)(room = room ? 2 * room : 16));
            if (!grown) break;
            files = grown;
        }
        if (!(files[*n] = strdup(e->d_name))) break;
        (*n)++;
    }
    closedir(d);
    if (*n == 0) {
        free(files);
        pfl_err("%s: not a run folder (no metrics.jsonl, no seed-N/metrics.jsonl)", dir);
        return NULL;
    }
    qsort(files, (size_t)*n, sizeof(char *), by_seed);
    for (int i = 0; i < *n; i++) {
        snprintf(path, sizeof path, "%s/%s/metrics.jsonl", dir, files[i]);
        free(files[i]);
        files[i] = strdup(path);
    }
    return files;
}

/* Mean, population std, least and largest of xs[0..n) (NAN when any is NAN). */
static void describe(const double *xs, int n, double *mean, double *std, double *lo, double *hi) {
    double sum = 0, sum2 = 0, a = INFINITY, b = -INFINITY;
    for (int i = 0; i < n; i++) {
        sum += xs[i], sum2 += xs[i] * xs[i];
        a = xs[i] < a ? xs[i] : a, b = xs[i] > b ? xs[i] : b;
    }
    *mean = sum / n;
    const double var = sum2 / n - *mean * *mean;
    *std = sqrt(var > 0 ? var : 0);
    *lo = a, *hi = b;
    for (int i = 0; i < n; i++)
        if (isnan(xs[i])) *mean = *std = *lo = *hi = NAN;
}

static int alloc_curve(pfl_curve *c, int n) {
    double **cols[] = {&c->local, &c->local_std, &c->local_min, &c->local_max,
                       &c->global, &c->global_std, &c->global_min, &c->global_max};
    c->round = pfl_malloc(sizeof(int) * (size_t)(n ? n : 1));
    int ok = c->round != NULL;
    for (int k = 0; k < 8; k++) ok &= (*cols[k] = pfl_malloc(sizeof(double) * (size_t)(n ? n : 1))) != NULL;
    return ok ? 0 : -1;
}

/* The index of `round` in s, or -1. */
static int find_round(const pfl_series *s, int round) {
    for (int i = 0; i < s->n; i++)
        if (s->round[i] == round) return i;
    return -1;
}

int pfl_curve_load(pfl_curve *c, const char *dir) {
    memset(c, 0, sizeof *c);
    int files_n, rc = -1;
    char **files = pfl_run_metrics_files(dir, &files_n);
    if (!files) return -1;
    pfl_series *s = pfl_calloc((size_t)files_n, sizeof *s);
    double *lx = pfl_malloc(sizeof(double) * (size_t)files_n), *gx = pfl_malloc(sizeof(double) * (size_t)files_n);
    if (!s || !lx || !gx) goto done;
    for (int i = 0; i < files_n; i++)
        if (pfl_series_load(&s[i], files[i])) goto done;
    if (alloc_curve(c, s[0].n)) goto done;
    c->seeds = files_n;
    for (int i = 0; i < s[0].n; i++) { /* the rounds of the first seed that every seed has */
        int k = 0;
        for (int f = 0; f < files_n; f++) {
            const int at = find_round(&s[f], s[0].round[i]);
            if (at < 0) break;
            lx[f] = s[f].local[at], gx[f] = s[f].global[at], k++;
        }
        if (k < files_n) continue;
        const int j = c->n++;
        c->round[j] = s[0].round[i];
        describe(lx, files_n, &c->local[j], &c->local_std[j], &c->local_min[j], &c->local_max[j]);
        describe(gx, files_n, &c->global[j], &c->global_std[j], &c->global_min[j], &c->global_max[j]);
    }
    rc = 0;
done:
    for (int i = 0; s && i < files_n; i++) pfl_series_free(&s[i]);
    for (int i = 0; i < files_n; i++) free(files[i]);
    free(files), free(s), free(lx), free(gx);
    if (rc) pfl_curve_free(c);
    return rc;
}

void pfl_curve_free(pfl_curve *c) {
    free(c->round);
    free(c->local), free(c->local_std), free(c->local_min), free(c->local_max);
    free(c->global), free(c->global_std), free(c->global_min), free(c->global_max);
    memset(c, 0, sizeof *c);
}
