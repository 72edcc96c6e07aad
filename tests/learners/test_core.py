"""Unit tests of the shared building blocks: SVStore, kernels, alignment, losses, registry,
parameters and state serialisation (ALGORITHMS.md §1, §8 a)."""

from __future__ import annotations

import math
import pickle
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernelstream.learners import available, make, registry
from kernelstream.learners.base import (
    Learner,
    Param,
    _rng_from_array,
    _rng_to_array,
    positive,
    state_from_bytes,
    state_to_bytes,
)
from kernelstream.learners.kernels import (
    Gaussian,
    Kernel,
    Linear,
    Polynomial,
    gaussian_rows_multi,
    kernel_alignment,
    make_kernel,
    sq_dists,
)
from kernelstream.learners.losses import LOSSES, get_loss
from kernelstream.learners.store import SVStore, make_store

KERNELS: dict[str, Kernel] = {
    "gaussian": Gaussian(0.7),
    "poly2": Polynomial(2),
    "poly3": Polynomial(3),
    "linear": Linear(),
}


# -- SVStore -----------------------------------------------------------------------------------
OPS = st.one_of(
    st.tuples(st.just("append"), st.integers(0, 5), st.floats(-3, 3)),
    st.tuples(st.just("scale"), st.floats(-2, 2)),
    st.tuples(st.just("remove"), st.floats(0, 1, exclude_max=True)),
    st.tuples(st.just("add_coef"), st.floats(0, 1, exclude_max=True), st.floats(-3, 3)),
    st.tuples(st.just("project"), st.floats(0.1, 3)),
)


@settings(max_examples=150, deadline=None)
@given(kname=st.sampled_from(sorted(KERNELS)), seed=st.integers(0, 2**16),
       ops=st.lists(OPS, min_size=1, max_size=40))
def test_store_norm_bookkeeping(kname: str, seed: int, ops: list[tuple]) -> None:
    """The tracked ‖f‖² equals aᵀKa after any sequence of append/scale/remove/add_coef/project;
    the contents equal a plain list model (§8 a)."""
    kern = KERNELS[kname]
    pool = np.random.default_rng(seed).normal(size=(6, 3))  # few points: duplicates happen
    sv = SVStore(3, capacity=2)
    model: list[tuple[int, float]] = []  # (pool index, coefficient)
    for op in ops:
        if op[0] == "append":
            z = pool[op[1]]
            zz = float(z @ z)
            sv.append(z, zz, op[2], id_=op[1], s=len(model), fz=sv.eval(kern, z, zz),
                      kzz=kern.diag(zz))
            model.append((op[1], op[2]))
        elif op[0] == "scale":
            sv.scale(op[1])
            model = [(i, a * op[1]) for i, a in model]
        elif op[0] == "project":
            before = sv.norm
            sv.project(op[1])
            c = op[1] / before if before > op[1] else 1.0
            model = [(i, a * c) for i, a in model]
            assert sv.norm <= op[1] * (1 + 1e-9) + 1e-12
        elif model:
            j = int(op[1] * sv.n)
            fxj, kjj = sv.eval_sv(kern, j), kern.diag(float(sv.sqn[j]))
            if op[0] == "remove":
                sv.remove(j, fxj=fxj, kjj=kjj)
                model[j] = model[-1]  # the last SV moves into the hole
                model.pop()
            else:
                sv.add_coef(j, op[2], fxj=fxj, kjj=kjj)
                model[j] = (model[j][0], model[j][1] + op[2])
        exact = sv.exact_norm2(kern)
        a = sv.coef
        scale = float(np.abs(a) @ np.sqrt([kern.diag(float(q)) for q in sv.sqn[: sv.n]])) ** 2
        assert abs(sv.norm2 - exact) <= 1e-9 * max(1.0, scale), (sv.norm2, exact)
        assert sv.n == len(model)
        np.testing.assert_array_equal(sv.ids[: sv.n], [i for i, _ in model])
        np.testing.assert_array_equal(sv.points, pool[[i for i, _ in model]].reshape(-1, 3))
        np.testing.assert_allclose(a, [c for _, c in model], rtol=1e-12, atol=1e-12)
    assert sv.norm >= 0.0


def test_store_norm_identity_is_not_vacuous() -> None:
    """Sanity: appending without passing f(z) leaves a wrong tracked norm (the check can fail)."""
    kern = KERNELS["gaussian"]
    sv = SVStore(2)
    z1, z2 = np.array([0.0, 0.0]), np.array([0.1, 0.0])
    sv.append(z1, 0.0, 1.0)
    sv.append(z2, 0.01, 1.0)  # fz omitted: cross term lost
    assert abs(sv.norm2 - sv.exact_norm2(kern)) > 1.0


@pytest.mark.parametrize("sparse", [False, True])
def test_store_remove_without_fxj_leaves_no_wrong_norm(sparse: bool) -> None:
    """remove(j) without f(x_j) cannot update ‖f‖²: the norm becomes unknown (NaN) and reading
    it (or projecting) raises, instead of a silently wrong value."""
    sv = make_store(2, 4, sparse)
    kern = KERNELS["gaussian"]
    for i, z in enumerate(([0.0, 0.0], [0.1, 0.0], [0.0, 0.2])):
        p = np.array(z)
        zz = float(p @ p)
        sv.append(p, zz, 1.0, id_=i, fz=sv.eval(kern, p, zz), kzz=1.0)
    assert math.isclose(sv.norm2, sv.exact_norm2(kern))
    sv.remove(0)
    assert math.isnan(sv.norm2)
    with pytest.raises(ValueError, match="fxj"):
        _ = sv.norm
    with pytest.raises(ValueError, match="not tracked"):
        sv.project(0.5)


def test_store_growth_preserves_contents() -> None:
    rng = np.random.default_rng(0)
    P = rng.normal(size=(100, 4))
    sv = SVStore(4, capacity=1)
    for i, p in enumerate(P):
        sv.append(p, float(p @ p), float(i), id_=1000 + i, s=i)
    assert sv.n == 100 and len(sv.a) >= 100
    np.testing.assert_array_equal(sv.points, P)
    np.testing.assert_array_equal(sv.coef, np.arange(100.0))
    np.testing.assert_array_equal(sv.ids[:100], 1000 + np.arange(100))
    np.testing.assert_array_equal(sv.s[:100], np.arange(100))
    np.testing.assert_array_equal(sv.sqn[:100], [float(p @ p) for p in P])
    assert sv.find_id(1042) == 42 and sv.find_id(7) == -1
    sv.remove(0)
    assert sv.oldest() == int(np.argmin(sv.s[: sv.n])) and sv.s[sv.oldest()] == 1


def test_store_eval_matches_direct_sum() -> None:
    rng = np.random.default_rng(1)
    kern = KERNELS["gaussian"]
    sv = SVStore(3)
    assert sv.eval(kern, np.zeros(3), 0.0) == 0.0  # empty store
    P, a = rng.normal(size=(7, 3)), rng.normal(size=7)
    for p, c in zip(P, a, strict=True):
        sv.append(p, float(p @ p), c)
    z = rng.normal(size=3)
    direct = sum(c * math.exp(-0.7 * float((p - z) @ (p - z))) for p, c in zip(P, a, strict=True))
    assert math.isclose(sv.eval(kern, z, float(z @ z)), direct, rel_tol=1e-12)
    assert math.isclose(sv.eval_sv(kern, 2), sv.eval(kern, P[2], float(P[2] @ P[2])))


def test_store_state_roundtrip() -> None:
    rng = np.random.default_rng(2)
    sv = SVStore(3, capacity=4)
    for i in range(10):
        p = rng.normal(size=3)
        sv.append(p, float(p @ p), rng.normal(), id_=i, s=i, fz=0.3, kzz=1.0)
    st_ = sv.get_state("x.")
    assert all(isinstance(v, np.ndarray) and v.dtype != object for v in st_.values())
    for cap in (1, 10, 50):
        back = SVStore.from_state(state_from_bytes(state_to_bytes(st_)), "x.", 3, capacity=cap)
        assert back.n == sv.n and back.norm2 == sv.norm2
        for name in ("X", "sqn", "a", "ids", "s"):
            np.testing.assert_array_equal(getattr(back, name)[: back.n], getattr(sv, name)[: sv.n])
        back.append(np.ones(3), 3.0, 1.0)  # still usable beyond the restored capacity
    st_["x.a"][0] = 99.0  # the state is a copy, not a view of the store
    assert sv.a[0] != 99.0


def test_store_project() -> None:
    kern = KERNELS["linear"]
    sv = SVStore(2)
    sv.project(1.0)  # empty: no-op
    assert sv.n == 0 and sv.norm2 == 0.0
    z = np.array([3.0, 4.0])
    sv.append(z, 25.0, 1.0, fz=0.0, kzz=kern.diag(25.0))
    assert sv.norm == 5.0
    sv.project(10.0)
    assert sv.coef[0] == 1.0
    sv.project(1.0)
    assert math.isclose(sv.coef[0], 0.2) and math.isclose(sv.norm, 1.0)


# -- kernels -----------------------------------------------------------------------------------
def _direct(kname: str, a: np.ndarray, b: np.ndarray) -> float:
    if kname == "gaussian":
        return math.exp(-0.7 * float((a - b) @ (a - b)))
    p = {"poly2": 2, "poly3": 3, "linear": 1}[kname]
    return float(a @ b) ** p


@pytest.mark.parametrize("kname", sorted(KERNELS))
def test_kernel_rows_equal_matrix(kname: str) -> None:
    kern = KERNELS[kname]
    rng = np.random.default_rng(3)
    X, Z = rng.normal(size=(12, 4)), rng.normal(size=(5, 4))
    sqn = (X * X).sum(1)
    K = kern.matrix(X, Z)
    KK = kern.matrix(X)
    np.testing.assert_allclose(KK, KK.T, rtol=1e-12)
    assert np.linalg.eigvalsh(KK).min() > -1e-9 * max(1.0, np.abs(KK).max())  # PSD
    for j, z in enumerate(Z):
        row = kern.row(X, sqn, z, float(z @ z))
        np.testing.assert_allclose(row, K[:, j], rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(row, [_direct(kname, x, z) for x in X], rtol=1e-10)
        assert math.isclose(kern.diag(float(z @ z)), _direct(kname, z, z), rel_tol=1e-12)
    np.testing.assert_allclose(kern.row(X[:0], sqn[:0], Z[0], 1.0), [])  # no stored points


def test_gaussian_distances_clipped_for_duplicates() -> None:
    """Duplicates of large-norm points: r + ‖z‖² − 2xᵀz can round below 0; it is clipped."""
    rng = np.random.default_rng(4)
    X = 1e4 + rng.normal(size=(50, 3))
    sqn = (X * X).sum(1)
    raw = sqn[:, None] + sqn[None, :] - 2.0 * X @ X.T
    assert raw.min() < 0.0  # the scenario really occurs
    D2 = sq_dists(X, X)
    assert D2.min() >= 0.0
    g = Gaussian(0.5)
    for j in range(len(X)):
        row = g.row(X, sqn, X[j], float(sqn[j]))
        assert row.max() <= 1.0 and row[j] == pytest.approx(1.0, abs=1e-6)
    assert g.matrix(X).max() <= 1.0



def test_sq_dists_given_norms_same_numbers() -> None:
    # Proj-KA's alignment passes the norms it squared once (alignment_pow2): the same bits
    rng = np.random.default_rng(6)
    A, B = rng.normal(size=(7, 5)) * 30, rng.normal(size=(9, 5))
    d2 = sq_dists(A, B, (A * A).sum(1), (B * B).sum(1))
    assert np.array_equal(d2, sq_dists(A, B)) and d2.min() >= 0.0

def test_gaussian_rows_multi() -> None:
    d2 = sq_dists(np.arange(6.0).reshape(3, 2), np.ones((4, 2)))
    out = gaussian_rows_multi(d2, [0.1, 1.0])
    assert out.shape == (2, 3, 4)
    np.testing.assert_allclose(out[1], Gaussian(1.0).matrix(np.arange(6.0).reshape(3, 2),
                                                            np.ones((4, 2))))


def test_make_kernel() -> None:
    assert isinstance(make_kernel("gaussian", gamma=2.0), Gaussian)
    assert make_kernel("polynomial", degree=3).degree == 3
    assert isinstance(make_kernel("linear"), Linear)
    with pytest.raises(ValueError, match=r"gaussian.*polynomial.*linear"):
        make_kernel("rbf")


def test_kernel_alignment_direct() -> None:
    rng = np.random.default_rng(5)
    X, y = rng.normal(size=(37, 3)), np.where(rng.random(37) < 0.5, -1.0, 1.0)
    gammas = [0.01, 0.3, 2.0]
    want = []
    for g in gammas:
        K = np.array([[math.exp(-g * float((a - b) @ (a - b))) for b in X] for a in X])
        want.append(y @ K @ y / (len(y) * np.linalg.norm(K, "fro")))
    for block in (1, 7, 1024):
        np.testing.assert_allclose(kernel_alignment(X, y, gammas, block=block), want, rtol=1e-12)


def test_kernel_alignment_picks_the_cluster_width() -> None:
    """XOR of four tight clusters (spread 0.1, centres 4 apart): too wide a kernel sees one
    blob (alignment ≈ 0), too narrow a kernel sees only the diagonal (≈ 1/√m); the width of the
    clusters (γ = 1) wins."""
    rng = np.random.default_rng(6)
    centres = np.array([[0, 0], [4, 4], [0, 4], [4, 0]], dtype=float)
    labels = np.array([1, 1, -1, -1], dtype=float)
    X = np.concatenate([c + 0.1 * rng.normal(size=(20, 2)) for c in centres])
    y = np.repeat(labels, 20)
    gammas = [1e-3, 1e-2, 0.1, 1.0, 10.0, 1e3, 1e5]
    ka = kernel_alignment(X, y, gammas)
    assert gammas[int(np.argmax(ka))] == 1.0, ka
    assert ka[0] < 0.05 and abs(ka[-1] - 1 / math.sqrt(len(y))) < 1e-3


# -- losses ------------------------------------------------------------------------------------
FORMULAS = {
    "hinge": (lambda f, y: max(0.0, 1 - y * f), lambda f, y: -y if y * f < 1 else 0.0),
    "logistic": (lambda f, y: math.log1p(math.exp(-y * f)),
                 lambda f, y: -y / (1 + math.exp(y * f))),
    "squared-hinge": (lambda f, y: max(0.0, 1 - y * f) ** 2,
                      lambda f, y: -2 * y * max(0.0, 1 - y * f)),
    "square": (lambda f, y: (f - y) ** 2, lambda f, y: 2 * (f - y)),
    "absolute": (lambda f, y: abs(f - y), lambda f, y: float(np.sign(f - y))),
}


def test_loss_table_is_complete() -> None:
    assert set(LOSSES) == set(FORMULAS)
    for name, loss in LOSSES.items():
        assert loss.name == name and get_loss(name) is loss
        want = "regression" if name in ("square", "absolute") else "classification"
        assert loss.task == want


@pytest.mark.parametrize("name", sorted(FORMULAS))
def test_losses_match_formulas_and_finite_differences(name: str) -> None:
    loss, (val, der) = LOSSES[name], FORMULAS[name]
    rng = np.random.default_rng(7)
    ys = [-1.0, 1.0] if loss.task == "classification" else list(rng.normal(size=4))
    h = 1e-6
    for y in ys:
        for f in rng.uniform(-4, 4, size=40):
            kink = y * f - 1 if loss.task == "classification" else f - y
            assert math.isclose(loss.value(f, y), val(f, y), rel_tol=1e-12, abs_tol=1e-15)
            assert math.isclose(loss.deriv(f, y), der(f, y), rel_tol=1e-12, abs_tol=1e-15)
            if abs(kink) > 1e-3:  # away from the kink
                fd = (loss.value(f + h, y) - loss.value(f - h, y)) / (2 * h)
                assert math.isclose(loss.deriv(f, y), fd, rel_tol=1e-5, abs_tol=1e-7), (f, y)


def test_loss_edge_values() -> None:
    hinge, lg, ab = LOSSES["hinge"], LOSSES["logistic"], LOSSES["absolute"]
    assert hinge.deriv(1.0, 1.0) == 0.0 and hinge.deriv(0.999, 1.0) == -1.0  # strict y f < 1
    assert ab.deriv(2.0, 2.0) == 0.0
    # logistic: stable at ±1000 (no overflow, correct limits)
    assert lg.value(1000.0, 1.0) == 0.0 and lg.value(-1000.0, 1.0) == 1000.0
    assert lg.value(1000.0, -1.0) == 1000.0 and lg.value(-1000.0, -1.0) == 0.0
    assert lg.deriv(1000.0, 1.0) == 0.0 and lg.deriv(-1000.0, 1.0) == -1.0
    assert lg.deriv(1000.0, -1.0) == 1.0 and lg.deriv(-1000.0, -1.0) == 0.0
    assert math.isclose(lg.value(0.0, 1.0), math.log(2)) and lg.deriv(0.0, -1.0) == 0.5
    for f in np.linspace(-30, 30, 121):  # self-bounding: ℓ'² ≤ ℓ (logistic), = 4ℓ (square)
        assert lg.deriv(f, 1.0) ** 2 <= lg.value(f, 1.0) * (1 + 1e-12)
        assert math.isclose(LOSSES["square"].deriv(f, 0.3) ** 2, 4 * LOSSES["square"].value(f, 0.3))


def test_get_loss_unknown() -> None:
    with pytest.raises(ValueError, match=r"hinge.*logistic"):
        get_loss("huber")


# -- registry ----------------------------------------------------------------------------------
def test_make_unknown_lists_available() -> None:
    with pytest.raises(ValueError, match="no-such") as e:
        make("no-such")
    for name in available():
        assert name in str(e.value)


def test_registry_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    available()  # every learner module loaded first: the copy below is then the whole registry
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    assert available() == sorted(available()) and "perceptron" in available()
    for bad in ("Bad", "has space", "under_score"):
        cls = type("X", (Learner,), {"name": bad, "__module__": "my_learners.x"})
        # the message names the module that declares it (a contributor's file, not ours)
        with pytest.raises(ValueError, match=r"lower-case.*class X in module my_learners\.x"):
            registry.register(cls)
    perceptron = registry.get("perceptron")
    assert registry.register(perceptron) is perceptron  # idempotent
    other = type("Y", (Learner,), {"name": "perceptron", "__module__": "my_learners.y"})
    with pytest.raises(ValueError, match=re.escape(
            "twice: by Perceptron in module kernelstream.learners.perceptron and by Y in "
            "module my_learners.y")):
        registry.register(other)
    ok = type("Z", (Learner,), {"name": "test-ok"})
    registry.register(ok)
    assert registry.get("test-ok") is ok and "test-ok" in available()


_FRESH_REGISTRY = '''
import pickle, sys, threading
blob, want, x = pickle.loads(sys.stdin.buffer.read())
import kernelstream.learners as learners
loaded = lambda: sorted(m for m in sys.modules if m.startswith("kernelstream.learners."))
assert "kernelstream.learners.perceptron" not in loaded(), loaded()  # the package loads no learner
model = pickle.loads(blob)  # imports bogd's module only, as a Beam worker unpickling a DoFn
assert "kernelstream.learners.perceptron" not in loaded(), loaded()
seen = []
def look() -> None:
    seen.append((learners.available(), type(learners.make("perceptron")).__name__))
threads = [threading.Thread(target=look) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert all(s == (want, "Perceptron") for s in seen), seen
print(repr(model.predict_one(x)))
'''


def test_registry_loads_every_learner_on_first_use(tmp_path: Path) -> None:
    """Importing ``kernelstream.learners`` loads no learner module; the first look-up loads
    them all, also after unpickling a learner has imported its own module first (a Beam
    worker), and from several threads at once; the unpickled learner continues exactly."""
    model = make("bogd", seed=3, budget=20)
    rng = np.random.default_rng(0)
    for _ in range(30):
        model.learn_one(rng.normal(size=4), float(rng.choice([-1.0, 1.0])))
    x = rng.normal(size=4)
    stdin = pickle.dumps((pickle.dumps(model), available(), x))
    proc = subprocess.run([sys.executable, "-c", _FRESH_REGISTRY], input=stdin, cwd=tmp_path,
                          capture_output=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    assert float(proc.stdout.decode()) == model.predict_one(x)


# -- parameters and state ----------------------------------------------------------------------
def test_param_coercion() -> None:
    p_int = Param("budget", 5, int, "b", positive, "> 0")
    assert p_int.coerce("7", "x") == 7 and p_int.coerce(3.0, "x") == 3
    for bad in (2.5, "a", None, 0, -1):
        with pytest.raises(ValueError, match="budget"):
            p_int.coerce(bad, "x")
    p_bool = Param("flag", False, bool, "f")
    assert p_bool.coerce("yes", "x") is True and p_bool.coerce("off", "x") is False
    with pytest.raises(ValueError, match="flag"):
        p_bool.coerce("maybe", "x")
    p_f = Param("eta", 0.1, float, "e")
    for bad in (float("inf"), float("nan"), "z"):
        with pytest.raises(ValueError, match="eta"):
            p_f.coerce(bad, "x")
    p_c = Param("mode", "a", str, "m", choices=("a", "b"))
    with pytest.raises(ValueError, match="a, b"):
        p_c.coerce("c", "x")
    assert Param("opt", None, int, "o").coerce(None, "x") is None


def test_sigma_for_gamma() -> None:
    assert make("perceptron", sigma=2.0).gamma == 0.125
    with pytest.raises(ValueError, match="either gamma or sigma"):
        make("perceptron", sigma=2.0, gamma=1.0)
    with pytest.raises(ValueError, match="valid parameters: kernel, gamma"):
        make("perceptron", sigmaa=1.0)


@pytest.mark.parametrize("sigma", [1e-300, 1e-160, 1e200, "1e-300"])
def test_sigma_whose_gamma_is_not_finite_is_refused(sigma: object) -> None:
    # 1/(2σ²) divided by zero (a tiny σ) or gave gamma=0 (a huge one), the error naming gamma
    with pytest.raises(ValueError, match=r"bogd: parameter 'sigma' must be .*gamma = 1/\(2"):
        make("bogd", sigma=sigma)
    assert make("bogd", sigma=1e-150).gamma == pytest.approx(5e299)  # the range's edges work
    assert make("bogd", sigma=1e150).gamma == pytest.approx(5e-301)


def test_rls_lam_whose_inverse_overflows_is_refused() -> None:
    # P = I/λ and its rank-one updates: λ = 1e-300 gave NaN scores on every row
    with pytest.raises(ValueError, match=r"rff-rls: parameter 'lam' must be .*1/lam\^2"):
        make("rff-rls", lam=1e-300)
    m = make("rff-rls", lam=1e-150, n_components=8)
    assert all(np.isfinite(m.step(np.full(3, 0.1 * i), 1 if i % 2 else -1)) for i in range(20))


def test_rng_state_roundtrip() -> None:
    rng = np.random.default_rng(8)
    rng.integers(0, 10, dtype=np.uint32)  # leaves a buffered half word (has_uint32 = 1)
    a = _rng_to_array(rng)
    assert a.dtype == np.uint64
    other = np.random.Generator(np.random.PCG64(0))
    _rng_from_array(other, a)
    assert other.bit_generator.state == rng.bit_generator.state
    assert other.integers(0, 2**31, size=5, dtype=np.uint32).tolist() == \
        rng.integers(0, 2**31, size=5, dtype=np.uint32).tolist()


def test_state_bytes_are_pickle_free() -> None:
    m = make("perceptron")
    for i in range(5):
        m.step(np.full(3, float(i)), 1 if i % 2 else -1)
    st_ = m.get_state()
    back = state_from_bytes(state_to_bytes(st_))
    assert set(back) == set(st_)
    for k in st_:
        assert back[k].dtype == st_[k].dtype and np.array_equal(back[k], st_[k])
    bad = {**st_, "obj": np.array([{}], dtype=object)}
    with pytest.raises(ValueError):  # object arrays would need pickle, which loading refuses
        state_from_bytes(state_to_bytes(bad))
    # not a state at all: numpy's "contains pickled data ... allow_pickle", a BadZipFile or an
    # EOFError before
    for junk in (b"garbage", b"PK\x03\x04junk", b"", state_to_bytes(st_)[:40]):
        with pytest.raises(ValueError, match=r"^not a kernelstream learner state"):
            state_from_bytes(junk)


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 40), s=st.integers(1, 6),
       power=st.sampled_from([1.0, 5.0, 40.0]), zero_frac=st.floats(0.0, 0.9))
def test_weighted_distinct_draws_positive_distinct(seed: int, n: int, s: int, power: float,
                                                   zero_frac: float) -> None:
    """OKS-SIL's RLD sample: ``k`` distinct indices, never one of zero weight, also with
    skewed and partly zero weights; ``sample_without_replacement`` fills up uniformly when
    fewer than ``s`` weights are positive."""
    from kernelstream.learners.experts import sample_without_replacement, weighted_distinct

    g = np.random.default_rng(seed)
    p = g.random(n) ** power
    p[g.random(n) < zero_frac] = 0.0
    if not p.any():
        p[int(g.integers(n))] = 1.0
    k = min(s, int(np.count_nonzero(p)))
    got = weighted_distinct(np.random.default_rng(seed + 1), p, k)
    assert len(set(got)) == len(got) == k
    assert all(p[j] > 0.0 for j in got)
    full = sample_without_replacement(np.random.default_rng(seed), p, s)
    assert len(set(full.tolist())) == len(full) == min(s, n)
    assert full.dtype == np.int64


def test_weighted_distinct_is_successive_sampling() -> None:
    """Ordered pairs drawn by ``weighted_distinct`` follow successive sampling,
    ``P(i, j) = w_i / W · w_j / (W − w_i)``: 40,000 seeded draws, every pair within 4.5
    standard errors (the zero-weight index never appears)."""
    from kernelstream.learners.experts import weighted_distinct

    w = np.array([0.5, 0.0, 0.25, 0.15, 0.1])
    rng = np.random.default_rng(7)
    n_draws = 40_000
    counts: dict[tuple[int, int], int] = {}
    for _ in range(n_draws):
        i, j = weighted_distinct(rng, w, 2)
        counts[(i, j)] = counts.get((i, j), 0) + 1
    W = w.sum()
    for i in range(len(w)):
        for j in range(len(w)):
            if i == j:
                continue
            prob = w[i] / W * w[j] / (W - w[i])
            c = counts.get((i, j), 0)
            if prob == 0.0:
                assert c == 0
                continue
            se = math.sqrt(n_draws * prob * (1 - prob))
            assert abs(c - n_draws * prob) < 4.5 * se, ((i, j), c, n_draws * prob)


def test_weighted_distinct_uniform_at_the_top_end() -> None:
    """The largest uniform below 1 picks the last index of positive weight, not a trailing
    zero-weight index or the index past the end."""
    from kernelstream.learners.experts import weighted_distinct

    class TopRng:
        def random(self, size: int) -> np.ndarray:
            return np.full(size, np.nextafter(1.0, 0.0))

    w = np.array([0.1, 0.7, 0.3, 0.0, 0.0])
    assert weighted_distinct(TopRng(), w, 1) == [2]
    assert weighted_distinct(TopRng(), np.array([0.25, 0.5, 0.0]), 2) == [1, 0]


@pytest.mark.parametrize("name", ["rbp", "bpa-s", "nogd", "fogd", "perceptron", "bomkc-dd"])
def test_contiguous_float64_rows_skip_conversion(name: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the first row fixed the width, a C-contiguous float64 row goes straight to the
    round (the per-example fast lane: no conversion, no shape checks), with the numbers of the
    checked path; anything else still goes through ``_check_x``, and bad rows are refused."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 4))
    y = np.where(X[:, 0] * X[:, 1] > 0, 1.0, -1.0)
    ref = make(name, seed=1)
    want = np.array([ref.step(X[i].tolist(), y[i]) for i in range(len(X))])  # checked path
    m = make(name, seed=1)
    got = [m.step(X[0], y[0])]
    calls: list[object] = []
    checked = m._check_x

    def spy(x: object) -> object:
        calls.append(x)
        return checked(x)

    monkeypatch.setattr(m, "_check_x", spy)
    for i in range(1, len(X)):
        if i % 2:
            got.append(m.step(X[i], y[i]))
        else:
            got.append(m.predict_one(X[i]))
            m.learn_one(X[i], y[i])
    assert calls == []  # every later row took the fast lane
    assert np.array_equal(np.array(got), want)
    assert m.t == ref.t and m.n_support_vectors == ref.n_support_vectors
    m.step(X[0].tolist(), 1.0)  # a list: converted and checked
    m.step(np.ascontiguousarray(np.stack([X[0], X[1]]).T)[:, 0], 1.0)  # strided: checked
    assert len(calls) == 2
    for bad in (np.array([1.0, np.nan, 0.0, 0.0]), np.full(4, 1e200), np.ones(5)):
        with pytest.raises(ValueError, match=r"NaN|overflow|features"):
            m.step(bad, 1.0)
        with pytest.raises(ValueError, match=r"NaN|overflow|features"):
            m.predict_one(bad)
    with pytest.raises(ValueError, match="label"):
        m.step(X[0], 0.0)
