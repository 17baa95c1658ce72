/* Paper presets (preset.h): the YAML files of configs/ read with libyaml's document
 * loader, checked against the schema of configs/README.md, and turned into
 * the flags of one cell's run. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "algos/algos.h"
#include "run/preset.h"
#include "run/run.h"
#include "util/err.h"
#include "util/safe_write.h" /* pfl_read_open */
#include "util/sha256.h"

/* ---- reading YAML nodes ---- */

typedef struct {
    yaml_document_t *doc;
    const char *path;
} reader;

static const char *scalar(const yaml_node_t *n) { return (const char *)n->data.scalar.value; }
static int line_of(const yaml_node_t *n) { return (int)n->start_mark.line + 1; }

/* YAML 1.1's null: a plain ~, null (any case), or nothing. */
static bool is_null(const yaml_node_t *n) {
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return false;
    const char *s = scalar(n);
    return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL");
}

static int bad(const reader *r, const yaml_node_t *n, const char *where, const char *what) {
    return pfl_err("%s:%d: %s: %s", r->path, n ? line_of(n) : 0, where, what);
}

static yaml_node_t *node(const reader *r, int id) { return yaml_document_get_node(r->doc, id); }

static char *copy(const char *s) {
    char *c = pfl_malloc(strlen(s) + 1);
    if (c) strcpy(c, s);
    return c;
}

/* Names and flag values end up in messages and on command lines, which
 * stay one readable line: printable ASCII, at most PRESET_MAX_NAME bytes
 * (labels, notes and quotes may hold any text: they are never printed in a
 * message). */
enum { PRESET_MAX_NAME = 48 };

/* What a preset may hold at most (configs/ files are under 10 KiB, nest 5
 * levels, have a few dozen cells and no anchors): bounds that keep reading
 * one linear in its size, each refused in one line. */
enum { PRESET_MAX_BYTES = 1 << 20, PRESET_MAX_DEPTH = 16, PRESET_MAX_ANCHORS = 100, PRESET_MAX_CELLS = 256 };

static bool is_name(const char *s) {
    size_t n = 0;
    for (; s[n]; n++)
        if (s[n] < 0x20 || s[n] > 0x7e || n >= PRESET_MAX_NAME) return false;
    return true;
}

static int refuse_name(const reader *r, const yaml_node_t *n, const char *where, const char *text) {
    char q[128], what[192];
    snprintf(what, sizeof what, "'%s': expected printable ASCII, at most %d characters (names and flag values are printed in messages and command lines)",
             pfl_quote(q, sizeof q, text, strlen(text), 24), (int)PRESET_MAX_NAME);
    return bad(r, n, where, what);
}

/* Keys sorted by text, then by where they stand in the file. */
static int by_text_then_place(const void *a, const void *b) {
    const yaml_node_t *x = *(const yaml_node_t *const *)a, *y = *(const yaml_node_t *const *)b;
    const int c = strcmp(scalar(x), scalar(y));
    return c ? c : (x->start_mark.index > y->start_mark.index) - (x->start_mark.index < y->start_mark.index);
}

/* The key given twice in one mapping that comes first in the file (its
 * second spelling), or NULL; keys[0..n) sorted in place (n log n, not n²). */
static const yaml_node_t *repeated_key(const yaml_node_t **keys, int n) {
    qsort(keys, (size_t)n, sizeof *keys, by_text_then_place);
    const yaml_node_t *first = NULL;
    for (int i = 1; i < n; i++)
        if (!strcmp(scalar(keys[i - 1]), scalar(keys[i])) &&
            (!first || keys[i]->start_mark.index < first->start_mark.index))
            first = keys[i];
    return first;
}

/* Every mapping key of the document is a name, so messages can name keys,
 * and none is given twice in one mapping (YAML forbids it; libyaml's loader
 * keeps both, and the second would silently replace the first). */
static int check_keys(const reader *r) {
    size_t most = 1;
    for (yaml_node_t *n = r->doc->nodes.start; n < r->doc->nodes.top; n++)
        if (n->type == YAML_MAPPING_NODE && (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start) > most)
            most = (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
    const yaml_node_t **keys = pfl_malloc(most * sizeof *keys);
    if (!keys) return -1;
    int rc = 0;
    for (yaml_node_t *n = r->doc->nodes.start; n < r->doc->nodes.top && rc == 0; n++) {
        if (n->type != YAML_MAPPING_NODE) continue;
        int count = 0;
        for (yaml_node_pair_t *pr = n->data.mapping.pairs.start; pr < n->data.mapping.pairs.top && rc == 0; pr++) {
            const yaml_node_t *k = node(r, pr->key);
            if (!k || k->type != YAML_SCALAR_NODE) continue; /* the schema refuses it where it matters */
            if (!is_name(scalar(k))) rc = refuse_name(r, k, "a key", scalar(k));
            keys[count++] = k;
        }
        const yaml_node_t *twice = rc == 0 ? repeated_key(keys, count) : NULL;
        if (twice) rc = bad(r, twice, scalar(twice), "given twice in one mapping");
    }
    free(keys);
    return rc;
}

/* A scalar as a string (NULL for a YAML null when `nullable`). */
static int get_string(const reader *r, const yaml_node_t *n, const char *where, bool nullable, char **out) {
    if (nullable && is_null(n)) return *out = NULL, 0;
    if (n->type != YAML_SCALAR_NODE || is_null(n)) return bad(r, n, where, "expected a value");
    return (*out = copy(scalar(n))) ? 0 : -1;
}

/* get_string, of a name (is_name). */
static int get_name(const reader *r, const yaml_node_t *n, const char *where, bool nullable, char **out) {
    if (get_string(r, n, where, nullable, out)) return -1;
    if (!*out || is_name(*out)) return 0;
    refuse_name(r, n, where, *out);
    free(*out);
    *out = NULL;
    return -1;
}

static int get_number(const reader *r, const yaml_node_t *n, const char *where, double *out) {
    char *end;
    if (n->type != YAML_SCALAR_NODE || is_null(n)) return bad(r, n, where, "expected a number");
    *out = strtod(scalar(n), &end);
    return *end || end == scalar(n) ? bad(r, n, where, "expected a number") : 0;
}

static int get_word(const reader *r, const yaml_node_t *n, const char *where, const char *const *words, char **out) {
    if (get_name(r, n, where, true, out)) return -1;
    if (!*out) return 0;
    for (int i = 0; words[i]; i++)
        if (!strcmp(*out, words[i])) return 0;
    char msg[256] = "expected one of:";
    for (int i = 0; words[i]; i++) snprintf(msg + strlen(msg), sizeof msg - strlen(msg), " %s", words[i]);
    snprintf(msg + strlen(msg), sizeof msg - strlen(msg), ", or null (got '%s')", *out);
    return bad(r, n, where, msg);
}

/* A value of a flag: a scalar, or (budget seeds) a list joined with commas. */
static int flag_value(const reader *r, const yaml_node_t *n, const char *where, char **out) {
    if (n->type == YAML_SCALAR_NODE) return get_name(r, n, where, true, out);
    if (n->type != YAML_SEQUENCE_NODE) return bad(r, n, where, "expected a value");
    size_t len = 1;
    for (yaml_node_item_t *i = n->data.sequence.items.start; i < n->data.sequence.items.top; i++) {
        const yaml_node_t *item = node(r, *i);
        if (item->type != YAML_SCALAR_NODE || is_null(item)) return bad(r, item, where, "expected a list of values");
        if (!is_name(scalar(item))) return refuse_name(r, item, where, scalar(item));
        len += strlen(scalar(item)) + 1;
    }
    if (!(*out = pfl_malloc(len))) return -1;
    char *end = *out; /* appended at the end: linear in the list's length */
    for (yaml_node_item_t *i = n->data.sequence.items.start; i < n->data.sequence.items.top; i++) {
        const char *text = scalar(node(r, *i));
        if (i != n->data.sequence.items.start) *end++ = ',';
        memcpy(end, text, strlen(text)), end += strlen(text);
    }
    *end = '\0';
    return 0;
}

/* Flags that say where and how this machine runs a cell, which a preset
 * must not decide: where its files go, where its data is, how it runs. */
static const char *const placement_flags[] = {"out",        "overwrite",  "checkpoint-every", "stop-after",
                                              "data-dir",   "client-state", "threads",        "quiet",
                                              "config",     "cell",         "budget",         NULL};

static bool is_placement_flag(const char *key) {
    for (int i = 0; placement_flags[i]; i++)
        if (!strcmp(key, placement_flags[i])) return true;
    return false;
}

/* A mapping of flags (long names without --). `allowed` non-NULL: the only keys. */
static int get_flags(const reader *r, const yaml_node_t *n, const char *where, const char *const *allowed,
                     pfl_preset_flags *out) {
    out->at = NULL, out->n = 0;
    if (is_null(n)) return 0;
    if (n->type != YAML_MAPPING_NODE) return bad(r, n, where, "expected a mapping of flags (name: value)");
    const int count = (int)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
    if (!(out->at = pfl_calloc((size_t)(count ? count : 1), sizeof *out->at))) return -1;
    for (yaml_node_pair_t *pr = n->data.mapping.pairs.start; pr < n->data.mapping.pairs.top; pr++) {
        const yaml_node_t *k = node(r, pr->key), *v = node(r, pr->value);
        char key_where[256];
        if (k->type != YAML_SCALAR_NODE) return bad(r, k, where, "expected a flag name");
        snprintf(key_where, sizeof key_where, "%.120s.%.120s", where, scalar(k));
        bool ok = allowed == NULL;
        for (int i = 0; allowed && allowed[i]; i++) ok |= !strcmp(allowed[i], scalar(k));
        if (!ok) return bad(r, k, key_where, "not a key of this mapping (configs/README.md)");
        if (is_placement_flag(scalar(k)))
            return bad(r, k, key_where, "where and how this machine runs a cell (its --out, data, checkpoints, "
                                        "threads) is the command line's to say, not a preset's");
        pfl_preset_flag *f = &out->at[out->n++]; /* keys are unique: check_keys */
        if (!(f->key = copy(scalar(k))) || flag_value(r, v, key_where, &f->value)) return -1;
    }
    return 0;
}

static int get_list(const reader *r, const yaml_node_t *n, const char *where, char ***out) {
    if (n->type != YAML_SEQUENCE_NODE) return bad(r, n, where, "expected a list");
    const int count = (int)(n->data.sequence.items.top - n->data.sequence.items.start);
    if (!(*out = pfl_calloc((size_t)count + 1, sizeof(char *)))) return -1;
    for (int i = 0; i < count; i++)
        if (get_name(r, node(r, n->data.sequence.items.start[i]), where, false, &(*out)[i])) return -1;
    return 0;
}

/* ---- the schema ---- */

static int get_paper_number(const reader *r, const yaml_node_t *n, const char *where, pfl_preset_number *out) {
    memset(out, 0, sizeof *out);
    if (is_null(n)) return 0;
    if (n->type != YAML_MAPPING_NODE) return bad(r, n, where, "expected {mean, std}, {iters, seconds} or null");
    out->has = true;
    for (yaml_node_pair_t *pr = n->data.mapping.pairs.start; pr < n->data.mapping.pairs.top; pr++) {
        const yaml_node_t *k = node(r, pr->key), *v = node(r, pr->value);
        const char *key = k->type == YAML_SCALAR_NODE ? scalar(k) : "";
        char kw[256];
        snprintf(kw, sizeof kw, "%.120s.%.120s", where, key);
        int rc;
        if (!strcmp(key, "mean")) {
            out->has_mean = true;
            rc = get_number(r, v, kw, &out->mean) || get_string(r, v, kw, false, &out->mean_text);
        } else if (!strcmp(key, "std")) {
            rc = get_number(r, v, kw, &out->std), out->has_std = true;
        } else if (!strcmp(key, "iters")) {
            rc = get_number(r, v, kw, &out->iters), out->has_iters = true;
        } else if (!strcmp(key, "seconds")) {
            rc = get_number(r, v, kw, &out->seconds), out->has_seconds = true;
        } else if (!strcmp(key, "approx")) {
            out->approx = v->type == YAML_SCALAR_NODE && !strcmp(scalar(v), "true");
            rc = v->type == YAML_SCALAR_NODE && (out->approx || !strcmp(scalar(v), "false"))
                     ? 0
                     : bad(r, v, kw, "expected true or false");
        } else {
            rc = bad(r, k, kw, "not a key of paper: (mean, std, approx, iters, seconds)");
        }
        if (rc) return -1;
    }
    return 0;
}

static const char *const metrics_words[] = {"personalized", "global", "cost", NULL};

static int get_cell(const reader *r, const yaml_node_t *n, int index, pfl_preset_cell *c) {
    char where[64];
    snprintf(where, sizeof where, "cells[%d]", index);
    if (n->type != YAML_MAPPING_NODE) return bad(r, n, where, "expected a mapping (algo, label, flags, paper, ...)");
    for (yaml_node_pair_t *pr = n->data.mapping.pairs.start; pr < n->data.mapping.pairs.top; pr++) {
        const yaml_node_t *k = node(r, pr->key), *v = node(r, pr->value);
        const char *key = k->type == YAML_SCALAR_NODE ? scalar(k) : "";
        char kw[256];
        snprintf(kw, sizeof kw, "%.120s.%.120s", where, key);
        char *ignored = NULL;
        int rc;
        if (!strcmp(key, "algo")) rc = get_name(r, v, kw, false, &c->algo);
        else if (!strcmp(key, "label")) rc = get_name(r, v, kw, false, &c->label);
        else if (!strcmp(key, "metric")) rc = get_word(r, v, kw, metrics_words, &c->metric);
        else if (!strcmp(key, "flags")) rc = get_flags(r, v, kw, NULL, &c->flags);
        else if (!strcmp(key, "assumed")) rc = get_flags(r, v, kw, NULL, &c->assumed);
        else if (!strcmp(key, "paper")) rc = get_paper_number(r, v, kw, &c->paper);
        else if (!strcmp(key, "source") || !strcmp(key, "note")) rc = get_string(r, v, kw, false, &ignored);
        else rc = bad(r, k, kw, "not a key of a cell (algo, label, metric, flags, assumed, paper, source, note)");
        free(ignored);
        if (rc) return -1;
    }
    if (!c->algo || !c->label) return bad(r, n, where, c->algo ? "has no label" : "has no algo");
    return 0;
}

static const char *const budget_keys[] = {"rounds", "seeds", "eval-every", NULL};
static const char *const reported_words[] = {"best", "final", "convergence", NULL};
static const char *const unit_words[] = {"percent", "fraction", NULL};

/* The budget; seeds: a count N means seeds 1..N ("1-N"), a list (or a
 * string such as "2,5" or "1-3") the seeds themselves. */
static int get_budget(const reader *r, const yaml_node_t *n, pfl_preset *p) {
    if (get_flags(r, n, "budget", budget_keys, &p->budget)) return -1;
    if (n->type != YAML_MAPPING_NODE) return 0; /* budget: null, nothing set */
    for (yaml_node_pair_t *pr = n->data.mapping.pairs.start; pr < n->data.mapping.pairs.top; pr++) {
        const yaml_node_t *k = node(r, pr->key), *v = node(r, pr->value);
        if (strcmp(scalar(k), "seeds") || v->type != YAML_SCALAR_NODE || is_null(v)) continue;
        const char *text = scalar(v);
        if (!*text || strspn(text, "0123456789") != strlen(text)) continue;
        if (strlen(text) <= 9 && atol(text) < 1) /* a longer count is refused as a list: too many seeds */
            return bad(r, v, "budget.seeds", "a count of seeds is at least 1");
        for (int i = 0; i < p->budget.n; i++)
            if (!strcmp(p->budget.at[i].key, "seeds")) {
                char *range = pfl_malloc(strlen(text) + 3);
                if (!range) return -1;
                sprintf(range, "1-%s", text);
                free(p->budget.at[i].value);
                p->budget.at[i].value = range;
            }
    }
    return 0;
}

static int get_pending(const reader *r, const yaml_node_t *n, pfl_preset *p) {
    if (n->type != YAML_MAPPING_NODE) return bad(r, n, "pending", "expected {algos: [...], flags: [...]}");
    for (yaml_node_pair_t *pr = n->data.mapping.pairs.start; pr < n->data.mapping.pairs.top; pr++) {
        const yaml_node_t *k = node(r, pr->key), *v = node(r, pr->value);
        const char *key = k->type == YAML_SCALAR_NODE ? scalar(k) : "";
        if (!strcmp(key, "algos") && !p->pending_algos) {
            if (get_list(r, v, "pending.algos", &p->pending_algos)) return -1;
        } else if (!strcmp(key, "flags") && !p->pending_flags) {
            if (get_list(r, v, "pending.flags", &p->pending_flags)) return -1;
        } else {
            return bad(r, k, "pending", "expected the keys algos and flags, once each");
        }
    }
    return 0;
}

static int get_top_key(const reader *r, const char *key, const yaml_node_t *v, pfl_preset *p) {
    double d;
    if (!strcmp(key, "paper")) return get_string(r, v, key, false, &p->paper);
    if (!strcmp(key, "table")) return get_string(r, v, key, false, &p->table);
    if (!strcmp(key, "column")) return get_string(r, v, key, false, &p->column);
    if (!strcmp(key, "reported")) return get_word(r, v, key, reported_words, &p->reported);
    if (!strcmp(key, "metric")) return get_word(r, v, key, metrics_words, &p->metric);
    if (!strcmp(key, "unit")) return get_word(r, v, key, unit_words, &p->unit);
    if (!strcmp(key, "runs")) {
        if (is_null(v)) return p->runs = -1, 0;
        return get_number(r, v, key, &d) ? -1 : (p->runs = (int)d, 0);
    }
    if (!strcmp(key, "decimals")) return get_number(r, v, key, &d) ? -1 : (p->decimals = (int)d, 0);
    if (!strcmp(key, "setting")) return get_flags(r, v, key, NULL, &p->setting);
    if (!strcmp(key, "assumed")) return get_flags(r, v, key, NULL, &p->assumed);
    if (!strcmp(key, "budget")) return get_budget(r, v, p);
    if (!strcmp(key, "pending")) return get_pending(r, v, p);
    if (!strcmp(key, "derived")) return v->type == YAML_SEQUENCE_NODE ? 0 : bad(r, v, key, "expected a list");
    if (!strcmp(key, "cells")) {
        if (v->type != YAML_SEQUENCE_NODE) return bad(r, v, key, "expected a list of cells");
        const int n = (int)(v->data.sequence.items.top - v->data.sequence.items.start);
        if (n > PRESET_MAX_CELLS) {
            char what[96];
            snprintf(what, sizeof what, "%d cells, more than a preset may have (%d)", n, PRESET_MAX_CELLS);
            return bad(r, v, key, what);
        }
        if (!(p->cells = pfl_calloc((size_t)(n ? n : 1), sizeof *p->cells))) return -1;
        for (int i = 0; i < n; i++) /* counted first: a cell read halfway is freed too */
            if (p->num_cells++, get_cell(r, node(r, v->data.sequence.items.start[i]), i, &p->cells[i])) return -1;
        return 0;
    }
    return pfl_err("%s:%d: '%s' is not a key of a preset (configs/README.md, \"Schema\")", r->path, line_of(v), key);
}

/* ---- composing a cell's flags ---- */

typedef struct {
    const char *key, *value; /* value NULL: null so far */
    char where[96];          /* where its value (or its null) comes from: "setting.lr" */
    int first;               /* where the key first appears among the layers: the order of the flags */
} composed;

typedef struct {
    composed *at;
    int n;
} composition;

/* A flag of one layer, numbered in the order of the layers. */
typedef struct {
    const pfl_preset_flag *f;
    const char *layer;
    int order;
    bool null_wins;
} layered;

static int by_key_then_order(const void *a, const void *b) {
    const layered *x = a, *y = b;
    const int c = strcmp(x->f->key, y->f->key);
    return c ? c : (x->order > y->order) - (x->order < y->order);
}

static int by_first(const void *a, const void *b) {
    const composed *x = a, *y = b;
    return (x->first > y->first) - (x->first < y->first);
}

static int by_key(const void *a, const void *b) { return strcmp(((const composed *)a)->key, ((const composed *)b)->key); }

/* The layers of a cell, in order: a later layer's value replaces an earlier
 * one; a null adds the key only when no layer gave it (a null never takes a
 * value away), except in the budget (`null_wins`), where null means "not
 * set for this machine yet". The flags come out in the order their keys
 * first appear. Sorting, not searching, keeps it n log n in the flags. */
static int compose(const pfl_preset *p, int cell, bool budget, composition *c) {
    const pfl_preset_cell *pc = &p->cells[cell];
    char cell_assumed[64], cell_flags[64];
    snprintf(cell_assumed, sizeof cell_assumed, "cells[%d].assumed", cell);
    snprintf(cell_flags, sizeof cell_flags, "cells[%d].flags", cell);
    const struct {
        const pfl_preset_flags *flags;
        const char *name;
    } layers[5] = {{&p->setting, "setting"}, {&p->assumed, "assumed"}, {&pc->assumed, cell_assumed},
                   {&pc->flags, cell_flags}, {budget ? &p->budget : NULL, "budget"}};
    int total = 0;
    for (int l = 0; l < 5; l++) total += layers[l].flags ? layers[l].flags->n : 0;
    layered *all = pfl_malloc(sizeof *all * (size_t)(total ? total : 1));
    memset(c, 0, sizeof *c);
    if (!all || !(c->at = pfl_malloc(sizeof *c->at * (size_t)(total ? total : 1)))) {
        free(all);
        return -1;
    }
    int n = 0;
    for (int l = 0; l < 5; l++)
        for (int i = 0; layers[l].flags && i < layers[l].flags->n; i++, n++)
            all[n] = (layered){&layers[l].flags->at[i], layers[l].name, n, l == 4};
    qsort(all, (size_t)n, sizeof *all, by_key_then_order);
    for (int i = 0; i < n; c->n++) {
        composed *k = &c->at[c->n];
        k->key = all[i].f->key, k->first = all[i].order;
        for (int j = i; i < n && !strcmp(all[i].f->key, all[j].f->key); i++) {
            if (i > j && !all[i].f->value && !all[i].null_wins) continue;
            k->value = all[i].f->value;
            snprintf(k->where, sizeof k->where, "%s.%s", all[i].layer, all[i].f->key);
        }
    }
    qsort(c->at, (size_t)c->n, sizeof *c->at, by_first);
    free(all);
    return 0;
}

/* A fingerprint of how a cell runs: its method and composed flags (in any
 * order), equal for cells that run the same. */
static int run_fingerprint(const pfl_preset *p, int cell, uint8_t digest[32]) {
    composition c;
    if (compose(p, cell, false, &c)) return -1;
    qsort(c.at, (size_t)c.n, sizeof *c.at, by_key);
    pfl_sha256 sha;
    pfl_sha256_init(&sha);
    pfl_sha256_update(&sha, p->cells[cell].algo, strlen(p->cells[cell].algo) + 1);
    for (int i = 0; i < c.n; i++) {
        pfl_sha256_update(&sha, c.at[i].key, strlen(c.at[i].key) + 1);
        pfl_sha256_update(&sha, c.at[i].value ? "=" : "~", 1); /* a value, or a null */
        if (c.at[i].value) pfl_sha256_update(&sha, c.at[i].value, strlen(c.at[i].value) + 1);
    }
    pfl_sha256_final(&sha, digest);
    free(c.at);
    return 0;
}

/* "FedALP_global" -> "fedalp-global". */
static char *slug(const char *label) {
    char *s = pfl_malloc(strlen(label) + 8);
    if (!s) return NULL;
    size_t n = 0;
    for (const char *c = label; *c; c++) {
        if (isalnum((unsigned char)*c)) s[n++] = (char)tolower((unsigned char)*c);
        else if (n > 0 && s[n - 1] != '-') s[n++] = '-';
    }
    while (n > 0 && s[n - 1] == '-') n--;
    if (n == 0) s[n++] = 'x';
    s[n] = '\0';
    return s;
}

/* Each cell's run folder: the slug of the first cell that runs the same,
 * made unique with -2, -3, ... Cells share a folder exactly when they run
 * the same. */
static int name_runs(pfl_preset *p) {
    uint8_t (*runs)[32] = pfl_malloc(32 * (size_t)(p->num_cells ? p->num_cells : 1));
    if (!runs) return -1;
    int rc = 0;
    for (int i = 0; i < p->num_cells && rc == 0; i++) rc = run_fingerprint(p, i, runs[i]);
    for (int i = 0; i < p->num_cells && rc == 0; i++) {
        int first = 0;
        while (first < i && memcmp(runs[first], runs[i], 32)) first++;
        if (first < i) {
            if (!(p->cells[i].run = copy(p->cells[first].run))) rc = -1;
            continue;
        }
        char *base = slug(p->cells[i].label);
        if (!base || !(p->cells[i].run = pfl_malloc(strlen(base) + 16))) {
            free(base);
            rc = -1;
            break;
        }
        for (int k = 1;; k++) {
            if (k == 1) strcpy(p->cells[i].run, base);
            else sprintf(p->cells[i].run, "%s-%d", base, k);
            int j = 0;
            while (j < i && strcmp(p->cells[j].run, p->cells[i].run)) j++;
            if (j == i) break;
        }
        free(base);
    }
    free(runs);
    return rc;
}

/* ---- loading ---- */

/* The whole file, at most PRESET_MAX_BYTES (a pipe or a device refused):
 * 0 with a malloc'd *text of *size bytes, or -1 with a message. */
static int read_preset(const char *path, unsigned char **text, size_t *size) {
    *text = NULL;
    FILE *f = pfl_read_open(path);
    if (!f) return -1;
    *text = pfl_malloc(PRESET_MAX_BYTES + 1);
    *size = *text ? fread(*text, 1, PRESET_MAX_BYTES + 1, f) : 0;
    const bool failed = ferror(f);
    fclose(f);
    if (!*text) return -1;
    if (!failed && *size <= PRESET_MAX_BYTES) return 0;
    free(*text);
    *text = NULL;
    if (failed) return pfl_err("%s: cannot read", path);
    return pfl_err("%s: larger than %d KiB, the most a preset may be (those of configs/ are under 10 KiB)", path,
                   PRESET_MAX_BYTES / 1024);
}

static int yaml_error(const yaml_parser_t *parser, const char *path) {
    return pfl_err("%s:%d: %s", path, (int)parser->problem_mark.line + 1, parser->problem ? parser->problem : "not YAML");
}

/* The anchor an event defines, or NULL. */
static const yaml_char_t *anchor_of(const yaml_event_t *e) {
    if (e->type == YAML_SCALAR_EVENT) return e->data.scalar.anchor;
    if (e->type == YAML_SEQUENCE_START_EVENT) return e->data.sequence_start.anchor;
    if (e->type == YAML_MAPPING_START_EVENT) return e->data.mapping_start.anchor;
    return NULL;
}

/* One pass over the file's events before libyaml builds its tree, which
 * keeps reading linear in the file's size: libyaml's scanner takes time
 * quadratic in the nesting (100,000 '[' took 24 s) and its loader in the
 * anchors, so both are bounded, and a second document, which the loader
 * would silently ignore, is refused. 0, or -1 with one line. */
static int check_events(const unsigned char *text, size_t size, const char *path) {
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) return pfl_err("%s: cannot start the YAML parser", path);
    yaml_parser_set_input_string(&parser, text, size);
    int depth = 0, documents = 0, anchors = 0, rc = 0;
    for (bool end = false; !end && rc == 0;) {
        yaml_event_t e;
        if (!yaml_parser_parse(&parser, &e)) {
            rc = yaml_error(&parser, path);
            break;
        }
        const int line = (int)e.start_mark.line + 1;
        end = e.type == YAML_STREAM_END_EVENT;
        if (e.type == YAML_DOCUMENT_START_EVENT && ++documents > 1)
            rc = pfl_err("%s:%d: a second YAML document: a preset is one document", path, line);
        else if ((e.type == YAML_SEQUENCE_START_EVENT || e.type == YAML_MAPPING_START_EVENT) && ++depth > PRESET_MAX_DEPTH)
            rc = pfl_err("%s:%d: nested deeper than %d levels (a preset needs 5)", path, line, PRESET_MAX_DEPTH);
        else if (e.type == YAML_SEQUENCE_END_EVENT || e.type == YAML_MAPPING_END_EVENT)
            depth--;
        else if (anchor_of(&e) && ++anchors > PRESET_MAX_ANCHORS)
            rc = pfl_err("%s:%d: more than %d anchors (&name), the most a preset may define", path, line,
                         PRESET_MAX_ANCHORS);
        yaml_event_delete(&e);
    }
    yaml_parser_delete(&parser);
    return rc;
}

int pfl_preset_load(pfl_preset *p, const char *path) {
    memset(p, 0, sizeof *p);
    p->runs = -1;
    if (!(p->path = copy(path))) return -1;
    unsigned char *text = NULL;
    size_t size = 0;
    if (read_preset(path, &text, &size) || check_events(text, size, path)) {
        free(text);
        pfl_preset_free(p);
        return -1;
    }
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) {
        free(text);
        pfl_preset_free(p);
        return pfl_err("%s: cannot start the YAML parser", path);
    }
    yaml_parser_set_input_string(&parser, text, size);
    int rc = -1;
    if (!yaml_parser_load(&parser, &doc)) {
        yaml_error(&parser, path);
        yaml_parser_delete(&parser);
        free(text);
        pfl_preset_free(p);
        return -1;
    }
    reader r = {&doc, path};
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root || root->type != YAML_MAPPING_NODE) {
        pfl_err("%s: not a preset (expected a mapping: paper, table, column, setting, cells, ...)", path);
        goto done;
    }
    if (check_keys(&r)) goto done;
    for (yaml_node_pair_t *pr = root->data.mapping.pairs.start; pr < root->data.mapping.pairs.top; pr++) {
        const yaml_node_t *k = node(&r, pr->key);
        if (k->type != YAML_SCALAR_NODE) {
            bad(&r, k, "top level", "expected a key");
            goto done;
        }
        if (get_top_key(&r, scalar(k), node(&r, pr->value), p)) goto done;
    }
    if (!p->paper || !p->table || !p->column || !p->cells) {
        pfl_err("%s: missing '%s' (configs/README.md, \"Schema\")", path,
                !p->paper ? "paper" : !p->table ? "table" : !p->column ? "column" : "cells");
        goto done;
    }
    rc = name_runs(p);
done:
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    free(text);
    if (rc) pfl_preset_free(p);
    return rc;
}

static void free_flags(pfl_preset_flags *f) {
    for (int i = 0; i < f->n; i++) free(f->at[i].key), free(f->at[i].value);
    free(f->at);
}

static void free_list(char **l) {
    for (int i = 0; l && l[i]; i++) free(l[i]);
    free(l);
}

void pfl_preset_free(pfl_preset *p) {
    for (int i = 0; i < p->num_cells; i++) {
        pfl_preset_cell *c = &p->cells[i];
        free(c->algo), free(c->label), free(c->metric), free(c->run), free(c->paper.mean_text);
        free_flags(&c->flags), free_flags(&c->assumed);
    }
    free(p->cells);
    free_flags(&p->setting), free_flags(&p->assumed), free_flags(&p->budget);
    free_list(p->pending_algos), free_list(p->pending_flags);
    free(p->path), free(p->paper), free(p->table), free(p->column), free(p->reported), free(p->metric), free(p->unit);
    memset(p, 0, sizeof *p);
}

/* ---- cells ---- */

static bool in_list(char **l, const char *s) {
    for (int i = 0; l && l[i]; i++)
        if (!strcmp(l[i], s)) return true;
    return false;
}

bool pfl_preset_pending_algo(const pfl_preset *p, const char *algo) { return in_list(p->pending_algos, algo); }
bool pfl_preset_pending_flag(const pfl_preset *p, const char *flag) { return in_list(p->pending_flags, flag); }

static void list_labels(const pfl_preset *p, const char *algo, char *buf, size_t size) {
    buf[0] = '\0';
    for (int i = 0; i < p->num_cells; i++)
        if (!algo || !strcmp(p->cells[i].algo, algo)) {
            const size_t len = strlen(buf);
            snprintf(buf + len, size - len, "%s'%s'", len ? ", " : "", p->cells[i].label);
        }
}

int pfl_preset_find_cell(const pfl_preset *p, const char *algo, const char *label) {
    char labels[2048];
    if (label) {
        for (int i = 0; i < p->num_cells; i++)
            if (!strcmp(p->cells[i].label, label)) {
                if (algo && strcmp(algo, p->cells[i].algo))
                    return pfl_err("%s: cell '%s' runs %s, not --algo %s", p->path, label, p->cells[i].algo, algo);
                return i;
            }
        list_labels(p, NULL, labels, sizeof labels);
        return pfl_err("%s: no cell labelled '%s' (cells: %s)", p->path, label, labels);
    }
    if (!algo) {
        list_labels(p, NULL, labels, sizeof labels);
        return pfl_err("%s: choose a cell with --algo NAME or --cell LABEL (cells: %s)", p->path, labels);
    }
    int found = -1;
    for (int i = 0; i < p->num_cells; i++) {
        if (strcmp(p->cells[i].algo, algo)) continue;
        if (found >= 0 && strcmp(p->cells[found].run, p->cells[i].run)) { /* a folder each way of running */
            list_labels(p, algo, labels, sizeof labels);
            return pfl_err("%s: several cells run %s differently: choose one with --cell LABEL (%s)", p->path, algo,
                           labels);
        }
        if (found < 0) found = i;
    }
    if (found < 0) {
        list_labels(p, NULL, labels, sizeof labels);
        return pfl_err("%s: no cell runs --algo %s (cells: %s)", p->path, algo, labels);
    }
    return found;
}

void pfl_preset_free_argv(char **argv, int argc) {
    for (int i = 0; argv && i < argc; i++) free(argv[i]);
    free(argv);
}

/* Appends "--key[=value]" to argv (a switch: "--key" when true, nothing when false). */
static int push_flag(char **argv, int *argc, const pfl_param *param, const char *key, const char *value) {
    char *text;
    if (param && param->type == PFL_PARAM_BOOL) {
        if (!strcmp(value, "false")) return 0;
        text = pfl_malloc(strlen(key) + 3);
        if (text) sprintf(text, "--%s", key);
    } else {
        text = pfl_malloc(strlen(key) + strlen(value) + 4);
        if (text) sprintf(text, "--%s=%s", key, value);
    }
    return text ? (argv[(*argc)++] = text, 0) : -1;
}

/* A flag value that stays null: where it came from and what to do. */
static int refuse_null(const pfl_preset *p, const composed *k) {
    if (!strncmp(k->where, "budget.", 7))
        return pfl_err("%s: %s is null (this machine's budget is not set): give --%s", p->path, k->where, k->key);
    return pfl_err("%s: %s is null (the paper does not give it) and nothing is assumed: give --%s", p->path, k->where,
                   k->key);
}

char **pfl_preset_argv(const pfl_preset *p, int cell, bool budget, int nargs, char **args, int *argc) {
    const pfl_preset_cell *c = &p->cells[cell];
    if (pfl_preset_pending_algo(p, c->algo)) {
        pfl_err("%s: cell '%s': --algo %s is not in pfl yet (the file marks it pending)", p->path, c->label, c->algo);
        return NULL;
    }
    const pfl_algo *algo = pfl_algo_find(c->algo);
    if (!algo) {
        pfl_err("%s: cell '%s': --algo %s is not a method of pfl (pfl run --help lists them)", p->path, c->label,
                c->algo);
        return NULL;
    }
    composition comp;
    if (compose(p, cell, budget, &comp)) return NULL;
    char **argv = pfl_calloc((size_t)(comp.n + nargs + 2), sizeof(char *));
    int n = 0;
    if (!argv || !(argv[n] = pfl_malloc(strlen(c->algo) + 8))) goto fail;
    sprintf(argv[n++], "--algo=%s", c->algo);
    for (int i = 0; i < comp.n; i++) {
        const composed *k = &comp.at[i];
        if (pfl_run_args_give(algo, nargs, args, k->key)) continue; /* the command line wins */
        if (!k->value) {
            refuse_null(p, k);
            goto fail;
        }
        if (pfl_preset_pending_flag(p, k->key)) {
            pfl_err("%s: cell '%s': --%s (%s) is not a flag of pfl yet (the file marks it pending)", p->path, c->label,
                    k->key, k->where);
            goto fail;
        }
        if (push_flag(argv, &n, pfl_run_param_named(algo, k->key, NULL), k->key, k->value)) goto fail;
    }
    for (int i = 0; i < nargs; i++)
        if (!(argv[n++] = copy(args[i]))) goto fail;
    free(comp.at);
    *argc = n;
    return argv;
fail:
    free(comp.at);
    pfl_preset_free_argv(argv, n);
    return NULL;
}

/* ---- checking a file ---- */

static int check_cell(const pfl_preset *p, int cell) {
    const pfl_preset_cell *c = &p->cells[cell];
    if (pfl_preset_pending_algo(p, c->algo)) {
        if (pfl_algo_find(c->algo))
            return pfl_err("%s: pending.algos lists %s, which pfl now has: remove the mark", p->path, c->algo);
        return 0; /* its flags are checked when the method arrives */
    }
    const pfl_algo *algo = pfl_algo_find(c->algo);
    if (!algo)
        return pfl_err("%s: cell '%s': --algo %s is not a method of pfl (mark it under pending.algos if it is to come)",
                       p->path, c->label, c->algo);
    composition comp;
    if (compose(p, cell, false, &comp)) return -1;
    char **argv = pfl_calloc((size_t)comp.n + 2, sizeof(char *));
    int n = 0, rc = -1;
    if (!argv || !(argv[n] = pfl_malloc(strlen(c->algo) + 8))) goto done;
    sprintf(argv[n++], "--algo=%s", c->algo);
    for (int i = 0; i < comp.n; i++) {
        const composed *k = &comp.at[i];
        const pfl_param *param = pfl_run_param_named(algo, k->key, NULL);
        if (pfl_preset_pending_flag(p, k->key)) {
            if (param) {
                pfl_err("%s: pending.flags lists %s, which %s now takes: remove the mark", p->path, k->key, c->algo);
                goto done;
            }
            continue;
        }
        if (!param) {
            pfl_err("%s: cell '%s': %s: --%s is not a flag of %s (mark it under pending.flags if it is to come)",
                    p->path, c->label, k->where, k->key, c->algo);
            goto done;
        }
        if (k->value && push_flag(argv, &n, param, k->key, k->value)) goto done;
    }
    pfl_run_options o;
    if (pfl_run_options_parse(&o, n, argv, false)) {
        char why[512];
        snprintf(why, sizeof why, "%s", pfl_errmsg());
        pfl_err("%s: cell '%s': %s", p->path, c->label, why);
        goto done;
    }
    rc = 0;
done:
    free(comp.at);
    pfl_preset_free_argv(argv, n);
    return rc;
}

int pfl_preset_check(const pfl_preset *p) {
    for (int i = 0; i < p->num_cells; i++)
        if (check_cell(p, i)) return -1;
    for (int i = 0; p->pending_algos && p->pending_algos[i]; i++) {
        int k = 0;
        while (k < p->num_cells && strcmp(p->cells[k].algo, p->pending_algos[i])) k++;
        if (k == p->num_cells) return pfl_err("%s: pending.algos lists %s, which no cell runs", p->path, p->pending_algos[i]);
    }
    return 0;
}
