/* Compiled budget maintenance of the single-kernel budget learners (kernelstream.learners.
 * compiled, "budget rules"): the update of RBP, the Forgetron, BOGD, BPA-S and the
 * Projectron(++) as C functions built from a few shared steps (append / replace / scale one
 * store, f(x_r) at a stored point, BPA-S's removal costs, the projection d = K^-1 k and the
 * bordered update of K^-1), and a block driver that runs test-then-train with the update in
 * C, so a block never returns to Python.
 *
 * A rule is one learner's _update, operation for operation: the same scalar expressions in the
 * same order (IEEE doubles, no FMA contraction: -ffp-contract=off) and, for the vector steps,
 * the same elementwise operations as the numpy code, so with the same kernel row the compiled
 * update equals the numpy one bit for bit. That includes the Projectron's projection: here
 * d_i = sum_j K_ji k_j in index order, vectorised across i (K^-1 is symmetric up to round-off,
 * its rows are contiguous), and k.d in the four-lane order of _ck_features.c, which the numpy
 * code follows (linalg.project_rows, linalg.dot4). The per-example path (learn_one) calls
 * update(), the block driver run(): both call the same rule function, so blocks and single
 * rounds agree bit for bit.
 *
 * Randomness (RBP's and BOGD p1's evicted slot) is drawn from the learner's own numpy
 * Generator through its bit generator's C interface (numpy's bitgen_t, the documented
 * `bit_generator.capsule`): next_double is what Generator.random() returns, so the stream and
 * the generator's state are those of the numpy code.
 */
#include "_ck_common.h"

/* Bumped whenever a signature or a result changes: the wrapper refuses a stale build. */
#define KB_ABI 2
#ifndef KS_SOURCE_HASH
#define KS_SOURCE_HASH "" /* setup.py defines the sources' hash */
#endif

#if defined(__x86_64__) && defined(__linux__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define KB_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef KB_CLONES
#define KB_CLONES
#endif

/* numpy/random/bitgen.h (numpy's stable C interface of its bit generators) */
typedef struct bitgen {
    void *state;
    uint64_t (*next_uint64)(void *st);
    uint32_t (*next_uint32)(void *st);
    double (*next_double)(void *st);
    uint64_t (*next_raw)(void *st);
} bitgen_t;

/* Rule codes (compiled.RULES). */
enum {
    R_RBP = 1,
    R_FORGETRON = 2,
    R_FORGETRON_P1 = 3,
    R_BOGD = 4,
    R_BOGD_P1 = 5,
    R_BPAS = 6,
    R_PROJECTRON = 7,
    R_PROJECTRON_PP = 8,
    R_LAST = 8
};
/* Constants each rule reads from prm[], ints from ist[], floats from fst[] (compiled.py packs
 * them from the learner's attributes). */
static const int NPRM[] = {0, 1, 2, 3, 3, 5, 2, 3, 3};
static const int NIST[] = {0, 0, 2, 2, 1, 0, 0, 0, 0};
static const int NFST[] = {0, 0, 1, 0, 0, 0, 0, 0, 2};

/* Same threshold as projectron.DELTA_RTOL. */
#define DELTA_RTOL 1e-8

/* One support-vector store (store.SVStore's arrays) and its kernel. */
typedef struct {
    double *X, *sqn, *a;
    int64_t *ids, *s;
    Py_ssize_t n, cap, d;
    double norm2;
    int kind;
    double p;
    long degree;
    const char *err; /* why a rule failed (set without the GIL; raised after it) */
} Store;

typedef struct {
    int code;
    const double *prm;
    int64_t *ist;
    double *fst;
    double *K; /* K^-1 (Projectron), side x side, row-major */
    Py_ssize_t side;
    bitgen_t *rng;
    double *w1, *w2, *w3; /* scratch, cap each: d = K^-1 k; the row of f(x_r); run's rows */
    Py_ssize_t *nz;  /* scratch, d */
} Rule;

/* ---- shared steps --------------------------------------------------------------------- */

/* kappa(x, x) from ||x||^2 (Kernel.diag: 1, or zz ** degree as Python computes it) */
static inline double kdiag(const Store *st, double xx) {
    return st->kind == K_GAUSSIAN ? 1.0 : pow(xx, (double)st->degree);
}

/* SVStore.append: the norm update is its expression, in its order. */
static int store_append(Store *st, const double *x, double xx, double coef, int64_t t,
                        double fz, double kzz) {
    Py_ssize_t j = st->n;
    if (j >= st->cap) {
        st->err = "the store is full";
        return -1;
    }
    memcpy(st->X + j * st->d, x, (size_t)st->d * sizeof(double));
    st->sqn[j] = xx;
    st->a[j] = coef;
    st->ids[j] = t;
    st->s[j] = t;
    st->n = j + 1;
    st->norm2 += 2.0 * coef * fz + coef * coef * kzz;
    return 0;
}

/* SVStore.replace: slot j holds x from now on; the tracked norm is no longer known. */
static void store_replace(Store *st, Py_ssize_t j, const double *x, double xx, double coef,
                          int64_t t) {
    memcpy(st->X + j * st->d, x, (size_t)st->d * sizeof(double));
    st->sqn[j] = xx;
    st->a[j] = coef;
    st->ids[j] = t;
    st->s[j] = t;
    st->norm2 = NAN;
}

static void scale_coefs(double *a, Py_ssize_t n, double c) {
    for (Py_ssize_t j = 0; j < n; j++) a[j] *= c;
}

/* SVStore.scale */
static void store_scale(Store *st, double c) {
    scale_coefs(st->a, st->n, c);
    st->norm2 *= c * c;
}

/* f(x_r) at stored point r, by the row of the scores (KernelLearner._eval_sv) */
static double eval_sv(const Store *st, Rule *R, Py_ssize_t r) {
    return row_score(st->X, st->sqn, st->a, st->n, st->d, st->X + r * st->d, st->sqn[r],
                     st->kind, st->p, st->degree, R->nz, R->w2);
}

/* The uniform slot floor(U n) of an eviction, U = Generator.random() */
static Py_ssize_t uniform_slot(Rule *R, Py_ssize_t n) {
    double u = R->rng->next_double(R->rng->state);
    return (Py_ssize_t)(u * (double)n);
}

/* BPA-S at the budget, Gaussian kernel: argmin_r a_r^2 - (a_r k_r)^2 (the removal cost up to
 * terms shared by every r), the first minimum; a NaN cost wins, as in numpy's argmin. */
static Py_ssize_t removal_argmin(const double *a, const double *k, Py_ssize_t n) {
    Py_ssize_t best = 0;
    double qb = 0.0;
    for (Py_ssize_t j = 0; j < n; j++) {
        double u = a[j] * k[j];
        u *= u;
        double q = a[j] * a[j];
        q -= u;
        if (q != q) return j;
        if (j == 0 || q < qb) {
            best = j;
            qb = q;
        }
    }
    return best;
}

/* d_i = sum_j K_ji k_j (j in index order) for i < n: the projection coefficients d = K^-1 k,
 * read along K's contiguous rows (K^-1 is symmetric up to round-off), W outputs at a time with
 * their sums in registers, so they advance side by side (vectorised); each sum is the same
 * sequence of operations at any vector width and blocking. */
#define KINV_BLOCK(W)                                                                         \
    static inline void kinv_block##W(const double *K, Py_ssize_t side, Py_ssize_t n,         \
                                     const double *k, double *d) {                           \
        double acc[W];                                                                        \
        for (int l = 0; l < W; l++) acc[l] = 0.0;                                            \
        for (Py_ssize_t j = 0; j < n; j++) {                                                  \
            const double *row = K + j * side;                                                 \
            double kj = k[j];                                                                 \
            for (int l = 0; l < W; l++) acc[l] += row[l] * kj;                                \
        }                                                                                     \
        for (int l = 0; l < W; l++) d[l] = acc[l];                                           \
    }
KINV_BLOCK(32)
KINV_BLOCK(8)
KINV_BLOCK(1)

KB_CLONES
static void kinv_apply(const double *K, Py_ssize_t side, Py_ssize_t n, const double *k,
                       double *d) {
    Py_ssize_t i = 0;
    for (; i + 32 <= n; i += 32) kinv_block32(K + i, side, n, k, d + i);
    for (; i + 8 <= n; i += 8) kinv_block8(K + i, side, n, k, d + i);
    for (; i < n; i++) kinv_block1(K + i, side, n, k, d + i);
}

/* <u, v> in a fixed four-lane order: lane l sums the indices = l mod 4 in order, then
 * (l0 + l1) + (l2 + l3) */
static double dot4(const double *u, const double *v, Py_ssize_t n) {
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    Py_ssize_t j = 0;
    for (; j + 4 <= n; j += 4) {
        s0 += u[j] * v[j];
        s1 += u[j + 1] * v[j + 1];
        s2 += u[j + 2] * v[j + 2];
        s3 += u[j + 3] * v[j + 3];
    }
    for (; j < n; j++) s0 += u[j] * v[j];
    return (s0 + s1) + (s2 + s3);
}

/* linalg.bordered_inverse_append: K^-1 grown by one point (border -d/delta, corner 1/delta),
 * elementwise as numpy does it */
static void bordered_append(double *K, Py_ssize_t side, Py_ssize_t n, const double *d,
                            double delta) {
    double inv = 1.0 / delta;
    double ninv = -inv;
    for (Py_ssize_t i = 0; i < n; i++) {
        double di = d[i];
        double *row = K + i * side;
        for (Py_ssize_t j = 0; j < n; j++) row[j] -= di * (d[j] * ninv);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        double e = d[i] * ninv;
        K[i * side + n] = e;
        K[n * side + i] = e;
    }
    K[n * side + n] = inv;
}

/* ---- the rules: each learner's _update (see its module for the paper's pseudocode) ------ */

static int rule_rbp(Store *st, Rule *R, const double *x, double xx, double y, double f,
                    const double *k, int64_t t) {
    (void)k;
    if (!(y * f <= 0.0)) return 0;
    Py_ssize_t budget = (Py_ssize_t)R->prm[0];
    if (st->n >= budget) {
        store_replace(st, uniform_slot(R, st->n), x, xx, y, t);
        return 0;
    }
    return store_append(st, x, xx, y, t, f, kdiag(st, xx));
}

static int rule_forgetron(Store *st, Rule *R, const double *x, double xx, double y, double f,
                          const double *k, int64_t t) {
    if (y * f > 0.0) return 0;
    R->ist[1] += 1; /* M */
    Py_ssize_t budget = (Py_ssize_t)R->prm[0];
    if (st->n < budget) return store_append(st, x, xx, y, t, f, kdiag(st, xx));
    Py_ssize_t r = (Py_ssize_t)R->ist[0], n = st->n;
    double ar = st->a[r];
    double am = ar * (eval_sv(st, R, r) + y * k[r]);
    double A = ar * ar - 2.0 * am;
    double b = 2.0 * fabs(ar);
    double c = R->fst[0] - 15.0 * (double)R->ist[1] / 32.0;
    double phi;
    if (A + b + c <= 0.0) {
        phi = 1.0;
    } else {
        double disc = b * b - 4.0 * A * c;
        double sq = disc > 0.0 ? sqrt(disc) : 0.0;
        if (R->prm[1] != 0.0 && A < 0.0) {
            phi = (-b - sq) / (2.0 * A);
        } else {
            double den = b + sq;
            if (den > 0.0 && disc >= 0.0) {
                phi = -2.0 * c / den;
                if (0.0 > phi) phi = 0.0; /* Python's max(phi, 0.0) */
                if (1.0 < phi) phi = 1.0;
            } else {
                phi = 0.0;
            }
        }
    }
    if (phi != 1.0) scale_coefs(st->a, n, phi);
    R->fst[0] += (A * phi + b) * phi;
    store_replace(st, r, x, xx, phi * y, t);
    R->ist[0] = (r + 1) % budget;
    return 0;
}

static int rule_forgetron_p1(Store *st, Rule *R, const double *x, double xx, double y,
                             double f, const double *k, int64_t t) {
    if (y * f > 0.0) return 0;
    R->ist[1] += 1;
    Py_ssize_t budget = (Py_ssize_t)R->prm[0];
    double kt = kdiag(st, xx);
    double norm2 = st->norm2 + 2.0 * y * f + kt; /* ||f + y kappa(x_t, .)||^2 */
    double phi = R->prm[1];
    if (norm2 > 0.0) {
        double v = R->prm[2] / sqrt(norm2);
        if (v < phi) phi = v;
    }
    if (st->n < budget) {
        if (store_append(st, x, xx, y, t, f, kt) < 0) return -1;
    } else {
        Py_ssize_t r = (Py_ssize_t)R->ist[0];
        double ar = st->a[r];
        norm2 += ar * (ar * kdiag(st, st->sqn[r]) - 2.0 * eval_sv(st, R, r) - 2.0 * y * k[r]);
        store_replace(st, r, x, xx, y, t);
        st->norm2 = 0.0 > norm2 ? 0.0 : norm2;
        R->ist[0] = (r + 1) % budget;
    }
    store_scale(st, phi);
    return 0;
}

static int rule_bogd(Store *st, Rule *R, const double *x, double xx, double y, double f,
                     const double *k, int64_t t) {
    (void)k;
    Py_ssize_t n = st->n, budget = (Py_ssize_t)R->prm[0];
    double shrink = R->prm[2];
    if (y * f >= 1.0) {
        if (shrink != 1.0 && n) store_scale(st, shrink);
        return 0;
    }
    double coef = R->prm[1] * y;
    if (n < budget) {
        if (shrink != 1.0 && n) store_scale(st, shrink);
        return store_append(st, x, xx, coef, t, f * shrink, kdiag(st, xx));
    }
    if (R->code == R_BOGD) {
        if (shrink != 1.0) store_scale(st, shrink);
        Py_ssize_t r = (Py_ssize_t)R->ist[0];
        store_replace(st, r, x, xx, coef, t);
        R->ist[0] = (r + 1) % budget;
        return 0;
    }
    /* p1: the shrink and the B/(B-1) rescale, a uniform eviction, the l-inf clip */
    scale_coefs(st->a, n, R->prm[3]);
    store_replace(st, uniform_slot(R, n), x, xx, coef, t);
    double m = 0.0;
    for (Py_ssize_t j = 0; j < n; j++) {
        double v = fabs(st->a[j]);
        if (v != v) {
            m = v;
            break;
        }
        if (j == 0 || v > m) m = v;
    }
    double clip = R->prm[4];
    if (m > clip) scale_coefs(st->a, n, clip / m);
    return 0;
}

static int rule_bpas(Store *st, Rule *R, const double *x, double xx, double y, double f,
                     const double *k, int64_t t) {
    double loss = 1.0 - y * f;
    if (loss <= 0.0) return 0;
    double kt = kdiag(st, xx); /* 1: the rule runs for the Gaussian kernel only */
    if (kt <= 0.0) return 0;
    double c = R->prm[1], v = loss / kt;
    double tau = v < c ? v : c; /* Python's min(c, v) */
    if (st->n < (Py_ssize_t)R->prm[0]) return store_append(st, x, xx, tau * y, t, f, kt);
    Py_ssize_t r = removal_argmin(st->a, k, st->n);
    double beta = st->a[r] * k[r] / kt + tau * y;
    store_replace(st, r, x, xx, beta, t);
    return 0;
}

static int projectron_add(Store *st, Rule *R, const double *x, double xx, double y, double f,
                          const double *d, double delta, double kxx, int64_t t) {
    if (st->n >= R->side) {
        st->err = "K^-1 is full";
        return -1;
    }
    if (R->code == R_PROJECTRON_PP) R->fst[0] = R->fst[1] = NAN; /* K^-1 changes: bounds unknown */
    bordered_append(R->K, R->side, st->n, d, delta);
    return store_append(st, x, xx, y, t, f, kxx);
}

/* An upper bound of the spectral radius of A = (|M| + |M|^T) / 2 for the live n x n block M of
 * K^-1 (Collatz-Wielandt: rho(A) <= max_i (A v)_i / v_i for any v > 0; v from a few power
 * steps so the bound is close to rho). rho(A) bounds lambda_max of M's symmetric part, hence
 * k^T M k <= rho ||k||^2, and |k|^T |M| |k| too (the round-off of the computed k^T M k).
 * v and w: n doubles of scratch each. Inf or NaN when M holds one (then nothing is skipped). */
static double kinv_rho(const double *K, Py_ssize_t side, Py_ssize_t n, double *v, double *w) {
    for (Py_ssize_t i = 0; i < n; i++) v[i] = 1.0;
    double rho = INFINITY;
    for (int it = 0; it <= 12; it++) {
        for (Py_ssize_t i = 0; i < n; i++) { /* w = (|M| v + |M|^T v) / 2, by rows */
            const double *row = K + i * side;
            double s = 0.0;
            for (Py_ssize_t j = 0; j < n; j++) s += fabs(row[j]) * v[j];
            w[i] = s;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            const double *row = K + i * side;
            double vi = v[i];
            for (Py_ssize_t j = 0; j < n; j++) w[j] += fabs(row[j]) * vi;
        }
        double top = 0.0;
        rho = 0.0;
        for (Py_ssize_t i = 0; i < n; i++) {
            w[i] *= 0.5;
            double q = w[i] / v[i];
            if (q > rho || q != q) rho = q; /* a NaN sticks */
            if (w[i] > top) top = w[i];
        }
        if (!(rho < INFINITY) || !(top > 0.0)) return INFINITY;
        /* the next v: A v normalised, kept positive (the bound needs v > 0) */
        for (Py_ssize_t i = 0; i < n; i++) {
            double q = w[i] / top;
            v[i] = q > 1e-3 ? q : 1e-3;
        }
    }
    return rho;
}

/* max |M_ij - M_ji| over the live block (K^-1 is symmetric up to the round-off of its
 * updates); NaN when M holds one */
static double kinv_asym(const double *K, Py_ssize_t side, Py_ssize_t n) {
    double m = 0.0;
    for (Py_ssize_t i = 0; i < n; i++)
        for (Py_ssize_t j = i + 1; j < n; j++) {
            double e = fabs(K[i * side + j] - K[j * side + i]);
            if (e > m || e != e) m = e;
            if (m != m) return m;
        }
    return m;
}

/* Whether beta = tau (2 l - tau p - 2 c sqrt(kxx - p)) (tau = min(l / p, 1), so tau p =
 * min(l, p)) is negative for every p <= P, with a margin of 1e-6 (relative) for the round-off
 * of the computed beta and of this test. With c^2 > kxx, 2 l - min(l, p) - 2 c sqrt(kxx - p)
 * grows with p, so its value at P decides; else only tau p >= 0 is used: it needs
 * kxx - p <= (l / c)^2. */
static int beta_negative(double P, double kxx, double loss, double c) {
    double low = kxx - P; /* Delta >= low */
    if (!(low > 0.0)) return 0;
    if (c * c > kxx * (1.0 + 1e-3)) {
        double lhs = 2.0 * loss - (P < loss ? P : loss);
        return lhs * (1.0 + 1e-6) < 2.0 * c * sqrt(low) * (1.0 - 1e-6);
    }
    double lc = loss / c;
    return low > lc * lc * (1.0 + 1e-6);
}

/* <u, v> in eight lanes, for the bounds below (any order: their margins cover the round-off
 * of every order), vectorised */
KB_CLONES
static double dot8(const double *u, const double *v, Py_ssize_t n) {
    double s[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    Py_ssize_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int l = 0; l < 8; l++) s[l] += u[j + l] * v[j + l];
    for (; j < n; j++) s[0] += u[j] * v[j];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

#define SKIP_NL 16 /* kernel values the second bound takes exactly */
#define SKIP_NB 24 /* exponent buckets: 0..22 below the largest, the last one for the rest */

/* The binary exponent field of |v| (0 for zero and subnormals; NaN/inf: 2047). */
static inline int binexp(double v) {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    return (int)((u >> 52) & 0x7ff);
}

/* Bucket of v: how many binary orders of magnitude below the largest (exponent etop), capped
 * at SKIP_NB - 1 (NaN and inf, which only the largest can be, land in 0 with it). */
static inline int bucket(int etop, double v) {
    int b = etop - binexp(v);
    return b < 0 ? 0 : (b > SKIP_NB - 1 ? SKIP_NB - 1 : b);
}

/* Whether a Projectron++ margin error (loss 0 < l < 1) certainly leaves the model alone,
 * without the projection d = K^-1 k (on some streams nearly every round is a margin error and
 * nearly none updates). With M = K^-1, rho >= lambda_max of M's symmetric part (kinv_rho) and
 * e = max |M_ij - M_ji| (kinv_asym), ||Pk||^2 = k^T M k is bounded by rho ||k||^2, then, if that
 * is not enough, by splitting k = k_L + k_S with k_L the SKIP_NL largest entries:
 *   k^T M k <= 2 k_L^T M k - k_L^T M k_L + e |k_L|_1 |k_S|_1 + rho |k_S|^2
 * (k_S^T M k_L equals k_L^T M k_S up to e; k_S^T M k_S <= rho |k_S|^2): SKIP_NL rows of M
 * instead of all of them. Each bound gets a margin (1e-6 relative, 1e-6 rho ||k||^2) that
 * covers the round-off of the computed k^T M k (at most 2n 2^-53 rho ||k||^2) and of these
 * sums, so a skipped round is one whose computed beta is negative: skipping changes no result.
 * Only with the budget full: K^-1 no longer changes, so rho and e are computed once (fst[0],
 * fst[1]; NaN = unknown, reset by every change of K^-1). */
static int margin_skips(Store *st, Rule *R, const double *k, double kxx, double loss) {
    Py_ssize_t n = st->n;
    double c = R->prm[2];
    if (n < (Py_ssize_t)R->prm[0] || !(c > 0.0)) return 0;
    double rho = R->fst[0], asym = R->fst[1];
    if (rho != rho || asym != asym) {
        rho = kinv_rho(R->K, R->side, n, R->w1, R->w2);
        asym = kinv_asym(R->K, R->side, n);
        R->fst[0] = rho;
        R->fst[1] = asym;
    }
    double kk = dot8(k, k, n);
    if (beta_negative(rho * kk * (1.0 + 1e-6), kxx, loss, c)) return 1;
    if (n <= SKIP_NL) return 0;
    double top = 0.0;
    for (Py_ssize_t j = 0; j < n; j++) {
        double a = fabs(k[j]);
        if (a > top) top = a;
    }
    /* k_L: by binary orders of magnitude below the largest, the first SKIP_NL */
    int etop = binexp(top);
    Py_ssize_t cnt[SKIP_NB];
    for (int b = 0; b < SKIP_NB; b++) cnt[b] = 0;
    for (Py_ssize_t j = 0; j < n; j++) cnt[bucket(etop, k[j])]++;
    int last = 0; /* the bucket where k_L stops */
    Py_ssize_t below = 0;
    while (below + cnt[last] < SKIP_NL) below += cnt[last++];
    Py_ssize_t L[SKIP_NL], nl = 0, fill = SKIP_NL - below;
    double l1 = 0.0, s1 = 0.0, kks = 0.0;
    for (Py_ssize_t j = 0; j < n; j++) {
        int b = bucket(etop, k[j]);
        if (b < last || (b == last && fill-- > 0)) {
            L[nl++] = j;
            l1 += fabs(k[j]);
        } else {
            s1 += fabs(k[j]);
            kks += k[j] * k[j];
        }
    }
    if (!(rho * kks < kxx)) return 0; /* the small entries alone leave no room: hopeless */
    double t1 = 0.0, tll = 0.0;
    for (Py_ssize_t a = 0; a < nl; a++) {
        const double *row = R->K + L[a] * R->side;
        double r = dot8(row, k, n), rl = 0.0;
        for (Py_ssize_t b = 0; b < nl; b++) rl += row[L[b]] * k[L[b]];
        t1 += k[L[a]] * r;
        tll += k[L[a]] * rl;
    }
    double P = 2.0 * t1 - tll + asym * l1 * s1 + rho * (kks + 1e-6 * kk);
    return beta_negative(P + fabs(P) * 1e-6, kxx, loss, c);
}

static int rule_projectron(Store *st, Rule *R, const double *x, double xx, double y, double f,
                           const double *k, int64_t t) {
    double m = y * f;
    Py_ssize_t n = st->n;
    double *d = R->w1;
    if (m <= 0.0) { /* mistake: add, or project when in span or at the budget */
        double kxx = kdiag(st, xx);
        if (n == 0) {
            if (kxx > 0.0) return projectron_add(st, R, x, xx, y, f, NULL, kxx, kxx, t);
            return 0;
        }
        kinv_apply(R->K, R->side, n, k, d);
        double kd = dot4(k, d, n);
        double delta = kxx - kd;
        Py_ssize_t budget = (Py_ssize_t)R->prm[0];
        int room = budget == 0 || n < budget;
        if (room && delta > R->prm[1] && delta > DELTA_RTOL * kxx)
            return projectron_add(st, R, x, xx, y, f, d, delta, kxx, t);
        for (Py_ssize_t j = 0; j < n; j++) st->a[j] += y * d[j];
        st->norm2 += 2.0 * y * f + kd;
        return 0;
    }
    if (!(m < 1.0 && R->code == R_PROJECTRON_PP)) return 0;
    /* ++: a margin error 0 < loss < 1, with |S| >= 1 */
    double loss = 1.0 - m;
    double kxx = kdiag(st, xx);
    if (margin_skips(st, R, k, kxx, loss)) return 0;
    kinv_apply(R->K, R->side, n, k, d);
    double pk2 = dot4(k, d, n);
    double delta = kxx - pk2;
    if (!(pk2 > 0.0)) return 0;
    double tau = loss / pk2;
    if (tau > 1.0) tau = 1.0;
    double root = delta > 0.0 ? sqrt(delta) : 0.0;
    if (tau * (2.0 * loss - tau * pk2 - 2.0 * R->prm[2] * root) >= 0.0) {
        double ty = tau * y;
        for (Py_ssize_t j = 0; j < n; j++) st->a[j] += ty * d[j];
        st->norm2 += 2.0 * ty * f + tau * tau * pk2;
    }
    return 0;
}

typedef int (*rule_fn)(Store *, Rule *, const double *, double, double, double, const double *,
                       int64_t);
static const rule_fn RULES[] = {NULL,           rule_rbp,  rule_forgetron,
                                rule_forgetron_p1, rule_bogd, rule_bogd,
                                rule_bpas,      rule_projectron, rule_projectron};

/* ---- argument parsing ----------------------------------------------------------------- */

/* The common head of update() and run():
 *   code, X (cap x d), sqn, a, ids, s, n, norm2, kind, p, degree, prm, ist, fst,
 *   Kinv (or None), bit generator capsule (or None), scratch (>= 3 cap), work (int64, >= d)
 * Takes b[0..10] (the caller releases them). */
#define NHEAD 18
static int parse_head(PyObject *const *args, Buf *b, Store *st, Rule *R, const char *fn) {
    memset(st, 0, sizeof *st);
    memset(R, 0, sizeof *R);
    R->code = (int)PyLong_AsLong(args[0]);
    if (PyErr_Occurred()) return -1;
    if (R->code < 1 || R->code > R_LAST) {
        PyErr_Format(PyExc_ValueError, "_ck_budget.%s: unknown rule %d", fn, R->code);
        return -1;
    }
    if (get_buf(args[1], &b[0], 1, "X", 'd') < 0 || get_buf(args[2], &b[1], 1, "sqn", 'd') < 0
        || get_buf(args[3], &b[2], 1, "a", 'd') < 0 || get_buf(args[4], &b[3], 1, "ids", 'q') < 0
        || get_buf(args[5], &b[4], 1, "s", 'q') < 0)
        return -1;
    st->n = PyLong_AsSsize_t(args[6]);
    st->norm2 = PyFloat_AsDouble(args[7]);
    st->kind = (int)PyLong_AsLong(args[8]);
    st->p = PyFloat_AsDouble(args[9]);
    st->degree = PyLong_AsLong(args[10]);
    if (PyErr_Occurred()) return -1;
    if (b[0].view.ndim != 2) {
        PyErr_Format(PyExc_ValueError, "_ck_budget.%s: X must be 2-D", fn);
        return -1;
    }
    st->cap = b[0].view.shape[0];
    st->d = b[0].view.shape[1];
    if (n_items(&b[1]) < st->cap || n_items(&b[2]) < st->cap || n_items(&b[3]) < st->cap
        || n_items(&b[4]) < st->cap || st->n < 0 || st->n > st->cap) {
        PyErr_Format(PyExc_ValueError, "_ck_budget.%s: the store's arrays disagree", fn);
        return -1;
    }
    if (st->kind < K_GAUSSIAN || st->kind > K_LINEAR) {
        PyErr_Format(PyExc_ValueError, "_ck_budget.%s: unknown kernel code %d", fn, st->kind);
        return -1;
    }
    st->X = b[0].view.buf;
    st->sqn = b[1].view.buf;
    st->a = b[2].view.buf;
    st->ids = b[3].view.buf;
    st->s = b[4].view.buf;
    if (get_buf(args[11], &b[5], 0, "prm", 'd') < 0 || get_buf(args[12], &b[6], 1, "ist", 'q') < 0
        || get_buf(args[13], &b[7], 1, "fst", 'd') < 0)
        return -1;
    if (n_items(&b[5]) < NPRM[R->code] || n_items(&b[6]) < NIST[R->code]
        || n_items(&b[7]) < NFST[R->code]) {
        PyErr_Format(PyExc_ValueError, "_ck_budget.%s: too few rule constants or state", fn);
        return -1;
    }
    R->prm = b[5].view.buf;
    R->ist = b[6].view.buf;
    R->fst = b[7].view.buf;
    if ((R->code == R_FORGETRON || R->code == R_FORGETRON_P1 || R->code == R_BOGD)
        && st->n >= (Py_ssize_t)R->prm[0] && (R->ist[0] < 0 || R->ist[0] >= st->n)) {
        PyErr_Format(PyExc_ValueError, "_ck_budget.%s: ring head out of range", fn);
        return -1;
    }
    int projectron = R->code == R_PROJECTRON || R->code == R_PROJECTRON_PP;
    if (projectron) {
        if (get_buf(args[14], &b[8], 1, "Kinv", 'd') < 0) return -1;
        if (b[8].view.ndim != 2 || b[8].view.shape[0] != b[8].view.shape[1]
            || b[8].view.shape[0] < st->n) {
            PyErr_Format(PyExc_ValueError, "_ck_budget.%s: Kinv must be square, >= n", fn);
            return -1;
        }
        R->K = b[8].view.buf;
        R->side = b[8].view.shape[0];
    }
    if (R->code == R_RBP || R->code == R_BOGD_P1) {
        R->rng = PyCapsule_GetPointer(args[15], "BitGenerator");
        if (R->rng == NULL) return -1;
    }
    if (get_buf(args[16], &b[9], 1, "scratch", 'd') < 0
        || get_buf(args[17], &b[10], 1, "work", 'q') < 0)
        return -1;
    if (n_items(&b[9]) < 3 * st->cap || n_items(&b[10]) < st->d) {
        PyErr_Format(PyExc_ValueError, "_ck_budget.%s: scratch or work is too short", fn);
        return -1;
    }
    R->w1 = b[9].view.buf;
    R->w2 = R->w1 + st->cap;
    R->w3 = R->w2 + st->cap;
    R->nz = b[10].view.buf;
    return 0;
}

/* _ck_omkc.c includes this file for the rules and parse_head above (KB_RULES_ONLY): the
 * entry points and the module below are this module's own. */
#ifndef KB_RULES_ONLY

/* ---- Python entry points -------------------------------------------------------------- */

static PyObject *py_update(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    /* update(<head>, x, xx, y, f, k, t) -> (n, norm2): one round's update given its score f
     * and kernel row k (k[:n]); the learner's ist / fst arrays are updated in place */
    if (nargs != NHEAD + 6)
        return PyErr_Format(PyExc_TypeError, "update() takes %d arguments, got %zd", NHEAD + 6,
                            nargs);
    Buf b[13];
    memset(b, 0, sizeof b);
    Store st;
    Rule R;
    double xx, y, f;
    int64_t t;
    if (parse_head(args, b, &st, &R, "update") < 0) goto fail;
    if (get_buf(args[NHEAD], &b[11], 0, "x", 'd') < 0
        || get_buf(args[NHEAD + 4], &b[12], 0, "k", 'd') < 0)
        goto fail;
    xx = PyFloat_AsDouble(args[NHEAD + 1]);
    y = PyFloat_AsDouble(args[NHEAD + 2]);
    f = PyFloat_AsDouble(args[NHEAD + 3]);
    t = PyLong_AsLongLong(args[NHEAD + 5]);
    if (PyErr_Occurred()) goto fail;
    if (n_items(&b[11]) != st.d || n_items(&b[12]) < st.n) {
        PyErr_SetString(PyExc_ValueError, "_ck_budget.update: x or k has the wrong size");
        goto fail;
    }
    if (RULES[R.code](&st, &R, b[11].view.buf, xx, y, f, b[12].view.buf, t) < 0) {
        PyErr_Format(PyExc_RuntimeError, "_ck_budget.update: %s", st.err);
        goto fail;
    }
    release(b, 13);
    return Py_BuildValue("(nd)", st.n, st.norm2);
fail:
    release(b, 13);
    return NULL;
}

static PyObject *py_run(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    /* run(<head>, Z, zz, y, t0, out, nsv) -> (n, norm2)
     * Test-then-train over every row of the block Z: out[i] = f(Z_i) (the row and score of
     * _ckernels), then the rule's update of round t0 + i; nsv[i] (nsv may be None) receives
     * the number of support vectors after it. */
    if (nargs != NHEAD + 6)
        return PyErr_Format(PyExc_TypeError, "run() takes %d arguments, got %zd", NHEAD + 6,
                            nargs);
    Buf b[16];
    memset(b, 0, sizeof b);
    Store st;
    Rule R;
    int64_t t0;
    int with_nsv = args[NHEAD + 5] != Py_None, rc = 0;
    Py_ssize_t rows;
    if (parse_head(args, b, &st, &R, "run") < 0) goto fail;
    if (get_buf(args[NHEAD], &b[11], 0, "Z", 'd') < 0
        || get_buf(args[NHEAD + 1], &b[12], 0, "zz", 'd') < 0
        || get_buf(args[NHEAD + 2], &b[13], 0, "y", 'd') < 0
        || get_buf(args[NHEAD + 4], &b[14], 1, "out", 'd') < 0
        || (with_nsv && get_buf(args[NHEAD + 5], &b[15], 1, "nsv", 'q') < 0))
        goto fail;
    t0 = PyLong_AsLongLong(args[NHEAD + 3]);
    if (PyErr_Occurred()) goto fail;
    rows = b[11].view.ndim == 2 ? b[11].view.shape[0] : -1;
    if (rows < 0 || b[11].view.shape[1] != st.d || n_items(&b[12]) < rows
        || n_items(&b[13]) < rows || n_items(&b[14]) < rows
        || (with_nsv && n_items(&b[15]) < rows)) {
        PyErr_SetString(PyExc_ValueError, "_ck_budget.run: block arrays have the wrong size");
        goto fail;
    }
    {
        const double *Z = b[11].view.buf, *zz = b[12].view.buf, *y = b[13].view.buf;
        double *out = b[14].view.buf, *k = R.w3;
        int64_t *nsv = with_nsv ? b[15].view.buf : NULL;
        rule_fn rule = RULES[R.code];
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < rows; i++) {
            const double *z = Z + i * st.d;
            double f = row_score(st.X, st.sqn, st.a, st.n, st.d, z, zz[i], st.kind, st.p,
                                 st.degree, R.nz, k);
            out[i] = f;
            if (rule(&st, &R, z, zz[i], y[i], f, k, t0 + i) < 0) {
                rc = -1;
                break;
            }
            if (nsv) nsv[i] = st.n;
        }
        Py_END_ALLOW_THREADS
    }
    if (rc < 0) {
        PyErr_Format(PyExc_RuntimeError, "_ck_budget.run: %s", st.err);
        goto fail;
    }
    release(b, 16);
    return Py_BuildValue("(nd)", st.n, st.norm2);
fail:
    release(b, 16);
    return NULL;
}

/* ---- Gaussian rows that keep their distances: OKL-GD and OKS-SIL ----------------------- */
/* Their stores are their own arrays: OKL-GD's centres with one width g_j each, OKS-SIL's
 * SVStore under one gamma. A round's row is dist_row() and its score dot4(a, k), what
 * _ck_features.score computes for their feature maps (compiled.dist_map). */

enum { D_OKLGD = 1, D_OKSSIL = 2 };
/* What a rule did with a round: all of it, nothing (the learner's Python update does the
 * round: OKS-SIL's uniform fill-up when fewer than s kernel values are positive), or all but
 * the RLD solve (a nearly singular sample: the pseudo-inverse, in Python, from the drawn
 * sample) */
enum { DONE = 0, DEFER_ALL = 1, DEFER_RLD = 2 };
static const int DNPRM[] = {0, 5, 8};
static const int DNIST[] = {0, 2, 0};
static const int DNFST[] = {0, 2, 1};

#define PINV_ATOL 1e-8 /* linalg.PINV_ATOL */

typedef struct {
    double *X, *sqn, *a, *g; /* g: OKL-GD's widths; OKS-SIL: NULL (one gamma, fst[0]) */
    int64_t *ids, *s;        /* OKS-SIL's SVStore ids and insertion rounds */
    Py_ssize_t n, cap, d;
    const char *err; /* as Store's */
} DStore;

typedef struct {
    int code;
    const double *prm;
    int64_t *ist;
    double *fst;
    bitgen_t *rng;
    double *w1, *w2; /* scratch, cap each */
    Py_ssize_t *nz;
    Py_ssize_t idx[3]; /* OKS-SIL: the sample of a deferred RLD solve */
} DRule;

static int rule_oklgd(DStore *st, DRule *R, const double *x, double xx, double y, double f,
                      double *d2, double *k, int64_t t) {
    (void)t;
    if (y * f >= 1.0) return DONE;
    const double *prm = R->prm;
    double sig = R->fst[1];
    Py_ssize_t j = (Py_ssize_t)R->ist[1];
    if (j >= 0) { /* width step on the most recent centre */
        sig += prm[2] * y * R->fst[0] * k[j] * d2[j] / (sig * sig * sig);
        if (prm[3] > sig) sig = prm[3]; /* Python's min(max(sig, lo), hi) */
        if (prm[4] < sig) sig = prm[4];
        R->fst[1] = sig;
    }
    Py_ssize_t budget = (Py_ssize_t)prm[0];
    if (st->n < budget) {
        j = st->n;
        st->n += 1;
    } else {
        j = (Py_ssize_t)R->ist[0];
        R->ist[0] = (j + 1) % budget;
    }
    memcpy(st->X + j * st->d, x, (size_t)st->d * sizeof(double));
    st->sqn[j] = xx;
    st->a[j] = prm[1] * y;
    st->g[j] = 0.5 / (sig * sig);
    R->ist[1] = j;
    R->fst[0] = y;
    return DONE;
}

/* OKS-SIL's kernel step: gamma <- clip(gamma - rho/(t+1) y sum_j a_j psi_j d2_j) (numpy: a
 * BLAS dot; here dot4: round-off) */
static void okssil_step(DRule *R, double y, const double *d2, const double *psi,
                        const double *a, Py_ssize_t n, double fw, int64_t t) {
    const double *prm = R->prm;
    if (prm[7] != 0.0 && y * fw >= 1.0) return; /* recheck_margin */
    double *pd = R->w2;
    for (Py_ssize_t j = 0; j < n; j++) pd[j] = psi[j] * d2[j];
    double grad = dot4(a, pd, n);
    double g = R->fst[0] - prm[4] / (double)(t + 1) * y * grad;
    if (prm[5] > g) g = prm[5];
    if (prm[6] < g) g = prm[6];
    R->fst[0] = g;
}

/* experts.weighted_distinct(rng, w, 3) with the compiled cdf_search: rounds of 3 - found
 * uniforms against the running sums of w, repeats dropped, found entries zeroed */
static void weighted3(DRule *R, const double *w, Py_ssize_t n, Py_ssize_t *found) {
    Py_ssize_t nf = 0;
    double *wc = R->w1, *c = R->w2, u[3];
    for (;;) {
        double tot = 0.0;
        for (Py_ssize_t j = 0; j < n; j++) c[j] = tot += w[j];
        Py_ssize_t m = 3 - nf;
        for (Py_ssize_t i = 0; i < m; i++) u[i] = R->rng->next_double(R->rng->state);
        for (Py_ssize_t i = 0; i < m; i++) {
            double v = u[i] * tot;
            Py_ssize_t lo = 0, hi = n;
            while (lo < hi) {
                Py_ssize_t mid = lo + (hi - lo) / 2;
                if (c[mid] > v)
                    hi = mid;
                else
                    lo = mid + 1;
            }
            if (lo >= n) lo = n - 1; /* u < 1 keeps v below the total: never taken */
            int seen = 0;
            for (Py_ssize_t q = 0; q < nf; q++) seen |= found[q] == lo;
            if (!seen) found[nf++] = lo;
        }
        if (nf == 3) return;
        if (w != wc) {
            memcpy(wc, w, (size_t)n * sizeof(double));
            w = wc;
        }
        for (Py_ssize_t q = 0; q < nf; q++) wc[found[q]] = 0.0;
    }
}

/* oks_sil.rld_residual_unit3: alpha = K^-1 b, delta = 1 - b.alpha for a unit-diagonal 3 x 3
 * K by an unrolled Cholesky solve; 0 when K is too close to singular for it */
static int rld_unit3(double k01, double k02, double k12, double b0, double b1, double b2,
                     double *alpha, double *delta) {
    double v1 = 1.0 - k01 * k01;
    if (!(v1 > 0.0)) return 0;
    double l11 = sqrt(v1);
    double l21 = (k12 - k02 * k01) / l11;
    double v2 = 1.0 - k02 * k02 - l21 * l21;
    if (!(v2 > 0.0) || !(v1 * v2 > 9.0 * PINV_ATOL)) return 0;
    double l22 = sqrt(v2);
    double z1 = (b1 - k01 * b0) / l11;
    double z2 = (b2 - k02 * b0 - l21 * z1) / l22;
    double a2 = z2 / l22;
    double a1 = (z1 - l21 * a2) / l11;
    alpha[0] = b0 - k01 * a1 - k02 * a2;
    alpha[1] = a1;
    alpha[2] = a2;
    double dl = 1.0 - (b0 * b0 + z1 * z1 + z2 * z2);
    *delta = dl > 0.0 ? dl : 0.0;
    return 1;
}

/* _ck_features.sample_kernel's kernel entries for the sample idx[0..3): with G the rows' inner
 * products (sums in index order; the six side by side), K_ij = exp(-gamma d) for d = (G_ii +
 * G_jj) - 2 G_ij > 0, else 1 */
static void gram3(const double *X, Py_ssize_t d, const Py_ssize_t *idx, double neg_g,
                  double *k01, double *k02, double *k12) {
    const double *u = X + idx[0] * d, *v = X + idx[1] * d, *w = X + idx[2] * d;
    double g00 = 0.0, g11 = 0.0, g22 = 0.0, g01 = 0.0, g02 = 0.0, g12 = 0.0;
    for (Py_ssize_t q = 0; q < d; q++) {
        g00 += u[q] * u[q];
        g11 += v[q] * v[q];
        g22 += w[q] * w[q];
        g01 += u[q] * v[q];
        g02 += u[q] * w[q];
        g12 += v[q] * w[q];
    }
    double d01 = (g00 + g11) - 2.0 * g01, d02 = (g00 + g22) - 2.0 * g02,
           d12 = (g11 + g22) - 2.0 * g12;
    *k01 = d01 > 0.0 ? exp(neg_g * d01) : 1.0;
    *k02 = d02 > 0.0 ? exp(neg_g * d02) : 1.0;
    *k12 = d12 > 0.0 ? exp(neg_g * d12) : 1.0;
}

static int rule_okssil(DStore *st, DRule *R, const double *x, double xx, double y, double f,
                       double *d2, double *psi, int64_t t) {
    if (y * f >= 1.0) return DONE;
    const double *prm = R->prm;
    Py_ssize_t n = st->n;
    double eta = prm[1];
    if (n < (Py_ssize_t)prm[0]) { /* room: append x_t; the step sees the old points */
        if (n >= st->cap) {
            st->err = "the store is full";
            return -1;
        }
        memcpy(st->X + n * st->d, x, (size_t)st->d * sizeof(double));
        st->sqn[n] = xx;
        st->a[n] = eta * y;
        st->ids[n] = t;
        st->s[n] = t;
        st->n = n + 1;
        if (n) okssil_step(R, y, d2, psi, st->a, n, f + eta * y, t);
        return DONE;
    }
    Py_ssize_t pos = 0;
    for (Py_ssize_t j = 0; j < n; j++) pos += psi[j] != 0.0;
    if (n < 3 || pos < 3) return DEFER_ALL;
    Py_ssize_t *idx = R->idx;
    weighted3(R, psi, n, idx);
    double neg_g = -R->fst[0];
    double k01, k02, k12, alpha[3], delta;
    gram3(st->X, st->d, idx, neg_g, &k01, &k02, &k12);
    if (!rld_unit3(k01, k02, k12, psi[idx[0]], psi[idx[1]], psi[idx[2]], alpha, &delta))
        return DEFER_RLD;
    double *a = st->a;
    if (delta > prm[3]) { /* RLD holds: x_t takes the slot of the smallest |a_r| */
        Py_ssize_t r = 0;
        double best = 0.0;
        for (Py_ssize_t j = 0; j < n; j++) {
            double v = fabs(a[j]);
            if (v != v) {
                r = j;
                break;
            }
            if (j == 0 || v < best) {
                r = j;
                best = v;
            }
        }
        double ar = a[r];
        double fb = f - ar * psi[r] + ar;
        double new_w = y * fb < 1.0 ? eta * y : 0.0;
        memcpy(st->X + r * st->d, x, (size_t)st->d * sizeof(double));
        st->sqn[r] = xx;
        a[r] = new_w;
        st->ids[r] = t;
        st->s[r] = t;
        psi[r] = 0.0;
        d2[r] = 0.0;
        okssil_step(R, y, d2, psi, a, n, fb - ar + new_w, t);
    } else { /* compensation on the sampled points */
        double c = eta * y;
        for (int q = 0; q < 3; q++) a[idx[q]] += c * alpha[q];
    }
    return DONE;
}

typedef int (*drule_fn)(DStore *, DRule *, const double *, double, double, double, double *,
                        double *, int64_t);
static const drule_fn DRULES[] = {NULL, rule_oklgd, rule_okssil};

/* The head of update_dist() and run_dist():
 *   code, X (cap x d), sqn, a, g (or None), ids (or None), s (or None), n, prm, ist, fst,
 *   bit generator capsule (or None), scratch (>= 2 cap), work (int64, >= d)
 * Takes b[0..10]. */
#define DHEAD 14
static int parse_dhead(PyObject *const *args, Buf *b, DStore *st, DRule *R, const char *fn) {
    memset(st, 0, sizeof *st);
    memset(R, 0, sizeof *R);
    R->code = (int)PyLong_AsLong(args[0]);
    if (PyErr_Occurred()) return -1;
    if (R->code != D_OKLGD && R->code != D_OKSSIL) {
        PyErr_Format(PyExc_ValueError, "_ck_budget.%s: unknown rule %d", fn, R->code);
        return -1;
    }
    int okl = R->code == D_OKLGD;
    if (get_buf(args[1], &b[0], 1, "X", 'd') < 0 || get_buf(args[2], &b[1], 1, "sqn", 'd') < 0
        || get_buf(args[3], &b[2], 1, "a", 'd') < 0
        || (okl && get_buf(args[4], &b[3], 1, "g", 'd') < 0)
        || (!okl && get_buf(args[5], &b[4], 1, "ids", 'q') < 0)
        || (!okl && get_buf(args[6], &b[5], 1, "s", 'q') < 0))
        return -1;
    st->n = PyLong_AsSsize_t(args[7]);
    if (PyErr_Occurred()) return -1;
    if (b[0].view.ndim != 2) {
        PyErr_Format(PyExc_ValueError, "_ck_budget.%s: X must be 2-D", fn);
        return -1;
    }
    st->cap = b[0].view.shape[0];
    st->d = b[0].view.shape[1];
    if (n_items(&b[1]) < st->cap || n_items(&b[2]) < st->cap
        || (okl && n_items(&b[3]) < st->cap)
        || (!okl && (n_items(&b[4]) < st->cap || n_items(&b[5]) < st->cap)) || st->n < 0
        || st->n > st->cap) {
        PyErr_Format(PyExc_ValueError, "_ck_budget.%s: the store's arrays disagree", fn);
        return -1;
    }
    st->X = b[0].view.buf;
    st->sqn = b[1].view.buf;
    st->a = b[2].view.buf;
    st->g = okl ? b[3].view.buf : NULL;
    st->ids = okl ? NULL : b[4].view.buf;
    st->s = okl ? NULL : b[5].view.buf;
    if (get_buf(args[8], &b[6], 0, "prm", 'd') < 0 || get_buf(args[9], &b[7], 1, "ist", 'q') < 0
        || get_buf(args[10], &b[8], 1, "fst", 'd') < 0)
        return -1;
    if (n_items(&b[6]) < DNPRM[R->code] || n_items(&b[7]) < DNIST[R->code]
        || n_items(&b[8]) < DNFST[R->code]) {
        PyErr_Format(PyExc_ValueError, "_ck_budget.%s: too few rule constants or state", fn);
        return -1;
    }
    R->prm = b[6].view.buf;
    R->ist = b[7].view.buf;
    R->fst = b[8].view.buf;
    if (okl && (R->ist[0] < 0 || R->ist[0] >= (st->n > 0 ? st->n : 1) || R->ist[1] >= st->n
                || (Py_ssize_t)R->prm[0] > st->cap)) {
        PyErr_Format(PyExc_ValueError, "_ck_budget.%s: ring slots out of range", fn);
        return -1;
    }
    if (!okl) {
        R->rng = PyCapsule_GetPointer(args[11], "BitGenerator");
        if (R->rng == NULL) return -1;
    }
    if (get_buf(args[12], &b[9], 1, "scratch", 'd') < 0
        || get_buf(args[13], &b[10], 1, "work", 'q') < 0)
        return -1;
    if (n_items(&b[9]) < 2 * st->cap || n_items(&b[10]) < st->d) {
        PyErr_Format(PyExc_ValueError, "_ck_budget.%s: scratch or work is too short", fn);
        return -1;
    }
    R->w1 = b[9].view.buf;
    R->w2 = R->w1 + st->cap;
    R->nz = b[10].view.buf;
    return 0;
}

static PyObject *dist_result(Py_ssize_t i, int status, const DStore *st, const DRule *R) {
    if (status == DEFER_RLD)
        return Py_BuildValue("(nin[nnn])", i, status, st->n, R->idx[0], R->idx[1], R->idx[2]);
    return Py_BuildValue("(ninO)", i, status, st->n, Py_None);
}

static PyObject *py_update_dist(PyObject *Py_UNUSED(self), PyObject *const *args,
                                Py_ssize_t nargs) {
    /* update_dist(<head>, x, xx, y, f, d2, k, t) -> (0, status, n, idx): one round's update
     * given its distances d2 and Gaussian row k (changed as the learner's update changes
     * them); status DEFER_ALL / DEFER_RLD hands (the rest of) the round to Python, idx being
     * the drawn sample of a deferred RLD solve */
    if (nargs != DHEAD + 7)
        return PyErr_Format(PyExc_TypeError, "update_dist() takes %d arguments, got %zd",
                            DHEAD + 7, nargs);
    Buf b[14];
    memset(b, 0, sizeof b);
    DStore st;
    DRule R;
    PyObject *res = NULL;
    double xx, y, f;
    int64_t t;
    int status;
    if (parse_dhead(args, b, &st, &R, "update_dist") < 0) goto done;
    if (get_buf(args[DHEAD], &b[11], 0, "x", 'd') < 0
        || get_buf(args[DHEAD + 4], &b[12], 1, "d2", 'd') < 0
        || get_buf(args[DHEAD + 5], &b[13], 1, "k", 'd') < 0)
        goto done;
    xx = PyFloat_AsDouble(args[DHEAD + 1]);
    y = PyFloat_AsDouble(args[DHEAD + 2]);
    f = PyFloat_AsDouble(args[DHEAD + 3]);
    t = PyLong_AsLongLong(args[DHEAD + 6]);
    if (PyErr_Occurred()) goto done;
    if (n_items(&b[11]) != st.d || n_items(&b[12]) < st.n || n_items(&b[13]) < st.n) {
        PyErr_SetString(PyExc_ValueError, "_ck_budget.update_dist: x, d2 or k has the wrong size");
        goto done;
    }
    status = DRULES[R.code](&st, &R, b[11].view.buf, xx, y, f, b[12].view.buf, b[13].view.buf, t);
    if (status >= 0)
        res = dist_result(0, status, &st, &R);
    else
        PyErr_Format(PyExc_RuntimeError, "_ck_budget.update_dist: %s", st.err);
done:
    release(b, 14);
    return res;
}

static PyObject *py_run_dist(PyObject *Py_UNUSED(self), PyObject *const *args,
                             Py_ssize_t nargs) {
    /* run_dist(<head>, Z, zz, y, start, t0, out, nsv, d2, k) -> (i, status, n, idx)
     * Test-then-train over rows start.. of the block Z (round t0 + i for row i): out[i] =
     * f(Z_i), then the rule's update; nsv[i] (nsv may be None) receives n. Stops at the end
     * of the block (i = rows, status DONE) or at a row whose update the rule hands to Python
     * (status DEFER_*), with that row's distances and Gaussian row in d2[:n] and k[:n]. */
    if (nargs != DHEAD + 9)
        return PyErr_Format(PyExc_TypeError, "run_dist() takes %d arguments, got %zd",
                            DHEAD + 9, nargs);
    Buf b[18];
    memset(b, 0, sizeof b);
    DStore st;
    DRule R;
    PyObject *res = NULL;
    Py_ssize_t start, rows, i = 0;
    int64_t t0;
    int with_nsv = args[DHEAD + 6] != Py_None, status = DONE;
    if (parse_dhead(args, b, &st, &R, "run_dist") < 0) goto done;
    if (get_buf(args[DHEAD], &b[11], 0, "Z", 'd') < 0
        || get_buf(args[DHEAD + 1], &b[12], 0, "zz", 'd') < 0
        || get_buf(args[DHEAD + 2], &b[13], 0, "y", 'd') < 0
        || get_buf(args[DHEAD + 5], &b[14], 1, "out", 'd') < 0
        || (with_nsv && get_buf(args[DHEAD + 6], &b[15], 1, "nsv", 'q') < 0)
        || get_buf(args[DHEAD + 7], &b[16], 1, "d2", 'd') < 0
        || get_buf(args[DHEAD + 8], &b[17], 1, "k", 'd') < 0)
        goto done;
    start = PyLong_AsSsize_t(args[DHEAD + 3]);
    t0 = PyLong_AsLongLong(args[DHEAD + 4]);
    if (PyErr_Occurred()) goto done;
    rows = b[11].view.ndim == 2 ? b[11].view.shape[0] : -1;
    if (rows < 0 || b[11].view.shape[1] != st.d || n_items(&b[12]) < rows
        || n_items(&b[13]) < rows || n_items(&b[14]) < rows
        || (with_nsv && n_items(&b[15]) < rows) || n_items(&b[16]) < st.cap
        || n_items(&b[17]) < st.cap || start < 0 || start > rows) {
        PyErr_SetString(PyExc_ValueError, "_ck_budget.run_dist: block arrays have the wrong size");
        goto done;
    }
    {
        const double *Z = b[11].view.buf, *zz = b[12].view.buf, *y = b[13].view.buf;
        double *out = b[14].view.buf, *d2 = b[16].view.buf, *k = b[17].view.buf;
        int64_t *nsv = with_nsv ? b[15].view.buf : NULL;
        drule_fn rule = DRULES[R.code];
        double g1 = st.g ? 0.0 : R.fst[0];
        Py_BEGIN_ALLOW_THREADS
        for (i = start; i < rows; i++) {
            const double *z = Z + i * st.d;
            double f = 0.0;
            if (st.n) {
                if (!st.g) g1 = R.fst[0]; /* OKS-SIL's gamma moves with its updates */
                dist_row(st.X, st.sqn, st.n, st.d, z, zz[i], st.g, g1, R.nz, d2, k);
                f = dot4(st.a, k, st.n);
            }
            out[i] = f;
            status = rule(&st, &R, z, zz[i], y[i], f, d2, k, t0 + i);
            if (status != DONE) break;
            if (nsv) nsv[i] = st.n;
        }
        Py_END_ALLOW_THREADS
    }
    if (status >= 0)
        res = dist_result(i, status, &st, &R);
    else
        PyErr_Format(PyExc_RuntimeError, "_ck_budget.run_dist: %s", st.err);
done:
    release(b, 18);
    return res;
}

static PyMethodDef methods[] = {
    {"update", (PyCFunction)(void (*)(void))py_update, METH_FASTCALL,
     "update(code, store..., rule state..., x, xx, y, f, k, t) -> (n, norm2): one round"},
    {"update_dist", (PyCFunction)(void (*)(void))py_update_dist, METH_FASTCALL,
     "update_dist(code, store..., x, xx, y, f, d2, k, t) -> (0, status, n, idx): one round"},
    {"run_dist", (PyCFunction)(void (*)(void))py_run_dist, METH_FASTCALL,
     "run_dist(code, store..., Z, zz, y, start, t0, out, nsv, d2, k) -> (i, status, n, idx)"},
    {"run", (PyCFunction)(void (*)(void))py_run, METH_FASTCALL,
     "run(code, store..., rule state..., Z, zz, y, t0, out, nsv) -> (n, norm2): a block"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_ck_budget",
    "Compiled budget maintenance of kernelstream's single-kernel budget learners.", -1, methods,
};

PyMODINIT_FUNC PyInit__ck_budget(void) {
    PyObject *mod = PyModule_Create(&module);
    if (mod == NULL) return NULL;
    if (PyModule_AddIntConstant(mod, "ABI", KB_ABI) < 0
        || PyModule_AddStringConstant(mod, "SOURCE_HASH", KS_SOURCE_HASH) < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}

#endif /* KB_RULES_ONLY */
