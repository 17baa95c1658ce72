/* Who does what under MPI: which rank keeps and evaluates each client (its
 * home) and which trains each client of a round. Both are consecutive
 * blocks of clients of about equal work, so the uploads of a round lie on
 * the ranks in slot order and the weighted sum can run from rank to rank in
 * the order one process sums them (stages.c). In-process rank 0 has every
 * client. docs/architecture.md, "Processes", has the design. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fl/loop.h"
#include "util/err.h"

/* For every start i, reach[i]: the end of the longest block from i of at
 * most `cap` work (cap is at least the largest item, so reach[i] > i), and
 * need[i]: the fewest such blocks that hold items [i, n) (need[n] = 0). */
static void blocks_needed(const long *w, int n, long cap, int *reach, int *need) {
    long sum = 0; /* the work of [i, j) */
    for (int i = 0, j = 0; i < n; i++) {
        while (j < n && sum + w[j] <= cap) sum += w[j++];
        reach[i] = j;
        sum -= w[i];
    }
    reach[n] = n, need[n] = 0;
    for (int i = n - 1; i >= 0; i--) need[i] = 1 + need[reach[i]];
}

int pfl_split_by_work(const long *work, int n, int parts, int *bounds) {
    long *w = pfl_malloc(sizeof(long) * (size_t)(n + 1)), *prefix = pfl_malloc(sizeof(long) * (size_t)(n + 1));
    int *reach = pfl_malloc(sizeof(int) * (size_t)(n + 1)), *need = pfl_malloc(sizeof(int) * (size_t)(n + 1));
    if (!w || !prefix || !reach || !need) {
        free(w), free(prefix), free(reach), free(need);
        return -1;
    }
    long total = 0, largest = 0;
    for (int i = 0; i < n; i++) total += work[i] > 0 ? work[i] : 0;
    prefix[0] = 0;
    for (int i = 0; i < n; i++) { /* no work at all: by count */
        w[i] = total > 0 ? (work[i] > 0 ? work[i] : 0) : 1;
        prefix[i + 1] = prefix[i] + w[i], largest = w[i] > largest ? w[i] : largest;
    }
    total = prefix[n];
    /* the least a busiest block can hold (binary search: can `parts` blocks of at most cap hold everything?) */
    long lo = largest, hi = total > largest ? total : largest;
    while (lo < hi) {
        const long cap = lo + (hi - lo) / 2;
        blocks_needed(w, n, cap, reach, need);
        if (need[0] <= parts) hi = cap;
        else lo = cap + 1;
    }
    blocks_needed(w, n, lo, reach, need);
    /* within that bound, each cut nearest to an even share of what is left, leaving enough room behind it */
    bounds[0] = 0;
    for (int b = 0, start = 0; b < parts; b++) {
        const int left = parts - b; /* blocks still to fill, this one included */
        int cut = n;
        if (left > 1) {
            const double target = (double)prefix[start] + (double)(total - prefix[start]) / left;
            int e = start;
            while (need[e] > left - 1) e++; /* the rest must fit in the blocks after this one */
            cut = e;
            for (; e <= reach[start]; e++)
                if (fabs((double)prefix[e] - target) < fabs((double)prefix[cut] - target)) cut = e;
        }
        bounds[b + 1] = start = cut;
    }
    free(w), free(prefix), free(reach), free(need);
    return 0;
}

long pfl_client_work(const pfl_fl *fl, int client) {
    const long n_train = fl->part->clients[client].n_train, E = fl->cfg.epochs > 0 ? fl->cfg.epochs : 1;
    const long K = fl->cfg.algo.local_steps, batch = fl->cfg.batch;
    /* --local-steps K: every epoch is K batches, whatever the client holds */
    const long per_epoch = K > 0 ? K * (n_train < batch ? n_train : batch) : n_train;
    return E * per_epoch > 0 ? E * per_epoch : 1; /* a client without data still costs its evaluation */
}

/* The ranks that hold clients: 1..P-1 under MPI, rank 0 in-process. */
static int first_client_rank(const pfl_fl *fl) { return pfl_transport_distributed(fl->cfg.transport) ? 1 : 0; }

static int ranks(const pfl_fl *fl) {
    return pfl_transport_distributed(fl->cfg.transport) ? fl->cfg.transport->size : 1;
}

static int this_rank(const pfl_fl *fl) {
    return pfl_transport_distributed(fl->cfg.transport) ? fl->cfg.transport->rank : 0;
}

/* bounds[0..P]: rank r has items [bounds[r], bounds[r+1]); the server
 * (rank 0 under MPI) none, the client ranks consecutive blocks by work. */
static int deal(const pfl_fl *fl, const long *work, int n, int *bounds) {
    const int first = first_client_rank(fl);
    for (int r = 0; r <= first; r++) bounds[r] = 0;
    return pfl_split_by_work(work, n, ranks(fl) - first, bounds + first);
}

int pfl_fl_deal_homes(pfl_fl *fl) {
    const int N = fl->cfg.clients, P = ranks(fl);
    long *work = pfl_malloc(sizeof(long) * (size_t)(N ? N : 1));
    if (!work || !(fl->home_first = pfl_malloc(sizeof(int) * (size_t)(P + 1))) ||
        !(fl->slot_first = pfl_malloc(sizeof(int) * (size_t)(P + 1)))) {
        free(work);
        return -1;
    }
    for (int c = 0; c < N; c++) work[c] = pfl_client_work(fl, c);
    const int rc = deal(fl, work, N, fl->home_first);
    free(work);
    return rc;
}

/* The rank whose block [bounds[r], bounds[r+1]) holds item i. */
static int rank_of(const pfl_fl *fl, const int *bounds, int i) {
    int lo = 0, hi = ranks(fl) - 1;
    while (lo < hi) { /* the last rank whose block starts at or before i, among the non-empty ones */
        const int mid = (lo + hi + 1) / 2;
        if (bounds[mid] <= i) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

int pfl_fl_home(const pfl_fl *fl, int client) { return rank_of(fl, fl->home_first, client); }

bool pfl_fl_at_home(const pfl_fl *fl, int client) {
    const int r = this_rank(fl);
    return fl->home_first[r] <= client && client < fl->home_first[r + 1];
}

int pfl_fl_deal_round(pfl_fl *fl, const int *selected, int n) {
    const int P = ranks(fl);
    if (!fl->clients_move) { /* each client trains where its state is: the slots of each home's block */
        for (int r = 0, k = 0; r <= P; r++) {
            while (k < n && selected[k] < fl->home_first[r]) k++;
            fl->slot_first[r] = r == P ? n : k;
        }
        return 0;
    }
    long *work = pfl_malloc(sizeof(long) * (size_t)(n ? n : 1));
    if (!work) return -1;
    for (int k = 0; k < n; k++) work[k] = pfl_client_work(fl, selected[k]);
    const int rc = deal(fl, work, n, fl->slot_first);
    free(work);
    return rc;
}

int pfl_fl_trainer(const pfl_fl *fl, int slot) { return rank_of(fl, fl->slot_first, slot); }

void pfl_fl_my_slots(const pfl_fl *fl, int *first, int *end) {
    const int r = this_rank(fl);
    *first = fl->slot_first[r], *end = fl->slot_first[r + 1];
}
