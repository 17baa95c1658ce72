/* Run folders and who owns them (folder.h). */
#include "run/folder.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h> /* flock */
#include <sys/stat.h>
#include <unistd.h>

#include "util/err.h"
#include "util/safe_write.h" /* pfl_mkdirs */

/* The files of a run, summary.json first: removed first, a folder never
 * shows a summary beside another run's metrics. In this order a refusal
 * names what the folder holds: a finished run, an unfinished one, rows. */
static const char *const run_files[] = {"summary.json", "checkpoint", "metrics.jsonl", NULL};

enum { PATH_SIZE = 4400 };

/* DIR/NAME into path; false when it does not fit (no such file then). */
static bool join(char *path, const char *dir, const char *name) {
    const int n = snprintf(path, PATH_SIZE, "%s/%s", dir, name);
    return n >= 0 && n < PATH_SIZE;
}

static bool exists(const char *dir, const char *name) {
    char path[PATH_SIZE];
    struct stat st;
    return join(path, dir, name) && lstat(path, &st) == 0;
}

/* NAME.tmp, NAME.tmp.PID: what an interrupted write of a run file leaves. */
static bool is_temporary(const char *name) {
    for (int i = 0; run_files[i]; i++) {
        const size_t n = strlen(run_files[i]);
        if (!strncmp(name, run_files[i], n) && !strncmp(name + n, ".tmp", 4)) return true;
    }
    return false;
}

/* checkpoint.ROUND.RANK-of-P (and its temporaries): a rank's part of a
 * checkpoint written under mpirun (src/fl/checkpoint.c). */
static bool is_rank_part(const char *name) { return !strncmp(name, "checkpoint.", 11) && name[11] >= '0' && name[11] <= '9'; }

/* seed-N: a seed's folder of a --seeds run. */
static bool is_seed_folder(const char *dir, const char *name) {
    if (strncmp(name, "seed-", 5) || !name[5] || strspn(name + 5, "0123456789") != strlen(name + 5)) return false;
    char path[PATH_SIZE];
    struct stat st;
    return join(path, dir, name) && lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The first of the run's files DIR holds, or NULL. */
static const char *run_file_in(const char *dir) {
    for (int i = 0; run_files[i]; i++)
        if (exists(dir, run_files[i])) return run_files[i];
    return NULL;
}

/* A seed folder of DIR that holds a run (its name into buf), or false. */
static bool seed_run_in(const char *dir, char *buf, size_t size) {
    DIR *d = opendir(dir);
    if (!d) return false;
    bool found = false;
    for (struct dirent *e; !found && (e = readdir(d));) {
        char sub[PATH_SIZE];
        if (is_seed_folder(dir, e->d_name) && join(sub, dir, e->d_name) && run_file_in(sub))
            found = true, snprintf(buf, size, "%s", e->d_name);
    }
    closedir(d);
    return found;
}

static int remove_file(const char *dir, const char *name) {
    char path[PATH_SIZE];
    if (!join(path, dir, name)) return pfl_err("%s/%s: path too long", dir, name);
    if (unlink(path) != 0 && errno != ENOENT) return pfl_err("%s: cannot remove: %s", path, strerror(errno));
    return 0;
}

/* Removes the run's files from DIR (summary.json first), its temporaries
 * and its seed folders (emptied of the same, then removed when nothing
 * else is left in them). */
static int clear_run(const char *dir) {
    for (int i = 0; run_files[i]; i++)
        if (remove_file(dir, run_files[i])) return -1;
    DIR *d = opendir(dir);
    if (!d) return pfl_err("%s: cannot read: %s", dir, strerror(errno));
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d));) {
        if (is_temporary(e->d_name) || is_rank_part(e->d_name)) {
            rc = remove_file(dir, e->d_name);
        } else if (is_seed_folder(dir, e->d_name)) {
            char sub[PATH_SIZE];
            rc = join(sub, dir, e->d_name) ? clear_run(sub) : pfl_err("%s/%s: path too long", dir, e->d_name);
            if (rc == 0) rmdir(sub); /* stays when it holds something else */
        }
    }
    closedir(d);
    return rc;
}

int pfl_run_folder_lock(run_folder *f, const char *dir, bool create) {
    memset(f, 0, sizeof *f);
    f->lock_fd = -1;
    if (snprintf(f->dir, sizeof f->dir, "%s", dir) >= (int)sizeof f->dir) return pfl_err("%s: path too long", dir);
    struct stat st;
    const bool existed = stat(dir, &st) == 0;
    if (!existed && !create) return pfl_err("%s: no such folder", dir);
    if (!existed && pfl_mkdirs(dir)) return -1;
    f->made = !existed;
    const int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        pfl_err("%s: cannot open: %s", dir, strerror(errno));
        pfl_run_folder_unlock(f);
        return -1;
    }
    f->lock_fd = fd;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) return 0;
    const int e = errno;
    /* a file system without locks (some network ones) leaves the folder unlocked */
    if (e == ENOLCK || e == EOPNOTSUPP || e == EINVAL) return 0;
    pfl_run_folder_unlock(f);
    if (e == EWOULDBLOCK)
        return pfl_err("%s: in use by another pfl process (a run or a resume of it): wait for it to end, or choose "
                       "another folder", dir);
    return pfl_err("%s: cannot lock: %s", dir, strerror(e));
}

void pfl_run_folder_unlock(run_folder *f) {
    if (f->lock_fd >= 0) close(f->lock_fd);
    f->lock_fd = -1;
    if (f->made) rmdir(f->dir); /* only when empty: a failed new run leaves nothing */
    f->made = false;
}

/* DIR takes a new file (a temporary of the run's, which a crash would leave
 * as nothing pfl minds): a run that replaces another fails on an
 * unwritable folder before it loads anything, as a new one does. */
static int check_writable(const char *dir) {
    char path[PATH_SIZE];
    if (snprintf(path, sizeof path, "%s/metrics.jsonl.tmp.%ld", dir, (long)getpid()) >= (int)sizeof path)
        return pfl_err("%s: path too long", dir);
    const int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return pfl_err("%s: cannot write into it: %s", dir, strerror(errno));
    close(fd);
    unlink(path);
    return 0;
}

int pfl_run_folder_replace(run_folder *f) {
    if (!f || !f->replace) return 0;
    if (clear_run(f->dir)) return -1;
    f->replace = false;
    return 0;
}

int pfl_run_folder_claim(run_folder *f, bool overwrite) {
    char seed[300] = "";
    const char *file = run_file_in(f->dir);
    if (!file && !seed_run_in(f->dir, seed, sizeof seed)) return 0;
    if (overwrite) {
        f->replace = true;
        return check_writable(f->dir);
    }
    if (file == run_files[0])
        return pfl_err("%s: holds a finished run (summary.json): --overwrite replaces it, or choose another --out",
                       f->dir);
    if (file == run_files[1])
        return pfl_err("%s: holds an unfinished run (checkpoint): pfl resume %s goes on with it, --overwrite replaces "
                       "it", f->dir, f->dir);
    if (file)
        return pfl_err("%s: holds another run's metrics.jsonl: --overwrite replaces it, or choose another --out",
                       f->dir);
    return pfl_err("%s: holds a run of several seeds (%s/): --overwrite replaces it, or choose another --out", f->dir,
                   seed);
}

void pfl_run_folder_discard(run_folder *f) {
    if (f->resumable || f->replace) return; /* a checkpoint to go on from; the old run, untouched */
    char why[1024]; /* the run's own failure is the message to keep */
    snprintf(why, sizeof why, "%s", pfl_errmsg());
    clear_run(f->dir);
    pfl_err("%s", why);
}

bool pfl_run_folder_finished(const char *dir) { return exists(dir, "summary.json"); }

void pfl_run_folder_remove_temporaries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));)
        if (is_temporary(e->d_name)) remove_file(dir, e->d_name);
    closedir(d);
}
