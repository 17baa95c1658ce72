/* Text: the embedding-mean layer, the fasttext model, and the AG News path
 * (CSV reader, tokenizer, vocabulary from the training clients, padding and
 * truncation), checked against hand computations:
 *
 *  - the layer's forward against a double-precision reference and its
 *    backward against central finite differences (FD_TOL relative to the
 *    largest gradient, as tests/test_layers.c argues), with and without a
 *    padding index, repeated ids, and ids outside the table;
 *  - fasttext's tables against PyTorch's state_dict and parameter counts
 *    (the default 32000 x 512, and FedALA's 98635 x 32, whose ALA counts its
 *    Table 6 prints), its initialization, and its whole backward against
 *    finite differences of the loss (tests/test_model.c compares it with
 *    PyTorch itself);
 *  - small CSV files written here: quoting, the tokenizer, train before test,
 *    the vocabulary's order, ties and <unk>, a word seen only in test rows,
 *    gathering (padding, truncation), and every malformed-file error with the
 *    file and line it names;
 *  - training: a federation on synthetic keyword text learns (accuracy far
 *    above chance), and the sparse embedding step gives the same model on 1
 *    and 2 threads;
 *  - the real AG News test split when it is present. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "algos/algos.h"
#include "check.h"
#include "fd_check.h" /* FD_TOL, check_grad, fd_all */
#include "data/data.h"
#include "fl/fl.h"
#include "nn/layers.h"
#include "nn/model.h"
#include "tiny.h"
#include "util/err.h"
#include "util/rng.h"

static char tmpdir[256];

/* ---- helpers ---- */

static int msg_has(const char *a, const char *b) {
    const char *m = pfl_errmsg();
    return strstr(m, a) != NULL && (!b || strstr(m, b) != NULL);
}

static void write_file_n(const char *sub, const char *name, const char *text, size_t len) {
    char dir[512], path[700], cmd[800];
    snprintf(dir, sizeof dir, "%s/%s/agnews", tmpdir, sub);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    if (system(cmd) != 0) exit(2);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(2);
    }
    fwrite(text, 1, len, f);
    fclose(f);
}

static void write_file(const char *sub, const char *name, const char *text) {
    write_file_n(sub, name, text, strlen(text));
}

static void data_dir(char *out, size_t n, const char *sub) { snprintf(out, n, "%s/%s", tmpdir, sub); }

/* The words of sample i, space-separated (provisional or final ids). */
static void sample_words(const pfl_dataset *d, int i, char *out, size_t n) {
    out[0] = '\0';
    size_t len = 0;
    for (long long j = d->text->offsets[i]; j < d->text->offsets[i + 1]; j++) {
        const char *w = pfl_text_word(d, d->text->tokens[j]);
        int k = snprintf(out + len, n - len, "%s%s", len ? " " : "", w ? w : "?");
        if (k < 0 || (size_t)k >= n - len) return;
        len += (size_t)k;
    }
}

/* ---- the layer ---- */

typedef struct {
    int B, L, V, D, pad;
    float *ids, *table, *out, *r;
} embed_ctx;

static double embed_loss(void *p) {
    embed_ctx *c = p;
    pfl_embed_mean_forward(c->out, c->ids, c->table, c->B, c->L, c->V, c->D, c->pad);
    double s = 0.0;
    for (long i = 0; i < (long)c->B * c->D; i++) s += (double)c->out[i] * c->r[i];
    return s;
}

static void test_embed_layer(int pad) {
    printf("embedding mean, padding_idx %d\n", pad);
    enum { B = 3, L = 6, V = 7, D = 5 };
    /* repeats within a row (id 3 twice), across rows, padding 0 at the ends,
     * and ids outside the table (7, -1, NaN) that must be skipped */
    float ids[B * L] = {3, 5, 3, 1, 0, 0, /**/ 6, 2, 0, 0, 0, 0, /**/ 4, 3, 7, -1, NAN, 0};
    float table[V * D], out[B * D], r[B * D], dtable[V * D], num[V * D];
    pfl_rng rng = tiny_rng(11);
    tiny_fill(table, V * D, -1.0, 1.0, &rng);
    tiny_fill(r, B * D, -1.0, 1.0, &rng);
    if (pad == 0) memset(table, 0, sizeof(float) * D); /* as nn.Embedding keeps its padding row */
    embed_ctx c = {B, L, V, D, pad, ids, table, out, r};
    embed_loss(&c);
    /* forward against a double reference: the mean over all L positions */
    double worst = 0.0;
    for (int b = 0; b < B; b++)
        for (int d = 0; d < D; d++) {
            double s = 0.0;
            for (int t = 0; t < L; t++) {
                float v = ids[b * L + t];
                if (!(v >= 0 && v < V)) continue;
                s += table[(int)v * D + d];
            }
            worst = fmax(worst, fabs(out[b * D + d] - s / L));
        }
    CHECK(worst <= 1e-6, "embedding mean forward off by %.3e", worst);
    memset(dtable, 0, sizeof dtable);
    pfl_embed_mean_backward(dtable, r, ids, B, L, V, D, pad);
    fd_all(num, table, V * D, 1e-2f, embed_loss, &c);
    if (pad == 0) /* FD sees the padding row (skipped by the forward) as constant, as the backward must */
        check_grad("embedding table (padding_idx 0)", num, dtable, V * D);
    else
        check_grad("embedding table (no padding_idx)", num, dtable, V * D);
    double pad_row = max_abs(dtable, D);
    if (pad == 0) CHECK(pad_row == 0.0, "padding row got gradient %.3e", pad_row);
    else CHECK(pad_row > 0.0, "row 0 is ordinary without padding_idx but got no gradient");
    /* accumulation: a second backward adds the same again */
    float twice[V * D];
    memcpy(twice, dtable, sizeof twice);
    pfl_embed_mean_backward(twice, r, ids, B, L, V, D, pad);
    double acc = 0.0;
    for (int i = 0; i < V * D; i++) acc = fmax(acc, fabs(twice[i] - 2.0 * dtable[i]));
    CHECK(acc <= 1e-6, "backward does not accumulate (off by %.3e)", acc);
    /* the rows a batch reads: distinct, first appearance, padding and bad ids left out */
    int rows[B * L];
    uint8_t mark[V] = {0};
    int n = pfl_embed_rows(rows, mark, ids, B * L, V, pad);
    const int expect0[] = {3, 5, 1, 6, 2, 4}, expect_none[] = {3, 5, 1, 0, 6, 2, 4};
    const int *expect = pad == 0 ? expect0 : expect_none;
    const int expect_n = pad == 0 ? 6 : 7;
    int same = n == expect_n;
    for (int k = 0; same && k < n; k++) same = rows[k] == expect[k];
    int clean = 1;
    for (int v = 0; v < V; v++) clean &= mark[v] == 0;
    CHECK(same && clean, "embedding rows: got %d rows (want %d), mark left clean %d", n, expect_n, clean);
}

/* ---- the model ---- */

static void test_fasttext_tables(void) {
    printf("fasttext tables\n");
    pfl_model m;
    CHECK(pfl_model_build(&m, "fasttext", 1, 1, PFL_TEXT_MAX_LEN, 4) == 0, "fasttext: %s", pfl_errmsg());
    /* PyTorch: 32000*512 + (512*512 + 512) + (512*4 + 4) */
    CHECK(m.num_params == 16648708u, "fasttext: %zu params, PyTorch's fastText(512, 0, 32000, 4) has 16648708",
          m.num_params);
    const char *const names[] = {"embedding.weight", "fc1.weight", "fc1.bias", "fc.weight", "fc.bias"};
    const char *const layers[] = {"embedding", "fc1", "fc"};
    CHECK(m.num_tensors == 5 && m.num_layers == 3, "fasttext: %d tensors, %d layers", m.num_tensors, m.num_layers);
    size_t off = 0;
    for (int t = 0; t < m.num_tensors && t < 5; t++) {
        CHECK(strcmp(m.tensors[t].name, names[t]) == 0 && m.tensors[t].offset == off, "tensor %d: %s at %zu", t,
              m.tensors[t].name, m.tensors[t].offset);
        off += m.tensors[t].length;
    }
    for (int l = 0; l < m.num_layers && l < 3; l++)
        CHECK(strcmp(m.layers[l].name, layers[l]) == 0, "layer %d: %s", l, m.layers[l].name);
    CHECK(m.tensors[0].shape[0] == 32000 && m.tensors[0].shape[1] == 512, "embedding shape %dx%d",
          m.tensors[0].shape[0], m.tensors[0].shape[1]);
    CHECK(m.layers[0].num_tensors == 1 && m.layers[1].num_tensors == 2, "embedding has no bias");
    CHECK(pfl_model_vocab(&m) == 32000, "vocab %d", pfl_model_vocab(&m));
    /* FedALA's fastText (hidden 32, its AG News vocabulary of 98635): Table 6
     * gives ALA's weights for p = 1, 2, 3 as 132, 1188 and 3157508 */
    CHECK(pfl_model_build(&m, "fasttext:98635:32", 1, 1, 200, 4) == 0, "fasttext:98635:32: %s", pfl_errmsg());
    CHECK(m.num_params == 3157508u, "fasttext:98635:32: %zu params, FedALA Table 6 p=3: 3157508", m.num_params);
    CHECK(m.layers[2].length == 132 && m.layers[1].length + m.layers[2].length == 1188,
          "FedALA Table 6: p=1 132 (got %zu), p=2 1188 (got %zu)", m.layers[2].length,
          m.layers[1].length + m.layers[2].length);
    /* malformed options and inputs */
    CHECK(pfl_model_build(&m, "fasttext", 1, 28, 28, 10) < 0 && msg_has("token ids", NULL), "fasttext on images: %s",
          pfl_errmsg());
    CHECK(pfl_model_build(&m, "fasttext:2", 1, 1, 200, 4) < 0 && msg_has("fasttext:VOCAB", NULL), "vocab 2 accepted");
    CHECK(pfl_model_build(&m, "fasttext:100:0", 1, 1, 200, 4) < 0, "dim 0 accepted");
    CHECK(pfl_model_build(&m, "fasttext:abc", 1, 1, 200, 4) < 0, "fasttext:abc accepted");
    CHECK(pfl_model_build(&m, "fasttext:100:8:3", 1, 1, 200, 4) < 0, "three options accepted");
    CHECK(pfl_model_known("fasttext") && pfl_model_known("fasttext:100") && pfl_model_known("fasttext:100:8") &&
              !pfl_model_known("fasttext:x") && !pfl_model_known("fasttextx") && !pfl_model_known("fasttext:1"),
          "pfl_model_known disagrees with pfl_model_build on fasttext names");
    CHECK(pfl_model_build(&m, "dnn", 1, 28, 28, 10) == 0 && pfl_model_vocab(&m) == 0, "dnn has a vocabulary");
}

static void test_fasttext_init(void) {
    printf("fasttext init\n");
    pfl_model m;
    if (pfl_model_build(&m, "fasttext:2000:64", 1, 1, 200, 4)) exit(2);
    float *p = tiny_floats(m.num_params);
    pfl_rng r = tiny_rng(5);
    pfl_model_init_params(&m, p, &r);
    const long n = (long)m.layers[0].length;
    double sum = 0.0, sq = 0.0;
    for (long i = 64; i < n; i++) sum += p[i], sq += (double)p[i] * p[i];
    const double mean = sum / (double)(n - 64), sd = sqrt(sq / (double)(n - 64) - mean * mean);
    printf("  embedding: mean %.4f std %.4f over %ld values, padding row max |p| %.1f\n", mean, sd, n - 64,
           max_abs(p, 64));
    /* 127936 standard normal draws: the mean's sd is 0.0028, the sd's 0.002 */
    CHECK(fabs(mean) < 0.015 && fabs(sd - 1.0) < 0.015, "embedding not N(0,1): mean %.4f std %.4f", mean, sd);
    CHECK(max_abs(p, 64) == 0.0, "padding row not zero");
    for (int l = 1; l < 3; l++) {
        double bound = 1.0 / sqrt((double)m.tensors[m.layers[l].first_tensor].shape[1]);
        double mx = max_abs(p + m.layers[l].offset, (long)m.layers[l].length);
        CHECK(mx <= bound && mx >= 0.9 * bound, "%s: max |p| %.4g, bound %.4g", m.layers[l].name, mx, bound);
    }
    free(p);
}

typedef struct {
    pfl_workspace *ws;
    float *params, *x;
    uint8_t *y;
    int B;
} model_ctx;

static double model_loss(void *pc) {
    model_ctx *c = pc;
    return pfl_forward_loss(c->ws, c->params, c->x, c->y, c->B, false, NULL);
}

static void test_fasttext_fd(void) {
    printf("fasttext backward against finite differences of the loss\n");
    enum { B = 3, L = 8 };
    pfl_model m;
    if (pfl_model_build(&m, "fasttext:12:6", 1, 1, L, 4)) exit(2);
    float *p = tiny_floats(m.num_params), *g = tiny_floats(m.num_params), *num = tiny_floats(m.num_params);
    pfl_rng r = tiny_rng(9);
    pfl_model_init_params(&m, p, &r);
    float x[B * L] = {2, 5, 5, 11, 3, 0, 0, 0, /**/ 7, 1, 9, 4, 6, 2, 8, 10, /**/ 5, 0, 0, 0, 0, 0, 0, 0};
    uint8_t y[B] = {1, 3, 0};
    pfl_workspace *ws = pfl_workspace_create(&m, B);
    model_ctx c = {ws, p, x, y, B};
    model_loss(&c);
    pfl_backward(ws, p, y, g);
    fd_all(num, p, (long)m.num_params, 1e-2f, model_loss, &c);
    for (int t = 0; t < m.num_tensors; t++) {
        const pfl_tensor *tt = &m.tensors[t];
        /* the padding row is constant in the forward (skipped); FD agrees on 0 */
        check_grad(tt->name, num + tt->offset, g + tt->offset, (long)tt->length);
    }
    CHECK(max_abs(g, 6) == 0.0, "padding row has a gradient");
    const int *rows;
    int n = pfl_workspace_embedding_rows(ws, &rows);
    CHECK(n == 11, "the batch reads 11 distinct rows (all but 0), workspace says %d", n);
    pfl_workspace_free(ws);
    free(p), free(g), free(num);
}

/* ---- CSV, tokenizer, vocabulary ---- */

static void test_agnews_read(void) {
    printf("agnews: CSV and tokenizer\n");
    char dir[400];
    data_dir(dir, sizeof dir, "ok");
    /* row 1: quotes, doubled quotes, a comma and a backslash inside quotes;
     * row 2 unquoted, CRLF; a blank line; row 3 with a newline inside a quote */
    write_file("ok", "test.csv",
               "\"3\",\"Fears for T N pension\",\"Unions say \"\"disappointed\"\", talks\\team #39;s U.S.\"\n"
               "1,Plain title,plain TEXT 2004\r\n"
               "\n"
               "\"2\",\"two\nlines\",\"\"\n");
    write_file("ok", "train.csv", "\"4\",\"Train first\",\"Zebra\"\n");
    pfl_dataset d;
    int ok = pfl_dataset_load(&d, "agnews", dir) == 0;
    CHECK(ok, "load: %s", pfl_errmsg());
    if (!ok) return;
    CHECK(d.n == 4 && d.c == 1 && d.h == 1 && d.w == PFL_TEXT_MAX_LEN && d.classes == 4 && d.text && !d.pixels,
          "shape: n %d %dx%dx%d classes %d", d.n, d.c, d.h, d.w, d.classes);
    CHECK(d.from_train_files == 1, "agnews: %d rows from train.csv, want 1", d.from_train_files);
    CHECK(d.labels[0] == 3 && d.labels[1] == 2 && d.labels[2] == 0 && d.labels[3] == 1, "labels %d %d %d %d",
          d.labels[0], d.labels[1], d.labels[2], d.labels[3]);
    const char *expect[4] = {"train first zebra",
                             "fears for t n pension unions say disappointed talks team 39 s u s",
                             "plain title plain text 2004", "two lines"};
    for (int i = 0; i < 4; i++) {
        char got[512];
        sample_words(&d, i, got, sizeof got);
        CHECK(strcmp(got, expect[i]) == 0, "row %d: '%s', want '%s'", i, got, expect[i]);
    }
    /* provisional ids: first appearance order, one id per distinct word */
    CHECK(d.text->num_words == 22 && strcmp(pfl_text_word(&d, 0), "train") == 0, "%d words, first '%s'",
          d.text->num_words, pfl_text_word(&d, 0));
    pfl_dataset_free(&d);
}

/* Client 0 trains on rows 0-3 and tests on row 4; client 1 trains on rows
 * 5-6 and tests on row 7; row 8 belongs to nobody (a held-out sample). */
static const char vocab_csv[] =
    "1,a,\"bb bb bb cc\"\n"         /* 0: train */
    "1,a,\"dd cc zz\"\n"            /* 1: train */
    "2,b,\"aa aa\"\n"               /* 2: train */
    "2,b,\"ee\"\n"                  /* 3: train */
    "3,c,\"onlytest bb\"\n"         /* 4: test */
    "3,c,\"zz dd\"\n"               /* 5: train */
    "4,d,\"yy\"\n"                  /* 6: train */
    "4,d,\"alsotest\"\n"            /* 7: test */
    "4,d,\"heldout heldout heldout heldout\"\n"; /* 8: nobody's */

static pfl_partition vocab_partition(void) {
    const int n_train[2] = {4, 2}, n_test[2] = {1, 1};
    return tiny_partition(2, n_train, n_test);
}

static void test_vocabulary(void) {
    printf("agnews: vocabulary from the training clients\n");
    char dir[400];
    data_dir(dir, sizeof dir, "vocab");
    write_file("vocab", "test.csv", vocab_csv);
    pfl_dataset d;
    if (pfl_dataset_load(&d, "agnews", dir)) {
        CHECK(0, "load: %s", pfl_errmsg());
        return;
    }
    pfl_partition p = vocab_partition();
    /* training counts: bb 3; a, aa, b, cc, dd, zz 2; c, d, ee, yy 1 -> bb, then
     * the 2s in byte order ("a" before "aa"), then the 1s, cut at 7 words */
    CHECK(pfl_text_build_vocab(&d, &p, 9) == 0, "build: %s", pfl_errmsg());
    const char *expect[9] = {"<pad>", "<unk>", "bb", "a", "aa", "b", "cc", "dd", "zz"};
    for (int id = 0; id < 9; id++) {
        const char *w = pfl_text_word(&d, id);
        CHECK(w && strcmp(w, expect[id]) == 0, "id %d is '%s', want '%s'", id, w ? w : "(null)", expect[id]);
    }
    CHECK(d.text->vocab_size == 9 && d.text->vocab_words == 7, "vocab %d, words %d", d.text->vocab_size,
          d.text->vocab_words);
    /* test rows and the held-out row: their own words are <unk>, even when frequent there */
    char got[256];
    sample_words(&d, 4, got, sizeof got);
    CHECK(strcmp(got, "<unk> <unk> bb") == 0, "row 4: '%s'", got);
    sample_words(&d, 8, got, sizeof got);
    CHECK(strcmp(got, "<unk> <unk> <unk> <unk> <unk>") == 0, "row 8 (nobody's): '%s'", got);
    /* the words cut by the cap (c, d, ee, yy: count 1) are <unk> too */
    sample_words(&d, 6, got, sizeof got);
    CHECK(strcmp(got, "<unk> <unk>") == 0, "row 6: '%s'", got);
    /* gather: ids as floats, padded with 0 to 200 */
    float x[2 * PFL_TEXT_MAX_LEN];
    uint8_t y[2];
    int idx[2] = {0, 8};
    pfl_dataset_gather(&d, idx, 2, x, y);
    /* row 0: a bb bb bb cc */
    const float head[5] = {3, 2, 2, 2, 6};
    int pad_ok = 1;
    for (int j = 5; j < PFL_TEXT_MAX_LEN; j++) pad_ok &= x[j] == 0.0f;
    CHECK(memcmp(x, head, sizeof head) == 0 && pad_ok && y[0] == 0 && y[1] == 3,
          "gather row 0: %g %g %g %g %g ..., padding %d, labels %d %d", x[0], x[1], x[2], x[3], x[4], pad_ok, y[0],
          y[1]);
    /* errors: twice, bad sizes, an image dataset */
    CHECK(pfl_text_build_vocab(&d, &p, 9) < 0 && msg_has("already", NULL), "second build accepted");
    pfl_dataset_free(&d);
    if (pfl_dataset_load(&d, "agnews", dir)) exit(2);
    CHECK(pfl_text_build_vocab(&d, &p, 2) < 0 && msg_has("<pad>", NULL), "vocab 2 accepted");
    CHECK(pfl_text_build_vocab(&d, &p, PFL_TEXT_MAX_VOCAB + 1) < 0, "vocab 2^24+1 accepted");
    /* a vocabulary larger than the words: every training word gets an id */
    CHECK(pfl_text_build_vocab(&d, &p, 1000) == 0 && d.text->vocab_words == 11, "words %d of 11",
          d.text->vocab_words);
    sample_words(&d, 6, got, sizeof got);
    CHECK(strcmp(got, "d yy") == 0, "row 6 with room for every word: '%s'", got);
    sample_words(&d, 4, got, sizeof got); /* a word seen only in a test row stays <unk> */
    CHECK(strcmp(got, "c <unk> bb") == 0, "row 4 with room for every word: '%s'", got);
    pfl_dataset_free(&d);
    pfl_dataset img = tiny_dataset(4, 1, 2, 2, 2, 1);
    CHECK(pfl_text_build_vocab(&img, &p, 10) < 0 && msg_has("not a text dataset", NULL), "image dataset accepted");
    tiny_dataset_free(&img);
    tiny_partition_free(&p);
}

static void test_truncation(void) {
    printf("agnews: truncation at %d tokens\n", PFL_TEXT_MAX_LEN);
    /* 250 tokens w0 .. w249: the first 200 are kept */
    static char csv[4096];
    int len = snprintf(csv, sizeof csv, "1,\"\",\"");
    for (int i = 0; i < 250; i++) len += snprintf(csv + len, sizeof csv - (size_t)len, "w%d ", i);
    snprintf(csv + len, sizeof csv - (size_t)len, "\"\n2,x,y\n");
    write_file("long", "test.csv", csv);
    char dir[400];
    data_dir(dir, sizeof dir, "long");
    pfl_dataset d;
    if (pfl_dataset_load(&d, "agnews", dir)) {
        CHECK(0, "load: %s", pfl_errmsg());
        return;
    }
    const int n_train[1] = {2}, n_test[1] = {0};
    pfl_partition p = tiny_partition(1, n_train, n_test);
    CHECK(pfl_text_build_vocab(&d, &p, 1000) == 0, "build: %s", pfl_errmsg());
    float x[PFL_TEXT_MAX_LEN];
    int idx = 0;
    pfl_dataset_gather(&d, &idx, 1, x, NULL);
    int ok = 1;
    for (int j = 0; j < PFL_TEXT_MAX_LEN; j++) {
        char want[16];
        snprintf(want, sizeof want, "w%d", j);
        const char *w = pfl_text_word(&d, (int)x[j]);
        ok &= w && strcmp(w, want) == 0;
    }
    CHECK(ok && d.text->offsets[1] == 250, "truncation: the first 200 of 250 tokens, in order");
    tiny_partition_free(&p);
    pfl_dataset_free(&d);
}

static void expect_bad(const char *what, const char *csv, const char *needle) {
    write_file("bad", "test.csv", csv);
    char dir[400], where[500];
    data_dir(dir, sizeof dir, "bad");
    snprintf(where, sizeof where, "agnews: %s/agnews/test.csv:", dir);
    pfl_dataset d;
    int rc = pfl_dataset_load(&d, "agnews", dir);
    CHECK(rc < 0 && msg_has(where, needle), "%s: rc %d, message '%s' (want '%s' and '%s')", what, rc, pfl_errmsg(),
          where, needle);
    if (rc == 0) pfl_dataset_free(&d);
    else printf("  %-26s -> %s\n", what, pfl_errmsg());
}

/* Bytes a message must not print raw: a NUL cut the message
 * short, a newline split it; a UTF-8 byte-order mark was "a quote inside an
 * unquoted field". */
static void expect_bad_bytes(const char *what, const char *csv, size_t len, const char *needle) {
    write_file_n("badbytes", "test.csv", csv, len);
    char dir[400];
    data_dir(dir, sizeof dir, "badbytes");
    pfl_dataset d;
    int rc = pfl_dataset_load(&d, "agnews", dir);
    CHECK(rc < 0 && msg_has(needle, NULL) && !strchr(pfl_errmsg(), '\n'), "%s: rc %d, message '%s' (want '%s')", what,
          rc, pfl_errmsg(), needle);
    if (rc == 0) pfl_dataset_free(&d);
}

static void test_hostile_bytes(void) {
    static const char nul_nl[] = "\"1\0x\ny\",a,b\n";
    expect_bad_bytes("NUL and newline in the class", nul_nl, sizeof nul_nl - 1,
                     "test.csv:1: class index '1\\x00x\\x0ay' is not one of 1-4");
    static const char nul_after[] = "\"1\"\0,a,b\n";
    expect_bad_bytes("NUL after a closing quote", nul_after, sizeof nul_after - 1,
                     "test.csv:1: unexpected '\\x00' after a closing quote");
    static const char utf8[] = "\xc3\xa9,a,b\n";
    expect_bad_bytes("UTF-8 class", utf8, sizeof utf8 - 1, "class index '\\xc3\\xa9' is not one of 1-4");
    static const char utf16[] = "\xff\xfe\"\0" "1\0\"\0,\0";
    expect_bad_bytes("UTF-16", utf16, sizeof utf16 - 1, "test.csv: UTF-16 text (byte-order mark FF FE)");
    write_file("bom", "test.csv", "\xef\xbb\xbf\"3\",Title,text\n1,a,b\n");
    char dir[400];
    data_dir(dir, sizeof dir, "bom");
    pfl_dataset d;
    int rc = pfl_dataset_load(&d, "agnews", dir);
    CHECK(rc == 0 && d.n == 2 && d.labels[0] == 2 && d.labels[1] == 0, "UTF-8 byte-order mark: rc %d (%s)", rc,
          pfl_errmsg());
    if (rc == 0) pfl_dataset_free(&d);
}

static void test_malformed(void) {
    printf("agnews: malformed files\n");
    expect_bad("unterminated quote", "1,a,b\n2,\"open,b\n3,c,d\n", "test.csv:2: unterminated quoted field");
    expect_bad("text after a quote", "1,a,b\n1,\"a\"x,b\n", "test.csv:2: unexpected 'x' after a closing quote");
    expect_bad("quote left open", "1,a,b\n2,\"open,b\n\"3\",c,d\n",
               "test.csv:3: unexpected '3' after a closing quote (expected a comma or the end of the line; the quoted "
               "field began on line 2)");
    expect_bad("quote inside a field", "1,a\"b,c\n", "test.csv:1: quote inside an unquoted field");
    expect_bad("two fields", "1,a,b\n\n1,a\n", "test.csv:3: expected 3 fields");
    expect_bad("four fields", "1,a,b,c\n", "test.csv:1: expected 3 fields");
    expect_bad("class 0", "0,a,b\n", "test.csv:1: class index '0' is not one of 1-4");
    expect_bad("class 5", "1,a,b\n5,a,b\n", "test.csv:2: class index '5'");
    expect_bad("class 12", "\"12\",a,b\n", "class index '12'");
    expect_bad("class x", "x,a,b\n", "class index 'x'");
    expect_bad("empty class", ",a,b\n", "class index ''");
    expect_bad("line after a multi-line field", "1,\"a\nb\",c\n9,a,b\n", "test.csv:3: class index '9'");
    write_file("empty", "test.csv", "");
    char dir[400];
    data_dir(dir, sizeof dir, "empty");
    pfl_dataset d;
    CHECK(pfl_dataset_load(&d, "agnews", dir) < 0 && msg_has("test.csv: no rows", NULL), "empty file: %s",
          pfl_errmsg());
    data_dir(dir, sizeof dir, "missing");
    CHECK(pfl_dataset_load(&d, "agnews", dir) < 0 && msg_has("missing/agnews/test.csv", "fetch-data.sh"),
          "missing file: %s", pfl_errmsg());
    /* a malformed train.csv is named as such */
    write_file("badtrain", "test.csv", "1,a,b\n");
    write_file("badtrain", "train.csv", "1,a,b\n7,a,b\n");
    data_dir(dir, sizeof dir, "badtrain");
    CHECK(pfl_dataset_load(&d, "agnews", dir) < 0 && msg_has("agnews/train.csv:2: class index '7'", NULL),
          "bad train.csv: %s", pfl_errmsg());
}

/* ---- training ---- */

static const char *const keywords[4] = {"world", "sports", "business", "science"};

/* n rows: label k (round robin) has its keyword among 3-8 filler words
 * drawn from 40 shared ones. */
static void write_keyword_csv(int n, uint64_t seed) {
    static char csv[200000];
    pfl_rng r = tiny_rng(seed);
    int len = 0;
    for (int i = 0; i < n; i++) {
        const int k = i % 4, words = 3 + (int)pfl_rng_below(&r, 6), at = (int)pfl_rng_below(&r, (uint64_t)words);
        len += snprintf(csv + len, sizeof csv - (size_t)len, "%d,\"headline\",\"", k + 1);
        for (int j = 0; j < words; j++) {
            if (j == at) len += snprintf(csv + len, sizeof csv - (size_t)len, "%s ", keywords[k]);
            len += snprintf(csv + len, sizeof csv - (size_t)len, "f%d ", (int)pfl_rng_below(&r, 40));
        }
        len += snprintf(csv + len, sizeof csv - (size_t)len, "\"\n");
    }
    write_file("keywords", "test.csv", csv);
}

typedef struct {
    double first_loss, last_loss, last_acc;
} run_log;

static void on_round(const pfl_round_metrics *mt, const pfl_fl *fl, void *ctx) {
    (void)fl;
    run_log *log = ctx;
    if (mt->round == 1) log->first_loss = mt->train_loss;
    log->last_loss = mt->train_loss;
    log->last_acc = mt->global_acc;
}

/* Trains fasttext:64:16 with `algo` on 4 clients; returns the final global
 * parameters (caller frees) and fills the log. */
static float *train_keywords(const char *algo, int threads, const char *partition, run_log *log, size_t *num_params) {
    char dir[400];
    data_dir(dir, sizeof dir, "keywords");
    pfl_dataset d;
    pfl_partition p;
    pfl_partition_spec spec;
    pfl_model m;
    if (pfl_dataset_load(&d, "agnews", dir)) exit(2);
    /* rows have at most 10 tokens: a sequence of 12 (not 200) keeps the
     * mean from diluting the keyword 20-fold, so a few rounds suffice */
    d.w = d.text->max_len = 12;
    if (pfl_partition_parse(&spec, partition) ||
        pfl_partition_make(&p, &d, &spec, 4, 3) || pfl_model_build(&m, "fasttext:64:16", 1, 1, d.w, d.classes)) {
        fprintf(stderr, "setup: %s\n", pfl_errmsg());
        exit(2);
    }
    pfl_config cfg = tiny_config(4);
    cfg.rounds = 8, cfg.batch = 10, cfg.eval_batch = 50, cfg.lr = 0.5f, cfg.threads = threads;
    cfg.algo.mu = 0.0f; /* fedprox: a proximal term of zero */
    pfl_fl fl;
    /* the vocabulary comes after the partition; without it training is refused */
    CHECK(pfl_fl_create(&fl, &cfg, &m, &d, &p, pfl_algo_find("fedavg")) < 0 && msg_has("no vocabulary", NULL),
          "training before the vocabulary: %s", pfl_errmsg());
    if (pfl_text_build_vocab(&d, &p, 64) || pfl_fl_create(&fl, &cfg, &m, &d, &p, pfl_algo_find(algo)) ||
        pfl_fl_run(&fl, on_round, log)) {
        fprintf(stderr, "run: %s\n", pfl_errmsg());
        exit(2);
    }
    float *out = tiny_floats(m.num_params);
    memcpy(out, fl.global, sizeof(float) * m.num_params);
    *num_params = m.num_params;
    pfl_fl_destroy(&fl);
    pfl_partition_free(&p);
    pfl_dataset_free(&d);
    return out;
}

static void test_training(void) {
    printf("fasttext learns keywords (FedAvg, 4 clients)\n");
    write_keyword_csv(800, 21);
    run_log a = {0}, b = {0}, c = {0};
    size_t n = 0;
    float *one = train_keywords("fedavg", 1, "iid", &a, &n), *two = train_keywords("fedavg", 2, "iid", &b, &n);
    printf("  iid: train loss %.4f -> %.4f, global accuracy %.4f\n", a.first_loss, a.last_loss, a.last_acc);
    CHECK(a.last_acc >= 0.9, "keyword accuracy %.4f (chance 0.25)", a.last_acc);
    CHECK(a.last_loss < 0.5 * a.first_loss, "train loss %.4f -> %.4f did not halve", a.first_loss, a.last_loss);
    CHECK(memcmp(one, two, sizeof(float) * n) == 0, "1 and 2 threads give different models");
    /* FedAvg's plain SGD takes the sparse embedding step; FedProx's gradient
     * hook forces the dense one, and with mu 0 it adds exact zeros: the
     * models must agree bit for bit */
    run_log e = {0};
    float *dense = train_keywords("fedprox", 2, "iid", &e, &n);
    CHECK(memcmp(one, dense, sizeof(float) * n) == 0, "the sparse embedding step differs from the dense step");
    float *skew = train_keywords("fedavg", 2, "dir:0.5:10", &c, &n);
    printf("  dir:0.5: global accuracy %.4f\n", c.last_acc);
    CHECK(c.last_acc > 0.6, "keyword accuracy on dir:0.5 %.4f", c.last_acc);
    free(one), free(two), free(dense), free(skew);
}

/* ---- the real file ---- */

static void test_real_agnews(void) {
    const char *env = getenv("PFL_DATA");
    char dir[600] = "";
    struct stat st;
    char probe[700];
    snprintf(probe, sizeof probe, "%s/agnews/test.csv", env && *env ? env : "data");
    if (stat(probe, &st) == 0) snprintf(dir, sizeof dir, "%s", env && *env ? env : "data");
    else if (stat("../shared/data/ag_news/test.csv", &st) == 0) {
        /* the shared copy, linked into a data directory of our own */
        char cmd[900];
        data_dir(dir, sizeof dir, "real");
        snprintf(cmd, sizeof cmd,
                 "mkdir -p '%s/agnews' && ln -s \"$(pwd)/../shared/data/ag_news/test.csv\" '%s/agnews/'", dir, dir);
        if (system(cmd) != 0) dir[0] = '\0';
    }
    if (!dir[0]) {
        printf("agnews: no real test.csv (data/agnews or ../shared/data/ag_news); skipped\n");
        return;
    }
    printf("agnews: the real test split from %s\n", dir);
    pfl_dataset d;
    if (pfl_dataset_load(&d, "agnews", dir)) {
        CHECK(0, "load: %s", pfl_errmsg());
        return;
    }
    int per_class[4] = {0};
    for (int i = 0; i < d.n; i++) per_class[d.labels[i]]++;
    char first[200];
    sample_words(&d, 0, first, sizeof first);
    printf("  %d rows, %d distinct words, %lld tokens; row 0: %.60s...\n", d.n, d.text->num_words,
           d.text->offsets[d.n], first);
    CHECK(d.n == 7600 && per_class[0] == 1900 && per_class[1] == 1900 && per_class[2] == 1900 &&
              per_class[3] == 1900,
          "%d rows, classes %d %d %d %d (want 7600, 1900 each)", d.n, per_class[0], per_class[1], per_class[2],
          per_class[3]);
    CHECK(strncmp(first, "fears for t n pension after talks unions", 40) == 0, "row 0: %s", first);
    pfl_dataset_free(&d);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/pfl-test-text-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    test_embed_layer(0);
    test_embed_layer(-1);
    test_fasttext_tables();
    test_fasttext_init();
    test_fasttext_fd();
    test_agnews_read();
    test_vocabulary();
    test_truncation();
    test_malformed();
    test_hostile_bytes();
    test_training();
    test_real_agnews();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    TEST_MAIN_END();
}
