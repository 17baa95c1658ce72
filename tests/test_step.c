/* The local step (src/fl/step.c): what each declared part does to the
 * gradient, against central differences of the loss the parts define.
 *
 * One client of 4 samples, --batch 4 and --lr 1: one step of plain SGD, so
 * the model after the step is the model before minus the gradient of the
 * declared loss, which the test recovers and compares with central
 * differences of that loss computed here from forwards alone:
 *
 *   L(theta) = ce_weight CE + sum_t weight_t T_t(z_t), z_t the logits or a
 *   layer's features (of theta, and of a reference model for a term that has one).
 *
 * Then the declarations: the fused path only for the cross-entropy alone,
 * the statistics an owned batch counts, what a device backend could not run. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "check.h"
#include "tiny.h"

/* 0.5 sum (z - target)^2 / B, target the reference's values or zero. */
static double squares(void *ctx, const pfl_term_batch *b, float *dz, int *correct) {
    (void)ctx, (void)correct;
    double total = 0.0;
    for (long k = 0; k < b->B * b->n; k++) {
        const double d = (double)b->z[k] - (b->refs[0] ? b->refs[0][k] : 0.0);
        total += 0.5 * d * d;
        dz[k] = (float)(d / b->B);
    }
    return total / b->B;
}

typedef struct {
    double ce_weight;
    int n;
    int at[3];
    float weight[3];
    const float *ref[3];
} loss_spec;

/* The loss the spec declares, at params, on the batch, by forwards alone. */
static double spec_loss(const tiny_fed *f, const tiny_batch *b, const loss_spec *s, const float *params) {
    const pfl_model *m = &f->m;
    const int B = 4;
    double total = s->ce_weight * pfl_forward_loss(b->ws, params, b->x, b->y, B, true, NULL);
    for (int t = 0; t < s->n; t++) {
        const int layer = s->at[t] == PFL_AT_LOGITS ? m->num_layers : s->at[t];
        const long n = s->at[t] == PFL_AT_LOGITS ? m->classes : pfl_model_layer_input_size(m, layer);
        float *z = malloc(sizeof(float) * (size_t)(B * n)), *zr = NULL;
        pfl_forward(b->ws, params, b->x, B, true, NULL);
        memcpy(z, s->at[t] == PFL_AT_LOGITS ? pfl_workspace_logits(b->ws) : pfl_workspace_layer_input(b->ws, layer),
               sizeof(float) * (size_t)(B * n));
        if (s->ref[t]) {
            zr = malloc(sizeof(float) * (size_t)(B * n));
            pfl_forward(b->ws, s->ref[t], b->x, B, false, NULL);
            memcpy(zr, s->at[t] == PFL_AT_LOGITS ? pfl_workspace_logits(b->ws) : pfl_workspace_layer_input(b->ws, layer),
                   sizeof(float) * (size_t)(B * n));
        }
        const pfl_term_batch tb = {z, {zr}, b->y, B, n, params, NULL};
        float *dz = malloc(sizeof(float) * (size_t)(B * n));
        total += s->weight[t] * squares(NULL, &tb, dz, NULL);
        free(z), free(zr), free(dz);
    }
    return total;
}

/* One step of the declared loss; its gradient against central differences
 * on every 7th parameter. */
static void check_gradient(const char *what, const loss_spec *s) {
    pfl_config cfg = tiny_config(1);
    cfg.lr = 1.0f;
    const int n_train[1] = {4}, n_test[1] = {1};
    tiny_fed f;
    tiny_fed_init(&f, &pfl_algo_fedavg, cfg, n_train, n_test);
    pfl_fl *fl = &f.fl;
    fl->round = 1;
    const size_t P = f.m.num_params;
    float *before = tiny_floats(P), *model = tiny_floats(P), *probe = tiny_floats(P);
    memcpy(before, fl->global, P * sizeof(float));
    memcpy(model, before, P * sizeof(float));
    pfl_step step = pfl_step_default(fl);
    step.ce_weight = s->ce_weight;
    for (int t = 0; t < s->n; t++) {
        const pfl_loss_term term = {.name = "squares", .at = s->at[t], .weight = s->weight[t],
                                    .refs = {s->ref[t]}, .num_refs = s->ref[t] ? 1 : 0, .value = squares};
        pfl_step_add_term(&step, &term);
    }
    pfl_train_stats st = {0};
    pfl_step_run(fl, 0, &fl->workers[0], model, &step, &st);
    const int idx[4] = {0, 1, 2, 3};
    tiny_batch b = tiny_batch_of(&f.m, &f.d, idx, 4);
    CHECK(st.samples == 4 && check_close(st.loss_sum / 4, spec_loss(&f, &b, s, before), 1e-5),
          "%s: the step's loss %g, the declared loss %g", what, st.loss_sum / 4, spec_loss(&f, &b, s, before));
    double worst = 0.0;
    size_t checked = 0;
    for (size_t i = 0; i < P; i += 7, checked++) {
        const float h = 1e-3f;
        memcpy(probe, before, P * sizeof(float));
        probe[i] = before[i] + h;
        const double up = spec_loss(&f, &b, s, probe);
        probe[i] = before[i] - h;
        const double down = spec_loss(&f, &b, s, probe);
        const double fd = (up - down) / (2.0 * h), step_grad = (double)before[i] - (double)model[i];
        worst = fmax(worst, fabs(fd - step_grad) / fmax(1.0, fabs(fd)));
    }
    CHECK(worst < 2e-3, "%s: the step's gradient against central differences, worst %g over %zu parameters", what,
          worst, checked);
    tiny_batch_free(&b);
    free(before), free(model), free(probe);
    tiny_fed_free(&f);
}

static void test_terms(void) {
    /* "dnn": layer 0 Linear(16, 100), ReLU, layer 1 Linear(100, 3) */
    float *ref = tiny_floats(2003);
    pfl_model m;
    if (pfl_model_build(&m, "dnn", 1, 4, 4, 3)) exit(2);
    pfl_rng r = tiny_rng(41);
    pfl_model_init_params(&m, ref, &r);
    const loss_spec ce = {1.0, 0, {0}, {0}, {0}};
    check_gradient("cross-entropy alone", &ce);
    const loss_spec logits = {1.0, 1, {PFL_AT_LOGITS}, {0.5f}, {NULL}};
    check_gradient("a term on the logits", &logits);
    const loss_spec features = {0.3, 1, {1}, {2.0f}, {NULL}};
    check_gradient("a weighted cross-entropy and a term on layer 1's features", &features);
    const loss_spec two = {1.0, 2, {PFL_AT_LOGITS, 1}, {0.5f, 1.5f}, {ref, NULL}};
    check_gradient("a term on the logits toward a reference and one on the features", &two);
    const loss_spec no_ce = {0.0, 1, {1}, {1.0f}, {ref}};
    check_gradient("no cross-entropy, a term on the features toward a reference", &no_ce);
    const loss_spec logits_only = {0.0, 2, {PFL_AT_LOGITS, PFL_AT_LOGITS}, {1.0f, 0.25f}, {NULL, ref}};
    check_gradient("no cross-entropy, two terms on the logits", &logits_only);
    free(ref);
}

/* The fused backward-and-step is taken only for the cross-entropy alone with
 * plain SGD: a declared part that adds nothing (a proximal term of mu 0, a
 * term of weight 0) takes the separate path, whose model is the fused one's
 * up to float rounding. Which path ran is read from the step's count of
 * fused batches: whether the two paths round alike depends on the GEMM
 * kernels OpenBLAS picks for the CPU (on Prescott kernels they agree bit
 * for bit), so no assertion here rests on it. */
static void test_fast_path(void) {
    pfl_config cfg = tiny_config(1);
    const int n_train[1] = {12}, n_test[1] = {1};
    tiny_fed f;
    tiny_fed_init(&f, &pfl_algo_fedavg, cfg, n_train, n_test);
    pfl_fl *fl = &f.fl;
    fl->round = 1;
    const size_t P = f.m.num_params;
    float *fused = tiny_floats(P), *prox0 = tiny_floats(P), *term0 = tiny_floats(P);
    memcpy(fused, fl->global, P * sizeof(float)), memcpy(prox0, fused, P * sizeof(float));
    memcpy(term0, fused, P * sizeof(float));
    pfl_train_stats st_plain = {0}, st_prox = {0}, st_term = {0};
    pfl_step plain = pfl_step_default(fl), prox = pfl_step_default(fl), term = pfl_step_default(fl);
    pfl_step_run(fl, 0, &fl->workers[0], fused, &plain, &st_plain);
    pfl_step_add_prox(&prox, 0.0f, fl->global, 0, P);
    pfl_step_run(fl, 0, &fl->workers[0], prox0, &prox, &st_prox);
    const pfl_loss_term zero = {.name = "squares", .at = PFL_AT_LOGITS, .weight = 0.0f, .value = squares};
    pfl_step_add_term(&term, &zero);
    pfl_step_run(fl, 0, &fl->workers[0], term0, &term, &st_term);
    CHECK(tiny_same(prox0, term0, 0, P), "a term of weight 0 and a proximal term of mu 0: the same separate path");
    CHECK(st_plain.fused_batches == 3 && st_plain.samples == 12, "the plain step is fused: %ld of its 3 batches",
          st_plain.fused_batches);
    CHECK(st_prox.fused_batches == 0 && st_term.fused_batches == 0,
          "a declared part takes the separate path (fused batches: %ld with mu 0, %ld with a term of weight 0)",
          st_prox.fused_batches, st_term.fused_batches);
    size_t far = 0;
    for (size_t i = 0; i < P; i++) far += !check_close(fused[i], prox0[i], 1e-5);
    CHECK(far == 0, "fused and separate agree to float rounding (%zu far apart)", far);
    free(fused), free(prox0), free(term0);
    tiny_fed_free(&f);
}

/* An owned batch: the step hands each batch's samples to the method, which
 * gathers and counts them; declining leaves the batch to the step's SGD. */
typedef struct {
    int owned, declined;
} owner_log;

static bool every_other(void *ctx, pfl_owned_batch *b) {
    owner_log *log = ctx;
    if (b->index % 2 == 1) {
        log->declined++;
        return false;
    }
    log->owned++;
    for (int at = 0; at < b->B; at += pfl_exec_max_batch(b->x)) { /* in parts the executor holds */
        const int n = b->B - at < pfl_exec_max_batch(b->x) ? b->B - at : pfl_exec_max_batch(b->x);
        pfl_exec_gather(b->x, b->idx + at, n);
    }
    pfl_step_count(b, 2.0f, b->B, b->B);
    return true;
}

static void test_owned_batches(void) {
    pfl_config cfg = tiny_config(1);
    const int n_train[1] = {10}, n_test[1] = {1}; /* batch 4: 4, 4, 2 */
    tiny_fed f;
    tiny_fed_init(&f, &pfl_algo_fedavg, cfg, n_train, n_test);
    pfl_fl *fl = &f.fl;
    fl->round = 1;
    float *model = tiny_floats(f.m.num_params);
    memcpy(model, fl->global, f.m.num_params * sizeof(float));
    owner_log log = {0, 0};
    pfl_step s = pfl_step_default(fl);
    s.own = every_other, s.own_ctx = &log;
    s.epochs = 2;
    pfl_train_stats st = {0};
    pfl_step_run(fl, 0, &fl->workers[0], model, &s, &st);
    CHECK(log.owned == 3 && log.declined == 3, "owned %d, declined %d of 6 batches (every other, counted over "
          "both epochs)", log.owned, log.declined);
    CHECK(st.samples == 20 && st.last_epoch_samples == 10, "%ld samples, %ld in the last epoch", st.samples,
          st.last_epoch_samples);
    CHECK(!tiny_same(model, fl->global, 0, f.m.num_params), "the declined batches trained the model");
    CHECK(pfl_step_host_part(&s) != NULL, "owned batches are host work");
    /* --batch 4 as chunks of 8 with batches under 3 left out: 10 = 8 + 2, the 2 dropped */
    log = (owner_log){0, 0};
    s.batch = 8, s.min_batch = 3, s.epochs = 1;
    memset(&st, 0, sizeof st);
    pfl_step_run(fl, 0, &fl->workers[0], model, &s, &st);
    CHECK(log.owned == 1 && log.declined == 0 && st.samples == 8, "chunks of 8: owned %d, %ld samples", log.owned,
          st.samples);
    free(model);
    tiny_fed_free(&f);
}

static void test_host_parts(void) {
    pfl_config cfg = tiny_config(1);
    const int n_train[1] = {4}, n_test[1] = {1};
    tiny_fed f;
    tiny_fed_init(&f, &pfl_algo_fedavg, cfg, n_train, n_test);
    pfl_step s = pfl_step_default(&f.fl);
    CHECK(pfl_step_host_part(&s) == NULL, "FedAvg's step runs on any backend");
    pfl_step_add_prox(&s, 0.1f, f.fl.global, 0, f.m.num_params);
    s.ce_offset = f.fl.global; /* any per-class offsets */
    CHECK(pfl_step_host_part(&s) == NULL, "a proximal term and a balanced softmax are the backends' own");
    const pfl_loss_term t = {.name = "squares", .at = PFL_AT_LOGITS, .weight = 1.0f, .value = squares};
    pfl_step_add_term(&s, &t);
    CHECK(pfl_step_host_part(&s) && !strcmp(pfl_step_host_part(&s), "squares"), "a term of its own is host work");
    tiny_fed_free(&f);
}

int main(void) {
    test_terms();
    test_fast_path();
    test_owned_batches();
    test_host_parts();
    TEST_MAIN_END();
}
