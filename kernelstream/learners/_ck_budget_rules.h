/* The budget rules: each budget learner's _update as one C function (RBP, the Forgetron and
 * its p1 variant, BOGD, BPA-S, the Projectron(++)), their table by rule code, and the parser
 * of the arguments that describe a store and its rule. Included by _ck_budget.c and by
 * _ck_omkc.c (bounded OMKC's components run these same functions). */
#ifndef KS_CK_BUDGET_RULES_H
#define KS_CK_BUDGET_RULES_H
#include "_ck_budget_steps.h"

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
KS_CLONES
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
    /* |k_S|^2 >= |k|^2 - SKIP_NL top^2: when even that leaves no room (an ill-conditioned
     * K^-1, a flat row), the bound below cannot succeed; spare its passes */
    if (!(rho * (kk - SKIP_NL * top * top) < kxx)) return 0;
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
    if ((R->code = rule_code(args[0], R_LAST, fn)) < 0) return -1;
    if (get_bufs(args, b, "D1 X, D2 sqn, D3 a, Q4 ids, Q5 s") < 0) return -1;
    st->n = PyLong_AsSsize_t(args[6]);
    st->norm2 = PyFloat_AsDouble(args[7]);
    st->kind = (int)PyLong_AsLong(args[8]);
    st->p = PyFloat_AsDouble(args[9]);
    st->degree = PyLong_AsLong(args[10]);
    if (PyErr_Occurred() || store_shape(&b[0], &st->cap, &st->d, "_ck_budget", fn) < 0)
        return -1;
    if (n_items(&b[1]) < st->cap || n_items(&b[2]) < st->cap || n_items(&b[3]) < st->cap
        || n_items(&b[4]) < st->cap || st->n < 0 || st->n > st->cap) {
        PyErr_Format(PyExc_ValueError, "_ck_budget.%s: the store's arrays disagree", fn);
        return -1;
    }
    if (check_kernel(st->kind, "_ck_budget", fn) < 0) return -1;
    st->X = b[0].view.buf;
    st->sqn = b[1].view.buf;
    st->a = b[2].view.buf;
    st->ids = b[3].view.buf;
    st->s = b[4].view.buf;
    if (parse_rule_state(args, b + 5, "d11 prm, Q12 ist, D13 fst", R->code, NPRM, NIST, NFST,
                         &R->prm, &R->ist, &R->fst, fn) < 0)
        return -1;
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
    PyObject *capsule = R->code == R_RBP || R->code == R_BOGD_P1 ? args[15] : NULL;
    if (parse_scratch(args, b, "D16 scratch, Q17 work", capsule, &R->rng, 3, st->cap, st->d,
                      &R->w1, &R->nz, fn) < 0)
        return -1;
    R->w2 = R->w1 + st->cap;
    R->w3 = R->w2 + st->cap;
    return 0;
}

#endif /* KS_CK_BUDGET_RULES_H */
