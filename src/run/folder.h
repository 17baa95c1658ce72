/* A run folder (--out DIR) and who owns it (folder.c), for the experiment
 * (experiment.c, output.c). Private to src/run/ (not in pfl.h).
 *
 * A run's files are DIR/metrics.jsonl, DIR/summary.json, DIR/checkpoint
 * (with the temporary files their writes leave when cut short:
 * NAME.tmp.PID, and an older pfl's checkpoint.tmp; under mpirun the ranks'
 * parts checkpoint.ROUND.RANK-of-P) and, for --seeds, the
 * folders DIR/seed-N/ holding the same. A folder that holds any of them
 * holds a run. Other files in DIR are not the run's and are never touched.
 *
 * While a run or a resume of it goes on, its process holds a lock on DIR
 * (flock on the folder itself, released when the process ends, however it
 * ends), so a second pfl cannot write into it at the same time. */
#ifndef PFL_RUN_FOLDER_H
#define PFL_RUN_FOLDER_H

#include <stdbool.h>

typedef struct {
    char dir[4096];
    int lock_fd;     /* the folder, locked; -1: not held */
    bool made;       /* this process created DIR */
    bool resumable;  /* a checkpoint of a round was written (output.c): a failed run keeps its files */
    bool replace;    /* holds a run --overwrite replaces, still untouched: the new run removes it
                      * (pfl_run_folder_replace) only once it has checked all it can before training */
} run_folder;

/* Locks DIR against every other pfl process, creating it (and its parents)
 * first when `create`. 0, or -1 with a message ("DIR: in use by another pfl
 * process ..."; "DIR: no such folder"). */
int pfl_run_folder_lock(run_folder *f, const char *dir, bool create);

/* Releases the lock; removes DIR when this process made it and it is empty. */
void pfl_run_folder_unlock(run_folder *f);

/* Makes the locked folder a new run's: when it holds a run, refuses in one
 * line (saying what it holds and what to do), or with `overwrite` marks it
 * to be replaced (f->replace) and leaves it as it is, checking that DIR
 * takes a new file. 0 or -1. */
int pfl_run_folder_claim(run_folder *f, bool overwrite);

/* The old run of a folder claimed with --overwrite, removed now (its files,
 * summary.json first of all): called once the new run has loaded its data
 * and built its federation, so a run that fails its checks never costs the
 * old one. Nothing to do for NULL or a folder without one. 0 or -1. */
int pfl_run_folder_replace(run_folder *f);

/* What a failed new run leaves: nothing (its files removed, DIR too when it
 * made it), unless a checkpoint of a round was written, which pfl resume can
 * go on from; and a run it was to replace, when it failed before replacing
 * it, stays as it was. */
void pfl_run_folder_discard(run_folder *f);

/* True when DIR/summary.json exists: the run finished. */
bool pfl_run_folder_finished(const char *dir);

/* Removes the temporary files of the run's writes that a crash left in DIR. */
void pfl_run_folder_remove_temporaries(const char *dir);

#endif
