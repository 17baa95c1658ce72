/* The state of a run in a checkpoint (pfl_fl_save, pfl_fl_load): what
 * changes from round to round, and the shape of the federation to check that
 * a checkpoint is read back into the same one. Scratch (worker buffers,
 * upload slots, FLAYER's per-round masks) is rebuilt every round and is not
 * saved; random streams are keyed by (seed, round, client, purpose), so a
 * resumed run draws what the uninterrupted one would. */
#include <stdlib.h>
#include <string.h>

#include "fl/fl.h"
#include "fl/loop.h"
#include "modules/modules.h"
#include "util/err.h"
#include "util/sha256.h"

enum { SHAPE_PARAMS, SHAPE_LAYERS, SHAPE_CLIENTS, SHAPE_SAMPLES, SHAPE_C, SHAPE_H, SHAPE_W, SHAPE_CLASSES, SHAPE_LEN };

static void federation_shape(const pfl_fl *fl, int shape[SHAPE_LEN]) {
    shape[SHAPE_PARAMS] = (int)fl->model->num_params, shape[SHAPE_LAYERS] = pfl_model_rows(fl->model);
    shape[SHAPE_CLIENTS] = fl->cfg.clients, shape[SHAPE_SAMPLES] = fl->data->n;
    shape[SHAPE_C] = fl->data->c, shape[SHAPE_H] = fl->data->h, shape[SHAPE_W] = fl->data->w;
    shape[SHAPE_CLASSES] = fl->data->classes;
}

static void hash_ints_le(pfl_sha256 *s, const int *v, int n) {
    for (int i = 0; i < n; i++) {
        const uint32_t u = (uint32_t)v[i];
        const uint8_t le[4] = {(uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16), (uint8_t)(u >> 24)};
        pfl_sha256_update(s, le, 4);
    }
}

/* SHA-256 of the labels and of every client's train and test indices: a
 * resumed run must rebuild the very same clients. */
static void partition_digest(const pfl_fl *fl, uint8_t digest[32]) {
    pfl_sha256 s;
    pfl_sha256_init(&s);
    pfl_sha256_update(&s, fl->data->labels, (size_t)fl->data->n);
    for (int c = 0; c < fl->part->num_clients; c++) {
        const pfl_client_data *cd = &fl->part->clients[c];
        const int sizes[2] = {cd->n_train, cd->n_test};
        hash_ints_le(&s, sizes, 2);
        hash_ints_le(&s, cd->train, cd->n_train);
        hash_ints_le(&s, cd->test, cd->n_test);
    }
    pfl_sha256_final(&s, digest);
}

/* ---- the run ---- */

/* ALA's start phase per client, its epochs and wall time (the summary
 * reports them: FedALA's Table 3 times the start phase apart). */
static int save_ala_start(const pfl_fl *fl, pfl_ckpt_writer *w) {
    const size_t N = (size_t)fl->cfg.clients;
    int *epochs = pfl_malloc(sizeof(int) * N);
    if (!epochs) return -1;
    for (size_t c = 0; c < N; c++) epochs[c] = (int)fl->ala_start_epochs[c];
    const int rc = pfl_ckpt_put_i32(w, "ala.start_epochs", epochs, N) ||
                           pfl_ckpt_put_f64(w, "ala.start_seconds", fl->ala_start_seconds, N)
                       ? -1
                       : 0;
    free(epochs);
    return rc;
}

/* Checkpoints written before the start phase was recorded lack it: its
 * figures stay 0 (not run) for the clients that ran it before. */
static int load_ala_start(pfl_fl *fl, pfl_ckpt_reader *r) {
    const size_t N = (size_t)fl->cfg.clients;
    if (!pfl_ckpt_has(r, "ala.start_epochs")) return 0;
    int *epochs = pfl_malloc(sizeof(int) * N);
    int rc = -1;
    if (epochs && !pfl_ckpt_get_i32(r, "ala.start_epochs", epochs, N) &&
        !pfl_ckpt_get_f64(r, "ala.start_seconds", fl->ala_start_seconds, N)) {
        rc = 0;
        for (size_t c = 0; c < N && rc == 0; c++) {
            if (epochs[c] < 0 || !(fl->ala_start_seconds[c] >= 0 && fl->ala_start_seconds[c] <= 1e12))
                rc = pfl_err("%s: ala.start_epochs or ala.start_seconds of client %zu is not a count or a time",
                             r->path, c);
            fl->ala_start_epochs[c] = epochs[c];
        }
    }
    free(epochs);
    return rc;
}

int pfl_fl_save(const pfl_fl *fl, pfl_ckpt_writer *w) {
    /* models are whole vectors: parameters, then BatchNorm running statistics */
    const size_t V = pfl_model_vector_len(fl->model), N = (size_t)fl->cfg.clients;
    int shape[SHAPE_LEN];
    uint8_t digest[32];
    federation_shape(fl, shape);
    partition_digest(fl, digest);
    if (pfl_ckpt_put(w, "fl.algo", fl->algo->name, strlen(fl->algo->name)) ||
        pfl_ckpt_put_i32(w, "fl.shape", shape, SHAPE_LEN) || pfl_ckpt_put(w, "fl.partition_sha256", digest, 32) ||
        pfl_ckpt_put_int(w, "fl.round", fl->round) || pfl_ckpt_put_double(w, "fl.train_seconds", fl->train_seconds) ||
        pfl_ckpt_put_int(w, "fl.train_samples", fl->train_samples) ||
        pfl_ckpt_put_int(w, "fl.bytes_down", (int64_t)fl->bytes_down) ||
        pfl_ckpt_put_int(w, "fl.bytes_up", (int64_t)fl->bytes_up) || pfl_ckpt_put_f32(w, "fl.global", fl->global, V) ||
        pfl_ckpt_put_bool(w, "fl.shared", fl->shared, (size_t)pfl_model_rows(fl->model)) ||
        pfl_ckpt_put_f32(w, "fl.local_acc", fl->local_acc, N))
        return -1;
    /* the client store: the personal parts and ALA weights of the clients
     * written so far (the others are the initial model's) */
    if (fl->client_state && pfl_store_save(fl->client_state, w, "fl.clients")) return -1;
    if (fl->trained && pfl_store_save(fl->trained, w, "fl.trained")) return -1; /* --eval-moment after-train */
    if (fl->ala_started && (pfl_ckpt_put_bool(w, "ala.started", fl->ala_started, N) || save_ala_start(fl, w)))
        return -1;
    if (fl->algo->save && fl->algo->save(fl, w)) return -1;
    return 0;
}

/* The checkpoint was written by the same algorithm on the same federation. */
static int check_same_run(const pfl_fl *fl, pfl_ckpt_reader *r) {
    char algo[64] = "";
    uint64_t len;
    if (pfl_ckpt_length(r, "fl.algo", &len)) return -1;
    if (len >= sizeof algo || pfl_ckpt_get(r, "fl.algo", algo, (size_t)len) || strlen(algo) != len)
        return pfl_err("%s: bad fl.algo", r->path);
    if (strcmp(algo, fl->algo->name) != 0) {
        char shown[4 * sizeof algo];
        return pfl_err("%s: written by a %s run, not %s", r->path, pfl_quote(shown, sizeof shown, algo, len, 24),
                       fl->algo->name);
    }
    int shape[SHAPE_LEN], want[SHAPE_LEN];
    federation_shape(fl, want);
    if (pfl_ckpt_get_i32(r, "fl.shape", shape, SHAPE_LEN)) return -1;
    if (memcmp(shape, want, sizeof shape) != 0)
        return pfl_err("%s: written for %d parameters, %d clients and %d samples of %dx%dx%d; this run has %d, %d and "
                       "%d of %dx%dx%d",
                       r->path, shape[SHAPE_PARAMS], shape[SHAPE_CLIENTS], shape[SHAPE_SAMPLES], shape[SHAPE_C],
                       shape[SHAPE_H], shape[SHAPE_W], want[SHAPE_PARAMS], want[SHAPE_CLIENTS], want[SHAPE_SAMPLES],
                       want[SHAPE_C], want[SHAPE_H], want[SHAPE_W]);
    uint8_t stored[32], digest[32];
    partition_digest(fl, digest);
    if (pfl_ckpt_get(r, "fl.partition_sha256", stored, 32)) return -1;
    if (memcmp(stored, digest, 32) != 0)
        return pfl_err("%s: the clients rebuilt from its flags differ from the checkpoint's (other data files?)",
                       r->path);
    return 0;
}

int pfl_fl_load(pfl_fl *fl, pfl_ckpt_reader *r) {
    const size_t V = pfl_model_vector_len(fl->model), N = (size_t)fl->cfg.clients;
    if (check_same_run(fl, r)) return -1;
    int64_t round, samples;
    int64_t down = 0, up = 0; /* checkpoints written before the message counts lack them */
    if ((pfl_ckpt_has(r, "fl.bytes_down") && pfl_ckpt_get_int(r, "fl.bytes_down", &down)) ||
        (pfl_ckpt_has(r, "fl.bytes_up") && pfl_ckpt_get_int(r, "fl.bytes_up", &up)))
        return -1;
    if (down < 0 || up < 0) return pfl_err("%s: negative message byte counts", r->path);
    fl->bytes_down = (uint64_t)down, fl->bytes_up = (uint64_t)up;
    if (pfl_ckpt_get_int(r, "fl.round", &round) || pfl_ckpt_get_int(r, "fl.train_samples", &samples) ||
        pfl_ckpt_get_double(r, "fl.train_seconds", &fl->train_seconds))
        return -1;
    if (round < 0 || round > fl->cfg.rounds)
        return pfl_err("%s: round %lld is outside this run's 0..%d", r->path, (long long)round, fl->cfg.rounds);
    /* counters only grow from 0: a checkpoint pfl wrote never holds less */
    if (samples < 0) return pfl_err("%s: fl.train_samples is negative (%lld)", r->path, (long long)samples);
    if (!(fl->train_seconds >= 0 && fl->train_seconds <= 1e12))
        return pfl_err("%s: fl.train_seconds is not a time (%g)", r->path, fl->train_seconds);
    fl->round = (int)round, fl->train_samples = (long)samples, fl->resumed = true;
    if (pfl_ckpt_get_f32(r, "fl.global", fl->global, V) ||
        pfl_ckpt_get_bool(r, "fl.shared", fl->shared, (size_t)pfl_model_rows(fl->model)) ||
        pfl_ckpt_get_f32(r, "fl.local_acc", fl->local_acc, N))
        return -1;
    if (pfl_ckpt_has(r, "fl.client_models"))
        return pfl_err("%s: written by a pfl that kept whole client models (before the client store); it cannot be "
                       "resumed by this one",
                       r->path);
    if (fl->client_state && pfl_store_load(fl->client_state, r, "fl.clients")) return -1;
    if (fl->trained && pfl_store_load(fl->trained, r, "fl.trained")) return -1; /* --eval-moment after-train */
    if (fl->ala_started && (pfl_ckpt_get_bool(r, "ala.started", fl->ala_started, N) || load_ala_start(fl, r)))
        return -1;
    if (fl->algo->load && fl->algo->load(fl, r)) return -1;
    return 0;
}
