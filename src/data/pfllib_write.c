/* pfl partition --export pfllib DIR (data.h, pfl_pfllib_export): a pfl
 * split written as the folder PFLlib's generators write, so that PFLlib's
 * main.py -data NAME reads it unchanged.
 *
 * Each client file is what np.savez_compressed(f, data={'x': X, 'y': Y})
 * writes: a zip with one deflated member data.npy, whose header says a 0-d
 * object array and whose payload is the pickle numpy's np.save writes for
 * it (protocol 3, the opcodes of pickle.c's reader; no memo, which a
 * pickle may leave out). The folder is built beside DIR and renamed into
 * place. */
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <zlib.h>

#include "data/data.h"
#include "util/err.h"

#define WHAT "pfllib export"

/* ---- a growing byte buffer ---- */

typedef struct {
    uint8_t *p;
    size_t n, cap;
    bool failed;
} bytes;

static void put(bytes *b, const void *data, size_t n) {
    if (b->failed || n == 0) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            b->failed = true;
            pfl_err(WHAT ": out of memory (%zu bytes)", cap);
            return;
        }
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void put1(bytes *b, uint8_t v) { put(b, &v, 1); }

static void put_le(bytes *b, uint64_t v, int width) {
    uint8_t le[8];
    for (int k = 0; k < width; k++) le[k] = (uint8_t)(v >> (8 * k));
    put(b, le, (size_t)width);
}

/* ---- the pickle ---- */

enum { P_MARK = '(', P_STOP = '.', P_BININT = 'J', P_BININT1 = 'K', P_BININT2 = 'M', P_NONE = 'N',
       P_BINUNICODE = 'X', P_BINBYTES = 'B', P_REDUCE = 'R', P_APPEND = 'a', P_BUILD = 'b', P_GLOBAL = 'c',
       P_APPENDS = 'e', P_TUPLE = 't', P_SETITEMS = 'u', P_EMPTY_DICT = '}', P_EMPTY_LIST = ']',
       P_EMPTY_TUPLE = ')', P_PROTO = 0x80, P_TUPLE1 = 0x85, P_TUPLE3 = 0x87, P_NEWTRUE = 0x88, P_NEWFALSE = 0x89,
       P_LONG1 = 0x8a };

static void pickle_int(bytes *b, int64_t v) {
    if (v >= 0 && v < 256) {
        put1(b, P_BININT1), put1(b, (uint8_t)v);
    } else if (v >= 0 && v < 65536) {
        put1(b, P_BININT2), put_le(b, (uint64_t)v, 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
        put1(b, P_BININT), put_le(b, (uint64_t)v, 4);
    } else {
        put1(b, P_LONG1), put1(b, 8), put_le(b, (uint64_t)v, 8);
    }
}

static void pickle_text(bytes *b, const char *s) {
    put1(b, P_BINUNICODE), put_le(b, strlen(s), 4), put(b, s, strlen(s));
}

static void pickle_global(bytes *b, const char *module_and_name) {
    put1(b, P_GLOBAL), put(b, module_and_name, strlen(module_and_name));
}

/* dtype(code, False, True) with its state (3, order, None, None, None, -1, -1, flags). */
static void pickle_dtype(bytes *b, const char *code, const char *order, int flags) {
    pickle_global(b, "numpy\ndtype\n");
    pickle_text(b, code), put1(b, P_NEWFALSE), put1(b, P_NEWTRUE), put1(b, P_TUPLE3), put1(b, P_REDUCE);
    put1(b, P_MARK), pickle_int(b, 3), pickle_text(b, order);
    put1(b, P_NONE), put1(b, P_NONE), put1(b, P_NONE);
    pickle_int(b, -1), pickle_int(b, -1), pickle_int(b, flags), put1(b, P_TUPLE), put1(b, P_BUILD);
}

/* _reconstruct(ndarray, (0,), b'b'), then the MARK that opens its state:
 * (1, shape, ...; the caller writes dtype, fortran order and data, then
 * array_end. */
static void array_begin(bytes *b, const long long *shape, int ndim) {
    pickle_global(b, "numpy.core.multiarray\n_reconstruct\n");
    pickle_global(b, "numpy\nndarray\n");
    pickle_int(b, 0), put1(b, P_TUPLE1);
    put1(b, 'C'), put1(b, 1), put1(b, 'b'); /* SHORT_BINBYTES b'b' */
    put1(b, P_TUPLE3), put1(b, P_REDUCE);
    put1(b, P_MARK), pickle_int(b, 1);
    put1(b, P_MARK);
    for (int k = 0; k < ndim; k++) pickle_int(b, shape[k]);
    put1(b, P_TUPLE);
}

static void array_end(bytes *b) { put1(b, P_TUPLE), put1(b, P_BUILD); }

/* A numeric array: its raw little-endian bytes. */
static void pickle_numeric(bytes *b, const long long *shape, int ndim, const char *code, const void *data, size_t n) {
    array_begin(b, shape, ndim);
    pickle_dtype(b, code, strcmp(code, "u1") ? "<" : "|", 0);
    put1(b, P_NEWFALSE);
    put1(b, P_BINBYTES), put_le(b, n, 4), put(b, data, n);
    array_end(b);
}

/* PFLlib's text rows: an N x 2 object array of (token list, length). */
static void pickle_text_rows(bytes *b, const float *ids, const int *lengths, long long rows, int len) {
    const long long shape[2] = {rows, 2};
    array_begin(b, shape, 2);
    pickle_dtype(b, "O8", "|", 63);
    put1(b, P_NEWFALSE);
    put1(b, P_EMPTY_LIST), put1(b, P_MARK);
    for (long long r = 0; r < rows; r++) {
        put1(b, P_EMPTY_LIST), put1(b, P_MARK);
        for (int j = 0; j < len; j++) pickle_int(b, (int64_t)ids[r * len + j]);
        put1(b, P_APPENDS);
        pickle_int(b, lengths[r]);
    }
    put1(b, P_APPENDS);
    array_end(b);
}

/* ---- one client's file ---- */

/* The samples idx[0..n) of d as x (float32 images, or text rows) and y (int64). */
static int pickle_client(bytes *b, const pfl_dataset *d, const int *idx, int n) {
    const long s = pfl_dataset_sample_size(d);
    float *x = pfl_malloc(sizeof(float) * (size_t)n * (size_t)s);
    uint8_t *y8 = pfl_malloc((size_t)n);
    int64_t *y = pfl_malloc(sizeof(int64_t) * (size_t)n);
    int *lengths = d->text ? pfl_malloc(sizeof(int) * (size_t)n) : NULL;
    if (!x || !y8 || !y || (d->text && !lengths)) {
        free(x), free(y8), free(y), free(lengths);
        return -1;
    }
    pfl_dataset_gather(d, idx, n, x, y8);
    for (int i = 0; i < n; i++) y[i] = y8[i];
    put1(b, P_PROTO), put1(b, 3);
    const long long outer = 0;
    array_begin(b, &outer, 0);
    pickle_dtype(b, "O8", "|", 63);
    put1(b, P_NEWFALSE);
    put1(b, P_EMPTY_LIST), put1(b, P_EMPTY_DICT), put1(b, P_MARK);
    pickle_text(b, "x");
    if (d->text) {
        const pfl_text *t = d->text;
        for (int i = 0; i < n; i++) {
            const long long tokens = t->offsets[idx[i] + 1] - t->offsets[idx[i]];
            lengths[i] = (int)(tokens < t->max_len ? tokens : t->max_len);
        }
        pickle_text_rows(b, x, lengths, n, t->max_len);
    } else {
        const long long shape[4] = {n, d->c, d->h, d->w};
        pickle_numeric(b, shape, 4, "f4", x, sizeof(float) * (size_t)n * (size_t)s);
    }
    pickle_text(b, "y");
    const long long yshape[1] = {n};
    pickle_numeric(b, yshape, 1, "i8", y, sizeof(int64_t) * (size_t)n);
    put1(b, P_SETITEMS), put1(b, P_APPEND);
    array_end(b);
    put1(b, P_STOP);
    free(x), free(y8), free(y), free(lengths);
    return b->failed ? -1 : 0;
}

/* data.npy: the 1.0 header numpy writes for a pickled object, padded with
 * spaces to a multiple of 64 bytes and ended by a newline, then the pickle. */
static void npy_header(bytes *b) {
    static const char dict[] = "{'descr': '|O', 'fortran_order': False, 'shape': (), }";
    const size_t len = sizeof dict - 1, total = (10 + len + 1 + 63) / 64 * 64;
    put(b, "\x93NUMPY\x01\x00", 8), put_le(b, total - 10, 2), put(b, dict, len);
    for (size_t k = 10 + len; k + 1 < total; k++) put1(b, ' ');
    put1(b, '\n');
}

#define MEMBER "data.npy"

/* A zip record of data.npy: the local header (the data follow it) or the
 * central directory's (the local header at offset 0). */
static void zip_record(bytes *zip, bool central, uint32_t crc, size_t comp_n, size_t n) {
    put_le(zip, central ? 0x02014b50 : 0x04034b50, 4);
    if (central) put_le(zip, 20, 2);                         /* made by zip 2.0 */
    put_le(zip, 20, 2), put_le(zip, 0, 2), put_le(zip, 8, 2); /* needs 2.0, no flags, deflated */
    put_le(zip, 0, 2), put_le(zip, 0x21, 2);                  /* 1980-01-01 00:00, as numpy's */
    put_le(zip, crc, 4), put_le(zip, comp_n, 4), put_le(zip, n, 4);
    put_le(zip, strlen(MEMBER), 2), put_le(zip, 0, 2);        /* no extra field */
    if (central) {
        put_le(zip, 0, 2), put_le(zip, 0, 2), put_le(zip, 0, 2); /* no comment, disk 0, binary */
        put_le(zip, 0600u << 16, 4), put_le(zip, 0, 4);          /* rw-------, local header at 0 */
    }
    put(zip, MEMBER, strlen(MEMBER));
}

/* The zip np.savez_compressed writes: data.npy deflated, one entry. */
static int write_zip(const char *path, const bytes *npy) {
    if (npy->n > 0xfffffffeu) return pfl_err(WHAT ": %s: %zu bytes, beyond a zip without zip64", path, npy->n);
    z_stream z = {0};
    if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return pfl_err(WHAT ": %s: zlib cannot start deflating", path);
    const uLong bound = deflateBound(&z, (uLong)npy->n);
    bytes zip = {0};
    uint8_t *comp = pfl_malloc(bound);
    int rc = comp ? Z_OK : Z_MEM_ERROR;
    if (comp) {
        z.next_in = npy->p, z.avail_in = (uInt)npy->n, z.next_out = comp, z.avail_out = (uInt)bound;
        rc = deflate(&z, Z_FINISH);
    }
    const size_t comp_n = bound - z.avail_out;
    deflateEnd(&z);
    if (rc == Z_STREAM_END) {
        const uint32_t crc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), npy->p, (uInt)npy->n);
        zip_record(&zip, false, crc, comp_n, npy->n);
        put(&zip, comp, comp_n);
        const size_t cd_start = zip.n;
        zip_record(&zip, true, crc, comp_n, npy->n);
        const size_t cd_size = zip.n - cd_start;
        put_le(&zip, 0x06054b50, 4), put_le(&zip, 0, 4), put_le(&zip, 1, 2), put_le(&zip, 1, 2); /* one entry */
        put_le(&zip, cd_size, 4), put_le(&zip, cd_start, 4), put_le(&zip, 0, 2);
    }
    free(comp);
    int out = -1;
    FILE *f = rc == Z_STREAM_END && !zip.failed ? fopen(path, "wb") : NULL;
    if (rc != Z_STREAM_END) pfl_err(WHAT ": %s: deflate failed", path);
    else if (!zip.failed && !f) pfl_err(WHAT ": %s: cannot create: %s", path, strerror(errno));
    if (f) {
        out = fwrite(zip.p, 1, zip.n, f) == zip.n ? 0 : -1;
        if (fclose(f) != 0) out = -1;
        if (out) pfl_err(WHAT ": %s: write error: %s", path, strerror(errno));
    }
    free(zip.p);
    return out;
}

static int write_client(const char *path, const pfl_dataset *d, const int *idx, int n) {
    bytes npy = {0};
    npy_header(&npy);
    int rc = pickle_client(&npy, d, idx, n) || write_zip(path, &npy) ? -1 : 0;
    free(npy.p);
    return rc;
}

/* ---- config.json ---- */

/* Per client, [label, count] for each label it holds, train and test
 * together (PFLlib counts before its train/test split). */
static json_t *label_counts(const pfl_dataset *d, const pfl_partition *p) {
    json_t *all = json_array();
    long counts[256];
    for (int c = 0; all && c < p->num_clients; c++) {
        const pfl_client_data *cd = &p->clients[c];
        memset(counts, 0, sizeof counts);
        for (int i = 0; i < cd->n_train; i++) counts[d->labels[cd->train[i]]]++;
        for (int i = 0; i < cd->n_test; i++) counts[d->labels[cd->test[i]]]++;
        json_t *client = json_array();
        for (int k = 0; k < 256; k++)
            if (counts[k]) json_array_append_new(client, json_pack("[iI]", k, (json_int_t)counts[k]));
        json_array_append_new(all, client);
    }
    return all;
}

/* config.json: a PFLlib folder's own split re-exported says what its
 * config.json said (d->own_split); another split its scheme, and alpha only
 * when it has one. */
static int write_config(const char *path, const pfl_dataset *d, const pfl_partition *p, const char *partition,
                        double alpha, const char *about) {
    const pfl_split_record *own = d->own_clients && !strcmp(partition, "pfllib") ? &d->own_split : NULL;
    int non_iid = strcmp(partition, "iid") != 0, balance = 0;
    json_t *part = json_string(partition);
    if (own) {
        alpha = own->alpha;
        non_iid = own->non_iid >= 0 ? own->non_iid : non_iid;
        balance = own->balance >= 0 ? own->balance : balance;
        json_decref(part); /* absent there (or not a printable string): absent here */
        part = own->partition_null ? json_null() : own->partition[0] ? json_string(own->partition) : NULL;
    }
    json_t *c = json_pack("{s:i, s:i, s:b, s:b, s:o, s:i, s:s}", "num_clients", p->num_clients, "num_classes",
                          d->classes, "non_iid", non_iid, "balance", balance, "Size of samples for labels in clients",
                          label_counts(d, p), "batch_size", 10, "pfl", about);
    if (c && part && json_object_set_new(c, "partition", part)) json_decref(c), c = NULL;
    else if (!c) json_decref(part);
    if (c && isfinite(alpha) && json_object_set_new(c, "alpha", json_real(alpha))) json_decref(c), c = NULL;
    if (!c) return pfl_err(WHAT ": %s: cannot build the JSON", path);
    const int rc = json_dump_file(c, path, JSON_COMPACT | JSON_REAL_PRECISION(12)); /* alpha 0.3, not 0.29999999999999999 */
    json_decref(c);
    return rc ? pfl_err(WHAT ": %s: cannot write: %s", path, strerror(errno)) : 0;
}

/* ---- the folder ---- */

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static int make_dir(const char *path) {
    return mkdir(path, 0755) == 0 ? 0 : pfl_err(WHAT ": %s: cannot create: %s", path, strerror(errno));
}

static int write_all(const char *tmp, const pfl_dataset *d, const pfl_partition *p, const char *partition,
                     double alpha, const char *about) {
    char path[4300]; /* tmp (< 4200) and "/train/<client>.npz" */
    snprintf(path, sizeof path, "%s/config.json", tmp);
    if (write_config(path, d, p, partition, alpha, about)) return -1;
    for (int split = 0; split < 2; split++) {
        snprintf(path, sizeof path, "%s/%s", tmp, split ? "test" : "train");
        if (make_dir(path)) return -1;
        for (int c = 0; c < p->num_clients; c++) {
            const pfl_client_data *cd = &p->clients[c];
            snprintf(path, sizeof path, "%s/%s/%d.npz", tmp, split ? "test" : "train", c);
            if (write_client(path, d, split ? cd->test : cd->train, split ? cd->n_test : cd->n_train)) return -1;
        }
    }
    return 0;
}

/* A path that is there and is not an empty folder (which the rename may replace). */
static bool taken(const char *dir) {
    struct stat st;
    if (stat(dir, &st) != 0) return false;
    DIR *d = S_ISDIR(st.st_mode) ? opendir(dir) : NULL;
    if (!d) return true;
    bool empty = true;
    for (struct dirent *e; empty && (e = readdir(d));) empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
    closedir(d);
    return !empty;
}

int pfl_pfllib_export(const pfl_dataset *d, const pfl_partition *p, const char *partition, double alpha,
                      const char *about, const char *dir) {
    if (d->text && !d->text->vocab_size)
        return pfl_err(WHAT ": %s: the text's vocabulary is not built (pfl_text_build_vocab)", dir);
    if (d->classes > 256) return pfl_err(WHAT ": %s: %d classes", dir, d->classes);
    if (taken(dir)) return pfl_err(WHAT ": %s: exists and is not an empty folder; choose another", dir);
    char tmp[4200];
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') len--;
    if (snprintf(tmp, sizeof tmp, "%.*s.tmp-XXXXXX", (int)len, dir) >= (int)sizeof tmp || !mkdtemp(tmp))
        return pfl_err(WHAT ": %s: cannot create a folder beside it: %s", dir, strerror(errno));
    chmod(tmp, 0755);
    if (write_all(tmp, d, p, partition, alpha, about) == 0) {
        if (rename(tmp, dir) == 0) return 0;
        pfl_err(WHAT ": %s: cannot rename %s into place: %s", dir, tmp, strerror(errno));
    }
    nftw(tmp, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return -1;
}
