/* --data pfllib:DIR (data.h, "PFLlib folders"): a folder PFLlib's
 * generators wrote, read into one dataset that keeps its clients.
 *
 * config.json first (jansson), then client after client its train file and
 * its test file (npz.c, pickle.c), each checked against the first file
 * (the same kind of sample and the same shape), against config.json (labels
 * below num_classes, and each client's label counts, train and test
 * together, equal to the statistics PFLlib recorded there), and appended to
 * the dataset; the clients' counts go to own_counts. Any refusal frees what
 * was read: nothing is half-loaded. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "data/data.h"
#include "util/err.h"
#include "util/safe_write.h" /* pfl_read_open: regular files only */

#define WHAT "pfllib"
enum { MAX_CLASSES = 256, MAX_CLIENTS = 10000000 };

typedef struct {
    const char *dir;
    char config[4096];
    int clients, classes;   /* classes 0: config.json does not say (older PFLlib) */
    json_t *stats;          /* "Size of samples for labels in clients", or NULL */
    char partition[80];     /* config.json's partition, quoted (pfl_quote), for the provenance line */
    pfl_split_record split; /* what config.json says of the split, for a re-export */
} folder_config;

static int json_flag(const json_t *v) { return json_is_boolean(v) ? json_is_true(v) : -1; }

/* What config.json records of its split, kept as it is (printable strings only). */
static void keep_split(folder_config *f, const json_t *root) {
    pfl_split_record *s = &f->split;
    const json_t *part = json_object_get(root, "partition"), *alpha = json_object_get(root, "alpha");
    s->partition[0] = 0;
    s->partition_null = json_is_null(part);
    if (json_is_string(part) && json_string_length(part) < sizeof s->partition) {
        const char *t = json_string_value(part);
        bool printable = true;
        for (const char *c = t; *c; c++) printable &= *c >= 0x20 && *c < 0x7f;
        if (printable) snprintf(s->partition, sizeof s->partition, "%s", t);
    }
    s->alpha = json_is_number(alpha) ? json_number_value(alpha) : NAN;
    s->non_iid = json_flag(json_object_get(root, "non_iid"));
    s->balance = json_flag(json_object_get(root, "balance"));
}

/* What the first file decided, and the samples so far. */
typedef struct {
    bool text;
    int c, h, w;            /* an image's shape; text: 1 x 1 x row length */
    char first[4200];       /* the file that decided them */
    long long n, cap;       /* samples appended, and room */
    float *features;        /* n x c*h*w (images) */
    uint8_t *labels;
    pfl_text *t;            /* text */
    long long tokens_cap;
    int max_label;
    long counts[MAX_CLASSES]; /* the current client's samples of each class */
} folder_data;

/* ---- config.json ---- */

static int config_int(const folder_config *f, json_t *root, const char *key, int lo, int hi, int *out) {
    json_t *v = json_object_get(root, key);
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return pfl_err(WHAT ": %s: %s: %s, expected a whole number from %d to %d", f->config, key,
                       v ? "out of range or not a whole number" : "missing", lo, hi);
    *out = (int)json_integer_value(v);
    return 0;
}

static int read_config(folder_config *f, const char *dir) {
    memset(f, 0, sizeof *f);
    f->dir = dir;
    if (snprintf(f->config, sizeof f->config, "%s/config.json", dir) >= (int)sizeof f->config)
        return pfl_err(WHAT ": %s: path too long", dir);
    FILE *file = pfl_read_open(f->config); /* a FIFO there is refused, not waited on */
    if (!file) {
        char why[600];
        snprintf(why, sizeof why, "%s", pfl_errmsg());
        return pfl_err(WHAT ": %s (a PFLlib folder holds config.json, train/ and test/)", why);
    }
    json_error_t e;
    json_t *root = json_loadf(file, JSON_REJECT_DUPLICATES, &e);
    fclose(file);
    if (!root) { /* jansson's text quotes the bytes near the fault: a UTF-8 letter, or worse */
        char text[4 * JSON_ERROR_TEXT_LENGTH + 4];
        return pfl_err(WHAT ": %s: %s (line %d)", f->config,
                       pfl_quote(text, sizeof text, e.text, strlen(e.text), JSON_ERROR_TEXT_LENGTH), e.line);
    }
    int rc = -1;
    if (!json_is_object(root)) {
        pfl_err(WHAT ": %s: not a JSON object", f->config);
        goto done;
    }
    if (config_int(f, root, "num_clients", 1, MAX_CLIENTS, &f->clients)) goto done;
    json_t *classes = json_object_get(root, "num_classes");
    if (json_is_integer(classes) && json_integer_value(classes) > MAX_CLASSES) {
        pfl_err(WHAT ": %s: num_classes %lld: pfl holds labels in a byte, at most %d classes", f->config,
                (long long)json_integer_value(classes), MAX_CLASSES);
        goto done;
    }
    if (classes && config_int(f, root, "num_classes", 1, MAX_CLASSES, &f->classes)) goto done;
    json_t *part = json_object_get(root, "partition");
    if (json_is_string(part)) /* printed on the provenance line: it stays one line */
        pfl_quote(f->partition, sizeof f->partition, json_string_value(part), json_string_length(part), 16);
    else
        snprintf(f->partition, sizeof f->partition, "%s", part ? "none (iid)" : "not recorded");
    keep_split(f, root);
    json_t *stats = json_object_get(root, "Size of samples for labels in clients");
    if (stats && (!json_is_array(stats) || json_array_size(stats) != (size_t)f->clients)) {
        pfl_err(WHAT ": %s: \"Size of samples for labels in clients\": expected one list per client (%d)", f->config,
                f->clients);
        goto done;
    }
    f->stats = stats ? json_incref(stats) : NULL;
    rc = 0;
done:
    json_decref(root);
    return rc;
}

/* The label counts config.json recorded for a client must be the ones its
 * files hold (train and test together, as PFLlib counts them before its
 * split): files from another generation, or changed, are refused. */
static int check_stats(const folder_config *f, const folder_data *fd, int client, const char *test_path) {
    if (!f->stats) return 0;
    json_t *list = json_array_get(f->stats, (size_t)client);
    long listed[MAX_CLASSES] = {0};
    size_t k;
    json_t *pair;
    if (!json_is_array(list))
        return pfl_err(WHAT ": %s: \"Size of samples for labels in clients\": client %d: not a list", f->config, client);
    json_array_foreach(list, k, pair) {
        json_t *label = json_array_get(pair, 0), *count = json_array_get(pair, 1);
        if (json_array_size(pair) != 2 || !json_is_integer(label) || !json_is_integer(count) ||
            json_integer_value(label) < 0 || json_integer_value(label) >= MAX_CLASSES || json_integer_value(count) < 0)
            return pfl_err(WHAT ": %s: \"Size of samples for labels in clients\": client %d: entry %zu is not "
                           "[label, count]",
                           f->config, client, k);
        long *sum = &listed[json_integer_value(label)];
        if (json_integer_value(count) > INT_MAX - *sum) /* beyond any client pfl can hold, and no overflow */
            return pfl_err(WHAT ": %s: \"Size of samples for labels in clients\": client %d: label %lld: more than "
                           "%d samples",
                           f->config, client, (long long)json_integer_value(label), INT_MAX);
        *sum += (long)json_integer_value(count);
    }
    for (int c = 0; c < MAX_CLASSES; c++)
        if (listed[c] != fd->counts[c])
            return pfl_err(WHAT ": %s: y: client %d holds %ld samples of label %d in its train and test files, "
                           "config.json's statistics say %ld",
                           test_path, client, fd->counts[c], c, listed[c]);
    return 0;
}

/* ---- one client's file ---- */

static bool is_integer(pfl_npy_type t) { return t == PFL_NPY_I8 || t == PFL_NPY_I4 || t == PFL_NPY_U1; }

static const char *type_name(pfl_npy_type t) {
    static const char *const names[] = {"float32", "float64", "int64", "int32", "uint8"};
    return names[t];
}

/* Element k of an array, as a double (exact for every label and token). */
static double element(const pfl_npy_array *a, long long k) {
    const uint8_t *p = a->data;
    switch (a->type) {
    case PFL_NPY_F4: { float v; memcpy(&v, p + 4 * k, 4); return v; }
    case PFL_NPY_F8: { double v; memcpy(&v, p + 8 * k, 8); return v; }
    case PFL_NPY_I8: { int64_t v; memcpy(&v, p + 8 * k, 8); return (double)v; }
    case PFL_NPY_I4: { int32_t v; memcpy(&v, p + 4 * k, 4); return v; }
    case PFL_NPY_U1: return p[k];
    }
    return NAN;
}

/* The kind and shape of a file's samples: images (x numeric, 2 to 4
 * dimensions, not integer pairs of rows) or text (rows of token ids). */
static int sample_shape(const char *path, const pfl_npz_xy *xy, bool *text, int *c, int *h, int *w, long long *n) {
    if (xy->x.ndim == 0) { /* an object array of (tokens, length) rows */
        *text = true, *n = xy->rows;
        *c = *h = 1;
        if (xy->row_len < 1 || xy->row_len > INT_MAX) return pfl_err(WHAT ": %s: x: rows of %lld tokens", path, xy->row_len);
        *w = (int)xy->row_len;
        return 0;
    }
    const pfl_npy_array *x = &xy->x;
    *n = x->shape[0];
    *text = x->ndim == 2 && is_integer(x->type); /* token ids, as PFLlib's Shakespeare */
    if (x->ndim < 2)
        return pfl_err(WHAT ": %s: x: %d dimension(s), expected samples x features (2 to 4)", path, x->ndim);
    long long dims[3] = {1, 1, 1}, size = 1;
    for (int k = 1; k < x->ndim; k++) dims[3 - x->ndim + k] = x->shape[k];
    for (int k = 0; k < 3; k++) {
        if (dims[k] < 1 || dims[k] > INT_MAX / 4 / size)
            return pfl_err(WHAT ": %s: x: a sample of %lld x %lld x %lld values", path, dims[0], dims[1], dims[2]);
        size *= dims[k];
    }
    *c = (int)dims[0], *h = (int)dims[1], *w = (int)dims[2];
    return 0;
}

/* Makes room for `more` samples of `size` values each. */
static int reserve(folder_data *fd, long long more, long long size) {
    if (fd->n + more > INT_MAX) return pfl_err(WHAT ": more than %d samples in all", INT_MAX);
    if (fd->n + more <= fd->cap) return 0;
    long long cap = fd->cap ? fd->cap : 1024;
    while (cap < fd->n + more) cap *= 2;
    uint8_t *labels = realloc(fd->labels, (size_t)cap);
    if (!labels) return pfl_err(WHAT ": out of memory for %lld labels", cap);
    fd->labels = labels;
    if (!fd->text) {
        float *f = realloc(fd->features, sizeof(float) * (size_t)cap * (size_t)size);
        if (!f) return pfl_err(WHAT ": out of memory for %lld samples of %lld values", cap, size);
        fd->features = f;
    } else {
        long long *offsets = realloc(fd->t->offsets, sizeof(long long) * (size_t)(cap + 1));
        if (!offsets) return pfl_err(WHAT ": out of memory for %lld rows", cap);
        fd->t->offsets = offsets;
    }
    fd->cap = cap;
    return 0;
}

static int append_labels(const folder_config *f, folder_data *fd, const char *path, const pfl_npy_array *y) {
    for (long long k = 0; k < y->count; k++) {
        const double v = element(y, k);
        const int most = f->classes ? f->classes : MAX_CLASSES;
        if (!(v >= 0 && v < most)) {
            if (f->classes) return pfl_err(WHAT ": %s: y: label %.0f at sample %lld is outside num_classes %d (config.json)", path, v, k, f->classes);
            return pfl_err(WHAT ": %s: y: label %.0f at sample %lld is outside 0..%d (pfl holds labels in a byte)", path, v, k, MAX_CLASSES - 1);
        }
        fd->labels[fd->n + k] = (uint8_t)v;
        fd->counts[(int)v]++;
        if ((int)v > fd->max_label) fd->max_label = (int)v;
    }
    return 0;
}

static int append_features(folder_data *fd, const char *path, const pfl_npy_array *x) {
    float *out = fd->features + (size_t)fd->n * (size_t)fd->c * (size_t)fd->h * (size_t)fd->w;
    for (long long k = 0; k < x->count; k++) {
        const double v = element(x, k);
        out[k] = (float)v; /* float64 rounds to nearest, as torch.Tensor(x).type(torch.float32) */
        if (!isfinite(out[k])) {
            const long long s = (long long)fd->c * fd->h * fd->w;
            return pfl_err(WHAT ": %s: x: %s at sample %lld, value %lld", path,
                           isnan(v) ? "NaN" : isinf(v) ? "an infinity" : "a number beyond float32's range", k / s, k % s);
        }
    }
    return 0;
}

/* Token ids: rows of one length, each id below 2^24 (exact as a float). */
static int append_tokens(folder_data *fd, const char *path, const pfl_npz_xy *xy, long long rows) {
    const long long len = fd->w, need = fd->t->offsets[fd->n] + rows * len;
    if (need > fd->tokens_cap) {
        long long cap = fd->tokens_cap ? fd->tokens_cap : 4096;
        while (cap < need) cap *= 2;
        int32_t *t = realloc(fd->t->tokens, sizeof(int32_t) * (size_t)cap);
        if (!t) return pfl_err(WHAT ": out of memory for %lld tokens", cap);
        fd->t->tokens = t, fd->tokens_cap = cap;
    }
    int32_t *out = fd->t->tokens + fd->t->offsets[fd->n];
    for (long long r = 0; r < rows; r++) {
        for (long long j = 0; j < len; j++) {
            const double id = xy->tokens ? (double)xy->tokens[r * len + j] : element(&xy->x, r * len + j);
            if (!(id >= 0 && id < PFL_TEXT_MAX_VOCAB))
                return pfl_err(WHAT ": %s: x: token id %.0f in row %lld is outside 0..%d", path, id, r, PFL_TEXT_MAX_VOCAB - 1);
            out[r * len + j] = (int32_t)id;
        }
        if (xy->lengths && (xy->lengths[r] < 0 || xy->lengths[r] > len))
            return pfl_err(WHAT ": %s: x: row %lld names length %lld, its row holds %lld tokens", path, r,
                           (long long)xy->lengths[r], len);
        fd->t->offsets[fd->n + r + 1] = fd->t->offsets[fd->n + r] + len;
    }
    return 0;
}

/* What a file's samples are, in words: "text rows of 8 tokens", "images of
 * 1x28x28", "vectors of 60 values". */
static const char *samples_in_words(char *buf, size_t size, bool text, int c, int h, int w) {
    if (text) snprintf(buf, size, "text rows of %d tokens", w);
    else if (c == 1 && h == 1) snprintf(buf, size, "vectors of %d values", w);
    else snprintf(buf, size, "images of %dx%dx%d (channels x height x width)", c, h, w);
    return buf;
}

/* Reads DIR/split/<client>.npz and appends its samples; *count gets how many. */
static int read_client_file(const folder_config *f, folder_data *fd, int client, const char *split, int *count,
                            char *path, size_t path_size) {
    if (snprintf(path, path_size, "%s/%s/%d.npz", f->dir, split, client) >= (int)path_size)
        return pfl_err(WHAT ": %s: path too long", f->dir);
    pfl_npz_xy xy;
    if (pfl_npz_read_xy(path, WHAT, &xy)) return -1;
    int rc = -1, c = 0, h = 0, w = 0;
    bool text = false;
    long long n = 0;
    if (sample_shape(path, &xy, &text, &c, &h, &w, &n)) goto done;
    if (xy.y.ndim != 1 || !is_integer(xy.y.type)) {
        pfl_err(WHAT ": %s: y: %s of %d dimension(s), expected one integer label per sample", path,
                type_name(xy.y.type), xy.y.ndim);
        goto done;
    }
    if (xy.y.count != n) {
        pfl_err(WHAT ": %s: y: %lld labels for x's %lld samples", path, xy.y.count, n);
        goto done;
    }
    if (n < 1) {
        pfl_err(WHAT ": %s: x: no samples (every client needs train and test samples)", path);
        goto done;
    }
    if (fd->c == 0) { /* the first file decides */
        fd->text = text, fd->c = c, fd->h = h, fd->w = w;
        snprintf(fd->first, sizeof fd->first, "%s", path);
        if (text && (!(fd->t = pfl_calloc(1, sizeof *fd->t)) || !(fd->t->offsets = pfl_calloc(1, sizeof(long long)))))
            goto done;
    } else if (text != fd->text || c != fd->c || h != fd->h || w != fd->w) {
        /* both files named: the odd one may be the first */
        char these[96], first[96];
        pfl_err(WHAT ": %s: x: %s, where %s (the first file read) holds %s", path,
                samples_in_words(these, sizeof these, text, c, h, w), fd->first,
                samples_in_words(first, sizeof first, fd->text, fd->c, fd->h, fd->w));
        goto done;
    }
    if (reserve(fd, n, (long long)c * h * w) || append_labels(f, fd, path, &xy.y) ||
        (text ? append_tokens(fd, path, &xy, n) : append_features(fd, path, &xy.x)))
        goto done;
    fd->n += n;
    *count = (int)n;
    rc = 0;
done:
    pfl_npz_xy_free(&xy);
    return rc;
}

/* ---- the folder ---- */

static void free_folder(folder_data *fd) {
    free(fd->features);
    free(fd->labels);
    pfl_text_free(fd->t);
}

static int read_clients(const folder_config *f, folder_data *fd, int *own_counts) {
    char train[4200], test[4200];
    for (int j = 0; j < f->clients; j++) {
        memset(fd->counts, 0, sizeof fd->counts);
        if (read_client_file(f, fd, j, "train", &own_counts[2 * j], train, sizeof train) ||
            read_client_file(f, fd, j, "test", &own_counts[2 * j + 1], test, sizeof test) ||
            check_stats(f, fd, j, test))
            return -1;
    }
    return 0;
}

/* The folder's name (its last component) as the dataset's name. */
static void name_of(char *name, size_t size, const char *dir) {
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') len--;
    size_t start = len;
    while (start > 0 && dir[start - 1] != '/') start--;
    snprintf(name, size, "%.*s", (int)(len - start), dir + start);
}

int pfl_pfllib_clients(const char *dir, int *clients) {
    folder_config f;
    const int rc = read_config(&f, dir);
    json_decref(f.stats);
    if (rc == 0) *clients = f.clients;
    return rc;
}

int pfl_pfllib_load(pfl_dataset *d, const char *dir) {
    folder_config f;
    folder_data fd = {.max_label = -1};
    if (read_config(&f, dir)) return -1;
    int *own_counts = pfl_calloc((size_t)f.clients * 2, sizeof(int));
    int rc = -1;
    if (!own_counts || read_clients(&f, &fd, own_counts)) goto done;
    memset(d, 0, sizeof *d);
    name_of(d->name, sizeof d->name, dir);
    d->n = (int)fd.n, d->c = fd.c, d->h = fd.h, d->w = fd.w;
    d->classes = f.classes ? f.classes : fd.max_label + 1;
    d->labels = fd.labels, d->features = fd.features, d->text = fd.t;
    d->own_clients = f.clients, d->own_counts = own_counts, d->own_split = f.split;
    if (d->text) d->text->max_len = fd.w, d->text->given_ids = 1;
    snprintf(d->provenance, sizeof d->provenance, "a PFLlib folder: %d clients, %d classes%s, partition %s (config.json)",
             f.clients, d->classes, f.classes ? "" : " (the largest label + 1: config.json has no num_classes)",
             f.partition);
    fd.labels = NULL, fd.features = NULL, fd.t = NULL, own_counts = NULL;
    rc = 0;
done:
    free_folder(&fd);
    free(own_counts);
    json_decref(f.stats);
    return rc;
}
