#include "util/ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/err.h"
#include "util/safe_write.h"

static const char MAGIC[8] = {'P', 'F', 'L', 'C', 'K', 'P', 'T', '\0'};
#define VERSIONED_BYTES 12 /* magic and version */
#define HEADER_BYTES 28    /* and the file length with its complement, outside the checksum */
#define DIGEST_BYTES 32

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define HOST_BIG_ENDIAN 1
#else
#define HOST_BIG_ENDIAN 0
#endif

_Static_assert(sizeof(float) == 4 && sizeof(double) == 8 && sizeof(int) == 4, "checkpoints store 4-byte floats and ints");

static void swap_bytes(uint8_t *p, size_t count, size_t size) {
    for (size_t i = 0; i < count; i++, p += size)
        for (size_t a = 0, b = size - 1; a < b; a++, b--) {
            uint8_t t = p[a];
            p[a] = p[b];
            p[b] = t;
        }
}

static void le_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void le_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t from_le_u32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static uint64_t from_le_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* ---- writing ---- */

static int write_raw(pfl_ckpt_writer *w, const void *p, size_t n) {
    if (w->failed) return -1;
    if (n && fwrite(p, 1, n, w->f) != n) {
        w->failed = true;
        return pfl_err("%s: write failed: %s", w->tmp, strerror(errno));
    }
    pfl_sha256_update(&w->sha, p, n);
    return 0;
}

/* count elements of `size` bytes, little-endian in the file. */
static int write_elements(pfl_ckpt_writer *w, const void *v, size_t count, size_t size) {
    if (!HOST_BIG_ENDIAN || size == 1) return write_raw(w, v, count * size);
    uint8_t chunk[1 << 16];
    const size_t per = sizeof chunk / size;
    for (size_t done = 0; done < count; done += per) {
        const size_t k = count - done < per ? count - done : per;
        memcpy(chunk, (const uint8_t *)v + done * size, k * size);
        swap_bytes(chunk, k, size);
        if (write_raw(w, chunk, k * size)) return -1;
    }
    return 0;
}

/* A section opened by pfl_ckpt_put_begin must be complete before anything follows it. */
static int section_closed(pfl_ckpt_writer *w) {
    if (w->section_left == 0) return 0;
    w->failed = true;
    return pfl_err("%s: a section is %llu bytes short", w->tmp, (unsigned long long)w->section_left);
}

static int write_section_header(pfl_ckpt_writer *w, const char *name, uint64_t bytes) {
    if (section_closed(w)) return -1;
    const size_t len = strlen(name);
    if (len < 1 || len > PFL_CKPT_MAX_NAME) {
        w->failed = true;
        return pfl_err("%s: section name '%s' must have 1 to %d characters", w->tmp, name, PFL_CKPT_MAX_NAME);
    }
    uint8_t head[4], size[8];
    le_u32(head, (uint32_t)len);
    le_u64(size, bytes);
    return write_raw(w, head, 4) || write_raw(w, name, len) || write_raw(w, size, 8) ? -1 : 0;
}

static int put_elements(pfl_ckpt_writer *w, const char *name, const void *v, size_t count, size_t size) {
    if (write_section_header(w, name, (uint64_t)count * size)) return -1;
    return write_elements(w, v, count, size);
}

/* The writer's file as the safe writer's (util/safe_write.h): the fields are the same. */
static pfl_atomic_file as_atomic(const pfl_ckpt_writer *w) {
    pfl_atomic_file a = {.f = w->f};
    memcpy(a.tmp, w->tmp, sizeof a.tmp);
    memcpy(a.path, w->path, sizeof a.path);
    return a;
}

int pfl_ckpt_begin(pfl_ckpt_writer *w, const char *path) {
    memset(w, 0, sizeof *w);
    pfl_atomic_file a;
    if (pfl_atomic_open(&a, path)) return -1;
    w->f = a.f;
    memcpy(w->tmp, a.tmp, sizeof w->tmp);
    memcpy(w->path, a.path, sizeof w->path);
    pfl_sha256_init(&w->sha);
    uint8_t version[4];
    le_u32(version, PFL_CKPT_VERSION);
    /* the length fields stay zero (an unfinished write) until commit */
    const uint8_t length[16] = {0};
    if (write_raw(w, MAGIC, sizeof MAGIC) || write_raw(w, version, 4) ||
        fwrite(length, 1, sizeof length, w->f) != sizeof length) {
        pfl_ckpt_abort(w);
        return pfl_err("%s: write failed: %s", w->tmp, strerror(errno));
    }
    return 0;
}

int pfl_ckpt_put(pfl_ckpt_writer *w, const char *name, const void *bytes, size_t n) {
    return put_elements(w, name, bytes, n, 1);
}

int pfl_ckpt_put_f32(pfl_ckpt_writer *w, const char *name, const float *v, size_t n) {
    return put_elements(w, name, v, n, sizeof *v);
}

int pfl_ckpt_put_f64(pfl_ckpt_writer *w, const char *name, const double *v, size_t n) {
    return put_elements(w, name, v, n, sizeof *v);
}

int pfl_ckpt_put_i32(pfl_ckpt_writer *w, const char *name, const int *v, size_t n) {
    return put_elements(w, name, v, n, sizeof *v);
}

int pfl_ckpt_put_bool(pfl_ckpt_writer *w, const char *name, const bool *v, size_t n) {
    if (write_section_header(w, name, n)) return -1;
    uint8_t chunk[4096];
    for (size_t done = 0; done < n; done += sizeof chunk) {
        const size_t k = n - done < sizeof chunk ? n - done : sizeof chunk;
        for (size_t i = 0; i < k; i++) chunk[i] = v[done + i] ? 1 : 0;
        if (write_raw(w, chunk, k)) return -1;
    }
    return 0;
}

int pfl_ckpt_put_begin(pfl_ckpt_writer *w, const char *name, uint64_t bytes) {
    if (write_section_header(w, name, bytes)) return -1;
    w->section_left = bytes;
    return 0;
}

int pfl_ckpt_put_more_f32(pfl_ckpt_writer *w, const float *v, size_t n) {
    if ((uint64_t)n * sizeof *v > w->section_left) {
        w->failed = true;
        return pfl_err("%s: %zu bytes more than the section announced", w->tmp, n * sizeof *v);
    }
    w->section_left -= (uint64_t)n * sizeof *v;
    return write_elements(w, v, n, sizeof *v);
}

int pfl_ckpt_put_int(pfl_ckpt_writer *w, const char *name, int64_t v) { return put_elements(w, name, &v, 1, sizeof v); }

int pfl_ckpt_put_double(pfl_ckpt_writer *w, const char *name, double v) {
    return put_elements(w, name, &v, 1, sizeof v);
}

int pfl_ckpt_commit(pfl_ckpt_writer *w) {
    uint8_t end[4] = {0}, digest[DIGEST_BYTES];
    if (section_closed(w) || write_raw(w, end, 4)) {
        pfl_ckpt_abort(w);
        return -1;
    }
    pfl_sha256_final(&w->sha, digest);
    memcpy(w->digest, digest, sizeof digest);
    bool ok = fwrite(digest, 1, sizeof digest, w->f) == sizeof digest;
    const off_t size = ftello(w->f);
    uint8_t length[16];
    le_u64(length, (uint64_t)size);
    le_u64(length + 8, ~(uint64_t)size);
    ok = ok && size > 0 && fseeko(w->f, VERSIONED_BYTES, SEEK_SET) == 0 &&
         fwrite(length, 1, sizeof length, w->f) == sizeof length;
    if (!ok) {
        const int saved = errno;
        pfl_ckpt_abort(w);
        return pfl_err("%s: write failed: %s", w->tmp, strerror(saved));
    }
    pfl_atomic_file a = as_atomic(w); /* checked, fsynced, renamed, the folder fsynced */
    w->f = NULL;
    return pfl_atomic_commit(&a);
}

void pfl_ckpt_abort(pfl_ckpt_writer *w) {
    pfl_atomic_file a = as_atomic(w);
    w->f = NULL;
    pfl_atomic_abort(&a);
}

/* ---- reading ---- */

static int read_at(pfl_ckpt_reader *r, uint64_t offset, void *p, size_t n) {
    if (fseeko(r->f, (off_t)offset, SEEK_SET) != 0 || fread(p, 1, n, r->f) != n)
        return pfl_err("%s: read failed at byte %llu", r->path, (unsigned long long)offset);
    return 0;
}

/* The checksum: SHA-256 of the versioned header and of the sections (bytes
 * [HEADER_BYTES, size - DIGEST_BYTES)) equals the last DIGEST_BYTES. */
static int checksum_matches(pfl_ckpt_reader *r, uint64_t size, bool *matches) {
    pfl_sha256 sha;
    pfl_sha256_init(&sha);
    uint8_t chunk[1 << 16], stored[DIGEST_BYTES], digest[DIGEST_BYTES];
    if (read_at(r, 0, chunk, VERSIONED_BYTES)) return -1;
    pfl_sha256_update(&sha, chunk, VERSIONED_BYTES);
    if (fseeko(r->f, HEADER_BYTES, SEEK_SET) != 0) return pfl_err("%s: cannot seek", r->path);
    for (uint64_t done = HEADER_BYTES; done < size - DIGEST_BYTES;) {
        const uint64_t left = size - DIGEST_BYTES - done;
        const size_t k = left < sizeof chunk ? (size_t)left : sizeof chunk;
        if (fread(chunk, 1, k, r->f) != k) return pfl_err("%s: read failed at byte %llu", r->path, (unsigned long long)done);
        pfl_sha256_update(&sha, chunk, k);
        done += k;
    }
    if (fread(stored, 1, sizeof stored, r->f) != sizeof stored) return pfl_err("%s: cannot read the checksum", r->path);
    pfl_sha256_final(&sha, digest);
    *matches = memcmp(stored, digest, sizeof digest) == 0;
    memcpy(r->digest, stored, sizeof stored);
    return 0;
}

/* A section name pfl could have written: no NUL inside (strcmp would see
 * only its start) and not one already indexed (a lookup would find only the
 * first). The checksum matched, so these are files pfl never wrote. */
static int check_name(const pfl_ckpt_reader *r, const char *name, uint32_t len) {
    char shown[PFL_CKPT_MAX_NAME * 4 + 8];
    if (memchr(name, '\0', len))
        return pfl_err("%s: malformed: a section name holds a NUL byte ('%s')", r->path,
                       pfl_quote(shown, sizeof shown, name, len, 24));
    for (int i = 0; i < r->num_sections; i++)
        if (strcmp(r->sections[i].name, name) == 0)
            return pfl_err("%s: malformed: section '%s' appears twice", r->path,
                           pfl_quote(shown, sizeof shown, name, len, 24));
    return 0;
}

/* Indexes the sections from the header to the end marker, which must be
 * followed by the checksum and nothing else. */
static int index_sections(pfl_ckpt_reader *r, uint64_t size) {
    uint64_t pos = HEADER_BYTES;
    int capacity = 0;
    for (;;) {
        uint8_t head[4], length[8];
        if (pos + 4 > size - DIGEST_BYTES || read_at(r, pos, head, 4)) break;
        const uint32_t len = from_le_u32(head);
        pos += 4;
        if (len == 0) {
            if (pos == size - DIGEST_BYTES) return 0;
            break;
        }
        char name[PFL_CKPT_MAX_NAME + 1];
        if (len > PFL_CKPT_MAX_NAME || pos + len + 8 > size - DIGEST_BYTES || read_at(r, pos, name, len) ||
            read_at(r, pos + len, length, 8))
            break;
        name[len] = '\0';
        pos += len + 8;
        const uint64_t bytes = from_le_u64(length);
        if (bytes > size - DIGEST_BYTES - pos) break;
        if (check_name(r, name, len)) return -1;
        if (r->num_sections == capacity) {
            capacity = capacity ? 2 * capacity : 32;
            pfl_ckpt_section *grown = realloc(r->sections, sizeof *grown * (size_t)capacity);
            if (!grown) return pfl_err("out of memory");
            r->sections = grown;
        }
        pfl_ckpt_section *s = &r->sections[r->num_sections++];
        memcpy(s->name, name, len + 1);
        s->offset = pos, s->length = bytes;
        pos += bytes;
    }
    /* the checksum matched, so the writer wrote this: not a file pfl wrote */
    return pfl_err("%s: malformed: its sections do not end where its checksum begins", r->path);
}

static int verify(pfl_ckpt_reader *r) {
    struct stat st;
    if (fstat(fileno(r->f), &st) != 0) return pfl_err("%s: cannot stat: %s", r->path, strerror(errno));
    const uint64_t size = (uint64_t)st.st_size;
    uint8_t header[HEADER_BYTES];
    const size_t have = size < HEADER_BYTES ? (size_t)size : HEADER_BYTES;
    if (read_at(r, 0, header, have)) return -1;
    if (memcmp(header, MAGIC, have < sizeof MAGIC ? have : sizeof MAGIC) != 0)
        return pfl_err("%s: not a pfl checkpoint (bad magic)", r->path);
    if (have < VERSIONED_BYTES) return pfl_err("%s: truncated (%llu bytes)", r->path, (unsigned long long)size);
    r->version = from_le_u32(header + sizeof MAGIC);
    if (r->version != PFL_CKPT_VERSION)
        return pfl_err("%s: checkpoint format version %u; this pfl reads version %d", r->path, r->version,
                       PFL_CKPT_VERSION);
    if (have < HEADER_BYTES) return pfl_err("%s: truncated (%llu bytes)", r->path, (unsigned long long)size);
    const uint64_t length = from_le_u64(header + VERSIONED_BYTES), guard = from_le_u64(header + VERSIONED_BYTES + 8);
    if (length == 0 && guard == 0) return pfl_err("%s: incomplete: its write never finished", r->path);
    if (guard != ~length) return pfl_err("%s: corrupt header (its length field is damaged)", r->path);
    if (size < length)
        return pfl_err("%s: truncated (%llu of %llu bytes)", r->path, (unsigned long long)size, (unsigned long long)length);
    if (size > length)
        return pfl_err("%s: corrupt: %llu bytes after its end", r->path, (unsigned long long)(size - length));
    if (size < HEADER_BYTES + 4 + DIGEST_BYTES) return pfl_err("%s: corrupt: %llu bytes is too short", r->path,
                                                               (unsigned long long)size);
    bool matches;
    if (checksum_matches(r, size, &matches)) return -1;
    if (!matches) return pfl_err("%s: checksum mismatch: the file is corrupt", r->path);
    return index_sections(r, size);
}

int pfl_ckpt_open(pfl_ckpt_reader *r, const char *path) {
    memset(r, 0, sizeof *r);
    snprintf(r->path, sizeof r->path, "%s", path);
    if (!(r->f = pfl_read_open(path))) return -1; /* a pipe or a device there is refused, not waited on */
    if (verify(r)) {
        pfl_ckpt_close(r);
        return -1;
    }
    return 0;
}

void pfl_ckpt_close(pfl_ckpt_reader *r) {
    if (r->f) fclose(r->f);
    free(r->sections);
    r->f = NULL, r->sections = NULL, r->num_sections = 0;
}

static const pfl_ckpt_section *find(const pfl_ckpt_reader *r, const char *name) {
    for (int i = 0; i < r->num_sections; i++)
        if (strcmp(r->sections[i].name, name) == 0) return &r->sections[i];
    return NULL;
}

bool pfl_ckpt_has(const pfl_ckpt_reader *r, const char *name) { return find(r, name) != NULL; }

int pfl_ckpt_length(const pfl_ckpt_reader *r, const char *name, uint64_t *bytes) {
    const pfl_ckpt_section *s = find(r, name);
    if (!s) return pfl_err("%s: no section '%s' (a checkpoint of another configuration?)", r->path, name);
    *bytes = s->length;
    return 0;
}

static int get_elements(pfl_ckpt_reader *r, const char *name, void *v, size_t count, size_t size) {
    uint64_t bytes = 0;
    if (pfl_ckpt_length(r, name, &bytes)) return -1;
    if (bytes != (uint64_t)count * size)
        return pfl_err("%s: section '%s' has %llu bytes, expected %llu (a checkpoint of another configuration?)",
                       r->path, name, (unsigned long long)bytes, (unsigned long long)count * size);
    if (read_at(r, find(r, name)->offset, v, count * size)) return -1;
    if (HOST_BIG_ENDIAN && size > 1) swap_bytes(v, count, size);
    return 0;
}

int pfl_ckpt_get(pfl_ckpt_reader *r, const char *name, void *bytes, size_t n) {
    return get_elements(r, name, bytes, n, 1);
}

int pfl_ckpt_get_f32(pfl_ckpt_reader *r, const char *name, float *v, size_t n) {
    return get_elements(r, name, v, n, sizeof *v);
}

int pfl_ckpt_get_f32_at(pfl_ckpt_reader *r, const char *name, uint64_t first, float *v, size_t n) {
    uint64_t bytes = 0;
    if (pfl_ckpt_length(r, name, &bytes)) return -1;
    if (first > bytes / sizeof *v || n > bytes / sizeof *v - first)
        return pfl_err("%s: section '%s' has %llu floats, elements %llu..%llu asked for", r->path, name,
                       (unsigned long long)(bytes / sizeof *v), (unsigned long long)first,
                       (unsigned long long)(first + n));
    if (read_at(r, find(r, name)->offset + first * sizeof *v, v, n * sizeof *v)) return -1;
    if (HOST_BIG_ENDIAN) swap_bytes((uint8_t *)v, n, sizeof *v);
    return 0;
}

int pfl_ckpt_get_f64(pfl_ckpt_reader *r, const char *name, double *v, size_t n) {
    return get_elements(r, name, v, n, sizeof *v);
}

int pfl_ckpt_get_i32(pfl_ckpt_reader *r, const char *name, int *v, size_t n) {
    return get_elements(r, name, v, n, sizeof *v);
}

int pfl_ckpt_get_bool(pfl_ckpt_reader *r, const char *name, bool *v, size_t n) {
    uint8_t chunk[4096];
    uint64_t bytes = 0;
    if (pfl_ckpt_length(r, name, &bytes)) return -1;
    if (bytes != n)
        return pfl_err("%s: section '%s' has %llu bytes, expected %zu (a checkpoint of another configuration?)",
                       r->path, name, (unsigned long long)bytes, n);
    const uint64_t offset = find(r, name)->offset;
    for (size_t done = 0; done < n; done += sizeof chunk) {
        const size_t k = n - done < sizeof chunk ? n - done : sizeof chunk;
        if (read_at(r, offset + done, chunk, k)) return -1;
        for (size_t i = 0; i < k; i++) v[done + i] = chunk[i] != 0;
    }
    return 0;
}

int pfl_ckpt_get_int(pfl_ckpt_reader *r, const char *name, int64_t *v) { return get_elements(r, name, v, 1, sizeof *v); }

int pfl_ckpt_get_double(pfl_ckpt_reader *r, const char *name, double *v) {
    return get_elements(r, name, v, 1, sizeof *v);
}
