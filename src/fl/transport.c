/* The transport (transport.h): in-process, and over MPI when built with
 * -DPFL_MPI. Every MPI call of pfl is in this file. */
#include "fl/transport.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/err.h"

#ifdef PFL_MPI
#include <mpi.h>
#endif

/* The number of processes mpirun started, from the environment it sets
 * (Open MPI, then the PMI of MPICH and Slurm); 0 when not under mpirun. */
static int launched_size(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return atoi(v);
    }
    return 0;
}

bool pfl_transport_distributed(const pfl_transport *t) { return t && t->size > 1; }

int pfl_transport_owner(const pfl_transport *t, int client) {
    return pfl_transport_distributed(t) ? 1 + client % (t->size - 1) : 0;
}

bool pfl_transport_owns(const pfl_transport *t, int client) {
    return !pfl_transport_distributed(t) || pfl_transport_owner(t, client) == t->rank;
}

int pfl_transport_owned_count(const pfl_transport *t, int clients) {
    if (!pfl_transport_distributed(t)) return clients;
    if (t->rank == 0) return 0;
    /* clients rank - 1, rank - 1 + (size - 1), ... below `clients` */
    const int first = t->rank - 1, stride = t->size - 1;
    return first < clients ? (clients - 1 - first) / stride + 1 : 0;
}

int pfl_transport_local_index(const pfl_transport *t, int client) {
    return pfl_transport_distributed(t) ? client / (t->size - 1) : client;
}

#ifdef PFL_MPI

int pfl_transport_init(pfl_transport *t) {
    memset(t, 0, sizeof *t);
    t->size = 1;
    if (launched_size() < 1) return 0; /* a plain run: no MPI at all */
    /* MPI is called from the main thread only, outside parallel regions */
    int provided;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return pfl_err("mpi: MPI_Init_thread failed");
    t->mpi = true;
    MPI_Comm_rank(MPI_COMM_WORLD, &t->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &t->size);
    if (provided < MPI_THREAD_FUNNELED) return pfl_err("mpi: the MPI library offers no MPI_THREAD_FUNNELED");
    return 0;
}

void pfl_transport_finish(pfl_transport *t) {
    if (t->mpi) MPI_Finalize();
    t->mpi = false;
}

void pfl_transport_abort(const pfl_transport *t, int code) {
    if (t && t->mpi && t->size > 1) MPI_Abort(MPI_COMM_WORLD, code);
}

int pfl_transport_wait_all(pfl_transport *t) {
    if (!pfl_transport_distributed(t)) return 0;
    MPI_Request req;
    if (MPI_Ibarrier(MPI_COMM_WORLD, &req) != MPI_SUCCESS) return pfl_err("mpi: barrier failed");
    /* polls from every 50 us (a short wait stays short) to every 2 ms (a
     * long one costs next to nothing), far below a round's time */
    long pause_ns = 50000;
    for (int done = 0;;) {
        if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return pfl_err("mpi: barrier failed");
        if (done) return 0;
        const struct timespec pause = {0, pause_ns};
        nanosleep(&pause, NULL);
        if (pause_ns < 2000000) pause_ns *= 2;
    }
}

/* MPI counts are ints: large buffers go in pieces of at most 1 GiB. */
#define CHUNK ((size_t)1 << 30)

int pfl_transport_share(pfl_transport *t, void *buf, size_t bytes, int root) {
    if (!pfl_transport_distributed(t) || bytes == 0) return 0;
    for (size_t done = 0; done < bytes; done += CHUNK) {
        const size_t n = bytes - done < CHUNK ? bytes - done : CHUNK;
        if (MPI_Bcast((char *)buf + done, (int)n, MPI_BYTE, root, MPI_COMM_WORLD) != MPI_SUCCESS)
            return pfl_err("mpi: broadcast of %zu bytes from rank %d failed", bytes, root);
    }
    if (t->rank != root) t->shared_in += (long)bytes;
    return 0;
}

int pfl_transport_sum_longs(pfl_transport *t, long *v, size_t n) {
    if (!pfl_transport_distributed(t) || n == 0) return 0;
    const size_t chunk = CHUNK / sizeof(long);
    for (size_t done = 0; done < n; done += chunk) {
        const size_t k = n - done < chunk ? n - done : chunk;
        if (MPI_Allreduce(MPI_IN_PLACE, v + done, (int)k, MPI_LONG, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS)
            return pfl_err("mpi: sum of %zu values failed", n);
    }
    t->reduced_in += (long)(n * sizeof(long));
    return 0;
}

#else /* built without MPI: one process, always */

int pfl_transport_init(pfl_transport *t) {
    memset(t, 0, sizeof *t);
    t->size = 1;
    const int launched = launched_size();
    if (launched > 1)
        return pfl_err("mpirun started %d processes, but pfl was built without MPI (apt-get install libopenmpi-dev "
                       "openmpi-bin, then rebuild); each would run the whole experiment",
                       launched);
    return 0;
}

void pfl_transport_finish(pfl_transport *t) { (void)t; }

void pfl_transport_abort(const pfl_transport *t, int code) { (void)t, (void)code; }

int pfl_transport_wait_all(pfl_transport *t) {
    (void)t;
    return 0;
}

int pfl_transport_share(pfl_transport *t, void *buf, size_t bytes, int root) {
    (void)t, (void)buf, (void)bytes, (void)root;
    return 0;
}

int pfl_transport_sum_longs(pfl_transport *t, long *v, size_t n) {
    (void)t, (void)v, (void)n;
    return 0;
}

#endif

int pfl_transport_traffic(pfl_transport *t, long in[3]) {
    in[0] = in[1] = in[2] = 0;
    if (!pfl_transport_distributed(t)) return 0;
    long mine[3] = {t->rank == 0 ? t->shared_in : 0, t->rank == 0 ? 0 : t->shared_in, t->reduced_in};
    if (pfl_transport_sum_longs(t, mine, 3)) return -1;
    t->reduced_in -= (long)sizeof mine; /* this report is not part of the run */
    memcpy(in, mine, sizeof mine);
    return 0;
}
