/* Writes the seed inputs of fuzz/corpus/: small valid files of every format,
 * made by the same libraries and writers that make the real ones (libmatio
 * for .mat, libjpeg, zlib, pfl's checkpoint writer and runs). The committed
 * seeds came from `build/fuzz/make_seeds fuzz/corpus`; run it again after a
 * format changes (checkpoint sections, say). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h> /* after stdio.h: it uses FILE and size_t */
#include <matio.h>
#include <zlib.h>

#include "ckpt_sections.c" /* the runs the checkpoint harness loads into */
#define FUZZ_PFLLIB_CONFIG_NO_ENTRY
#include "pfllib_config.c" /* the folder the config.json harness loads */

static const char *out_root;

static void seed(const char *harness, const char *name, const void *data, size_t size) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", out_root, harness);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s", out_root, harness, name);
    fuzz_write(path, data, size);
}

static uint8_t *slurp(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) fuzz_fail("cannot read", path);
    fseek(f, 0, SEEK_END);
    *size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(*size + 1);
    if (fread(buf, 1, *size, f) != *size) fuzz_fail("cannot read", path);
    fclose(f);
    return buf;
}

static void be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

/* ---- IDX ---- */

static size_t idx_file(uint8_t *out, int images, int count, int rows, int cols) {
    size_t at = 0;
    be32(out, images ? 2051 : 2049), at = 4;
    be32(out + at, (uint32_t)count), at += 4;
    if (images) be32(out + at, (uint32_t)rows), be32(out + at + 4, (uint32_t)cols), at += 8;
    size_t payload = (size_t)count * (images ? (size_t)rows * (size_t)cols : 1);
    for (size_t i = 0; i < payload; i++) out[at + i] = (uint8_t)(images ? (i * 7) % 256 : i % 10);
    return at + payload;
}

static size_t gzip_to(const uint8_t *src, size_t n, uint8_t *out, size_t cap) {
    z_stream z = {0};
    deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
    z.next_in = (Bytef *)src, z.avail_in = (uInt)n, z.next_out = out, z.avail_out = (uInt)cap;
    if (deflate(&z, Z_FINISH) != Z_STREAM_END) fuzz_fail("gzip", "seed too large");
    deflateEnd(&z);
    return cap - z.avail_out;
}

static void idx_seeds(void) {
    static uint8_t f[4096], g[4097];
    struct { const char *name; int images, count, rows, cols; } s[3] = {
        {"images-2x28x28", 1, 2, 28, 28}, {"labels-5", 0, 5, 0, 0}, {"images-3x2x3", 1, 3, 2, 3}};
    for (int i = 0; i < 3; i++) {
        size_t n = idx_file(f, s[i].images, s[i].count, s[i].rows, s[i].cols);
        seed("idx_plain", s[i].name, f, n);
        g[0] = 0; /* a real .gz file */
        size_t m = gzip_to(f, n, g + 1, sizeof g - 1);
        char name[64];
        snprintf(name, sizeof name, "gz-%s", s[i].name);
        seed("idx_gzip", name, g, m + 1);
        g[0] = 1; /* the harness compresses */
        memcpy(g + 1, f, n);
        snprintf(name, sizeof name, "raw-%s", s[i].name);
        seed("idx_gzip", name, g, n + 1);
    }
}

/* ---- CIFAR ---- */

static void cifar_seeds(void) {
    static uint8_t f[2 * 3074];
    for (int r = 0; r < 2; r++) {
        f[r * 3073] = (uint8_t)(3 + 6 * r);
        for (int j = 1; j < 3073; j++) f[r * 3073 + j] = (uint8_t)(j * 13 + r);
    }
    seed("cifar10", "two-records", f, 2 * 3073);
    for (int r = 0; r < 2; r++) {
        f[r * 3074] = (uint8_t)(19 * r), f[r * 3074 + 1] = (uint8_t)(99 - 40 * r);
        for (int j = 2; j < 3074; j++) f[r * 3074 + j] = (uint8_t)(j * 11 + r);
    }
    seed("cifar100", "two-records", f, 2 * 3074);
}

/* ---- AG News ---- */

static void agnews_seeds(void) {
    const char *rows = "\"3\",\"Wall St. Bears Claw Back Into the Black (Reuters)\",\"Reuters - Short-sellers, Wall "
                       "Street's dwindling\\band of ultra-cynics, are seeing green again.\"\r\n"
                       "\"4\",\"Space \"\"race\"\" heats up\",\"A line\nthat breaks, inside quotes #39;s fine\"\r\n"
                       "1,Plain fields,no quotes at all\n\n"
                       "2,\"Mixed\",unquoted description 42\n";
    seed("agnews", "rows", rows, strlen(rows));
    const char *one = "1,a,b";
    seed("agnews", "one-row-no-newline", one, strlen(one));
}

/* ---- checkpoints ---- */

static void ckpt_seeds(void) {
    char path[1024];
    fuzz_path(path, sizeof path, "seed.ckpt");
    pfl_ckpt_writer w;
    const float f32[3] = {1.5f, -2.0f, 0.25f};
    const double f64[2] = {3.0, -0.5};
    const int i32[2] = {7, -9};
    const bool flags[3] = {true, false, true};
    if (pfl_ckpt_begin(&w, path) || pfl_ckpt_put(&w, "fl.algo", "fedavg", 6) || pfl_ckpt_put_int(&w, "fl.round", 2) ||
        pfl_ckpt_put_double(&w, "fl.train_seconds", 1.25) || pfl_ckpt_put_f32(&w, "fl.global", f32, 3) ||
        pfl_ckpt_put_f64(&w, "x.f64", f64, 2) || pfl_ckpt_put_i32(&w, "x.i32", i32, 2) ||
        pfl_ckpt_put_bool(&w, "fl.shared", flags, 3) || pfl_ckpt_commit(&w))
        fuzz_fail("checkpoint seed", pfl_errmsg());
    size_t n;
    uint8_t *buf = slurp(path, &n);
    seed("ckpt", "typed-sections", buf, n);
    free(buf);
    /* the state of every run the sections harness knows, after its first round */
    for (int which = 0; which < fuzz_run_count(); which++) {
        tiny_fed f;
        fuzz_run_start(&f, which);
        f.fl.cfg.rounds = 1;
        if (pfl_fl_run(&f.fl, NULL, NULL)) fuzz_fail("seed run", pfl_errmsg());
        f.fl.cfg.rounds = ROUNDS;
        f.fl.train_seconds = 0; /* the same bytes every time */
        if (pfl_ckpt_begin(&w, path) || pfl_fl_save(&f.fl, &w) || pfl_ckpt_commit(&w))
            fuzz_fail("seed save", pfl_errmsg());
        buf = slurp(path, &n);
        if (which == 0) seed("ckpt", "fedavg-run", buf, n);
        /* the sections: after the 28-byte header, before the end marker and checksum */
        buf[27] = (uint8_t)which;
        char name[80];
        snprintf(name, sizeof name, "%02d-%s%s", which, f.fl.algo->name,
                 f.fl.cfg.modules.ala ? "-ala" : f.fl.cfg.modules.flayer_agg ? "-flayer" : "");
        seed("ckpt_sections", name, buf + 27, n - 27 - 36);
        free(buf);
        tiny_fed_free(&f);
    }
}

/* ---- SVHN ---- */

static void write_mat(const char *path, enum mat_ft version, int n, enum matio_compression comp) {
    unlink(path);
    mat_t *mat = Mat_CreateVer(path, NULL, version);
    if (!mat) fuzz_fail("matio", path);
    size_t xd[4] = {32, 32, 3, (size_t)n}, yd[2] = {(size_t)n, 1};
    uint8_t *x = malloc((size_t)n * 3072);
    double *y = malloc(sizeof(double) * (size_t)n);
    for (size_t j = 0; j < (size_t)n * 3072; j++) x[j] = (uint8_t)(j % 251);
    for (int i = 0; i < n; i++) y[i] = 1 + (i * 7) % 10;
    matvar_t *v = Mat_VarCreate("X", MAT_C_UINT8, MAT_T_UINT8, 4, xd, x, 0);
    Mat_VarWrite(mat, v, comp);
    Mat_VarFree(v);
    v = Mat_VarCreate("y", MAT_C_DOUBLE, MAT_T_DOUBLE, 2, yd, y, 0);
    Mat_VarWrite(mat, v, comp);
    Mat_VarFree(v);
    Mat_Close(mat);
    free(x);
    free(y);
}

static void svhn_seeds(void) {
    struct { const char *name; enum mat_ft version; int n; enum matio_compression comp; } s[3] = {
        {"v5-zlib-2", MAT_FT_MAT5, 2, MAT_COMPRESSION_ZLIB},
        {"v5-plain-1", MAT_FT_MAT5, 1, MAT_COMPRESSION_NONE},
        {"v73-hdf5-1", MAT_FT_MAT73, 1, MAT_COMPRESSION_NONE}};
    for (int i = 0; i < 3; i++) {
        char path[1024];
        fuzz_path(path, sizeof path, "seed.mat");
        write_mat(path, s[i].version, s[i].n, s[i].comp);
        size_t n;
        uint8_t *buf = slurp(path, &n);
        seed("svhn", s[i].name, buf, n);
        free(buf);
    }
}

/* ---- JPEG and Tiny-ImageNet's text files ---- */

static void jpeg_seed(const char *name, int side, int gray, int progressive) {
    char path[1024];
    fuzz_path(path, sizeof path, "seed.jpeg");
    FILE *f = fopen(path, "wb");
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr err;
    c.err = jpeg_std_error(&err);
    jpeg_create_compress(&c);
    jpeg_stdio_dest(&c, f);
    c.image_width = c.image_height = (JDIMENSION)side;
    c.input_components = gray ? 1 : 3;
    c.in_color_space = gray ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 50, TRUE);
    if (progressive) jpeg_simple_progression(&c);
    jpeg_start_compress(&c, TRUE);
    unsigned char row[64 * 3];
    while (c.next_scanline < c.image_height) {
        for (int x = 0; x < side * c.input_components; x++) row[x] = (unsigned char)(x * 3 + (int)c.next_scanline * 5);
        JSAMPROW rows[1] = {row};
        jpeg_write_scanlines(&c, rows, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    fclose(f);
    size_t n;
    uint8_t *buf = slurp(path, &n);
    seed("jpeg", name, buf, n);
    free(buf);
}

static void tin_seeds(void) {
    jpeg_seed("rgb-64", 64, 0, 0);
    jpeg_seed("gray-64", 64, 1, 0);
    jpeg_seed("rgb-64-progressive", 64, 0, 1);
    jpeg_seed("rgb-8", 8, 0, 0);
    const char ann[] = "\0val_2.JPEG\tn01\t0\t0\t63\t63\nval_0.JPEG\tn02\t1\t2\t40\t50\r\nval_1.JPEG\tn02\t5\t5\t20\t20\n";
    seed("tin_annotations", "annotations", ann, sizeof ann - 1);
    const char wn[] = "\1n02\nn01\n";
    seed("tin_annotations", "wnids", wn, sizeof wn - 1);
}

/* config.json beside the folder pfllib_config.c exports: pfl's own, then
 * as PFLlib's generators write it (statistics and all), as older PFLlib
 * wrote it (no num_classes), and with one client and the iid keys. */
static void pfllib_config_seeds(void) {
    char path[600];
    size_t n;
    snprintf(path, sizeof path, "%s/config.json", pfllib_config_folder());
    uint8_t *exported = slurp(path, &n);
    seed("pfllib_config", "exported.json", exported, n);
    free(exported);
    const char *const configs[][2] = {
        {"pfllib-pat.json", "{\"num_clients\": 2, \"num_classes\": 3, \"non_iid\": true, \"balance\": false, "
                            "\"partition\": \"pat\", \"Size of samples for labels in clients\": [[[0, 2], [1, 2], "
                            "[2, 2]], [[0, 2], [1, 2], [2, 2]]], \"alpha\": 0.1, \"batch_size\": 10}"},
        {"older.json", "{\"num_clients\": 2}"},
        {"iid-one-client.json", "{\"num_clients\": 1, \"num_classes\": 3, \"non_iid\": false, \"balance\": true, "
                                "\"partition\": null, \"Size of samples for labels in clients\": [[[0, 2], [1, 2], "
                                "[2, 2]]], \"alpha\": 0.1, \"batch_size\": 10}"},
    };
    for (size_t k = 0; k < sizeof configs / sizeof configs[0]; k++)
        seed("pfllib_config", configs[k][0], configs[k][1], strlen(configs[k][1]));
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUT_DIR (fuzz/corpus)\n", argv[0]);
        return 2;
    }
    out_root = argv[1];
    mkdir(out_root, 0755);
    idx_seeds();
    cifar_seeds();
    agnews_seeds();
    ckpt_seeds();
    svhn_seeds();
    tin_seeds();
    pfllib_config_seeds();
    return 0;
}
