/* pfl_backward_sgd (plain SGD fused into the backward pass) against the
 * separate path it replaces in pfl_local_sgd: pfl_backward into zeroed
 * gradients, then pfl_sgd_step on every layer. A few steps from the same
 * start on the same batches must give the same parameters up to float
 * rounding. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "util/err.h"
#include "util/rng.h"

/* Why 1e-6 (relative to max(1, |p|)): the two paths add the same products
 * in other orders and round the step differently (the fused GEMM computes
 * p + (-lr) * sum, the separate one p - lr * sum), a few float ulps (~1e-7
 * relative) per weight and step; the next steps' gradients inherit those
 * differences, still at that scale after STEPS steps. Parameters are O(0.1)
 * and each step moves them by ~1e-3 (checked below), so a wrong update (a
 * missing sample, stale weights for the input gradient, a wrong rate) is
 * orders of magnitude above the tolerance (observed: under 1e-7). */
#define TOL 1e-6
#define STEPS 4
#define LR 0.05f

static void fill(float *x, long n, float lo, float hi, pfl_rng *r) {
    for (long i = 0; i < n; i++) x[i] = lo + (hi - lo) * (float)pfl_rng_uniform(r);
}

static void test_model(const char *name, int c, int h, int w, int B) {
    printf("%s %dx%dx%d, batch %d\n", name, c, h, w, B);
    pfl_model m;
    CHECK(pfl_model_build(&m, name, c, h, w, 10) == 0, "%s", pfl_errmsg());
    CHECK(pfl_model_sgd_fusable(&m), "%s should be fusable", name);
    pfl_rng r = pfl_rng_stream(7, PFL_RNG_NONE, PFL_RNG_NONE, PFL_RNG_BENCH);
    const size_t len = pfl_model_vector_len(&m);
    float *start = malloc(sizeof(float) * len), *fused = malloc(sizeof(float) * len);
    float *separate = malloc(sizeof(float) * len), *grads = malloc(sizeof(float) * m.num_params);
    const long in_size = pfl_model_input_size(&m);
    float *x = malloc(sizeof(float) * (size_t)(B * in_size) * STEPS);
    uint8_t *y = malloc((size_t)B * STEPS);
    pfl_workspace *ws = pfl_workspace_create(&m, B);
    if (!start || !fused || !separate || !grads || !x || !y || !ws) exit(2);
    pfl_model_init_params(&m, start, &r);
    fill(x, B * in_size * STEPS, -1.0f, 2.0f, &r);
    for (int i = 0; i < B * STEPS; i++) y[i] = (uint8_t)pfl_rng_below(&r, 10);
    memcpy(fused, start, sizeof(float) * len);
    memcpy(separate, start, sizeof(float) * len);

    const pfl_sgd opt = {LR, 0.0f, 0.0f};
    for (int s = 0; s < STEPS; s++) {
        const float *xs = x + (long)s * B * in_size;
        const uint8_t *ys = y + s * B;
        pfl_forward_loss(ws, fused, xs, ys, B, true, NULL);
        CHECK(pfl_backward_sgd(ws, fused, ys, LR) == 0, "%s", pfl_errmsg());
        memset(grads, 0, sizeof(float) * m.num_params);
        pfl_forward_loss(ws, separate, xs, ys, B, true, NULL);
        pfl_backward(ws, separate, ys, grads);
        for (int l = 0; l < m.num_layers; l++)
            pfl_sgd_step(separate + m.layers[l].offset, grads + m.layers[l].offset, NULL, m.layers[l].length, &opt);
    }
    double worst = 0.0, moved = 0.0;
    for (size_t i = 0; i < len; i++) {
        const double scale = fabs(separate[i]) > 1.0 ? fabs(separate[i]) : 1.0;
        worst = fmax(worst, fabs((double)fused[i] - separate[i]) / scale);
        moved = fmax(moved, fabs((double)separate[i] - start[i]));
    }
    printf("  largest difference %.2e (relative), largest change of a parameter %.2e\n", worst, moved);
    CHECK(worst <= TOL, "%s: fused and separate SGD differ by %.3e", name, worst);
    CHECK(moved > 1000 * TOL, "%s: the steps barely moved the parameters (%.3e): the test would prove nothing", name,
          moved);
    pfl_workspace_free(ws);
    free(start), free(fused), free(separate), free(grads), free(x), free(y);
}

/* Models with a layer the fused step does not cover are refused, not
 * silently half-trained. */
static void test_refused(void) {
    pfl_model m;
    CHECK(pfl_model_build(&m, "resnet18", 3, 32, 32, 10) == 0, "%s", pfl_errmsg());
    CHECK(!pfl_model_sgd_fusable(&m), "resnet18 has BatchNorm: not fusable");
    pfl_workspace *ws = pfl_workspace_create(&m, 1);
    float *p = calloc(pfl_model_vector_len(&m), sizeof(float)), *x = calloc(3 * 32 * 32, sizeof(float));
    uint8_t y = 0;
    if (!ws || !p || !x) exit(2);
    pfl_forward_loss(ws, p, x, &y, 1, true, NULL);
    CHECK(pfl_backward_sgd(ws, p, &y, LR) == -1, "resnet18: the fused step should fail");
    pfl_err_clear();
    pfl_workspace_free(ws);
    free(p), free(x);
}

int main(void) {
    test_model("cnn", 1, 28, 28, 10);   /* conv 5x5, one sample per GEMM; fc1 */
    test_model("cnn", 1, 28, 28, 3);
    test_model("mnist-cnn", 1, 28, 28, 4); /* conv3 on 5x5: samples grouped into one GEMM */
    test_model("dnn", 1, 28, 28, 10);   /* Linear only */
    test_refused();
    TEST_MAIN_END();
}
