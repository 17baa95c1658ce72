/* Who does what under MPI and the transport's bookkeeping, without MPI
 * (tests/e2e/mpi.sh runs mpirun):
 *
 *  - pfl_split_by_work on hand-worked cases, and on random work: blocks in
 *    order that cover every item, the busiest as light as any consecutive
 *    split allows (checked against every split, by dynamic programming);
 *  - homes: for any process count every client has exactly one home among
 *    ranks 1..P-1 (rank 0, the server, keeps none), in consecutive blocks;
 *    in-process (NULL or one process) every client is rank 0's;
 *  - a round's deal: a run whose clients keep no state deals the round's
 *    slots by work; a stateful one trains each client at its home;
 *  - the in-process primitives move nothing and count nothing;
 *  - a stateful federation on rank 2 of 3 writes the rows of its own clients
 *    only (under ASan a row outside the allocation would be caught);
 *  - a build without MPI refuses to start as one of several mpirun copies. */
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "check.h"
#include "fl/fl.h"
#include "fl/loop.h"
#include "fl/transport.h"
#include "tiny.h"

static void check_split(const long *work, int n, int parts, const int *want) {
    int bounds[8];
    CHECK(pfl_split_by_work(work, n, parts, bounds) == 0, "split failed: %s", pfl_errmsg());
    for (int b = 0; b <= parts; b++)
        CHECK(bounds[b] == want[b], "split of %d items into %d: bound %d is %d, not %d", n, parts, b, bounds[b], want[b]);
}

static void test_split_by_hand(void) {
    /* at most 2 a block; the first cut nearest to 4/3 (1), the second to 1 + 3/2 (2 and 3 tie: the earlier) */
    check_split((const long[]){1, 1, 1, 1}, 4, 3, (const int[]){0, 1, 2, 4});
    /* the 5 alone: at most 5 a block */
    check_split((const long[]){5, 1, 1, 1}, 4, 2, (const int[]){0, 1, 4});
    /* at most 4: the 4 alone */
    check_split((const long[]){1, 1, 4}, 3, 2, (const int[]){0, 2, 3});
    /* 6 of 3 + 3 + 3 + 3 + 6 into 3: at most 6, cuts nearest to 6 and to 6 + 6 */
    check_split((const long[]){6, 3, 3, 3, 3}, 5, 3, (const int[]){0, 1, 3, 5});
    /* no work: by count, 1.5 of 3 (a tie goes to the earlier cut) */
    check_split((const long[]){0, 0, 0}, 3, 2, (const int[]){0, 1, 3});
    /* more blocks than items: some stay empty */
    check_split((const long[]){2, 2}, 2, 4, (const int[]){0, 0, 1, 1, 2});
    check_split(NULL, 0, 3, (const int[]){0, 0, 0, 0});
}

/* The least the busiest of `parts` consecutive blocks can hold (every split tried, by dynamic programming). */
static long best_split(const long *prefix, int n, int parts) {
    long best[9][41];
    for (int i = 0; i <= n; i++) best[1][i] = prefix[i];
    for (int b = 2; b <= parts; b++)
        for (int i = 0; i <= n; i++) {
            best[b][i] = best[b - 1][i];
            for (int j = 0; j <= i; j++) {
                const long most = best[b - 1][j] > prefix[i] - prefix[j] ? best[b - 1][j] : prefix[i] - prefix[j];
                if (most < best[b][i]) best[b][i] = most;
            }
        }
    return best[parts][n];
}

static void test_split_random(void) {
    pfl_rng rng = pfl_rng_stream(3, 0, 0, PFL_RNG_BENCH);
    long work[40], prefix[41];
    int bounds[9];
    for (int trial = 0; trial < 300; trial++) {
        const int n = (int)pfl_rng_below(&rng, 40), parts = 1 + (int)pfl_rng_below(&rng, 8);
        prefix[0] = 0;
        for (int i = 0; i < n; i++) work[i] = 1 + (long)pfl_rng_below(&rng, 100), prefix[i + 1] = prefix[i] + work[i];
        CHECK(pfl_split_by_work(work, n, parts, bounds) == 0, "trial %d: split failed", trial);
        CHECK(bounds[0] == 0 && bounds[parts] == n, "trial %d: blocks do not cover 0..%d", trial, n);
        long most = 0;
        for (int b = 0; b < parts; b++) {
            CHECK(bounds[b] <= bounds[b + 1], "trial %d: block %d goes backwards", trial, b);
            const long held = prefix[bounds[b + 1]] - prefix[bounds[b]];
            most = held > most ? held : most;
        }
        CHECK(most == best_split(prefix, n, parts), "trial %d: %d items into %d: the busiest block holds %ld, %ld is "
              "possible", trial, n, parts, most, best_split(prefix, n, parts));
    }
}

/* A federation of `clients` clients of unequal work as rank `rank` of `size` sees it. */
static void start_as(tiny_fed *f, const pfl_algo *algo, pfl_transport *t, int clients) {
    int n_train[16], n_test[16];
    for (int c = 0; c < clients; c++) n_train[c] = 1 + (c * 7) % 5, n_test[c] = 1;
    pfl_config cfg = tiny_config(clients);
    cfg.transport = t;
    tiny_fed_init(f, algo, cfg, n_train, n_test);
}

static void test_homes(void) {
    for (int size = 2; size <= 5; size++)
        for (int clients = 1; clients <= 13; clients += 3) {
            int homes[16] = {0};
            for (int rank = 0; rank < size; rank++) {
                pfl_transport t = {.rank = rank, .size = size};
                tiny_fed f;
                start_as(&f, &pfl_algo_fedavg, &t, clients);
                int last = -1;
                for (int c = 0; c < clients; c++) {
                    const int home = pfl_fl_home(&f.fl, c);
                    CHECK(home >= 1 && home < size, "size %d: client %d's home is rank %d", size, c, home);
                    CHECK(home >= last, "size %d: client %d's home %d comes before %d's", size, c, home, last);
                    last = home;
                    CHECK(pfl_fl_at_home(&f.fl, c) == (home == rank), "size %d rank %d: client %d at home %d", size,
                          rank, c, home);
                    homes[c] += pfl_fl_at_home(&f.fl, c);
                }
                tiny_fed_free(&f);
            }
            for (int c = 0; c < clients; c++)
                CHECK(homes[c] == 1, "size %d: client %d has %d homes", size, c, homes[c]);
        }
    pfl_transport one = {.rank = 0, .size = 1};
    pfl_transport *inproc[2] = {NULL, &one};
    for (int i = 0; i < 2; i++) {
        tiny_fed f;
        start_as(&f, &pfl_algo_fedavg, inproc[i], 7);
        CHECK(!pfl_transport_distributed(inproc[i]), "in-process transport %d is distributed", i);
        for (int c = 0; c < 7; c++)
            CHECK(pfl_fl_at_home(&f.fl, c) && pfl_fl_home(&f.fl, c) == 0, "in-process client %d", c);
        tiny_fed_free(&f);
    }
}

static void test_round_deal(void) {
    pfl_transport t = {.rank = 1, .size = 4};
    const int selected[5] = {0, 2, 3, 5, 6};
    /* FedAvg keeps nothing of a client: the slots go by work (1 + 7c mod 5 training samples: 1 5 2 1 3) */
    tiny_fed f;
    start_as(&f, &pfl_algo_fedavg, &t, 7);
    CHECK(f.fl.clients_move, "fedavg's clients do not move");
    CHECK(pfl_fl_deal_round(&f.fl, selected, 5) == 0, "deal failed");
    const int moving[5] = {0, 0, 2, 4, 5}; /* at most 6 a rank, the second cut nearest to 9: 1 5 | 2 1 | 3 */
    for (int r = 0; r <= 4; r++)
        CHECK(f.fl.slot_first[r] == (r == 4 ? 5 : moving[r]), "fedavg: rank %d's slots start at %d", r,
              f.fl.slot_first[r]);
    tiny_fed_free(&f);
    /* Ditto keeps a model per client: each slot trains at its client's home */
    start_as(&f, &pfl_algo_ditto, &t, 7);
    CHECK(!f.fl.clients_move, "ditto's clients move");
    CHECK(pfl_fl_deal_round(&f.fl, selected, 5) == 0, "deal failed");
    for (int k = 0; k < 5; k++)
        CHECK(pfl_fl_trainer(&f.fl, k) == pfl_fl_home(&f.fl, selected[k]), "ditto: slot %d trains on rank %d, home %d",
              k, pfl_fl_trainer(&f.fl, k), pfl_fl_home(&f.fl, selected[k]));
    tiny_fed_free(&f);
}

static void test_in_process_primitives(void) {
    /* outside mpirun (the test runner is not one) init sets up one process */
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("PMI_SIZE");
    pfl_transport t;
    CHECK(pfl_transport_init(&t) == 0, "init: %s", pfl_errmsg());
    CHECK(t.size == 1 && t.rank == 0 && !t.mpi, "in-process init: size %d rank %d mpi %d", t.size, t.rank, t.mpi);
    float buf[3] = {1, 2, 3}, all[3] = {0};
    long v[2] = {5, -6};
    int largest = 0;
    const size_t bytes[1] = {sizeof buf};
    CHECK(pfl_transport_share(&t, buf, sizeof buf, 0) == 0 && buf[0] == 1 && buf[2] == 3, "share changed the buffer");
    CHECK(pfl_transport_send(&t, buf, sizeof buf, 0) == 0 && pfl_transport_recv(&t, buf, sizeof buf, 0) == 0 &&
              buf[1] == 2,
          "send or receive changed the buffer");
    CHECK(pfl_transport_gather(&t, buf, all, bytes) == 0 && memcmp(buf, all, sizeof buf) == 0, "gather is no copy");
    CHECK(pfl_transport_sum_longs(&t, v, 2) == 0 && v[0] == 5 && v[1] == -6, "sum changed the values");
    CHECK(pfl_transport_max_int(&t, 15, &largest) == 0 && largest == 15, "the vote of one is %d", largest);
    CHECK(pfl_transport_wait_all(&t) == 0, "wait_all failed");
    pfl_traffic in = {1, 1, 1, 1};
    CHECK(pfl_transport_traffic(&t, &in) == 0 && !in.to_server && !in.to_clients && !in.to_client_max && !in.eval,
          "in-process traffic");
    CHECK(!t.in[PFL_TALLY_ROUND] && !t.in[PFL_TALLY_EVAL] && !t.in[PFL_TALLY_OTHER], "in-process counted bytes");
    pfl_transport_finish(&t);
#ifndef PFL_MPI
    setenv("OMPI_COMM_WORLD_SIZE", "3", 1);
    CHECK(pfl_transport_init(&t) == -1 && strstr(pfl_errmsg(), "without MPI"),
          "a build without MPI under mpirun -np 3 must refuse: '%s'", pfl_errmsg());
    unsetenv("OMPI_COMM_WORLD_SIZE");
#endif
}

static void test_own_client_models(void) {
    /* rank 2 of 3, 5 clients of equal work: rank 1 keeps clients 0 and 1, rank 2 clients 2..4 */
    pfl_transport t = {.rank = 2, .size = 3};
    pfl_config cfg = tiny_config(5);
    cfg.transport = &t;
    const int n_train[5] = {4, 4, 4, 4, 4}, n_test[5] = {2, 2, 2, 2, 2};
    tiny_fed f;
    tiny_fed_init(&f, &pfl_algo_ditto, cfg, n_train, n_test); /* whole personal models */
    const size_t P = f.m.num_params;
    for (int c = 0; c < 5; c++)
        CHECK(pfl_fl_at_home(&f.fl, c) == (c >= 2), "rank 2 of 3: client %d at home %d", c, pfl_fl_at_home(&f.fl, c));
    float *two = pfl_client_model(&f.fl, 2), *four = pfl_client_model(&f.fl, 4);
    CHECK(two && four && two != four, "clients 2 and 4 share a row");
    CHECK(tiny_same(four, f.fl.global, 0, P), "client 4 does not start from the global model");
    for (int c = 0; c < 5; c++)
        CHECK(pfl_store_touched(f.fl.client_state, c) == (c == 2 || c == 4), "client %d's row written: %d", c,
              pfl_store_touched(f.fl.client_state, c));
    CHECK(pfl_fl_state_bytes(&f.fl) == 2 * pfl_store_row_len(f.fl.client_state) * sizeof(float),
          "rank 2 holds %llu bytes of client state", (unsigned long long)pfl_fl_state_bytes(&f.fl));
    tiny_fed_free(&f);
}

int main(void) {
    test_split_by_hand();
    test_split_random();
    test_homes();
    test_round_deal();
    test_in_process_primitives();
    test_own_client_models();
    TEST_MAIN_END();
}
