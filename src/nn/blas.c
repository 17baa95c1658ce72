#include "nn/blas.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef PFL_BLAS_GENERIC
void pfl_blas_single_thread(void) {}
int pfl_blas_threads(void) { return 1; }
void pfl_blas_describe(char *buf, size_t n) { snprintf(buf, n, "generic CBLAS (not OpenBLAS: built with BLAS=generic)"); }
const char *pfl_blas_better_core(void) { return NULL; }
int pfl_blas_is_openblas(void) { return 0; }
#else
#include <strings.h>

#include <cblas.h> /* OpenBLAS's own: declares openblas_set_num_threads and friends */

void pfl_blas_single_thread(void) { openblas_set_num_threads(1); }
int pfl_blas_threads(void) { return openblas_get_num_threads(); }

/* openblas_get_config() reads like "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY
 * Haswell MAX_THREADS=64": keep the name and version, add the core it chose
 * and its threading model. */
void pfl_blas_describe(char *buf, size_t n) {
    char version[64] = "OpenBLAS";
    const char *config = openblas_get_config();
    if (config && !strncmp(config, "OpenBLAS ", 9)) {
        size_t len = strcspn(config + 9, " ");
        snprintf(version, sizeof version, "OpenBLAS %.*s", (int)(len < 32 ? len : 32), config + 9);
    }
    const int par = openblas_get_parallel();
    const char *model = par == 0 ? "sequential" : par == 1 ? "pthread" : "OpenMP";
    const char *fallback = getenv("PFL_BLAS_FALLBACK"); /* set by cli/main.c when it chose the core */
    if (fallback && *fallback)
        snprintf(buf, n, "%s (%s kernels chosen by pfl: OpenBLAS fell back to %s on this CPU; %s)", version,
                 openblas_get_corename(), fallback, model);
    else snprintf(buf, n, "%s (%s, %s)", version, openblas_get_corename(), model);
}

/* OpenBLAS's generic fallbacks for x86-64 CPUs it does not recognize. */
static int is_fallback_core(const char *core) {
    static const char *const fallbacks[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom",
                                            "Sandybridge", "Unknown"};
    for (size_t i = 0; i < sizeof fallbacks / sizeof fallbacks[0]; i++)
        if (core && !strcasecmp(core, fallbacks[i])) return 1;
    return 0;
}

const char *pfl_blas_better_core(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    const char *core = openblas_get_corename();
    const char *assume = getenv("PFL_BLAS_ASSUME_FALLBACK"); /* a test's: run/run.h, pfl_init */
    if (!is_fallback_core(core) && !(assume && !strcmp(assume, "1"))) return NULL;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && strcasecmp(core, "Haswell") != 0)
        return "Haswell";
#endif
    return NULL;
}
int pfl_blas_is_openblas(void) { return 1; }
#endif

/* ---- LAPACK: the SVD ---- */

/* LAPACK's single-precision divide-and-conquer SVD (Fortran calling
 * convention, column-major; the hidden length of the one character
 * argument last). Debian's OpenBLAS carries LAPACK in libopenblas; a
 * generic CBLAS build links the reference -llapack (Makefile). */
extern void sgesdd_(const char *jobz, const int *m, const int *n, float *a, const int *lda, float *s, float *u,
                    const int *ldu, float *vt, const int *ldvt, float *work, const int *lwork, int *iwork, int *info,
                    size_t jobz_len);

int pfl_svd(float *a, int rows, int cols, float *s, float *u, float *vt) {
    /* A row-major rows x cols matrix is the column-major cols x rows matrix
     * A^T = U' S V'^T, so A = V' S U'^T: LAPACK's V'^T (k x rows,
     * column-major) is A's u (rows x k, row-major) and its U' (cols x k,
     * column-major) A's vt (k x cols, row-major), byte for byte. */
    const int m = cols, n = rows, k = rows < cols ? rows : cols;
    const char *jobz = u && vt ? "S" : "N";
    float *lu = u && vt ? vt : NULL, *lvt = u && vt ? u : NULL, query;
    const int ldu = u && vt ? m : 1, ldvt = u && vt ? k : 1;
    int lwork = -1, info = 0;
    int *iwork = malloc(sizeof(int) * 8 * (size_t)(k > 0 ? k : 1));
    if (!iwork) return -1;
    sgesdd_(jobz, &m, &n, a, &m, s, lu, &ldu, lvt, &ldvt, &query, &lwork, iwork, &info, 1);
    lwork = info == 0 ? (int)query + 1 : 0;
    float *work = info == 0 ? malloc(sizeof(float) * (size_t)lwork) : NULL;
    if (work) sgesdd_(jobz, &m, &n, a, &m, s, lu, &ldu, lvt, &ldvt, work, &lwork, iwork, &info, 1);
    else if (info == 0) info = -1000;
    free(work);
    free(iwork);
    return info == 0 ? 0 : -1;
}
