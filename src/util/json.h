/* Just enough JSON writing for metrics and summaries. */
#ifndef PFL_UTIL_JSON_H
#define PFL_UTIL_JSON_H

#include <stdio.h>

/* Writes a number, or null when it is NaN or infinite (JSON has neither). */
void pfl_json_number(FILE *f, double v);
/* Writes a quoted string with JSON escapes. */
void pfl_json_string(FILE *f, const char *s);

#endif
