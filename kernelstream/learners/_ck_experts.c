/* Compiled blocks of the expert-advice kernel-selection learners (kernelstream.learners.compiled,
 * "expert blocks"): whole test-then-train blocks of LKMBooks (Li & Liao, Machine Learning 2022)
 * and of EA2OKS / BEA2OKS (Liao & Li, ECML-PKDD 2021, Algorithm 2) without returning to
 * Python, except for the rare rounds their Python code must see.
 *
 * Random draws: the caller draws the uniforms of the next rounds ahead (Generator.random(n)
 * draws what n calls of random() would); the C code uses them in the order of the Python code
 * and reports how many it used, and the caller rewinds the Generator and advances it by that
 * number. A round whose draws would lead to a rare path (an accepted reservoir offer) is
 * recognised from its uniforms before anything is written, and left to Python whole.
 * EA2OKS's per-row entry (ea2oks_step) draws its round's uniforms from the learner's bit
 * generator itself (next_double is Generator.random()); a round it leaves to Python has drawn
 * them already, and the caller gives them back (PCG64's advance by minus their number).
 *
 * Bit-identity with the numpy reference. LKMBooks's reference code is numpy: a BLAS gemv for
 * the distance row and for the K scores, numpy's SIMD exponential, a BLAS dot, numpy's sum.
 * Re-implementing those would change results at round-off level (BLAS sums in blocks, numpy's
 * exp differs from libm's by up to 1 ulp), so this module calls the very routines numpy calls,
 * with the arguments numpy passes: the cblas_dgemv and cblas_ddot of the BLAS numpy is linked
 * with (their addresses are given by compiled.py, which finds them in numpy's BLAS library) and
 * the float64 inner loop of the numpy.exp ufunc (read from the ufunc object; the prefix of
 * numpy's public PyUFuncObject layout is declared below, numpy's headers are not needed to
 * build). compiled.py checks these primitives against numpy on random data once at import and
 * leaves the learner on numpy if any bit differs. EA2OKS's per-kernel stores are scored as
 * _ck_multi.pool_scores scores them (its exponential, bound from a capsule; the distances
 * by the same operations, shared within a round by stream id). Everything else is scalar IEEE
 * arithmetic in the order of the Python code (no FMA contraction: -ffp-contract=off).
 *
 * This file: LKMBooks's and EA2OKS's blocks and the module; numpy's routines and their
 * binding are in _ck_experts_numpy.h, EA2OKS's AO2MD arithmetic (shared with _ck_multi) in
 * _ck_mirror.h. One translation unit.
 */
#define KS_EXT_NAME "_ck_experts" /* names the module in its argument errors */
#include "_ck_mirror.h"

/* Bumped whenever a signature or a result changes: the wrapper refuses a stale build. */
#define KE_ABI 2

#include "_ck_experts_numpy.h"


/* ---- LKMBooks -------------------------------------------------------------------------- */
enum { LOSS_LOGISTIC = 0, LOSS_SQUARE = 1, LOSS_ABSOLUTE = 2 };
/* how lkm_run stopped: every row done (or the row limit), a uniform is needed and none is
 * left, or round j is for the Python code (fewer than 2 stored points, where numpy takes other
 * paths; a non-finite score; the hedge's log-domain fallback) */
enum { LKM_END = 0, LKM_NEED_U = 1, LKM_PYTHON = 2 };

/* losses.py's derivatives, operation for operation */
static inline double loss_deriv(int loss, double f, double y) {
    if (loss == LOSS_LOGISTIC) {
        double z = y * f;
        if (z >= 0) {
            double e = exp(-z);
            return -y * e / (1.0 + e);
        }
        return -y / (1.0 + exp(z));
    }
    if (loss == LOSS_SQUARE) return 2.0 * (f - y);
    return f > y ? 1.0 : (f < y ? -1.0 : 0.0);
}

static PyObject *py_lkm_run(PyObject *Py_UNUSED(self), PyObject *const *args,
                            Py_ssize_t nargs) {
    /* lkm_run(X, zz, yv, i, end, t, out, n_sv, SX, sqn, a, p, neg_gammas, n, gmax, consts,
     *         loss, u, d2, R, fv, e) -> (j, n, gmax, used, status)
     * LKMBooks._score and _update (lkmbooks.py) over rows i..end-1 of the block; row r is
     * round t + (r - i) (1-based). consts = (B, lam, rate, pden, nu); u holds the uniforms of
     * the rounds that draw one (those that start with n < B), in order. Stops before a round
     * whose Python code must run (LKM_PYTHON) or that needs a uniform when u is used up
     * (LKM_NEED_U): its state is untouched then. d2 (B), R (K B), fv (K), e (K): scratch. */
    if (nargs != 22) return PyErr_Format(PyExc_TypeError, "lkm_run() takes 22 arguments");
    if (g_exp == NULL) return PyErr_Format(PyExc_RuntimeError, "_ck_experts: not bound");
    Py_ssize_t i0 = PyLong_AsSsize_t(args[3]), end = PyLong_AsSsize_t(args[4]);
    long long t0 = PyLong_AsLongLong(args[5]);
    Py_ssize_t n = PyLong_AsSsize_t(args[13]);
    double gmax = PyFloat_AsDouble(args[14]);
    int loss = (int)PyLong_AsLong(args[16]);
    if (PyErr_Occurred()) return NULL;
    int has_nsv = args[7] != Py_None;
    Buf b[16];
    memset(b, 0, sizeof b);
    if (get_buf(args[0], &b[0], 0, "X", 'd') < 0 || get_buf(args[1], &b[1], 0, "zz", 'd') < 0
        || get_buf(args[2], &b[2], 0, "yv", 'd') < 0 || get_buf(args[6], &b[3], 1, "out", 'd') < 0
        || (has_nsv && get_buf(args[7], &b[4], 1, "n_sv", 'q') < 0)
        || get_buf(args[8], &b[5], 1, "SX", 'd') < 0 || get_buf(args[9], &b[6], 1, "sqn", 'd') < 0
        || get_buf(args[10], &b[7], 1, "a", 'd') < 0 || get_buf(args[11], &b[8], 1, "p", 'd') < 0
        || get_buf(args[12], &b[9], 0, "neg_gammas", 'd') < 0
        || get_buf(args[15], &b[10], 0, "consts", 'd') < 0
        || get_buf(args[17], &b[11], 0, "u", 'd') < 0
        || get_buf(args[18], &b[12], 1, "d2", 'd') < 0 || get_buf(args[19], &b[13], 1, "R", 'd') < 0
        || get_buf(args[20], &b[14], 1, "fv", 'd') < 0 || get_buf(args[21], &b[15], 1, "e", 'd') < 0)
        goto fail;
    {
        Py_ssize_t rows = n_items(&b[1]), K = n_items(&b[8]), Bsz = n_items(&b[6]);
        Py_ssize_t d = rows ? n_items(&b[0]) / rows : 0;
        const double *cs = b[10].view.buf;
        Py_ssize_t B = (Py_ssize_t)cs[0];
        if (n_items(&b[10]) != 5 || B > Bsz || n_items(&b[5]) != Bsz * d || n_items(&b[7]) != Bsz
            || n_items(&b[9]) != K || n_items(&b[12]) < Bsz || n_items(&b[13]) < K * Bsz
            || n_items(&b[14]) < K || n_items(&b[15]) < K || n_items(&b[3]) < rows
            || (has_nsv && n_items(&b[4]) < rows) || end > rows || i0 < 0 || n < 0 || n > B) {
            PyErr_SetString(PyExc_ValueError, "_ck_experts.lkm_run: arrays have wrong sizes");
            goto fail;
        }
        const double lam = cs[1], rate = cs[2], pden = cs[3], nu = cs[4];
        const double *X = b[0].view.buf, *zz = b[1].view.buf, *yv = b[2].view.buf;
        const double *neg = b[9].view.buf, *u = b[11].view.buf;
        double *out = b[3].view.buf, *SX = b[5].view.buf, *sqn = b[6].view.buf;
        double *a = b[7].view.buf, *p = b[8].view.buf, *d2 = b[12].view.buf, *R = b[13].view.buf;
        double *fv = b[14].view.buf, *e = b[15].view.buf;
        int64_t *nsv = has_nsv ? b[4].view.buf : NULL;
        Py_ssize_t nu_ = n_items(&b[11]), used = 0, j = i0;
        int status = LKM_END;
        for (; j < end; j++) {
            if (n < 2) { status = LKM_PYTHON; break; }
            if (n < B && used == nu_) { status = LKM_NEED_U; break; }
            const double *x = X + j * d;
            double xx = zz[j], y = yv[j];
            /* _score: sq_dist_row, widths.rows, .dot(a), p.dot(fv) */
            np_gemv(n, d, SX, x, d2);
            for (Py_ssize_t k = 0; k < n; k++) {
                double v = d2[k] * -2.0;
                v += sqn[k];
                v += xx;
                d2[k] = (v >= 0.0 || isnan(v)) ? v : 0.0; /* np.maximum(v, 0.0) */
            }
            for (Py_ssize_t i = 0; i < K; i++)
                for (Py_ssize_t k = 0; k < n; k++) R[i * n + k] = neg[i] * d2[k];
            np_exp(R, K * n);
            np_gemv(K, n, R, a, fv);
            double score = np_dot(K, p, fv);
            if (!isfinite(score)) { status = LKM_PYTHON; break; }
            /* _update */
            double t = (double)(t0 + (j - i0));
            double g = loss_deriv(loss, score, y);
            double lo = fv[0], hi = fv[0];
            for (Py_ssize_t i = 1; i < K; i++) {
                if (fv[i] < lo) lo = fv[i];
                if (fv[i] > hi) hi = fv[i];
            }
            if (g != 0.0 && hi > lo) {
                double s = g / gmax, ref = g > 0.0 ? lo : hi, nrate = -rate;
                for (Py_ssize_t i = 0; i < K; i++) {
                    double c = fv[i] - ref;
                    c *= s;
                    e[i] = nrate * c;
                }
                np_exp(e, K);
                for (Py_ssize_t i = 0; i < K; i++) e[i] = p[i] * e[i];
                double z = np_small_sum(e, K);
                if (!(z > 0.0 && isfinite(z))) { status = LKM_PYTHON; break; }
                for (Py_ssize_t i = 0; i < K; i++) p[i] = e[i] / z;
            }
            out[j] = score;
            if (hi - lo > gmax) gmax = hi - lo;
            if (n < B) {
                double q = (double)B / (pden * pow(t, nu));
                double prob = q < 1.0 ? q : 1.0;
                if (u[used++] < prob) {
                    memcpy(SX + n * d, x, (size_t)d * sizeof(double));
                    sqn[n] = xx;
                    a[n] = -lam * g / prob;
                    n++;
                }
            }
            if (nsv) nsv[j] = n;
        }
        release(b, 16);
        return Py_BuildValue("(nndni)", j, n, gmax, used, status);
    }
fail:
    release(b, 16);
    return NULL;
}


/* ---- EA2OKS and BEA2OKS ----------------------------------------------------------------- */
/* The exponential of the KernelPool scores: _ck_multi's vexp (bound from its capsule), so a
 * store's score is pool_scores's, bit for bit. */
typedef void (*vexp_t)(double *, Py_ssize_t);
static vexp_t g_vexp = NULL;

enum { EA_END = 0, EA_NEED_U = 1, EA_PYTHON = 2, EA_RESTART = 3, EA_GROW = 4 };

typedef struct { /* one kernel's store (SVStore's arrays) */
    double *X, *sqn, *a;
    int64_t *ids, *s;
    Py_ssize_t cap;
} ea_store;

/* numpy/random/bitgen.h (numpy's stable C interface of its bit generators): next_double is
 * what Generator.random() returns */
typedef struct {
    void *state;
    uint64_t (*next_uint64)(void *st);
    uint32_t (*next_uint32)(void *st);
    double (*next_double)(void *st);
    uint64_t (*next_raw)(void *st);
} ea_bitgen;

/* What EA2OKS's rounds read and write (its stores, the mirror's and the experts' arrays, the
 * scalars of fstate and istate, the scratch), taken from the arguments by ea_take. */
typedef struct {
    Py_ssize_t K, M, d, mask;
    ea_store st[64];
    int64_t *ns, *pos, *missing, *touched, *ctag, *cstamp;
    const int64_t *resids;
    Py_ssize_t *nz;
    const double *resX, *sqnV, *resy, *KVy, *m2, *neg;
    double *H, *n2, *L, *p, *cd, *fs;
    int64_t *is;
    double *eb, *kv, *d2v, *mux, *ip, *sc, *fx, *f, *c, *A, *Bc, *e, *cum, *zv;
    double lam, norm, beta, U2, radius, thr, rate, Lmin, logK;
    int64_t er, seen, Bq, sel;
} ea_ctx;

/* the state's arguments, in this order (ea2oks_run's from its 10th, ea2oks_step's kept tuple) */
enum { EA_NSTATE = 23, EA_NB = 22 };

/* Takes the EA_NSTATE state arguments a (stores, ns, resX, sqnV, resy, resids, KVy, m2, H, n2,
 * pos, missing, L, p, fstate, istate, neg, cache, ctag, cstamp, scratch, work, touched) of rows
 * of d features into c: their buffers into b (EA_NB, zeroed by the caller) and sb (5 per
 * store, c->K stores; c->K = 0 before the call), which the caller releases whatever this
 * returns. 0, or -1 with an exception set. */
static int ea_take(ea_ctx *c, PyObject *const *a, Py_ssize_t d, Buf *b, Buf *sb) {
    static const char *names[EA_NB] = {"ns", "resX", "sqnV", "resy", "resids", "KVy", "m2",
                                       "H", "n2", "pos", "missing", "L", "p", "fstate",
                                       "istate", "neg", "cache", "ctag", "cstamp", "scratch",
                                       "work", "touched"};
    static const char fmt[EA_NB] = {'q', 'd', 'd', 'd', 'q', 'd', 'd', 'd', 'd', 'q', 'q',
                                    'd', 'd', 'd', 'q', 'd', 'd', 'q', 'q', 'd', 'q', 'q'};
    static const int wr[EA_NB] = {1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1,
                                  1, 1};
    PyObject *stores = a[0];
    if (!PyTuple_Check(stores)) {
        PyErr_SetString(PyExc_TypeError, "_ck_experts.ea2oks: stores must be a tuple");
        return -1;
    }
    Py_ssize_t K = PyTuple_GET_SIZE(stores);
    if (K < 1 || K > 64) {
        PyErr_SetString(PyExc_ValueError, "_ck_experts.ea2oks: 1 <= K <= 64");
        return -1;
    }
    c->K = K;
    memset(sb, 0, (size_t)(5 * K) * sizeof(Buf)); /* only these: a Buf is ~90 bytes */
    for (int k = 0; k < EA_NB; k++)
        if (get_buf(a[k + 1], &b[k], wr[k], names[k], fmt[k]) < 0) return -1;
    Py_ssize_t maxcap = 0;
    for (Py_ssize_t i = 0; i < K; i++) {
        PyObject *tup = PyTuple_GET_ITEM(stores, i);
        if (!PyTuple_Check(tup) || PyTuple_GET_SIZE(tup) != 5) {
            PyErr_SetString(PyExc_TypeError, "_ck_experts.ea2oks: a store is (X, sqn, a, ids, s)");
            return -1;
        }
        Buf *q = sb + 5 * i;
        if (get_buf(PyTuple_GET_ITEM(tup, 0), &q[0], 1, "store.X", 'd') < 0
            || get_buf(PyTuple_GET_ITEM(tup, 1), &q[1], 1, "store.sqn", 'd') < 0
            || get_buf(PyTuple_GET_ITEM(tup, 2), &q[2], 1, "store.a", 'd') < 0
            || get_buf(PyTuple_GET_ITEM(tup, 3), &q[3], 1, "store.ids", 'q') < 0
            || get_buf(PyTuple_GET_ITEM(tup, 4), &q[4], 1, "store.s", 'q') < 0)
            return -1;
        Py_ssize_t cap = n_items(&q[2]);
        if (n_items(&q[0]) != cap * d || n_items(&q[1]) != cap || n_items(&q[3]) != cap
            || n_items(&q[4]) != cap) {
            PyErr_SetString(PyExc_ValueError, "_ck_experts.ea2oks: a store's arrays have wrong "
                            "sizes");
            return -1;
        }
        c->st[i] = (ea_store){q[0].view.buf, q[1].view.buf, q[2].view.buf, q[3].view.buf,
                              q[4].view.buf, cap};
        if (cap > maxcap) maxcap = cap;
    }
    Py_ssize_t M = n_items(&b[2]), C = n_items(&b[16]);
    if (n_items(&b[0]) != K || n_items(&b[1]) != M * d || n_items(&b[3]) != M
        || n_items(&b[4]) != M || n_items(&b[5]) != K * M || n_items(&b[6]) != K
        || n_items(&b[7]) != K * M || n_items(&b[8]) != K || n_items(&b[9]) != K * M
        || n_items(&b[10]) != K || n_items(&b[11]) != K || n_items(&b[12]) != K
        || n_items(&b[13]) != 8 || n_items(&b[14]) != 4 || n_items(&b[15]) != K || C < 1
        || (C & (C - 1)) || n_items(&b[17]) != C || n_items(&b[18]) != C
        || n_items(&b[19]) < maxcap + K * M + M + 12 * K + d || n_items(&b[20]) < d
        || n_items(&b[21]) != K || M < 2) {
        PyErr_SetString(PyExc_ValueError, "_ck_experts.ea2oks: arrays have wrong sizes");
        return -1;
    }
    int64_t *ns = b[0].view.buf;
    const int64_t *pos = b[9].view.buf, *missing = b[10].view.buf;
    for (Py_ssize_t i = 0; i < K; i++) {
        if (ns[i] < 0 || ns[i] > c->st[i].cap) {
            PyErr_SetString(PyExc_ValueError, "_ck_experts.ea2oks: a count exceeds its store");
            return -1;
        }
        /* the positions the rounds index a store with (arguments out of step with each
         * other, e.g. kept from before a restart, must not reach memory outside it) */
        for (Py_ssize_t k = 0; k < M; k++)
            if (pos[i * M + k] >= ns[i] || (pos[i * M + k] < 0 && !missing[i])) {
                PyErr_SetString(PyExc_ValueError, "_ck_experts.ea2oks: a reservoir position "
                                "is outside its store");
                return -1;
            }
    }
    c->M = M;
    c->d = d;
    c->mask = C - 1;
    c->ns = ns;
    c->resX = b[1].view.buf;
    c->sqnV = b[2].view.buf;
    c->resy = b[3].view.buf;
    c->resids = b[4].view.buf;
    c->KVy = b[5].view.buf;
    c->m2 = b[6].view.buf;
    c->H = b[7].view.buf;
    c->n2 = b[8].view.buf;
    c->pos = b[9].view.buf;
    c->missing = b[10].view.buf;
    c->L = b[11].view.buf;
    c->p = b[12].view.buf;
    c->fs = b[13].view.buf;
    c->is = b[14].view.buf;
    c->neg = b[15].view.buf;
    c->cd = b[16].view.buf;
    c->ctag = b[17].view.buf;
    c->cstamp = b[18].view.buf;
    c->nz = b[20].view.buf;
    c->touched = b[21].view.buf;
    double *eb = b[19].view.buf;
    c->eb = eb;
    c->kv = eb + maxcap;
    c->d2v = c->kv + K * M;
    c->mux = c->d2v + M;
    c->ip = c->mux + K;
    c->sc = c->ip + K;
    c->fx = c->sc + K;
    c->f = c->fx + K;
    c->c = c->f + K;
    c->A = c->c + K;
    c->Bc = c->A + K;
    c->e = c->Bc + K;
    c->cum = c->e + K;
    c->zv = c->cum + K;
    const double *fs = c->fs;
    c->lam = fs[0];
    c->norm = fs[1];
    c->beta = fs[2];
    c->U2 = fs[3];
    c->radius = fs[4];
    c->rate = fs[5];
    c->Lmin = fs[6];
    c->thr = fs[7];
    c->er = c->is[0];
    c->seen = c->is[1];
    c->Bq = c->is[2];
    c->sel = c->is[3];
    c->logK = log((double)K);
    return 0;
}

/* The scalars the rounds changed, back into fstate and istate. */
static inline void ea_put(const ea_ctx *c) {
    c->fs[5] = c->rate;
    c->fs[6] = c->Lmin;
    c->is[0] = c->er;
    c->is[1] = c->seen;
    c->is[3] = c->sel;
}

/* One round of EA2OKS._score and _update (ea2oks.py; OptimisticMirror, KernelPool,
 * ExpWeights) on x (round t, 0-based), with a full reservoir. The uniforms, in the Python
 * code's order (the kernel draw, one per kernel with a margin below 1, the reservoir's offer):
 * from u (at least K + 2 left) or, when rng is given, drawn from it into ubuf (K + 2) once
 * their number is known; *used: how many the round took (drawn from rng: also when it
 * returns EA_PYTHON). Returns EA_END, or EA_RESTART after a round that leaves a store with B
 * points or more, or, with nothing written: EA_GROW when a store has no room for 1 + M more
 * points, EA_PYTHON when the round's offer to the reservoir is accepted (the Python code's
 * round). *score: the round's score. */
static int ea_round(ea_ctx *c, const double *x, double xx, double y, int64_t t, const double *u,
                    ea_bitgen *rng, double *ubuf, Py_ssize_t *used, double *score) {
    const Py_ssize_t K = c->K, M = c->M, d = c->d, mask = c->mask;
    ea_store *st = c->st;
    int64_t *ns = c->ns;
    *used = 0;
    for (Py_ssize_t i = 0; i < K; i++)
        if (ns[i] + 1 + M > st[i].cap) return EA_GROW;
    const double lam = c->lam, U2 = c->U2, radius = c->radius;
    const double *resX = c->resX, *sqnV = c->sqnV, *resy = c->resy, *neg = c->neg;
    double *kv = c->kv, *d2v = c->d2v, *mux = c->mux, *ip = c->ip, *sc = c->sc,
           *fx = c->fx, *f = c->f, *eb = c->eb, *zv = c->zv, *n2 = c->n2, *p = c->p,
           *cd = c->cd;
    int64_t *ctag = c->ctag, *cstamp = c->cstamp;
    Py_ssize_t *nz = c->nz;
    /* OptimisticMirror.context with v = M */
    np_gemv(M, d, resX, x, d2v);
    for (Py_ssize_t k = 0; k < M; k++) {
        double v = d2v[k] * -2.0;
        v += sqnV[k];
        v += xx;
        d2v[k] = (v >= 0.0 || isnan(v)) ? v : 0.0;
    }
    for (Py_ssize_t i = 0; i < K; i++)
        for (Py_ssize_t k = 0; k < M; k++) kv[i * M + k] = neg[i] * d2v[k];
    np_exp(kv, K * M);
    np_gemv(K, M, kv, resy, mux);
    np_gemv(K, M, c->H, resy, ip);
    for (Py_ssize_t i = 0; i < K; i++) {
        mux[i] /= (double)M;
        ip[i] /= (double)M;
        double nbar2 = n2[i] + lam * (2.0 * ip[i] + lam * c->m2[i]);
        sc[i] = nbar2 > U2 ? radius / sqrt(nbar2) : 1.0;
    }
    /* KernelPool.scores: each store's points by stream id in a per-round cache */
    Py_ssize_t m = 0;
    for (Py_ssize_t k = 0; k < d; k++)
        if (x[k] != 0.0) {
            nz[m] = k;
            zv[m++] = x[k];
        }
    for (Py_ssize_t i = 0; i < K; i++) {
        Py_ssize_t n = (Py_ssize_t)ns[i];
        if (n == 0) { fx[i] = 0.0; continue; }
        const ea_store *S = &st[i];
        for (Py_ssize_t k = 0; k < n; k++) {
            int64_t id = S->ids[k];
            double v;
            Py_ssize_t h = (Py_ssize_t)(id & mask);
            if (id >= 0 && ctag[h] == id && cstamp[h] == t) {
                v = cd[h];
            } else {
                v = dist1(S->X + k * d, S->sqn[k], nz, zv, m, xx);
                if (id >= 0) { cd[h] = v; ctag[h] = id; cstamp[h] = t; }
            }
            eb[k] = v * neg[i];
        }
        g_vexp(eb, n);
        double fi = 0.0;
        for (Py_ssize_t k = 0; k < n; k++) fi += S->a[k] * eb[k];
        fx[i] = fi;
    }
    Py_ssize_t cnt = 0;
    for (Py_ssize_t i = 0; i < K; i++) {
        f[i] = sc[i] * (fx[i] + lam * mux[i]);
        if (y * f[i] < 1.0) cnt++;
    }
    if (rng != NULL) { /* the round's uniforms, now that their number is known */
        for (Py_ssize_t k = 0; k < cnt + 2; k++) ubuf[k] = rng->next_double(rng->state);
        u = ubuf;
        *used = cnt + 2;
    }
    /* the reservoir's draw at the end of the round: an accepted offer is Python's */
    if (u[1 + cnt] < (double)M / (double)(c->seen + 1)) return EA_PYTHON;
    /* the round is ours: _score's I ~ p (categorical: one uniform, inverse CDF in Python
     * floats) */
    double *cum = c->cum;
    double tot = 0.0;
    for (Py_ssize_t i = 0; i < K; i++) {
        tot += p[i];
        cum[i] = tot;
    }
    double uc = u[0] * tot;
    Py_ssize_t I = 0;
    while (I < K && !(uc < cum[I])) I++; /* bisect_right */
    if (I > K - 1) I = K - 1;
    *score = f[I];
    c->sel = I;
    /* _update: ea2oks_step's constants, one uniform per kernel with margin < 1 */
    double *cc = c->c, *A = c->A, *Bc = c->Bc;
    ea2oks_consts(K, y, f, c->m2, mux, lam, c->norm, c->beta, u + 1, cnt, cc, A, Bc);
    /* OptimisticMirror.correct: x_t into the stores with a_i != 0, then the reservoir
     * points a store lacks where b_i != 0, then mirror_correct's arithmetic */
    for (Py_ssize_t i = 0; i < K; i++) {
        if (A[i] == 0.0) continue;
        ea_store *S = &st[i];
        Py_ssize_t n = (Py_ssize_t)ns[i];
        memcpy(S->X + n * d, x, (size_t)d * sizeof(double));
        S->sqn[n] = xx;
        S->a[n] = A[i];
        S->ids[n] = t;
        S->s[n] = t;
        ns[i] = n + 1;
    }
    int64_t *pos = c->pos, *missing = c->missing;
    for (Py_ssize_t i = 0; i < K; i++) {
        if (!missing[i] || Bc[i] == 0.0) continue;
        ea_store *S = &st[i];
        for (Py_ssize_t k = 0; k < M; k++) {
            if (pos[i * M + k] >= 0) continue;
            Py_ssize_t n = (Py_ssize_t)ns[i];
            memcpy(S->X + n * d, resX + k * d, (size_t)d * sizeof(double));
            S->sqn[n] = sqnV[k];
            S->a[n] = 0.0;
            S->ids[n] = c->resids[k];
            S->s[n] = c->resids[k];
            pos[i * M + k] = n;
            ns[i] = n + 1;
        }
        missing[i] = 0;
    }
    mirror_h(K, M, M, A, Bc, kv, c->KVy, c->H);
    for (Py_ssize_t i = 0; i < K; i++) {
        if (A[i] == 0.0 && Bc[i] == 0.0) continue;
        double fac;
        n2[i] = mirror_correct1(st[i].a, (Py_ssize_t)ns[i], pos + i * M, M, resy, A[i], Bc[i],
                                n2[i], c->m2[i], ip[i], fx[i], mux[i], U2, radius,
                                c->H + i * M, &fac);
        c->touched[i] = 1;
    }
    /* ExpWeights.update and check_epoch */
    double *L = c->L, *e = c->e;
    double lmin = 0.0;
    for (Py_ssize_t i = 0; i < K; i++) {
        L[i] += cc[i];
        if (i == 0 || L[i] < lmin) lmin = L[i];
    }
    for (Py_ssize_t i = 0; i < K; i++) e[i] = -c->rate * (L[i] - lmin);
    np_exp(e, K);
    double zs = np_small_sum(e, K);
    for (Py_ssize_t i = 0; i < K; i++) p[i] = e[i] / zs;
    c->Lmin = lmin;
    if (c->Lmin + c->thr > pow(4.0, (double)c->er)) {
        c->er++;
        double G = pow(4.0, (double)c->er);
        c->rate = K > 1 ? log1p(sqrt(2.0 * c->logK / G)) : 0.0;
        c->Lmin = pow(4.0, (double)c->er);
        for (Py_ssize_t i = 0; i < K; i++) L[i] = 0.0;
    }
    /* end_round: the offer (rejected, as checked above) */
    c->seen++;
    if (rng == NULL) *used = cnt + 2;
    if (c->Bq >= 0)
        for (Py_ssize_t i = 0; i < K; i++)
            if (ns[i] >= c->Bq) return EA_RESTART;
    return EA_END;
}

static PyObject *py_ea2oks_run(PyObject *Py_UNUSED(self), PyObject *const *args,
                               Py_ssize_t nargs) {
    /* ea2oks_run(X, zz, yv, i, end, t, out, n_sv, u, stores, ns, resX, sqnV, resy, resids,
     *            KVy, m2, H, n2, pos, missing, L, p, fstate, istate, neg, cache, ctag, cstamp,
     *            scratch, work, touched) -> (j, status, used)
     * EA2OKS's rounds (ea_round) over rows i..end-1, row r being round t + (r - i) (0-based,
     * the learner's t), with a full reservoir (M >= 2 points). stores: K tuples (X, sqn, a,
     * ids, s) of the SVStores, ns their counts (updated); fstate = [lam, norm, beta, U2, radius,
     * rate, Lmin, thr] (rate, Lmin updated), istate = [r, seen, B, selected] (B: BEA2OKS's
     * restart size, -1 for EA2OKS; r, seen, selected updated); u: the uniforms of the next
     * draws, in the Generator's order; cache, ctag, cstamp (a power of 2 long): distances by
     * stream id within a round; touched[i] = 1 for the stores whose norm2 must be set to n2[i].
     * Stops before a round that the Python code must run (its state untouched: EA_PYTHON),
     * i.e. its offer to the reservoir is accepted, before a round when a store has no room for
     * 1 + M more points (EA_GROW) or fewer than K + 2 uniforms are left (EA_NEED_U), and after
     * a round that leaves a store with B points or more (EA_RESTART). */
    if (nargs != 9 + EA_NSTATE) return PyErr_Format(PyExc_TypeError, "ea2oks_run() takes 32 arguments");
    if (g_exp == NULL || g_vexp == NULL)
        return PyErr_Format(PyExc_RuntimeError, "_ck_experts: not bound");
    Py_ssize_t i0 = PyLong_AsSsize_t(args[3]), end = PyLong_AsSsize_t(args[4]);
    long long t0 = PyLong_AsLongLong(args[5]);
    if (PyErr_Occurred()) return NULL;
    int has_nsv = args[7] != Py_None;
    Buf b[6], sb[64 * 5], bs[EA_NB];
    memset(b, 0, sizeof b);
    memset(bs, 0, sizeof bs);
    ea_ctx c;
    c.K = 0;
    if (get_buf(args[0], &b[0], 0, "X", 'd') < 0 || get_buf(args[1], &b[1], 0, "zz", 'd') < 0
        || get_buf(args[2], &b[2], 0, "yv", 'd') < 0 || get_buf(args[6], &b[3], 1, "out", 'd') < 0
        || (has_nsv && get_buf(args[7], &b[4], 1, "n_sv", 'q') < 0)
        || get_buf(args[8], &b[5], 0, "u", 'd') < 0)
        goto fail;
    {
        Py_ssize_t rows = n_items(&b[1]);
        Py_ssize_t d = rows ? n_items(&b[0]) / rows : 0;
        if (ea_take(&c, args + 9, d, bs, sb) < 0) goto fail;
        if (n_items(&b[0]) != rows * d || n_items(&b[2]) != rows || n_items(&b[3]) < rows
            || (has_nsv && n_items(&b[4]) < rows) || end > rows || i0 < 0) {
            PyErr_SetString(PyExc_ValueError, "_ck_experts.ea2oks_run: arrays have wrong sizes");
            goto fail;
        }
        const double *X = b[0].view.buf, *zz = b[1].view.buf, *yv = b[2].view.buf,
                     *u = b[5].view.buf;
        double *out = b[3].view.buf;
        int64_t *nsv = has_nsv ? b[4].view.buf : NULL;
        Py_ssize_t nu_ = n_items(&b[5]), used = 0, j = i0;
        int status = EA_END;
        for (; j < end; j++) {
            if (used + c.K + 2 > nu_) { status = EA_NEED_U; break; }
            Py_ssize_t took;
            double score;
            int r = ea_round(&c, X + j * c.d, zz[j], yv[j], t0 + (j - i0), u + used, NULL, NULL,
                             &took, &score);
            if (r == EA_GROW || r == EA_PYTHON) { status = r; break; }
            used += took;
            out[j] = score;
            if (nsv) {
                int64_t tot_n = 0;
                for (Py_ssize_t i = 0; i < c.K; i++) tot_n += c.ns[i];
                nsv[j] = tot_n;
            }
            if (r == EA_RESTART) { j++; status = r; break; }
        }
        ea_put(&c);
        release(b, 6);
        release(sb, (int)(5 * c.K));
        release(bs, EA_NB);
        return Py_BuildValue("(nin)", j, status, used);
    }
fail:
    release(b, 6);
    release(sb, (int)(5 * c.K));
    release(bs, EA_NB);
    return NULL;
}

/* The attributes a step keeps current, their names interned once. */
enum { A_N, A_NORM2, A_R, A_RATE, A_LMIN, A_SEEN, A_COUNT };
static PyObject *g_attr[A_COUNT];

static int attr_names(void) {
    static const char *names[A_COUNT] = {"n", "norm2", "r", "rate", "Lmin", "seen"};
    for (int i = 0; i < A_COUNT; i++)
        if (g_attr[i] == NULL && (g_attr[i] = PyUnicode_InternFromString(names[i])) == NULL)
            return -1;
    return 0;
}

/* obj.<attribute a> = v */
static inline int set_float(PyObject *obj, int a, double v) {
    PyObject *o = PyFloat_FromDouble(v);
    int r = o ? PyObject_SetAttr(obj, g_attr[a], o) : -1;
    Py_XDECREF(o);
    return r;
}

static inline int set_int(PyObject *obj, int a, int64_t v) {
    PyObject *o = PyLong_FromLongLong((long long)v);
    int r = o ? PyObject_SetAttr(obj, g_attr[a], o) : -1;
    Py_XDECREF(o);
    return r;
}

static PyObject *py_ea2oks_step(PyObject *Py_UNUSED(self), PyObject *const *args,
                                Py_ssize_t nargs) {
    /* ea2oks_step(kept, x, xx, y, t) -> (status, score, used, missing_changed, selected)
     * One round (ea_round) of EA2OKS.step on the row x (xx = ||x||^2, label y, round t), its
     * uniforms drawn from the learner's bit generator. kept: the state arguments of
     * ea2oks_run (stores .. touched, EA_NSTATE of them), then the bit generator's capsule, the
     * SVStores, the ExpWeights and the Reservoir, whose attributes the round changes are set
     * here (the stores' n and norm2, the experts' r, rate and Lmin, the reservoir's seen).
     * status: EA_END or EA_RESTART after the round; EA_GROW (nothing drawn or written) or
     * EA_PYTHON (nothing written; `used` uniforms drawn, which the caller gives back) for a
     * round this call leaves alone. missing_changed: the int64 `missing` of kept changed (the
     * mirror's bool copy must follow); selected: the kernel drawn. */
    if (nargs != 5) return PyErr_Format(PyExc_TypeError, "ea2oks_step() takes 5 arguments");
    if (g_exp == NULL || g_vexp == NULL)
        return PyErr_Format(PyExc_RuntimeError, "_ck_experts: not bound");
    if (attr_names() < 0) return NULL;
    PyObject *kept = args[0];
    if (!PyTuple_Check(kept) || PyTuple_GET_SIZE(kept) != EA_NSTATE + 4)
        return PyErr_Format(PyExc_TypeError, "_ck_experts.ea2oks_step: kept must be a tuple of "
                            "%d", EA_NSTATE + 4);
    PyObject *const *a = &PyTuple_GET_ITEM(kept, 0);
    PyObject *objs = a[EA_NSTATE + 1], *ex = a[EA_NSTATE + 2], *res = a[EA_NSTATE + 3];
    double xx = PyFloat_AsDouble(args[2]), y = PyFloat_AsDouble(args[3]);
    long long t = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred()) return NULL;
    ea_bitgen *rng = PyCapsule_GetPointer(a[EA_NSTATE], "BitGenerator");
    if (rng == NULL) return NULL;
    Buf bx, sb[64 * 5], bs[EA_NB];
    memset(&bx, 0, sizeof bx);
    memset(bs, 0, sizeof bs);
    ea_ctx c;
    c.K = 0;
    PyObject *ret = NULL;
    if (get_buf(args[1], &bx, 0, "x", 'd') < 0) goto done;
    if (ea_take(&c, a, n_items(&bx), bs, sb) < 0) goto done;
    if (!PyTuple_Check(objs) || PyTuple_GET_SIZE(objs) != c.K) {
        PyErr_SetString(PyExc_TypeError, "_ck_experts.ea2oks_step: one SVStore per kernel");
        goto done;
    }
    {
        const Py_ssize_t K = c.K;
        int64_t ns0[64], miss0 = 0;
        for (Py_ssize_t i = 0; i < K; i++) {
            ns0[i] = c.ns[i];
            miss0 += c.missing[i] != 0;
            c.touched[i] = 0;
        }
        const int64_t r0 = c.er;
        double ubuf[64 + 2], score = 0.0;
        Py_ssize_t used;
        int status = ea_round(&c, bx.view.buf, xx, y, (int64_t)t, NULL, rng, ubuf, &used,
                              &score);
        int mchanged = 0;
        if (status == EA_END || status == EA_RESTART) {
            ea_put(&c);
            for (Py_ssize_t i = 0; i < K; i++) {
                PyObject *sv = PyTuple_GET_ITEM(objs, i);
                if ((c.ns[i] != ns0[i] && set_int(sv, A_N, c.ns[i]) < 0)
                    || (c.touched[i] && set_float(sv, A_NORM2, c.n2[i]) < 0))
                    goto done;
                miss0 -= c.missing[i] != 0;
            }
            mchanged = miss0 != 0;
            if ((c.er != r0 && (set_int(ex, A_R, c.er) < 0 || set_float(ex, A_RATE, c.rate) < 0))
                || set_float(ex, A_LMIN, c.Lmin) < 0 || set_int(res, A_SEEN, c.seen) < 0)
                goto done;
        }
        ret = Py_BuildValue("(idnin)", status, score, used, mchanged, (Py_ssize_t)c.sel);
    }
done:
    release(&bx, 1);
    release(sb, (int)(5 * c.K));
    release(bs, EA_NB);
    return ret;
}

static PyObject *py_bind_vexp(PyObject *Py_UNUSED(self), PyObject *const *args,
                              Py_ssize_t nargs) {
    if (nargs != 1) return PyErr_Format(PyExc_TypeError, "bind_vexp() takes 1 argument");
    void *fn = PyCapsule_GetPointer(args[0], "kernelstream.learners._ck_multi.vexp");
    if (fn == NULL) return NULL;
    g_vexp = (vexp_t)fn;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    KS_METHOD(bind, "bind(gemv_address, dot_address, ilp64, exp_ufunc): the BLAS routines and "
                    "exp loop numpy uses"),
    KS_METHOD(check, "check(A, x, y, v, w) -> (dot, sum): the bound routines, for the "
                     "comparison with numpy"),
    KS_METHOD(lkm_run, "lkm_run(...): LKMBooks's test-then-train rounds over a block"),
    KS_METHOD(ea2oks_run, "ea2oks_run(...): EA2OKS's / BEA2OKS's test-then-train rounds over a "
                          "block"),
    KS_METHOD(ea2oks_step, "ea2oks_step(kept, x, xx, y, t): one round of EA2OKS / BEA2OKS, "
                           "its uniforms drawn from the learner's bit generator"),
    KS_METHOD(bind_vexp, "bind_vexp(capsule): _ck_multi's exponential"),
    {NULL, NULL, 0, NULL},
};

KS_MODULE(_ck_experts, "Compiled blocks of the expert-advice selection learners", KE_ABI)
