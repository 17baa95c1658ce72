/* Error reporting for a library that never exits the process.
 *
 * A failing function returns a negative status (or NULL) after recording one
 * message with pfl_err(); only the command-line front end prints it and exits.
 * The message is per thread, so parallel workers do not clobber each other. */
#ifndef PFL_UTIL_ERR_H
#define PFL_UTIL_ERR_H

#include <stddef.h>

#if defined(__GNUC__)
#define PFL_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define PFL_PRINTF(a, b)
#endif

/* Records a message (printf format) and returns -1 so callers can write
 * `return pfl_err("...")`. */
int pfl_err(const char *fmt, ...) PFL_PRINTF(1, 2);

/* The last message recorded on this thread ("" when none). */
const char *pfl_errmsg(void);
/* Puts "PREFIX: " before the current message (a reader naming its dataset
 * before what a lower layer said); returns -1. */
int pfl_err_prefix(const char *prefix);

/* Forgets the last message. */
void pfl_err_clear(void);

/* Shows bytes from a file in a message, which must stay one readable line:
 * printable ASCII as is, a backslash as \\, every other byte (a NUL, a
 * line break, a byte of UTF-8) as \xNN; at most `max` bytes, then "...".
 * Writes into buf (size bytes, truncated to fit) and returns it. */
const char *pfl_quote(char *buf, size_t size, const void *bytes, size_t n, size_t max);

/* malloc/calloc that record an error message on failure. */
void *pfl_malloc(size_t bytes);
void *pfl_calloc(size_t count, size_t size);

#endif
