/* Tiny-ImageNet reader and loader, through libjpeg.
 *
 * The folder layout of tiny-imagenet-200.zip, under DIR/tinyimagenet/ or
 * DIR/tinyimagenet/tiny-imagenet-200/:
 *   wnids.txt                       one WordNet id per line: class k is line k
 *   train/<wnid>/images/<name>.JPEG 500 per class in the real set
 *   val/images/<name>.JPEG          10000 images
 *   val/val_annotations.txt         "file<TAB>wnid<TAB>x0<TAB>y0<TAB>x1<TAB>y1" lines
 * (test/ has no labels and is not read; train/<wnid>/<wnid>_boxes.txt are ignored.)
 * Order: train images, classes in wnids.txt order and files sorted by name
 * (strcmp), then val images in val_annotations.txt order. Every image must
 * decode as a 64x64 JPEG; grayscale ones (the real set has some) are
 * replicated into 3 equal channels. Any libjpeg warning (a truncated or
 * corrupt stream) counts as an error: nothing is silently gray-filled. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "data/data.h"
#include "util/err.h"
#include "util/safe_write.h" /* pfl_read_open: regular files only */

enum { TIN_SIDE = 64, TIN_PIXELS = 3 * TIN_SIDE * TIN_SIDE, TIN_MAX_FILE = 16 << 20 };

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

#ifdef PFL_NO_JPEG

int pfl_jpeg_decode64(const char *path, uint8_t *out) {
    (void)out;
    return pfl_err("tinyimagenet: %s: pfl was built without libjpeg (install libjpeg-dev and rebuild)",
                   base_name(path));
}

#else

/* Reads a whole file (JPEGs are small) into a malloc'd buffer. */
static int read_file(const char *path, const char *file, unsigned char **buf, size_t *len) {
    *buf = NULL;
    *len = 0;
    errno = 0;
    FILE *f = pfl_read_open(path); /* a FIFO or a device there is refused, not waited on */
    if (!f) return pfl_err_prefix("tinyimagenet");
    struct stat st;
    int rc = 0;
    if (fstat(fileno(f), &st) != 0) rc = pfl_err("tinyimagenet: %s: cannot stat: %s", file, strerror(errno));
    else if (st.st_size <= 0) rc = pfl_err("tinyimagenet: %s: empty file", file);
    else if (st.st_size > TIN_MAX_FILE) rc = pfl_err("tinyimagenet: %s: implausible size %lld", file, (long long)st.st_size);
    if (rc == 0 && !(*buf = pfl_malloc((size_t)st.st_size))) rc = -1;
    if (rc == 0 && fread(*buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size)
        rc = pfl_err("tinyimagenet: %s: read error", file);
    fclose(f);
    if (rc < 0) {
        free(*buf);
        *buf = NULL;
        return -1;
    }
    *len = (size_t)st.st_size;
    return 0;
}

#include <jpeglib.h>

/* libjpeg's default error handler prints and calls exit(); this one formats
 * the message and longjmps back to the decoder, which records it. Warnings
 * (corrupt or truncated data, which libjpeg would otherwise gray-fill) are
 * treated as errors too. */
typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX];
} jpeg_fail;

static void on_error(j_common_ptr cinfo) {
    jpeg_fail *e = (jpeg_fail *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, e->msg);
    longjmp(e->jump, 1);
}

static void on_message(j_common_ptr cinfo, int level) {
    if (level < 0) on_error(cinfo); /* a warning: corrupt data */
    /* trace messages (level >= 0) are dropped */
}

static void on_output(j_common_ptr cinfo) { (void)cinfo; }

/* Decodes buf[0..len) into out; the caller frees buf either way. */
static int decode_mem(const unsigned char *buf, size_t len, const char *file, uint8_t *out) {
    struct jpeg_decompress_struct cinfo;
    jpeg_fail err;
    unsigned char row[TIN_SIDE * 3];
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = on_error;
    err.pub.emit_message = on_message;
    err.pub.output_message = on_output;
    err.msg[0] = '\0';
    if (setjmp(err.jump)) {
        jpeg_destroy_decompress(&cinfo);
        return pfl_err("tinyimagenet: %s: corrupt JPEG: %s", file, err.msg);
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, (unsigned char *)buf, (unsigned long)len);
    jpeg_read_header(&cinfo, TRUE);
    int gray = cinfo.jpeg_color_space == JCS_GRAYSCALE;
    cinfo.out_color_space = gray ? JCS_GRAYSCALE : JCS_RGB;
    if (cinfo.image_width != TIN_SIDE || cinfo.image_height != TIN_SIDE) {
        unsigned w = cinfo.image_width, h = cinfo.image_height;
        jpeg_destroy_decompress(&cinfo);
        return pfl_err("tinyimagenet: %s: image is %ux%u, expected %dx%d", file, w, h, TIN_SIDE, TIN_SIDE);
    }
    jpeg_start_decompress(&cinfo);
    const int comps = cinfo.output_components;
    if (comps != (gray ? 1 : 3)) {
        jpeg_destroy_decompress(&cinfo);
        return pfl_err("tinyimagenet: %s: unsupported JPEG with %d output components", file, comps);
    }
    while (cinfo.output_scanline < cinfo.output_height) {
        int y = (int)cinfo.output_scanline;
        JSAMPROW rows[1] = {row};
        if (jpeg_read_scanlines(&cinfo, rows, 1) != 1) continue; /* suspension cannot happen from memory */
        for (int x = 0; x < TIN_SIDE; x++)
            for (int ch = 0; ch < 3; ch++)
                out[(ch * TIN_SIDE + y) * TIN_SIDE + x] = row[x * comps + (gray ? 0 : ch)];
    }
    jpeg_finish_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    return 0;
}

int pfl_jpeg_decode64(const char *path, uint8_t *out) {
    const char *file = base_name(path);
    unsigned char *buf = NULL;
    size_t len = 0;
    if (read_file(path, file, &buf, &len) < 0) return -1;
    int rc = decode_mem(buf, len, file, out);
    free(buf);
    return rc;
}

#endif

/* ---- the folder tree ---- */

typedef struct {
    char **items;
    int n, cap;
} strlist;

static void strlist_free(strlist *l) {
    for (int i = 0; i < l->n; i++) free(l->items[i]);
    free(l->items);
    memset(l, 0, sizeof *l);
}

static int strlist_add(strlist *l, const char *s, size_t len) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        char **items = realloc(l->items, (size_t)cap * sizeof *items);
        if (!items) return pfl_err("out of memory listing tinyimagenet files");
        l->items = items;
        l->cap = cap;
    }
    char *copy = pfl_malloc(len + 1);
    if (!copy) return -1;
    memcpy(copy, s, len);
    copy[len] = '\0';
    l->items[l->n++] = copy;
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int is_jpeg_name(const char *name) {
    size_t len = strlen(name);
    return (len > 5 && strcasecmp(name + len - 5, ".jpeg") == 0) || (len > 4 && strcasecmp(name + len - 4, ".jpg") == 0);
}

/* Lists the JPEG files (or, with dirs, the subfolders) of `path`, sorted. */
static int list_dir(const char *path, int dirs, strlist *out) {
    errno = 0;
    DIR *dp = opendir(path);
    if (!dp) return pfl_err("tinyimagenet: %s: cannot open folder: %s", path, strerror(errno));
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(dp)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (dirs) {
            char sub[4200];
            struct stat st;
            snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
            if (stat(sub, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
        } else if (!is_jpeg_name(e->d_name)) {
            continue;
        }
        rc = strlist_add(out, e->d_name, strlen(e->d_name));
    }
    closedir(dp);
    if (rc == 0 && out->n > 1) qsort(out->items, (size_t)out->n, sizeof *out->items, cmp_str);
    return rc;
}

static int find_index(const strlist *l, const char *s) {
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->items[i], s) == 0) return i;
    return -1;
}

/* A line, or a name from the file system, quoted for a message. */
static const char *shown(char *buf, size_t size, const char *s) {
    return pfl_quote(buf, size, s, strlen(s), 24); /* at most 96 characters */
}

/* Reads a text file's lines (without line ends, skipping blank ones). A NUL
 * byte inside a line is refused: it would silently cut the line short. */
static int read_lines(const char *path, strlist *out) {
    errno = 0;
    FILE *f = pfl_read_open(path);
    if (!f) return pfl_err_prefix("tinyimagenet");
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    int rc = 0, no = 0;
    while (rc == 0 && (got = getline(&line, &cap, f)) >= 0) {
        size_t len = (size_t)got;
        no++;
        if (memchr(line, '\0', len)) rc = pfl_err("tinyimagenet: %s: line %d holds a NUL byte", base_name(path), no);
        else if (len > 1024) rc = pfl_err("tinyimagenet: %s: line %d is too long", base_name(path), no);
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' ')) line[--len] = '\0';
        if (rc == 0 && len) rc = strlist_add(out, line, len);
    }
    if (rc == 0 && ferror(f)) rc = pfl_err("tinyimagenet: %s: read error", base_name(path));
    free(line);
    fclose(f);
    return rc;
}

typedef struct {
    char root[4096];
    strlist wnids, val_files;
    strlist *train;       /* per class: sorted image names */
    uint8_t *val_labels;  /* per val_files item */
} tin_tree;

static void tree_free(tin_tree *t) {
    if (t->train)
        for (int k = 0; k < t->wnids.n; k++) strlist_free(&t->train[k]);
    free(t->train);
    strlist_free(&t->wnids);
    strlist_free(&t->val_files);
    free(t->val_labels);
    t->train = NULL;
    t->val_labels = NULL;
}

static int find_root(tin_tree *t, const char *dir) {
    char probe[4200], probe2[4200];
    struct stat st;
    snprintf(t->root, sizeof t->root, "%s/tinyimagenet", dir);
    snprintf(probe, sizeof probe, "%s/wnids.txt", t->root);
    if (stat(probe, &st) == 0) return 0;
    int len = snprintf(t->root, sizeof t->root, "%s/tinyimagenet/tiny-imagenet-200", dir);
    if (len < 0 || (size_t)len >= sizeof t->root) return pfl_err("data path too long: %s/tinyimagenet", dir);
    snprintf(probe2, sizeof probe2, "%s/wnids.txt", t->root);
    if (stat(probe2, &st) == 0) return 0;
    return pfl_err("tinyimagenet: cannot find %s (nor %s); unzip tiny-imagenet-200.zip into %s/tinyimagenet/", probe,
                   probe2, dir);
}

/* A WordNet id as a folder name: printable, no space or slash, not hidden,
 * at most 64 characters (real ones have 9: n01443537). */
static int valid_wnid(const char *s) {
    if (!*s || *s == '.' || strlen(s) > 64) return 0;
    for (; *s; s++)
        if ((unsigned char)*s <= ' ' || (unsigned char)*s >= 0x7f || *s == '/') return 0;
    return 1;
}

/* wnids.txt, and train/: exactly the listed classes, each with at least one image. */
static int scan_train(tin_tree *t) {
    char path[4200], q[300];
    snprintf(path, sizeof path, "%s/wnids.txt", t->root);
    if (read_lines(path, &t->wnids) < 0) return -1;
    if (t->wnids.n < 1 || t->wnids.n > 256)
        return pfl_err("tinyimagenet: wnids.txt: %d class ids, expected 1..256 (200 in the real set)", t->wnids.n);
    for (int k = 0; k < t->wnids.n; k++) {
        if (!valid_wnid(t->wnids.items[k]))
            return pfl_err("tinyimagenet: wnids.txt: malformed class id '%s' on line %d",
                           shown(q, sizeof q, t->wnids.items[k]), k + 1);
        if (find_index(&t->wnids, t->wnids.items[k]) != k)
            return pfl_err("tinyimagenet: wnids.txt: class id %s appears twice", t->wnids.items[k]);
    }
    strlist sub = {0};
    snprintf(path, sizeof path, "%s/train", t->root);
    if (list_dir(path, 1, &sub) < 0) return -1;
    for (int i = 0; i < sub.n; i++)
        if (find_index(&t->wnids, sub.items[i]) < 0) {
            pfl_err("tinyimagenet: train/%s: unknown class id (not in wnids.txt)", shown(q, sizeof q, sub.items[i]));
            strlist_free(&sub);
            return -1;
        }
    strlist_free(&sub);
    if (!(t->train = pfl_calloc((size_t)t->wnids.n, sizeof *t->train))) return -1;
    for (int k = 0; k < t->wnids.n; k++) {
        snprintf(path, sizeof path, "%s/train/%s/images", t->root, t->wnids.items[k]);
        if (list_dir(path, 0, &t->train[k]) < 0) return -1;
        if (t->train[k].n == 0) return pfl_err("tinyimagenet: train/%s/images: no JPEG files", t->wnids.items[k]);
    }
    return 0;
}

/* val_annotations.txt: "file<TAB>wnid..." lines, into val_files and val_labels. */
static int read_val_annotations(tin_tree *t) {
    char path[4200], q[300];
    strlist lines = {0};
    snprintf(path, sizeof path, "%s/val/val_annotations.txt", t->root);
    int rc = read_lines(path, &lines);
    if (rc == 0 && lines.n == 0) rc = pfl_err("tinyimagenet: val_annotations.txt: no lines");
    if (rc == 0 && !(t->val_labels = pfl_malloc((size_t)lines.n))) rc = -1;
    for (int i = 0; rc == 0 && i < lines.n; i++) {
        char *line = lines.items[i], *tab = strchr(line, '\t');
        char *end = tab ? strchr(tab + 1, '\t') : NULL;
        const size_t wlen = !tab ? 0 : end ? (size_t)(end - tab - 1) : strlen(tab + 1);
        char wnid[256];
        if (!tab || tab == line || wlen == 0 || wlen >= sizeof wnid) {
            rc = pfl_err("tinyimagenet: val_annotations.txt: malformed line %d (expected file<TAB>wnid...)", i + 1);
            break;
        }
        memcpy(wnid, tab + 1, wlen);
        wnid[wlen] = '\0';
        const int k = find_index(&t->wnids, wnid);
        if (k < 0) {
            rc = pfl_err("tinyimagenet: val_annotations.txt: unknown class id %s on line %d (not in wnids.txt)",
                         shown(q, sizeof q, wnid), i + 1);
            break;
        }
        if (memchr(line, '/', (size_t)(tab - line)) || line[0] == '.') {
            rc = pfl_err("tinyimagenet: val_annotations.txt: malformed file name on line %d", i + 1);
            break;
        }
        t->val_labels[i] = (uint8_t)k;
        rc = strlist_add(&t->val_files, line, (size_t)(tab - line));
    }
    strlist_free(&lines);
    return rc;
}

typedef struct {
    const char *name;
    int line; /* 1-based, among the non-blank lines */
} annotation;

static int by_name_then_line(const void *pa, const void *pb) {
    const annotation *a = pa, *b = pb;
    const int c = strcmp(a->name, b->name);
    return c ? c : a->line - b->line;
}

static int in_sorted(const strlist *l, const char *s) {
    return bsearch(&s, l->items, (size_t)l->n, sizeof *l->items, cmp_str) != NULL;
}

/* The annotations and val/images name the same files, each once: an image
 * listed twice (with two labels) would load twice and another not at all,
 * which a count alone does not see. */
static int check_val_images(const tin_tree *t) {
    char path[4200], q[300];
    const strlist *ann = &t->val_files;
    strlist imgs = {0};
    snprintf(path, sizeof path, "%s/val/images", t->root);
    int rc = list_dir(path, 0, &imgs); /* sorted */
    annotation *order = rc == 0 ? pfl_malloc(sizeof *order * (size_t)ann->n) : NULL;
    if (rc == 0 && !order) rc = -1;
    for (int i = 0; rc == 0 && i < ann->n; i++) order[i] = (annotation){ann->items[i], i + 1};
    if (rc == 0) qsort(order, (size_t)ann->n, sizeof *order, by_name_then_line);
    for (int i = 1; rc == 0 && i < ann->n; i++)
        if (strcmp(order[i - 1].name, order[i].name) == 0)
            rc = pfl_err("tinyimagenet: val_annotations.txt: %s is listed twice (lines %d and %d)",
                         shown(q, sizeof q, order[i].name), order[i - 1].line, order[i].line);
    for (int i = 0; rc == 0 && i < ann->n; i++)
        if (!in_sorted(&imgs, ann->items[i]))
            rc = pfl_err("tinyimagenet: val_annotations.txt: line %d names %s, which is not a JPEG in val/images", i + 1,
                         shown(q, sizeof q, ann->items[i]));
    /* each annotated file is there, once: an image left over is not annotated */
    for (int i = 0, j = 0; rc == 0 && i < imgs.n; i++) {
        while (j < ann->n && strcmp(order[j].name, imgs.items[i]) < 0) j++;
        if (j == ann->n || strcmp(order[j].name, imgs.items[i]) != 0)
            rc = pfl_err("tinyimagenet: val/images/%s is not in val_annotations.txt", shown(q, sizeof q, imgs.items[i]));
    }
    free(order);
    strlist_free(&imgs);
    return rc;
}

/* Reads wnids.txt, lists train/, reads val_annotations.txt: everything but pixels. */
static int scan_tree(tin_tree *t) {
    return scan_train(t) < 0 || read_val_annotations(t) < 0 || check_val_images(t) < 0 ? -1 : 0;
}

int pfl_tinyimagenet_load(pfl_dataset *d, const char *dir) {
    tin_tree t;
    memset(&t, 0, sizeof t);
    uint8_t *pixels = NULL, *labels = NULL;
    if (find_root(&t, dir) < 0 || scan_tree(&t) < 0) goto fail;
    long long total = t.val_files.n;
    for (int k = 0; k < t.wnids.n; k++) total += t.train[k].n;
    if (total > INT_MAX / TIN_PIXELS) {
        pfl_err("tinyimagenet: implausible total of %lld images", total);
        goto fail;
    }
    pixels = pfl_malloc((size_t)total * TIN_PIXELS);
    labels = pfl_malloc((size_t)total);
    if (!pixels || !labels) goto fail;
    char path[8400];
    int n = 0;
    for (int k = 0; k < t.wnids.n; k++)
        for (int i = 0; i < t.train[k].n; i++, n++) {
            snprintf(path, sizeof path, "%s/train/%s/images/%s", t.root, t.wnids.items[k], t.train[k].items[i]);
            if (pfl_jpeg_decode64(path, pixels + (size_t)n * TIN_PIXELS) < 0) goto fail;
            labels[n] = (uint8_t)k;
        }
    const int from_train = n; /* train/ first, then val/ (the labelled "test" files) */
    for (int i = 0; i < t.val_files.n; i++, n++) {
        snprintf(path, sizeof path, "%s/val/images/%s", t.root, t.val_files.items[i]);
        if (pfl_jpeg_decode64(path, pixels + (size_t)n * TIN_PIXELS) < 0) goto fail;
        labels[n] = t.val_labels[i];
    }
    d->pixels = pixels;
    d->labels = labels;
    d->n = n;
    d->from_train_files = from_train;
    d->c = 3;
    d->h = d->w = TIN_SIDE;
    d->classes = t.wnids.n;
    tree_free(&t);
    return 0;
fail:
    free(pixels);
    free(labels);
    tree_free(&t);
    return -1;
}
