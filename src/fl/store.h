/* Per-client state kept between rounds (DESIGN.md §3: memory grows with what
 * is personal): one row of `row_len` floats per client, held lazily. A row
 * nobody has written reads as the store's initial row and costs nothing; the
 * first write copies the initial row into storage of its own.
 *
 * Two backings, the same bits:
 *  - memory: each written row is its own allocation;
 *  - a file (--client-state DIR): one shared mapping of rows x row bytes
 *    (each row padded to whole pages) of a sparse file created in DIR and
 *    unlinked at once, so it needs no cleanup and vanishes with the process.
 *    Disk blocks are reserved for a row when it is first written (a full disk
 *    is an error then, not a SIGBUS later); the operating system pages rows
 *    in and out, and pfl_store_release hands a row's pages back when the
 *    round loop is done with it, so resident memory holds only the rows in
 *    use.
 *
 * Rows are indexed 0..rows-1 (the round loop's stores have a row per
 * client; under MPI a process writes only its own clients'). Different threads may read and write
 * different rows at once; a row is used by one thread at a time. */
#ifndef PFL_FL_STORE_H
#define PFL_FL_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/ckpt.h"

typedef struct pfl_store pfl_store;

/* A store of `rows` rows of `row_len` floats that read as `initial` (copied)
 * until written; in a file in `dir` when dir is not NULL (`name` names the
 * file, for the messages and for people listing DIR while it runs). NULL
 * with a message naming the directory on failure. */
pfl_store *pfl_store_create(const char *dir, const char *name, int rows, size_t row_len, const float *initial);
void pfl_store_free(pfl_store *s);

/* The row as it stands: its own storage once written, else the initial row.
 * Valid until the row is written or released. */
const float *pfl_store_read(const pfl_store *s, int row);
/* The row's storage, to write in place; the first call copies the initial
 * row into it. NULL when no storage can be had (memory, or disk under
 * --client-state): pfl_store_error then says why, and the caller stops
 * using the row. */
float *pfl_store_write(pfl_store *s, int row);
/* Whether the row has been written (has storage of its own). */
bool pfl_store_touched(const pfl_store *s, int row);
/* The round loop is done with the row for now: a file-backed store drops
 * the row's pages from this process's memory (they stay in the file and the
 * page cache); nothing for a memory store. */
void pfl_store_release(pfl_store *s, int row);

int pfl_store_rows(const pfl_store *s);
const char *pfl_store_name(const pfl_store *s); /* as created */
size_t pfl_store_row_len(const pfl_store *s);
/* Bytes the written rows hold (in memory or in the file), initial row not
 * counted. */
uint64_t pfl_store_bytes(const pfl_store *s);
/* The first failure of pfl_store_write ("" when none). */
const char *pfl_store_error(const pfl_store *s);

/* Checkpoints: sections "<name>.touched" (a flag per row) and "<name>.rows"
 * (the written rows, in row order), so a checkpoint grows with the rows
 * written too. Loading writes the checkpoint's rows into a fresh store of the
 * same shape; a row the checkpoint did not write stays unwritten. */
int pfl_store_save(const pfl_store *s, pfl_ckpt_writer *w, const char *name);
int pfl_store_load(pfl_store *s, pfl_ckpt_reader *r, const char *name);
/* The same for rows [first, end) only (under MPI each rank saves its
 * clients'); loading the sections of rows [first, end) writes those of
 * them in [want_first, want_end) and leaves every other row as it is. */
int pfl_store_save_range(const pfl_store *s, pfl_ckpt_writer *w, const char *name, int first, int end);
int pfl_store_load_range(pfl_store *s, pfl_ckpt_reader *r, const char *name, int first, int end, int want_first,
                         int want_end);

#endif
