/* The pickle inside a PFLlib client file's data.npy (data.h, "PFLlib
 * folders"): numpy's pickle of a 0-d object array holding the dict
 * {'x': ndarray, 'y': ndarray}.
 *
 * A small stack machine reads it, never running anything a file names: it
 * knows the opcodes such a pickle uses (protocol 2 to 4: numpy's np.save
 * writes protocol 3, NumPy 2 may write 4 with frames and STACK_GLOBAL) and
 * three globals, whose calls it carries out itself:
 *   _reconstruct(ndarray, (0,), b'b')   an empty array, then BUILD (1, shape, dtype, fortran, data)
 *   dtype(code, False, True)            a dtype, then BUILD (3, order, None, None, None, -1, -1, flags)
 * Every other opcode, global, call or state is refused in one line naming
 * the byte. Values live on a stack of small tagged cells (ints, bools and
 * the bytes of strings stay in the file's buffer); tuples, lists, dicts,
 * dtypes and arrays in a table the cells index. Every array the machine
 * grows grows by the opcodes it reads (each at least one byte), and the
 * total is capped at a fixed multiple of the pickle's size. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/npz.h"
#include "util/err.h"

enum { K_NONE, K_BOOL, K_INT, K_STR, K_BYTES, K_MARK, K_GLOBAL, K_OBJ };
enum { O_TUPLE, O_LIST, O_DICT, O_DTYPE, O_ARRAY };
enum { G_RECONSTRUCT, G_NDARRAY, G_DTYPE };
enum { T_OBJECT = PFL_NPY_U1 + 1 }; /* numpy's 'O8' beside the numeric types */
/* the pickle's own budget: cells and tables, per byte of pickle */
enum { BYTES_PER_PICKLE_BYTE = 512, BASE_BUDGET = 1 << 20 };

typedef struct {
    uint8_t kind;
    int64_t i;        /* INT, BOOL: the value; STR, BYTES: the length; GLOBAL: which; OBJ: its index */
    const uint8_t *p; /* STR, BYTES: the bytes, in the pickle */
} cell;

typedef struct {
    uint8_t kind;     /* O_* */
    bool built;       /* DTYPE, ARRAY: BUILD gave its state */
    int type;         /* DTYPE: pfl_npy_type or T_OBJECT; ARRAY: its elements' */
    cell *items;      /* TUPLE, LIST: the items; DICT: key, value, key, value, ... */
    size_t n, cap;
    int ndim;         /* ARRAY */
    long long shape[PFL_NPY_MAX_DIMS], count;
    cell data;        /* ARRAY: BYTES (numeric) or the OBJ of a LIST (object arrays) */
} object;

typedef struct {
    const npz_source *src;
    const uint8_t *buf;
    size_t size, at, op_at; /* the pickle, the next byte, where the opcode being run started */
    cell *stack, *memo;
    size_t sn, scap, mn, mcap;
    object *objs;
    size_t on, ocap;
    size_t used, budget;    /* bytes the machine holds, and the most it may */
    long long ints_read;    /* integers the pickle spelled out (text rows may not hold more) */
    const char *field;      /* "x" or "y" once that key is read (the array after it is that field), else "pickle" */
} machine;

int pfl_npz_fail(const npz_source *src, const char *field, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return pfl_err("%s: %s: %s: %s", src->what, src->path, field, msg);
}

static int fail(machine *m, const char *fmt, ...) PFL_PRINTF(2, 3);
static int fail(machine *m, const char *fmt, ...) {
    char msg[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return pfl_npz_fail(m->src, m->field, "%s (pickle opcode at byte %zu)", msg, m->op_at);
}

/* Room for `need` elements in *arr (capacity *cap), within the budget. */
static int grow(machine *m, void **arr, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t n = *cap ? *cap : 4;
    while (n < need) n *= 2;
    const size_t add = (n - *cap) * elem;
    if (add > m->budget - m->used) return fail(m, "more values than a pickle of %zu bytes can hold", m->size);
    void *p = realloc(*arr, n * elem);
    if (!p) return fail(m, "out of memory");
    *arr = p, *cap = n, m->used += add;
    return 0;
}

static int push(machine *m, cell c) {
    if (grow(m, (void **)&m->stack, &m->scap, m->sn + 1, sizeof(cell))) return -1;
    m->stack[m->sn++] = c;
    return 0;
}

static int pop(machine *m, cell *c) {
    if (m->sn == 0 || m->stack[m->sn - 1].kind == K_MARK) return fail(m, "a value is missing from the stack");
    *c = m->stack[--m->sn];
    return 0;
}

/* The cells above the last MARK, [*first, sn), and that MARK removed. */
static int to_mark(machine *m, size_t *first, size_t *n) {
    size_t k = m->sn;
    while (k > 0 && m->stack[k - 1].kind != K_MARK) k--;
    if (k == 0) return fail(m, "no MARK on the stack");
    *first = k, *n = m->sn - k;
    return 0;
}

static int new_object(machine *m, int kind, cell *out) {
    if (grow(m, (void **)&m->objs, &m->ocap, m->on + 1, sizeof(object))) return -1;
    memset(&m->objs[m->on], 0, sizeof(object));
    m->objs[m->on].kind = (uint8_t)kind;
    *out = (cell){K_OBJ, (int64_t)m->on++, NULL};
    return 0;
}

static object *obj(machine *m, cell c, int kind) {
    return c.kind == K_OBJ && m->objs[c.i].kind == kind ? &m->objs[c.i] : NULL;
}

/* Appends cells[0..n) (a copy: they may be the stack's) to object index o. */
static int add_items(machine *m, size_t o, const cell *cells, size_t n) {
    if (n == 0) return 0; /* an empty tuple keeps no items array */
    if (grow(m, (void **)&m->objs[o].items, &m->objs[o].cap, m->objs[o].n + n, sizeof(cell))) return -1;
    memmove(m->objs[o].items + m->objs[o].n, cells, n * sizeof(cell));
    m->objs[o].n += n;
    return 0;
}

/* A tuple of the n cells from stack index `first`, which replaces the
 * stack from index `from` up (the cells, and their MARK when from < first). */
static int make_tuple(machine *m, size_t first, size_t n, size_t from) {
    cell t = {0};
    if (new_object(m, O_TUPLE, &t) || add_items(m, (size_t)t.i, n ? m->stack + first : NULL, n)) return -1;
    m->sn = from;
    return push(m, t);
}

/* ---- reading operands ---- */

static int need(machine *m, uint64_t n) {
    if (n > m->size - m->at)
        return fail(m, "needs %llu more bytes, %zu are left (truncated?)", (unsigned long long)n, m->size - m->at);
    return 0;
}

static uint64_t take_le(machine *m, int n) {
    uint64_t v = 0;
    for (int k = 0; k < n; k++) v |= (uint64_t)m->buf[m->at + (size_t)k] << (8 * k);
    m->at += (size_t)n;
    return v;
}

static bool is_text(cell c, const char *s) {
    return c.kind == K_STR && (size_t)c.i == strlen(s) && !memcmp(c.p, s, (size_t)c.i);
}

/* A length of `width` bytes, then that many bytes: a string or bytes cell. */
static int push_counted(machine *m, int width, int kind) {
    if (need(m, (uint64_t)width)) return -1;
    const uint64_t n = take_le(m, width);
    if (need(m, n)) return -1;
    const cell c = {(uint8_t)kind, (int64_t)n, m->buf + m->at};
    m->at += (size_t)n;
    if (is_text(c, "x") || is_text(c, "y")) m->field = is_text(c, "x") ? "x" : "y"; /* the key of what follows */
    return push(m, c);
}

/* An integer of n bytes, little-endian (signed: two's complement). */
static int push_int(machine *m, int n, bool is_signed) {
    if (need(m, (uint64_t)n)) return -1;
    uint64_t v = take_le(m, n);
    if (is_signed && n > 0 && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~0ULL << (8 * n);
    m->ints_read++;
    return push(m, (cell){K_INT, (int64_t)v, NULL});
}

static int push_long1(machine *m) {
    if (need(m, 1)) return -1;
    const int n = m->buf[m->at++];
    if (n > 8) return fail(m, "an integer of %d bytes, beyond 64 bits", n);
    return push_int(m, n, true);
}

/* ---- globals ---- */


static int push_global(machine *m, cell module, cell name) {
    int which = -1;
    if ((is_text(module, "numpy.core.multiarray") || is_text(module, "numpy._core.multiarray")) &&
        is_text(name, "_reconstruct"))
        which = G_RECONSTRUCT;
    else if (is_text(module, "numpy") && is_text(name, "ndarray"))
        which = G_NDARRAY;
    else if (is_text(module, "numpy") && is_text(name, "dtype"))
        which = G_DTYPE;
    if (which < 0) {
        char a[64], b[64]; /* a few bytes each: the message stays one short line */
        pfl_quote(a, sizeof a, module.p, module.kind == K_STR ? (size_t)module.i : 0, 12);
        pfl_quote(b, sizeof b, name.p, name.kind == K_STR ? (size_t)name.i : 0, 12);
        return fail(m, "global %s.%s refused (only numpy's _reconstruct, ndarray, dtype: nothing is run)", a, b);
    }
    return push(m, (cell){K_GLOBAL, which, NULL});
}

/* GLOBAL: "module\nname\n". */
static int read_line(machine *m, cell *c) {
    const uint8_t *nl = memchr(m->buf + m->at, '\n', m->size - m->at);
    if (!nl) return fail(m, "GLOBAL's name is not ended by a newline");
    *c = (cell){K_STR, nl - (m->buf + m->at), m->buf + m->at};
    m->at = (size_t)(nl - m->buf) + 1;
    return 0;
}

static int op_global(machine *m) {
    cell module = {0}, name = {0};
    return read_line(m, &module) || read_line(m, &name) ? -1 : push_global(m, module, name);
}

static int op_stack_global(machine *m) {
    cell module = {0}, name = {0};
    if (pop(m, &name) || pop(m, &module)) return -1;
    if (module.kind != K_STR || name.kind != K_STR) return fail(m, "STACK_GLOBAL needs two strings");
    return push_global(m, module, name);
}

/* ---- the memo ---- */

static int memo_put(machine *m, uint64_t index) {
    if (m->sn == 0 || m->stack[m->sn - 1].kind == K_MARK) return fail(m, "nothing to memoize");
    if (index > m->mn) return fail(m, "memo index %llu skips ahead of the %zu stored", (unsigned long long)index, m->mn);
    if (index == m->mn && grow(m, (void **)&m->memo, &m->mcap, ++m->mn, sizeof(cell))) return -1;
    m->memo[index] = m->stack[m->sn - 1];
    return 0;
}

static int memo_get(machine *m, uint64_t index) {
    if (index >= m->mn) return fail(m, "memo index %llu was never stored", (unsigned long long)index);
    return push(m, m->memo[index]);
}

/* ---- numpy's calls and states ---- */

static int dtype_of(const cell *code) {
    static const struct { const char *code; int type; } known[] = {
        {"f4", PFL_NPY_F4}, {"f8", PFL_NPY_F8}, {"i8", PFL_NPY_I8}, {"i4", PFL_NPY_I4}, {"u1", PFL_NPY_U1},
        {"O8", T_OBJECT}};
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
        if (is_text(*code, known[k].code)) return known[k].type;
    return -1;
}

static size_t item_size(int type) {
    return type == PFL_NPY_F8 || type == PFL_NPY_I8 ? 8 : type == PFL_NPY_U1 ? 1 : 4;
}

static int op_reduce(machine *m) {
    cell args = {0}, fn = {0}, made = {0};
    if (pop(m, &args) || pop(m, &fn)) return -1;
    const object *a = obj(m, args, O_TUPLE);
    if (fn.kind != K_GLOBAL || !a) return fail(m, "REDUCE of something other than numpy's calls");
    if (fn.i == G_RECONSTRUCT) {
        const object *shape = a->n == 3 ? obj(m, a->items[1], O_TUPLE) : NULL;
        if (!shape || a->items[0].kind != K_GLOBAL || a->items[0].i != G_NDARRAY || shape->n != 1 ||
            shape->items[0].kind != K_INT || shape->items[0].i != 0 || a->items[2].kind != K_BYTES ||
            a->items[2].i != 1 || a->items[2].p[0] != 'b')
            return fail(m, "_reconstruct called other than as _reconstruct(ndarray, (0,), b'b')");
        if (new_object(m, O_ARRAY, &made)) return -1;
    } else if (fn.i == G_DTYPE) {
        if (a->n != 3 || a->items[0].kind != K_STR || a->items[1].kind != K_BOOL || a->items[2].kind != K_BOOL)
            return fail(m, "dtype called other than as dtype(code, False, True)");
        const int type = dtype_of(&a->items[0]);
        if (type < 0) {
            char code[40];
            return fail(m, "dtype '%s' refused: pfl reads float32 (f4), float64 (f8), int64 (i8), int32 (i4), uint8 "
                        "(u1) and object (O8) arrays",
                        pfl_quote(code, sizeof code, a->items[0].p, (size_t)a->items[0].i, 12));
        }
        if (new_object(m, O_DTYPE, &made)) return -1;
        m->objs[made.i].type = type;
    } else {
        return fail(m, "REDUCE of ndarray itself (numpy calls _reconstruct)");
    }
    return push(m, made);
}

/* dtype state (3, order, None, None, None, -1, -1, flags), or NumPy's
 * version 4 with its metadata last: little-endian or not applicable only. */
static int build_dtype(machine *m, object *d, const object *s) {
    if (d->built) return fail(m, "BUILD of a dtype twice");
    const int version = s->n > 0 && s->items[0].kind == K_INT ? (int)s->items[0].i : -1;
    if (!((version == 3 && s->n == 8) || (version == 4 && s->n == 9)) || s->items[1].kind != K_STR)
        return fail(m, "a dtype state other than numpy's (3, order, ...)");
    const bool one_byte = d->type == PFL_NPY_U1 || d->type == T_OBJECT;
    if (!is_text(s->items[1], one_byte ? "|" : "<")) {
        char order[16];
        pfl_quote(order, sizeof order, s->items[1].p, (size_t)s->items[1].i, 4);
        return fail(m, "byte order '%s' refused: expected '%s'%s", order, one_byte ? "|" : "<",
                    is_text(s->items[1], ">") ? " (a big-endian array)" : "");
    }
    d->built = true;
    return 0;
}

/* The product of the shape, refused when it exceeds `most` (what the data
 * can hold), before it could overflow; the message gives the whole shape. */
static int shape_count(machine *m, object *a, const object *shape, long long most) {
    if (shape->n > PFL_NPY_MAX_DIMS) return fail(m, "an array of %zu dimensions (at most %d)", shape->n, PFL_NPY_MAX_DIMS);
    for (size_t k = 0; k < shape->n; k++)
        if (shape->items[k].kind != K_INT || shape->items[k].i < 0)
            return fail(m, "an array dimension that is not a count");
    long long count = 1;
    for (size_t k = 0; k < shape->n; k++) {
        const long long d = shape->items[k].i;
        a->shape[k] = d;
        if (d && count > most / d) {
            char dims[PFL_NPY_MAX_DIMS * 22 + 4] = "(";
            for (size_t i = 0; i < shape->n; i++)
                snprintf(dims + strlen(dims), sizeof dims - strlen(dims), "%s%lld", i ? ", " : "",
                         (long long)shape->items[i].i);
            strcat(dims, ")");
            return fail(m, "an array of shape %s, more elements than its data's %lld hold", dims, most);
        }
        count *= d;
    }
    a->ndim = (int)shape->n, a->count = count;
    return 0;
}

/* ndarray state (1, shape, dtype, fortran, data): data the raw bytes of a
 * numeric array, a list of the items of an object array. */
static int build_array(machine *m, object *a, const object *s) {
    if (a->built) return fail(m, "BUILD of an array twice");
    const object *shape = s->n == 5 ? obj(m, s->items[1], O_TUPLE) : NULL;
    const object *dtype = s->n == 5 ? obj(m, s->items[2], O_DTYPE) : NULL;
    if (!shape || !dtype || s->items[0].kind != K_INT || s->items[0].i != 1 || s->items[3].kind != K_BOOL)
        return fail(m, "an array state other than numpy's (1, shape, dtype, fortran, data)");
    if (!dtype->built) return fail(m, "an array of a dtype whose state was never given");
    if (s->items[3].i) return fail(m, "a Fortran-order array (pfl reads C order)");
    const cell data = s->items[4];
    a->type = dtype->type;
    if (a->type == T_OBJECT) {
        const object *list = obj(m, data, O_LIST);
        if (!list) return fail(m, "an object array whose items are not a list");
        if (shape_count(m, a, shape, (long long)list->n)) return -1;
        if ((size_t)a->count != list->n) return fail(m, "an object array of %lld items holding %zu", a->count, list->n);
    } else {
        if (data.kind != K_BYTES) return fail(m, "a numeric array whose data are not bytes");
        const long long size = (long long)item_size(a->type);
        if (shape_count(m, a, shape, data.i / size)) return -1;
        if (a->count * size != data.i)
            return fail(m, "an array of %lld elements of %lld bytes with %lld bytes of data", a->count, size, (long long)data.i);
    }
    a->data = data;
    a->built = true;
    return 0;
}

static int op_build(machine *m) {
    cell state = {0};
    if (pop(m, &state) || m->sn == 0) return fail(m, "BUILD without an object");
    const object *s = obj(m, state, O_TUPLE);
    const cell target = m->stack[m->sn - 1];
    object *d = obj(m, target, O_DTYPE), *a = obj(m, target, O_ARRAY);
    if (!s || (!d && !a)) return fail(m, "BUILD of something other than a dtype or an array");
    return d ? build_dtype(m, d, s) : build_array(m, a, s);
}

/* ---- containers ---- */

static int op_append(machine *m, bool many) {
    size_t first = 0, n = 0;
    if (many) {
        if (to_mark(m, &first, &n)) return -1;
    } else {
        first = m->sn - 1, n = 1;
        if (m->sn < 2 || m->stack[first].kind == K_MARK) return fail(m, "APPEND without a value");
    }
    if (first == 0 || (many && first < 2) || !obj(m, m->stack[first - 1 - many], O_LIST))
        return fail(m, "APPEND%s to something other than a list", many ? "S" : "");
    if (add_items(m, (size_t)m->stack[first - 1 - many].i, m->stack + first, n)) return -1;
    m->sn = first - many; /* the items and their MARK */
    return 0;
}

static int op_setitems(machine *m, bool many) {
    size_t first = 0, n = 0;
    if (many) {
        if (to_mark(m, &first, &n)) return -1;
    } else {
        first = m->sn >= 2 ? m->sn - 2 : 0, n = 2;
        if (m->sn < 3 || m->stack[first].kind == K_MARK || m->stack[first + 1].kind == K_MARK)
            return fail(m, "SETITEM without a key and a value");
    }
    if (n % 2) return fail(m, "SETITEMS with a key and no value");
    if (first == 0 || (many && first < 2) || !obj(m, m->stack[first - 1 - many], O_DICT))
        return fail(m, "SETITEM%s on something other than a dict", many ? "S" : "");
    if (add_items(m, (size_t)m->stack[first - 1 - many].i, m->stack + first, n)) return -1;
    m->sn = first - many;
    return 0;
}

static int op_tuple(machine *m, int n) {
    if (n < 0) {
        size_t first = 0, count = 0;
        return to_mark(m, &first, &count) ? -1 : make_tuple(m, first, count, first - 1);
    }
    if (m->sn < (size_t)n) return fail(m, "TUPLE%d with fewer values on the stack", n);
    for (size_t k = m->sn - (size_t)n; k < m->sn; k++)
        if (m->stack[k].kind == K_MARK) return fail(m, "a MARK inside TUPLE%d", n);
    return make_tuple(m, m->sn - (size_t)n, (size_t)n, m->sn - (size_t)n);
}

/* ---- the loop ---- */

enum {
    OP_MARK = '(', OP_STOP = '.', OP_BININT = 'J', OP_BININT1 = 'K', OP_BININT2 = 'M', OP_NONE = 'N',
    OP_BINUNICODE = 'X', OP_BINBYTES = 'B', OP_SHORT_BINBYTES = 'C', OP_REDUCE = 'R', OP_APPEND = 'a',
    OP_BUILD = 'b', OP_GLOBAL = 'c', OP_APPENDS = 'e', OP_BINGET = 'h', OP_LONG_BINGET = 'j', OP_BINPUT = 'q',
    OP_LONG_BINPUT = 'r', OP_SETITEM = 's', OP_TUPLE = 't', OP_SETITEMS = 'u', OP_EMPTY_DICT = '}',
    OP_EMPTY_LIST = ']', OP_EMPTY_TUPLE = ')', OP_PROTO = 0x80, OP_TUPLE1 = 0x85, OP_TUPLE2 = 0x86,
    OP_TUPLE3 = 0x87, OP_NEWTRUE = 0x88, OP_NEWFALSE = 0x89, OP_LONG1 = 0x8a, OP_SHORT_BINUNICODE = 0x8c,
    OP_BINUNICODE8 = 0x8d, OP_BINBYTES8 = 0x8e, OP_STACK_GLOBAL = 0x93, OP_MEMOIZE = 0x94, OP_FRAME = 0x95
};

static int op_proto(machine *m) {
    if (need(m, 1)) return -1;
    const int v = m->buf[m->at++];
    if (v < 2 || v > 5) return fail(m, "pickle protocol %d (numpy's are 2 to 5)", v);
    return 0;
}

/* FRAME only says how the writer buffered the bytes that follow. */
static int op_frame(machine *m) {
    if (need(m, 8)) return -1;
    const uint64_t n = take_le(m, 8);
    return n > m->size - m->at ? fail(m, "a frame of %llu bytes, more than are left", (unsigned long long)n) : 0;
}

static int op_index(machine *m, int width, bool put) {
    if (need(m, (uint64_t)width)) return -1;
    const uint64_t index = take_le(m, width);
    return put ? memo_put(m, index) : memo_get(m, index);
}

static int op_new(machine *m, int kind) {
    cell c = {0};
    return new_object(m, kind, &c) ? -1 : push(m, c);
}

static int step(machine *m, int op) {
    switch (op) {
    case OP_PROTO: return op_proto(m);
    case OP_FRAME: return op_frame(m);
    case OP_MARK: return push(m, (cell){K_MARK, 0, NULL});
    case OP_GLOBAL: return op_global(m);
    case OP_STACK_GLOBAL: return op_stack_global(m);
    case OP_BINPUT: return op_index(m, 1, true);
    case OP_LONG_BINPUT: return op_index(m, 4, true);
    case OP_MEMOIZE: return memo_put(m, m->mn);
    case OP_BINGET: return op_index(m, 1, false);
    case OP_LONG_BINGET: return op_index(m, 4, false);
    case OP_NONE: return push(m, (cell){K_NONE, 0, NULL});
    case OP_NEWTRUE: return push(m, (cell){K_BOOL, 1, NULL});
    case OP_NEWFALSE: return push(m, (cell){K_BOOL, 0, NULL});
    case OP_BININT1: return push_int(m, 1, false);
    case OP_BININT2: return push_int(m, 2, false);
    case OP_BININT: return push_int(m, 4, true);
    case OP_LONG1: return push_long1(m);
    case OP_SHORT_BINUNICODE: return push_counted(m, 1, K_STR);
    case OP_BINUNICODE: return push_counted(m, 4, K_STR);
    case OP_BINUNICODE8: return push_counted(m, 8, K_STR);
    case OP_SHORT_BINBYTES: return push_counted(m, 1, K_BYTES);
    case OP_BINBYTES: return push_counted(m, 4, K_BYTES);
    case OP_BINBYTES8: return push_counted(m, 8, K_BYTES);
    case OP_EMPTY_TUPLE: return op_tuple(m, 0);
    case OP_TUPLE1: return op_tuple(m, 1);
    case OP_TUPLE2: return op_tuple(m, 2);
    case OP_TUPLE3: return op_tuple(m, 3);
    case OP_TUPLE: return op_tuple(m, -1);
    case OP_EMPTY_LIST: return op_new(m, O_LIST);
    case OP_APPEND: return op_append(m, false);
    case OP_APPENDS: return op_append(m, true);
    case OP_EMPTY_DICT: return op_new(m, O_DICT);
    case OP_SETITEM: return op_setitems(m, false);
    case OP_SETITEMS: return op_setitems(m, true);
    case OP_REDUCE: return op_reduce(m);
    case OP_BUILD: return op_build(m);
    default: break;
    }
    if (op >= 0x20 && op < 0x7f) return fail(m, "opcode '%c' (0x%02x) refused: not one numpy's pickles use here", op, op);
    return fail(m, "opcode 0x%02x refused: not one numpy's pickles use here", op);
}

static int run(machine *m, cell *result) {
    while (m->at < m->size) {
        m->op_at = m->at;
        const int op = m->buf[m->at++];
        if (op == OP_STOP) {
            if (pop(m, result)) return -1;
            if (m->sn) return fail(m, "STOP leaves %zu values on the stack", m->sn);
            if (m->at != m->size) return fail(m, "%zu bytes after STOP", m->size - m->at);
            return 0;
        }
        if (step(m, op)) return -1;
    }
    m->op_at = m->size;
    return fail(m, "ends without STOP (truncated?)");
}

/* ---- the dict PFLlib saved ---- */

static int numeric_array(machine *m, const char *field, cell c, pfl_npy_array *out) {
    const object *a = obj(m, c, O_ARRAY);
    if (!a || !a->built) return pfl_npz_fail(m->src, field, "not a numpy array");
    if (a->type == T_OBJECT) return pfl_npz_fail(m->src, field, "an object array, expected numbers");
    if (a->ndim < 1) return pfl_npz_fail(m->src, field, "a 0-d array, expected one row per sample");
    out->type = (pfl_npy_type)a->type, out->ndim = a->ndim, out->count = a->count, out->data = a->data.p;
    memcpy(out->shape, a->shape, sizeof out->shape);
    return 0;
}

/* PFLlib's text rows: an N x 2 object array of (token list, length). */
static int text_rows(machine *m, const object *a, pfl_npz_xy *out) {
    if (a->ndim != 2 || a->shape[1] != 2)
        return pfl_npz_fail(m->src, "x", "an object array of shape other than N x 2 (PFLlib's text rows: tokens, length)");
    const object *items = &m->objs[a->data.i];
    const long long rows = a->shape[0];
    long long len = -1, total = 0;
    for (long long r = 0; r < rows; r++) {
        const cell t = items->items[2 * r], n = items->items[2 * r + 1];
        const object *tokens = obj(m, t, O_LIST) ? obj(m, t, O_LIST) : obj(m, t, O_TUPLE);
        if (!tokens || n.kind != K_INT)
            return pfl_npz_fail(m->src, "x", "row %lld is not (a list of token ids, a length)", r);
        if (len >= 0 && (long long)tokens->n != len)
            return pfl_npz_fail(m->src, "x", "row %lld holds %zu tokens, row 0 %lld (PFLlib pads rows to one length)", r,
                            tokens->n, len);
        len = (long long)tokens->n;
        total += len;
        if (total > m->ints_read) /* rows that share one list would allocate more than the file spelled out */
            return pfl_npz_fail(m->src, "x", "%lld rows of %lld tokens: more ids than the pickle's %lld integers", rows,
                            len, m->ints_read);
    }
    out->rows = rows, out->row_len = len < 0 ? 0 : len;
    out->tokens = pfl_malloc(sizeof(int64_t) * (size_t)(total ? total : 1));
    out->lengths = pfl_malloc(sizeof(int64_t) * (size_t)(rows ? rows : 1));
    if (!out->tokens || !out->lengths) return -1;
    for (long long r = 0; r < rows; r++) {
        const object *tokens = &m->objs[items->items[2 * r].i];
        for (long long j = 0; j < len; j++) {
            const cell id = tokens->items[j];
            if (id.kind != K_INT) return pfl_npz_fail(m->src, "x", "row %lld, token %lld is not an integer", r, j);
            out->tokens[r * len + j] = id.i;
        }
        out->lengths[r] = items->items[2 * r + 1].i;
    }
    return 0;
}

/* The result: a 0-d object array whose one item is a dict with 'x' and 'y'. */
static int take_xy(machine *m, cell top, pfl_npz_xy *out) {
    const object *outer = obj(m, top, O_ARRAY);
    if (!outer || !outer->built || outer->type != T_OBJECT || outer->ndim != 0)
        return pfl_npz_fail(m->src, "pickle", "not a 0-d object array (what np.savez makes of PFLlib's dict)");
    const object *list = &m->objs[outer->data.i];
    const object *dict = list->n == 1 ? obj(m, list->items[0], O_DICT) : NULL;
    if (!dict) return pfl_npz_fail(m->src, "pickle", "the array does not hold a dict");
    cell x = {K_NONE, 0, NULL}, y = x;
    for (size_t k = 0; k + 1 < dict->n; k += 2) {
        cell *slot = is_text(dict->items[k], "x") ? &x : is_text(dict->items[k], "y") ? &y : NULL;
        if (slot && slot->kind != K_NONE) return pfl_npz_fail(m->src, "pickle", "the dict holds a key twice");
        if (slot) *slot = dict->items[k + 1];
    }
    if (x.kind == K_NONE || y.kind == K_NONE)
        return pfl_npz_fail(m->src, "pickle", "the dict lacks '%s' (PFLlib's files hold 'x' and 'y')", x.kind == K_NONE ? "x" : "y");
    if (numeric_array(m, "y", y, &out->y)) return -1;
    const object *xa = obj(m, x, O_ARRAY);
    if (xa && xa->built && xa->type == T_OBJECT) return text_rows(m, xa, out);
    return numeric_array(m, "x", x, &out->x);
}

int pfl_npz_unpickle_xy(const npz_source *src, const uint8_t *npy, size_t size, pfl_npz_xy *out) {
    machine m = {.src = src, .buf = npy, .size = size, .field = "pickle"};
    m.budget = size > (SIZE_MAX - BASE_BUDGET) / BYTES_PER_PICKLE_BYTE ? SIZE_MAX : size * BYTES_PER_PICKLE_BYTE + BASE_BUDGET;
    cell top = {0};
    int rc = run(&m, &top) || take_xy(&m, top, out) ? -1 : 0;
    for (size_t k = 0; k < m.on; k++) free(m.objs[k].items);
    free(m.objs);
    free(m.stack);
    free(m.memo);
    return rc;
}
