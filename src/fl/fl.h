/* The federated round loop as an experiment drives it (DESIGN.md §2, §3):
 * create a federation of a configuration, model, data, partition and
 * method, run its rounds with a callback per round, evaluate, checkpoint and
 * resume, fingerprint. What a method sees is fl/method.h. */
#ifndef PFL_FL_FL_H
#define PFL_FL_FL_H

#include "fl/method.h"

/* Metrics of one evaluated round. Accuracies are fractions; NAN where a
 * quantity does not exist (train loss at round 0, global accuracy of local). */
typedef struct {
    int round;
    double local_acc;        /* sum correct / sum test over clients, personalized models */
    double local_acc_mean;   /* unweighted mean over clients */
    double local_acc_std;    /* population std over clients */
    double local_acc_joined; /* local_acc over the clients selected for the next round only (FedALA's Table 7
                              * "rho = 0.5*": the joining clients); local_acc when every client joins */
    double global_acc;       /* global model on every client's test split */
    const double *client_acc; /* evaluated rounds: each client's personalized accuracy, client order (fl->client_acc,
                               * valid during the callback); NULL otherwise */
    double train_loss;       /* mean loss of this round's local training batches */
    double seconds;          /* wall time of the round (training + aggregation) */
    double eval_seconds;     /* wall time of this evaluation */
    long train_samples;      /* samples trained on this round */
    int selected;            /* clients that trained this round */
    uint64_t bytes_down;     /* this round's message bytes to the clients that trained (pfl_algo.message_bytes) */
    uint64_t bytes_up;       /* ... and from them */
    bool evaluated;          /* false: a training-only report (accuracies NAN) */
    int dropped;             /* --drop-rate: selected clients that dropped out, ... */
    const int *dropped_clients; /* ... ascending (valid during the callback) */
} pfl_round_metrics;

typedef void (*pfl_round_callback)(const pfl_round_metrics *m, const pfl_fl *fl, void *ctx);

/* Sets up workers and the global model (initialized from the seed's INIT
 * stream), and the algorithm's state. Returns 0 or -1 with a message. */
int pfl_fl_create(pfl_fl *fl, const pfl_config *cfg, const pfl_model *model, const pfl_dataset *data,
                  const pfl_partition *part, const pfl_algo *algo);
void pfl_fl_destroy(pfl_fl *fl);

/* Runs rounds 1..R, evaluating before the first round (round 0), every
 * eval_every rounds and after the last; calls `cb` after every round, with
 * m->evaluated telling whether accuracies were measured.
 * Returns 0 or -1 with a message. */
int pfl_fl_run(pfl_fl *fl, pfl_round_callback cb, void *ctx);

/* Called after every round's callback (the experiment writes checkpoints there):
 * returns 0 to go on, 1 to stop after this round, -1 to fail the run. */
typedef int (*pfl_after_round)(pfl_fl *fl, void *ctx);

/* pfl_fl_run with an after-round hook (or NULL), called after round 0's
 * evaluation too (so a checkpoint can hold the state before any training). A
 * stop returns 0 with fl->round < cfg.rounds. After pfl_fl_load (fl->resumed)
 * the run goes on from round fl->round + 1, without the round-0 broadcast
 * and evaluation. */
int pfl_fl_run_with(pfl_fl *fl, pfl_round_callback cb, pfl_after_round after, void *ctx);

/* Checkpoints: writes, as sections "fl.*" and "ala.*" and the algorithm's
 * own, everything of the run that changes from round to round (round,
 * counters, global model, client models, last accuracies, shared layers,
 * ALA weights, algorithm state) and the shape of the federation (parameters,
 * clients, a SHA-256 of the partition) to check on loading. Random streams
 * are keyed by (seed, round, client, purpose) and need no saving. */
int pfl_fl_save(const pfl_fl *fl, pfl_ckpt_writer *w);
/* Reads what pfl_fl_save wrote into fl, just created by pfl_fl_create with
 * the same configuration, model, data and partition; refuses (-1 with a
 * message) a checkpoint of another shape. */
int pfl_fl_load(pfl_fl *fl, pfl_ckpt_reader *r);

/* MPI checkpoints, a collective before rank 0's pfl_fl_save: each client
 * rank writes the rows its clients hold in the per-client stores to
 * DIR/checkpoint.ROUND.RANK-of-P (rank 0 passes DIR, the others NULL), and
 * rank 0 learns the files' checksums and the other figures its pfl_fl_save
 * writes (which names the files). In-process: nothing. 0, or -1 with a
 * message on every rank alike. pfl_fl_load reads the files back for the
 * clients each rank keeps now, with any number of ranks. */
int pfl_fl_save_shards(pfl_fl *fl, const char *dir);
/* After DIR/checkpoint was committed: removes the files of earlier
 * checkpoints it does not name (and those of writes cut short). */
void pfl_fl_remove_old_shards(const pfl_fl *fl, const char *dir);

/* "reduce" or "gather": how the run's uploads meet under MPI (whole_uploads). */
const char *pfl_fl_aggregation(const pfl_fl *fl);

/* SIGTERM and SIGINT (what a batch scheduler sends before it kills a job,
 * and Ctrl-C) no longer kill the process: the round under way finishes,
 * pfl_fl_run_with sets fl->stop_signal, calls the after-round hook (which
 * writes the checkpoint) and returns. Under MPI every rank stops after the
 * same round, whichever got the signal. A second signal kills as usual. */
void pfl_fl_catch_signals(void);
/* The signal that stopped a run of this process before its last round (0: none). */
int pfl_fl_stopped_by(void);

/* SHA-256 of every client's personalized model, the one the evaluation
 * scores now, in client order (the SHA-256 of the concatenated per-client
 * SHA-256 of each model vector's bytes: float32 as the machine stores them,
 * little-endian on x86 and ARM). Under MPI a
 * collective: each owner hashes its clients. pfl_fl_run fills
 * fl->personal_sha256 with it after the last round. */
int pfl_fl_personal_digest(pfl_fl *fl, uint8_t digest[32]);
/* --ala: fl->ala_start from every client's start phase (MPI: a collective,
 * every rank calls it; pfl_fl_run does after the last round, a resume of a
 * finished run's last checkpoint calls it itself); 0, or -1 with a message. */
int pfl_fl_sum_ala_start(pfl_fl *fl);

/* Evaluates now and fills m (round, accuracies; not timing or loss). */
int pfl_fl_evaluate(pfl_fl *fl, pfl_round_metrics *m);


/* The clients of round r: round(join * N) of them (at least 1), drawn from
 * the SELECT stream, ascending. Writes them to out (room for N), returns the count. */
int pfl_select_clients(const pfl_config *cfg, int round, int *out);

/* --drop-rate: removes from clients[0..n) (ascending) those that drop out in
 * `round`, each independently with probability cfg->drop_rate from the
 * stream (seed, round, client, DROP); writes them to dropped (room for n) and
 * their count to *n_dropped. Returns the clients left, still ascending. */
int pfl_drop_clients(const pfl_config *cfg, int round, int *clients, int n, int *dropped, int *n_dropped);

#endif
