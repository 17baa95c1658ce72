/* What runs wrote, read back (results.c, with libjansson), and what is made
 * of it: markdown tables (table.c) and pictures (plot.c, drawn by gnuplot).
 *
 * A run folder is what `pfl run --out DIR` wrote: DIR/summary.json and
 * DIR/metrics.jsonl, or, with --seeds, DIR/summary.json over the seeds and
 * DIR/seed-N/ for each. Readers take either. */
#ifndef PFL_RUN_RESULTS_H
#define PFL_RUN_RESULTS_H

#include <stdbool.h>
#include <stdio.h>

#include "data/data.h"
#include "run/preset.h"

/* A number of a run over its seeds: mean, population std, and how many
 * seeds had it (0: none, mean and std NAN; one seed: std 0). */
typedef struct {
    double mean, std;
    int n;
} pfl_stat;

typedef struct pfl_run_summary pfl_run_summary; /* DIR/summary.json, opaque */

/* Reads DIR/summary.json. NULL with a message naming the file. */
pfl_run_summary *pfl_summary_load(const char *dir);
void pfl_summary_free(pfl_run_summary *s);
/* A field of the summary (best_local_acc, converged_local_round, ...) over
 * the run's seeds: a number for one seed, {"mean", "std", "values"} for
 * several. n = 0 when the field is missing or null. */
pfl_stat pfl_summary_stat(const pfl_run_summary *s, const char *key);
/* The seeds behind the summary (1 for a single run) and its --rounds. */
int pfl_summary_seeds(const pfl_run_summary *s);
int pfl_summary_rounds(const pfl_run_summary *s);
/* A string field ("algo"), or NULL. */
const char *pfl_summary_string(const pfl_run_summary *s, const char *key);

/* One run's evaluations, from its metrics.jsonl as far as whole lines go:
 * per evaluation its round, local_acc, global_acc and train_loss (NAN
 * where the line has none). */
typedef struct {
    int n;
    int *round;
    double *local, *global, *loss;
} pfl_series;
int pfl_series_load(pfl_series *s, const char *metrics_path);
void pfl_series_free(pfl_series *s);

/* The metrics files of a run folder: DIR/metrics.jsonl, or one per
 * DIR/seed-N/ in seed order. A malloc'd list of *n malloc'd paths, or NULL
 * with a message. */
char **pfl_run_metrics_files(const char *dir, int *n);

/* PFLlib's results file (h5.c, with libhdf5): what its servers write with
 * save_results(), ../results/<dataset>_<algo>_<goal>_<i>.h5 holding three
 * float64 datasets, one entry per evaluation (round 0 first):
 *   rs_test_acc    local_acc: correct / test samples over all clients, as
 *                  PFLlib's evaluate() (personalized models where a method has them)
 *   rs_train_loss  train_loss: pfl's mean loss of the round's training batches,
 *                  where PFLlib re-evaluates the loss over every client's
 *                  training data; NaN for round 0, before any training
 *   rs_test_auc    NaN: pfl does not compute PFLlib's AUC
 * A run of several seeds gives one file per seed, in seed order: PATH's
 * name with _0, _1, ... before .h5, as PFLlib numbers its runs ("times").
 * Each is written in a scratch folder beside PATH and moved into place
 * under safe_write.h's rules, several only once all were written: a
 * failure leaves none of them. 0, or -1 with a
 * message naming the file (also when pfl was built without libhdf5). */
int pfl_export_h5(const char *run_dir, const char *path);

/* Accuracy against round, over a run's seeds: the rounds every seed
 * evaluated (round 0 included), with for local_acc and global_acc the mean
 * over seeds, the population std, the least and the largest (NAN where the
 * run has none: global for `local`). A run in progress is read as far as
 * it went. */
typedef struct {
    int n, seeds;
    int *round;
    double *local, *local_std, *local_min, *local_max;
    double *global, *global_std, *global_min, *global_max;
} pfl_curve;

/* Reads DIR/metrics.jsonl, or each DIR/seed-N/metrics.jsonl. 0 or -1 with a message. */
int pfl_curve_load(pfl_curve *c, const char *dir);
void pfl_curve_free(pfl_curve *c);

/* ---- tables (table.c) ---- */

/* A markdown table of run folders (dirs[i], labelled by labels[i] or the
 * folder's name): best and final personalized and global accuracy as mean ±
 * std over seeds, rounds to convergence, seconds per round, seeds x rounds;
 * the best of each column in bold. 0 or -1 with a message. */
int pfl_table_runs(FILE *out, char **dirs, char **labels, int n);

/* The table of a preset from DIR, where DIR/<cell's run>/ holds each cell's
 * run (pfl_preset_cell.run): per cell, pfl's mean ± std in the preset's unit
 * and decimals (best and/or final as the file reports, or iterations to
 * convergence for a cost table), the paper's number beside it and the gap
 * (pfl - paper), the best of each column in bold (pFL-Bench's convention);
 * a cell without a run says why. 0 or -1 with a message. */
int pfl_table_preset(FILE *out, const pfl_preset *p, const char *dir);

/* ---- pictures (plot.c) ---- */

typedef struct {
    bool local, global;  /* which accuracies to draw (personalized solid, global dashed) */
    bool minmax;         /* the band around a multi-seed mean: least to largest seed, instead of ±1 std */
    const char *title;   /* NULL: none */
} pfl_plot_options;

/* Accuracy (%) against round for the runs dirs[0..n) (labels[i], or the
 * folder's name, in the legend): a multi-seed run as its mean over seeds
 * with a shaded band. Writes PREFIX.png and PREFIX.svg (a .png or .svg
 * ending of `prefix` is dropped), drawn by gnuplot. 0 or -1 with a message. */
int pfl_plot_curves(char **dirs, char **labels, int n, const pfl_plot_options *o, const char *prefix);

/* A clients x classes picture of a partition: each client's samples of each
 * class (train and test together), darker for more; PREFIX.png and
 * PREFIX.svg. 0 or -1 with a message. */
int pfl_plot_partition(const pfl_dataset *d, const pfl_partition *p, const char *title, const char *prefix);

#endif
