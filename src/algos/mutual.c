#include "algos/mutual.h"

#include <math.h>
#include <string.h>

/* log softmax of one row of C logits into out (C floats) */
static void log_softmax(const float *z, int C, double *out) {
    double zmax = z[0];
    for (int c = 1; c < C; c++) zmax = z[c] > zmax ? z[c] : zmax;
    double sum = 0.0;
    for (int c = 0; c < C; c++) sum += exp((double)z[c] - zmax);
    const double lse = zmax + log(sum);
    for (int c = 0; c < C; c++) out[c] = (double)z[c] - lse;
}

/* KL(t || s) over one row, t and s given as log-probabilities, and its
 * gradients: with respect to s's logits (t fixed) into ds, and with
 * respect to t's logits (s fixed) into dt, each scaled by `scale`. */
static double kl_row(const double *lt, const double *ls, int C, double scale, float *ds, float *dt) {
    double kl = 0.0;
    for (int c = 0; c < C; c++) kl += exp(lt[c]) * (lt[c] - ls[c]);
    for (int c = 0; c < C; c++) {
        const double t = exp(lt[c]), s = exp(ls[c]);
        if (ds) ds[c] += (float)(scale * (s - t));
        if (dt) dt[c] += (float)(scale * t * ((lt[c] - ls[c]) - kl));
    }
    return kl;
}

void pfl_mutual_kl(const float *zp, const float *zq, int B, int C, float wp, float wq, bool live, float *gp, float *gq,
                   double *kl_qp, double *kl_pq) {
    double lp[256], lq[256]; /* labels are bytes: C <= 256 */
    const double elements = (double)B * C;
    *kl_qp = *kl_pq = 0.0;
    for (int n = 0; n < B; n++) {
        const size_t row = (size_t)n * C;
        log_softmax(zp + row, C, lp);
        log_softmax(zq + row, C, lq);
        /* wp KL(q || p): P's term, its target q */
        *kl_qp += kl_row(lq, lp, C, wp / elements, gp + row, live ? gq + row : NULL);
        /* wq KL(p || q): Q's term, its target p */
        *kl_pq += kl_row(lp, lq, C, wq / elements, gq + row, live ? gp + row : NULL);
    }
    *kl_qp /= elements, *kl_pq /= elements;
}

double pfl_mutual_xent(const float *z, const uint8_t *y, int B, int C) {
    double l[256], sum = 0.0;
    for (int n = 0; n < B; n++) {
        log_softmax(z + (size_t)n * C, C, l);
        sum -= l[y[n]];
    }
    return sum / B;
}

void pfl_mutual_clip(pfl_exec *x, pfl_xbuf *g, size_t n, float max_norm) {
    const double coef = max_norm / (sqrt(pfl_exec_sumsq(x, g, 0, n)) + 1e-6);
    if (coef >= 1.0) return;
    float *h = pfl_exec_host(g);
    for (size_t j = 0; j < n; j++) h[j] *= (float)coef;
}
