/* pfl against PyTorch, in the manner of llm.c's test_gpt2.c.
 *
 * scripts/make_fixtures.py builds PFLlib's models in PyTorch (default init,
 * fixed seeds), runs one batch through CrossEntropyLoss and backward, and
 * dumps input, labels, parameters, logits, loss and every gradient into
 * tests/fixtures/<case>.bin (the format is documented in that script). This
 * test loads each file, builds the same model with pfl_model_build, copies
 * the parameters in, runs pfl_forward_loss + pfl_backward and compares the
 * logits, the loss and the gradient of every tensor, printing the worst
 * difference per tensor.
 *
 * dnn/mlp: PFLlib's DNN ends with log_softmax before CrossEntropyLoss, pfl's
 * stops at the last Linear. The fixture's logits are the torch model's
 * PRE-log_softmax output (what pfl_forward returns) while its loss and
 * gradients come from the model WITH log_softmax; matching them shows that
 * dropping the (idempotent) log_softmax changes nothing.
 *
 * tsdp-cnn has dropout: its fixture comes from the torch model in eval mode
 * (dropout the identity), and pfl_forward_loss below gets no rng, which makes
 * pfl's dropout the identity too. Training-mode equality is not expected:
 * pfl draws its masks from its own stream.
 *
 * Fixtures are read from $PFL_FIXTURES if set, else tests/fixtures (the test
 * runner works from the repository root). A missing fixture is a failure,
 * not a skip.
 *
 * Tolerance: |pfl - torch| <= 1e-4 * max(|torch|, floor), floor = 1e-2 * the
 * largest |torch| value of the same tensor (logits: of all logits).
 * Why a floor: each value is a float32 sum over up to 2304 products (the
 * conv1 weight gradient sums B*24*24 terms) that pfl (OpenBLAS, im2col) and
 * PyTorch (its own kernels) add in different orders, so the absolute
 * rounding error of an element scales with the size of the terms, i.e. with
 * the tensor's typical gradient, not with the element itself: an element
 * that is small because its terms cancel carries the absolute error of its
 * big neighbours, and a pure relative test on it would be testing rounding
 * noise. Below 1% of the tensor's largest value the check therefore becomes
 * absolute, at 1e-6 of that largest value (about 10 float32 ulps of it).
 * Elements above the floor, which is nearly all of them, are held to a
 * genuine 1e-4 relative error. Measured: the worst is ~3e-5 (conv weights);
 * with the floor at 1e-3 instead, a few conv weight entries reach 1.5e-4, and
 * with no floor, entries that cancel to ~1e-7 differ by tens of percent.
 *
 * The absolute check below the floor is at least the rounding of the
 * longest sum, sqrt(K) * u * max|torch| (K = 2304 terms, u = 2^-24: 2.9e-6
 * of the largest value, the usual random-walk bound of a float32 sum of K
 * terms no larger than it). The 1e-6 alone was fitted to OpenBLAS's
 * SkylakeX kernels; its Haswell kernels (OPENBLAS_CORETYPE=Haswell, which
 * some machines set) add conv1's weight gradient in another order and one
 * cancelled entry of the CIFAR cnn (6.8e-5 of a largest 1.6e-2) lands at
 * 1.1e-6 of the largest, 9.5 float32 ulps of it. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "nn/model.h"
#include "util/err.h"

#define REL_TOL 1e-4
#define SUM_TERMS_MAX 2304.0 /* the longest float32 sum in the fixtures: conv1's weight gradient, B*24*24 */
#ifndef FLOOR_FRACTION
#define FLOOR_FRACTION 1e-2 /* -DFLOOR_FRACTION=... to explore */
#endif

typedef struct {
    char model[17];
    int B, C, H, W, classes, num_params;
    int num_tensors;
    char names[PFL_MAX_TENSORS][41];
    int ndim[PFL_MAX_TENSORS], shape[PFL_MAX_TENSORS][4];
    float *x;
    uint8_t *labels;
    float *params, *logits, loss, *grads;
} fixture;

/* ---- reading little-endian values whatever the host's byte order ---- */

static int read_bytes(FILE *f, void *buf, size_t n) { return fread(buf, 1, n, f) == n ? 0 : -1; }

static int read_i32(FILE *f, int32_t *v) {
    unsigned char b[4];
    if (read_bytes(f, b, 4)) return -1;
    *v = (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24);
    return 0;
}

static int read_f32s(FILE *f, float *out, long n) {
    for (long i = 0; i < n; i++) {
        int32_t bits;
        if (read_i32(f, &bits)) return -1;
        uint32_t u = (uint32_t)bits;
        memcpy(&out[i], &u, sizeof(float));
    }
    return 0;
}

static void fixture_free(fixture *fx) {
    free(fx->x);
    free(fx->labels);
    free(fx->params);
    free(fx->logits);
    free(fx->grads);
    memset(fx, 0, sizeof *fx);
}

/* Returns 0, or -1 after printing what is wrong with the file. */
static int fixture_load(fixture *fx, const char *path) {
    memset(fx, 0, sizeof *fx);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: missing fixture: %s (run from the repository root, point PFL_FIXTURES at the folder "
                        "holding it, or regenerate with scripts/make_fixtures.py)\n", path, strerror(errno));
        return -1;
    }
    const char *why = NULL;
    char magic[8], name[16];
    int32_t hdr[6], T;
    if (read_bytes(f, magic, 8) || memcmp(magic, "PFLFIX01", 8) != 0) {
        why = "bad magic (expected PFLFIX01)";
        goto fail;
    }
    if (read_bytes(f, name, 16) || read_i32(f, &hdr[0]) || read_i32(f, &hdr[1]) || read_i32(f, &hdr[2]) ||
        read_i32(f, &hdr[3]) || read_i32(f, &hdr[4]) || read_i32(f, &hdr[5]) || read_i32(f, &T)) {
        why = "truncated header";
        goto fail;
    }
    memcpy(fx->model, name, 16);
    fx->model[16] = '\0';
    fx->B = hdr[0], fx->C = hdr[1], fx->H = hdr[2], fx->W = hdr[3], fx->classes = hdr[4], fx->num_params = hdr[5];
    if (fx->B <= 0 || fx->B > 1024 || fx->C <= 0 || fx->H <= 0 || fx->W <= 0 || fx->classes <= 1 ||
        fx->classes > 256 || fx->num_params <= 0 || T <= 0 || T > PFL_MAX_TENSORS) {
        why = "implausible header";
        goto fail;
    }
    fx->num_tensors = T;
    for (int t = 0; t < T; t++) {
        char tname[40];
        int32_t nd, sh[4];
        if (read_bytes(f, tname, 40) || read_i32(f, &nd) || read_i32(f, &sh[0]) || read_i32(f, &sh[1]) ||
            read_i32(f, &sh[2]) || read_i32(f, &sh[3]) || nd < 1 || nd > 4) {
            why = "bad tensor record";
            goto fail;
        }
        memcpy(fx->names[t], tname, 40);
        fx->names[t][40] = '\0';
        fx->ndim[t] = nd;
        for (int d = 0; d < 4; d++) fx->shape[t][d] = sh[d];
    }
    const long in_n = (long)fx->B * fx->C * fx->H * fx->W, logit_n = (long)fx->B * fx->classes;
    fx->x = malloc(sizeof(float) * (size_t)in_n);
    fx->labels = malloc((size_t)fx->B);
    fx->params = malloc(sizeof(float) * (size_t)fx->num_params);
    fx->logits = malloc(sizeof(float) * (size_t)logit_n);
    fx->grads = malloc(sizeof(float) * (size_t)fx->num_params);
    if (!fx->x || !fx->labels || !fx->params || !fx->logits || !fx->grads) {
        why = "out of memory";
        goto fail;
    }
    if (read_f32s(f, fx->x, in_n)) {
        why = "truncated input";
        goto fail;
    }
    for (int n = 0; n < fx->B; n++) {
        int32_t y;
        if (read_i32(f, &y) || y < 0 || y >= fx->classes) {
            why = "bad or truncated labels";
            goto fail;
        }
        fx->labels[n] = (uint8_t)y;
    }
    if (read_f32s(f, fx->params, fx->num_params) || read_f32s(f, fx->logits, logit_n) ||
        read_f32s(f, &fx->loss, 1) || read_f32s(f, fx->grads, fx->num_params)) {
        why = "truncated data";
        goto fail;
    }
    char end[9] = {0};
    if (read_bytes(f, end, 8) || memcmp(end, "PFLFIXND", 8) != 0 || fgetc(f) != EOF) {
        why = "end marker missing or trailing bytes (sizes in the header disagree with the data)";
        goto fail;
    }
    fclose(f);
    return 0;
fail:
    fprintf(stderr, "%s: %s\n", path, why);
    fclose(f);
    fixture_free(fx);
    return -1;
}

/* ---- comparison ---- */

/* Compares n values of pfl (a) with PyTorch (b) under the tolerance described
 * at the top, prints one llm.c-style line and returns 1 when all are within. */
static int compare(const char *what, const float *a, const float *b, long n) {
    double maxref = 0.0;
    for (long i = 0; i < n; i++)
        if (fabs(b[i]) > maxref) maxref = fabs(b[i]);
    const double floor_v = FLOOR_FRACTION * maxref;
    /* below the floor: the larger of 1e-4 of the floor and the rounding of a K-term float32 sum */
    const double rounding = sqrt(SUM_TERMS_MAX) * (FLT_EPSILON / 2) * maxref;
    const double floor_scale = fmax(floor_v, rounding / REL_TOL);
    double worst_rel = 0.0, worst_abs = 0.0;
    long worst_i = 0, bad = 0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        double scale = fabs(b[i]) > floor_v ? fabs(b[i]) : floor_scale;
        /* all-zero reference (e.g. a tensor with no gradient): demand exact zeros */
        double rel = scale > 0.0 ? d / scale : (d > 0.0 ? INFINITY : 0.0);
        if (!(rel <= REL_TOL)) bad++; /* also catches NaN */
        if (!(rel <= worst_rel)) worst_rel = rel, worst_i = i;
        if (d > worst_abs) worst_abs = d;
    }
    printf("  %-16s n=%-7ld max|ref| %.3e  max|diff| %.3e  worst rel %.3e (at %ld: pfl %.8g torch %.8g)  %s\n",
           what, n, maxref, worst_abs, worst_rel, worst_i, (double)a[worst_i], (double)b[worst_i],
           bad ? "FAIL" : "ok");
    CHECK(bad == 0, "%s: %ld of %ld values off by more than %g relative (worst %.3e)", what, bad, n, REL_TOL,
          worst_rel);
    return bad == 0;
}

/* One fixture against one workspace of max_batch >= B. */
static void run_fixture(const char *case_name, const fixture *fx, const pfl_model *m, int max_batch) {
    printf("%s (%s, B=%d, workspace max_batch %d):\n", case_name, fx->model, fx->B, max_batch);
    pfl_workspace *ws = pfl_workspace_create(m, max_batch);
    CHECK(ws != NULL, "workspace: %s", pfl_errmsg());
    if (!ws) return;
    float *grads = calloc((size_t)m->num_params, sizeof(float));
    CHECK(grads != NULL, "out of memory");
    if (!grads) {
        pfl_workspace_free(ws);
        return;
    }
    /* The workspace's own input buffer, as training uses it. */
    float *x = pfl_workspace_input(ws);
    memcpy(x, fx->x, sizeof(float) * (size_t)fx->B * (size_t)pfl_model_input_size(m));
    float loss = pfl_forward_loss(ws, fx->params, x, fx->labels, fx->B, true, NULL);
    const float *logits = pfl_forward(ws, fx->params, x, fx->B, false, NULL);
    compare("logits", logits, fx->logits, (long)fx->B * fx->classes);
    /* forward again with the loss, since the backward needs the loss's probabilities */
    float loss2 = pfl_forward_loss(ws, fx->params, x, fx->labels, fx->B, true, NULL);
    CHECK(loss == loss2, "forward_loss not repeatable: %.9g then %.9g", (double)loss, (double)loss2);
    double dl = fabs((double)loss - (double)fx->loss);
    printf("  %-16s pfl %.8f torch %.8f  rel diff %.3e  %s\n", "loss", (double)loss, (double)fx->loss,
           dl / fabs((double)fx->loss), dl <= REL_TOL * fabs((double)fx->loss) ? "ok" : "FAIL");
    CHECK(dl <= REL_TOL * fabs((double)fx->loss), "loss: pfl %.8f torch %.8f", (double)loss, (double)fx->loss);
    pfl_backward(ws, fx->params, fx->labels, grads);
    int all_ok = 1;
    for (int t = 0; t < m->num_tensors; t++) {
        const pfl_tensor *tt = &m->tensors[t];
        all_ok &= compare(tt->name, grads + tt->offset, fx->grads + tt->offset, (long)tt->length);
    }
    printf("  all gradients %s\n", all_ok ? "ok" : "NOT ok");
    free(grads);
    pfl_workspace_free(ws);
}

static void test_case(const char *dir, const char *case_name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.bin", dir, case_name);
    fixture fx;
    int loaded = fixture_load(&fx, path) == 0;
    CHECK(loaded, "fixture %s could not be loaded (see the message above)", path);
    if (!loaded) return;
    pfl_model m;
    int built = pfl_model_build(&m, fx.model, fx.C, fx.H, fx.W, fx.classes) == 0;
    CHECK(built, "%s: pfl_model_build(%s): %s", path, fx.model, pfl_errmsg());
    if (!built) goto done;
    /* The tensor table must be PyTorch's state_dict: same keys, shapes, order. */
    CHECK(m.num_params == (size_t)fx.num_params, "%s: pfl has %zu params, torch %d", case_name, m.num_params,
          fx.num_params);
    CHECK(m.num_tensors == fx.num_tensors, "%s: pfl has %d tensors, torch %d", case_name, m.num_tensors,
          fx.num_tensors);
    if (m.num_params != (size_t)fx.num_params || m.num_tensors != fx.num_tensors) goto done;
    for (int t = 0; t < m.num_tensors; t++) {
        const pfl_tensor *tt = &m.tensors[t];
        CHECK(strcmp(tt->name, fx.names[t]) == 0, "%s tensor %d: pfl '%s', torch '%s'", case_name, t, tt->name,
              fx.names[t]);
        int same = tt->ndim == fx.ndim[t];
        for (int d = 0; same && d < tt->ndim; d++) same = tt->shape[d] == fx.shape[t][d];
        CHECK(same, "%s tensor %s: shape differs from torch's", case_name, tt->name);
    }
    run_fixture(case_name, &fx, &m, fx.B);
    /* A workspace sized for more samples than the batch must give the same answers. */
    run_fixture(case_name, &fx, &m, fx.B + 5);
done:
    fixture_free(&fx);
}

/* ---- format 2: generated parameters, sampled gradients (resnet18, resnet18-cifar, alexnet) ----
 *
 * scripts/make_fixtures.py (write_v2) documents the file. The parameters and
 * running statistics are generated here exactly as numpy generated them
 * (fixture_value), so only the results are stored: the step's logits and
 * loss, per parameter tensor its gradient norm, largest |entry| and up to
 * 1024 sampled entries, the running statistics after the step and the
 * evaluation-mode logits after it. The reference is PyTorch's float64 result:
 * exact for our purpose, so what is measured is pfl's own float32 error.
 *
 * Tolerance. Element-wise agreement to 1e-4 is not a property of float32 on
 * an 18-layer BatchNorm network: PyTorch's own float32 gradients differ from
 * its float64 ones by up to 5e-3 in single entries (measured on these
 * fixtures' nets; BatchNorm over few values per channel and ReLU kinks
 * amplify rounding), while a whole tensor agrees to ~1e-5. So each tensor is
 * held to REL_TOL in relative L2 norm over its sampled entries,
 * ||pfl - ref|| / ||ref||, and its norm and largest |entry| to REL_TOL
 * relative; the logits, the running statistics and the evaluation logits to
 * REL_TOL in relative L2, the loss to REL_TOL. The worst single entry is
 * printed for information. A wrong index, a missing term or a slipped
 * stride moves a tensor by O(1) in these measures, a rounding difference by
 * ~1e-5. The layers themselves are checked entry by entry against finite
 * differences in tests/test_layers.c. */

/* ||a - b|| / ||b|| over n values (idx NULL) or over b's sampled positions. */
static double rel_l2(const float *a, const int32_t *idx, const float *b, long n, double *worst_entry) {
    double d2 = 0.0, b2 = 0.0, bmax = 0.0;
    for (long j = 0; j < n; j++) bmax = fmax(bmax, fabs(b[j]));
    *worst_entry = 0.0;
    for (long j = 0; j < n; j++) {
        const double d = (double)a[idx ? idx[j] : j] - (double)b[j];
        d2 += d * d, b2 += (double)b[j] * b[j];
        const double scale = fmax(fabs(b[j]), FLOOR_FRACTION * bmax);
        if (scale > 0.0) *worst_entry = fmax(*worst_entry, fabs(d) / scale);
    }
    return b2 > 0.0 ? sqrt(d2 / b2) : (d2 > 0.0 ? INFINITY : 0.0);
}

static int compare_l2(const char *what, const float *a, const float *b, long n) {
    double worst;
    const double rel = rel_l2(a, NULL, b, n, &worst);
    const int ok = rel <= REL_TOL;
    printf("  %-30s n=%-8ld relative L2 %.2e (worst entry %.2e)  %s\n", what, n, rel, worst, ok ? "ok" : "FAIL");
    CHECK(ok, "%s: relative L2 difference %.3e", what, rel);
    return ok;
}

typedef struct {
    char name[41];
    int ndim, shape[4];
    float center, scale;
    long length;
} tensor2;

typedef struct {
    double norm;
    float max_abs;
    int k;
    int32_t *idx;
    float *val;
} grad_sample;

typedef struct {
    char model[17];
    int B, C, H, W, classes, train, seed, T, S;
    tensor2 *tensors; /* T parameter tensors, then S state tensors */
    float *x;
    uint8_t *labels;
    float *logits, loss, *state_after, *eval_logits;
    grad_sample *grads;
    long state_len;
} fixture2;

/* The fixture's parameter generator (make_fixtures.py: hash_u16 and
 * param_values): exact in float32, so pfl gets PyTorch's bits. */
static float fixture_value(uint32_t seed, uint32_t t, uint32_t i, float center, float scale) {
    uint32_t x = seed * 0x9E3779B1u + t * 0x85EBCA77u + i * 0xC2B2AE3Du;
    x ^= x >> 16;
    x *= 0x7FEB352Du;
    x ^= x >> 15;
    x *= 0x846CA68Bu;
    x ^= x >> 16;
    const int32_t k = (int32_t)(x >> 16) - 32768;
    return center + scale * ((float)k / 65536.0f);
}

static void fixture2_free(fixture2 *fx) {
    for (int t = 0; fx->grads && t < fx->T; t++) free(fx->grads[t].idx), free(fx->grads[t].val);
    free(fx->grads);
    free(fx->tensors);
    free(fx->x);
    free(fx->labels);
    free(fx->logits);
    free(fx->state_after);
    free(fx->eval_logits);
    memset(fx, 0, sizeof *fx);
}

static int read_f64(FILE *f, double *v) {
    unsigned char b[8];
    if (read_bytes(f, b, 8)) return -1;
    uint64_t u = 0;
    for (int i = 7; i >= 0; i--) u = u << 8 | b[i];
    memcpy(v, &u, sizeof *v);
    return 0;
}

static int fixture2_load(fixture2 *fx, const char *path) {
    memset(fx, 0, sizeof *fx);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: missing fixture: %s (regenerate with scripts/make_fixtures.py)\n", path, strerror(errno));
        return -1;
    }
    const char *why = "truncated";
    char magic[8], name[16];
    int32_t h[10];
    if (read_bytes(f, magic, 8) || memcmp(magic, "PFLFIX02", 8) != 0) {
        why = "bad magic (expected PFLFIX02)";
        goto fail;
    }
    if (read_bytes(f, name, 16)) goto fail;
    for (int i = 0; i < 10; i++)
        if (read_i32(f, &h[i])) goto fail;
    memcpy(fx->model, name, 16);
    fx->B = h[0], fx->C = h[1], fx->H = h[2], fx->W = h[3], fx->classes = h[4], fx->train = h[5], fx->seed = h[6];
    fx->T = h[8], fx->S = h[9];
    if (fx->B <= 0 || fx->B > 64 || fx->C <= 0 || fx->H <= 0 || fx->W <= 0 || fx->classes <= 1 || fx->classes > 256 ||
        fx->T <= 0 || fx->T > PFL_MAX_TENSORS || fx->S < 0 || fx->S > PFL_MAX_STATE_TENSORS) {
        why = "implausible header";
        goto fail;
    }
    fx->tensors = calloc((size_t)(fx->T + fx->S), sizeof *fx->tensors);
    fx->grads = calloc((size_t)fx->T, sizeof *fx->grads);
    if (!fx->tensors || !fx->grads) goto fail;
    for (int t = 0; t < fx->T + fx->S; t++) {
        tensor2 *tt = &fx->tensors[t];
        int32_t nd, sh[4];
        float cs[2];
        if (read_bytes(f, tt->name, 40) || read_i32(f, &nd) || nd < 1 || nd > 4) goto fail;
        tt->name[40] = '\0';
        tt->ndim = nd, tt->length = 1;
        for (int d = 0; d < 4; d++) {
            if (read_i32(f, &sh[d])) goto fail;
            tt->shape[d] = sh[d];
            if (d < nd) tt->length *= sh[d];
        }
        if (read_f32s(f, cs, 2)) goto fail;
        tt->center = cs[0], tt->scale = cs[1];
        if (t >= fx->T) fx->state_len += tt->length;
    }
    const long in_n = (long)fx->B * fx->C * fx->H * fx->W, logit_n = (long)fx->B * fx->classes;
    fx->x = malloc(sizeof(float) * (size_t)in_n);
    fx->labels = malloc((size_t)fx->B);
    fx->logits = malloc(sizeof(float) * (size_t)logit_n);
    fx->eval_logits = malloc(sizeof(float) * (size_t)logit_n);
    fx->state_after = malloc(sizeof(float) * (size_t)(fx->state_len ? fx->state_len : 1));
    if (!fx->x || !fx->labels || !fx->logits || !fx->eval_logits || !fx->state_after) goto fail;
    if (read_f32s(f, fx->x, in_n)) goto fail;
    for (int n = 0; n < fx->B; n++) {
        int32_t y;
        if (read_i32(f, &y) || y < 0 || y >= fx->classes) goto fail;
        fx->labels[n] = (uint8_t)y;
    }
    if (read_f32s(f, fx->logits, logit_n) || read_f32s(f, &fx->loss, 1)) goto fail;
    for (int t = 0; t < fx->T; t++) {
        grad_sample *g = &fx->grads[t];
        int32_t k;
        if (read_f64(f, &g->norm) || read_f32s(f, &g->max_abs, 1) || read_i32(f, &k) || k < 1 ||
            k > fx->tensors[t].length)
            goto fail;
        g->k = k;
        g->idx = malloc(sizeof(int32_t) * (size_t)k);
        g->val = malloc(sizeof(float) * (size_t)k);
        if (!g->idx || !g->val) goto fail;
        for (int j = 0; j < k; j++)
            if (read_i32(f, &g->idx[j]) || g->idx[j] < 0 || g->idx[j] >= fx->tensors[t].length ||
                read_f32s(f, &g->val[j], 1))
                goto fail;
    }
    if (read_f32s(f, fx->state_after, fx->state_len) || read_f32s(f, fx->eval_logits, logit_n)) goto fail;
    char end[9] = {0};
    if (read_bytes(f, end, 8) || memcmp(end, "PFLFIXND", 8) != 0 || fgetc(f) != EOF) {
        why = "end marker missing or trailing bytes";
        goto fail;
    }
    fclose(f);
    return 0;
fail:
    fprintf(stderr, "%s: %s\n", path, why);
    fclose(f);
    fixture2_free(fx);
    return -1;
}

/* One gradient tensor against its sample (see the tolerance above). */
static int compare_sampled(const char *what, const float *g, long n, const grad_sample *ref) {
    double mx = 0.0, norm = 0.0, worst;
    for (long i = 0; i < n; i++) {
        mx = fmax(mx, fabs(g[i]));
        norm += (double)g[i] * g[i];
    }
    norm = sqrt(norm);
    const double rel = rel_l2(g, ref->idx, ref->val, ref->k, &worst);
    const double rel_max = fabs(mx - ref->max_abs) / fmax(ref->max_abs, 1e-30);
    const double rel_norm = fabs(norm - ref->norm) / fmax(ref->norm, 1e-30);
    const int ok = rel <= REL_TOL && rel_max <= REL_TOL && rel_norm <= REL_TOL;
    printf("  %-30s n=%-8ld sampled %-5d relative L2 %.2e  max %.2e  norm %.2e (worst entry %.2e)  %s\n", what, n,
           ref->k, rel, rel_max, rel_norm, worst, ok ? "ok" : "FAIL");
    CHECK(ok, "%s: relative L2 %.3e, largest |g| off by %.3e, norm by %.3e", what, rel, rel_max, rel_norm);
    return ok;
}

static void run_fixture2(const char *case_name, const fixture2 *fx, const pfl_model *m) {
    printf("%s (%s, B=%d, input %dx%dx%d, %s-mode step):\n", case_name, fx->model, fx->B, fx->C, fx->H, fx->W,
           fx->train ? "training" : "evaluation");
    const size_t V = pfl_model_vector_len(m);
    float *vec = malloc(sizeof(float) * V), *grads = calloc(m->num_params, sizeof(float));
    pfl_workspace *ws = pfl_workspace_create(m, fx->B);
    CHECK(vec && grads && ws, "out of memory: %s", pfl_errmsg());
    if (!vec || !grads || !ws) goto done;
    for (int t = 0; t < fx->T + fx->S; t++) {
        const tensor2 *tt = &fx->tensors[t];
        const pfl_tensor *pt = t < fx->T ? &m->tensors[t] : &m->state_tensors[t - fx->T];
        for (long i = 0; i < tt->length; i++)
            vec[pt->offset + (size_t)i] = fixture_value((uint32_t)fx->seed, (uint32_t)t, (uint32_t)i, tt->center, tt->scale);
    }
    float *x = pfl_workspace_input(ws);
    memcpy(x, fx->x, sizeof(float) * (size_t)fx->B * (size_t)pfl_model_input_size(m));
    compare_l2("logits", pfl_forward(ws, vec, x, fx->B, fx->train, NULL), fx->logits, (long)fx->B * fx->classes);
    /* the step: forward (recording batch statistics), running-statistics update, backward */
    const float loss = pfl_forward_loss(ws, vec, x, fx->labels, fx->B, fx->train, NULL);
    pfl_update_running_stats(ws, vec);
    const double dl = fabs((double)loss - (double)fx->loss);
    printf("  %-16s pfl %.8f torch %.8f  rel diff %.3e  %s\n", "loss", (double)loss, (double)fx->loss,
           dl / fabs((double)fx->loss), dl <= REL_TOL * fabs((double)fx->loss) ? "ok" : "FAIL");
    CHECK(dl <= REL_TOL * fabs((double)fx->loss), "loss: pfl %.8f torch %.8f", (double)loss, (double)fx->loss);
    pfl_backward(ws, vec, fx->labels, grads);
    int all_ok = 1;
    for (int t = 0; t < fx->T; t++)
        all_ok &= compare_sampled(m->tensors[t].name, grads + m->tensors[t].offset, (long)m->tensors[t].length,
                                  &fx->grads[t]);
    printf("  all gradients %s\n", all_ok ? "ok" : "NOT ok");
    for (int t = 0; t < fx->S; t++) {
        const pfl_tensor *st = &m->state_tensors[t];
        compare_l2(st->name, vec + st->offset, fx->state_after + (st->offset - m->num_params), (long)st->length);
    }
    compare_l2("eval logits", pfl_forward(ws, vec, x, fx->B, false, NULL), fx->eval_logits, (long)fx->B * fx->classes);
done:
    free(vec);
    free(grads);
    pfl_workspace_free(ws);
}

static void test_case2(const char *dir, const char *case_name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.bin", dir, case_name);
    fixture2 fx;
    int loaded = fixture2_load(&fx, path) == 0;
    CHECK(loaded, "fixture %s could not be loaded (see the message above)", path);
    if (!loaded) return;
    pfl_model *m = malloc(sizeof *m);
    int built = m && pfl_model_build(m, fx.model, fx.C, fx.H, fx.W, fx.classes) == 0;
    CHECK(built, "%s: pfl_model_build(%s): %s", path, fx.model, pfl_errmsg());
    if (!built) goto done;
    /* PyTorch's parameters() and running statistics: same names, shapes, order */
    CHECK(m->num_tensors == fx.T && m->num_state_tensors == fx.S, "%s: pfl has %d + %d tensors, torch %d + %d",
          case_name, m->num_tensors, m->num_state_tensors, fx.T, fx.S);
    if (m->num_tensors != fx.T || m->num_state_tensors != fx.S) goto done;
    for (int t = 0; t < fx.T + fx.S; t++) {
        const pfl_tensor *pt = t < fx.T ? &m->tensors[t] : &m->state_tensors[t - fx.T];
        const tensor2 *tt = &fx.tensors[t];
        int same = strcmp(pt->name, tt->name) == 0 && pt->ndim == tt->ndim && (long)pt->length == tt->length;
        for (int d = 0; same && d < pt->ndim; d++) same = pt->shape[d] == tt->shape[d];
        CHECK(same, "%s tensor %d: pfl '%s', torch '%s' (or shapes differ)", case_name, t, pt->name, tt->name);
        if (!same) goto done;
    }
    run_fixture2(case_name, &fx, m);
done:
    free(m);
    fixture2_free(&fx);
}

/* ---- parameter counts of every model against PyTorch's ---- */

/* tests/fixtures/param_counts.tsv (make_fixtures.py): per model and input
 * shape, PyTorch's parameter count and running-statistics count. Every
 * model pfl knows must appear in it. */
static void test_param_counts(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/param_counts.tsv", dir);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "%s: %s", path, strerror(errno));
    if (!f) return;
    printf("parameter counts against PyTorch (%s):\n", path);
    char line[256], seen[1024] = ",";
    int rows = 0;
    pfl_model *m = malloc(sizeof *m);
    while (m && fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        char name[32];
        int c, h, w, k;
        long params, state;
        if (sscanf(line, "%31s %d %d %d %d %ld %ld", name, &c, &h, &w, &k, &params, &state) != 7) {
            CHECK(0, "%s: bad line '%s'", path, line);
            continue;
        }
        rows++;
        int built = pfl_model_build(m, name, c, h, w, k) == 0;
        CHECK(built, "pfl_model_build(%s, %dx%dx%d, %d): %s", name, c, h, w, k, pfl_errmsg());
        if (!built) continue;
        const int ok = (long)m->num_params == params && (long)m->num_state == state;
        printf("  %-15s %dx%dx%d/%-3d  pfl %9zu + %4zu state   torch %9ld + %4ld  %s\n", name, c, h, w, k, m->num_params,
               m->num_state, params, state, ok ? "ok" : "FAIL");
        CHECK(ok, "%s %dx%dx%d/%d: pfl %zu parameters + %zu state, PyTorch %ld + %ld", name, c, h, w, k, m->num_params,
              m->num_state, params, state);
        char key[40]; /* the model's name without options ("fasttext:98635:32" is fasttext) */
        snprintf(key, sizeof key, "%.*s,", (int)strcspn(name, ":"), name);
        if (!strstr(seen, key) && strlen(seen) + strlen(key) < sizeof seen) strcat(seen, key);
    }
    fclose(f);
    free(m);
    CHECK(rows > 0, "%s: no rows", path);
    /* every model pfl knows is in the file */
    char names[512];
    snprintf(names, sizeof names, "%s", pfl_model_names);
    for (char *tok = strtok(names, ", "); tok; tok = strtok(NULL, ", ")) {
        char key[40]; /* without the options' syntax: "fasttext[:VOCAB[:DIM]]" is fasttext */
        snprintf(key, sizeof key, ",%.*s,", (int)strcspn(tok, "["), tok);
        CHECK(strstr(seen, key) != NULL, "model %s has no PyTorch count in %s (add it to make_fixtures.py)", tok, path);
    }
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* keep report lines and FAIL lines (stderr) in order */
    const char *dir = getenv("PFL_FIXTURES");
    if (!dir || !*dir) dir = "tests/fixtures";
    printf("fixtures from %s; tolerance |pfl - torch| <= %g * max(|torch|, %g * max|torch| of the tensor)\n", dir,
           REL_TOL, FLOOR_FRACTION);
    test_case(dir, "cnn_mnist");
    test_case(dir, "cnn_cifar");
    test_case(dir, "dnn");
    test_case(dir, "mlp");
    test_case(dir, "mnist_cnn");
    test_case(dir, "cifar_cnn");
    test_case(dir, "tsdp_cnn"); /* torch in eval mode: dropout is the identity, as pfl without an rng */
    test_case(dir, "fasttext"); /* fasttext:500:64 on 200 token ids: embedding mean, fc1, fc */
    /* format 2: training-mode step (BatchNorm batch statistics, running statistics updated) */
    test_case2(dir, "resnet18");
    test_case2(dir, "resnet18_cifar"); /* 16x16 inputs (see make_fixtures.py) */
    test_case2(dir, "alexnet");        /* evaluation mode: dropout is the identity */
    test_param_counts(dir);
    TEST_MAIN_END();
}
