/* The round loop's state as methods and the local step read it: the run's
 * configuration, a worker's buffers, and the federation (pfl_fl). The
 * hooks a method fills are fl/method.h. */
#ifndef PFL_FL_STATE_H
#define PFL_FL_STATE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h> /* the report hook */

#include "data/data.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "backend/backend.h"
#include "fl/store.h" /* per-client state */
#include "fl/transport.h" /* MPI */
#include "util/ckpt.h" /* checkpoints: the save/load hooks */
#include "modules/config.h" /* pfl_algo_params, pfl_modules_config */
#include "modules/modules.h" /* pfl_ala_start_totals */
#include "util/params.h"
#include "util/report.h"

typedef struct pfl_fl pfl_fl;
typedef struct pfl_worker pfl_worker;

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
    /* MPI: the processes sharing the run (fl/transport.h; which clients
     * each keeps and trains: deal.c); NULL: in-process, every client here. */
    pfl_transport *transport;
    pfl_bn_mode bn;       /* BatchNorm layers shared or kept local (models with BatchNorm) */
    pfl_eval_moment eval_moment;   /* which moment's personalized model is evaluated */
    pfl_init_clients init_clients; /* which clients the local-init modules re-initialize */
    pfl_step_budget step_budget;   /* how --local-steps counts for methods that train twice */
    bool allow_data_change; /* pfl resume --allow-data-change: a checkpoint written on other data (its
                             * digest) is taken with a warning, not refused */
    const char *client_state_dir;  /* --client-state DIR: per-client state in a memory-mapped file there
                                    * (pfl_store); NULL: in memory */
    pfl_param_store extra; /* parameters of methods registered at run time (pfl_fl_param) */
    const pfl_backend *backend; /* --device: what the workers train and evaluate on; NULL: the CPU */
} pfl_config;

/* --eval-moment, --init-clients, --step-budget: parses each word into cfg
 * (a NULL word leaves its field); -1 with a message naming the flag. */
int pfl_parse_semantics(pfl_config *cfg, const char *eval_moment, const char *init_clients, const char *step_budget);
/* The words of a configuration, for summary.json. */
const char *pfl_eval_moment_name(pfl_eval_moment m);
const char *pfl_init_clients_name(pfl_init_clients c);
const char *pfl_step_budget_name(pfl_step_budget b);

/* Everything a worker thread owns while it runs one client: its executor
 * (src/backend: the model's workspace and the batch, on the run's backend)
 * with the gradient buffers it computes into, and host vectors for the
 * round's work on models. Models are whole model vectors,
 * pfl_model_vector_len floats (parameters, then BatchNorm running
 * statistics); gradients and optimizer buffers cover the num_params
 * parameters only. */
struct pfl_worker {
    int id;
    pfl_exec *exec;       /* the executor every forward and backward of this worker runs on */
    pfl_xbuf grads;       /* num_params, in the executor's memory: a batch's gradient */
    pfl_xbuf velocity;    /* num_params: the momentum buffer, reset per client per round */
    pfl_xbuf aux_grads;   /* num_params: a second gradient (a method's own batches, the modules) */
    int *order;           /* a client's sample order (largest client) */
    float *model;         /* the client model being trained (vector) */
    float *received;      /* vector: the model a client builds from the global one */
    float *start;         /* vector: the model local training started from (upload masks) */
    float *aux;           /* vector: scratch for algorithms and modules */
    float *own;           /* vector: zero but for a client's personal spans, the `state` a method's receive
                           * hook reads when a client's model is built (pfl_client_model_get) */
};

typedef struct pfl_algo pfl_algo;

/* Spans of the model vector, ascending, none touching the next: the parts a
 * client keeps between rounds (pfl_algo.personal). */
typedef struct {
    int count;
    size_t offset[2 * PFL_MAX_LAYERS], length[2 * PFL_MAX_LAYERS];
    size_t floats;        /* their total length */
    bool whole;           /* they are the whole model vector */
} pfl_spans;

/* Appends [offset, offset + length) to s, joined to the last span where it
 * begins where that one ends (nothing when length is 0); counts floats.
 * Spans must be added in ascending order. */
void pfl_spans_add(pfl_spans *s, size_t offset, size_t length);

/* Per-client stores a method may make for its server state (pfl_fl_store). */
#define PFL_FL_MAX_STORES 4

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
    uint8_t data_sha256[32];     /* of the data loaded (pfl_dataset_digest): checkpoints bind it, summaries name it */
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

#endif
