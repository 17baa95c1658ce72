/* The transport seam (DESIGN.md §4): how the round loop reaches clients that
 * live in other processes.
 *
 * In-process (a NULL transport, or one process) every client is here and
 * nothing moves. Under MPI — pfl built with Open MPI (-DPFL_MPI) and started
 * by mpirun with P > 1 processes — rank 0 is the server of record (it writes
 * the outputs) and ranks 1..P-1 own fixed sets of clients: client c belongs
 * to rank 1 + c mod (P - 1), which trains it, keeps its state and evaluates
 * it. The server step is replicated: every rank receives every upload of the
 * round and runs the same deterministic aggregation, so algorithm state
 * (global, group and fused models, clusters) is identical everywhere and no
 * algorithm needs code of its own for MPI (docs/architecture.md).
 *
 * This file's primitives move bytes; src/fl/fl.c decides what travels. All
 * MPI calls are in transport.c. */
#ifndef PFL_FL_TRANSPORT_H
#define PFL_FL_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>

typedef struct pfl_transport {
    int rank;               /* this process, 0..size-1 */
    int size;               /* processes; 1: in-process */
    bool mpi;               /* MPI was initialized (and must be finalized) */
    /* payload bytes this process received, for the communication report */
    long shared_in;         /* in pfl_transport_share */
    long reduced_in;        /* in pfl_transport_sum_longs */
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

/* The rank that owns `client` (0 in-process). */
int pfl_transport_owner(const pfl_transport *t, int client);
bool pfl_transport_owns(const pfl_transport *t, int client);

/* Clients of 0..clients-1 this rank owns, and the position of an owned
 * client among them (its row in per-client state that only owners keep). */
int pfl_transport_owned_count(const pfl_transport *t, int clients);
int pfl_transport_local_index(const pfl_transport *t, int client);

/* Returns when every rank has called it (a collective), sleeping while it
 * waits: MPI's blocking calls spin, and a rank with nothing to do (the
 * server during training) would take a core from the ranks still training.
 * Called before the collectives that follow long local work. */
int pfl_transport_wait_all(pfl_transport *t);

/* Every rank gets `root`'s `bytes` at buf (a collective: every rank calls it
 * with the same root and size). Returns 0 or -1 with a message. */
int pfl_transport_share(pfl_transport *t, void *buf, size_t bytes, int root);

/* Element-wise sum of v[0..n) over all ranks, left in v on every rank
 * (a collective). Integer sums are exact in any order. */
int pfl_transport_sum_longs(pfl_transport *t, long *v, size_t n);

/* Payload bytes received so far, summed over ranks (a collective): in[0] by
 * rank 0 (the server) in shares, in[1] by ranks 1..P-1 in shares, in[2] by
 * all ranks in sums. Zeros in-process. */
int pfl_transport_traffic(pfl_transport *t, long in[3]);

#endif
