/* Per-client rows, lazily, in memory or in a memory-mapped file (store.h). */
#define _DEFAULT_SOURCE /* madvise: glibc's posix_madvise ignores POSIX_MADV_DONTNEED */
#include "fl/store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "util/err.h"

struct pfl_store {
    char name[64];         /* what the store holds, for checkpoints and file names */
    int rows;
    size_t row_len;
    float *initial;        /* row_len floats */
    bool *touched;         /* per row: written at least once */
    float **memory_rows;   /* memory store: per row its allocation, or NULL */
    /* file store */
    int fd;                /* -1 for a memory store */
    char *map;             /* rows x stride bytes, shared with the file */
    size_t stride;         /* bytes per row, whole pages */
    size_t map_bytes;
    char path[4096];       /* the file's name while it existed (it is unlinked at once) */
    char error[4096 + 256];  /* the first write failure */
};

static bool file_backed(const pfl_store *s) { return s->fd >= 0; }

/* Records the first write failure (writes run on worker threads, whose
 * pfl_err messages the caller would not see). */
static void store_fail(pfl_store *s, const char *what, int err) {
#pragma omp critical(pfl_store_error)
    if (!s->error[0])
        snprintf(s->error, sizeof s->error, "%s: %s: %s", file_backed(s) ? s->path : "client state", what,
                 strerror(err));
}

static int open_file(pfl_store *s, const char *dir, const char *name) {
    const long page = sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096;
    const size_t bytes = s->row_len * sizeof(float);
    s->stride = (bytes + (size_t)page - 1) / (size_t)page * (size_t)page;
    if (s->stride == 0) s->stride = (size_t)page;
    s->map_bytes = s->stride * (size_t)s->rows;
    if (snprintf(s->path, sizeof s->path, "%s/pfl-%s-XXXXXX", dir, name) >= (int)sizeof s->path)
        return pfl_err("--client-state %s: path too long", dir);
    if ((s->fd = mkstemp(s->path)) < 0) return pfl_err("--client-state %s: cannot create a file: %s", dir, strerror(errno));
    /* nobody else needs the name: the file goes when the process does */
    unlink(s->path);
    if (ftruncate(s->fd, (off_t)s->map_bytes) != 0)
        return pfl_err("--client-state %s: cannot size a file of %zu bytes: %s", dir, s->map_bytes, strerror(errno));
    s->map = mmap(NULL, s->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
    if (s->map == MAP_FAILED) {
        s->map = NULL;
        return pfl_err("--client-state %s: cannot map %zu bytes: %s", dir, s->map_bytes, strerror(errno));
    }
    return 0;
}

pfl_store *pfl_store_create(const char *dir, const char *name, int rows, size_t row_len, const float *initial) {
    pfl_store *s = pfl_calloc(1, sizeof *s);
    if (!s) return NULL;
    s->fd = -1;
    snprintf(s->name, sizeof s->name, "%s", name);
    s->rows = rows > 0 ? rows : 0, s->row_len = row_len;
    if (!(s->initial = pfl_malloc(sizeof(float) * (row_len ? row_len : 1))) ||
        !(s->touched = pfl_calloc((size_t)(s->rows ? s->rows : 1), sizeof(bool))))
        goto fail;
    if (row_len) memcpy(s->initial, initial, sizeof(float) * row_len);
    if (dir && s->rows > 0) { /* no rows: nothing to map */
        if (open_file(s, dir, name)) goto fail;
    } else if (!(s->memory_rows = pfl_calloc((size_t)(s->rows ? s->rows : 1), sizeof(float *)))) {
        goto fail;
    }
    return s;
fail:
    pfl_store_free(s);
    return NULL;
}

void pfl_store_free(pfl_store *s) {
    if (!s) return;
    if (s->memory_rows)
        for (int r = 0; r < s->rows; r++) free(s->memory_rows[r]);
    free(s->memory_rows);
    if (s->map) munmap(s->map, s->map_bytes);
    if (s->fd >= 0) close(s->fd);
    free(s->initial);
    free(s->touched);
    free(s);
}

static float *row_storage(const pfl_store *s, int row) {
    return file_backed(s) ? (float *)(s->map + s->stride * (size_t)row) : s->memory_rows[row];
}

const float *pfl_store_read(const pfl_store *s, int row) {
    return s->touched[row] ? row_storage(s, row) : s->initial;
}

float *pfl_store_write(pfl_store *s, int row) {
    if (s->touched[row]) return row_storage(s, row);
    if (file_backed(s)) {
        /* reserve the row's blocks now: a sparse page written on a full disk
         * would be a SIGBUS at some later store */
        const int err = posix_fallocate(s->fd, (off_t)(s->stride * (size_t)row), (off_t)s->stride);
        if (err) {
            store_fail(s, "cannot reserve a client's row", err);
            return NULL;
        }
    } else if (!(s->memory_rows[row] = malloc(sizeof(float) * (s->row_len ? s->row_len : 1)))) {
        store_fail(s, "cannot allocate a client's row", ENOMEM);
        return NULL;
    }
    float *p = row_storage(s, row);
    if (s->row_len) memcpy(p, s->initial, sizeof(float) * s->row_len);
    s->touched[row] = true;
    return p;
}

bool pfl_store_touched(const pfl_store *s, int row) { return s->touched[row]; }

void pfl_store_release(pfl_store *s, int row) {
    /* shared file pages: dropping them from this process keeps their data
     * (in the page cache, written back to the file by the kernel) */
    if (file_backed(s) && s->touched[row]) madvise(row_storage(s, row), s->stride, MADV_DONTNEED);
}

int pfl_store_rows(const pfl_store *s) { return s->rows; }
const char *pfl_store_name(const pfl_store *s) { return s->name; }
size_t pfl_store_row_len(const pfl_store *s) { return s->row_len; }
const char *pfl_store_error(const pfl_store *s) { return s->error; }

uint64_t pfl_store_bytes(const pfl_store *s) {
    uint64_t touched = 0;
    for (int r = 0; r < s->rows; r++) touched += s->touched[r];
    return touched * (file_backed(s) ? (uint64_t)s->stride : (uint64_t)(s->row_len * sizeof(float)));
}

/* ---- checkpoints ---- */

static int section_name(char *out, size_t size, const char *name, const char *part) {
    if (snprintf(out, size, "%s.%s", name, part) >= (int)size) return pfl_err("checkpoint section %s: name too long", name);
    return 0;
}

int pfl_store_save_range(const pfl_store *s, pfl_ckpt_writer *w, const char *name, int first, int end) {
    char touched_name[PFL_CKPT_MAX_NAME + 1], rows_name[PFL_CKPT_MAX_NAME + 1];
    if (section_name(touched_name, sizeof touched_name, name, "touched") ||
        section_name(rows_name, sizeof rows_name, name, "rows"))
        return -1;
    uint64_t written = 0;
    for (int r = first; r < end; r++) written += s->touched[r];
    if (pfl_ckpt_put_bool(w, touched_name, s->touched + first, (size_t)(end - first)) ||
        pfl_ckpt_put_begin(w, rows_name, written * s->row_len * sizeof(float)))
        return -1;
    for (int r = first; r < end; r++) {
        if (!s->touched[r]) continue;
        if (pfl_ckpt_put_more_f32(w, row_storage(s, r), s->row_len)) return -1;
        pfl_store_release((pfl_store *)s, r); /* a whole store may be far larger than memory */
    }
    return 0;
}

int pfl_store_save(const pfl_store *s, pfl_ckpt_writer *w, const char *name) {
    return pfl_store_save_range(s, w, name, 0, s->rows);
}

int pfl_store_load_range(pfl_store *s, pfl_ckpt_reader *r, const char *name, int first, int end, int want_first,
                         int want_end) {
    char touched_name[PFL_CKPT_MAX_NAME + 1], rows_name[PFL_CKPT_MAX_NAME + 1];
    if (section_name(touched_name, sizeof touched_name, name, "touched") ||
        section_name(rows_name, sizeof rows_name, name, "rows"))
        return -1;
    const int n = end - first;
    bool *touched = pfl_malloc(sizeof(bool) * (size_t)(n > 0 ? n : 1));
    int rc = -1;
    if (!touched || pfl_ckpt_get_bool(r, touched_name, touched, (size_t)n)) goto done;
    uint64_t written = 0, bytes = 0;
    for (int i = 0; i < n; i++) written += touched[i];
    if (pfl_ckpt_length(r, rows_name, &bytes)) goto done;
    if (bytes != written * s->row_len * sizeof(float)) {
        pfl_err("%s: section '%s' has %llu bytes, expected %llu (a checkpoint of another configuration?)", r->path,
                rows_name, (unsigned long long)bytes, (unsigned long long)(written * s->row_len * sizeof(float)));
        goto done;
    }
    uint64_t next = 0; /* the rows before this one that the section holds */
    for (int i = 0; i < n; i++) {
        if (!touched[i]) continue;
        const int row = first + i;
        if (row >= want_first && row < want_end) {
            float *p = pfl_store_write(s, row);
            if (!p) {
                pfl_err("%s", s->error);
                goto done;
            }
            if (pfl_ckpt_get_f32_at(r, rows_name, next * s->row_len, p, s->row_len)) goto done;
            pfl_store_release(s, row);
        }
        next++;
    }
    rc = 0;
done:
    free(touched);
    return rc;
}

int pfl_store_load(pfl_store *s, pfl_ckpt_reader *r, const char *name) {
    return pfl_store_load_range(s, r, name, 0, s->rows, 0, s->rows);
}
