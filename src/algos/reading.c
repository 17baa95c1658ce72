/* --reading: which of a method's two readings a run follows (algos.h). */
#include <string.h>

#include "algos/algos.h"
#include "util/err.h"

bool pfl_reading_paper(const pfl_config *cfg) { return cfg->algo.reading && !strcmp(cfg->algo.reading, "paper"); }

int pfl_check_reading(const pfl_config *cfg) {
    const char *r = cfg->algo.reading;
    if (r && strcmp(r, "pfllib") && strcmp(r, "paper"))
        return pfl_err("--reading '%s': expected pfllib (the reference code's, the default) or paper", r);
    return 0;
}
