/* The methods that exchange class prototypes (FedProto, FD, FedPCL, FedGH,
 * FedPAC): each one's distinctive step worked by hand on a few numbers, and
 * a round of each on a tiny federation (docs/algorithms.md, "Methods that
 * exchange class prototypes"). */
#include <math.h>
#include <string.h>

#include "algos/algos.h"
#include "algos/protos.h"
#include "check.h"
#include "tiny.h"

/* ---- the prototype sets ---- */

/* A set of C classes in D dimensions from its prototypes (NULL: absent). */
static void set_of(float *set, int C, int D, const float *const *protos) {
    memset(set, 0, sizeof(float) * pfl_protos_len(C, D));
    for (int c = 0; c < C; c++)
        if (protos[c]) {
            memcpy(set + (size_t)c * D, protos[c], sizeof(float) * (size_t)D);
            set[(size_t)C * D + c] = 1.0f;
        }
}

static void test_sums_by_hand(void) {
    /* rows (1, 2) and (3, 6) of class 0, (0, 5) of class 2; class 1 none */
    const float z[] = {1, 2, 0, 5, 3, 6};
    const uint8_t y[] = {0, 2, 0};
    pfl_proto_sums s;
    float set[3 * 3];
    CHECK(pfl_proto_sums_init(&s, 3, 2) == 0, "sums");
    pfl_proto_sums_add(&s, z, y, 3, false);
    pfl_proto_sums_mean(&s, set);
    CHECK(set[0] == 2.0f && set[1] == 4.0f && set[4] == 0.0f && set[5] == 5.0f, "class means (2, 4) and (0, 5)");
    CHECK(set[6] == 1.0f && set[7] == 0.0f && set[8] == 1.0f, "present: classes 0 and 2");
    pfl_proto_sums_free(&s);
    /* normalized first (FedPCL): (1, 2)/sqrt 5 and (3, 6)/sqrt 45 are the same unit row */
    CHECK(pfl_proto_sums_init(&s, 3, 2) == 0, "sums");
    pfl_proto_sums_add(&s, z, y, 3, true);
    pfl_proto_sums_mean(&s, set);
    CHECK(check_close(set[0], 1 / sqrt(5.0), 1e-6) && check_close(set[1], 2 / sqrt(5.0), 1e-6) &&
              set[4] == 0.0f && set[5] == 1.0f,
          "normalized means (%g, %g), (%g, %g)", set[0], set[1], set[4], set[5]);
    pfl_proto_sums_free(&s);
    CHECK(pfl_protos_count(set, 3, 2) == 2 && pfl_protos_bytes(set, 3, 2) == 2 * 4 * 3, "2 prototypes: 24 bytes");
}

/* The server's mean: plain over the clients that have the class. */
static void test_mean_by_hand(void) {
    pfl_model m;
    if (pfl_model_build(&m, "dnn", 1, 4, 4, 3) || pfl_protos_add_block(&m, "test.protos", 2, 0, NULL)) exit(2);
    const size_t V = pfl_model_vector_len(&m);
    float *a = tiny_floats(V), *b = tiny_floats(V), out[9];
    const float a0[] = {1, 1}, a1[] = {2, 0}, b0[] = {3, 5}, b2[] = {4, 4};
    set_of(pfl_protos_block(&m, a), 3, 2, (const float *const[]){a0, a1, NULL});
    set_of(pfl_protos_block(&m, b), 3, 2, (const float *const[]){b0, NULL, b2});
    float *uploads[2] = {a, b};
    pfl_protos_mean(&m, uploads, 2, 2, out);
    CHECK(out[0] == 2.0f && out[1] == 3.0f, "class 0: the mean of (1, 1) and (3, 5)");
    CHECK(out[2] == 2.0f && out[3] == 0.0f && out[4] == 4.0f && out[5] == 4.0f, "classes 1, 2: the one client's");
    CHECK(out[6] == 1.0f && out[7] == 1.0f && out[8] == 1.0f, "all present");
    free(a), free(b);
}

/* ---- FedProto (and FedPAC's alignment) ---- */

static void test_fedproto_by_hand(void) {
    /* MSE toward the prototypes: class 0's is (1, 1), class 1 has none */
    const float p0[] = {1, 1};
    float set[2 * 3];
    set_of(set, 2, 2, (const float *const[]){p0, NULL});
    const float z[] = {2, 3, 5, 5};
    const uint8_t y[] = {0, 1};
    float dz[4] = {0};
    /* ((2-1)^2 + (3-1)^2 + 0 + 0) / (B D = 4); d/dz = 2 (z - p) / 4 on row 0, 0 on row 1 */
    const double loss = pfl_protos_mse(set, 2, 2, z, y, 2, dz);
    CHECK(check_close(loss, 1.25, 1e-12), "mse %g, want 5/4", loss);
    CHECK(dz[0] == 0.5f && dz[1] == 1.0f && dz[2] == 0.0f && dz[3] == 0.0f, "dz (%g, %g, %g, %g)", dz[0], dz[1],
          dz[2], dz[3]);
    /* nearest prototype: (0, 0), (2, 0), none */
    const float q0[] = {0, 0}, q1[] = {2, 0};
    float near[3 * 3];
    set_of(near, 3, 2, (const float *const[]){q0, q1, NULL});
    CHECK(pfl_fedproto_nearest(near, 3, 2, (const float[]){1.5f, 0}) == 1, "(1.5, 0) is nearest class 1");
    CHECK(pfl_fedproto_nearest(near, 3, 2, (const float[]){1, 0}) == 0, "a tie goes to the first class");
    CHECK(pfl_fedproto_nearest(near, 3, 2, (const float[]){9, 9}) == 1, "an absent class is never chosen");
    memset(near, 0, sizeof near);
    CHECK(pfl_fedproto_nearest(near, 3, 2, (const float[]){1, 0}) == -1, "no prototypes: no class");
}

/* ---- FD ---- */

static void test_fd_by_hand(void) {
    /* class 0's global logits (1, 3); class 1 has none */
    const float g0[] = {1, 3};
    float global[2 * 3];
    set_of(global, 2, 2, (const float *const[]){g0, NULL});
    const float o[] = {0, 0, 1, 0};
    const uint8_t y0[] = {0}, y1[] = {1};
    float dz[2] = {0};
    /* raw logits as targets (PFLlib): softmax(0, 0) = (1/2, 1/2), loss
     * -(1 + 3) log 1/2 = 4 log 2, d/do = (1 + 3) (1/2, 1/2) - (1, 3) = (1, -1) */
    double loss = pfl_fd_soft_ce(global, 2, o, y0, 1, false, dz);
    CHECK(check_close(loss, 4 * log(2.0), 1e-9) && check_close(dz[0], 1, 1e-6) && check_close(dz[1], -1, 1e-6),
          "logits: loss %g, dz (%g, %g)", loss, dz[0], dz[1]);
    /* softmax targets: t = (1, e^2) / (1 + e^2), loss log 2, d/do = p - t */
    const double t1 = exp(2.0) / (1 + exp(2.0));
    dz[0] = dz[1] = 0;
    loss = pfl_fd_soft_ce(global, 2, o, y0, 1, true, dz);
    CHECK(check_close(loss, log(2.0), 1e-9) && check_close(dz[0], t1 - 0.5, 1e-6) &&
              check_close(dz[1], 0.5 - t1, 1e-6),
          "softmax: loss %g, dz (%g, %g)", loss, dz[0], dz[1]);
    /* a class without global logits: its own logits (1, 0), detached:
     * p = (e, 1) / (1 + e), loss -log p_0, d/do = 1 p - (1, 0) */
    const double q1 = 1 / (1 + exp(1.0));
    dz[0] = dz[1] = 0;
    loss = pfl_fd_soft_ce(global, 2, o + 2, y1, 1, false, dz);
    CHECK(check_close(loss, -log(1 - q1), 1e-9) && check_close(dz[0], -q1, 1e-6) && check_close(dz[1], q1, 1e-6),
          "own logits: loss %g, dz (%g, %g)", loss, dz[0], dz[1]);
}

/* ---- FedPCL ---- */

static void test_fedpcl_by_hand(void) {
    /* D = 2, C = 2, tau = 1: global prototypes e_0 and e_1; client A's set
     * the same, client B's has class 1 only. z = (3, 4), r = (0.6, 0.8),
     * label 0: each full set gives CE = log(e^0.6 + e^0.8) - 0.6 with
     * softmax s = (1, e^0.2) / (1 + e^0.2); B's set lacks the label and adds
     * nothing. L = CE (global) + (CE + 0) / 2 = 1.5 CE. */
    const float e0[] = {1, 0}, e1[] = {0, 1};
    float global[6], sets[12];
    set_of(global, 2, 2, (const float *const[]){e0, e1});
    set_of(sets, 2, 2, (const float *const[]){e0, e1});
    set_of(sets + 6, 2, 2, (const float *const[]){NULL, e1});
    const float z[] = {3, 4};
    const uint8_t y[] = {0};
    float dz[2] = {0};
    const double ce = log(exp(0.6) + exp(0.8)) - 0.6, s0 = 1 / (1 + exp(0.2));
    const double loss = pfl_fedpcl_loss(global, sets, 2, 2, 2, 1.0, z, y, 1, dz);
    CHECK(check_close(loss, 1.5 * ce, 1e-7), "loss %g, want %g", loss, 1.5 * ce);
    /* dL/dr = 1.5 (s0 - 1, 1 - s0); through r = z / 5: dz = (dr - r <r, dr>) / 5 */
    const double dr0 = 1.5 * (s0 - 1), dr1 = 1.5 * (1 - s0), dot = 0.6 * dr0 + 0.8 * dr1;
    CHECK(check_close(dz[0], (dr0 - 0.6 * dot) / 5, 1e-6) && check_close(dz[1], (dr1 - 0.8 * dot) / 5, 1e-6),
          "dz (%g, %g), want (%g, %g)", dz[0], dz[1], (dr0 - 0.6 * dot) / 5, (dr1 - 0.8 * dot) / 5);
    /* tau = 0.5 doubles the similarities: CE = log(e^1.2 + e^1.6) - 1.2 */
    dz[0] = dz[1] = 0;
    const double sharp = pfl_fedpcl_loss(global, sets, 1, 2, 2, 0.5, z, y, 1, dz);
    CHECK(check_close(sharp, 2 * (log(exp(1.2) + exp(1.6)) - 1.2), 1e-7), "tau 0.5: loss %g", sharp);

    /* the prediction: argmax r . p, an absent class scoring 0 */
    const float p0[] = {1, 0}, p2[] = {0, 1};
    float set[9];
    set_of(set, 3, 2, (const float *const[]){p0, NULL, p2});
    CHECK(pfl_fedpcl_predict(set, 3, 2, (const float[]){0, 2}) == 2, "(0, 2): class 2");
    CHECK(pfl_fedpcl_predict(set, 3, 2, (const float[]){4, 3}) == 0, "(4, 3): class 0");
    const float n0[] = {-1, 0};
    set_of(set, 3, 2, (const float *const[]){n0, NULL, p2});
    CHECK(pfl_fedpcl_predict(set, 3, 2, (const float[]){1, -1}) == 1, "every dot below 0: the absent class's 0 wins");
    memset(set, 0, sizeof set);
    CHECK(pfl_fedpcl_predict(set, 3, 2, (const float[]){1, 0}) == -1, "no prototypes: no class");

    /* clipping to norm 10: (3, 4) stays, (30, 40) becomes (6, 8) */
    pfl_model m;
    memset(&m, 0, sizeof m);
    m.num_params = 2;
    float g[2] = {3, 4};
    pfl_fedpcl_clip(NULL, &m, NULL, g);
    CHECK(g[0] == 3.0f && g[1] == 4.0f, "a gradient of norm 5 is left");
    g[0] = 30, g[1] = 40;
    pfl_fedpcl_clip(NULL, &m, NULL, g);
    CHECK(check_close(g[0], 6, 1e-6) && check_close(g[1], 8, 1e-6), "norm 50 clipped to 10: (%g, %g)", g[0], g[1]);
}

/* ---- FedGH ---- */

static void test_fedgh_by_hand(void) {
    /* D = 1, C = 2, head W = b = 0, lr 1; the pairs (1, class 0), (2, class 1) */
    const float x[] = {1, 2};
    const uint8_t y[] = {0, 1};
    float head[4] = {0};
    /* batch 1, pair 0 first: logits (0, 0), dz = (-1/2, 1/2): W = b = (1/2, -1/2);
     * then pair 1: logits 2 W + b = (3/2, -3/2), p_0 = s = sigma(3),
     * dz = (s, -s): W = (1/2 - 2 s, -1/2 + 2 s), b = (1/2 - s, -1/2 + s) */
    const double s = 1 / (1 + exp(-3.0));
    pfl_fedgh_train_header(head, x, y, (const int[]){0, 1}, 2, 1, 2, 1, 1.0f);
    CHECK(check_close(head[0], 0.5 - 2 * s, 1e-6) && check_close(head[1], -0.5 + 2 * s, 1e-6) &&
              check_close(head[2], 0.5 - s, 1e-6) && check_close(head[3], -0.5 + s, 1e-6),
          "two batches of one: (%g, %g, %g, %g)", head[0], head[1], head[2], head[3]);
    /* the order matters, each prototype with its own class: pair 1 first,
     * logits (0, 0), dz = (1/2, -1/2) times x = 2: W = (-1, 1), b = (-1/2, 1/2);
     * then pair 0: logits W + b = (-3/2, 3/2), p_0 = 1 - s, dz = (-s, s):
     * W = (-1 + s, 1 - s), b = (-1/2 + s, 1/2 - s) */
    float other[4] = {0};
    pfl_fedgh_train_header(other, x, y, (const int[]){1, 0}, 2, 1, 2, 1, 1.0f);
    CHECK(check_close(other[0], -1 + s, 1e-6) && check_close(other[1], 1 - s, 1e-6) &&
              check_close(other[2], -0.5 + s, 1e-6) && check_close(other[3], 0.5 - s, 1e-6),
          "pair 1 first: (%g, %g, %g, %g)", other[0], other[1], other[2], other[3]);
    /* one batch of two: the mean gradient, dz = (-1/2, 1/2) and (1/2, -1/2):
     * dW = (-1/2 x 1 + 1/2 x 2) / 2 = 1/4 for class 0, b unchanged */
    float both[4] = {0};
    pfl_fedgh_train_header(both, x, y, (const int[]){0, 1}, 2, 1, 2, 2, 1.0f);
    CHECK(check_close(both[0], -0.25, 1e-6) && check_close(both[1], 0.25, 1e-6) && both[2] == 0.0f && both[3] == 0.0f,
          "one batch of two: (%g, %g, %g, %g)", both[0], both[1], both[2], both[3]);
}

/* ---- FedPAC ---- */

static void test_fedpac_statistics_by_hand(void) {
    /* D = 1: class 0 has 1 and 3, class 1 has 2 and 2. p = (1/2, 1/2), mu = (2, 2),
     * mean ||f||^2 = (5, 4): V = (1/2 5 - 1/4 4 + 1/2 4 - 1/4 4) / 4 = 0.625, h = (1, 1) */
    const float f[] = {1, 2, 3, 2};
    const uint8_t y[] = {0, 1, 0, 1};
    float v, h[2];
    CHECK(pfl_fedpac_statistics(f, y, 4, 2, 1, &v, h) == 0, "statistics");
    CHECK(check_close(v, 0.625, 1e-7) && h[0] == 1.0f && h[1] == 1.0f, "V %g, h (%g, %g)", v, h[0], h[1]);
    /* rows 1 and 2, both class 0 (p = 1, mu = 3/2, mean ||f||^2 = 5/2): V = (5/2 - 9/4) / 2, h = (3/2, 0) */
    CHECK(pfl_fedpac_statistics(f, (const uint8_t[]){0, 0}, 2, 2, 1, &v, h) == 0, "statistics");
    CHECK(check_close(v, 0.125, 1e-7), "one class: V %g", v);
    CHECK(h[1] == 0.0f && h[0] == 1.5f, "one class: h (%g, %g)", h[0], h[1]);
}

static void check_qp(const char *what, const double *P, int n, const double *want) {
    double x[4];
    CHECK(pfl_fedpac_simplex_qp(P, n, x) == 0, "%s: solved", what);
    double sum = 0.0, err = 0.0;
    for (int i = 0; i < n; i++) sum += x[i], err = fmax(err, fabs(x[i] - want[i]));
    CHECK(err < 1e-12 && fabs(sum - 1) < 1e-12, "%s: off by %g (sum %g)", what, err, sum);
}

static void test_fedpac_qp_by_hand(void) {
    /* diag(1, 3): a^2 + 3 (1 - a)^2 is least at a = 3/4 */
    check_qp("diagonal", (const double[]){1, 0, 0, 3}, 2, (const double[]){0.75, 0.25});
    /* [[1, 2], [2, 5]]: 2a^2 - 6a + 5, least over [0, 1] at the bound a = 1 (unconstrained 3/2) */
    check_qp("bound", (const double[]){1, 2, 2, 5}, 2, (const double[]){1, 0});
    /* [[2, 1, 3], [1, 2, 3], [3, 3, 10]]: on the plane x = (7, 7, -3)/11 would need x_3 < 0; on x_3 = 0,
     * (1/2, 1/2, 0) with P x = (3/2, 3/2, 3): the multiplier of x_3 >= 0 is 3 - 3/2 > 0 */
    check_qp("three", (const double[]){2, 1, 3, 1, 2, 3, 3, 3, 10}, 3, (const double[]){0.5, 0.5, 0});
    /* the start vertex (smallest diagonal, x_1) is not optimal: diag(1, 2, 4) -> (4, 2, 1) / 7 */
    check_qp("interior", (const double[]){1, 0, 0, 0, 2, 0, 0, 0, 4}, 3, (const double[]){4.0 / 7, 2.0 / 7, 1.0 / 7});
    check_qp("one client", (const double[]){5}, 1, (const double[]){1});

    /* PFLlib's matrix for client 0 of three with h = (0, 1, 3) (C = D = 1) and V = 1:
     * D_0[a][b] = (h_0 - h_a)(h_0 - h_b) = [[0, 0, 0], [0, 1, 3], [0, 3, 9]],
     * P = D_0 + I; on x_3 = 0: x_1^2 + 2 x_2^2, least at (2/3, 1/3), P x = (2/3, 2/3, 1):
     * x_3's multiplier 1 - 2/3 > 0 */
    const double gram[] = {0, 0, 0, 0, 1, 3, 0, 3, 9};
    const float v[] = {1, 1, 1};
    double P[9];
    pfl_fedpac_qp_matrix(gram, v, 3, 0, P);
    const double want_P[] = {1, 0, 0, 0, 2, 3, 0, 3, 10};
    CHECK(!memcmp(P, want_P, sizeof P), "P = diag(V) + D_0");
    check_qp("client 0", P, 3, (const double[]){2.0 / 3, 1.0 / 3, 0});
    /* client 1 (h_1 - h = (1, 0, -2)): D_1 = [[1, 0, -2], [0, 0, 0], [-2, 0, 4]], P = D_1 + I;
     * P x = lambda 1 on the simplex: x = (7, 6, 4) / 17, all inside */
    pfl_fedpac_qp_matrix(gram, v, 3, 1, P);
    const double want_P1[] = {2, 0, -2, 0, 1, 0, -2, 0, 5};
    CHECK(!memcmp(P, want_P1, sizeof P), "P = diag(V) + D_1");
    check_qp("client 1", P, 3, (const double[]){7.0 / 17, 6.0 / 17, 4.0 / 17});

    /* the classifier: 0.9995 x (2, 4) + 0.0005 x (1000, 1000), the second weight below 1e-3 dropped and the
     * first not renormalized: (1.999, 3.998) */
    float h0[] = {9, 2, 4}, h1[] = {9, 1000, 1000}, out[2];
    float *heads[2] = {h0, h1};
    pfl_fedpac_combine((const double[]){0.9995, 0.0005}, 2, heads, 1, 2, out);
    CHECK(check_close(out[0], 1.999, 1e-6) && check_close(out[1], 3.998, 1e-6), "combined (%g, %g)", out[0], out[1]);
    pfl_fedpac_combine((const double[]){0.25, 0.75}, 2, heads, 1, 2, out);
    CHECK(check_close(out[0], 750.5, 1e-6) && check_close(out[1], 751, 1e-6), "combined (%g, %g)", out[0], out[1]);
}

/* ---- rounds on a tiny federation ---- */

/* Client 0: 4 training samples (labels 0 1 2 0), client 1: 6 (1 2 0 1 2 0). */
static const int n_train[2] = {4, 6}, n_test[2] = {3, 3};

static pfl_config round_config(void) {
    pfl_config cfg = tiny_config(2);
    cfg.algo.proto_lambda = 1.0f, cfg.algo.fd_lambda = 1.0f, cfg.algo.pcl_tau = 1.0f, cfg.algo.gh_server_lr = 1.0f;
    cfg.eval_moment = PFL_EVAL_AFTER_TRAIN; /* keeps each client's model as training left it */
    return cfg;
}

/* FedProto at lr 0: the features a client trains with are the initial
 * model's, so its prototypes are their class means, and the server's the
 * plain mean of the two clients' (not weighted by their 4 and 6 samples). */
static void test_fedproto_round(void) {
    pfl_config cfg = round_config();
    cfg.lr = 0.0f;
    tiny_fed f;
    tiny_fed_init(&f, &pfl_algo_fedproto, cfg, n_train, n_test);
    pfl_fl *fl = &f.fl;
    const pfl_model *m = fl->model;
    const int C = 3, D = pfl_protos_dim(m);
    CHECK(D == 100 && m->num_blocks == 1 && m->layers[2].length == pfl_protos_len(C, D), "the message block");
    CHECK(!fl->shared[0] && !fl->shared[1] && fl->shared[2], "only the message block is shared");
    const size_t V = pfl_model_vector_len(m);
    float *initial = tiny_floats(V), *s0 = tiny_floats(pfl_protos_len(C, D)), *s1 = tiny_floats(pfl_protos_len(C, D));
    memcpy(initial, fl->global, V * sizeof(float));
    CHECK(pfl_protos_of_split(fl, &fl->workers[0], 0, initial, 1, false, s0) == 0 &&
              pfl_protos_of_split(fl, &fl->workers[0], 1, initial, 1, false, s1) == 0,
          "the clients' class means");
    CHECK(pfl_fl_run(fl, NULL, NULL) == 0, "fedproto runs: %s", pfl_errmsg());
    const float *global = pfl_protos_block_const(m, fl->global);
    double worst = 0.0;
    for (size_t j = 0; j < (size_t)C * D; j++) worst = fmax(worst, fabs(global[j] - 0.5 * (s0[j] + s1[j])));
    CHECK(worst < 1e-6, "global prototypes off the plain mean by %g", worst);
    CHECK(pfl_protos_count(global, C, D) == 3, "three global prototypes");
    /* one round: nothing down yet (no prototypes before it), three prototypes up per client */
    CHECK(fl->bytes_down == 0 && fl->bytes_up == 2 * 3 * 4 * ((uint64_t)D + 1), "bytes %llu / %llu",
          (unsigned long long)fl->bytes_down, (unsigned long long)fl->bytes_up);
    CHECK(tiny_same(fl->global, initial, 0, pfl_model_backbone_params(m)), "no model is averaged");
    free(initial), free(s0), free(s1);
    tiny_fed_free(&f);
}

/* FedPCL: round 1 only makes prototypes (no client has any before); round
 * 2 trains; the server's sets are the uploads padded with the global ones. */
static void test_fedpcl_rounds(void) {
    pfl_config cfg = round_config();
    cfg.rounds = 2;
    tiny_fed f;
    tiny_fed_init(&f, &pfl_algo_fedpcl, cfg, n_train, n_test);
    pfl_fl *fl = &f.fl;
    const pfl_model *m = fl->model;
    const int C = 3, D = pfl_protos_dim(m);
    const size_t V = pfl_model_vector_len(m), len = pfl_protos_len(C, D);
    float *initial = tiny_floats(V), *s0 = tiny_floats(len);
    memcpy(initial, fl->global, V * sizeof(float));
    CHECK(pfl_protos_of_split(fl, &fl->workers[0], 0, initial, 1, true, s0) == 0, "client 0's prototypes");
    fl->cfg.rounds = 1;
    CHECK(pfl_fl_run(fl, NULL, NULL) == 0, "fedpcl round 1: %s", pfl_errmsg());
    CHECK(fl->train_samples == 0, "round 1 trains nothing (%ld samples)", fl->train_samples);
    CHECK(!memcmp(pfl_fedpcl_set(fl, 0), s0, len * sizeof(float)), "the server holds client 0's normalized means");
    fl->cfg.rounds = 2;
    fl->resumed = true; /* go on from round 1 */
    CHECK(pfl_fl_run(fl, NULL, NULL) == 0, "fedpcl round 2: %s", pfl_errmsg());
    CHECK(fl->train_samples == 10, "round 2 trains both clients (%ld samples)", fl->train_samples);
    const float *trained = pfl_store_read(fl->trained, 0);
    CHECK(!tiny_same(trained, initial, 0, m->layers[0].length), "client 0's first layer trained");
    CHECK(tiny_same(trained, initial, m->layers[1].offset, m->layers[1].length),
          "the last layer (PFLlib's nn.Identity) never trains");
    free(initial), free(s0);
    tiny_fed_free(&f);
}

/* FedGH: the header after a round is the server's SGD on the clients'
 * prototypes, from client 0's trained header (client0) or the one it sent (global). */
static void test_fedgh_round(void) {
    float *heads[2];
    size_t head_off = 0, head_len = 0;
    for (int reading = 0; reading < 2; reading++) {
        pfl_config cfg = round_config();
        cfg.algo.gh_start = reading ? "global" : "client0";
        tiny_fed f;
        tiny_fed_init(&f, &pfl_algo_fedgh, cfg, n_train, n_test);
        pfl_fl *fl = &f.fl;
        const pfl_model *m = fl->model;
        const int C = 3, D = pfl_protos_dim(m);
        const pfl_layer *head = &m->layers[1];
        head_off = head->offset, head_len = head->length;
        CHECK(!fl->shared[0] && fl->shared[1] && fl->shared[2], "the base personal; header and message block shared");
        const size_t V = pfl_model_vector_len(m);
        float *start = tiny_floats(V);
        memcpy(start, fl->global, V * sizeof(float));
        CHECK(pfl_fl_run(fl, NULL, NULL) == 0, "fedgh runs: %s", pfl_errmsg());
        /* the server's step by hand: the pairs of both trained clients, in the round's shuffled order */
        float *x = tiny_floats((size_t)2 * C * D), *set = tiny_floats(pfl_protos_len(C, D));
        uint8_t y[6];
        int order[6];
        for (int k = 0; k < 2; k++) {
            const float *trained = pfl_store_read(fl->trained, k);
            CHECK(pfl_protos_of_split(fl, &fl->workers[0], k, trained, 1, false, set) == 0, "client %d's prototypes",
                  k);
            for (int c = 0; c < C; c++) {
                memcpy(x + (size_t)(k * C + c) * D, set + (size_t)c * D, sizeof(float) * (size_t)D);
                y[k * C + c] = (uint8_t)c, order[k * C + c] = k * C + c;
            }
        }
        pfl_rng rng = pfl_rng_stream(cfg.seed, 1, PFL_RNG_NONE, PFL_RNG_ALGO);
        pfl_rng_shuffle(&rng, order, 6);
        if (!reading) memcpy(start + head->offset, pfl_store_read(fl->trained, 0) + head->offset,
                             head->length * sizeof(float));
        pfl_fedgh_train_header(start + head->offset, x, y, order, 6, D, C, cfg.batch, 1.0f);
        double worst = 0.0;
        for (size_t j = 0; j < head->length; j++)
            worst = fmax(worst, fabs(fl->global[head->offset + j] - start[head->offset + j]));
        CHECK(worst < 1e-6, "--gh-start %s: the header off the server's step by %g", cfg.algo.gh_start, worst);
        /* a client's model: its trained base under the global header */
        float *own = tiny_client_model(fl, 1, tiny_floats(V));
        CHECK(tiny_same(own, pfl_store_read(fl->trained, 1), 0, m->layers[0].length) &&
                  tiny_same(own, fl->global, head->offset, head->length),
              "client 1: its base, the global header");
        /* up: each client's 3 prototypes, and client 0's header under client0 */
        const uint64_t up = 2 * 3 * 4 * ((uint64_t)D + 1) + (reading ? 0 : 4 * (uint64_t)head->length);
        CHECK(fl->bytes_down == 2 * 4 * head->length && fl->bytes_up == up, "--gh-start %s: bytes %llu / %llu",
              cfg.algo.gh_start, (unsigned long long)fl->bytes_down, (unsigned long long)fl->bytes_up);
        heads[reading] = tiny_floats(head->length);
        memcpy(heads[reading], fl->global + head->offset, head->length * sizeof(float));
        free(start), free(x), free(set), free(own);
        tiny_fed_free(&f);
    }
    (void)head_off;
    CHECK(memcmp(heads[0], heads[1], head_len * sizeof(float)) != 0, "the two readings give different headers");
    free(heads[0]), free(heads[1]);
}

/* FedPAC: the extractor averaged 4 : 6, the global prototypes the plain
 * mean, each client's classifier a combination of the trained ones. */
static void test_fedpac_round(void) {
    pfl_config cfg = round_config();
    tiny_fed f;
    tiny_fed_init(&f, &pfl_algo_fedpac, cfg, n_train, n_test);
    pfl_fl *fl = &f.fl;
    const pfl_model *m = fl->model;
    const int D = pfl_protos_dim(m);
    const pfl_layer *base = &m->layers[0], *head = &m->layers[1];
    CHECK(m->layers[2].length == pfl_protos_len(3, D) + 1 + 3 * (size_t)D, "the message: prototypes, V, h");
    CHECK(pfl_fl_run(fl, NULL, NULL) == 0, "fedpac runs: %s", pfl_errmsg());
    const float *t0 = pfl_store_read(fl->trained, 0), *t1 = pfl_store_read(fl->trained, 1);
    double worst = 0.0;
    for (size_t j = base->offset; j < base->offset + base->length; j++)
        worst = fmax(worst, fabs(fl->global[j] - (0.4 * t0[j] + 0.6 * t1[j])));
    CHECK(worst < 1e-6, "the extractor off the 4 : 6 mean by %g", worst);
    /* both clients have every class: the program's weights (a, 1 - a) for
     * each, so its classifier lies on the line between the two trained ones */
    const size_t V = pfl_model_vector_len(m);
    for (int k = 0; k < 2; k++) {
        float *own = tiny_floats(V);
        fl->algo->personal_model(fl, k, own);
        CHECK(tiny_same(own, fl->global, base->offset, base->length), "client %d: the global extractor", k);
        double a = NAN, off = 0.0;
        for (size_t j = head->offset; j < head->offset + head->length; j++) {
            const double span = (double)t0[j] - t1[j];
            if (isnan(a) && fabs(span) > 1e-3) a = ((double)own[j] - t1[j]) / span;
            if (!isnan(a)) off = fmax(off, fabs(own[j] - (a * t0[j] + (1 - a) * t1[j])));
        }
        CHECK(!isnan(a) && a >= -1e-6 && a <= 1 + 1e-6 && off < 1e-5, "client %d: classifier %g of client 0's (off %g)",
              k, a, off);
        free(own);
    }
    tiny_fed_free(&f);
}

int main(void) {
    test_sums_by_hand();
    test_mean_by_hand();
    test_fedproto_by_hand();
    test_fd_by_hand();
    test_fedpcl_by_hand();
    test_fedgh_by_hand();
    test_fedpac_statistics_by_hand();
    test_fedpac_qp_by_hand();
    test_fedproto_round();
    test_fedpcl_rounds();
    test_fedgh_round();
    test_fedpac_round();
    TEST_MAIN_END();
}
