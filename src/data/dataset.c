/* Dataset loading: finds the files of a named dataset under a data
 * directory and merges train then test samples into one array (sample i of
 * the merged array is train sample i for i < n_train, else test sample
 * i - n_train), as PFLlib's generators do before re-splitting per client. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/data.h"
#include "util/err.h"
#include "util/sha256.h" /* pfl_dataset_digest */

const char *const pfl_dataset_names =
    "mnist, fmnist, cifar10, cifar100, cifar100-coarse, svhn, tinyimagenet, agnews, pfllib:DIR (a PFLlib folder)";

#define FETCH_HINT "run scripts/fetch-data.sh or pass --data-dir"

enum { IDX_IMAGES = 2051, IDX_LABELS = 2049, MNIST_SIDE = 28, MNIST_CLASSES = 10 };
enum { CIFAR_RECORD = 3073, CIFAR_SIDE = 32, CIFAR_CLASSES = 10, CIFAR_FILES = 6 };

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static int join(char *out, size_t size, const char *a, const char *b, const char *c) {
    int len = snprintf(out, size, "%s/%s%s%s", a, b, c[0] ? "/" : "", c);
    if (len < 0 || (size_t)len >= size) return pfl_err("data path too long: %s/%s/%s", a, b, c);
    return 0;
}

/* ---- MNIST and Fashion-MNIST (IDX files) ---- */

/* Finds DIR/name/file, else DIR/name/file.gz. */
static int find_idx(char *path, size_t size, const char *dir, const char *name, const char *file) {
    if (join(path, size, dir, name, file) < 0) return -1;
    if (file_exists(path)) return 0;
    size_t len = strlen(path);
    if (len + 4 > size) return pfl_err("data path too long: %s", path);
    memcpy(path + len, ".gz", 4);
    if (file_exists(path)) return 0;
    path[len] = '\0';
    return pfl_err("%s: cannot find %s (nor %s.gz); " FETCH_HINT, name, path, path);
}

typedef struct {
    uint8_t *pixels, *labels;
    int n;
    char image_path[4096], label_path[4096];
} idx_part;

/* Reads one images + labels pair ("train" or "t10k") and checks that they
 * agree with each other and with the expected shape and class count. */
static int load_idx_part(idx_part *part, const char *dir, const char *name, const char *prefix) {
    char img_file[64], lab_file[64], path[4096];
    snprintf(img_file, sizeof img_file, "%s-images-idx3-ubyte", prefix);
    snprintf(lab_file, sizeof lab_file, "%s-labels-idx1-ubyte", prefix);
    int n_img = 0, n_lab = 0, rows = 0, cols = 0;
    part->pixels = part->labels = NULL;
    if (find_idx(path, sizeof path, dir, name, img_file) < 0) return -1;
    snprintf(part->image_path, sizeof part->image_path, "%s", path);
    if (pfl_idx_read(path, name, IDX_IMAGES, &part->pixels, &n_img, &rows, &cols) < 0) return -1;
    if (rows != MNIST_SIDE || cols != MNIST_SIDE) {
        pfl_err("%s: %s: expected %dx%d images, got %dx%d", name, img_file, MNIST_SIDE, MNIST_SIDE, rows, cols);
        goto fail;
    }
    if (find_idx(path, sizeof path, dir, name, lab_file) < 0) goto fail;
    snprintf(part->label_path, sizeof part->label_path, "%s", path);
    if (pfl_idx_read(path, name, IDX_LABELS, &part->labels, &n_lab, NULL, NULL) < 0) goto fail;
    if (n_lab != n_img) {
        pfl_err("%s: %s has %d labels but %s has %d images", name, lab_file, n_lab, img_file, n_img);
        goto fail;
    }
    for (int i = 0; i < n_lab; i++)
        if (part->labels[i] >= MNIST_CLASSES) {
            pfl_err("%s: %s: label %d out of range (%d classes) at item %d", name, lab_file, part->labels[i],
                    MNIST_CLASSES, i);
            goto fail;
        }
    part->n = n_img;
    return 0;
fail:
    free(part->pixels);
    free(part->labels);
    part->pixels = part->labels = NULL;
    return -1;
}

/* Appends b's bytes to a's buffer (grown with realloc, so the large train
 * array is not copied a second time when it can be extended in place). */
static uint8_t *append_bytes(uint8_t *a, size_t a_len, const uint8_t *b, size_t b_len) {
    uint8_t *out = realloc(a, a_len + b_len);
    if (!out) {
        pfl_err("out of memory merging %zu + %zu bytes of data", a_len, b_len);
        return NULL;
    }
    memcpy(out + a_len, b, b_len);
    return out;
}

static int load_idx_dataset(pfl_dataset *d, const char *dir, const char *name) {
    idx_part train, test;
    if (load_idx_part(&train, dir, name, "train") < 0) return -1;
    if (load_idx_part(&test, dir, name, "t10k") < 0) {
        free(train.pixels);
        free(train.labels);
        return -1;
    }
    const size_t s = MNIST_SIDE * MNIST_SIDE;
    int rc = -1;
    uint8_t *pixels = append_bytes(train.pixels, (size_t)train.n * s, test.pixels, (size_t)test.n * s);
    if (pixels) train.pixels = pixels; /* ownership moved; realloc freed the old block */
    uint8_t *labels = pixels ? append_bytes(train.labels, (size_t)train.n, test.labels, (size_t)test.n) : NULL;
    if (labels) {
        train.labels = labels;
        d->pixels = pixels;
        d->labels = labels;
        d->n = train.n + test.n;
        d->from_train_files = train.n;
        d->c = 1;
        d->h = d->w = MNIST_SIDE;
        d->classes = MNIST_CLASSES;
        const char *paths[4] = {train.image_path, train.label_path, test.image_path, test.label_path};
        pfl_known_files(d, name, paths, 4);
        rc = 0;
    }
    if (rc < 0) {
        free(train.pixels);
        free(train.labels);
    }
    free(test.pixels);
    free(test.labels);
    return rc;
}

/* ---- CIFAR-10 (binary batches) ---- */

static const char *const cifar_files[CIFAR_FILES] = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                                     "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"};

/* The files sit in DIR/cifar10/ or, as the official tarball unpacks, in
 * DIR/cifar10/cifar-10-batches-bin/. */
static int find_cifar_dir(char *out, size_t size, const char *dir) {
    char probe[4096];
    if (join(out, size, dir, "cifar10", "") < 0) return -1;
    if (join(probe, sizeof probe, out, cifar_files[0], "") < 0) return -1;
    if (file_exists(probe)) return 0;
    if (join(out, size, dir, "cifar10", "cifar-10-batches-bin") < 0) return -1;
    char probe2[4096];
    if (join(probe2, sizeof probe2, out, cifar_files[0], "") < 0) return -1;
    if (file_exists(probe2)) return 0;
    return pfl_err("cifar10: cannot find %s (nor %s); " FETCH_HINT, probe, probe2);
}

/* Sums the records of all files so one allocation holds them all; sizes
 * that are not whole records are reported by the reader itself. */
static int cifar_capacity(const char *cdir, int *capacity) {
    long long total = 0;
    for (int i = 0; i < CIFAR_FILES; i++) {
        char path[4096];
        struct stat st;
        if (join(path, sizeof path, cdir, cifar_files[i], "") < 0) return -1;
        if (stat(path, &st) != 0)
            return pfl_err("cifar10: cannot open %s: %s; " FETCH_HINT, path, strerror(errno));
        total += (long long)st.st_size / CIFAR_RECORD;
    }
    if (total > INT_MAX / (CIFAR_RECORD - 1))
        return pfl_err("cifar10: implausible total of %lld records in %s", total, cdir);
    *capacity = (int)total;
    return 0;
}

static int load_cifar10(pfl_dataset *d, const char *dir) {
    char cdir[4096], path[4096];
    int capacity = 0, n = 0, from_train = 0;
    if (find_cifar_dir(cdir, sizeof cdir, dir) < 0 || cifar_capacity(cdir, &capacity) < 0) return -1;
    uint8_t *pixels = pfl_malloc((size_t)capacity * (CIFAR_RECORD - 1));
    uint8_t *labels = pfl_malloc((size_t)capacity);
    if (!pixels || !labels) goto fail;
    char paths[CIFAR_FILES][4096];
    const char *read[CIFAR_FILES];
    for (int i = 0; i < CIFAR_FILES; i++) {
        if (join(path, sizeof path, cdir, cifar_files[i], "") < 0 ||
            pfl_cifar10_read(path, pixels, labels, &n, capacity) < 0)
            goto fail;
        if (i == CIFAR_FILES - 2) from_train = n; /* data_batch_1..5 read; test_batch is last */
        snprintf(paths[i], sizeof paths[i], "%s", path);
        read[i] = paths[i];
    }
    pfl_known_files(d, "cifar10", read, CIFAR_FILES);
    d->pixels = pixels;
    d->labels = labels;
    d->n = n;
    d->from_train_files = from_train;
    d->c = 3;
    d->h = d->w = CIFAR_SIDE;
    d->classes = CIFAR_CLASSES;
    return 0;
fail:
    free(pixels);
    free(labels);
    return -1;
}

/* ---- public ---- */

int pfl_dataset_load(pfl_dataset *d, const char *name, const char *data_dir) {
    memset(d, 0, sizeof *d);
    if (!data_dir || !*data_dir) data_dir = "data"; /* fetch-data.sh's default */
    int rc;
    if (!name) name = "";
    if (strncmp(name, "pfllib:", 7) == 0) { /* its own name: the folder's */
        if (!name[7]) return pfl_err("--data pfllib:DIR: no folder given");
        if (pfl_pfllib_load(d, name + 7) == 0) return 0;
        memset(d, 0, sizeof *d);
        return -1;
    }
    if (strcmp(name, "mnist") == 0 || strcmp(name, "fmnist") == 0)
        rc = load_idx_dataset(d, data_dir, name);
    else if (strcmp(name, "cifar10") == 0)
        rc = load_cifar10(d, data_dir);
    else if (strcmp(name, "cifar100") == 0 || strcmp(name, "cifar100-coarse") == 0)
        rc = pfl_cifar100_load(d, data_dir, name[8] == '-');
    else if (strcmp(name, "svhn") == 0)
        rc = pfl_svhn_load(d, data_dir);
    else if (strcmp(name, "tinyimagenet") == 0)
        rc = pfl_tinyimagenet_load(d, data_dir);
    else if (strcmp(name, "agnews") == 0)
        rc = pfl_agnews_load(d, data_dir);
    else
        return pfl_err("--data: unknown dataset '%s' (choose from %s)", name, pfl_dataset_names);
    if (rc < 0) {
        memset(d, 0, sizeof *d);
        return -1;
    }
    snprintf(d->name, sizeof d->name, "%s", name);
    return 0;
}

void pfl_dataset_digest(const pfl_dataset *d, uint8_t digest[32]) {
    pfl_sha256 s;
    pfl_sha256_init(&s);
    const int32_t shape[6] = {d->n, d->c, d->h, d->w, d->classes, d->text ? 1 : 0};
    pfl_sha256_update(&s, shape, sizeof shape);
    const size_t n = d->n > 0 ? (size_t)d->n : 0, per = (size_t)d->c * (size_t)d->h * (size_t)d->w;
    if (d->labels) pfl_sha256_update(&s, d->labels, n);
    if (d->features) pfl_sha256_update(&s, d->features, n * per * sizeof(float));
    else if (d->pixels) pfl_sha256_update(&s, d->pixels, n * per);
    if (d->text && d->text->offsets && d->text->tokens) {
        pfl_sha256_update(&s, d->text->offsets, (n + 1) * sizeof(long long));
        pfl_sha256_update(&s, d->text->tokens, (size_t)d->text->offsets[n] * sizeof(int32_t));
    }
    pfl_sha256_final(&s, digest);
}

void pfl_dataset_free(pfl_dataset *d) {
    if (!d) return;
    free(d->pixels);
    free(d->labels);
    free(d->features);
    free(d->own_counts);
    pfl_text_free(d->text);
    memset(d, 0, sizeof *d);
}

void pfl_dataset_gather(const pfl_dataset *d, const int *idx, int n, float *x, uint8_t *y) {
    if (d->text) {
        pfl_text_gather(d, idx, n, x, y); /* token ids, not pixels */
        return;
    }
    const long s = pfl_dataset_sample_size(d);
    if (d->features) { /* a PFLlib folder's samples, normalized by its generator already */
        for (int i = 0; i < n; i++) {
            memcpy(x + (size_t)i * (size_t)s, d->features + (size_t)idx[i] * (size_t)s, sizeof(float) * (size_t)s);
            if (y) y[i] = d->labels[idx[i]];
        }
        return;
    }
    for (int i = 0; i < n; i++) {
        const uint8_t *src = d->pixels + (size_t)idx[i] * (size_t)s;
        float *dst = x + (size_t)i * (size_t)s;
        /* (p/255 - 0.5)/0.5 == (p - 127.5)/127.5; the division (not a
         * multiply by a rounded reciprocal) keeps 0 -> -1 and 255 -> 1 exact,
         * and the loop vectorizes. */
#pragma omp simd
        for (long j = 0; j < s; j++) dst[j] = ((float)src[j] - 127.5f) / 127.5f;
        if (y) y[i] = d->labels[idx[i]];
    }
}
