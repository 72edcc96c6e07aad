/* _ck_multi's entry points for paper 001's AO2MD rounds that Python runs (B(AO)2KS, EA2OKS's
 * per-example path): mirror_correct, mirror_scale and ea2oks_step, over the arithmetic of
 * _ck_mirror.h. Included by _ck_multi.c only. */
#ifndef KS_CK_MULTI_AO2MD_H
#define KS_CK_MULTI_AO2MD_H
#include "_ck_mirror.h"

/* ---- mirror_correct (paper 001's AO2MD correction, OptimisticMirror.correct) ---------- */

static PyObject *py_mirror_correct(PyObject *Py_UNUSED(self), PyObject *const *args,
                                   Py_ssize_t nargs) {
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
    if (nargs != 17)
        return PyErr_Format(PyExc_TypeError, "mirror_correct() takes 17 arguments, got %zd",
                            nargs);
    PyObject *stores = args[0];
    if (!PyList_Check(stores))
        return PyErr_Format(PyExc_TypeError, "_ck_multi.mirror_correct: stores must be a list");
    Py_ssize_t K = PyList_GET_SIZE(stores), v = PyLong_AsSsize_t(args[2]);
    double U2 = PyFloat_AsDouble(args[14]), radius = PyFloat_AsDouble(args[15]);
    if (PyErr_Occurred()) return NULL;
    Buf b[13];
    memset(b, 0, sizeof b);
    Buf sa;
    memset(&sa, 0, sizeof sa);
    if (get_buf(args[1], &b[0], 0, "pos", 'q') < 0 || get_buf(args[3], &b[1], 0, "kv", 'd') < 0
        || get_buf(args[6], &b[2], 0, "a", 'd') < 0 || get_buf(args[7], &b[3], 0, "b", 'd') < 0
        || get_buf(args[8], &b[4], 0, "fx", 'd') < 0 || get_buf(args[9], &b[5], 1, "n2", 'd') < 0
        || get_buf(args[10], &b[6], 0, "m2", 'd') < 0 || get_buf(args[11], &b[7], 0, "ip", 'd') < 0
        || get_buf(args[12], &b[8], 0, "mux", 'd') < 0
        || get_buf(args[13], &b[9], 1, "H", 'd') < 0
        || get_buf(args[16], &b[10], 1, "out", 'd') < 0
        || get_buf(args[4], &b[11], 0, "KVy", 'd') < 0
        || get_buf(args[5], &b[12], 0, "yv", 'd') < 0)
        goto fail;
    {
        Py_ssize_t M = b[9].view.ndim == 2 ? b[9].view.shape[1] : -1;
        if (M < 0 || v < 0 || v > M || b[0].view.ndim != 2 || b[0].view.shape[1] != M
            || b[0].view.shape[0] < K || b[9].view.shape[0] < K || n_items(&b[1]) < K * v
            || b[11].view.ndim != 2 || b[11].view.shape[1] != M || b[11].view.shape[0] < K
            || n_items(&b[12]) < v || n_items(&b[2]) < K || n_items(&b[3]) < K || n_items(&b[4]) < K
            || n_items(&b[5]) < K || n_items(&b[6]) < K || n_items(&b[7]) < K
            || n_items(&b[8]) < K || n_items(&b[10]) < K) {
            PyErr_SetString(PyExc_ValueError, "_ck_multi.mirror_correct: arrays have wrong sizes");
            goto fail;
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
            PyObject *arr = PyObject_GetAttrString(sv, "a"), *nobj = PyObject_GetAttrString(sv, "n");
            Py_ssize_t n = nobj ? PyLong_AsSsize_t(nobj) : -1;
            Py_XDECREF(nobj);
            if (arr == NULL || (n < 0 && PyErr_Occurred())) {
                Py_XDECREF(arr);
                goto fail;
            }
            int got = get_buf(arr, &sa, 1, "store.a", 'd');
            Py_DECREF(arr);
            if (got < 0) goto fail;
            if (n_items(&sa) < n) {
                PyErr_SetString(PyExc_ValueError, "_ck_multi.mirror_correct: store.a too short");
                goto fail;
            }
            const int64_t *p = pos + i * M;
            for (Py_ssize_t j = 0; bi != 0.0 && j < v; j++)
                if (p[j] < 0 || p[j] >= n) {
                    PyErr_SetString(PyExc_ValueError,
                                    "_ck_multi.mirror_correct: a reservoir point is not stored");
                    goto fail;
                }
            double fac, nn = mirror_correct1(sa.view.buf, n, p, v, yv, ai, bi, n2[i], m2[i], ip[i],
                                             fx[i], mux[i], U2, radius, H + i * M, &fac);
            release(&sa, 1);
            n2[i] = nn;
            PyObject *f = PyFloat_FromDouble(nn);
            if (f == NULL || PyObject_SetAttrString(sv, "norm2", f) < 0) {
                Py_XDECREF(f);
                goto fail;
            }
            Py_DECREF(f);
            out[i] = fac * (fx[i] + ai + bi * mux[i]);
        }
    }
    release(b, 13);
    Py_RETURN_NONE;
fail:
    release(&sa, 1);
    release(b, 13);
    return NULL;
}

/* ---- mirror_scale, ea2oks_step: the K-vector arithmetic of a round ------------------- */

static PyObject *py_mirror_scale(PyObject *Py_UNUSED(self), PyObject *const *args,
                                 Py_ssize_t nargs) {
    /* mirror_scale(n2, ip, m2, lam, v, U2, radius, out): out[i] = min(1, U / ||fbar_i||) with
     * ||fbar_i||^2 = n2 + lam (2 ip + lam m2) (n2 alone when v = 0), as
     * OptimisticMirror.context writes it */
    if (nargs != 8) return PyErr_Format(PyExc_TypeError, "mirror_scale() takes 8 arguments");
    double lam = PyFloat_AsDouble(args[3]), U2 = PyFloat_AsDouble(args[5]),
           radius = PyFloat_AsDouble(args[6]);
    Py_ssize_t v = PyLong_AsSsize_t(args[4]);
    if (PyErr_Occurred()) return NULL;
    Buf b[4];
    memset(b, 0, sizeof b);
    if (get_buf(args[0], &b[0], 0, "n2", 'd') < 0 || get_buf(args[1], &b[1], 0, "ip", 'd') < 0
        || get_buf(args[2], &b[2], 0, "m2", 'd') < 0 || get_buf(args[7], &b[3], 1, "out", 'd') < 0)
        goto fail;
    {
        Py_ssize_t K = n_items(&b[0]);
        if (n_items(&b[1]) < K || n_items(&b[2]) < K || n_items(&b[3]) < K) {
            PyErr_SetString(PyExc_ValueError, "_ck_multi.mirror_scale: arrays have wrong sizes");
            goto fail;
        }
        const double *n2 = b[0].view.buf, *ip = b[1].view.buf, *m2 = b[2].view.buf;
        double *out = b[3].view.buf;
        for (Py_ssize_t i = 0; i < K; i++) {
            double nbar2 = v ? n2[i] + lam * (2.0 * ip[i] + lam * m2[i]) : n2[i];
            out[i] = nbar2 > U2 ? radius / sqrt(nbar2) : 1.0;
        }
    }
    release(b, 4);
    Py_RETURN_NONE;
fail:
    release(b, 4);
    return NULL;
}

static PyObject *py_ea2oks_step(PyObject *Py_UNUSED(self), PyObject *const *args,
                                Py_ssize_t nargs) {
    /* ea2oks_step(f, y, m2, mux, lam, norm, beta, u, c, a, b) -> None
     * EA2OKS's per-kernel update constants (ea2oks.EA2OKS._update): for every kernel with
     * margin y f_i < 1, in order, the next uniform of u decides whether x_t joins S_i; c, a, b
     * (zeroed first) receive the expert loss and the two coefficients. u holds one uniform per
     * such kernel (the caller draws them as the Python loop did, in kernel order). */
    if (nargs != 11) return PyErr_Format(PyExc_TypeError, "ea2oks_step() takes 11 arguments");
    double y = PyFloat_AsDouble(args[1]), lam = PyFloat_AsDouble(args[4]),
           norm = PyFloat_AsDouble(args[5]), beta = PyFloat_AsDouble(args[6]);
    if (PyErr_Occurred()) return NULL;
    Buf b[7];
    memset(b, 0, sizeof b);
    if (get_buf(args[0], &b[0], 0, "f", 'd') < 0 || get_buf(args[2], &b[1], 0, "m2", 'd') < 0
        || get_buf(args[3], &b[2], 0, "mux", 'd') < 0 || get_buf(args[7], &b[3], 0, "u", 'd') < 0
        || get_buf(args[8], &b[4], 1, "c", 'd') < 0 || get_buf(args[9], &b[5], 1, "a", 'd') < 0
        || get_buf(args[10], &b[6], 1, "b", 'd') < 0)
        goto fail;
    {
        Py_ssize_t K = n_items(&b[0]), nu = n_items(&b[3]);
        if (n_items(&b[1]) < K || n_items(&b[2]) < K || n_items(&b[4]) < K
            || n_items(&b[5]) < K || n_items(&b[6]) < K) {
            PyErr_SetString(PyExc_ValueError, "_ck_multi.ea2oks_step: arrays have wrong sizes");
            goto fail;
        }
        const double *f = b[0].view.buf, *m2 = b[1].view.buf, *mux = b[2].view.buf,
                     *u = b[3].view.buf;
        double *c = b[4].view.buf, *A = b[5].view.buf, *B = b[6].view.buf;
        if (ea2oks_consts(K, y, f, m2, mux, lam, norm, beta, u, nu, c, A, B) < 0) {
            PyErr_SetString(PyExc_ValueError, "_ck_multi.ea2oks_step: too few uniforms");
            goto fail;
        }
    }
    release(b, 7);
    Py_RETURN_NONE;
fail:
    release(b, 7);
    return NULL;
}

#endif /* KS_CK_MULTI_AO2MD_H */
