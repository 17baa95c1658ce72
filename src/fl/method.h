/* What a method sees of the round loop (docs/architecture.md, "A round, in
 * stages"): the run's configuration, the worker a client trains on, the
 * table of hooks a method fills (pfl_algo) and FedAvg's stages it may wrap,
 * the round loop's state a hook reads (pfl_fl), the clients' stored state
 * and the local step (fl/step.h). fl/fl.h adds what drives a run; fl/loop.h
 * what the round loop keeps to itself.
 *
 *   select clients -> local init -> local train -> upload -> aggregate -> evaluate
 *
 * An algorithm is a table of hooks (pfl_algo) for these stages; a NULL hook
 * means FedAvg's behaviour, available as pfl_default_* so an algorithm can
 * wrap it. Selected clients train in parallel, one worker (executor, model
 * copies, gradient buffers) per thread; every random draw comes from a
 * stream keyed by (seed, round, client, purpose), and uploads are reduced in
 * client order, so the numbers do not depend on the thread count. */
#ifndef PFL_FL_METHOD_H
#define PFL_FL_METHOD_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h> /* the report hook */

#include "fl/state.h"
#include "fl/step.h" /* local training */

struct pfl_algo {
    const char *name;
    const char *description;
    /* The method's own flags (util/params.h), with the method's defaults: its
     * paper's values, or FedALA's appendix for a baseline (docs/algorithms.md,
     * "Defaults"). Each sets a field of pfl_algo_params (PFL_BLOCK_ALGO), or,
     * for a method registered at run time whose parameters have no field
     * there, a named number read with pfl_fl_param (PFL_BLOCK_EXTRA). A flag
     * no table of the run declares is refused. */
    const pfl_param *params;
    int num_params;
    /* Defaults of flags every run has that this method sets otherwise, as
     * name, value pairs ending with NULL: (const char *const[]){"public",
     * "test", NULL}; NULL: none. */
    const char *const *run_defaults;
    unsigned modules;     /* PFL_MODULE_* bits added to the configuration */
    /* True when the algorithm has a global model that means something to
     * evaluate (false for `local`, whose "global" vector is never trained). */
    bool has_global;
    /* True when each client keeps a local model between rounds (its
     * personalized model). Modules that mix global and local models make
     * any algorithm stateful. */
    bool stateful;
    /* Stateful only: at a broadcast, without a local-init module, the state
     * stays as it is (Ditto's personal model, Local's model) instead of
     * becoming the received model. Needs the whole model personal
     * (`personal` NULL). */
    bool keeps_state;
    /* Stateful only: which parts of its model vector a client keeps between
     * rounds, its personal state, which is all the client store holds
     * (DESIGN.md §3): per layer, params[l] its parameters and stats[l] its
     * BatchNorm running statistics (both arrays come all false). NULL: the
     * whole model (Ditto's v, Local's model, FedAMP's w_i, pFedMe's theta,
     * FedTSDP's model, whose shared prefix shrinks as it trains).
     * pfl_personal_unshared marks the layers the method does not share
     * (FedPer's head). The round loop adds what --bn keeps local and what
     * the local-init modules mix (ALA's top p layers, FLAYER's head).
     *
     * A client's model is then built when it is needed (local init,
     * evaluation) as what `receive` sends it now, with its personal parts
     * written over it (pfl_client_model_get). So the personal parts are the
     * ones a broadcast without a module leaves as they are: `receive` reads
     * from `state` only those, and completes `received` with them where the
     * method sends nothing. */
    void (*personal)(const pfl_fl *fl, bool *params, bool *stats);
    /* How a round's uploads meet under MPI (docs/architecture.md,
     * "Processes"). false: `aggregate` reads the uploads only through
     * pfl_default_aggregate (or its uniform and plain variants), called
     * once, and pfl_slot_sum, on every rank alike (it may then change the
     * global model and its own state from what it holds, as pFedMe's mix
     * does): the sums run from rank to rank, a reduction, and no rank
     * receives another's upload. true: it reads
     * every float of each upload (clustering, message passing and
     * similarity compare or fuse whole models), so every upload travels
     * whole to every rank, a gather. */
    bool whole_uploads;
    /* With whole_uploads: `aggregate` reads only the shared rows of each
     * upload (fl->shared: the prototypes' message block, a global head),
     * so the gather sends those alone, not the model each client keeps. */
    bool gather_shared;
    /* Extra parameter blocks (docs/architecture.md): appends to `m`, a copy
     * of the run's model the run then uses (fl->model), the blocks the method
     * adds beside the backbone (pfl_model_add_block), before anything is
     * allocated; each block's `personal` rule makes it shared (averaged, sent)
     * or kept by each client. NULL: none. 0, or -1 with a message. */
    int (*blocks)(const pfl_config *cfg, pfl_model *m);
    /* Personalized evaluation of a method whose blocks change what the
     * network computes from its features (FedCP's gate and two heads): after
     * the backbone's forward through `params` of the batch in `x`, how many
     * its own output classifies correctly. NULL: the backbone's logits. */
    int (*personal_correct)(const pfl_fl *fl, pfl_exec *x, const float *params);
    /* Allocates algorithm state after the global model is initialized, and
     * may mark layers as not shared (fl->shared). */
    int (*create)(pfl_fl *fl);
    /* Refuses a configuration the method cannot run (APPLE's
     * --join below 1, a module FedFomo or APPLE cannot take), before
     * anything is made or written: -1 with one line naming the flag and why.
     * The command line calls it once the flags are parsed (a usage error,
     * exit 2), pfl_fl_create before it creates anything. NULL: none. */
    int (*check)(const pfl_config *cfg);
    void (*destroy)(pfl_fl *fl);
    /* Stateful only, at every broadcast: writes into `received` what the
     * method sends the client, completed with its own `state` where the
     * method sends nothing (default: the global model; FedPer: global base,
     * own head; FedAMP: its cloud model u_i). The local-init modules mix
     * with this, so it must be what the method really sends. `state` is a
     * whole vector whose personal parts (`personal`) are the client's; it
     * must read no other part. */
    void (*receive)(pfl_fl *fl, int client, const float *state, float *received);
    /* Fills `model` (the worker's buffer) with the starting point of local
     * training (default: the client's state when stateful, else the global model). */
    void (*local_init)(pfl_fl *fl, int client, float *model);
    /* Trains `model` on the client's training split. */
    void (*local_train)(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats);
    /* Stateful only, after training: updates the client's state, a whole
     * vector of which the store keeps the personal parts (default: state =
     * trained model). */
    void (*finish)(pfl_fl *fl, int client, const float *model, float *state);
    /* Writes what the client sends to the server into `upload` (a model vector). */
    void (*upload)(pfl_fl *fl, int client, const float *model, float *upload);
    /* Combines the round's uploads (default: pfl_default_aggregate). */
    void (*aggregate)(pfl_fl *fl, const int *clients, int n, float *const *uploads);
    /* The client's personalized model for evaluation: returns a pointer to
     * its model vector, using `scratch` (a model vector) if it must build it
     * (default: its state when stateful, else the global model). `scratch`
     * is the `model` of the calling thread's worker (pfl_fl_worker_here),
     * whose other buffers the hook may use too (Per-FedAvg's and FedAvg-C's
     * local steps). */
    const float *(*personal_model)(pfl_fl *fl, int client, float *scratch);
    /* Optional output of the method's own (util/report.h): PFL_REPORT_METRICS
     * JSON fields appended to the round's metrics.jsonl line (`,"key":value`);
     * PFL_REPORT_SUMMARY the same for summary.json (`,\n  "key": value`; its
     * parameters are written from `params`, not here); PFL_REPORT_TEXT words
     * appended to a round's progress line; PFL_REPORT_FINAL whole lines after
     * the last one. The experiment (src/run/) calls it; nothing else knows
     * what a method reports. */
    void (*report)(const pfl_fl *fl, FILE *f, int what);
    /* The bytes of one round's messages with `client`, as the method defines
     * them: to the client (*down) and from it (*up). `sent` is the client's
     * upload mask when FLAYER's mask is on, else NULL; `upload` the upload
     * its hook just wrote, for a method whose messages' size depends on what
     * they hold (FedKD's compression). Called by the rank that trained the
     * client, after the upload hook and before the round's aggregation (the
     * server state it reads is the last aggregation's). NULL hook:
     * pfl_default_message_bytes. The round loop sums it over the clients
     * that trained (metrics bytes_down/bytes_up, summary per round). */
    void (*message_bytes)(const pfl_fl *fl, int client, const uint8_t *sent, const float *upload, uint64_t *down,
                          uint64_t *up);
    /* Checkpoints: `save` writes every part of algo_state that changes
     * during a run, as named sections ("<algo name>.<part>"); `load` reads
     * them back into the state `create` just made for the same
     * configuration. NULL: nothing changes (pfl_fl_save has the rest).
     * Under MPI rank 0 writes them: what a client's own hooks (local_init,
     * local_train, finish, receive) write must be in a per-client store
     * (pfl_fl_store), which each client's home rank saves for it; plain
     * arrays in algo_state must be server state, the same on every rank. */
    int (*save)(const pfl_fl *fl, pfl_ckpt_writer *w);
    int (*load)(pfl_fl *fl, pfl_ckpt_reader *r);
};

/* The clients a round selects: round(join * N), at least 1. */
int pfl_clients_per_round(const pfl_config *cfg);

/* ---- FedAvg's stages, for algorithms to call or wrap ---- */

void pfl_default_local_init(pfl_fl *fl, int client, float *model);
/* pfl_step_run with pfl_step_default. */
void pfl_default_local_train(pfl_fl *fl, int client, pfl_worker *w, float *model, pfl_train_stats *stats);
void pfl_default_upload(pfl_fl *fl, int client, const float *model, float *upload);
/* Weighted mean of the uploads by the clients' training sample counts, for
 * the shared layers only (the others keep the previous global values), and
 * of the running statistics where --bn shares them. With upload masks, each
 * element is the weighted mean over the clients that sent it, or keeps its
 * previous global value when none did (or, with flayer_mask_literal, the
 * plain weighted mean with unsent elements as 0). Under MPI, for a method
 * that does not gather (whole_uploads false), a collective: each rank passes
 * only its own uploads (the others NULL) and the sum runs along the ranks,
 * to the same bits as in one process (stages.c). */
void pfl_default_aggregate(pfl_fl *fl, const int *clients, int n, float *const *uploads);
/* The same with the shared parameters' mean uniform, each upload weighing
 * 1/n (1 among the senders of an element under FLAYER's mask), added in
 * slot order; the running statistics still by training samples. SCAFFOLD's,
 * FedDyn's and FedNTD's server mean (PFLlib's). A reduction under MPI, as
 * pfl_default_aggregate. */
void pfl_uniform_aggregate(pfl_fl *fl, const int *clients, int n, float *const *uploads);
/* The plain mean of the uploads, every shared element (running statistics
 * too) summed in double over the uploads that sent it (FLAYER's mask: over
 * its senders, whatever --flayer-mask-literal says), each upload weighing
 * alike: FML's server (PFLlib: "use 1/len(self.uploaded_models) as the
 * weight for privacy and fairness"). A reduction under MPI, the double sums
 * and weights travelling along the ranks. */
void pfl_plain_mean_aggregate(pfl_fl *fl, const int *clients, int n, float *const *uploads);
/* The same for the shared running statistics alone (FedKD's server, whose
 * parameters are the mean of what it decompresses, a pfl_slot_sum). */
void pfl_plain_mean_statistics(pfl_fl *fl, const int *clients, int n, float *const *uploads);

/* A method's own sum over the round's upload slots, for server state that
 * is such a sum (SCAFFOLD's c, FedDyn's h): `add` adds slot k's part to
 * `acc`, a model-long vector, within `spans`, each element in slot order.
 * In one process it is called for k = 0..n-1. Under MPI, for a method that
 * does not gather (whole_uploads false), a collective: a rank calls it for
 * its own slots only (the others' uploads it does not hold) on the running
 * sum it receives from the rank before, passes it on, and the last rank's
 * sum goes to every rank, so every rank's acc is the one-process bits. acc
 * starts as the caller sets it, the same on every rank (zero). 0, or -1 with
 * a message (the round then fails). */
typedef void (*pfl_slot_add)(void *ctx, int slot, float *acc);
int pfl_slot_sum(pfl_fl *fl, int n, const pfl_spans *spans, float *acc, pfl_slot_add add, void *ctx);

/* What a round's messages with `client` cost when the method says nothing
 * else (4 bytes a float): down, the parameters of the shared layers and
 * their shared running statistics (what pfl_default_aggregate produces);
 * up, the same, or the whole model vector for a method whose server reads
 * whole uploads (whole_uploads); under FLAYER's mask (`sent` non-NULL) the
 * shared parameters sent plus a bitmap of which (one bit per shared
 * parameter). */
void pfl_default_message_bytes(const pfl_fl *fl, int client, const uint8_t *sent, const float *upload, uint64_t *down,
                               uint64_t *up);
/* The same as if the server read only the shared layers of the uploads
 * (whole_uploads aside): for a method that gathers the uploads under MPI but
 * whose clients send only what the run shares. */
void pfl_shared_message_bytes(const pfl_fl *fl, const uint8_t *sent, uint64_t *down, uint64_t *up);

/* ---- BatchNorm state (--bn) ---- */

/* True when the server averages layer l's running statistics: the layer is
 * shared and --bn is `shared`. */
bool pfl_state_shared(const pfl_fl *fl, int l);
/* --bn local: marks every BatchNorm layer not shared (pfl_fl_create calls it). */
void pfl_bn_mark_local(pfl_fl *fl);
/* What a client keeps of its own model when it builds one from the global
 * model: copies from `own` into `received` the running statistics that are
 * not shared and, with --bn local, the BatchNorm weights and biases. */
void pfl_keep_local_bn(const pfl_fl *fl, const float *own, float *received);
const float *pfl_default_personal_model(pfl_fl *fl, int client, float *scratch);

/* A parameter of the running method that has no field in pfl_algo_params
 * (PFL_BLOCK_EXTRA: methods registered at run time), by its flag name; NAN
 * when the run has none of that name. */
double pfl_fl_param(const pfl_fl *fl, const char *name);

/* The worker of the calling thread: the round loop's parallel loops run
 * fl->num_workers threads, thread i on worker i; outside them, worker 0. */
pfl_worker *pfl_fl_worker_here(pfl_fl *fl);

/* ---- per-client state (DESIGN.md §3; docs/architecture.md, "The client store") ---- */

/* pfl_algo.personal for methods that keep what they do not share: the
 * parameters of the layers not marked shared (FedPer's and FedRep's head). */
void pfl_personal_unshared(const pfl_fl *fl, bool *params, bool *stats);

/* The client's model as it holds it now (stateful runs): the stored model
 * when its whole model is personal, else what the method's receive hook
 * sends it now (the global model without one) with the client's personal
 * parts written over it, built in `out`. Returns the stored model or `out`.
 * Uses the calling thread's worker's `own` buffer. */
const float *pfl_client_model_get(pfl_fl *fl, int client, float *out);
/* Keeps the personal parts of `model` as the client's state (stateful
 * runs). 0, or -1 with a message when the store has no room for the client. */
int pfl_client_model_set(pfl_fl *fl, int client, const float *model);
/* When the whole model is personal (Ditto, pFedMe, Local, FedAMP, FedTSDP):
 * the client's stored model, to read and change in place; NULL otherwise, or
 * when the store has no room for it (the run then fails with
 * pfl_store_error's message). */
float *pfl_client_model(const pfl_fl *fl, int client);
/* --eval-moment after-train: whether the client has trained yet. */
bool pfl_client_has_trained(const pfl_fl *fl, int client);

/* A per-client store of the method's own state (FedAMP's u_i, pFedCFR's
 * fused layers, APFL's alpha): `rows` rows, one per client (row c is client
 * c's; any other count is refused), of `row_len` floats that read as
 * `initial` until written, in memory or in a file under --client-state like
 * the clients' own state; the run frees it, counts it in
 * pfl_fl_state_bytes, and fails the round in which it could not grow.
 * Under MPI a row is written on the client's home when the client's own
 * hooks write it, on every rank when `aggregate` does; a checkpoint takes
 * each client's row from its home. `name` names the store in checkpoints
 * and files. NULL with a message on failure. */
pfl_store *pfl_fl_store(pfl_fl *fl, const char *name, int rows, size_t row_len, const float *initial);
/* Bytes the per-client stores hold now (client state, after-train copies,
 * the method's stores). */
uint64_t pfl_fl_state_bytes(const pfl_fl *fl);

/* The number of top layers the server never sends a client (FedPer's and
 * FedRep's head; the trailing layers not marked shared): the local-init
 * modules mix the top layers BELOW them, of what the client receives. */
int pfl_private_top_layers(const pfl_fl *fl);

/* Layers [0, L - head) are the base, the last `head` layers the head;
 * returns the index of the first head layer (clamped to [0, L]). */
int pfl_first_head_layer(const pfl_model *m, int head);

/* Accuracy of `params` on samples idx[0..n): returns the correct count;
 * `personal`: `params` is a client's personalized model (the method's
 * personal_correct counts, when it has one). */
long pfl_count_correct_on(pfl_worker *w, const pfl_fl *fl, const float *params, const int *idx, int n);
long pfl_count_correct_personal(pfl_worker *w, const pfl_fl *fl, const float *params, const int *idx, int n);

#endif
