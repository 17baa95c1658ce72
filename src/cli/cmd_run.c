/* pfl run and pfl resume: the command line of an experiment. Parsing and
 * printing only: the experiment itself, its outputs and its checkpoints are
 * src/run/'s (run.h), which this file calls. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "run/preset.h"
#include "run/run.h"
#include "util/err.h"

static const char run_usage[] =
    "Usage: pfl run [--algo NAME] [flags]\n\n"
    "Runs --rounds rounds of federated training and evaluates every --eval-every rounds:\n"
    "personalized accuracy (each client's model on its own test split, sum correct / sum test),\n"
    "global accuracy (the global model on every client's test split) and the mean train loss.\n"
    "PFLlib's single-dash spellings (-algo -data -m -gr -nc -jr -lbs -ls -lr) are accepted too.\n"
    "A method takes its own flags only; pfl run --algo NAME --help lists them with that method's defaults.\n"
    "A paper's table cell: pfl run --config configs/FILE.yaml --algo NAME [--cell LABEL] [--budget] [flags]\n"
    "(the file's setting, assumed values, the cell's flags, then these flags; configs/README.md).";

/* MPI: --seeds with checkpoints is not run under mpirun (pfl resume of
 * such a run would have each rank decide alone which seeds are done).
 * Every rank sees the same flags, so all of them stop here together; rank 0
 * says why. Returns true (and has ended MPI) when refused. */
static bool refuse_seed_checkpoints_under_mpi(pfl_transport *t, const pfl_run_options *o) {
    if (!o->seeds || o->checkpoint_every <= 0 || !pfl_transport_distributed(t)) return false;
    if (t->rank == 0)
        fprintf(stderr, "pfl run: --seeds with --checkpoint-every does not run under mpirun: run each seed as a run "
                        "of its own (--seed N --out DIR/seed-N)\n");
    pfl_transport_finish(t);
    return true;
}

/* A failed run: its message (with the rank under MPI), and every rank
 * stops, none waiting for this one. Returns the exit status, 1. */
static int report_failure(pfl_transport *t, const char *command) {
    if (pfl_transport_distributed(t)) fprintf(stderr, "%s: rank %d: %s\n", command, t->rank, pfl_errmsg());
    else fprintf(stderr, "%s: %s\n", command, pfl_errmsg());
    pfl_transport_abort(t, 1);
    pfl_transport_finish(t);
    return 1;
}

/* A run that diverged (PFL_RUN_DIVERGED: its summary written, every rank
 * out alike): its message, once, and exit 2. */
static int report_divergence(pfl_transport *t, const char *command) {
    if (!pfl_transport_distributed(t) || t->rank == 0) fprintf(stderr, "%s: %s\n", command, pfl_errmsg());
    pfl_transport_finish(t);
    return 2;
}

/* A run that a SIGTERM or SIGINT stopped, its checkpoint written, exits as
 * the signal would have it (128 + its number): finished it is not. */
static int exit_status(void) { return pfl_fl_stopped_by() ? 128 + pfl_fl_stopped_by() : 0; }

/* ---- --help ---- */

static void print_flag(FILE *f, const pfl_param *p, pfl_param_blocks *b, const char *indent) {
    char left[64], value[256];
    int len = snprintf(left, sizeof left, "%s--%s", indent, p->name);
    if (p->type != PFL_PARAM_BOOL && p->metavar) len += snprintf(left + len, sizeof left - (size_t)len, " %s", p->metavar);
    if (p->alias) snprintf(left + len, sizeof left - (size_t)len, ", -%s", p->alias);
    fprintf(f, "%-30s %s", left, p->help);
    if (p->type != PFL_PARAM_BOOL && pfl_param_format(p, b, false, value, sizeof value))
        fprintf(f, " (default %s)", value);
    fputc('\n', f);
}

/* A method's own flags, with its defaults. */
static void print_method(FILE *f, const pfl_algo *algo, bool alone) {
    pfl_run_options o;
    if (pfl_run_options_init(&o, algo)) return;
    pfl_param_blocks b = pfl_run_blocks(&o);
    if (alone) fprintf(f, "\nFlags of %s (%s):\n", algo->name, algo->description);
    else fprintf(f, "  %-10s %s\n", algo->name, algo->description);
    if (alone && algo->num_params == 0) fputs("  (none of its own)\n", f);
    for (int i = 0; i < algo->num_params; i++) print_flag(f, &algo->params[i], &b, alone ? "  " : "    ");
}

/* pfl run --help: the flags every run has and the modules' (with the
 * defaults of `algo`), then either that method's flags or, when no --algo
 * was given, every method's. */
static void print_run_help(FILE *f, const pfl_algo *algo, bool all_methods) {
    pfl_run_options o;
    if (pfl_run_options_init(&o, algo)) return;
    pfl_param_blocks b = pfl_run_blocks(&o);
    fprintf(f, "%s\n\nFlags of every run%s%s%s:\n", run_usage, all_methods ? "" : " (defaults of ",
            all_methods ? "" : algo->name, all_methods ? "" : ")");
    for (int i = 0; i < pfl_run_num_params; i++) print_flag(f, &pfl_run_params[i], &b, "  ");
    fputs("\nModules, with any method (a module's flags need it on: its switch, or a method that switches it "
          "on):\n", f);
    for (int k = 0; pfl_modules[k]; k++)
        for (int i = 0; i < pfl_modules[k]->num_params; i++) print_flag(f, &pfl_modules[k]->params[i], &b, "  ");
    if (all_methods) {
        fputs("\nMethods (--algo NAME), each with its own flags and defaults (pfl run --algo NAME --help):\n", f);
        for (int i = 0; i < pfl_algo_count(); i++) print_method(f, pfl_algo_at(i), false);
    } else {
        print_method(f, algo, true);
    }
    fputs("\nPresets (configs/README.md):\n", f);
    fprintf(f, "  %-28s %s\n", "--config FILE", "run a cell of a paper's table: the file's setting, then its assumed values, "
            "the cell's assumed values and flags, then the command line");
    fprintf(f, "  %-28s %s\n", "--cell LABEL", "the cell (row) to run, by its label, where --algo does not tell");
    fprintf(f, "  %-28s %s\n", "--budget", "use the file's budget (rounds, seeds, eval-every: what this machine affords)");
    fprintf(f, "\n  %-28s %s\n", "--help", "show this help");
}

/* --help anywhere: prints the help of the --algo given (if any) and returns true. */
static bool asked_for_help(int argc, char **argv, int *rc) {
    const char *name = NULL;
    bool help = false;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) help = true;
        else if ((!strcmp(argv[i], "--algo") || !strcmp(argv[i], "-algo")) && i + 1 < argc) name = argv[++i];
        else if (!strncmp(argv[i], "--algo=", 7)) name = argv[i] + 7;
    }
    if (!help) return false;
    const pfl_algo *algo = pfl_algo_find(name ? name : "fedavg");
    if (!algo) {
        fprintf(stderr, "pfl run: %s\n", pfl_errmsg());
        *rc = 2;
        return true;
    }
    print_run_help(stdout, algo, name == NULL);
    *rc = 0;
    return true;
}

static int run_parsed(pfl_run_options *op, const char *preset_line);

/* ---- presets ---- */

typedef struct {
    const char *config, *cell;
    bool budget;
} preset_args;

/* The value of a preset flag at argv[*i] ("--config FILE" or "--config=FILE"). */
static const char *preset_value(int argc, char **argv, int *i, const char *flag) {
    const size_t len = strlen(flag);
    if (argv[*i][len] == '=') return argv[*i] + len + 1;
    if (*i + 1 < argc) return argv[++*i];
    pfl_err("%s: missing value", flag);
    return NULL;
}

/* Takes --config, --cell and --budget out of argv (the rest stays the
 * command line, in order). Returns the new argc, or -1 with a message. */
static int take_preset_args(int argc, char **argv, preset_args *pa) {
    int n = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strncmp(a, "--config", 8) && (a[8] == '\0' || a[8] == '=')) {
            if (!(pa->config = preset_value(argc, argv, &i, "--config"))) return -1;
        } else if (!strncmp(a, "--cell", 6) && (a[6] == '\0' || a[6] == '=')) {
            if (!(pa->cell = preset_value(argc, argv, &i, "--cell"))) return -1;
        } else if (!strcmp(a, "--budget")) {
            pa->budget = true;
        } else {
            argv[n++] = argv[i];
        }
    }
    if (!pa->config && (pa->cell || pa->budget))
        return pfl_err("%s: chooses within a preset, which needs --config FILE", pa->cell ? "--cell" : "--budget");
    return n;
}

/* The --algo given, or NULL. */
static const char *given_algo(int argc, char **argv) {
    const char *name = NULL;
    for (int i = 0; i < argc; i++) {
        if ((!strcmp(argv[i], "--algo") || !strcmp(argv[i], "-algo")) && i + 1 < argc) name = argv[++i];
        else if (!strncmp(argv[i], "--algo=", 7)) name = argv[i] + 7;
    }
    return name;
}

/* The flags of the preset's cell followed by the command line's, or NULL
 * with a message; *line says which cell and what it runs (malloc'd). */
static char **preset_flags(const preset_args *pa, int argc, char **argv, int *out_argc, char **line) {
    pfl_preset p;
    if (pfl_preset_load(&p, pa->config)) return NULL;
    char **flags = NULL;
    size_t len = 0;
    const int cell = pfl_preset_find_cell(&p, given_algo(argc, argv), pa->cell);
    FILE *f;
    if (cell >= 0 && (flags = pfl_preset_argv(&p, cell, pa->budget, argc, argv, out_argc)) &&
        (f = open_memstream(line, &len))) {
        fprintf(f, "[pfl] %s (%s %s, %s), cell '%s': pfl run", pa->config, p.paper, p.table, p.column,
                p.cells[cell].label);
        for (int i = 0; i < *out_argc; i++) fprintf(f, " %s", flags[i]);
        fclose(f);
    }
    pfl_preset_free(&p);
    return flags;
}

int cmd_run(int argc, char **argv) {
    int rc;
    if (asked_for_help(argc, argv, &rc)) return rc;
    preset_args pa = {0};
    char **flags = NULL, *line = NULL;
    if ((argc = take_preset_args(argc, argv, &pa)) < 0 ||
        (pa.config && !(flags = preset_flags(&pa, argc, argv, &argc, &line)))) {
        fprintf(stderr, "pfl run: %s\n", pfl_errmsg());
        return 2;
    }
    if (flags) argv = flags; /* the options point into it: it lives as long as the run */
    pfl_run_options o;
    if (pfl_run_options_parse(&o, argc, argv, false)) {
        fprintf(stderr, "pfl run: %s\n", pfl_errmsg());
        rc = 2;
    } else {
        rc = run_parsed(&o, line);
    }
    pfl_preset_free_argv(flags, argc);
    free(line);
    return rc;
}

static int run_parsed(pfl_run_options *op, const char *preset_line) {
    pfl_run_options o = *op;
    int rc;
    /* MPI: under mpirun every process runs this; rank 0 alone reports */
    /* with checkpoints, a scheduler's SIGTERM (or Ctrl-C) ends the round and writes its checkpoint (caught
     * from the start: under mpirun a rank may be signalled while the others start) */
    if (o.checkpoint_every > 0) pfl_fl_catch_signals();
    pfl_transport transport;
    o.cfg.transport = &transport;
    rc = pfl_transport_init(&transport);
    if (rc == 0 && refuse_seed_checkpoints_under_mpi(&transport, &o)) return 2;
    if (rc == 0 && transport.rank != 0) o.quiet = true, o.out = NULL;
    if (rc == 0 && preset_line && !o.quiet) fprintf(stderr, "%s\n", preset_line);
    if (rc == 0) rc = pfl_run(&o, NULL);
    if (rc == PFL_RUN_DIVERGED) return report_divergence(&transport, "pfl run");
    if (rc) return report_failure(&transport, "pfl run");
    pfl_transport_finish(&transport);
    return exit_status();
}

/* ---- pfl resume ---- */

static const char resume_usage[] =
    "Usage: pfl resume DIR [--threads N] [--data-dir DIR] [--quiet] [--stop-after R] [--allow-data-change]\n\n"
    "Goes on with the run whose --out was DIR from DIR/checkpoint (written by --checkpoint-every):\n"
    "rebuilds data, clients, model and method from the flags stored there, loads the state and\n"
    "trains the remaining rounds; metrics.jsonl and summary.json end as the uninterrupted run's.\n"
    "Under mpirun, with any number of processes (each reads the state of the clients it keeps).\n"
    "A run that finished (DIR/summary.json) is left as it is. DIR is locked while it runs.\n"
    "Data other than the run's (the checkpoint holds a SHA-256 of what it trained on) is refused.\n"
    "These flags change nothing in the results, only how the run goes:";

int cmd_resume(int argc, char **argv) {
    int threads = 0, stop_after = 0;
    const char *data_dir = NULL;
    bool quiet = false, allow_data_change = false;
    const arg_spec specs[] = {
        {"threads", NULL, ARG_INT, &threads, 1, 4096, false, "T", "worker threads (0: the run's)"},
        {"data-dir", NULL, ARG_STRING, &data_dir, 0, 0, false, "DIR", "where the datasets are now (default: the run's)"},
        {"quiet", NULL, ARG_FLAG, &quiet, 0, 0, false, NULL, "no progress lines"},
        {"stop-after", NULL, ARG_INT, &stop_after, 0, 1e7, false, "R", "tests: stop after round R again (0: never)"},
        {"allow-data-change", NULL, ARG_FLAG, &allow_data_change, 0, 0, false, NULL,
         "go on although the data is not what the run trained on (a warning; changes the results)"},
    };
    const int n = (int)(sizeof specs / sizeof specs[0]);
    if (argc >= 1 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"))) {
        args_print_help(stdout, specs, n, resume_usage);
        return 0;
    }
    if (argc < 1 || argv[0][0] == '-') {
        fprintf(stderr, "pfl resume: expected the run's directory first (pfl resume DIR [--threads N])\n");
        return 2;
    }
    const int parsed = args_parse(specs, n, argc - 1, argv + 1, resume_usage);
    if (parsed == 1) return 0;
    if (parsed < 0) {
        fprintf(stderr, "pfl resume: %s\n", pfl_errmsg());
        return 2;
    }
    pfl_fl_catch_signals(); /* the run writes checkpoints: a SIGTERM ends the round with one */
    pfl_transport transport; /* MPI: under mpirun every process goes on with its part; rank 0 alone reports */
    if (pfl_transport_init(&transport)) {
        fprintf(stderr, "pfl resume: %s\n", pfl_errmsg());
        return 1;
    }
    const pfl_resume_options r = {.threads = threads, .data_dir = data_dir, .quiet = quiet, .stop_after = stop_after,
                                  .allow_data_change = allow_data_change, .transport = &transport};
    const int rc = pfl_run_resume(argv[0], &r);
    if (rc == PFL_RUN_DIVERGED) return report_divergence(&transport, "pfl resume");
    if (rc < 0) return report_failure(&transport, "pfl resume");
    if (rc > 0 && transport.rank == 0) /* quiet or not: what happened is the answer */
        fprintf(stderr, "pfl resume: %s: the run finished (summary.json): nothing to resume, nothing changed\n",
                argv[0]);
    pfl_transport_finish(&transport);
    return exit_status();
}
