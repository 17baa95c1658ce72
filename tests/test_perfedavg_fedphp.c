/* The step that makes each of FedAvg-C, FedProx-C,
 * Per-FedAvg and FedPHP what it is, worked out by hand.
 *
 * Most cases use a linear model of 2 inputs and 2 classes (logits Wx + b)
 * on two images: a = (1, -1) of class 0 and b = (-1, -1) of class 1 (pixels
 * 255 and 0), starting from W = 0, b = 0, where the softmax is (1/2, 1/2)
 * and every gradient is a number written below:
 *
 *  - FedAvg-C's fine-tuning (one epoch, one batch of both images, lr 0.1)
 *    gives W = [[0.05, 0], [-0.05, 0]], b = 0; that model is the one
 *    evaluated, and the one the next round's training starts from, bit for
 *    bit (FedProx-C too); with --ft-epochs 0 FedAvg-C is FedAvg bitwise;
 *  - Per-FedAvg's personalized model is the global model after
 *    --perfedavg-steps steps of size alpha; its first-order local step on
 *    two copies of image a, and its Hessian-free one on three copies, where
 *    H g = 1.5 g at W = 0 (the cross-entropy's Hessian in the logits is
 *    diag(p) - p p^T), so w <- -beta (1 - 1.5 alpha) g;
 *  - FedPHP's moving average of the inherited model (mu growing with the
 *    client's participations up to 0.9) and its training step, one SGD step
 *    on (1 - lambda) CE + lambda MMD toward the inherited model's features;
 *  - the MMD kernel (pfl_mmd_rbf) by hand and against finite differences,
 *    and pfl_backward_features against finite differences of the loss;
 *  - --ala on Per-FedAvg and FedPHP (FedALA's Table 4): the clients learn
 *    ALA weights (some leave 1) and the models differ from the runs without;
 *  - the refusals. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "check.h"
#include "fd_check.h"
#include "fl/fl.h"
#include "nn/layers.h"
#include "nn/model.h"
#include "tiny.h"
#include "util/err.h"
#include "util/sha256.h"

static double sigmoid(double t) { return 1.0 / (1.0 + exp(-t)); }

/* ---- the linear federation ---- */

/* One client holding `n` copies of the images in `which` (0: a, 1: b)
 * cycled, then one test image; the model's W (2 x 2, row per class) and b at
 * w[0..4) and w[4..6). */
static void linear_fed(tiny_fed *f, const pfl_algo *algo, pfl_config cfg, const int *which, int n) {
    memset(f, 0, sizeof *f);
    if (pfl_model_begin(&f->m, "linear", 1, 1, 2, 2) || pfl_model_linear(&f->m, "fc", 2) || pfl_model_finish(&f->m)) {
        fprintf(stderr, "linear model: %s\n", pfl_errmsg());
        exit(2);
    }
    const int n_train[1] = {n}, n_test[1] = {1};
    f->d = tiny_dataset(n + 1, 1, 1, 2, 2, 3);
    static const uint8_t pixels[2][2] = {{255, 0}, {0, 0}};
    for (int i = 0; i <= n; i++) {
        const int k = which[i % n];
        f->d.pixels[2 * i] = pixels[k][0], f->d.pixels[2 * i + 1] = pixels[k][1];
        f->d.labels[i] = (uint8_t)k;
    }
    f->part = tiny_partition(1, n_train, n_test);
    tiny_fed_start(f, algo, &cfg);
    CHECK(f->m.num_params == 6 && f->m.tensors[0].offset == 0 && f->m.tensors[1].offset == 4,
          "linear model: %zu parameters", f->m.num_params);
    memset(f->fl.global, 0, 6 * sizeof(float));
}

/* W row by row, then b, against the six numbers `want`. */
static void check_linear(const char *what, const float *w, const double want[6], double tol) {
    for (int i = 0; i < 6; i++)
        CHECK(fabs((double)w[i] - want[i]) <= tol, "%s: parameter %d is %.9g, want %.9g", what, i, (double)w[i],
              want[i]);
}

/* The mean cross-entropy gradient of the linear model `w` on images a
 * (class 0) and b (class 1) written out: p = softmax(Wx + b), g = (p - y) x^T. */
static void linear_grad_ab(const double w[6], double g[6]) {
    static const double x[2][2] = {{1, -1}, {-1, -1}};
    memset(g, 0, 6 * sizeof(double));
    for (int s = 0; s < 2; s++) {
        const double z0 = w[0] * x[s][0] + w[1] * x[s][1] + w[4], z1 = w[2] * x[s][0] + w[3] * x[s][1] + w[5];
        const double p0 = sigmoid(z0 - z1), d[2] = {p0 - (s == 0), (1 - p0) - (s == 1)};
        for (int o = 0; o < 2; o++) {
            g[2 * o] += d[o] * x[s][0] / 2, g[2 * o + 1] += d[o] * x[s][1] / 2;
            g[4 + o] += d[o] / 2;
        }
    }
}

static pfl_config linear_config(void) {
    pfl_config cfg = tiny_config(1);
    cfg.batch = 2, cfg.eval_batch = 2, cfg.lr = 0.1f, cfg.epochs = 1;
    cfg.algo.ft_epochs = 1, cfg.algo.mu = 0.001f;
    cfg.algo.perfedavg_steps = 1, cfg.algo.perfedavg_delta = 1e-3f;
    cfg.algo.php_mu = 0.9f, cfg.algo.php_lambda = 0.01f;
    return cfg;
}

/* ---- FedAvg-C, FedProx-C ---- */

/* The gradient at W = 0 on {a, b}: rows (-1/2, 0) and (1/2, 0), b's 0. */
static const double fine_tuned[6] = {0.05, 0.0, -0.05, 0.0, 0.0, 0.0};

static void test_fine_tuning_by_hand(const pfl_algo *algo) {
    const int ab[2] = {0, 1};
    tiny_fed f;
    linear_fed(&f, algo, linear_config(), ab, 2);
    pfl_fl *fl = &f.fl;
    pfl_worker *w = &fl->workers[0];
    float *evaluated = tiny_floats(6);
    fl->round = 0; /* the evaluation before round 1 */
    const float *pm = fl->algo->personal_model(fl, 0, w->model);
    memcpy(evaluated, pm, 6 * sizeof(float));
    char what[64];
    snprintf(what, sizeof what, "%s fine-tuned model", algo->name);
    check_linear(what, evaluated, fine_tuned, 1e-7);
    CHECK(fl->global[0] == 0.0f && fl->global[5] == 0.0f, "%s: the evaluation changed the global model", algo->name);

    /* round 1 starts training from that very model: with no training epoch
     * local_train leaves the fine-tuned model */
    fl->round = 1;
    fl->cfg.epochs = 0;
    pfl_train_stats st = {0};
    float *model = tiny_floats(6);
    pfl_default_local_init(fl, 0, model);
    fl->algo->local_train(fl, 0, w, model, &st);
    CHECK(memcmp(model, evaluated, 6 * sizeof(float)) == 0, "%s: training does not start from the model evaluated",
          algo->name);
    CHECK(st.samples == 0, "%s: the fine-tuning counted %ld training samples", algo->name, st.samples);

    /* with an epoch of training, one more step from there (FedProx's term
     * mu (w - 0) adds 0.001 w) */
    fl->cfg.epochs = 1;
    memset(model, 0, 6 * sizeof(float));
    fl->algo->local_train(fl, 0, w, model, &st);
    double g[6], want[6];
    linear_grad_ab(fine_tuned, g);
    const double mu = algo == &pfl_algo_fedprox_c ? 0.001 : 0.0;
    for (int i = 0; i < 6; i++) want[i] = fine_tuned[i] - 0.1 * (g[i] + mu * fine_tuned[i]);
    snprintf(what, sizeof what, "%s after training", algo->name);
    check_linear(what, model, want, 1e-7);
    CHECK(st.samples == 2, "%s: training counted %ld samples, want 2", algo->name, st.samples);
    free(evaluated), free(model);
    tiny_fed_free(&f);
}

/* Runs `rounds` rounds, returning the global model's and the personalized
 * models' fingerprints. */
/* The run's fingerprints (its global model's SHA-256 and the personalized
 * models' digest), then the federation freed. */
static void fingerprints_and_free(tiny_fed *f, uint8_t global[32], uint8_t personal[32]) {
    pfl_sha256 s;
    pfl_sha256_init(&s);
    pfl_sha256_update(&s, f->fl.global, pfl_model_vector_len(&f->m) * sizeof(float));
    pfl_sha256_final(&s, global);
    memcpy(personal, f->fl.personal_sha256, 32);
    tiny_fed_free(f);
}

static void run_tiny(const pfl_algo *algo, pfl_config cfg, uint8_t global[32], uint8_t personal[32]) {
    const int n_train[3] = {9, 6, 8}, n_test[3] = {3, 3, 3};
    tiny_fed f;
    tiny_fed_init(&f, algo, cfg, n_train, n_test);
    CHECK(pfl_fl_run(&f.fl, NULL, NULL) == 0, "%s: run: %s", algo->name, pfl_errmsg());
    fingerprints_and_free(&f, global, personal);
}

static void test_fedavg_c_without_fine_tuning_is_fedavg(void) {
    pfl_config cfg = tiny_config(3);
    cfg.rounds = 3, cfg.join = 0.67, cfg.threads = 2, cfg.algo.ft_epochs = 0;
    uint8_t ga[32], pa[32], gc[32], pc[32];
    run_tiny(&pfl_algo_fedavg, cfg, ga, pa);
    run_tiny(&pfl_algo_fedavg_c, cfg, gc, pc);
    CHECK(memcmp(ga, gc, 32) == 0, "fedavg-c --ft-epochs 0: another global model than fedavg");
    CHECK(memcmp(pa, pc, 32) == 0, "fedavg-c --ft-epochs 0: other personalized models than fedavg");
    cfg.algo.ft_epochs = 1;
    run_tiny(&pfl_algo_fedavg_c, cfg, gc, pc);
    CHECK(memcmp(ga, gc, 32) != 0 && memcmp(pa, pc, 32) != 0, "fedavg-c --ft-epochs 1: the same models as fedavg");
}

/* The model scored after round r is fine-tuned with round r + 1's stream, the one round r + 1's training
 * starts from (a client of two batches: the batch order matters). */
static void test_fine_tuned_is_next_start(const pfl_algo *algo) {
    const int n_train[1] = {8}, n_test[1] = {2};
    pfl_config cfg = tiny_config(1);
    cfg.algo.ft_epochs = 1, cfg.algo.mu = 0.001f, cfg.rounds = 3;
    tiny_fed f;
    tiny_fed_init(&f, algo, cfg, n_train, n_test);
    pfl_fl *fl = &f.fl;
    const size_t V = pfl_model_vector_len(&f.m);
    pfl_worker *w = &fl->workers[0];
    float *scored = tiny_floats(V), *start = tiny_floats(V), *other = tiny_floats(V);
    fl->round = 1; /* the evaluation after round 1 */
    memcpy(scored, fl->algo->personal_model(fl, 0, w->model), V * sizeof(float));
    fl->round = 0;
    memcpy(other, fl->algo->personal_model(fl, 0, w->model), V * sizeof(float));
    fl->round = 2, fl->cfg.epochs = 0;
    pfl_train_stats st = {0};
    pfl_default_local_init(fl, 0, start);
    fl->algo->local_train(fl, 0, w, start, &st);
    CHECK(tiny_same(scored, start, 0, V), "%s: round 2 does not start from the model scored after round 1",
          algo->name);
    CHECK(!tiny_same(scored, other, 0, V), "%s: the streams of rounds 1 and 2 fine-tune alike: the check is blind",
          algo->name);
    free(scored), free(start), free(other);
    tiny_fed_free(&f);
}

/* FedPHP's teacher under --reading pfllib is the global model run in training mode (PFLlib's model_s, whose
 * eval() is commented out): on a model with BatchNorm its features are normalized by the batch, not by the
 * running statistics. FedPHP's step is the step built here from (1 - lambda) CE and lambda MMD toward a
 * training-mode teacher, and not the one toward an evaluation-mode teacher. */
static double mmd_value(void *ctx, const pfl_term_batch *b, float *dz, int *correct) {
    (void)ctx, (void)correct;
    return pfl_mmd_rbf(b->z, b->refs[0], b->B, b->n, dz);
}

static void test_fedphp_teacher_mode(void) {
    tiny_fed f;
    memset(&f, 0, sizeof f);
    tiny_bn_model(&f.m, 3, 6, 6);
    const int n_train[1] = {8}, n_test[1] = {2};
    f.d = tiny_dataset(10, 3, 6, 6, 3, 5);
    f.part = tiny_partition(1, n_train, n_test);
    pfl_config cfg = tiny_config(1);
    cfg.rounds = 10, cfg.algo.php_mu = 0.9f, cfg.algo.php_lambda = 0.5f, cfg.algo.reading = "pfllib";
    tiny_fed_start(&f, &pfl_algo_fedphp, &cfg);
    pfl_fl *fl = &f.fl;
    const size_t V = pfl_model_vector_len(&f.m);
    pfl_rng r = tiny_rng(17);
    tiny_fill(pfl_client_model(fl, 0), f.m.num_params, -0.5, 0.5, &r);
    fl->round = 3;
    pfl_worker *w = &fl->workers[0];
    float *php = tiny_floats(V), *train_mode = tiny_floats(V), *eval_mode = tiny_floats(V);
    fl->algo->local_init(fl, 0, php);
    memcpy(train_mode, php, V * sizeof(float)), memcpy(eval_mode, php, V * sizeof(float));
    pfl_train_stats st = {0};
    fl->algo->local_train(fl, 0, w, php, &st);
    float *teacher = tiny_floats(V);
    memcpy(teacher, fl->global, V * sizeof(float));
    for (int k = 0; k < 2; k++) {
        pfl_step s = pfl_step_default(fl);
        s.ce_weight = 0.5;
        const pfl_loss_term mmd = {.name = "the test's MMD", .at = 2, .weight = 0.5f, .refs = {teacher},
                                   .num_refs = 1, .refs_train = k == 0, .value = mmd_value};
        pfl_step_add_term(&s, &mmd);
        pfl_step_run(fl, 0, w, k == 0 ? train_mode : eval_mode, &s, &st);
    }
    CHECK(tiny_same(php, train_mode, 0, V), "fedphp's teacher is not the global model in training mode (%zu floats)",
          tiny_count_diff(php, train_mode, 0, V));
    CHECK(!tiny_same(php, eval_mode, 0, V), "a teacher in evaluation mode trains alike: the check is blind");
    free(php), free(train_mode), free(eval_mode), free(teacher);
    tiny_fed_free(&f);
}

/* ---- Per-FedAvg ---- */

static void test_perfedavg_personalized_by_hand(void) {
    const int ab[2] = {0, 1};
    tiny_fed f;
    pfl_config cfg = linear_config();
    cfg.algo.perfedavg_steps = 2;
    linear_fed(&f, &pfl_algo_perfedavg, cfg, ab, 2);
    pfl_fl *fl = &f.fl;
    pfl_worker *w = &fl->workers[0];
    /* two steps of alpha = lr = 0.1, each on the one batch {a, b} */
    double want[6], g[6];
    linear_grad_ab(fine_tuned, g);
    for (int i = 0; i < 6; i++) want[i] = fine_tuned[i] - 0.1 * g[i];
    fl->round = 3;
    check_linear("per-fedavg after 2 steps", fl->algo->personal_model(fl, 0, w->model), want, 1e-7);
    CHECK(fl->global[0] == 0.0f, "the personalization moved the global model");
    /* one step of alpha 0.2 */
    fl->cfg.algo.perfedavg_steps = 1, fl->cfg.algo.perfedavg_alpha = 0.2f;
    const double doubled[6] = {0.1, 0.0, -0.1, 0.0, 0.0, 0.0};
    check_linear("per-fedavg, alpha 0.2", fl->algo->personal_model(fl, 0, w->model), doubled, 1e-7);
    /* no step: the meta-model itself */
    fl->cfg.algo.perfedavg_steps = 0;
    const double zero[6] = {0};
    check_linear("per-fedavg, 0 steps", fl->algo->personal_model(fl, 0, w->model), zero, 0.0);
    tiny_fed_free(&f);
}

/* Copies of image a, batch 1: w' = w - alpha g(0) with g(0) = rows
 * (-1/2, 1/2), (1/2, -1/2), b's (-1/2, 1/2), so w' = rows (0.05, -0.05),
 * (-0.05, 0.05), b' = (0.05, -0.05); the logits of a under w' are (0.15,
 * -0.15), p_0 = sigmoid(0.3), and g(w') = c x rows (-1, 1), (1, -1), b's
 * (-1, 1), c = 1 - sigmoid(0.3). */
static void meta_gradient(double g[6]) {
    const double c = 1.0 - sigmoid(0.3);
    const double gw[6] = {-c, c, c, -c, -c, c};
    memcpy(g, gw, sizeof gw);
}

/* Per-FedAvg's round 1 on the linear federation of `which`: the trained meta-model into out, its statistics
 * into *st. */
static void perfedavg_round(pfl_config cfg, const int *which, int n, float out[6], pfl_train_stats *st) {
    tiny_fed f;
    linear_fed(&f, &pfl_algo_perfedavg, cfg, which, n);
    pfl_fl *fl = &f.fl;
    pfl_worker *w = &fl->workers[0];
    fl->round = 1;
    pfl_default_local_init(fl, 0, w->model);
    fl->algo->local_train(fl, 0, w, w->model, st);
    memcpy(out, w->model, 6 * sizeof(float));
    tiny_fed_free(&f);
}

static void test_perfedavg_meta_step_by_hand(bool hf, float beta) {
    const int aa[3] = {0, 0, 0};
    pfl_config cfg = linear_config();
    cfg.batch = 1, cfg.algo.perfedavg_hf = hf, cfg.algo.perfedavg_beta = beta, cfg.algo.reading = "paper";
    pfl_train_stats st = {0};
    float model[6];
    perfedavg_round(cfg, aa, hf ? 3 : 2, model, &st);
    double g[6], want[6];
    meta_gradient(g);
    /* FO: w = -beta g(w'); HF: -beta (g - alpha H g) with H g = 1.5 g at W = 0 */
    const double b = beta > 0.0f ? beta : 0.1, factor = hf ? 1.0 - 0.1 * 1.5 : 1.0;
    for (int i = 0; i < 6; i++) want[i] = -b * factor * g[i];
    char what[64];
    snprintf(what, sizeof what, "per-fedavg %s step, beta %g", hf ? "HF" : "FO", b);
    /* HF: the central difference of float gradients, delta 1e-3 */
    check_linear(what, model, want, hf ? 2e-6 : 1e-7);
    CHECK(st.samples == 2 && st.last_epoch_samples == 2, "%s: %ld samples counted, want D and D'", what, st.samples);
}

/* --reading pfllib: PFLlib's server calls each client's train() twice a round, so a round of --epochs 1 is
 * bit for bit a paper round of --epochs 2 (the same streams), and not one of --epochs 1. */
static void test_perfedavg_trains_twice(void) {
    const int ab[4] = {0, 1, 1, 0};
    float trained[3][6];
    const char *reading[3] = {"pfllib", "paper", "paper"};
    const int epochs[3] = {1, 2, 1};
    long samples[3];
    for (int k = 0; k < 3; k++) {
        pfl_config cfg = linear_config();
        cfg.batch = 1, cfg.epochs = epochs[k], cfg.algo.reading = reading[k];
        pfl_train_stats st = {0};
        perfedavg_round(cfg, ab, 4, trained[k], &st);
        samples[k] = st.samples;
    }
    CHECK(memcmp(trained[0], trained[1], sizeof trained[0]) == 0 && samples[0] == samples[1],
          "pfllib, --epochs 1 is not paper --epochs 2 (%ld, %ld samples)", samples[0], samples[1]);
    CHECK(memcmp(trained[0], trained[2], sizeof trained[0]) != 0 && samples[0] == 2 * samples[2],
          "pfllib trains no more than paper --epochs 1 (%ld, %ld samples)", samples[0], samples[2]);
}

/* ---- FedPHP ---- */

/* FedPHP on one client of 4 samples, 10 rounds, mu 0.9, under `reading`. */
static void fedphp_fed(tiny_fed *f, const char *reading) {
    const int n_train[1] = {4}, n_test[1] = {2};
    pfl_config cfg = linear_config();
    cfg.rounds = 10, cfg.algo.reading = reading;
    tiny_fed_init(f, &pfl_algo_fedphp, cfg, n_train, n_test);
}

static void test_fedphp_moving_average(void) {
    tiny_fed f;
    fedphp_fed(&f, "paper");
    pfl_fl *fl = &f.fl;
    const size_t V = pfl_model_vector_len(&f.m);
    /* mu = 0.9 x participations / (join x rounds), at most 0.9 */
    const struct {
        double join;
        int before;
        double mu;
    } cases[] = {{1.0, 0, 0.0}, {1.0, 1, 0.09}, {1.0, 5, 0.45}, {1.0, 10, 0.9}, {1.0, 30, 0.9}, {0.5, 1, 0.18},
                 {0.5, 5, 0.9}, {0.01, 1, 0.9}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fl->cfg.join = cases[i].join;
        const double mu = pfl_fedphp_mu(fl, cases[i].before);
        CHECK(fabs(mu - cases[i].mu) < 1e-6, "join %g, %d rounds before: mu %g, want %g", cases[i].join,
              cases[i].before, mu, cases[i].mu);
    }
    fl->cfg.join = 1.0;
    /* the inherited model HPM = 1, a trained model 3: after the client's
     * second round (mu 0.09) HPM = 0.09 x 1 + 0.91 x 3 = 2.82, after its
     * third (mu 0.18) 0.18 x 2.82 + 0.82 x 3 = 2.9676 */
    float *hpm = pfl_client_model(fl, 0), *trained = tiny_floats(V), *start = tiny_floats(V);
    for (size_t i = 0; i < V; i++) hpm[i] = 1.0f, trained[i] = 3.0f;
    /* the server counts a client's rounds when its upload arrives */
    const int client0[1] = {0};
    float *const uploads[1] = {trained};
    fl->algo->finish(fl, 0, trained, hpm); /* its first: mu 0, HPM = the trained model */
    fl->algo->aggregate(fl, client0, 1, uploads);
    CHECK(hpm[0] == 3.0f && hpm[V - 1] == 3.0f, "first round: HPM %g, want the trained model 3", (double)hpm[0]);
    for (size_t i = 0; i < V; i++) hpm[i] = 1.0f;
    fl->algo->finish(fl, 0, trained, hpm);
    fl->algo->aggregate(fl, client0, 1, uploads);
    CHECK(fabs(hpm[0] - 2.82) < 1e-6 && fabs(hpm[V - 1] - 2.82) < 1e-6, "second round: HPM %g, want 2.82",
          (double)hpm[0]);
    fl->algo->finish(fl, 0, trained, hpm);
    CHECK(fabs(hpm[V / 2] - 2.9676) < 1e-6, "third round: HPM %g, want 2.9676", (double)hpm[V / 2]);
    /* the model evaluated is the HPM, and training starts from the global model */
    CHECK(pfl_default_personal_model(fl, 0, NULL) == hpm, "the personalized model is not the HPM");
    fl->algo->local_init(fl, 0, start);
    CHECK(memcmp(start, fl->global, V * sizeof(float)) == 0, "training does not start from the global model");
    free(trained), free(start);
    tiny_fed_free(&f);
}

/* --reading pfllib (PFLlib's clientphp.py as FedALA ran it): with the global model G = 1 and the client's last
 * trained model S = 3, 10 rounds, mu 0.9: in round 3 it trains from (1 - 0.18) G + 0.18 S = 1.36 (mu (3 - 1) /
 * 10), is scored after round 3 on 0.73 G + 0.27 S = 1.54 (the mix for round 4), and keeps what it trained. */
static void test_fedphp_pfllib_mix(void) {
    tiny_fed f;
    fedphp_fed(&f, "pfllib");
    pfl_fl *fl = &f.fl;
    const size_t V = pfl_model_vector_len(&f.m);
    float *S = pfl_client_model(fl, 0), *start = tiny_floats(V), *trained = tiny_floats(V);
    for (size_t i = 0; i < V; i++) S[i] = 3.0f, fl->global[i] = 1.0f, trained[i] = 5.0f;
    fl->round = 3;
    fl->algo->local_init(fl, 0, start);
    CHECK(fabs(start[0] - 1.36) < 1e-6 && fabs(start[V - 1] - 1.36) < 1e-6, "round 3 starts from %g, want 1.36",
          (double)start[0]);
    const float *scored = fl->algo->personal_model(fl, 0, start);
    CHECK(fabs(scored[0] - 1.54) < 1e-6 && fabs(scored[V / 2] - 1.54) < 1e-6, "scored after round 3: %g, want 1.54",
          (double)scored[0]);
    fl->algo->finish(fl, 0, trained, S);
    CHECK(S[0] == 5.0f && S[V - 1] == 5.0f, "pfllib: the client keeps its trained model (%g, want 5)", (double)S[0]);
    free(start), free(trained);
    tiny_fed_free(&f);
}

/* The loss of FedPHP's training on one batch, for finite differences:
 * (1 - lambda) CE(theta) + lambda MMD(z(theta), z_hpm). */
typedef struct {
    pfl_workspace *ws;
    float *params;
    const float *x;
    const uint8_t *y;
    int B, layer;
    long n;
    const float *z_ref;
    double lambda;
} feature_loss_ctx;

static double feature_loss(void *p) {
    feature_loss_ctx *c = p;
    const double ce = pfl_forward_loss(c->ws, c->params, c->x, c->y, c->B, true, NULL);
    const double mmd = pfl_mmd_rbf(pfl_workspace_layer_input(c->ws, c->layer), c->z_ref, c->B, c->n, NULL);
    return (1.0 - c->lambda) * ce + c->lambda * mmd;
}

/* FedPHP's local step is one SGD step on (1 - lambda) CE + lambda MMD(z,
 * z_hpm) from the global model, z_hpm the features of the inherited model in
 * evaluation mode: composed here from the pieces checked by hand and by
 * differences below (pfl_mmd_rbf, pfl_backward_features). */
static void test_fedphp_training_step(const char *reading) {
    const int n_train[1] = {4}, n_test[1] = {2};
    const bool paper = !strcmp(reading, "paper");
    tiny_fed f;
    pfl_config cfg = tiny_config(1);
    cfg.lr = 0.1f, cfg.batch = 4, cfg.algo.php_mu = 0.9f, cfg.algo.php_lambda = 0.5f, cfg.rounds = 10;
    cfg.algo.reading = reading;
    tiny_fed_init(&f, &pfl_algo_fedphp, cfg, n_train, n_test);
    pfl_fl *fl = &f.fl;
    const size_t P = f.m.num_params;
    /* an inherited model other than the global one */
    pfl_rng r = tiny_rng(11);
    float *hpm = pfl_client_model(fl, 0);
    tiny_fill(hpm, P, -0.5, 0.5, &r);
    /* the batch: the whole split (the mean loss does not depend on its order) */
    pfl_workspace *ws = pfl_workspace_create(&f.m, 4);
    float *x = tiny_floats(4 * 16);
    uint8_t y[4];
    pfl_dataset_gather(&f.d, f.part.clients[0].train, 4, x, y);
    const int layer = 1;
    const long n = pfl_model_layer_input_size(&f.m, layer);
    CHECK(n == 100, "dnn: %ld features enter its last layer, want 100", n);
    float *z_ref = tiny_floats(4 * (size_t)n), *dz = tiny_floats(4 * (size_t)n), *theta = tiny_floats(P);
    float *g = tiny_floats(P), *g_ce = tiny_floats(P);
    /* the teacher: paper the inherited model in evaluation mode; pfllib the global model in training mode */
    pfl_forward(ws, paper ? hpm : fl->global, x, 4, !paper, NULL);
    memcpy(z_ref, pfl_workspace_layer_input(ws, layer), sizeof(float) * 4 * (size_t)n);
    /* the start: paper the global model; pfllib in round 3 0.82 G + 0.18 S */
    for (size_t i = 0; i < P; i++) theta[i] = paper ? fl->global[i] : 0.82f * fl->global[i] + 0.18f * hpm[i];
    const double ce = pfl_forward_loss(ws, theta, x, y, 4, true, NULL);
    const double mmd = pfl_mmd_rbf(pfl_workspace_layer_input(ws, layer), z_ref, 4, n, dz);
    for (long k = 0; k < 4 * n; k++) dz[k] *= 0.5f;
    pfl_backward_features(ws, theta, y, g, 0, 0.5f, layer, dz);
    pfl_backward(ws, theta, y, g_ce);
    /* one epoch of one batch through the hooks */
    fl->round = 3;
    pfl_worker *w = &fl->workers[0];
    pfl_train_stats st = {0};
    fl->algo->local_init(fl, 0, w->model);
    double start_off = 0.0;
    for (size_t i = 0; i < P; i++) start_off = fmax(start_off, fabs(w->model[i] - theta[i]));
    CHECK(start_off < 1e-6, "--reading %s: fedphp starts %g off its start", reading, start_off);
    memcpy(w->model, theta, P * sizeof(float)); /* the hand's start, bit for bit */
    fl->algo->local_train(fl, 0, w, w->model, &st);
    double off = 0.0, mmd_part = 0.0;
    for (size_t i = 0; i < P; i++) {
        off = fmax(off, fabs(w->model[i] - (theta[i] - 0.1 * g[i])));
        mmd_part = fmax(mmd_part, fabs(g[i] - 0.5 * g_ce[i]));
    }
    CHECK(off < 1e-6, "--reading %s: fedphp's step is off by %g from theta - lr x the gradient of its loss", reading,
          off);
    CHECK(mmd_part > 1e-3, "the MMD term moves the gradient by only %g: the check proves little", mmd_part);
    CHECK(mmd > 1e-3, "MMD toward the teacher %g: the models' features do not differ", mmd);
    CHECK(fabs(st.loss_sum / 4.0 - (0.5 * ce + 0.5 * mmd)) < 1e-5,
          "reported loss %g, want (1 - lambda) CE + lambda MMD = %g", st.loss_sum / 4.0, 0.5 * ce + 0.5 * mmd);
    pfl_workspace_free(ws);
    free(x), free(z_ref), free(dz), free(theta), free(g), free(g_ce);
    tiny_fed_free(&f);
}

/* ---- the MMD kernel and the feature gradient ---- */

typedef struct {
    float *x;
    const float *y;
    int B;
    long n;
} mmd_ctx;

static double mmd_of(void *p) {
    mmd_ctx *c = p;
    return pfl_mmd_rbf(c->x, c->y, c->B, c->n, NULL);
}

static void test_mmd(void) {
    /* one sample of one feature, x = 0 and y = 1: k(0) = 4, so MMD = 8 - 2 k(1),
     * k(1) = e^-1/20 + e^-1/30 + e^-1/40 + e^-1/100; dMMD/dx = 4 k'(1) */
    float x = 0.0f, y = 1.0f, dx;
    const double k1 = exp(-1.0 / 20) + exp(-1.0 / 30) + exp(-1.0 / 40) + exp(-1.0 / 100);
    const double k1_slope = -(exp(-1.0 / 20) / 20 + exp(-1.0 / 30) / 30 + exp(-1.0 / 40) / 40 + exp(-1.0 / 100) / 100);
    const double v = pfl_mmd_rbf(&x, &y, 1, 1, &dx);
    CHECK(fabs(v - (8.0 - 2.0 * k1)) < 1e-12, "MMD(0, 1) = %.12g, want %.12g", v, 8.0 - 2.0 * k1);
    CHECK(fabs(dx - 4.0 * k1_slope) < 1e-7, "dMMD/dx = %.9g, want %.9g", (double)dx, 4.0 * k1_slope);
    /* a batch against itself: 0, and no gradient */
    enum { B = 3, N = 4 };
    float a[B * N], b[B * N], d[B * N], num[B * N];
    pfl_rng r = tiny_rng(5);
    tiny_fill(a, B * N, -2.0, 2.0, &r);
    tiny_fill(b, B * N, -2.0, 2.0, &r);
    CHECK(fabs(pfl_mmd_rbf(a, a, B, N, d)) < 1e-12 && max_abs(d, B * N) < 1e-7, "MMD(x, x) is not 0");
    /* against finite differences */
    pfl_mmd_rbf(a, b, B, N, d);
    mmd_ctx c = {a, b, B, N};
    fd_all(num, a, B * N, 1e-3f, mmd_of, &c);
    check_grad("pfl_mmd_rbf dx", num, d, B * N);
}

/* Conv-BN-ReLU-AvgPool-Linear: the last layer's features come out of a pooling. */
static int bn_model(pfl_model *m) {
    return pfl_model_begin(m, "bn-tiny", 1, 4, 4, 3) || pfl_model_conv(m, "conv1", 4, 3, 1, 1, false) ||
                   pfl_model_batchnorm(m, "bn1") || pfl_model_relu(m) || pfl_model_avgpool(m) ||
                   pfl_model_linear(m, "fc", 3) || pfl_model_finish(m)
               ? -1
               : 0;
}

/* The dnn's fc1 pre-activations nearest 0: a difference of step eps moves
 * them by at most eps (inputs in [-1, 1]), so above that no ReLU changes
 * side between the two forwards of a central difference. */
static double dnn_kink_clearance(const float *params, const float *x, int B) {
    double nearest = INFINITY;
    for (int s = 0; s < B; s++)
        for (int h = 0; h < 100; h++) {
            double a = params[1600 + h];
            for (int i = 0; i < 16; i++) a += (double)params[h * 16 + i] * x[s * 16 + i];
            nearest = fmin(nearest, fabs(a));
        }
    return nearest;
}

/* pfl_backward_features against differences of (1 - lambda) CE + lambda MMD(z, z_ref). */
static void check_feature_gradient(const char *name, const pfl_model *m, int layer) {
    enum { B = 5 };
    const size_t P = m->num_params, V = pfl_model_vector_len(m);
    const long n = pfl_model_layer_input_size(m, layer), in = pfl_model_input_size(m);
    pfl_rng r = tiny_rng(31); /* a draw whose ReLU inputs stay clear of 0 (checked below for the dnn) */
    pfl_workspace *ws = pfl_workspace_create(m, B);
    float *params = tiny_floats(V), *x = tiny_floats((size_t)(B * in)), *z_ref = tiny_floats((size_t)(B * n));
    float *dz = tiny_floats((size_t)(B * n)), *ana = tiny_floats(P), *num = tiny_floats(P);
    pfl_model_init_params(m, params, &r);
    tiny_fill(x, (size_t)(B * in), -1.0, 1.0, &r);
    tiny_fill(z_ref, (size_t)(B * n), 0.0, 2.0, &r);
    uint8_t y[B] = {0, 1, 2, 1, 0};
    if (!strcmp(m->name, "dnn"))
        CHECK(dnn_kink_clearance(params, x, B) > 2e-3, "a ReLU input %g is within a difference's reach of 0",
              dnn_kink_clearance(params, x, B));
    const double lambda = 0.3;
    pfl_forward_loss(ws, params, x, y, B, true, NULL);
    pfl_mmd_rbf(pfl_workspace_layer_input(ws, layer), z_ref, B, n, dz);
    for (long k = 0; k < B * n; k++) dz[k] *= (float)lambda;
    pfl_backward_features(ws, params, y, ana, 0, (float)(1.0 - lambda), layer, dz);
    feature_loss_ctx c = {ws, params, x, y, B, layer, n, z_ref, lambda};
    fd_all(num, params, (long)P, 1e-3f, feature_loss, &c);
    char what[64];
    snprintf(what, sizeof what, "%s: CE + MMD on layer %d's input", name, layer);
    check_grad(what, num, ana, (long)P);
    pfl_workspace_free(ws);
    free(params), free(x), free(z_ref), free(dz), free(ana), free(num);
}

static void test_feature_gradient(void) {
    pfl_model dnn, bn;
    CHECK(pfl_model_build(&dnn, "dnn", 1, 4, 4, 3) == 0 && bn_model(&bn) == 0, "models: %s", pfl_errmsg());
    check_feature_gradient("dnn", &dnn, 1);
    check_feature_gradient("bn-tiny", &bn, bn.num_layers - 1);
    /* a term on the network input changes no parameter's gradient: the
     * cross-entropy's alone, weighted */
    enum { B = 2 };
    pfl_workspace *ws = pfl_workspace_create(&dnn, B);
    pfl_rng r = tiny_rng(8);
    float *params = tiny_floats(dnn.num_params), x[B * 16], dz[B * 16], *g = tiny_floats(dnn.num_params),
          *g_ce = tiny_floats(dnn.num_params);
    pfl_model_init_params(&dnn, params, &r);
    tiny_fill(x, B * 16, -1.0, 1.0, &r);
    tiny_fill(dz, B * 16, -1.0, 1.0, &r);
    const uint8_t y[B] = {2, 0};
    pfl_forward_loss(ws, params, x, y, B, true, NULL);
    pfl_backward_features(ws, params, y, g, 0, 0.5f, 0, dz);
    pfl_backward(ws, params, y, g_ce);
    double off = 0.0;
    for (size_t i = 0; i < dnn.num_params; i++) off = fmax(off, fabs(g[i] - 0.5 * g_ce[i]));
    CHECK(off < 1e-7, "a term on the input changed the gradient by %g", off);
    pfl_workspace_free(ws);
    free(params), free(g), free(g_ce);
}

/* ---- refusals ---- */

static void expect_refused(const pfl_algo *algo, pfl_config cfg, const char *model, const char *word) {
    const int n_train[1] = {4}, n_test[1] = {2};
    tiny_fed f;
    tiny_fed_data(&f, 1, n_train, n_test);
    if (model) {
        memset(&f.m, 0, sizeof f.m);
        CHECK(pfl_model_begin(&f.m, model, 1, 4, 4, 3) == 0 && pfl_model_linear(&f.m, "fc", 3) == 0 &&
                  pfl_model_finish(&f.m) == 0,
              "one-layer model");
    }
    const int rc = pfl_fl_create(&f.fl, &cfg, &f.m, &f.d, &f.part, algo);
    CHECK(rc != 0, "%s: created although it should refuse (%s)", algo->name, word);
    CHECK(rc != 0 && strstr(pfl_errmsg(), word), "%s: message '%s' does not name %s", algo->name, pfl_errmsg(), word);
    if (rc == 0) pfl_fl_destroy(&f.fl);
    memset(&f.fl, 0, sizeof f.fl);
    tiny_fed_free(&f);
}

static void test_refusals(void) {
    pfl_config cfg = tiny_config(1);
    cfg.algo.perfedavg_steps = 1, cfg.algo.perfedavg_delta = 1e-3f;
    cfg.momentum = 0.9f;
    expect_refused(&pfl_algo_perfedavg, cfg, NULL, "--momentum");
    cfg.momentum = 0.0f, cfg.modules.flayer_lr = true;
    expect_refused(&pfl_algo_perfedavg, cfg, NULL, "--flayer-lr");
    cfg.modules.flayer_lr = false, cfg.eval_moment = PFL_EVAL_AFTER_TRAIN;
    expect_refused(&pfl_algo_perfedavg, cfg, NULL, "--eval-moment after-train");
    cfg.eval_moment = PFL_EVAL_AFTER_INIT;
    expect_refused(&pfl_algo_fedphp, cfg, "one-layer", "one layer");
}

/* ---- ALA on Per-FedAvg and FedPHP (FedALA's Table 4) ---- */

/* Runs `algo` 3 rounds with --ala; returns how many clients hold ALA
 * weights other than their initial 1, and the fingerprints. */
static int run_with_ala(const pfl_algo *algo, pfl_config cfg, uint8_t global[32], uint8_t personal[32]) {
    const int n_train[3] = {9, 6, 8}, n_test[3] = {3, 3, 3};
    pfl_modules_config *mod = &cfg.modules;
    mod->ala = true, mod->ala_p = 1, mod->ala_s = 100, mod->ala_eta = 1.0f, mod->ala_threshold = 0.1f;
    mod->ala_max_epochs = 20;
    tiny_fed f;
    tiny_fed_init(&f, algo, cfg, n_train, n_test);
    CHECK(pfl_fl_run(&f.fl, NULL, NULL) == 0, "%s --ala: run: %s", algo->name, pfl_errmsg());
    const size_t weights = f.fl.personal.floats, row = pfl_store_row_len(f.fl.client_state);
    int moved = 0;
    for (int c = 0; c < 3; c++) {
        const float *r = pfl_store_read(f.fl.client_state, c);
        for (size_t i = weights; i < row; i++)
            if (r[i] != 1.0f) {
                moved++;
                break;
            }
    }
    fingerprints_and_free(&f, global, personal);
    return moved;
}

static void test_ala_applies(const pfl_algo *algo) {
    pfl_config cfg = tiny_config(3);
    cfg.rounds = 3, cfg.lr = 0.2f;
    cfg.algo.perfedavg_steps = 1, cfg.algo.perfedavg_delta = 1e-3f;
    cfg.algo.php_mu = 0.9f, cfg.algo.php_lambda = 0.01f;
    uint8_t g[32], p[32], ga[32], pa[32];
    run_tiny(algo, cfg, g, p);
    const int moved = run_with_ala(algo, cfg, ga, pa);
    CHECK(moved > 0, "%s --ala: no client learned ALA weights other than 1", algo->name);
    CHECK(memcmp(g, ga, 32) != 0, "%s --ala: the same global model as without", algo->name);
    CHECK(memcmp(p, pa, 32) != 0, "%s --ala: the same personalized models as without", algo->name);
}

int main(void) {
    test_fine_tuning_by_hand(&pfl_algo_fedavg_c);
    test_fine_tuning_by_hand(&pfl_algo_fedprox_c);
    test_fedavg_c_without_fine_tuning_is_fedavg();
    test_perfedavg_personalized_by_hand();
    test_perfedavg_meta_step_by_hand(false, 0.0f);
    test_perfedavg_meta_step_by_hand(false, 0.05f);
    test_perfedavg_meta_step_by_hand(true, 0.0f);
    test_fedphp_moving_average();
    test_perfedavg_trains_twice();
    test_fine_tuned_is_next_start(&pfl_algo_fedavg_c);
    test_fine_tuned_is_next_start(&pfl_algo_fedprox_c);
    test_fedphp_teacher_mode();
    test_fedphp_pfllib_mix();
    test_fedphp_training_step("paper");
    test_fedphp_training_step("pfllib");
    test_mmd();
    test_feature_gradient();
    test_ala_applies(&pfl_algo_perfedavg);
    test_ala_applies(&pfl_algo_fedphp);
    test_refusals();
    TEST_MAIN_END();
}
