/* FedAvg's wiring on the uneven federation (tests/wiring.h), the pattern
 * the other wiring tests follow: each round is computed again here from
 * the global model the round started from (the clients the round selects,
 * each trained by FedAvg's step from that global model, their mean by
 * training samples) and compared with the run's global model; and what the
 * run scored for each client is the accuracy of the model FedAvg scores
 * (the global one), recomputed here. */
#include "wiring.h"

typedef struct {
    float *expected;     /* the global model round r should produce */
    float *start, **trained;
    int rounds_checked, scored_checked;
} fedavg_ref;

/* Round r from the global model as it stands (after round r - 1). */
static void fedavg_expect(wiring_fed *w, fedavg_ref *ref, int r) {
    int sel[WIRING_CLIENTS];
    const int n = wiring_selected(w, r, sel);
    double weight[WIRING_CLIENTS];
    memcpy(ref->start, w->f.fl.global, w->V * sizeof(float));
    for (int k = 0; k < n; k++) {
        memcpy(ref->trained[k], ref->start, w->V * sizeof(float));
        pfl_step s = wiring_default_step(w, r);
        wiring_train(w, sel[k], r, ref->trained[k], &s);
    }
    wiring_sample_weights(sel, n, weight);
    memcpy(ref->expected, ref->start, w->V * sizeof(float));
    wiring_mean(ref->expected, ref->trained, weight, n, 0, w->V);
}

static int fedavg_hook(wiring_fed *w, int round, void *ctx) {
    fedavg_ref *ref = ctx;
    const wiring_round *m = &w->rounds[round];
    if (round > 0) {
        CHECK(wiring_close(w->f.fl.global, ref->expected, 0, w->V),
              "fedavg round %d: the global model is not the sample-weighted mean of the selected clients' training "
              "(max diff %g)",
              round, wiring_max_diff(w->f.fl.global, ref->expected, 0, w->V));
        ref->rounds_checked++;
    }
    if (m->evaluated) {
        for (int c = 0; c < WIRING_CLIENTS; c++) {
            const double acc = wiring_accuracy(w, w->f.fl.global, c, true);
            CHECK(fabs(m->client_acc[c] - acc) < 1e-12, "fedavg round %d client %d: scored %g, the global model's %g",
                  round, c, m->client_acc[c], acc);
        }
        ref->scored_checked++;
    }
    if (round < w->f.fl.cfg.rounds) fedavg_expect(w, ref, round + 1);
    return 0;
}

static void test_fedavg_round(void) {
    pfl_config cfg = wiring_config(&pfl_algo_fedavg, WIRING_DNN);
    wiring_fed w;
    wiring_init(&w, &pfl_algo_fedavg, &cfg, WIRING_DNN);
    fedavg_ref ref = {tiny_floats(w.V), tiny_floats(w.V), calloc(WIRING_CLIENTS, sizeof(float *)), 0, 0};
    for (int k = 0; k < WIRING_CLIENTS; k++) ref.trained[k] = tiny_floats(w.V);
    CHECK(wiring_run(&w, fedavg_hook, &ref) == 0, "fedavg: the run failed");
    CHECK(ref.rounds_checked == cfg.rounds && ref.scored_checked == cfg.rounds + 1,
          "fedavg: %d rounds and %d evaluations checked", ref.rounds_checked, ref.scored_checked);
    /* the federation is uneven enough that the mean by samples is not the uniform one, and the model learned */
    CHECK(w.rounds[cfg.rounds].global_acc > w.rounds[0].global_acc + 0.1, "fedavg learned: %g -> %g",
          w.rounds[0].global_acc, w.rounds[cfg.rounds].global_acc);
    for (int k = 0; k < WIRING_CLIENTS; k++) free(ref.trained[k]);
    free(ref.trained), free(ref.expected), free(ref.start);
    wiring_free(&w);
}

int main(void) {
    test_fedavg_round();
    TEST_MAIN_END();
}
