/* Compiled rounds of bounded OMKC (kernelstream.learners.omkc: bomkc-dd, bomkc-sd; Lu, Sahoo,
 * Zhao & Hoi, ACM TIST 2018, Algorithms 3 and 4): a block of test-then-train rounds without
 * returning to Python. Per round: the m = 16 components' kernel rows and scores (the
 * single-kernel compiled row of _ck_common.h, so each score is the component's own compiled
 * score bit for bit; in DD, where an SV's id names one example for every component, each
 * distinct stored point's dot product is computed once a round), the Hedge weights, for SD the m update draws, and the components' budget
 * rules, which are _ck_budget's own functions (_ck_budget_rules.h: the same code, not a
 * copy).
 *
 * Exactness against the Python rounds (omkc._BoundedOMKC and its components):
 * - theta = gamma^(M_i - min M) / sum_j: the powers come from a table numpy filled
 *   (np.power, elementwise the same numbers as the Python code's np.power), the sum in the
 *   order of numpy's pairwise sum for 16 terms (eight partial sums), then the division;
 * - the update probability p_i = (1 - delta) (theta_i / max theta) + delta, as numpy does it;
 * - SD's 16 uniforms per round are next_double of the learner's bit generator (numpy's
 *   Generator.random(16) fills its array the same way), RBP's evictions draw from the same
 *   generator in the same order as the Python code;
 * - the vote sum_i theta_i sign(s_i) is left to the caller (np.dot's BLAS summation order):
 *   the block writes every round's scores and weights.
 * BPA-S with a polynomial kernel (its numpy update, bpas.BPAS._update, has no _ck_budget rule)
 * is written out below; its kappa(x_r, x_r) = ||x_r||^(2p) are numpy's powers too (the caller's
 * kern.diag of the stored points and of the block's rows). A round whose weights need more of
 * the power table, or with a full store (C does not grow one; SD's components grow up to B) is
 * handed back before it starts.
 */
#include "_ck_budget_rules.h"

/* Bumped whenever a signature or a result changes: the wrapper refuses a stale build. */
#define KO_ABI 1
#define NK 16 /* _multikernel.M_KERNELS */

enum { O_DONE = 0, O_POWERS = 1, O_FULL = 2 };

typedef struct {
    Store st;
    Rule R;
    double prm[8]; /* the rule's constants, prm[0] = the budget of the round */
    double *diag;        /* BPA-S, polynomial kernel: kappa(x_j, x_j) of the stored points */
    const double *zdiag; /* ... and of the block's rows */
    int has_head;  /* a ring head (_head) that SD re-points at the oldest SV */
    double *k;     /* the round's kernel row (scratch w3) */
} Comp;

/* The dots <x_j, x> of one round by stored point, for points several components hold (DD:
 * every component learns every round, so its round counts, which are the SVs' ids, are the
 * learner's, and one id is one example): open addressing on the id, entries of this round
 * only (stamp). */
typedef struct {
    int64_t *id, *stamp;
    double *dot;
    uint64_t mask;
    int bits;
    int64_t round;
} DotCache;

/* <X_j, x> over x's non-zeros, as one row of dots() (the same sum in the same order) */
static inline double one_dot(const double *xj, const double *x, const Py_ssize_t *nz,
                             Py_ssize_t m, Py_ssize_t d) {
    double s = 0.0;
    if (m == d) {
        for (Py_ssize_t i = 0; i < d; i++) s += xj[i] * x[i];
    } else {
        for (Py_ssize_t t = 0; t < m; t++) s += xj[nz[t]] * x[nz[t]];
    }
    return s;
}

static void cached_dots(const Store *st, const double *x, const Py_ssize_t *nz, Py_ssize_t m,
                        DotCache *dc, double *k) {
    for (Py_ssize_t j = 0; j < st->n; j++) {
        int64_t id = st->ids[j];
        uint64_t h = ((uint64_t)id * 0x9E3779B97F4A7C15ULL) >> (64 - dc->bits);
        while (dc->stamp[h] == dc->round && dc->id[h] != id) h = (h + 1) & dc->mask;
        if (dc->stamp[h] == dc->round) {
            k[j] = dc->dot[h];
        } else {
            k[j] = one_dot(st->X + j * st->d, x, nz, m, st->d);
            dc->stamp[h] = dc->round;
            dc->id[h] = id;
            dc->dot[h] = k[j];
        }
    }
}

/* The component's score and kernel row from the example's non-zeros nz[0..m): row_score of
 * _ck_common.h (the same operations, in the same order) without re-scanning x, its dots shared
 * with the other components through dc (or NULL). */
static double comp_score(Comp *c, const double *x, double xx, const Py_ssize_t *nz,
                         Py_ssize_t m, DotCache *dc) {
    Store *st = &c->st;
    Py_ssize_t n = st->n;
    if (n == 0) return 0.0;
    double *k = c->k;
    if (dc)
        cached_dots(st, x, nz, m, dc, k);
    else
        dots(st->X, n, st->d, x, nz, m, k);
    if (st->kind == K_GAUSSIAN) {
        for (Py_ssize_t j = 0; j < n; j++) {
            double v = k[j] * -2.0;
            v += st->sqn[j];
            v += xx;
            if (!(v > 0.0)) v = 0.0;
            v *= st->p;
            k[j] = v < -746.0 ? 0.0 : exp(v);
        }
    } else if (st->kind == K_POLYNOMIAL && st->degree != 1) {
        for (Py_ssize_t j = 0; j < n; j++)
            k[j] = st->degree == 2 ? k[j] * k[j] : pow(k[j], (double)st->degree);
    }
    double f = 0.0;
    for (Py_ssize_t j = 0; j < n; j++) f += st->a[j] * k[j];
    return f;
}

/* Combination._refresh_theta: w = gamma^(c - min c), theta = w / w.sum() */
static void refresh_theta(const int64_t *cnt, const double *powtab, double *theta) {
    int64_t mn = cnt[0];
    for (int i = 1; i < NK; i++)
        if (cnt[i] < mn) mn = cnt[i];
    double w[NK], r[8];
    for (int i = 0; i < NK; i++) w[i] = powtab[cnt[i] - mn];
    for (int l = 0; l < 8; l++) r[l] = w[l] + w[l + 8];
    double s = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (int i = 0; i < NK; i++) theta[i] = w[i] / s;
}

/* BPA-S's removal cost of slot j with the kernel's own kappa(x_j, x_j) (diag) */
typedef struct {
    const double *a, *k, *diag;
    double kt;
} DiagCosts;

static double diag_cost(const void *ctx, Py_ssize_t j) {
    const DiagCosts *c = ctx;
    double u = c->a[j] * c->k[j];
    u *= u;
    u /= c->kt;
    double q = c->a[j] * c->a[j];
    q *= c->diag[j];
    q -= u;
    return q;
}

/* bpas.BPAS._update for a kernel whose kappa(x, x) is not 1: the removal cost
 * q_r = a_r^2 kappa_rr - (a_r k_r)^2 / kappa_tt as numpy computes it, its first minimum (a NaN
 * first), the merge into the removed slot's replacement. */
static int rule_bpas_diag(Comp *c, const double *x, double xx, double y, double f,
                          const double *k, int64_t t, double zdiag) {
    Store *st = &c->st;
    double loss = 1.0 - y * f;
    if (loss <= 0.0) return 0;
    double kt = kdiag(st, xx); /* xx ** degree, as Python computes it */
    if (kt <= 0.0) return 0;
    double cc = c->prm[1], v = loss / kt;
    double tau = v < cc ? v : cc; /* Python's min(c, v) */
    Py_ssize_t n = st->n;
    if (n < (Py_ssize_t)c->prm[0]) {
        c->diag[n] = zdiag;
        return store_append(st, x, xx, tau * y, t, f, kt);
    }
    DiagCosts costs = {st->a, k, c->diag, kt};
    Py_ssize_t r = argmin_nan_first(n, diag_cost, &costs);
    double beta = st->a[r] * k[r] / kt + tau * y;
    store_replace(st, r, x, xx, beta, t);
    c->diag[r] = zdiag;
    return 0;
}

/* One component's update of round t (its own round count) on row r of the block */
static int comp_update(Comp *c, const double *x, double xx, double y, double f, int64_t t,
                       Py_ssize_t r) {
    if (c->diag) return rule_bpas_diag(c, x, xx, y, f, c->k, t, c->zdiag[r]);
    return RULES[c->R.code](&c->st, &c->R, x, xx, y, f, c->k, t);
}

/* SVStore.oldest: the first slot of the smallest insertion round */
static Py_ssize_t oldest(const Store *st) {
    Py_ssize_t best = 0;
    for (Py_ssize_t j = 1; j < st->n; j++)
        if (st->s[j] < st->s[best]) best = j;
    return best;
}

static Py_ssize_t total_n(const Comp *cs) {
    Py_ssize_t t = 0;
    for (int i = 0; i < NK; i++) t += cs[i].st.n;
    return t;
}

#define NARG 20
static PyObject *py_run(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    /* run(sd, heads, diags, has_head, ct, budgets, counts, theta, powtab, delta, B, bitgen,
     *     Z, zz, y, start, S, T, nsv, out_n) -> (j, status, norm2s)
     * Rounds start.. of the block Z: S[r] = the 16 scores, T[r] = the weights of the vote.
     * heads: 16 tuples of _ck_budget's head (KernelLearner._rule_args); diags: 16 of None or
     * (kappa_jj of the stored points (cap), kappa of the block's rows) of a polynomial BPA-S;
     * ct, budgets, counts (int64, in/out): the components' rounds and budgets, the discount
     * counts M_i; theta (in/out); powtab: gamma^k, k < L. The components' sizes come back in
     * out_n (int64, 16), their norms in norm2s. Returns at the first round not done: row j,
     * status O_DONE (j = rows), O_POWERS (powtab is too short) or O_FULL (a store has no
     * room for an append). */
    if (nargs != NARG)
        return PyErr_Format(PyExc_TypeError, "run() takes %d arguments, got %zd", NARG, nargs);
    Buf cb[NK][13];
    Buf b[14];
    memset(cb, 0, sizeof cb);
    memset(b, 0, sizeof b);
    Comp cs[NK];
    PyObject *res = NULL;
    int sd = PyObject_IsTrue(args[0]);
    double delta = PyFloat_AsDouble(args[9]);
    Py_ssize_t B = PyLong_AsSsize_t(args[10]), start = PyLong_AsSsize_t(args[15]);
    if (sd < 0 || PyErr_Occurred()) return NULL;
    if (!PyTuple_Check(args[1]) || PyTuple_GET_SIZE(args[1]) != NK) {
        PyErr_SetString(PyExc_ValueError, "_ck_omkc.run: heads must be a tuple of 16");
        return NULL;
    }
    for (int i = 0; i < NK; i++) {
        PyObject *h = PyTuple_GET_ITEM(args[1], i);
        if (!PyTuple_Check(h) || PyTuple_GET_SIZE(h) != NHEAD) {
            PyErr_SetString(PyExc_ValueError, "_ck_omkc.run: a head is not a rule head");
            goto done;
        }
        if (parse_head(&PyTuple_GET_ITEM(h, 0), cb[i], &cs[i].st, &cs[i].R, "omkc") < 0)
            goto done;
    }
    if (!PyTuple_Check(args[2]) || PyTuple_GET_SIZE(args[2]) != NK) {
        PyErr_SetString(PyExc_ValueError, "_ck_omkc.run: diags must be a tuple of 16");
        goto done;
    }
    for (int i = 0; i < NK; i++) {
        PyObject *g = PyTuple_GET_ITEM(args[2], i);
        cs[i].diag = NULL;
        cs[i].zdiag = NULL;
        if (g == Py_None) continue;
        if (!PyTuple_Check(g) || PyTuple_GET_SIZE(g) != 2
            || get_buf(PyTuple_GET_ITEM(g, 0), &cb[i][11], 1, "diag", 'd') < 0
            || get_buf(PyTuple_GET_ITEM(g, 1), &cb[i][12], 0, "zdiag", 'd') < 0)
            goto done;
        if (n_items(&cb[i][11]) < cs[i].st.cap || cs[i].R.code != R_BPAS) {
            PyErr_SetString(PyExc_ValueError, "_ck_omkc.run: a diag is too short or not BPA-S");
            goto done;
        }
        cs[i].diag = cb[i][11].view.buf;
        cs[i].zdiag = cb[i][12].view.buf;
    }
    if (get_buf(args[3], &b[1], 0, "has_head", 'q') < 0
        || get_buf(args[4], &b[2], 1, "ct", 'q') < 0 || get_buf(args[5], &b[3], 1, "budgets", 'q') < 0
        || get_buf(args[6], &b[4], 1, "counts", 'q') < 0 || get_buf(args[7], &b[5], 1, "theta", 'd') < 0
        || get_buf(args[8], &b[6], 0, "powtab", 'd') < 0 || get_buf(args[12], &b[7], 0, "Z", 'd') < 0
        || get_buf(args[13], &b[8], 0, "zz", 'd') < 0 || get_buf(args[14], &b[9], 0, "y", 'd') < 0
        || get_buf(args[16], &b[10], 1, "S", 'd') < 0 || get_buf(args[17], &b[11], 1, "T", 'd') < 0
        || (args[18] != Py_None && get_buf(args[18], &b[12], 1, "nsv", 'q') < 0)
        || get_buf(args[19], &b[13], 1, "out_n", 'q') < 0)
        goto done;
    bitgen_t *rng = NULL;
    if (sd && (rng = PyCapsule_GetPointer(args[11], "BitGenerator")) == NULL) goto done;
    Py_ssize_t d = cs[0].st.d, rows = b[7].view.ndim == 2 ? b[7].view.shape[0] : -1;
    Py_ssize_t L = n_items(&b[6]);
    int bad = rows < 0 || b[7].view.shape[1] != d || n_items(&b[8]) < rows
              || n_items(&b[9]) < rows || n_items(&b[10]) < rows * NK
              || n_items(&b[11]) < rows * NK || (b[12].held && n_items(&b[12]) < rows)
              || L < 1 || start < 0 || start > rows;
    for (int i = 1; i < 6; i++) bad |= n_items(&b[i]) < NK;
    bad |= n_items(&b[13]) < NK;
    for (int i = 0; i < NK; i++)
        bad |= cs[i].st.d != d || (cs[i].zdiag && n_items(&cb[i][12]) < rows);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "_ck_omkc.run: arrays have the wrong sizes");
        goto done;
    }
    const int64_t *has_head = b[1].view.buf;
    int64_t *ct = b[2].view.buf, *budgets = b[3].view.buf, *cnt = b[4].view.buf;
    double *theta = b[5].view.buf;
    const double *powtab = b[6].view.buf, *Z = b[7].view.buf, *zz = b[8].view.buf,
                 *yv = b[9].view.buf;
    double *S = b[10].view.buf, *T = b[11].view.buf;
    int64_t *nsv = b[12].held ? b[12].view.buf : NULL;
    for (int i = 0; i < NK; i++) {
        Comp *c = &cs[i];
        memcpy(c->prm, c->R.prm, (size_t)NPRM[c->R.code] * sizeof(double));
        c->R.prm = c->prm;
        c->has_head = has_head[i] != 0;
        c->k = c->R.w3;
    }
    Py_ssize_t *nz = cs[0].R.nz; /* the example's non-zeros, shared by the 16 rows */
    /* DD with equal round counts: a table of at least twice the points the stores can hold */
    DotCache cache, *dc = NULL;
    int same_t = 1;
    Py_ssize_t caps = 0;
    for (int i = 0; i < NK; i++) {
        same_t &= ct[i] == ct[0];
        caps += cs[i].st.cap;
    }
    if (!sd && same_t) {
        int bits = 4;
        while (((Py_ssize_t)1 << bits) < 2 * caps) bits++;
        size_t size = (size_t)1 << bits;
        cache.id = PyMem_Malloc(size * sizeof(int64_t));
        cache.stamp = PyMem_Malloc(size * sizeof(int64_t));
        cache.dot = PyMem_Malloc(size * sizeof(double));
        if (!cache.id || !cache.stamp || !cache.dot) {
            PyMem_Free(cache.id);
            PyMem_Free(cache.stamp);
            PyMem_Free(cache.dot);
            PyErr_NoMemory();
            goto done;
        }
        for (size_t h = 0; h < size; h++) cache.stamp[h] = -1;
        cache.mask = size - 1;
        cache.bits = bits;
        dc = &cache;
    }
    Py_ssize_t r = start;
    int status = O_DONE, rc = 0;
    Py_BEGIN_ALLOW_THREADS
    for (; r < rows; r++) {
        int64_t mn = cnt[0], mx = cnt[0];
        for (int i = 1; i < NK; i++) {
            if (cnt[i] < mn) mn = cnt[i];
            if (cnt[i] > mx) mx = cnt[i];
        }
        if (mx - mn + 1 >= L) { /* the round's discount may need gamma^(mx - mn + 1) */
            status = O_POWERS;
            break;
        }
        for (int i = 0; i < NK; i++)
            if (cs[i].st.n >= cs[i].st.cap) status = O_FULL;
        if (status == O_FULL) break;
        const double *x = Z + r * d;
        double xx = zz[r], y = yv[r], s[NK];
        Py_ssize_t m = nonzeros(x, d, nz);
        if (dc) dc->round = r;
        for (int i = 0; i < NK; i++) s[i] = comp_score(&cs[i], x, xx, nz, m, dc);
        memcpy(S + r * NK, s, sizeof s);
        memcpy(T + r * NK, theta, NK * sizeof(double));
        int disc = 0;
        if (!sd) { /* Algorithm 3: every component learns */
            for (int i = 0; i < NK; i++) {
                Comp *c = &cs[i];
                if (comp_update(c, x, xx, y, s[i], ct[i], r) < 0) {
                    rc = -1;
                    break;
                }
                ct[i] += 1;
                if (y * s[i] <= 0.0) {
                    cnt[i] += 1;
                    disc = 1;
                }
            }
        } else { /* Algorithm 4: Z_i ~ B(p_i), within the total budget B */
            double tmax = theta[0], omd = 1.0 - delta;
            int z[NK];
            for (int i = 1; i < NK; i++)
                if (theta[i] > tmax) tmax = theta[i];
            for (int i = 0; i < NK; i++) {
                double p = omd * (theta[i] / tmax) + delta;
                z[i] = rng->next_double(rng->state) < p;
            }
            Py_ssize_t total = total_n(cs);
            for (int i = 0; i < NK && rc == 0; i++) {
                if (!z[i]) continue;
                Comp *c = &cs[i];
                Py_ssize_t n = c->st.n;
                if (total >= B) {
                    if (n == 0) continue;
                    budgets[i] = n;
                    if (c->has_head) c->R.ist[0] = oldest(&c->st);
                } else {
                    budgets[i] = B;
                }
                c->prm[0] = (double)budgets[i];
                if (comp_update(c, x, xx, y, s[i], ct[i], r) < 0) {
                    rc = -1;
                    break;
                }
                ct[i] += 1;
                total += c->st.n - n;
            }
            for (int i = 0; i < NK; i++)
                if (z[i] && y * s[i] <= 0.0) {
                    cnt[i] += 1;
                    disc = 1;
                }
        }
        if (rc < 0) break;
        if (disc) refresh_theta(cnt, powtab, theta);
        if (nsv) nsv[r] = total_n(cs);
    }
    Py_END_ALLOW_THREADS
    if (dc) {
        PyMem_Free(cache.id);
        PyMem_Free(cache.stamp);
        PyMem_Free(cache.dot);
    }
    if (rc < 0) {
        const char *err = "a rule failed";
        for (int i = 0; i < NK; i++)
            if (cs[i].st.err) err = cs[i].st.err;
        PyErr_Format(PyExc_RuntimeError, "_ck_omkc.run: %s", err);
        goto done;
    }
    {
        int64_t *out_n = b[13].view.buf;
        PyObject *norms = PyTuple_New(NK);
        if (norms == NULL) goto done;
        for (int i = 0; i < NK; i++) {
            out_n[i] = cs[i].st.n;
            PyTuple_SET_ITEM(norms, i, PyFloat_FromDouble(cs[i].st.norm2));
        }
        res = Py_BuildValue("(niN)", r, status, norms);
    }
done:
    for (int i = 0; i < NK; i++) release(cb[i], 13);
    release(b, 14);
    return res;
}

static PyMethodDef methods[] = {
    KS_METHOD(run, "run(sd, heads, ..., Z, zz, y, start, S, T, nsv, out_n) -> (j, status, "
                   "norm2s)"),
    {NULL, NULL, 0, NULL},
};

KS_MODULE_DEF(_ck_omkc, "Compiled block rounds of kernelstream's bounded OMKC.");

PyMODINIT_FUNC PyInit__ck_omkc(void) {
    PyObject *mod = ks_module(&module, KO_ABI);
    if (mod != NULL
        && (PyModule_AddIntConstant(mod, "DONE", O_DONE) < 0
            || PyModule_AddIntConstant(mod, "POWERS", O_POWERS) < 0
            || PyModule_AddIntConstant(mod, "FULL", O_FULL) < 0))
        Py_CLEAR(mod);
    return mod;
}
