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
#include "_ck_mirror.h"

/* Bumped whenever a signature or a result changes: the wrapper refuses a stale build. */
#define KE_ABI 1

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

static PyObject *py_ea2oks_run(PyObject *Py_UNUSED(self), PyObject *const *args,
                               Py_ssize_t nargs) {
    /* ea2oks_run(X, zz, yv, i, end, t, out, n_sv, stores, ns, resX, sqnV, resy, resids, KVy, m2,
     *            H, n2, pos, missing, L, p, fstate, istate, neg, u, cache, ctag, cstamp,
     *            scratch, work, touched) -> (j, status, used)
     * EA2OKS._score and _update (ea2oks.py; OptimisticMirror, KernelPool, ExpWeights) over rows
     * i..end-1, row r being round t + (r - i) (0-based, the learner's t), with a full reservoir
     * (M >= 2 points). stores: K tuples (X, sqn, a, ids, s) of the SVStores, ns their counts
     * (updated); fstate = [lam, norm, beta, U2, radius, rate, Lmin, thr] (rate, Lmin updated),
     * istate = [r, seen, B, selected] (B: BEA2OKS's restart size, -1 for EA2OKS; r, seen,
     * selected updated); u: the uniforms of the next draws, in the Generator's order; cache,
     * ctag, cstamp (a power of 2 long): distances by stream id within a round; touched[i] = 1
     * for the stores whose norm2 must be set to n2[i]. Stops before a round that the Python
     * code must run (its state untouched: EA_PYTHON), i.e. its offer to the reservoir is
     * accepted, before a round when a store has no room for 1 + M more points (EA_GROW) or
     * fewer than K + 2 uniforms are left (EA_NEED_U), and after a round that leaves a store
     * with B points or more (EA_RESTART). */
    if (nargs != 32) return PyErr_Format(PyExc_TypeError, "ea2oks_run() takes 32 arguments");
    if (g_exp == NULL || g_vexp == NULL)
        return PyErr_Format(PyExc_RuntimeError, "_ck_experts: not bound");
    Py_ssize_t i0 = PyLong_AsSsize_t(args[3]), end = PyLong_AsSsize_t(args[4]);
    long long t0 = PyLong_AsLongLong(args[5]);
    if (PyErr_Occurred()) return NULL;
    PyObject *stores = args[8];
    if (!PyTuple_Check(stores))
        return PyErr_Format(PyExc_TypeError, "_ck_experts.ea2oks_run: stores must be a tuple");
    Py_ssize_t K = PyTuple_GET_SIZE(stores);
    if (K < 1 || K > 64)
        return PyErr_Format(PyExc_ValueError, "_ck_experts.ea2oks_run: 1 <= K <= 64");
    int has_nsv = args[7] != Py_None;
    enum { NB = 26 };
    Buf b[NB];
    memset(b, 0, sizeof b);
    Buf sb[64 * 5];
    memset(sb, 0, sizeof sb);
    static const int idx[NB] = {0, 1, 2, 6, 7, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20,
                                21, 22, 23, 24, 25, 26, 27, 28, 29};
    static const char *names[NB] = {"X", "zz", "yv", "out", "n_sv", "ns", "resX", "sqnV", "resy",
                                    "resids", "KVy", "m2", "H", "n2", "pos", "missing", "L",
                                    "p", "fstate", "istate", "neg", "u", "cache", "ctag",
                                    "cstamp", "scratch"};
    static const char fmt[NB] = {'d', 'd', 'd', 'd', 'q', 'q', 'd', 'd', 'd', 'q', 'd', 'd', 'd',
                                 'd', 'q', 'q', 'd', 'd', 'd', 'q', 'd', 'd', 'd', 'q', 'q', 'd'};
    static const int wr[NB] = {0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0,
                               0, 1, 1, 1, 1};
    Buf bw, bt;
    memset(&bw, 0, sizeof bw);
    memset(&bt, 0, sizeof bt);
    for (int k = 0; k < NB; k++) {
        if (k == 4 && !has_nsv) continue;
        if (get_buf(args[idx[k]], &b[k], wr[k], names[k], fmt[k]) < 0) goto fail;
    }
    if (get_buf(args[30], &bw, 1, "work", 'q') < 0 || get_buf(args[31], &bt, 1, "touched", 'q') < 0)
        goto fail;
    {
        Py_ssize_t rows = n_items(&b[1]);
        Py_ssize_t d = rows ? n_items(&b[0]) / rows : 0;
        Py_ssize_t M = n_items(&b[7]), C = n_items(&b[22]);
        ea_store st[64];
        Py_ssize_t maxcap = 0;
        for (Py_ssize_t i = 0; i < K; i++) {
            PyObject *tup = PyTuple_GET_ITEM(stores, i);
            if (!PyTuple_Check(tup) || PyTuple_GET_SIZE(tup) != 5) {
                PyErr_SetString(PyExc_TypeError,
                                "_ck_experts.ea2oks_run: a store is (X, sqn, a, ids, s)");
                goto fail;
            }
            Buf *q = sb + 5 * i;
            if (get_buf(PyTuple_GET_ITEM(tup, 0), &q[0], 1, "store.X", 'd') < 0
                || get_buf(PyTuple_GET_ITEM(tup, 1), &q[1], 1, "store.sqn", 'd') < 0
                || get_buf(PyTuple_GET_ITEM(tup, 2), &q[2], 1, "store.a", 'd') < 0
                || get_buf(PyTuple_GET_ITEM(tup, 3), &q[3], 1, "store.ids", 'q') < 0
                || get_buf(PyTuple_GET_ITEM(tup, 4), &q[4], 1, "store.s", 'q') < 0)
                goto fail;
            Py_ssize_t cap = n_items(&q[2]);
            if (n_items(&q[0]) != cap * d || n_items(&q[1]) != cap || n_items(&q[3]) != cap
                || n_items(&q[4]) != cap) {
                PyErr_SetString(PyExc_ValueError, "_ck_experts.ea2oks_run: a store's arrays "
                                "have wrong sizes");
                goto fail;
            }
            st[i] = (ea_store){q[0].view.buf, q[1].view.buf, q[2].view.buf, q[3].view.buf,
                               q[4].view.buf, cap};
            if (cap > maxcap) maxcap = cap;
        }
        int64_t *ns = b[5].view.buf, *istate = b[19].view.buf;
        if (n_items(&b[3]) < rows || (has_nsv && n_items(&b[4]) < rows) || n_items(&b[5]) != K
            || n_items(&b[6]) != M * d || n_items(&b[8]) != M || n_items(&b[9]) != M
            || n_items(&b[10]) != K * M || n_items(&b[11]) != K || n_items(&b[12]) != K * M
            || n_items(&b[13]) != K || n_items(&b[14]) != K * M || n_items(&b[15]) != K
            || n_items(&b[16]) != K || n_items(&b[17]) != K || n_items(&b[18]) != 8
            || n_items(&b[19]) != 4 || n_items(&b[20]) != K || C < 1 || (C & (C - 1))
            || n_items(&b[23]) != C || n_items(&b[24]) != C
            || n_items(&b[25]) < maxcap + K * M + M + 12 * K + d || n_items(&bw) < d
            || n_items(&bt) != K || M < 2 || end > rows || i0 < 0) {
            PyErr_SetString(PyExc_ValueError, "_ck_experts.ea2oks_run: arrays have wrong sizes");
            goto fail;
        }
        for (Py_ssize_t i = 0; i < K; i++)
            if (ns[i] < 0 || ns[i] > st[i].cap) {
                PyErr_SetString(PyExc_ValueError, "_ck_experts.ea2oks_run: a count exceeds its store");
                goto fail;
            }
        const double *X = b[0].view.buf, *zz = b[1].view.buf, *yv = b[2].view.buf;
        double *out = b[3].view.buf;
        int64_t *nsv = has_nsv ? b[4].view.buf : NULL;
        const double *resX = b[6].view.buf, *sqnV = b[7].view.buf, *resy = b[8].view.buf;
        const int64_t *resids = b[9].view.buf;
        const double *KVy = b[10].view.buf, *m2 = b[11].view.buf, *neg = b[20].view.buf,
                     *u = b[21].view.buf;
        double *H = b[12].view.buf, *n2 = b[13].view.buf, *L = b[16].view.buf, *p = b[17].view.buf;
        int64_t *pos = b[14].view.buf, *missing = b[15].view.buf;
        double *fs = b[18].view.buf, *cd = b[22].view.buf;
        int64_t *ctag = b[23].view.buf, *cstamp = b[24].view.buf, *touched = bt.view.buf;
        const double lam = fs[0], norm = fs[1], beta = fs[2], U2 = fs[3], radius = fs[4],
                     thr = fs[7];
        double rate = fs[5], Lmin = fs[6];
        int64_t er = istate[0], seen = istate[1], Bq = istate[2], sel = istate[3];
        Py_ssize_t *nz = bw.view.buf;
        double *eb = b[25].view.buf, *kv = eb + maxcap, *d2v = kv + K * M, *mux = d2v + M,
               *ip = mux + K, *sc = ip + K, *fx = sc + K, *f = fx + K, *c = f + K, *A = c + K,
               *Bc = A + K, *e = Bc + K, *cum = e + K, *zv = cum + K;
        Py_ssize_t nu_ = n_items(&b[21]), used = 0, j = i0;
        const Py_ssize_t mask = C - 1;
        const double logK = log((double)K);
        int status = EA_END;
        for (; j < end; j++) {
            if (used + K + 2 > nu_) { status = EA_NEED_U; break; }
            int room = 1;
            for (Py_ssize_t i = 0; i < K; i++)
                if (ns[i] + 1 + M > st[i].cap) room = 0;
            if (!room) { status = EA_GROW; break; }
            const double *x = X + j * d;
            const double xx = zz[j], y = yv[j];
            const int64_t t = t0 + (j - i0);
            /* _score: I ~ p (categorical: one uniform, inverse CDF in Python floats) */
            double tot = 0.0;
            for (Py_ssize_t i = 0; i < K; i++) {
                tot += p[i];
                cum[i] = tot;
            }
            double uc = u[used] * tot;
            Py_ssize_t I = 0;
            while (I < K && !(uc < cum[I])) I++; /* bisect_right */
            if (I > K - 1) I = K - 1;
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
            np_gemv(K, M, H, resy, ip);
            for (Py_ssize_t i = 0; i < K; i++) {
                mux[i] /= (double)M;
                ip[i] /= (double)M;
                double nbar2 = n2[i] + lam * (2.0 * ip[i] + lam * m2[i]);
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
            /* the reservoir's draw at the end of the round: an accepted offer is Python's */
            if (u[used + 1 + cnt] < (double)M / (double)(seen + 1)) { status = EA_PYTHON; break; }
            /* the round is ours: commit */
            used++;
            out[j] = f[I];
            sel = I;
            /* _update: ea2oks_step's constants, one uniform per kernel with margin < 1 (at
             * most K: enough are left, checked above) */
            used += ea2oks_consts(K, y, f, m2, mux, lam, norm, beta, u + used, nu_ - used, c, A,
                                  Bc);
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
            for (Py_ssize_t i = 0; i < K; i++) {
                if (!missing[i] || Bc[i] == 0.0) continue;
                ea_store *S = &st[i];
                for (Py_ssize_t k = 0; k < M; k++) {
                    if (pos[i * M + k] >= 0) continue;
                    Py_ssize_t n = (Py_ssize_t)ns[i];
                    memcpy(S->X + n * d, resX + k * d, (size_t)d * sizeof(double));
                    S->sqn[n] = sqnV[k];
                    S->a[n] = 0.0;
                    S->ids[n] = resids[k];
                    S->s[n] = resids[k];
                    pos[i * M + k] = n;
                    ns[i] = n + 1;
                }
                missing[i] = 0;
            }
            mirror_h(K, M, M, A, Bc, kv, KVy, H);
            for (Py_ssize_t i = 0; i < K; i++) {
                if (A[i] == 0.0 && Bc[i] == 0.0) continue;
                double fac;
                n2[i] = mirror_correct1(st[i].a, (Py_ssize_t)ns[i], pos + i * M, M, resy, A[i],
                                        Bc[i], n2[i], m2[i], ip[i], fx[i], mux[i], U2, radius,
                                        H + i * M, &fac);
                touched[i] = 1;
            }
            /* ExpWeights.update and check_epoch */
            double lmin = 0.0;
            for (Py_ssize_t i = 0; i < K; i++) {
                L[i] += c[i];
                if (i == 0 || L[i] < lmin) lmin = L[i];
            }
            for (Py_ssize_t i = 0; i < K; i++) e[i] = -rate * (L[i] - lmin);
            np_exp(e, K);
            double zs = np_small_sum(e, K);
            for (Py_ssize_t i = 0; i < K; i++) p[i] = e[i] / zs;
            Lmin = lmin;
            if (Lmin + thr > pow(4.0, (double)er)) {
                er++;
                double G = pow(4.0, (double)er);
                rate = K > 1 ? log1p(sqrt(2.0 * logK / G)) : 0.0;
                Lmin = pow(4.0, (double)er);
                for (Py_ssize_t i = 0; i < K; i++) L[i] = 0.0;
            }
            /* end_round: the offer's draw (rejected, as checked above) */
            seen++;
            used++;
            if (nsv) {
                int64_t tot_n = 0;
                for (Py_ssize_t i = 0; i < K; i++) tot_n += ns[i];
                nsv[j] = tot_n;
            }
            if (Bq >= 0) {
                int full = 0;
                for (Py_ssize_t i = 0; i < K; i++)
                    if (ns[i] >= Bq) full = 1;
                if (full) { j++; status = EA_RESTART; break; }
            }
        }
        fs[5] = rate;
        fs[6] = Lmin;
        istate[0] = er;
        istate[1] = seen;
        istate[3] = sel;
        release(&bw, 1);
        release(&bt, 1);
        release(sb, (int)(5 * K));
        release(b, NB);
        return Py_BuildValue("(nin)", j, status, used);
    }
fail:
    release(&bw, 1);
    release(&bt, 1);
    release(sb, 64 * 5);
    release(b, NB);
    return NULL;
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
    KS_METHOD(bind_vexp, "bind_vexp(capsule): _ck_multi's exponential"),
    {NULL, NULL, 0, NULL},
};

KS_MODULE(_ck_experts, "Compiled blocks of the expert-advice selection learners", KE_ABI)
