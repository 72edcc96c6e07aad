/* The distance-row rules of _ck_budget: OKL-GD's and OKS-SIL's updates (their rows keep the
 * squared distances), their table and the parser of their arguments. Included by
 * _ck_budget.c after _ck_budget_rules.h. */
#ifndef KS_CK_BUDGET_DIST_H
#define KS_CK_BUDGET_DIST_H
#include "_ck_budget_rules.h"

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

/* The scans of a full-buffer update in one pass, so that their dependency chains overlap
 * (each is computed as it would be alone): the count of psi_j != 0, the running sums c of psi
 * (weighted3's first round; returns their total) and in *r the index numpy's argmin of |a_j|
 * gives (the first NaN, else the first minimum: argmin_nan_first). */
static double okssil_scan(const double *psi, const double *a, Py_ssize_t n, double *c,
                          Py_ssize_t *pos, Py_ssize_t *r) {
    double tot = 0.0, vb = 0.0;
    Py_ssize_t np = 0, best = 0, nan_at = -1;
    for (Py_ssize_t j = 0; j < n; j++) {
        np += psi[j] != 0.0;
        c[j] = tot += psi[j];
        double v = fabs(a[j]);
        if (v != v) {
            if (nan_at < 0) nan_at = j;
        } else if (j == 0 || v < vb) {
            best = j;
            vb = v;
        }
    }
    *pos = np;
    *r = nan_at >= 0 ? nan_at : best;
    return tot;
}

/* experts.weighted_distinct(rng, w, 3) with the compiled cdf_search: rounds of 3 - found
 * uniforms against the running sums of w, repeats dropped, found entries zeroed. The first
 * round's sums are in R->w2 already, tot their total (okssil_scan). */
static void weighted3(DRule *R, const double *w, Py_ssize_t n, double tot, Py_ssize_t *found) {
    Py_ssize_t nf = 0;
    double *wc = R->w1, *c = R->w2, u[3];
    for (;;) {
        Py_ssize_t m = 3 - nf;
        for (Py_ssize_t i = 0; i < m; i++) u[i] = R->rng->next_double(R->rng->state);
        for (Py_ssize_t i = 0; i < m; i++) {
            Py_ssize_t lo = search_right(c, n, u[i] * tot);
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
        tot = 0.0;
        for (Py_ssize_t j = 0; j < n; j++) c[j] = tot += w[j];
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
    Py_ssize_t pos, r;
    double tot = okssil_scan(psi, st->a, n, R->w2, &pos, &r);
    if (n < 3 || pos < 3) return DEFER_ALL;
    Py_ssize_t *idx = R->idx;
    weighted3(R, psi, n, tot, idx);
    double neg_g = -R->fst[0];
    double k01, k02, k12, alpha[3], delta;
    gram3(st->X, st->d, idx, neg_g, &k01, &k02, &k12);
    if (!rld_unit3(k01, k02, k12, psi[idx[0]], psi[idx[1]], psi[idx[2]], alpha, &delta))
        return DEFER_RLD;
    double *a = st->a;
    if (delta > prm[3]) { /* RLD holds: x_t takes the slot of the smallest |a_r| */
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
    if ((R->code = rule_code(args[0], D_OKSSIL, fn)) < 0) return -1;
    int okl = R->code == D_OKLGD;
    if (get_bufs(args, b, "D1 X, D2 sqn, D3 a") < 0
        || (okl ? get_bufs(args, b + 3, "D4 g") : get_bufs(args, b + 4, "Q5 ids, Q6 s")) < 0)
        return -1;
    st->n = PyLong_AsSsize_t(args[7]);
    if (PyErr_Occurred() || store_shape(&b[0], &st->cap, &st->d, "_ck_budget", fn) < 0)
        return -1;
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
    if (parse_rule_state(args, b + 6, "d8 prm, Q9 ist, D10 fst", R->code, DNPRM, DNIST, DNFST,
                         &R->prm, &R->ist, &R->fst, fn) < 0)
        return -1;
    if (okl && (R->ist[0] < 0 || R->ist[0] >= (st->n > 0 ? st->n : 1) || R->ist[1] >= st->n
                || (Py_ssize_t)R->prm[0] > st->cap)) {
        PyErr_Format(PyExc_ValueError, "_ck_budget.%s: ring slots out of range", fn);
        return -1;
    }
    if (parse_scratch(args, b, "D12 scratch, Q13 work", okl ? NULL : args[11], &R->rng, 2,
                      st->cap, st->d, &R->w1, &R->nz, fn) < 0)
        return -1;
    R->w2 = R->w1 + st->cap;
    return 0;
}

#endif /* KS_CK_BUDGET_DIST_H */
