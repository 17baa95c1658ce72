#include "util/safe_write.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/err.h"

/* What is at a path, in a message's words. */
static const char *kind_of(mode_t mode) {
    if (S_ISLNK(mode)) return "a symbolic link";
    if (S_ISFIFO(mode)) return "a named pipe (FIFO)";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISDIR(mode)) return "a directory";
    return "not a regular file";
}

static int refuse_kind(const char *path, mode_t mode) {
    return pfl_err("%s: %s; pfl writes only a regular file (which it replaces) or a new one", path, kind_of(mode));
}

int pfl_write_target_check(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : pfl_err("%s: cannot write: %s", path, strerror(errno));
    return S_ISREG(st.st_mode) ? 0 : refuse_kind(path, st.st_mode);
}

/* The rename is durable only once the folder's entry is on disk. */
static int fsync_parent_dir(const char *path) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = '\0';
    else *slash = '\0';
    const int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return pfl_err("%s: cannot open to sync: %s", dir, strerror(errno));
    const int rc = fsync(fd);
    const int saved = errno;
    close(fd);
    /* some file systems cannot sync a folder: the data itself is synced */
    return rc && saved != EINVAL && saved != EROFS ? pfl_err("%s: fsync failed: %s", dir, strerror(saved)) : 0;
}

/* The rename of a finished, synced file over PATH, only over a regular file
 * or nothing (checked again: something may have appeared there meanwhile). */
static int put_in_place(const char *from, const char *path) {
    if (pfl_write_target_check(path)) return -1;
    if (rename(from, path) != 0) return pfl_err("%s: cannot replace: %s", path, strerror(errno));
    return fsync_parent_dir(path);
}

int pfl_atomic_open(pfl_atomic_file *a, const char *path) {
    a->f = NULL;
    if (snprintf(a->path, sizeof a->path, "%s", path) >= (int)sizeof a->path ||
        snprintf(a->tmp, sizeof a->tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof a->tmp)
        return pfl_err("%s: path too long", path);
    if (pfl_write_target_check(path)) return -1;
    const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
    int fd = open(a->tmp, flags, 0666);
    if (fd < 0 && errno == EEXIST && unlink(a->tmp) == 0) /* left by a dead process that had this pid */
        fd = open(a->tmp, flags, 0666);
    if (fd < 0) return pfl_err("%s: cannot write (%s): %s", path, a->tmp, strerror(errno));
    if (!(a->f = fdopen(fd, "w"))) {
        const int saved = errno;
        close(fd);
        unlink(a->tmp);
        return pfl_err("%s: cannot write: %s", path, strerror(saved));
    }
    return 0;
}

/* 0 when everything written to f reached the file (and with `sync` the
 * disk), else the reason: an errno, or -1 when an earlier write failed
 * (its errno is gone). */
static int flush_error(FILE *f, bool sync) {
    errno = 0;
    if (fflush(f) != 0) return errno ? errno : -1;
    if (ferror(f)) return -1;
    if (sync && fsync(fileno(f)) != 0) return errno ? errno : -1;
    return 0;
}

static const char *reason(int err) { return err > 0 ? strerror(err) : "an earlier write failed"; }

int pfl_atomic_commit(pfl_atomic_file *a) {
    int err = flush_error(a->f, true);
    if (fclose(a->f) != 0 && !err) err = errno ? errno : -1;
    a->f = NULL;
    if (err) {
        unlink(a->tmp);
        return pfl_err("%s: write failed: %s", a->path, reason(err));
    }
    if (put_in_place(a->tmp, a->path)) {
        unlink(a->tmp);
        return -1;
    }
    return 0;
}

void pfl_atomic_abort(pfl_atomic_file *a) {
    if (a->f) fclose(a->f);
    a->f = NULL;
    unlink(a->tmp);
}

int pfl_atomic_place(const char *from, const char *path) {
    const int fd = open(from, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return pfl_err("%s: cannot read: %s", from, strerror(errno));
    const int rc = fsync(fd);
    const int saved = errno;
    close(fd);
    if (rc) return pfl_err("%s: fsync failed: %s", from, strerror(saved));
    return put_in_place(from, path);
}

/* PATH opened with `flags` only when it is a regular file, without waiting
 * on a pipe (O_NONBLOCK, cleared once checked): the descriptor, or -1 with
 * a message saying what is there. */
static int open_regular(const char *path, int flags, bool writing) {
    const char *verb = writing ? "write" : "read";
    const int fd = open(path, flags | O_NONBLOCK | O_CLOEXEC, 0666);
    if (fd < 0) return pfl_err("%s: cannot %s: %s", path, writing ? verb : "open", strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) pfl_err("%s: cannot %s: %s", path, verb, strerror(errno));
    else if (!S_ISREG(st.st_mode) && writing) refuse_kind(path, st.st_mode);
    else if (!S_ISREG(st.st_mode)) pfl_err("%s: cannot read: %s, not a regular file", path, kind_of(st.st_mode));
    else if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0)
        pfl_err("%s: cannot %s: %s", path, verb, strerror(errno));
    else return fd;
    close(fd);
    return -1;
}

/* A stream on fd, or NULL with a message (fd closed). */
static FILE *stream_of(int fd, const char *path, const char *mode, bool writing) {
    FILE *f = fd >= 0 ? fdopen(fd, mode) : NULL;
    if (fd >= 0 && !f) {
        pfl_err("%s: cannot %s: %s", path, writing ? "write" : "read", strerror(errno));
        close(fd);
    }
    return f;
}

FILE *pfl_stream_open(const char *path, bool append) {
    if (pfl_write_target_check(path)) return NULL;
    /* no link followed, even one that appeared since the check */
    const int fd = open_regular(path, O_WRONLY | O_CREAT | O_NOFOLLOW | (append ? O_APPEND : 0), true);
    if (fd >= 0 && !append && ftruncate(fd, 0) != 0) {
        pfl_err("%s: cannot write: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    return stream_of(fd, path, append ? "a" : "w", true);
}

int pfl_stream_flush(FILE *f, const char *path, bool sync) {
    const int err = flush_error(f, sync);
    return err ? pfl_err("%s: write failed: %s", path, reason(err)) : 0;
}

int pfl_stream_close(FILE *f, const char *path) {
    int err = flush_error(f, false);
    if (fclose(f) != 0 && !err) err = errno ? errno : -1;
    return err ? pfl_err("%s: write failed: %s", path, reason(err)) : 0;
}

FILE *pfl_read_open(const char *path) { return stream_of(open_regular(path, O_RDONLY, false), path, "r", false); }

int pfl_read_fd(const char *path) { return open_regular(path, O_RDONLY, false); }

int pfl_mkdirs(const char *path) {
    char buf[4096];
    if (!*path) return pfl_err("an empty path: expected a folder");
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return pfl_err("%s: path too long", path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char saved = *p;
            *p = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST) return pfl_err("%s: cannot create: %s", buf, strerror(errno));
            *p = saved;
            if (saved == '\0') break;
        }
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return pfl_err("%s: not a directory", path);
    return 0;
}
