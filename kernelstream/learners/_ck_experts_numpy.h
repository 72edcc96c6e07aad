/* The routines numpy itself calls, bound at import (compiled.py finds them): cblas_dgemv,
 * cblas_ddot, the float64 loop of np.exp, and numpy's sum of a few values; with bind() and
 * check(), the entry points that bind them and compare them with numpy. Included by
 * _ck_experts.c only. */
#ifndef KS_CK_EXPERTS_NUMPY_H
#define KS_CK_EXPERTS_NUMPY_H
#include "_ck_common.h"

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

#endif /* KS_CK_EXPERTS_NUMPY_H */
