/* Compiled feature maps and block driver of the budgeted learners that are not one plain
 * kernel expansion (kernelstream.learners.compiled, "feature maps"): FOGD's random Fourier
 * features, the Nystrom / sketched feature maps of NOGD and SkeGD (a kernel row times a
 * matrix), and Gaussian rows that keep their squared distances (OKL-GD's per-centre widths,
 * OKS-SIL's learned width). Next to _ckernels.c, which serves the kernel-expansion learners.
 *
 * A round of these learners is a feature map z(x) and a linear score f = scale * <w, z>. The
 * block driver run() scores a block row by row and, on rows where the learner's update is a
 * plain gradient step of a linear model (w <- shrink * w, then w += step * y * z when the
 * round's hinge loss is positive), takes that step itself; every other update (a new support
 * vector, a width step, a sketch update, a scheduled row) returns to the learner's Python
 * update, with the row's features in the caller's buffers, and the block resumes after it.
 *
 * Numbers follow _ckernels.c: kernel rows are sums in index order over the example's
 * non-zeros (dots() of _ck_common.h), no FMA contraction (-ffp-contract=off), so a round
 * depends on nothing but its inputs and the block driver equals the per-example path bit for
 * bit (both call fm_score). The score <w, z> (up to 2D = 1600 terms for FOGD, where a single
 * chain of dependent adds would cost as much as the features) uses a fixed four-lane order
 * instead: lane l sums the indices = l mod 4 in order, then (l0 + l1) + (l2 + l3). Still one
 * order, whatever the machine.
 *
 * Elementwise loops (the projection Omega x, cos/sin, exp-free parts) are written to
 * vectorise; each element's arithmetic is the same IEEE operations in any vector width, so
 * SIMD changes the speed, never the result. cos/sin use Cody-Waite reduction by pi/2 and the
 * fdlibm kernel polynomials (about 1 ulp), branch-free so they vectorise; arguments beyond
 * RFF_REDUCE_MAX (never met at sensible widths) go to libm.
 *
 * rff-rls (recursive least squares on FOGD's features) has its own driver, rls_run: every
 * row is a second-order step (u = P z, w += u (y - f) / s, P -= u u^T / s with
 * s = 1 + <z, u>) on the upper triangle of the symmetric P, packed row by row, in C on both
 * paths (rls_update, rls_step), so they agree bit for bit.
 *
 * This file: the feature maps, their arguments and the entry points (score, scores, run,
 * step, rls_update, rls_run, rls_step, grow, cdf_search, sample_kernel); the vectorised
 * loops are in _ck_features_loops.h, the kernel rows (kernel_row, dist_row: also _ckernels'
 * and _ck_budget's) in _ck_common.h. One translation unit.
 */
#define KS_EXT_NAME "_ck_features" /* names the module in its argument errors */
#include "_ck_common.h"

/* Bumped whenever a signature or a result changes: the wrapper refuses a stale build. */
#define KF_ABI 5

enum { FM_RFF = 0, FM_PROJ = 1, FM_ROW = 2, FM_DIST = 3 };

#include "_ck_features_loops.h"

/* ---- feature maps --------------------------------------------------------------------- */

typedef struct {
    int kind;
    const double *X, *sqn, *M, *g; /* stored rows, their norms, M^T, widths */
    Py_ssize_t n, d, r, rp;        /* stored rows, width, features (PROJ: rows of M, padded) */
    int kcode;
    double p, g1, scale;
    long degree;
} FMap;

/* The largest ||x||^2 a map takes: base.KERNEL_MAX ** (1/p), p the degree of a polynomial
 * kernel (1 for the others), the learners' input bound; beyond it the Python checks say what
 * is wrong. */
static double fm_max_xx(const FMap *fm) {
    return fm->kind != FM_RFF && fm->kind != FM_DIST && fm->kcode != K_GAUSSIAN
               ? pow(1e100, 1.0 / (double)fm->degree) : 1e100;
}

/* Features of x: RFF: z = [cos; sin] (2D); PROJ: k = kernel row (n), z = M k (r); ROW: z = k
 * = kernel row (n); DIST: k = distances, z = Gaussian row (n). Returns f = scale <w, z>. */
static double fm_score(const FMap *fm, const double *w, const double *x, double xx,
                       Py_ssize_t *nz, double *k, double *z) {
    switch (fm->kind) {
    case FM_RFF: {
        Py_ssize_t D = fm->r / 2, m = nonzeros(x, fm->d, nz);
        project(fm->X, D, x, nz, m, z + D);
        cos_sin(z, D);
        return fm->scale * dot4(w, z, fm->r);
    }
    case FM_PROJ:
        kernel_row(fm->X, fm->sqn, fm->n, fm->d, x, xx, fm->kcode, fm->p, fm->degree, nz, k);
        matvec_t(fm->M, fm->n, fm->rp, k, z);
        return fm->scale * dot4(w, z, fm->r);
    case FM_ROW:
        kernel_row(fm->X, fm->sqn, fm->n, fm->d, x, xx, fm->kcode, fm->p, fm->degree, nz, z);
        return fm->scale * dot4(w, z, fm->n);
    default:
        dist_row(fm->X, fm->sqn, fm->n, fm->d, x, xx, fm->g, fm->g1, nz, k, z);
        return fm->scale * dot4(w, z, fm->n);
    }
}

/* Length of z (and of w) and of k for a map. */
static Py_ssize_t fm_zlen(const FMap *fm) {
    return fm->kind == FM_RFF || fm->kind == FM_PROJ ? fm->r : fm->n;
}
/* Length of the z buffer a map writes (PROJ: its padded features). */
static Py_ssize_t fm_zbuf(const FMap *fm) {
    return fm->kind == FM_PROJ ? fm->rp : fm_zlen(fm);
}
static Py_ssize_t fm_klen(const FMap *fm) {
    return fm->kind == FM_PROJ || fm->kind == FM_DIST ? fm->n : 0;
}

/* ---- argument parsing ----------------------------------------------------------------- */

/* The map tuples of compiled.py:
 *   (FM_RFF, OmegaT (d x D), scale)
 *   (FM_PROJ, X (cap x d), sqn, n, kcode, p, degree, M^T (n x rp), r, scale)
 *   (FM_ROW, X, sqn, n, kcode, p, degree, scale)
 *   (FM_DIST, X, sqn, n, g (n widths, or a float), scale)
 * Takes up to 4 buffers into b (the caller releases them). */
static int parse_map(PyObject *t, Buf *b, FMap *fm) {
    memset(fm, 0, sizeof *fm);
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) < 3) {
        PyErr_SetString(PyExc_TypeError, "_ck_features: a feature map is a tuple");
        return -1;
    }
    Py_ssize_t len = PyTuple_GET_SIZE(t);
    fm->kind = (int)PyLong_AsLong(PyTuple_GET_ITEM(t, 0));
    fm->scale = PyFloat_AsDouble(PyTuple_GET_ITEM(t, len - 1));
    if (PyErr_Occurred()) return -1;
    static const Py_ssize_t want[] = {3, 10, 8, 6};
    if (fm->kind < FM_RFF || fm->kind > FM_DIST || len != want[fm->kind]) {
        PyErr_SetString(PyExc_ValueError, "_ck_features: malformed feature map");
        return -1;
    }
    if (get_buf(PyTuple_GET_ITEM(t, 1), &b[0], 0, "map matrix", 'd') < 0) return -1;
    if (b[0].view.ndim != 2) {
        PyErr_SetString(PyExc_ValueError, "_ck_features: the map's matrix must be 2-D");
        return -1;
    }
    fm->X = b[0].view.buf;
    if (fm->kind == FM_RFF) {
        fm->d = b[0].view.shape[0];
        fm->r = 2 * b[0].view.shape[1];
        return 0;
    }
    Py_ssize_t cap = b[0].view.shape[0];
    fm->d = b[0].view.shape[1];
    if (get_buf(PyTuple_GET_ITEM(t, 2), &b[1], 0, "sqn", 'd') < 0) return -1;
    fm->sqn = b[1].view.buf;
    fm->n = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 3));
    if (PyErr_Occurred()) return -1;
    if (fm->n < 0 || fm->n > cap || n_items(&b[1]) < fm->n) {
        PyErr_SetString(PyExc_ValueError, "_ck_features: n exceeds the store");
        return -1;
    }
    if (fm->kind == FM_DIST) {
        PyObject *g = PyTuple_GET_ITEM(t, 4);
        if (PyFloat_Check(g)) {
            fm->g1 = PyFloat_AS_DOUBLE(g);
        } else {
            if (get_buf(g, &b[2], 0, "g", 'd') < 0) return -1;
            if (n_items(&b[2]) < fm->n) {
                PyErr_SetString(PyExc_ValueError, "_ck_features: fewer widths than rows");
                return -1;
            }
            fm->g = b[2].view.buf;
        }
        return 0;
    }
    fm->kcode = (int)PyLong_AsLong(PyTuple_GET_ITEM(t, 4));
    fm->p = PyFloat_AsDouble(PyTuple_GET_ITEM(t, 5));
    fm->degree = PyLong_AsLong(PyTuple_GET_ITEM(t, 6));
    if (PyErr_Occurred()) return -1;
    if (check_kernel(fm->kcode, "_ck_features", "map") < 0) return -1;
    if (fm->kind == FM_PROJ) {
        if (get_buf(PyTuple_GET_ITEM(t, 7), &b[2], 0, "M^T", 'd') < 0) return -1;
        fm->r = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 8));
        if (PyErr_Occurred()) return -1;
        if (b[2].view.ndim != 2 || b[2].view.shape[0] != fm->n || fm->r < 0
            || b[2].view.shape[1] != (fm->r + 7) / 8 * 8) {
            PyErr_SetString(PyExc_ValueError,
                            "_ck_features: M^T must be n x r, padded to a multiple of 8");
            return -1;
        }
        fm->M = b[2].view.buf;
        fm->rp = b[2].view.shape[1];
    }
    return 0;
}

/* The buffers every entry point takes after the map's b[0..4): w, x (or the block X), z,
 * work and k (None for the maps without one), at these positions of b. */
enum { B_W = 4, B_X = 5, B_Z = 6, B_WORK = 7, B_K = 8 };

/* w, x (width xd), k, z and work against the map. */
static int check_sizes(const FMap *fm, const Buf *b, Py_ssize_t xd, const char *fn) {
    if (fm_klen(fm) > 0 && !b[B_K].held) {
        PyErr_Format(PyExc_ValueError, "_ck_features.%s: this map needs k", fn);
        return -1;
    }
    if (n_items(&b[B_W]) < fm_zlen(fm) || xd != fm->d || n_items(&b[B_K]) < fm_klen(fm)
        || n_items(&b[B_Z]) < fm_zbuf(fm) || n_items(&b[B_WORK]) < fm->d) {
        PyErr_Format(PyExc_ValueError, "_ck_features.%s: w, x, k, z or work has the wrong size",
                     fn);
        return -1;
    }
    return 0;
}

/* The rows of the block X in b[B_X], checked against the map and, with zz, out (and y), in
 * the buffers from `first` on (the caller's extra block arrays); -1 with an exception. */
static Py_ssize_t block_rows(const FMap *fm, const Buf *b, int first, int count,
                             const char *fn) {
    Py_ssize_t rows = b[B_X].view.ndim == 2 ? b[B_X].view.shape[0] : -1;
    if (rows < 0) {
        PyErr_Format(PyExc_ValueError, "_ck_features.%s: X must be 2-D", fn);
        return -1;
    }
    if (check_sizes(fm, b, b[B_X].view.shape[1], fn) < 0) return -1;
    for (int i = first; i < first + count; i++)
        if (b[i].held && n_items(&b[i]) < rows) {
            PyErr_Format(PyExc_ValueError, "_ck_features.%s: block arrays have the wrong size",
                         fn);
            return -1;
        }
    return rows;
}

/* ---- Python entry points -------------------------------------------------------------- */

/* Each entry point is a body run by with_bufs (_ck_common.h), which releases its buffers. */

KS_ENTRY(score, 7, 9) {
    /* score(map, w, x, xx, k, z, work) -> f; k (None for RFF/ROW) and z receive the features,
     * work (int64, >= d) is scratch */
    FMap fm;
    if (parse_map(args[0], b, &fm) < 0
        || get_bufs(args, b + B_W, "d1 w, d2 x, D5 z, Q6 work, D4? k") < 0)
        return NULL;
    double xx = PyFloat_AsDouble(args[3]);
    if (PyErr_Occurred() || check_sizes(&fm, b, n_items(&b[B_X]), "score") < 0) return NULL;
    return PyFloat_FromDouble(fm_score(&fm, b[B_W].view.buf, b[B_X].view.buf, xx,
                                       (Py_ssize_t *)b[B_WORK].view.buf,
                                       b[B_K].held ? b[B_K].view.buf : NULL, b[B_Z].view.buf));
}

KS_ENTRY(scores, 8, 11) {
    /* scores(map, w, X, zz, out, k, z, work): out[i] = the score of row i of X (prediction
     * only, no learning; the benchmarks' feature-map floor) */
    FMap fm;
    if (parse_map(args[0], b, &fm) < 0
        || get_bufs(args, b + B_W, "d1 w, d2 X, D6 z, Q7 work, D5? k, d3 zz, D4 out") < 0)
        return NULL;
    Py_ssize_t rows = block_rows(&fm, b, 9, 2, "scores");
    if (rows < 0) return NULL;
    const double *X = b[B_X].view.buf, *zz = b[9].view.buf, *w = b[B_W].view.buf;
    double *out = b[10].view.buf, *k = b[B_K].held ? b[B_K].view.buf : NULL;
    double *z = b[B_Z].view.buf;
    Py_ssize_t *nz = b[B_WORK].view.buf, d = fm.d;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < rows; i++) out[i] = fm_score(&fm, w, X + i * d, zz[i], nz, k, z);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* The learner's update of a fired row, called from run(): on_fire(i) returns the model to
 * continue with, (map, w, nsv_value), or None to stop after row i. The map's and w's buffers
 * are released during the call (the update may replace or grow those arrays) and taken again
 * from its answer. Returns 1 (continue), 0 (stop) or -1 (error, exception set). */
static int call_on_fire(PyObject *on_fire, Py_ssize_t i, Buf *b, FMap *fm,
                        Py_ssize_t *nsv_value, Py_ssize_t xd) {
    release(b, B_W + 1);
    PyObject *idx = PyLong_FromSsize_t(i);
    if (idx == NULL) return -1;
    PyObject *r = PyObject_CallOneArg(on_fire, idx);
    Py_DECREF(idx);
    if (r == NULL) return -1;
    if (r == Py_None) {
        Py_DECREF(r);
        return 0;
    }
    int rc = -1;
    if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 3) {
        PyErr_SetString(PyExc_TypeError, "_ck_features.run: on_fire must return "
                                         "(map, w, nsv_value) or None");
    } else if (parse_map(PyTuple_GET_ITEM(r, 0), b, fm) == 0
               && get_buf(PyTuple_GET_ITEM(r, 1), &b[B_W], 1, "w", 'd') == 0
               && (*nsv_value = PyLong_AsSsize_t(PyTuple_GET_ITEM(r, 2)), !PyErr_Occurred())
               && check_sizes(fm, b, xd, "run") == 0) {
        rc = 1;
    }
    Py_DECREF(r); /* the buffers keep their arrays alive */
    return rc;
}

KS_ENTRY(run, 17, 13) {
    /* run(map, w, X, zz, y, start, stop, trigger, step, shrink, out, nsv, nsv_value, k, z,
     *     work, on_fire) -> (i, fired)
     * Test-then-train over rows start..stop-1 of the block X: row i's score goes to out[i].
     * With a number step the driver takes the linear model's step itself on every row:
     * w *= shrink (when shrink != 1), then w += (step * y) * z if the round fires (trigger).
     * With step None a row that fires is the learner's: on_fire(i) runs its update (see
     * call_on_fire) and the block goes on, or, with on_fire None, run returns (i, True) with
     * the row's features in k and z. nsv[i] (nsv may be None) receives nsv_value for every
     * row finished here (on_fire writes its own). Returns (stop, False) at stop, row stop
     * untouched, and (i + 1, False) when on_fire stops after row i. */
    FMap fm;
    PyObject *on_fire = args[16];
    if (parse_map(args[0], b, &fm) < 0
        || get_bufs(args, b + B_W,
                    "D1 w, d2 X, D14 z, Q15 work, D13? k, d3 zz, d4 y, D10 out, Q11? nsv") < 0)
        return NULL;
    Py_ssize_t start = PyLong_AsSsize_t(args[5]), stop = PyLong_AsSsize_t(args[6]), i = 0;
    Py_ssize_t nsv_value = PyLong_AsSsize_t(args[12]);
    int trigger = (int)PyLong_AsLong(args[7]), c_step = args[8] != Py_None, fired = 0,
        failed = 0;
    double step = c_step ? PyFloat_AsDouble(args[8]) : 0.0, shrink = PyFloat_AsDouble(args[9]);
    if (PyErr_Occurred()) return NULL;
    Py_ssize_t rows = block_rows(&fm, b, 9, 4, "run");
    if (rows < 0) return NULL;
    if (start < 0 || stop < start || stop > rows)
        return PyErr_Format(PyExc_ValueError, "_ck_features.run: block arrays have the wrong size");
    {
        const double *X = b[B_X].view.buf, *zz = b[9].view.buf, *y = b[10].view.buf;
        double *out = b[11].view.buf, *z = b[B_Z].view.buf;
        double *k = b[B_K].held ? b[B_K].view.buf : NULL;
        int64_t *nsv = b[12].held ? b[12].view.buf : NULL;
        Py_ssize_t *nz = b[B_WORK].view.buf, d = fm.d;
        PyThreadState *ts = PyEval_SaveThread();
        for (i = start; i < stop; i++) {
            double *w = b[B_W].view.buf; /* (re)read: on_fire may hand over another w */
            double f = fm_score(&fm, w, X + i * d, zz[i], nz, k, z);
            out[i] = f;
            int fire = fires(trigger, y[i], f);
            if (fire && !c_step) {
                if (on_fire == Py_None) {
                    fired = 1;
                    break;
                }
                PyEval_RestoreThread(ts);
                int rc = call_on_fire(on_fire, i, b, &fm, &nsv_value, d);
                ts = PyEval_SaveThread();
                if (rc < 0) {
                    failed = 1;
                    break;
                }
                if (rc == 0) {
                    i++;
                    break;
                }
                continue;
            }
            Py_ssize_t nw = fm_zlen(&fm);
            if (shrink != 1.0)
                for (Py_ssize_t j = 0; j < nw; j++) w[j] *= shrink;
            if (fire) {
                double c = step * y[i];
                for (Py_ssize_t j = 0; j < nw; j++) w[j] += c * z[j];
            }
            if (nsv) nsv[i] = nsv_value;
        }
        PyEval_RestoreThread(ts);
    }
    return failed ? NULL : Py_BuildValue("(nO)", i, fired ? Py_True : Py_False);
}

KS_ENTRY(step, 10, 9) {
    /* step(map, w, x, y, trigger, step, shrink, k, z, work) -> (f, xx, fired), or None
     * One round of run() on a single example, its norm included: xx = ||x||^2 (sqnorm, as
     * _ckernels sums it), the features and score f, then with a number step the linear
     * model's step of run() (w *= shrink when shrink != 1, w += (step * y) * z if the round
     * fires: fired is then False, the round is done); with step None, fired says whether
     * the round is the learner's to update, with its features in k and z. None, with
     * nothing changed, when x is not a float64 vector of the map's width or xx is not finite
     * (the caller's checks say what is wrong). */
    FMap fm;
    if (parse_map(args[0], b, &fm) < 0
        || get_bufs(args, b + B_W, "D1 w") < 0
        || get_bufs(args, b + B_Z, "D8 z, Q9 work, D7? k") < 0) /* x: b[B_X], below */
        return NULL;
    double y = PyFloat_AsDouble(args[3]), shrink = PyFloat_AsDouble(args[6]);
    int trigger = (int)PyLong_AsLong(args[4]), c_step = args[5] != Py_None;
    double step = c_step ? PyFloat_AsDouble(args[5]) : 0.0;
    if (PyErr_Occurred()) return NULL;
    if (take_buf(args[2], &b[B_X], 0, 'd') != 0 || b[B_X].view.ndim != 1
        || n_items(&b[B_X]) != fm.d)
        Py_RETURN_NONE; /* take_buf sets no exception */
    if (check_sizes(&fm, b, fm.d, "step") < 0) return NULL;
    const double *x = b[B_X].view.buf;
    double xx = sqnorm(x, fm.d), *w = b[B_W].view.buf, *z = b[B_Z].view.buf;
    if (!(xx <= fm_max_xx(&fm))) Py_RETURN_NONE; /* not finite, or above the bound */
    double f = fm_score(&fm, w, x, xx, (Py_ssize_t *)b[B_WORK].view.buf,
                        b[B_K].held ? b[B_K].view.buf : NULL, z);
    int fire = fires(trigger, y, f);
    if (c_step) { /* run()'s step, as written there */
        Py_ssize_t nw = fm_zlen(&fm);
        if (shrink != 1.0)
            for (Py_ssize_t j = 0; j < nw; j++) w[j] *= shrink;
        if (fire) {
            double c = step * y;
            for (Py_ssize_t j = 0; j < nw; j++) w[j] += c * z[j];
        }
        fire = 0;
    }
    return Py_BuildValue("(ddO)", f, xx, fire ? Py_True : Py_False);
}

/* ---- recursive least squares on random Fourier features (rff-rls) --------------------- */

/* rff-rls's features of x: z = scale [cos; sin] (k = 2D, scaled in place after fm_score, as
 * the learner's numpy z *= c), and its score f = scale <w, [cos; sin]> (fm_score's). */
static double rls_features(const FMap *fm, const double *w, const double *x, Py_ssize_t *nz,
                           double *z) {
    double f = fm_score(fm, w, x, 0.0, nz, NULL, z), c = fm->scale;
    for (Py_ssize_t j = 0; j < fm->r; j++) z[j] *= c;
    return f;
}

/* The weight step of a row whose u = P z is known: s = 1 + <z, u> (dot4), w += u e with
 * e = (y - f) / s; returns r = 1 / s for rls_rank1 (P -= (u u^T) r). */
static double rls_weights(double *w, Py_ssize_t k, const double *z, const double *u, double y,
                          double f) {
    double s = 1.0 + dot4(z, u, k), e = (y - f) / s;
    for (Py_ssize_t i = 0; i < k; i++) w[i] += u[i] * e;
    return 1.0 / s;
}

/* One whole round on x (the per-example path; rls_run does the same operations, fused). */
static double rls_round(const FMap *fm, double *w, double *P, const double *x, double y,
                        Py_ssize_t *nz, double *z, double *u) {
    Py_ssize_t k = fm->r;
    double f = rls_features(fm, w, x, nz, z);
    rls_solve(P, k, z, u);
    rls_rank1(P, k, u, rls_weights(w, k, z, u, y, f), NULL, NULL);
    return f;
}

/* The map (an RFF map only), w (k = 2D), P (k (k + 1) / 2: the upper triangle of the k x k
 * matrix packed row by row, rls_solve), z and u (>= zlen each), work (>= d). */
static int rls_check(const FMap *fm, const Buf *b, Py_ssize_t zlen, const char *fn) {
    Py_ssize_t k = fm->r;
    if (fm->kind != FM_RFF) {
        PyErr_Format(PyExc_ValueError, "_ck_features.%s: needs a random Fourier feature map", fn);
        return -1;
    }
    if (n_items(&b[B_W]) != k || n_items(&b[9]) != k * (k + 1) / 2 || n_items(&b[B_Z]) < zlen
        || n_items(&b[10]) < zlen || n_items(&b[B_WORK]) < fm->d) {
        PyErr_Format(PyExc_ValueError, "_ck_features.%s: w, P, z, u or work has the wrong size",
                     fn);
        return -1;
    }
    return 0;
}

KS_ENTRY(rls_update, 6, 4) {
    /* rls_update(w, P, z, u, y, f): the recursive least-squares step of a scored row with
     * features z (k = len(w)) and score f: u = P z (rls_solve), s = 1 + <z, u>,
     * w += u (y - f) / s, P -= (u u^T) / s (rls_rank1; P's upper triangle, packed row by
     * row: k (k + 1) / 2 numbers); u receives P z */
    if (get_bufs(args, b, "D0 w, D1 P, d2 z, D3 u") < 0) return NULL;
    double y = PyFloat_AsDouble(args[4]), f = PyFloat_AsDouble(args[5]);
    if (PyErr_Occurred()) return NULL;
    Py_ssize_t k = n_items(&b[0]);
    if (n_items(&b[1]) != k * (k + 1) / 2 || n_items(&b[2]) < k || n_items(&b[3]) < k)
        return PyErr_Format(PyExc_ValueError, "_ck_features.rls_update: P, z or u has the wrong "
                                              "size");
    double *w = b[0].view.buf, *P = b[1].view.buf, *u = b[3].view.buf;
    const double *z = b[2].view.buf;
    Py_BEGIN_ALLOW_THREADS
    rls_solve(P, k, z, u);
    rls_rank1(P, k, u, rls_weights(w, k, z, u, y, f), NULL, NULL);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

KS_ENTRY(rls_run, 9, 14) {
    /* rls_run(map, w, P, X, y, out, z, u, work): test-then-train over the rows of the block X
     * with rff-rls's round (rls_round), out[i] = row i's score; z and u (>= 2k each) hold two
     * rows' features and P z. Row i + 1's features and score are computed after row i's
     * weight step, and its u = P z during row i's rank-1 update (rls_rank1 with zn): one pass
     * over P per row, the same numbers as rls_round row by row. */
    FMap fm;
    if (parse_map(args[0], b, &fm) < 0
        || get_bufs(args, b + B_W, "D1 w, d3 X, D6 z, Q8 work") < 0
        || get_bufs(args, b + 9, "D2 P, D7 u, d4 y, D5 out") < 0)
        return NULL;
    Py_ssize_t k = fm.r;
    if (rls_check(&fm, b, 2 * k, "rls_run") < 0) return NULL;
    Py_ssize_t rows = block_rows(&fm, b, 11, 2, "rls_run");
    if (rows < 0) return NULL;
    double *w = b[B_W].view.buf, *P = b[9].view.buf, *out = b[12].view.buf;
    double *z = b[B_Z].view.buf, *u = b[10].view.buf;
    const double *X = b[B_X].view.buf, *y = b[11].view.buf;
    Py_ssize_t *nz = b[B_WORK].view.buf, d = fm.d;
    Py_BEGIN_ALLOW_THREADS
    if (rows > 0) {
        double *z0 = z, *z1 = z + k, *u0 = u, *u1 = u + k;
        out[0] = rls_features(&fm, w, X, nz, z0);
        rls_solve(P, k, z0, u0);
        for (Py_ssize_t i = 0; i < rows; i++) {
            double r = rls_weights(w, k, z0, u0, y[i], out[i]);
            if (i + 1 == rows) {
                rls_rank1(P, k, u0, r, NULL, NULL);
                break;
            }
            out[i + 1] = rls_features(&fm, w, X + (i + 1) * d, nz, z1);
            rls_rank1(P, k, u0, r, z1, u1);
            double *t = z0;
            z0 = z1;
            z1 = t;
            t = u0;
            u0 = u1;
            u1 = t;
        }
    }
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

KS_ENTRY(rls_step, 8, 11) {
    /* rls_step(map, w, P, x, y, z, u, work) -> (f, xx), or None: one rff-rls round on a
     * single example, its norm included (xx = ||x||^2 as sqnorm sums it), as rls_run does
     * it. None, with nothing changed, when x is not a float64 vector of the map's width or xx
     * is not finite (the caller's checks say what is wrong). */
    FMap fm;
    if (parse_map(args[0], b, &fm) < 0
        || get_bufs(args, b + B_W, "D1 w") < 0
        || get_bufs(args, b + B_Z, "D5 z, Q7 work") < 0
        || get_bufs(args, b + 9, "D2 P, D6 u") < 0) /* x: b[B_X], below */
        return NULL;
    double y = PyFloat_AsDouble(args[4]);
    if (PyErr_Occurred() || rls_check(&fm, b, fm.r, "rls_step") < 0) return NULL;
    if (take_buf(args[3], &b[B_X], 0, 'd') != 0 || b[B_X].view.ndim != 1
        || n_items(&b[B_X]) != fm.d)
        Py_RETURN_NONE; /* take_buf sets no exception */
    const double *x = b[B_X].view.buf;
    double xx = sqnorm(x, fm.d), f;
    if (!(xx <= fm_max_xx(&fm))) Py_RETURN_NONE; /* not finite, or above the bound */
    Py_BEGIN_ALLOW_THREADS
    f = rls_round(&fm, b[B_W].view.buf, b[9].view.buf, x, y, b[B_WORK].view.buf,
                  b[B_Z].view.buf, b[10].view.buf);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(dd)", f, xx);
}

KS_ENTRY(grow, 23, 13) {
    /* grow(Xs, sqn, a, ids, s, n, kcode, p, degree, K, X, zz, y, start, stop, t0, eta, limit,
     *      norm2, out, nsv, k, work) -> (i, n, norm2)
     * A kernel OGD stage that stores every margin error until it holds `limit` points (NOGD's
     * stage 1), test-then-train over rows start..stop-1 of the block X, all in C: row i (round
     * t0 + i) is scored as fm_score's FM_ROW map scores it (kernel row k against the store's
     * n rows Xs, norms sqn, coefficient a), and a margin error with n < limit appends it as the
     * learner's _update does: the Gram matrix K (limit x limit or larger) grows by k and
     * kappa(x, x) (gram_append), the store by x, ||x||^2, eta * y, id = age = t0 + i, and ||f||^2
     * by SVStore.append's identity. nsv[i] (nsv may be None) receives n after row i. A margin
     * error with a full store (n = limit) is the learner's: grow returns at that row, scored,
     * with its kernel row in k. Returns (stop, n, norm2) at stop. */
    if (get_bufs(args, b,
                 "D0 Xs, D1 sqn, D2 a, Q3 ids, Q4 s, D9 K, d10 X, d11 zz, d12 y, D19 out, "
                 "D21 k, Q22 work, Q20? nsv") < 0)
        return NULL;
    Py_ssize_t n = PyLong_AsSsize_t(args[5]), start = PyLong_AsSsize_t(args[13]);
    Py_ssize_t stop = PyLong_AsSsize_t(args[14]), t0 = PyLong_AsSsize_t(args[15]);
    Py_ssize_t limit = PyLong_AsSsize_t(args[17]);
    int kcode = (int)PyLong_AsLong(args[6]);
    long degree = PyLong_AsLong(args[8]);
    double p = PyFloat_AsDouble(args[7]), eta = PyFloat_AsDouble(args[16]);
    double norm2 = PyFloat_AsDouble(args[18]);
    if (PyErr_Occurred() || check_kernel(kcode, "_ck_features", "grow") < 0) return NULL;
    if (b[0].view.ndim != 2 || b[5].view.ndim != 2 || b[6].view.ndim != 2)
        return PyErr_Format(PyExc_ValueError, "_ck_features.grow: Xs, K and X must be 2-D");
    Py_ssize_t cap = b[0].view.shape[0], d = b[0].view.shape[1], rows = b[6].view.shape[0];
    Py_ssize_t side = b[5].view.shape[1];
    if (n < 0 || limit < n || limit > cap || n_items(&b[1]) < cap || n_items(&b[2]) < cap
        || n_items(&b[3]) < cap || n_items(&b[4]) < cap || b[5].view.shape[0] < limit
        || side < limit || b[6].view.shape[1] != d || n_items(&b[10]) < limit
        || n_items(&b[11]) < d)
        return PyErr_Format(PyExc_ValueError, "_ck_features.grow: the store, K, X, k or work "
                                              "has the wrong size");
    if (start < 0 || stop < start || stop > rows || n_items(&b[7]) < rows
        || n_items(&b[8]) < rows || n_items(&b[9]) < rows || (b[12].held && n_items(&b[12]) < rows))
        return PyErr_Format(PyExc_ValueError, "_ck_features.grow: block arrays have the wrong "
                                              "size");
    double *Xs = b[0].view.buf, *sqn = b[1].view.buf, *a = b[2].view.buf, *K = b[5].view.buf;
    int64_t *ids = b[3].view.buf, *age = b[4].view.buf, *nsv = b[12].held ? b[12].view.buf : NULL;
    const double *X = b[6].view.buf, *zz = b[7].view.buf, *y = b[8].view.buf;
    double *out = b[9].view.buf, *k = b[10].view.buf;
    Py_ssize_t *nz = b[11].view.buf, i = start;
    FMap fm = {.kind = FM_ROW, .X = Xs, .sqn = sqn, .n = n, .d = d, .kcode = kcode, .p = p,
               .degree = degree, .scale = 1.0};
    Py_BEGIN_ALLOW_THREADS
    for (; i < stop; i++) {
        const double *x = X + i * d;
        double f = fm_score(&fm, a, x, zz[i], nz, k, k);
        out[i] = f;
        if (fires(T_MARGIN, y[i], f)) {
            if (n >= limit) break;
            /* kern.diag: 1 (Gaussian), ||x||^2 ** degree (Python's float power: libm's pow) */
            double kxx = kcode == K_GAUSSIAN ? 1.0 : pow(zz[i], (double)degree);
            for (Py_ssize_t j = 0; j < n; j++) K[j * side + n] = K[n * side + j] = k[j];
            K[n * side + n] = kxx;
            double c = eta * y[i];
            memcpy(Xs + n * d, x, (size_t)d * sizeof *x);
            sqn[n] = zz[i];
            a[n] = c;
            ids[n] = age[n] = t0 + i;
            norm2 += 2.0 * c * f + c * c * kxx;
            fm.n = ++n;
        }
        if (nsv) nsv[i] = n;
    }
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(nnd)", i, n, norm2);
}

KS_ENTRY(cdf_search, 2, 2) {
    /* cdf_search(w, u) -> [j...]: with c = cumsum(w) (sequential, as numpy's), the indices
     * searchsorted(c, u_i * c[-1], side="right") of the uniforms u, exactly as numpy gives
     * them (the draw step of experts.weighted_distinct) */
    if (get_bufs(args, b, "d0 w, d1 u") < 0) return NULL;
    const double *w = b[0].view.buf, *u = b[1].view.buf;
    Py_ssize_t n = n_items(&b[0]), m = n_items(&b[1]);
    double *c = PyMem_Malloc((n ? n : 1) * sizeof(double));
    if (c == NULL) return PyErr_NoMemory();
    double tot = 0.0;
    for (Py_ssize_t j = 0; j < n; j++) c[j] = tot += w[j];
    PyObject *res = PyList_New(m);
    for (Py_ssize_t i = 0; res != NULL && i < m; i++) {
        PyObject *o = PyLong_FromSsize_t(search_right(c, n, u[i] * tot));
        if (o == NULL)
            Py_CLEAR(res);
        else
            PyList_SET_ITEM(res, i, o);
    }
    PyMem_Free(c);
    return res;
}

KS_ENTRY(sample_kernel, 4, 2) {
    /* sample_kernel(X, psi, idx, neg_gamma) -> (K, b): the Gaussian kernel matrix of a few
     * stored rows (a list of lists, unit diagonal) and their entries of psi. With G the
     * rows' inner products (sums in index order), K_ij = exp(neg_gamma d) for
     * d = (G_ii + G_jj) - 2 G_ij > 0 (i < j), else 1: OKS-SIL's RLD sample */
    PyObject *K = NULL, *bv = NULL, *seq = NULL, *res = NULL;
    Py_ssize_t idx[16];
    double G[16][16], neg_g;
    if (get_bufs(args, b, "d0 X, d1 psi") < 0) goto done;
    neg_g = PyFloat_AsDouble(args[3]);
    if (PyErr_Occurred()) goto done;
    if (b[0].view.ndim != 2) {
        PyErr_SetString(PyExc_ValueError, "_ck_features.sample_kernel: X must be 2-D");
        goto done;
    }
    seq = PySequence_Fast(args[2], "_ck_features.sample_kernel: idx must be a sequence");
    if (seq == NULL) goto done;
    Py_ssize_t s = PySequence_Fast_GET_SIZE(seq), d = b[0].view.shape[1];
    Py_ssize_t lim = b[0].view.shape[0] < n_items(&b[1]) ? b[0].view.shape[0] : n_items(&b[1]);
    if (s > 16) {
        PyErr_SetString(PyExc_ValueError, "_ck_features.sample_kernel: at most 16 rows");
        goto done;
    }
    for (Py_ssize_t i = 0; i < s; i++) {
        idx[i] = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(seq, i));
        if (idx[i] == -1 && PyErr_Occurred()) goto done;
        if (idx[i] < 0 || idx[i] >= lim) {
            PyErr_SetString(PyExc_IndexError, "_ck_features.sample_kernel: index out of range");
            goto done;
        }
    }
    const double *X = b[0].view.buf, *psi = b[1].view.buf;
    for (Py_ssize_t i = 0; i < s; i++)
        for (Py_ssize_t j = i; j < s; j++) {
            const double *u = X + idx[i] * d, *v = X + idx[j] * d;
            double g = 0.0;
            for (Py_ssize_t t = 0; t < d; t++) g += u[t] * v[t];
            G[i][j] = G[j][i] = g;
        }
    K = PyList_New(s);
    bv = PyList_New(s);
    if (K == NULL || bv == NULL) goto done;
    for (Py_ssize_t i = 0; i < s; i++) {
        PyObject *row = PyList_New(s), *o = PyFloat_FromDouble(psi[idx[i]]);
        if (row == NULL || o == NULL) {
            Py_XDECREF(row);
            Py_XDECREF(o);
            goto done;
        }
        PyList_SET_ITEM(K, i, row);
        PyList_SET_ITEM(bv, i, o);
    }
    for (Py_ssize_t i = 0; i < s; i++)
        for (Py_ssize_t j = i; j < s; j++) {
            double k = 1.0;
            if (i != j) {
                double dist = (G[i][i] + G[j][j]) - 2.0 * G[i][j];
                if (dist > 0.0) k = exp(neg_g * dist);
            }
            PyObject *o = PyFloat_FromDouble(k), *o2 = i != j ? PyFloat_FromDouble(k) : NULL;
            if (o == NULL || (i != j && o2 == NULL)) {
                Py_XDECREF(o);
                Py_XDECREF(o2);
                goto done;
            }
            PyList_SET_ITEM(PyList_GET_ITEM(K, i), j, o);
            if (o2) PyList_SET_ITEM(PyList_GET_ITEM(K, j), i, o2);
        }
    res = PyTuple_Pack(2, K, bv);
done:
    Py_XDECREF(K);
    Py_XDECREF(bv);
    Py_XDECREF(seq);
    return res;
}

static PyMethodDef methods[] = {
    KS_METHOD(score, "score(map, w, x, xx, k, z, work) -> f: the features of x and their score"),
    KS_METHOD(scores, "scores(map, w, X, zz, out, k, z, work): the scores of a block, without "
                      "learning"),
    KS_METHOD(run, "run(...) -> (i, fired): test-then-train up to the next round the learner "
                   "updates"),
    KS_METHOD(step, "step(map, w, x, y, trigger, step, shrink, k, z, work) -> (f, xx, fired) "
                    "or None: one round of run() with the norm of x"),
    KS_METHOD(rls_update, "rls_update(w, P, z, u, y, f): rff-rls's recursive least-squares "
                          "step of a scored row"),
    KS_METHOD(rls_run, "rls_run(map, w, P, X, y, out, z, u, work): rff-rls's test-then-train "
                       "over a block"),
    KS_METHOD(rls_step, "rls_step(map, w, P, x, y, z, u, work) -> (f, xx) or None: one rff-rls "
                        "round with the norm of x"),
    KS_METHOD(grow, "grow(...) -> (i, n, norm2): a kernel OGD stage that stores its margin "
                    "errors up to a limit (NOGD's stage 1)"),
    KS_METHOD(cdf_search, "cdf_search(w, u) -> indices of the uniforms u in the cumulative "
                          "weights"),
    KS_METHOD(sample_kernel, "sample_kernel(X, psi, idx, neg_gamma) -> (K, b): Gaussian kernel "
                             "matrix of a few rows"),
    {NULL, NULL, 0, NULL},
};

KS_MODULE(_ck_features,
          "Compiled feature maps and block driver of kernelstream's feature-map learners.", KF_ABI)
