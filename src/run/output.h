/* The outputs of a run (output.c), for the experiment (experiment.c): the
 * progress lines, metrics.jsonl, summary.json and the checkpoint's own
 * sections (the run's flags and report). Private to src/run/ (not in pfl.h):
 * the functions carry pfl_ only so that libpfl defines no global name
 * outside its prefix. */
#ifndef PFL_RUN_OUTPUT_H
#define PFL_RUN_OUTPUT_H

#include <stdbool.h>
#include <stdio.h>

#include "run/folder.h"
#include "run/run.h"
#include "util/err.h" /* PFL_PRINTF */
#include "util/sha256.h"

/* An evaluated round, as the run keeps it for what needs them all: rounds
 * to convergence, the early stop (--auto-break), the final fairness
 * figures. Resuming rebuilds the list from the metrics.jsonl lines kept. */
typedef struct {
    int round;
    double local, global;   /* local_acc, global_acc (NAN: none) */
    double p10, min;        /* local_acc_p10, local_acc_min */
} run_eval;

/* What the run reports, kept across rounds (and in checkpoints). */
typedef struct {
    const pfl_run_options *o;
    run_folder *folder;     /* o->out, when this run claimed it (NULL: its caller holds it, or none) */
    FILE *metrics;
    pfl_sha256 metrics_sha; /* of every byte of metrics.jsonl so far: a checkpoint records the rows it covers */
    uint64_t metrics_bytes;
    bool write_failed;      /* a metrics line could not be written: the run stops after the round (message set) */
    double best_local, best_global, final_local, final_global, final_local_mean, final_local_std;
    int best_local_round, best_global_round;
    double started;   /* monotonic clock when round 0's evaluation began */
    double elapsed;   /* wall time of the run so far, training and evaluation */
    pfl_traffic traffic; /* MPI: payload bytes received by the server, by the client ranks (together and the
                          * most by one), in evaluation sums */
    long peak_rss, state_bytes; /* the largest peak resident memory of the run's processes, the bytes their
                                 * per-client stores hold at the end (pfl_run_measure_memory) */
    int holdout;      /* samples held out as the public set (--public) */
    run_eval *evals;  /* every evaluation so far, round 0 included */
    int num_evals, cap_evals;
    int evals_resumed; /* of them, those a checkpoint's metrics brought (evaluated by an earlier process) */
    bool stopped_early; /* --auto-break stopped the run after its last evaluation */
    int diverged_round; /* the first round whose training loss or global model was not finite; 0: none */
    /* checkpoints: the run's flags, "--name=value" strings each ended by a NUL */
    char *flags;
    size_t flags_len;
} run_report;

/* A fresh report of the run o describes, with room for every evaluation
 * it can make. 0, or -1 with a message. */
int pfl_run_report_init(run_report *r, const pfl_run_options *o);

/* A progress line (printf format, no newline), unless the run is quiet:
 * to o->progress, or to stderr. */
void pfl_run_say(const pfl_run_options *o, const char *fmt, ...) PFL_PRINTF(2, 3);

/* The round loop's callbacks (ctx: the run_report): the round's progress
 * line and metrics line; after the round, the checkpoint when one is due
 * and --stop-after. */
void pfl_run_on_round(const pfl_round_metrics *m, const pfl_fl *fl, void *ctx);
int pfl_run_after_round(pfl_fl *fl, void *ctx);

/* DIR/metrics.jsonl, new (DIR exists), or, resuming after `round` from the
 * checkpoint rd, with the lines the checkpoint covers kept (and read back
 * into r->evals) and opened to append. Resuming refuses lines that are not
 * the ones the checkpoint was written after (its digest of them: edited, or
 * another run's), before changing anything. NULL with a message. */
FILE *pfl_run_open_metrics(const char *out);
FILE *pfl_run_reopen_metrics(run_report *r, pfl_ckpt_reader *rd, int round);
/* Closes r->metrics, checked (every line on disk): 0 or -1 with a message. */
int pfl_run_close_metrics(run_report *r);

/* --auto-break: true when the best local_acc among the evaluations so far
 * (round 0 included, the first of equals) lies more than --top-cnt
 * evaluations back, PFLlib's check_done. */
bool pfl_run_should_stop_early(const run_report *r);

/* Every process's peak resident memory (getrusage), of which r keeps the
 * largest, and the bytes the per-client stores hold, summed over the
 * processes (under mpirun the clients' rows are split among the ranks that
 * own them; a method's server-side stores are on every rank). A collective
 * under MPI. 0 or -1 with a message. */
int pfl_run_measure_memory(const pfl_fl *fl, run_report *r);

/* DIR/summary.json, atomically; and the last progress lines of the run. */
int pfl_run_write_summary(const pfl_fl *fl, const run_report *r);
void pfl_run_say_done(const pfl_fl *fl, const run_report *r);

/* Checkpoints: the flags alone (before anything runs: pfl resume starts
 * such a run over), and reading back the report a checkpoint holds. */
int pfl_run_write_start_checkpoint(const run_report *r);
int pfl_run_load_report(pfl_ckpt_reader *rd, run_report *r);

#endif
