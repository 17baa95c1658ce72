/* pfl: the command-line front end. Only this layer prints errors and exits. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "cli/commands.h"
#include "run/run.h"
#include "util/err.h" /* pfl_quote */
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

/* A standard stream the caller closed (pfl table RUN >&-) is opened on
 * /dev/null the other way round (stdout, stderr for reading): a file pfl
 * opens later would otherwise get its number and the output meant for
 * stdout would land in it; this way writing to it fails, as it should. */
static void keep_standard_streams_open(void) {
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF) continue;
        const int null = open("/dev/null", fd == 0 ? O_WRONLY : O_RDONLY);
        if (null >= 0 && null != fd) dup2(null, fd), close(null);
    }
}

/* Everything a command wrote to stdout must have arrived: a full disk, a
 * closed stdout or another failed write is an error (exit 1, one line), not
 * a success. A command that failed already said why, in its own line. */
static int finish_stdout(const char *cmd, int rc) {
    int err = 0;
    errno = 0;
    if (fflush(stdout) != 0) err = errno ? errno : -1;
    else if (ferror(stdout)) err = -1; /* an earlier write failed; its reason is gone */
    if (fclose(stdout) != 0 && !err) err = errno ? errno : -1;
    if (!err) return rc;
    if (rc == 0)
        fprintf(stderr, "pfl%s%s: standard output: write failed: %s\n", cmd[0] == '-' ? "" : " ", cmd[0] == '-' ? "" : cmd,
                err > 0 ? strerror(err) : "an earlier write");
    return rc ? rc : 1;
}

/* Arguments end up in messages, which are one line each: a control
 * character (a line break above all) in one is refused. */
static int check_arguments(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        for (const unsigned char *c = (const unsigned char *)argv[i]; *c; c++)
            if (*c < 0x20 || *c == 0x7f) {
                char shown[256];
                fprintf(stderr, "pfl: argument %d ('%s') holds a control character (a line break, a tab, ...), which "
                                "pfl's one-line messages could not show\n",
                        i, pfl_quote(shown, sizeof shown, argv[i], strlen(argv[i]), 120));
                return -1;
            }
    return 0;
}

/* A memory-mapped file cut short under the process (the client store of
 * --client-state, truncated by another program, or its disk failing) ends
 * it with SIGBUS: say so in one line, then end as the signal would. Several
 * threads can fault at once: the first says it and ends the process, the
 * others wait for that (the handler stays installed meanwhile: a handler
 * reset on delivery let a second thread's fault end the process unsaid). */
static void on_bus_error(int sig) {
    static atomic_flag said = ATOMIC_FLAG_INIT;
    static const char msg[] = "pfl: bus error (SIGBUS): a memory-mapped file was cut short under the process (the "
                              "client store of --client-state, truncated by another program or its disk failing)\n";
    if (!atomic_flag_test_and_set(&said)) {
        if (write(2, msg, sizeof msg - 1) < 0) { /* nothing more to do */ }
        struct sigaction dfl = {.sa_handler = SIG_DFL};
        sigaction(sig, &dfl, NULL);
        raise(sig); /* delivered once this handler returns */
        return;
    }
    for (;;) pause();
}

static void catch_bus_errors(void) {
    struct sigaction sa = {.sa_handler = on_bus_error};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
}

static int dispatch(int argc, char **argv) {
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

int main(int argc, char **argv) {
    keep_standard_streams_open();
    pfl_init(argv); /* the BLAS kernels a library program gets too */
    catch_bus_errors();
    /* A file past the size limit (ulimit -f, a quota that signals) fails its
     * write with EFBIG, which every writer reports in one line naming the
     * file and cleans up after, instead of the process dying silently. */
    signal(SIGXFSZ, SIG_IGN);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (check_arguments(argc, argv)) return 2;
    return finish_stdout(argv[1], dispatch(argc, argv));
}
