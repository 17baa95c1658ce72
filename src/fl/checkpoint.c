/* The state of a run in a checkpoint (pfl_fl_save, pfl_fl_load): what
 * changes from round to round, and the shape of the federation to check that
 * a checkpoint is read back into the same one. Scratch (worker buffers,
 * upload slots, FLAYER's per-round masks) is rebuilt every round and is not
 * saved; random streams are keyed by (seed, round, client, purpose), so a
 * resumed run draws what the uninterrupted one would. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* ---- MPI: the client ranks' files ----
 *
 * Under MPI a client's own state (its rows in the per-client stores) is on
 * its home rank only. At a checkpoint each client rank writes its clients'
 * rows to a file of its own, DIR/checkpoint.ROUND.RANK-of-P, committed
 * (written whole, then renamed into place) before rank 0 writes
 * DIR/checkpoint, which names them by their checksums, last. A crash at any
 * moment leaves the previous DIR/checkpoint with the files it names (the
 * files of a new one have other names until it replaces them). Loading,
 * each rank reads DIR/checkpoint, then from the files the rows of the
 * clients it keeps now: any number of ranks can go on from any number. */

struct pfl_shards {
    int round, ranks;
    int *home_first;       /* ranks + 1: whose clients each file holds */
    uint8_t *digests;      /* 32 per rank: its file's checksum */
    bool *files;           /* per rank: it wrote a file */
    long *ala;             /* --ala: every client's started flag, start epochs and the bits of its start seconds */
};

void pfl_fl_free_shards(pfl_fl *fl) {
    if (!fl->shards) return;
    free(fl->shards->home_first);
    free(fl->shards->digests);
    free(fl->shards->files);
    free(fl->shards->ala);
    free(fl->shards);
    fl->shards = NULL;
}

static int shard_path(char *out, size_t size, const char *dir, int round, int rank, int ranks) {
    if (snprintf(out, size, "%s/checkpoint.%d.%d-of-%d", dir, round, rank, ranks) >= (int)size)
        return pfl_err("%s: path too long", dir);
    return 0;
}

/* The per-client stores: the client store, the after-train models, the method's. */
static int client_stores(const pfl_fl *fl, pfl_store **out) {
    int n = 0;
    if (fl->client_state) out[n++] = fl->client_state;
    if (fl->trained) out[n++] = fl->trained;
    for (int i = 0; i < fl->num_algo_stores; i++) out[n++] = fl->algo_stores[i];
    return n;
}

/* This rank's file: the rows of the clients it keeps in every per-client store. */
static int write_shard(const pfl_fl *fl, const char *path, uint8_t digest[32]) {
    const int rank = fl->cfg.transport->rank, first = fl->home_first[rank], end = fl->home_first[rank + 1];
    pfl_store *stores[2 + PFL_FL_MAX_STORES];
    const int n = client_stores(fl, stores);
    const int who[4] = {fl->round, rank, fl->cfg.transport->size, fl->cfg.clients};
    pfl_ckpt_writer w;
    if (pfl_ckpt_begin(&w, path)) return -1;
    int rc = pfl_ckpt_put_i32(&w, "shard.of", who, 4);
    for (int i = 0; i < n && rc == 0; i++) rc = pfl_store_save_range(stores[i], &w, pfl_store_name(stores[i]), first, end);
    if (rc) {
        pfl_ckpt_abort(&w);
        return -1;
    }
    if (pfl_ckpt_commit(&w)) return -1;
    memcpy(digest, w.digest, 32);
    return 0;
}

/* --ala: each client's figures are on its home; rank 0 gets them all (an
 * integer sum where one rank adds a value and every other zero is that
 * value, the seconds' bits included). */
static int gather_ala(pfl_fl *fl, struct pfl_shards *sh) {
    const int N = fl->cfg.clients;
    if (!fl->ala_started) return 0;
    if (!(sh->ala = pfl_calloc(3 * (size_t)N, sizeof(long)))) return -1;
    for (int c = 0; c < N; c++) {
        if (!pfl_fl_at_home(fl, c)) continue;
        sh->ala[c] = fl->ala_started[c], sh->ala[N + c] = fl->ala_start_epochs[c];
        memcpy(&sh->ala[2 * N + c], &fl->ala_start_seconds[c], sizeof(double));
    }
    return pfl_transport_sum_longs(fl->cfg.transport, sh->ala, 3 * (size_t)N);
}

/* Rank 0's DIR to every rank (the others have no --out). */
static int share_dir(pfl_transport *t, const char *dir, char *out, size_t size) {
    long len = t->rank == 0 ? (long)strlen(dir) : 0;
    if (len >= (long)size) return pfl_err("%s: path too long", dir);
    if (t->rank == 0) memcpy(out, dir, (size_t)len + 1);
    if (pfl_transport_share(t, &len, sizeof len, 0) || pfl_transport_share(t, out, (size_t)len + 1, 0)) return -1;
    return 0;
}

int pfl_fl_save_shards(pfl_fl *fl, const char *dir) {
    pfl_transport *t = fl->cfg.transport;
    pfl_fl_free_shards(fl);
    if (!pfl_transport_distributed(t)) return 0;
    const int P = t->size;
    struct pfl_shards *sh = pfl_calloc(1, sizeof *sh);
    char where[4096], path[4200];
    pfl_store *stores[2 + PFL_FL_MAX_STORES];
    const bool any = client_stores(fl, stores) > 0;
    /* per rank: 4 longs of its file's checksum, and 1 (wrote one) or -1 (failed) */
    long *v = pfl_calloc(5 * (size_t)P, sizeof(long));
    int rc = sh && v ? 0 : -1;
    if (rc == 0) {
        fl->shards = sh;
        sh->round = fl->round, sh->ranks = P;
        rc = !(sh->home_first = pfl_malloc(sizeof(int) * (size_t)(P + 1))) ||
                     !(sh->digests = pfl_calloc((size_t)P, 32)) || !(sh->files = pfl_calloc((size_t)P, sizeof(bool)))
                 ? -1
                 : 0;
    }
    if (rc == 0) memcpy(sh->home_first, fl->home_first, sizeof(int) * (size_t)(P + 1));
    const pfl_tally was = t->tally;
    t->tally = PFL_TALLY_OTHER;
    if (rc == 0) rc = share_dir(t, dir, where, sizeof where);
    if (rc == 0 && any && t->rank > 0) {
        uint8_t digest[32];
        const bool ok = shard_path(path, sizeof path, where, fl->round, t->rank, P) == 0 &&
                        write_shard(fl, path, digest) == 0;
        if (ok) memcpy(&v[4 * t->rank], digest, 32);
        v[4 * P + t->rank] = ok ? 1 : -1;
        if (!ok) fprintf(stderr, "pfl: rank %d: %s\n", t->rank, pfl_errmsg()); /* rank 0 reports the failure */
    }
    /* every rank learns whether each file is in place */
    if (pfl_transport_sum_longs(t, v, 5 * (size_t)P) || gather_ala(fl, sh)) rc = -1;
    t->tally = was;
    for (int r = 1; r < P && rc == 0; r++) {
        if (v[4 * P + r] < 0) rc = pfl_err("rank %d could not write its part of the checkpoint in %s", r, where);
        sh->files[r] = v[4 * P + r] > 0;
        memcpy(sh->digests + 32 * (size_t)r, &v[4 * r], 32);
    }
    free(v);
    if (!fl->shards) free(sh);
    return rc;
}

/* Whether `name` is the file of a checkpoint's rank ("checkpoint.ROUND.RANK-of-P", or its .tmp). */
static bool is_shard_name(const char *name) {
    return strncmp(name, "checkpoint.", 11) == 0 && name[11] >= '0' && name[11] <= '9';
}

void pfl_fl_remove_old_shards(const pfl_fl *fl, const char *dir) {
    const struct pfl_shards *sh = fl->shards && fl->shards->round == fl->round ? fl->shards : NULL;
    DIR *d = opendir(dir);
    if (!d) return; /* nothing to tidy that can be seen */
    char keep[4200], path[4200];
    for (struct dirent *e; (e = readdir(d));) {
        if (!is_shard_name(e->d_name)) continue;
        bool named = false;
        for (int r = 1; sh && r < sh->ranks && !named; r++)
            if (sh->files[r] && shard_path(keep, sizeof keep, dir, sh->round, r, sh->ranks) == 0)
                named = strcmp(strrchr(keep, '/') + 1, e->d_name) == 0;
        if (!named && snprintf(path, sizeof path, "%s/%s", dir, e->d_name) < (int)sizeof path) unlink(path);
    }
    closedir(d);
}

/* What DIR/checkpoint says of the files beside it (rank 0 writes it). */
static int save_shard_index(const pfl_fl *fl, pfl_ckpt_writer *w) {
    const struct pfl_shards *sh = fl->shards;
    if (!sh || sh->round != fl->round) return 0; /* one process: no files */
    return pfl_ckpt_put_int(w, "mpi.ranks", sh->ranks) ||
                   pfl_ckpt_put_i32(w, "mpi.homes", sh->home_first, (size_t)sh->ranks + 1) ||
                   pfl_ckpt_put_bool(w, "mpi.files", sh->files, (size_t)sh->ranks) ||
                   pfl_ckpt_put(w, "mpi.digests", sh->digests, 32 * (size_t)sh->ranks)
               ? -1
               : 0;
}

/* The directory of a checkpoint file's path. */
static void dir_of(char *out, size_t size, const char *path) {
    snprintf(out, size, "%s", path);
    char *slash = strrchr(out, '/');
    if (!slash) snprintf(out, size, ".");
    else if (slash == out) out[1] = '\0';
    else *slash = '\0';
}

/* One rank's file of the checkpoint `r`: checked against the checksum `r`
 * names it by, then its rows of the clients this rank keeps. */
static int load_shard(pfl_fl *fl, const pfl_ckpt_reader *r, int round, int rank, int ranks, const int *homes,
                      const uint8_t *digest) {
    char dir[4096], path[4200];
    dir_of(dir, sizeof dir, r->path);
    if (shard_path(path, sizeof path, dir, round, rank, ranks)) return -1;
    pfl_ckpt_reader sr;
    if (pfl_ckpt_open(&sr, path)) return -1;
    int rc = 0, who[4];
    if (memcmp(sr.digest, digest, 32) != 0)
        rc = pfl_err("%s: not the file %s was written with (its checksum differs)", path, r->path);
    else if (pfl_ckpt_get_i32(&sr, "shard.of", who, 4)) rc = -1;
    else if (who[0] != round || who[1] != rank || who[2] != ranks || who[3] != fl->cfg.clients)
        rc = pfl_err("%s: written as rank %d of %d at round %d for %d clients", path, who[1], who[2], who[0], who[3]);
    pfl_store *stores[2 + PFL_FL_MAX_STORES];
    const int n = client_stores(fl, stores), me = pfl_transport_distributed(fl->cfg.transport) ? fl->cfg.transport->rank : 0;
    for (int i = 0; i < n && rc == 0; i++)
        rc = pfl_store_load_range(stores[i], &sr, pfl_store_name(stores[i]), homes[rank], homes[rank + 1],
                                  fl->home_first[me], fl->home_first[me + 1]);
    pfl_ckpt_close(&sr);
    return rc;
}

/* After the rest of pfl_fl_load: the rows of this rank's clients from the
 * files of the ranks that kept them when the checkpoint was written. */
static int load_shards(pfl_fl *fl, pfl_ckpt_reader *r, int round) {
    if (!pfl_ckpt_has(r, "mpi.ranks")) return 0; /* written by one process: all in this file */
    int64_t ranks;
    if (pfl_ckpt_get_int(r, "mpi.ranks", &ranks)) return -1;
    if (ranks < 2 || ranks > 1 << 20) return pfl_err("%s: mpi.ranks %lld is not a process count", r->path, (long long)ranks);
    const int P = (int)ranks, N = fl->cfg.clients;
    int *homes = pfl_malloc(sizeof(int) * (size_t)(P + 1));
    bool *files = pfl_malloc(sizeof(bool) * (size_t)P);
    uint8_t *digests = pfl_malloc(32 * (size_t)P);
    int rc = homes && files && digests ? 0 : -1;
    if (rc == 0 && (pfl_ckpt_get_i32(r, "mpi.homes", homes, (size_t)P + 1) ||
                    pfl_ckpt_get_bool(r, "mpi.files", files, (size_t)P) ||
                    pfl_ckpt_get(r, "mpi.digests", digests, 32 * (size_t)P)))
        rc = -1;
    for (int k = 0; k < P && rc == 0; k++)
        if (homes[0] != 0 || homes[P] != N || homes[k] > homes[k + 1])
            rc = pfl_err("%s: mpi.homes does not split %d clients into %d blocks", r->path, N, P);
    const int me = pfl_transport_distributed(fl->cfg.transport) ? fl->cfg.transport->rank : 0;
    const int first = fl->home_first[me], end = fl->home_first[me + 1];
    for (int k = 1; k < P && rc == 0; k++) /* the files that hold some of this rank's clients */
        if (files[k] && homes[k] < end && homes[k + 1] > first)
            rc = load_shard(fl, r, round, k, P, homes, digests + 32 * (size_t)k);
    free(homes);
    free(files);
    free(digests);
    return rc;
}

/* ---- the run ---- */

/* --ala: per client whether its weights were trained once, and its start
 * phase's epochs and wall time (the summary reports them: FedALA's Table 3
 * times the start phase apart). Under MPI from the clients' homes, which
 * pfl_fl_save_shards gathered for rank 0. */
static int save_ala(const pfl_fl *fl, pfl_ckpt_writer *w) {
    const size_t N = (size_t)fl->cfg.clients;
    const struct pfl_shards *sh = fl->shards && fl->shards->round == fl->round ? fl->shards : NULL;
    const long *gathered = sh ? sh->ala : NULL;
    bool *started = pfl_malloc(sizeof(bool) * N);
    int *epochs = pfl_malloc(sizeof(int) * N);
    double *seconds = pfl_malloc(sizeof(double) * N);
    int rc = -1;
    if (started && epochs && seconds) {
        for (size_t c = 0; c < N; c++) {
            started[c] = gathered ? gathered[c] != 0 : fl->ala_started[c];
            epochs[c] = (int)(gathered ? gathered[N + c] : fl->ala_start_epochs[c]);
            if (gathered) memcpy(&seconds[c], &gathered[2 * N + c], sizeof(double));
            else seconds[c] = fl->ala_start_seconds[c];
        }
        rc = pfl_ckpt_put_bool(w, "ala.started", started, N) || pfl_ckpt_put_i32(w, "ala.start_epochs", epochs, N) ||
                     pfl_ckpt_put_f64(w, "ala.start_seconds", seconds, N)
                 ? -1
                 : 0;
    }
    free(started);
    free(epochs);
    free(seconds);
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
        pfl_ckpt_put(w, "fl.data_sha256", fl->data_sha256, 32) ||
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
    if (fl->ala_started && save_ala(fl, w)) return -1;
    if (fl->algo->save && fl->algo->save(fl, w)) return -1;
    return save_shard_index(fl, w);
}

/* The data loaded now is the data the checkpoint's run trained on (its
 * SHA-256; a checkpoint of an older pfl has none): other pixels under the
 * same labels and clients would mix two datasets in one run unnoticed.
 * --allow-data-change (fl->cfg.allow_data_change) takes it with a warning. */
static int check_same_data(const pfl_fl *fl, pfl_ckpt_reader *r) {
    if (!pfl_ckpt_has(r, "fl.data_sha256")) return 0;
    uint8_t stored[32];
    if (pfl_ckpt_get(r, "fl.data_sha256", stored, 32)) return -1;
    if (memcmp(stored, fl->data_sha256, 32) == 0) return 0;
    char was[13], now[13];
    for (int i = 0; i < 6; i++) snprintf(was + 2 * i, 3, "%02x", stored[i]), snprintf(now + 2 * i, 3, "%02x", fl->data_sha256[i]);
    if (fl->cfg.allow_data_change) {
        fprintf(stderr, "[pfl] WARNING: %s: the data loaded now (SHA-256 %s...) is not the data the run trained on "
                        "(%s...): going on with it (--allow-data-change)\n", r->path, now, was);
        return 0;
    }
    return pfl_err("%s: the data loaded now (SHA-256 %s...) is not the data the run trained on (%s...): put its files "
                   "back, or pfl resume --allow-data-change goes on with this data", r->path, now, was);
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
    return check_same_data(fl, r);
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
    /* the client store and --eval-moment after-train's models: the rows of the clients this rank keeps */
    const int me = pfl_transport_distributed(fl->cfg.transport) ? fl->cfg.transport->rank : 0;
    const int first = fl->home_first[me], end = fl->home_first[me + 1];
    if (fl->client_state && pfl_store_load_range(fl->client_state, r, "fl.clients", 0, (int)N, first, end)) return -1;
    if (fl->trained && pfl_store_load_range(fl->trained, r, "fl.trained", 0, (int)N, first, end)) return -1;
    if (fl->ala_started && (pfl_ckpt_get_bool(r, "ala.started", fl->ala_started, N) || load_ala_start(fl, r)))
        return -1;
    if (fl->algo->load && fl->algo->load(fl, r)) return -1;
    if (load_shards(fl, r, (int)round)) return -1;
    /* MPI: a client's ALA figures count on its home only (the run sums them over the ranks) */
    for (size_t c = 0; fl->ala_started && c < N; c++)
        if (!pfl_fl_at_home(fl, (int)c)) fl->ala_started[c] = false, fl->ala_start_epochs[c] = 0, fl->ala_start_seconds[c] = 0;
    return 0;
}
