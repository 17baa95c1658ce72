/* pfl plot and pfl table: pictures and markdown tables of run folders
 * (src/run/results.h draws and writes them; this file parses). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "run/preset.h"
#include "run/results.h"
#include "util/err.h"
#include "util/json.h"
#include "util/safe_write.h"

/* "a,b,c" into n labels (malloc'd copy in *store), or NULL when none given. */
static char **split_labels(const char *text, int n, char **store) {
    *store = NULL;
    if (!text) return NULL;
    char **labels = pfl_calloc((size_t)n, sizeof(char *));
    if (!labels || !(*store = strdup(text))) {
        free(labels);
        return NULL;
    }
    int k = 0;
    for (char *s = *store, *comma; k < n; s = comma + 1) {
        labels[k++] = s;
        if (!(comma = strchr(s, ','))) break;
        *comma = '\0';
    }
    return labels;
}

static int count_commas(const char *s) {
    int n = 0;
    for (; s && *s; s++) n += *s == ',';
    return n;
}

static const char plot_usage[] =
    "Usage: pfl plot RUN_DIR... --out PREFIX [flags]\n\n"
    "Draws accuracy (%) against round for each run folder (pfl run --out DIR: DIR/metrics.jsonl, or a\n"
    "--seeds run's DIR/seed-N/), personalized as solid lines, global as dashed ones, into PREFIX.png\n"
    "and PREFIX.svg (with gnuplot). A run of several seeds is drawn as its mean over the seeds with a\n"
    "shaded band, mean ± 1 std (population) or, with --band minmax, from the least to the largest seed;\n"
    "only rounds every seed has evaluated are drawn.";

int cmd_plot(int argc, char **argv) {
    const char *out = NULL, *labels_text = NULL, *metric = "both", *band = "std", *title = NULL;
    const arg_spec specs[] = {
        {"out", NULL, ARG_STRING, &out, 0, 0, false, "PREFIX", "write PREFIX.png and PREFIX.svg"},
        {"labels", NULL, ARG_STRING, &labels_text, 0, 0, false, "A,B,...", "legend names, one per run folder (default: the folders)"},
        {"metric", NULL, ARG_STRING, &metric, 0, 0, false, "WHICH", "personalized | global | both"},
        {"band", NULL, ARG_STRING, &band, 0, 0, false, "KIND", "around a multi-seed mean: std (±1 std) | minmax"},
        {"title", NULL, ARG_STRING, &title, 0, 0, false, "TEXT", "a title above the picture"},
    };
    char **dirs = pfl_calloc((size_t)(argc ? argc : 1), sizeof(char *));
    int n = 0, rc = 2;
    char *store = NULL, **labels = NULL;
    const int parsed = dirs ? args_parse_operands(specs, 5, argc, argv, plot_usage, dirs, &n) : -1;
    if (parsed == 1) rc = 0;
    else if (parsed < 0) fprintf(stderr, "pfl plot: %s\n", pfl_errmsg());
    else if (n == 0) fprintf(stderr, "pfl plot: no run folder given (pfl plot RUN_DIR... --out PREFIX)\n");
    else if (!out) fprintf(stderr, "pfl plot: --out PREFIX: where to write PREFIX.png and PREFIX.svg\n");
    else if (strcmp(metric, "personalized") && strcmp(metric, "global") && strcmp(metric, "both"))
        fprintf(stderr, "pfl plot: --metric '%s': expected personalized, global or both\n", metric);
    else if (strcmp(band, "std") && strcmp(band, "minmax"))
        fprintf(stderr, "pfl plot: --band '%s': expected std or minmax\n", band);
    else if (labels_text && count_commas(labels_text) + 1 != n)
        fprintf(stderr, "pfl plot: --labels: %d names for %d run folders\n", count_commas(labels_text) + 1, n);
    else {
        labels = split_labels(labels_text, n, &store);
        const pfl_plot_options o = {.local = strcmp(metric, "global") != 0,
                                    .global = strcmp(metric, "personalized") != 0,
                                    .minmax = !strcmp(band, "minmax"),
                                    .title = title};
        if (pfl_plot_curves(dirs, labels, n, &o, out)) {
            fprintf(stderr, "pfl plot: %s\n", pfl_errmsg());
            rc = 1;
        } else {
            rc = 0;
        }
    }
    free(labels), free(store), free(dirs);
    return rc;
}

static const char table_usage[] =
    "Usage: pfl table RUN_DIR... [--labels A,B,...]\n"
    "       pfl table --config configs/FILE.yaml DIR\n\n"
    "Writes a markdown table to stdout (or --out FILE). Of run folders: best and final personalized and\n"
    "global accuracy as mean ± std over seeds, rounds to convergence, seconds per round, the best of each\n"
    "column in bold. Of a paper's preset: DIR/<row>/ holds each row's run (pfl preset FILE names the\n"
    "folders; bench/paper_tables.sh lays them out), and each row gets pfl's mean ± std in the paper's\n"
    "unit beside the paper's number and the gap.";

int cmd_table(int argc, char **argv) {
    const char *config = NULL, *out = NULL, *labels_text = NULL;
    const arg_spec specs[] = {
        {"config", NULL, ARG_STRING, &config, 0, 0, false, "FILE", "a paper's preset: its rows, beside the paper's numbers"},
        {"labels", NULL, ARG_STRING, &labels_text, 0, 0, false, "A,B,...", "row names, one per run folder (default: the folders)"},
        {"out", NULL, ARG_STRING, &out, 0, 0, false, "FILE", "write the table there (default: stdout)"},
    };
    char **dirs = pfl_calloc((size_t)(argc ? argc : 1), sizeof(char *));
    int n = 0;
    const int parsed = dirs ? args_parse_operands(specs, 3, argc, argv, table_usage, dirs, &n) : -1;
    if (parsed != 0 || n == 0 || (config && n != 1) || (labels_text && count_commas(labels_text) + 1 != n)) {
        if (parsed < 0) fprintf(stderr, "pfl table: %s\n", pfl_errmsg());
        else if (parsed == 0 && n == 0) fprintf(stderr, "pfl table: no run folder given (see --help)\n");
        else if (parsed == 0 && config) fprintf(stderr, "pfl table: --config takes one folder (DIR/<row>/ per row), got %d\n", n);
        else if (parsed == 0) fprintf(stderr, "pfl table: --labels: %d names for %d run folders\n", count_commas(labels_text) + 1, n);
        free(dirs);
        return parsed == 1 ? 0 : 2;
    }
    /* into memory first: nothing half-written when a folder cannot be read */
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    int rc = mem ? 0 : -1;
    if (mem && config) {
        pfl_preset p;
        rc = pfl_preset_load(&p, config);
        if (rc == 0) rc = pfl_table_preset(mem, &p, dirs[0]), pfl_preset_free(&p);
    } else if (mem) {
        char *store, **labels = split_labels(labels_text, n, &store);
        rc = pfl_table_runs(mem, dirs, labels, n);
        free(labels), free(store);
    }
    if (mem) fclose(mem);
    if (rc == 0) {
        pfl_atomic_file a;
        FILE *f = stdout;
        if (out && pfl_atomic_open(&a, out) == 0) f = a.f;
        else if (out) rc = -1;
        if (rc == 0) fwrite(text, 1, len, f);
        if (rc == 0 && out) rc = pfl_atomic_commit(&a);
    }
    if (rc) fprintf(stderr, "pfl table: %s\n", pfl_errmsg());
    free(text), free(dirs);
    return rc ? 1 : 0;
}
