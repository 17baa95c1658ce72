#include "cli/args.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

static void print_default(FILE *f, const arg_spec *s) {
    if (s->help && strstr(s->help, "(default")) return; /* the help says it in its own words */
    switch (s->type) {
    case ARG_INT: fprintf(f, " (default %d)", *(int *)s->dest); break;
    case ARG_DOUBLE: fprintf(f, " (default %g)", *(double *)s->dest); break;
    case ARG_U64: fprintf(f, " (default %llu)", (unsigned long long)*(uint64_t *)s->dest); break;
    case ARG_STRING:
        if (*(const char **)s->dest) fprintf(f, " (default %s)", *(const char **)s->dest);
        break;
    case ARG_FLAG: break;
    }
}

void args_print_help(FILE *f, const arg_spec *specs, int n, const char *usage) {
    fprintf(f, "%s\n\nFlags:\n", usage);
    for (int i = 0; i < n; i++) {
        const arg_spec *s = &specs[i];
        char left[64];
        int len = snprintf(left, sizeof left, "  --%s", s->name);
        if (s->metavar) len += snprintf(left + len, sizeof left - (size_t)len, " %s", s->metavar);
        if (s->alias) snprintf(left + len, sizeof left - (size_t)len, ", -%s", s->alias);
        fprintf(f, "%-30s %s", left, s->help);
        print_default(f, s);
        fputc('\n', f);
    }
    fprintf(f, "  %-28s %s\n", "--help", "show this help");
}

static const arg_spec *find_spec(const arg_spec *specs, int n, const char *arg) {
    if (arg[0] != '-') return NULL;
    bool is_long = arg[1] == '-';
    const char *name = arg + (is_long ? 2 : 1);
    size_t len = strcspn(name, "=");
    for (int i = 0; i < n; i++) {
        const char *candidate = is_long ? specs[i].name : specs[i].alias;
        /* PFLlib's single-dash spelling also accepts the long name (-rounds) */
        if (candidate && strlen(candidate) == len && strncmp(candidate, name, len) == 0) return &specs[i];
        if (!is_long && strlen(specs[i].name) == len && strncmp(specs[i].name, name, len) == 0) return &specs[i];
    }
    return NULL;
}

static int parse_number(const arg_spec *s, const char *text, double *out) {
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end != '\0' || errno == ERANGE || !isfinite(v))
        return pfl_err("--%s: '%s' is not a number", s->name, text);
    if (s->type == ARG_INT || s->type == ARG_U64) {
        if (v != floor(v)) return pfl_err("--%s: '%s' is not a whole number", s->name, text);
    }
    bool low_ok = s->min_exclusive ? v > s->min : v >= s->min;
    if (!low_ok || v > s->max) {
        if (s->max >= 1e15)
            return pfl_err("--%s: %s is out of range (must be %s %g)", s->name, text, s->min_exclusive ? ">" : ">=",
                           s->min);
        return pfl_err("--%s: %s is out of range (must be in %s%g, %g])", s->name, text, s->min_exclusive ? "(" : "[",
                       s->min, s->max);
    }
    *out = v;
    return 0;
}

static int store(const arg_spec *s, const char *text) {
    double v;
    switch (s->type) {
    case ARG_STRING:
        if (!*text) return pfl_err("--%s: empty value", s->name);
        *(const char **)s->dest = text;
        return 0;
    case ARG_INT:
        if (parse_number(s, text, &v)) return -1;
        *(int *)s->dest = (int)v;
        return 0;
    case ARG_U64:
        if (parse_number(s, text, &v)) return -1;
        *(uint64_t *)s->dest = (uint64_t)v;
        return 0;
    case ARG_DOUBLE:
        if (parse_number(s, text, &v)) return -1;
        *(double *)s->dest = v;
        return 0;
    case ARG_FLAG: *(bool *)s->dest = true; return 0;
    }
    return -1;
}

int args_parse(const arg_spec *specs, int n, int argc, char **argv, const char *usage) {
    return args_parse_operands(specs, n, argc, argv, usage, NULL, NULL);
}

int args_parse_operands(const arg_spec *specs, int n, int argc, char **argv, const char *usage, char **operands,
                        int *num_operands) {
    if (num_operands) *num_operands = 0;
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            args_print_help(stdout, specs, n, usage);
            return 1;
        }
        const arg_spec *s = find_spec(specs, n, arg);
        if (!s && operands && arg[0] != '-') {
            operands[(*num_operands)++] = argv[i];
            continue;
        }
        if (!s) {
            if (arg[0] == '-') return pfl_err("%s: unknown flag (see --help)", arg);
            return pfl_err("%s: unexpected argument (flags start with --; see --help)", arg);
        }
        const char *eq = strchr(arg, '=');
        if (s->type == ARG_FLAG) {
            if (eq) return pfl_err("--%s takes no value", s->name);
            store(s, "");
            continue;
        }
        const char *value = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!value) return pfl_err("--%s: missing value (%s)", s->name, s->metavar ? s->metavar : "value");
        if (store(s, value)) return -1;
    }
    return 0;
}
