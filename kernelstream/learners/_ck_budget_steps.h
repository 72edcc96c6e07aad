/* The store, rule state and shared steps of the budget rules (_ck_budget.c, which says how a
 * rule equals its learner's numpy update): append / replace / scale a store, f(x_r) at a
 * stored point, BPA-S's removal costs, the projection K^-1 k and the bordered K^-1 update.
 * Included by _ck_budget_rules.h; part of the _ck_budget and _ck_omkc extensions. */
#ifndef KS_CK_BUDGET_STEPS_H
#define KS_CK_BUDGET_STEPS_H
#include "_ck_common.h"


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

/* A rule code 1..last from arg, or -1 with an exception. */
static int rule_code(PyObject *arg, int last, const char *fn) {
    int code = (int)PyLong_AsLong(arg);
    if (PyErr_Occurred()) return -1;
    if (code < 1 || code > last) {
        PyErr_Format(PyExc_ValueError, "_ck_budget.%s: unknown rule %d", fn, code);
        return -1;
    }
    return code;
}

/* The tail of both argument heads (_ck_budget_rules.h, _ck_budget_dist.h): the rule's bit
 * generator from its capsule (NULL: the rule draws nothing), then the scratch (b[9], at least
 * per_cap * cap doubles) and work (b[10], at least d ints) that spec names. */
static int parse_scratch(PyObject *const *args, Buf *b, const char *spec, PyObject *capsule,
                         bitgen_t **rng, Py_ssize_t per_cap, Py_ssize_t cap, Py_ssize_t d,
                         double **w1, Py_ssize_t **nz, const char *fn) {
    if (capsule != NULL && (*rng = PyCapsule_GetPointer(capsule, "BitGenerator")) == NULL)
        return -1;
    if (get_bufs(args, b + 9, spec) < 0) return -1;
    if (n_items(&b[9]) < per_cap * cap || n_items(&b[10]) < d) {
        PyErr_Format(PyExc_ValueError, "_ck_budget.%s: scratch or work is too short", fn);
        return -1;
    }
    *w1 = b[9].view.buf;
    *nz = b[10].view.buf;
    return 0;
}

/* A rule's constants prm (read), int and float state ist, fst (written back), of at least
 * the counts its code needs (tables nprm, nist, nfst), into b[0..3) from the arguments spec
 * names. */
static int parse_rule_state(PyObject *const *args, Buf *b, const char *spec, int code,
                            const int *nprm, const int *nist, const int *nfst,
                            const double **prm, int64_t **ist, double **fst, const char *fn) {
    if (get_bufs(args, b, spec) < 0) return -1;
    if (n_items(&b[0]) < nprm[code] || n_items(&b[1]) < nist[code]
        || n_items(&b[2]) < nfst[code]) {
        PyErr_Format(PyExc_ValueError, "_ck_budget.%s: too few rule constants or state", fn);
        return -1;
    }
    *prm = b[0].view.buf;
    *ist = b[1].view.buf;
    *fst = b[2].view.buf;
    return 0;
}

/* ---- shared steps --------------------------------------------------------------------- */

/* The largest ||x||^2 the store's learner takes (base.KERNEL_MAX ** (1/degree) for a
 * polynomial kernel, else KERNEL_MAX): beyond it the Python checks say what is wrong. */
static inline double st_max_xx(const Store *st) {
    return st->kind == K_POLYNOMIAL ? pow(1e100, 1.0 / (double)st->degree) : 1e100;
}

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
typedef struct {
    const double *a, *k;
} RemovalCosts;

static double removal_cost(const void *ctx, Py_ssize_t j) {
    const RemovalCosts *c = ctx;
    double u = c->a[j] * c->k[j];
    u *= u;
    double q = c->a[j] * c->a[j];
    q -= u;
    return q;
}

static Py_ssize_t removal_argmin(const double *a, const double *k, Py_ssize_t n) {
    RemovalCosts c = {a, k};
    return argmin_nan_first(n, removal_cost, &c);
}

/* d_i = sum_j K_ji k_j (j in index order) for i < n: the projection coefficients d = K^-1 k,
 * read along K's contiguous rows (K^-1 is symmetric up to round-off) by cols_block
 * (_ck_common.h), so each sum is the same sequence of operations at any vector width and
 * blocking. Blocks of 32 columns; the last 33..63 in one block, as a narrow last block would
 * be one chain of n dependent adds with little else to overlap it. */
KS_CLONES
static void kinv_apply(const double *K, Py_ssize_t side, Py_ssize_t n, const double *k,
                       double *d) {
    Py_ssize_t i = 0;
    for (; n - i >= 64; i += 32) cols_block32(K + i, n, side, k, d + i);
    switch ((n - i) / 8) {
    case 7: cols_block56(K + i, n, side, k, d + i); break;
    case 6: cols_block48(K + i, n, side, k, d + i); break;
    case 5: cols_block40(K + i, n, side, k, d + i); break;
    case 4: cols_block32(K + i, n, side, k, d + i); break;
    case 3: cols_block24(K + i, n, side, k, d + i); break;
    case 2: cols_block16(K + i, n, side, k, d + i); break;
    case 1: cols_block8(K + i, n, side, k, d + i); break;
    default: break;
    }
    for (i += (n - i) / 8 * 8; i < n; i++) cols_block1(K + i, n, side, k, d + i);
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

#endif /* KS_CK_BUDGET_STEPS_H */
