/* Compiled rounds of bounded OMKC (kernelstream.learners.omkc: bomkc-dd, bomkc-sd; Lu, Sahoo,
 * Zhao & Hoi, ACM TIST 2018, Algorithms 3 and 4): a block of test-then-train rounds without
 * returning to Python (run), or one round a call on a kept parse of the learner (fuse, then
 * step: the per-example path; the same round code). Per round: the m = 16 components' kernel rows and scores (the
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
#define KS_EXT_NAME "_ck_omkc" /* names the module in its argument errors */
#include "_ck_budget_rules.h"

/* Bumped whenever a signature or a result changes: the wrapper refuses a stale build. */
#define KO_ABI 2
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

/* Combination._refresh_theta: w = gamma^(c - min c), theta = w / w.sum(). A table of L powers
 * that ends in 0 (gamma^k underflowed) stands for every later power too: 0. */
static void refresh_theta(const int64_t *cnt, const double *powtab, Py_ssize_t L,
                          double *theta) {
    int64_t mn = cnt[0];
    for (int i = 1; i < NK; i++)
        if (cnt[i] < mn) mn = cnt[i];
    double w[NK], r[8];
    for (int i = 0; i < NK; i++) w[i] = powtab[cnt[i] - mn < L ? cnt[i] - mn : L - 1];
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

/* The learner's side of a round: the 16 components, SD's flag, the components' rounds and
 * budgets, the discount counts M_i, the weights, the power table (L entries), delta, the total
 * budget B, the bit generator (SD's draws) and the dot cache (DD, or NULL). */
typedef struct {
    Comp *cs;
    int sd;
    int64_t *ct, *budgets, *cnt;
    double *theta;
    const double *powtab;
    Py_ssize_t L;
    double delta;
    Py_ssize_t B;
    bitgen_t *rng;
    DotCache *dc;
} Rounds;

/* Whether the next round can start: O_DONE, or why not (O_POWERS: its discount may need
 * gamma^(max M - min M + 1), past a table that does not end in 0; O_FULL: a store has no room for an append). */
static int round_ready(const Rounds *o) {
    int64_t mn = o->cnt[0], mx = o->cnt[0];
    for (int i = 1; i < NK; i++) {
        if (o->cnt[i] < mn) mn = o->cnt[i];
        if (o->cnt[i] > mx) mx = o->cnt[i];
    }
    if (mx - mn + 1 >= o->L && o->powtab[o->L - 1] != 0.0) return O_POWERS;
    for (int i = 0; i < NK; i++)
        if (o->cs[i].st.n >= o->cs[i].st.cap) return O_FULL;
    return O_DONE;
}

/* The test half of a round on x (||x||^2 xx): the 16 scores into s, the weights of the vote
 * into th; the caller set dc->round. */
static void score_round(Rounds *o, const double *x, double xx, double *s, double *th) {
    Comp *cs = o->cs;
    Py_ssize_t *nz = cs[0].R.nz; /* the example's non-zeros, shared by the 16 rows */
    Py_ssize_t m = nonzeros(x, cs[0].st.d, nz);
    for (int i = 0; i < NK; i++) s[i] = comp_score(&cs[i], x, xx, nz, m, o->dc);
    memcpy(th, o->theta, NK * sizeof(double));
}

/* One test-then-train round on x (||x||^2 xx, label y; r: its row of the components'
 * zdiag): score_round, then Algorithm 3's or 4's updates, the counts and the weights. 0, or
 * -1 when a rule failed (its store's err says why). The caller checked round_ready and set
 * dc->round. */
static int one_round(Rounds *o, const double *x, double xx, double y, Py_ssize_t r, double *s,
                     double *th) {
    Comp *cs = o->cs;
    int64_t *ct = o->ct, *budgets = o->budgets, *cnt = o->cnt;
    score_round(o, x, xx, s, th);
    int disc = 0;
    if (!o->sd) { /* Algorithm 3: every component learns */
        for (int i = 0; i < NK; i++) {
            if (comp_update(&cs[i], x, xx, y, s[i], ct[i], r) < 0) return -1;
            ct[i] += 1;
            if (y * s[i] <= 0.0) {
                cnt[i] += 1;
                disc = 1;
            }
        }
    } else { /* Algorithm 4: Z_i ~ B(p_i), within the total budget B */
        double tmax = o->theta[0], omd = 1.0 - o->delta;
        int z[NK];
        for (int i = 1; i < NK; i++)
            if (o->theta[i] > tmax) tmax = o->theta[i];
        for (int i = 0; i < NK; i++) {
            double p = omd * (o->theta[i] / tmax) + o->delta;
            z[i] = o->rng->next_double(o->rng->state) < p;
        }
        Py_ssize_t total = total_n(cs);
        for (int i = 0; i < NK; i++) {
            if (!z[i]) continue;
            Comp *c = &cs[i];
            Py_ssize_t n = c->st.n;
            if (total >= o->B) {
                if (n == 0) continue;
                budgets[i] = n;
                if (c->has_head) c->R.ist[0] = oldest(&c->st);
            } else {
                budgets[i] = o->B;
            }
            c->prm[0] = (double)budgets[i];
            if (comp_update(c, x, xx, y, s[i], ct[i], r) < 0) return -1;
            ct[i] += 1;
            total += c->st.n - n;
        }
        for (int i = 0; i < NK; i++)
            if (z[i] && y * s[i] <= 0.0) {
                cnt[i] += 1;
                disc = 1;
            }
    }
    if (disc) refresh_theta(cnt, o->powtab, o->L, o->theta);
    return 0;
}

/* The RuntimeError of a failed rule (the first store that says why), naming fn: NULL. */
static PyObject *rule_error(const Comp *cs, const char *fn) {
    const char *err = "a rule failed";
    for (int i = 0; i < NK; i++)
        if (cs[i].st.err) err = cs[i].st.err;
    return PyErr_Format(PyExc_RuntimeError, "_ck_omkc.%s: %s", fn, err);
}

/* A DD dot cache of at least twice the points the stores can hold (the stamps cleared), or
 * -1 with MemoryError. */
static int cache_alloc(DotCache *dc, const Comp *cs) {
    Py_ssize_t caps = 0;
    for (int i = 0; i < NK; i++) caps += cs[i].st.cap;
    int bits = 4;
    while (((Py_ssize_t)1 << bits) < 2 * caps) bits++;
    size_t size = (size_t)1 << bits;
    dc->id = PyMem_Malloc(size * sizeof(int64_t));
    dc->stamp = PyMem_Malloc(size * sizeof(int64_t));
    dc->dot = PyMem_Malloc(size * sizeof(double));
    if (!dc->id || !dc->stamp || !dc->dot) {
        PyMem_Free(dc->id);
        PyMem_Free(dc->stamp);
        PyMem_Free(dc->dot);
        dc->id = dc->stamp = NULL;
        dc->dot = NULL;
        PyErr_NoMemory();
        return -1;
    }
    for (size_t h = 0; h < size; h++) dc->stamp[h] = -1;
    dc->mask = size - 1;
    dc->bits = bits;
    dc->round = 0;
    return 0;
}

static void cache_free(DotCache *dc) {
    PyMem_Free(dc->id);
    PyMem_Free(dc->stamp);
    PyMem_Free(dc->dot);
}

/* DD: the dot cache pays when the components' round counts agree (an SV's id is then one
 * example for all of them), which DD keeps */
static int same_rounds(const int64_t *ct) {
    for (int i = 1; i < NK; i++)
        if (ct[i] != ct[0]) return 0;
    return 1;
}

/* 0 when obj (the argument what of fn) is a tuple of 16, else -1 with ValueError. */
static int nk_tuple(PyObject *obj, const char *what, const char *fn) {
    if (PyTuple_Check(obj) && PyTuple_GET_SIZE(obj) == NK) return 0;
    PyErr_Format(PyExc_ValueError, "_ck_omkc.%s: %s must be a tuple of 16", fn, what);
    return -1;
}

/* The 16 heads (tuple) into cs, their buffers into cb[i][0..11) (the caller releases them). */
static int parse_heads(PyObject *heads, Comp *cs, Buf (*cb)[13], const char *fn) {
    if (nk_tuple(heads, "heads", fn) < 0) return -1;
    for (int i = 0; i < NK; i++) {
        PyObject *h = PyTuple_GET_ITEM(heads, i);
        if (!PyTuple_Check(h) || PyTuple_GET_SIZE(h) != NHEAD) {
            PyErr_Format(PyExc_ValueError, "_ck_omkc.%s: a head is not a rule head", fn);
            return -1;
        }
        if (parse_head(&PyTuple_GET_ITEM(h, 0), cb[i], &cs[i].st, &cs[i].R, "omkc") < 0)
            return -1;
        cs[i].diag = NULL;
        cs[i].zdiag = NULL;
    }
    return 0;
}

/* diags (tuple of 16: None, or (kappa_jj of the stored points (cap, written), kappa of the
 * rows (read)) of a polynomial BPA-S) into cs, their buffers into cb[i][11..13). */
static int parse_diags(PyObject *diags, Comp *cs, Buf (*cb)[13], const char *fn) {
    if (nk_tuple(diags, "diags", fn) < 0) return -1;
    for (int i = 0; i < NK; i++) {
        PyObject *g = PyTuple_GET_ITEM(diags, i);
        if (g == Py_None) continue;
        if (!PyTuple_Check(g) || PyTuple_GET_SIZE(g) != 2
            || get_buf(PyTuple_GET_ITEM(g, 0), &cb[i][11], 1, "diag", 'd') < 0
            || get_buf(PyTuple_GET_ITEM(g, 1), &cb[i][12], 0, "zdiag", 'd') < 0)
            return -1;
        if (n_items(&cb[i][11]) < cs[i].st.cap || cs[i].R.code != R_BPAS) {
            PyErr_Format(PyExc_ValueError, "_ck_omkc.%s: a diag is too short or not BPA-S", fn);
            return -1;
        }
        cs[i].diag = cb[i][11].view.buf;
        cs[i].zdiag = cb[i][12].view.buf;
    }
    return 0;
}

/* The components' own copies of their rule constants, ring-head flags and row scratch. */
static void comps_init(Comp *cs, const int64_t *has_head) {
    for (int i = 0; i < NK; i++) {
        Comp *c = &cs[i];
        memcpy(c->prm, c->R.prm, (size_t)NPRM[c->R.code] * sizeof(double));
        c->R.prm = c->prm;
        c->has_head = has_head[i] != 0;
        c->k = c->R.w3;
    }
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
    if (parse_heads(args[1], cs, cb, "run") < 0 || parse_diags(args[2], cs, cb, "run") < 0)
        goto done;
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
    comps_init(cs, b[1].view.buf);
    const double *Z = b[7].view.buf, *zz = b[8].view.buf, *yv = b[9].view.buf;
    double *S = b[10].view.buf, *T = b[11].view.buf;
    int64_t *nsv = b[12].held ? b[12].view.buf : NULL;
    Rounds o = {cs, sd, b[2].view.buf, b[3].view.buf, b[4].view.buf, b[5].view.buf,
                b[6].view.buf, L, delta, B, rng, NULL};
    DotCache cache;
    if (!sd && same_rounds(o.ct)) {
        if (cache_alloc(&cache, cs) < 0) goto done;
        o.dc = &cache;
    }
    Py_ssize_t r = start;
    int status = O_DONE, rc = 0;
    Py_BEGIN_ALLOW_THREADS
    for (; r < rows; r++) {
        if ((status = round_ready(&o)) != O_DONE) break;
        if (o.dc) o.dc->round = r;
        if ((rc = one_round(&o, Z + r * d, zz[r], yv[r], r, S + r * NK, T + r * NK)) < 0) break;
        if (nsv) nsv[r] = total_n(cs);
    }
    Py_END_ALLOW_THREADS
    if (o.dc) cache_free(o.dc);
    if (rc < 0) {
        rule_error(cs, "run");
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

/* ---- the per-example path: fuse() once, then step() per row ---------------------------- */

/* What fuse() parsed, kept between rounds: the components and their buffers, the learner's
 * arrays (counts, theta, powtab, and S, T: the last round's scores and weights of the vote,
 * which the caller's vote reads), the components' rounds and budgets, the dot cache, and the
 * Python objects whose attributes step() keeps current: the components' attribute dicts (t,
 * budget: plain instance attributes, set in the dict as setattr would, without its type
 * lookup), their stores (n, norm2) and the bit generator the draws use. */
typedef struct {
    Comp cs[NK];
    Buf cb[NK][13];
    Buf b[5]; /* counts, theta, powtab, S, T */
    int64_t ct[NK], budgets[NK];
    Rounds o;
    DotCache cache;
    PyObject *dicts[NK], *stores[NK], *bitgen;
} Fused;

#define FUSED_NAME "kernelstream._ck_omkc.fused"

static void fused_free(PyObject *capsule) {
    Fused *F = PyCapsule_GetPointer(capsule, FUSED_NAME);
    if (F == NULL) return;
    for (int i = 0; i < NK; i++) {
        release(F->cb[i], 13);
        Py_XDECREF(F->dicts[i]);
        Py_XDECREF(F->stores[i]);
    }
    release(F->b, 5);
    Py_XDECREF(F->bitgen);
    if (F->o.dc) cache_free(F->o.dc);
    PyMem_Free(F);
}

static PyObject *S_T, *S_BUDGET, *S_N, *S_NORM2; /* attribute names, interned */

#define NFUSE 16
static PyObject *py_fuse(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    /* fuse(sd, heads, has_head, ct, budgets, counts, theta, powtab, delta, B, bitgen, S, T,
     *      comp_dicts, stores, diags) -> fused
     * The per-example path's kept state (a capsule for step()): run()'s arguments without a
     * block (diags: a polynomial BPA-S's kappa_jj, updated in place, and kappa(x, x) of the
     * row, one item, which the caller fills before each step()), the bit generator object
     * itself (its capsule is taken from it and the object kept alive), S and T (float64,
     * 16: each round's scores and weights of the vote), the 16 components' attribute dicts
     * (vars(c): their t and budget are plain instance attributes) and their stores.
     * The arrays are referenced, not copied: counts and theta are updated in place (they must
     * be the learner's own), and the caller makes a new fused object whenever Python code
     * changes anything it holds (a round not taken by step(), a block, a restore). */
    if (nargs != NFUSE)
        return PyErr_Format(PyExc_TypeError, "fuse() takes %d arguments, got %zd", NFUSE,
                            nargs);
    int sd = PyObject_IsTrue(args[0]);
    double delta = PyFloat_AsDouble(args[8]);
    Py_ssize_t B = PyLong_AsSsize_t(args[9]);
    if (sd < 0 || PyErr_Occurred()) return NULL;
    Fused *F = PyMem_Calloc(1, sizeof(Fused));
    if (F == NULL) return PyErr_NoMemory();
    PyObject *capsule = PyCapsule_New(F, FUSED_NAME, fused_free);
    if (capsule == NULL) {
        PyMem_Free(F);
        return NULL;
    }
    Buf hb[3]; /* has_head, ct, budgets: read here only */
    memset(hb, 0, sizeof hb);
    if (parse_heads(args[1], F->cs, F->cb, "fuse") < 0
        || parse_diags(args[15], F->cs, F->cb, "fuse") < 0
        || get_buf(args[2], &hb[0], 0, "has_head", 'q') < 0
        || get_buf(args[3], &hb[1], 0, "ct", 'q') < 0
        || get_buf(args[4], &hb[2], 0, "budgets", 'q') < 0
        || get_buf(args[5], &F->b[0], 1, "counts", 'q') < 0
        || get_buf(args[6], &F->b[1], 1, "theta", 'd') < 0
        || get_buf(args[7], &F->b[2], 0, "powtab", 'd') < 0
        || get_buf(args[11], &F->b[3], 1, "S", 'd') < 0
        || get_buf(args[12], &F->b[4], 1, "T", 'd') < 0)
        goto fail;
    int bad = n_items(&F->b[2]) < 1;
    for (int i = 0; i < 3; i++) bad |= n_items(&hb[i]) < NK;
    for (int i = 0; i < 5; i++) bad |= i != 2 && n_items(&F->b[i]) < NK;
    for (int i = 0; i < NK; i++)
        bad |= F->cs[i].st.d != F->cs[0].st.d || (F->cs[i].zdiag && n_items(&F->cb[i][12]) < 1);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "_ck_omkc.fuse: arrays have the wrong sizes");
        goto fail;
    }
    if (nk_tuple(args[13], "comp_dicts", "fuse") < 0 || nk_tuple(args[14], "stores", "fuse") < 0)
        goto fail;
    for (int i = 0; i < NK; i++)
        if (!PyDict_Check(PyTuple_GET_ITEM(args[13], i))) {
            PyErr_SetString(PyExc_TypeError, "_ck_omkc.fuse: comp_dicts must hold dicts");
            goto fail;
        }
    PyObject *cap = PyObject_GetAttrString(args[10], "capsule");
    if (cap == NULL) goto fail;
    bitgen_t *rng = PyCapsule_GetPointer(cap, "BitGenerator");
    Py_DECREF(cap); /* the bit generator holds its capsule: kept alive with F->bitgen */
    if (rng == NULL) goto fail;
    F->bitgen = Py_NewRef(args[10]);
    for (int i = 0; i < NK; i++) {
        F->dicts[i] = Py_NewRef(PyTuple_GET_ITEM(args[13], i));
        F->stores[i] = Py_NewRef(PyTuple_GET_ITEM(args[14], i));
    }
    memcpy(F->ct, hb[1].view.buf, sizeof F->ct);
    memcpy(F->budgets, hb[2].view.buf, sizeof F->budgets);
    comps_init(F->cs, hb[0].view.buf);
    Rounds o = {F->cs, sd, F->ct, F->budgets, F->b[0].view.buf, F->b[1].view.buf,
                F->b[2].view.buf, n_items(&F->b[2]), delta, B, rng, NULL};
    F->o = o;
    if (!sd && same_rounds(F->ct)) {
        if (cache_alloc(&F->cache, F->cs) < 0) goto fail;
        F->o.dc = &F->cache;
    }
    release(hb, 3);
    return capsule;
fail:
    release(hb, 3);
    Py_DECREF(capsule); /* fused_free releases what was taken */
    return NULL;
}

/* The vote theta . sign(s) as Combination._vote computes it: numpy's sign (sign(0) = 0, NaN
 * stays NaN), then numpy's 1-D dot, 0.0 + cblas_ddot (numpy's DOUBLE_dot) with the ddot numpy
 * calls, which bind_dot() gives (compiled.py checks the result against numpy's). */
typedef double (*dot64_t)(int64_t, const double *, int64_t, const double *, int64_t);
typedef double (*dot32_t)(int, const double *, int, const double *, int);
static void *g_dot = NULL;
static int g_ilp64 = 1;

static double vote(const double *th, const double *s) {
    double sg[NK], v = 0.0;
    for (int i = 0; i < NK; i++)
        sg[i] = s[i] > 0.0 ? 1.0 : s[i] < 0.0 ? -1.0 : s[i] == 0.0 ? 0.0 : s[i];
    if (g_ilp64)
        v += ((dot64_t)g_dot)(NK, th, 1, sg, 1);
    else
        v += ((dot32_t)g_dot)(NK, th, 1, sg, 1);
    return v;
}

static PyObject *py_bind_dot(PyObject *Py_UNUSED(self), PyObject *const *args,
                             Py_ssize_t nargs) {
    /* bind_dot(dot_address, ilp64): numpy's cblas_ddot, for step()'s vote (0: none) */
    if (!nargs_ok(nargs, 2, "bind_dot")) return NULL;
    void *dot = PyLong_AsVoidPtr(args[0]);
    int ilp64 = PyObject_IsTrue(args[1]);
    if (PyErr_Occurred() || ilp64 < 0) return NULL;
    g_dot = dot;
    g_ilp64 = ilp64;
    Py_RETURN_NONE;
}

KS_ENTRY(vote, 2, 2) {
    /* vote(theta, s) -> theta . sign(s) of 16 values, as step() computes it (None: no ddot
     * bound) */
    if (get_bufs(args, b, "d0 theta, d1 s") < 0) return NULL;
    if (n_items(&b[0]) != NK || n_items(&b[1]) != NK)
        return PyErr_Format(PyExc_ValueError, "_ck_omkc.vote: theta and s must hold 16");
    if (g_dot == NULL) Py_RETURN_NONE;
    return PyFloat_FromDouble(vote(b[0].view.buf, b[1].view.buf));
}

/* obj.name = v (a new reference, consumed): 0, or -1 with an exception */
static int set_new(PyObject *obj, PyObject *name, PyObject *v) {
    if (v == NULL) return -1;
    int rc = PyObject_SetAttr(obj, name, v);
    Py_DECREF(v);
    return rc;
}

/* dict[name] = v (a new reference, consumed): 0, or -1 with an exception */
static int set_dict(PyObject *dict, PyObject *name, PyObject *v) {
    if (v == NULL) return -1;
    int rc = PyDict_SetItem(dict, name, v);
    Py_DECREF(v);
    return rc;
}

/* The row x of step() and score(): 1 with its buffer in bx (the caller releases it) and
 * ||x||^2 (sqnorm, as _ckernels sums it) in xx; 0, bx released and no exception set, when x is
 * not a float64 vector of the stores' width or ||x||^2 is not finite or above the input
 * bound (the call returns None). */
static int take_row(const Fused *F, PyObject *x, Buf *bx, double *xx) {
    Py_ssize_t d = F->cs[0].st.d;
    if (take_buf(x, bx, 0, 'd') != 0 || bx->view.ndim != 1 || n_items(bx) != d) {
        release(bx, 1);
        return 0; /* take_buf sets no exception */
    }
    *xx = sqnorm(bx->view.buf, d);
    /* the input bound of the pool's learners (base.KERNEL_MAX ** (1/3): their cubic kernel
     * stays <= 1e100); beyond it, or not finite, the Python checks say what is wrong */
    if (!(*xx <= pow(1e100, 1.0 / 3.0))) {
        release(bx, 1);
        return 0;
    }
    return 1;
}

static PyObject *py_step(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    /* step(fused, x, y) -> the vote (True without a bound ddot), or None
     * A whole round of the per-example path in one call: ||x||^2 (sqnorm, as _ckernels sums
     * it), the 16 scores and the weights of the vote (into fuse()'s S and T), the vote (when
     * bind_dot() gave numpy's ddot; else the caller votes from S and T), the updates, counts
     * and weights: run()'s code for one row, so the numbers are the block's by construction. The components' t and budget and their stores' n and norm2
     * that changed are set on the Python objects, so they are current after every call (a
     * polynomial BPA-S reads kappa(x, x) of the row from its zdiag, which the caller set). None,
     * with nothing changed, when the round is not for this call: x not a float64 vector of
     * the stores' width, ||x||^2 not finite (the caller's checks say what is wrong), a store
     * with no room for an append or a power table too short (the caller's own round handles
     * it, then fuses again). */
    if (!nargs_ok(nargs, 3, "step")) return NULL;
    Fused *F = PyCapsule_GetPointer(args[0], FUSED_NAME);
    if (F == NULL) return NULL;
    double y = PyFloat_AsDouble(args[2]);
    if (y == -1.0 && PyErr_Occurred()) return NULL;
    Comp *cs = F->cs;
    Buf bx = {0};
    double xx;
    if (!take_row(F, args[1], &bx, &xx)) Py_RETURN_NONE;
    if (round_ready(&F->o) != O_DONE) {
        release(&bx, 1);
        Py_RETURN_NONE;
    }
    const double *x = bx.view.buf;
    Py_ssize_t n0[NK];
    double nrm0[NK];
    int64_t ct0[NK], bud0[NK];
    for (int i = 0; i < NK; i++) {
        n0[i] = cs[i].st.n;
        nrm0[i] = cs[i].st.norm2;
    }
    memcpy(ct0, F->ct, sizeof ct0);
    memcpy(bud0, F->budgets, sizeof bud0);
    if (F->o.dc) F->o.dc->round += 1; /* a new round: the cache's entries of the last are stale */
    int rc = one_round(&F->o, x, xx, y, 0, F->b[3].view.buf, F->b[4].view.buf);
    release(&bx, 1);
    if (rc < 0) return rule_error(cs, "step");
    PyObject *tv = NULL; /* the last t set (tval): DD's components share one round count */
    int64_t tval = 0;
    for (int i = 0; i < NK; i++) {
        const Store *st = &cs[i].st;
        if (F->ct[i] != ct0[i]) {
            if (tv == NULL || tval != F->ct[i]) {
                Py_XDECREF(tv);
                tv = PyLong_FromLongLong(tval = F->ct[i]);
            }
            if (tv == NULL || PyDict_SetItem(F->dicts[i], S_T, tv) < 0) {
                Py_XDECREF(tv);
                return NULL;
            }
        }
        if ((F->budgets[i] != bud0[i]
             && set_dict(F->dicts[i], S_BUDGET, PyLong_FromLongLong(F->budgets[i])) < 0)
            || (st->n != n0[i] && set_new(F->stores[i], S_N, PyLong_FromSsize_t(st->n)) < 0)
            || (memcmp(&st->norm2, &nrm0[i], sizeof(double)) != 0
                && set_new(F->stores[i], S_NORM2, PyFloat_FromDouble(st->norm2)) < 0)) {
            Py_XDECREF(tv);
            return NULL;
        }
    }
    Py_XDECREF(tv);
    if (g_dot == NULL) Py_RETURN_TRUE;
    return PyFloat_FromDouble(vote(F->b[4].view.buf, F->b[3].view.buf));
}

static PyObject *py_score(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    /* score(fused, x) -> the vote (True without a bound ddot), or None
     * The test half of step() (predict_one): ||x||^2, the 16 scores and the weights of the
     * vote into S and T, the vote; nothing of the learner changes. None when x is not a
     * float64 vector of the stores' width or ||x||^2 is not finite. */
    if (!nargs_ok(nargs, 2, "score")) return NULL;
    Fused *F = PyCapsule_GetPointer(args[0], FUSED_NAME);
    if (F == NULL) return NULL;
    Buf bx = {0};
    double xx;
    if (!take_row(F, args[1], &bx, &xx)) Py_RETURN_NONE;
    if (F->o.dc) F->o.dc->round += 1;
    score_round(&F->o, bx.view.buf, xx, F->b[3].view.buf, F->b[4].view.buf);
    release(&bx, 1);
    if (g_dot == NULL) Py_RETURN_TRUE;
    return PyFloat_FromDouble(vote(F->b[4].view.buf, F->b[3].view.buf));
}

static PyMethodDef methods[] = {
    KS_METHOD(run, "run(sd, heads, ..., Z, zz, y, start, S, T, nsv, out_n) -> (j, status, "
                   "norm2s)"),
    KS_METHOD(fuse, "fuse(sd, heads, has_head, ct, budgets, counts, theta, powtab, delta, B, "
                    "bitgen, S, T, comp_dicts, stores, diags) -> fused: the per-example path's "
                    "kept state"),
    KS_METHOD(step, "step(fused, x, y) -> vote (True: no ddot bound) or None: a whole round "
                    "(norm, scores, vote, updates, weights)"),
    KS_METHOD(score, "score(fused, x) -> vote (True: no ddot bound) or None: step()'s test "
                     "half"),
    KS_METHOD(bind_dot, "bind_dot(dot_address, ilp64): numpy's cblas_ddot, for the vote (0: "
                        "none)"),
    KS_METHOD(vote, "vote(theta, s) -> theta . sign(s) as step() computes it, or None"),
    {NULL, NULL, 0, NULL},
};

KS_MODULE_DEF(_ck_omkc, "Compiled rounds of kernelstream's bounded OMKC (blocks and single rows).");

PyMODINIT_FUNC PyInit__ck_omkc(void) {
    if (!(S_T = PyUnicode_InternFromString("t")) || !(S_BUDGET = PyUnicode_InternFromString("budget"))
        || !(S_N = PyUnicode_InternFromString("n"))
        || !(S_NORM2 = PyUnicode_InternFromString("norm2")))
        return NULL;
    PyObject *mod = ks_module(&module, KO_ABI);
    if (mod != NULL
        && (PyModule_AddIntConstant(mod, "DONE", O_DONE) < 0
            || PyModule_AddIntConstant(mod, "POWERS", O_POWERS) < 0
            || PyModule_AddIntConstant(mod, "FULL", O_FULL) < 0))
        Py_CLEAR(mod);
    return mod;
}
