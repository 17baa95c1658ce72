/* PFLlib folders (data.h): the client files numpy writes as PFLlib's
 * generators do (tests/fixtures/pfllib/, scripts/make_pfllib_fixtures.py:
 * deflated and stored zips, float32 and float64 images, int64, int32 and
 * uint8 labels, AG News's object rows, a protocol-4 pickle), read value
 * for value; folders built of them loaded as one dataset with its own
 * clients; every hostile variant refused in one line naming the file and
 * the field; pfl's own splits written with --export's writer and read
 * back bit for bit; and PFLlib's results file (.h5) read back with libhdf5. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "npz_zip.h"
#include "tiny.h"
#include "data/data.h"
#include "run/results.h"
#include "util/err.h"

#ifndef PFL_NO_HDF5
#include <hdf5.h>
#endif

#define FIXTURES "tests/fixtures/pfllib"

static char tmpdir[256];

static void die(const char *what) {
    perror(what);
    exit(2);
}

static uint8_t *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) die(path);
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) die(path);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void spit(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f || (len && fwrite(data, 1, len, f) != len) || fclose(f)) die(path);
}

/* tmpdir/name, made empty with train/ and test/ in it. */
static void new_folder(char *dir, size_t size, const char *name) {
    snprintf(dir, size, "%s/%s", tmpdir, name);
    char cmd[2000];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s/train' '%s/test'", dir, dir, dir);
    if (system(cmd) != 0) exit(2);
}

static void put_file(const char *dir, const char *rel, const void *data, size_t len) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    spit(path, data, len);
}

static void copy_fixture(const char *dir, const char *rel, const char *fixture) {
    char path[512];
    size_t n;
    snprintf(path, sizeof path, FIXTURES "/%s", fixture);
    uint8_t *b = slurp(path, &n);
    put_file(dir, rel, b, n);
    free(b);
}

static void put_config(const char *dir, const char *json) { put_file(dir, "config.json", json, strlen(json)); }

/* The message is one line, names the file (its path ends with `file`) and holds `what`. */
static int refused(const char *file, const char *what) {
    const char *m = pfl_errmsg();
    return !strchr(m, '\n') && strncmp(m, "pfllib", 6) == 0 && strstr(m, file) && strstr(m, what);
}

/* ---- the fixtures, value for value ---- */

static float image_value(int i, int k) { return (float)(((7 * i + 3 * k) % 17) / 8.0 - 1.0); }

static void check_image(const char *name, pfl_npy_type type, int n, pfl_npy_type ytype, int label_mul, int label_add) {
    char path[256];
    snprintf(path, sizeof path, FIXTURES "/%s", name);
    pfl_npz_xy xy;
    CHECK(pfl_npz_read_xy(path, "pfllib", &xy) == 0, "%s: %s", name, pfl_errmsg());
    CHECK(xy.x.type == type && xy.x.ndim == 4 && xy.x.shape[0] == n && xy.x.shape[1] == 1 && xy.x.shape[2] == 3 &&
              xy.x.shape[3] == 3 && xy.x.count == n * 9,
          "%s: x type %d, %d dims, %lld samples", name, xy.x.type, xy.x.ndim, xy.x.shape[0]);
    CHECK(xy.y.type == ytype && xy.y.ndim == 1 && xy.y.count == n, "%s: y", name);
    int bad = 0;
    for (int i = 0; i < n && xy.x.count == n * 9; i++) {
        for (int k = 0; k < 9; k++) {
            double v;
            if (type == PFL_NPY_F4) {
                float f;
                memcpy(&f, xy.x.data + 4 * (i * 9 + k), 4);
                v = f;
            } else {
                memcpy(&v, xy.x.data + 8 * (i * 9 + k), 8);
            }
            bad += v != image_value(i, k);
        }
        int64_t label = xy.y.data[i]; /* uint8 */
        int32_t label32;
        if (ytype == PFL_NPY_I8) memcpy(&label, xy.y.data + 8 * i, 8);
        if (ytype == PFL_NPY_I4) memcpy(&label32, xy.y.data + 4 * i, 4), label = label32;
        bad += label != (label_mul * i + label_add) % 3;
    }
    CHECK(bad == 0, "%s: %d values differ from the formula", name, bad);
    pfl_npz_xy_free(&xy);
}

static void test_fixtures(void) {
    check_image("img-deflated.npz", PFL_NPY_F4, 6, PFL_NPY_I8, 1, 0);
    check_image("img-stored.npz", PFL_NPY_F8, 4, PFL_NPY_I4, 1, 1);
    check_image("img-protocol4.npz", PFL_NPY_F4, 3, PFL_NPY_U1, 2, 0);
    pfl_npz_xy xy;
    CHECK(pfl_npz_read_xy(FIXTURES "/text.npz", "pfllib", &xy) == 0, "text: %s", pfl_errmsg());
    CHECK(xy.x.ndim == 0 && xy.rows == 5 && xy.row_len == 8 && xy.y.count == 5, "text: %lld rows of %lld", xy.rows,
          xy.row_len);
    int bad = 0;
    for (int r = 0; r < 5 && xy.tokens; r++) {
        const int words = 2 + r % 3;
        for (int j = 0; j < 8; j++) {
            const int64_t want = j == 0 ? 1 : j <= words ? 4 + (5 * r + j - 1) % 40 : 0;
            bad += xy.tokens[r * 8 + j] != want;
        }
        bad += xy.lengths[r] != words + 1;
    }
    CHECK(bad == 0, "text: %d tokens or lengths differ from the formula", bad);
    pfl_npz_xy_free(&xy);
}

/* ---- folders ---- */

/* Two clients: client 0 trains on the deflated file and tests on the
 * stored one, client 1 trains on the protocol-4 file and tests on the
 * deflated one; labels 0..2 of num_classes 3, statistics as PFLlib writes. */
static const char two_clients[] =
    "{\"num_clients\": 2, \"num_classes\": 3, \"non_iid\": true, \"balance\": false, \"partition\": \"pat\", "
    "\"Size of samples for labels in clients\": [[[0, 3], [1, 4], [2, 3]], [[0, 3], [1, 3], [2, 3]]], "
    "\"alpha\": 0.1, \"batch_size\": 10}";

static void make_image_folder(char *dir, size_t size, const char *name, const char *config) {
    new_folder(dir, size, name);
    put_config(dir, config);
    copy_fixture(dir, "train/0.npz", "img-deflated.npz");
    copy_fixture(dir, "test/0.npz", "img-stored.npz");
    copy_fixture(dir, "train/1.npz", "img-protocol4.npz");
    copy_fixture(dir, "test/1.npz", "img-deflated.npz");
}

static void test_image_folder(void) {
    char dir[512], data[600];
    make_image_folder(dir, sizeof dir, "images", two_clients);
    snprintf(data, sizeof data, "pfllib:%s", dir);
    pfl_dataset d;
    CHECK(pfl_dataset_load(&d, data, "ignored") == 0, "load: %s", pfl_errmsg());
    CHECK(d.n == 19 && d.c == 1 && d.h == 3 && d.w == 3 && d.classes == 3 && d.features && !d.pixels && !d.text,
          "dataset: %d samples %dx%dx%d, %d classes", d.n, d.c, d.h, d.w, d.classes);
    CHECK(!strcmp(d.name, "images"), "name %s", d.name);
    CHECK(d.own_clients == 2 && d.own_counts[0] == 6 && d.own_counts[1] == 4 && d.own_counts[2] == 3 &&
              d.own_counts[3] == 6,
          "own clients %d", d.own_clients);
    /* sample order: client 0 train (deflated 0..5), test (stored 0..3), client 1 train (protocol 4 0..2), test */
    const int file_index[19] = {0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 0, 1, 2, 0, 1, 2, 3, 4, 5};
    const uint8_t label[19] = {0, 1, 2, 0, 1, 2, 1, 2, 0, 1, 0, 2, 1, 0, 1, 2, 0, 1, 2};
    int idx[19], bad = 0;
    float x[19 * 9];
    uint8_t y[19];
    for (int i = 0; i < 19; i++) idx[i] = i;
    pfl_dataset_gather(&d, idx, 19, x, y);
    for (int i = 0; i < 19; i++) {
        for (int k = 0; k < 9; k++) bad += x[i * 9 + k] != image_value(file_index[i], k);
        bad += y[i] != label[i];
    }
    CHECK(bad == 0, "%d gathered values differ", bad);
    pfl_partition_spec spec;
    pfl_partition p;
    CHECK(pfl_partition_parse(&spec, pfl_partition_resolve(data, "pat")) == 0 && spec.kind == PFL_PART_PFLLIB,
          "the default pat resolves to pfllib");
    CHECK(pfl_partition_make(&p, &d, &spec, 2, 7) == 0, "partition: %s", pfl_errmsg());
    CHECK(p.num_clients == 2 && p.clients[0].n_train == 6 && p.clients[0].n_test == 4 && p.clients[1].train[0] == 10 &&
              p.clients[1].test[5] == 18,
          "own partition");
    pfl_partition_free(&p);
    CHECK(pfl_partition_make(&p, &d, &spec, 3, 7) < 0 && strstr(pfl_errmsg(), "--clients 3") &&
              strstr(pfl_errmsg(), "holds 2 clients"),
          "--clients mismatch: %s", pfl_errmsg());
    pfl_partition_parse(&spec, "dir:0.5");
    CHECK(pfl_partition_make(&p, &d, &spec, 2, 7) < 0 && strstr(pfl_errmsg(), "--partition dir:0.5"),
          "another scheme refused: %s", pfl_errmsg());
    pfl_partition_parse(&spec, "pfllib");
    spec.holdout = 2;
    CHECK(pfl_partition_make(&p, &d, &spec, 2, 7) < 0 && strstr(pfl_errmsg(), "--public"), "holdout: %s", pfl_errmsg());
    pfl_dataset_free(&d);
    CHECK(pfl_partition_parse(&spec, "pfllib") == 0 && pfl_partition_make(&p, &(pfl_dataset){.n = 4, .classes = 2,
                                                                       .labels = (uint8_t[]){0, 1, 0, 1}},
                                                                &spec, 2, 1) < 0 &&
              strstr(pfl_errmsg(), "pfllib:DIR"),
          "pfllib without a folder: %s", pfl_errmsg());
    /* no num_classes (older PFLlib): the largest label + 1 */
    make_image_folder(dir, sizeof dir, "older", "{\"num_clients\": 2}");
    snprintf(data, sizeof data, "pfllib:%s", dir);
    CHECK(pfl_dataset_load(&d, data, NULL) == 0 && d.classes == 3, "older config: %s", pfl_errmsg());
    pfl_dataset_free(&d);
    /* config.json's partition is printed on the provenance line: quoted, it stays one printable line */
    make_image_folder(dir, sizeof dir, "named", "{\"num_clients\": 2, \"partition\": \"p\\u00e9\\n\\u001b[31m\"}");
    snprintf(data, sizeof data, "pfllib:%s", dir);
    CHECK(pfl_dataset_load(&d, data, NULL) == 0 && strstr(d.provenance, "partition p\\xc3\\xa9\\x0a\\x1b[31m (config"),
          "partition quoted: %s", d.provenance);
    pfl_dataset_free(&d);
}

static void test_text_folder(void) {
    char dir[512], data[600];
    new_folder(dir, sizeof dir, "text");
    put_config(dir, "{\"num_clients\": 1, \"num_classes\": 4}");
    copy_fixture(dir, "train/0.npz", "text.npz");
    copy_fixture(dir, "test/0.npz", "text.npz");
    snprintf(data, sizeof data, "pfllib:%s", dir);
    pfl_dataset d;
    CHECK(pfl_dataset_load(&d, data, NULL) == 0, "text load: %s", pfl_errmsg());
    CHECK(d.text && d.text->given_ids && d.text->max_len == 8 && d.n == 10 && d.c == 1 && d.h == 1 && d.w == 8,
          "text dataset");
    pfl_partition_spec spec;
    pfl_partition p;
    pfl_partition_parse(&spec, "pfllib");
    CHECK(pfl_partition_make(&p, &d, &spec, 1, 1) == 0, "text partition: %s", pfl_errmsg());
    CHECK(pfl_text_build_vocab(&d, &p, 20) < 0 && strstr(pfl_errmsg(), "token id 26") &&
              strstr(pfl_errmsg(), "fasttext:27"),
          "ids beyond the model's vocabulary: %s", pfl_errmsg());
    CHECK(pfl_text_build_vocab(&d, &p, 27) == 0, "vocabulary of 27: %s", pfl_errmsg());
    float x[8];
    uint8_t y;
    const int second = 6; /* the test file's row 1 */
    pfl_dataset_gather(&d, &second, 1, x, &y);
    const float want[8] = {1, 9, 10, 11, 0, 0, 0, 0};
    CHECK(!memcmp(x, want, sizeof want) && y == 1, "row 1: %g %g %g %g label %d", x[0], x[1], x[2], x[3], y);
    pfl_partition_free(&p);
    pfl_dataset_free(&d);
}

/* ---- hostile folders ---- */

static void expect_refusal(const char *dir, const char *file, const char *what) {
    char data[600];
    snprintf(data, sizeof data, "pfllib:%s", dir);
    pfl_dataset d;
    const int rc = pfl_dataset_load(&d, data, NULL);
    CHECK(rc < 0 && refused(file, what) && !d.labels && !d.features && !d.text && !d.own_counts,
          "want '%s' about %s, got: %s", what, file, rc < 0 ? pfl_errmsg() : "success");
    if (rc == 0) pfl_dataset_free(&d);
}

/* A one-client folder whose train file is `bytes`, its test file a good one. */
static void one_client(char *dir, size_t size, const uint8_t *bytes, size_t n, const char *config) {
    new_folder(dir, size, "hostile");
    put_config(dir, config);
    put_file(dir, "train/0.npz", bytes, n);
    copy_fixture(dir, "test/0.npz", "img-deflated.npz");
}

static const char one_config[] = "{\"num_clients\": 1, \"num_classes\": 3}";

static uint32_t le32_at(const uint8_t *p) { return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

static void test_hostile_zip(void) {
    char dir[512];
    size_t n;
    uint8_t *good = slurp(FIXTURES "/img-deflated.npz", &n);
    const size_t cuts[] = {0, 10, 21, 100, n / 2, n - 23, n - 1};
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) { /* a truncated zip */
        one_client(dir, sizeof dir, good, cuts[k], one_config);
        expect_refusal(dir, "train/0.npz", ": zip: ");
    }
    const size_t eocd = n - 22, cd = le32_at(good + eocd + 16);
    uint8_t *bad = malloc(n);
    memcpy(bad, good, n); /* a 2 GiB member declared in a file of a few hundred bytes */
    npz_zip_le(bad + cd + 24, 0x80000000u, 4);
    one_client(dir, sizeof dir, bad, n, one_config);
    expect_refusal(dir, "train/0.npz", "zip: data.npy declares 2147483648 bytes, more than its");
    memcpy(bad, good, n);
    npz_zip_le(bad + cd + 20, 0x7fffffffu, 4);
    one_client(dir, sizeof dir, bad, n, one_config);
    expect_refusal(dir, "train/0.npz", "more than the file holds");
    memcpy(bad, good, n);
    bad[cd + 16] ^= 1; /* the CRC */
    one_client(dir, sizeof dir, bad, n, one_config);
    expect_refusal(dir, "train/0.npz", "CRC-32");
    memcpy(bad, good, n);
    bad[cd + 10] = 12; /* bzip2 */
    one_client(dir, sizeof dir, bad, n, one_config);
    expect_refusal(dir, "train/0.npz", "compression method 12");
    memcpy(bad, good, n);
    bad[cd + 46 + 5] = 'z'; /* data.nzy */
    one_client(dir, sizeof dir, bad, n, one_config);
    expect_refusal(dir, "train/0.npz", "zip: no data.npy");
    memcpy(bad, good, n);
    bad[80] ^= 0x55; /* inside the deflate stream */
    one_client(dir, sizeof dir, bad, n, one_config);
    expect_refusal(dir, "train/0.npz", "zip: data.npy");
    free(bad);
    free(good);
}

/* A stored zip of data.npy = the good deflated fixture's, with its first
 * `from` (nf bytes) replaced by `to` (nt bytes). */
static uint8_t *patched_npy_zip(const char *from, size_t nf, const char *to, size_t nt, size_t *zip_n) {
    size_t n;
    uint8_t *npy = slurp("fuzz/corpus/npy/img-deflated.npy", &n);
    size_t at = 0;
    while (at + nf <= n && memcmp(npy + at, from, nf)) at++;
    if (at + nf > n) {
        fprintf(stderr, "a patch's bytes are not in the fixture\n");
        exit(2);
    }
    const size_t m = n - nf + nt;
    uint8_t *out = malloc(m);
    memcpy(out, npy, at), memcpy(out + at, to, nt), memcpy(out + at + nt, npy + at + nf, n - at - nf);
    uint8_t *zip = npz_zip_stored(out, m, zip_n);
    free(out);
    free(npy);
    return zip;
}

/* Byte strings may hold NULs: their lengths come from the literals. */
#define PATCHED(from, to, zip_n) patched_npy_zip(from, sizeof from - 1, to, sizeof to - 1, zip_n)
#define EXPECT_PATCH(from, to, config, what)                                                                   \
    do {                                                                                                       \
        char dir_[512];                                                                                        \
        size_t n_;                                                                                             \
        uint8_t *zip_ = PATCHED(from, to, &n_);                                                                \
        one_client(dir_, sizeof dir_, zip_, n_, config);                                                       \
        expect_refusal(dir_, "train/0.npz", what);                                                             \
        free(zip_);                                                                                            \
    } while (0)

static void test_hostile_npy(void) {
    char dir[512], data[600];
    size_t n;
    /* NumPy 2 names the module numpy._core.multiarray: read the same */
    uint8_t *zip = PATCHED("numpy.core.multiarray\n", "numpy._core.multiarray\n", &n);
    one_client(dir, sizeof dir, zip, n, one_config);
    free(zip);
    snprintf(data, sizeof data, "pfllib:%s", dir);
    pfl_dataset d;
    CHECK(pfl_dataset_load(&d, data, NULL) == 0 && d.n == 12 && d.features[9] == image_value(1, 0),
          "numpy._core: %s", pfl_errmsg());
    pfl_dataset_free(&d);
    EXPECT_PATCH("'descr': '|O'", "'descr': '<f4'", one_config, "data.npy: descr '<f4'");
    EXPECT_PATCH("'shape': ()", "'shape': (2,)", one_config, "data.npy: shape is not ()");
    EXPECT_PATCH("\x93NUMPY\x01", "\x93NUMPY\x07", one_config, "data.npy: format version 7.0");
    EXPECT_PATCH("numpy\ndtype\n", "os\nsystem\n", one_config, "global os.system refused");
    EXPECT_PATCH("X\x02\x00\x00\x00" "f4", "X\x02\x00\x00\x00" "c8", one_config, "x: dtype 'c8' refused");
    EXPECT_PATCH("X\x02\x00\x00\x00" "i8", "X\x02\x00\x00\x00" "f8", one_config, "y: float64 of 1 dimension(s)");
    /* a 2 GiB length in a pickle of a few hundred bytes: x's data, x's shape */
    EXPECT_PATCH("\x89" "C\xd8", "\x89" "B\x00\x00\x00\x80", one_config, "x: needs 2147483648 more bytes");
    EXPECT_PATCH("K\x06K\x01K\x03K\x03", "J\x00\x00\x00\x40K\x01K\x03K\x03", one_config,
                 "x: an array of shape (1073741824, 1, 3, 3), more elements than its data's 54 hold");
    /* labels outside num_classes */
    new_folder(dir, sizeof dir, "labels");
    put_config(dir, "{\"num_clients\": 1, \"num_classes\": 2}");
    copy_fixture(dir, "train/0.npz", "img-deflated.npz");
    copy_fixture(dir, "test/0.npz", "img-deflated.npz");
    expect_refusal(dir, "train/0.npz", "y: label 2 at sample 2 is outside num_classes 2 (config.json)");
    const char *hostile[][2] = {{"hostile-complex.npz", "x: dtype 'c8' refused"},
                                {"hostile-bigendian.npz", "x: byte order '>' refused"},
                                {"hostile-fortran.npz", "x: a Fortran-order array"},
                                {"hostile-float-labels.npz", "y: float32 of 1 dimension(s)"},
                                {"hostile-no-dict.npz", "data.npy: shape is not ()"},
                                {"hostile-global.npz", "pickle: global posix.system refused"}};
    for (size_t k = 0; k < sizeof hostile / sizeof hostile[0]; k++) {
        new_folder(dir, sizeof dir, "hostile");
        put_config(dir, one_config);
        copy_fixture(dir, "train/0.npz", hostile[k][0]);
        copy_fixture(dir, "test/0.npz", "img-deflated.npz");
        expect_refusal(dir, "train/0.npz", hostile[k][1]);
    }
}

static void test_hostile_folder(void) {
    char dir[512];
    /* the files disagree with config.json's statistics (client 1 holds 3 of label 0, not 5) */
    char config[sizeof two_clients];
    memcpy(config, two_clients, sizeof config);
    char *at = strstr(config, "[[0, 3], [1, 3]");
    at[5] = '5';
    make_image_folder(dir, sizeof dir, "stats", config);
    expect_refusal(dir, "test/1.npz", "y: client 1 holds 3 samples of label 0 in its train and test files, "
                                      "config.json's statistics say 5");
    /* a file whose samples differ in shape from the first file's */
    make_image_folder(dir, sizeof dir, "shapes", "{\"num_clients\": 2, \"num_classes\": 4}");
    copy_fixture(dir, "train/1.npz", "text.npz");
    expect_refusal(dir, "train/1.npz", "x: text rows of 8 tokens, where ");
    expect_refusal(dir, "train/1.npz", "/train/0.npz (the first file read) holds images of 1x3x3 (channels x height x "
                                       "width)");
    /* a client file missing; config.json broken or lacking num_clients */
    make_image_folder(dir, sizeof dir, "missing", "{\"num_clients\": 3, \"num_classes\": 3}");
    expect_refusal(dir, "train/2.npz", "file: cannot open");
    make_image_folder(dir, sizeof dir, "config", "{\"num_classes\": 3}");
    expect_refusal(dir, "config.json", "num_clients: missing");
    make_image_folder(dir, sizeof dir, "config", "{\"num_clients\": 2, \"num_classes\": 300}");
    expect_refusal(dir, "config.json", "num_classes 300");
    make_image_folder(dir, sizeof dir, "config", "{\"num_clients\": 2,");
    expect_refusal(dir, "config.json", "config.json");
    /* statistics whose counts would overflow a sum */
    make_image_folder(dir, sizeof dir, "huge",
                      "{\"num_clients\": 2, \"num_classes\": 3, \"Size of samples for labels in clients\": "
                      "[[[0, 9223372036854775807], [0, 9223372036854775807]], [[0, 3]]]}");
    expect_refusal(dir, "config.json", "client 0: label 0: more than 2147483647 samples");
    /* jansson's message quotes the bytes near the fault: quoted again, one printable line */
    make_image_folder(dir, sizeof dir, "utf8", "{\"num_clients\": 2, \"a\": \xc3\xa9}");
    expect_refusal(dir, "config.json", "invalid token near '\\xc3\\xa9' (line 1)");
}

/* ---- pfl's splits, exported and read back ---- */

static void compare_clients(const pfl_dataset *a, const pfl_partition *pa, const pfl_dataset *b,
                            const pfl_partition *pb, const char *what) {
    CHECK(pa->num_clients == pb->num_clients, "%s: clients", what);
    const long s = pfl_dataset_sample_size(a);
    CHECK(s == pfl_dataset_sample_size(b), "%s: sample size %ld vs %ld", what, s, pfl_dataset_sample_size(b));
    int differ = 0;
    for (int c = 0; c < pa->num_clients && c < pb->num_clients && s == pfl_dataset_sample_size(b); c++)
        for (int split = 0; split < 2; split++) {
            const pfl_client_data *ca = &pa->clients[c], *cb = &pb->clients[c];
            const int n = split ? ca->n_test : ca->n_train;
            if (n != (split ? cb->n_test : cb->n_train)) {
                differ++;
                continue;
            }
            float *xa = tiny_floats((size_t)n * (size_t)s), *xb = tiny_floats((size_t)n * (size_t)s);
            uint8_t *ya = tiny_alloc((size_t)n), *yb = tiny_alloc((size_t)n);
            pfl_dataset_gather(a, split ? ca->test : ca->train, n, xa, ya);
            pfl_dataset_gather(b, split ? cb->test : cb->train, n, xb, yb);
            differ += memcmp(xa, xb, sizeof(float) * (size_t)n * (size_t)s) != 0 || memcmp(ya, yb, (size_t)n) != 0;
            free(xa), free(xb), free(ya), free(yb);
        }
    CHECK(differ == 0, "%s: %d client splits differ after the round trip", what, differ);
}

static void round_trip(const pfl_dataset *d, const pfl_partition *p, const char *partition, const char *name) {
    char dir[512], data[600];
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, name);
    CHECK(pfl_pfllib_export(d, p, partition, 0.1, "test_pfllib", dir) == 0, "%s: export: %s", name, pfl_errmsg());
    snprintf(data, sizeof data, "pfllib:%s", dir);
    pfl_dataset back;
    pfl_partition pb;
    pfl_partition_spec spec;
    pfl_partition_parse(&spec, "pfllib");
    CHECK(pfl_dataset_load(&back, data, NULL) == 0, "%s: read back: %s", name, pfl_errmsg());
    if (back.n == 0) return;
    CHECK(pfl_partition_make(&pb, &back, &spec, p->num_clients, 1) == 0, "%s: its clients: %s", name, pfl_errmsg());
    if (back.text) pfl_text_build_vocab(&back, &pb, d->text->vocab_size);
    CHECK(back.classes == d->classes, "%s: %d classes back, %d out", name, back.classes, d->classes);
    compare_clients(d, p, &back, &pb, name);
    CHECK(pfl_pfllib_export(d, p, partition, 0.1, "again", dir) < 0 && strstr(pfl_errmsg(), "exists and is not an empty"),
          "%s: an existing folder is not overwritten: %s", name, pfl_errmsg());
    pfl_partition_free(&pb);
    pfl_dataset_free(&back);
}

static void test_round_trip(void) {
    pfl_dataset d = tiny_dataset(90, 1, 4, 4, 3, 5);
    const char *schemes[] = {"pat", "shards:3", "iid"};
    for (int k = 0; k < 3; k++) {
        pfl_partition_spec spec;
        pfl_partition p;
        pfl_partition_parse(&spec, schemes[k]);
        CHECK(pfl_partition_make(&p, &d, &spec, 4, 11) == 0, "%s: %s", schemes[k], pfl_errmsg());
        char name[32];
        snprintf(name, sizeof name, "export-%d", k);
        round_trip(&d, &p, schemes[k], name);
        pfl_partition_free(&p);
    }
    tiny_dataset_free(&d);
    /* text: pfl's AG News reader, its vocabulary, then the export */
    char dir[512], csv[600];
    snprintf(dir, sizeof dir, "%s/csv/agnews", tmpdir);
    snprintf(csv, sizeof csv, "mkdir -p '%s'", dir);
    if (system(csv) != 0) exit(2);
    snprintf(csv, sizeof csv, "%s/test.csv", dir);
    const char rows[] = "\"3\",\"Wall St. Bears\",\"Short-sellers are seeing green again.\"\n"
                        "\"1\",\"Talks end\",\"The talks ended without a deal, again.\"\n"
                        "\"2\",\"Cup final\",\"A late goal won the cup final.\"\n"
                        "\"4\",\"New chip\",\"The chip is faster and cooler than the old one.\"\n"
                        "\"3\",\"Oil up\",\"Oil prices rose again on supply fears.\"\n"
                        "\"2\",\"Open\",\"The favourite lost in the first round of the open.\"\n";
    spit(csv, rows, sizeof rows - 1);
    snprintf(csv, sizeof csv, "%s/csv", tmpdir);
    pfl_dataset t;
    CHECK(pfl_dataset_load(&t, "agnews", csv) == 0, "agnews: %s", pfl_errmsg());
    pfl_partition_spec spec;
    pfl_partition p;
    pfl_partition_parse(&spec, "iid");
    CHECK(pfl_partition_make(&p, &t, &spec, 2, 3) == 0 && pfl_text_build_vocab(&t, &p, 12) == 0, "text: %s",
          pfl_errmsg());
    round_trip(&t, &p, "iid", "export-text");
    pfl_partition_free(&p);
    pfl_dataset_free(&t);
}

/* ---- PFLlib's results file ---- */

/* A finished run in dir: these metrics lines and a summary.json beside them
 * (pfl export takes finished runs only). */
static void put_metrics(const char *dir, const char *lines) {
    char cmd[700], path[700];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    if (system(cmd) != 0) exit(2);
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    spit(path, lines, strlen(lines));
    snprintf(path, sizeof path, "%s/summary.json", dir);
    spit(path, "{}\n", 3);
}

#ifndef PFL_NO_HDF5
/* Dataset `name` of an .h5 file: its n values (n = -1 when unreadable). */
static void read_h5(const char *path, const char *name, double *v, int *n) {
    *n = -1;
    const hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return;
    const hid_t set = H5Dopen2(f, name, H5P_DEFAULT);
    const hid_t space = set < 0 ? -1 : H5Dget_space(set);
    const hid_t type = set < 0 ? -1 : H5Dget_type(set);
    hsize_t dims[1] = {0};
    if (space >= 0 && H5Sget_simple_extent_ndims(space) == 1 && H5Sget_simple_extent_dims(space, dims, NULL) == 1 &&
        dims[0] <= 8 && H5Tget_class(type) == H5T_FLOAT && H5Tget_size(type) == 8 &&
        H5Dread(set, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0)
        *n = (int)dims[0];
    if (type >= 0) H5Tclose(type);
    if (space >= 0) H5Sclose(space);
    if (set >= 0) H5Dclose(set);
    H5Fclose(f);
}
#endif

static void test_results_h5(void) {
    char run[512], seeds[512], out[600], path[700];
    snprintf(run, sizeof run, "%s/run", tmpdir);
    put_metrics(run, "{\"round\":0,\"local_acc\":0.125,\"global_acc\":0.1,\"train_loss\":null}\n"
                     "{\"round\":2,\"local_acc\":0.5,\"global_acc\":0.4,\"train_loss\":1.25}\n"
                     "{\"round\":3,\"local_acc\":0.75,\"global_acc\":0.6,\"train_loss\":0.5}\n");
    snprintf(out, sizeof out, "%s/FMNIST_FedAvg_test.h5", tmpdir);
#ifdef PFL_NO_HDF5
    CHECK(pfl_export_h5(run, out) < 0 && strstr(pfl_errmsg(), "built without libhdf5"), "no libhdf5: %s", pfl_errmsg());
    (void)seeds, (void)path;
#else
    CHECK(pfl_export_h5(run, out) == 0, "export: %s", pfl_errmsg());
    /* an unfinished run (no summary.json): refused, nothing written */
    char half[560], half_out[600];
    snprintf(half, sizeof half, "%s/half", tmpdir);
    put_metrics(half, "{\"round\":0,\"local_acc\":0.125}\n");
    snprintf(half_out, sizeof half_out, "%s/summary.json", half);
    if (unlink(half_out) != 0) exit(2);
    snprintf(half_out, sizeof half_out, "%s/Half_run.h5", tmpdir);
    CHECK(pfl_export_h5(half, half_out) < 0 && strstr(pfl_errmsg(), "the run is not finished") &&
              access(half_out, F_OK) != 0,
          "an unfinished run: %s", pfl_errmsg());
    double v[8];
    int n;
    read_h5(out, "rs_test_acc", v, &n);
    CHECK(n == 3 && v[0] == 0.125 && v[1] == 0.5 && v[2] == 0.75, "rs_test_acc: %d values", n);
    read_h5(out, "rs_train_loss", v, &n);
    CHECK(n == 3 && isnan(v[0]) && v[1] == 1.25 && v[2] == 0.5, "rs_train_loss: %d values", n);
    read_h5(out, "rs_test_auc", v, &n);
    CHECK(n == 3 && isnan(v[0]) && isnan(v[2]), "rs_test_auc: %d values", n);
    /* several seeds: one file each, numbered in seed order as PFLlib's runs */
    snprintf(seeds, sizeof seeds, "%s/seeds/seed-10", tmpdir);
    put_metrics(seeds, "{\"round\":0,\"local_acc\":0.25}\n");
    snprintf(seeds, sizeof seeds, "%s/seeds/seed-3", tmpdir);
    put_metrics(seeds, "{\"round\":0,\"local_acc\":0.375}\n{\"round\":1,\"local_acc\":0.5}\n");
    snprintf(seeds, sizeof seeds, "%s/seeds", tmpdir);
    CHECK(pfl_export_h5(seeds, out) == 0, "seeds: %s", pfl_errmsg());
    snprintf(path, sizeof path, "%s/FMNIST_FedAvg_test_0.h5", tmpdir);
    read_h5(path, "rs_test_acc", v, &n);
    CHECK(n == 2 && v[0] == 0.375 && v[1] == 0.5, "seed 3 is run 0: %d values", n);
    snprintf(path, sizeof path, "%s/FMNIST_FedAvg_test_1.h5", tmpdir);
    read_h5(path, "rs_test_acc", v, &n);
    CHECK(n == 1 && v[0] == 0.25, "seed 10 is run 1: %d values", n);
    /* a folder where the second seed's file goes: refused before anything is written */
    char cmd[800], first[600];
    snprintf(out, sizeof out, "%s/Blocked.h5", tmpdir);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/Blocked_1.h5'", tmpdir);
    if (system(cmd) != 0) exit(2);
    snprintf(first, sizeof first, "%s/Blocked_0.h5", tmpdir);
    CHECK(pfl_export_h5(seeds, out) < 0 && strstr(pfl_errmsg(), "Blocked_1.h5: ") && access(first, F_OK) != 0,
          "a folder at the second seed's file: %s", pfl_errmsg());
    /* the third seed's metrics are no metrics: the two written before it are not left behind */
    snprintf(cmd, sizeof cmd, "%s/seeds/seed-20", tmpdir);
    put_metrics(cmd, "{\"no round\": 1}\n");
    snprintf(out, sizeof out, "%s/Half.h5", tmpdir);
    snprintf(first, sizeof first, "%s/Half_0.h5", tmpdir);
    CHECK(pfl_export_h5(seeds, out) < 0 && strstr(pfl_errmsg(), "seed-20") && access(first, F_OK) != 0,
          "the third seed unreadable: %s", pfl_errmsg());
    snprintf(cmd, sizeof cmd, "ls -a '%s' | grep -q pfl-h5", tmpdir);
    CHECK(system(cmd) != 0, "a scratch folder is left in %s", tmpdir);
    /* under a file, where no folder can be made */
    snprintf(path, sizeof path, "%s/run/metrics.jsonl/x.h5", tmpdir);
    CHECK(pfl_export_h5(run, path) < 0 && strstr(pfl_errmsg(), "metrics.jsonl") && !strchr(pfl_errmsg(), '\n'),
          "unwritable: %s", pfl_errmsg());
#endif
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/pfl-test-pfllib-XXXXXX");
    if (!mkdtemp(tmpdir)) die("mkdtemp");
    test_fixtures();
    test_image_folder();
    test_text_folder();
    test_hostile_zip();
    test_hostile_npy();
    test_hostile_folder();
    test_round_trip();
    test_results_h5();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    TEST_MAIN_END();
}
