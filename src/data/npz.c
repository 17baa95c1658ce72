/* A PFLlib client file's outer layers (data.h, "PFLlib folders"): the zip
 * that np.savez_compressed (deflated) or np.savez (stored) writes, and the
 * .npy header of its one member, data.npy; the pickle after that header is
 * pickle.c's.
 *
 * The zip is read by its central directory (zip64 records included, as
 * numpy's zipfile may write them), never by scanning for local headers: the
 * member data.npy is found there, its local header checked against it, its
 * bytes inflated with zlib into a buffer of the size the directory
 * declares, after checking that the compressed bytes can hold that much
 * (deflate expands at most 1032 to 1), and its CRC-32 checked. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <zlib.h>

#include "data/npz.h"
#include "util/err.h"
#include "util/safe_write.h" /* pfl_read_open: regular files only */

#define MEMBER "data.npy"
enum { EOCD_SIZE = 22, ZIP64_LOCATOR_SIZE = 20, ZIP64_EOCD_SIZE = 56, CENTRAL_SIZE = 46, LOCAL_SIZE = 30 };
enum { SIG_LOCAL = 0x04034b50, SIG_CENTRAL = 0x02014b50, SIG_EOCD = 0x06054b50, SIG_ZIP64_EOCD = 0x06064b50,
       SIG_ZIP64_LOCATOR = 0x07064b50 };
enum { METHOD_STORED = 0, METHOD_DEFLATED = 8, DEFLATE_MAX_RATIO = 1032 };

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t le32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t le64(const uint8_t *p) { return le32(p) | (uint64_t)le32(p + 4) << 32; }

/* ---- the zip ---- */

typedef struct {
    const uint8_t *buf;
    size_t size;
    uint64_t cd_offset, cd_size, entries; /* the central directory */
    uint64_t cd_end;                      /* where the records after it start */
} zip_index;

typedef struct {
    uint16_t flags, method;
    uint32_t crc;
    uint64_t comp, uncomp, local;
} zip_member;

/* The end-of-central-directory record: the last 22 bytes, or earlier by
 * exactly the comment it declares. */
static int find_eocd(const npz_source *src, zip_index *z, size_t *at) {
    if (z->size < EOCD_SIZE) return pfl_npz_fail(src, "zip", "%zu bytes, too short for a zip (truncated?)", z->size);
    const size_t last = z->size - EOCD_SIZE, first = last > 65535 ? last - 65535 : 0;
    for (size_t i = last + 1; i-- > first;)
        if (le32(z->buf + i) == SIG_EOCD && le16(z->buf + i + 20) == z->size - i - EOCD_SIZE) {
            *at = i;
            return 0;
        }
    return pfl_npz_fail(src, "zip", "no end-of-central-directory record (truncated, or not a zip)");
}

/* Zip64: the locator just before the end record points at the zip64 end
 * record, which holds the 64-bit counts. */
static int read_zip64_eocd(const npz_source *src, zip_index *z, size_t eocd) {
    if (eocd < ZIP64_LOCATOR_SIZE || le32(z->buf + eocd - ZIP64_LOCATOR_SIZE) != SIG_ZIP64_LOCATOR)
        return pfl_npz_fail(src, "zip", "the end record defers to a zip64 record that is not there");
    const uint8_t *loc = z->buf + eocd - ZIP64_LOCATOR_SIZE;
    const uint64_t at = le64(loc + 8);
    if (le32(loc + 4) != 0 || le32(loc + 16) > 1) return pfl_npz_fail(src, "zip", "a multi-disk zip64 archive");
    if (at > eocd - ZIP64_LOCATOR_SIZE || eocd - ZIP64_LOCATOR_SIZE - at < ZIP64_EOCD_SIZE ||
        le32(z->buf + at) != SIG_ZIP64_EOCD)
        return pfl_npz_fail(src, "zip", "the zip64 end record's offset %llu is not one", (unsigned long long)at);
    const uint8_t *r = z->buf + at;
    if (le32(r + 16) != 0 || le32(r + 20) != 0) return pfl_npz_fail(src, "zip", "a multi-disk zip64 archive");
    z->entries = le64(r + 32), z->cd_size = le64(r + 40), z->cd_offset = le64(r + 48);
    z->cd_end = at;
    return 0;
}

static int read_index(const npz_source *src, zip_index *z) {
    size_t eocd = 0;
    if (find_eocd(src, z, &eocd)) return -1;
    const uint8_t *e = z->buf + eocd;
    if (le16(e + 4) != 0 || le16(e + 6) != 0 || le16(e + 8) != le16(e + 10))
        return pfl_npz_fail(src, "zip", "a multi-disk archive");
    z->entries = le16(e + 10), z->cd_size = le32(e + 12), z->cd_offset = le32(e + 16), z->cd_end = eocd;
    if ((z->entries == 0xffff || z->cd_size == 0xffffffffu || z->cd_offset == 0xffffffffu) &&
        read_zip64_eocd(src, z, eocd))
        return -1;
    if (z->cd_offset > z->cd_end || z->cd_size != z->cd_end - z->cd_offset)
        return pfl_npz_fail(src, "zip", "the central directory (%llu bytes at %llu) does not end where the end record "
                        "starts (%llu)", (unsigned long long)z->cd_size, (unsigned long long)z->cd_offset,
                        (unsigned long long)z->cd_end);
    return 0;
}

/* A central record's zip64 extra field: the 64-bit values of the fields
 * whose 32-bit ones say 0xffffffff, in the order uncompressed, compressed,
 * local offset. */
static int read_zip64_extra(const npz_source *src, const uint8_t *extra, size_t len, zip_member *m, uint32_t comp32,
                            uint32_t uncomp32, uint32_t local32) {
    for (size_t i = 0; i + 4 <= len;) {
        const uint16_t id = le16(extra + i), n = le16(extra + i + 2);
        if (n > len - i - 4) return pfl_npz_fail(src, "zip", MEMBER "'s extra field overruns its record");
        if (id == 0x0001) {
            const uint8_t *v = extra + i + 4;
            size_t k = 0;
            uint64_t *wanted[3] = {uncomp32 == 0xffffffffu ? &m->uncomp : NULL,
                                   comp32 == 0xffffffffu ? &m->comp : NULL, local32 == 0xffffffffu ? &m->local : NULL};
            for (int f = 0; f < 3; f++) {
                if (!wanted[f]) continue;
                if (k + 8 > n) return pfl_npz_fail(src, "zip", MEMBER "'s zip64 field is too short");
                *wanted[f] = le64(v + k), k += 8;
            }
        }
        i += 4 + (size_t)n;
    }
    return 0;
}

/* Finds data.npy in the central directory (exactly once). */
static int find_member(const npz_source *src, const zip_index *z, zip_member *m) {
    int found = 0;
    size_t at = (size_t)z->cd_offset;
    const size_t end = (size_t)z->cd_end;
    for (uint64_t k = 0; k < z->entries; k++) {
        if (end - at < CENTRAL_SIZE || le32(z->buf + at) != SIG_CENTRAL)
            return pfl_npz_fail(src, "zip", "central directory entry %llu of %llu is cut short or not one",
                            (unsigned long long)k + 1, (unsigned long long)z->entries);
        const uint8_t *c = z->buf + at;
        const size_t name = le16(c + 28), extra = le16(c + 30), comment = le16(c + 32);
        if (end - at - CENTRAL_SIZE < name + extra + comment)
            return pfl_npz_fail(src, "zip", "central directory entry %llu overruns the directory", (unsigned long long)k + 1);
        if (name == strlen(MEMBER) && !memcmp(c + CENTRAL_SIZE, MEMBER, name)) {
            if (found++) return pfl_npz_fail(src, "zip", "holds " MEMBER " twice");
            m->flags = le16(c + 8), m->method = le16(c + 10), m->crc = le32(c + 16);
            m->comp = le32(c + 20), m->uncomp = le32(c + 24), m->local = le32(c + 42);
            if (read_zip64_extra(src, c + CENTRAL_SIZE + name, extra, m, le32(c + 20), le32(c + 24), le32(c + 42)))
                return -1;
        }
        at += CENTRAL_SIZE + name + extra + comment;
    }
    if (at != end) return pfl_npz_fail(src, "zip", "the central directory holds more than its %llu entries",
                                   (unsigned long long)z->entries);
    if (!found) return pfl_npz_fail(src, "zip", "no " MEMBER " (PFLlib's files hold their dict there)");
    return 0;
}

/* The member's bytes in the file: after its local header, before the
 * central directory. */
static int locate_data(const npz_source *src, const zip_index *z, const zip_member *m, const uint8_t **data) {
    if (m->local > z->cd_offset || z->cd_offset - m->local < LOCAL_SIZE || le32(z->buf + m->local) != SIG_LOCAL)
        return pfl_npz_fail(src, "zip", MEMBER "'s local header at %llu is not one", (unsigned long long)m->local);
    const uint8_t *h = z->buf + m->local;
    const uint64_t name = le16(h + 26), extra = le16(h + 28), start = m->local + LOCAL_SIZE + name + extra;
    if (name != strlen(MEMBER) || memcmp(h + LOCAL_SIZE, MEMBER, (size_t)name))
        return pfl_npz_fail(src, "zip", "the local header of " MEMBER " names another file");
    if (start > z->cd_offset || m->comp > z->cd_offset - start)
        return pfl_npz_fail(src, "zip", MEMBER " declares %llu compressed bytes, more than the file holds before its "
                        "directory (truncated?)", (unsigned long long)m->comp);
    *data = z->buf + start;
    return 0;
}

/* Inflates (or copies) the member into a buffer of its declared size. */
static int decode_member(const npz_source *src, const zip_member *m, const uint8_t *data, uint8_t **out) {
    *out = NULL;
    if (m->flags & 1) return pfl_npz_fail(src, "zip", MEMBER " is encrypted");
    if (m->method != METHOD_STORED && m->method != METHOD_DEFLATED)
        return pfl_npz_fail(src, "zip", MEMBER "'s compression method %u is neither stored (0) nor deflated (8)", m->method);
    if (m->method == METHOD_STORED ? m->uncomp != m->comp : m->uncomp / DEFLATE_MAX_RATIO > m->comp)
        return pfl_npz_fail(src, "zip", MEMBER " declares %llu bytes, more than its %llu %s bytes can hold",
                        (unsigned long long)m->uncomp, (unsigned long long)m->comp,
                        m->method == METHOD_STORED ? "stored" : "compressed");
    if (m->uncomp > (uint64_t)SIZE_MAX / 2)
        return pfl_npz_fail(src, "zip", MEMBER " is too large (%llu bytes)", (unsigned long long)m->uncomp);
    uint8_t *buf = pfl_malloc((size_t)m->uncomp);
    if (!buf) return -1;
    if (m->method == METHOD_STORED) {
        memcpy(buf, data, (size_t)m->uncomp);
    } else {
        z_stream s = {0};
        if (inflateInit2(&s, -MAX_WBITS) != Z_OK) {
            free(buf);
            return pfl_npz_fail(src, "zip", "zlib cannot start inflating");
        }
        int rc = Z_OK;
        uint64_t in_done = 0, out_done = 0;
        while (rc == Z_OK) { /* zlib counts in uInt: feed at most 1 GiB at a time */
            const uint64_t in_left = m->comp - in_done, out_left = m->uncomp - out_done;
            s.next_in = (Bytef *)(data + in_done), s.avail_in = (uInt)(in_left < (1u << 30) ? in_left : 1u << 30);
            s.next_out = buf + out_done, s.avail_out = (uInt)(out_left < (1u << 30) ? out_left : 1u << 30);
            const uInt in0 = s.avail_in, out0 = s.avail_out;
            rc = inflate(&s, Z_NO_FLUSH);
            in_done += in0 - s.avail_in, out_done += out0 - s.avail_out;
            if (rc == Z_OK && in0 == s.avail_in && out0 == s.avail_out) rc = Z_BUF_ERROR; /* no progress */
        }
        inflateEnd(&s);
        if (rc != Z_STREAM_END || out_done != m->uncomp || in_done != m->comp) {
            free(buf);
            if (rc == Z_STREAM_END)
                return pfl_npz_fail(src, "zip", MEMBER " inflates to %llu bytes from %llu, not the %llu from %llu its "
                                "directory declares", (unsigned long long)out_done, (unsigned long long)in_done,
                                (unsigned long long)m->uncomp, (unsigned long long)m->comp);
            return pfl_npz_fail(src, "zip", MEMBER "'s deflate stream is %s after %llu of %llu bytes",
                            rc == Z_DATA_ERROR ? "corrupt" : "cut short or longer than declared",
                            (unsigned long long)out_done, (unsigned long long)m->uncomp);
        }
    }
    uLong crc = crc32(0L, Z_NULL, 0);
    for (uint64_t at = 0; at < m->uncomp; at += 1u << 30) {
        const uint64_t n = m->uncomp - at < (1u << 30) ? m->uncomp - at : 1u << 30;
        crc = crc32(crc, buf + at, (uInt)n);
    }
    if ((uint32_t)crc != m->crc) {
        free(buf);
        return pfl_npz_fail(src, "zip", MEMBER "'s CRC-32 is %08lx, its directory says %08x", (unsigned long)crc, m->crc);
    }
    *out = buf;
    return 0;
}

/* ---- the .npy header ---- */

/* The header's Python dict literal, "{'descr': '|O', 'fortran_order':
 * False, 'shape': (), }": the one form PFLlib's files take. */
typedef struct {
    const char *p, *end;
} cursor;

static void skip_spaces(cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n')) c->p++;
}

static int take(cursor *c, char ch) {
    skip_spaces(c);
    if (c->p < c->end && *c->p == ch) return c->p++, 1;
    return 0;
}

/* A quoted string's text, [*s, *s + *n). */
static int take_string(cursor *c, const char **s, size_t *n) {
    skip_spaces(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return 0;
    const char q = *c->p++;
    *s = c->p;
    while (c->p < c->end && *c->p != q) c->p++;
    if (c->p >= c->end) return 0;
    *n = (size_t)(c->p++ - *s);
    return 1;
}

static int take_word(cursor *c, const char *w) {
    skip_spaces(c);
    const size_t n = strlen(w);
    if ((size_t)(c->end - c->p) >= n && !memcmp(c->p, w, n)) return c->p += n, 1;
    return 0;
}

static int parse_header(const npz_source *src, const char *text, size_t len) {
    char shown[64];
    cursor c = {text, text + len};
    int descr = 0, fortran = 0, shape = 0;
    if (!take(&c, '{')) goto malformed;
    while (!take(&c, '}')) {
        const char *key;
        size_t n;
        if (!take_string(&c, &key, &n) || !take(&c, ':')) goto malformed;
        if (n == 5 && !memcmp(key, "descr", 5)) {
            const char *v;
            size_t vn;
            if (!take_string(&c, &v, &vn)) goto malformed;
            if (vn != 2 || memcmp(v, "|O", 2))
                return pfl_npz_fail(src, MEMBER, "descr '%s': expected '|O' (a pickled object, as PFLlib's files hold)",
                                pfl_quote(shown, sizeof shown, v, vn, 16));
            descr++;
        } else if (n == 13 && !memcmp(key, "fortran_order", 13)) {
            if (take_word(&c, "True")) return pfl_npz_fail(src, MEMBER, "fortran_order True: expected False");
            if (!take_word(&c, "False")) goto malformed;
            fortran++;
        } else if (n == 5 && !memcmp(key, "shape", 5)) {
            if (!take(&c, '(')) goto malformed;
            if (!take(&c, ')')) return pfl_npz_fail(src, MEMBER, "shape is not (): expected one pickled object");
            shape++;
        } else {
            return pfl_npz_fail(src, MEMBER, "unexpected header key '%s'", pfl_quote(shown, sizeof shown, key, n, 16));
        }
        if (!take(&c, ',') && !(skip_spaces(&c), c.p < c.end && *c.p == '}')) goto malformed;
    }
    skip_spaces(&c);
    if (c.p != c.end || descr != 1 || fortran != 1 || shape != 1) goto malformed;
    return 0;
malformed:
    return pfl_npz_fail(src, MEMBER, "malformed header '%s'", pfl_quote(shown, sizeof shown, text, len, 12));
}

/* The payload after data.npy's magic, version and header. */
static int npy_payload(const npz_source *src, const uint8_t *npy, size_t size, size_t *start) {
    static const uint8_t magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
    if (size < 10 || memcmp(npy, magic, 6)) return pfl_npz_fail(src, MEMBER, "not a .npy file (no \\x93NUMPY magic)");
    const int major = npy[6];
    if (major < 1 || major > 3 || npy[7] != 0)
        return pfl_npz_fail(src, MEMBER, "format version %d.%d, expected 1.0, 2.0 or 3.0", npy[6], npy[7]);
    const size_t at = major == 1 ? 10 : 12;
    if (size < at) return pfl_npz_fail(src, MEMBER, "cut short in its header");
    const uint64_t len = major == 1 ? le16(npy + 8) : le32(npy + 8);
    if (len > size - at)
        return pfl_npz_fail(src, MEMBER, "header of %llu bytes, more than the %zu there", (unsigned long long)len, size - at);
    if (parse_header(src, (const char *)npy + at, (size_t)len)) return -1;
    *start = at + (size_t)len;
    return 0;
}

/* ---- public ---- */

/* The end record lies in a zip's last 22 + 65,535 bytes (find_eocd): looked
 * for there before the whole file is read, so a file that is no zip (a
 * sparse 3 GB one cost 3 GB and 16 s) is refused at the cost of its tail. */
static int check_tail(const npz_source *src, FILE *f, off_t size) {
    enum { TAIL = EOCD_SIZE + 65535 };
    if (size <= TAIL) return 0; /* read whole anyway */
    uint8_t *tail = pfl_malloc(TAIL);
    if (!tail) return -1;
    int rc = -1;
    if (fseeko(f, size - TAIL, SEEK_SET) == 0 && fread(tail, 1, TAIL, f) == TAIL) {
        zip_index z = {.buf = tail, .size = TAIL};
        size_t eocd;
        rc = find_eocd(src, &z, &eocd);
    } else {
        pfl_npz_fail(src, "file", "read error: %s", strerror(errno));
    }
    free(tail);
    if (rc == 0 && fseeko(f, 0, SEEK_SET) != 0) rc = pfl_npz_fail(src, "file", "cannot seek: %s", strerror(errno));
    return rc;
}

static int read_whole(const npz_source *src, uint8_t **buf, size_t *size) {
    *buf = NULL;
    const int fd = pfl_read_fd(src->path); /* a FIFO or a device there is refused, not waited on */
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        if (fd >= 0) close(fd);
        const char *why = fd >= 0 ? strerror(errno) : pfl_errmsg(); /* "PATH: cannot read: ...": the path once */
        const size_t n = strlen(src->path);
        if (fd < 0 && !strncmp(why, src->path, n) && !strncmp(why + n, ": ", 2)) why += n + 2;
        char copy[512];
        snprintf(copy, sizeof copy, "%s", why);
        return pfl_npz_fail(src, "file", "%s", copy);
    }
    struct stat st;
    int rc = -1;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 0) {
        pfl_npz_fail(src, "file", "not a regular file");
    } else if (check_tail(src, f, st.st_size) == 0) {
        if (!(*buf = pfl_malloc((size_t)st.st_size))) { /* the file named, not only the bytes */
            pfl_npz_fail(src, "file", "out of memory reading its %lld bytes", (long long)st.st_size);
        } else {
            *size = (size_t)st.st_size;
            if (fread(*buf, 1, *size, f) == *size) rc = 0;
            else pfl_npz_fail(src, "file", "read error: %s", strerror(errno));
        }
    }
    fclose(f);
    if (rc) free(*buf), *buf = NULL;
    return rc;
}

int pfl_npz_read_xy(const char *path, const char *what, pfl_npz_xy *out) {
    memset(out, 0, sizeof *out);
    const npz_source src = {what, path};
    uint8_t *file = NULL, *npy = NULL;
    size_t size = 0, start = 0;
    zip_index z = {0};
    zip_member m = {0};
    const uint8_t *data = NULL;
    if (read_whole(&src, &file, &size)) return -1;
    z.buf = file, z.size = size;
    int rc = read_index(&src, &z) || find_member(&src, &z, &m) || locate_data(&src, &z, &m, &data) ||
                     decode_member(&src, &m, data, &npy)
                 ? -1
                 : 0;
    free(file);
    if (rc == 0 && (npy_payload(&src, npy, (size_t)m.uncomp, &start) ||
                    pfl_npz_unpickle_xy(&src, npy + start, (size_t)m.uncomp - start, out)))
        rc = -1;
    if (rc) {
        free(npy);
        pfl_npz_xy_free(out);
        return -1;
    }
    out->owned = npy;
    return 0;
}

void pfl_npz_xy_free(pfl_npz_xy *xy) {
    if (!xy) return;
    free(xy->tokens);
    free(xy->lengths);
    free(xy->owned);
    memset(xy, 0, sizeof *xy);
}
