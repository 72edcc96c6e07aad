/* The primal form of the linear-kernel Perceptron, PA-I and OGD (kernelstream.learners._primal):
 * one weight vector w instead of support vectors, f(x) = scale * <w, x>.
 *
 * Dense rows use a dense w of width d. Sparse rows keep w in an open-addressing hash table of
 * (column, weight) entries (one float64 array of 2 * cap, linear probing, load <= 1/2, key -1:
 * empty), so a non-zero costs one probe of one cache line and no work and no memory follows the
 * largest index. Every array is numpy's (the learner's state); a table that could overflow on a
 * row makes the call stop (run) or refuse (update) before touching anything, and the Python
 * side grows it (rehash) and calls again.
 *
 * Numerical rules as _ckernels.c: sums are sequential in the row's order (no FMA contraction,
 * no reassociation), so the block driver and the per-example path agree bit for bit, and a
 * model of integers on integer data stays exact. ``scale`` is OGD's shrink (1 otherwise:
 * multiplying or dividing by it is then exact). */
#define KS_EXT_NAME "_ck_linear" /* names the module in its argument errors */
#include "_ck_common.h"

#define KL_ABI 1
enum { R_PERCEPTRON = 0, R_PA1 = 1, R_OGD_HINGE = 2, R_ADD = 3 };
enum { I_TERMS = 0, I_NLOC = 1 };    /* ist: terms added (the dual's SV count), entries */
enum { F_SCALE = 0, F_NORM2 = 1 };   /* fst: the weight's scale, ||f||^2 */
#define RESCALE_BELOW 1e-150         /* fold a shrinking scale into w before it underflows */

typedef struct {
    int64_t key; /* the column, -1: an empty entry */
    double w;
} Entry;

typedef struct {
    double *w; /* dense w (tab == NULL) */
    Py_ssize_t wlen;
    Entry *tab; /* sparse w */
    Py_ssize_t cap; /* entries, a power of two */
    int bits;
} Model;

static inline int log2_of(Py_ssize_t cap) {
    int bits = 0;
    while (((Py_ssize_t)1 << bits) < cap) bits++;
    return bits;
}

static inline Py_ssize_t home(const Model *m, int64_t k) {
    return (Py_ssize_t)(((uint64_t)k * 0x9E3779B97F4A7C15ULL) >> (64 - m->bits));
}

/* Ask for the home entry of the non-zero PREFETCH places ahead (the table outgrows the
 * caches on text: a probe is a cache miss, and a row's probes are independent). */
#define PREFETCH 8
#if defined(__GNUC__)
#define KL_PREFETCH(m, idx, i, n) \
    do { if ((i) + PREFETCH < (n)) __builtin_prefetch(&(m)->tab[home((m), (idx)[(i) + PREFETCH])]); } while (0)
#else
#define KL_PREFETCH(m, idx, i, n) ((void)0)
#endif

static inline Py_ssize_t probe(const Model *m, int64_t k) {
    Py_ssize_t mask = m->cap - 1, p = home(m, k);
    while (m->tab[p].key != k && m->tab[p].key != -1) p = (p + 1) & mask;
    return p;
}

/* <w, x> of a sparse row (columns no update has touched add nothing) or a dense one. */
static inline double dot_w(const Model *m, const int64_t *idx, const double *v, Py_ssize_t n) {
    double s = 0.0;
    if (m->tab == NULL) {
        if (idx == NULL)
            for (Py_ssize_t i = 0; i < n; i++) s += m->w[i] * v[i];
        else
            for (Py_ssize_t i = 0; i < n; i++) s += m->w[idx[i]] * v[i];
        return s;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        KL_PREFETCH(m, idx, i, n);
        const Entry *e = &m->tab[probe(m, idx[i])];
        if (e->key != -1) s += e->w * v[i];
    }
    return s;
}

/* w += c * x, new columns given new entries (room checked by the caller). */
static inline void axpy_w(Model *m, int64_t *ist, const int64_t *idx, const double *v,
                          Py_ssize_t n, double c) {
    if (m->tab == NULL) {
        if (idx == NULL)
            for (Py_ssize_t i = 0; i < n; i++) m->w[i] += c * v[i];
        else
            for (Py_ssize_t i = 0; i < n; i++) m->w[idx[i]] += c * v[i];
        return;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        KL_PREFETCH(m, idx, i, n);
        Entry *e = &m->tab[probe(m, idx[i])];
        if (e->key == -1) {
            ist[I_NLOC]++;
            e->key = idx[i];
            e->w = 0.0;
        }
        e->w += c * v[i];
    }
}

static inline int room(const Model *m, const int64_t *ist, Py_ssize_t n) {
    return m->tab == NULL || 2 * (ist[I_NLOC] + n) <= m->cap;
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
                if (m->tab == NULL)
                    for (Py_ssize_t j = 0; j < m->wlen; j++) m->w[j] *= fst[F_SCALE];
                else /* empty entries hold 0 */
                    for (Py_ssize_t j = 0; j < m->cap; j++) m->tab[j].w *= fst[F_SCALE];
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

/* The model from its buffers: a dense w (b[0]) or a table (b[1], 2 * cap float64). */
static int take_model(Buf *b, Model *m) {
    m->tab = NULL;
    m->w = NULL;
    m->wlen = m->cap = 0;
    if (b[0].held) {
        m->w = b[0].view.buf;
        m->wlen = n_items(&b[0]);
        return 0;
    }
    m->cap = n_items(&b[1]) / 2;
    if (!b[1].held || m->cap < 2 || (m->cap & (m->cap - 1)) != 0) {
        PyErr_SetString(PyExc_ValueError, "_ck_linear: bad table size");
        return -1;
    }
    m->tab = (Entry *)b[1].view.buf;
    m->bits = log2_of(m->cap);
    return 0;
}

KS_ENTRY(score, 4, 4) {
    /* score(w, tab, idx, vals) -> <w, x>: a dense w (tab None) or a table (w None); idx None:
     * a dense row */
    if (get_bufs(args, b, "D0? w, D1? tab, q2? idx, d3 vals") < 0) return NULL;
    Model m;
    if (take_model(b, &m) < 0) return NULL;
    const int64_t *idx = b[2].held ? b[2].view.buf : NULL;
    Py_ssize_t n = n_items(&b[3]);
    if ((idx == NULL) != (m.tab == NULL) || (idx == NULL && n != m.wlen)) {
        PyErr_SetString(PyExc_ValueError, "_ck_linear.score: row and w do not match");
        return NULL;
    }
    return PyFloat_FromDouble(dot_w(&m, idx, b[3].view.buf, n));
}

KS_ENTRY(update, 10, 8) {
    /* update(rule, prm, ist, fst, w, tab, idx, vals, y, f) -> 1 (a term added), 0 (no
     * update), -1 (the table has no room for the row: nothing changed) */
    if (get_bufs(args, b, "D4? w, D5? tab, d1 prm, Q2 ist, D3 fst, q6? idx, d7 vals") < 0)
        return NULL;
    Model m;
    if (take_model(b, &m) < 0) return NULL;
    int rule = (int)PyLong_AsLong(args[0]);
    double y = PyFloat_AsDouble(args[8]), f = PyFloat_AsDouble(args[9]);
    if (PyErr_Occurred()) return NULL;
    const int64_t *idx = b[5].held ? b[5].view.buf : NULL;
    Py_ssize_t n = n_items(&b[6]);
    if ((idx == NULL) != (m.tab == NULL) || (idx == NULL && n != m.wlen)) {
        PyErr_SetString(PyExc_ValueError, "_ck_linear.update: row and w do not match");
        return NULL;
    }
    int64_t *ist = b[3].view.buf;
    if (!room(&m, ist, n)) return PyLong_FromLong(-1);
    return PyLong_FromLong(update_row(&m, rule, b[2].view.buf, ist, b[4].view.buf, idx,
                                      b[6].view.buf, n, y, f));
}

KS_ENTRY(run, 13, 11) {
    /* run(rule, prm, ist, fst, w, tab, indptr, indices, data, y, start, out, nsv) -> stop:
     * test-then-train over rows start.. of a block (indptr None: data is a dense C-ordered
     * block of rows as wide as w); out[i] = row i's score, nsv[i] (or None) the terms after
     * it. Stops before a row the table has no room for (or at the end). */
    if (get_bufs(args, b, "D4? w, D5? tab, d1 prm, Q2 ist, D3 fst, q6? indptr, q7? indices, "
                          "d8 data, d9 y, D11 out, Q12? nsv") < 0)
        return NULL;
    Model m;
    if (take_model(b, &m) < 0) return NULL;
    int rule = (int)PyLong_AsLong(args[0]);
    Py_ssize_t start = PyLong_AsSsize_t(args[10]);
    if (PyErr_Occurred()) return NULL;
    const double *prm = b[2].view.buf, *data = b[7].view.buf, *yv = b[8].view.buf;
    int64_t *ist = b[3].view.buf, *nsv = b[10].held ? b[10].view.buf : NULL;
    double *fst = b[4].view.buf, *out = b[9].view.buf;
    const int64_t *indptr = b[5].held ? b[5].view.buf : NULL;
    const int64_t *indices = b[6].held ? b[6].view.buf : NULL;
    Py_ssize_t rows = n_items(&b[8]), i = start;
    if (n_items(&b[9]) < rows || (nsv != NULL && n_items(&b[10]) < rows) || start < 0
        || (indptr != NULL && (m.tab == NULL || indices == NULL || n_items(&b[5]) != rows + 1
                               || indptr[rows] > n_items(&b[6]) || indptr[rows] > n_items(&b[7])))
        || (indptr == NULL && (m.tab != NULL || n_items(&b[7]) != rows * m.wlen))) {
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

KS_ENTRY(insert, 3, 3) {
    /* insert(tab, cols, w): put the distinct columns cols with weights w into an empty table
     * (every key -1) with room for them (load <= 1/2) */
    if (get_bufs(args, b, "D0 tab, q1 cols, d2 w") < 0) return NULL;
    Model m;
    m.tab = (Entry *)b[0].view.buf;
    m.cap = n_items(&b[0]) / 2;
    Py_ssize_t n = n_items(&b[1]);
    if (m.cap < 2 || (m.cap & (m.cap - 1)) != 0 || 2 * n > m.cap || n_items(&b[2]) != n) {
        PyErr_SetString(PyExc_ValueError, "_ck_linear.insert: bad table sizes");
        return NULL;
    }
    m.bits = log2_of(m.cap);
    const int64_t *cols = b[1].view.buf;
    const double *w = b[2].view.buf;
    for (Py_ssize_t j = 0; j < n; j++) {
        Entry *e = &m.tab[probe(&m, cols[j])];
        if (e->key != -1) {
            PyErr_SetString(PyExc_ValueError, "_ck_linear.insert: a repeated column");
            return NULL;
        }
        e->key = cols[j];
        e->w = w[j];
    }
    Py_RETURN_NONE;
}

/* ---- the column index of the sparse support-vector store (store.SparseSVStore) -----------
 * global column -> local id, in an open-addressing table of (key, id) int64 pairs (2 * cap,
 * key -1: empty, load <= 1/2): a lookup or an insertion costs the row's non-zeros. */

typedef struct {
    int64_t key, id;
} Col;

static inline Py_ssize_t col_probe(const Col *t, Py_ssize_t cap, int bits, int64_t k) {
    Py_ssize_t mask = cap - 1;
    Py_ssize_t p = (Py_ssize_t)(((uint64_t)k * 0x9E3779B97F4A7C15ULL) >> (64 - bits));
    while (t[p].key != k && t[p].key != -1) p = (p + 1) & mask;
    return p;
}

static int col_table(Buf *b, Col **t, Py_ssize_t *cap, int *bits) {
    *cap = n_items(b) / 2;
    if (*cap < 2 || (*cap & (*cap - 1)) != 0) {
        PyErr_SetString(PyExc_ValueError, "_ck_linear: bad column table size");
        return -1;
    }
    *t = (Col *)b->view.buf;
    *bits = log2_of(*cap);
    return 0;
}

KS_ENTRY(col_find, 3, 3) {
    /* col_find(tab, cols, out) -> found: out[i] = the local id of cols[i], or -1 */
    if (get_bufs(args, b, "q0 tab, q1 cols, Q2 out") < 0) return NULL;
    Col *t;
    Py_ssize_t cap, n = n_items(&b[1]), found = 0;
    int bits;
    if (col_table(&b[0], &t, &cap, &bits) < 0) return NULL;
    if (n_items(&b[2]) < n) {
        PyErr_SetString(PyExc_ValueError, "_ck_linear.col_find: out is too short");
        return NULL;
    }
    const int64_t *cols = b[1].view.buf;
    int64_t *out = b[2].view.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        const Col *c = &t[col_probe(t, cap, bits, cols[i])];
        out[i] = c->key == -1 ? -1 : c->id;
        found += c->key != -1;
    }
    return PyLong_FromSsize_t(found);
}

KS_ENTRY(col_intern, 4, 3) {
    /* col_intern(tab, cols, out, next) -> next': out[i] = the local id of cols[i], new columns
     * given next, next + 1, ... in order; -1 (nothing changed) if the table might overflow */
    if (get_bufs(args, b, "Q0 tab, q1 cols, Q2 out") < 0) return NULL;
    Col *t;
    Py_ssize_t cap, n = n_items(&b[1]);
    int bits;
    if (col_table(&b[0], &t, &cap, &bits) < 0) return NULL;
    int64_t next = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred()) return NULL;
    if (n_items(&b[2]) < n) {
        PyErr_SetString(PyExc_ValueError, "_ck_linear.col_intern: out is too short");
        return NULL;
    }
    const int64_t *cols = b[1].view.buf;
    int64_t *out = b[2].view.buf;
    /* room even if every column is new: next (the ids given) bounds the entries */
    if (2 * (next + n) > cap) return PyLong_FromLongLong(-1);
    for (Py_ssize_t i = 0; i < n; i++) {
        Col *c = &t[col_probe(t, cap, bits, cols[i])];
        if (c->key == -1) {
            c->key = cols[i];
            c->id = next++;
        }
        out[i] = c->id;
    }
    return PyLong_FromLongLong(next);
}

static PyMethodDef methods[] = {
    KS_METHOD(score, "score(w, tab, idx, vals) -> <w, x>"),
    KS_METHOD(update, "update(rule, prm, ist, fst, w, tab, idx, vals, y, f) -> int"),
    KS_METHOD(run, "run(rule, prm, ist, fst, w, tab, indptr, indices, data, y, start, out, "
                   "nsv) -> stop"),
    KS_METHOD(insert, "insert(tab, cols, w)"),
    KS_METHOD(col_find, "col_find(tab, cols, out) -> found"),
    KS_METHOD(col_intern, "col_intern(tab, cols, out, next) -> next (-1: no room)"),
    {NULL, NULL, 0, NULL}};

KS_MODULE(_ck_linear, "The primal linear learners' weight vector and block driver.", KL_ABI)
