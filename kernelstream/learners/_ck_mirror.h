/* The AO2MD arithmetic of a round (Liao & Li, ECML-PKDD 2021; ea2oks.py: EA2OKS._update's
 * per-kernel constants, OptimisticMirror.correct), shared by _ck_multi's per-round entry points
 * (ea2oks_step, mirror_correct) and _ck_experts's EA2OKS block: the same IEEE operations in the
 * same order as the Python they replace, so either path gives its numbers bit for bit. */
#ifndef KS_CK_MIRROR_H
#define KS_CK_MIRROR_H
#include "_ck_common.h"

/* EA2OKS's per-kernel update constants: for every kernel i with margin y f_i < 1, in order,
 * the next uniform of u decides whether x_t joins S_i; c, A, B (zeroed first) receive the
 * expert loss and the two coefficients. Returns the number of uniforms used, or -1 when the
 * nu uniforms of u run out. */
static inline Py_ssize_t ea2oks_consts(Py_ssize_t K, double y, const double *f, const double *m2,
                                       const double *mux, double lam, double norm, double beta,
                                       const double *u, Py_ssize_t nu, double *c, double *A,
                                       double *B) {
    Py_ssize_t r = 0;
    for (Py_ssize_t i = 0; i < K; i++) {
        c[i] = A[i] = B[i] = 0.0;
        double mi = y * f[i];
        if (!(mi < 1.0)) continue;
        if (r >= nu) return -1;
        c[i] = (1.0 - mi) / norm;
        /* g = ||y k(x, .) - mu||, Z = beta (g + ||mu||), P = g / Z */
        double g2 = 1.0 + m2[i] - 2.0 * y * mux[i];
        double g = sqrt(0.0 > g2 ? 0.0 : g2); /* Python's max(g2, 0.0) */
        double z = beta * (g + sqrt(0.0 > m2[i] ? 0.0 : m2[i]));
        double prob = z > 0.0 ? g / z : 0.0;
        if (u[r++] < prob) {
            A[i] = lam * y / prob;
            B[i] = lam * (1.0 - 1.0 / prob);
        } else {
            B[i] = lam;
        }
    }
    return r;
}

/* For every kernel i: H[i, :v] += A_i kv[i, :v], then += (B_i / v) KVy[i, :v] (numpy's two
 * broadcast updates, element by element); kv is K x v, H and KVy are K x M (C order). */
static inline void mirror_h(Py_ssize_t K, Py_ssize_t v, Py_ssize_t M, const double *A,
                            const double *B, const double *kv, const double *KVy, double *H) {
    for (Py_ssize_t i = 0; i < K && v; i++) {
        double ai = A[i], bv = B[i] / (double)v;
        for (Py_ssize_t j = 0; j < v; j++) H[i * M + j] += ai * kv[i * v + j];
        for (Py_ssize_t j = 0; j < v; j++) H[i * M + j] += bv * KVy[i * M + j];
    }
}

/* One kernel's correction, after x_t (coefficient ai) and the reservoir points its store
 * lacked were appended: the tracked norm of f + ai k(x_t, .) + bi mu (from the store's n2,
 * the reservoir's m2, ip, and fx, mux at x_t), the merge of bi (y_V / v) into the store's
 * coefficients a at the reservoir's slots p[0..v) (all < n), the projection onto
 * ||f|| <= radius (a[0..n) and the H row Hi[0..v) scaled by *fac). Returns ||f||^2. */
static inline double mirror_correct1(double *a, Py_ssize_t n, const int64_t *p, Py_ssize_t v,
                                     const double *yv, double ai, double bi, double n2,
                                     double m2, double ip, double fx, double mux, double U2,
                                     double radius, double *Hi, double *fac) {
    double nn = n2 + bi * (bi * m2 + 2.0 * ip);
    if (ai != 0.0) nn += ai * (ai + 2.0 * fx + 2.0 * bi * mux);
    if (bi != 0.0)
        for (Py_ssize_t j = 0; j < v; j++)
            a[p[j]] += bi * (yv[j] / (double)v); /* np.multiply.outer(b, y_V / v) */
    double s = 1.0;
    if (nn > U2) {
        s = radius / sqrt(nn);
        for (Py_ssize_t j = 0; j < n; j++) a[j] *= s;
        for (Py_ssize_t j = 0; j < v; j++) Hi[j] *= s;
        nn = U2;
    } else if (nn < 0.0) { /* round-off */
        nn = 0.0;
    }
    *fac = s;
    return nn;
}

#endif /* KS_CK_MIRROR_H */
