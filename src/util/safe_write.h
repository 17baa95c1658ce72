/* Every file pfl writes goes through here, so that none is half-written,
 * silently cut short, or written through something that is not a file.
 *
 * A file written whole (summary.json, a checkpoint, pfl table --out, the
 * pictures of pfl plot, pfl partition --save) goes to a temporary file
 * beside it, PATH.tmp.PID, created new (never through a link); every write
 * and the close are checked, the file is fsynced, renamed over PATH, and the
 * folder fsynced: a reader sees the old file or the new one, never a mix,
 * and a failed write leaves PATH as it was. A file written as it goes
 * (metrics.jsonl, a line per evaluation; the cache of known data files) is
 * opened in place, never through a link, every write checked.
 *
 * Either way PATH must be a regular file or nothing: a symbolic link, a
 * named pipe, a device, a socket or a directory there is refused with one
 * line naming it (before anything is written, and again before the rename),
 * and left as it is. Not outputs, so not through here: files in a private
 * folder pfl has just made (mkdtemp: gnuplot's input for pfl plot) and the
 * client store's file (mkstemp, unlinked at once). */
#ifndef PFL_UTIL_SAFE_WRITE_H
#define PFL_UTIL_SAFE_WRITE_H

#include <stdbool.h>
#include <stdio.h>

/* 0 when pfl may write PATH (nothing there, or a regular file it will
 * replace); -1 with "PATH: a symbolic link; pfl writes only ..." otherwise. */
int pfl_write_target_check(const char *path);

/* A file written whole: the caller writes to f (the temporary file), then
 * commits (checks, fsyncs, renames over PATH) or aborts (removes it). */
typedef struct {
    FILE *f;
    char tmp[4096];
    char path[4096];
} pfl_atomic_file;

int pfl_atomic_open(pfl_atomic_file *a, const char *path);
int pfl_atomic_commit(pfl_atomic_file *a);
void pfl_atomic_abort(pfl_atomic_file *a);

/* A whole file another program wrote (gnuplot's pictures, in a scratch
 * folder beside PATH) moved into place by the same rules: fsynced, renamed
 * over a regular file or nothing, the folder fsynced. 0, or -1 with a
 * message (`from` is left where it was). */
int pfl_atomic_place(const char *from, const char *path);

/* A file written as it goes: PATH opened (created when missing) to append,
 * or emptied first, under the rules above. NULL with a message. */
FILE *pfl_stream_open(const char *path, bool append);
/* Flushes what was written to f (and with `sync`, fsyncs it): 0, or -1 with
 * "PATH: write failed: reason". */
int pfl_stream_flush(FILE *f, const char *path, bool sync);
/* Flushes and closes f, checked: 0, or -1 with a message. f is closed either way. */
int pfl_stream_close(FILE *f, const char *path);

/* Reading back what pfl wrote (a checkpoint, metrics.jsonl): PATH opened
 * to read only when it is a regular file; a pipe or a device there is
 * refused, not waited on. NULL with "PATH: cannot open: reason" (no such file, no
 * permission) or "PATH: cannot read: a named pipe (FIFO), not a regular file". */
FILE *pfl_read_open(const char *path);
/* The same as a descriptor (for gzdopen, a zip reader): -1 with the message. */
int pfl_read_fd(const char *path);

/* Creates `path` and its missing parents (mkdir -p). 0 or -1 with a message. */
int pfl_mkdirs(const char *path);

#endif
