/* Which BLAS pfl was built with, and its threads.
 *
 * pfl is built against OpenBLAS unless `make BLAS=generic` asked for another
 * CBLAS (Debian's reference libblas, say: several times slower). Clients
 * train in parallel on pfl's own threads, so the BLAS runs single-threaded
 * inside each worker and results do not depend on the thread count. */
#ifndef PFL_NN_BLAS_H
#define PFL_NN_BLAS_H

#include <stddef.h>

/* Makes the BLAS run each call on the calling thread only (OpenBLAS: one
 * thread; a generic CBLAS is assumed single-threaded). */
void pfl_blas_single_thread(void);

/* Threads the BLAS uses per call (1 after pfl_blas_single_thread). */
int pfl_blas_threads(void);

/* Writes a one-line description of the BLAS into buf, e.g.
 * "OpenBLAS 0.3.21 (Haswell, pthread)" or "generic CBLAS (not OpenBLAS)". */
void pfl_blas_describe(char *buf, size_t n);

/* OpenBLAS picks its kernels for the CPU when it loads, and on a CPU it does
 * not know (0.3.21 on recent Xeons) falls back to its generic SSE3 ones,
 * measured 2.7x slower on this project's machine. Returns the kernel set
 * the CPU can run (SkylakeX with AVX-512, Haswell with AVX2 and FMA) when
 * OpenBLAS fell back to an older one, else NULL. The choice can only be
 * made before the library loads (OPENBLAS_CORETYPE), so the command line
 * re-executes itself with it (cli/main.c). */
const char *pfl_blas_better_core(void);

/* 1 when built against OpenBLAS. */
int pfl_blas_is_openblas(void);

/* The thin SVD of the row-major rows x cols matrix `a` (destroyed), k =
 * min(rows, cols): its singular values, descending, into s (k floats); with
 * u and vt both non-NULL its singular vectors too, row-major, u rows x k and
 * vt k x cols (a = u diag(s) vt). LAPACK's sgesdd, which Debian's OpenBLAS
 * carries (a BLAS=generic build links the reference LAPACK). 0, or -1 when
 * LAPACK fails or memory runs out. */
int pfl_svd(float *a, int rows, int cols, float *s, float *u, float *vt);

#endif
