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
 * update equals the numpy one bit for bit. The exception is the Projectron's projection: numpy
 * computes d = K^-1 k and k.d with BLAS (blocked sums); here d_i = sum_j K_ji k_j in index
 * order, vectorised across i (K^-1 is symmetric up to round-off, its columns are contiguous),
 * and k.d in the four-lane order of _ck_features.c, so the two differ at round-off. The
 * per-example path (learn_one) calls update(), the block driver run(): both call the same rule
 * function, so blocks and single rounds agree bit for bit.
 *
 * Randomness (RBP's and BOGD p1's evicted slot) is drawn from the learner's own numpy
 * Generator through its bit generator's C interface (numpy's bitgen_t, the documented
 * `bit_generator.capsule`): next_double is what Generator.random() returns, so the stream and
 * the generator's state are those of the numpy code.
 */
#include "_ck_common.h"

/* Bumped whenever a signature or a result changes: the wrapper refuses a stale build. */
#define KB_ABI 1
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
static const int NFST[] = {0, 0, 1, 0, 0, 0, 0, 0, 0};

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
        PyErr_SetString(PyExc_RuntimeError, "_ck_budget: the store is full");
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
 * read along K's contiguous rows (K^-1 is symmetric up to round-off) so that the n sums
 * advance side by side, vectorised; each sum is the same sequence of operations at any
 * vector width. */
KB_CLONES
static void kinv_apply(const double *K, Py_ssize_t side, Py_ssize_t n, const double *k,
                       double *d) {
    for (Py_ssize_t i = 0; i < n; i++) d[i] = 0.0;
    for (Py_ssize_t j = 0; j < n; j++) {
        const double *row = K + j * side;
        double kj = k[j];
        for (Py_ssize_t i = 0; i < n; i++) d[i] += row[i] * kj;
    }
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
        PyErr_SetString(PyExc_RuntimeError, "_ck_budget: K^-1 is full");
        return -1;
    }
    bordered_append(R->K, R->side, st->n, d, delta);
    return store_append(st, x, xx, y, t, f, kxx);
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
    kinv_apply(R->K, R->side, n, k, d);
    double pk2 = dot4(k, d, n);
    double delta = kdiag(st, xx) - pk2;
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
    if (RULES[R.code](&st, &R, b[11].view.buf, xx, y, f, b[12].view.buf, t) < 0) goto fail;
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
    if (rc < 0) goto fail;
    release(b, 16);
    return Py_BuildValue("(nd)", st.n, st.norm2);
fail:
    release(b, 16);
    return NULL;
}

static PyMethodDef methods[] = {
    {"update", (PyCFunction)(void (*)(void))py_update, METH_FASTCALL,
     "update(code, store..., rule state..., x, xx, y, f, k, t) -> (n, norm2): one round"},
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
