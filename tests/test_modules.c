/* The layer-wise modules (src/modules) against hand computations:
 *
 *  - ALA (FedALA Eq. 4-5, Algorithm 1): the clipped weight step on small
 *    vectors; whole pfl_ala_apply calls on a tiny model against a reference
 *    written here (mixed model, gradient at the mixed model, W update, new
 *    mixed model, in double); skipping when the top layers agree; the first
 *    round's convergence test (std of the last 10 epoch losses) and its
 *    max_epochs bound.
 *  - FLAYER: per-layer learning rates (Eq. 4), upload fractions (Eq. 5),
 *    the upload mask (Eq. 6-8: exactly ceil(UP_i n_i) flags per layer, the
 *    largest |trained - start|, ties by position), the head mix (Eq. 2).
 *
 * The gradient of the loss itself comes from pfl_forward_loss/pfl_backward,
 * which tests/test_layers.c and tests/test_model.c check against finite
 * differences and PyTorch; everything ALA does with it is recomputed here. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "check.h"
#include "modules/modules.h"
#include "nn/model.h"
#include "tiny.h"
#include "util/err.h"

/* ---- ALA: the weight step on hand-picked vectors ---- */

static void test_ala_weight_step(void) {
    /* w - eta * g * (G - L) with eta = 0.5:
     *  0: 1.0  - 0.5 *  1.0 * ( 0.5 - 0.0 ) = 0.75
     *  1: 1.0  - 0.5 * -1.0 * ( 1.0 - 0.0 ) = 1.5   -> clip 1
     *  2: 0.25 - 0.5 *  2.0 * ( 1.0 - 0.5 ) = -0.25 -> clip 0
     *  3: 0.5  - 0.5 *  3.0 * ( 0.0 - 0.25) = 0.875
     *  4: 0.5  - 0.5 *  4.0 * ( 1.0 - 1.0 ) = 0.5   (global == local: no move)
     *  5: 0.0  - 0.5 * -0.5 * (-1.0 - 1.0 ) = -0.5  -> clip 0
     *  6: 0.0  - 0.5 * -0.5 * ( 2.0 - 1.0 ) = 0.25
     *  7: 1.0  - 0.5 *  0.0 * ( 3.0 - 1.0 ) = 1.0
     *  8: 0.5  - 0.5 *  1.0 * ( 1.0 - 0.0 ) = 0.0   (exactly 0, no clip)
     *  9: 0.5  - 0.5 * -1.0 * ( 1.0 - 0.0 ) = 1.0   (exactly 1, no clip) */
    float w[10] = {1.0f, 1.0f, 0.25f, 0.5f, 0.5f, 0.0f, 0.0f, 1.0f, 0.5f, 0.5f};
    const float g[10] = {1.0f, -1.0f, 2.0f, 3.0f, 4.0f, -0.5f, -0.5f, 0.0f, 1.0f, -1.0f};
    const float G[10] = {0.5f, 1.0f, 1.0f, 0.0f, 1.0f, -1.0f, 2.0f, 3.0f, 1.0f, 1.0f};
    const float L[10] = {0.0f, 0.0f, 0.5f, 0.25f, 1.0f, 1.0f, 1.0f, 1.0f, 0.0f, 0.0f};
    const double want[10] = {0.75, 1.0, 0.0, 0.875, 0.5, 0.0, 0.25, 1.0, 0.0, 1.0};
    pfl_ala_weight_step(w, g, G, L, 0.5f, 10);
    for (int i = 0; i < 10; i++) CHECK(w[i] == (float)want[i], "weight %d: got %g, want %g", i, w[i], want[i]);

    /* n limits the elements touched */
    float w2[3] = {0.5f, 0.5f, 0.5f};
    const float g2[3] = {1.0f, 1.0f, 1.0f}, G2[3] = {1.0f, 1.0f, 1.0f}, L2[3] = {0.0f, 0.0f, 0.0f};
    pfl_ala_weight_step(w2, g2, G2, L2, 0.25f, 2);
    CHECK(w2[0] == 0.25f && w2[1] == 0.25f && w2[2] == 0.5f, "n = 2: got %g %g %g", w2[0], w2[1], w2[2]);

    /* random vectors against the formula in double */
    pfl_rng r = tiny_rng(11);
    enum { N = 500 };
    float *wr = tiny_floats(N), *gr = tiny_floats(N), *Gr = tiny_floats(N), *Lr = tiny_floats(N);
    double *want_r = malloc(sizeof(double) * N);
    tiny_fill(wr, N, 0.0, 1.0, &r);
    tiny_fill(gr, N, -2.0, 2.0, &r);
    tiny_fill(Gr, N, -1.0, 1.0, &r);
    tiny_fill(Lr, N, -1.0, 1.0, &r);
    int at0 = 0, at1 = 0, inside = 0;
    for (int i = 0; i < N; i++) {
        double v = (double)wr[i] - 0.75 * (double)gr[i] * ((double)Gr[i] - (double)Lr[i]);
        want_r[i] = v < 0.0 ? 0.0 : (v > 1.0 ? 1.0 : v);
        at0 += v < 0.0, at1 += v > 1.0, inside += v > 0.0 && v < 1.0;
    }
    pfl_ala_weight_step(wr, gr, Gr, Lr, 0.75f, N);
    double worst = 0.0;
    int outside = 0;
    for (int i = 0; i < N; i++) {
        worst = fmax(worst, fabs(wr[i] - want_r[i]));
        outside += !(wr[i] >= 0.0f && wr[i] <= 1.0f);
    }
    CHECK(at0 > 10 && at1 > 10 && inside > 10, "random case should clip both ways (%d %d %d)", at0, at1, inside);
    CHECK(worst <= 1e-6, "random weight step: max error %g", worst);
    CHECK(outside == 0, "%d weights outside [0,1]", outside);
    free(wr), free(gr), free(Gr), free(Lr), free(want_r);
}

/* ---- ALA: whole calls against a reference ---- */

typedef struct {
    pfl_model m;
    pfl_dataset d;
    int train[32];
    int n_train;
    float *global, *local;
    pfl_workspace *ref_ws;
    pfl_exec *exec;         /* what ALA runs on (the CPU backend) */
    pfl_xbuf gbuf;          /* grads, as the executor sees them */
    float *temp, *grads, *x;
    uint8_t *y;
    int *order;
} ala_fixture;

static void ala_fixture_init(ala_fixture *f, int n_train, int max_batch, uint64_t seed) {
    memset(f, 0, sizeof *f);
    if (pfl_model_build(&f->m, "dnn", 1, 4, 4, 3)) {
        fprintf(stderr, "%s\n", pfl_errmsg());
        exit(2);
    }
    f->d = tiny_dataset(n_train + 3, 1, 4, 4, 3, seed);
    /* the client's training split: every sample but the first three */
    f->n_train = n_train;
    for (int i = 0; i < n_train; i++) f->train[i] = i + 3;
    const size_t P = f->m.num_params;
    f->global = tiny_floats(P);
    f->local = tiny_floats(P);
    pfl_rng r = tiny_rng(seed + 1);
    pfl_model_init_params(&f->m, f->global, &r);
    /* the local model differs everywhere, by a lot on the top layer */
    for (size_t i = 0; i < P; i++) f->local[i] = f->global[i] + (float)(pfl_rng_uniform(&r) - 0.5);
    f->exec = pfl_exec_create(&pfl_backend_cpu, &f->m, &f->d, max_batch);
    f->ref_ws = pfl_workspace_create(&f->m, max_batch);
    f->temp = tiny_floats(P);
    f->grads = tiny_floats(P);
    f->x = tiny_floats((size_t)max_batch * 16);
    f->y = tiny_alloc((size_t)max_batch);
    f->order = tiny_alloc(sizeof(int) * (size_t)n_train);
    if (!f->exec || !f->ref_ws) exit(2);
    f->gbuf = pfl_exec_view(f->exec, f->grads, P, true);
}

static void ala_fixture_free(ala_fixture *f) {
    tiny_dataset_free(&f->d);
    free(f->global), free(f->local), free(f->temp), free(f->grads), free(f->x), free(f->y), free(f->order);
    pfl_exec_unview(f->exec, &f->gbuf);
    pfl_exec_destroy(f->exec);
    pfl_workspace_free(f->ref_ws);
}

static pfl_ala_buffers ala_buffers(ala_fixture *f) {
    pfl_ala_buffers b = {f->exec, f->temp, &f->gbuf, f->order};
    return b;
}

/* The span of the top p layers, from the layer table directly. */
static size_t top_offset(const pfl_model *m, int p) {
    int first = m->num_layers - p;
    return m->layers[first < 0 ? 0 : first].offset;
}

/* Reference ALA: `epochs` epochs over idx[0..n) in batches of `batch`,
 * W in double. Per batch: theta = [global lower ; local + (global - local) W],
 * g = d loss / d theta, W <- clip(W - eta g (global - local)). Writes the
 * final mixed model to theta_out (num_params), the final W to W (length
 * num_params - off, in/out), and each epoch's mean batch loss to losses. */
static void reference_ala(const pfl_model *m, const pfl_dataset *d, pfl_workspace *ws, const int *idx, int n,
                          int batch, int p, double eta, const float *global, const float *local, double *W,
                          int epochs, float *theta_out, double *losses, double *last_full) {
    const size_t P = m->num_params, off = top_offset(m, p), len = P - off;
    float *theta = tiny_floats(P), *g = tiny_floats(P), *x = tiny_floats((size_t)batch * 16);
    uint8_t *y = tiny_alloc((size_t)batch);
    for (size_t i = 0; i < off; i++) theta[i] = global[i];
    for (size_t j = 0; j < len; j++)
        theta[off + j] = (float)((double)local[off + j] + ((double)global[off + j] - local[off + j]) * W[j]);
    for (int e = 0; e < epochs; e++) {
        double sum = 0.0;
        int batches = 0;
        for (int s = 0; s < n; s += batch) {
            int B = n - s < batch ? n - s : batch;
            pfl_dataset_gather(d, idx + s, B, x, y);
            memset(g, 0, P * sizeof(float));
            const double loss = pfl_forward_loss(ws, theta, x, y, B, false, NULL);
            sum += loss;
            if (last_full && (B == batch || s == 0)) last_full[e] = loss; /* PFLlib: drop_last, the last full batch */
            pfl_backward(ws, theta, y, g);
            for (size_t j = 0; j < len; j++) {
                double diff = (double)global[off + j] - local[off + j];
                double w = W[j] - eta * (double)g[off + j] * diff;
                W[j] = w < 0.0 ? 0.0 : (w > 1.0 ? 1.0 : w);
                theta[off + j] = (float)((double)local[off + j] + diff * W[j]);
            }
            batches++;
        }
        losses[e] = sum / batches;
    }
    memcpy(theta_out, theta, P * sizeof(float));
    free(theta), free(g), free(x), free(y);
}

/* The order ALA samples in: the training split shuffled by (a copy of) rng. */
static void ala_order(const ala_fixture *f, pfl_rng rng, int *order) {
    memcpy(order, f->train, sizeof(int) * (size_t)f->n_train);
    pfl_rng_shuffle(&rng, order, (size_t)f->n_train);
}

static void test_ala_span(void) {
    pfl_model m;
    if (pfl_model_build(&m, "dnn", 1, 4, 4, 3)) exit(2);
    /* fc1: 16*100 + 100 = 1700, fc: 100*3 + 3 = 303 */
    size_t off, len;
    pfl_ala_span(&m, 1, &off, &len);
    CHECK(off == 1700 && len == 303, "p=1: %zu %zu", off, len);
    pfl_ala_span(&m, 2, &off, &len);
    CHECK(off == 0 && len == 2003, "p=2: %zu %zu", off, len);
    pfl_ala_span(&m, 9, &off, &len);
    CHECK(off == 0 && len == 2003, "p=9 (clamped): %zu %zu", off, len);
    pfl_ala_client c;
    CHECK(pfl_ala_client_init(&c, &m, 1) == 0, "init");
    int ones = 0;
    for (int i = 0; i < 303; i++) ones += c.weights[i] == 1.0f;
    CHECK(ones == 303 && !c.started, "W starts at 1 (%d of 303), not started", ones);
    pfl_ala_client_free(&c);
}

/* One later-round call (started: one epoch), compared with the reference.
 * preset_w: start from random W in [0,1] instead of ones; eta_scale: eta is
 * chosen so that eta * max(g * (global - local)) == eta_scale at the start,
 * which makes the biggest mover clip at 0 when eta_scale > 1. */
static void ala_one_epoch_case(const char *what, int n_train, float s, int batch, int p, bool preset_w,
                               double eta_scale, bool want_clips) {
    ala_fixture f;
    ala_fixture_init(&f, n_train, batch, 21);
    const pfl_model *m = &f.m;
    const size_t P = m->num_params, off = top_offset(m, p), len = P - off;
    pfl_ala_client c;
    if (pfl_ala_client_init(&c, m, p)) exit(2);
    c.started = true;
    double *W = malloc(sizeof(double) * len), *W0 = malloc(sizeof(double) * len);
    pfl_rng wr = tiny_rng(5);
    for (size_t j = 0; j < len; j++) {
        if (preset_w) c.weights[j] = (float)pfl_rng_uniform(&wr);
        W0[j] = W[j] = c.weights[j];
    }
    pfl_rng rng = pfl_rng_stream(3, 2, 1, PFL_RNG_ALA);
    int *order = malloc(sizeof(int) * (size_t)n_train);
    ala_order(&f, rng, order);
    int n = (int)(s / 100.0 * n_train);
    if (n < 1) n = 1;

    /* eta from the first batch's gradient at the starting mixed model */
    double eta = 1.0;
    {
        float *theta = tiny_floats(P), *g = tiny_floats(P), *x = tiny_floats((size_t)batch * 16);
        uint8_t *y = tiny_alloc((size_t)batch);
        for (size_t i = 0; i < off; i++) theta[i] = f.global[i];
        for (size_t j = 0; j < len; j++)
            theta[off + j] = (float)(f.local[off + j] + ((double)f.global[off + j] - f.local[off + j]) * W[j]);
        int B = n < batch ? n : batch;
        pfl_dataset_gather(&f.d, order, B, x, y);
        pfl_forward_loss(f.ref_ws, theta, x, y, B, false, NULL);
        pfl_backward(f.ref_ws, theta, y, g);
        double most = 0.0;
        for (size_t j = 0; j < len; j++)
            most = fmax(most, (double)g[off + j] * ((double)f.global[off + j] - f.local[off + j]));
        if (most > 0.0) eta = eta_scale / most;
        free(theta), free(g), free(x), free(y);
    }

    pfl_ala_config cfg = {p, s, (float)eta, 0.0f, 50, batch, 0};
    float *want = tiny_floats(P);
    double loss;
    reference_ala(m, &f.d, f.ref_ws, order, n, batch, p, (float)eta, f.global, f.local, W, 1, want, &loss, NULL);

    float *local_before = tiny_floats(P);
    memcpy(local_before, f.local, P * sizeof(float));
    pfl_ala_buffers buf = ala_buffers(&f);
    pfl_ala_report rep = pfl_ala_apply(&c, &cfg, m, f.train, f.n_train, f.global, f.local, &buf, &rng);

    CHECK(!rep.skipped && rep.epochs == 1 && !rep.hit_max, "%s: skipped %d epochs %d hit_max %d", what, rep.skipped,
          rep.epochs, rep.hit_max);
    CHECK(check_close(rep.last_loss, loss, 1e-5), "%s: last loss %.8g, reference %.8g", what, rep.last_loss, loss);
    CHECK(tiny_same(f.local, f.global, 0, off), "%s: lower layers are not the global ones", what);
    double worst_w = 0.0, worst_t = 0.0;
    int in_range = 1, at0 = 0, at1 = 0, moved = 0;
    for (size_t j = 0; j < len; j++) {
        worst_w = fmax(worst_w, fabs(c.weights[j] - W[j]));
        /* the returned top layers: local + (global - local) * W_new, from
         * the local model ALA was given */
        double t = (double)local_before[off + j] + ((double)f.global[off + j] - local_before[off + j]) * W[j];
        worst_t = fmax(worst_t, fabs(f.local[off + j] - t));
        in_range &= c.weights[j] >= 0.0f && c.weights[j] <= 1.0f;
        at0 += W[j] == 0.0, at1 += W[j] == 1.0, moved += W[j] != W0[j];
    }
    CHECK(worst_w <= 1e-5, "%s: W differs from the hand computation by %g", what, worst_w);
    CHECK(worst_t <= 1e-5, "%s: top layers differ from local + (global - local) W by %g", what, worst_t);
    CHECK(in_range, "%s: W left [0,1]", what);
    CHECK(moved > 0, "%s: W did not move", what);
    if (want_clips) CHECK(at0 > 0 && at1 > 0, "%s: scenario should clip at 0 and 1 (%d, %d)", what, at0, at1);
    CHECK(c.started, "%s: started", what);
    printf("ALA %-34s eta %.4g loss %.6f, W err %.2g, top err %.2g, %d at 0, %d at 1 of %zu\n", what, eta, loss,
           worst_w, worst_t, at0, at1, len);

    pfl_ala_client_free(&c);
    free(W), free(W0), free(order), free(want), free(local_before);
    ala_fixture_free(&f);
}

static void test_ala_one_batch(void) {
    /* Exactly one batch of one epoch: W = 1, all 10 samples in one batch. */
    ala_one_epoch_case("W=1, 1 batch, p=1", 10, 100.0f, 10, 1, false, 3.0, true);
    /* W from an earlier round, the top two layers (the whole model). */
    ala_one_epoch_case("W random, 1 batch, p=2", 10, 100.0f, 10, 2, true, 3.0, true);
    /* s = 50: the batch is the first 5 of the shuffled split. */
    ala_one_epoch_case("W random, s=50, 1 batch", 10, 50.0f, 5, 1, true, 0.5, false);
    /* Several batches (4, 4, 2): each gradient at the W of the batch before. */
    ala_one_epoch_case("W random, 3 batches", 10, 100.0f, 4, 1, true, 0.5, false);
}

static void test_ala_skip(void) {
    ala_fixture f;
    ala_fixture_init(&f, 10, 10, 31);
    const pfl_model *m = &f.m;
    const size_t P = m->num_params, off = top_offset(m, 1);
    /* top layer equal, lower layers different */
    memcpy(f.local + off, f.global + off, (P - off) * sizeof(float));
    CHECK(!tiny_same(f.local, f.global, 0, off), "fixture: lower layers differ");
    pfl_ala_client c;
    if (pfl_ala_client_init(&c, m, 1)) exit(2);
    c.weights[0] = 0.25f;
    pfl_ala_config cfg = {1, 100.0f, 1.0f, 0.1f, 20, 10, 0};
    pfl_ala_buffers buf = ala_buffers(&f);
    pfl_rng rng = pfl_rng_stream(3, 1, 0, PFL_RNG_ALA);
    pfl_ala_report rep = pfl_ala_apply(&c, &cfg, m, f.train, f.n_train, f.global, f.local, &buf, &rng);
    CHECK(rep.skipped && rep.epochs == 0, "equal top layers: skipped %d epochs %d", rep.skipped, rep.epochs);
    CHECK(tiny_same(f.local, f.global, 0, P), "skipped: local must equal global everywhere");
    CHECK(c.weights[0] == 0.25f && c.weights[1] == 1.0f, "skipped: W unchanged");
    CHECK(!c.started, "skipped: the first training round is still to come");
    pfl_ala_client_free(&c);
    ala_fixture_free(&f);
}

/* std of v[k-10..k) (population), as the paper's np.std. */
static double window_std(const double *v, int k) {
    double mean = 0.0, var = 0.0;
    for (int i = k - 10; i < k; i++) mean += v[i];
    mean /= 10.0;
    for (int i = k - 10; i < k; i++) var += (v[i] - mean) * (v[i] - mean);
    return sqrt(var / 10.0);
}

static pfl_ala_report ala_first_round(ala_fixture *f, pfl_ala_client *c, float threshold, int max_epochs,
                                      float eta, int batch) {
    if (pfl_ala_client_init(c, &f->m, 1)) exit(2);
    pfl_ala_config cfg = {1, 100.0f, eta, threshold, max_epochs, batch, 0};
    pfl_ala_buffers buf = ala_buffers(f);
    pfl_rng rng = pfl_rng_stream(3, 2, 0, PFL_RNG_ALA);
    return pfl_ala_apply(c, &cfg, &f->m, f->train, f->n_train, f->global, f->local, &buf, &rng);
}

static void test_ala_first_round(void) {
    const int batch = 4;
    const float eta = 0.3f;
    ala_fixture f;
    ala_fixture_init(&f, 10, batch, 41);
    const size_t P = f.m.num_params, off = top_offset(&f.m, 1), len = P - off;
    float *local0 = tiny_floats(P), *want = tiny_floats(P);
    memcpy(local0, f.local, P * sizeof(float));
    int order[10];
    ala_order(&f, pfl_rng_stream(3, 2, 0, PFL_RNG_ALA), order);

    /* Reference losses over 60 epochs, on the same fixed order: each epoch's
     * mean and its last full batch's (batches of 4, 4 and 2 here: the second) */
    enum { K = 60 };
    double means[K], losses[K], *W = malloc(sizeof(double) * len);
    for (size_t j = 0; j < len; j++) W[j] = 1.0;
    reference_ala(&f.m, &f.d, f.ref_ws, order, 10, batch, 1, eta, f.global, local0, W, K, want, means, losses);
    /* A threshold that converges first at epoch k* on the last-batch losses:
     * a k >= 12 whose window std drops clearly (by 2%) below every earlier
     * window's, and where the epoch means (pfl's earlier reading) would stop
     * at another epoch, so the test tells the two signals apart. */
    int kstar = 0, mean_stop = 0;
    double thr = 0.0, prevmin = window_std(losses, 11);
    for (int k = 12; k <= K && !kstar; k++) {
        double s = window_std(losses, k);
        if (s < prevmin * 0.98) {
            const double t = 0.5 * (s + prevmin);
            int ms = 0;
            for (int j = 11; j <= K && !ms; j++) ms = window_std(means, j) < t ? j : 0;
            if (ms != k) kstar = k, thr = t, mean_stop = ms;
        }
        prevmin = fmin(prevmin, s);
    }
    CHECK(kstar > 0, "scenario: the loss std never dropped (last %g)", window_std(losses, K));
    printf("ALA first round: last-batch window std at 11: %.3g, converges at epoch %d with threshold %.4g "
           "(the epoch means: at %d)\n",
           window_std(losses, 11), kstar, thr, mean_stop);

    /* (1) converges at k* exactly, with the model after k* epochs */
    pfl_ala_client c;
    pfl_ala_report rep = ala_first_round(&f, &c, (float)thr, 1000, eta, batch);
    CHECK(!rep.skipped && rep.epochs == kstar && !rep.hit_max, "threshold %g: epochs %d (want %d), hit_max %d", thr,
          rep.epochs, kstar, rep.hit_max);
    CHECK(c.started, "started after the first round");
    for (size_t j = 0; j < len; j++) W[j] = 1.0;
    double l2[K];
    reference_ala(&f.m, &f.d, f.ref_ws, order, 10, batch, 1, eta, f.global, local0, W, kstar, want, l2, NULL);
    double worst = 0.0;
    int in_range = 1;
    for (size_t j = 0; j < len; j++) {
        worst = fmax(worst, fabs(f.local[off + j] - want[off + j]));
        in_range &= c.weights[j] >= 0.0f && c.weights[j] <= 1.0f;
    }
    CHECK(worst <= 1e-4, "after %d epochs the top layers differ from the reference by %g", kstar, worst);
    CHECK(check_close(rep.last_loss, l2[kstar - 1], 1e-4), "last loss %g, reference %g", rep.last_loss,
          l2[kstar - 1]);
    CHECK(rep.start_phase && rep.seconds >= 0.0, "start phase reported: %d, %g s", rep.start_phase, rep.seconds);
    CHECK(in_range, "W left [0,1]");
    CHECK(tiny_same(f.local, f.global, 0, off), "lower layers are the global ones");
    pfl_ala_client_free(&c);

    /* (2) a huge threshold: converged as soon as 10 losses exist past the
     * first, i.e. after 11 epochs (PFLlib: len(losses) > 10) */
    memcpy(f.local, local0, P * sizeof(float));
    rep = ala_first_round(&f, &c, 1e30f, 1000, eta, batch);
    CHECK(rep.epochs == 11 && !rep.hit_max, "huge threshold: epochs %d hit_max %d", rep.epochs, rep.hit_max);
    pfl_ala_client_free(&c);

    /* (3) threshold 0 never converges (std < 0 is impossible): max_epochs */
    memcpy(f.local, local0, P * sizeof(float));
    rep = ala_first_round(&f, &c, 0.0f, 17, eta, batch);
    CHECK(rep.epochs == 17 && rep.hit_max, "threshold 0: epochs %d hit_max %d", rep.epochs, rep.hit_max);
    CHECK(c.started, "started after hitting max_epochs");
    worst = 0.0;
    for (size_t j = 0; j < len; j++) W[j] = 1.0;
    reference_ala(&f.m, &f.d, f.ref_ws, order, 10, batch, 1, eta, f.global, local0, W, 17, want, l2, NULL);
    for (size_t j = 0; j < len; j++) worst = fmax(worst, fabs(f.local[off + j] - want[off + j]));
    CHECK(worst <= 1e-4, "after 17 epochs the top layers differ from the reference by %g", worst);
    pfl_ala_client_free(&c);

    /* (4) a threshold below the k* window: runs past k* to max_epochs */
    memcpy(f.local, local0, P * sizeof(float));
    rep = ala_first_round(&f, &c, 0.0f, kstar + 3, eta, batch);
    CHECK(rep.epochs == kstar + 3 && rep.hit_max, "max %d: epochs %d hit_max %d", kstar + 3, rep.epochs,
          rep.hit_max);
    pfl_ala_client_free(&c);

    /* (5) max_epochs below the window: stops there, hit_max */
    memcpy(f.local, local0, P * sizeof(float));
    rep = ala_first_round(&f, &c, 1e30f, 5, eta, batch);
    CHECK(rep.epochs == 5 && rep.hit_max, "max 5: epochs %d hit_max %d", rep.epochs, rep.hit_max);
    pfl_ala_client_free(&c);

    free(local0), free(want), free(W);
    ala_fixture_free(&f);
}

/* ---- FLAYER ---- */

static void test_flayer_lrs(void) {
    pfl_model m;
    if (pfl_model_build(&m, "cnn", 1, 28, 28, 10)) exit(2);
    CHECK(m.num_layers == 4, "cnn has %d layers", m.num_layers);
    const int L = m.num_layers;
    float *g = tiny_floats(m.num_params);
    const float c[4] = {0.01f, -0.5f, 2.0f, 1e-4f};
    for (int l = 0; l < L; l++)
        for (size_t j = 0; j < m.layers[l].length; j++) g[m.layers[l].offset + j] = c[l];
    float lrs[PFL_MAX_LAYERS];
    const float lr = 0.05f;
    pfl_flayer_layer_lrs(lrs, &m, g, lr);
    for (int l = 0; l < L; l++) {
        double norm = fabs((double)c[l]) * sqrt((double)m.layers[l].length);
        double want = (double)lr * (1.0 + log(1.0 + 1.0 / norm) * (l + 1) / (double)L);
        CHECK(check_close(lrs[l], want, 1e-5), "constant gradient: layer %d lr %.8g, want %.8g", l, lrs[l], want);
    }
    /* by hand for layer 1 (conv2, 51264 elements, c = -0.5):
     * ||g|| = 0.5 sqrt(51264) = 113.208..., lr = 0.05 (1 + ln(1 + 1/113.2) * 2/4) = 0.050219863 */
    CHECK(check_close(lrs[1], 0.05 * (1.0 + 0.00879453 * 0.5), 1e-7), "conv2 by hand: %.8g", lrs[1]);

    /* random gradients, norms by our own loop */
    pfl_rng r = tiny_rng(3);
    tiny_fill(g, m.num_params, -0.01, 0.01, &r);
    pfl_flayer_layer_lrs(lrs, &m, g, 1.0f);
    for (int l = 0; l < L; l++) {
        double sq = 0.0;
        for (size_t j = 0; j < m.layers[l].length; j++) sq += (double)g[m.layers[l].offset + j] * g[m.layers[l].offset + j];
        double want = 1.0 + log(1.0 + 1.0 / sqrt(sq)) * (l + 1) / (double)L;
        CHECK(check_close(lrs[l], want, 1e-5), "random gradient: layer %d lr %.8g, want %.8g", l, lrs[l], want);
    }
    /* a layer with no gradient keeps the base rate (documented choice: the
     * formula's rate would be infinite, and the layer does not move anyway) */
    memset(g + m.layers[2].offset, 0, m.layers[2].length * sizeof(float));
    pfl_flayer_layer_lrs(lrs, &m, g, 0.5f);
    CHECK(lrs[2] == 0.5f && isfinite(lrs[3]), "zero gradient: lr %g", lrs[2]);
    free(g);
}

/* Eq. 4's rates are those of the round ("g^(i,t) ... the gradient vector of
 * the i-th layer at iteration t", t a round of Algorithm 1): set from the
 * first batch's gradient and held for the whole local training. One client
 * whose training split is one batch, two epochs, so the two steps are
 * written out here: theta1 = theta0 - eta(g0) g0, theta2 = theta1 - eta(g0) g1.
 * Rates recomputed per batch (eta(g1) in the second step) end elsewhere. */
static void test_flayer_lr_per_round(void) {
    const int n_train[1] = {4}, n_test[1] = {1};
    pfl_config cfg = tiny_config(1);
    cfg.epochs = 2, cfg.batch = 4, cfg.lr = 0.5f;
    cfg.modules.flayer_lr = true;
    tiny_fed f;
    tiny_fed_init(&f, &pfl_algo_fedavg, cfg, n_train, n_test);
    const pfl_model *m = &f.m;
    const size_t V = pfl_model_vector_len(m), P = m->num_params;
    float *model = tiny_floats(V), *by_hand = tiny_floats(V), *per_batch = tiny_floats(V);
    float *g = tiny_floats(P), *x = tiny_floats(4 * (size_t)pfl_model_input_size(m));
    uint8_t y[4];
    memcpy(model, f.fl.global, V * sizeof(float));
    memcpy(by_hand, model, V * sizeof(float));
    pfl_train_stats st = {0};
    f.fl.round = 1;
    pfl_default_local_train(&f.fl, 0, &f.fl.workers[0], model, &st);
    CHECK(st.samples == 8, "trained %ld samples, want 8 (2 epochs of one batch)", st.samples);

    pfl_workspace *ws = pfl_workspace_create(m, 4);
    if (!ws) exit(2);
    pfl_dataset_gather(&f.d, f.part.clients[0].train, 4, x, y);
    float r0[PFL_MAX_LAYERS], r1[PFL_MAX_LAYERS];
    const float *rates[2][2] = {{r0, r0}, {r0, r1}}; /* [per round, per batch][step] */
    float *out[2] = {by_hand, per_batch};
    for (int v = 0; v < 2; v++) {
        memcpy(out[v], f.fl.global, V * sizeof(float));
        for (int step = 0; step < 2; step++) {
            memset(g, 0, P * sizeof(float));
            pfl_forward_loss(ws, out[v], x, y, 4, true, NULL);
            pfl_backward(ws, out[v], y, g);
            pfl_flayer_layer_lrs(step == 0 ? r0 : r1, m, g, cfg.lr);
            for (int l = 0; l < m->num_layers; l++) {
                const pfl_sgd opt = {rates[v][step][l], 0.0f, 0.0f};
                pfl_sgd_step(out[v] + m->layers[l].offset, g + m->layers[l].offset, NULL, m->layers[l].length, &opt);
            }
        }
    }
    double off = 0.0, apart = 0.0;
    for (size_t i = 0; i < P; i++) {
        off = fmax(off, fabs((double)model[i] - by_hand[i]));
        apart = fmax(apart, fabs((double)per_batch[i] - by_hand[i]));
    }
    /* the sample order inside the batch differs (the shuffle), so sums round differently */
    CHECK(off <= 1e-6, "per-round rates: off the hand computation by %.3g", off);
    CHECK(apart > 100 * 1e-6, "per-batch rates land only %.3g away: the test cannot tell them apart", apart);
    pfl_workspace_free(ws);
    free(model), free(by_hand), free(per_batch), free(g), free(x);
    tiny_fed_free(&f);
}

static void test_flayer_upload_fraction(void) {
    /* min(max(i / L, 0.1), 1) */
    CHECK(pfl_flayer_upload_fraction(1, 4) == 0.25, "1/4");
    CHECK(pfl_flayer_upload_fraction(3, 4) == 0.75, "3/4");
    CHECK(pfl_flayer_upload_fraction(4, 4) == 1.0, "4/4");
    CHECK(pfl_flayer_upload_fraction(1, 20) == 0.1, "1/20 = 0.05 -> 0.1: %g", pfl_flayer_upload_fraction(1, 20));
    CHECK(pfl_flayer_upload_fraction(1, 16) == 0.1, "1/16 -> 0.1");
    CHECK(pfl_flayer_upload_fraction(2, 20) == 0.1, "2/20 = 0.1");
    CHECK(check_close(pfl_flayer_upload_fraction(3, 20), 0.15, 1e-15), "3/20");
    CHECK(pfl_flayer_upload_fraction(20, 20) == 1.0, "20/20");
    CHECK(pfl_flayer_upload_fraction(0, 4) == 0.1, "0/4 -> 0.1");
    CHECK(pfl_flayer_upload_fraction(5, 4) == 1.0, "5/4 -> 1");
}

/* A model with only a layer table: what the mask looks at. */
static pfl_model table_model(int L, const size_t *lengths) {
    pfl_model m;
    memset(&m, 0, sizeof m);
    snprintf(m.name, sizeof m.name, "table");
    m.num_layers = L;
    size_t off = 0;
    for (int l = 0; l < L; l++) {
        m.layers[l].offset = off, m.layers[l].length = lengths[l];
        off += lengths[l];
    }
    m.num_params = off;
    return m;
}

/* ceil(UP_i n) in integers: UP_i = i/L, or 0.1 when i/L < 0.1. */
static size_t want_count(int i, int L, size_t n) {
    if (10 * (size_t)i < (size_t)L) return (n + 9) / 10;
    if (i >= L) return n;
    return ((size_t)i * n + (size_t)L - 1) / (size_t)L;
}

/* Reference mask: per layer, positions sorted by |d| descending then by
 * position (insertion sort, stable), the first want_count taken. */
static size_t reference_mask(uint8_t *sent, const pfl_model *m, const float *trained, const float *start) {
    size_t total = 0;
    for (int l = 0; l < m->num_layers; l++) {
        const size_t off = m->layers[l].offset, n = m->layers[l].length;
        size_t *pos = malloc(sizeof(size_t) * (n ? n : 1));
        for (size_t j = 0; j < n; j++) {
            double dj = fabs((double)trained[off + j] - (double)start[off + j]);
            size_t k = j;
            while (k > 0 && fabs((double)trained[off + pos[k - 1]] - (double)start[off + pos[k - 1]]) < dj) {
                pos[k] = pos[k - 1];
                k--;
            }
            pos[k] = j;
        }
        const size_t k = want_count(l + 1, m->num_layers, n);
        memset(sent + off, 0, n);
        for (size_t j = 0; j < k; j++) sent[off + pos[j]] = 1;
        total += k;
        free(pos);
    }
    return total;
}

static void test_flayer_mask_by_hand(void) {
    /* L = 4: UP = 1/4, 1/2, 3/4, 1. Changes are exact in float. */
    const size_t lengths[4] = {10, 7, 5, 3};
    pfl_model m = table_model(4, lengths);
    float start[25], trained[25], scratch[10];
    uint8_t sent[25];
    /* layer 0: k = ceil(2.5) = 3. |d| = .5 3 2 2 2 1 0 3 2 .25: the two 3s
     * (positions 1, 7), then the first of the four 2s (position 2). */
    const float d0[10] = {0.5f, -3.0f, 2.0f, -2.0f, 2.0f, 1.0f, 0.0f, 3.0f, 2.0f, -0.25f};
    const uint8_t m0[10] = {0, 1, 1, 0, 0, 0, 0, 1, 0, 0};
    /* layer 1: k = ceil(3.5) = 4, start 1.0. |d| = 1 1 1 1 1 1 1: all tied,
     * the first four. */
    const float d1[7] = {1.0f, -1.0f, 1.0f, -1.0f, 1.0f, -1.0f, 1.0f};
    const uint8_t m1[7] = {1, 1, 1, 1, 0, 0, 0};
    /* layer 2: k = ceil(3.75) = 4. |d| = .125 .5 .25 .5 .375: all but position 0 */
    const float d2[5] = {0.125f, -0.5f, 0.25f, 0.5f, -0.375f};
    const uint8_t m2[5] = {0, 1, 1, 1, 1};
    /* layer 3: UP = 1, everything, even unchanged elements */
    const float d3[3] = {0.0f, 0.0f, 1.0f};
    const uint8_t m3[3] = {1, 1, 1};
    for (int j = 0; j < 10; j++) start[j] = 0.0f, trained[j] = d0[j];
    for (int j = 0; j < 7; j++) start[10 + j] = 1.0f, trained[10 + j] = 1.0f + d1[j];
    for (int j = 0; j < 5; j++) start[17 + j] = -0.5f, trained[17 + j] = -0.5f + d2[j];
    for (int j = 0; j < 3; j++) start[22 + j] = 2.0f, trained[22 + j] = 2.0f + d3[j];
    memset(sent, 7, sizeof sent);
    size_t total = pfl_flayer_mask(sent, &m, trained, start, scratch);
    CHECK(total == 3 + 4 + 4 + 3, "flags set: %zu, want 14", total);
    int bad = 0;
    for (int j = 0; j < 10; j++) bad += sent[j] != m0[j];
    CHECK(bad == 0, "layer 0: %d flags wrong", bad);
    bad = 0;
    for (int j = 0; j < 7; j++) bad += sent[10 + j] != m1[j];
    CHECK(bad == 0, "layer 1 (all tied): %d flags wrong", bad);
    bad = 0;
    for (int j = 0; j < 5; j++) bad += sent[17 + j] != m2[j];
    CHECK(bad == 0, "layer 2: %d flags wrong", bad);
    bad = 0;
    for (int j = 0; j < 3; j++) bad += sent[22 + j] != m3[j];
    CHECK(bad == 0, "layer 3 (UP = 1): %d flags wrong", bad);
    /* trained and start untouched */
    CHECK(trained[1] == -3.0f && start[10] == 1.0f, "inputs modified");
}

/* Random layer tables with few distinct |changes| (many ties), including the
 * 0.1 floor (L up to 16), against the reference. */
static void test_flayer_mask_count_exact(void) {
    /* L = 11, layer 9, n = 77: ceil(9 * 77 / 11) = 63 exactly */
    size_t lengths[11];
    for (int l = 0; l < 11; l++) lengths[l] = 77;
    pfl_model m = table_model(11, lengths);
    float *start = tiny_floats(m.num_params), *trained = tiny_floats(m.num_params), *scratch = tiny_floats(77);
    uint8_t *sent = tiny_alloc(m.num_params);
    for (size_t j = 0; j < m.num_params; j++) start[j] = 0.0f, trained[j] = (float)(j % 77) + 1.0f;
    pfl_flayer_mask(sent, &m, trained, start, scratch);
    size_t count = 0;
    for (size_t j = 0; j < 77; j++) count += sent[m.layers[8].offset + j];
    CHECK(count == 63, "L=11 layer 9 of 77 sends %zu, want 63", count);
    free(start), free(trained), free(scratch), free(sent);
}

static void test_flayer_mask_random(void) {
    pfl_rng r = tiny_rng(17);
    int cases = 0, wrong_sets = 0, wrong_counts = 0;
    for (int t = 0; t < 200; t++) {
        /* every L up to 16: the counts are exact integers (L = 11, i = 9,
         * n = 77 once rounded one too high in floating point) */
        int L = 1 + (int)pfl_rng_below(&r, 16);
        size_t lengths[PFL_MAX_LAYERS], maxlen = 0;
        for (int l = 0; l < L; l++) {
            lengths[l] = 1 + pfl_rng_below(&r, 60);
            if (lengths[l] > maxlen) maxlen = lengths[l];
        }
        pfl_model m = table_model(L, lengths);
        float *start = tiny_floats(m.num_params), *trained = tiny_floats(m.num_params), *scratch = tiny_floats(maxlen);
        uint8_t *sent = tiny_alloc(m.num_params), *want = tiny_alloc(m.num_params);
        const int levels = 1 + (int)pfl_rng_below(&r, 5);
        for (size_t j = 0; j < m.num_params; j++) {
            start[j] = (float)((int)pfl_rng_below(&r, 9) - 4) * 0.5f;
            float d = (float)pfl_rng_below(&r, (uint64_t)levels) * 0.25f;
            trained[j] = start[j] + (pfl_rng_uniform(&r) < 0.5 ? -d : d);
        }
        size_t got = pfl_flayer_mask(sent, &m, trained, start, scratch);
        size_t expect = reference_mask(want, &m, trained, start);
        cases++;
        wrong_counts += got != expect;
        wrong_sets += memcmp(sent, want, m.num_params) != 0;
        free(start), free(trained), free(scratch), free(sent), free(want);
    }
    CHECK(wrong_counts == 0 && wrong_sets == 0, "random masks: %d wrong counts, %d wrong sets of %d", wrong_counts,
          wrong_sets, cases);
}

/* The real models: per layer exactly ceil(UP_i n_i) flags, the largest. */
static void test_flayer_mask_cnn(void) {
    pfl_model m;
    if (pfl_model_build(&m, "cnn", 1, 28, 28, 10)) exit(2);
    const size_t P = m.num_params;
    float *start = tiny_floats(P), *trained = tiny_floats(P), *scratch = tiny_floats(P);
    uint8_t *sent = tiny_alloc(P);
    pfl_rng r = tiny_rng(23);
    tiny_fill(start, P, -0.1, 0.1, &r);
    /* distinct changes: the largest are known by construction */
    for (size_t j = 0; j < P; j++) trained[j] = start[j] + (float)(pfl_rng_uniform(&r) - 0.5) * 1e-2f;
    size_t total = pfl_flayer_mask(sent, &m, trained, start, scratch);
    size_t want_total = 0;
    for (int l = 0; l < m.num_layers; l++) {
        const size_t off = m.layers[l].offset, n = m.layers[l].length;
        const size_t k = want_count(l + 1, 4, n);
        want_total += k;
        size_t flags = 0, bad_order = 0;
        float min_sent = INFINITY, max_unsent = 0.0f;
        for (size_t j = 0; j < n; j++) {
            float d = fabsf(trained[off + j] - start[off + j]);
            if (sent[off + j]) flags++, min_sent = fminf(min_sent, d);
            else max_unsent = fmaxf(max_unsent, d);
        }
        bad_order = k < n && !(min_sent >= max_unsent);
        CHECK(flags == k, "cnn layer %d: %zu flags, want ceil(%d/4 * %zu) = %zu", l, flags, l + 1, n, k);
        CHECK(!bad_order, "cnn layer %d: an unsent change %g exceeds a sent one %g", l, max_unsent, min_sent);
    }
    CHECK(total == want_total, "cnn total %zu, want %zu", total, want_total);
    free(start), free(trained), free(scratch), free(sent);
}

static void test_flayer_mix_head(void) {
    pfl_model m;
    if (pfl_model_build(&m, "dnn", 1, 4, 4, 3)) exit(2);
    const size_t P = m.num_params, base = m.layers[1].offset;
    float *local = tiny_floats(P), *received = tiny_floats(P), *before = tiny_floats(P);
    pfl_rng r = tiny_rng(29);
    for (int head = 0; head <= 3; head++) {
        tiny_fill(local, P, -1, 1, &r);
        tiny_fill(received, P, -1, 1, &r);
        memcpy(before, local, P * sizeof(float));
        const float acc = 0.3f;
        pfl_flayer_mix_head(local, received, &m, head, acc);
        /* head layers: the last min(head, L) */
        const size_t first_head_off = head == 0 ? P : (head == 1 ? base : 0);
        CHECK(tiny_same(local, received, 0, first_head_off), "head %d: base is not the received one", head);
        double worst = 0.0;
        for (size_t i = first_head_off; i < P; i++)
            worst = fmax(worst, fabs(local[i] - ((double)acc * before[i] + (1.0 - acc) * (double)received[i])));
        CHECK(worst <= 1e-6, "head %d: mix off by %g", head, worst);
    }
    free(local), free(received), free(before);
}

int main(void) {
    test_ala_weight_step();
    test_ala_span();
    test_ala_one_batch();
    test_ala_skip();
    test_ala_first_round();
    test_flayer_lrs();
    test_flayer_lr_per_round();
    test_flayer_upload_fraction();
    test_flayer_mask_by_hand();
    test_flayer_mask_count_exact();
    test_flayer_mask_random();
    test_flayer_mask_cnn();
    test_flayer_mix_head();
    TEST_MAIN_END();
}
