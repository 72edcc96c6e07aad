/* Compiled budget maintenance of the single-kernel budget learners (kernelstream.learners.
 * compiled, "budget rules"): the update of RBP, the Forgetron, BOGD, BPA-S and the
 * Projectron(++) as C functions built from a few shared steps (append / replace / scale one
 * store, f(x_r) at a stored point, BPA-S's removal costs, the projection d = K^-1 k and the
 * bordered update of K^-1), and a block driver that runs test-then-train with the update in
 * C, so a block never returns to Python.
 *
 * A rule is one learner's _update, operation for operation: the same scalar expressions in the
 * same order (IEEE doubles, no FMA contraction: -ffp-contract=off) and, for the vector steps,
 * the same elementwise operations as the numpy code, so with the same kernel row the compiled
 * update equals the numpy one bit for bit. That includes the Projectron's projection: here
 * d_i = sum_j K_ji k_j in index order, vectorised across i (K^-1 is symmetric up to round-off,
 * its rows are contiguous), and k.d in the four-lane order of _ck_features.c, which the numpy
 * code follows (linalg.project_rows, linalg.dot4). The per-example path calls step() (a
 * whole round: run()'s per-row code) or update() (learn_one after predict_one), the block
 * driver run(): all call the same rule function, so blocks and single rounds agree bit for
 * bit.
 *
 * Randomness (RBP's and BOGD p1's evicted slot) is drawn from the learner's own numpy
 * Generator through its bit generator's C interface (numpy's bitgen_t, the documented
 * `bit_generator.capsule`): next_double is what Generator.random() returns, so the stream and
 * the generator's state are those of the numpy code.
 *
 * This file: the entry points and the module. The store and shared steps are in
 * _ck_budget_steps.h, the rules in _ck_budget_rules.h (_ck_omkc includes them too), OKL-GD's
 * and OKS-SIL's distance-row rules in _ck_budget_dist.h. One translation unit.
 */
#define KS_EXT_NAME "_ck_budget" /* names the module in its argument errors */
#include "_ck_budget_rules.h"
#include "_ck_budget_dist.h"

/* Bumped whenever a signature or a result changes: the wrapper refuses a stale build. */
#define KB_ABI 3

/* ---- Python entry points -------------------------------------------------------------- */

/* The store's head takes b[0..11), the call's own arrays follow it from B_OWN on. */
enum { B_OWN = 11 };

/* The rows of the block Z in b[B_OWN] (width d), and zz, y, out, nsv (when held) of at least
 * as many items; -1 with an exception. */
static Py_ssize_t block_rows(const Buf *b, int count, Py_ssize_t d, const char *fn) {
    Py_ssize_t rows = b[B_OWN].view.ndim == 2 ? b[B_OWN].view.shape[0] : -1;
    int ok = rows >= 0 && b[B_OWN].view.shape[1] == d;
    for (int i = B_OWN + 1; ok && i < B_OWN + count; i++)
        ok = !b[i].held || n_items(&b[i]) >= rows;
    if (!ok) {
        PyErr_Format(PyExc_ValueError, "_ck_budget.%s: block arrays have the wrong size", fn);
        return -1;
    }
    return rows;
}

/* The result of a distance-row round or block: (i, status, n, idx), or the rule's error. */
static PyObject *dist_result(Py_ssize_t i, int status, const DStore *st, const DRule *R,
                             const char *fn) {
    if (status < 0) return PyErr_Format(PyExc_RuntimeError, "_ck_budget.%s: %s", fn, st->err);
    if (status == DEFER_RLD)
        return Py_BuildValue("(nin[nnn])", i, status, st->n, R->idx[0], R->idx[1], R->idx[2]);
    return Py_BuildValue("(ninO)", i, status, st->n, Py_None);
}

/* update() and update_dist(): one round's update, by a budget rule (after its head: x, xx,
 * y, f, k, t -> (n, norm2)) or a distance-row rule (after its head: x, xx, y, f, d2, k, t ->
 * (0, status, n, idx)). The rule is given the round's score f and its kernel row k[:n] (and
 * distances d2[:n], changed as the learner's update changes them); the learner's ist / fst
 * arrays are updated in place; a distance rule's status DEFER_ALL / DEFER_RLD hands (the
 * rest of) the round to Python, idx being the drawn sample of a deferred RLD solve. */
static PyObject *one_round(PyObject *const *args, Py_ssize_t nargs, int dist) {
    const char *fn = dist ? "update_dist" : "update";
    Py_ssize_t head = dist ? DHEAD : NHEAD;
    int nown = dist ? 3 : 2; /* x, (d2,) k */
    if (!nargs_ok(nargs, head + nown + 4, fn)) return NULL;
    Buf b[B_OWN + 3] = {0};
    Store st;
    Rule R;
    DStore dst;
    DRule dR;
    PyObject *res = NULL;
    double xx = 0.0, y = 0.0, f = 0.0;
    int64_t t = 0;
    if ((dist ? parse_dhead(args, b, &dst, &dR, fn) : parse_head(args, b, &st, &R, fn)) < 0
        || get_bufs(args + head, b + B_OWN, dist ? "d0 x, D4 d2, D5 k" : "d0 x, d4 k") < 0)
        goto done;
    xx = PyFloat_AsDouble(args[head + 1]);
    y = PyFloat_AsDouble(args[head + 2]);
    f = PyFloat_AsDouble(args[head + 3]);
    t = PyLong_AsLongLong(args[head + nown + 3]);
    if (PyErr_Occurred()) goto done;
    Py_ssize_t d = dist ? dst.d : st.d, n = dist ? dst.n : st.n;
    int ok = n_items(&b[B_OWN]) == d;
    for (int i = 1; i < nown; i++) ok = ok && n_items(&b[B_OWN + i]) >= n;
    if (!ok) {
        PyErr_Format(PyExc_ValueError, "_ck_budget.%s: x, d2 or k has the wrong size", fn);
        goto done;
    }
    const double *x = b[B_OWN].view.buf;
    double *k = b[B_OWN + nown - 1].view.buf;
    if (dist)
        res = dist_result(0, DRULES[dR.code](&dst, &dR, x, xx, y, f, b[B_OWN + 1].view.buf, k, t),
                          &dst, &dR, fn);
    else if (RULES[R.code](&st, &R, x, xx, y, f, k, t) < 0)
        PyErr_Format(PyExc_RuntimeError, "_ck_budget.%s: %s", fn, st.err);
    else
        res = Py_BuildValue("(nd)", st.n, st.norm2);
done:
    release(b, B_OWN + 3);
    return res;
}

static PyObject *py_update(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    return one_round(args, nargs, 0);
}

static PyObject *py_update_dist(PyObject *Py_UNUSED(self), PyObject *const *args,
                                Py_ssize_t nargs) {
    return one_round(args, nargs, 1);
}

KS_ENTRY(run, NHEAD + 6, 16) {
    /* run(<head>, Z, zz, y, t0, out, nsv) -> (n, norm2)
     * Test-then-train over every row of the block Z: out[i] = f(Z_i) (the row and score of
     * _ckernels), then the rule's update of round t0 + i; nsv[i] (nsv may be None) receives
     * the number of support vectors after it. */
    Store st;
    Rule R;
    if (parse_head(args, b, &st, &R, "run") < 0
        || get_bufs(args + NHEAD, b + B_OWN, "d0 Z, d1 zz, d2 y, D4 out, Q5? nsv") < 0)
        return NULL;
    int64_t t0 = PyLong_AsLongLong(args[NHEAD + 3]);
    if (PyErr_Occurred()) return NULL;
    Py_ssize_t rows = block_rows(b, 5, st.d, "run");
    if (rows < 0) return NULL;
    int rc = 0;
    {
        const double *Z = b[11].view.buf, *zz = b[12].view.buf, *y = b[13].view.buf;
        double *out = b[14].view.buf, *k = R.w3;
        int64_t *nsv = b[15].held ? b[15].view.buf : NULL;
        rule_fn rule = RULES[R.code];
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < rows; i++) {
            const double *z = Z + i * st.d;
            double f = row_score(st.X, st.sqn, st.a, st.n, st.d, z, zz[i], st.kind, st.p,
                                 st.degree, R.nz, k);
            out[i] = f;
            if (rule(&st, &R, z, zz[i], y[i], f, k, t0 + i) < 0) {
                rc = -1;
                break;
            }
            if (nsv) nsv[i] = st.n;
        }
        Py_END_ALLOW_THREADS
    }
    if (rc < 0) return PyErr_Format(PyExc_RuntimeError, "_ck_budget.run: %s", st.err);
    return Py_BuildValue("(nd)", st.n, st.norm2);
}

KS_ENTRY(step, 7, B_OWN + 1) {
    /* step(head, n, norm2, budget, x, y, t) -> (f, n, norm2), or None
     * A whole round of the per-example path in one call: ||x||^2 (sqnorm, as _ckernels sums
     * it), the row and score and the rule's update of round t: run()'s code for one row, so
     * the numbers are the block's by construction. head is the tuple of run()'s NHEAD leading
     * arguments, kept by the learner between rounds; its items n and norm2 are stale (they
     * change every round) and the arguments n, norm2 stand for them. None, with nothing
     * changed, when the round is not for this call: x not a float64 vector of the store's
     * width, ||x||^2 not finite (the caller's checks say what is wrong), no room for an
     * append (the caller grows the store) or budget not the rule's (the caller's head is
     * rebuilt). */
    PyObject *h = args[0];
    if (!PyTuple_Check(h) || PyTuple_GET_SIZE(h) != NHEAD)
        return PyErr_Format(PyExc_TypeError, "_ck_budget.step: head must be a %d-tuple", NHEAD);
    PyObject *hv[NHEAD];
    for (Py_ssize_t i = 0; i < NHEAD; i++) hv[i] = PyTuple_GET_ITEM(h, i);
    hv[6] = args[1];
    hv[7] = args[2];
    Store st;
    Rule R;
    if (parse_head(hv, b, &st, &R, "step") < 0) return NULL;
    double budget = PyFloat_AsDouble(args[3]), y = PyFloat_AsDouble(args[5]);
    int64_t t = PyLong_AsLongLong(args[6]);
    if (PyErr_Occurred()) return NULL;
    if (budget != R.prm[0] || st.n == st.cap || take_buf(args[4], &b[B_OWN], 0, 'd') != 0
        || b[B_OWN].view.ndim != 1 || n_items(&b[B_OWN]) != st.d)
        Py_RETURN_NONE; /* take_buf sets no exception */
    const double *x = b[B_OWN].view.buf;
    double xx = sqnorm(x, st.d);
    if (!(xx <= st_max_xx(&st))) Py_RETURN_NONE; /* not finite, or above the bound */
    double *k = R.w3;
    double f = row_score(st.X, st.sqn, st.a, st.n, st.d, x, xx, st.kind, st.p, st.degree, R.nz,
                         k);
    if (RULES[R.code](&st, &R, x, xx, y, f, k, t) < 0)
        return PyErr_Format(PyExc_RuntimeError, "_ck_budget.step: %s", st.err);
    return Py_BuildValue("(dnd)", f, st.n, st.norm2);
}

KS_ENTRY(run_dist, DHEAD + 9, 18) {
    /* run_dist(<head>, Z, zz, y, start, t0, out, nsv, d2, k) -> (i, status, n, idx)
     * Test-then-train over rows start.. of the block Z (round t0 + i for row i): out[i] =
     * f(Z_i), then the rule's update; nsv[i] (nsv may be None) receives n. Stops at the end
     * of the block (i = rows, status DONE) or at a row whose update the rule hands to Python
     * (status DEFER_*), with that row's distances and Gaussian row in d2[:n] and k[:n]. */
    DStore st;
    DRule R;
    Py_ssize_t i = 0;
    int status = DONE;
    if (parse_dhead(args, b, &st, &R, "run_dist") < 0
        || get_bufs(args + DHEAD, b + B_OWN,
                    "d0 Z, d1 zz, d2 y, D5 out, Q6? nsv, D7 d2, D8 k") < 0)
        return NULL;
    Py_ssize_t start = PyLong_AsSsize_t(args[DHEAD + 3]);
    int64_t t0 = PyLong_AsLongLong(args[DHEAD + 4]);
    if (PyErr_Occurred()) return NULL;
    Py_ssize_t rows = block_rows(b, 5, st.d, "run_dist");
    if (rows < 0) return NULL;
    if (n_items(&b[16]) < st.cap || n_items(&b[17]) < st.cap || start < 0 || start > rows)
        return PyErr_Format(PyExc_ValueError,
                            "_ck_budget.run_dist: block arrays have the wrong size");
    {
        const double *Z = b[11].view.buf, *zz = b[12].view.buf, *y = b[13].view.buf;
        double *out = b[14].view.buf, *d2 = b[16].view.buf, *k = b[17].view.buf;
        int64_t *nsv = b[15].held ? b[15].view.buf : NULL;
        drule_fn rule = DRULES[R.code];
        double g1 = st.g ? 0.0 : R.fst[0];
        Py_BEGIN_ALLOW_THREADS
        for (i = start; i < rows; i++) {
            const double *z = Z + i * st.d;
            double f = 0.0;
            if (st.n) {
                if (!st.g) g1 = R.fst[0]; /* OKS-SIL's gamma moves with its updates */
                dist_row(st.X, st.sqn, st.n, st.d, z, zz[i], st.g, g1, R.nz, d2, k);
                f = dot4(st.a, k, st.n);
            }
            out[i] = f;
            status = rule(&st, &R, z, zz[i], y[i], f, d2, k, t0 + i);
            if (status != DONE) break;
            if (nsv) nsv[i] = st.n;
        }
        Py_END_ALLOW_THREADS
    }
    return dist_result(i, status, &st, &R, "run_dist");
}

KS_ENTRY(step_dist, 7, B_OWN + 3) {
    /* step_dist(head, n, x, y, t, d2, k) -> (f, xx, status, n, idx), or None
     * A whole round of the per-example path of a distance-row rule in one call: ||x||^2
     * (sqnorm, as _ckernels sums it), the distances, Gaussian row and score, and the rule's
     * update of round t: run_dist()'s code for one row, so the numbers are the block's by
     * construction. head is the tuple of run_dist()'s DHEAD leading arguments, kept by the
     * learner between rounds; its item n is stale (it changes with the store) and the argument
     * n stands for it. A status DEFER_* hands (the rest of) the round to Python as run_dist()
     * does, with the row's distances and kernel values in d2[:n] and k[:n]. None, with nothing
     * changed, when x is not a float64 vector of the store's width or ||x||^2 is not finite
     * (the caller's checks say what is wrong). */
    PyObject *h = args[0];
    if (!PyTuple_Check(h) || PyTuple_GET_SIZE(h) != DHEAD)
        return PyErr_Format(PyExc_TypeError, "_ck_budget.step_dist: head must be a %d-tuple",
                            DHEAD);
    PyObject *hv[DHEAD];
    for (Py_ssize_t i = 0; i < DHEAD; i++) hv[i] = PyTuple_GET_ITEM(h, i);
    hv[7] = args[1];
    DStore st;
    DRule R;
    if (parse_dhead(hv, b, &st, &R, "step_dist") < 0
        || get_bufs(args, b + B_OWN + 1, "D5 d2, D6 k") < 0)
        return NULL;
    double y = PyFloat_AsDouble(args[3]);
    int64_t t = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred()) return NULL;
    if (n_items(&b[B_OWN + 1]) < st.cap || n_items(&b[B_OWN + 2]) < st.cap)
        return PyErr_Format(PyExc_ValueError, "_ck_budget.step_dist: d2 or k is too short");
    if (take_buf(args[2], &b[B_OWN], 0, 'd') != 0 || b[B_OWN].view.ndim != 1
        || n_items(&b[B_OWN]) != st.d)
        Py_RETURN_NONE; /* take_buf sets no exception */
    const double *x = b[B_OWN].view.buf;
    double xx = sqnorm(x, st.d);
    if (!(xx <= 1e100)) Py_RETURN_NONE; /* Gaussian widths: base.KERNEL_MAX */
    double *d2 = b[B_OWN + 1].view.buf, *k = b[B_OWN + 2].view.buf, f = 0.0;
    if (st.n) {
        dist_row(st.X, st.sqn, st.n, st.d, x, xx, st.g, st.g ? 0.0 : R.fst[0], R.nz, d2, k);
        f = dot4(st.a, k, st.n);
    }
    int status = DRULES[R.code](&st, &R, x, xx, y, f, d2, k, t);
    PyObject *r = dist_result(0, status, &st, &R, "step_dist");
    if (r == NULL) return NULL;
    /* (0, status, n, idx) -> (f, xx, status, n, idx) */
    PyObject *out = Py_BuildValue("(ddOOO)", f, xx, PyTuple_GET_ITEM(r, 1), PyTuple_GET_ITEM(r, 2),
                                  PyTuple_GET_ITEM(r, 3));
    Py_DECREF(r);
    return out;
}

static PyMethodDef methods[] = {
    KS_METHOD(update, "update(code, store..., rule state..., x, xx, y, f, k, t) -> (n, norm2): "
                      "one round"),
    KS_METHOD(update_dist, "update_dist(code, store..., x, xx, y, f, d2, k, t) -> (0, status, "
                           "n, idx): one round"),
    KS_METHOD(run_dist, "run_dist(code, store..., Z, zz, y, start, t0, out, nsv, d2, k) -> (i, "
                        "status, n, idx)"),
    KS_METHOD(step_dist, "step_dist(head, n, x, y, t, d2, k) -> (f, xx, status, n, idx) or None: "
                         "a whole round (norm, row, score, update)"),
    KS_METHOD(run, "run(code, store..., rule state..., Z, zz, y, t0, out, nsv) -> (n, norm2): "
                   "a block"),
    KS_METHOD(step, "step(head, n, norm2, budget, x, y, t) -> (f, n, norm2) or None: a whole "
                    "round (norm, row, score, update)"),
    {NULL, NULL, 0, NULL},
};

KS_MODULE(_ck_budget,
          "Compiled budget maintenance of kernelstream's single-kernel budget learners.", KB_ABI)
