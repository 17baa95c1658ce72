/* The client store (src/fl/store.c, src/fl/client_state.c):
 *
 *  - a store in memory and one in a file read untouched rows as the initial
 *    row, keep what is written (through a release of the file's pages),
 *    count only written rows, and survive a checkpoint;
 *  - what each method keeps per client: FedPer's head, FedALA's top layer
 *    and its weights, pFedCFR nothing of the model, Ditto the whole model,
 *    FedAvg under --bn local its BatchNorm layer;
 *  - the contract the store rests on: a broadcast without a module leaves a
 *    client's personal parts as they are (receive completes them with the
 *    client's own);
 *  - a file-backed run gives the memory-backed run's bits (global model,
 *    personalized models, metrics), and a stopped, saved, loaded and
 *    continued file-backed run the uninterrupted one's;
 *  - a client never touched costs nothing: the bytes held grow with the
 *    clients that were selected, not with the federation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "algos/algos.h"
#include "check.h"
#include "fl/fl.h"
#include "fl/store.h"
#include "tiny.h"
#include "util/ckpt.h"
#include "util/err.h"
#include "util/sha256.h"

static char dir[64];

/* ---- the store alone ---- */

static void test_store_rows(const char *where) {
    const size_t len = 1000; /* not a whole page: the file pads rows */
    float *initial = tiny_floats(len + 1), *row = tiny_floats(len); /* + 1: the other-shape store below */
    for (size_t i = 0; i <= len; i++) initial[i] = (float)i;
    pfl_store *s = pfl_store_create(where, "test", 5, len, initial);
    const char *name = where ? "file" : "memory";
    CHECK(s != NULL, "%s: create: %s", name, pfl_errmsg());
    if (!s) return;
    CHECK(pfl_store_read(s, 3) != initial && tiny_same(pfl_store_read(s, 3), initial, 0, len),
          "%s: an untouched row reads as the initial one", name);
    CHECK(!pfl_store_touched(s, 3) && pfl_store_bytes(s) == 0, "%s: nothing held before a write", name);
    float *w = pfl_store_write(s, 3);
    CHECK(w && tiny_same(w, initial, 0, len), "%s: a first write starts from the initial row", name);
    for (size_t i = 0; i < len; i++) w[i] = -(float)i, row[i] = -(float)i;
    pfl_store_release(s, 3);
    CHECK(tiny_same(pfl_store_read(s, 3), row, 0, len), "%s: a released row keeps what was written", name);
    CHECK(pfl_store_touched(s, 3) && !pfl_store_touched(s, 2), "%s: touched flags", name);
    const uint64_t one = pfl_store_bytes(s);
    CHECK(one >= len * sizeof(float) && one < len * sizeof(float) + 8192, "%s: one row holds %llu bytes", name,
          (unsigned long long)one);
    CHECK(tiny_same(pfl_store_read(s, 4), initial, 0, len), "%s: another row is still the initial one", name);
    /* a checkpoint keeps written rows only, and loads into a fresh store */
    char path[128];
    snprintf(path, sizeof path, "%s/store-%s.ckpt", dir, name);
    pfl_ckpt_writer wr;
    CHECK(pfl_ckpt_begin(&wr, path) == 0 && pfl_store_save(s, &wr, "t") == 0 && pfl_ckpt_commit(&wr) == 0,
          "%s: save: %s", name, pfl_errmsg());
    pfl_store *back = pfl_store_create(where, "test", 5, len, initial);
    pfl_ckpt_reader rd;
    CHECK(back && pfl_ckpt_open(&rd, path) == 0 && pfl_store_load(back, &rd, "t") == 0, "%s: load: %s", name,
          pfl_errmsg());
    pfl_ckpt_close(&rd);
    CHECK(back && pfl_store_touched(back, 3) && !pfl_store_touched(back, 0) &&
              tiny_same(pfl_store_read(back, 3), row, 0, len) && pfl_store_bytes(back) == one,
          "%s: the loaded store differs", name);
    /* a checkpoint of another row length is refused */
    pfl_store *other = pfl_store_create(where, "test", 5, len + 1, initial);
    CHECK(pfl_ckpt_open(&rd, path) == 0 && pfl_store_load(other, &rd, "t") != 0 && strstr(pfl_errmsg(), "t.rows"),
          "%s: a store of another shape loaded: %s", name, pfl_errmsg());
    pfl_ckpt_close(&rd);
    unlink(path);
    pfl_store_free(other);
    pfl_store_free(back);
    pfl_store_free(s);
    free(initial), free(row);
}

static void test_store_edges(void) {
    const float x = 1.0f;
    pfl_store *s = pfl_store_create("/nonexistent/pfl-dir", "test", 2, 1, &x);
    CHECK(!s && strstr(pfl_errmsg(), "--client-state /nonexistent/pfl-dir"), "a missing directory: %s", pfl_errmsg());
    pfl_store_free(s);
    /* no rows (the server's client store under MPI): nothing to map, nothing held */
    s = pfl_store_create(dir, "test", 0, 1, &x);
    CHECK(s && pfl_store_bytes(s) == 0 && pfl_store_rows(s) == 0, "a store of no rows in a file: %s", pfl_errmsg());
    pfl_store_free(s);
}

/* ---- what a method keeps ---- */

static const int n_train[6] = {12, 8, 10, 9, 14, 11}, n_test[6] = {4, 4, 4, 4, 4, 4};

static pfl_config store_config(int clients) {
    pfl_config c = tiny_config(clients);
    c.rounds = 3, c.lr = 0.2f;
    pfl_algo_params *a = &c.algo;
    a->lambda = 0.1f, a->personal_epochs = 1, a->head_epochs = 1;
    a->amp_alpha = 1.0f, a->amp_sigma = 10.0f, a->amp_lambda = 1.0f, a->cfr_layers = 1, a->mu = 0.01f;
    a->pfedme_k = 2, a->pfedme_lambda = 15.0f, a->pfedme_lr = 0.01f, a->pfedme_beta = 1.0f;
    a->php_mu = 0.9f, a->php_lambda = 0.01f;
    pfl_modules_config *mod = &c.modules;
    mod->ala_p = 1, mod->ala_s = 100, mod->ala_eta = 1.0f, mod->ala_threshold = 0.1f, mod->ala_max_epochs = 12;
    return c;
}

static void test_personal_parts(void) {
    struct {
        const pfl_algo *algo;
        bool ala;
        size_t floats, extra; /* per client: personal floats, module floats */
        bool whole;
    } cases[4];
    tiny_fed f;
    tiny_fed_data(&f, 6, n_train, n_test); /* dnn: layer 0 (1x16 -> 100), layer 1 (100 -> 3) */
    const size_t head = f.m.layers[1].length, V = pfl_model_vector_len(&f.m);
    tiny_fed_free(&f);
    cases[0].algo = &pfl_algo_fedper, cases[0].ala = false, cases[0].floats = head, cases[0].extra = 0, cases[0].whole = false;
    cases[1].algo = &pfl_algo_fedala, cases[1].ala = true, cases[1].floats = head, cases[1].extra = head, cases[1].whole = false;
    cases[2].algo = &pfl_algo_pfedcfr, cases[2].ala = false, cases[2].floats = 0, cases[2].extra = 0, cases[2].whole = false;
    cases[3].algo = &pfl_algo_ditto, cases[3].ala = false, cases[3].floats = V, cases[3].extra = 0, cases[3].whole = true;
    for (int i = 0; i < 4; i++) {
        pfl_config cfg = store_config(6);
        tiny_fed_init(&f, cases[i].algo, cfg, n_train, n_test);
        const pfl_fl *fl = &f.fl;
        const size_t row = fl->client_state ? pfl_store_row_len(fl->client_state) : 0;
        CHECK(fl->client_state && fl->personal.floats == cases[i].floats && row == cases[i].floats + cases[i].extra &&
                  fl->personal.whole == cases[i].whole,
              "%s keeps %zu floats a client (%zu personal), not %zu + %zu", cases[i].algo->name, row,
              fl->personal.floats, cases[i].floats, cases[i].extra);
        tiny_fed_free(&f);
    }
}

/* The contract: receive + what --bn keeps leaves the personal parts as the
 * client has them, for every built-in method whose store keeps parts. */
static void test_receive_keeps_personal_parts(void) {
    pfl_model bn;
    if (pfl_model_begin(&bn, "bn-tiny", 1, 4, 4, 3) || pfl_model_conv(&bn, "conv1", 4, 3, 1, 1, false) ||
        pfl_model_batchnorm(&bn, "bn1") || pfl_model_relu(&bn) || pfl_model_avgpool(&bn) ||
        pfl_model_linear(&bn, "fc", 3) || pfl_model_finish(&bn)) {
        fprintf(stderr, "model: %s\n", pfl_errmsg());
        exit(2);
    }
    int checked = 0;
    for (int a = 0; pfl_algos[a]; a++)
        for (int mode = 0; mode < 3; mode++) {
            tiny_fed f;
            tiny_fed_data(&f, 6, n_train, n_test);
            pfl_config cfg = store_config(6);
            cfg.bn = (pfl_bn_mode)mode;
            cfg.algo.groups = 2, cfg.algo.warmup = 1, cfg.algo.beta = 0.5f;
            if (mode != PFL_BN_SHARED) f.m = bn;
            pfl_fl *fl = &f.fl;
            if (pfl_fl_create(fl, &cfg, &f.m, &f.d, &f.part, pfl_algos[a])) { /* refused (--bn, CFL's join) */
                tiny_fed_free(&f);
                continue;
            }
            const bool module = fl->cfg.modules.ala || fl->cfg.modules.flayer_agg; /* a module mixes them */
            if (fl->client_state && !fl->personal.whole && !module) {
                const size_t V = pfl_model_vector_len(fl->model); /* with the method's extra blocks */
                float *own = tiny_floats(V), *received = tiny_floats(V);
                pfl_rng r = tiny_rng(40 + (uint64_t)a);
                tiny_fill(own, V, -1, 1, &r), tiny_fill(fl->global, V, 2, 3, &r);
                if (fl->algo->receive) fl->algo->receive(fl, 2, own, received);
                else memcpy(received, fl->global, V * sizeof(float));
                pfl_keep_local_bn(fl, own, received);
                size_t differ = 0;
                for (int s = 0; s < fl->personal.count; s++)
                    differ += tiny_count_diff(received, own, fl->personal.offset[s], fl->personal.length[s]);
                CHECK(differ == 0, "%s --bn %d: a broadcast changes %zu personal floats", pfl_algos[a]->name, mode,
                      differ);
                checked++;
                free(own), free(received);
            }
            tiny_fed_free(&f);
        }
    CHECK(checked >= 6, "only %d methods keep parts", checked);
}

/* ---- memory and file: the same bits ---- */

typedef struct {
    uint8_t global[32], personal[32];
    double acc[8], joined[8];
} run_print;

static void log_metrics(const pfl_round_metrics *m, const pfl_fl *fl, void *ctx) {
    (void)fl;
    run_print *p = ctx;
    if (m->evaluated && m->round < 8) p->acc[m->round] = m->local_acc, p->joined[m->round] = m->local_acc_joined;
}

static void fingerprint(const pfl_fl *fl, run_print *p) {
    pfl_sha256 s;
    pfl_sha256_init(&s);
    pfl_sha256_update(&s, fl->global, pfl_model_vector_len(fl->model) * sizeof(float));
    pfl_sha256_final(&s, p->global);
    memcpy(p->personal, fl->personal_sha256, 32);
}

static run_print run_once(const pfl_algo *algo, pfl_config cfg, const char *where) {
    cfg.client_state_dir = where;
    tiny_fed f;
    tiny_fed_init(&f, algo, cfg, n_train, n_test);
    run_print p;
    memset(&p, 0, sizeof p);
    CHECK(pfl_fl_run(&f.fl, log_metrics, &p) == 0, "%s: run: %s", algo->name, pfl_errmsg());
    fingerprint(&f.fl, &p);
    tiny_fed_free(&f);
    return p;
}

/* A run stopped after round 2, saved, loaded into a fresh one, continued. */
static int stop_after_two(pfl_fl *fl, void *ctx) {
    (void)ctx;
    return fl->round == 2;
}

static run_print run_resumed(const pfl_algo *algo, pfl_config cfg, const char *where) {
    cfg.client_state_dir = where;
    char path[128];
    snprintf(path, sizeof path, "%s/resume.ckpt", dir);
    tiny_fed f;
    tiny_fed_init(&f, algo, cfg, n_train, n_test);
    run_print p;
    memset(&p, 0, sizeof p);
    pfl_ckpt_writer w;
    CHECK(pfl_fl_run_with(&f.fl, log_metrics, stop_after_two, &p) == 0 && pfl_ckpt_begin(&w, path) == 0 &&
              pfl_fl_save(&f.fl, &w) == 0 && pfl_ckpt_commit(&w) == 0,
          "%s: stop and save: %s", algo->name, pfl_errmsg());
    tiny_fed_free(&f);
    tiny_fed_init(&f, algo, cfg, n_train, n_test);
    pfl_ckpt_reader r;
    CHECK(pfl_ckpt_open(&r, path) == 0 && pfl_fl_load(&f.fl, &r) == 0, "%s: load: %s", algo->name, pfl_errmsg());
    pfl_ckpt_close(&r);
    CHECK(pfl_fl_run(&f.fl, log_metrics, &p) == 0, "%s: resumed run: %s", algo->name, pfl_errmsg());
    fingerprint(&f.fl, &p);
    tiny_fed_free(&f);
    unlink(path);
    return p;
}

static bool same_print(const run_print *a, const run_print *b) {
    return memcmp(a->global, b->global, 32) == 0 && memcmp(a->personal, b->personal, 32) == 0 &&
           memcmp(a->acc, b->acc, sizeof a->acc) == 0 && memcmp(a->joined, b->joined, sizeof a->joined) == 0;
}

static void test_file_gives_the_same_bits(void) {
    const pfl_algo *algos[] = {&pfl_algo_fedper, &pfl_algo_fedala, &pfl_algo_ditto, &pfl_algo_fedamp,
                               &pfl_algo_pfedcfr, &pfl_algo_flayer, &pfl_algo_local, &pfl_algo_pfedme,
                               &pfl_algo_fedphp};
    for (size_t i = 0; i < sizeof algos / sizeof algos[0]; i++)
        for (int moment = 0; moment < 2; moment++) {
            pfl_config cfg = store_config(6);
            cfg.join = 0.5, cfg.eval_moment = moment ? PFL_EVAL_AFTER_TRAIN : PFL_EVAL_AFTER_INIT;
            const run_print mem = run_once(algos[i], cfg, NULL), file = run_once(algos[i], cfg, dir);
            CHECK(same_print(&mem, &file), "%s (%s): the file store gives other bits than memory", algos[i]->name,
                  pfl_eval_moment_name(cfg.eval_moment));
            if (moment == 1) continue;
            const run_print resumed = run_resumed(algos[i], cfg, dir);
            CHECK(same_print(&mem, &resumed), "%s: a resumed file-backed run differs from the straight one",
                  algos[i]->name);
        }
}

/* ---- a client never touched costs nothing ---- */

static void test_untouched_clients_cost_nothing(void) {
    enum { MANY = 60 };
    int nt[MANY], ne[MANY];
    for (int c = 0; c < MANY; c++) nt[c] = 4, ne[c] = 2;
    pfl_config cfg = store_config(MANY);
    cfg.join = 0.05, cfg.rounds = 2; /* 3 clients a round */
    const pfl_algo *algos[2] = {&pfl_algo_fedala, &pfl_algo_ditto};
    for (int i = 0; i < 2; i++) {
        tiny_fed f;
        tiny_fed_init(&f, algos[i], cfg, nt, ne);
        CHECK(pfl_fl_run(&f.fl, NULL, NULL) == 0, "%s: run: %s", algos[i]->name, pfl_errmsg());
        int touched = 0;
        for (int c = 0; c < MANY; c++) touched += pfl_store_touched(f.fl.client_state, c);
        const uint64_t row = pfl_store_row_len(f.fl.client_state) * sizeof(float);
        /* FedALA: the clients ALA initialized (those of rounds 1..3); Ditto: those that trained (rounds 1, 2) */
        CHECK(touched > 0 && touched <= 9 && pfl_fl_state_bytes(&f.fl) == (uint64_t)touched * row,
              "%s: %d of %d clients hold state (%llu bytes)", algos[i]->name, touched, MANY,
              (unsigned long long)pfl_fl_state_bytes(&f.fl));
        tiny_fed_free(&f);
    }
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/pfl-store-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    test_store_rows(NULL);
    test_store_rows(dir);
    test_store_edges();
    test_personal_parts();
    test_receive_keeps_personal_parts();
    test_file_gives_the_same_bits();
    test_untouched_clients_cost_nothing();
    rmdir(dir); /* the stores' files were unlinked when made */
    TEST_MAIN_END();
}
