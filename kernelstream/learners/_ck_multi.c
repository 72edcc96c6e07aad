/* Compiled scores of the multi-kernel learners (kernelstream.learners.compiled, "multi-kernel
 * scores"): K kernel expansions whose support sets overlap, scored from ONE squared-distance
 * row to the union of their support vectors. Next to _ckernels.c (single-kernel learners) and
 * _ck_features.c (feature maps).
 *
 * Two layouts of the same idea:
 *
 * - pool_scores: one store per kernel (KernelPool of the kernel-selection learners: EA2OKS,
 *   BEA2OKS, B(AO)2KS, OKS, OKS++, IOKS). Each stored point carries a slot in a shared
 *   distance cache (its stream id's slot, kept by the Python side); a round stamps the slots it
 *   has computed, so a point that several kernels store costs one distance, whichever store
 *   reaches it first, and kernels that are not asked for cost nothing.
 * - multi_scores: one point set with (point, kernel, coefficient) entries (MultiStore of the
 *   OMKC family and BOMKC(SPA)), the points stored as columns: the dots of all points, then
 *   every entry in order.
 *
 * Besides the scores, the per-kernel arithmetic of the AO2MD rounds (Liao & Li, ECML-PKDD
 * 2021: mirror_correct, mirror_scale, ea2oks_step): the same operations in the same order as
 * the Python they replace, so those results are bit-identical to it. Their entry points are in
 * _ck_multi_ao2md.h, their arithmetic (shared with _ck_experts's EA2OKS block) in
 * _ck_mirror.h; this file holds the scores and the module. One translation unit.
 *
 * Numbers follow _ckernels.c: a point's inner product with the example is a sum in index order
 * over the example's non-zeros (as dots() of _ck_common.h, one accumulator per point), no FMA
 * contraction (-ffp-contract=off), and its squared distance is (-2 <x, z> + ||x||^2) + ||z||^2
 * clipped at 0: the value the single-kernel row of the same point gives, bit for bit, in
 * whatever store or block the point sits. A Gaussian value is exp(-gamma d2) by vexp below
 * (within 1 ulp of libm's exp, which _ckernels.c calls: the one place where these scores and
 * the single-kernel row may differ, in the last bit), and exactly 0 where the argument is
 * below -746 (exp underflows to +0 there). Each kernel's score sums coefficient x kernel value
 * in the store's (or the entries') order, so a store's score depends on nothing but the store
 * and the example.
 *
 * floor_scores is the benchmarks' union-row floor: one distance row to n points, then for each
 * of K widths its exponentials and the dot with its coefficients, per example of a block.
 */
#define KS_EXT_NAME "_ck_multi" /* names the module in its argument errors */
#include "_ck_mirror.h"

/* Bumped whenever a signature or a result changes: the wrapper refuses a stale build. */
#define KM_ABI 1

#define EXP_ZERO_BELOW (-746.0)

/* v[i] <- exp(v[i]) for n arguments, and exactly 0 where v[i] < -746 (exp underflows to +0
 * there). fdlibm's e_exp.c (Sun, within 1 ulp), written without branches so that the loop
 * vectorises: k = round(x / ln 2) by the 1.5 * 2^52 shift, r = x - k ln 2 in two parts (the
 * high part exact), exp(r) by fdlibm's rational form with its degree-5 minimax polynomial,
 * then the product with 2^k as 2^(k/2) * 2^(k - k/2): exact for a normal result, one rounding
 * for a subnormal one. libm's scalar exp costs ~10 ns an argument here; a vectorised one
 * ~1 ns, which is the difference between exponentials and distances dominating a round.
 * Every element sees the same IEEE operations at any vector width (no FMA: -ffp-contract=off). */
KS_CLONES
static void vexp(double *v, Py_ssize_t n) {
    const double shift = 0x1.8p52, invln2 = 1.44269504088896338700e+00,
                 ln2hi = 6.93147180369123816490e-01, ln2lo = 1.90821492927058770002e-10,
                 P1 = 1.66666666666666019037e-01, P2 = -2.77777777770155933842e-03,
                 P3 = 6.61375632143793436117e-05, P4 = -1.65339022054652515390e-06,
                 P5 = 4.13813679705723846039e-08;
    const uint64_t shift_bits = 0x4338000000000000ULL;
    const double low = EXP_ZERO_BELOW;
    uint64_t low_bits;
    memcpy(&low_bits, &low, 8);
    for (Py_ssize_t i = 0; i < n; i++) {
        double x = v[i];
        /* below the bound: compute exp(-746) and return 0 (masks, not branches) */
        uint64_t under = (uint64_t)0 - (uint64_t)(x < EXP_ZERO_BELOW), xb;
        memcpy(&xb, &x, 8);
        xb = (xb & ~under) | (low_bits & under);
        double xc;
        memcpy(&xc, &xb, 8);
        double kd = xc * invln2;
        kd += shift;
        uint64_t kb;
        memcpy(&kb, &kd, 8);
        kd -= shift;
        double hi = xc - kd * ln2hi;
        double lo = kd * ln2lo;
        double r = hi - lo;
        double t = r * r;
        double c = r - t * (P1 + t * (P2 + t * (P3 + t * (P4 + t * P5))));
        double y = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi);
        /* k + 2048 >= 0 for every argument here (k >= -1076), so unsigned shifts halve it */
        uint64_t kp = kb - shift_bits + 2048u, k1p = kp >> 1;
        uint64_t b1 = (k1p - 1u) << 52, b2 = (kp - k1p - 1u) << 52;
        double s1, s2;
        memcpy(&s1, &b1, 8);
        memcpy(&s2, &b2, 8);
        y *= s1;
        y *= s2;
        uint64_t yb;
        memcpy(&yb, &y, 8);
        yb &= ~under;
        memcpy(&v[i], &yb, 8);
    }
}

/* The compacted non-zeros of z: positions nz[0..m) and values zv[0..m). */
static Py_ssize_t compact(const double *z, Py_ssize_t d, Py_ssize_t *nz, double *zv) {
    Py_ssize_t m = 0;
    for (Py_ssize_t i = 0; i < d; i++)
        if (z[i] != 0.0) {
            nz[m] = i;
            zv[m++] = z[i];
        }
    return m;
}

/* k_j = <X_j, z> for j < n from the points stored as the columns of XT (d x cap, C order),
 * over z's compacted non-zeros: column nz[t] scaled by zv[t] is added to every k_j, t in
 * order, so each k_j is the same sum in the same order as dots() of a row-major store (bit
 * for bit), while a round reads m contiguous columns instead of a cache line of every row. */
KS_CLONES
static void dots_t(const double *XT, Py_ssize_t cap, Py_ssize_t n, const Py_ssize_t *nz,
                   const double *zv, Py_ssize_t m, double *k) {
    for (Py_ssize_t j = 0; j < n; j++) k[j] = 0.0;
    for (Py_ssize_t t = 0; t < m; t++) {
        const double *col = XT + nz[t] * cap;
        double zt = zv[t];
        for (Py_ssize_t j = 0; j < n; j++) k[j] += col[j] * zt;
    }
}

/* ---- pool_scores ---------------------------------------------------------------------- */

KS_ENTRY(pool_scores, 11, 12) {
    /* pool_scores(stores, ns, which, z, zz, cache, stamp, round, out, work, ebuf)
     * stores: tuple of K tuples (X, sqn, a, slot, neg_gamma), ns: int64 (K) point counts,
     * which: int64 kernel indices to score (out[r] = f_which[r]) or None (all, out[i] = f_i),
     * cache: float64 distance per slot, stamp: int64 per slot (slot s holds this round's
     * distance iff stamp[s] == round), work: int64 scratch of 2 d entries, ebuf: float64
     * scratch as long as the largest store. */
    PyObject *stores = args[0];
    if (!PyTuple_Check(stores))
        return PyErr_Format(PyExc_TypeError, "_ck_multi.pool_scores: stores must be a tuple");
    Py_ssize_t K = PyTuple_GET_SIZE(stores);
    Buf *sb = b + 8; /* one store's buffers at a time */
    int with_which = args[2] != Py_None;
    double zz = PyFloat_AsDouble(args[4]);
    int64_t round = PyLong_AsLongLong(args[7]);
    if (PyErr_Occurred()) return NULL;
    if (get_bufs(args, b,
                 "q1 ns, q2? which, d3 z, D5 cache, Q6 stamp, D8 out, Q9 work, D10 ebuf") < 0)
        return NULL;
    {
        double *eb = b[7].view.buf;
        Py_ssize_t ebn = n_items(&b[7]);
        const int64_t *ns = b[0].view.buf, *which = with_which ? b[1].view.buf : NULL;
        Py_ssize_t R = with_which ? n_items(&b[1]) : K;
        Py_ssize_t d = n_items(&b[2]), cap = n_items(&b[3]);
        const double *z = b[2].view.buf;
        double *cache = b[3].view.buf, *out = b[5].view.buf;
        int64_t *stamp = b[4].view.buf;
        if (n_items(&b[0]) < K || n_items(&b[4]) < cap || n_items(&b[5]) < R
            || n_items(&b[6]) < 2 * d) {
            PyErr_SetString(PyExc_ValueError, "_ck_multi.pool_scores: arrays have wrong sizes");
            return NULL;
        }
        Py_ssize_t *nz = b[6].view.buf;
        double *zv = (double *)(nz + d);
        Py_ssize_t m = compact(z, d, nz, zv);
        for (Py_ssize_t r = 0; r < R; r++) {
            Py_ssize_t i = with_which ? (Py_ssize_t)which[r] : r;
            if (i < 0 || i >= K) {
                PyErr_SetString(PyExc_ValueError, "_ck_multi.pool_scores: kernel out of range");
                return NULL;
            }
            Py_ssize_t n = (Py_ssize_t)ns[i];
            if (n == 0) {
                out[r] = 0.0;
                continue;
            }
            PyObject *st = PyTuple_GET_ITEM(stores, i);
            if (!PyTuple_Check(st) || PyTuple_GET_SIZE(st) != 5) {
                PyErr_SetString(PyExc_TypeError,
                                "_ck_multi.pool_scores: a store is (X, sqn, a, slot, neg_gamma)");
                return NULL;
            }
            double ng = PyFloat_AsDouble(PyTuple_GET_ITEM(st, 4));
            if (PyErr_Occurred()) return NULL;
            if (get_buf(PyTuple_GET_ITEM(st, 0), &sb[0], 0, "X", 'd') < 0
                || get_buf(PyTuple_GET_ITEM(st, 1), &sb[1], 0, "sqn", 'd') < 0
                || get_buf(PyTuple_GET_ITEM(st, 2), &sb[2], 0, "a", 'd') < 0
                || get_buf(PyTuple_GET_ITEM(st, 3), &sb[3], 0, "slot", 'q') < 0)
                return NULL;
            if (sb[0].view.ndim != 2 || sb[0].view.shape[1] != d || sb[0].view.shape[0] < n
                || ebn < n || n_items(&sb[1]) < n || n_items(&sb[2]) < n || n_items(&sb[3]) < n) {
                PyErr_Format(PyExc_ValueError, "_ck_multi.pool_scores: store %zd is shorter than "
                             "its count %zd or has the wrong width", i, n);
                return NULL;
            }
            const double *X = sb[0].view.buf, *sqn = sb[1].view.buf, *a = sb[2].view.buf;
            const int64_t *slot = sb[3].view.buf;
            for (Py_ssize_t j = 0; j < n; j++) {
                int64_t s = slot[j];
                if (s < 0 || s >= cap) {
                    PyErr_SetString(PyExc_ValueError, "_ck_multi.pool_scores: slot out of range");
                    return NULL;
                }
                double v;
                if (stamp[s] == round) {
                    v = cache[s];
                } else {
                    v = dist1(X + j * d, sqn[j], nz, zv, m, zz);
                    cache[s] = v;
                    stamp[s] = round;
                }
                eb[j] = v * ng;
            }
            vexp(eb, n);
            double f = 0.0;
            for (Py_ssize_t j = 0; j < n; j++) f += a[j] * eb[j];
            out[r] = f;
            release(sb, 4);
        }
    }
    Py_RETURN_NONE;
}

/* ---- multi_scores --------------------------------------------------------------------- */

KS_ENTRY(multi_scores, 19, 15) {
    /* multi_scores(XT, sqn, n, z, zz, g_pt, g_k, g_a, g_ng, ng, p_pt, p_k, p_a, p_deg, np_,
     *              out, dots, work, ebuf)
     * XT: the points as columns (d x cap, C order).
     * out[k] = sum over the Gaussian entries e of kernel k (in order) of g_a[e] *
     * exp(g_ng[e] * d2[g_pt[e]]), plus over the polynomial entries of p_a[e] *
     * dots[p_pt[e]]^p_deg[e]; out is zeroed first. Polynomial and Gaussian kernels are
     * distinct (each kernel's terms are summed in entry order). dots: float64 scratch (>= n),
     * work: int64 scratch (>= 2 d), ebuf: float64 scratch (>= 2 ng: arguments, then the
     * entries' indices as int64). */
    Py_ssize_t n = PyLong_AsSsize_t(args[2]), ng = PyLong_AsSsize_t(args[9]),
               np_ = PyLong_AsSsize_t(args[14]);
    double zz = PyFloat_AsDouble(args[4]);
    if (PyErr_Occurred()) return NULL;
    if (get_bufs(args, b,
                 "d0 XT, d1 sqn, d3 z, q5 g_pt, q6 g_k, d7 g_a, d8 g_ng, q10 p_pt, q11 p_k, "
                 "d12 p_a, d13 p_deg, D15 out, D16 dots, Q17 work, D18 ebuf") < 0)
        return NULL;
    {
        Py_ssize_t d = n_items(&b[2]), K = n_items(&b[11]);
        if (b[0].view.ndim != 2 || b[0].view.shape[0] != d || b[0].view.shape[1] < n || n < 0
            || n_items(&b[1]) < n || ng < 0 || np_ < 0 || n_items(&b[3]) < ng
            || n_items(&b[4]) < ng || n_items(&b[5]) < ng || n_items(&b[6]) < ng
            || n_items(&b[7]) < np_ || n_items(&b[8]) < np_ || n_items(&b[9]) < np_
            || n_items(&b[10]) < np_ || n_items(&b[12]) < n || n_items(&b[13]) < 2 * d
            || n_items(&b[14]) < 2 * ng) {
            PyErr_SetString(PyExc_ValueError, "_ck_multi.multi_scores: arrays have wrong sizes");
            return NULL;
        }
        const double *XT = b[0].view.buf, *sqn = b[1].view.buf, *z = b[2].view.buf;
        Py_ssize_t cap = b[0].view.shape[1];
        const int64_t *g_pt = b[3].view.buf, *g_k = b[4].view.buf, *p_pt = b[7].view.buf,
                      *p_k = b[8].view.buf;
        const double *g_a = b[5].view.buf, *g_ng = b[6].view.buf, *p_a = b[9].view.buf,
                     *p_deg = b[10].view.buf;
        double *out = b[11].view.buf, *dt = b[12].view.buf, *eb = b[14].view.buf;
        Py_ssize_t *ei = (Py_ssize_t *)(eb + ng), kept = 0;
        Py_ssize_t *nz = b[13].view.buf;
        int bad = 0;
        for (Py_ssize_t k = 0; k < K; k++) out[k] = 0.0;
        Py_BEGIN_ALLOW_THREADS
        double *zv = (double *)(nz + d);
        Py_ssize_t m = compact(z, d, nz, zv);
        dots_t(XT, cap, n, nz, zv, m, dt);
        /* polynomial entries first: they read the dots, which the distances then replace */
        for (Py_ssize_t e = 0; e < np_; e++) {
            int64_t j = p_pt[e], k = p_k[e];
            if (j < 0 || j >= n || k < 0 || k >= K) { bad = 1; break; }
            double v = dt[j], p = p_deg[e];
            /* v, v * v, (v * v) * v (libm's pow costs ~20 ns a call), else pow */
            v = p == 1.0 ? v : p == 2.0 ? v * v : p == 3.0 ? v * v * v : pow(v, p);
            out[k] += v * p_a[e];
        }
        if (!bad && ng) {
            for (Py_ssize_t j = 0; j < n; j++) {
                double v = dt[j] * -2.0;
                v += sqn[j];
                v += zz;
                dt[j] = v > 0.0 ? v : 0.0;
            }
            /* the entries whose exp does not underflow, in order (written always, kept by
             * advancing the count: no branch on a coin-flip test). A left-out entry would add
             * a * (+0) = +-0, which changes no sum. */
            for (Py_ssize_t e = 0; e < ng; e++) {
                uint64_t j = (uint64_t)g_pt[e];
                if (j >= (uint64_t)n || (uint64_t)g_k[e] >= (uint64_t)K) { bad = 1; break; }
                double v = dt[j] * g_ng[e];
                eb[kept] = v;
                ei[kept] = e;
                kept += !(v < EXP_ZERO_BELOW);
            }
        }
        if (!bad && kept) {
            vexp(eb, kept);
            for (Py_ssize_t r = 0; r < kept; r++) {
                Py_ssize_t e = ei[r];
                out[g_k[e]] += eb[r] * g_a[e];
            }
        }
        Py_END_ALLOW_THREADS
        if (bad) {
            PyErr_SetString(PyExc_ValueError, "_ck_multi.multi_scores: entry out of range");
            return NULL;
        }
    }
    Py_RETURN_NONE;
}

/* ---- floor_scores (benchmarks) -------------------------------------------------------- */

KS_ENTRY(floor_scores, 9, 8) {
    /* floor_scores(XT, sqn, n, neg_gammas (K), A (K x n), Z (rows x d), zz, out (rows x K),
     *              work): for every row z of Z, one distance row to the n points stored as
     *              the columns of XT (d x n, as MultiStore keeps them), then for each width
     *              k: out[r, k] = sum_j A[k, j] exp(neg_gammas[k] d2_j). work: int64 scratch of
     *              >= 2 n + 2 d entries (non-zeros, then the row and the exponentials). */
    Py_ssize_t n = PyLong_AsSsize_t(args[2]);
    if (PyErr_Occurred()) return NULL;
    if (get_bufs(args, b, "d0 XT, d1 sqn, d3 neg_gammas, d4 A, d5 Z, d6 zz, D7 out, Q8 work") < 0)
        return NULL;
    {
        Py_ssize_t K = n_items(&b[2]);
        Py_ssize_t d = b[0].view.ndim == 2 ? b[0].view.shape[0] : -1;
        Py_ssize_t rows = b[4].view.ndim == 2 ? b[4].view.shape[0] : -1;
        if (d < 0 || rows < 0 || b[4].view.shape[1] != d || b[0].view.shape[1] != n || n < 0
            || n_items(&b[1]) < n || n_items(&b[3]) < K * n || n_items(&b[5]) < rows
            || n_items(&b[6]) < rows * K || n_items(&b[7]) < 2 * n + 2 * d) {
            PyErr_SetString(PyExc_ValueError, "_ck_multi.floor_scores: arrays have wrong sizes");
            return NULL;
        }
        const double *XT = b[0].view.buf, *sqn = b[1].view.buf, *g = b[2].view.buf,
                     *A = b[3].view.buf, *Z = b[4].view.buf, *zz = b[5].view.buf;
        double *out = b[6].view.buf;
        Py_ssize_t *nz = b[7].view.buf;
        double *zv = (double *)(nz + d), *d2 = zv + d, *eb = d2 + n;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t r = 0; r < rows; r++) {
            const double *z = Z + r * d;
            Py_ssize_t m = compact(z, d, nz, zv);
            dots_t(XT, n, n, nz, zv, m, d2);
            for (Py_ssize_t j = 0; j < n; j++) {
                double v = d2[j] * -2.0;
                v += sqn[j];
                v += zz[r];
                d2[j] = v > 0.0 ? v : 0.0;
            }
            for (Py_ssize_t k = 0; k < K; k++) {
                const double *a = A + k * n;
                double f = 0.0, gk = g[k];
                for (Py_ssize_t j = 0; j < n; j++) eb[j] = d2[j] * gk;
                vexp(eb, n);
                for (Py_ssize_t j = 0; j < n; j++) f += a[j] * eb[j];
                out[r * K + k] = f;
            }
        }
        Py_END_ALLOW_THREADS
    }
    Py_RETURN_NONE;
}

#include "_ck_multi_ao2md.h"

KS_ENTRY(exp, 1, 1) {
    /* exp(v): v <- exp(v) in place, 0 below -746 (the exponential of the scores above) */
    if (get_bufs(args, b, "D0 v") < 0) return NULL;
    vexp(b[0].view.buf, n_items(&b[0]));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    KS_METHOD(mirror_scale,
              "mirror_scale(n2, ip, m2, lam, v, U2, radius, out): AO2MD projection factors"),
    KS_METHOD(ea2oks_step, "ea2oks_step(f, y, m2, mux, lam, norm, beta, u, c, a, b): EA2OKS's "
                           "per-kernel constants"),
    KS_METHOD(mirror_correct, "mirror_correct(stores, pos, v, kv, KVy, yv, a, b, fx, n2, m2, ip, "
                              "mux, H, U2, radius, out): the AO2MD correction (Liao & Li, "
                              "ECML-PKDD 2021) of every kernel"),
    KS_METHOD(exp, "exp(v): v <- exp(v) in place (exactly 0 below -746), as the scores compute "
                   "it"),
    KS_METHOD(pool_scores, "pool_scores(stores, ns, which, z, zz, cache, stamp, round, out, work, "
                           "ebuf): one score per store from one shared distance row"),
    KS_METHOD(multi_scores, "multi_scores(X, sqn, n, z, zz, g_pt, g_k, g_a, g_ng, ng, p_pt, p_k, "
                            "p_a, p_deg, np_, out, dots, work, ebuf): the scores of a "
                            "MultiStore's kernels"),
    KS_METHOD(floor_scores,
              "floor_scores(X, sqn, n, neg_gammas, A, Z, zz, out, work): the union-row floor"),
    {NULL, NULL, 0, NULL},
};

KS_MODULE_DEF(_ck_multi,
              "Compiled scores of kernelstream's multi-kernel learners (one shared distance row).");

PyMODINIT_FUNC PyInit__ck_multi(void) {
    PyObject *mod = ks_module(&module, KM_ABI);
    if (mod == NULL) return NULL;
    /* vexp for _ck_experts.c, whose compiled EA2OKS rounds score the stores as pool_scores */
    PyObject *cap = PyCapsule_New((void *)vexp, "kernelstream.learners._ck_multi.vexp", NULL);
    if (cap == NULL || PyModule_AddObject(mod, "vexp_capsule", cap) < 0) {
        Py_XDECREF(cap);
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
