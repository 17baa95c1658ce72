/* pfl_init (run/run.h): a program's first call, so that it computes with
 * the BLAS kernels the pfl command computes with. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "nn/blas.h"
#include "run/run.h"

/* "OpenBLAS 0.3.21 (Prescott, pthread)": the kernels' name, for the
 * description a re-run prints (PFL_BLAS_FALLBACK, nn/blas.c). */
static void fallback_name(char *name, size_t n) {
    char described[64];
    pfl_blas_describe(described, sizeof described);
    const char *open = strchr(described, '('), *comma = open ? strchr(open, ',') : NULL;
    if (open && comma && (size_t)(comma - open - 1) < n) snprintf(name, n, "%.*s", (int)(comma - open - 1), open + 1);
    else snprintf(name, n, "a generic core");
}

void pfl_init(char **argv) {
    if (!argv || !argv[0] || getenv("OPENBLAS_CORETYPE")) return;
    const char *core = pfl_blas_better_core();
    if (!core) return;
    char name[32];
    fallback_name(name, sizeof name);
    if (setenv("OPENBLAS_CORETYPE", core, 1) || setenv("PFL_BLAS_FALLBACK", name, 1)) return;
    execv("/proc/self/exe", argv);
    unsetenv("OPENBLAS_CORETYPE"), unsetenv("PFL_BLAS_FALLBACK"); /* execv failed: the slow kernels it is */
}
