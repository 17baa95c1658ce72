/* The writer of every file pfl writes (util/safe_write.h): whole files
 * replace a regular file or nothing and nothing else, every write error is
 * reported, and nothing is left half-written or behind. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "util/ckpt.h"
#include "util/err.h"
#include "util/safe_write.h"

static char dir[64];

static void path_to(char *out, size_t size, const char *name) { snprintf(out, size, "%s/%s", dir, name); }

static void put(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) fputs(text, f), fclose(f);
}

static bool holds(const char *path, const char *text) {
    char buf[256] = "";
    FILE *f = fopen(path, "r");
    if (!f) return false;
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return !strcmp(buf, text);
}

static bool is_link(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
}

static bool message_has(const char *a, const char *b) {
    return strstr(pfl_errmsg(), a) && strstr(pfl_errmsg(), b) && !strchr(pfl_errmsg(), '\n');
}

/* Nothing but the named files in dir: no temporary file left. */
static int files_in_dir(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "test $(ls -A %s | grep -c tmp) -eq 0", dir);
    return system(cmd) == 0;
}

static int write_whole(const char *path, const char *text) {
    pfl_atomic_file a;
    if (pfl_atomic_open(&a, path)) return -1;
    fputs(text, a.f);
    return pfl_atomic_commit(&a);
}

static void test_replaces_regular_or_nothing(void) {
    char path[128];
    path_to(path, sizeof path, "table.md");
    CHECK(write_whole(path, "one") == 0 && holds(path, "one"), "new file: %s", pfl_errmsg());
    CHECK(write_whole(path, "two") == 0 && holds(path, "two"), "replaced: %s", pfl_errmsg());
    CHECK(files_in_dir(), "a temporary file was left behind");
}

/* A symlink (to a file pfl must not write), a FIFO and a directory at the
 * path: refused in one line naming the path and what is there, untouched. */
static void test_refuses_what_is_not_a_file(void) {
    char target[128], link[128], fifo[128], sub[128];
    path_to(target, sizeof target, "precious");
    path_to(link, sizeof link, "link");
    path_to(fifo, sizeof fifo, "fifo");
    path_to(sub, sizeof sub, "sub");
    put(target, "keep");
    CHECK(symlink(target, link) == 0 && mkfifo(fifo, 0600) == 0 && mkdir(sub, 0700) == 0, "setup: %s", strerror(errno));
    CHECK(write_whole(link, "x") != 0 && message_has(link, "a symbolic link"), "symlink: %s", pfl_errmsg());
    CHECK(is_link(link) && holds(target, "keep"), "the link or its target changed");
    CHECK(write_whole(fifo, "x") != 0 && message_has(fifo, "a named pipe"), "fifo: %s", pfl_errmsg());
    CHECK(write_whole(sub, "x") != 0 && message_has(sub, "a directory"), "directory: %s", pfl_errmsg());
    CHECK(pfl_stream_open(link, true) == NULL && message_has(link, "a symbolic link"), "stream, symlink: %s",
          pfl_errmsg());
    CHECK(pfl_stream_open(fifo, false) == NULL && message_has(fifo, "a named pipe"), "stream, fifo: %s", pfl_errmsg());
    CHECK(is_link(link) && holds(target, "keep"), "the link or its target changed");
    /* reading back: a pipe is refused, not waited on */
    CHECK(pfl_read_open(fifo) == NULL && message_has(fifo, "not a regular file"), "read fifo: %s", pfl_errmsg());
    pfl_ckpt_reader r;
    CHECK(pfl_ckpt_open(&r, fifo) != 0 && message_has(fifo, "not a regular file"), "checkpoint fifo: %s", pfl_errmsg());
    /* something that appears at the path while the file is written is not replaced either */
    char late[128];
    path_to(late, sizeof late, "late");
    pfl_atomic_file a;
    CHECK(pfl_atomic_open(&a, late) == 0, "open: %s", pfl_errmsg());
    fputs("x", a.f);
    CHECK(symlink(target, late) == 0, "symlink: %s", strerror(errno));
    CHECK(pfl_atomic_commit(&a) != 0 && message_has(late, "a symbolic link"), "late symlink: %s", pfl_errmsg());
    CHECK(is_link(late) && holds(target, "keep"), "the late link or its target changed");
    unlink(link), unlink(late), unlink(fifo), rmdir(sub), unlink(target);
    CHECK(files_in_dir(), "a temporary file was left behind");
}

/* Writes that fail (a file size limit: the disk full as a process sees it)
 * are reported, and the file stays as it was. */
static void test_write_errors(void) {
    char path[128], stream[128];
    path_to(path, sizeof path, "summary.json");
    path_to(stream, sizeof stream, "metrics.jsonl");
    put(path, "old");
    struct rlimit saved, small = {4096, 4096};
    getrlimit(RLIMIT_FSIZE, &saved);
    small.rlim_max = saved.rlim_max;
    signal(SIGXFSZ, SIG_IGN); /* a write past the limit then fails with EFBIG */
    CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0, "setrlimit: %s", strerror(errno));
    char big[10000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    CHECK(write_whole(path, big) != 0 && message_has(path, "write failed"), "too large: %s", pfl_errmsg());
    CHECK(holds(path, "old"), "a failed write changed the file");
    FILE *f = pfl_stream_open(stream, false);
    CHECK(f != NULL, "stream: %s", pfl_errmsg());
    if (f) {
        fputs(big, f);
        CHECK(pfl_stream_flush(f, stream, true) != 0 && message_has(stream, "write failed"), "stream: %s",
              pfl_errmsg());
        CHECK(pfl_stream_close(f, stream) != 0, "a failed stream closed without an error");
    }
    setrlimit(RLIMIT_FSIZE, &saved);
    signal(SIGXFSZ, SIG_DFL);
    unlink(path), unlink(stream);
    CHECK(files_in_dir(), "a temporary file was left behind");
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/pfl-test-write-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    test_replaces_regular_or_nothing();
    test_refuses_what_is_not_a_file();
    test_write_errors();
    rmdir(dir);
    TEST_MAIN_END();
}
