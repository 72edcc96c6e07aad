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
#define KS_EXT_NAME "_ckernels" /* names the module in its argument errors */
#include "_ck_common.h"

/* Bumped whenever a signature or a result changes: the wrapper refuses a stale build. */
#define KS_ABI 1

/* ---- Python entry points -------------------------------------------------------------- */

/* Each entry point is a body run by with_bufs (_ck_common.h), which releases its buffers. */

KS_ENTRY(sqnorms, 2, 2) {
    /* sqnorms(X (m x d), out (m)) */
    Py_ssize_t m, d;
    if (get_bufs(args, b, "d0 X, D1 out") < 0
        || store_shape(&b[0], &m, &d, "_ckernels", "sqnorms") < 0)
        return NULL;
    if (n_items(&b[1]) < m)
        return PyErr_Format(PyExc_ValueError, "_ckernels.sqnorms: out is too short");
    const double *X = b[0].view.buf;
    double *out = b[1].view.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < m; i++) out[i] = sqnorm(X + i * d, d);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

KS_ENTRY(sqnorm, 1, 1) {
    /* sqnorm(x) -> ||x||^2 */
    if (get_bufs(args, b, "d0 x") < 0) return NULL;
    return PyFloat_FromDouble(sqnorm(b[0].view.buf, n_items(&b[0])));
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

/* args: X (cap x d), sqn, a, n, kind, p, degree -> fills m; takes b[0..3). */
static int parse_model(PyObject *const *args, Buf *b, Model *m, const char *fn) {
    if (get_bufs(args, b, "d0 X, d1 sqn, D2 a") < 0) return -1;
    m->n = PyLong_AsSsize_t(args[3]);
    m->kind = (int)PyLong_AsLong(args[4]);
    m->p = PyFloat_AsDouble(args[5]);
    m->degree = PyLong_AsLong(args[6]);
    Py_ssize_t cap;
    if (PyErr_Occurred() || store_shape(&b[0], &cap, &m->d, "_ckernels", fn) < 0) return -1;
    if (m->n < 0 || m->n > cap || n_items(&b[1]) < m->n || n_items(&b[2]) < m->n) {
        PyErr_Format(PyExc_ValueError, "_ckernels.%s: n=%zd exceeds the store", fn, m->n);
        return -1;
    }
    if (check_kernel(m->kind, "_ckernels", fn) < 0) return -1;
    m->X = b[0].view.buf;
    m->sqn = b[1].view.buf;
    m->a = b[2].view.buf;
    return 0;
}

/* The model (b[0..3)), then a block Z (b[3]) with zz (b[4]), a kernel-row buffer k (b[5]) and
 * the scratch work (b[6]) of at least the model's sizes: the block's rows, or -1 (exception
 * set). */
static Py_ssize_t model_block(PyObject *const *args, Buf *b, Model *m, const char *spec,
                              const char *fn) {
    if (parse_model(args, b, m, fn) < 0 || get_bufs(args, b + 3, spec) < 0) return -1;
    const Buf *Z = &b[3];
    Py_ssize_t rows = Z->view.ndim == 2 ? Z->view.shape[0] : -1;
    if (rows < 0 || Z->view.shape[1] != m->d || n_items(&b[4]) < rows || n_items(&b[5]) < m->n
        || n_items(&b[6]) < m->d) {
        PyErr_Format(PyExc_ValueError, "_ckernels.%s: block arrays have the wrong size", fn);
        return -1;
    }
    return rows;
}

KS_ENTRY(score, 11, 6) {
    /* score(X, sqn, a, n, kind, p, degree, z, zz, k, work) -> f; k[:n] receives the row,
     * work (int64, >= d) is scratch for the non-zero positions */
    Model m;
    if (parse_model(args, b, &m, "score") < 0 || get_bufs(args, b + 3, "d7 z, D9 k, Q10 work") < 0)
        return NULL;
    double zz = PyFloat_AsDouble(args[8]);
    if (PyErr_Occurred()) return NULL;
    if (n_items(&b[3]) != m.d || n_items(&b[4]) < m.n || n_items(&b[5]) < m.d)
        return PyErr_Format(PyExc_ValueError, "_ckernels.score: z, k or work has the wrong size");
    return PyFloat_FromDouble(row_score(m.X, m.sqn, m.a, m.n, m.d, b[3].view.buf, zz, m.kind,
                                        m.p, m.degree, (Py_ssize_t *)b[5].view.buf,
                                        b[4].view.buf));
}

KS_ENTRY(run, 18, 10) {
    /* run(X, sqn, a, n, kind, p, degree, Z, zz, y, start, trigger, shrink, norm2, out, nsv,
     *     k, work) -> (i, norm2)
     * Test-then-train over rows start.. of the block Z: each row's score goes to out[i]; a
     * row whose round does not fire leaves the model alone, except that a shrink != 1 scales
     * the coefficients (and ||f||^2) as the learner's no-update branch does; nsv[i] (if nsv
     * is not None) receives n. Stops at the first row that fires, with its kernel row in
     * k[:n], and returns its index (or the block's length). */
    Model m;
    Py_ssize_t rows =
        model_block(args, b, &m, "d7 Z, d8 zz, D16 k, Q17 work, d9 y, D14 out, Q15? nsv", "run");
    if (rows < 0) return NULL;
    Py_ssize_t start = PyLong_AsSsize_t(args[10]), i;
    int trigger = (int)PyLong_AsLong(args[11]);
    double shrink = PyFloat_AsDouble(args[12]), norm2 = PyFloat_AsDouble(args[13]);
    if (PyErr_Occurred()) return NULL;
    int64_t *nsv = b[9].held ? b[9].view.buf : NULL;
    if (n_items(&b[7]) < rows || n_items(&b[8]) < rows || (nsv && n_items(&b[9]) < rows)
        || start < 0 || start > rows)
        return PyErr_Format(PyExc_ValueError, "_ckernels.run: block arrays have the wrong size");
    const double *Z = b[3].view.buf, *zz = b[4].view.buf, *y = b[7].view.buf;
    double *out = b[8].view.buf, *k = b[5].view.buf, *a = m.a;
    Py_ssize_t *nz = b[6].view.buf;
    Py_ssize_t n = m.n, d = m.d;
    double s2 = shrink * shrink;
    Py_BEGIN_ALLOW_THREADS
    for (i = start; i < rows; i++) {
        double f = row_score(m.X, m.sqn, a, n, d, Z + i * d, zz[i], m.kind, m.p, m.degree, nz, k);
        out[i] = f;
        if (fires(trigger, y[i], f)) break;
        if (shrink != 1.0 && n) {
            for (Py_ssize_t j = 0; j < n; j++) a[j] *= shrink;
            norm2 *= s2;
        }
        if (nsv) nsv[i] = n;
    }
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(nd)", i, norm2);
}

KS_ENTRY(scores, 12, 8) {
    /* scores(X, sqn, a, n, kind, p, degree, Z, zz, out, k, work): out[i] = f(Z_i) for every
     * row of the block under the fixed model (prediction without learning; also the
     * benchmarks' floor: one compiled row and score per round and nothing else) */
    Model m;
    Py_ssize_t rows = model_block(args, b, &m, "d7 Z, d8 zz, D10 k, Q11 work, D9 out", "scores");
    if (rows < 0) return NULL;
    if (n_items(&b[7]) < rows)
        return PyErr_Format(PyExc_ValueError, "_ckernels.scores: block arrays have the wrong size");
    const double *Z = b[3].view.buf, *zz = b[4].view.buf;
    double *out = b[7].view.buf, *k = b[5].view.buf;
    Py_ssize_t *nz = b[6].view.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < rows; i++)
        out[i] = row_score(m.X, m.sqn, m.a, m.n, m.d, Z + i * m.d, zz[i], m.kind, m.p, m.degree,
                           nz, k);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    KS_METHOD(sqnorms, "sqnorms(X, out): out[i] = ||X_i||^2, summed in index order"),
    KS_METHOD(sqnorm, "sqnorm(x) -> ||x||^2, summed in index order"),
    KS_METHOD(score, "score(X, sqn, a, n, kind, p, degree, z, zz, k, work) -> f(z); k[:n] = row"),
    KS_METHOD(scores, "scores(X, sqn, a, n, kind, p, degree, Z, zz, out, k, work): f of every "
                      "row, no learning"),
    KS_METHOD(run, "run(...) -> (i, norm2): test-then-train up to the next round that updates "
                   "the model"),
    {NULL, NULL, 0, NULL},
};

KS_MODULE(_ckernels, "Compiled per-round kernels of kernelstream's single-kernel learners.",
          KS_ABI)
