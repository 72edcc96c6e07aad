/* Compiled blocks of the expert-advice kernel-selection learners (kernelstream.learners.compiled,
 * "expert blocks"): whole test-then-train blocks of LKMBooks (Li & Liao, Machine Learning 2022)
 * without returning to Python, except for the rare rounds its Python code must see.
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
 * leaves the learner on numpy if any bit differs. Everything else is scalar IEEE arithmetic in
 * the order of the Python code (no FMA contraction: -ffp-contract=off).
 */
#include "_ck_common.h"

/* Bumped whenever a signature or a result changes: the wrapper refuses a stale build. */
#define KE_ABI 1
#ifndef KS_SOURCE_HASH
#define KS_SOURCE_HASH "" /* setup.py defines the sources' hash */
#endif

/* ---- the routines numpy calls ----------------------------------------------------------- */
enum { ROW_MAJOR = 101, NO_TRANS = 111 };
typedef void (*gemv64_t)(int, int, int64_t, int64_t, double, const double *, int64_t,
                         const double *, int64_t, double, double *, int64_t);
typedef void (*gemv32_t)(int, int, int, int, double, const double *, int, const double *, int,
                         double, double *, int);
typedef double (*dot64_t)(int64_t, const double *, int64_t, const double *, int64_t);
typedef double (*dot32_t)(int, const double *, int, const double *, int);
typedef void (*uloop_t)(char **, const Py_ssize_t *, const Py_ssize_t *, void *);

/* numpy's PyUFuncObject up to `types` (public and unchanged since numpy 1.0) */
typedef struct {
    PyObject_HEAD
    int nin, nout, nargs;
    int identity;
    uloop_t *functions;
    void *const *data;
    int ntypes;
    int reserved1;
    const char *name;
    const char *types;
} ufunc_head;

static void *g_gemv = NULL, *g_dot = NULL;
static int g_ilp64 = 1;
static uloop_t g_exp = NULL;
static void *g_exp_data = NULL;
static PyObject *g_exp_ufunc = NULL; /* keeps the ufunc (and its loop) alive */

#define NPY_DOUBLE_NUM 12

/* y = A x for a C-ordered m x n matrix A: numpy's A.dot(x) (RowMajor, NoTrans, lda = n) */
static inline void np_gemv(Py_ssize_t m, Py_ssize_t n, const double *A, const double *x,
                           double *y) {
    if (g_ilp64)
        ((gemv64_t)g_gemv)(ROW_MAJOR, NO_TRANS, m, n, 1.0, A, n, x, 1, 0.0, y, 1);
    else
        ((gemv32_t)g_gemv)(ROW_MAJOR, NO_TRANS, (int)m, (int)n, 1.0, A, (int)n, x, 1, 0.0, y, 1);
}

/* numpy's a.dot(b) of two 1-D float64 vectors: 0.0 + ddot (DOUBLE_dot) */
static inline double np_dot(Py_ssize_t n, const double *a, const double *b) {
    double s = 0.0;
    if (g_ilp64)
        s += ((dot64_t)g_dot)(n, a, 1, b, 1);
    else
        s += ((dot32_t)g_dot)((int)n, a, 1, b, 1);
    return s;
}

/* v <- numpy.exp(v) in place, n contiguous values */
static inline void np_exp(double *v, Py_ssize_t n) {
    char *args[2] = {(char *)v, (char *)v};
    Py_ssize_t dims[1] = {n}, steps[2] = {8, 8};
    g_exp(args, dims, steps, g_exp_data);
}

/* numpy's a.sum() of a contiguous float64 vector of 1 <= n <= 128 values (one block of its
 * pairwise sum): in order below 8 values, else 8 running sums combined as a tree, then the
 * tail in order */
static inline double np_small_sum(const double *a, Py_ssize_t n) {
    if (n < 8) {
        double r = a[0];
        for (Py_ssize_t i = 1; i < n; i++) r += a[i];
        return r;
    }
    double r[8];
    Py_ssize_t i;
    for (int k = 0; k < 8; k++) r[k] = a[k];
    for (i = 8; i < n - (n % 8); i += 8)
        for (int k = 0; k < 8; k++) r[k] += a[i + k];
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; i++) res += a[i];
    return res;
}

static PyObject *py_bind(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    /* bind(gemv_address, dot_address, ilp64, exp_ufunc): the routines numpy calls */
    if (nargs != 4) return PyErr_Format(PyExc_TypeError, "bind() takes 4 arguments");
    void *gemv = PyLong_AsVoidPtr(args[0]), *dot = PyLong_AsVoidPtr(args[1]);
    int ilp64 = PyObject_IsTrue(args[2]);
    if (PyErr_Occurred()) return NULL;
    ufunc_head *u = (ufunc_head *)args[3];
    if (gemv == NULL || dot == NULL || u->nin != 1 || u->nout != 1 || u->nargs != 2)
        return PyErr_Format(PyExc_ValueError, "_ck_experts.bind: not BLAS routines and a ufunc");
    uloop_t loop = NULL;
    void *data = NULL;
    for (int i = 0; i < u->ntypes; i++)
        if (u->types[2 * i] == NPY_DOUBLE_NUM && u->types[2 * i + 1] == NPY_DOUBLE_NUM) {
            loop = u->functions[i];
            data = u->data ? u->data[i] : NULL;
            break;
        }
    if (loop == NULL) return PyErr_Format(PyExc_ValueError, "_ck_experts.bind: no float64 loop");
    Py_INCREF(args[3]);
    Py_XDECREF(g_exp_ufunc);
    g_exp_ufunc = args[3];
    g_gemv = gemv;
    g_dot = dot;
    g_ilp64 = ilp64;
    g_exp = loop;
    g_exp_data = data;
    Py_RETURN_NONE;
}

static PyObject *py_check(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    /* check(A, x, y, v, w) -> (dot, sum): y = A.dot(x) (A: len(y) x len(x)), v <- exp(v),
     * dot = w.dot(w), sum = w.sum(), by the bound routines (compiled.py compares them with
     * numpy) */
    if (nargs != 5) return PyErr_Format(PyExc_TypeError, "check() takes 5 arguments");
    if (g_exp == NULL) return PyErr_Format(PyExc_RuntimeError, "_ck_experts: not bound");
    Buf b[5];
    memset(b, 0, sizeof b);
    if (get_buf(args[0], &b[0], 0, "A", 'd') < 0 || get_buf(args[1], &b[1], 0, "x", 'd') < 0
        || get_buf(args[2], &b[2], 1, "y", 'd') < 0 || get_buf(args[3], &b[3], 1, "v", 'd') < 0
        || get_buf(args[4], &b[4], 0, "w", 'd') < 0) {
        release(b, 5);
        return NULL;
    }
    Py_ssize_t m = n_items(&b[2]), n = n_items(&b[1]), nw = n_items(&b[4]);
    if (n_items(&b[0]) != m * n || nw < 1 || nw > 128) {
        release(b, 5);
        return PyErr_Format(PyExc_ValueError, "_ck_experts.check: wrong sizes");
    }
    np_gemv(m, n, b[0].view.buf, b[1].view.buf, b[2].view.buf);
    np_exp(b[3].view.buf, n_items(&b[3]));
    double dt = np_dot(nw, b[4].view.buf, b[4].view.buf);
    double sm = np_small_sum(b[4].view.buf, nw);
    release(b, 5);
    return Py_BuildValue("(dd)", dt, sm);
}

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
    Buf b[15];
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
        || get_buf(args[20], &b[14], 1, "fv", 'd') < 0)
        goto fail;
    {
        Buf be;
        memset(&be, 0, sizeof be);
        if (get_buf(args[21], &be, 1, "e", 'd') < 0) goto fail;
        Py_ssize_t rows = n_items(&b[1]), K = n_items(&b[8]), Bsz = n_items(&b[6]);
        Py_ssize_t d = rows ? n_items(&b[0]) / rows : 0;
        const double *cs = b[10].view.buf;
        Py_ssize_t B = (Py_ssize_t)cs[0];
        if (n_items(&b[10]) != 5 || B > Bsz || n_items(&b[5]) != Bsz * d || n_items(&b[7]) != Bsz
            || n_items(&b[9]) != K || n_items(&b[12]) < Bsz || n_items(&b[13]) < K * Bsz
            || n_items(&b[14]) < K || n_items(&be) < K || n_items(&b[3]) < rows
            || (has_nsv && n_items(&b[4]) < rows) || end > rows || i0 < 0 || n < 0 || n > B) {
            release(&be, 1);
            PyErr_SetString(PyExc_ValueError, "_ck_experts.lkm_run: arrays have wrong sizes");
            goto fail;
        }
        const double lam = cs[1], rate = cs[2], pden = cs[3], nu = cs[4];
        const double *X = b[0].view.buf, *zz = b[1].view.buf, *yv = b[2].view.buf;
        const double *neg = b[9].view.buf, *u = b[11].view.buf;
        double *out = b[3].view.buf, *SX = b[5].view.buf, *sqn = b[6].view.buf;
        double *a = b[7].view.buf, *p = b[8].view.buf, *d2 = b[12].view.buf, *R = b[13].view.buf;
        double *fv = b[14].view.buf, *e = be.view.buf;
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
        release(&be, 1);
        release(b, 15);
        return Py_BuildValue("(nndni)", j, n, gmax, used, status);
    }
fail:
    release(b, 15);
    return NULL;
}

static PyMethodDef methods[] = {
    {"bind", (PyCFunction)(void (*)(void))py_bind, METH_FASTCALL,
     "bind(gemv_address, dot_address, ilp64, exp_ufunc): the BLAS routines and exp loop numpy "
     "uses"},
    {"check", (PyCFunction)(void (*)(void))py_check, METH_FASTCALL,
     "check(A, x, y, v, w) -> (dot, sum): the bound routines, for the comparison with numpy"},
    {"lkm_run", (PyCFunction)(void (*)(void))py_lkm_run, METH_FASTCALL,
     "lkm_run(...): LKMBooks's test-then-train rounds over a block"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_ck_experts",
                                    "Compiled blocks of the expert-advice selection learners",
                                    -1, methods};

PyMODINIT_FUNC PyInit__ck_experts(void) {
    PyObject *mod = PyModule_Create(&module);
    if (mod == NULL) return NULL;
    if (PyModule_AddIntConstant(mod, "ABI", KE_ABI) < 0
        || PyModule_AddStringConstant(mod, "SOURCE_HASH", KS_SOURCE_HASH) < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
