/* The vectorised loops of _ck_features.c's maps: random Fourier features (the projection
 * Omega x and cos/sin by Cody-Waite reduction and fdlibm's kernel polynomials), the
 * Nystrom / sketched product z = M k, and rff-rls's recursive least-squares step (u = P z,
 * the rank-1 update of P). _ck_features.c says why they give the same numbers at any vector
 * width. Included by _ck_features.c only. */
#ifndef KS_CK_FEATURES_LOOPS_H
#define KS_CK_FEATURES_LOOPS_H
#include "_ck_common.h"

/* ---- random Fourier features ---------------------------------------------------------- */

#define RFF_REDUCE_MAX 1.0e5 /* |u| below this: k = round(u 2/pi) < 2^17, reduction exact */
static const double INVPIO2 = 6.36619772367581382433e-01;
static const double PIO2_1 = 1.57079632673412561417e+00;  /* first 33 bits of pi/2 */
static const double PIO2_2 = 6.07710050630396597660e-11;  /* next 33 bits */
static const double PIO2_2T = 2.02226624879595063154e-21; /* pi/2 - (PIO2_1 + PIO2_2) */
static const double ROUND = 0x1.8p52;                     /* x + ROUND - ROUND rounds x */
static const double S1 = -1.66666666666666324348e-01, S2 = 8.33333333332248946124e-03,
                    S3 = -1.98412698298579493134e-04, S4 = 2.75573137070700676789e-06,
                    S5 = -2.50507602534068634195e-08, S6 = 1.58969099521155010221e-10;
static const double C1 = 4.16666666666666019037e-02, C2 = -1.38888888888741095749e-03,
                    C3 = 2.48015872894767294178e-05, C4 = -2.75573143513906633035e-07,
                    C5 = 2.08757232129817482790e-09, C6 = -1.13596475577881948265e-11;

/* cos(v), sin(v) for |v| <= RFF_REDUCE_MAX, without branches. */
static inline void sincos_reduced(double v, double *cv, double *sv) {
    double k = (v * INVPIO2 + ROUND) - ROUND;   /* nearest integer to v / (pi/2) */
    double r = ((v - k * PIO2_1) - k * PIO2_2) - k * PIO2_2T; /* v - k pi/2, |r| <= pi/4 */
    double k4 = (k * 0.25 + ROUND) - ROUND;
    double q = k - 4.0 * k4; /* k mod 4, in {-2, -1, 0, 1, 2} */
    double z = r * r;
    double s = r + (z * r) * (S1 + z * (S2 + z * (S3 + z * (S4 + z * (S5 + z * S6)))));
    double cr = z * (C1 + z * (C2 + z * (C3 + z * (C4 + z * (C5 + z * C6)))));
    double hz = 0.5 * z, w = 1.0 - hz;
    double c = w + (((1.0 - w) - hz) + z * cr);
    double aq = fabs(q);
    int odd = aq == 1.0, two = aq == 2.0;
    double sn = odd ? c : s, cs = odd ? s : c;
    *sv = (two || q == -1.0) ? -sn : sn;
    *cv = (two || q == 1.0) ? -cs : cs;
}

/* u = Omega x (Omega^T given, d x D row-major) over x's non-zeros nz[0..m): each u_i is the
 * sum in index order, as dots() would give it, but computed column by column (vectorised). */
KS_CLONES
static void project(const double *OmT, Py_ssize_t D, const double *x, const Py_ssize_t *nz,
                    Py_ssize_t m, double *u) {
    for (Py_ssize_t i = 0; i < D; i++) u[i] = 0.0;
    for (Py_ssize_t t = 0; t < m; t++) {
        const double *col = OmT + nz[t] * D;
        double xv = x[nz[t]];
        for (Py_ssize_t i = 0; i < D; i++) u[i] += col[i] * xv;
    }
}

/* z = M k from M^T (n x rp row-major, rp = r rounded up to a multiple of 8, zero-padded):
 * z_i = sum_j M_ij k_j in index order (the sums of dots(M, ...)), computed row of M^T by row
 * of M^T by cols_block (_ck_common.h): all the features' sums advance side by side (one
 * chain of n dependent adds in all, not r of them). */

KS_CLONES
static void matvec_t(const double *Mt, Py_ssize_t n, Py_ssize_t rp, const double *k, double *z) {
    Py_ssize_t i0 = 0;
    for (; i0 + 32 <= rp; i0 += 32) cols_block32(Mt + i0, n, rp, k, z + i0);
    switch (rp - i0) {
    case 24: cols_block24(Mt + i0, n, rp, k, z + i0); break;
    case 16: cols_block16(Mt + i0, n, rp, k, z + i0); break;
    case 8: cols_block8(Mt + i0, n, rp, k, z + i0); break;
    default: break;
    }
}

/* z[0..D) = cos u, z[D..2D) = sin u, where u arrives in z[D..2D). */
KS_CLONES
static void cos_sin(double *z, Py_ssize_t D) {
    int far = 0;
    for (Py_ssize_t i = 0; i < D; i++) far |= !(fabs(z[D + i]) <= RFF_REDUCE_MAX);
    if (!far) {
        for (Py_ssize_t i = 0; i < D; i++) {
            double c, s;
            sincos_reduced(z[D + i], &c, &s);
            z[i] = c;
            z[D + i] = s;
        }
        return;
    }
    for (Py_ssize_t i = 0; i < D; i++) { /* rare: a far (or non-finite) argument */
        double v = z[D + i], c, s;
        if (fabs(v) <= RFF_REDUCE_MAX) {
            sincos_reduced(v, &c, &s);
        } else {
            c = cos(v);
            s = sin(v);
        }
        z[i] = c;
        z[D + i] = s;
    }
}

/* ---- recursive least squares (rff-rls) ------------------------------------------------ */

/* P (k x k) is symmetric and only its upper triangle is kept, packed row by row: row j holds
 * P_ji for i >= j (k - j numbers, from offset j k - j (j - 1) / 2; k (k + 1) / 2 in all). Half
 * the memory of the full matrix, and half its traffic, which bounds a round's time. The loops
 * address P_ji as row[i] with row = (start of row j) - j, so they are the full matrix's loops
 * (the same operations in the same order) on half the storage. */

/* u = P z: u_i sums z_j P_ji over the rows j < i in index order (an axpy over row j's tail,
 * elementwise, so it vectorises without reordering a sum), then adds <P_i,i.., z_i..> (dot4
 * over row i's tail, the diagonal first). */
KS_CLONES
static void rls_solve(const double *P, Py_ssize_t k, const double *z, double *u) {
    for (Py_ssize_t i = 0; i < k; i++) u[i] = 0.0;
    for (Py_ssize_t j = 0; j < k; P += k - j, j++) {
        const double *row = P - j; /* P: P_jj */
        double zj = z[j];
        u[j] += dot4(row + j, z + j, k - j);
        for (Py_ssize_t i = j + 1; i < k; i++) u[i] += zj * row[i];
    }
}

/* P <- P - (u u^T) r on the upper triangle, element (j, i) as (u_j u_i) r. With zn (the next
 * row's features), un = P_new zn as rls_solve computes it, row j of P taken right after its
 * update (one pass over P instead of two; the same operations on every element, so the same
 * numbers). */
KS_CLONES
static void rls_rank1(double *P, Py_ssize_t k, const double *u, double r, const double *zn,
                      double *un) {
    if (zn)
        for (Py_ssize_t i = 0; i < k; i++) un[i] = 0.0;
    for (Py_ssize_t j = 0; j < k; P += k - j, j++) {
        double *row = P - j, uj = u[j]; /* P: P_jj */
        for (Py_ssize_t i = j; i < k; i++) row[i] -= (uj * u[i]) * r;
        if (zn) {
            double zj = zn[j];
            un[j] += dot4(row + j, zn + j, k - j);
            for (Py_ssize_t i = j + 1; i < k; i++) un[i] += zj * row[i];
        }
    }
}

#endif /* KS_CK_FEATURES_LOOPS_H */
