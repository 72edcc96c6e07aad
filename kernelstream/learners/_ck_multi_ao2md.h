/* _ck_multi's entry points for the AO2MD rounds (Liao & Li, ECML-PKDD 2021) that Python runs
 * (B(AO)2KS, EA2OKS's per-example path): mirror_correct, mirror_scale and ea2oks_step, over the
 * arithmetic of _ck_mirror.h. Included by _ck_multi.c only. */
#ifndef KS_CK_MULTI_AO2MD_H
#define KS_CK_MULTI_AO2MD_H
#include "_ck_mirror.h"

/* ---- mirror_correct (the AO2MD correction, OptimisticMirror.correct) ---------------------- */

KS_ENTRY(mirror_correct, 17, 14) {
    /* mirror_correct(stores, pos, v, kv, KVy, yv, a, b, fx, n2, m2, ip, mux, H, U2, radius,
     *                out)
     * First, for every kernel, H[i, :v] += a_i kv[i, :v] and then += (b_i / v) KVy[i, :v]
     * (numpy's two broadcast updates, element by element). Then, for every kernel i with
     * (a_i, b_i) != 0, after the caller appended x_t (coefficient a_i) and the reservoir
     * points store i lacked: the tracked norm of
     * f + a_i k(x_t, .) + b_i mu_i, the merge of b_i (y_V / v) into the store's
     * coefficients at pos[i, :v], the projection onto ||f|| <= radius (coefficients and H[i, :v]
     * scaled), n2[i] and the store's norm2 set, out[i] = f'_{t,i}(x_t). out[i] = fx[i] for the
     * others. The same IEEE operations in the same order as the Python loop it replaces.
     * stores: list of SVStore; pos, H, KVy: (K x M) C order; kv: (K x v) C order; yv: the
     * reservoir's labels (>= v). */
    PyObject *stores = args[0];
    if (!PyList_Check(stores))
        return PyErr_Format(PyExc_TypeError, "_ck_multi.mirror_correct: stores must be a list");
    Py_ssize_t K = PyList_GET_SIZE(stores), v = PyLong_AsSsize_t(args[2]);
    double U2 = PyFloat_AsDouble(args[14]), radius = PyFloat_AsDouble(args[15]);
    if (PyErr_Occurred()) return NULL;
    Buf *sa = &b[13]; /* one store's coefficients at a time */
    if (get_bufs(args, b, "q1 pos, d3 kv, d6 a, d7 b, d8 fx, D9 n2, d10 m2, d11 ip, d12 mux, "
                          "D13 H, D16 out, d4 KVy, d5 yv") < 0)
        return NULL;
    {
        Py_ssize_t M = b[9].view.ndim == 2 ? b[9].view.shape[1] : -1;
        if (M < 0 || v < 0 || v > M || b[0].view.ndim != 2 || b[0].view.shape[1] != M
            || b[0].view.shape[0] < K || b[9].view.shape[0] < K || n_items(&b[1]) < K * v
            || b[11].view.ndim != 2 || b[11].view.shape[1] != M || b[11].view.shape[0] < K
            || n_items(&b[12]) < v || n_items(&b[2]) < K || n_items(&b[3]) < K || n_items(&b[4]) < K
            || n_items(&b[5]) < K || n_items(&b[6]) < K || n_items(&b[7]) < K
            || n_items(&b[8]) < K || n_items(&b[10]) < K) {
            PyErr_SetString(PyExc_ValueError, "_ck_multi.mirror_correct: arrays have wrong sizes");
            return NULL;
        }
        const int64_t *pos = b[0].view.buf;
        const double *kv = b[1].view.buf, *A = b[2].view.buf, *B = b[3].view.buf,
                     *fx = b[4].view.buf, *m2 = b[6].view.buf, *ip = b[7].view.buf,
                     *mux = b[8].view.buf, *KVy = b[11].view.buf, *yv = b[12].view.buf;
        double *n2 = b[5].view.buf, *H = b[9].view.buf, *out = b[10].view.buf;
        mirror_h(K, v, M, A, B, kv, KVy, H);
        for (Py_ssize_t i = 0; i < K; i++) {
            double ai = A[i], bi = B[i];
            out[i] = fx[i];
            if (ai == 0.0 && bi == 0.0) continue;
            PyObject *sv = PyList_GET_ITEM(stores, i);
            PyObject *arr = PyObject_GetAttrString(sv, "a");
            PyObject *nobj = PyObject_GetAttrString(sv, "n");
            Py_ssize_t n = nobj ? PyLong_AsSsize_t(nobj) : -1;
            Py_XDECREF(nobj);
            if (arr == NULL || (n < 0 && PyErr_Occurred())) {
                Py_XDECREF(arr);
                return NULL;
            }
            int got = get_buf(arr, sa, 1, "store.a", 'd');
            Py_DECREF(arr);
            if (got < 0) return NULL;
            if (n_items(sa) < n) {
                PyErr_SetString(PyExc_ValueError, "_ck_multi.mirror_correct: store.a too short");
                return NULL;
            }
            const int64_t *p = pos + i * M;
            for (Py_ssize_t j = 0; bi != 0.0 && j < v; j++)
                if (p[j] < 0 || p[j] >= n) {
                    PyErr_SetString(PyExc_ValueError,
                                    "_ck_multi.mirror_correct: a reservoir point is not stored");
                    return NULL;
                }
            double fac, nn = mirror_correct1(sa->view.buf, n, p, v, yv, ai, bi, n2[i], m2[i], ip[i],
                                             fx[i], mux[i], U2, radius, H + i * M, &fac);
            release(sa, 1);
            n2[i] = nn;
            PyObject *f = PyFloat_FromDouble(nn);
            if (f == NULL || PyObject_SetAttrString(sv, "norm2", f) < 0) {
                Py_XDECREF(f);
                return NULL;
            }
            Py_DECREF(f);
            out[i] = fac * (fx[i] + ai + bi * mux[i]);
        }
    }
    Py_RETURN_NONE;
}

/* ---- mirror_scale, ea2oks_step: the K-vector arithmetic of a round ------------------- */

/* Whether the count buffers from b[first] on hold at least K items each. */
static int at_least(const Buf *b, int first, int count, Py_ssize_t K) {
    for (int i = first; i < first + count; i++)
        if (n_items(&b[i]) < K) return 0;
    return 1;
}

KS_ENTRY(mirror_scale, 8, 4) {
    /* mirror_scale(n2, ip, m2, lam, v, U2, radius, out): out[i] = min(1, U / ||fbar_i||) with
     * ||fbar_i||^2 = n2 + lam (2 ip + lam m2) (n2 alone when v = 0), as
     * OptimisticMirror.context writes it */
    double lam = PyFloat_AsDouble(args[3]), U2 = PyFloat_AsDouble(args[5]),
           radius = PyFloat_AsDouble(args[6]);
    Py_ssize_t v = PyLong_AsSsize_t(args[4]);
    if (PyErr_Occurred() || get_bufs(args, b, "d0 n2, d1 ip, d2 m2, D7 out") < 0) return NULL;
    Py_ssize_t K = n_items(&b[0]);
    if (!at_least(b, 1, 3, K))
        return PyErr_Format(PyExc_ValueError, "_ck_multi.mirror_scale: arrays have wrong sizes");
    const double *n2 = b[0].view.buf, *ip = b[1].view.buf, *m2 = b[2].view.buf;
    double *out = b[3].view.buf;
    for (Py_ssize_t i = 0; i < K; i++) {
        double nbar2 = v ? n2[i] + lam * (2.0 * ip[i] + lam * m2[i]) : n2[i];
        out[i] = nbar2 > U2 ? radius / sqrt(nbar2) : 1.0;
    }
    Py_RETURN_NONE;
}

KS_ENTRY(ea2oks_step, 11, 7) {
    /* ea2oks_step(f, y, m2, mux, lam, norm, beta, u, c, a, b) -> None
     * EA2OKS's per-kernel update constants (ea2oks.EA2OKS._update, ea2oks_consts): c, a, b
     * receive each kernel's expert loss and two coefficients. u holds one uniform per kernel
     * with margin y f_i < 1 (the caller draws them as the Python loop did, in kernel order). */
    double y = PyFloat_AsDouble(args[1]), lam = PyFloat_AsDouble(args[4]),
           norm = PyFloat_AsDouble(args[5]), beta = PyFloat_AsDouble(args[6]);
    if (PyErr_Occurred() || get_bufs(args, b, "d0 f, d2 m2, d3 mux, d7 u, D8 c, D9 a, D10 b") < 0)
        return NULL;
    Py_ssize_t K = n_items(&b[0]), nu = n_items(&b[3]);
    if (!at_least(b, 1, 2, K) || !at_least(b, 4, 3, K))
        return PyErr_Format(PyExc_ValueError, "_ck_multi.ea2oks_step: arrays have wrong sizes");
    if (ea2oks_consts(K, y, b[0].view.buf, b[1].view.buf, b[2].view.buf, lam, norm, beta,
                      b[3].view.buf, nu, b[4].view.buf, b[5].view.buf, b[6].view.buf) < 0)
        return PyErr_Format(PyExc_ValueError, "_ck_multi.ea2oks_step: too few uniforms");
    Py_RETURN_NONE;
}

#endif /* KS_CK_MULTI_AO2MD_H */
