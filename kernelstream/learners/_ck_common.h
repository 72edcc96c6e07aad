/* What every compiled kernel module shares (kernelstream.learners.compiled): buffer access
 * (get_buf, and get_bufs for a call's arguments by a spec), the frame of an entry point
 * (KS_ENTRY) and of a module (KS_METHOD, KS_MODULE), the trigger test, and the arithmetic:
 * squared norms, dots, the kernel row and score of one example against a store, Gaussian rows
 * that keep their distances, dot4, the register-blocked column sums and numpy's argmin and
 * searchsorted. Static functions: each module that includes this compiles its own copy of the
 * same code, so every module computes a row with the same instructions. See _ckernels.c for
 * the numerical rules (sequential sums, no FMA contraction). */
#ifndef KS_CK_COMMON_H
#define KS_CK_COMMON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#ifndef KS_EXT_NAME
#define KS_EXT_NAME "_ckernels" /* each module's .c defines its own name */
#endif

#ifndef KS_SOURCE_HASH
#define KS_SOURCE_HASH "" /* setup.py defines the sources' hash */
#endif

/* Run-time dispatch of a vectorisable loop to AVX2/AVX-512 where the compiler supports it
 * (the default clone is plain SSE2); the clones compute identical numbers (no FMA, no
 * reassociation: each element sees the same IEEE operations at any vector width). */
#if defined(__x86_64__) && defined(__linux__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define KS_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef KS_CLONES
#define KS_CLONES
#endif

enum { K_GAUSSIAN = 0, K_POLYNOMIAL = 1, K_LINEAR = 2 };
enum { T_ALWAYS = 0, T_MISTAKE = 1, T_MARGIN = 2 }; /* compiled.TRIGGERS */

/* Does the round with label y and score f update the model? (the learner's own early return,
 * written as its module does) */
static inline int fires(int trigger, double y, double f) {
    switch (trigger) {
    case T_MISTAKE: return !(y * f > 0.0);
    case T_MARGIN: return !(y * f >= 1.0);
    default: return 1;
    }
}

typedef struct {
    Py_buffer view;
    int held; /* 1: a buffer to release, 2: the array's reference (the numpy lane below) */
} Buf;

/* numpy's array and dtype objects up to the fields read here: PyArrayObject_fields and
 * PyArray_Descr of numpy's public headers, whose leading fields are the same in numpy 1.x and
 * 2.x (2.x kept a char where 1.x had its flags, so type_num did not move). */
typedef struct {
    PyObject_HEAD
    char *data;
    int nd;
    Py_ssize_t *dimensions;
    Py_ssize_t *strides;
    PyObject *base;
    PyObject *descr;
    int flags;
} ks_array_head;
typedef struct {
    PyObject_HEAD
    PyTypeObject *typeobj;
    char kind, type, byteorder, former_flags;
    int type_num;
} ks_descr_head;
enum { KS_C_CONTIGUOUS = 0x0001, KS_ALIGNED = 0x0100, KS_WRITEABLE = 0x0400 }; /* NPY_ARRAY_* */
enum { KS_NPY_LONG = 7, KS_NPY_LONGLONG = 9, KS_NPY_DOUBLE = 12 };     /* NPY_TYPES */

/* numpy.ndarray, looked up when the module is made (ks_module); NULL: buffers only. */
static PyTypeObject *ks_ndarray = NULL;

/* The numpy lane of take_buf: an exact numpy.ndarray that is C-contiguous, aligned, writable
 * when asked and of native float64 ('d') / int64 ('q') is read from its own fields, which
 * costs nothing next to the buffer protocol (numpy builds a format string and a shape copy
 * per request; a call that takes a dozen arrays paid about a microsecond for them, as much
 * as the arithmetic of a small round). 0 on success, else 1 (take the buffer way). */
static inline int take_array(PyObject *obj, Buf *b, int writable, char fmt) {
    const ks_array_head *a = (const ks_array_head *)obj;
    const ks_descr_head *t = (const ks_descr_head *)a->descr;
    int need = KS_C_CONTIGUOUS | KS_ALIGNED | (writable ? KS_WRITEABLE : 0);
    const char native = PY_LITTLE_ENDIAN ? '<' : '>';
    int ok = fmt == 'd' ? t->type_num == KS_NPY_DOUBLE
                        : t->type_num == KS_NPY_LONGLONG
                              || (t->type_num == KS_NPY_LONG && sizeof(long) == 8);
    if (!ok || (a->flags & need) != need || (t->byteorder != '=' && t->byteorder != native))
        return 1;
    Py_ssize_t len = 8;
    for (int i = 0; i < a->nd; i++) len *= a->dimensions[i];
    b->view.buf = a->data;
    b->view.len = len;
    b->view.ndim = a->nd;
    b->view.shape = a->dimensions;
    b->view.itemsize = 8;
    b->view.obj = obj;
    Py_INCREF(obj);
    b->held = 2;
    return 0;
}

/* Takes obj's buffer into b: 0, or why it is refused (1: not a C-contiguous, writable when
 * asked, array; 2: not of type fmt, 'd' float64 or 'q' int64). No exception is set. Only
 * view.buf, .len, .ndim and .shape are read afterwards (and .itemsize, .format here). */
static inline int take_buf(PyObject *obj, Buf *b, int writable, char fmt) {
    if (ks_ndarray != NULL && Py_TYPE(obj) == ks_ndarray && take_array(obj, b, writable, fmt) == 0)
        return 0;
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &b->view, flags) < 0) {
        PyErr_Clear();
        return 1;
    }
    b->held = 1;
    const char *f = b->view.format;
    if (f[0] == '<' || f[0] == '=' || f[0] == '@') f++;
    int ok = b->view.itemsize == 8 && (f[0] == fmt || (fmt == 'q' && f[0] == 'l')) && f[1] == '\0';
    return ok ? 0 : 2;
}

/* The TypeError of a buffer take_buf refused (why), naming the argument: -1. */
static inline int buf_error(int why, const char *name, int writable, char fmt) {
    if (why == 1)
        PyErr_Format(PyExc_TypeError, KS_EXT_NAME ": %s must be a C-contiguous%s array", name,
                     writable ? " writable" : "");
    else
        PyErr_Format(PyExc_TypeError, KS_EXT_NAME ": %s must be %s", name,
                     fmt == 'd' ? "float64" : "int64");
    return -1;
}

static inline int get_buf(PyObject *obj, Buf *b, int writable, const char *name, char fmt) {
    int why = take_buf(obj, b, writable, fmt);
    return why ? buf_error(why, name, writable, fmt) : 0;
}

static inline void release(Buf *bufs, int n) {
    for (int i = 0; i < n; i++)
        if (bufs[i].held) {
            if (bufs[i].held == 2)
                Py_DECREF(bufs[i].view.obj);
            else
                PyBuffer_Release(&bufs[i].view);
            bufs[i].held = 0;
        }
}

static inline Py_ssize_t n_items(const Buf *b) { return b->view.len / 8; }

/* Takes the buffers a spec names into b[0], b[1], ... in order (the caller releases them).
 * The spec is a comma-separated list of "<type><position>[?] <name>": type d (float64) or q
 * (int64), upper case when written to; position: the argument's index in args; "?": the
 * argument may be None (its buffer is then left unheld). E.g. "d0 X, D3 out, Q4? nsv". */
static inline int get_bufs(PyObject *const *args, Buf *b, const char *spec) {
    const char *s = spec;
    for (int i = 0; *s; i++) {
        char type = *s++, name[32];
        Py_ssize_t pos = 0; /* the spec is read on every call: no strtol, no copies */
        while (*s >= '0' && *s <= '9') pos = pos * 10 + (*s++ - '0');
        int optional = *s == '?';
        const char *nm = s + optional + 1; /* after the space before the name */
        for (s = nm; *s && *s != ','; s++) {}
        size_t len = (size_t)(s - nm);
        while (*s == ',' || *s == ' ') s++;
        if (optional && args[pos] == Py_None) continue;
        int writable = type == 'D' || type == 'Q', why;
        char fmt = (char)tolower(type);
        if ((why = take_buf(args[pos], &b[i], writable, fmt)) != 0) {
            snprintf(name, sizeof name, "%.*s", (int)len, nm); /* only to say which */
            return buf_error(why, name, writable, fmt);
        }
    }
    return 0;
}

/* The rows and width of a store's matrix X, or -1 with a ValueError naming mod.fn. */
static inline int store_shape(const Buf *X, Py_ssize_t *cap, Py_ssize_t *d, const char *mod,
                              const char *fn) {
    if (X->view.ndim != 2) {
        PyErr_Format(PyExc_ValueError, "%s.%s: X must be 2-D", mod, fn);
        return -1;
    }
    *cap = X->view.shape[0];
    *d = X->view.shape[1];
    return 0;
}

/* 0 for a kernel code the rows know (compiled.KERNEL_CODES), else -1 with a ValueError. */
static inline int check_kernel(int kind, const char *mod, const char *fn) {
    if (kind >= K_GAUSSIAN && kind <= K_LINEAR) return 0;
    PyErr_Format(PyExc_ValueError, "%s.%s: unknown kernel code %d", mod, fn, kind);
    return -1;
}

/* 1 when a call got its n arguments, else 0 with a TypeError naming fn. */
static inline int nargs_ok(Py_ssize_t nargs, Py_ssize_t n, const char *fn) {
    if (nargs == n) return 1;
    PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments, got %zd", fn, n, nargs);
    return 0;
}

/* ---- entry points --------------------------------------------------------------------- */

#define KS_MAX_BUFS 24
typedef PyObject *(*ks_body)(PyObject *const *args, Buf *b);

/* The frame of an entry point: its argument count, room for nbufs buffers (body takes them
 * into b and returns its result, or NULL with an exception set), and their release whatever
 * body returned, so a body can return from anywhere. */
static inline PyObject *with_bufs(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want,
                                  const char *fn, int nbufs, ks_body body) {
    if (!nargs_ok(nargs, want, fn)) return NULL;
    Buf b[KS_MAX_BUFS];
    memset(b, 0, (size_t)nbufs * sizeof *b);
    PyObject *res = body(args, b);
    release(b, nbufs);
    return res;
}

/* Entry point py_NAME of NARGS arguments and at most NBUFS buffers (<= KS_MAX_BUFS): the
 * block that follows is its body, with args and b in scope (with_bufs). */
#define KS_ENTRY(NAME, NARGS, NBUFS)                                                          \
    static PyObject *NAME##_body(PyObject *const *args, Buf *b);                              \
    static PyObject *py_##NAME(PyObject *Py_UNUSED(self), PyObject *const *args,              \
                               Py_ssize_t nargs) {                                            \
        _Static_assert((NBUFS) <= KS_MAX_BUFS, "KS_MAX_BUFS is too small");                  \
        return with_bufs(args, nargs, NARGS, #NAME, NBUFS, NAME##_body);                      \
    }                                                                                         \
    static PyObject *NAME##_body(PyObject *const *args, Buf *b)

/* ---- module glue ---------------------------------------------------------------------- */

/* A METH_FASTCALL entry of a method table: py_NAME, documented by DOC. */
#define KS_METHOD(NAME, DOC) {#NAME, (PyCFunction)(void (*)(void))py_##NAME, METH_FASTCALL, DOC}

/* The module of a method table, with its ABI and the sources' hash (compiled.py refuses a
 * build whose numbers do not match its own). */
static inline PyObject *ks_module(struct PyModuleDef *def, int abi) {
    PyObject *mod = PyModule_Create(def);
    if (mod == NULL) return NULL;
    /* numpy.ndarray for take_array; without numpy every array takes the buffer way */
    PyObject *np = PyImport_ImportModule("numpy");
    PyObject *nd = np ? PyObject_GetAttrString(np, "ndarray") : NULL;
    Py_XDECREF(np);
    if (nd != NULL && PyType_Check(nd))
        ks_ndarray = (PyTypeObject *)nd; /* kept for the module's lifetime */
    else
        Py_XDECREF(nd);
    PyErr_Clear();
    if (PyModule_AddIntConstant(mod, "ABI", abi) < 0
        || PyModule_AddStringConstant(mod, "SOURCE_HASH", KS_SOURCE_HASH) < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}

/* The module definition `module` of extension NAME from its table `methods`. */
#define KS_MODULE_DEF(NAME, DOC)                                                              \
    static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, #NAME, DOC, -1, methods,       \
                                        NULL, NULL, NULL, NULL}

/* The definition and the init function of extension NAME (one with nothing else to add). */
#define KS_MODULE(NAME, DOC, ABI)                                                             \
    KS_MODULE_DEF(NAME, DOC);                                                                 \
    PyMODINIT_FUNC PyInit_##NAME(void) { return ks_module(&module, ABI); }

/* ---- the arithmetic ------------------------------------------------------------------- */

/* ||x||^2, summed in index order. */
static inline double sqnorm(const double *x, Py_ssize_t d) {
    double s = 0.0;
    for (Py_ssize_t i = 0; i < d; i++) s += x[i] * x[i];
    return s;
}

/* Positions of the non-zeros of z; returns their count. */
static inline Py_ssize_t nonzeros(const double *z, Py_ssize_t d, Py_ssize_t *nz) {
    Py_ssize_t m = 0;
    for (Py_ssize_t i = 0; i < d; i++)
        if (z[i] != 0.0) nz[m++] = i;
    return m;
}

/* k_j = <X_j, z> for the n stored rows (row-major, width d), over the positions IDX(t) of
 * t < m: four rows at a time, four independent sums, each in index order. Written once for
 * the dense example (IDX(t) = t: contiguous reads) and once for its non-zeros nz[0..m). */
#define KS_DOTS(NAME, IDX)                                                                    \
    static inline void NAME(const double *X, Py_ssize_t n, Py_ssize_t d, const double *z,     \
                            const Py_ssize_t *nz, Py_ssize_t m, double *k) {                  \
        (void)nz;                                                                             \
        Py_ssize_t j = 0;                                                                     \
        for (; j + 4 <= n; j += 4) {                                                          \
            const double *x0 = X + j * d, *x1 = x0 + d, *x2 = x1 + d, *x3 = x2 + d;           \
            double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;                                    \
            for (Py_ssize_t t = 0; t < m; t++) {                                              \
                Py_ssize_t i = IDX(t);                                                        \
                double zi = z[i];                                                             \
                s0 += x0[i] * zi;                                                             \
                s1 += x1[i] * zi;                                                             \
                s2 += x2[i] * zi;                                                             \
                s3 += x3[i] * zi;                                                             \
            }                                                                                 \
            k[j] = s0; k[j + 1] = s1; k[j + 2] = s2; k[j + 3] = s3;                           \
        }                                                                                     \
        for (; j < n; j++) {                                                                  \
            const double *x0 = X + j * d;                                                     \
            double s0 = 0.0;                                                                  \
            for (Py_ssize_t t = 0; t < m; t++) s0 += x0[IDX(t)] * z[IDX(t)];                  \
            k[j] = s0;                                                                        \
        }                                                                                     \
    }
#define KS_DENSE_IDX(t) (t)
#define KS_SPARSE_IDX(t) nz[t]
KS_DOTS(dots_dense, KS_DENSE_IDX)
KS_DOTS(dots_sparse, KS_SPARSE_IDX)

static inline void dots(const double *X, Py_ssize_t n, Py_ssize_t d, const double *z,
                        const Py_ssize_t *nz, Py_ssize_t m, double *k) {
    if (m == d)
        dots_dense(X, n, d, z, nz, m, k);
    else
        dots_sparse(X, n, d, z, nz, m, k);
}

/* The kernel row k_j = kappa(X_j, x) of the n stored rows, in the order of the numpy
 * reference (kernels.Gaussian.row): (-2 <x, z> + ||x||^2) + ||z||^2, clipped at 0, times
 * -gamma, exponentiated; a polynomial's power of the dots. */
static inline void kernel_row(const double *X, const double *sqn, Py_ssize_t n, Py_ssize_t d,
                              const double *x, double xx, int kind, double p, long degree,
                              Py_ssize_t *nz, double *k) {
    Py_ssize_t m = nonzeros(x, d, nz);
    dots(X, n, d, x, nz, m, k);
    if (kind == K_GAUSSIAN) {
        for (Py_ssize_t j = 0; j < n; j++) {
            double v = k[j] * -2.0;
            v += sqn[j];
            v += xx;
            if (!(v > 0.0)) v = 0.0; /* round-off can make a distance slightly negative */
            v *= p;
            /* exp underflows to exactly +0 below -746 (kernels.EXP_ZERO_BELOW); libm is slow
             * on such arguments */
            k[j] = v < -746.0 ? 0.0 : exp(v);
        }
    } else if (kind == K_POLYNOMIAL && degree != 1) {
        for (Py_ssize_t j = 0; j < n; j++)
            k[j] = degree == 2 ? k[j] * k[j] : pow(k[j], (double)degree);
    }
}

/* kernel_row() in k, and the score f = sum_j a_j k_j (index order). */
static inline double row_score(const double *X, const double *sqn, const double *a, Py_ssize_t n,
                               Py_ssize_t d, const double *z, double zz, int kind, double p,
                               long degree, Py_ssize_t *nz, double *k) {
    if (n == 0) return 0.0;
    kernel_row(X, sqn, n, d, z, zz, kind, p, degree, nz, k);
    double f = 0.0;
    for (Py_ssize_t j = 0; j < n; j++) f += a[j] * k[j];
    return f;
}

/* <u, v> in a fixed four-lane order: lane l sums the indices = l mod 4 in order, then
 * (l0 + l1) + (l2 + l3) (the feature maps' scores, the distance rules' scores, the
 * Projectron's k.d; numpy follows it: linalg.dot4) */
static inline double dot4(const double *u, const double *v, Py_ssize_t n) {
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    Py_ssize_t j = 0;
    for (; j + 4 <= n; j += 4) {
        s0 += u[j] * v[j];
        s1 += u[j + 1] * v[j + 1];
        s2 += u[j + 2] * v[j + 2];
        s3 += u[j + 3] * v[j + 3];
    }
    for (; j < n; j++) s0 += u[j] * v[j];
    return (s0 + s1) + (s2 + s3);
}

/* Gaussian row that keeps its distances: d2_j = max(||X_j||^2 - 2 <X_j, x> + ||x||^2, 0) (in
 * that order, as the learners' numpy code), k_j = exp(-(d2_j g_j)) (g per centre, or one g). */
static inline void dist_row(const double *X, const double *sqn, Py_ssize_t n, Py_ssize_t d,
                     const double *x, double xx, const double *g, double g1, Py_ssize_t *nz,
                     double *d2, double *k) {
    Py_ssize_t m = nonzeros(x, d, nz);
    dots(X, n, d, x, nz, m, d2);
    for (Py_ssize_t j = 0; j < n; j++) {
        double v = d2[j] * -2.0;
        v += sqn[j];
        v += xx;
        if (!(v > 0.0)) v = 0.0;
        d2[j] = v;
        double e = -(v * (g ? g[j] : g1));
        k[j] = e < -746.0 ? 0.0 : exp(e);
    }
}

/* The index numpy's argmin gives over v_j = value(ctx, j), j < n: the first NaN, else the
 * first minimum (a store's removal choices: BPA-S's costs, OKS-SIL's smallest |a_j|). */
static inline Py_ssize_t argmin_nan_first(Py_ssize_t n, double (*value)(const void *, Py_ssize_t),
                                          const void *ctx) {
    Py_ssize_t best = 0;
    double vb = 0.0;
    for (Py_ssize_t j = 0; j < n; j++) {
        double v = value(ctx, j);
        if (v != v) return j;
        if (j == 0 || v < vb) {
            best = j;
            vb = v;
        }
    }
    return best;
}

/* numpy's searchsorted(c, v, side="right") over the n sorted values of c: the first j with
 * c_j > v (n when there is none). */
static inline Py_ssize_t search_right(const double *c, Py_ssize_t n, double v) {
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (c[mid] > v)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* z_l = sum_j A[j * stride + l] k_j (j < n, in index order) for the W columns l < W of a
 * row-major A: W sums kept in registers that advance side by side, one chain of n dependent
 * adds in all. W = 8m: 2m vectors of four (GCC's vector type: reliable register use, where
 * an array of W doubles vectorises poorly for some W); each lane does the scalar operations,
 * so the width changes no result. Four, not eight: on an AVX2 machine GCC 12 splits a vector
 * of eight through the stack (store-forwarding stalls, ~15x slower: NOGD's z = M k cost 9 us
 * of its 11 us round at B = 200, r = 20); a vector of four is one AVX2 / AVX-512 register.
 * The Projectron's K^-1 k and the feature maps' z = M k. */
typedef double ks_v4 __attribute__((vector_size(32)));
/* always inlined: an out-of-line copy would run the default (SSE2) code, not its caller's
 * clone (KS_CLONES) */
#define KS_INLINE static inline __attribute__((always_inline))
#define KS_COLS_BLOCK(W)                                                                      \
    KS_INLINE void cols_block##W(const double *A, Py_ssize_t n, Py_ssize_t stride,            \
                                 const double *k, double *z) {                               \
        ks_v4 acc[W / 4];                                                                     \
        for (int l = 0; l < W / 4; l++) acc[l] = (ks_v4){0.0};                                \
        for (Py_ssize_t j = 0; j < n; j++) {                                                  \
            const double *row = A + j * stride;                                               \
            double kj = k[j];                                                                 \
            for (int l = 0; l < W / 4; l++) {                                                 \
                ks_v4 r;                                                                      \
                memcpy(&r, row + 4 * l, sizeof r);                                            \
                acc[l] += r * kj;                                                             \
            }                                                                                 \
        }                                                                                     \
        memcpy(z, acc, sizeof acc);                                                           \
    }
KS_COLS_BLOCK(8)
KS_COLS_BLOCK(16)
KS_COLS_BLOCK(24)
KS_COLS_BLOCK(32)
KS_COLS_BLOCK(40)
KS_COLS_BLOCK(48)
KS_COLS_BLOCK(56)

/* cols_block for one column */
static inline void cols_block1(const double *A, Py_ssize_t n, Py_ssize_t stride,
                               const double *k, double *z) {
    double acc = 0.0;
    for (Py_ssize_t j = 0; j < n; j++) acc += A[j * stride] * k[j];
    z[0] = acc;
}

/* ||x - z||^2 of one stored row x (norm xx_) against z's compacted non-zeros (positions
 * nz[0..m), values zv; norm zz), clipped at 0: the sum of dots() for this row (index order
 * over z's non-zeros), then row_score's steps, so it equals that row's distance bit for bit. */
static inline double dist1(const double *x, double xx_, const Py_ssize_t *nz, const double *zv,
                           Py_ssize_t m, double zz) {
    double s = 0.0;
    for (Py_ssize_t t = 0; t < m; t++) s += x[nz[t]] * zv[t];
    double v = s * -2.0;
    v += xx_;
    v += zz;
    return v > 0.0 ? v : 0.0;
}

#endif /* KS_CK_COMMON_H */
