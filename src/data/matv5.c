/* MAT v5 structure check (matv5.h). Layout, from MathWorks' "MAT-File
 * Format" (level 5):
 *   header: 116 bytes of text, 8 of subsystem offset, a 16-bit version
 *           (0x0100) and the endian indicator "MI" written as a 16-bit value
 *           (bytes 'I','M' from a little-endian writer, 'M','I' big-endian)
 *   then data elements: an 8-byte tag (u32 type, u32 byte count) and the
 *   bytes, padded to 8; or, for at most 4 bytes, the "small" form: one u32
 *   holding the byte count in its upper and the type in its lower 16 bits,
 *   then the 4 data bytes.
 *   miMATRIX (14) holds sub-elements: array flags (miUINT32, 8 bytes: class
 *   in the low byte of the first word, 0x0800 complex, 0x0200 logical),
 *   dimensions (miINT32, one per axis, at least 2), name (miINT8), the real
 *   part (a numeric element), and the imaginary part when complex.
 *   miCOMPRESSED (15) holds a zlib stream that inflates to one miMATRIX
 *   element; it is not padded.
 * MAT v7.3 files carry version 0x0200 in the same header and are HDF5
 * files behind it. */
#include "data/matv5.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "util/err.h"
#include "util/safe_write.h" /* pfl_read_open: regular files only */

enum {
    MI_INT8 = 1, MI_UINT8 = 2, MI_INT16 = 3, MI_UINT16 = 4, MI_INT32 = 5, MI_UINT32 = 6, MI_SINGLE = 7,
    MI_DOUBLE = 9, MI_INT64 = 12, MI_UINT64 = 13, MI_MATRIX = 14, MI_COMPRESSED = 15
};
enum { MX_DOUBLE = 6, MX_UINT64 = 15, FLAG_COMPLEX = 0x0800, FLAG_LOGICAL = 0x0200 };
enum { HEADER = 128, HEAD_KEEP = 1024 }; /* a matrix's sub-element headers fit in HEAD_KEEP bytes */
/* deflate's best ratio is 1032:1 (RFC 1951 blocks of 258-byte matches), so
 * a stream announcing more than this per compressed byte is refused unread */
#define MAX_INFLATE_RATIO 1032

typedef struct {
    FILE *f;
    const char *prefix;
    long long size;
    int big;              /* big-endian file */
} mat_file;

static uint32_t rd32(const mat_file *m, const uint8_t *p) {
    return m->big ? (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]
                  : (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

static uint64_t pad8(uint64_t n) { return (n + 7) / 8 * 8; }

const char *pfl_matv5_class_name(int c) {
    static const char *const names[] = {"",      "cell",  "struct", "object", "char",   "sparse",
                                        "double", "single", "int8",  "uint8",  "int16",  "uint16",
                                        "int32",  "uint32", "int64", "uint64", "function", "opaque"};
    return c >= 1 && c < (int)(sizeof names / sizeof *names) ? names[c] : "an unknown class";
}

/* Bytes per element of a numeric data type; 0 for any other type. */
static int type_size(uint32_t type) {
    switch (type) {
    case MI_INT8: case MI_UINT8: return 1;
    case MI_INT16: case MI_UINT16: return 2;
    case MI_INT32: case MI_UINT32: case MI_SINGLE: return 4;
    case MI_DOUBLE: case MI_INT64: case MI_UINT64: return 8;
    default: return 0;
    }
}

/* ---- the header ---- */

static int check_header(mat_file *m) {
    uint8_t h[HEADER];
    if (m->size < HEADER || fread(h, 1, HEADER, m->f) != HEADER)
        return pfl_err("%s: not a MAT-file (%lld bytes, shorter than a MAT-file's 128-byte header)", m->prefix, m->size);
    const int little = h[126] == 'I' && h[127] == 'M', big = h[126] == 'M' && h[127] == 'I';
    if (!little && !big)
        return pfl_err("%s: not a MAT v5 file (no level-5 header: a MAT v4 file, or not a MAT-file)", m->prefix);
    m->big = big;
    const unsigned version = big ? (unsigned)h[124] << 8 | h[125] : (unsigned)h[125] << 8 | h[124];
    if (version == 0x0200)
        return pfl_err("%s: MAT-file version 7.3 (HDF5); pfl reads only MAT v5/v7 files, as SVHN's are "
                       "(MATLAB: save(file, '-v7'))", m->prefix);
    if (version != 0x0100)
        return pfl_err("%s: MAT-file of unknown version 0x%04x; pfl reads only MAT v5/v7 files (version 0x0100)",
                       m->prefix, version);
    return 0;
}

/* ---- one matrix ---- */

/* A data element's tag at buf[at..): type, byte count, where its data
 * starts and where the next element starts. -1 when the tag is not inside
 * avail bytes. */
typedef struct {
    uint32_t type, bytes;
    uint64_t data, next;
} tag;

static int read_tag(const mat_file *m, const uint8_t *buf, uint64_t avail, uint64_t at, tag *t) {
    if (at + 8 > avail) return -1;
    const uint32_t w = rd32(m, buf + at);
    if (w >> 16) { /* small form */
        t->type = w & 0xffff, t->bytes = w >> 16, t->data = at + 4, t->next = at + 8;
        return t->bytes <= 4 ? 0 : -1;
    }
    t->type = w, t->bytes = rd32(m, buf + at + 4), t->data = at + 8, t->next = at + 8 + pad8(t->bytes);
    return 0;
}

static int valid_name(const uint8_t *s, uint32_t len) {
    if (len < 1 || len > 63 || !((s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z'))) return 0;
    for (uint32_t i = 0; i < len; i++)
        if (!((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
              s[i] == '_'))
            return 0;
    return 1;
}

/* Checks a miMATRIX's content: buf holds its first `avail` bytes (all of
 * its sub-element headers), `bytes` is its whole length. Fills v. */
static int check_matrix(const mat_file *m, const uint8_t *buf, uint64_t avail, uint64_t bytes, pfl_matv5_var *v) {
    const long long at = v->offset;
    tag flags, dims, name, real;
    if (read_tag(m, buf, avail, 0, &flags) || flags.type != MI_UINT32 || flags.bytes != 8 || flags.next > avail)
        return pfl_err("%s: the variable at byte %lld has no array flags", m->prefix, at);
    const uint32_t word = rd32(m, buf + flags.data);
    v->class_id = (int)(word & 0xff);
    v->logical = (word & FLAG_LOGICAL) != 0;
    if (read_tag(m, buf, avail, flags.next, &dims) || dims.type != MI_INT32 || dims.bytes % 4 || dims.bytes < 8 ||
        dims.bytes > 4 * PFL_MATV5_MAX_RANK || dims.next > avail)
        return pfl_err("%s: the variable at byte %lld has malformed dimensions", m->prefix, at);
    v->rank = (int)(dims.bytes / 4);
    if (read_tag(m, buf, avail, dims.next, &name) || name.type != MI_INT8 || name.next > avail ||
        !valid_name(buf + name.data, name.bytes))
        return pfl_err("%s: the variable at byte %lld has no valid name", m->prefix, at);
    memcpy(v->name, buf + name.data, name.bytes);
    v->name[name.bytes] = '\0';
    if (v->class_id < MX_DOUBLE || v->class_id > MX_UINT64)
        return pfl_err("%s: variable %s is %s; pfl reads only numeric arrays here", m->prefix, v->name,
                       pfl_matv5_class_name(v->class_id));
    if (word & FLAG_COMPLEX) return pfl_err("%s: variable %s is complex; pfl reads only real arrays", m->prefix, v->name);
    v->numel = 1;
    for (int k = 0; k < v->rank; k++) {
        const uint32_t d = rd32(m, buf + dims.data + 4 * (uint64_t)k);
        if (d > INT32_MAX) return pfl_err("%s: variable %s has a negative dimension", m->prefix, v->name);
        v->dims[k] = d;
        v->numel = d && v->numel > bytes / d ? bytes + 1 : v->numel * d; /* saturates above bytes */
    }
    if (read_tag(m, buf, avail, name.next, &real) || !type_size(real.type))
        return pfl_err("%s: variable %s has no numeric data element", m->prefix, v->name);
    const uint64_t stored = real.bytes / (uint64_t)type_size(real.type);
    if (v->numel > bytes)
        return pfl_err("%s: variable %s announces more elements than its %llu bytes can hold", m->prefix, v->name,
                       (unsigned long long)bytes);
    if (real.bytes % (uint32_t)type_size(real.type) || stored != v->numel)
        return pfl_err("%s: variable %s announces %llu elements but stores %llu bytes of %d-byte elements", m->prefix,
                       v->name, (unsigned long long)v->numel, (unsigned long long)real.bytes, type_size(real.type));
    if (real.data + real.bytes > bytes || real.next < bytes) /* the data, then at most its padding */
        return pfl_err("%s: variable %s: its data element does not end where the variable does", m->prefix, v->name);
    return 0;
}

/* ---- elements ---- */

static int read_at(mat_file *m, long long at, void *buf, size_t n) {
    if (fseeko(m->f, (off_t)at, SEEK_SET) != 0 || fread(buf, 1, n, m->f) != n)
        return pfl_err("%s: read error at byte %lld: %s", m->prefix, at, ferror(m->f) ? strerror(errno) : "end of file");
    return 0;
}

static int check_plain(mat_file *m, long long at, uint32_t bytes, pfl_matv5_var *v) {
    uint8_t head[HEAD_KEEP];
    const size_t avail = bytes < HEAD_KEEP ? bytes : HEAD_KEEP;
    if (read_at(m, at + 8, head, avail)) return -1;
    return check_matrix(m, head, avail, bytes, v);
}

typedef struct {
    uint8_t head[HEAD_KEEP + 8]; /* the first bytes inflated: the miMATRIX tag and its sub-element headers */
    uint64_t out;                /* bytes inflated so far */
    uint64_t announced;          /* 8 + the inner miMATRIX's byte count, once its tag is in */
} inflated;

/* Keeps what belongs in head, reads the inner tag as soon as it is there,
 * and refuses output beyond what that tag announces. */
static int take_output(mat_file *m, inflated *s, const uint8_t *chunk, size_t n, long long at, uint32_t bytes) {
    if (s->out < sizeof s->head) {
        const size_t keep = n < sizeof s->head - s->out ? n : (size_t)(sizeof s->head - s->out);
        memcpy(s->head + s->out, chunk, keep);
    }
    const uint64_t before = s->out;
    s->out += n;
    if (before < 8 && s->out >= 8) {
        if (rd32(m, s->head) != MI_MATRIX)
            return pfl_err("%s: the compressed element at byte %lld does not hold a variable", m->prefix, at);
        s->announced = 8 + (uint64_t)rd32(m, s->head + 4);
        if (s->announced > (uint64_t)bytes * MAX_INFLATE_RATIO + 64)
            return pfl_err("%s: the compressed variable at byte %lld announces %llu bytes from %u compressed ones, "
                           "more than deflate can hold", m->prefix, at, (unsigned long long)s->announced, bytes);
    }
    if (s->out >= 8 && s->out > s->announced)
        return pfl_err("%s: the compressed variable at byte %lld inflates to more than the %llu bytes it announces",
                       m->prefix, at, (unsigned long long)s->announced);
    return 0;
}

/* Inflates the whole stream of a miCOMPRESSED element (bytes long, data at
 * at + 8), in chunks, to its end: zlib then checks the Adler-32. */
static int check_compressed(mat_file *m, long long at, uint32_t bytes, pfl_matv5_var *v) {
    enum { CHUNK = 1 << 16 };
    uint8_t *in = pfl_malloc(CHUNK), *out = pfl_malloc(CHUNK);
    inflated *s = pfl_calloc(1, sizeof *s);
    z_stream z;
    memset(&z, 0, sizeof z);
    int rc = in && out && s ? 0 : -1, zrc = Z_OK;
    if (rc == 0 && inflateInit(&z) != Z_OK) rc = pfl_err("%s: out of memory inflating", m->prefix);
    const int ready = rc == 0;
    uint64_t left = bytes;
    if (rc == 0 && fseeko(m->f, (off_t)(at + 8), SEEK_SET) != 0) rc = pfl_err("%s: cannot seek to byte %lld", m->prefix, at);
    while (rc == 0 && zrc != Z_STREAM_END) {
        if (z.avail_in == 0) {
            if (left == 0) {
                rc = pfl_err("%s: the compressed variable at byte %lld is cut short (its zlib stream does not end)",
                             m->prefix, at);
                break;
            }
            const size_t n = left < CHUNK ? (size_t)left : CHUNK;
            if (fread(in, 1, n, m->f) != n) {
                rc = pfl_err("%s: read error in the compressed variable at byte %lld", m->prefix, at);
                break;
            }
            z.next_in = in, z.avail_in = (uInt)n, left -= n;
        }
        z.next_out = out, z.avail_out = CHUNK;
        zrc = inflate(&z, Z_NO_FLUSH);
        if (zrc != Z_OK && zrc != Z_STREAM_END && zrc != Z_BUF_ERROR) {
            rc = pfl_err("%s: the compressed variable at byte %lld is corrupt (zlib: %s)", m->prefix, at,
                         zrc == Z_MEM_ERROR ? "out of memory" : z.msg ? z.msg : "invalid data");
            break;
        }
        rc = take_output(m, s, out, CHUNK - z.avail_out, at, bytes);
    }
    if (rc == 0 && (left || z.avail_in))
        rc = pfl_err("%s: the compressed variable at byte %lld has %llu bytes after the end of its zlib stream",
                     m->prefix, at, (unsigned long long)(left + z.avail_in));
    if (rc == 0 && s->out < 8)
        rc = pfl_err("%s: the compressed variable at byte %lld inflates to %llu bytes, too few for a variable",
                     m->prefix, at, (unsigned long long)s->out);
    if (rc == 0 && s->out != s->announced)
        rc = pfl_err("%s: the compressed variable at byte %lld inflates to %llu bytes, not the %llu it announces",
                     m->prefix, at, (unsigned long long)s->out, (unsigned long long)s->announced);
    if (rc == 0) {
        const uint64_t avail = s->out - 8 < HEAD_KEEP ? s->out - 8 : HEAD_KEEP;
        rc = check_matrix(m, s->head + 8, avail, s->out - 8, v);
    }
    if (ready) inflateEnd(&z);
    free(in), free(out), free(s);
    return rc;
}

static int check_elements(mat_file *m, pfl_matv5_var *vars, int *count) {
    long long at = HEADER;
    while (at < m->size) {
        uint8_t raw[8];
        if (m->size - at < 8)
            return pfl_err("%s: %lld stray bytes after the last variable", m->prefix, m->size - at);
        if (read_at(m, at, raw, 8)) return -1;
        const uint32_t type = rd32(m, raw), bytes = rd32(m, raw + 4);
        if (type != MI_MATRIX && type != MI_COMPRESSED)
            return pfl_err("%s: the element at byte %lld (type %u) is not a variable", m->prefix, at, type);
        const long long end = at + 8 + (long long)bytes;
        if (end > m->size)
            return pfl_err("%s: truncated: a variable at byte %lld needs %lld bytes, the file has %lld", m->prefix, at,
                           end, m->size);
        if (*count == PFL_MATV5_MAX_VARS)
            return pfl_err("%s: more than %d variables", m->prefix, PFL_MATV5_MAX_VARS);
        pfl_matv5_var *v = &vars[*count];
        memset(v, 0, sizeof *v);
        v->offset = at;
        if ((type == MI_MATRIX ? check_plain(m, at, bytes, v) : check_compressed(m, at, bytes, v)) < 0) return -1;
        for (int i = 0; i < *count; i++)
            if (strcmp(vars[i].name, v->name) == 0)
                return pfl_err("%s: variable %s appears twice (bytes %lld and %lld)", m->prefix, v->name,
                               vars[i].offset, at);
        ++*count;
        /* miMATRIX is padded to 8 bytes (the last one may end unpadded) */
        at = type == MI_MATRIX ? (long long)pad8((uint64_t)end) : end;
    }
    return 0;
}

int pfl_matv5_scan(const char *path, const char *prefix, pfl_matv5_var *vars, int *count) {
    *count = 0;
    errno = 0;
    mat_file m = {pfl_read_open(path), prefix, 0, 0}; /* a FIFO or a device there is refused, not waited on */
    if (!m.f) return pfl_err_prefix(prefix);
    struct stat st;
    int rc = fstat(fileno(m.f), &st) == 0 ? 0 : pfl_err("%s: cannot stat: %s", prefix, strerror(errno));
    m.size = (long long)st.st_size;
    if (rc == 0) rc = check_header(&m);
    if (rc == 0) rc = check_elements(&m, vars, count);
    if (rc == 0 && *count == 0) rc = pfl_err("%s: no variables", prefix);
    fclose(m.f);
    if (rc) *count = 0;
    return rc;
}
