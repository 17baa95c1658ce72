/* The transport seam (DESIGN.md §4): how the processes of a run move bytes.
 *
 * In-process (a NULL transport, or one process) nothing moves and every
 * primitive returns at once. Under MPI — pfl built with Open MPI (-DPFL_MPI)
 * and started by mpirun with P > 1 processes — rank 0 is the server of
 * record (it writes the outputs) and ranks 1..P-1 hold the clients
 * (src/fl/deal.c says which); src/fl/ decides what travels, this file's
 * primitives move it (docs/architecture.md, "Processes"). All MPI calls of
 * pfl are in transport.c. */
#ifndef PFL_FL_TRANSPORT_H
#define PFL_FL_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>

/* What received bytes are counted as, for the communication report. */
typedef enum {
    PFL_TALLY_OTHER = 0, /* not payload: checkpoints, the stop vote, the report's own sums */
    PFL_TALLY_ROUND,     /* a round's exchange: uploads, the reduction's partial sums and result, the slots' records */
    PFL_TALLY_EVAL,      /* the evaluation's sums of correct counts */
    PFL_TALLIES
} pfl_tally;

typedef struct pfl_transport {
    int rank;               /* this process, 0..size-1 */
    int size;               /* processes; 1: in-process */
    bool mpi;               /* MPI was initialized (and must be finalized) */
    pfl_tally tally;        /* where the primitives below count the bytes this process receives */
    long in[PFL_TALLIES];   /* payload bytes received, per tally */
} pfl_transport;

/* Starts MPI when the process was launched by mpirun (Open MPI's
 * OMPI_COMM_WORLD_SIZE, or PMI_SIZE, in the environment) and pfl was built
 * with it; otherwise sets up one in-process transport and costs nothing.
 * Fails (-1 with a message) when launched by mpirun with several processes
 * but built without MPI: each process would run the whole experiment. */
int pfl_transport_init(pfl_transport *t);

/* Ends MPI after a successful run (every rank must call it). */
void pfl_transport_finish(pfl_transport *t);

/* After a failure on this rank, already reported: ends every rank of the
 * run (MPI_Abort) with `code`, so none waits forever for this one. Returns
 * only when in-process. For the command-line front end. */
void pfl_transport_abort(const pfl_transport *t, int code);

/* True when several processes share the run. */
bool pfl_transport_distributed(const pfl_transport *t);

/* Returns when every rank has called it (a collective), sleeping while it
 * waits: MPI's blocking calls spin, and a rank with nothing to do (the
 * server during training) would take a core from the ranks still training.
 * Called before the collectives that follow long local work. */
int pfl_transport_wait_all(pfl_transport *t);

/* Every rank gets `root`'s `bytes` at buf (a collective: every rank calls it
 * with the same root and size). Returns 0 or -1 with a message. */
int pfl_transport_share(pfl_transport *t, void *buf, size_t bytes, int root);

/* Point to point: `bytes` from this rank to rank `to`, and from rank `from`
 * into buf (the two ranks call them in matching order). 0 or -1. */
int pfl_transport_send(pfl_transport *t, const void *buf, size_t bytes, int to);
int pfl_transport_recv(pfl_transport *t, void *buf, size_t bytes, int from);

/* Rank 0 receives every rank's `bytes[r]` bytes at `mine` into `all`, rank
 * after rank (rank r's at the sum of bytes[0..r)); `all` matters on rank 0
 * only (a collective; every rank passes the same bytes[]). 0 or -1. */
int pfl_transport_gather(pfl_transport *t, const void *mine, void *all, const size_t *bytes);

/* Element-wise sum of v[0..n) over all ranks, left in v on every rank
 * (a collective). Integer sums are exact in any order. */
int pfl_transport_sum_longs(pfl_transport *t, long *v, size_t n);

/* The largest of every rank's `mine` (a collective, not counted: a
 * round's stop vote), in *largest. 0 or -1. */
int pfl_transport_max_int(pfl_transport *t, int mine, int *largest);

/* Payload bytes received so far (a collective): by rank 0 (the server) in a
 * round's exchanges, by ranks 1..P-1 together and by the one of them that
 * received most, and by all ranks in the evaluation's sums. Zeros
 * in-process. */
typedef struct {
    long to_server, to_clients, to_client_max, eval;
} pfl_traffic;
int pfl_transport_traffic(pfl_transport *t, pfl_traffic *out);

#endif
