/* Checkpoint files: named sections of bytes behind a magic and a format
 * version, closed by a SHA-256 of everything before it.
 *
 *   "PFLCKPT\0", u32 format version
 *   u64 length of the whole file, u64 its bitwise complement
 *   per section: u32 name length (1..255), the name, u64 data length, the data
 *   u32 0 (no more sections)
 *   the 32-byte SHA-256 of every byte above but the two length fields
 *
 * The length is written last (the file is streamed, the checksum with it),
 * and its complement guards it, so a reader tells a file cut short from one
 * whose bytes changed, and a write that never finished (both zero) from both.
 * Integers, and the elements of float, double and integer arrays, are stored
 * little-endian, so a checkpoint moves between machines. A section is a whole
 * buffer with its length; whoever reads it says how long it must be, so a
 * checkpoint of another configuration is refused instead of misread.
 *
 * A writer writes PATH.tmp.PID (util/safe_write.h, the writer of every file
 * pfl writes); pfl_ckpt_commit appends the checksum, fsyncs the file, renames
 * it over PATH (only over a regular file or nothing) and fsyncs the
 * directory, so a crash at any moment leaves the previous checkpoint or the
 * new one, never a mix.
 * pfl_ckpt_open checks magic, version, structure and checksum before anything
 * is read: a truncated or corrupt file is refused whole, with one message
 * naming the file and the problem. */
#ifndef PFL_UTIL_CKPT_H
#define PFL_UTIL_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "util/sha256.h"

#define PFL_CKPT_VERSION 1
#define PFL_CKPT_MAX_NAME 255

typedef struct {
    FILE *f;
    pfl_sha256 sha;       /* of every byte written so far */
    bool failed;          /* a write failed: commit refuses */
    uint64_t section_left; /* bytes still due to the section pfl_ckpt_put_begin opened */
    char path[4096];
    char tmp[4096];       /* path + ".tmp." + the process id */
    uint8_t digest[32];   /* after a commit: the checksum the file ends with (what names it to another file) */
} pfl_ckpt_writer;

/* Starts PATH.tmp.PID and writes the header. */
int pfl_ckpt_begin(pfl_ckpt_writer *w, const char *path);
/* One section of n raw bytes. Every put returns 0, or -1 with a message. */
int pfl_ckpt_put(pfl_ckpt_writer *w, const char *name, const void *bytes, size_t n);
/* Arrays, stored little-endian: n elements. */
int pfl_ckpt_put_f32(pfl_ckpt_writer *w, const char *name, const float *v, size_t n);
int pfl_ckpt_put_f64(pfl_ckpt_writer *w, const char *name, const double *v, size_t n);
int pfl_ckpt_put_i32(pfl_ckpt_writer *w, const char *name, const int *v, size_t n);
int pfl_ckpt_put_bool(pfl_ckpt_writer *w, const char *name, const bool *v, size_t n); /* a byte each */
/* A section written in pieces (a store far larger than one buffer):
 * pfl_ckpt_put_begin announces its length in bytes, then pfl_ckpt_put_more_f32
 * appends float arrays until exactly that many bytes are written; another
 * section or a commit before then fails. */
int pfl_ckpt_put_begin(pfl_ckpt_writer *w, const char *name, uint64_t bytes);
int pfl_ckpt_put_more_f32(pfl_ckpt_writer *w, const float *v, size_t n);
/* One number. */
int pfl_ckpt_put_int(pfl_ckpt_writer *w, const char *name, int64_t v);
int pfl_ckpt_put_double(pfl_ckpt_writer *w, const char *name, double v);
/* Finishes the file and puts it in place (see above); the writer is closed
 * either way, and on failure PATH.tmp.PID is removed and PATH left as it was. */
int pfl_ckpt_commit(pfl_ckpt_writer *w);
/* Drops the file being written; PATH stays as it was. */
void pfl_ckpt_abort(pfl_ckpt_writer *w);

typedef struct {
    char name[PFL_CKPT_MAX_NAME + 1];
    uint64_t offset, length;   /* of the data in the file */
} pfl_ckpt_section;

typedef struct {
    FILE *f;
    char path[4096];
    uint32_t version;
    pfl_ckpt_section *sections;
    int num_sections;
    uint8_t digest[32];   /* the checksum the file ends with */
} pfl_ckpt_reader;

/* Opens and verifies PATH. Returns 0, or -1 with "PATH: problem" (missing,
 * not a checkpoint, another format version, truncated, checksum mismatch). */
int pfl_ckpt_open(pfl_ckpt_reader *r, const char *path);
void pfl_ckpt_close(pfl_ckpt_reader *r);

bool pfl_ckpt_has(const pfl_ckpt_reader *r, const char *name);
/* The data length of a section in bytes; -1 with a message when it is missing. */
int pfl_ckpt_length(const pfl_ckpt_reader *r, const char *name, uint64_t *bytes);
/* Reads a section that must hold exactly n bytes (or n elements). */
int pfl_ckpt_get(pfl_ckpt_reader *r, const char *name, void *bytes, size_t n);
int pfl_ckpt_get_f32(pfl_ckpt_reader *r, const char *name, float *v, size_t n);
/* Elements [first, first + n) of a float section (read in pieces). */
int pfl_ckpt_get_f32_at(pfl_ckpt_reader *r, const char *name, uint64_t first, float *v, size_t n);
int pfl_ckpt_get_f64(pfl_ckpt_reader *r, const char *name, double *v, size_t n);
int pfl_ckpt_get_i32(pfl_ckpt_reader *r, const char *name, int *v, size_t n);
int pfl_ckpt_get_bool(pfl_ckpt_reader *r, const char *name, bool *v, size_t n);
int pfl_ckpt_get_int(pfl_ckpt_reader *r, const char *name, int64_t *v);
int pfl_ckpt_get_double(pfl_ckpt_reader *r, const char *name, double *v);

#endif
