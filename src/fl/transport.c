/* The transport (transport.h): in-process, and over MPI when built with
 * -DPFL_MPI. Every MPI call of pfl is in this file. */
#include "fl/transport.h"

#include <limits.h>
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

#ifdef PFL_MPI

static void count_in(pfl_transport *t, size_t bytes) { t->in[t->tally] += (long)bytes; }

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

static size_t piece(size_t bytes, size_t done) { return bytes - done < CHUNK ? bytes - done : CHUNK; }

int pfl_transport_share(pfl_transport *t, void *buf, size_t bytes, int root) {
    if (!pfl_transport_distributed(t) || bytes == 0) return 0;
    for (size_t done = 0; done < bytes; done += CHUNK)
        if (MPI_Bcast((char *)buf + done, (int)piece(bytes, done), MPI_BYTE, root, MPI_COMM_WORLD) != MPI_SUCCESS)
            return pfl_err("mpi: broadcast of %zu bytes from rank %d failed", bytes, root);
    if (t->rank != root) count_in(t, bytes);
    return 0;
}

int pfl_transport_send(pfl_transport *t, const void *buf, size_t bytes, int to) {
    if (!pfl_transport_distributed(t)) return 0;
    for (size_t done = 0; done < bytes; done += CHUNK)
        if (MPI_Send((const char *)buf + done, (int)piece(bytes, done), MPI_BYTE, to, 0, MPI_COMM_WORLD) !=
            MPI_SUCCESS)
            return pfl_err("mpi: sending %zu bytes to rank %d failed", bytes, to);
    return 0;
}

int pfl_transport_recv(pfl_transport *t, void *buf, size_t bytes, int from) {
    if (!pfl_transport_distributed(t)) return 0;
    for (size_t done = 0; done < bytes; done += CHUNK)
        if (MPI_Recv((char *)buf + done, (int)piece(bytes, done), MPI_BYTE, from, 0, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return pfl_err("mpi: receiving %zu bytes from rank %d failed", bytes, from);
    count_in(t, bytes);
    return 0;
}

int pfl_transport_gather(pfl_transport *t, const void *mine, void *all, const size_t *bytes) {
    if (!pfl_transport_distributed(t)) {
        if (bytes[0] && all != mine) memcpy(all, mine, bytes[0]);
        return 0;
    }
    int *counts = pfl_malloc(sizeof(int) * 2 * (size_t)t->size), *displs = counts + (counts ? t->size : 0);
    if (!counts) return -1;
    size_t at = 0;
    for (int r = 0; r < t->size; r++) {
        if (bytes[r] > INT_MAX || at > INT_MAX) {
            free(counts);
            return pfl_err("mpi: a gather of %zu bytes is more than one call can move", at + bytes[r]);
        }
        counts[r] = (int)bytes[r], displs[r] = (int)at, at += bytes[r];
    }
    const int rc = MPI_Gatherv(mine, counts[t->rank], MPI_BYTE, all, counts, displs, MPI_BYTE, 0, MPI_COMM_WORLD);
    free(counts);
    if (rc != MPI_SUCCESS) return pfl_err("mpi: gathering %zu bytes to rank 0 failed", at);
    if (t->rank == 0) count_in(t, at - bytes[0]);
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
    count_in(t, n * sizeof(long));
    return 0;
}

int pfl_transport_max_int(pfl_transport *t, int mine, int *largest) {
    *largest = mine;
    if (!pfl_transport_distributed(t)) return 0;
    if (MPI_Allreduce(&mine, largest, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD) != MPI_SUCCESS)
        return pfl_err("mpi: the stop vote failed");
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

int pfl_transport_send(pfl_transport *t, const void *buf, size_t bytes, int to) {
    (void)t, (void)buf, (void)bytes, (void)to;
    return 0;
}

int pfl_transport_recv(pfl_transport *t, void *buf, size_t bytes, int from) {
    (void)t, (void)buf, (void)bytes, (void)from;
    return 0;
}

int pfl_transport_gather(pfl_transport *t, const void *mine, void *all, const size_t *bytes) {
    (void)t;
    if (bytes[0] && all != mine) memcpy(all, mine, bytes[0]);
    return 0;
}

int pfl_transport_sum_longs(pfl_transport *t, long *v, size_t n) {
    (void)t, (void)v, (void)n;
    return 0;
}

int pfl_transport_max_int(pfl_transport *t, int mine, int *largest) {
    (void)t;
    *largest = mine;
    return 0;
}

#endif

int pfl_transport_traffic(pfl_transport *t, pfl_traffic *out) {
    memset(out, 0, sizeof *out);
    if (!pfl_transport_distributed(t)) return 0;
    const int P = t->size;
    long *v = pfl_calloc((size_t)P + 1, sizeof(long));
    if (!v) return -1;
    v[t->rank] = t->in[PFL_TALLY_ROUND], v[P] = t->in[PFL_TALLY_EVAL];
    const pfl_tally was = t->tally;
    t->tally = PFL_TALLY_OTHER; /* this report is not part of the run */
    const int rc = pfl_transport_sum_longs(t, v, (size_t)P + 1);
    t->tally = was;
    if (rc == 0) {
        out->to_server = v[0], out->eval = v[P];
        for (int r = 1; r < P; r++) {
            out->to_clients += v[r];
            if (v[r] > out->to_client_max) out->to_client_max = v[r];
        }
    }
    free(v);
    return rc;
}
