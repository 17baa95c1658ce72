/* pfl preset: what a paper's preset file holds, whether each of its cells
 * can run, and (--check) whether the file is sound (src/run/preset.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "run/preset.h"
#include "run/run.h"
#include "util/err.h"

static const char preset_usage[] =
    "Usage: pfl preset FILE... [--check] [--runs] [--budget] [-- RUN_FLAGS...]\n\n"
    "Lists each cell (row) of a paper's preset (configs/*.yaml): its label, method, the folder its run\n"
    "goes to (cells whose flags are equal share one), the paper's number, and whether it can run here\n"
    "(\"ready\", or why not: a method or flag pfl lacks yet, a value neither the paper nor the file gives).\n"
    "--check: that every flag the file names exists for its cell's method and every cell parses as pfl\n"
    "run would parse it (one line per file; exit 1 when one fails).\n"
    "--runs: one line per run folder, tab-separated: folder, label, ready or skip: why, and the flags the\n"
    "run gets (for scripts).\n"
    "-- RUN_FLAGS: pfl run flags given on the command line after the file, as in pfl run --config:\n"
    "they win over the file, so a file whose budget is not set lists ready with -- --rounds N.";

/* run_args: the flags a cell's run gets from the command line (what follows
 * "--", then --out), last and winning over the file's, as in pfl run --config. */
typedef struct {
    int n;
    char **at;
} run_args;

/* "ready", or why the cell cannot run now (into why); the flags of its run
 * (without --out) into flags. */
static const char *cell_status(const pfl_preset *p, int cell, bool budget, const run_args *cli, char *why,
                               size_t size, char *flags, size_t flags_size) {
    int argc;
    char **argv = pfl_preset_argv(p, cell, budget, cli->n, cli->at, &argc);
    pfl_run_options o;
    flags[0] = '\0';
    if (argv && pfl_run_options_parse(&o, argc, argv, false) == 0) {
        for (int i = 0; i < argc - 1; i++) /* the last is --out */
            snprintf(flags + strlen(flags), flags_size - strlen(flags), "%s%s", i ? " " : "", argv[i]);
        pfl_preset_free_argv(argv, argc);
        return "ready";
    }
    pfl_preset_free_argv(argv, argv ? argc : 0);
    snprintf(why, size, "%s", pfl_errmsg());
    return why;
}

static void list_cells(const pfl_preset *p, bool budget, bool runs_only, const run_args *cli) {
    char why[1024], flags[4096];
    if (!runs_only) printf("%s: %s %s, %s (%d cells)\n", p->path, p->paper, p->table, p->column, p->num_cells);
    for (int i = 0; i < p->num_cells; i++) {
        const pfl_preset_cell *c = &p->cells[i];
        int first = 0;
        while (first < i && strcmp(p->cells[first].run, c->run)) first++;
        const char *status = cell_status(p, i, budget, cli, why, sizeof why, flags, sizeof flags);
        const bool ready = !strcmp(status, "ready");
        if (runs_only) {
            if (first == i) printf("%s\t%s\t%s%s\t%s\n", c->run, c->label, ready ? "" : "skip: ", status, flags);
            continue;
        }
        printf("  %-28s %-10s %-28s paper %-10s %s\n", c->label, c->algo, c->run,
               c->paper.has && c->paper.has_mean ? c->paper.mean_text : c->paper.has_iters ? "(cost)" : "-",
               first < i ? "(the run above)" : status);
    }
}

int cmd_preset(int argc, char **argv) {
    bool check = false, runs = false, budget = false;
    const arg_spec specs[] = {
        {"check", NULL, ARG_FLAG, &check, 0, 0, false, NULL, "check each file against pfl's flags"},
        {"runs", NULL, ARG_FLAG, &runs, 0, 0, false, NULL, "one tab-separated line per run folder"},
        {"budget", NULL, ARG_FLAG, &budget, 0, 0, false, NULL, "whether cells can run at the file's budget"},
    };
    /* "--" ends pfl preset's own flags: what follows is for the runs, then --out. */
    int own = 0;
    while (own < argc && strcmp(argv[own], "--")) own++;
    const int given = own < argc ? argc - own - 1 : 0;
    char out[] = "--out=.";
    run_args cli = {given + 1, pfl_calloc((size_t)given + 1, sizeof(char *))};
    char **files = pfl_calloc((size_t)(argc ? argc : 1), sizeof(char *));
    int n = 0;
    int parsed = files && cli.at ? args_parse_operands(specs, 3, own, argv, preset_usage, files, &n) : -1;
    if (parsed == 0 && check && given) parsed = pfl_err("-- RUN_FLAGS is for listing runs, not for --check");
    if (parsed != 0 || n == 0) {
        if (parsed < 0) fprintf(stderr, "pfl preset: %s\n", pfl_errmsg());
        else if (parsed == 0) fprintf(stderr, "pfl preset: no file given (pfl preset configs/FILE.yaml)\n");
        free(files);
        free(cli.at);
        return parsed == 1 ? 0 : 2;
    }
    for (int i = 0; i < given; i++) cli.at[i] = argv[own + 1 + i];
    cli.at[given] = out;
    int failed = 0;
    for (int i = 0; i < n; i++) {
        pfl_preset p;
        if (pfl_preset_load(&p, files[i])) {
            fprintf(stderr, "pfl preset: %s\n", pfl_errmsg());
            failed++;
            continue;
        }
        if (check && pfl_preset_check(&p)) {
            fprintf(stderr, "pfl preset: %s\n", pfl_errmsg());
            pfl_preset_free(&p);
            failed++;
            continue;
        }
        if (check) printf("ok %s (%d cells)\n", files[i], p.num_cells);
        else list_cells(&p, budget, runs, &cli);
        pfl_preset_free(&p);
    }
    free(files);
    free(cli.at);
    return failed ? 1 : 0;
}
