/* AG News: a CSV reader, the tokenizer, and the vocabulary built from the
 * training clients' text after partitioning (data.h, "text").
 *
 * Loading reads each file whole, parses it row by row, and interns every
 * token in a hash table of distinct words, so a sample is stored as
 * provisional word ids (first appearance order). pfl_text_build_vocab later
 * counts those ids over the training splits and rewrites them to the final
 * vocabulary, so the test splits never influence which words get an id. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/data.h"
#include "util/err.h"
#include "util/safe_write.h" /* pfl_read_open: regular files only */

enum { AGNEWS_CLASSES = 4, AGNEWS_FIELDS = 3 };

#define FETCH_HINT "run scripts/fetch-data.sh or pass --data-dir"

/* ---- growable arrays ---- */

/* Makes room for `need` elements of `size` bytes in *buf (capacity *cap),
 * doubling; records an error naming `what` on failure. */
static int grow(void **buf, long long *cap, long long need, size_t size, const char *what) {
    if (need <= *cap) return 0;
    long long n = *cap > 0 ? *cap : 64;
    while (n < need) n *= 2;
    if ((unsigned long long)n > (unsigned long long)SIZE_MAX / size)
        return pfl_err("agnews: out of memory (%s: %lld elements)", what, n);
    void *p = realloc(*buf, (size_t)n * size);
    if (!p) return pfl_err("agnews: out of memory (%s: %lld elements)", what, n);
    *buf = p;
    *cap = n;
    return 0;
}

/* ---- the dataset being built ---- */

typedef struct {
    pfl_text *t;
    uint8_t *labels;
    long long rows, rows_cap, tokens_cap, pool_len, pool_cap, words_cap, offsets_cap;
    int32_t *slots;       /* hash table of word ids, -1 empty; size a power of two */
    size_t num_slots;
    char *field;          /* the current field, unescaped, then lowercased in place */
    long long field_len, field_cap;
    const char *path;     /* the file being read, for messages */
} text_builder;

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h;
}

static const char *word_of(const pfl_text *t, int32_t w) { return t->pool + t->word_at[w]; }

/* Doubles the hash table and re-inserts every word. */
static int rehash(text_builder *b) {
    size_t n = b->num_slots ? b->num_slots * 2 : 1u << 16;
    int32_t *slots = pfl_malloc(n * sizeof *slots);
    if (!slots) return -1;
    for (size_t i = 0; i < n; i++) slots[i] = -1;
    for (int32_t w = 0; w < b->t->num_words; w++) {
        const char *s = word_of(b->t, w);
        size_t i = (size_t)hash_bytes(s, strlen(s)) & (n - 1);
        while (slots[i] >= 0) i = (i + 1) & (n - 1);
        slots[i] = w;
    }
    free(b->slots);
    b->slots = slots;
    b->num_slots = n;
    return 0;
}

/* The provisional id of word s[0..n), adding it when new; -1 on failure. */
static int32_t intern(text_builder *b, const char *s, size_t n) {
    pfl_text *t = b->t;
    if ((size_t)t->num_words * 2 >= b->num_slots && rehash(b)) return -1;
    size_t i = (size_t)hash_bytes(s, n) & (b->num_slots - 1);
    for (; b->slots[i] >= 0; i = (i + 1) & (b->num_slots - 1)) {
        const char *w = word_of(t, b->slots[i]);
        if (strncmp(w, s, n) == 0 && w[n] == '\0') return b->slots[i];
    }
    if (t->num_words == INT32_MAX) return pfl_err("agnews: too many distinct words");
    if (grow((void **)&t->pool, &b->pool_cap, b->pool_len + (long long)n + 1, 1, "words") ||
        grow((void **)&t->word_at, &b->words_cap, (long long)t->num_words + 1, sizeof *t->word_at, "words"))
        return -1;
    memcpy(t->pool + b->pool_len, s, n);
    t->pool[b->pool_len + (long long)n] = '\0';
    t->word_at[t->num_words] = b->pool_len;
    b->pool_len += (long long)n + 1;
    b->slots[i] = t->num_words;
    return t->num_words++;
}

static int is_word_byte(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* Appends the tokens of s[0..n) (modified: lowercased in place) to the
 * dataset's token array. */
static int add_tokens(text_builder *b, char *s, long long n) {
    pfl_text *t = b->t;
    for (long long i = 0; i < n;) {
        if (!is_word_byte((unsigned char)s[i])) {
            i++;
            continue;
        }
        long long start = i;
        for (; i < n && is_word_byte((unsigned char)s[i]); i++)
            if (s[i] >= 'A' && s[i] <= 'Z') s[i] = (char)(s[i] - 'A' + 'a');
        int32_t w = intern(b, s + start, (size_t)(i - start));
        if (w < 0) return -1;
        long long k = t->offsets[b->rows + 1];
        if (grow((void **)&t->tokens, &b->tokens_cap, k + 1, sizeof *t->tokens, "tokens")) return -1;
        t->tokens[k] = w;
        t->offsets[b->rows + 1] = k + 1;
    }
    return 0;
}

/* ---- CSV ---- */

typedef struct {
    const char *p, *end;
    long line;            /* line of p, 1-based */
} cursor;

static int at_line_end(const cursor *c) {
    return c->p == c->end || *c->p == '\n' || (*c->p == '\r' && c->p + 1 < c->end && c->p[1] == '\n');
}

static void skip_line_end(cursor *c) {
    if (c->p < c->end && *c->p == '\r') c->p++;
    if (c->p < c->end && *c->p == '\n') c->p++, c->line++;
}

static int push_field_byte(text_builder *b, char ch) {
    if (grow((void **)&b->field, &b->field_cap, b->field_len + 1, 1, "field")) return -1;
    b->field[b->field_len++] = ch;
    return 0;
}

/* Reads one field into b->field (unescaped) and leaves c at the ',' or line
 * end after it. */
static int read_field(text_builder *b, cursor *c) {
    b->field_len = 0;
    if (c->p < c->end && *c->p == '"') {
        const long opened = c->line;
        c->p++;
        for (;;) {
            if (c->p == c->end)
                return pfl_err("agnews: %s:%ld: unterminated quoted field (the quote opened on this line never "
                               "closes)", b->path, opened);
            char ch = *c->p++;
            if (ch == '"') {
                if (c->p < c->end && *c->p == '"') c->p++; /* "" is a quote */
                else break;
            }
            if (ch == '\n') c->line++;
            if (push_field_byte(b, ch)) return -1;
        }
        if (c->p < c->end && *c->p != ',' && !at_line_end(c)) {
            char opened_at[48] = "", shown[8]; /* a quote left open often closes lines later */
            if (opened != c->line)
                snprintf(opened_at, sizeof opened_at, "; the quoted field began on line %ld", opened);
            return pfl_err("agnews: %s:%ld: unexpected '%s' after a closing quote (expected a comma or the end of "
                           "the line%s)", b->path, c->line, pfl_quote(shown, sizeof shown, c->p, 1, 1), opened_at);
        }
        return 0;
    }
    while (c->p < c->end && *c->p != ',' && !at_line_end(c)) {
        if (*c->p == '"')
            return pfl_err("agnews: %s:%ld: quote inside an unquoted field", b->path, c->line);
        if (push_field_byte(b, *c->p++)) return -1;
    }
    return 0;
}

/* "1".."4" -> label 0..3, anything else fails. */
static int parse_class(text_builder *b, long line, uint8_t *label) {
    if (b->field_len == 1 && b->field[0] >= '1' && b->field[0] <= '0' + AGNEWS_CLASSES) {
        *label = (uint8_t)(b->field[0] - '1');
        return 0;
    }
    char shown[100];
    pfl_quote(shown, sizeof shown, b->field, (size_t)b->field_len, 20);
    return pfl_err("agnews: %s:%ld: class index '%s' is not one of 1-%d", b->path, line, shown, AGNEWS_CLASSES);
}

/* Reads one row (c at its first byte): class index, title, description. */
static int read_row(text_builder *b, cursor *c) {
    const long line = c->line;
    pfl_text *t = b->t;
    if (grow((void **)&b->labels, &b->rows_cap, b->rows + 1, 1, "rows") ||
        grow((void **)&t->offsets, &b->offsets_cap, b->rows + 2, sizeof *t->offsets, "rows"))
        return -1;
    t->offsets[b->rows + 1] = t->offsets[b->rows];
    int fields = 0;
    for (;;) {
        if (read_field(b, c)) return -1;
        if (fields == 0 && parse_class(b, line, &b->labels[b->rows])) return -1;
        if (fields == 1 || fields == 2) /* title, then description */
            if (add_tokens(b, b->field, b->field_len)) return -1;
        fields++;
        if (c->p < c->end && *c->p == ',' && fields < AGNEWS_FIELDS + 1) {
            c->p++;
            continue;
        }
        break;
    }
    if (fields != AGNEWS_FIELDS || !at_line_end(c))
        return pfl_err("agnews: %s:%ld: expected %d fields (class index, title, description), found %s%d", b->path,
                       line, AGNEWS_FIELDS, fields > AGNEWS_FIELDS ? "more than " : "",
                       fields > AGNEWS_FIELDS ? AGNEWS_FIELDS : fields);
    skip_line_end(c);
    if (b->rows == INT_MAX - 1) return pfl_err("agnews: %s: too many rows", b->path);
    b->rows++;
    return 0;
}

static int read_file(const char *path, char **data, long long *len) {
    errno = 0;
    FILE *f = pfl_read_open(path); /* a FIFO or a device there is refused, not waited on */
    if (!f) return pfl_err_prefix("agnews");
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || st.st_size < 0) {
        fclose(f);
        return pfl_err("agnews: cannot read %s", path);
    }
    *len = (long long)st.st_size;
    *data = pfl_malloc((size_t)*len + 1);
    int ok = *data && fread(*data, 1, (size_t)*len, f) == (size_t)*len;
    fclose(f);
    if (!ok) {
        free(*data);
        *data = NULL;
        return pfl_err("agnews: cannot read %s", path);
    }
    return 0;
}

/* Where the rows start: after a UTF-8 byte-order mark, which some editors
 * write; UTF-16 text (its marks FF FE, FE FF) is refused by name. */
static int skip_bom(const char *path, const char *data, long long len, long long *start) {
    const unsigned char *u = (const unsigned char *)data;
    *start = len >= 3 && u[0] == 0xef && u[1] == 0xbb && u[2] == 0xbf ? 3 : 0;
    if (len >= 2 && ((u[0] == 0xff && u[1] == 0xfe) || (u[0] == 0xfe && u[1] == 0xff)))
        return pfl_err("agnews: %s: UTF-16 text (byte-order mark %02X %02X); pfl reads UTF-8 or ASCII CSV", path, u[0],
                       u[1]);
    return 0;
}

static int read_csv(text_builder *b, const char *path) {
    char *data = NULL;
    long long len = 0, start = 0;
    if (read_file(path, &data, &len)) return -1;
    if (skip_bom(path, data, len, &start)) {
        free(data);
        return -1;
    }
    b->path = path;
    const long long before = b->rows;
    cursor c = {data + start, data + len, 1};
    int rc = 0;
    while (rc == 0 && c.p < c.end) {
        if (at_line_end(&c)) skip_line_end(&c); /* blank line */
        else rc = read_row(b, &c);
    }
    free(data);
    if (rc == 0 && b->rows == before) rc = pfl_err("agnews: %s: no rows", path);
    return rc;
}

/* ---- loading ---- */

void pfl_text_free(pfl_text *t) {
    if (!t) return;
    free(t->offsets);
    free(t->tokens);
    free(t->pool);
    free(t->word_at);
    free(t->id_word);
    free(t);
}

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

int pfl_agnews_load(pfl_dataset *d, const char *dir) {
    char train[4096], test[4096];
    int l1 = snprintf(train, sizeof train, "%s/agnews/train.csv", dir);
    int l2 = snprintf(test, sizeof test, "%s/agnews/test.csv", dir);
    if (l1 < 0 || l2 < 0 || (size_t)l1 >= sizeof train || (size_t)l2 >= sizeof test)
        return pfl_err("data path too long: %s/agnews", dir);
    if (!file_exists(test)) return pfl_err("agnews: cannot find %s; " FETCH_HINT, test);
    text_builder b = {0};
    int rc = -1;
    if (!(b.t = pfl_calloc(1, sizeof *b.t)) ||
        grow((void **)&b.t->offsets, &b.offsets_cap, 1, sizeof(long long), "rows"))
        goto done;
    b.t->offsets[0] = 0;
    if (file_exists(train) && read_csv(&b, train)) goto done; /* train first, as the other datasets */
    const int from_train = (int)b.rows;
    if (read_csv(&b, test)) goto done;
    b.t->max_len = PFL_TEXT_MAX_LEN;
    d->n = (int)b.rows;
    d->from_train_files = from_train;
    d->c = d->h = 1;
    d->w = PFL_TEXT_MAX_LEN;
    d->classes = AGNEWS_CLASSES;
    d->pixels = NULL;
    d->labels = b.labels;
    d->text = b.t;
    b.labels = NULL, b.t = NULL;
    rc = 0;
done:
    free(b.slots);
    free(b.field);
    free(b.labels);
    pfl_text_free(b.t);
    return rc;
}

/* ---- the vocabulary ---- */

typedef struct {
    long long count;
    const char *word;
    int32_t w;
} word_count;

/* Most frequent first; equal counts in byte order of the word. */
static int by_count_then_word(const void *pa, const void *pb) {
    const word_count *a = pa, *b = pb;
    if (a->count != b->count) return a->count > b->count ? -1 : 1;
    return strcmp(a->word, b->word);
}

/* Ids a PFLlib folder gave: they are final, and must fit the vocabulary. */
static int check_given_ids(pfl_dataset *d, int vocab_size) {
    pfl_text *t = d->text;
    int32_t largest = 0;
    for (long long j = 0; j < t->offsets[d->n]; j++)
        if (t->tokens[j] > largest) largest = t->tokens[j];
    if (largest >= vocab_size)
        return pfl_err("%s: token id %d is outside a vocabulary of %d ids (the folder's ids are PFLlib's: give "
                       "--model fasttext:%d or more)",
                       d->name, largest, vocab_size, largest + 1);
    t->vocab_size = vocab_size;
    t->num_words = largest + 1;
    return 0;
}

int pfl_text_build_vocab(pfl_dataset *d, const pfl_partition *p, int vocab_size) {
    pfl_text *t = d->text;
    if (!t) return pfl_err("%s: not a text dataset, it has no vocabulary", d->name);
    if (t->vocab_size) return pfl_err("%s: the vocabulary is already built", d->name);
    if (vocab_size <= 2 || vocab_size > PFL_TEXT_MAX_VOCAB)
        return pfl_err("vocabulary size %d: expected 3 to %d (ids 0 and 1 are <pad> and <unk>)", vocab_size,
                       PFL_TEXT_MAX_VOCAB);
    if (t->given_ids) return check_given_ids(d, vocab_size);
    long long *count = pfl_calloc((size_t)t->num_words + 1, sizeof *count);
    word_count *order = pfl_malloc(((size_t)t->num_words + 1) * sizeof *order);
    int32_t *map = pfl_malloc(((size_t)t->num_words + 1) * sizeof *map);
    int32_t *id_word = pfl_malloc((size_t)vocab_size * sizeof *id_word);
    if (!count || !order || !map || !id_word) {
        free(count), free(order), free(map), free(id_word);
        return -1;
    }
    for (int c = 0; c < p->num_clients; c++) /* the training splits only */
        for (int k = 0; k < p->clients[c].n_train; k++) {
            const int i = p->clients[c].train[k];
            for (long long j = t->offsets[i]; j < t->offsets[i + 1]; j++) count[t->tokens[j]]++;
        }
    int used = 0;
    for (int32_t w = 0; w < t->num_words; w++)
        if (count[w] > 0) order[used++] = (word_count){count[w], word_of(t, w), w};
    qsort(order, (size_t)used, sizeof *order, by_count_then_word);
    const int keep = used < vocab_size - 2 ? used : vocab_size - 2;
    for (int32_t w = 0; w < t->num_words; w++) map[w] = PFL_TEXT_UNK;
    for (int id = 0; id < vocab_size; id++) id_word[id] = -1;
    for (int r = 0; r < keep; r++) {
        map[order[r].w] = r + 2;
        id_word[r + 2] = order[r].w;
    }
    const long long total = t->offsets[d->n];
    for (long long j = 0; j < total; j++) t->tokens[j] = map[t->tokens[j]];
    t->vocab_size = vocab_size;
    t->vocab_words = keep;
    t->id_word = id_word;
    free(count), free(order), free(map);
    return 0;
}

const char *pfl_text_word(const pfl_dataset *d, int id) {
    const pfl_text *t = d->text;
    if (!t || id < 0) return NULL;
    if (t->given_ids) return id < (t->vocab_size ? t->vocab_size : PFL_TEXT_MAX_VOCAB) ? "" : NULL; /* no words */
    if (!t->vocab_size) return id < t->num_words ? word_of(t, id) : NULL;
    if (id >= t->vocab_size) return NULL;
    if (id == PFL_TEXT_PAD) return "<pad>";
    if (id == PFL_TEXT_UNK) return "<unk>";
    return t->id_word[id] >= 0 ? word_of(t, t->id_word[id]) : "";
}

void pfl_text_gather(const pfl_dataset *d, const int *idx, int n, float *x, uint8_t *y) {
    const pfl_text *t = d->text;
    const int L = t->max_len;
    for (int i = 0; i < n; i++) {
        const long long first = t->offsets[idx[i]];
        long long len = t->offsets[idx[i] + 1] - first;
        if (len > L) len = L; /* truncate */
        float *dst = x + (size_t)i * (size_t)L;
        for (long long j = 0; j < len; j++) dst[j] = (float)t->tokens[first + j];
        for (long long j = len; j < L; j++) dst[j] = (float)PFL_TEXT_PAD;
        if (y) y[i] = d->labels[idx[i]];
    }
}
