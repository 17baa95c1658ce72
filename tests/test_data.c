/* Data loaders: IDX (raw and gzip'd), CIFAR-10 batches, pfl_dataset_load and
 * gather. Small files in the exact formats are written to a temporary
 * directory, then corrupted variants check that each error names its file. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "check.h"
#include "real_data.h" /* test_real */
#include "data/data.h"
#include "util/err.h"

static char tmpdir[256];

/* ---- writing files ---- */

static void put_be32(unsigned char *b, uint32_t v) {
    b[0] = (unsigned char)(v >> 24);
    b[1] = (unsigned char)(v >> 16);
    b[2] = (unsigned char)(v >> 8);
    b[3] = (unsigned char)v;
}

static void write_bytes(const char *path, const void *data, size_t len, int gz) {
    if (gz) {
        gzFile f = gzopen(path, "wb");
        if (!f) {
            perror(path);
            exit(2);
        }
        if (len) gzwrite(f, data, (unsigned)len);
        gzclose(f);
        return;
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(2);
    }
    if (len) fwrite(data, 1, len, f);
    fclose(f);
}

/* An IDX file: header (magic, dims) then `payload` bytes of which the first
 * `payload_len` are written (so callers can truncate or pad). Pixel/label
 * byte i is (i * 7 + seed) % mod. */
typedef struct {
    uint32_t magic;
    int ndims;
    uint32_t dims[3];
    long payload_len; /* bytes of payload actually written */
    int mod, seed;
    int header_len;   /* -1: full header; else write only this many header bytes */
} idx_spec;

static void write_idx(const char *path, const idx_spec *s, int gz) {
    size_t hlen = 4 + 4 * (size_t)s->ndims;
    unsigned char *buf = malloc(hlen + (size_t)s->payload_len + 1);
    put_be32(buf, s->magic);
    for (int i = 0; i < s->ndims; i++) put_be32(buf + 4 + 4 * i, s->dims[i]);
    for (long i = 0; i < s->payload_len; i++) buf[hlen + i] = (unsigned char)((i * 7 + s->seed) % s->mod);
    size_t len = s->header_len >= 0 ? (size_t)s->header_len : hlen + (size_t)s->payload_len;
    write_bytes(path, buf, len, gz);
    free(buf);
}

static idx_spec images_spec(int count, int rows, int cols) {
    idx_spec s = {2051, 3, {(uint32_t)count, (uint32_t)rows, (uint32_t)cols}, (long)count * rows * cols, 256, 0, -1};
    return s;
}

static idx_spec labels_spec(int count) {
    idx_spec s = {2049, 1, {(uint32_t)count, 0, 0}, count, 10, 0, -1};
    return s;
}

static void path_of(char *out, size_t size, const char *sub, const char *file) {
    snprintf(out, size, "%s/%s%s%s", tmpdir, sub, *sub ? "/" : "", file);
}

static void make_dir(const char *sub) {
    char p[512];
    path_of(p, sizeof p, sub, "");
    mkdir(p, 0755);
}

static int msg_has(const char *a, const char *b) {
    const char *m = pfl_errmsg();
    return strstr(m, a) != NULL && (!b || strstr(m, b) != NULL);
}

/* ---- IDX ---- */

static void test_idx_valid(void) {
    char p[512];
    for (int gz = 0; gz < 2; gz++) {
        path_of(p, sizeof p, "", gz ? "img.gz" : "img");
        write_idx(p, &(idx_spec){2051, 3, {5, 3, 4}, 60, 256, 1, -1}, gz);
        uint8_t *data = NULL;
        int count = 0, rows = 0, cols = 0;
        int rc = pfl_idx_read(p, "t", 2051, &data, &count, &rows, &cols);
        CHECK(rc == 0, "gz=%d: %s", gz, pfl_errmsg());
        CHECK(count == 5 && rows == 3 && cols == 4, "gz=%d: %d %d %d", gz, count, rows, cols);
        int same = data != NULL;
        for (int i = 0; same && i < 60; i++) same = data[i] == (i * 7 + 1) % 256;
        CHECK(same, "gz=%d: payload differs", gz);
        free(data);

        path_of(p, sizeof p, "", gz ? "lab.gz" : "lab");
        write_idx(p, &(idx_spec){2049, 1, {7, 0, 0}, 7, 10, 3, -1}, gz);
        rc = pfl_idx_read(p, "t", 2049, &data, &count, NULL, NULL);
        CHECK(rc == 0 && count == 7 && data && data[0] == 3 && data[6] == (6 * 7 + 3) % 10, "gz=%d labels: %s", gz,
              pfl_errmsg());
        free(data);
    }
}

/* Writes a variant, expects -1 and a message naming the file plus `want`. */
static void expect_idx_error(const char *file, const idx_spec *s, int gz, int magic, const char *want) {
    char p[512];
    path_of(p, sizeof p, "", file);
    write_idx(p, s, gz);
    uint8_t *data = (uint8_t *)p; /* must be reset to NULL on failure */
    int count = -1, rows = -1, cols = -1;
    pfl_err_clear();
    int rc = pfl_idx_read(p, "mnist", magic, &data, &count, &rows, &cols);
    CHECK(rc == -1, "%s: expected failure", file);
    CHECK(data == NULL, "%s: data not reset", file);
    CHECK(msg_has(file, want), "%s: message '%s' lacks '%s'", file, pfl_errmsg(), want);
    CHECK(strncmp(pfl_errmsg(), "mnist: ", 7) == 0, "%s: message '%s' lacks the prefix", file, pfl_errmsg());
}

static void test_idx_errors(void) {
    for (int gz = 0; gz < 2; gz++) {
        idx_spec s = images_spec(4, 5, 6);
        s.magic = 0;
        expect_idx_error(gz ? "magic0.gz" : "magic0", &s, gz, 2051, "expected magic 2051, got 0");
        s = labels_spec(4);
        expect_idx_error(gz ? "labels-as-images.gz" : "labels-as-images", &s, gz, 2051, "expected magic 2051, got 2049");
        s = images_spec(4, 5, 6);
        s.header_len = 10;
        expect_idx_error(gz ? "short-header.gz" : "short-header", &s, gz, 2051, "truncated header");
        s.header_len = 2;
        expect_idx_error(gz ? "tiny.gz" : "tiny", &s, gz, 2051, "truncated header");
        s = images_spec(4, 5, 6);
        s.payload_len = 100;
        expect_idx_error(gz ? "short-payload.gz" : "short-payload", &s, gz, 2051,
                         "truncated: expected 120 bytes of pixels, got 100");
        s.payload_len = 121;
        expect_idx_error(gz ? "trailing.gz" : "trailing", &s, gz, 2051, "trailing");
        s = labels_spec(9);
        s.payload_len = 3;
        expect_idx_error(gz ? "short-labels.gz" : "short-labels", &s, gz, 2049,
                         "truncated: expected 9 bytes of labels, got 3");
        s = images_spec(4, 0, 6);
        expect_idx_error(gz ? "rows0.gz" : "rows0", &s, gz, 2051, "implausible image size");
        s = images_spec(4, 2000, 6);
        s.payload_len = 10;
        expect_idx_error(gz ? "rows2000.gz" : "rows2000", &s, gz, 2051, "implausible image size");
        s = images_spec(0, 5, 6);
        expect_idx_error(gz ? "count0.gz" : "count0", &s, gz, 2051, "implausible item count");
    }
    /* A gzip stream cut in the middle reads as truncated, not as success. */
    char p[512];
    path_of(p, sizeof p, "", "cut.gz");
    write_idx(p, &(idx_spec){2051, 3, {50, 20, 20}, 20000, 251, 0, -1}, 1);
    struct stat st;
    stat(p, &st);
    CHECK(truncate(p, st.st_size / 2) == 0, "truncate");
    uint8_t *data = NULL;
    int count, rows, cols;
    CHECK(pfl_idx_read(p, "mnist", 2051, &data, &count, &rows, &cols) == -1 && data == NULL, "cut gzip accepted");
    CHECK(msg_has("cut.gz", "truncated"), "cut gzip: %s", pfl_errmsg());

    /* damaged compressed data: zlib's reason, without zlib's copy of the whole path */
    write_idx(p, &(idx_spec){2051, 3, {50, 20, 20}, 20000, 251, 0, -1}, 1);
    FILE *f = fopen(p, "r+b");
    fseek(f, 40, SEEK_SET);
    fwrite("\xff\xff\xff\xff\xff\xff\xff\xff", 1, 8, f);
    fclose(f);
    CHECK(pfl_idx_read(p, "mnist", 2051, &data, &count, &rows, &cols) == -1 && msg_has("mnist: cut.gz: read error: ", NULL) &&
              !strstr(pfl_errmsg(), tmpdir),
          "damaged gzip: %s", pfl_errmsg());

    path_of(p, sizeof p, "", "does-not-exist");
    CHECK(pfl_idx_read(p, "mnist", 2051, &data, &count, &rows, &cols) == -1, "missing file accepted");
    CHECK(msg_has("does-not-exist", "cannot open"), "missing: %s", pfl_errmsg());
}

#ifndef __SANITIZE_ADDRESS__
#include <sys/resource.h>
#include <sys/wait.h>

/* A 16-byte header announcing 2000 images of 1024x1024 (2 GiB) is refused
 * before anything is allocated: in a child process whose address space has
 * room for 512 MiB more than it uses, allocating first would fail with "out of
 * memory" instead. (Not under ASan, whose allocator reserves address space
 * of its own; the fuzzing build catches such allocations, scripts/fuzz.sh.) */
static void test_idx_claim_not_allocated(void) {
    char p[512];
    path_of(p, sizeof p, "", "claims-2gib");
    idx_spec s = images_spec(2000, 1024, 1024);
    s.payload_len = 0;
    write_idx(p, &s, 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        long pages = 0;
        FILE *f = fopen("/proc/self/statm", "r");
        if (!f || fscanf(f, "%ld", &pages) != 1) _exit(3);
        fclose(f);
        const rlim_t room = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + (512u << 20);
        struct rlimit rl = {room, room};
        if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(3);
        uint8_t *data = NULL;
        int count, rows, cols;
        int rc = pfl_idx_read(p, "mnist", 2051, &data, &count, &rows, &cols);
        _exit(rc == -1 && msg_has("claims-2gib: truncated: expected 2097152000 bytes of pixels, got 0", NULL) ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "a header's 2 GiB claim was allocated before the file size "
          "was checked (child status %d)", status);
}
#else
static void test_idx_claim_not_allocated(void) { printf("skipped: idx allocation limit (ASan build)\n"); }
#endif

/* ---- MNIST-style dataset directories ---- */

/* Writes DIR/sub/{train,t10k}-{images,labels} with n_train / n_test samples;
 * the test files gzip'd (exercising the .gz fallback). Pixel bytes of image
 * k of the merged order start at value k, so the order can be checked. */
static void write_mnist_dir(const char *sub, int n_train, int n_test) {
    make_dir(sub);
    char p[512];
    const int n[2] = {n_train, n_test};
    const char *pre[2] = {"train", "t10k"};
    for (int t = 0; t < 2; t++) {
        char f[64];
        int gz = t == 1;
        snprintf(f, sizeof f, "%s-images-idx3-ubyte%s", pre[t], gz ? ".gz" : "");
        path_of(p, sizeof p, sub, f);
        size_t len = 16 + (size_t)n[t] * 784;
        unsigned char *buf = malloc(len);
        put_be32(buf, 2051);
        put_be32(buf + 4, (uint32_t)n[t]);
        put_be32(buf + 8, 28);
        put_be32(buf + 12, 28);
        for (int k = 0; k < n[t]; k++)
            for (int j = 0; j < 784; j++) buf[16 + (size_t)k * 784 + j] = (unsigned char)(k + t * n_train + j);
        write_bytes(p, buf, len, gz);
        free(buf);
        snprintf(f, sizeof f, "%s-labels-idx1-ubyte%s", pre[t], gz ? ".gz" : "");
        path_of(p, sizeof p, sub, f);
        idx_spec s = labels_spec(n[t]);
        s.seed = t * n_train; /* label of merged sample k is (7k' + ...) % 10, checked loosely */
        write_idx(p, &s, gz);
    }
}

static void test_mnist_load(void) {
    make_dir("good");
    write_mnist_dir("good/mnist", 5, 3);
    char dir[512];
    path_of(dir, sizeof dir, "good", "");
    dir[strlen(dir) - 1] = '\0';
    pfl_dataset d;
    int rc = pfl_dataset_load(&d, "mnist", dir);
    CHECK(rc == 0, "load: %s", pfl_errmsg());
    if (rc == 0) {
        CHECK(d.n == 8 && d.c == 1 && d.h == 28 && d.w == 28 && d.classes == 10, "shape n=%d %dx%dx%d", d.n, d.c,
              d.h, d.w);
        CHECK(d.from_train_files == 5, "mnist: %d samples from the train files, want 5", d.from_train_files);
        CHECK(strcmp(d.name, "mnist") == 0, "name %s", d.name);
        int order_ok = 1;
        for (int k = 0; k < d.n; k++) order_ok &= d.pixels[(size_t)k * 784] == k;
        CHECK(order_ok, "train samples then test samples");
        CHECK(d.labels[4] == (4 * 7) % 10 && d.labels[5] == 5, "labels %d %d", d.labels[4], d.labels[5]);
        CHECK(pfl_dataset_sample_size(&d) == 784, "sample size");
        pfl_dataset_free(&d);
        CHECK(d.pixels == NULL && d.labels == NULL, "free resets");
    }
}

static void test_mnist_load_errors(void) {
    char dir[512], p[512];
    pfl_dataset d;
    /* Missing directory: names the path tried and the remedy. */
    path_of(dir, sizeof dir, "", "empty");
    make_dir("empty");
    CHECK(pfl_dataset_load(&d, "fmnist", dir) == -1, "missing files accepted");
    CHECK(msg_has("empty/fmnist/train-images-idx3-ubyte", "fetch-data.sh"), "missing: %s", pfl_errmsg());
    CHECK(msg_has("--data-dir", NULL), "missing: %s", pfl_errmsg());
    CHECK(d.pixels == NULL && d.n == 0, "dataset zeroed on failure");

    /* Label out of range in the test labels. */
    make_dir("badlabel");
    write_mnist_dir("badlabel/mnist", 4, 3);
    path_of(p, sizeof p, "badlabel/mnist", "t10k-labels-idx1-ubyte.gz");
    unsigned char lab[8 + 3];
    put_be32(lab, 2049);
    put_be32(lab + 4, 3);
    lab[8] = 1, lab[9] = 12, lab[10] = 0;
    write_bytes(p, lab, sizeof lab, 1);
    path_of(dir, sizeof dir, "", "badlabel");
    CHECK(pfl_dataset_load(&d, "mnist", dir) == -1, "label 12 accepted");
    CHECK(msg_has("mnist: t10k-labels-idx1-ubyte", "label 12 out of range (10 classes)"), "label: %s",
          pfl_errmsg());

    /* Image and label counts disagree. */
    make_dir("mismatch");
    write_mnist_dir("mismatch/mnist", 4, 3);
    path_of(p, sizeof p, "mismatch/mnist", "train-labels-idx1-ubyte");
    write_idx(p, &(idx_spec){2049, 1, {5, 0, 0}, 5, 10, 0, -1}, 0);
    path_of(dir, sizeof dir, "", "mismatch");
    CHECK(pfl_dataset_load(&d, "mnist", dir) == -1, "count mismatch accepted");
    CHECK(msg_has("train-labels-idx1-ubyte", "train-images-idx3-ubyte"), "mismatch: %s", pfl_errmsg());

    /* Wrong image size for MNIST. */
    make_dir("size");
    write_mnist_dir("size/mnist", 4, 3);
    path_of(p, sizeof p, "size/mnist", "train-images-idx3-ubyte");
    write_idx(p, &(idx_spec){2051, 3, {4, 27, 28}, 4 * 27 * 28, 256, 0, -1}, 0);
    path_of(dir, sizeof dir, "", "size");
    CHECK(pfl_dataset_load(&d, "mnist", dir) == -1, "27x28 accepted");
    CHECK(msg_has("train-images-idx3-ubyte", "28x28"), "size: %s", pfl_errmsg());

    /* Corrupt header inside a dataset directory. */
    make_dir("magic");
    write_mnist_dir("magic/mnist", 4, 3);
    path_of(p, sizeof p, "magic/mnist", "train-images-idx3-ubyte");
    write_idx(p, &(idx_spec){0, 3, {4, 28, 28}, 4 * 784, 256, 0, -1}, 0);
    path_of(dir, sizeof dir, "", "magic");
    CHECK(pfl_dataset_load(&d, "mnist", dir) == -1, "magic 0 accepted");
    CHECK(strcmp(pfl_errmsg(), "mnist: train-images-idx3-ubyte: expected magic 2051, got 0") == 0, "magic: %s",
          pfl_errmsg());

    CHECK(pfl_dataset_load(&d, "x", dir) == -1, "unknown name accepted");
    CHECK(strcmp(pfl_errmsg(), "--data: unknown dataset 'x' (choose from mnist, fmnist, cifar10, cifar100, "
                                "cifar100-coarse, svhn, tinyimagenet, agnews, pfllib:DIR (a PFLlib folder))") == 0,
          "name: %s",
          pfl_errmsg());
}

/* ---- CIFAR-10 ---- */

/* `records` records; record r has label (r + seed) % 10 and pixel j = (r + j + seed) % 256. */
static void write_cifar(const char *path, int records, int seed, long extra_bytes, int bad_label_at) {
    size_t len = (size_t)records * 3073 + (size_t)extra_bytes;
    unsigned char *buf = calloc(len + 1, 1);
    for (int r = 0; r < records; r++) {
        unsigned char *rec = buf + (size_t)r * 3073;
        rec[0] = (unsigned char)(r == bad_label_at ? 10 : (r + seed) % 10);
        for (int j = 0; j < 3072; j++) rec[1 + j] = (unsigned char)((r + j + seed) % 256);
    }
    write_bytes(path, buf, len, 0);
    free(buf);
}

static void test_cifar_read(void) {
    char p[512];
    path_of(p, sizeof p, "", "batch.bin");
    write_cifar(p, 3, 4, 0, -1);
    uint8_t *pix = malloc(5 * 3072), lab[5];
    int n = 1;
    int rc = pfl_cifar10_read(p, pix, lab, &n, 5);
    CHECK(rc == 0 && n == 4, "read: rc %d n %d %s", rc, n, pfl_errmsg());
    CHECK(lab[1] == 4 && lab[3] == 6 && pix[3072] == 4 && pix[3 * 3072 + 3071] == (2 + 3071 + 4) % 256,
          "record contents");
    /* Only one more record fits: the second file must not be partly appended. */
    rc = pfl_cifar10_read(p, pix, lab, &n, 5);
    CHECK(rc == -1 && n == 4, "capacity overflow: rc %d n %d", rc, n);
    CHECK(msg_has("batch.bin", "fit"), "capacity: %s", pfl_errmsg());

    path_of(p, sizeof p, "", "partial.bin");
    write_cifar(p, 0, 0, 30000, -1); /* 30000 bytes: 9.76 records */
    n = 0;
    CHECK(pfl_cifar10_read(p, pix, lab, &n, 5) == -1, "odd size accepted");
    CHECK(strcmp(pfl_errmsg(), "cifar10: partial.bin: size 30000 is not a multiple of 3073") == 0, "size: %s",
          pfl_errmsg());

    path_of(p, sizeof p, "", "label10.bin");
    write_cifar(p, 3, 0, 0, 2);
    n = 0;
    CHECK(pfl_cifar10_read(p, pix, lab, &n, 5) == -1 && n == 0, "label 10 accepted");
    CHECK(msg_has("label10.bin", "label 10 out of range"), "label: %s", pfl_errmsg());

    path_of(p, sizeof p, "", "empty.bin");
    write_cifar(p, 0, 0, 0, -1);
    CHECK(pfl_cifar10_read(p, pix, lab, &n, 5) == -1 && msg_has("empty.bin", NULL), "empty: %s", pfl_errmsg());
    path_of(p, sizeof p, "", "nope.bin");
    CHECK(pfl_cifar10_read(p, pix, lab, &n, 5) == -1 && msg_has("nope.bin", "cannot open"), "missing: %s",
          pfl_errmsg());
    free(pix);
}

static const char *const batch_names[6] = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                           "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"};

static void test_cifar_load(void) {
    /* Both layouts: files directly in cifar10/ and under cifar-10-batches-bin/. */
    const char *subs[2] = {"c1/cifar10", "c2/cifar10/cifar-10-batches-bin"};
    const char *roots[2] = {"c1", "c2"};
    make_dir("c1"), make_dir("c1/cifar10"), make_dir("c2"), make_dir("c2/cifar10");
    make_dir("c2/cifar10/cifar-10-batches-bin");
    for (int v = 0; v < 2; v++) {
        char p[512], dir[512];
        for (int i = 0; i < 6; i++) {
            path_of(p, sizeof p, subs[v], batch_names[i]);
            write_cifar(p, 2, i * 2, 0, -1);
        }
        path_of(dir, sizeof dir, "", roots[v]);
        pfl_dataset d;
        int rc = pfl_dataset_load(&d, "cifar10", dir);
        CHECK(rc == 0, "layout %d: %s", v, pfl_errmsg());
        if (rc) continue;
        CHECK(d.n == 12 && d.c == 3 && d.h == 32 && d.w == 32 && d.classes == 10, "shape");
        CHECK(d.from_train_files == 10, "layout %d: %d samples from data_batch_*, want 10", v, d.from_train_files);
        int ok = 1;
        for (int k = 0; k < 12; k++) ok &= d.labels[k] == k % 10 && d.pixels[(size_t)k * 3072] == k;
        CHECK(ok, "layout %d: merged order train batches then test", v);
        pfl_dataset_free(&d);
    }
    /* A bad test batch fails the whole load with its name. */
    char p[512], dir[512];
    path_of(p, sizeof p, subs[1], "test_batch.bin");
    write_cifar(p, 2, 0, 17, -1);
    path_of(dir, sizeof dir, "", "c2");
    pfl_dataset d;
    CHECK(pfl_dataset_load(&d, "cifar10", dir) == -1 && msg_has("test_batch.bin", "multiple of 3073"), "bad: %s",
          pfl_errmsg());
    path_of(dir, sizeof dir, "", "empty");
    CHECK(pfl_dataset_load(&d, "cifar10", dir) == -1 && msg_has("cifar10/data_batch_1.bin", "fetch-data.sh"),
          "missing: %s", pfl_errmsg());
}

/* ---- known files ---- */

static int file_lines(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int n = 0, ch;
    while ((ch = fgetc(f)) != EOF) n += ch == '\n';
    fclose(f);
    return n;
}

/* Files named like MNIST's, with other bytes: each differs from the official
 * one, by size (not hashed) or by md5 (content md5 for a .gz); a cached
 * verdict is used instead of hashing; files changed in the last second are
 * not cached. Then the real data, when fetched. */
static void test_known_files(void) {
    char cache[400], cache_file[500], p[512], gzp[512], small[512];
    snprintf(cache, sizeof cache, "%s/cache", tmpdir);
    snprintf(cache_file, sizeof cache_file, "%s/verified-files", cache);
    setenv("PFL_CACHE_DIR", cache, 1);
    make_dir("known");
    path_of(p, sizeof p, "known", "t10k-labels-idx1-ubyte");
    idx_spec labels = labels_spec(10000); /* 10008 bytes, the official file's size */
    write_idx(p, &labels, 0);
    pfl_dataset d;
    memset(&d, 0, sizeof d);
    const char *one[1] = {p};
    pfl_known_files(&d, "mnist", one, 1);
    CHECK(strstr(d.warning, "mnist: t10k-labels-idx1-ubyte differs from the official file (md5 ") &&
              strstr(d.warning, ", the official one 27ae3e4e09519cfbb04c329615203637)") && !d.provenance[0],
          "same size, other labels: warning '%s', provenance '%s'", d.warning, d.provenance);
    CHECK(file_lines(cache_file) == 0, "a file written this second was cached");
    /* the cache is consulted: a verdict stored for the file's key (known.c's format) is believed */
    struct stat st;
    stat(p, &st);
    FILE *f = fopen(cache_file, "a");
    if (!f) {
        mkdir(cache, 0755);
        f = fopen(cache_file, "a");
    }
    fprintf(f, "%llu %llu %lld %lld.%09ld %lld.%09ld 27ae3e4e09519cfbb04c329615203637\n", (unsigned long long)st.st_dev,
            (unsigned long long)st.st_ino, (long long)st.st_size, (long long)st.st_mtim.tv_sec, (long)st.st_mtim.tv_nsec,
            (long long)st.st_ctim.tv_sec, (long)st.st_ctim.tv_nsec);
    fclose(f);
    pfl_known_files(&d, "mnist", one, 1);
    CHECK(strcmp(d.provenance, "the official files (md5 verified)") == 0 && !d.warning[0],
          "cached verdict not used: provenance '%s', warning '%s'", d.provenance, d.warning);
    /* a .gz is judged by what it decompresses to; a raw file of another size is not hashed */
    path_of(gzp, sizeof gzp, "known", "t10k-labels-idx1-ubyte.gz");
    write_idx(gzp, &labels, 1);
    path_of(small, sizeof small, "known", "train-labels-idx1-ubyte");
    idx_spec five = labels_spec(5);
    write_idx(small, &five, 0);
    const char *two[2] = {small, gzp};
    pfl_known_files(&d, "fmnist", two, 2);
    CHECK(strcmp(d.warning, "fmnist: train-labels-idx1-ubyte differs from the official file (13 bytes, the official "
                            "one 60008); 1 more of its files differ too") == 0,
          "two files: '%s'", d.warning);
    const char *gz_only[1] = {gzp};
    pfl_known_files(&d, "fmnist", gz_only, 1);
    CHECK(strstr(d.warning, "t10k-labels-idx1-ubyte.gz differs from the official file (md5 ") &&
              strstr(d.warning, " uncompressed, the official one 15d484375f8d13e6eb1aabb0c3f46965)"),
          ".gz: '%s'", d.warning);
    /* files pfl does not know: nothing said */
    const char *other[1] = {cache_file};
    pfl_known_files(&d, "mnist", other, 1);
    CHECK(!d.warning[0] && !d.provenance[0], "unknown file: '%s' '%s'", d.warning, d.provenance);

    /* the real files, when fetched: official MNIST and Fashion-MNIST, the project's rebuilt CIFAR-10 */
    const char *dir = getenv("PFL_DATA");
    if (!dir || !*dir) dir = "data";
    const char *names[3] = {"mnist", "fmnist", "cifar10"};
    const char *want[3] = {"the official files (md5 verified)", "the official files (md5 verified)",
                           "the project's rebuilt CIFAR-10, not the official files"};
    for (int i = 0; i < 3; i++) {
        char probe[600];
        snprintf(probe, sizeof probe, "%s/%s", dir, names[i]);
        if (stat(probe, &st) != 0) {
            printf("skipped: known %s files (no %s)\n", names[i], probe);
            continue;
        }
        const int before = file_lines(cache_file);
        int rc = pfl_dataset_load(&d, names[i], dir);
        CHECK(rc == 0 && strncmp(d.provenance, want[i], strlen(want[i])) == 0 && !d.warning[0],
              "real %s: '%s' '%s' %s", names[i], d.provenance, d.warning, rc ? pfl_errmsg() : "");
        if (rc == 0) pfl_dataset_free(&d);
        CHECK(file_lines(cache_file) == before + (i == 2 ? 6 : 4), "real %s: verdicts not cached", names[i]);
    }
    unsetenv("PFL_CACHE_DIR");
}

/* ---- gather ---- */

static void test_gather(void) {
    uint8_t pixels[3 * 4] = {0, 255, 51, 204, 1, 2, 3, 4, 127, 128, 0, 255};
    uint8_t labels[3] = {7, 8, 9};
    pfl_dataset d = {.name = "t", .n = 3, .c = 1, .h = 2, .w = 2, .classes = 10, .pixels = pixels, .labels = labels};
    int idx[2] = {2, 0};
    float x[8];
    uint8_t y[2];
    pfl_dataset_gather(&d, idx, 2, x, y);
    CHECK(y[0] == 9 && y[1] == 7, "labels %d %d", y[0], y[1]);
    CHECK(x[4] == -1.0f && x[5] == 1.0f, "0 -> %g, 255 -> %g", x[4], x[5]);
    CHECK(x[2] == -1.0f && x[3] == 1.0f, "0 -> %g, 255 -> %g", x[2], x[3]);
    CHECK(check_close(x[6], 51 / 127.5 - 1, 1e-6) && check_close(x[7], 204 / 127.5 - 1, 1e-6), "%g %g", x[6], x[7]);
    CHECK(check_close(x[0], (127 / 255.0 - 0.5) / 0.5, 1e-6) && check_close(x[1], (128 / 255.0 - 0.5) / 0.5, 1e-6),
          "%g %g", x[0], x[1]);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/pfl-test-data-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    test_idx_valid();
    test_idx_errors();
    test_idx_claim_not_allocated();
    test_mnist_load();
    test_mnist_load_errors();
    test_cifar_read();
    test_cifar_load();
    test_gather();
    test_known_files();
    test_real("mnist", "mnist", 70000, 10);
    test_real("fmnist", "fmnist", 70000, 10);
    test_real("cifar10", "cifar10", 60000, 10);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    TEST_MAIN_END();
}
