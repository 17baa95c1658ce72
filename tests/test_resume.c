/* pfl resume with bad stored flags: a checkpoint whose
 * flag list holds --rounds=abc, --help, nothing at all or no --algo is
 * refused with one message naming the checkpoint and the problem, and no run
 * starts. The checkpoints are written here with the checkpoint writer; with
 * $PFL set (the test suite sets it) the command is checked too: exit status
 * 1 and exactly one line on stderr, nothing on stdout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "run/run.h"
#include "util/ckpt.h"
#include "util/err.h"

static char root[] = "/tmp/pfl_test_resume_XXXXXX";

/* dir/checkpoint with the stored flags `flags` (len bytes, NUL-separated)
 * as a run killed before round 0 leaves it. */
static void write_checkpoint(const char *dir, const char *flags, size_t len) {
    char path[600];
    mkdir(dir, 0700);
    snprintf(path, sizeof path, "%s/checkpoint", dir);
    pfl_ckpt_writer w;
    int rc = pfl_ckpt_begin(&w, path);
    if (!rc) rc = pfl_ckpt_put(&w, "cli.flags", flags, len) || pfl_ckpt_put_int(&w, "cli.not_started", 1);
    CHECK(rc == 0 && pfl_ckpt_commit(&w) == 0, "writing %s: %s", path, pfl_errmsg());
}

static int lines_in(const char *text) {
    int n = 0;
    for (const char *c = text; *c; c++) n += *c == '\n';
    return n;
}

static void slurp(const char *path, char *buf, size_t size) {
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return;
    buf[fread(buf, 1, size - 1, f)] = '\0';
    fclose(f);
}

/* pfl resume DIR through the command: exit 1, one line on stderr naming `needle`. */
static void check_command(const char *dir, const char *needle) {
    const char *pfl = getenv("PFL");
    if (!pfl || !*pfl) return;
    char cmd[2048], err[4096], out[4096], errpath[600], outpath[600];
    snprintf(errpath, sizeof errpath, "%s/stderr", root);
    snprintf(outpath, sizeof outpath, "%s/stdout", root);
    snprintf(cmd, sizeof cmd, "'%s' resume '%s' >'%s' 2>'%s'", pfl, dir, outpath, errpath);
    const int status = system(cmd);
    slurp(errpath, err, sizeof err);
    slurp(outpath, out, sizeof out);
    CHECK(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 1, "%s: pfl resume exit status %d", dir,
          WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    CHECK(lines_in(err) == 1 && strstr(err, needle), "%s: want one line naming %s, got: %s", dir, needle, err);
    CHECK(out[0] == '\0', "%s: nothing on stdout (no help text), got %zu bytes", dir, strlen(out));
    remove(errpath), remove(outpath);
}

/* One bad flag list: the library refuses it with a message holding every
 * needle, and so does the command. */
static void check_refused(const char *name, const char *flags, size_t len, const char *needle, const char *needle2) {
    char dir[256];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    write_checkpoint(dir, flags, len);
    const pfl_resume_options r = {.quiet = true};
    pfl_err_clear();
    const int rc = pfl_run_resume(dir, &r);
    const char *msg = pfl_errmsg();
    CHECK(rc < 0, "%s: resumed", name);
    CHECK(strstr(msg, "checkpoint: stored flags: ") && strstr(msg, needle) && (!needle2 || strstr(msg, needle2)),
          "%s: message '%s' should name the checkpoint, %s%s%s", name, msg, needle, needle2 ? " and " : "",
          needle2 ? needle2 : "");
    CHECK(!strstr(msg, "stored flags: ") || !strstr(strstr(msg, "stored flags: ") + 1, "stored flags: "),
          "%s: the message repeats itself: %s", name, msg);
    CHECK(!strchr(msg, '\n'), "%s: one line", name);
    check_command(dir, needle);
    char path[600];
    snprintf(path, sizeof path, "%s/checkpoint", dir);
    remove(path);
    rmdir(dir);
}

int main(void) {
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    static const char rounds[] = "--algo=fedavg\0--data=mnist\0--rounds=abc";
    check_refused("rounds_abc", rounds, sizeof rounds, "--rounds", "'abc' is not a number");
    static const char help[] = "--algo=fedavg\0--help";
    check_refused("help", help, sizeof help, "--help", NULL);
    check_refused("empty", "", 0, "none", NULL);
    static const char no_algo[] = "--data=mnist\0--rounds=2";
    check_refused("no_algo", no_algo, sizeof no_algo, "no --algo", NULL);
    static const char unknown[] = "--algo=fedavg\0--frobnicate=3";
    check_refused("unknown", unknown, sizeof unknown, "--frobnicate", NULL);
    rmdir(root);
    TEST_MAIN_END();
}
