/* The federated round loop, written once (DESIGN.md §2, §3).
 *
 *   select clients -> local init -> local train -> upload -> aggregate -> evaluate
 *
 * An algorithm is a table of hooks (pfl_algo) for these stages; a NULL hook
 * means FedAvg's behaviour, available as pfl_default_* so an algorithm can
 * wrap it. Selected clients train in parallel, one worker (workspace, model
 * copy, gradient buffers) per thread; every random draw comes from a stream
 * keyed by (seed, round, client, purpose), and uploads are reduced in client
 * order, so the numbers do not depend on the thread count. */
#ifndef PFL_FL_FL_H
#define PFL_FL_FL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h> /* FedTSDP: the report hook */

#include "data/data.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "fl/store.h" /* per-client state */
#include "fl/transport.h" /* MPI */
#include "util/ckpt.h" /* checkpoints: the save/load hooks */
#include "modules/config.h" /* pfl_algo_params, pfl_modules_config */
#include "modules/modules.h" /* pfl_ala_start_totals */
#include "util/params.h"
#include "util/report.h"

/* What happens to BatchNorm layers at aggregation (--bn). */
typedef enum {
    PFL_BN_SHARED = 0,    /* averaged like every other layer: weight, bias and running statistics */
    PFL_BN_LOCAL,         /* FedBN: weight, bias and running statistics never leave the client */
    PFL_BN_STATS_LOCAL,   /* weight and bias averaged, running statistics kept by each client (PFLlib, which
                           * copies only parameters(), behaves so) */
} pfl_bn_mode;

/* The round's semantics (docs/evaluation.md), each with a flag for the other
 * reading; the zero value is pfl's rule. */
typedef enum {
    PFL_EVAL_AFTER_INIT = 0, /* --eval-moment after-init: the personalized model as the client holds it after the
                              * server's latest message and its local initialization, before it trains again */
    PFL_EVAL_AFTER_TRAIN,    /* after-train: as the client's latest local training left it */
} pfl_eval_moment;

typedef enum {
    PFL_INIT_SELECTED = 0,   /* --init-clients selected: the local-init modules (--ala, --flayer-agg) run on the
                              * clients of the next round only (FedALA's and FLAYER's Algorithm 1) */
    PFL_INIT_ALL,            /* all: on every client at every broadcast (their reference code) */
} pfl_init_clients;

typedef enum {
    PFL_BUDGET_TOTAL = 0,    /* --step-budget total: under --local-steps K a round is epochs x K batches in all,
                              * shared by the phases of a method that trains twice (Ditto, FedRep) */
    PFL_BUDGET_EACH,         /* each: every phase's epoch is K batches */
} pfl_step_budget;

typedef struct {
    int clients;          /* N */
    double join;          /* fraction of clients per round, (0, 1] */
    int rounds;           /* R */
    int epochs;           /* local epochs per round */
    int batch;            /* local batch size */
    int eval_batch;       /* batch size used for evaluation only */
    float lr, momentum, weight_decay;
    float lr_decay;       /* FedTSDP: round r trains at lr * lr_decay^(r-1) (pfl_round_lr); 0 or 1 = none */
    uint64_t seed;
    int threads;          /* worker threads; >= 1 */
    int eval_every;       /* evaluate every K rounds (and always after the last) */
    double drop_rate;     /* each selected client drops out with this probability, in [0, 1) */
    pfl_algo_params algo;
    pfl_modules_config modules;
    /* MPI: the processes sharing the run and which clients this one owns
     * (fl/transport.h); NULL: in-process, every client here. */
    pfl_transport *transport;
    pfl_bn_mode bn;       /* BatchNorm layers shared or kept local (models with BatchNorm) */
    pfl_eval_moment eval_moment;   /* which moment's personalized model is evaluated */
    pfl_init_clients init_clients; /* which clients the local-init modules re-initialize */
    pfl_step_budget step_budget;   /* how --local-steps counts for methods that train twice */
    const char *client_state_dir;  /* --client-state DIR: per-client state in a memory-mapped file there
                                    * (pfl_store); NULL: in memory */
    pfl_param_store extra; /* parameters of methods registered at run time (pfl_fl_param) */
} pfl_config;

/* --eval-moment, --init-clients, --step-budget: parses each word into cfg
 * (a NULL word leaves its field); -1 with a message naming the flag. */
int pfl_parse_semantics(pfl_config *cfg, const char *eval_moment, const char *init_clients, const char *step_budget);
/* The words of a configuration, for summary.json. */
const char *pfl_eval_moment_name(pfl_eval_moment m);
const char *pfl_init_clients_name(pfl_init_clients c);
const char *pfl_step_budget_name(pfl_step_budget b);

/* Everything a worker thread owns while it runs one client. Models are
 * whole model vectors, pfl_model_vector_len floats (parameters, then
 * BatchNorm running statistics); gradients and optimizer buffers cover the
 * num_params parameters only. */
typedef struct {
    int id;
    pfl_workspace *ws;
    float *model;         /* the client model being trained (vector) */
    float *grads;         /* num_params */
    float *velocity;      /* num_params, momentum buffer, reset per client per round */
    float *x;             /* batch inputs (max batch x sample size) */
    uint8_t *y;           /* batch labels */
    int *order;           /* a client's sample order (largest client) */
    float *received;      /* vector: the model a client builds from the global one */
    float *start;         /* vector: the model local training started from (upload masks) */
    float *aux;           /* vector: scratch for algorithms and modules */
    float *aux_grads;     /* num_params: scratch gradients for algorithms and modules */
    float *own;           /* vector: zero but for a client's personal spans, the `state` a method's receive
                           * hook reads when a client's model is built (pfl_client_model_get) */
} pfl_worker;

typedef struct pfl_fl pfl_fl;
typedef struct pfl_algo pfl_algo;

/* Spans of the model vector, ascending, none touching the next: the parts a
 * client keeps between rounds (pfl_algo.personal). */
typedef struct {
    int count;
    size_t offset[2 * PFL_MAX_LAYERS], length[2 * PFL_MAX_LAYERS];
    size_t floats;        /* their total length */
    bool whole;           /* they are the whole model vector */
} pfl_spans;

/* Per-client stores a method may make for its server state (pfl_fl_store). */
#define PFL_FL_MAX_STORES 4

/* What local training did, summed over its batches. */
typedef struct {
    double loss_sum;      /* sum over batches of mean loss x batch size */
    long samples;         /* samples seen (counting epochs) */
    long last_epoch_correct, last_epoch_samples; /* training accuracy of the last epoch */
} pfl_train_stats;

/* Adds an algorithm's own term to the gradient of the batch loss before each
 * step (e.g. a proximal term mu*(params - anchor)). */
typedef void (*pfl_grad_hook)(const void *ctx, const pfl_model *m, const float *params, float *grads);

/* A term of the local loss on the features entering one layer, toward the
 * features another model gives the same batch (FedPHP's MMD toward its
 * inherited private model): pfl_local_sgd then trains on
 * (1 - weight) x cross-entropy + weight x term(z, z_ref), z the features of
 * the model being trained, z_ref those of `reference`, run first on the
 * batch in evaluation mode (a fixed teacher: no dropout, its running
 * statistics). */
typedef struct {
    const float *reference;   /* a whole model vector */
    int layer;                /* the features entering this layer */
    float weight;             /* in [0, 1] */
    /* the term for B samples of n features, and into dz its gradient with respect to z */
    double (*term)(const float *z, const float *z_ref, int B, long n, float *dz);
    float *ref_features, *dfeatures; /* scratch of (largest batch) x n floats each, the caller's (one per worker) */
} pfl_feature_loss;
/* A method's own work on one batch of pfl_local_sgd (APPLE's step on its
 * core model and DR vector, PartialFed's strategy steps): the batch's B
 * samples are in w->x and w->y, `batch` counts the batches of this call from
 * 0. Returns true when it did the batch itself, with the batch's mean loss
 * in *loss and its correctly classified samples in *correct (the training
 * statistics count them as any batch); false to leave the batch to
 * pfl_local_sgd's own SGD step. */
typedef bool (*pfl_batch_hook)(void *ctx, pfl_worker *w, float *model, int B, long batch, float *loss, int *correct);

/* How pfl_local_sgd trains; pfl_train_opts_default gives FedAvg's. */
typedef struct {
    int epochs;
    float lr;
    const bool *frozen;        /* per layer: true = not updated; NULL = all layers train */
    pfl_grad_hook grad_hook;   /* or NULL */
    const void *hook_ctx;
    bool layer_lr;             /* FLAYER's per-layer learning rates */
    pfl_rng_purpose shuffle;   /* stream of the batch order (a second model uses another) */
    int steps;                 /* > 0: train exactly this many batches (reshuffling after each
                                * pass over the data) instead of `epochs` epochs; 0: `epochs`
                                * epochs, each --local-steps batches when that is set */
    const float *logit_offset; /* per class, added to the logits in the loss (FedRoD's balanced softmax,
                                * pfl_forward_loss_offset); NULL: plain cross-entropy */
    /* Called after each batch's forward, before its backward and step, with
     * the batch in w->x, w->y and the forward's activations in w->ws: a
     * method training a second head on the same features (FedRoD) steps it
     * there. NULL: none. */
    void (*after_forward)(void *ctx, const pfl_fl *fl, pfl_worker *w, int B);
    void *after_forward_ctx;
    int stream_round;          /* > 0: the round keying the batch-order and dropout streams (FedAvg-C
                                * fine-tunes at an evaluation for round fl->round + 1); 0: fl->round */
    const pfl_feature_loss *feature_loss; /* or NULL: cross-entropy alone */
    /* ---- issue 15 (FedFomo, APPLE, PartialFed) ---- */
    const int *samples;        /* train on these n_samples sample indices (FedFomo: its split without the
                                * held-out validation part); NULL: the client's whole training split */
    int n_samples;
    pfl_batch_hook batch_hook; /* or NULL: every batch is a plain SGD step */
    void *batch_ctx;
} pfl_train_opts;

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
     * pfl_default_aggregate, called once, on every rank alike (it may then
     * change the global model and its own state from what it holds, as
     * pFedMe's mix does): the weighted sum runs from rank to rank, a
     * reduction, and no rank receives another's upload. true: it reads
     * every float of each upload (clustering, message passing and
     * similarity compare or fuse whole models), so every upload travels
     * whole to every rank, a gather. */
    bool whole_uploads;
    /* Extra parameter blocks (docs/architecture.md): appends to `m`, a copy
     * of the run's model the run then uses (fl->model), the blocks the method
     * adds beside the backbone (pfl_model_add_block), before anything is
     * allocated; each block's `personal` rule makes it shared (averaged, sent)
     * or kept by each client. NULL: none. 0, or -1 with a message. */
    int (*blocks)(const pfl_config *cfg, pfl_model *m);
    /* Personalized evaluation of a method whose blocks change what the
     * network computes from its features (FedCP's gate and two heads): after
     * the backbone's forward of B samples (w->x, w->y) through `params`, how
     * many its own output classifies correctly. NULL: the backbone's logits. */
    int (*personal_correct)(const pfl_fl *fl, pfl_worker *w, const float *params, int B);
    /* Allocates algorithm state after the global model is initialized, and
     * may mark layers as not shared (fl->shared). */
    int (*create)(pfl_fl *fl);
    /* Refuses a configuration the method cannot run (issue 15: APPLE's
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
     * upload mask when FLAYER's mask is on, else NULL. NULL hook:
     * pfl_default_message_bytes. The round loop sums it over the clients
     * that trained (metrics bytes_down/bytes_up, summary per round). */
    void (*message_bytes)(const pfl_fl *fl, int client, const uint8_t *sent, uint64_t *down, uint64_t *up);
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

struct pfl_fl {
    pfl_config cfg;
    const pfl_model *model;
    pfl_model *own_model; /* the caller's model with the method's extra blocks (pfl_algo.blocks), else NULL */
    const pfl_dataset *data;
    const pfl_partition *part;
    const pfl_algo *algo;
    float *global;        /* the global model (a whole model vector) */
    void *algo_state;     /* owned by the algorithm */
    int round;            /* 1..R while training, 0 before */
    int num_workers;
    pfl_worker *workers;
    pfl_store *client_state; /* stateful runs, else NULL: per client its personal parts of the model vector
                              * (fl->personal), then its local-init module state (ALA's weights); under MPI
                              * only the rows of the clients this process owns */
    pfl_spans personal;   /* the personal parts: what a client keeps between rounds */
    bool *shared;         /* per layer: aggregated by the server (default all); a layer not shared
                           * keeps its running statistics local too; under MPI only these layers
                           * of an upload travel, so `aggregate` must read no other */
    uint8_t **sent;       /* per upload slot, num_params flags, when the upload mask is on */
    float *local_acc;     /* per client: training accuracy of its last local epoch (FLAYER's A) */
    bool *joins_next;     /* per client: selected for round `round` + 1, set at each broadcast (the clients the
                           * local-init modules initialize under --init-clients selected; local_acc_joined) */
    pfl_store *trained;   /* --eval-moment after-train: per client its whole personalized model as its latest
                           * training left it (written once it has trained; until then its after-init model is
                           * evaluated), rows as client_state, else NULL */
    uint8_t personal_sha256[32]; /* after the last round: SHA-256 of the clients' personalized models (the ones
                                  * evaluated; pfl_fl_personal_digest), so runs can be compared bit for bit */
    bool *ala_started;    /* --ala: per client, whether its weights were trained once (the weights are in its row
                           * of client_state) */
    long *ala_start_epochs;     /* --ala: per client, the epochs of its start phase (0: not run yet; MPI: the
                                 * clients this process owns) */
    double *ala_start_seconds;  /* ... and its wall time */
    pfl_ala_start_totals ala_start; /* --ala: the start phase over every client, after the last round */
    pfl_store *algo_stores[PFL_FL_MAX_STORES]; /* per-client server state of the method (pfl_fl_store) */
    int num_algo_stores;
    bool resumed;         /* pfl_fl_load filled the state: pfl_fl_run_with skips round 0 */
    /* Who does what (deal.c): rank r keeps and evaluates clients [home_first[r], home_first[r + 1]) (under MPI
     * rank 0, the server, none; in-process rank 0 all of them) and trains the round's upload slots
     * [slot_first[r], slot_first[r + 1]). */
    int *home_first, *slot_first;
    bool clients_move;    /* no client keeps state between rounds, so each round's clients are dealt to the ranks by
                           * their work afresh; otherwise each trains at its home */
    const int *reducing;  /* while `aggregate` runs as a reduction under MPI: slot_first (the uploads of the slots of
                           * other ranks are NULL here); NULL otherwise */
    bool reduce_failed;   /* the reduction's exchange failed (pfl_err says how) */
    int rounds_run;       /* rounds this process trained (from the checkpoint on, when resumed) */
    int stop_signal;      /* a SIGTERM or SIGINT stopped the run after round `round` (pfl_fl_catch_signals), or 0 */
    struct pfl_shards *shards; /* MPI checkpoints: what the ranks wrote beside rank 0's file (checkpoint.c) */
    double train_seconds; /* wall time of rounds so far, without evaluation */
    long train_samples;   /* samples trained on so far (counting epochs) */
    uint64_t bytes_down, bytes_up; /* message bytes so far, to and from the clients that trained (message_bytes) */
    double *client_acc;   /* per client: personalized accuracy at the latest evaluation, correct / test (NAN for a
                           * client without test samples); under MPI every process has every client's (the counts
                           * are summed over ranks). pfl_round_metrics.client_acc points here */
};

/* Metrics of one evaluated round. Accuracies are fractions; NAN where a
 * quantity does not exist (train loss at round 0, global accuracy of local). */
typedef struct {
    int round;
    double local_acc;        /* sum correct / sum test over clients, personalized models */
    double local_acc_mean;   /* unweighted mean over clients */
    double local_acc_std;    /* population std over clients */
    double local_acc_joined; /* local_acc over the clients selected for the next round only (FedALA's Table 7
                              * "rho = 0.5*": the joining clients); local_acc when every client joins */
    double global_acc;       /* global model on every client's test split */
    const double *client_acc; /* evaluated rounds: each client's personalized accuracy, client order (fl->client_acc,
                               * valid during the callback); NULL otherwise */
    double train_loss;       /* mean loss of this round's local training batches */
    double seconds;          /* wall time of the round (training + aggregation) */
    double eval_seconds;     /* wall time of this evaluation */
    long train_samples;      /* samples trained on this round */
    int selected;            /* clients that trained this round */
    uint64_t bytes_down;     /* this round's message bytes to the clients that trained (pfl_algo.message_bytes) */
    uint64_t bytes_up;       /* ... and from them */
    bool evaluated;          /* false: a training-only report (accuracies NAN) */
    int dropped;             /* --drop-rate: selected clients that dropped out, ... */
    const int *dropped_clients; /* ... ascending (valid during the callback) */
} pfl_round_metrics;

typedef void (*pfl_round_callback)(const pfl_round_metrics *m, const pfl_fl *fl, void *ctx);

/* Sets up workers and the global model (initialized from the seed's INIT
 * stream), and the algorithm's state. Returns 0 or -1 with a message. */
int pfl_fl_create(pfl_fl *fl, const pfl_config *cfg, const pfl_model *model, const pfl_dataset *data,
                  const pfl_partition *part, const pfl_algo *algo);
void pfl_fl_destroy(pfl_fl *fl);

/* Runs rounds 1..R, evaluating before the first round (round 0), every
 * eval_every rounds and after the last; calls `cb` after every round, with
 * m->evaluated telling whether accuracies were measured.
 * Returns 0 or -1 with a message. */
int pfl_fl_run(pfl_fl *fl, pfl_round_callback cb, void *ctx);

/* Called after every round's callback (the experiment writes checkpoints there):
 * returns 0 to go on, 1 to stop after this round, -1 to fail the run. */
typedef int (*pfl_after_round)(pfl_fl *fl, void *ctx);

/* pfl_fl_run with an after-round hook (or NULL), called after round 0's
 * evaluation too (so a checkpoint can hold the state before any training). A
 * stop returns 0 with fl->round < cfg.rounds. After pfl_fl_load (fl->resumed)
 * the run goes on from round fl->round + 1, without the round-0 broadcast
 * and evaluation. */
int pfl_fl_run_with(pfl_fl *fl, pfl_round_callback cb, pfl_after_round after, void *ctx);

/* Checkpoints: writes, as sections "fl.*" and "ala.*" and the algorithm's
 * own, everything of the run that changes from round to round (round,
 * counters, global model, client models, last accuracies, shared layers,
 * ALA weights, algorithm state) and the shape of the federation (parameters,
 * clients, a SHA-256 of the partition) to check on loading. Random streams
 * are keyed by (seed, round, client, purpose) and need no saving. */
int pfl_fl_save(const pfl_fl *fl, pfl_ckpt_writer *w);
/* Reads what pfl_fl_save wrote into fl, just created by pfl_fl_create with
 * the same configuration, model, data and partition; refuses (-1 with a
 * message) a checkpoint of another shape. */
int pfl_fl_load(pfl_fl *fl, pfl_ckpt_reader *r);

/* MPI checkpoints, a collective before rank 0's pfl_fl_save: each client
 * rank writes the rows its clients hold in the per-client stores to
 * DIR/checkpoint.ROUND.RANK-of-P (rank 0 passes DIR, the others NULL), and
 * rank 0 learns the files' checksums and the other figures its pfl_fl_save
 * writes (which names the files). In-process: nothing. 0, or -1 with a
 * message on every rank alike. pfl_fl_load reads the files back for the
 * clients each rank keeps now, with any number of ranks. */
int pfl_fl_save_shards(pfl_fl *fl, const char *dir);
void pfl_fl_free_shards(pfl_fl *fl); /* what pfl_fl_save_shards keeps for rank 0 (pfl_fl_destroy calls it) */
/* After DIR/checkpoint was committed: removes the files of earlier
 * checkpoints it does not name (and those of writes cut short). */
void pfl_fl_remove_old_shards(const pfl_fl *fl, const char *dir);

/* SHA-256 of every client's personalized model, the one the evaluation
 * scores now, in client order (the SHA-256 of the concatenated per-client
 * SHA-256 of each model vector's bytes: float32 as the machine stores them,
 * little-endian on x86 and ARM). Under MPI a
 * collective: each owner hashes its clients. pfl_fl_run fills
 * fl->personal_sha256 with it after the last round. */
int pfl_fl_personal_digest(pfl_fl *fl, uint8_t digest[32]);

/* Evaluates now and fills m (round, accuracies; not timing or loss). */
int pfl_fl_evaluate(pfl_fl *fl, pfl_round_metrics *m);

/* The clients a round selects: round(join * N), at least 1. */
int pfl_clients_per_round(const pfl_config *cfg);

/* The clients of round r: round(join * N) of them (at least 1), drawn from
 * the SELECT stream, ascending. Writes them to out (room for N), returns the count. */
int pfl_select_clients(const pfl_config *cfg, int round, int *out);

/* --drop-rate: removes from clients[0..n) (ascending) those that drop out in
 * `round`, each independently with probability cfg->drop_rate from the
 * stream (seed, round, client, DROP); writes them to dropped (room for n) and
 * their count to *n_dropped. Returns the clients left, still ascending. */
int pfl_drop_clients(const pfl_config *cfg, int round, int *clients, int n, int *dropped, int *n_dropped);

/* ---- FedAvg's stages, for algorithms to call or wrap ---- */

void pfl_default_local_init(pfl_fl *fl, int client, float *model);
/* pfl_local_sgd with pfl_train_opts_default. */
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

/* What a round's messages with `client` cost when the method says nothing
 * else (4 bytes a float): down, the parameters of the shared layers and
 * their shared running statistics (what pfl_default_aggregate produces);
 * up, the same, or the whole model vector for a method whose server reads
 * whole uploads (whole_uploads); under FLAYER's mask (`sent` non-NULL) the
 * shared parameters sent plus a bitmap of which (one bit per shared
 * parameter). */
void pfl_default_message_bytes(const pfl_fl *fl, int client, const uint8_t *sent, uint64_t *down, uint64_t *up);

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

/* Broadcast: client `client` receives the global model and builds its state
 * (stateful runs only), using worker w's buffers. */
void pfl_fl_receive(pfl_fl *fl, int client, pfl_worker *w);

/* A parameter of the running method that has no field in pfl_algo_params
 * (PFL_BLOCK_EXTRA: methods registered at run time), by its flag name; NAN
 * when the run has none of that name. */
double pfl_fl_param(const pfl_fl *fl, const char *name);

/* The worker of the calling thread: the round loop's parallel loops run
 * fl->num_workers threads, thread i on worker i; outside them, worker 0. */
pfl_worker *pfl_fl_worker_here(pfl_fl *fl);

/* ---- processes (deal.c; docs/architecture.md, "Processes") ---- */

/* Splits items 0..n-1, item i of work[i] >= 0, into `parts` consecutive
 * blocks of about equal work: block b is [bounds[b], bounds[b + 1]), with
 * bounds[0] = 0 and bounds[parts] = n. The busiest block holds as little as
 * any split into consecutive blocks allows, and within that bound each cut
 * is the one nearest to an even share of the work left (by count when
 * there is no work). A pure function: every rank computes the same blocks.
 * 0, or -1 with a message (memory). */
int pfl_split_by_work(const long *work, int n, int parts, int *bounds);
/* A client's work in a round: the samples its local training visits (epochs
 * x its training samples; under --local-steps K, epochs x K batches), at
 * least 1. */
long pfl_client_work(const pfl_fl *fl, int client);
/* pfl_fl_create: the clients' homes (fl->home_first), consecutive blocks of
 * about equal work over the client ranks. 0 or -1 with a message. */
int pfl_fl_deal_homes(pfl_fl *fl);
/* The rank that keeps and evaluates `client`, and whether it is this one. */
int pfl_fl_home(const pfl_fl *fl, int client);
bool pfl_fl_at_home(const pfl_fl *fl, int client);
/* The round's upload slots (the clients selected[0..n), ascending) to the
 * ranks that train them (fl->slot_first): consecutive blocks by work when
 * clients move, else each slot to its client's home. 0 or -1. */
int pfl_fl_deal_round(pfl_fl *fl, const int *selected, int n);
/* The rank that trains upload slot `slot` of the round, and this rank's slots [*first, *end). */
int pfl_fl_trainer(const pfl_fl *fl, int slot);
void pfl_fl_my_slots(const pfl_fl *fl, int *first, int *end);

/* "reduce" or "gather": how the run's uploads meet under MPI (whole_uploads). */
const char *pfl_fl_aggregation(const pfl_fl *fl);

/* A round's exchange between processes (exchange.c), for the round loop:
 * what travels once the ranks have trained their slots. */
typedef struct {
    pfl_train_stats stats;
    uint64_t down, up; /* the bytes of the round's messages with the client (pfl_algo.message_bytes) */
} pfl_slot_record;     /* what the server learns of a trained client besides its upload */
/* For a gather (whole_uploads), every rank receives every upload of the
 * round, with its mask under FLAYER's, from the rank that trained it; then
 * rank 0 receives every slot's record into all[0..n) (in-process: a copy of
 * records). A collective; 0 or -1 with a message. */
int pfl_round_exchange(pfl_fl *fl, int n, float *const *uploads, const pfl_slot_record *records,
                       pfl_slot_record *all);
/* The method's aggregation of the round's n uploads. For a reduction under
 * MPI `uploads` holds this rank's only (NULL at the other ranks' slots) and
 * pfl_default_aggregate sums along the ranks. 0, or -1 with a message when
 * that failed. */
int pfl_round_aggregate(pfl_fl *fl, const int *selected, int n, float *const *uploads);

/* SIGTERM and SIGINT (what a batch scheduler sends before it kills a job,
 * and Ctrl-C) no longer kill the process: the round under way finishes,
 * pfl_fl_run_with sets fl->stop_signal, calls the after-round hook (which
 * writes the checkpoint) and returns. Under MPI every rank stops after the
 * same round, whichever got the signal. A second signal kills as usual. */
void pfl_fl_catch_signals(void);
/* The signal that stopped a run of this process (0: none). */
int pfl_fl_stopped_by(void);

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
 * pfl_fl_state_bytes, and fails the round in which it could not grow. Under MPI a row is written on the client's home when the
 * client's own hooks write it, on every rank when `aggregate` does; a
 * checkpoint takes each client's row from its home. `name` names the store
 * in checkpoints and files. NULL with a message on failure. */
pfl_store *pfl_fl_store(pfl_fl *fl, const char *name, int rows, size_t row_len, const float *initial);
/* Bytes the per-client stores hold now (client state, after-train copies,
 * the method's stores). */
uint64_t pfl_fl_state_bytes(const pfl_fl *fl);

/* The round loop's side of the client store (client_state.c), for src/fl:
 * after the method's create and the modules' checks, the after-train store
 * (--eval-moment after-train) and, for a stateful run, the personal spans
 * and the client store (0 or -1 with a message); freeing them; after local
 * training, keeping the client's state (finish) and under after-train its
 * trained personalized model; releasing a client's rows when the loop is
 * done with it for now; and -1 with the message of the first store that
 * could not give a row room (rows are written on worker threads), else 0. */
int pfl_fl_create_stores(pfl_fl *fl, bool stateful);
void pfl_fl_free_stores(pfl_fl *fl);
void pfl_fl_keep_trained(pfl_fl *fl, int client, pfl_worker *w);
void pfl_fl_release_client(pfl_fl *fl, int client);
/* --ala: fl->ala_start from every client's start phase (MPI: a collective,
 * every rank calls it); 0, or -1 with a message. */
int pfl_fl_sum_ala_start(pfl_fl *fl);
int pfl_fl_store_failed(const pfl_fl *fl);

/* FedAvg's training options: cfg.epochs, cfg.lr, all layers, no hook, the
 * per-layer learning rates when the flayer_lr module is on. */
pfl_train_opts pfl_train_opts_default(const pfl_fl *fl);

/* Batches `epochs` local epochs make under --local-steps K: epochs * K;
 * 0 when K is 0 (an epoch is then one pass over the client's data). */
long pfl_epoch_steps(const pfl_fl *fl, int epochs);

/* FedTSDP: the learning rate of the current round, cfg.lr * cfg.lr_decay^(round - 1)
 * (cfg.lr when lr_decay is 0 or 1, and at round 0). pfl_train_opts_default
 * uses it, so every algorithm's local training decays the same way. */
float pfl_round_lr(const pfl_fl *fl);
/* The same for round `round` (FedAvg-C fine-tunes at an evaluation for the next round). */
float pfl_lr_of_round(const pfl_fl *fl, int round);

/* Minibatch SGD over the client's shuffled training split (the last batch
 * may be smaller), with momentum and weight decay from the config, as
 * `opts` says. Adds to stats. */
void pfl_local_sgd(pfl_fl *fl, int client, pfl_worker *w, float *model, const pfl_train_opts *opts,
                   pfl_train_stats *stats);

/* The number of top layers the server never sends a client (FedPer's and
 * FedRep's head; the trailing layers not marked shared): the local-init
 * modules mix the top layers BELOW them, of what the client receives. */
int pfl_private_top_layers(const pfl_fl *fl);

/* A method that trains two things in a round, one after the other (Ditto:
 * the personal model, then its copy of the global one; FedRep: the head,
 * then the base), sets the length of each phase here. Without --local-steps
 * each phase runs its own epochs (first_epochs, then cfg.epochs). With
 * --local-steps K and --step-budget total (pfl's rule), the round's
 * cfg.epochs x K batches are divided between the phases in the ratio
 * first_epochs : cfg.epochs, rounded, each phase with epochs getting at
 * least one batch when there are two; with --step-budget each, every epoch
 * of either phase is K batches. A phase left with no batch gets epochs =
 * steps = 0, which trains nothing. Writes epochs and steps of both. */
void pfl_split_round_steps(const pfl_fl *fl, int first_epochs, pfl_train_opts *first, pfl_train_opts *second);

/* Layers [0, L - head) are the base, the last `head` layers the head;
 * returns the index of the first head layer (clamped to [0, L]). */
int pfl_first_head_layer(const pfl_model *m, int head);

/* Accuracy of `params` on samples idx[0..n): returns the correct count;
 * `personal`: `params` is a client's personalized model (the method's
 * personal_correct counts, when it has one). */
long pfl_count_correct_on(pfl_worker *w, const pfl_fl *fl, const float *params, const int *idx, int n);
long pfl_count_correct_personal(pfl_worker *w, const pfl_fl *fl, const float *params, const int *idx, int n);

#endif
