/* pfl export: a run's results in another tool's format. */
#include <stdio.h>
#include <stdlib.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "run/results.h"
#include "util/err.h"

static const char export_usage[] =
    "Usage: pfl export RUN_DIR --results-h5 FILE\n\n"
    "Writes the finished run RUN_DIR (pfl run --out; its summary.json written: an\n"
    "unfinished one is refused) as PFLlib's results file, the .h5 its\n"
    "servers save and its result scripts read: rs_test_acc (local_acc of every evaluation,\n"
    "round 0 first), rs_train_loss (pfl's train_loss: the mean loss of the round's\n"
    "training batches; NaN at round 0) and rs_test_auc (NaN: pfl does not compute AUC).\n"
    "A run of several seeds (--seeds) gives FILE_0.h5, FILE_1.h5, ... in seed order, as\n"
    "PFLlib numbers its runs; when one cannot be written, none is.\n"
    "Needs libhdf5 (libhdf5-dev) when pfl is built; a pfl built without it says so.";

int cmd_export(int argc, char **argv) {
    const char *h5 = NULL;
    const arg_spec specs[] = {
        {"results-h5", NULL, ARG_STRING, &h5, 0, 0, false, "FILE", "PFLlib's results file to write"},
    };
    char **dirs = malloc(sizeof(char *) * (size_t)(argc > 0 ? argc : 1)); /* room for every argument */
    int n = 0;
    int parsed = dirs ? args_parse_operands(specs, 1, argc, argv, export_usage, dirs, &n) : pfl_err("out of memory");
    const char *dir = n == 1 ? dirs[0] : NULL;
    free(dirs);
    if (parsed == 1) return 0;
    if (parsed == 0 && n != 1) parsed = pfl_err("expected one run folder (pfl export RUN_DIR --results-h5 FILE)");
    if (parsed == 0 && !h5) parsed = pfl_err("--results-h5 FILE: missing (the one format pfl export writes)");
    if (parsed < 0) {
        fprintf(stderr, "pfl export: %s\n", pfl_errmsg());
        return 2;
    }
    if (pfl_export_h5(dir, h5)) {
        fprintf(stderr, "pfl export: %s\n", pfl_errmsg());
        return 1;
    }
    return 0;
}
