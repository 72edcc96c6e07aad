/* Compiled per-round kernels of the single-kernel learners (kernelstream.learners.compiled).
 *
 * What is compiled is the part of a round that every kernel-expansion learner shares and that
 * numpy cannot do without a dozen calls of ~0.5 us each: the squared norm of the example, its
 * kernel row against the stored support vectors, the score f(x) = sum_j a_j k_j, and the test
 * "does this round update the model?". A block of examples runs in one call up to the next
 * example that updates the model; the learner's own update (Python, its paper's pseudocode)
 * then runs and the block resumes. Rounds that leave the model alone (a correct perceptron
 * prediction, a zero hinge loss) therefore never return to Python.
 *
 * Numbers: every sum is sequential in index order (no reassociation, no FMA contraction:
 * built with -ffp-contract=off), so a row does not depend on the block it is in, on the
 * machine's SIMD width or on a BLAS build. Several rows are summed side by side (independent
 * accumulators, one per row), which keeps each row's order and hides the latency of the adds.
 * A zero entry of the example adds an exact zero to every product (stored points are finite),
 * so the sums run over the example's non-zeros only: the same value, and a9a-like 0/1 rows
 * with ~14 of 123 entries set cost 1/9 of the dense loop.
 *
 * Arguments are numpy arrays read through the buffer protocol (float64 or int64, C order);
 * the Python wrapper guarantees the types, the C side checks sizes so a bad call raises
 * instead of reading out of bounds.
 */
#include "_ck_common.h"

/* Bumped whenever a signature or a result changes: the wrapper refuses a stale build. */
#define KS_ABI 1
#ifndef KS_SOURCE_HASH
#define KS_SOURCE_HASH "" /* setup.py defines the source's hash */
#endif

enum { T_ALWAYS = 0, T_MISTAKE = 1, T_MARGIN = 2 };

/* Does the round with label y and score f update the model? (the learner's own early return,
 * written as its module does) */
static int fires(int trigger, double y, double f) {
    switch (trigger) {
    case T_MISTAKE: return !(y * f > 0.0);
    case T_MARGIN: return !(y * f >= 1.0);
    default: return 1;
    }
}

/* ---- Python entry points -------------------------------------------------------------- */

static PyObject *py_sqnorms(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    /* sqnorms(X (m x d), out (m)) */
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "sqnorms(X, out)");
    Buf b[2];
    memset(b, 0, sizeof b);
    if (get_buf(args[0], &b[0], 0, "X", 'd') < 0 || get_buf(args[1], &b[1], 1, "out", 'd') < 0)
        goto fail;
    if (b[0].view.ndim != 2) {
        PyErr_SetString(PyExc_ValueError, "_ckernels.sqnorms: X must be 2-D");
        goto fail;
    }
    Py_ssize_t m = b[0].view.shape[0], d = b[0].view.shape[1];
    if (n_items(&b[1]) < m) {
        PyErr_SetString(PyExc_ValueError, "_ckernels.sqnorms: out is too short");
        goto fail;
    }
    const double *X = b[0].view.buf;
    double *out = b[1].view.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < m; i++) out[i] = sqnorm(X + i * d, d);
    Py_END_ALLOW_THREADS
    release(b, 2);
    Py_RETURN_NONE;
fail:
    release(b, 2);
    return NULL;
}

static PyObject *py_sqnorm(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 1) return PyErr_Format(PyExc_TypeError, "sqnorm(x)");
    Buf b;
    memset(&b, 0, sizeof b);
    if (get_buf(args[0], &b, 0, "x", 'd') < 0) {
        release(&b, 1);
        return NULL;
    }
    double s = sqnorm(b.view.buf, n_items(&b));
    release(&b, 1);
    return PyFloat_FromDouble(s);
}

/* Store and kernel arguments shared by score() and run(). */
typedef struct {
    const double *X, *sqn;
    double *a;
    Py_ssize_t n, d;
    int kind;
    double p;
    long degree;
} Model;

/* args: X (cap x d), sqn, a, n, kind, p, degree -> fills m; returns the number of buffers
 * taken from b (all released by the caller). */
static int parse_model(PyObject *const *args, Buf *b, Model *m, const char *fn) {
    if (get_buf(args[0], &b[0], 0, "X", 'd') < 0 || get_buf(args[1], &b[1], 0, "sqn", 'd') < 0
        || get_buf(args[2], &b[2], 1, "a", 'd') < 0)
        return -1;
    m->n = PyLong_AsSsize_t(args[3]);
    m->kind = (int)PyLong_AsLong(args[4]);
    m->p = PyFloat_AsDouble(args[5]);
    m->degree = PyLong_AsLong(args[6]);
    if (PyErr_Occurred()) return -1;
    if (b[0].view.ndim != 2) {
        PyErr_Format(PyExc_ValueError, "_ckernels.%s: X must be 2-D", fn);
        return -1;
    }
    Py_ssize_t cap = b[0].view.shape[0];
    m->d = b[0].view.shape[1];
    if (m->n < 0 || m->n > cap || n_items(&b[1]) < m->n || n_items(&b[2]) < m->n) {
        PyErr_Format(PyExc_ValueError, "_ckernels.%s: n=%zd exceeds the store", fn, m->n);
        return -1;
    }
    if (m->kind < K_GAUSSIAN || m->kind > K_LINEAR) {
        PyErr_Format(PyExc_ValueError, "_ckernels.%s: unknown kernel code %d", fn, m->kind);
        return -1;
    }
    m->X = b[0].view.buf;
    m->sqn = b[1].view.buf;
    m->a = b[2].view.buf;
    return 0;
}

static PyObject *py_score(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    /* score(X, sqn, a, n, kind, p, degree, z, zz, k, work) -> f; k[:n] receives the row,
     * work (int64, >= d) is scratch for the non-zero positions */
    if (nargs != 11)
        return PyErr_Format(PyExc_TypeError, "score(X, sqn, a, n, kind, p, degree, z, zz, k, work)");
    Buf b[6];
    memset(b, 0, sizeof b);
    Model m;
    double f = 0.0, zz;
    if (parse_model(args, b, &m, "score") < 0) goto fail;
    if (get_buf(args[7], &b[3], 0, "z", 'd') < 0 || get_buf(args[9], &b[4], 1, "k", 'd') < 0
        || get_buf(args[10], &b[5], 1, "work", 'q') < 0)
        goto fail;
    zz = PyFloat_AsDouble(args[8]);
    if (PyErr_Occurred()) goto fail;
    if (n_items(&b[3]) != m.d || n_items(&b[4]) < m.n || n_items(&b[5]) < m.d) {
        PyErr_SetString(PyExc_ValueError, "_ckernels.score: z, k or work has the wrong size");
        goto fail;
    }
    f = row_score(m.X, m.sqn, m.a, m.n, m.d, b[3].view.buf, zz, m.kind, m.p, m.degree,
                  (Py_ssize_t *)b[5].view.buf, b[4].view.buf);
    release(b, 6);
    return PyFloat_FromDouble(f);
fail:
    release(b, 6);
    return NULL;
}

static PyObject *py_run(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    /* run(X, sqn, a, n, kind, p, degree, Z, zz, y, start, trigger, shrink, norm2, out, nsv,
     *     k, work) -> (i, norm2)
     * Test-then-train over rows start.. of the block Z: each row's score goes to out[i]; a
     * row whose round does not fire leaves the model alone, except that a shrink != 1 scales
     * the coefficients (and ||f||^2) as the learner's no-update branch does; nsv[i] (if nsv
     * is not None) receives n. Stops at the first row that fires, with its kernel row in
     * k[:n], and returns its index (or the block's length). */
    if (nargs != 18)
        return PyErr_Format(PyExc_TypeError, "run() takes 18 arguments, got %zd", nargs);
    Buf b[10];
    memset(b, 0, sizeof b);
    Model m;
    Py_ssize_t start, i, rows;
    int trigger, with_nsv = args[15] != Py_None;
    double shrink, norm2;
    if (parse_model(args, b, &m, "run") < 0) goto fail;
    if (get_buf(args[7], &b[3], 0, "Z", 'd') < 0 || get_buf(args[8], &b[4], 0, "zz", 'd') < 0
        || get_buf(args[9], &b[5], 0, "y", 'd') < 0
        || get_buf(args[14], &b[6], 1, "out", 'd') < 0
        || (with_nsv && get_buf(args[15], &b[7], 1, "nsv", 'q') < 0)
        || get_buf(args[16], &b[8], 1, "k", 'd') < 0
        || get_buf(args[17], &b[9], 1, "work", 'q') < 0)
        goto fail;
    start = PyLong_AsSsize_t(args[10]);
    trigger = (int)PyLong_AsLong(args[11]);
    shrink = PyFloat_AsDouble(args[12]);
    norm2 = PyFloat_AsDouble(args[13]);
    if (PyErr_Occurred()) goto fail;
    rows = b[3].view.ndim == 2 ? b[3].view.shape[0] : -1;
    if (rows < 0 || b[3].view.shape[1] != m.d || n_items(&b[4]) < rows
        || n_items(&b[5]) < rows || n_items(&b[6]) < rows
        || (with_nsv && n_items(&b[7]) < rows) || n_items(&b[8]) < m.n
        || n_items(&b[9]) < m.d || start < 0 || start > rows) {
        PyErr_SetString(PyExc_ValueError, "_ckernels.run: block arrays have the wrong size");
        goto fail;
    }
    {
        const double *Z = b[3].view.buf, *zz = b[4].view.buf, *y = b[5].view.buf;
        double *out = b[6].view.buf, *k = b[8].view.buf, *a = m.a;
        int64_t *nsv = with_nsv ? b[7].view.buf : NULL;
        Py_ssize_t *nz = b[9].view.buf;
        Py_ssize_t n = m.n, d = m.d;
        double s2 = shrink * shrink;
        Py_BEGIN_ALLOW_THREADS
        for (i = start; i < rows; i++) {
            double f = row_score(m.X, m.sqn, a, n, d, Z + i * d, zz[i], m.kind, m.p, m.degree,
                                 nz, k);
            out[i] = f;
            if (fires(trigger, y[i], f)) break;
            if (shrink != 1.0 && n) {
                for (Py_ssize_t j = 0; j < n; j++) a[j] *= shrink;
                norm2 *= s2;
            }
            if (nsv) nsv[i] = n;
        }
        Py_END_ALLOW_THREADS
    }
    release(b, 10);
    return Py_BuildValue("(nd)", i, norm2);
fail:
    release(b, 10);
    return NULL;
}

static PyObject *py_scores(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    /* scores(X, sqn, a, n, kind, p, degree, Z, zz, out, k, work): out[i] = f(Z_i) for every
     * row of the block under the fixed model (prediction without learning; also the
     * benchmarks' floor: one compiled row and score per round and nothing else) */
    if (nargs != 12)
        return PyErr_Format(PyExc_TypeError, "scores() takes 12 arguments, got %zd", nargs);
    Buf b[8];
    memset(b, 0, sizeof b);
    Model m;
    Py_ssize_t rows;
    if (parse_model(args, b, &m, "scores") < 0) goto fail;
    if (get_buf(args[7], &b[3], 0, "Z", 'd') < 0 || get_buf(args[8], &b[4], 0, "zz", 'd') < 0
        || get_buf(args[9], &b[5], 1, "out", 'd') < 0
        || get_buf(args[10], &b[6], 1, "k", 'd') < 0
        || get_buf(args[11], &b[7], 1, "work", 'q') < 0)
        goto fail;
    rows = b[3].view.ndim == 2 ? b[3].view.shape[0] : -1;
    if (rows < 0 || b[3].view.shape[1] != m.d || n_items(&b[4]) < rows
        || n_items(&b[5]) < rows || n_items(&b[6]) < m.n || n_items(&b[7]) < m.d) {
        PyErr_SetString(PyExc_ValueError, "_ckernels.scores: block arrays have the wrong size");
        goto fail;
    }
    {
        const double *Z = b[3].view.buf, *zz = b[4].view.buf;
        double *out = b[5].view.buf, *k = b[6].view.buf;
        Py_ssize_t *nz = b[7].view.buf;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < rows; i++)
            out[i] = row_score(m.X, m.sqn, m.a, m.n, m.d, Z + i * m.d, zz[i], m.kind, m.p,
                               m.degree, nz, k);
        Py_END_ALLOW_THREADS
    }
    release(b, 8);
    Py_RETURN_NONE;
fail:
    release(b, 8);
    return NULL;
}

static PyMethodDef methods[] = {
    {"sqnorms", (PyCFunction)(void (*)(void))py_sqnorms, METH_FASTCALL,
     "sqnorms(X, out): out[i] = ||X_i||^2, summed in index order"},
    {"sqnorm", (PyCFunction)(void (*)(void))py_sqnorm, METH_FASTCALL,
     "sqnorm(x) -> ||x||^2, summed in index order"},
    {"score", (PyCFunction)(void (*)(void))py_score, METH_FASTCALL,
     "score(X, sqn, a, n, kind, p, degree, z, zz, k, work) -> f(z); k[:n] = kernel row"},
    {"scores", (PyCFunction)(void (*)(void))py_scores, METH_FASTCALL,
     "scores(X, sqn, a, n, kind, p, degree, Z, zz, out, k, work): f of every row, no learning"},
    {"run", (PyCFunction)(void (*)(void))py_run, METH_FASTCALL,
     "run(...) -> (i, norm2): test-then-train up to the next round that updates the model"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_ckernels",
    "Compiled per-round kernels of kernelstream's single-kernel learners.", -1, methods,
};

PyMODINIT_FUNC PyInit__ckernels(void) {
    PyObject *mod = PyModule_Create(&module);
    if (mod == NULL) return NULL;
    if (PyModule_AddIntConstant(mod, "ABI", KS_ABI) < 0
        || PyModule_AddStringConstant(mod, "SOURCE_HASH", KS_SOURCE_HASH) < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
