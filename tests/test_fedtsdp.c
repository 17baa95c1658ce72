/* FedTSDP: the layer mapping of a fractional L_s, Eq. 7-8, Eq. 9, the two
 * stages on hand-made matrices, the held-out public set of the partition,
 * the per-round learning-rate decay, and runs on a tiny federation. */
#include <math.h>
#include <string.h>

#include "algos/algos.h"
#include "algos/fedtsdp.h"
#include "check.h"
#include "cluster/cluster.h"
#include "tiny.h"

static void test_shared_end(void) {
    pfl_model m;
    if (pfl_model_build(&m, "dnn", 1, 4, 4, 3)) exit(2);
    const int L = m.num_layers;
    CHECK(L >= 2, "dnn has %d layers", L);
    CHECK(pfl_fedtsdp_shared_end(&m, L) == m.num_params, "L_s = L shares everything");
    CHECK(pfl_fedtsdp_shared_end(&m, L + 3.0) == m.num_params, "L_s > L shares everything");
    CHECK(pfl_fedtsdp_shared_end(&m, 0.0) == 0, "L_s = 0 shares nothing");
    CHECK(pfl_fedtsdp_shared_end(&m, 1.0) == m.layers[1].offset, "L_s = 1: first layer");
    CHECK(pfl_fedtsdp_shared_end(&m, 0.49) == 0, "L_s = 0.49: nothing");
    const pfl_layer *last = &m.layers[L - 1];
    CHECK(last->num_tensors == 2, "last layer has %d tensors", last->num_tensors);
    /* L x 0.98: all but the last layer, and the last layer's weight, not its bias ("4 to 3.5") */
    const size_t e = pfl_fedtsdp_shared_end(&m, L * 0.98);
    CHECK(e == m.tensors[last->first_tensor + 1].offset, "L_s = %g: end %zu, want the last bias' offset %zu", L * 0.98,
          e, m.tensors[last->first_tensor + 1].offset);
    CHECK(pfl_fedtsdp_shared_end(&m, L - 0.51) == last->offset, "L_s = L - 0.51: the last layer is personal");
    CHECK(pfl_fedtsdp_shared_end(&m, 2.0 * 0.5 * 1.0) == m.layers[1].offset, "exact halves round as whole layers");
}

static void test_update_weights(void) {
    double W[10];
    for (int k = 0; k < 10; k++) W[k] = 0.1;
    const int batch[2] = {2, 5};
    pfl_fedtsdp_update_weights(W, 10, batch, 2);
    /* W_k += 10 / 2 on the batch, then / (1 + 10) */
    CHECK(check_close(W[2], 5.1 / 11.0, 1e-12) && check_close(W[5], 5.1 / 11.0, 1e-12), "batch weights %g %g", W[2],
          W[5]);
    CHECK(check_close(W[0], 0.1 / 11.0, 1e-12), "other weight %g", W[0]);
    double sum = 0.0;
    for (int k = 0; k < 10; k++) sum += W[k];
    CHECK(check_close(sum, 1.0, 1e-12), "sum %g", sum);
}

static void test_weight_distance(void) {
    const float a[3] = {1, 2, 3}, b[3] = {1, 0, 3};
    CHECK(check_close(pfl_fedtsdp_weight_distance(a, b, 3, 0.0), 2.0, 1e-12), "plain L2");
    CHECK(check_close(pfl_fedtsdp_weight_distance(a, b, 3, 1.0), sqrt(1 + 9 + 1), 1e-12), "with upsilon 1");
}

static void test_two_stage(void) {
    /* stage one: {0,1,2} and {3,4} are close in JS, 5 is far from all (noise) */
    enum { M = 6 };
    double js[M * M];
    const int g1[M] = {0, 0, 0, 1, 1, 2};
    for (int i = 0; i < M; i++)
        for (int j = 0; j < M; j++) js[i * M + j] = i == j ? 0.0 : (g1[i] == g1[j] && g1[i] < 2 ? 0.01 : 0.5);
    /* stage two: inside {0,1,2}, 2 is far in weights; {3,4} close */
    float w[M][2] = {{0, 0}, {1, 0}, {10, 0}, {0, 0}, {0, 1}, {0, 0}};
    const float *models[M];
    for (int i = 0; i < M; i++) models[i] = w[i];
    int labels[M], noise = -1;
    /* one noise point per DBSCAN run: both readings agree */
    for (int single = 0; single < 2; single++) {
        int k = pfl_fedtsdp_two_stage(labels, js, models, M, 2, 0.15, 3.5, 2, single, &noise);
        const int want[M] = {0, 0, 1, 2, 2, 3};
        CHECK(k == 4 && noise == 2, "singletons %d: clusters %d (want 4), noise %d (want 2: 5 in stage one, 2 in two)",
              single, k, noise);
        for (int i = 0; i < M; i++)
            CHECK(labels[i] == want[i], "singletons %d: client %d in cluster %d, want %d", single, i, labels[i], want[i]);
    }
    /* everyone alike: one cluster */
    for (int i = 0; i < M * M; i++) js[i] = 0.0;
    for (int i = 0; i < M; i++) models[i] = w[0];
    int k = pfl_fedtsdp_two_stage(labels, js, models, M, 2, 0.15, 3.5, 2, false, &noise);
    CHECK(k == 1 && noise == 0, "alike: %d clusters, %d noise", k, noise);
}

/* Several noise points in a run: DBSCAN's label -1 is one group,
 * as grouping clients by label does, not one cluster per noise client (the
 * "one client per cluster" the paper calls meaningless); the other reading
 * stays behind noise_singletons. */
static void test_two_stage_noise(void) {
    enum { M = 8 };
    /* stage one: {0,1,2,3} close in JS; 4, 5, 6, 7 far from every client */
    double js[M * M];
    for (int i = 0; i < M; i++)
        for (int j = 0; j < M; j++) js[i * M + j] = i == j ? 0.0 : (i < 4 && j < 4 ? 0.01 : 0.5);
    /* stage two: in {0,1,2,3}, 0 and 1 close, 2 and 3 far from all (two
     * noise points); among the stage-one noise 4, 5, 6 close, 7 far */
    float w[M][2] = {{0, 0}, {1, 0}, {20, 0}, {0, 20}, {50, 50}, {51, 50}, {50, 51}, {90, 90}};
    const float *models[M];
    for (int i = 0; i < M; i++) models[i] = w[i];
    int labels[M], noise;
    int k = pfl_fedtsdp_two_stage(labels, js, models, M, 2, 0.15, 3.5, 2, false, &noise);
    /* {0,1}, stage-two noise {2,3}; the stage-one noise group {4,5,6,7}
     * splits in stage two into {4,5,6} and its own noise {7} */
    const int want[M] = {0, 0, 1, 1, 2, 2, 2, 3};
    CHECK(k == 4, "noise as a group: %d clusters, want 4", k);
    CHECK(noise == 6, "noise clients %d, want 6 (2, 3 in stage two; 4-7 in stage one)", noise);
    for (int i = 0; i < M; i++) CHECK(labels[i] == want[i], "group: client %d in %d, want %d", i, labels[i], want[i]);
    k = pfl_fedtsdp_two_stage(labels, js, models, M, 2, 0.15, 3.5, 2, true, &noise);
    /* singletons: {0,1}, {2}, {3}, then 4..7 each alone in stage one */
    const int want1[M] = {0, 0, 1, 2, 3, 4, 5, 6};
    CHECK(k == 7, "singletons: %d clusters, want 7", k);
    for (int i = 0; i < M; i++)
        CHECK(labels[i] == want1[i], "singletons: client %d in %d, want %d", i, labels[i], want1[i]);
}

static void test_holdout(void) {
    pfl_dataset d = tiny_dataset(100, 1, 4, 4, 3, 5);
    pfl_partition_spec spec;
    CHECK(pfl_partition_parse(&spec, "iid") == 0, "parse");
    CHECK(spec.holdout == 0, "default holdout %d", spec.holdout);
    spec.holdout = 20, spec.train_fraction = 0.8;
    pfl_partition p;
    CHECK(pfl_partition_make(&p, &d, &spec, 4, 3) == 0, "partition: %s", pfl_errmsg());
    int total = 0, bad = 0;
    for (int c = 0; c < 4; c++) {
        total += p.clients[c].n_train + p.clients[c].n_test;
        CHECK(p.clients[c].n_train == 16 && p.clients[c].n_test == 4, "client %d: %d/%d, want 16/4 (0.8)", c,
              p.clients[c].n_train, p.clients[c].n_test);
        for (int i = 0; i < p.clients[c].n_train; i++) bad += p.clients[c].train[i] >= 80;
        for (int i = 0; i < p.clients[c].n_test; i++) bad += p.clients[c].test[i] >= 80;
    }
    CHECK(total == 80 && bad == 0, "total %d, %d public samples given to clients", total, bad);
    pfl_partition_free(&p);
    spec.holdout = 100;
    CHECK(pfl_partition_make(&p, &d, &spec, 4, 3) != 0, "holding out everything accepted");
    tiny_dataset_free(&d);
}

/* A tiny federation of 4 clients (two label groups) with 24 public samples after them. */
typedef tiny_fed fed; /* the fields tiny.h's federation has; built here with other data */

enum { PUB = 24 };

static pfl_config tsdp_config(float h_th, int rounds) {
    pfl_config c = tiny_config(4);
    c.rounds = rounds, c.epochs = 1, c.batch = 4, c.lr = 0.1f, c.momentum = 0.5f;
    c.algo.tsdp_public = PUB, c.algo.tsdp_public_batch = 8;
    c.algo.tsdp_eps1 = 0.15f, c.algo.tsdp_eps2 = 3.5f, c.algo.tsdp_min_pts = 2;
    c.algo.tsdp_h_th = h_th, c.algo.tsdp_psi = 0.5f;
    return c;
}

static void fed_data(fed *f) {
    memset(f, 0, sizeof *f);
    const int n_train[4] = {12, 12, 12, 12}, n_test[4] = {4, 4, 4, 4};
    if (pfl_model_build(&f->m, "dnn", 1, 4, 4, 3)) exit(2);
    f->d = tiny_dataset(64 + PUB, 1, 4, 4, 3, 11);
    f->part = tiny_partition(4, n_train, n_test);
}

static void fed_free(fed *f) {
    pfl_fl_destroy(&f->fl);
    tiny_partition_free(&f->part);
    tiny_dataset_free(&f->d);
}

static void test_never_clusters(void) {
    fed f;
    fed_data(&f);
    pfl_config cfg = tsdp_config(1.0f, 3);
    CHECK(pfl_fl_create(&f.fl, &cfg, &f.m, &f.d, &f.part, &pfl_algo_fedtsdp) == 0, "create: %s", pfl_errmsg());
    CHECK(pfl_fl_run(&f.fl, NULL, NULL) == 0, "run: %s", pfl_errmsg());
    const pfl_fedtsdp_state *s = pfl_fedtsdp_state_of(&f.fl);
    CHECK(s && s->num_clusterings == 0 && s->clusters == 1, "h_th 1 clustered");
    CHECK(s->shared_layers == f.m.num_layers && s->shared_end == f.m.num_params, "L_s changed: %g", s->shared_layers);
    for (int r = 1; r <= 3; r++)
        CHECK(isfinite(s->hopkins[r]) && s->hopkins[r] >= 0.0 && s->hopkins[r] <= 1.0, "round %d: H %g", r,
              s->hopkins[r]);
    /* one cluster sharing everything: every client holds the cluster model, the global one */
    const size_t P = f.m.num_params;
    int bad = 0;
    for (int c = 0; c < 4; c++)
        for (size_t j = 0; j < P; j++) bad += !check_close(pfl_client_model(&f.fl, c)[j], f.fl.global[j], 1e-6);
    CHECK(bad == 0, "%d client parameters differ from the global model", bad);
    fed_free(&f);
}

static void test_always_clusters(void) {
    fed f;
    fed_data(&f);
    pfl_config cfg = tsdp_config(0.0f, 3);
    CHECK(pfl_fl_create(&f.fl, &cfg, &f.m, &f.d, &f.part, &pfl_algo_fedtsdp) == 0, "create: %s", pfl_errmsg());
    CHECK(pfl_fl_run(&f.fl, NULL, NULL) == 0, "run: %s", pfl_errmsg());
    const pfl_fedtsdp_state *s = pfl_fedtsdp_state_of(&f.fl);
    const int L = f.m.num_layers;
    CHECK(s->num_clusterings == 3 && s->clustered[1] && s->clustered[3], "clusterings %d", s->num_clusterings);
    CHECK(check_close(s->shared_layers, L * 0.125, 1e-12), "L_s %g, want %g", s->shared_layers, L * 0.125);
    CHECK(check_close(s->shared_hist[1], L * 0.5, 1e-12), "L_s after round 1: %g", s->shared_hist[1]);
    CHECK(s->shared_end == pfl_fedtsdp_shared_end(&f.m, s->shared_layers), "shared end");
    /* members of a cluster hold the same shared prefix, which is its model */
    const size_t P = f.m.num_params;
    for (int c = 0; c < 4; c++) {
        CHECK(s->cluster[c] >= 0 && s->cluster[c] < s->clusters, "client %d cluster %d", c, s->cluster[c]);
        CHECK(tiny_same(pfl_client_model(&f.fl, c), s->models + P * (size_t)s->cluster[c], 0, s->shared_end),
              "client %d's shared prefix is not its cluster's", c);
    }
    /* the public samples were never trained on: W moved only by Eq. 7-8 and still sums to 1 */
    double sum = 0.0;
    for (int k = 0; k < PUB; k++) sum += s->W[k];
    CHECK(check_close(sum, 1.0, 1e-9), "W sums to %g", sum);
    fed_free(&f);
}

/* L_s's cadence: by default every clustering shrinks it (the
 * text); --tsdp-shrink-on-change shrinks only where the clustering grouped
 * the clients differently from before (the reading under which Fig. 11's
 * two shrinks in 200 rounds are the two regroupings). Both runs cluster in
 * every round; the second shrinks once per regrouping and keeps the rest. */
static void test_shrink_on_change(void) {
    enum { R = 6 };
    int shrinks[2] = {0, 0}, changes[2] = {0, 0};
    for (int on = 0; on < 2; on++) {
        fed f;
        fed_data(&f);
        pfl_config cfg = tsdp_config(0.0f, R);
        cfg.algo.tsdp_shrink_on_change = on;
        /* every client noise in stage two, and a cluster alone: the first
         * clustering regroups (one cluster into four), the later ones not */
        cfg.algo.tsdp_eps2 = 1e-6f, cfg.algo.tsdp_noise_singletons = true;
        CHECK(pfl_fl_create(&f.fl, &cfg, &f.m, &f.d, &f.part, &pfl_algo_fedtsdp) == 0, "create: %s", pfl_errmsg());
        CHECK(pfl_fl_run(&f.fl, NULL, NULL) == 0, "run: %s", pfl_errmsg());
        const pfl_fedtsdp_state *s = pfl_fedtsdp_state_of(&f.fl);
        int want_shrinks = 0;
        for (int r = 1; r <= R; r++) {
            CHECK(s->clustered[r], "on %d: round %d did not cluster (h_th 0)", on, r);
            changes[on] += s->changed[r];
            const bool want = on ? s->changed[r] : s->clustered[r];
            CHECK(s->shrunk[r] == want, "on %d: round %d shrunk %d, clustered %d, changed %d", on, r, s->shrunk[r],
                  s->clustered[r], s->changed[r]);
            want_shrinks += want;
        }
        shrinks[on] = s->num_shrinks;
        CHECK(s->num_shrinks == want_shrinks, "on %d: %d shrinks counted, %d flagged", on, s->num_shrinks, want_shrinks);
        CHECK(check_close(s->shared_layers, f.m.num_layers * pow(0.5, want_shrinks), 1e-12), "on %d: L_s %g after %d shrinks",
              on, s->shared_layers, want_shrinks);
        fed_free(&f);
    }
    printf("cadence: %d clusterings; %d shrinks (every clustering), %d regroupings -> %d shrinks (on change)\n", R,
           shrinks[0], changes[1], shrinks[1]);
    CHECK(shrinks[0] == R, "every clustering shrinks: %d of %d", shrinks[0], R);
    CHECK(changes[1] == 1 && shrinks[1] == 1, "on change: %d regroupings, %d shrinks (want 1: round 1 only)",
          changes[1], shrinks[1]);
}

/* The Hopkins sample m~: "m~ << m" with nothing more, so by
 * default pfl_hopkins's m / 10, at least 1 (pfl used m / 2 before); an
 * explicit --tsdp-hopkins-m is used as given. The last round's H is
 * recomputed from its predictions with the same stream and each size. */
static void test_hopkins_sample(void) {
    for (int given = 0; given <= 3; given += 3) {
        fed f;
        fed_data(&f);
        pfl_config cfg = tsdp_config(1.0f, 2);
        cfg.algo.tsdp_hopkins_m = given;
        CHECK(pfl_fl_create(&f.fl, &cfg, &f.m, &f.d, &f.part, &pfl_algo_fedtsdp) == 0, "create: %s", pfl_errmsg());
        CHECK(pfl_fl_run(&f.fl, NULL, NULL) == 0, "run: %s", pfl_errmsg());
        const pfl_fedtsdp_state *s = pfl_fedtsdp_state_of(&f.fl);
        const int n = 4, want = given ? given : 1, old = n / 2;
        const size_t dim = (size_t)s->pub_batch * (size_t)f.m.classes;
        double H[5];
        for (int k = 1; k <= 4; k++) {
            pfl_rng rng = pfl_rng_stream(cfg.seed, 2, 1, PFL_RNG_ALGO);
            if (pfl_hopkins(&H[k], s->probs, n, dim, k, &rng)) exit(2);
        }
        CHECK(H[want] == s->hopkins[2], "--tsdp-hopkins-m %d: H %.17g, with m~ = %d %.17g", given, s->hopkins[2], want,
              H[want]);
        if (!given)
            CHECK(H[old] != H[want], "m~ = %d and %d give the same H here: the case cannot tell them apart", old, want);
        fed_free(&f);
    }
}

static void test_create_errors(void) {
    fed f;
    fed_data(&f);
    pfl_config cfg = tsdp_config(0.65f, 1);
    cfg.join = 0.5;
    CHECK(pfl_fl_create(&f.fl, &cfg, &f.m, &f.d, &f.part, &pfl_algo_fedtsdp) != 0, "join 0.5 accepted");
    cfg = tsdp_config(0.65f, 1);
    cfg.algo.tsdp_public = 0;
    CHECK(pfl_fl_create(&f.fl, &cfg, &f.m, &f.d, &f.part, &pfl_algo_fedtsdp) != 0, "no public set accepted");
    cfg.algo.tsdp_public = PUB + 1; /* sample 63 belongs to client 3 */
    CHECK(pfl_fl_create(&f.fl, &cfg, &f.m, &f.d, &f.part, &pfl_algo_fedtsdp) != 0, "overlapping public set accepted");
    cfg = tsdp_config(0.65f, 1);
    cfg.algo.tsdp_psi = 0.0f;
    CHECK(pfl_fl_create(&f.fl, &cfg, &f.m, &f.d, &f.part, &pfl_algo_fedtsdp) != 0, "psi 0 accepted");
    fed_free(&f);
}

static void test_lr_decay(void) {
    pfl_fl fl;
    memset(&fl, 0, sizeof fl);
    fl.cfg.lr = 0.05f, fl.cfg.lr_decay = 0.95f;
    fl.round = 1;
    CHECK(pfl_round_lr(&fl) == 0.05f, "round 1: %g", pfl_round_lr(&fl));
    fl.round = 3;
    CHECK(check_close(pfl_round_lr(&fl), 0.05 * 0.95 * 0.95, 1e-6), "round 3: %g", pfl_round_lr(&fl));
    CHECK(check_close(pfl_step_default(&fl).opt.lr, 0.05 * 0.95 * 0.95, 1e-6), "train opts follow the decay");
    fl.cfg.lr_decay = 0.0f;
    CHECK(pfl_round_lr(&fl) == 0.05f, "decay 0 means none");
}

int main(void) {
    test_shared_end();
    test_update_weights();
    test_weight_distance();
    test_two_stage();
    test_two_stage_noise();
    test_holdout();
    test_never_clusters();
    test_always_clusters();
    test_shrink_on_change();
    test_hopkins_sample();
    test_create_errors();
    test_lr_decay();
    TEST_MAIN_END();
}
