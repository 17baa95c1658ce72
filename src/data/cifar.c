/* CIFAR-10 binary batch reader.
 *
 * A batch file is a plain sequence of 3073-byte records: one label byte, then
 * 1024 red, 1024 green and 1024 blue bytes (row-major 32x32), which is
 * already the CHW layout pfl keeps in memory. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "data/data.h"
#include "util/err.h"
#include "util/safe_write.h" /* pfl_read_open: regular files only */

enum { CIFAR_PIXELS = 3072, CIFAR_RECORD = 1 + CIFAR_PIXELS, CIFAR_CLASSES = 10 };

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* The size decides the record count, so check it before reading anything. */
static int check_size(FILE *f, const char *file, long long *records) {
    struct stat st;
    if (fstat(fileno(f), &st) != 0) return pfl_err("cifar10: %s: cannot stat: %s", file, strerror(errno));
    long long size = (long long)st.st_size;
    if (size <= 0) return pfl_err("cifar10: %s: empty file", file);
    if (size % CIFAR_RECORD)
        return pfl_err("cifar10: %s: size %lld is not a multiple of %d", file, size, CIFAR_RECORD);
    *records = size / CIFAR_RECORD;
    return 0;
}

/* Reads the records into place; *n is only advanced by the caller once all
 * of them are known to be good. */
static int read_records(FILE *f, const char *file, long long records, uint8_t *pixels, uint8_t *labels) {
    unsigned char rec[CIFAR_RECORD];
    for (long long r = 0; r < records; r++) {
        size_t got = fread(rec, 1, CIFAR_RECORD, f);
        if (got != CIFAR_RECORD) {
            if (ferror(f)) return pfl_err("cifar10: %s: read error: %s", file, strerror(errno));
            return pfl_err("cifar10: %s: truncated: expected %lld records, got %lld", file, records, r);
        }
        if (rec[0] >= CIFAR_CLASSES)
            return pfl_err("cifar10: %s: label %d out of range (%d classes) at record %lld", file, rec[0],
                           CIFAR_CLASSES, r);
        labels[r] = rec[0];
        memcpy(pixels + (size_t)r * CIFAR_PIXELS, rec + 1, CIFAR_PIXELS);
    }
    if (fgetc(f) != EOF) return pfl_err("cifar10: %s: trailing data after %lld records", file, records);
    return 0;
}

int pfl_cifar10_read(const char *path, uint8_t *pixels, uint8_t *labels, int *n, int capacity) {
    const char *file = base_name(path);
    errno = 0;
    FILE *f = pfl_read_open(path); /* a FIFO or a device there is refused, not waited on */
    if (!f) return pfl_err_prefix("cifar10");
    long long records = 0;
    int rc = check_size(f, file, &records);
    if (rc == 0 && (*n < 0 || records > (long long)capacity - *n))
        rc = pfl_err("cifar10: %s: %lld records do not fit: %d of %d places already used", file, records, *n,
                     capacity);
    if (rc == 0)
        rc = read_records(f, file, records, pixels + (size_t)*n * CIFAR_PIXELS, labels + *n);
    fclose(f);
    if (rc == 0) *n += (int)records;
    return rc;
}
