/* Checkpoints and client dropouts, on tiny in-memory federations:
 *
 *  - the file container (src/util/ckpt.h): every kind of section reads back
 *    as written; a flipped byte, a truncation, another version and another
 *    file are refused with a message naming the file and the problem; a
 *    section of the wrong length or a missing one is refused; an aborted
 *    write leaves the previous file;
 *  - every algorithm, and the ALA and FLAYER modules: R rounds straight
 *    through equal R/2 rounds, a checkpoint, a fresh federation loaded from
 *    it and the remaining rounds: the same metrics every round and the same
 *    final state, byte for byte (two checkpoints of the final states agree);
 *    also with --drop-rate; and every algorithm again on a model with
 *    BatchNorm, whose running statistics follow the parameters in every
 *    saved model (--bn shared, local and stats-local, with dropouts);
 *  - --drop-rate: the draws are keyed by (seed, round, client) and near the
 *    rate; the aggregate of a round with drops is the weighted mean of the
 *    clients that arrived, computed here by hand, BatchNorm's running
 *    statistics too (or kept, per --bn); a round where every client
 *    drops keeps the global model; a dropped client's state does not change;
 *    FedTSDP re-clusters the clients that arrived and keeps each former
 *    cluster of the missing ones with its model; FedALP clusters in the first
 *    round from T_pre on where at least M uploads arrived. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "algos/algos.h"
#include "algos/fedalp.h"
#include "algos/fedtsdp.h"
#include "check.h"
#include "fl/fl.h"
#include "tiny.h"
#include "util/ckpt.h"
#include "util/err.h"
#include "util/sha256.h"

static char dir[64];

static void path_in_dir(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", dir, name); }

static long file_size(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

static unsigned char *read_file(const char *path, long *n) {
    *n = file_size(path);
    if (*n < 0) return NULL;
    unsigned char *buf = tiny_alloc((size_t)*n);
    FILE *f = fopen(path, "rb");
    if (fread(buf, 1, (size_t)*n, f) != (size_t)*n) *n = -1;
    fclose(f);
    return buf;
}

static void write_file(const char *path, const unsigned char *buf, long n) {
    FILE *f = fopen(path, "wb");
    fwrite(buf, 1, (size_t)n, f);
    fclose(f);
}

static bool message_has(const char *needle) { return strstr(pfl_errmsg(), needle) != NULL; }

/* ---- the container ---- */

static void write_sample(const char *path, float scale) {
    pfl_ckpt_writer w;
    const float f[3] = {1.5f * scale, -0.0f, 3e-38f};
    const double d[2] = {3.141592653589793, NAN};
    const int i[3] = {-7, 0, 2147483647};
    const bool b[3] = {true, false, true};
    CHECK(pfl_ckpt_begin(&w, path) == 0, "begin: %s", pfl_errmsg());
    CHECK(pfl_ckpt_put_f32(&w, "floats", f, 3) == 0 && pfl_ckpt_put_f64(&w, "doubles", d, 2) == 0 &&
              pfl_ckpt_put_i32(&w, "ints", i, 3) == 0 && pfl_ckpt_put_bool(&w, "bools", b, 3) == 0 &&
              pfl_ckpt_put_int(&w, "count", -123456789012LL) == 0 && pfl_ckpt_put_double(&w, "x", 0.1) == 0 &&
              pfl_ckpt_put(&w, "text", "abc", 3) == 0 && pfl_ckpt_put(&w, "empty", NULL, 0) == 0,
          "puts: %s", pfl_errmsg());
    CHECK(pfl_ckpt_commit(&w) == 0, "commit: %s", pfl_errmsg());
}

static void test_container_roundtrip(void) {
    char path[128], tmp[160];
    path_in_dir(path, sizeof path, "sample");
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    write_file(tmp, (const unsigned char *)"stray", 5); /* a write a crash cut short, of a process that had this pid */
    write_sample(path, 1.0f);
    CHECK(access(tmp, F_OK) != 0, "commit left %s behind", tmp);
    pfl_ckpt_reader r;
    CHECK(pfl_ckpt_open(&r, path) == 0, "open: %s", pfl_errmsg());
    float f[3];
    double d[2], x;
    int i[3];
    bool b[3];
    int64_t count;
    char text[3];
    CHECK(pfl_ckpt_get_f32(&r, "floats", f, 3) == 0 && f[0] == 1.5f && signbit(f[1]) && f[2] == 3e-38f, "floats");
    CHECK(pfl_ckpt_get_f64(&r, "doubles", d, 2) == 0 && d[0] == 3.141592653589793 && isnan(d[1]), "doubles");
    CHECK(pfl_ckpt_get_i32(&r, "ints", i, 3) == 0 && i[0] == -7 && i[1] == 0 && i[2] == 2147483647, "ints");
    CHECK(pfl_ckpt_get_bool(&r, "bools", b, 3) == 0 && b[0] && !b[1] && b[2], "bools");
    CHECK(pfl_ckpt_get_int(&r, "count", &count) == 0 && count == -123456789012LL, "count %lld", (long long)count);
    CHECK(pfl_ckpt_get_double(&r, "x", &x) == 0 && x == 0.1, "x");
    CHECK(pfl_ckpt_get(&r, "text", text, 3) == 0 && memcmp(text, "abc", 3) == 0, "text");
    uint64_t len = 99;
    CHECK(pfl_ckpt_length(&r, "empty", &len) == 0 && len == 0, "empty section has %llu bytes", (unsigned long long)len);
    CHECK(pfl_ckpt_has(&r, "ints") && !pfl_ckpt_has(&r, "nope"), "has");
    CHECK(pfl_ckpt_get_f32(&r, "nope", f, 1) != 0 && message_has("no section 'nope'"), "missing: %s", pfl_errmsg());
    CHECK(pfl_ckpt_get_f32(&r, "floats", f, 2) != 0 && message_has("has 12 bytes, expected 8"), "short read: %s",
          pfl_errmsg());
    CHECK(pfl_ckpt_get_f64(&r, "floats", d, 2) != 0 && message_has("expected 16"), "wrong type: %s", pfl_errmsg());
    pfl_ckpt_close(&r);

    /* an aborted write leaves the previous file as it was */
    long n_before;
    unsigned char *before = read_file(path, &n_before);
    pfl_ckpt_writer w;
    CHECK(pfl_ckpt_begin(&w, path) == 0 && pfl_ckpt_put_int(&w, "count", 1) == 0, "second writer");
    pfl_ckpt_abort(&w);
    long n_after;
    unsigned char *after = read_file(path, &n_after);
    CHECK(n_before == n_after && memcmp(before, after, (size_t)n_before) == 0, "abort changed the checkpoint");
    CHECK(access(tmp, F_OK) != 0, "abort left %s behind", tmp);
    free(before), free(after);
    /* a commit replaces it */
    write_sample(path, 2.0f);
    CHECK(pfl_ckpt_open(&r, path) == 0 && pfl_ckpt_get_f32(&r, "floats", f, 3) == 0 && f[0] == 3.0f, "replaced");
    pfl_ckpt_close(&r);
}

/* The file at `path` changed by `edit` must be refused with `needle`. */
static void expect_refused(const char *what, const unsigned char *good, long n, long new_n, long flip_at,
                           const char *needle) {
    char path[128];
    path_in_dir(path, sizeof path, "bad");
    unsigned char *bad = tiny_alloc((size_t)(n > new_n ? n : new_n));
    memcpy(bad, good, (size_t)(n < new_n ? n : new_n));
    if (flip_at >= 0) bad[flip_at] ^= 0x10;
    write_file(path, bad, new_n);
    pfl_ckpt_reader r;
    const int rc = pfl_ckpt_open(&r, path);
    CHECK(rc != 0, "%s: accepted", what);
    CHECK(message_has(path) && message_has(needle), "%s: message '%s' lacks the file or '%s'", what, pfl_errmsg(),
          needle);
    free(bad);
}

static void test_container_refuses(void) {
    char path[128];
    path_in_dir(path, sizeof path, "sample");
    write_sample(path, 1.0f);
    long n;
    unsigned char *good = read_file(path, &n);
    CHECK(n > 100, "sample is %ld bytes", n);
    /* a byte flipped anywhere after the version: in the length fields
     * (bytes 12..27), the sections or the checksum */
    for (long at = 12; at < n; at += 3) {
        char what[64];
        snprintf(what, sizeof what, "byte %ld flipped", at);
        expect_refused(what, good, n, n, at, at < 28 ? "corrupt header" : "checksum mismatch");
    }
    expect_refused("data byte flipped", good, n, n, n / 2, "checksum mismatch");
    expect_refused("checksum byte flipped", good, n, n, n - 1, "checksum mismatch");
    /* cut anywhere */
    for (long cut = 0; cut < n; cut += 5) {
        char what[64];
        snprintf(what, sizeof what, "cut to %ld bytes", cut);
        expect_refused(what, good, n, cut, -1, "truncated");
    }
    expect_refused("last byte missing", good, n, n - 1, -1, "truncated");
    /* a byte appended */
    expect_refused("a byte appended", good, n, n + 1, -1, "1 bytes after its end");
    /* a write that never finished: its length fields are still zero */
    unsigned char *unfinished = tiny_alloc((size_t)n);
    memcpy(unfinished, good, (size_t)n);
    memset(unfinished + 12, 0, 16);
    expect_refused("unfinished write", unfinished, n, n, -1, "never finished");
    free(unfinished);
    /* another format version, another kind of file */
    expect_refused("version 17", good, n, n, 8, "format version 17");
    expect_refused("bad magic", good, n, n, 0, "not a pfl checkpoint");
    pfl_ckpt_reader r;
    CHECK(pfl_ckpt_open(&r, "/nonexistent/checkpoint") != 0 && message_has("/nonexistent/checkpoint"), "missing file");
    free(good);
}

/* ---- resuming every algorithm ---- */

typedef struct {
    const char *label;
    const pfl_algo *algo;
    pfl_config cfg;
    int public_samples; /* FedTSDP: samples after the clients' */
    bool batchnorm;     /* the BatchNorm model (bn_model) instead of the dnn */
} resume_case;

enum { CLIENTS = 4, ROUNDS = 6, STOP = 3, MAX_ROUNDS = 16 };
static const int n_train[CLIENTS] = {12, 9, 14, 10}, n_test[CLIENTS] = {4, 5, 4, 4};

typedef struct {
    pfl_round_metrics m[MAX_ROUNDS + 1];
    bool seen[MAX_ROUNDS + 1];
    int dropped[MAX_ROUNDS + 1];
} metric_log;

static void log_round(const pfl_round_metrics *m, const pfl_fl *fl, void *ctx) {
    (void)fl;
    metric_log *log = ctx;
    log->m[m->round] = *m;
    log->m[m->round].dropped_clients = NULL;
    log->seen[m->round] = true;
    int mask = 0;
    for (int k = 0; k < m->dropped; k++) mask |= 1 << m->dropped_clients[k];
    log->dropped[m->round] = mask;
}

static int stop_at(pfl_fl *fl, void *ctx) {
    (void)ctx;
    return fl->round == STOP ? 1 : 0;
}

typedef tiny_fed fed; /* the fields tiny.h's federation has; built here with other data */

/* Conv-BN-ReLU-AvgPool-Linear on the 1x4x4 images: a model vector with
 * running statistics (8 floats) after its parameters. */
static int bn_model(pfl_model *m) {
    return pfl_model_begin(m, "bn-tiny", 1, 4, 4, 3) || pfl_model_conv(m, "conv1", 4, 3, 1, 1, false) ||
                   pfl_model_batchnorm(m, "bn1") || pfl_model_relu(m) || pfl_model_avgpool(m) ||
                   pfl_model_linear(m, "fc", 3) || pfl_model_finish(m)
               ? -1
               : 0;
}

static void fed_start(fed *f, const resume_case *c) {
    memset(f, 0, sizeof *f);
    int total = 0;
    for (int k = 0; k < CLIENTS; k++) total += n_train[k] + n_test[k];
    if (c->batchnorm ? bn_model(&f->m) : pfl_model_build(&f->m, "dnn", 1, 4, 4, 3)) {
        fprintf(stderr, "%s: model: %s\n", c->label, pfl_errmsg());
        exit(2);
    }
    f->d = tiny_dataset(total + c->public_samples, 1, 4, 4, 3, 5);
    f->part = tiny_partition(CLIENTS, n_train, n_test);
    if (pfl_fl_create(&f->fl, &c->cfg, &f->m, &f->d, &f->part, c->algo)) {
        fprintf(stderr, "%s: create: %s\n", c->label, pfl_errmsg());
        exit(2);
    }
}

static void fed_free(fed *f) {
    pfl_fl_destroy(&f->fl);
    tiny_partition_free(&f->part);
    tiny_dataset_free(&f->d);
}

/* Saves fl's state without its wall times (which differ between runs): the
 * run's and each client's ALA start phase's. */
static int save_state(pfl_fl *fl, const char *path) {
    const double seconds = fl->train_seconds;
    fl->train_seconds = 0.0;
    double *ala = fl->ala_start_seconds; /* --ala */
    double *ala_seconds = ala ? calloc((size_t)fl->cfg.clients, sizeof(double)) : NULL;
    for (int c = 0; ala && ala_seconds && c < fl->cfg.clients; c++) ala_seconds[c] = ala[c], ala[c] = 0.0;
    pfl_ckpt_writer w;
    int rc = pfl_ckpt_begin(&w, path) || pfl_fl_save(fl, &w) ? -1 : 0;
    rc = rc ? (pfl_ckpt_abort(&w), -1) : pfl_ckpt_commit(&w);
    fl->train_seconds = seconds;
    for (int c = 0; ala && ala_seconds && c < fl->cfg.clients; c++) ala[c] = ala_seconds[c];
    free(ala_seconds);
    return rc;
}

static bool same_metrics(const pfl_round_metrics *a, const pfl_round_metrics *b) {
    /* accuracies and loss bitwise (NaN where both are NaN) */
    const double x[6] = {a->local_acc, a->local_acc_mean, a->local_acc_std, a->global_acc, a->train_loss,
                         a->local_acc_joined};
    const double y[6] = {b->local_acc, b->local_acc_mean, b->local_acc_std, b->global_acc, b->train_loss,
                         b->local_acc_joined};
    for (int i = 0; i < 6; i++)
        if (!(x[i] == y[i] || (isnan(x[i]) && isnan(y[i])))) return false;
    return a->train_samples == b->train_samples && a->selected == b->selected && a->dropped == b->dropped &&
           a->evaluated == b->evaluated;
}

/* The running statistics the final checkpoints hold are not their initial
 * values (mean 0, variance 1): in the global model, or with --bn local and
 * stats-local in the clients' models. Otherwise the byte comparison of
 * check_resume would say nothing about them. */
static void check_state_moved(const resume_case *c, const fed *f) {
    const pfl_model *m = f->fl.model; /* with the method's extra blocks */
    const size_t V = pfl_model_vector_len(m);
    float *init = tiny_floats(V);
    pfl_rng r = tiny_rng(1);
    pfl_model_init_params(m, init, &r);
    const int copies = f->fl.client_state ? 1 + c->cfg.clients : 1;
    float *built = tiny_floats(V);
    size_t moved = 0;
    for (int k = 0; k < copies; k++) {
        const float *v = k == 0 ? f->fl.global : tiny_client_model((pfl_fl *)&f->fl, k - 1, built);
        moved += tiny_count_diff(v, init, m->num_params, m->num_state);
    }
    CHECK(moved > 0, "%s: no running statistics moved", c->label);
    free(init), free(built);
}

static void check_resume(const resume_case *c) {
    char ckpt[128], final_a[128], final_b[128];
    path_in_dir(ckpt, sizeof ckpt, "run");
    path_in_dir(final_a, sizeof final_a, "final_a");
    path_in_dir(final_b, sizeof final_b, "final_b");
    metric_log straight, resumed;
    memset(&straight, 0, sizeof straight);
    memset(&resumed, 0, sizeof resumed);

    fed a;
    fed_start(&a, c);
    CHECK(pfl_fl_run(&a.fl, log_round, &straight) == 0, "%s: run: %s", c->label, pfl_errmsg());
    CHECK(save_state(&a.fl, final_a) == 0, "%s: save: %s", c->label, pfl_errmsg());

    fed b;
    fed_start(&b, c);
    CHECK(pfl_fl_run_with(&b.fl, log_round, stop_at, &resumed) == 0 && b.fl.round == STOP, "%s: stop at %d: %s",
          c->label, STOP, pfl_errmsg());
    CHECK(save_state(&b.fl, ckpt) == 0, "%s: save: %s", c->label, pfl_errmsg());

    fed r;
    fed_start(&r, c);
    pfl_ckpt_reader rd;
    CHECK(pfl_ckpt_open(&rd, ckpt) == 0 && pfl_fl_load(&r.fl, &rd) == 0, "%s: load: %s", c->label, pfl_errmsg());
    pfl_ckpt_close(&rd);
    /* --eval-moment after-train: the models training left, read back as they were (the metrics of a tiny
     * test split could agree by chance) */
    for (int k = 0; b.fl.trained && k < CLIENTS; k++) {
        const bool has = pfl_client_has_trained(&b.fl, k);
        CHECK(has == pfl_client_has_trained(&r.fl, k) &&
                  (!has || memcmp(pfl_store_read(b.fl.trained, k), pfl_store_read(r.fl.trained, k),
                                  sizeof(float) * pfl_model_vector_len(b.fl.model)) == 0),
              "%s: client %d's after-train model differs after loading", c->label, k);
    }
    fed_free(&b);
    CHECK(r.fl.round == STOP, "%s: loaded round %d", c->label, r.fl.round);
    for (int k = STOP + 1; k <= ROUNDS; k++) resumed.seen[k] = false;
    CHECK(pfl_fl_run(&r.fl, log_round, &resumed) == 0, "%s: resumed run: %s", c->label, pfl_errmsg());
    CHECK(save_state(&r.fl, final_b) == 0, "%s: save: %s", c->label, pfl_errmsg());

    for (int k = 0; k <= ROUNDS; k++)
        CHECK(straight.seen[k] && resumed.seen[k] && same_metrics(&straight.m[k], &resumed.m[k]) &&
                  straight.dropped[k] == resumed.dropped[k],
              "%s: round %d: local %.6f / %.6f, global %.6f / %.6f, loss %.6f / %.6f", c->label, k,
              straight.m[k].local_acc, resumed.m[k].local_acc, straight.m[k].global_acc, resumed.m[k].global_acc,
              straight.m[k].train_loss, resumed.m[k].train_loss);
    const size_t V = pfl_model_vector_len(a.fl.model); /* with the method's extra blocks */
    CHECK(memcmp(a.fl.global, r.fl.global, V * sizeof(float)) == 0, "%s: global models differ", c->label);
    if (a.m.num_state) check_state_moved(c, &a);
    long na, nb;
    unsigned char *fa = read_file(final_a, &na), *fb = read_file(final_b, &nb);
    CHECK(na > 0 && na == nb && memcmp(fa, fb, (size_t)na) == 0, "%s: final states differ (%ld / %ld bytes)", c->label,
          na, nb);
    /* the test can fail: the state after round STOP is not the final one */
    long ns;
    unsigned char *fs = read_file(ckpt, &ns);
    CHECK(!(ns == na && memcmp(fs, fa, (size_t)na) == 0), "%s: nothing changed after round %d", c->label, STOP);
    free(fa), free(fb), free(fs);
    fed_free(&a);
    fed_free(&r);
}

static resume_case make_case(const char *label, const pfl_algo *algo) {
    resume_case c = {label, algo, tiny_config(CLIENTS), 0, false};
    c.cfg.rounds = ROUNDS, c.cfg.join = 0.75, c.cfg.eval_every = 2, c.cfg.threads = 2, c.cfg.momentum = 0.5f;
    pfl_algo_params *a = &c.cfg.algo;
    a->mu = 0.01f, a->lambda = 0.1f;
    a->amp_alpha = 1e4f, a->amp_sigma = 1e6f, a->amp_lambda = 1.0f, a->cfr_layers = 1;
    a->groups = 2, a->beta = 0.6f, a->warmup = 2; /* FedALP clusters before the stop */
    a->pfedme_k = 2, a->pfedme_lambda = 15.0f, a->pfedme_lr = 0.01f, a->pfedme_beta = 0.5f;
    a->cfl_eps1 = 1e9f, a->cfl_eps2 = 0.0f, a->cfl_warmup = 1; /* CFL splits from round 2 */
    a->tsdp_public_batch = 6, a->tsdp_eps1 = 0.15f, a->tsdp_eps2 = 3.5f, a->tsdp_min_pts = 2, a->tsdp_h_th = 0.0f;
    a->tsdp_psi = 0.7f;
    a->ft_epochs = 1, a->perfedavg_steps = 1, a->perfedavg_delta = 1e-3f, a->php_mu = 0.9f, a->php_lambda = 0.01f;
    if (algo == &pfl_algo_perfedavg) c.cfg.momentum = 0.0f; /* Per-FedAvg's steps are plain gradient steps */
    a->fomo_val = 0.25f, a->apple_dr_lr = 0.01f, a->apple_mu = 0.1f, a->apple_l = 0.5f;
    a->pf_tau = 5.0f, a->pf_tau_decay = 0.965f, a->pf_fm = 2, a->pf_fs = 1, a->pf_lr = 1.0f;
    a->proto_lambda = 1.0f, a->fd_lambda = 1.0f, a->pcl_tau = 1.0f, a->gh_server_lr = 1.0f; /* prototype methods */
    /* traditional methods: SCAFFOLD's c and c_i, FedDyn's h and grad_k change every round */
    a->server_lr = 1.0f, a->dyn_alpha = 0.01f, a->lc_tau = 1.0f, a->ntd_beta = 1.0f, a->ntd_tau = 1.0f;
    pfl_modules_config *mod = &c.cfg.modules;
    mod->ala_p = 1, mod->ala_s = 80, mod->ala_eta = 1.0f, mod->ala_threshold = 0.1f, mod->ala_max_epochs = 20;
    if (algo == &pfl_algo_cfl || algo == &pfl_algo_fedtsdp || algo == &pfl_algo_apple) c.cfg.join = 1.0; /* cross-silo */
    if (algo == &pfl_algo_fedtsdp) c.public_samples = 20, a->tsdp_public = 20;
    return c;
}

static void test_resume_every_algorithm(void) {
    for (int i = 0; pfl_algos[i]; i++) {
        resume_case c = make_case(pfl_algos[i]->name, pfl_algos[i]);
        check_resume(&c);
    }
    resume_case c = make_case("fedprox --ala", &pfl_algo_fedprox);
    c.cfg.modules.ala = true;
    check_resume(&c);
    c = make_case("fedavg --flayer-agg --flayer-lr --flayer-mask", &pfl_algo_fedavg);
    c.cfg.modules.flayer_agg = c.cfg.modules.flayer_lr = c.cfg.modules.flayer_mask = true;
    check_resume(&c);
    c = make_case("ditto --flayer-mask-literal", &pfl_algo_ditto);
    c.cfg.modules.flayer_mask = c.cfg.modules.flayer_mask_literal = true;
    check_resume(&c);
    /* ALA on what FedAMP sends (u_i) and below FedPer's head, the
     * models of --eval-moment after-train, pFedMe with the modules, and the
     * local-init modules on every client (--init-clients all) */
    c = make_case("fedamp --ala", &pfl_algo_fedamp);
    c.cfg.modules.ala = true;
    check_resume(&c);
    c = make_case("pfedcfr --eval-moment after-train", &pfl_algo_pfedcfr); /* its broadcast replaces the model */
    c.cfg.eval_moment = PFL_EVAL_AFTER_TRAIN, c.cfg.eval_every = 1;
    check_resume(&c);
    c = make_case("fedper --ala --init-clients all", &pfl_algo_fedper);
    c.cfg.modules.ala = true, c.cfg.init_clients = PFL_INIT_ALL;
    check_resume(&c);
    c = make_case("pfedme --flayer-agg --flayer-mask", &pfl_algo_pfedme);
    c.cfg.modules.flayer_agg = c.cfg.modules.flayer_mask = true;
    check_resume(&c);
    /* The modules on FedPHP's inherited model, Per-FedAvg's
     * Hessian-free steps with FLAYER's head mix, FedAvg-C fine-tuning ALA's
     * mix, FedPHP after training */
    c = make_case("fedphp --ala", &pfl_algo_fedphp);
    c.cfg.modules.ala = true;
    check_resume(&c);
    c = make_case("perfedavg --perfedavg-hf --flayer-agg --flayer-mask", &pfl_algo_perfedavg);
    c.cfg.algo.perfedavg_hf = true, c.cfg.modules.flayer_agg = c.cfg.modules.flayer_mask = true;
    check_resume(&c);
    c = make_case("fedavg-c --ala", &pfl_algo_fedavg_c);
    c.cfg.modules.ala = true;
    check_resume(&c);
    c = make_case("fedphp --eval-moment after-train", &pfl_algo_fedphp);
    c.cfg.eval_moment = PFL_EVAL_AFTER_TRAIN, c.cfg.eval_every = 1;
    check_resume(&c);
    /* with clients dropping out, the clustering methods too */
    const pfl_algo *dropping[] = {&pfl_algo_fedavg, &pfl_algo_flayer, &pfl_algo_fedala, &pfl_algo_fedalp,
                                  &pfl_algo_cfl,    &pfl_algo_fedtsdp, &pfl_algo_pfedcfr, &pfl_algo_ditto,
                                  &pfl_algo_fedphp, &pfl_algo_fedprox_c};
    for (size_t i = 0; i < sizeof dropping / sizeof dropping[0]; i++) {
        char label[64];
        snprintf(label, sizeof label, "%s --drop-rate 0.3", dropping[i]->name);
        c = make_case(label, dropping[i]);
        c.cfg.drop_rate = 0.3;
        check_resume(&c);
    }
}

/* Every algorithm on the BatchNorm model: checkpoints hold whole model
 * vectors (global, clients', FedAMP's u_i, CFL's cluster models), so a
 * resumed run normalizes with the same running statistics; the statistics
 * kept by the clients (--bn local, stats-local) resume too, also when
 * clients drop out. */
static void test_resume_batchnorm(void) {
    char label[80];
    for (int i = 0; pfl_algos[i]; i++) {
        snprintf(label, sizeof label, "%s, BatchNorm model", pfl_algos[i]->name);
        resume_case c = make_case(label, pfl_algos[i]);
        c.batchnorm = true;
        if (pfl_algos[i] == &pfl_algo_fedbn) c.cfg.bn = PFL_BN_LOCAL; /* its run default: FedBN is --bn local */
        check_resume(&c);
    }
    /* kept by the clients (pFedMe, CFL and FedALP refuse it): the default
     * round, FedAMP's u_i, FedTSDP's receive, ALA's and FedPer's and
     * pFedCFR's own mixes of the global model and the client's */
    const struct {
        const pfl_algo *algo;
        pfl_bn_mode mode;
    } kept[] = {{&pfl_algo_fedavg, PFL_BN_LOCAL},        {&pfl_algo_fedamp, PFL_BN_LOCAL},
                {&pfl_algo_fedtsdp, PFL_BN_LOCAL},       {&pfl_algo_fedala, PFL_BN_STATS_LOCAL},
                {&pfl_algo_fedper, PFL_BN_STATS_LOCAL},  {&pfl_algo_pfedcfr, PFL_BN_STATS_LOCAL}};
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) {
        snprintf(label, sizeof label, "%s --bn %s --drop-rate 0.3", kept[i].algo->name,
                 kept[i].mode == PFL_BN_LOCAL ? "local" : "stats-local");
        resume_case c = make_case(label, kept[i].algo);
        c.batchnorm = true, c.cfg.bn = kept[i].mode, c.cfg.drop_rate = 0.3;
        check_resume(&c);
    }
}

/* A checkpoint of another configuration is refused, naming what differs. */
static void test_load_refuses_other_runs(void) {
    char path[128];
    path_in_dir(path, sizeof path, "fedavg");
    resume_case c = make_case("fedavg", &pfl_algo_fedavg);
    fed a;
    fed_start(&a, &c);
    CHECK(save_state(&a.fl, path) == 0, "save: %s", pfl_errmsg());
    fed_free(&a);
    pfl_ckpt_reader rd;

    resume_case other = make_case("fedala", &pfl_algo_fedala);
    fed b;
    fed_start(&b, &other);
    CHECK(pfl_ckpt_open(&rd, path) == 0, "open");
    CHECK(pfl_fl_load(&b.fl, &rd) != 0 && message_has("fedavg") && message_has("fedala"), "other algo: %s",
          pfl_errmsg());
    pfl_ckpt_close(&rd);
    fed_free(&b);

    /* the same algorithm on other clients: another split of the same samples */
    fed d;
    fed_start(&d, &c);
    d.part.clients[0].train[0] = d.part.clients[0].test[0];
    CHECK(pfl_ckpt_open(&rd, path) == 0, "open");
    CHECK(pfl_fl_load(&d.fl, &rd) != 0 && message_has("clients rebuilt"), "other partition: %s", pfl_errmsg());
    pfl_ckpt_close(&rd);
    fed_free(&d);
}

/* ---- hostile sections behind a valid checksum ---- */

/* Writes a checkpoint of raw section bytes with the header, end marker,
 * SHA-256 and length pfl_ckpt_commit writes: a file that passes the checksum. */
static void write_sections(const char *path, const unsigned char *sections, size_t n) {
    const size_t len = 28 + n + 4 + 32;
    unsigned char *f = tiny_alloc(len);
    memcpy(f, "PFLCKPT\0\1\0\0\0", 12);
    for (int i = 0; i < 8; i++) f[12 + i] = (unsigned char)((uint64_t)len >> (8 * i)), f[20 + i] = (unsigned char)~f[12 + i];
    memcpy(f + 28, sections, n);
    pfl_sha256 s;
    pfl_sha256_init(&s);
    pfl_sha256_update(&s, f, 12);
    pfl_sha256_update(&s, f + 28, n + 4);
    pfl_sha256_final(&s, f + 28 + n + 4);
    write_file(path, f, (long)len);
    free(f);
}

/* one section: u32 name length, the name, u64 data length, the data */
static size_t put_section(unsigned char *out, const char *name, size_t name_len, const void *data, size_t n) {
    for (int i = 0; i < 4; i++) out[i] = (unsigned char)(name_len >> (8 * i));
    memcpy(out + 4, name, name_len);
    for (int i = 0; i < 8; i++) out[4 + name_len + i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(out + 12 + name_len, data, n);
    return 12 + name_len + n;
}

static void test_hostile_sections(void) {
    char path[128];
    path_in_dir(path, sizeof path, "hostile");
    unsigned char buf[256];
    pfl_ckpt_reader r;
    /* a name with a NUL inside: "fl.round" would find it by its first bytes */
    size_t n = put_section(buf, "fl.round\0x", 10, "\3\0\0\0\0\0\0\0", 8);
    write_sections(path, buf, n);
    CHECK(pfl_ckpt_open(&r, path) != 0 && message_has("a section name holds a NUL byte ('fl.round\\x00x')"),
          "NUL in a name: %s", pfl_errmsg());
    /* the same name twice: the first would win */
    n = put_section(buf, "fl.round", 8, "\3\0\0\0\0\0\0\0", 8);
    n += put_section(buf + n, "fl.round", 8, "\5\0\0\0\0\0\0\0", 8);
    write_sections(path, buf, n);
    CHECK(pfl_ckpt_open(&r, path) != 0 && message_has("section 'fl.round' appears twice"), "duplicate: %s",
          pfl_errmsg());
    n = put_section(buf, "fl.round", 8, "\3\0\0\0\0\0\0\0", 8);
    write_sections(path, buf, n);
    CHECK(pfl_ckpt_open(&r, path) == 0, "the hand-written file itself: %s", pfl_errmsg());
    pfl_ckpt_close(&r);

    /* counters a run never writes: negative samples, a time that is not one */
    resume_case c = make_case("fedavg", &pfl_algo_fedavg);
    const double seconds[2] = {0.5, NAN};
    const long samples[2] = {-5, 7};
    const char *want[2] = {"fl.train_samples is negative (-5)", "fl.train_seconds is not a time (nan)"};
    for (int k = 0; k < 2; k++) {
        fed a;
        fed_start(&a, &c);
        a.fl.train_samples = samples[k], a.fl.train_seconds = seconds[k];
        pfl_ckpt_writer w;
        CHECK(pfl_ckpt_begin(&w, path) == 0 && pfl_fl_save(&a.fl, &w) == 0 && pfl_ckpt_commit(&w) == 0, "save: %s",
              pfl_errmsg());
        fed_free(&a);
        fed b;
        fed_start(&b, &c);
        CHECK(pfl_ckpt_open(&r, path) == 0, "open: %s", pfl_errmsg());
        CHECK(pfl_fl_load(&b.fl, &r) != 0 && message_has(want[k]), "%s: %s", want[k], pfl_errmsg());
        pfl_ckpt_close(&r);
        fed_free(&b);
    }
}

/* A checkpoint of a FedPHP run whose participation counts (one i32 a
 * client) say client 1 trained in `count` rounds: every section as the run
 * saved it but that one, behind a valid checksum. */
static void fedphp_with_count(const char *path, const resume_case *c, int32_t count) {
    fed a;
    fed_start(&a, c);
    CHECK(pfl_fl_run(&a.fl, NULL, NULL) == 0, "fedphp run: %s", pfl_errmsg());
    pfl_ckpt_writer w;
    CHECK(pfl_ckpt_begin(&w, path) == 0 && pfl_fl_save(&a.fl, &w) == 0 && pfl_ckpt_commit(&w) == 0, "save: %s",
          pfl_errmsg());
    fed_free(&a);
    long size;
    unsigned char *file = read_file(path, &size), *out = tiny_alloc((size_t)size);
    pfl_ckpt_reader r;
    CHECK(pfl_ckpt_open(&r, path) == 0, "open: %s", pfl_errmsg());
    size_t n = 0;
    for (int i = 0; i < r.num_sections; i++) {
        const pfl_ckpt_section *sec = &r.sections[i];
        unsigned char *data = file + sec->offset;
        if (strcmp(sec->name, "fedphp.participations") == 0) memcpy(data + 4, &count, 4); /* little-endian hosts */
        n += put_section(out + n, sec->name, strlen(sec->name), data, sec->length);
    }
    pfl_ckpt_close(&r);
    write_sections(path, out, n);
    free(file), free(out);
}

/* FedPHP's moving-average weight grows with the counts: one outside
 * [0, rounds] is refused, not turned into a weight outside [0, mu]. */
static void test_hostile_fedphp_counts(void) {
    char path[128];
    path_in_dir(path, sizeof path, "hostile");
    resume_case c = make_case("fedphp", &pfl_algo_fedphp);
    c.cfg.join = 1.0;
    const int32_t counts[3] = {-3, ROUNDS + 1, 1};
    for (int k = 0; k < 3; k++) {
        fedphp_with_count(path, &c, counts[k]);
        fed b;
        fed_start(&b, &c);
        pfl_ckpt_reader r;
        CHECK(pfl_ckpt_open(&r, path) == 0, "open: %s", pfl_errmsg());
        const int rc = pfl_fl_load(&b.fl, &r);
        if (k < 2) CHECK(rc != 0 && message_has("fedphp: client 1 trained in"), "count %d: %s", counts[k],
                         rc ? pfl_errmsg() : "accepted");
        else CHECK(rc == 0, "count 1 (a count a run could write): %s", pfl_errmsg());
        pfl_ckpt_close(&r);
        fed_free(&b);
    }
}

/* ---- --drop-rate ---- */

static void test_drop_draws(void) {
    pfl_config cfg = tiny_config(10);
    cfg.drop_rate = 0.3;
    int clients[10], dropped[10], again[10], n_dropped, n2, total = 0, rounds = 2000;
    for (int r = 1; r <= rounds; r++) {
        for (int c = 0; c < 10; c++) clients[c] = c;
        const int n = pfl_drop_clients(&cfg, r, clients, 10, dropped, &n_dropped);
        CHECK(n + n_dropped == 10, "round %d: %d kept + %d dropped", r, n, n_dropped);
        for (int k = 1; k < n; k++) CHECK(clients[k - 1] < clients[k], "kept clients not ascending");
        /* each client's draw is its own: dropping from a subset drops the same clients */
        int sub[5] = {1, 3, 5, 7, 9}, sub_dropped[5], ns;
        pfl_drop_clients(&cfg, r, sub, 5, sub_dropped, &ns);
        int from_all = 0;
        for (int k = 0; k < n_dropped; k++) from_all += dropped[k] % 2 == 1;
        CHECK(ns == from_all, "round %d: a subset drops %d odd clients, the whole set %d", r, ns, from_all);
        for (int c = 0; c < 10; c++) clients[c] = c;
        pfl_drop_clients(&cfg, r, clients, 10, again, &n2);
        CHECK(n2 == n_dropped && memcmp(again, dropped, sizeof(int) * (size_t)n_dropped) == 0, "round %d not repeatable",
              r);
        total += n_dropped;
    }
    const double rate = (double)total / (10.0 * rounds);
    CHECK(fabs(rate - 0.3) < 0.015, "drop rate %.4f, want 0.3", rate);
    cfg.drop_rate = 0.0;
    for (int c = 0; c < 10; c++) clients[c] = c;
    CHECK(pfl_drop_clients(&cfg, 1, clients, 10, dropped, &n_dropped) == 10 && n_dropped == 0, "rate 0 dropped some");
}

/* The first seed from 1 whose round 1 drops between lo and hi of the n clients. */
static uint64_t seed_dropping(pfl_config cfg, int n, int lo, int hi) {
    for (uint64_t seed = 1; seed < 10000; seed++) {
        cfg.seed = seed;
        int clients[16], dropped[16], n_dropped;
        for (int c = 0; c < n; c++) clients[c] = c;
        pfl_drop_clients(&cfg, 1, clients, n, dropped, &n_dropped);
        if (n_dropped >= lo && n_dropped <= hi) return seed;
    }
    return 0;
}

static void test_drop_aggregate_by_hand(void) {
    const int nt[CLIENTS] = {12, 9, 14, 10}, ne[CLIENTS] = {4, 4, 4, 4};
    pfl_config cfg = tiny_config(CLIENTS);
    cfg.drop_rate = 0.5, cfg.rounds = 1;
    cfg.seed = seed_dropping(cfg, CLIENTS, 1, 2);
    CHECK(cfg.seed != 0, "no seed drops 1 or 2 of 4 clients");
    int clients[CLIENTS] = {0, 1, 2, 3}, dropped[CLIENTS], n_dropped;
    const int n = pfl_drop_clients(&cfg, 1, clients, CLIENTS, dropped, &n_dropped);
    tiny_fed f;
    tiny_fed_init(&f, &pfl_algo_fedavg, cfg, nt, ne);
    pfl_fl *fl = &f.fl;
    const size_t P = f.m.num_params;
    /* by hand: every client trained from the initial model, the arrived ones averaged by sample count */
    float *initial = tiny_floats(P), *trained[CLIENTS];
    memcpy(initial, fl->global, P * sizeof(float));
    fl->round = 1;
    for (int c = 0; c < CLIENTS; c++) {
        trained[c] = tiny_floats(P);
        memcpy(trained[c], initial, P * sizeof(float));
        pfl_train_stats st = {0};
        pfl_default_local_train(fl, c, &fl->workers[0], trained[c], &st);
    }
    fl->round = 0;
    double total = 0.0;
    for (int k = 0; k < n; k++) total += nt[clients[k]];
    metric_log log;
    memset(&log, 0, sizeof log);
    CHECK(pfl_fl_run(fl, log_round, &log) == 0, "run: %s", pfl_errmsg());
    double worst = 0.0, worst_all = 0.0;
    for (size_t j = 0; j < P; j++) {
        double want = 0.0, all = 0.0;
        for (int k = 0; k < n; k++) want += nt[clients[k]] / total * trained[clients[k]][j];
        for (int c = 0; c < CLIENTS; c++) all += nt[c] / 45.0 * trained[c][j];
        worst = fmax(worst, fabs(fl->global[j] - want) / fmax(1.0, fabs(want)));
        worst_all = fmax(worst_all, fabs(fl->global[j] - all));
    }
    CHECK(worst < 1e-6, "aggregate off the arrived clients' weighted mean by %g", worst);
    CHECK(worst_all > 1e-4, "aggregate equals the mean over every client (off by only %g)", worst_all);
    CHECK(log.m[1].selected == n && log.m[1].dropped == n_dropped, "round 1: %d clients, %d dropped; want %d, %d",
          log.m[1].selected, log.m[1].dropped, n, n_dropped);
    int mask = 0;
    for (int k = 0; k < n_dropped; k++) mask |= 1 << dropped[k];
    CHECK(log.dropped[1] == mask, "dropped clients %x, want %x", log.dropped[1], mask);
    long samples = 0;
    for (int k = 0; k < n; k++) samples += nt[clients[k]];
    CHECK(log.m[1].train_samples == samples, "trained %ld samples, want %ld (the arrived clients')",
          log.m[1].train_samples, samples);
    for (int c = 0; c < CLIENTS; c++) free(trained[c]);
    free(initial);
    tiny_fed_free(&f);
}

/* --drop-rate with --bn: on the BatchNorm model the running statistics
 * are averaged over the clients that arrived like the parameters (--bn
 * shared), or stay where they are: the global model keeps its own and each
 * client its own, the trained ones for the arrived clients and the initial
 * ones for those that dropped (--bn local, stats-local; local keeps bn1's
 * weight and bias out of the average too). Computed by hand as above. */
static void test_drop_aggregate_batchnorm(pfl_bn_mode mode) {
    resume_case c = make_case(mode == PFL_BN_SHARED ? "bn shared" : mode == PFL_BN_LOCAL ? "bn local" : "bn stats-local",
                              &pfl_algo_fedavg);
    c.batchnorm = true, c.cfg.bn = mode, c.cfg.join = 1.0, c.cfg.rounds = 1, c.cfg.drop_rate = 0.5;
    c.cfg.seed = seed_dropping(c.cfg, CLIENTS, 1, 2);
    CHECK(c.cfg.seed != 0, "no seed drops 1 or 2 of 4 clients");
    int clients[CLIENTS] = {0, 1, 2, 3}, dropped[CLIENTS], n_dropped;
    const int n = pfl_drop_clients(&c.cfg, 1, clients, CLIENTS, dropped, &n_dropped);
    fed f;
    fed_start(&f, &c);
    pfl_fl *fl = &f.fl;
    const pfl_model *m = &f.m;
    const size_t V = pfl_model_vector_len(m);
    const pfl_layer *bn = &m->layers[1];
    CHECK(bn->state_length == 8 && m->num_state == 8, "%s: bn1 has %zu state floats", c.label, bn->state_length);
    float *initial = tiny_floats(V), *trained[CLIENTS], *built = tiny_floats(V);
    memcpy(initial, fl->global, V * sizeof(float));
    fl->round = 1;
    for (int k = 0; k < CLIENTS; k++) {
        trained[k] = tiny_floats(V);
        memcpy(trained[k], initial, V * sizeof(float));
        pfl_train_stats st = {0};
        pfl_default_local_train(fl, k, &fl->workers[0], trained[k], &st);
    }
    fl->round = 0;
    CHECK(tiny_count_diff(trained[clients[0]], initial, bn->state_offset, bn->state_length) > 0,
          "%s: training did not move the running statistics", c.label);
    double total = 0.0;
    for (int k = 0; k < n; k++) total += n_train[clients[k]];
    CHECK(pfl_fl_run(fl, NULL, NULL) == 0, "%s: run: %s", c.label, pfl_errmsg());
    /* the global model: per span, the arrived clients' weighted mean or its initial values */
    const bool params_shared = mode != PFL_BN_LOCAL, state_shared = mode == PFL_BN_SHARED;
    double worst = 0.0;
    size_t kept_wrong = 0;
    for (size_t j = 0; j < V; j++) {
        const bool is_state = j >= m->num_params, in_bn = (j >= bn->offset && j < bn->offset + bn->length) || is_state;
        if (in_bn && !(is_state ? state_shared : params_shared)) {
            kept_wrong += memcmp(&fl->global[j], &initial[j], sizeof(float)) != 0;
            continue;
        }
        double want = 0.0;
        for (int k = 0; k < n; k++) want += n_train[clients[k]] / total * trained[clients[k]][j];
        worst = fmax(worst, fabs(fl->global[j] - want) / fmax(1.0, fabs(want)));
    }
    CHECK(worst < 1e-6, "%s: global off the arrived clients' weighted mean by %g", c.label, worst);
    CHECK(kept_wrong == 0, "%s: %zu values of the global model's local BatchNorm changed", c.label, kept_wrong);
    /* the clients' own BatchNorm after the broadcast */
    for (int k = 0; k < CLIENTS && !state_shared; k++) {
        bool arrived = false;
        for (int i = 0; i < n; i++) arrived |= clients[i] == k;
        const float *own = tiny_client_model(fl, k, built), *want = arrived ? trained[k] : initial;
        CHECK(tiny_same(own, want, bn->state_offset, bn->state_length), "%s: client %d (%s): running statistics",
              c.label, k, arrived ? "arrived" : "dropped");
        if (mode == PFL_BN_LOCAL)
            CHECK(tiny_same(own, want, bn->offset, bn->length), "%s: client %d (%s): bn1 weight and bias", c.label, k,
                  arrived ? "arrived" : "dropped");
    }
    for (int k = 0; k < CLIENTS; k++) free(trained[k]);
    free(initial), free(built);
    fed_free(&f);
}

static void test_everyone_drops(void) {
    const int nt[2] = {8, 8}, ne[2] = {4, 4};
    pfl_config cfg = tiny_config(2);
    cfg.drop_rate = 0.9, cfg.rounds = 1;
    cfg.seed = seed_dropping(cfg, 2, 2, 2);
    CHECK(cfg.seed != 0, "no seed drops both clients");
    cfg.algo.pfedme_k = 1, cfg.algo.pfedme_lambda = 15.0f, cfg.algo.pfedme_lr = 0.01f, cfg.algo.pfedme_beta = 0.3f;
    /* a stateless method keeps its global model; a stateful one its clients'
     * models; pFedMe's mix (1 - beta) w + beta w would round it: no aggregation at all */
    const pfl_algo *algos[3] = {&pfl_algo_fedavg, &pfl_algo_local, &pfl_algo_pfedme};
    for (int i = 0; i < 3; i++) {
        tiny_fed f;
        tiny_fed_init(&f, algos[i], cfg, nt, ne);
        const size_t P = f.m.num_params;
        float *before = tiny_floats(P);
        memcpy(before, f.fl.global, P * sizeof(float));
        metric_log log;
        memset(&log, 0, sizeof log);
        CHECK(pfl_fl_run(&f.fl, log_round, &log) == 0, "%s: run: %s", algos[i]->name, pfl_errmsg());
        CHECK(memcmp(before, f.fl.global, P * sizeof(float)) == 0, "%s: global model changed with no upload",
              algos[i]->name);
        CHECK(log.m[1].selected == 0 && log.m[1].dropped == 2 && log.m[1].train_samples == 0, "%s: round 1 %d/%d",
              algos[i]->name, log.m[1].selected, log.m[1].dropped);
        float *built = tiny_floats(pfl_model_vector_len(f.fl.model));
        for (int c = 0; f.fl.client_state && c < 2; c++)
            CHECK(memcmp(before, tiny_client_model(&f.fl, c, built), P * sizeof(float)) == 0,
                  "%s: client %d's state changed", algos[i]->name, c);
        free(before), free(built);
        tiny_fed_free(&f);
    }
}

/* A client that drops out keeps its state; the others' moves (Local: each
 * client's model is its state). */
static void test_dropped_state_kept(void) {
    const int nt[CLIENTS] = {12, 9, 14, 10}, ne[CLIENTS] = {4, 4, 4, 4};
    pfl_config cfg = tiny_config(CLIENTS);
    cfg.drop_rate = 0.5, cfg.rounds = 1;
    cfg.seed = seed_dropping(cfg, CLIENTS, 1, 3);
    int clients[CLIENTS] = {0, 1, 2, 3}, dropped[CLIENTS], n_dropped;
    pfl_drop_clients(&cfg, 1, clients, CLIENTS, dropped, &n_dropped);
    const pfl_algo *algos[2] = {&pfl_algo_local, &pfl_algo_ditto};
    for (int i = 0; i < 2; i++) {
        tiny_fed f;
        tiny_fed_init(&f, algos[i], cfg, nt, ne);
        const size_t P = f.m.num_params;
        float *before = tiny_floats(P * CLIENTS), *built = tiny_floats(P);
        for (int c = 0; c < CLIENTS; c++) tiny_client_model(&f.fl, c, before + P * (size_t)c);
        CHECK(pfl_fl_run(&f.fl, NULL, NULL) == 0, "run: %s", pfl_errmsg());
        for (int c = 0; c < CLIENTS; c++) {
            bool was_dropped = false;
            for (int k = 0; k < n_dropped; k++) was_dropped |= dropped[k] == c;
            const bool same = memcmp(before + P * (size_t)c, tiny_client_model(&f.fl, c, built), P * sizeof(float)) == 0;
            CHECK(same == was_dropped, "%s: client %d %s, its state %s", algos[i]->name, c,
                  was_dropped ? "dropped" : "arrived", same ? "stayed" : "changed");
        }
        free(before), free(built);
        tiny_fed_free(&f);
    }
}

/* FedTSDP re-clusters the clients that arrived; each former cluster of the
 * missing ones goes on under a new id with its shared model. */
static void test_fedtsdp_missing_clients(void) {
    resume_case c = make_case("fedtsdp", &pfl_algo_fedtsdp);
    c.cfg.drop_rate = 0.5;
    fed f;
    fed_start(&f, &c);
    pfl_fl *fl = &f.fl;
    pfl_fedtsdp_state *s = pfl_fedtsdp_state_of(fl);
    const size_t P = f.m.num_params, end = s->shared_end;
    /* before: clients 0, 1 in cluster 0, client 2 in 1, client 3 in 2 */
    const int before[CLIENTS] = {0, 0, 1, 2};
    s->clusters = 3;
    memcpy(s->cluster, before, sizeof before);
    for (int k = 0; k < 3; k++)
        for (size_t j = 0; j < P; j++) s->models[P * (size_t)k + j] = (float)(k + 1);
    /* clients 0 and 2 upload; 1 and 3 do not */
    const int arrived[2] = {0, 2};
    float *uploads[2] = {tiny_floats(P), tiny_floats(P)};
    pfl_rng rng = tiny_rng(3);
    tiny_fill(uploads[0], P, -1, 1, &rng);
    tiny_fill(uploads[1], P, -1, 1, &rng);
    fl->round = 1;
    fl->algo->aggregate(fl, arrived, 2, uploads);
    CHECK(s->clustered[1], "no clustering in round 1 (h_th 0)");
    const int k = s->cluster[0] > s->cluster[2] ? s->cluster[0] + 1 : s->cluster[2] + 1; /* the arrived clusters */
    CHECK(s->cluster[1] >= k && s->cluster[3] >= k && s->cluster[1] != s->cluster[3] && s->clusters == k + 2,
          "missing clients in clusters %d and %d of %d (arrived ones in %d clusters)", s->cluster[1], s->cluster[3],
          s->clusters, k);
    size_t off1 = 0, off3 = 0;
    for (size_t j = 0; j < end; j++) {
        off1 += s->models[P * (size_t)s->cluster[1] + j] != 1.0f;
        off3 += s->models[P * (size_t)s->cluster[3] + j] != 3.0f;
    }
    CHECK(off1 == 0 && off3 == 0, "missing clients' shared models changed in %zu and %zu places", off1, off3);
    /* an arrived client alone in its cluster has its own upload as the shared model */
    if (s->cluster[0] != s->cluster[2])
        CHECK(tiny_same(s->models + P * (size_t)s->cluster[2], uploads[1], 0, s->shared_end),
              "client 2's cluster model is not its upload");
    free(uploads[0]), free(uploads[1]);
    fed_free(&f);
}

/* FedALP clusters at the end of round T_pre, or of the first later round in
 * which at least M uploads arrived. */
static int record_clustered(pfl_fl *fl, void *ctx) {
    ((bool *)ctx)[fl->round] = pfl_fedalp_state_of(fl)->clustered;
    return 0;
}

static void test_fedalp_waits_for_uploads(void) {
    resume_case c = make_case("fedalp", &pfl_algo_fedalp);
    c.cfg.join = 1.0, c.cfg.drop_rate = 0.6, c.cfg.algo.warmup = 1, c.cfg.algo.groups = 2, c.cfg.rounds = 4;
    /* a seed with at most 1 upload in round 1 and at least 2 in round 2 */
    int found = 0;
    for (uint64_t seed = 1; seed < 10000 && !found; seed++) {
        c.cfg.seed = seed;
        int a[CLIENTS] = {0, 1, 2, 3}, b[CLIENTS] = {0, 1, 2, 3}, d[CLIENTS], nd;
        found = pfl_drop_clients(&c.cfg, 1, a, CLIENTS, d, &nd) <= 1 && pfl_drop_clients(&c.cfg, 2, b, CLIENTS, d, &nd) >= 2;
    }
    CHECK(found, "no seed with 1 upload in round 1 and 2 in round 2");
    fed f;
    fed_start(&f, &c);
    bool clustered[8] = {false};
    CHECK(pfl_fl_run_with(&f.fl, NULL, record_clustered, clustered) == 0, "run: %s", pfl_errmsg());
    CHECK(!clustered[1] && clustered[2], "clustered after round 1: %d, round 2: %d", clustered[1], clustered[2]);
    fed_free(&f);
}

int main(void) {
    /* tmpfs when there is one: a hundred fsyncs cost seconds on a busy disk (the e2e tests sync for real) */
    snprintf(dir, sizeof dir, "%s/pfl-test-ckpt-XXXXXX", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    test_container_roundtrip();
    test_container_refuses();
    test_resume_every_algorithm();
    test_resume_batchnorm();
    test_load_refuses_other_runs();
    test_hostile_sections();
    test_hostile_fedphp_counts();
    test_drop_draws();
    test_drop_aggregate_by_hand();
    for (int mode = PFL_BN_SHARED; mode <= PFL_BN_STATS_LOCAL; mode++) test_drop_aggregate_batchnorm((pfl_bn_mode)mode);
    test_everyone_drops();
    test_dropped_state_kept();
    test_fedtsdp_missing_clients();
    test_fedalp_waits_for_uploads();
    const char *names[] = {"sample", "bad", "run", "final_a", "final_b", "fedavg", "hostile"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[128];
        path_in_dir(path, sizeof path, names[i]);
        unlink(path);
    }
    rmdir(dir);
    TEST_MAIN_END();
}
