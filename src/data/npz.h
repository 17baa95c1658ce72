/* Inside the reader of PFLlib's client files (data.h, "PFLlib folders"):
 * the zip layer (npz.c) hands the bytes of data.npy to the unpickler
 * (pickle.c). Private to src/data/ (not in pfl.h): the functions carry pfl_
 * only so that libpfl defines no global name outside its prefix. */
#ifndef PFL_DATA_NPZ_H
#define PFL_DATA_NPZ_H

#include <stddef.h>
#include <stdint.h>

#include "data/data.h"
#include "util/err.h" /* PFL_PRINTF */

/* Where a message comes from: "pfllib: PATH: " starts every one. */
typedef struct {
    const char *what; /* "pfllib" */
    const char *path; /* the .npz file */
} npz_source;

/* pfl_err("WHAT: PATH: FIELD: ...") in one line: returns -1 (in pickle.c,
 * which the zip layer calls and which calls nothing back). */
int pfl_npz_fail(const npz_source *src, const char *field, const char *fmt, ...) PFL_PRINTF(3, 4);

/* Unpickles the payload of data.npy (after its header: npy[0..size)),
 * numpy's pickle of a 0-d object array holding {'x': ..., 'y': ...}, into
 * out (x, y pointing into npy; text rows copied out). 0, or -1 with a
 * message naming src and the field. */
int pfl_npz_unpickle_xy(const npz_source *src, const uint8_t *npy, size_t size, pfl_npz_xy *out);

#endif
