#include "util/json.h"

#include <math.h>

void pfl_json_number(FILE *f, double v) {
    if (!isfinite(v)) fputs("null", f);
    else fprintf(f, "%.10g", v);
}

void pfl_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}
