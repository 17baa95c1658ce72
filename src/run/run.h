/* The experiment: one federated run from its flags to its files, below the
 * command line and usable without it (a program linking libpfl fills a
 * pfl_run_options and calls pfl_run).
 *
 * It loads and partitions the data, builds the model and the federation,
 * runs the rounds, and writes every output of a run: metrics.jsonl (a line
 * per evaluation), summary.json (at the end, atomically) and, with
 * checkpoint_every, DIR/checkpoint (the run's flags, its report and the
 * federation's state), from which pfl_run_resume goes on. What a method or a
 * module adds to these comes through its report hook; this layer knows no
 * method by name.
 *
 * Flags: every run has the flags of pfl_run_params (data, model, rounds,
 * lr, ...); each module declares its own (src/modules/), each method its own
 * (pfl_algo.params) with its own defaults. pfl_run_options_parse accepts a
 * flag only from the tables of this run: the common ones, the method's, and
 * those of the modules that are on. */
#ifndef PFL_RUN_RUN_H
#define PFL_RUN_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/data.h"
#include "fl/fl.h"
#include "modules/modules.h"
#include "util/params.h"

/* A program's first call, before anything else (as MPI_Init): the same
 * BLAS kernels as the pfl command, so the same bits. OpenBLAS chose its
 * kernels when it loaded; on a CPU it does not know (0.3.21 on recent
 * Xeons) it fell back to generic ones (Prescott), which round otherwise and
 * run about 2.7x slower. pfl_init then runs the program again (execv of
 * /proc/self/exe with argv, NULL-terminated) with OPENBLAS_CORETYPE set to
 * the kernels the CPU can run, as `pfl` does for itself; it returns when no
 * re-run is needed (a known CPU, or OPENBLAS_CORETYPE already set: a user's
 * own choice is left alone) or when execv fails (the slow kernels it is).
 * PFL_BLAS_ASSUME_FALLBACK=1 in the environment makes it treat the kernels
 * OpenBLAS chose as a fallback, so a test on a known CPU can follow the
 * re-run. Not for a process that cannot be run again (an interpreter
 * loading libpfl): there, set OPENBLAS_CORETYPE before OpenBLAS loads. */
void pfl_init(char **argv);

typedef struct {
    const char *algo, *data, *model, *partition, *data_dir;
    const char *bn;         /* shared | local | stats-local (pfl_run_options_finish resolves auto) */
    const char *public_set; /* N | test, or NULL: none (FedTSDP's default: test) */
    const char *eval_moment, *init_clients, *step_budget; /* the round's semantics (fl.h, docs/evaluation.md) */
    const char *layer_unit; /* what a count given to --ala-p, --head-layers, ... counts (nn/layer_units.h) */
    pfl_layer_specs layer_specs; /* the text given to each of those flags (a count or names) */
    double train_fraction;  /* share of each client's samples for training */
    const char *out;        /* NULL: no files */
    bool overwrite;         /* out may hold another run: its files are removed first (else refused) */
    bool clients_given;     /* --clients was given; without it a PFLlib folder's own count (config.json) */
    bool train_fraction_given; /* --train-fraction was given (refused with a PFLlib folder, split already) */
    int checkpoint_every;   /* 0: no checkpoints */
    int stop_after;         /* tests: stop after this round as a crash would (0: never) */
    bool quiet;             /* no progress lines */
    const char *device;     /* --device: the backend's name, cpu (the default) or cuda (pfl_run_options_finish
                             * sets cfg.backend) */
    bool tf32;              /* --tf32: TF32 matrix products on the GPU */
    const char *seeds;      /* --seeds LIST: run each seed into out/seed-N and summarize them (NULL: one run) */
    bool auto_break;        /* --auto-break: stop when local_acc has not improved for top_cnt evaluations */
    bool allow_divergence;  /* --allow-divergence: a run whose loss or global model turns non-finite goes on */
    int top_cnt;            /* ... (PFLlib's -ab / -tc) */
    pfl_config cfg;         /* clients, rounds, lr, ..., the method's and the modules' parameters */
    /* Not flags: where progress lines go (each without its newline); NULL:
     * stderr. Warnings from inside a round still go to stderr. */
    void (*progress)(const char *line, void *ctx);
    void *progress_ctx;
} pfl_run_options;

/* The flags every run has, in the order --help and checkpoints list them. */
extern const pfl_param pfl_run_params[];
extern const int pfl_run_num_params;

/* The blocks the parameter tables point into, for o (write through them
 * only when o is yours to change). */
pfl_param_blocks pfl_run_blocks(const pfl_run_options *o);

/* The input shape and classes of a dataset pfl knows by name (no data
 * needed): 0, or -1 (no message) for a name it does not know. */
int pfl_run_known_shape(const char *data, int *c, int *h, int *w, int *classes);

/* The default data directory: $PFL_DATA, else ./data. */
const char *pfl_default_data_dir(void);

/* Sets o to the defaults of a run of `algo`: the common flags', every
 * module's, the method's own, then the method's run_defaults. Returns 0, or
 * -1 with a message (a method whose table clashes with a common flag). */
int pfl_run_options_init(pfl_run_options *o, const pfl_algo *algo);

/* Parses argv[0..argc) (no --help: the caller handles it) into o: finds
 * --algo first (default fedavg), sets o to that method's defaults, then
 * applies the flags in order (a repeated flag keeps its last value). A flag
 * of another method, or of a module that is off, is refused with the
 * methods or module that take it; with `stored` (the flags of a checkpoint,
 * which older pfl wrote for every method) such flags are skipped instead:
 * the method never reads them. Returns 0, or -1 with a one-line message
 * naming the flag. argv must outlive o (strings point into it). */
int pfl_run_options_parse(pfl_run_options *o, int argc, char **argv, bool stored);

/* Resolves the layer counts and selections of o (--ala-p layer4.*, --layer-unit
 * blocks, ...) against its model, built for its dataset's shape, into the
 * numbers the methods read (rows; pFedCFR's r in units); nothing to do for
 * counts of rows. pfl_run_options_parse calls it last. 0, or -1 with a
 * message naming the flag. */
int pfl_run_resolve_layers(pfl_run_options *o);

/* The parameter --name of a run of `algo`: the method's, a flag every run
 * has, or a module's (*module set then; module may be NULL). NULL when none. */
const pfl_param *pfl_run_param_named(const pfl_algo *algo, const char *name, const pfl_module **module);

/* True when argv[0..argc) gives --name (as --name, --name=V or its PFLlib
 * alias) for a run of `algo`. */
bool pfl_run_args_give(const pfl_algo *algo, int argc, char **argv, const char *name);

/* The method of o (o->algo). */
const pfl_algo *pfl_run_algo(const pfl_run_options *o);

/* Resolves what depends on the method and the model: every "auto"
 * parameter, and --bn auto (on a model with BatchNorm, stats-local, as
 * PFLlib, the reference code of FedALA's and FLAYER's tables, keeps each
 * client's running statistics, or the mode the method's run_defaults name;
 * shared on a model without). Returns 0 or -1. */
int pfl_run_options_finish(pfl_run_options *o);

/* True when the module is on in this run (its switch, or the method's bits). */
bool pfl_run_module_on(const pfl_run_options *o, const pfl_module *m);

/* Calls fn for every parameter of this run: the common ones, the method's,
 * then those of the modules that are on (a flag two tables declare, once). */
typedef void (*pfl_run_param_fn)(const pfl_param *p, int table, void *ctx);
enum { PFL_RUN_COMMON, PFL_RUN_METHOD, PFL_RUN_MODULE };
void pfl_run_each_param(const pfl_run_options *o, pfl_run_param_fn fn, void *ctx);

/* Every flag of the run as "--name=value" ("--name" for a switch that is
 * on), each ended by a NUL, numbers with 17 digits: what a checkpoint stores
 * so that resuming does not depend on the defaults of the pfl that resumes.
 * Returns a malloc'd buffer (length in *len), or NULL with a message. */
char *pfl_run_flags(const pfl_run_options *o, size_t *len);

/* ---- the experiment (experiment.c) ---- */

/* Runs the experiment o describes (o from pfl_run_options_parse, or from
 * pfl_run_options_init and filled by hand; the caller sets cfg.transport
 * under MPI): resolves it (pfl_run_options_finish), loads and partitions
 * the data, builds the model and the federation and runs the rounds,
 * writing progress lines and, with o->out, every output. From the start
 * (resume NULL), or going on from the checkpoint `resume` (pfl_run_resume
 * opens it). From the start, o->out is locked for the run's duration and
 * must not hold another run (unless o->overwrite: its files are removed
 * once the new run has built its federation); a run that fails leaves
 * nothing there, or, once it wrote a checkpoint of a round, an unfinished
 * run pfl_run_resume goes on with (never a summary.json). Returns 0, or -1
 * with a message, or PFL_RUN_DIVERGED with a message: the training loss or
 * the global model turned non-finite in a round (NaN, infinity), and,
 * unless o->allow_divergence, the run stopped after it, its summary.json
 * written with "diverged_round" (a number that lies would be worse than
 * none: accuracies of a NaN model look like a result); --stop-after,
 * and a SIGTERM or SIGINT once pfl_fl_catch_signals was called, stop with
 * 0 and no summary, as a crash would, the stop's checkpoint written. Under
 * MPI every rank calls it; rank 0 alone has o->out, locks and writes, and
 * each rank writes its part of a checkpoint where rank 0's o->out is. */
int pfl_run(pfl_run_options *o, pfl_ckpt_reader *resume);
#define PFL_RUN_DIVERGED 2

/* What may differ when a run goes on from its checkpoint: nothing that
 * changes its results. */
typedef struct {
    int threads;            /* 0: the run's */
    const char *data_dir;   /* NULL: the run's */
    bool quiet;
    int stop_after;         /* tests: stop after this round again (0: never) */
    bool allow_data_change; /* go on although the data loaded is not what the run trained on (a warning) */
    void (*progress)(const char *line, void *ctx);
    void *progress_ctx;
    pfl_transport *transport; /* MPI: the processes going on with it (NULL: this one alone); ranks other than
                               * 0 read the checkpoint and write only their part of the next ones */
} pfl_resume_options;

/* Goes on with the run whose --out was `dir`, from dir/checkpoint: rebuilds
 * the run from the flags stored there (a checkpoint with no flags, or flags
 * that do not parse, is refused in one line naming the flag), loads its
 * state and trains the remaining rounds; metrics.jsonl and summary.json end
 * as the uninterrupted run's. It holds the lock on dir throughout (refused
 * while another pfl runs or resumes it), keeps only the metrics.jsonl lines
 * the checkpoint covers (refused when they are not those it was written
 * after), and leaves a finished run (dir/summary.json) as it is. Returns 0,
 * 1 when the run had finished (nothing done), PFL_RUN_DIVERGED as pfl_run,
 * or -1 with a message. */
int pfl_run_resume(const char *dir, const pfl_resume_options *r);

/* ---- several seeds (the list and the summary: seeds.c; running them: experiment.c) ---- */

#define PFL_MAX_SEEDS 1000

/* Parses a seed list, numbers and ranges separated by commas ("1,2,3",
 * "1-5", "1-3,7"): at most PFL_MAX_SEEDS, none twice. With `seeds`
 * non-NULL, *seeds gets a malloc'd array of *n. 0, or -1 with a message
 * naming --seeds. */
int pfl_parse_seeds(const char *text, uint64_t **seeds, int *n);

/* Runs o once per seed of o->seeds (pfl_run calls it when o->seeds is set),
 * one after the other: seed N as the run --seed N --out DIR/seed-N would
 * (same numbers), then DIR/summary.json over them (pfl_seeds_summarize).
 * With --checkpoint-every, DIR/checkpoint holds the whole run's flags so
 * that pfl_run_resume(DIR) goes on: seeds with a summary are kept, the
 * interrupted one resumes from its own checkpoint, the rest run. `resume`
 * NULL: from the start, DIR locked and claimed as pfl_run does (the caller
 * holds it when resuming). Without o->out (MPI ranks other than 0) the seeds
 * run and nothing is written. Returns 0 (also when --stop-after stopped a
 * seed: no summary then), or -1 with a message. */
int pfl_run_seeds(pfl_run_options *o, const pfl_resume_options *resume);

/* DIR/summary.json from DIR/seed-N/summary.json of every seed: "seeds",
 * "runs" (the folders), every field equal in all seeds (the configuration),
 * and for best/final local and global accuracy, their rounds, rounds to
 * convergence, the clients left behind, seconds and bytes per round, rounds
 * run: {"mean", "std" (population, as numpy's np.std), "values" (per seed)}.
 * Atomically; 0 or -1 with a message naming the file. */
int pfl_seeds_summarize(const char *dir, const uint64_t *seeds, int n);

/* Loads `data_name` from data_dir and partitions it over `clients` (the
 * split of pfl run: train_fraction per client, the last `holdout` samples
 * held out), with progress lines through `o` (NULL: none). On failure
 * everything is freed and -1 returned with a message. */
int pfl_run_load_partitioned(const char *data_name, const char *data_dir, const char *partition, int clients,
                             uint64_t seed, double train_fraction, int holdout, const pfl_run_options *o,
                             pfl_dataset *d, pfl_partition *p);

#endif
