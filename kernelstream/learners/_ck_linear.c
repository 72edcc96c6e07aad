/* The primal form of the linear-kernel Perceptron, PA-I and OGD (kernelstream.learners._primal):
 * one weight vector w instead of support vectors, f(x) = scale * <w, x>.
 *
 * Dense rows use a dense w of width d. Sparse rows use a compact w over the columns seen so
 * far: an open-addressing hash table (keys: global column, slot: local id, linear probing,
 * load <= 1/2) maps a column to its entry of w, and cols maps a local id back to its column,
 * so no work and no memory follows the largest index. Every array is numpy's (the learner's
 * state); a table that could overflow on a row makes the call stop (run) or refuse (update)
 * before touching anything, and the Python side grows it (rehash) and calls again.
 *
 * Numerical rules as _ckernels.c: sums are sequential in the row's order (no FMA contraction,
 * no reassociation), so the block driver and the per-example path agree bit for bit, and a
 * model of integers on integer data stays exact. ``scale`` is OGD's shrink (1 otherwise:
 * multiplying or dividing by it is then exact). */
#include "_ck_common.h"

#define KL_ABI 1
enum { R_PERCEPTRON = 0, R_PA1 = 1, R_OGD_HINGE = 2, R_ADD = 3 };
enum { I_TERMS = 0, I_NLOC = 1 };    /* ist: terms added (the dual's SV count), local ids */
enum { F_SCALE = 0, F_NORM2 = 1 };   /* fst: the weight's scale, ||f||^2 */
#define RESCALE_BELOW 1e-150         /* fold a shrinking scale into w before it underflows */

typedef struct {
    double *w;
    Py_ssize_t wlen;
    int64_t *keys, *slot, *cols; /* keys == NULL: dense w */
    Py_ssize_t cap;              /* table size, a power of two */
    int bits;
} Model;

static inline Py_ssize_t probe(const Model *m, int64_t k) {
    uint64_t h = ((uint64_t)k * 0x9E3779B97F4A7C15ULL) >> (64 - m->bits);
    Py_ssize_t mask = m->cap - 1, p = (Py_ssize_t)h;
    while (m->keys[p] != k && m->keys[p] != -1) p = (p + 1) & mask;
    return p;
}

/* <w, x> of a sparse row (columns no update has touched add nothing) or a dense one. */
static inline double dot_w(const Model *m, const int64_t *idx, const double *v, Py_ssize_t n) {
    double s = 0.0;
    if (m->keys == NULL) {
        if (idx == NULL)
            for (Py_ssize_t i = 0; i < n; i++) s += m->w[i] * v[i];
        else
            for (Py_ssize_t i = 0; i < n; i++) s += m->w[idx[i]] * v[i];
        return s;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t p = probe(m, idx[i]);
        if (m->keys[p] != -1) s += m->w[m->slot[p]] * v[i];
    }
    return s;
}

/* w += c * x, new columns given the next local ids (room checked by the caller). */
static inline void axpy_w(Model *m, int64_t *ist, const int64_t *idx, const double *v,
                          Py_ssize_t n, double c) {
    if (m->keys == NULL) {
        if (idx == NULL)
            for (Py_ssize_t i = 0; i < n; i++) m->w[i] += c * v[i];
        else
            for (Py_ssize_t i = 0; i < n; i++) m->w[idx[i]] += c * v[i];
        return;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t p = probe(m, idx[i]);
        if (m->keys[p] == -1) {
            int64_t j = ist[I_NLOC]++;
            m->keys[p] = idx[i];
            m->slot[p] = j;
            m->cols[j] = idx[i];
            m->w[j] = 0.0;
        }
        m->w[m->slot[p]] += c * v[i];
    }
}

static inline int room(const Model *m, const int64_t *ist, Py_ssize_t n) {
    return m->keys == NULL || 2 * (ist[I_NLOC] + n) <= m->cap;
}

/* One round's update (the learners' _update, in their modules' words); 1 if it added a term. */
static inline int update_row(Model *m, int rule, const double *prm, int64_t *ist, double *fst,
                             const int64_t *idx, const double *v, Py_ssize_t n, double y,
                             double f) {
    double xx = sqnorm(v, n), c, fz = f;
    switch (rule) {
    case R_PERCEPTRON:
        if (!(y * f <= 0.0)) return 0;
        c = y;
        break;
    case R_PA1: {
        double loss = 1.0 - y * f;
        if (!(loss > 0.0) || !(xx > 0.0)) return 0;
        double r = loss / xx;
        c = (r < prm[0] ? r : prm[0]) * y; /* Python's min(C, r) */
        break;
    }
    case R_OGD_HINGE: {
        double shrink = prm[1];
        if (shrink != 1.0 && ist[I_TERMS]) {
            fst[F_SCALE] *= shrink;
            fst[F_NORM2] *= shrink * shrink;
            if (fst[F_SCALE] < RESCALE_BELOW) {
                Py_ssize_t len = m->keys == NULL ? m->wlen : ist[I_NLOC];
                for (Py_ssize_t j = 0; j < len; j++) m->w[j] *= fst[F_SCALE];
                fst[F_SCALE] = 1.0;
            }
        }
        if (!(y * f < 1.0)) return 0;
        c = -prm[0] * -y; /* -eta * g with the hinge's g = -y */
        fz = f * shrink;
        break;
    }
    default: /* R_ADD: the coefficient, computed by the caller */
        c = prm[0];
    }
    axpy_w(m, ist, idx, v, n, c / fst[F_SCALE]);
    ist[I_TERMS]++;
    fst[F_NORM2] += 2.0 * c * fz + c * c * xx;
    return 1;
}

/* The model's buffers from b[first..first+3] (w, keys, slot, cols); keys empty: dense. */
static int take_model(Buf *b, Model *m) {
    m->w = b[0].view.buf;
    m->wlen = n_items(&b[0]);
    m->cap = n_items(&b[1]);
    if (m->cap == 0) {
        m->keys = m->slot = m->cols = NULL;
        return 0;
    }
    if ((m->cap & (m->cap - 1)) != 0 || n_items(&b[2]) != m->cap || 2 * m->wlen < m->cap
        || 2 * n_items(&b[3]) < m->cap) {
        PyErr_SetString(PyExc_ValueError, "_ck_linear: bad table sizes");
        return -1;
    }
    m->keys = b[1].view.buf;
    m->slot = b[2].view.buf;
    m->cols = b[3].view.buf;
    m->bits = 0;
    while (((Py_ssize_t)1 << m->bits) < m->cap) m->bits++;
    if (m->bits == 0) m->bits = 1; /* a shift by 64 is undefined; cap >= 2 anyway */
    return 0;
}

KS_ENTRY(score, 5, 7) {
    /* score(w, keys, slot, idx, vals) -> <w, x> (idx None: a dense row) */
    if (get_bufs(args, b, "D0 w, Q1 keys, Q2 slot, Q1 cols, q3? idx, d4 vals") < 0) return NULL;
    Model m;
    if (take_model(b, &m) < 0) return NULL;
    const int64_t *idx = b[4].held ? b[4].view.buf : NULL;
    Py_ssize_t n = n_items(&b[5]);
    if (idx == NULL && m.keys == NULL && n != m.wlen) {
        PyErr_SetString(PyExc_ValueError, "_ck_linear.score: row and w differ in width");
        return NULL;
    }
    return PyFloat_FromDouble(dot_w(&m, idx, b[5].view.buf, n));
}

KS_ENTRY(update, 12, 11) {
    /* update(rule, prm, ist, fst, w, keys, slot, cols, idx, vals, y, f) -> 1 (a term added),
     * 0 (no update), -1 (the table has no room for the row: nothing changed) */
    if (get_bufs(args, b, "d1 prm, Q2 ist, D3 fst, D4 w, Q5 keys, Q6 slot, Q7 cols, q8? idx, "
                          "d9 vals") < 0)
        return NULL;
    Model m;
    if (take_model(b + 3, &m) < 0) return NULL;
    int rule = (int)PyLong_AsLong(args[0]);
    double y = PyFloat_AsDouble(args[10]), f = PyFloat_AsDouble(args[11]);
    if (PyErr_Occurred()) return NULL;
    const int64_t *idx = b[7].held ? b[7].view.buf : NULL;
    Py_ssize_t n = n_items(&b[8]);
    int64_t *ist = b[1].view.buf;
    if (!room(&m, ist, n)) return PyLong_FromLong(-1);
    return PyLong_FromLong(update_row(&m, rule, b[0].view.buf, ist, b[2].view.buf, idx,
                                      b[8].view.buf, n, y, f));
}

KS_ENTRY(run, 15, 15) {
    /* run(rule, prm, ist, fst, w, keys, slot, cols, indptr, indices, data, y, start, out, nsv)
     * -> stop: test-then-train over rows start.. of a block (indptr None: data is a dense
     * C-ordered block of rows as wide as w); out[i] = row i's score, nsv[i] (or None) the
     * terms after it. Stops before a row the table has no room for (or at the end). */
    if (get_bufs(args, b, "d1 prm, Q2 ist, D3 fst, D4 w, Q5 keys, Q6 slot, Q7 cols, "
                          "q8? indptr, q9? indices, d10 data, d11 y, D13 out, Q14? nsv") < 0)
        return NULL;
    Model m;
    if (take_model(b + 3, &m) < 0) return NULL;
    int rule = (int)PyLong_AsLong(args[0]);
    Py_ssize_t start = PyLong_AsSsize_t(args[12]);
    if (PyErr_Occurred()) return NULL;
    const double *prm = b[0].view.buf, *data = b[9].view.buf, *yv = b[10].view.buf;
    int64_t *ist = b[1].view.buf, *nsv = b[12].held ? b[12].view.buf : NULL;
    double *fst = b[2].view.buf, *out = b[11].view.buf;
    const int64_t *indptr = b[7].held ? b[7].view.buf : NULL;
    const int64_t *indices = b[8].held ? b[8].view.buf : NULL;
    Py_ssize_t rows = n_items(&b[10]), i = start;
    if (n_items(&b[11]) < rows || (nsv != NULL && n_items(&b[12]) < rows)
        || (indptr != NULL && (indices == NULL || n_items(&b[7]) != rows + 1))
        || (indptr == NULL && (m.keys != NULL || n_items(&b[9]) != rows * m.wlen))) {
        PyErr_SetString(PyExc_ValueError, "_ck_linear.run: bad block");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    for (; i < rows; i++) {
        const int64_t *idx = NULL;
        const double *v;
        Py_ssize_t n;
        if (indptr != NULL) {
            idx = indices + indptr[i];
            v = data + indptr[i];
            n = (Py_ssize_t)(indptr[i + 1] - indptr[i]);
        } else {
            v = data + i * m.wlen;
            n = m.wlen;
        }
        if (!room(&m, ist, n)) break;
        double f = dot_w(&m, idx, v, n) * fst[F_SCALE];
        out[i] = f;
        update_row(&m, rule, prm, ist, fst, idx, v, n, yv[i], f);
        if (nsv != NULL) nsv[i] = ist[I_TERMS];
    }
    Py_END_ALLOW_THREADS
    return PyLong_FromSsize_t(i);
}

KS_ENTRY(rehash, 4, 3) {
    /* rehash(keys, slot, cols, nloc): fill an empty table (keys all -1) with cols[:nloc] */
    if (get_bufs(args, b, "Q0 keys, Q1 slot, q2 cols") < 0) return NULL;
    Py_ssize_t nloc = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred()) return NULL;
    Model m = {.keys = b[0].view.buf, .slot = b[1].view.buf, .cap = n_items(&b[0])};
    m.bits = 0;
    while (((Py_ssize_t)1 << m.bits) < m.cap) m.bits++;
    if (m.cap < 2 || (m.cap & (m.cap - 1)) != 0 || 2 * nloc > m.cap || n_items(&b[2]) < nloc) {
        PyErr_SetString(PyExc_ValueError, "_ck_linear.rehash: bad table sizes");
        return NULL;
    }
    const int64_t *cols = b[2].view.buf;
    for (Py_ssize_t j = 0; j < nloc; j++) {
        Py_ssize_t p = probe(&m, cols[j]);
        m.keys[p] = cols[j];
        m.slot[p] = j;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    KS_METHOD(score, "score(w, keys, slot, idx, vals) -> <w, x>"),
    KS_METHOD(update, "update(rule, prm, ist, fst, w, keys, slot, cols, idx, vals, y, f) -> int"),
    KS_METHOD(run, "run(rule, prm, ist, fst, w, keys, slot, cols, indptr, indices, data, y, "
                   "start, out, nsv) -> stop"),
    KS_METHOD(rehash, "rehash(keys, slot, cols, nloc)"),
    {NULL, NULL, 0, NULL}};

KS_MODULE(_ck_linear, "The primal linear learners' weight vector and block driver.", KL_ABI)
