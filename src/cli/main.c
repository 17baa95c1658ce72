/* pfl: the command-line front end. Only this layer prints errors and exits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "cli/commands.h"
#include "nn/blas.h"
#include "util/version.h"

static void usage(FILE *f) {
    fprintf(f,
            "pfl %s — personalized federated learning in C\n\n"
            "Usage:\n"
            "  pfl run [flags]         run a federated experiment (pfl run --help for every flag)\n"
            "  pfl partition [flags]   show (or --save) how a dataset is split over clients\n"
            "  pfl resume DIR          go on with a run from DIR/checkpoint (pfl run --checkpoint-every)\n"
            "  pfl model --model NAME  print a model's layer table (index, name, parameters, offset, state)\n"
            "  pfl plot RUN_DIR... --out PREFIX   accuracy curves of runs (PREFIX.png, PREFIX.svg)\n"
            "  pfl table RUN_DIR...    a markdown table of runs (--config FILE DIR: a paper's table beside pfl's)\n"
            "  pfl preset FILE         a paper's preset (configs/*.yaml): its cells, their runs, --check\n"
            "  pfl export RUN_DIR --results-h5 FILE   a run as PFLlib's results file (.h5)\n"
            "  pfl --help | --version\n\n"
            "Example:\n"
            "  pfl run --algo fedavg --data fmnist --model cnn --partition pat:2 --clients 20 --rounds 30 --out out/fedavg\n",
            PFL_VERSION);
}

/* OpenBLAS chose its kernels when it loaded; on a CPU it does not know it
 * took generic ones, several times slower. Run again with the right ones
 * (OPENBLAS_CORETYPE is read only at load time). A user's own
 * OPENBLAS_CORETYPE is left alone; if exec fails, go on as we are. */
static void reexec_with_better_blas(char **argv) {
    if (getenv("OPENBLAS_CORETYPE")) return;
    const char *core = pfl_blas_better_core();
    if (!core) return;
    char fallback[64];
    pfl_blas_describe(fallback, sizeof fallback); /* "OpenBLAS 0.3.21 (Prescott, pthread)" */
    const char *open = strchr(fallback, '('), *comma = open ? strchr(open, ',') : NULL;
    char name[32] = "a generic core";
    if (open && comma && comma - open - 1 < (long)sizeof name) snprintf(name, sizeof name, "%.*s", (int)(comma - open - 1), open + 1);
    if (setenv("OPENBLAS_CORETYPE", core, 1) || setenv("PFL_BLAS_FALLBACK", name, 1)) return;
    execv("/proc/self/exe", argv);
    unsetenv("OPENBLAS_CORETYPE"), unsetenv("PFL_BLAS_FALLBACK"); /* exec failed: the slow kernels it is */
}

int main(int argc, char **argv) {
    reexec_with_better_blas(argv);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "run") == 0) return cmd_run(argc - 2, argv + 2);
    if (strcmp(cmd, "partition") == 0) return cmd_partition(argc - 2, argv + 2);
    if (strcmp(cmd, "resume") == 0) return cmd_resume(argc - 2, argv + 2);
    if (strcmp(cmd, "model") == 0) return cmd_model(argc - 2, argv + 2);
    if (strcmp(cmd, "plot") == 0) return cmd_plot(argc - 2, argv + 2);
    if (strcmp(cmd, "table") == 0) return cmd_table(argc - 2, argv + 2);
    if (strcmp(cmd, "preset") == 0) return cmd_preset(argc - 2, argv + 2);
    if (strcmp(cmd, "export") == 0) return cmd_export(argc - 2, argv + 2);
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("pfl %s\n", PFL_VERSION);
        return 0;
    }
    fprintf(stderr, "pfl: unknown command '%s' (expected run, partition, resume, model, plot, table, preset or export; see pfl --help)\n", cmd);
    return 2;
}
