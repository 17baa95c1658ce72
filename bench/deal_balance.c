/* How evenly each way of dealing clients to MPI ranks spreads a round's
 * work (src/fl/deal.c), measured in the work itself (samples trained: one
 * epoch over each selected client's training split), not in seconds, so a
 * loaded machine changes nothing. A round takes as long as its busiest
 * rank, so per rule and client-rank count K it prints the mean over the
 * rounds of (busiest rank's work) / (the round's work / K): 1.00 is a
 * perfect split, K the worst. Rules: the fixed rule pfl used before (client
 * c on rank 1 + c mod K), the homes (consecutive blocks of the whole
 * federation by work: where stateful clients train) and the round's own
 * deal (the round's clients in consecutive blocks by work: where clients
 * that keep no state train). For the round's deal it also prints the share
 * of a round's clients dealt away from their home: what a stateful client
 * would cost if its state travelled with it (twice a round, there and
 * back).
 *   make build/bench/deal_balance && build/bench/deal_balance [DATA] [PARTITION] [CLIENTS] [JOIN] [ROUNDS] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fl/fl.h"
#include "fl/loop.h"
#include "run/run.h"
#include "util/err.h"

/* The busiest of K ranks over the round's work, given each client's rank. */
static double busiest_share(const long *work, const int *sel, int n, const int *rank_of, int K) {
    double load[64] = {0}, total = 0;
    for (int k = 0; k < n; k++) load[rank_of[k]] += (double)work[sel[k]], total += (double)work[sel[k]];
    double most = 0;
    for (int r = 0; r < K; r++) most = load[r] > most ? load[r] : most;
    return total > 0 ? most / (total / K) : 1.0;
}

/* The block of `bounds` (K blocks) that holds item i. */
static int block_of(const int *bounds, int K, int i) {
    int b = 0;
    while (b + 1 < K && bounds[b + 1] <= i) b++;
    return b;
}

int main(int argc, char **argv) {
    const char *data = argc > 1 ? argv[1] : "mnist", *partition = argc > 2 ? argv[2] : "pat:2";
    const int N = argc > 3 ? atoi(argv[3]) : 20, rounds = argc > 5 ? atoi(argv[5]) : 50;
    const double join = argc > 4 ? atof(argv[4]) : 0.5;
    const char *dir = getenv("PFL_DATA") ? getenv("PFL_DATA") : "./data";
    pfl_dataset d;
    pfl_partition p;
    if (N < 1 || rounds < 1 || pfl_run_load_partitioned(data, dir, partition, N, 1, 0.75, 0, NULL, &d, &p)) {
        fprintf(stderr, "deal_balance: %s\n", N < 1 || rounds < 1 ? "clients and rounds must be positive" : pfl_errmsg());
        return 1;
    }
    pfl_config cfg = {.clients = N, .join = join, .seed = 1};
    long *work = malloc(sizeof(long) * (size_t)N), *round_work = malloc(sizeof(long) * (size_t)N);
    int *sel = malloc(sizeof(int) * (size_t)N), *ranks = malloc(sizeof(int) * (size_t)N * 3);
    int homes[65], deal[65];
    for (int c = 0; c < N; c++) work[c] = p.clients[c].n_train > 0 ? p.clients[c].n_train : 1;
    printf("%s %s, %d clients, join %g, %d rounds: mean over rounds of busiest rank / even share\n\n", data, partition,
           N, join, rounds);
    printf("| client ranks | c mod K | homes by work | round's deal by work | round's clients away from home |\n");
    printf("|---:|---:|---:|---:|---:|\n");
    const int ks[] = {1, 2, 3, 7, 15};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        const int K = ks[i];
        double share[3] = {0}, away = 0;
        if (pfl_split_by_work(work, N, K, homes)) return 1;
        for (int r = 1; r <= rounds; r++) {
            const int n = pfl_select_clients(&cfg, r, sel);
            for (int k = 0; k < n; k++) round_work[k] = work[sel[k]];
            if (pfl_split_by_work(round_work, n, K, deal)) return 1;
            int moved = 0;
            for (int k = 0; k < n; k++) {
                ranks[k] = sel[k] % K, ranks[N + k] = block_of(homes, K, sel[k]), ranks[2 * N + k] = block_of(deal, K, k);
                moved += ranks[N + k] != ranks[2 * N + k];
            }
            for (int rule = 0; rule < 3; rule++) share[rule] += busiest_share(work, sel, n, ranks + rule * N, K);
            away += (double)moved / n;
        }
        printf("| %d | %.2f | %.2f | %.2f | %.0f%% |\n", K, share[0] / rounds, share[1] / rounds, share[2] / rounds,
               100.0 * away / rounds);
    }
    free(work), free(round_work), free(sel), free(ranks);
    pfl_partition_free(&p);
    pfl_dataset_free(&d);
    return 0;
}
