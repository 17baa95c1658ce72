/* The CUDA backend (docs/architecture.md, "The CUDA backend"): the executor's
 * table on one NVIDIA GPU (device 0).
 *
 * Each executor (one per worker thread) has its own CUDA stream and cuBLAS
 * handle, so K worker threads train K clients at once on K streams. Its
 * workspace lives on the GPU for its whole life: every op's output and
 * output gradient (no buffer shared in place), the convolutions' unfolded
 * inputs, the batch. A view of a host vector is a device copy made when the
 * view is taken and copied back when it closes, so a client's model goes up
 * and down once per local training. The dataset's pixels are copied to the
 * GPU once, for every executor of the process, and a batch is gathered and
 * normalized there from its sample indices.
 *
 * The arithmetic: Linear and Conv2d are cuBLAS SGEMMs (a convolution
 * unfolds the whole batch, im2col, into one product; TF32 only with
 * --tf32); everything else is a kernel of this file. Every reduction
 * (biases' gradients, BatchNorm's statistics, the loss, sums of squares)
 * runs in a fixed order with no atomics, and cuBLAS is deterministic on one
 * GPU model, so the same run gives the same bits twice. The numbers are the
 * CPU's up to float rounding (tests/gpu/test_cuda_ops.c measures how far).
 *
 * cuBLAS is opened at run time (dlopen), and the CUDA runtime is linked
 * statically: the same pfl runs on a machine without a GPU or CUDA's
 * libraries, where --device cuda says why it cannot. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "backend/backend.h"
#include "nn/layers.h"
#include "util/err.h"
}

/* ---- failures ----
 * A CUDA call that fails in the middle of training (a lost device, an
 * illegal address) leaves nothing to recover: say where and stop. */
static void cuda_fatal(const char *what, const char *why, const char *file, int line) {
    fprintf(stderr, "pfl: CUDA backend: %s failed: %s (%s:%d)\n", what, why, file, line);
    abort();
}
#define CK(call)                                                                  \
    do {                                                                          \
        cudaError_t e_ = (call);                                                  \
        if (e_ != cudaSuccess) cuda_fatal(#call, cudaGetErrorString(e_), __FILE__, __LINE__); \
    } while (0)
#define CKB(call)                                                                 \
    do {                                                                          \
        cublasStatus_t s_ = (call);                                               \
        if (s_ != CUBLAS_STATUS_SUCCESS) cuda_fatal(#call, "cuBLAS error", __FILE__, __LINE__); \
    } while (0)
#define LAUNCHED() CK(cudaGetLastError())

/* ---- cuBLAS, opened at run time ---- */

#define PFL_STR2(x) #x
#define PFL_STR(x) PFL_STR2(x)

static struct {
    bool tried, ok;
    char why[256];
    cublasStatus_t (*create)(cublasHandle_t *);
    cublasStatus_t (*destroy)(cublasHandle_t);
    cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
    cublasStatus_t (*set_math_mode)(cublasHandle_t, cublasMath_t);
    cublasStatus_t (*sgemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const float *,
                            const float *, int, const float *, int, const float *, float *, int);
    cublasStatus_t (*get_property)(libraryPropertyType, int *);
} blas;
static pthread_mutex_t blas_lock = PTHREAD_MUTEX_INITIALIZER;

static void *blas_symbol(void *lib, const char *name) {
    void *f = dlsym(lib, name);
    if (!f && !blas.why[0]) snprintf(blas.why, sizeof blas.why, "%s has no %s", "libcublas", name);
    return f;
}

/* The cuBLAS of this toolkit's major version, else the one before it. */
static bool blas_open(void) {
    pthread_mutex_lock(&blas_lock);
    if (!blas.tried) {
        blas.tried = true;
        const char *names[] = {"libcublas.so." PFL_STR(CUBLAS_VER_MAJOR), "libcublas.so", "libcublas.so.12"};
        void *lib = NULL;
        for (size_t i = 0; !lib && i < sizeof names / sizeof names[0]; i++) lib = dlopen(names[i], RTLD_NOW);
        if (!lib) {
            snprintf(blas.why, sizeof blas.why, "libcublas.so.%d not found (%s)", CUBLAS_VER_MAJOR, dlerror());
        } else {
            *(void **)&blas.create = blas_symbol(lib, "cublasCreate_v2");
            *(void **)&blas.destroy = blas_symbol(lib, "cublasDestroy_v2");
            *(void **)&blas.set_stream = blas_symbol(lib, "cublasSetStream_v2");
            *(void **)&blas.set_math_mode = blas_symbol(lib, "cublasSetMathMode");
            *(void **)&blas.sgemm = blas_symbol(lib, "cublasSgemm_v2");
            *(void **)&blas.get_property = blas_symbol(lib, "cublasGetProperty");
            blas.ok = !blas.why[0];
        }
    }
    pthread_mutex_unlock(&blas_lock);
    return blas.ok;
}

/* ---- the device ---- */

static int cuda_available(void) {
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!driver && !(driver = dlopen("libcuda.so.1", RTLD_NOW)))
        return pfl_err("--device cuda: no NVIDIA driver here (libcuda.so.1 not found), so no GPU to train on");
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) return pfl_err("--device cuda: no usable CUDA GPU here (%s)", cudaGetErrorString(e));
    if (n == 0) return pfl_err("--device cuda: no CUDA GPU here");
    if (!blas_open()) return pfl_err("--device cuda: %s", blas.why);
    return 0;
}

static void cuda_describe(char *buf, size_t size) {
    cudaDeviceProp p;
    int rt = 0, drv = 0, major = 0, minor = 0;
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
        snprintf(buf, size, "CUDA device 0 (properties unreadable)");
        return;
    }
    cudaRuntimeGetVersion(&rt);
    cudaDriverGetVersion(&drv);
    if (blas_open()) blas.get_property(MAJOR_VERSION, &major), blas.get_property(MINOR_VERSION, &minor);
    snprintf(buf, size, "%s (%d SMs, %.0f GiB), CUDA runtime %d.%d, driver %d.%d, cuBLAS %d.%d, no cuDNN "
             "(convolutions by im2col + cuBLAS)", p.name, p.multiProcessorCount, (double)p.totalGlobalMem / (1 << 30),
             rt / 1000, rt % 1000 / 10, drv / 1000, drv % 1000 / 10, major, minor);
}

/* ---- the dataset, on the GPU once ---- */

typedef struct dev_dataset {
    const uint8_t *pixels; /* the host pixels it copies */
    uint8_t *dev;
    int refs;
    struct dev_dataset *next;
} dev_dataset;
static dev_dataset *datasets;
static pthread_mutex_t datasets_lock = PTHREAD_MUTEX_INITIALIZER;

static uint8_t *dataset_acquire(const pfl_dataset *d) {
    pthread_mutex_lock(&datasets_lock);
    dev_dataset *e = datasets;
    while (e && e->pixels != d->pixels) e = e->next;
    if (!e) {
        const size_t bytes = (size_t)d->n * (size_t)pfl_dataset_sample_size(d);
        e = (dev_dataset *)calloc(1, sizeof *e);
        if (e && cudaMalloc((void **)&e->dev, bytes ? bytes : 1) != cudaSuccess) free(e), e = NULL;
        if (e) {
            CK(cudaMemcpy(e->dev, d->pixels, bytes, cudaMemcpyHostToDevice));
            e->pixels = d->pixels, e->next = datasets, datasets = e;
        }
    }
    if (e) e->refs++;
    pthread_mutex_unlock(&datasets_lock);
    return e ? e->dev : NULL;
}

static void dataset_release(const uint8_t *pixels) {
    pthread_mutex_lock(&datasets_lock);
    for (dev_dataset **p = &datasets; *p; p = &(*p)->next) {
        dev_dataset *e = *p;
        if (e->pixels != pixels) continue;
        if (--e->refs == 0) {
            *p = e->next;
            cudaFree(e->dev);
            free(e);
        }
        break;
    }
    pthread_mutex_unlock(&datasets_lock);
}

/* ---- kernels ---- */

#define THREADS 256
/* a grid covering n elements (one block for none: a launch needs one) */
static unsigned blocks_for(long n) { return n > 0 ? (unsigned)((n + THREADS - 1) / THREADS) : 1u; }
#define GRID_LOOP(i, n) for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < (n); i += (long)gridDim.x * blockDim.x)

/* A block's sum of v over its THREADS threads, in a fixed order; every thread gets it. */
__device__ static double block_sum(double v, double *shared) {
    shared[threadIdx.x] = v;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s /= 2) {
        if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
        __syncthreads();
    }
    const double total = shared[0];
    __syncthreads();
    return total;
}

__global__ static void k_gather(float *x, const uint8_t *pixels, const int *idx, int B, long s) {
    GRID_LOOP(i, (long)B * s) {
        const long n = i / s, j = i % s;
        x[i] = ((float)pixels[(size_t)idx[n] * s + j] - 127.5f) / 127.5f;
    }
}

__global__ static void k_add(float *out, const float *a, const float *b, long n) { GRID_LOOP(i, n) out[i] = a[i] + b[i]; }
__global__ static void k_add_into(float *out, const float *a, long n) { GRID_LOOP(i, n) out[i] += a[i]; }
__global__ static void k_copy(float *out, const float *in, long n) { GRID_LOOP(i, n) out[i] = in[i]; }
__global__ static void k_mul(float *out, const float *a, const float *b, long n) { GRID_LOOP(i, n) out[i] = a[i] * b[i]; }

__global__ static void k_relu(float *out, const float *in, long n) {
    GRID_LOOP(i, n) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
}
__global__ static void k_relu_backward(float *din, const float *dout, const float *out, long n) {
    GRID_LOOP(i, n) din[i] = out[i] > 0.0f ? dout[i] : 0.0f;
}

/* im2col of the whole batch: col[C*K*K][B*OH*OW], a sample's columns after the previous one's. */
__global__ static void k_im2col(float *col, const float *in, int B, int C, int H, int W, int K, int stride, int pad,
                                int OH, int OW) {
    const long cols = (long)B * OH * OW;
    GRID_LOOP(i, (long)C * K * K * cols) {
        const long row = i / cols, j = i % cols;
        const int c = (int)(row / (K * K)), ky = (int)(row / K % K), kx = (int)(row % K);
        const int n = (int)(j / ((long)OH * OW)), oy = (int)(j / OW % OH), ox = (int)(j % OW);
        const int y = oy * stride - pad + ky, xx = ox * stride - pad + kx;
        col[i] = y >= 0 && y < H && xx >= 0 && xx < W ? in[(((long)n * C + c) * H + y) * W + xx] : 0.0f;
    }
}

/* The adjoint of k_im2col, gathered per input element (no atomics). */
__global__ static void k_col2im(float *din, const float *col, int B, int C, int H, int W, int K, int stride, int pad,
                                int OH, int OW) {
    const long cols = (long)B * OH * OW;
    GRID_LOOP(i, (long)B * C * H * W) {
        const int xx = (int)(i % W), y = (int)(i / W % H), c = (int)(i / ((long)H * W) % C);
        const int n = (int)(i / ((long)C * H * W));
        float sum = 0.0f;
        for (int ky = 0; ky < K; ky++) {
            const int t = y + pad - ky;
            if (t < 0 || t % stride) continue;
            const int oy = t / stride;
            if (oy >= OH) continue;
            for (int kx = 0; kx < K; kx++) {
                const int u = xx + pad - kx;
                if (u < 0 || u % stride) continue;
                const int ox = u / stride;
                if (ox >= OW) continue;
                sum += col[((long)c * K * K + ky * K + kx) * cols + (long)n * OH * OW + oy * OW + ox];
            }
        }
        din[i] = sum;
    }
}

/* [B][C][HW] <-> [C][B*HW] (the GEMM's layout), adding a bias per channel on the way back */
__global__ static void k_to_channels(float *t, const float *x, int B, int C, long HW) {
    GRID_LOOP(i, (long)B * C * HW) {
        const long j = i % HW, c = i / HW % C, n = i / (HW * C);
        t[(c * B + n) * HW + j] = x[i];
    }
}
__global__ static void k_from_channels(float *x, const float *t, const float *bias, int B, int C, long HW) {
    GRID_LOOP(i, (long)B * C * HW) {
        const long j = i % HW, c = i / HW % C, n = i / (HW * C);
        x[i] = t[(c * B + n) * HW + j] + (bias ? bias[c] : 0.0f);
    }
}

/* db[r] += alpha * sum of row r of t (rows x cols): one block per row */
__global__ static void k_row_sums(float *db, const float *t, long cols, float alpha) {
    __shared__ double sh[THREADS];
    const float *row = t + blockIdx.x * cols;
    double s = 0.0;
    for (long j = threadIdx.x; j < cols; j += THREADS) s += row[j];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) db[blockIdx.x] += alpha * (float)s;
}

/* db[c] += alpha * sum over the B rows of dout[B][N], column c */
__global__ static void k_col_sums(float *db, const float *dout, int B, int N, float alpha) {
    GRID_LOOP(c, (long)N) {
        float s = 0.0f;
        for (int n = 0; n < B; n++) s += dout[(long)n * N + c];
        db[c] += alpha * s;
    }
}

__global__ static void k_bias_rows(float *out, const float *b, int B, int N) {
    GRID_LOOP(i, (long)B * N) out[i] += b[i % N];
}

/* max pooling with implicit -infinity padding; the first maximum wins, as the CPU's */
__global__ static void k_maxpool(float *out, int *argmax, const float *in, int BC, int H, int W, int K, int stride,
                                 int pad, int OH, int OW) {
    GRID_LOOP(i, (long)BC * OH * OW) {
        const long plane = i / ((long)OH * OW);
        const int oy = (int)(i / OW % OH), ox = (int)(i % OW);
        const float *src = in + plane * H * W;
        const int ylo = max(oy * stride - pad, 0), yhi = min(oy * stride - pad + K, H);
        const int xlo = max(ox * stride - pad, 0), xhi = min(ox * stride - pad + K, W);
        float best = -3.402823466e+38f;
        int best_i = ylo * W + xlo;
        for (int y = ylo; y < yhi; y++)
            for (int x = xlo; x < xhi; x++)
                if (src[y * W + x] > best) best = src[y * W + x], best_i = y * W + x;
        out[i] = best;
        argmax[i] = best_i;
    }
}

/* its backward gathered per input element: the outputs whose window holds it and chose it */
__global__ static void k_maxpool_backward(float *din, const float *dout, const int *argmax, int BC, int H, int W,
                                          int K, int stride, int pad, int OH, int OW) {
    GRID_LOOP(i, (long)BC * H * W) {
        const long plane = i / ((long)H * W);
        const int y = (int)(i / W % H), x = (int)(i % W), pos = y * W + x;
        const int oy0 = max((y + pad - K + stride) / stride, 0), oy1 = min((y + pad) / stride, OH - 1);
        const int ox0 = max((x + pad - K + stride) / stride, 0), ox1 = min((x + pad) / stride, OW - 1);
        float sum = 0.0f;
        for (int oy = oy0; oy <= oy1; oy++)
            for (int ox = ox0; ox <= ox1; ox++) {
                const long o = plane * OH * OW + oy * OW + ox;
                if (argmax[o] == pos) sum += dout[o];
            }
        din[i] = sum;
    }
}

__global__ static void k_avgpool(float *out, const float *in, long planes, int HW) {
    GRID_LOOP(p, planes) {
        float s = 0.0f;
        for (int j = 0; j < HW; j++) s += in[p * HW + j];
        out[p] = s / (float)HW;
    }
}
__global__ static void k_avgpool_backward(float *din, const float *dout, long planes, int HW) {
    GRID_LOOP(i, planes * HW) din[i] = dout[i / HW] * (1.0f / (float)HW);
}

/* BatchNorm2d with batch statistics, one block per channel: mean and biased
 * variance in double (two passes), then y = (x - mean) * gamma * invstd + beta. */
__global__ static void k_bn_train(float *out, float *stats, const float *in, const float *gamma, const float *beta,
                                  int B, int C, int HW) {
    __shared__ double sh[THREADS];
    const int c = blockIdx.x;
    const long N = (long)B * HW;
    double s = 0.0;
    for (long k = threadIdx.x; k < N; k += THREADS) s += in[((k / HW) * C + c) * HW + k % HW];
    const double mu = block_sum(s, sh) / (double)N;
    double ss = 0.0;
    for (long k = threadIdx.x; k < N; k += THREADS) {
        const double d = (double)in[((k / HW) * C + c) * HW + k % HW] - mu;
        ss += d * d;
    }
    const double v = block_sum(ss, sh) / (double)N, is = 1.0 / sqrt(v + (double)PFL_BN_EPS);
    if (threadIdx.x == 0) stats[c] = (float)mu, stats[C + c] = (float)v, stats[2 * C + c] = (float)is;
    const float fmu = (float)mu, scale = (float)(gamma[c] * is), shift = beta[c];
    for (long k = threadIdx.x; k < N; k += THREADS) {
        const long at = ((k / HW) * C + c) * HW + k % HW;
        out[at] = (in[at] - fmu) * scale + shift;
    }
}

/* with the running statistics: also records the mean and invstd the backward reads */
__global__ static void k_bn_eval(float *out, float *stats, const float *in, const float *gamma, const float *beta,
                                 const float *rmean, const float *rvar, int B, int C, int HW) {
    GRID_LOOP(i, (long)B * C * HW) {
        const int c = (int)(i / HW % C);
        const double is = 1.0 / sqrt((double)rvar[c] + (double)PFL_BN_EPS);
        if (i / HW < C) stats[c] = rmean[c], stats[2 * C + c] = (float)is; /* the first sample writes them */
        out[i] = (in[i] - rmean[c]) * (float)(gamma[c] * is) + beta[c];
    }
}

/* its backward, one block per channel (pfl_batchnorm_backward's formulas);
 * dgamma, dbeta: += alpha * the sums (alpha -lr: a fused SGD step) */
__global__ static void k_bn_backward(float *din, float *dgamma, float *dbeta, const float *dout, const float *in,
                                     const float *gamma, const float *stats, int B, int C, int HW, bool batch_stats,
                                     float alpha) {
    __shared__ double sh[THREADS];
    const int c = blockIdx.x;
    const long N = (long)B * HW;
    const double mu = stats[c], is = stats[2 * C + c];
    double sdy = 0.0, sdyx = 0.0;
    for (long k = threadIdx.x; k < N; k += THREADS) {
        const long at = ((k / HW) * C + c) * HW + k % HW;
        const double dy = dout[at];
        sdy += dy, sdyx += dy * ((double)in[at] - mu) * is;
    }
    sdy = block_sum(sdy, sh);
    sdyx = block_sum(sdyx, sh);
    if (!din) {
        if (threadIdx.x == 0) dgamma[c] += alpha * (float)sdyx, dbeta[c] += alpha * (float)sdy;
        return;
    }
    const double a = gamma[c] * is;
    const double b = batch_stats ? -a * is * (sdyx / (double)N) : 0.0, d = batch_stats ? -a * (sdy / (double)N) : 0.0;
    const float fa = (float)a, fb = (float)b, fd = (float)d, fmu = (float)mu;
    for (long k = threadIdx.x; k < N; k += THREADS) {
        const long at = ((k / HW) * C + c) * HW + k % HW;
        din[at] = fa * dout[at] + fb * (in[at] - fmu) + fd;
    }
    __syncthreads(); /* gamma is read above; a fused step may change it now */
    if (threadIdx.x == 0) dgamma[c] += alpha * (float)sdyx, dbeta[c] += alpha * (float)sdy;
}

__global__ static void k_bn_running(float *rmean, float *rvar, const float *stats, int C, long n, float momentum) {
    GRID_LOOP(c, (long)C) {
        const double unbias = n > 1 ? (double)n / (double)(n - 1) : 1.0;
        rmean[c] = (1.0f - momentum) * rmean[c] + momentum * stats[c];
        rvar[c] = (1.0f - momentum) * rvar[c] + momentum * (float)(stats[C + c] * unbias);
    }
}

__device__ static int embed_row(float v, int vocab, int padding_idx) {
    if (!(v >= 0.0f && v < (float)vocab)) return -1;
    const int id = (int)v;
    return id == padding_idx ? -1 : id;
}

__global__ static void k_embed_mean(float *out, const float *ids, const float *table, int B, int L, int vocab, int dim,
                                    int padding_idx) {
    GRID_LOOP(i, (long)B * dim) {
        const long n = i / dim, d = i % dim;
        float s = 0.0f;
        for (int t = 0; t < L; t++) {
            const int id = embed_row(ids[n * L + t], vocab, padding_idx);
            if (id >= 0) s += table[(long)id * dim + d];
        }
        out[i] = s / (float)L;
    }
}

/* dtable[rows[r]] += alpha / L * sum over the (sample, count) pairs of row r
 * (entries[start[r] .. start[r+1])) of count * dout[sample] */
__global__ static void k_embed_backward(float *dtable, const float *dout, const int *rows, const int *start,
                                        const int *entries, int num_rows, int dim, float scale) {
    GRID_LOOP(i, (long)num_rows * dim) {
        const int r = (int)(i / dim), d = (int)(i % dim);
        float s = 0.0f;
        for (int e = start[r]; e < start[r + 1]; e++) s += (float)entries[2 * e + 1] * dout[(long)entries[2 * e] * dim + d];
        dtable[(long)rows[r] * dim + d] += scale * s;
    }
}

/* softmax cross-entropy per sample (pfl_softmax_xent_offset_forward): probs, and loss[n] */
__global__ static void k_xent(float *probs, double *loss, const float *logits, const float *offset,
                              const uint8_t *labels, int B, int classes) {
    GRID_LOOP(n, (long)B) {
        const float *z = logits + n * classes;
        float *p = probs + n * classes;
        float zmax = -INFINITY;
        for (int c = 0; c < classes; c++) {
            const float o = offset ? offset[c] : 0.0f;
            if (!isinf(o) && z[c] + o > zmax) zmax = z[c] + o;
        }
        double sum = 0.0;
        for (int c = 0; c < classes; c++) {
            const float o = offset ? offset[c] : 0.0f;
            p[c] = isinf(o) ? 0.0f : expf(z[c] + o - zmax);
            sum += p[c];
        }
        for (int c = 0; c < classes; c++) p[c] = (float)(p[c] / sum);
        const int y = labels[n];
        loss[n] = log(sum) + zmax - (z[y] + (offset ? offset[y] : 0.0f));
    }
}

/* dlogits = w * (probs - onehot) / B (+ add, a term's gradient on the logits) */
__global__ static void k_xent_backward(float *dlogits, const float *probs, const uint8_t *labels, int B, int classes,
                                       float w, const float *add) {
    GRID_LOOP(i, (long)B * classes) {
        const long n = i / classes;
        const int c = (int)(i % classes);
        const float inv_b = 1.0f / (float)B;
        float g = probs[i] * inv_b - (c == labels[n] ? inv_b : 0.0f);
        if (w != 1.0f) g *= w;
        dlogits[i] = add ? g + add[i] : g;
    }
}

__global__ static void k_correct(double *hit, const float *logits, const uint8_t *labels, int B, int classes) {
    GRID_LOOP(n, (long)B) {
        const float *z = logits + n * classes;
        int best = 0;
        for (int c = 1; c < classes; c++)
            if (z[c] > z[best]) best = c;
        hit[n] = best == labels[n] ? 1.0 : 0.0;
    }
}

/* *out = sum of v[0..n) in one block, fixed order */
__global__ static void k_sum(double *out, const double *v, long n) {
    __shared__ double sh[THREADS];
    double s = 0.0;
    for (long i = threadIdx.x; i < n; i += THREADS) s += v[i];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) *out = s;
}

#define SUMSQ_BLOCKS 120
__global__ static void k_sumsq(double *partial, const float *v, long n) {
    __shared__ double sh[THREADS];
    double s = 0.0;
    for (long i = blockIdx.x * (long)THREADS + threadIdx.x; i < n; i += (long)SUMSQ_BLOCKS * THREADS)
        s += (double)v[i] * v[i];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ static void k_sgd(float *p, const float *g, float *v, long n, float lr, float mu, float wd) {
    GRID_LOOP(i, n) {
        if (!v) {
            p[i] -= lr * (g[i] + wd * p[i]);
        } else {
            const float gi = g[i] + wd * p[i];
            v[i] = mu * v[i] + gi;
            p[i] -= lr * v[i];
        }
    }
}

/* the embedding rows `rows`: p -= lr (g + wd p), then their gradient zeroed */
__global__ static void k_sgd_rows(float *p, float *g, const int *rows, int num_rows, int dim, float lr, float wd) {
    GRID_LOOP(i, (long)num_rows * dim) {
        const long at = (long)rows[i / dim] * dim + i % dim;
        p[at] -= lr * (g[at] + wd * p[at]);
        g[at] = 0.0f;
    }
}

__global__ static void k_prox(float *g, const float *p, const float *a, float mu, long n) {
    GRID_LOOP(i, n) g[i] += mu * (p[i] - a[i]);
}

/* ---- the executor ---- */

typedef struct {
    cudaStream_t stream;
    cublasHandle_t blas;
    const uint8_t *pixels_key; /* the dataset on the GPU (dataset_acquire), or NULL */
    uint8_t *pixels;
    long sample;               /* floats per sample at the input */
    float *act[PFL_MAX_OPS], *dact[PFL_MAX_OPS];
    bool owns[PFL_MAX_OPS];
    float *mask[PFL_MAX_OPS];  /* dropout's scales */
    int *argmax[PFL_MAX_OPS];
    float *stats[PFL_MAX_OPS]; /* BatchNorm: mean, var, invstd */
    float *col, *dcol, *chan;  /* unfolded inputs, their gradient, an output in channel order */
    float *gsum, *probs, *dlogits, *offset, *inj, *inj_sum;
    double *loss, *partial, *scalar;
    float *x;                  /* the batch on the GPU */
    int *idx;
    uint8_t *y;
    float *x_host;             /* text: the batch's token ids, on the host too (the embedding's rows) */
    float *mask_host;
    uint8_t *y_host;
    const float *inputs_host;  /* what the last batch's ids were, on the host (text) */
    int *rows_host, *rows, *row_start_host, *row_start, *entries_host, *entries, num_rows;
    int *row_index, *row_last, *row_fill; /* per vocabulary id / per listed row, for the lists */
    uint8_t *row_mark;
    bool written[PFL_MAX_OPS];
    bool dropped, batch_stats;
} cuda_exec;

static cuda_exec *impl(pfl_exec *x) { return (cuda_exec *)x->impl; }
static long out_size(const pfl_op *op) { return (long)op->out_c * op->out_h * op->out_w; }
static long in_size(const pfl_op *op) { return (long)op->in_c * op->in_h * op->in_w; }

static int dev_alloc(void *p, size_t bytes) {
    return cudaMalloc((void **)p, bytes ? bytes : 1) == cudaSuccess ? 0 : -1;
}

/* a dropout, maxpool or BatchNorm op's own buffers, and its output's */
static int alloc_op(pfl_exec *x, int i) {
    cuda_exec *c = impl(x);
    const pfl_op *op = &x->model->ops[i];
    const size_t n = (size_t)x->max_batch * (size_t)out_size(op);
    if (op->kind == PFL_OP_FLATTEN) { /* the input's buffers (none for a Flatten of the network input) */
        c->act[i] = op->src >= 0 ? c->act[op->src] : NULL;
        c->dact[i] = op->src >= 0 ? c->dact[op->src] : NULL;
        return 0;
    }
    c->owns[i] = true;
    if (dev_alloc(&c->act[i], sizeof(float) * n) || dev_alloc(&c->dact[i], sizeof(float) * n)) return -1;
    if (op->kind == PFL_OP_DROPOUT) return dev_alloc(&c->mask[i], sizeof(float) * n);
    if (op->kind == PFL_OP_MAXPOOL2D) return dev_alloc(&c->argmax[i], sizeof(int) * n);
    if (op->kind == PFL_OP_BATCHNORM2D) return dev_alloc(&c->stats[i], sizeof(float) * 3 * (size_t)op->out_c);
    return 0;
}

/* the largest of the scratch each kind of op needs, for max_batch samples */
static void scratch_sizes(const pfl_model *m, long B, long *col, long *chan, long *shared, long *tap, long *drop) {
    *col = *chan = *shared = *drop = 1, *tap = m->classes;
    for (int i = 0; i < m->num_ops; i++) {
        const pfl_op *op = &m->ops[i];
        const long k2 = (long)op->kernel * op->kernel;
        if (op->kind == PFL_OP_CONV2D) {
            if (op->in_c * k2 * B * op->out_h * op->out_w > *col) *col = op->in_c * k2 * B * op->out_h * op->out_w;
            if (B * out_size(op) > *chan) *chan = B * out_size(op);
        }
        if (op->kind == PFL_OP_DROPOUT && B * out_size(op) > *drop) *drop = B * out_size(op);
        if (B * out_size(op) > *shared) *shared = B * out_size(op);
        if (B * in_size(op) > *tap) *tap = B * in_size(op);
    }
}

static void cuda_destroy(pfl_exec *x);

/* Views are allocated and freed on the executors' streams (cudaMallocAsync):
 * the pool keeps what is freed for the next client rather than returning it
 * to the driver at every synchronization. */
static void keep_pool_memory(void) {
    cudaMemPool_t pool;
    uint64_t keep = UINT64_MAX;
    if (cudaDeviceGetDefaultMemPool(&pool, 0) == cudaSuccess)
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
}

static int cuda_create(pfl_exec *x) {
    if (!blas_open()) return pfl_err("--device cuda: %s", blas.why);
    cuda_exec *c = (cuda_exec *)pfl_calloc(1, sizeof *c);
    if (!c) return -1;
    x->impl = c;
    const pfl_model *m = x->model;
    const long B = x->max_batch, classes = m->classes;
    c->sample = pfl_model_input_size(m);
    long col, chan, shared, tap, drop;
    scratch_sizes(m, B, &col, &chan, &shared, &tap, &drop);
    keep_pool_memory();
    bool ok = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking) == cudaSuccess;
    ok = ok && blas.create(&c->blas) == CUBLAS_STATUS_SUCCESS;
    if (ok && (blas.set_stream(c->blas, c->stream) != CUBLAS_STATUS_SUCCESS ||
               blas.set_math_mode(c->blas, x->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH) !=
                   CUBLAS_STATUS_SUCCESS))
        ok = false;
    for (int i = 0; ok && i < m->num_ops; i++) ok = alloc_op(x, i) == 0;
    ok = ok && !dev_alloc(&c->col, sizeof(float) * col) && !dev_alloc(&c->dcol, sizeof(float) * col) &&
         !dev_alloc(&c->chan, sizeof(float) * chan) && !dev_alloc(&c->gsum, sizeof(float) * shared) &&
         !dev_alloc(&c->probs, sizeof(float) * B * classes) && !dev_alloc(&c->dlogits, sizeof(float) * B * classes) &&
         !dev_alloc(&c->offset, sizeof(float) * classes) && !dev_alloc(&c->inj, sizeof(float) * tap) &&
         !dev_alloc(&c->inj_sum, sizeof(float) * B * classes) && !dev_alloc(&c->loss, sizeof(double) * B) &&
         !dev_alloc(&c->partial, sizeof(double) * SUMSQ_BLOCKS) && !dev_alloc(&c->scalar, sizeof(double)) &&
         !dev_alloc(&c->x, sizeof(float) * B * c->sample) && !dev_alloc(&c->idx, sizeof(int) * B) &&
         !dev_alloc(&c->y, (size_t)B);
    ok = ok && (c->y_host = (uint8_t *)pfl_malloc((size_t)B)) &&
         (c->mask_host = (float *)pfl_malloc(sizeof(float) * drop)) &&
         (c->x_host = (float *)pfl_malloc(sizeof(float) * B * c->sample));
    const int vocab = pfl_model_vocab(m);
    if (ok && vocab > 0) {
        const long most = B * m->ops[0].in_w < vocab ? B * m->ops[0].in_w : vocab;
        ok = (c->rows_host = (int *)pfl_malloc(sizeof(int) * most)) &&
             (c->row_start_host = (int *)pfl_malloc(sizeof(int) * (most + 1))) &&
             (c->entries_host = (int *)pfl_malloc(sizeof(int) * 2 * B * m->ops[0].in_w)) &&
             (c->row_mark = (uint8_t *)pfl_calloc((size_t)vocab, 1)) &&
             (c->row_index = (int *)pfl_malloc(sizeof(int) * (size_t)vocab)) &&
             (c->row_last = (int *)pfl_malloc(sizeof(int) * most)) && (c->row_fill = (int *)pfl_malloc(sizeof(int) * most)) &&
             !dev_alloc(&c->rows, sizeof(int) * most) &&
             !dev_alloc(&c->row_start, sizeof(int) * (most + 1)) &&
             !dev_alloc(&c->entries, sizeof(int) * 2 * B * m->ops[0].in_w);
    }
    if (ok && x->data && !x->data->text) ok = (c->pixels = dataset_acquire(x->data)) != NULL;
    if (ok && c->pixels) c->pixels_key = x->data->pixels;
    if (!ok) {
        cuda_destroy(x);
        return pfl_err("--device cuda: out of GPU memory for a worker's workspace (model %s, batch %ld)", m->name, B);
    }
    return 0;
}

static void cuda_destroy(pfl_exec *x) {
    cuda_exec *c = impl(x);
    if (!c) return;
    if (c->stream) cudaStreamSynchronize(c->stream);
    for (int i = 0; i < x->model->num_ops; i++) {
        if (c->owns[i]) cudaFree(c->act[i]), cudaFree(c->dact[i]);
        cudaFree(c->mask[i]), cudaFree(c->argmax[i]), cudaFree(c->stats[i]);
    }
    void *dev[] = {c->col,  c->dcol,    c->chan,   c->gsum, c->probs, c->dlogits, c->offset, c->inj,
                   c->inj_sum, c->loss, c->partial, c->scalar, c->x,   c->idx,     c->y,      c->rows,
                   c->row_start, c->entries};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) cudaFree(dev[i]);
    free(c->y_host), free(c->mask_host), free(c->x_host);
    free(c->rows_host), free(c->row_start_host), free(c->entries_host), free(c->row_mark);
    free(c->row_index), free(c->row_last), free(c->row_fill);
    if (c->pixels_key) dataset_release(c->pixels_key);
    if (c->blas) blas.destroy(c->blas);
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c);
    x->impl = NULL;
}

/* ---- buffers ---- */

static float *dev_of(const pfl_xbuf *b) { return (float *)b->dev; }

static int cuda_alloc(pfl_exec *x, pfl_xbuf *b, size_t n) {
    memset(b, 0, sizeof *b);
    if (dev_alloc(&b->dev, sizeof(float) * n)) return pfl_err("--device cuda: out of GPU memory (%zu floats)", n);
    CK(cudaMemsetAsync(b->dev, 0, sizeof(float) * (n ? n : 1), impl(x)->stream));
    b->n = n, b->owned = true, b->exec = x;
    return 0;
}

static void cuda_free_buf(pfl_exec *x, pfl_xbuf *b) {
    CK(cudaStreamSynchronize(impl(x)->stream));
    cudaFree(b->dev);
}

/* A view: a device copy (stream-ordered allocation, no device-wide sync). */
static int cuda_view(pfl_exec *x, pfl_xbuf *b, float *host, size_t n, bool writeback) {
    cuda_exec *c = impl(x);
    memset(b, 0, sizeof *b);
    if (cudaMallocAsync(&b->dev, sizeof(float) * (n ? n : 1), c->stream) != cudaSuccess)
        return pfl_err("--device cuda: out of GPU memory for a model (%zu floats)", n);
    if (n) CK(cudaMemcpyAsync(b->dev, host, sizeof(float) * n, cudaMemcpyHostToDevice, c->stream));
    b->n = n, b->writeback = writeback, b->origin = host, b->exec = x;
    return 0;
}

static void cuda_unview(pfl_exec *x, pfl_xbuf *b) {
    cuda_exec *c = impl(x);
    if (!b->dev) return;
    if (b->writeback && b->n)
        CK(cudaMemcpyAsync(b->origin, b->dev, sizeof(float) * b->n, cudaMemcpyDeviceToHost, c->stream));
    CK(cudaFreeAsync(b->dev, c->stream));
    CK(cudaStreamSynchronize(c->stream));
}

static void cuda_write(pfl_exec *x, pfl_xbuf *b, size_t off, const float *src, size_t n) {
    if (n) CK(cudaMemcpyAsync(dev_of(b) + off, src, sizeof(float) * n, cudaMemcpyHostToDevice, impl(x)->stream));
    CK(cudaStreamSynchronize(impl(x)->stream)); /* src may change once this returns */
}

static void cuda_read(pfl_exec *x, const pfl_xbuf *b, size_t off, float *dst, size_t n) {
    if (n) CK(cudaMemcpyAsync(dst, dev_of(b) + off, sizeof(float) * n, cudaMemcpyDeviceToHost, impl(x)->stream));
    CK(cudaStreamSynchronize(impl(x)->stream));
}

static void cuda_zero(pfl_exec *x, pfl_xbuf *b, size_t off, size_t n) {
    if (n) CK(cudaMemsetAsync(dev_of(b) + off, 0, sizeof(float) * n, impl(x)->stream));
}

/* ---- the batch ---- */

static void upload_labels(pfl_exec *x, int B) {
    cuda_exec *c = impl(x);
    CK(cudaMemcpyAsync(c->y, c->y_host, (size_t)B, cudaMemcpyHostToDevice, c->stream));
    CK(cudaStreamSynchronize(c->stream)); /* y_host is rewritten by the next batch */
}

static void cuda_gather(pfl_exec *x, const int *idx, int B) {
    cuda_exec *c = impl(x);
    const pfl_dataset *d = x->data;
    for (int n = 0; n < B; n++) c->y_host[n] = d->labels[idx[n]];
    if (d->text) { /* token ids: gathered on the host, where the embedding's rows are listed */
        pfl_dataset_gather(d, idx, B, c->x_host, c->y_host);
        CK(cudaMemcpyAsync(c->x, c->x_host, sizeof(float) * (size_t)B * c->sample, cudaMemcpyHostToDevice, c->stream));
        c->inputs_host = c->x_host;
    } else {
        CK(cudaMemcpyAsync(c->idx, idx, sizeof(int) * (size_t)B, cudaMemcpyHostToDevice, c->stream));
        k_gather<<<blocks_for((long)B * c->sample), THREADS, 0, c->stream>>>(c->x, c->pixels, c->idx, B, c->sample);
        LAUNCHED();
        c->inputs_host = NULL;
    }
    upload_labels(x, B);
}

static void cuda_load(pfl_exec *x, const float *inputs, const uint8_t *labels, int B) {
    cuda_exec *c = impl(x);
    CK(cudaMemcpyAsync(c->x, inputs, sizeof(float) * (size_t)B * c->sample, cudaMemcpyHostToDevice, c->stream));
    if (labels) memcpy(c->y_host, labels, (size_t)B);
    else memset(c->y_host, 0, (size_t)B);
    c->inputs_host = inputs;
    upload_labels(x, B);
}

static const uint8_t *cuda_labels(pfl_exec *x) { return impl(x)->y_host; }

/* ---- forward ---- */

/* The output of op j (the network input for j = -1 and a Flatten of it). */
static const float *output_of(pfl_exec *x, int j) {
    while (j >= 0 && !impl(x)->act[j]) j = x->model->ops[j].src;
    return j < 0 ? impl(x)->x : impl(x)->act[j];
}
static float *grad_of(pfl_exec *x, int j) {
    while (j >= 0 && !impl(x)->dact[j]) j = x->model->ops[j].src;
    return j < 0 ? NULL : impl(x)->dact[j];
}

static const float *tensor_of(const pfl_model *m, const float *params, int layer, int k) {
    if (layer < 0 || k >= m->layers[layer].num_tensors) return NULL;
    return params + m->tensors[m->layers[layer].first_tensor + k].offset;
}

/* Row-major C[M][N] = alpha op(A) op(B) + beta C through column-major cuBLAS (C^T = op(B)^T op(A)^T). */
static void gemm(cuda_exec *c, bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                 const float *B, int ldb, float beta, float *C, int ldc) {
    CKB(blas.sgemm(c->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, ldb,
                   A, lda, &beta, C, ldc));
}

static void conv_forward(pfl_exec *x, const pfl_op *op, float *out, const float *in, const float *w, const float *b) {
    cuda_exec *c = impl(x);
    const int B = x->batch, K = op->kernel, CKK = op->in_c * K * K;
    const long HW = (long)op->out_h * op->out_w, cols = B * HW;
    k_im2col<<<blocks_for(CKK * cols), THREADS, 0, c->stream>>>(c->col, in, B, op->in_c, op->in_h, op->in_w, K,
                                                                 op->stride, op->pad, op->out_h, op->out_w);
    LAUNCHED();
    gemm(c, false, false, op->out_c, (int)cols, CKK, 1.0f, w, CKK, c->col, (int)cols, 0.0f, c->chan, (int)cols);
    k_from_channels<<<blocks_for(cols * op->out_c), THREADS, 0, c->stream>>>(out, c->chan, b, B, op->out_c, HW);
    LAUNCHED();
}

/* Draws dropout's scales on the host from the step's stream, element by
 * element as pfl_dropout_forward does, so the masks are the CPU's. */
static void dropout_forward(pfl_exec *x, int i, float *out, const float *in, long n, pfl_rng *rng) {
    cuda_exec *c = impl(x);
    const float p = x->model->ops[i].drop_p, scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    for (long k = 0; k < n; k++) c->mask_host[k] = pfl_rng_uniform(rng) >= p ? scale : 0.0f;
    CK(cudaMemcpyAsync(c->mask[i], c->mask_host, sizeof(float) * (size_t)n, cudaMemcpyHostToDevice, c->stream));
    CK(cudaStreamSynchronize(c->stream)); /* mask_host is rewritten by the next dropout */
    k_mul<<<blocks_for(n), THREADS, 0, c->stream>>>(out, in, c->mask[i], n);
}

static void batchnorm_forward(pfl_exec *x, int i, const float *params, const float *in, float *out) {
    cuda_exec *c = impl(x);
    const pfl_model *m = x->model;
    const pfl_op *op = &m->ops[i];
    const int C = op->out_c, HW = op->out_h * op->out_w;
    const float *gamma = tensor_of(m, params, op->layer, 0), *beta = tensor_of(m, params, op->layer, 1);
    if (c->batch_stats) {
        k_bn_train<<<C, THREADS, 0, c->stream>>>(out, c->stats[i], in, gamma, beta, x->batch, C, HW);
    } else {
        const float *running = params + m->layers[op->layer].state_offset;
        k_bn_eval<<<blocks_for((long)x->batch * C * HW), THREADS, 0, c->stream>>>(out, c->stats[i], in, gamma, beta,
                                                                                  running, running + C, x->batch, C, HW);
    }
}

/* fastText: the distinct rows the batch's ids read (pfl_embed_rows, first
 * appearance order) and, per row, its (sample, occurrences) pairs in sample
 * order, for the backward and the sparse step; two passes over the ids. */
static void list_embedding_rows(pfl_exec *x, const pfl_op *op) {
    cuda_exec *c = impl(x);
    const int B = x->batch, L = op->in_w;
    const float *ids = c->inputs_host;
    const int R = c->num_rows = pfl_embed_rows(c->rows_host, c->row_mark, ids, (long)B * L, op->vocab, op->padding_idx);
    for (int r = 0; r < R; r++) c->row_index[c->rows_host[r]] = r, c->row_last[r] = -1, c->row_fill[r] = 0;
    for (int n = 0; n < B; n++) /* pass 1: the samples of each row */
        for (int t = 0; t < L; t++) {
            const float v = ids[(long)n * L + t];
            if (!(v >= 0.0f && v < (float)op->vocab) || (int)v == op->padding_idx) continue;
            const int r = c->row_index[(int)v];
            if (c->row_last[r] != n) c->row_last[r] = n, c->row_fill[r]++;
        }
    c->row_start_host[0] = 0;
    for (int r = 0; r < R; r++) c->row_start_host[r + 1] = c->row_start_host[r] + c->row_fill[r], c->row_last[r] = -1;
    for (int r = 0; r < R; r++) c->row_fill[r] = c->row_start_host[r];
    for (int n = 0; n < B; n++) /* pass 2: (sample, count) */
        for (int t = 0; t < L; t++) {
            const float v = ids[(long)n * L + t];
            if (!(v >= 0.0f && v < (float)op->vocab) || (int)v == op->padding_idx) continue;
            const int r = c->row_index[(int)v];
            if (c->row_last[r] != n) {
                c->row_last[r] = n;
                const int e = c->row_fill[r]++;
                c->entries_host[2 * e] = n, c->entries_host[2 * e + 1] = 0;
            }
            c->entries_host[2 * (c->row_fill[r] - 1) + 1]++;
        }
    const int e = c->row_start_host[R];
    CK(cudaMemcpyAsync(c->rows, c->rows_host, sizeof(int) * (size_t)R, cudaMemcpyHostToDevice, c->stream));
    CK(cudaMemcpyAsync(c->row_start, c->row_start_host, sizeof(int) * (size_t)(R + 1), cudaMemcpyHostToDevice,
                       c->stream));
    CK(cudaMemcpyAsync(c->entries, c->entries_host, sizeof(int) * 2 * (size_t)e, cudaMemcpyHostToDevice, c->stream));
    CK(cudaStreamSynchronize(c->stream)); /* the host lists are rewritten by the next batch */
}

static void cuda_forward(pfl_exec *x, const pfl_xbuf *params_buf, bool train, pfl_rng *rng) {
    cuda_exec *c = impl(x);
    const pfl_model *m = x->model;
    const float *params = dev_of(params_buf);
    const int B = x->batch;
    c->dropped = train && rng != NULL, c->batch_stats = train;
    for (int i = 0; i < m->num_ops; i++) {
        const pfl_op *op = &m->ops[i];
        if (op->kind == PFL_OP_FLATTEN) continue;
        const float *in = output_of(x, op->src);
        float *out = c->act[i];
        const long n = (long)B * out_size(op);
        const float *w = tensor_of(m, params, op->layer, 0), *b = tensor_of(m, params, op->layer, 1);
        switch (op->kind) {
        case PFL_OP_CONV2D: conv_forward(x, op, out, in, w, b); break;
        case PFL_OP_LINEAR: {
            const int K = (int)in_size(op);
            gemm(c, false, true, B, op->out_c, K, 1.0f, in, K, w, K, 0.0f, out, op->out_c);
            k_bias_rows<<<blocks_for(n), THREADS, 0, c->stream>>>(out, b, B, op->out_c);
            break;
        }
        case PFL_OP_RELU: k_relu<<<blocks_for(n), THREADS, 0, c->stream>>>(out, in, n); break;
        case PFL_OP_MAXPOOL2D:
            k_maxpool<<<blocks_for(n), THREADS, 0, c->stream>>>(out, c->argmax[i], in, B * op->in_c, op->in_h,
                                                                 op->in_w, op->kernel, op->stride, op->pad, op->out_h,
                                                                 op->out_w);
            break;
        case PFL_OP_DROPOUT:
            if (c->dropped && op->drop_p > 0.0f) dropout_forward(x, i, out, in, n, rng);
            else k_copy<<<blocks_for(n), THREADS, 0, c->stream>>>(out, in, n);
            break;
        case PFL_OP_BATCHNORM2D: batchnorm_forward(x, i, params, in, out); break;
        case PFL_OP_ADD: k_add<<<blocks_for(n), THREADS, 0, c->stream>>>(out, in, output_of(x, op->src2), n); break;
        case PFL_OP_AVGPOOL:
            k_avgpool<<<blocks_for((long)B * op->in_c), THREADS, 0, c->stream>>>(out, in, (long)B * op->in_c,
                                                                                 op->in_h * op->in_w);
            break;
        case PFL_OP_EMBED_MEAN:
            k_embed_mean<<<blocks_for(n), THREADS, 0, c->stream>>>(out, in, w, B, op->in_w, op->vocab, op->out_c,
                                                                    op->padding_idx);
            list_embedding_rows(x, op);
            break;
        case PFL_OP_FLATTEN: break;
        }
        LAUNCHED();
    }
}

static double fetch_scalar(cuda_exec *c) {
    double v;
    CK(cudaMemcpyAsync(&v, c->scalar, sizeof v, cudaMemcpyDeviceToHost, c->stream));
    CK(cudaStreamSynchronize(c->stream));
    return v;
}

static float cuda_xent(pfl_exec *x, const float *offset) {
    cuda_exec *c = impl(x);
    const int B = x->batch, classes = x->model->classes;
    if (offset)
        CK(cudaMemcpyAsync(c->offset, offset, sizeof(float) * (size_t)classes, cudaMemcpyHostToDevice, c->stream));
    k_xent<<<blocks_for(B), THREADS, 0, c->stream>>>(c->probs, c->loss, output_of(x, x->model->num_ops - 1),
                                                      offset ? c->offset : NULL, c->y, B, classes);
    LAUNCHED();
    k_sum<<<1, THREADS, 0, c->stream>>>(c->scalar, c->loss, B);
    LAUNCHED();
    return (float)(fetch_scalar(c) / B);
}

static int cuda_correct(pfl_exec *x) {
    cuda_exec *c = impl(x);
    const int B = x->batch;
    k_correct<<<blocks_for(B), THREADS, 0, c->stream>>>(c->loss, output_of(x, x->model->num_ops - 1), c->y, B,
                                                         x->model->classes);
    LAUNCHED();
    k_sum<<<1, THREADS, 0, c->stream>>>(c->scalar, c->loss, B);
    LAUNCHED();
    return (int)fetch_scalar(c);
}

/* The op holding layer `layer` (the first op when none does). */
static int op_of_layer(const pfl_model *m, int layer) {
    for (int i = 0; i < m->num_ops; i++)
        if (m->ops[i].layer == layer) return i;
    return 0;
}

static const float *cuda_tap(pfl_exec *x, int layer) {
    (void)x, (void)layer;
    return NULL; /* on the GPU: read_tap copies them */
}

static void cuda_read_tap(pfl_exec *x, int layer, float *dst) {
    const pfl_model *m = x->model;
    const float *src = layer >= m->num_layers ? output_of(x, m->num_ops - 1) : output_of(x, m->ops[op_of_layer(m, layer)].src);
    const long n = layer >= m->num_layers ? m->classes : pfl_model_layer_input_size(m, layer);
    CK(cudaMemcpyAsync(dst, src, sizeof(float) * (size_t)x->batch * (size_t)n, cudaMemcpyDeviceToHost, impl(x)->stream));
    CK(cudaStreamSynchronize(impl(x)->stream));
}

static void cuda_update_stats(pfl_exec *x, pfl_xbuf *vector) {
    cuda_exec *c = impl(x);
    if (!c->batch_stats) return;
    const pfl_model *m = x->model;
    for (int i = 0; i < m->num_ops; i++) {
        const pfl_op *op = &m->ops[i];
        if (op->kind != PFL_OP_BATCHNORM2D) continue;
        float *running = dev_of(vector) + m->layers[op->layer].state_offset;
        k_bn_running<<<blocks_for(op->out_c), THREADS, 0, c->stream>>>(
            running, running + op->out_c, c->stats[i], op->out_c, (long)x->batch * op->out_h * op->out_w,
            PFL_BN_MOMENTUM);
        LAUNCHED();
    }
}

/* ---- backward ---- */

/* Where op i's parameter gradients go: `grads` (accumulated, alpha 1), or,
 * fused with plain SGD, the parameters themselves (alpha -lr). */
typedef struct {
    float *base; /* grads, or the parameters */
    float alpha;
} grad_sink;

static float *sink_tensor(const pfl_model *m, const grad_sink *s, int layer, int k) {
    if (!s->base || layer < 0 || k >= m->layers[layer].num_tensors) return NULL;
    return s->base + m->tensors[m->layers[layer].first_tensor + k].offset;
}

static void conv_backward(pfl_exec *x, const pfl_op *op, float *din, float *dw, float *db, float alpha,
                          const float *dout, const float *in, const float *w) {
    cuda_exec *c = impl(x);
    const int B = x->batch, K = op->kernel, CKK = op->in_c * K * K;
    const long HW = (long)op->out_h * op->out_w, cols = B * HW;
    k_to_channels<<<blocks_for(cols * op->out_c), THREADS, 0, c->stream>>>(c->chan, dout, B, op->out_c, HW);
    LAUNCHED();
    if (din) { /* from the weights before a fused step changes them */
        gemm(c, true, false, CKK, (int)cols, op->out_c, 1.0f, w, CKK, c->chan, (int)cols, 0.0f, c->dcol, (int)cols);
        k_col2im<<<blocks_for((long)B * in_size(op)), THREADS, 0, c->stream>>>(
            din, c->dcol, B, op->in_c, op->in_h, op->in_w, K, op->stride, op->pad, op->out_h, op->out_w);
        LAUNCHED();
    }
    k_im2col<<<blocks_for(CKK * cols), THREADS, 0, c->stream>>>(c->col, in, B, op->in_c, op->in_h, op->in_w, K,
                                                                 op->stride, op->pad, op->out_h, op->out_w);
    LAUNCHED();
    gemm(c, false, true, op->out_c, CKK, (int)cols, alpha, c->chan, (int)cols, c->col, (int)cols, 1.0f, dw, CKK);
    if (db) k_row_sums<<<op->out_c, THREADS, 0, c->stream>>>(db, c->chan, cols, alpha);
    LAUNCHED();
}

static void op_backward(pfl_exec *x, int i, const float *params, const grad_sink *sink, float *din, const float *dout) {
    cuda_exec *c = impl(x);
    const pfl_model *m = x->model;
    const pfl_op *op = &m->ops[i];
    const int B = x->batch;
    const float *in = output_of(x, op->src);
    const long n = (long)B * out_size(op);
    float *dw = sink_tensor(m, sink, op->layer, 0), *db = sink_tensor(m, sink, op->layer, 1);
    const float *w = tensor_of(m, params, op->layer, 0);
    switch (op->kind) {
    case PFL_OP_CONV2D: conv_backward(x, op, din, dw, db, sink->alpha, dout, in, w); break;
    case PFL_OP_LINEAR: {
        const int K = (int)in_size(op), N = op->out_c;
        if (din) gemm(c, false, false, B, K, N, 1.0f, dout, N, w, K, 0.0f, din, K);
        gemm(c, true, false, N, K, B, sink->alpha, dout, N, in, K, 1.0f, dw, K);
        if (db) k_col_sums<<<blocks_for(N), THREADS, 0, c->stream>>>(db, dout, B, N, sink->alpha);
        break;
    }
    case PFL_OP_RELU:
        if (din) k_relu_backward<<<blocks_for(n), THREADS, 0, c->stream>>>(din, dout, c->act[i], n);
        break;
    case PFL_OP_MAXPOOL2D:
        if (din)
            k_maxpool_backward<<<blocks_for((long)B * in_size(op)), THREADS, 0, c->stream>>>(
                din, dout, c->argmax[i], B * op->in_c, op->in_h, op->in_w, op->kernel, op->stride, op->pad, op->out_h,
                op->out_w);
        break;
    case PFL_OP_DROPOUT:
        if (din && c->dropped && op->drop_p > 0.0f) k_mul<<<blocks_for(n), THREADS, 0, c->stream>>>(din, dout, c->mask[i], n);
        else if (din) k_copy<<<blocks_for(n), THREADS, 0, c->stream>>>(din, dout, n);
        break;
    case PFL_OP_BATCHNORM2D:
        k_bn_backward<<<op->out_c, THREADS, 0, c->stream>>>(din, dw, db, dout, in, w, c->stats[i], B, op->out_c,
                                                             op->out_h * op->out_w, c->batch_stats, sink->alpha);
        break;
    case PFL_OP_ADD: /* the first operand; the shortcut is done by the caller */
        if (din) k_copy<<<blocks_for(n), THREADS, 0, c->stream>>>(din, dout, n);
        break;
    case PFL_OP_AVGPOOL:
        if (din)
            k_avgpool_backward<<<blocks_for((long)B * in_size(op)), THREADS, 0, c->stream>>>(
                din, dout, (long)B * op->in_c, op->in_h * op->in_w);
        break;
    case PFL_OP_EMBED_MEAN:
        if (c->num_rows)
            k_embed_backward<<<blocks_for((long)c->num_rows * op->out_c), THREADS, 0, c->stream>>>(
                dw, dout, c->rows, c->row_start, c->entries, c->num_rows, op->out_c, sink->alpha / (float)op->in_w);
        break;
    case PFL_OP_FLATTEN: break;
    }
    LAUNCHED();
}

/* the gradient buffer for op `src`'s output: its own for a first
 * contribution, gsum for a later one (added by gradient_done); NULL below
 * what the pass visits */
static float *gradient_target(pfl_exec *x, int src, int lowest) {
    cuda_exec *c = impl(x);
    if (src < lowest) return NULL;
    if (!c->written[src]) {
        c->written[src] = true;
        return grad_of(x, src);
    }
    return c->gsum;
}

static void gradient_done(pfl_exec *x, int src, const float *target) {
    cuda_exec *c = impl(x);
    if (!target || target != c->gsum) return;
    const long n = (long)x->batch * out_size(&x->model->ops[src]);
    k_add_into<<<blocks_for(n), THREADS, 0, c->stream>>>(grad_of(x, src), c->gsum, n);
    LAUNCHED();
}

/* A term's gradient on op i's input (host memory), added where the pass reaches it. */
typedef struct {
    int n, ops[PFL_MAX_INJECTIONS];
    const float *d[PFL_MAX_INJECTIONS];
} injections;

static void join_terms(pfl_exec *x, const injections *inj, int i) {
    cuda_exec *c = impl(x);
    const pfl_op *op = &x->model->ops[i];
    for (int k = 0; k < inj->n; k++) {
        if (inj->ops[k] != i) continue;
        const long n = (long)x->batch * in_size(op);
        CK(cudaMemcpyAsync(c->inj, inj->d[k], sizeof(float) * (size_t)n, cudaMemcpyHostToDevice, c->stream));
        k_add_into<<<blocks_for(n), THREADS, 0, c->stream>>>(grad_of(x, op->src), c->inj, n);
        LAUNCHED();
        CK(cudaStreamSynchronize(c->stream)); /* inj is reused */
    }
}

static void backward_range(pfl_exec *x, const float *params, const grad_sink *sink, int top, int lowest,
                           const float *dlogits, const injections *inj) {
    cuda_exec *c = impl(x);
    const pfl_model *m = x->model;
    for (int i = top; i >= lowest; i--) {
        const pfl_op *op = &m->ops[i];
        if (op->kind == PFL_OP_FLATTEN) {
            if (op->src >= 0) c->written[op->src] = c->written[i];
            continue;
        }
        const float *dout = grad_of(x, i) ? grad_of(x, i) : dlogits;
        float *din = gradient_target(x, op->src, lowest);
        op_backward(x, i, params, sink, din, dout);
        gradient_done(x, op->src, din);
        if (din) join_terms(x, inj, i);
        if (op->kind == PFL_OP_ADD) {
            float *d2 = gradient_target(x, op->src2, lowest);
            const long n = (long)x->batch * out_size(op);
            if (d2) k_copy<<<blocks_for(n), THREADS, 0, c->stream>>>(d2, dout, n);
            LAUNCHED();
            gradient_done(x, op->src2, d2);
        }
    }
}

/* the logits' gradient: ce_weight x the cross-entropy's, plus `on_logits` (device) */
static void start_from_logits(pfl_exec *x, const float *params, const grad_sink *sink, int lowest, float ce_weight,
                              const float *on_logits, const injections *inj) {
    cuda_exec *c = impl(x);
    const pfl_model *m = x->model;
    const int last = m->num_ops - 1;
    const long n = (long)x->batch * m->classes;
    float *dlogits = grad_of(x, last) ? grad_of(x, last) : c->dlogits;
    if (ce_weight != 0.0f)
        k_xent_backward<<<blocks_for(n), THREADS, 0, c->stream>>>(dlogits, c->probs, c->y, x->batch, m->classes,
                                                                   ce_weight, on_logits);
    else
        k_copy<<<blocks_for(n), THREADS, 0, c->stream>>>(dlogits, on_logits, n);
    LAUNCHED();
    memset(c->written, 0, sizeof c->written);
    c->written[last] = true;
    backward_range(x, params, sink, last, lowest, dlogits, inj);
}

/* without the cross-entropy or a term on the logits: from the highest term */
static void start_from_terms(pfl_exec *x, const float *params, const grad_sink *sink, int lowest, injections *inj) {
    cuda_exec *c = impl(x);
    int top = 0;
    for (int k = 1; k < inj->n; k++)
        if (inj->ops[k] > inj->ops[top]) top = k;
    const pfl_op *op = &x->model->ops[inj->ops[top]];
    float *g = grad_of(x, op->src);
    if (!g || op->src < lowest) return;
    const long n = (long)x->batch * in_size(op);
    CK(cudaMemcpyAsync(g, inj->d[top], sizeof(float) * (size_t)n, cudaMemcpyHostToDevice, c->stream));
    memset(c->written, 0, sizeof c->written);
    c->written[op->src] = true;
    injections rest = {0, {0}, {NULL}};
    for (int k = 0; k < inj->n; k++)
        if (k != top) rest.ops[rest.n] = inj->ops[k], rest.d[rest.n++] = inj->d[k];
    backward_range(x, params, sink, op->src, lowest, NULL, &rest);
    CK(cudaStreamSynchronize(c->stream)); /* inj->d[top] was copied from the host */
}

static void cuda_backward(pfl_exec *x, const pfl_xbuf *params, pfl_xbuf *grads, int lowest_layer, float ce_weight,
                          const pfl_xinjection *inj, int n_inj) {
    cuda_exec *c = impl(x);
    const pfl_model *m = x->model;
    const int lowest = lowest_layer <= 0 ? 0 : op_of_layer(m, lowest_layer);
    const grad_sink sink = {dev_of(grads), 1.0f};
    injections extra = {0, {0}, {NULL}};
    const float *on_logits = NULL;
    const long nlog = (long)x->batch * m->classes;
    for (int k = 0; k < n_inj; k++) {
        if (inj[k].layer >= m->num_layers) { /* the logits: summed on the device */
            CK(cudaMemcpyAsync(c->inj, inj[k].d, sizeof(float) * (size_t)nlog, cudaMemcpyHostToDevice, c->stream));
            if (!on_logits) k_copy<<<blocks_for(nlog), THREADS, 0, c->stream>>>(c->inj_sum, c->inj, nlog);
            else k_add_into<<<blocks_for(nlog), THREADS, 0, c->stream>>>(c->inj_sum, c->inj, nlog);
            LAUNCHED();
            CK(cudaStreamSynchronize(c->stream));
            on_logits = c->inj_sum;
        } else if (inj[k].layer > 0 && extra.n < PFL_MAX_INJECTIONS) {
            extra.ops[extra.n] = op_of_layer(m, inj[k].layer), extra.d[extra.n++] = inj[k].d;
        }
    }
    if (ce_weight != 0.0f || on_logits) start_from_logits(x, dev_of(params), &sink, lowest, ce_weight, on_logits, &extra);
    else if (extra.n > 0) start_from_terms(x, dev_of(params), &sink, lowest, &extra);
}

static int cuda_backward_sgd(pfl_exec *x, pfl_xbuf *params, float lr) {
    if (!pfl_model_sgd_fusable(x->model))
        return pfl_err("model %s: a layer other than Conv2d or Linear with bias cannot take a fused SGD step",
                       x->model->name);
    const grad_sink sink = {dev_of(params), -lr};
    const injections none = {0, {0}, {NULL}};
    start_from_logits(x, dev_of(params), &sink, 0, 1.0f, NULL, &none);
    return 0;
}

/* ---- the optimizer and the vectors ---- */

static void cuda_sgd(pfl_exec *x, pfl_xbuf *params, pfl_xbuf *grads, pfl_xbuf *velocity, size_t off, size_t n,
                     const pfl_sgd *opt) {
    float *v = opt->momentum != 0.0f && velocity && velocity->dev ? dev_of(velocity) + off : NULL;
    k_sgd<<<blocks_for((long)n), THREADS, 0, impl(x)->stream>>>(dev_of(params) + off, dev_of(grads) + off, v, (long)n,
                                                                 opt->lr, opt->momentum, opt->weight_decay);
    LAUNCHED();
}

static void cuda_sgd_rows(pfl_exec *x, pfl_xbuf *params, pfl_xbuf *grads, int layer, const pfl_sgd *opt) {
    cuda_exec *c = impl(x);
    const pfl_model *m = x->model;
    const int dim = m->ops[0].out_c;
    const size_t off = m->layers[layer].offset;
    if (!c->num_rows) return;
    k_sgd_rows<<<blocks_for((long)c->num_rows * dim), THREADS, 0, c->stream>>>(
        dev_of(params) + off, dev_of(grads) + off, c->rows, c->num_rows, dim, opt->lr, opt->weight_decay);
    LAUNCHED();
}

static void cuda_prox(pfl_exec *x, pfl_xbuf *grads, const pfl_xbuf *params, const pfl_xbuf *anchor, float mu,
                      size_t off, size_t n) {
    k_prox<<<blocks_for((long)n), THREADS, 0, impl(x)->stream>>>(dev_of(grads) + off, dev_of(params) + off,
                                                                  dev_of(anchor) + off, mu, (long)n);
    LAUNCHED();
}

static double cuda_sumsq(pfl_exec *x, const pfl_xbuf *b, size_t off, size_t n) {
    cuda_exec *c = impl(x);
    k_sumsq<<<SUMSQ_BLOCKS, THREADS, 0, c->stream>>>(c->partial, dev_of(b) + off, (long)n);
    LAUNCHED();
    k_sum<<<1, THREADS, 0, c->stream>>>(c->scalar, c->partial, SUMSQ_BLOCKS);
    LAUNCHED();
    return fetch_scalar(c);
}

static void cuda_read_op(pfl_exec *x, int op, bool grad, float *dst) {
    cuda_exec *c = impl(x);
    const float *src = grad ? grad_of(x, op) : output_of(x, op);
    if (!src) return;
    CK(cudaMemcpyAsync(dst, src, sizeof(float) * (size_t)x->batch * (size_t)out_size(&x->model->ops[op]),
                       cudaMemcpyDeviceToHost, c->stream));
    CK(cudaStreamSynchronize(c->stream));
}

extern "C" const pfl_backend pfl_backend_cuda = {
    .name = "cuda",
    .device = true,
    .available = cuda_available,
    .describe = cuda_describe,
    .create = cuda_create,
    .destroy = cuda_destroy,
    .alloc = cuda_alloc,
    .free_buf = cuda_free_buf,
    .view = cuda_view,
    .unview = cuda_unview,
    .write = cuda_write,
    .read = cuda_read,
    .zero = cuda_zero,
    .gather = cuda_gather,
    .load = cuda_load,
    .labels = cuda_labels,
    .forward = cuda_forward,
    .xent = cuda_xent,
    .correct = cuda_correct,
    .tap = cuda_tap,
    .read_tap = cuda_read_tap,
    .update_stats = cuda_update_stats,
    .backward = cuda_backward,
    .backward_sgd = cuda_backward_sgd,
    .sgd = cuda_sgd,
    .sgd_rows = cuda_sgd_rows,
    .prox = cuda_prox,
    .sumsq = cuda_sumsq,
    .read_op = cuda_read_op,
};
