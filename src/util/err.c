#include "util/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char last_message[1024];

/* A message is one line whatever it quotes (a flag stored in a checkpoint,
 * a name from a file): a control character in it becomes '?'. */
static void one_line(char *m) {
    for (unsigned char *c = (unsigned char *)m; *c; c++)
        if (*c < 0x20 || *c == 0x7f) *c = '?';
}

int pfl_err(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_message, sizeof last_message, fmt, ap);
    va_end(ap);
    one_line(last_message);
    return -1;
}

const char *pfl_errmsg(void) { return last_message; }

int pfl_err_prefix(const char *prefix) {
    char was[sizeof last_message];
    memcpy(was, last_message, sizeof was);
    snprintf(last_message, sizeof last_message, "%s: ", prefix);
    const size_t at = strlen(last_message), room = sizeof last_message - 1 - at;
    size_t n = strlen(was);
    if (n > room) n = room; /* cut, as a message too long for the buffer is */
    memcpy(last_message + at, was, n);
    last_message[at + n] = '\0';
    one_line(last_message);
    return -1;
}

void pfl_err_clear(void) { last_message[0] = '\0'; }

const char *pfl_quote(char *buf, size_t size, const void *bytes, size_t n, size_t max) {
    const unsigned char *p = bytes;
    size_t len = 0;
    if (!size) return buf;
    buf[0] = '\0';
    for (size_t i = 0; i < n && i < max; i++) {
        char one[5];
        if (p[i] == '\\') snprintf(one, sizeof one, "\\\\");
        else if (p[i] >= 0x20 && p[i] < 0x7f) snprintf(one, sizeof one, "%c", p[i]);
        else snprintf(one, sizeof one, "\\x%02x", p[i]);
        const size_t k = strlen(one);
        if (len + k + 4 > size) return buf; /* room for "..." and the NUL */
        memcpy(buf + len, one, k + 1);
        len += k;
    }
    if (n > max && len + 4 <= size) memcpy(buf + len, "...", 4);
    return buf;
}

void *pfl_malloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) pfl_err("out of memory allocating %zu bytes", bytes);
    return p;
}

void *pfl_calloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) pfl_err("out of memory allocating %zu x %zu bytes", count, size);
    return p;
}
