/* Loaders for CIFAR-100 (binary), SVHN (.mat through libmatio) and
 * Tiny-ImageNet (JPEG folder tree through libjpeg). The real files are not
 * shipped, so each test writes small files in the exact format (the .mat
 * files with libmatio's write API, the JPEGs with libjpeg's compressor),
 * reads them back, then checks that truncated and malformed variants fail
 * with a message naming the file. Real data under $PFL_DATA (default data/)
 * is loaded too when present. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "real_data.h" /* test_real */
#include "data/data.h"
#include "util/err.h"

#ifndef PFL_NO_MATIO
#include <matio.h>
#endif
#ifndef PFL_NO_JPEG
#include <jpeglib.h>
#endif

static char tmpdir[256];

static void path_of(char *out, size_t size, const char *sub, const char *file) {
    int len = snprintf(out, size, "%s/%s%s%s", tmpdir, sub, *sub ? "/" : "", file);
    if (len < 0 || (size_t)len >= size) {
        fprintf(stderr, "test path too long: %s/%s\n", sub, file);
        exit(2);
    }
}

static void make_dirs(const char *sub) {
    char p[512], cmd[700];
    path_of(p, sizeof p, sub, "");
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", p);
    if (system(cmd) != 0) exit(2);
}

static void write_bytes(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(2);
    }
    if (len) fwrite(data, 1, len, f);
    fclose(f);
}

static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)n + 1);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) exit(2);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

/* Keeps the first `len` bytes of a file. */
static void truncate_file(const char *path, size_t len) {
    size_t n;
    unsigned char *buf = slurp(path, &n);
    write_bytes(path, buf, len < n ? len : n);
    free(buf);
}

static int msg_has(const char *a, const char *b) {
    const char *m = pfl_errmsg();
    return strstr(m, a) != NULL && (!b || strstr(m, b) != NULL);
}

/* ---- CIFAR-100 ---- */

enum { C100_REC = 3074 };

/* Record r: coarse r % 20, fine (r * 7) % 100, pixel j = (r + j) % 251. */
static void write_c100(const char *path, int records, int first, long cut, int bad_at, int bad_byte, int bad_val) {
    unsigned char *buf = malloc((size_t)records * C100_REC + 1);
    for (int r = 0; r < records; r++) {
        unsigned char *rec = buf + (size_t)r * C100_REC;
        rec[0] = (unsigned char)((first + r) % 20);
        rec[1] = (unsigned char)(((first + r) * 7) % 100);
        for (int j = 0; j < 3072; j++) rec[2 + j] = (unsigned char)((first + r + j) % 251);
        if (r == bad_at) rec[bad_byte] = (unsigned char)bad_val;
    }
    write_bytes(path, buf, cut >= 0 ? (size_t)cut : (size_t)records * C100_REC);
    free(buf);
}

static void test_cifar100(void) {
    char p[512];
    make_dirs("c100/cifar100/cifar-100-binary");
    path_of(p, sizeof p, "c100/cifar100/cifar-100-binary", "train.bin");
    write_c100(p, 3, 0, -1, -1, 0, 0);
    path_of(p, sizeof p, "c100/cifar100/cifar-100-binary", "test.bin");
    write_c100(p, 2, 3, -1, -1, 0, 0);
    char dir[512];
    path_of(dir, sizeof dir, "c100", "");
    for (int coarse = 0; coarse < 2; coarse++) {
        pfl_dataset d;
        int rc = pfl_dataset_load(&d, coarse ? "cifar100-coarse" : "cifar100", dir);
        CHECK(rc == 0, "cifar100 coarse=%d: %s", coarse, pfl_errmsg());
        if (rc) continue;
        CHECK(d.n == 5 && d.c == 3 && d.h == 32 && d.w == 32 && d.classes == (coarse ? 20 : 100),
              "cifar100: n %d classes %d", d.n, d.classes);
        CHECK(d.from_train_files == 3, "cifar100: %d samples from train.bin, want 3", d.from_train_files);
        CHECK(strcmp(d.name, coarse ? "cifar100-coarse" : "cifar100") == 0, "name %s", d.name);
        int ok = 1;
        for (int r = 0; r < 5; r++) {
            ok &= d.labels[r] == (coarse ? r % 20 : (r * 7) % 100);
            for (int j = 0; j < 3072; j++) ok &= d.pixels[(size_t)r * 3072 + j] == (r + j) % 251;
        }
        CHECK(ok, "cifar100 coarse=%d: labels or pixels differ (train then test order)", coarse);
        pfl_dataset_free(&d);
    }
    /* directly under DIR/cifar100/ works too */
    make_dirs("c100b/cifar100");
    path_of(p, sizeof p, "c100b/cifar100", "train.bin");
    write_c100(p, 1, 0, -1, -1, 0, 0);
    path_of(p, sizeof p, "c100b/cifar100", "test.bin");
    write_c100(p, 1, 1, -1, -1, 0, 0);
    path_of(dir, sizeof dir, "c100b", "");
    pfl_dataset d;
    CHECK(pfl_dataset_load(&d, "cifar100", dir) == 0 && d.n == 2, "flat cifar100: %s", pfl_errmsg());
    pfl_dataset_free(&d);

    /* errors from the reader */
    struct {
        const char *file;
        int records;
        long cut;
        int bad_at, bad_byte, bad_val;
        const char *want;
    } cases[] = {
        {"trunc.bin", 2, 2 * C100_REC - 1, -1, 0, 0, "size 6147 is not a multiple of 3074"},
        {"short.bin", 1, 100, -1, 0, 0, "not a multiple of 3074"},
        {"empty.bin", 1, 0, -1, 0, 0, "empty file"},
        {"fine.bin", 3, -1, 2, 1, 100, "fine label 100 out of range (100 classes) at record 2"},
        {"coarse.bin", 3, -1, 1, 0, 20, "coarse label 20 out of range (20 classes) at record 1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        path_of(p, sizeof p, "", cases[i].file);
        write_c100(p, cases[i].records, 0, cases[i].cut, cases[i].bad_at, cases[i].bad_byte, cases[i].bad_val);
        uint8_t px[3 * 3072], lab[3];
        int n = 0;
        pfl_err_clear();
        int rc = pfl_cifar100_read(p, 0, px, lab, &n, 3);
        CHECK(rc == -1 && n == 0, "%s: expected failure", cases[i].file);
        CHECK(msg_has(cases[i].file, cases[i].want) && strncmp(pfl_errmsg(), "cifar100: ", 10) == 0,
              "%s: message '%s' lacks '%s'", cases[i].file, pfl_errmsg(), cases[i].want);
    }
    /* more records than room */
    path_of(p, sizeof p, "", "big.bin");
    write_c100(p, 3, 0, -1, -1, 0, 0);
    uint8_t px[3 * 3072], lab[3];
    int n = 1;
    CHECK(pfl_cifar100_read(p, 0, px, lab, &n, 3) == -1 && msg_has("big.bin", "do not fit"), "fit: %s",
          pfl_errmsg());
    /* the loader: missing directory, missing test.bin, a bad test.bin */
    path_of(dir, sizeof dir, "nothing", "");
    CHECK(pfl_dataset_load(&d, "cifar100", dir) == -1 && msg_has("cifar100: cannot find", "train.bin"), "missing: %s",
          pfl_errmsg());
    path_of(p, sizeof p, "c100b/cifar100", "test.bin");
    unlink(p);
    path_of(dir, sizeof dir, "c100b", "");
    CHECK(pfl_dataset_load(&d, "cifar100", dir) == -1 && msg_has("test.bin", "cannot open"), "no test.bin: %s",
          pfl_errmsg());
    CHECK(d.pixels == NULL && d.n == 0, "dataset cleared on failure");
    write_c100(p, 2, 0, -1, 1, 1, 200);
    CHECK(pfl_dataset_load(&d, "cifar100-coarse", dir) == -1 && msg_has("test.bin", "fine label 200"),
          "bad test.bin: %s", pfl_errmsg());
}

/* ---- SVHN ---- */

/* X(r, c, ch, i) of the test files, and label of sample i (1..10). */
static uint8_t svhn_px(int r, int c, int ch, int i) { return (uint8_t)((r * 3 + c * 37 + ch * 101 + i * 53) % 256); }
static int svhn_label(int i) { return i % 3 == 1 ? 10 : 1 + (i * 3) % 10; }

#ifndef PFL_NO_MATIO

typedef struct {
    int n;
    size_t xdims[4];
    int xrank;
    enum matio_classes xclass;
    int with_x, with_y;
    int y_len, y_uint8, bad_label_at;
    double bad_label;
    enum matio_compression comp;
    int with_char; /* a char variable after y */
} svhn_spec;

static svhn_spec svhn_ok(int n) {
    svhn_spec s = {n, {32, 32, 3, (size_t)n}, 4, MAT_C_UINT8, 1, 1, n, 0, -1, 0, MAT_COMPRESSION_NONE, 0};
    return s;
}

static void write_svhn(const char *path, const svhn_spec *s) {
    unlink(path);
    mat_t *mat = Mat_CreateVer(path, NULL, MAT_FT_MAT5);
    if (!mat) {
        fprintf(stderr, "cannot create %s\n", path);
        exit(2);
    }
    size_t total = 1;
    for (int k = 0; k < s->xrank; k++) total *= s->xdims[k];
    if (s->with_x) {
        if (s->xclass == MAT_C_UINT8) {
            uint8_t *x = malloc(total);
            for (size_t j = 0; j < total; j++) {
                size_t r = j % 32, c = j / 32 % 32, ch = j / 1024 % 3, i = j / 3072;
                x[j] = svhn_px((int)r, (int)c, (int)ch, (int)i);
            }
            matvar_t *v = Mat_VarCreate("X", MAT_C_UINT8, MAT_T_UINT8, s->xrank, (size_t *)s->xdims, x, 0);
            Mat_VarWrite(mat, v, s->comp);
            Mat_VarFree(v);
            free(x);
        } else {
            double *x = calloc(total, sizeof *x);
            matvar_t *v = Mat_VarCreate("X", MAT_C_DOUBLE, MAT_T_DOUBLE, s->xrank, (size_t *)s->xdims, x, 0);
            Mat_VarWrite(mat, v, s->comp);
            Mat_VarFree(v);
            free(x);
        }
    }
    if (s->with_y) {
        size_t ydims[2] = {(size_t)s->y_len, 1};
        double *yd = malloc((size_t)s->y_len * sizeof *yd);
        uint8_t *yu = malloc((size_t)s->y_len);
        for (int i = 0; i < s->y_len; i++) {
            yd[i] = i == s->bad_label_at ? s->bad_label : svhn_label(i);
            yu[i] = (uint8_t)yd[i];
        }
        matvar_t *v = s->y_uint8 ? Mat_VarCreate("y", MAT_C_UINT8, MAT_T_UINT8, 2, ydims, yu, 0)
                                 : Mat_VarCreate("y", MAT_C_DOUBLE, MAT_T_DOUBLE, 2, ydims, yd, 0);
        Mat_VarWrite(mat, v, s->comp);
        Mat_VarFree(v);
        free(yd);
        free(yu);
    }
    if (s->with_char) {
        size_t dims[2] = {1, 5};
        matvar_t *v = Mat_VarCreate("note", MAT_C_CHAR, MAT_T_UINT8, 2, dims, "hello", 0);
        Mat_VarWrite(mat, v, s->comp);
        Mat_VarFree(v);
    }
    Mat_Close(mat);
}

static int svhn_sample_ok(const uint8_t *px, const uint8_t *lab, int i, int sample) {
    int ok = lab[i] == svhn_label(sample) % 10;
    for (int ch = 0; ch < 3; ch++)
        for (int r = 0; r < 32; r++)
            for (int c = 0; c < 32; c++) ok &= px[(size_t)i * 3072 + (ch * 32 + r) * 32 + c] == svhn_px(r, c, ch, sample);
    return ok;
}

static void expect_svhn_error(const char *file, const svhn_spec *s, long cut, const char *want) {
    char p[512];
    path_of(p, sizeof p, "", file);
    write_svhn(p, s);
    if (cut >= 0) truncate_file(p, (size_t)cut);
    uint8_t *px = (uint8_t *)p, *lab = (uint8_t *)p;
    int n = -1;
    pfl_err_clear();
    int rc = pfl_svhn_read(p, &px, &lab, &n);
    CHECK(rc == -1 && px == NULL && lab == NULL && n == 0, "%s: expected failure", file);
    CHECK(msg_has(file, want) && strncmp(pfl_errmsg(), "svhn: ", 6) == 0, "%s: message '%s' lacks '%s'", file,
          pfl_errmsg(), want);
}

static void test_svhn(void) {
    char p[512], dir[512];
    make_dirs("sv/svhn");
    /* train uncompressed with double labels; test zlib-compressed (as the
     * real files are) with uint8 labels */
    svhn_spec tr = svhn_ok(4), te = svhn_ok(3);
    te.comp = MAT_COMPRESSION_ZLIB;
    te.y_uint8 = 1;
    path_of(p, sizeof p, "sv/svhn", "train_32x32.mat");
    write_svhn(p, &tr);
    uint8_t *px = NULL, *lab = NULL;
    int n = 0;
    int rc = pfl_svhn_read(p, &px, &lab, &n);
    CHECK(rc == 0 && n == 4, "svhn read: %s", pfl_errmsg());
    if (rc == 0) {
        int ok = 1;
        for (int i = 0; i < 4; i++) ok &= svhn_sample_ok(px, lab, i, i);
        CHECK(ok, "svhn: column-major X not transposed to CHW, or labels not mapped");
        CHECK(lab[1] == 0, "label 10 -> 0: got %d", lab[1]);
    }
    free(px);
    free(lab);
    path_of(p, sizeof p, "sv/svhn", "test_32x32.mat");
    write_svhn(p, &te);
    path_of(dir, sizeof dir, "sv", "");
    pfl_dataset d;
    rc = pfl_dataset_load(&d, "svhn", dir);
    CHECK(rc == 0, "svhn load: %s", pfl_errmsg());
    if (rc == 0) {
        CHECK(d.n == 7 && d.c == 3 && d.h == 32 && d.w == 32 && d.classes == 10 && strcmp(d.name, "svhn") == 0,
              "svhn: n %d", d.n);
        CHECK(d.from_train_files == 4, "svhn: %d samples from train_32x32.mat, want 4", d.from_train_files);
        int ok = 1;
        for (int i = 0; i < 4; i++) ok &= svhn_sample_ok(d.pixels, d.labels, i, i);
        for (int i = 0; i < 3; i++) ok &= svhn_sample_ok(d.pixels, d.labels, 4 + i, i);
        CHECK(ok, "svhn: merged train then test differ");
        pfl_dataset_free(&d);
    }

    svhn_spec s = svhn_ok(3);
    s.with_x = 0;
    expect_svhn_error("nox.mat", &s, -1, "no variable X");
    s = svhn_ok(3);
    s.with_y = 0;
    expect_svhn_error("noy.mat", &s, -1, "no variable y");
    s = svhn_ok(3);
    s.xdims[0] = s.xdims[1] = 28;
    expect_svhn_error("shape.mat", &s, -1, "variable X has shape 28x28x3x3 (rank 4), expected 32x32x3xN");
    s = svhn_ok(3);
    s.xrank = 3;
    s.xdims[2] = 9;
    expect_svhn_error("rank.mat", &s, -1, "expected 32x32x3xN");
    s = svhn_ok(2);
    s.xclass = MAT_C_DOUBLE;
    expect_svhn_error("double.mat", &s, -1, "variable X is double, expected uint8");
    s = svhn_ok(3);
    s.y_len = 2;
    expect_svhn_error("ylen.mat", &s, -1, "variable y has shape 2x1 (rank 2), expected 3x1");
    s = svhn_ok(3);
    s.bad_label_at = 2;
    s.bad_label = 11;
    expect_svhn_error("label11.mat", &s, -1, "label 11 out of range (expected 1..10, 10 meaning digit 0) at sample 2");
    s.bad_label = 0;
    s.y_uint8 = 1;
    expect_svhn_error("label0.mat", &s, -1, "label 0 out of range");
    s.bad_label = 2.5;
    s.y_uint8 = 0;
    expect_svhn_error("label25.mat", &s, -1, "label 2.5 out of range");
    /* truncations: inside the 128-byte header, inside X, inside y; and compressed */
    s = svhn_ok(3);
    expect_svhn_error("cut64.mat", &s, 64, "not a MAT-file (64 bytes, shorter than a MAT-file's 128-byte header)");
    expect_svhn_error("cutx.mat", &s, 128 + 3000, "truncated: a variable at byte 128 needs");
    size_t full;
    path_of(p, sizeof p, "", "full.mat");
    write_svhn(p, &s);
    free(slurp(p, &full));
    expect_svhn_error("cuty.mat", &s, (long)full - 10, "truncated: a variable at byte");
    s.comp = MAT_COMPRESSION_ZLIB;
    path_of(p, sizeof p, "", "fullz.mat");
    write_svhn(p, &s);
    free(slurp(p, &full));
    expect_svhn_error("cutz.mat", &s, (long)full / 2, "truncated");
    expect_svhn_error("cutz2.mat", &s, (long)full - 3, "truncated");
    /* not a .mat at all, and a missing file */
    path_of(p, sizeof p, "", "text.mat");
    write_bytes(p, "hello, this is not a MAT-file at all\n", 37);
    pfl_err_clear();
    CHECK(pfl_svhn_read(p, &px, &lab, &n) == -1 && msg_has("svhn: text.mat: not a MAT-file", NULL), "text: %s",
          pfl_errmsg());
    path_of(p, sizeof p, "", "absent.mat");
    CHECK(pfl_svhn_read(p, &px, &lab, &n) == -1 && msg_has("absent.mat: cannot open", NULL), "absent: %s",
          pfl_errmsg());
    /* loader: missing test file, corrupt test file */
    path_of(p, sizeof p, "sv/svhn", "test_32x32.mat");
    unlink(p);
    CHECK(pfl_dataset_load(&d, "svhn", dir) == -1 && msg_has("svhn: cannot find", "test_32x32.mat"), "loader: %s",
          pfl_errmsg());
    write_bytes(p, "MATLAB", 6);
    CHECK(pfl_dataset_load(&d, "svhn", dir) == -1 && msg_has("test_32x32.mat", NULL) && d.pixels == NULL,
          "loader corrupt: %s", pfl_errmsg());
}

/* Writes spec s to `file`, lets `damage` change its bytes (buf, *len; room
 * for 64 more), and expects pfl_svhn_read to refuse it naming `want`. */
static void expect_damaged_svhn(const char *file, const svhn_spec *s, void (*damage)(unsigned char *, size_t *),
                                const char *want) {
    char p[512];
    path_of(p, sizeof p, "", file);
    write_svhn(p, s);
    size_t len;
    unsigned char *orig = slurp(p, &len), *buf = calloc(len + 64, 1);
    memcpy(buf, orig, len);
    damage(buf, &len);
    write_bytes(p, buf, len);
    free(orig), free(buf);
    uint8_t *px = NULL, *lab = NULL;
    int n = -1;
    pfl_err_clear();
    int rc = pfl_svhn_read(p, &px, &lab, &n);
    CHECK(rc == -1 && px == NULL && lab == NULL && n == 0, "%s: damaged file accepted", file);
    CHECK(msg_has(file, want) && !strchr(pfl_errmsg(), '\n'), "%s: message '%s' lacks '%s'", file, pfl_errmsg(), want);
    free(px), free(lab);
}

static uint32_t le32_at(const unsigned char *b) { return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24; }
static void put_le32(unsigned char *b, uint32_t v) { for (int i = 0; i < 4; i++) b[i] = (unsigned char)(v >> (8 * i)); }

/* X is the first element, at byte 128: its tag (type, bytes), then its data */
static void flip_adler(unsigned char *b, size_t *len) { (void)len; b[128 + 8 + le32_at(b + 132) - 1] ^= 0x01; }
static void flip_deflate(unsigned char *b, size_t *len) { (void)len; b[128 + 8 + le32_at(b + 132) / 2] ^= 0x10; }
static void junk_after_stream(unsigned char *b, size_t *len) { /* 4 bytes inside X's element, after its stream */
    const size_t end = 128 + 8 + le32_at(b + 132);
    memmove(b + end + 4, b + end, *len - end);
    memcpy(b + end, "junk", 4);
    put_le32(b + 132, le32_at(b + 132) + 4);
    *len += 4;
}
static void huge_n(unsigned char *b, size_t *len) { (void)len; put_le32(b + 172, 600000); } /* X's 4th dimension */
static void stray_bytes(unsigned char *b, size_t *len) { memcpy(b + *len, "abc", 3), *len += 3; }
static void v4_header(unsigned char *b, size_t *len) { (void)len; b[126] = b[127] = 0; }
static void y_named_x(unsigned char *b, size_t *len) { /* y's name, a small element: type 1, 1 byte, 'y' */
    for (size_t i = 128; i + 5 <= *len; i++)
        if (memcmp(b + i, "\1\0\1\0y", 5) == 0) b[i + 4] = 'X';
}

/* Files that are not what they claim: refused before libmatio
 * (and libhdf5) parse them, one line naming the problem. */
static void test_svhn_hostile(void) {
    uint8_t *px = NULL, *lab = NULL;
    int n = -1;
    /* a 6.4 KB MAT v7.3 file, 8 bytes changed from one libmatio wrote, on
     * which libhdf5 overflows a heap buffer (found by fuzz/svhn.c): under
     * the ASan build this test dies if any of libhdf5 runs for it */
    const char *repro = "fuzz/repro/svhn/v73-hdf5-heap-overflow.mat";
    pfl_err_clear();
    CHECK(pfl_svhn_read(repro, &px, &lab, &n) == -1 && px == NULL && n == 0 &&
              msg_has("svhn: v73-hdf5-heap-overflow.mat: MAT-file version 7.3 (HDF5); pfl reads only MAT v5/v7", NULL) &&
              !strchr(pfl_errmsg(), '\n'),
          "v7.3 reproducer: %s", pfl_errmsg());
    /* a good v7.3 file too: pfl reads only level 5 */
    char p[512];
    path_of(p, sizeof p, "", "v73.mat");
    unlink(p);
    mat_t *mat = Mat_CreateVer(p, NULL, MAT_FT_MAT73);
    if (mat) {
        size_t dims[2] = {1, 1};
        double one = 1;
        matvar_t *v = Mat_VarCreate("y", MAT_C_DOUBLE, MAT_T_DOUBLE, 2, dims, &one, 0);
        Mat_VarWrite(mat, v, MAT_COMPRESSION_NONE);
        Mat_VarFree(v);
        Mat_Close(mat);
        CHECK(pfl_svhn_read(p, &px, &lab, &n) == -1 && msg_has("v73.mat: MAT-file version 7.3 (HDF5)", NULL), "v7.3: %s",
              pfl_errmsg());
    }
    svhn_spec z = svhn_ok(3);
    z.comp = MAT_COMPRESSION_ZLIB;
    expect_damaged_svhn("adler.mat", &z, flip_adler, "variable at byte 128 is corrupt (zlib: incorrect data check)");
    expect_damaged_svhn("deflate.mat", &z, flip_deflate, "variable at byte 128 is corrupt (zlib:");
    expect_damaged_svhn("junk.mat", &z, junk_after_stream, "has 4 bytes after the end of its zlib stream");
    expect_damaged_svhn("stray.mat", &z, stray_bytes, "3 stray bytes after the last variable");
    expect_damaged_svhn("v4.mat", &z, v4_header, "not a MAT v5 file (no level-5 header");
    svhn_spec u = svhn_ok(1);
    expect_damaged_svhn("hugen.mat", &u, huge_n, "variable X announces more elements than its");
    expect_damaged_svhn("twice.mat", &u, y_named_x, "variable X appears twice");
    u = svhn_ok(2);
    u.with_char = 1;
    expect_svhn_error("char.mat", &u, -1, "variable note is char; pfl reads only numeric arrays");
    /* a label that %g would show as "1" */
    u = svhn_ok(3);
    u.bad_label_at = 1;
    u.bad_label = 1.000000000010042;
    expect_svhn_error("label1.mat", &u, -1, "label 1.000000000010042 out of range");
}

#else

static void test_svhn(void) {
    char p[512];
    path_of(p, sizeof p, "", "train_32x32.mat");
    write_bytes(p, "x", 1);
    uint8_t *px, *lab;
    int n;
    CHECK(pfl_svhn_read(p, &px, &lab, &n) == -1 && msg_has("built without libmatio", NULL), "%s", pfl_errmsg());
    printf("skipped: svhn format tests (built without libmatio)\n");
}

static void test_svhn_hostile(void) {
    (void)svhn_px;
    (void)svhn_label;
    (void)truncate_file; /* used by the libmatio and libjpeg tests only */
}

#endif

/* ---- Tiny-ImageNet ---- */

/* Pixel (y, x, ch) of test image `id`: block-aligned quadrants, so JPEG
 * reproduces it to within a few levels away from the quadrant edges (where
 * libjpeg's default smooth chroma upsampling blends neighbours). */
static int tin_px(int id, int y, int x, int ch) {
    return (20 + id * 17 + (y >= 32 ? 90 : 0) + (x >= 32 ? 45 : 0) + ch * 30) % 256;
}

#ifndef PFL_NO_JPEG

static void write_jpeg(const char *path, int id, int side, int gray) {
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr err;
    c.err = jpeg_std_error(&err);
    jpeg_create_compress(&c);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(2);
    }
    jpeg_stdio_dest(&c, f);
    c.image_width = c.image_height = (JDIMENSION)side;
    c.input_components = gray ? 1 : 3;
    c.in_color_space = gray ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 100, TRUE);
    jpeg_start_compress(&c, TRUE);
    unsigned char row[256 * 3];
    while (c.next_scanline < c.image_height) {
        int y = (int)c.next_scanline;
        for (int x = 0; x < side; x++)
            for (int ch = 0; ch < c.input_components; ch++) row[x * c.input_components + ch] = (unsigned char)tin_px(id, y, x, ch);
        JSAMPROW rows[1] = {row};
        jpeg_write_scanlines(&c, rows, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    fclose(f);
}

static int tin_image_ok(const uint8_t *px, int id, int gray) {
    for (int ch = 0; ch < 3; ch++)
        for (int y = 0; y < 64; y++)
            for (int x = 0; x < 64; x++)
                if (!(y >= 28 && y < 36) && !(x >= 28 && x < 36) && abs(px[(ch * 64 + y) * 64 + x] - tin_px(id, y, x, gray ? 0 : ch)) > 4) return 0;
    return 1;
}

/* root/tinyimagenet/tiny-imagenet-200 with classes n01, n02; two train images
 * each (written in reverse name order), image ids: n01_0=0, n01_1=1 (gray),
 * n02_0=2, n02_1=3, val_0=4 (class n02), val_1=5 (class n01). */
static void write_tree(const char *root) {
    char sub[256], p[512];
    snprintf(sub, sizeof sub, "%s/tinyimagenet/tiny-imagenet-200", root);
    const char *wn[2] = {"n01", "n02"};
    for (int k = 0; k < 2; k++) {
        char d[300];
        snprintf(d, sizeof d, "%s/train/%s/images", sub, wn[k]);
        make_dirs(d);
        for (int i = 1; i >= 0; i--) {
            char f[64];
            snprintf(f, sizeof f, "%s_%d.JPEG", wn[k], i);
            path_of(p, sizeof p, d, f);
            write_jpeg(p, 2 * k + i, 64, k == 0 && i == 1);
        }
        snprintf(d, sizeof d, "%s/train/%s", sub, wn[k]);
        path_of(p, sizeof p, d, "boxes.txt");
        write_bytes(p, "x\n", 2);
    }
    path_of(p, sizeof p, sub, "wnids.txt");
    write_bytes(p, "n01\nn02\n", 8);
    char d[300];
    snprintf(d, sizeof d, "%s/val/images", sub);
    make_dirs(d);
    path_of(p, sizeof p, d, "val_0.JPEG");
    write_jpeg(p, 4, 64, 0);
    path_of(p, sizeof p, d, "val_1.JPEG");
    write_jpeg(p, 5, 64, 0);
    snprintf(d, sizeof d, "%s/val", sub);
    path_of(p, sizeof p, d, "val_annotations.txt");
    const char *ann = "val_0.JPEG\tn02\t0\t1\t50\t60\nval_1.JPEG\tn01\t3\t4\t40\t40\n";
    write_bytes(p, ann, strlen(ann));
}

static void tin_path(char *out, size_t size, const char *root, const char *rel) {
    char sub[300];
    snprintf(sub, sizeof sub, "%s/tinyimagenet/tiny-imagenet-200", root);
    path_of(out, size, sub, rel);
}

/* Builds a fresh tree in `root`, lets `damage` change it, expects failure. */
static void expect_tin_error(const char *root, const char *rel, const char *content, long len, const char *want1,
                             const char *want2) {
    char p[512], dir[512];
    write_tree(root);
    tin_path(p, sizeof p, root, rel);
    if (len == -2) unlink(p);
    else if (len == -3) truncate_file(p, strlen(content) ? (size_t)atoi(content) : 0);
    else write_bytes(p, content, len >= 0 ? (size_t)len : strlen(content));
    path_of(dir, sizeof dir, root, "");
    pfl_dataset d;
    pfl_err_clear();
    int rc = pfl_dataset_load(&d, "tinyimagenet", dir);
    CHECK(rc == -1 && d.pixels == NULL && d.n == 0, "%s: expected failure", root);
    CHECK(msg_has(want1, want2) && strncmp(pfl_errmsg(), "tinyimagenet: ", 14) == 0, "%s: message '%s' lacks '%s'",
          root, pfl_errmsg(), want1);
}

static void test_tinyimagenet(void) {
    char dir[512], p[512];
    write_tree("tin");
    path_of(dir, sizeof dir, "tin", "");
    pfl_dataset d;
    int rc = pfl_dataset_load(&d, "tinyimagenet", dir);
    CHECK(rc == 0, "tinyimagenet: %s", pfl_errmsg());
    if (rc == 0) {
        CHECK(d.n == 6 && d.c == 3 && d.h == 64 && d.w == 64 && d.classes == 2 && strcmp(d.name, "tinyimagenet") == 0,
              "tinyimagenet: n %d classes %d", d.n, d.classes);
        CHECK(d.from_train_files == 4, "tinyimagenet: %d samples from train/, want 4", d.from_train_files);
        const int ids[6] = {0, 1, 2, 3, 4, 5}, labels[6] = {0, 0, 1, 1, 1, 0};
        for (int i = 0; i < 6 && i < d.n; i++) {
            CHECK(d.labels[i] == labels[i], "sample %d label %d, expected %d", i, d.labels[i], labels[i]);
            CHECK(tin_image_ok(d.pixels + (size_t)i * 3 * 64 * 64, ids[i], ids[i] == 1),
                  "sample %d pixels differ (order, CHW or gray replication)", i);
        }
        pfl_dataset_free(&d);
    }
    /* a 32x32 image and a truncated one, through the decoder directly */
    path_of(p, sizeof p, "", "small.JPEG");
    write_jpeg(p, 0, 32, 0);
    uint8_t img[3 * 64 * 64];
    CHECK(pfl_jpeg_decode64(p, img) == -1 && msg_has("tinyimagenet: small.JPEG: image is 32x32, expected 64x64", NULL),
          "small: %s", pfl_errmsg());
    size_t len;
    path_of(p, sizeof p, "", "cut.JPEG");
    write_jpeg(p, 3, 64, 0);
    free(slurp(p, &len));
    truncate_file(p, len / 2);
    CHECK(pfl_jpeg_decode64(p, img) == -1 && msg_has("tinyimagenet: cut.JPEG: corrupt JPEG", NULL), "cut: %s",
          pfl_errmsg());

    expect_tin_error("e1", "train/n01/images/n01_0.JPEG", "this is no JPEG", -1, "n01_0.JPEG: corrupt JPEG", "Not a JPEG");
    expect_tin_error("e2", "val/images/val_1.JPEG", "300", -3, "val_1.JPEG: corrupt JPEG", NULL);
    expect_tin_error("e3", "val/images/val_0.JPEG", "", 0, "val_0.JPEG: empty file", NULL);
    expect_tin_error("e4", "val/val_annotations.txt", "val_0.JPEG\tn02\t0\nval_1.JPEG\tn09\t0\n", -1,
                     "val_annotations.txt: unknown class id n09 on line 2", NULL);
    expect_tin_error("e5", "val/val_annotations.txt", "val_0.JPEG n02\n", -1, "val_annotations.txt: malformed line 1",
                     NULL);
    expect_tin_error("e6", "val/val_annotations.txt", "val_0.JPEG\tn02\t0\n", -1,
                     "val/images/val_1.JPEG is not in val_annotations.txt", NULL);
    /* an image listed twice (two labels) while another is not listed: the counts agree */
    expect_tin_error("e6b", "val/val_annotations.txt", "val_0.JPEG\tn02\t0\nval_0.JPEG\tn01\t0\n", -1,
                     "val_annotations.txt: val_0.JPEG is listed twice (lines 1 and 2)", NULL);
    /* a name holding a newline-like byte and a NUL-cut line are shown, not printed raw */
    expect_tin_error("e6c", "val/val_annotations.txt", "val_0.JPEG\tn02\nval_1.JPEG\x01\tn01\n", -1,
                     "line 2 names val_1.JPEG\\x01, which is not a JPEG in val/images", NULL);
    expect_tin_error("e6d", "val/val_annotations.txt", "val_0.JPEG\tn02\nval_1.JPEG\tn01\0junk\n", 35,
                     "val_annotations.txt: line 2 holds a NUL byte", NULL);
    expect_tin_error("e7", "wnids.txt", "n01\n", -1, "train/n02: unknown class id", NULL);
    expect_tin_error("e8", "wnids.txt", "n01\nn02\nn03\n", -1, "train/n03/images: cannot open folder", NULL);
    expect_tin_error("e9", "wnids.txt", "", -2, "tinyimagenet: cannot find", "wnids.txt");
    expect_tin_error("e10", "wnids.txt", "n01\nn02\nn01\n", -1, "wnids.txt: class id n01 appears twice", NULL);
    expect_tin_error("e10b", "wnids.txt", "n01\nn\x02x\n", -1, "wnids.txt: malformed class id 'n\\x02x' on line 2", NULL);
    expect_tin_error("e10c", "wnids.txt",
                     "n01\nn0123456789012345678901234567890123456789012345678901234567890123456789\n", -1,
                     "wnids.txt: malformed class id 'n01234567890123456789012...' on line 2", NULL);
    expect_tin_error("e11", "val/val_annotations.txt", "", -2, "val_annotations.txt: cannot open", NULL);
    /* an annotated file that is missing, while another unannotated one is there */
    write_tree("e12");
    char q[512];
    tin_path(p, sizeof p, "e12", "val/images/val_1.JPEG");
    tin_path(q, sizeof q, "e12", "val/images/other.JPEG");
    rename(p, q);
    path_of(dir, sizeof dir, "e12", "");
    CHECK(pfl_dataset_load(&d, "tinyimagenet", dir) == -1 &&
              msg_has("val_annotations.txt: line 2 names val_1.JPEG, which is not a JPEG in val/images", NULL),
          "e12: %s", pfl_errmsg());
    /* a 32x32 image inside the tree */
    write_tree("e13");
    tin_path(p, sizeof p, "e13", "train/n02/images/n02_1.JPEG");
    write_jpeg(p, 0, 32, 0);
    path_of(dir, sizeof dir, "e13", "");
    CHECK(pfl_dataset_load(&d, "tinyimagenet", dir) == -1 && msg_has("n02_1.JPEG: image is 32x32", NULL), "e13: %s",
          pfl_errmsg());
}

#else

static void test_tinyimagenet(void) {
    char p[512];
    path_of(p, sizeof p, "", "a.JPEG");
    write_bytes(p, "x", 1);
    uint8_t img[3 * 64 * 64];
    CHECK(pfl_jpeg_decode64(p, img) == -1 && msg_has("built without libjpeg", NULL), "%s", pfl_errmsg());
    printf("skipped: tinyimagenet format tests (built without libjpeg)\n");
    (void)tin_px;
}

#endif

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/pfl-test-loaders-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    test_cifar100();
    test_svhn();
    test_svhn_hostile();
    test_tinyimagenet();
    test_real("cifar100", "cifar100", 60000, 100);
    test_real("cifar100-coarse", "cifar100", 60000, 20);
    test_real("svhn", "svhn", 99289, 10);
    test_real("tinyimagenet", "tinyimagenet", 110000, 200);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    TEST_MAIN_END();
}
