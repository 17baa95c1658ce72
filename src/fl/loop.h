/* What the round loop keeps to itself (src/fl only): the client store's
 * side of a round. */
#ifndef PFL_FL_LOOP_H
#define PFL_FL_LOOP_H

#include "fl/method.h"

/* Broadcast: client `client` receives the global model and builds its state
 * (stateful runs only), using worker w's buffers. */
void pfl_fl_receive(pfl_fl *fl, int client, pfl_worker *w);

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
int pfl_fl_store_failed(const pfl_fl *fl);
void pfl_fl_free_shards(pfl_fl *fl); /* what pfl_fl_save_shards keeps for rank 0 (pfl_fl_destroy calls it) */

/* ---- processes (deal.c, exchange.c; docs/architecture.md, "Processes") ---- */

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

/* What the server learns of a trained client besides its upload. */
typedef struct {
    pfl_train_stats stats;
    uint64_t down, up; /* the bytes of the round's messages with the client (pfl_algo.message_bytes) */
} pfl_slot_record;
/* After training: for a gather (whole_uploads), every rank receives every
 * upload of the round, with its mask under FLAYER's, from the rank that
 * trained it; then rank 0 receives every slot's record into all[0..n)
 * (in-process: a copy of records). A collective; 0 or -1 with a message. */
int pfl_round_exchange(pfl_fl *fl, int n, float *const *uploads, const pfl_slot_record *records,
                       pfl_slot_record *all);
/* The method's aggregation of the round's n uploads. For a reduction under
 * MPI `uploads` holds this rank's only (NULL at the other ranks' slots) and
 * pfl_default_aggregate sums along the ranks. 0, or -1 with a message when
 * that failed. */
int pfl_round_aggregate(pfl_fl *fl, const int *selected, int n, float *const *uploads);

#endif
