/* A run's state behind a valid checksum. The input's first byte picks a run
 * (every algorithm, FedProx with ALA, FedAvg with FLAYER's modules) on a
 * tiny federation (a 2-layer perceptron, 35 parameters, on 1x2x2 images of
 * 3 classes; 4 clients; tests/tiny.h's data and partition), small enough
 * that a whole checkpoint is a few hundred bytes;
 * the rest is the checkpoint's section list, which the harness wraps in the
 * header, end marker, SHA-256 and length pfl writes, so every input gets past
 * the checksum. pfl_fl_load then reads it into the run, and a state it
 * accepts must be one the run can go on from: the harness runs the rounds
 * left. Seeds are the sections real runs save (fuzz/make_seeds.c). */
#include <string.h>

#include "algos/algos.h"
#include "fuzz.h"
#include "tiny.h"
#include "util/ckpt.h"
#include "util/sha256.h"

#define FUZZ_CKPT_NO_ENTRY
#include "ckpt.c"

enum { CLIENTS = 4, ROUNDS = 2 };
static const int n_train[CLIENTS] = {6, 5, 7, 5}, n_test[CLIENTS] = {2, 3, 2, 2};

int fuzz_run_count(void);
pfl_config fuzz_run_config(int which, const pfl_algo **algo, int *public_samples);
int fuzz_run_start(tiny_fed *f, int which);

/* 1x2x2 -> 4 -> 3: two layers, so head and base are both there */
static int tiny_model(pfl_model *m) {
    return pfl_model_begin(m, "fuzz-tiny", 1, 2, 2, 3) || pfl_model_linear(m, "fc1", 4) || pfl_model_relu(m) ||
                   pfl_model_linear(m, "fc2", 3) || pfl_model_finish(m)
               ? -1
               : 0;
}

int fuzz_run_count(void) {
    int n = 0;
    while (pfl_algos[n]) n++;
    return n + 2;
}

/* Runs 0-13 are the first 14 methods, 14 and 15 the module runs, then the methods added since
 * (issue 15 on): the committed seeds keep naming the runs they were made for. */
enum { MODULE_RUN = 14 };

/* The configuration of run `which` (as tests/test_checkpoint.c's resume cases). */
pfl_config fuzz_run_config(int which, const pfl_algo **algo, int *public_samples) {
    const int algos = MODULE_RUN;
    pfl_config c = tiny_config(CLIENTS);
    *algo = which < algos ? pfl_algos[which] : which == algos ? &pfl_algo_fedprox : which == algos + 1 ? &pfl_algo_fedavg
                                                                                                     : pfl_algos[which - 2];
    *public_samples = 0;
    c.rounds = ROUNDS, c.join = 0.75, c.eval_every = 1, c.threads = 1, c.momentum = 0.5f;
    pfl_algo_params *a = &c.algo;
    a->mu = 0.01f, a->lambda = 0.1f;
    a->amp_alpha = 1e4f, a->amp_sigma = 1e6f, a->amp_lambda = 1.0f, a->cfr_layers = 1;
    a->groups = 2, a->beta = 0.6f, a->warmup = 1;
    a->pfedme_k = 2, a->pfedme_lambda = 15.0f, a->pfedme_lr = 0.01f, a->pfedme_beta = 0.5f;
    a->cfl_eps1 = 1e9f, a->cfl_eps2 = 0.0f, a->cfl_warmup = 1;
    a->tsdp_public_batch = 6, a->tsdp_eps1 = 0.15f, a->tsdp_eps2 = 3.5f, a->tsdp_min_pts = 2, a->tsdp_h_th = 0.0f;
    a->tsdp_psi = 0.7f;
    a->fomo_val = 0.25f, a->apple_dr_lr = 0.01f, a->apple_mu = 0.1f, a->apple_l = 0.5f; /* issue 15 */
    a->pf_tau = 5.0f, a->pf_tau_decay = 0.965f, a->pf_fm = 2, a->pf_fs = 1, a->pf_lr = 1.0f;
    pfl_modules_config *mod = &c.modules;
    mod->ala_p = 1, mod->ala_s = 80, mod->ala_eta = 1.0f, mod->ala_threshold = 10.0f, mod->ala_max_epochs = 12; /* converges after the 10 it judges on */
    a->ft_epochs = 1, a->perfedavg_steps = 1, a->php_mu = 0.9f, a->php_lambda = 0.01f;
    a->gpfl_lambda = 0.01f, a->gpfl_mu = 0.1f; /* issue 16: GPFL's magnitude guidance and weight decay on */
    if (*algo == &pfl_algo_perfedavg) c.momentum = 0.0f; /* Per-FedAvg's steps are plain gradient steps */
    if (*algo == &pfl_algo_cfl || *algo == &pfl_algo_fedtsdp || *algo == &pfl_algo_apple) c.join = 1.0;
    if (*algo == &pfl_algo_fedtsdp) *public_samples = 10, a->tsdp_public = 10;
    if (which == algos) mod->ala = true;
    if (which == algos + 1) mod->flayer_agg = mod->flayer_lr = mod->flayer_mask = true;
    return c;
}

/* Creates run `which` in f (freed with tiny_fed_free). */
int fuzz_run_start(tiny_fed *f, int which) {
    const pfl_algo *algo;
    int public_samples;
    pfl_config cfg = fuzz_run_config(which, &algo, &public_samples);
    memset(f, 0, sizeof *f);
    if (tiny_model(&f->m)) fuzz_fail("model", pfl_errmsg());
    int total = public_samples;
    for (int k = 0; k < CLIENTS; k++) total += n_train[k] + n_test[k];
    f->d = tiny_dataset(total, 1, 2, 2, 3, 5);
    f->part = tiny_partition(CLIENTS, n_train, n_test);
    if (pfl_fl_create(&f->fl, &cfg, &f->m, &f->d, &f->part, algo)) fuzz_fail("create", pfl_errmsg());
    return 0;
}

static void le64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* The file pfl_ckpt_commit would write around these section bytes. */
static uint8_t *wrap_sections(const uint8_t *sections, size_t n, size_t *len) {
    static const uint8_t head[12] = {'P', 'F', 'L', 'C', 'K', 'P', 'T', 0, PFL_CKPT_VERSION, 0, 0, 0};
    *len = 28 + n + 4 + 32;
    uint8_t *f = calloc(1, *len);
    memcpy(f, head, 12);
    le64(f + 12, *len);
    le64(f + 20, ~(uint64_t)*len);
    if (n) memcpy(f + 28, sections, n);
    pfl_sha256 s;
    pfl_sha256_init(&s);
    pfl_sha256_update(&s, f, 12);
    pfl_sha256_update(&s, f + 28, n + 4);
    pfl_sha256_final(&s, f + 28 + n + 4);
    return f;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    char path[512];
    fuzz_path(path, sizeof path, "checkpoint");
    size_t len;
    uint8_t *file = wrap_sections(data + 1, size - 1, &len);
    fuzz_write(path, file, len);
    free(file);
    pfl_ckpt_reader r;
    if (pfl_ckpt_open(&r, path) != 0) {
        fuzz_check_message(path);
        return 0;
    }
    fuzz_read_sections(&r);
    tiny_fed f;
    fuzz_run_start(&f, data[0] % fuzz_run_count());
    if (pfl_fl_load(&f.fl, &r) == 0) {
        if (f.fl.round < 0 || f.fl.round > f.fl.cfg.rounds || f.fl.train_samples < 0 || !(f.fl.train_seconds >= 0))
            fuzz_fail("fl load", "accepted an impossible round, sample count or time");
        if (pfl_fl_run(&f.fl, NULL, NULL) != 0) fuzz_check_message("");
    } else {
        fuzz_check_message(path);
    }
    pfl_ckpt_close(&r);
    tiny_fed_free(&f);
    return 0;
}
