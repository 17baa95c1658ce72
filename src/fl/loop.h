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
/* --ala: fl->ala_start from every client's start phase (MPI: a collective,
 * every rank calls it); 0, or -1 with a message. */
int pfl_fl_sum_ala_start(pfl_fl *fl);
int pfl_fl_store_failed(const pfl_fl *fl);

#endif
