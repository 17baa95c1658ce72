/* IDX reader (the MNIST / Fashion-MNIST file format).
 *
 * An IDX file is a big-endian header (magic, then one 32-bit size per
 * dimension) followed by exactly the payload bytes. Files may be gzip'd;
 * zlib's gzread decompresses when it sees the gzip magic 0x1f 0x8b and passes
 * raw files through unchanged, so one code path reads both. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "data/data.h"
#include "util/err.h"
#include "util/safe_write.h" /* pfl_read_open: regular files only */

enum { IDX_IMAGES = 2051, IDX_LABELS = 2049, IDX_MAX_SIDE = 1024 };

/* Far beyond any real IDX data set (MNIST has 60000); rejects garbage
 * headers before they turn into huge allocations. */
#define IDX_MAX_COUNT 100000000L

/* Messages name the file, not the whole path, as in "mnist: t10k-labels-idx1-ubyte: ...". */
static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

typedef struct {
    const char *what; /* message prefix ("mnist"), may be empty */
    const char *sep;  /* ": " after a non-empty prefix */
    const char *file; /* base name of the file */
    const char *path; /* the whole path, which zlib puts before its messages */
} idx_ctx;

/* zlib's reason alone: gzerror says "PATH: reason", and the message names
 * the file already. */
static const char *zlib_reason(const idx_ctx *c, const char *msg) {
    const size_t len = strlen(c->path);
    return strncmp(msg, c->path, len) == 0 && msg[len] == ':' && msg[len + 1] == ' ' ? msg + len + 2 : msg;
}

static uint32_t be32(const unsigned char *b) {
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | (uint32_t)b[3];
}

/* Reads up to `want` bytes; *got says how many came. A short count means the
 * file ended (a truncated gzip stream also just ends: zlib reports it only at
 * close). Returns -1 only for a read or decompression error. */
static int gz_read_all(gzFile f, const idx_ctx *c, unsigned char *buf, size_t want, size_t *got) {
    *got = 0;
    while (*got < want) {
        size_t chunk = want - *got;
        if (chunk > (1u << 30)) chunk = 1u << 30; /* gzread takes an unsigned length */
        int r = gzread(f, buf + *got, (unsigned)chunk);
        if (r < 0) {
            int errnum = 0;
            const char *msg = gzerror(f, &errnum);
            return pfl_err("%s%s%s: read error: %s", c->what, c->sep, c->file,
                           errnum == Z_ERRNO ? strerror(errno) : zlib_reason(c, msg));
        }
        if (r == 0) break;
        *got += (size_t)r;
    }
    return 0;
}

/* Reads and checks the magic and the dimension sizes. dims[0] is the item
 * count; for images dims[1], dims[2] are rows and cols. */
static int read_header(gzFile f, const idx_ctx *c, int expect_magic, long dims[3]) {
    unsigned char b[16];
    int ndims = expect_magic == IDX_IMAGES ? 3 : 1;
    size_t want = 4 + 4 * (size_t)ndims, got;
    if (gz_read_all(f, c, b, 4, &got) < 0) return -1;
    if (got < 4)
        return pfl_err("%s%s%s: truncated header: expected %zu bytes, got %zu", c->what, c->sep, c->file, want, got);
    uint32_t magic = be32(b);
    if (magic != (uint32_t)expect_magic)
        return pfl_err("%s%s%s: expected magic %d, got %lu", c->what, c->sep, c->file, expect_magic,
                       (unsigned long)magic);
    size_t more;
    if (gz_read_all(f, c, b + 4, want - 4, &more) < 0) return -1;
    if (more < want - 4)
        return pfl_err("%s%s%s: truncated header: expected %zu bytes, got %zu", c->what, c->sep, c->file, want,
                       4 + more);
    for (int i = 0; i < ndims; i++) dims[i] = (long)be32(b + 4 + 4 * i);
    if (dims[0] < 1 || dims[0] > IDX_MAX_COUNT)
        return pfl_err("%s%s%s: implausible item count %ld (expected 1..%ld)", c->what, c->sep, c->file, dims[0],
                       IDX_MAX_COUNT);
    for (int i = 1; i < ndims; i++)
        if (dims[i] < 1 || dims[i] > IDX_MAX_SIDE)
            return pfl_err("%s%s%s: implausible image size %ldx%ld (each side must be 1..%d)", c->what, c->sep,
                           c->file, dims[1], dims[2], IDX_MAX_SIDE);
    return 0;
}

static int truncated(const idx_ctx *c, const char *kind, size_t bytes, unsigned long long got) {
    return pfl_err("%s%s%s: truncated: expected %zu bytes of %s, got %llu", c->what, c->sep, c->file, bytes, kind, got);
}

static int trailing(const idx_ctx *c, const char *kind, size_t bytes) {
    return pfl_err("%s%s%s: trailing data after the %zu bytes of %s the header announces", c->what, c->sep, c->file,
                   bytes, kind);
}

/* A raw file's size is known before anything is allocated: its header must
 * announce exactly the bytes that follow it (a 16-byte file announcing
 * 2 GiB is refused here, not after allocating 2 GiB). */
static int check_raw_size(const char *path, const idx_ctx *c, const char *kind, size_t header, size_t bytes) {
    struct stat st;
    if (stat(path, &st) != 0) return pfl_err("%s%s%s: cannot stat: %s", c->what, c->sep, c->file, strerror(errno));
    const unsigned long long have = (unsigned long long)st.st_size - header;
    if (have < bytes) return truncated(c, kind, bytes, have);
    if (have > bytes) return trailing(c, kind, bytes);
    return 0;
}

/* Reads exactly `bytes` payload bytes into a buffer that grows with what
 * really arrives (a gzip stream's length is not known before it is read,
 * so a header's claim alone never decides an allocation), and checks that
 * nothing follows. */
static int read_payload(gzFile f, const idx_ctx *c, const char *kind, size_t bytes, unsigned char **out) {
    size_t cap = bytes < (1u << 20) ? bytes : 1u << 20, have = 0, got;
    unsigned char *data = pfl_malloc(cap);
    if (!data) return -1;
    for (;;) {
        if (gz_read_all(f, c, data + have, cap - have, &got) < 0) goto fail;
        have += got;
        if (have < cap || cap == bytes) break; /* the stream ended, or everything is in */
        size_t grown = cap < bytes / 2 ? 2 * cap : bytes;
        unsigned char *more = realloc(data, grown);
        if (!more) {
            pfl_err("out of memory reading %zu bytes of %s", bytes, kind);
            goto fail;
        }
        data = more, cap = grown;
    }
    if (have < bytes) {
        truncated(c, kind, bytes, have);
        goto fail;
    }
    *out = data;
    unsigned char extra;
    if (gz_read_all(f, c, &extra, 1, &got) < 0) goto fail;
    if (got) {
        trailing(c, kind, bytes);
        goto fail;
    }
    return 0;
fail:
    free(data);
    *out = NULL;
    return -1;
}

/* A stream that ended early only shows as an error at close. */
static int close_checked(gzFile f, const idx_ctx *c) {
    int rc = gzclose(f);
    if (rc == Z_OK) return 0;
    if (rc == Z_BUF_ERROR) return pfl_err("%s%s%s: truncated gzip stream", c->what, c->sep, c->file);
    return pfl_err("%s%s%s: error closing the file (zlib code %d)", c->what, c->sep, c->file, rc);
}

int pfl_idx_read(const char *path, const char *what, int expect_magic, uint8_t **data, int *count, int *rows,
                 int *cols) {
    idx_ctx c = {what ? what : "", what && *what ? ": " : "", base_name(path), path};
    *data = NULL;
    if (expect_magic != IDX_IMAGES && expect_magic != IDX_LABELS)
        return pfl_err("%s%s%s: unsupported IDX magic %d requested", c.what, c.sep, c.file, expect_magic);
    errno = 0;
    const int fd = pfl_read_fd(path); /* a FIFO or a device there is refused, not waited on */
    if (fd < 0) return pfl_err_prefix(c.what[0] ? c.what : "idx");
    gzFile f = gzdopen(fd, "rb");
    if (!f) {
        close(fd);
        return pfl_err("%s%s%s: cannot open: out of memory", c.what, c.sep, path);
    }
    gzbuffer(f, 1 << 17); /* fewer system calls on 47 MB files */

    long dims[3] = {0, 1, 1};
    unsigned char *buf = NULL;
    if (read_header(f, &c, expect_magic, dims) < 0) goto fail;
    size_t bytes = (size_t)dims[0] * (size_t)dims[1] * (size_t)dims[2];
    if (bytes > (size_t)INT_MAX) {
        pfl_err("%s%s%s: implausible size: %ld items of %ldx%ld is over 2 GiB", c.what, c.sep, c.file, dims[0],
                dims[1], dims[2]);
        goto fail;
    }
    const char *kind = expect_magic == IDX_IMAGES ? "pixels" : "labels";
    const size_t header = expect_magic == IDX_IMAGES ? 16 : 8;
    if (gzdirect(f) && check_raw_size(path, &c, kind, header, bytes) < 0) goto fail;
    if (read_payload(f, &c, kind, bytes, &buf) < 0) goto fail;
    if (close_checked(f, &c) < 0) {
        free(buf);
        return -1;
    }
    *data = buf;
    *count = (int)dims[0];
    if (rows) *rows = (int)dims[1];
    if (cols) *cols = (int)dims[2];
    return 0;

fail:
    free(buf);
    gzclose(f);
    return -1;
}
