/* CIFAR-100 binary version reader and loader.
 *
 * cifar-100-binary/train.bin (50000 records) and test.bin (10000) are plain
 * sequences of 3074-byte records: the coarse label (superclass, < 20), the
 * fine label (class, < 100), then 1024 red, 1024 green and 1024 blue bytes
 * (row-major 32x32), already the CHW layout pfl keeps in memory. Both labels
 * are range-checked whichever one is kept. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/data.h"
#include "util/err.h"
#include "util/safe_write.h" /* pfl_read_open: regular files only */

enum { C100_PIXELS = 3072, C100_RECORD = 2 + C100_PIXELS, C100_SIDE = 32, C100_FINE = 100, C100_COARSE = 20 };

static const char *const c100_files[2] = {"train.bin", "test.bin"};

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* Record count from the file size, which must be a positive multiple of 3074. */
static int c100_records(const char *path, long long *records) {
    const char *file = base_name(path);
    struct stat st;
    if (stat(path, &st) != 0) return pfl_err("cifar100: %s: cannot open: %s", path, strerror(errno));
    long long size = (long long)st.st_size;
    if (size <= 0) return pfl_err("cifar100: %s: empty file", file);
    if (size % C100_RECORD)
        return pfl_err("cifar100: %s: size %lld is not a multiple of %d (truncated or not CIFAR-100 binary)", file,
                       size, C100_RECORD);
    *records = size / C100_RECORD;
    return 0;
}

int pfl_cifar100_read(const char *path, int coarse, uint8_t *pixels, uint8_t *labels, int *n, int capacity) {
    const char *file = base_name(path);
    long long records = 0;
    if (c100_records(path, &records) < 0) return -1;
    if (*n < 0 || records > (long long)capacity - *n)
        return pfl_err("cifar100: %s: %lld records do not fit: %d of %d places already used", file, records, *n,
                       capacity);
    errno = 0;
    FILE *f = pfl_read_open(path); /* a FIFO or a device there is refused, not waited on */
    if (!f) return pfl_err_prefix("cifar100");
    unsigned char rec[C100_RECORD];
    uint8_t *px = pixels + (size_t)*n * C100_PIXELS, *lab = labels + *n;
    int rc = 0;
    for (long long r = 0; r < records && rc == 0; r++) {
        if (fread(rec, 1, C100_RECORD, f) != C100_RECORD) {
            rc = ferror(f) ? pfl_err("cifar100: %s: read error: %s", file, strerror(errno))
                           : pfl_err("cifar100: %s: truncated: expected %lld records, got %lld", file, records, r);
        } else if (rec[0] >= C100_COARSE) {
            rc = pfl_err("cifar100: %s: coarse label %d out of range (%d classes) at record %lld", file, rec[0],
                         C100_COARSE, r);
        } else if (rec[1] >= C100_FINE) {
            rc = pfl_err("cifar100: %s: fine label %d out of range (%d classes) at record %lld", file, rec[1],
                         C100_FINE, r);
        } else {
            lab[r] = coarse ? rec[0] : rec[1];
            memcpy(px + (size_t)r * C100_PIXELS, rec + 2, C100_PIXELS);
        }
    }
    if (rc == 0 && fgetc(f) != EOF) rc = pfl_err("cifar100: %s: trailing data after %lld records", file, records);
    fclose(f);
    if (rc == 0) *n += (int)records;
    return rc;
}

/* DIR/cifar100/ or, as the official tarball unpacks, DIR/cifar100/cifar-100-binary/. */
static int find_c100_dir(char *out, size_t size, const char *dir) {
    char probe[4096], probe2[4096];
    int len = snprintf(out, size, "%s/cifar100", dir);
    int plen = snprintf(probe, sizeof probe, "%s/cifar100/%s", dir, c100_files[0]);
    if (len < 0 || (size_t)len >= size || plen < 0 || (size_t)plen >= sizeof probe)
        return pfl_err("data path too long: %s/cifar100", dir);
    if (file_exists(probe)) return 0;
    len = snprintf(out, size, "%s/cifar100/cifar-100-binary", dir);
    plen = snprintf(probe2, sizeof probe2, "%s/cifar100/cifar-100-binary/%s", dir, c100_files[0]);
    if (len < 0 || (size_t)len >= size || plen < 0 || (size_t)plen >= sizeof probe2)
        return pfl_err("data path too long: %s/cifar100", dir);
    if (file_exists(probe2)) return 0;
    return pfl_err("cifar100: cannot find %s (nor %s); unpack the CIFAR-100 binary tarball into %s/cifar100/", probe,
                   probe2, dir);
}

int pfl_cifar100_load(pfl_dataset *d, const char *dir, int coarse) {
    char cdir[4096], path[4200];
    long long total = 0, records = 0;
    if (find_c100_dir(cdir, sizeof cdir, dir) < 0) return -1;
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", cdir, c100_files[i]);
        if (c100_records(path, &records) < 0) return -1;
        total += records;
    }
    if (total > INT_MAX / C100_PIXELS) return pfl_err("cifar100: implausible total of %lld records in %s", total, cdir);
    int capacity = (int)total, n = 0, from_train = 0;
    uint8_t *pixels = pfl_malloc((size_t)capacity * C100_PIXELS);
    uint8_t *labels = pfl_malloc((size_t)capacity);
    if (!pixels || !labels) goto fail;
    char paths[2][4200];
    for (int i = 0; i < 2; i++) {
        snprintf(paths[i], sizeof paths[i], "%s/%s", cdir, c100_files[i]);
        if (pfl_cifar100_read(paths[i], coarse, pixels, labels, &n, capacity) < 0) goto fail;
        if (i == 0) from_train = n; /* train.bin, then test.bin */
    }
    pfl_known_files(d, "cifar100", (const char *const[]){paths[0], paths[1]}, 2);
    d->pixels = pixels;
    d->labels = labels;
    d->n = n;
    d->from_train_files = from_train;
    d->c = 3;
    d->h = d->w = C100_SIDE;
    d->classes = coarse ? C100_COARSE : C100_FINE;
    return 0;
fail:
    free(pixels);
    free(labels);
    return -1;
}
