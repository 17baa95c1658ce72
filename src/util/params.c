#include "util/params.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"
#include "util/json.h"

/* "auto" is held as a value no bounds admit: INT_MIN, or NaN. */
#define AUTO_INT INT_MIN

double pfl_param_store_get(const pfl_param_store *s, const char *name) {
    for (int i = 0; i < s->count; i++)
        if (!strcmp(s->name[i], name)) return s->value[i];
    return NAN;
}

int pfl_param_store_set(pfl_param_store *s, const char *name, double value) {
    for (int i = 0; i < s->count; i++)
        if (!strcmp(s->name[i], name)) return s->value[i] = value, 0;
    if (strlen(name) >= sizeof s->name[0]) return pfl_err("--%s: name too long for a parameter store", name);
    if (s->count == PFL_MAX_EXTRA_PARAMS)
        return pfl_err("--%s: more than %d parameters of a registered method", name, PFL_MAX_EXTRA_PARAMS);
    snprintf(s->name[s->count], sizeof s->name[0], "%s", name);
    s->value[s->count++] = value;
    return 0;
}

bool pfl_selection_is_count(const char *text) {
    if (!*text) return false;
    for (const char *c = text; *c; c++)
        if (!isdigit((unsigned char)*c)) return false;
    return true;
}

/* Characters of PyTorch module names, and the one wildcard. */
static bool name_char(char c) { return isalnum((unsigned char)c) || c == '_' || c == '.' || c == '-'; }

/* The item text[0, len) as written: names, or a prefix with a final '*'. */
static int check_item(const char *flag, const char *text, const char *item, size_t len) {
    if (len == 0) return pfl_err("--%s '%s': an empty name (names are separated by single commas)", flag, text);
    for (size_t k = 0; k < len; k++) {
        if (item[k] == '*' && k == len - 1 && len > 1) continue;
        if (item[k] == '*')
            return pfl_err("--%s '%s': '*' may only end a name (a prefix such as layer4.*)", flag, text);
        if (!name_char(item[k]))
            return pfl_err("--%s '%s': '%c' is not a character of a tensor name (give a count or names such as "
                           "fc or layer4.*)",
                           flag, text, item[k]);
    }
    return 0;
}

int pfl_selection_check(const char *flag, const char *text) {
    if (!*text) return pfl_err("--%s: empty value (a count or names such as fc or layer4.*)", flag);
    if (pfl_selection_is_count(text)) return 0;
    for (const char *item = text;;) {
        const size_t len = strcspn(item, ",");
        if (check_item(flag, text, item, len)) return -1;
        if (!item[len]) return 0;
        item += len + 1;
    }
}

const char *pfl_layer_spec(const pfl_layer_specs *s, const char *name) {
    for (int i = 0; s && i < s->count; i++)
        if (!strcmp(s->name[i], name)) return s->text[i][0] ? s->text[i] : NULL;
    return NULL;
}

/* Keeps the text given to a layer count (the last one given wins). */
static int keep_layer_spec(const pfl_param *p, const pfl_param_blocks *b, const char *text) {
    pfl_layer_specs *s = b->layer_specs;
    if (!s) return 0;
    int i = 0;
    while (i < s->count && strcmp(s->name[i], p->name)) i++;
    if (!text) { /* forget it */
        if (i < s->count) s->text[i][0] = '\0';
        return 0;
    }
    if (i == PFL_MAX_LAYER_SPECS) return pfl_err("--%s: too many layer selections", p->name);
    if (strlen(text) >= sizeof s->text[0] || strlen(p->name) >= sizeof s->name[0])
        return pfl_err("--%s: selection longer than %zu characters", p->name, sizeof s->text[0] - 1);
    snprintf(s->name[i], sizeof s->name[0], "%s", p->name);
    snprintf(s->text[i], sizeof s->text[0], "%s", text);
    if (i == s->count) s->count++;
    return 0;
}

/* A layer count given as names: its form is checked now, its meaning once
 * the model is known; the number keeps its default until then. */
static int parse_layer_names(const pfl_param *p, const pfl_param_blocks *b, const char *text) {
    if (!b->layer_specs)
        return pfl_err("--%s: '%s' is not a number (names of layers are taken by pfl run only)", p->name, text);
    if (pfl_selection_check(p->name, text)) return -1;
    return keep_layer_spec(p, b, text);
}

int pfl_parse_number(const char *name, const char *text, bool whole, double min, double max, bool min_exclusive,
                     double *out) {
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end != '\0' || errno == ERANGE || !isfinite(v))
        return pfl_err("--%s: '%s' is not a number", name, text);
    if (whole && v != floor(v)) return pfl_err("--%s: '%s' is not a whole number", name, text);
    bool low_ok = min_exclusive ? v > min : v >= min;
    if (!low_ok || v > max) {
        if (max >= 1e15 && v > max) /* a bound that large reads better whole */
            return pfl_err("--%s: %s is out of range (must be at most %.0f)", name, text, max);
        if (max >= 1e15)
            return pfl_err("--%s: %s is out of range (must be %s %g)", name, text, min_exclusive ? ">" : ">=", min);
        return pfl_err("--%s: %s is out of range (must be in %s%g, %g])", name, text, min_exclusive ? "(" : "[", min,
                       max);
    }
    *out = v;
    return 0;
}

static void *place(const pfl_param *p, const pfl_param_blocks *b) {
    char *base = b->at[p->block];
    return base ? base + p->offset : NULL;
}

/* Numbers and switches of the extra block live in a store, by name. */
static int store_number(const pfl_param *p, const pfl_param_blocks *b, double v) {
    if (p->block == PFL_BLOCK_EXTRA) {
        if (!b->at[PFL_BLOCK_EXTRA]) return pfl_err("--%s: no parameter store to hold it", p->name);
        return pfl_param_store_set(b->at[PFL_BLOCK_EXTRA], p->name, v);
    }
    void *at = place(p, b);
    if (!at) return pfl_err("--%s: nowhere to hold it", p->name);
    switch (p->type) {
    case PFL_PARAM_INT: *(int *)at = (int)v; break;
    case PFL_PARAM_FLOAT: *(float *)at = (float)v; break;
    case PFL_PARAM_DOUBLE: *(double *)at = v; break;
    case PFL_PARAM_U64: *(uint64_t *)at = (uint64_t)v; break;
    case PFL_PARAM_BOOL: *(bool *)at = v != 0.0; break;
    case PFL_PARAM_STRING: return pfl_err("--%s: a string is not a number", p->name);
    }
    return 0;
}

static int store_auto(const pfl_param *p, const pfl_param_blocks *b) {
    return store_number(p, b, p->type == PFL_PARAM_INT && p->block != PFL_BLOCK_EXTRA ? (double)AUTO_INT : NAN);
}

static double load_number(const pfl_param *p, const pfl_param_blocks *b) {
    if (p->block == PFL_BLOCK_EXTRA)
        return b->at[PFL_BLOCK_EXTRA] ? pfl_param_store_get(b->at[PFL_BLOCK_EXTRA], p->name) : NAN;
    const void *at = place(p, b);
    if (!at) return NAN;
    switch (p->type) {
    case PFL_PARAM_INT: return *(const int *)at;
    case PFL_PARAM_FLOAT: return *(const float *)at;
    case PFL_PARAM_DOUBLE: return *(const double *)at;
    case PFL_PARAM_U64: return (double)*(const uint64_t *)at;
    case PFL_PARAM_BOOL: return *(const bool *)at;
    case PFL_PARAM_STRING: break;
    }
    return NAN;
}

int pfl_param_reset(const pfl_param *p, const pfl_param_blocks *b) {
    if (p->def_auto) return store_auto(p, b);
    if (p->type != PFL_PARAM_STRING) return store_number(p, b, p->def);
    const char **at = place(p, b);
    if (!at) return pfl_err("--%s: nowhere to hold it", p->name);
    *at = p->def_text;
    return 0;
}

int pfl_param_parse(const pfl_param *p, const pfl_param_blocks *b, const char *text) {
    if (p->type == PFL_PARAM_BOOL) {
        if (*text) return pfl_err("--%s takes no value", p->name);
        return store_number(p, b, 1.0);
    }
    if (p->type == PFL_PARAM_STRING) {
        if (!*text) return pfl_err("--%s: empty value", p->name);
        const char **at = place(p, b);
        if (!at) return pfl_err("--%s: nowhere to hold it", p->name);
        *at = text;
        return 0;
    }
    if (p->auto_value && !strcmp(text, "auto")) return store_auto(p, b);
    if (p->layers && (isalpha((unsigned char)text[0]) || text[0] == '_')) return parse_layer_names(p, b, text);
    /* a count keeps its text (its unit is known later); a fraction (FedTSDP's
     * L_s) is a count of rows, and forgets any text given before */
    if (p->layers && keep_layer_spec(p, b, pfl_selection_is_count(text) ? text : NULL)) return -1;
    double v;
    const bool whole = p->type == PFL_PARAM_INT || p->type == PFL_PARAM_U64;
    if (pfl_parse_number(p->name, text, whole, p->min, p->max, p->min_exclusive, &v)) return -1;
    return store_number(p, b, v);
}

int pfl_param_set_number(const pfl_param *p, const pfl_param_blocks *b, double v) {
    const bool low_ok = p->min_exclusive ? v > p->min : v >= p->min;
    if (!low_ok || v > p->max)
        return pfl_err("--%s: the selection gives %g, out of range (must be in %s%g, %g])", p->name, v,
                       p->min_exclusive ? "(" : "[", p->min, p->max);
    return store_number(p, b, v);
}

bool pfl_param_is_auto(const pfl_param *p, const pfl_param_blocks *b) {
    if (!p->auto_value) return false;
    const double v = load_number(p, b);
    return p->type == PFL_PARAM_INT && p->block != PFL_BLOCK_EXTRA ? v == (double)AUTO_INT : isnan(v);
}

int pfl_param_resolve_auto(const pfl_param *p, const pfl_param_blocks *b, const char *model) {
    if (!pfl_param_is_auto(p, b)) return 0;
    const double v = p->auto_value(model);
    if (!isfinite(v)) return pfl_err("--%s auto: no value for model %s; give one", p->name, model);
    return store_number(p, b, v);
}

bool pfl_param_format(const pfl_param *p, const pfl_param_blocks *b, bool exact, char *buf, size_t size) {
    const char *given = p->layers ? pfl_layer_spec(b->layer_specs, p->name) : NULL;
    if (given) {
        snprintf(buf, size, "%s", given);
        return true;
    }
    if (p->type == PFL_PARAM_STRING) {
        const char *const *at = place(p, b);
        if (!at || !*at) return false;
        snprintf(buf, size, "%s", *at);
        return true;
    }
    if (pfl_param_is_auto(p, b)) {
        snprintf(buf, size, "auto");
        return true;
    }
    const double v = load_number(p, b);
    switch (p->type) {
    case PFL_PARAM_BOOL: snprintf(buf, size, "%s", v != 0.0 ? "true" : "false"); break;
    case PFL_PARAM_INT: snprintf(buf, size, "%d", (int)v); break;
    case PFL_PARAM_U64: {
        const void *at = place(p, b);
        snprintf(buf, size, "%llu", at ? (unsigned long long)*(const uint64_t *)at : (unsigned long long)v);
        break;
    }
    default:
        if (p->block == PFL_BLOCK_EXTRA && isnan(v)) return false;
        snprintf(buf, size, exact ? "%.17g" : "%g", v);
    }
    return true;
}

void pfl_param_json(const pfl_param *p, const pfl_param_blocks *b, FILE *f) {
    char text[4096];
    if (!pfl_param_format(p, b, false, text, sizeof text)) {
        fputs("null", f);
        return;
    }
    const char *given = p->layers ? pfl_layer_spec(b->layer_specs, p->name) : NULL;
    if (p->type == PFL_PARAM_STRING || pfl_param_is_auto(p, b) || (given && !pfl_selection_is_count(given)))
        pfl_json_string(f, text);
    else fputs(text, f); /* numbers (finite: bounds) and true/false */
}

void pfl_param_key(const pfl_param *p, char *buf, size_t size) {
    snprintf(buf, size, "%s", p->name);
    for (char *c = buf; *c; c++)
        if (*c == '-') *c = '_';
}
