"""The compiled budget updates (kernelstream.learners._ck_budget): given the same round (score
and kernel row) each equals the learner's numpy ``_update`` bit for bit (the Projectron's
projection included: numpy sums it in the compiled order, and Projectron++'s skipped margin
errors are ones that would not update); blocks equal the per-example path; bad calls raise."""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import pytest

from kernelstream.learners import compiled, make

bk = compiled.bk
needs_bk = pytest.mark.skipif(bk is None, reason=f"budget rules not compiled: {compiled.STATUS}")

# (learner, parameters): every rule, its variants and the kernels it runs for
CASES = [
    ("rbp", {}),
    ("rbp", {"kernel": "polynomial", "degree": 2}),
    ("forgetron", {}),
    ("forgetron", {"reference_quirks": True}),
    ("forgetron", {"kernel": "polynomial", "degree": 3}),
    ("forgetron", {"variant": "p1"}),
    ("forgetron", {"variant": "p1", "kernel": "linear"}),
    ("bogd", {"eta": 0.3}),
    ("bogd", {"eta": 0.3, "lam": 0.2}),
    ("bogd", {"variant": "p1", "eta": 0.3, "lam": 0.1, "coef_bound": 0.5}),
    ("bpa-s", {"c": 0.5}),
    ("projectron", {}),
    ("projectron", {"threshold": 0.3}),
    ("projectron++", {}),
    ("projectron++", {"threshold": 0.2}),
]
ROUND_OFF: tuple[str, ...] = ()  # rules whose numpy update sums in another order (none)


def _data(n: int = 300, d: int = 9, density: float = 0.6, seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * (rng.random((n, d)) < density)
    y = np.where(X[:, 0] - 0.7 * X[:, 2] + 0.4 * rng.standard_normal(n) > 0, 1.0, -1.0)
    return np.ascontiguousarray(X), y


def _make(name: str, params: dict[str, Any]) -> Any:
    return make(name, seed=5, budget=12, gamma=0.2, **params)


def _assert_states(a: dict[str, np.ndarray], b: dict[str, np.ndarray], exact: bool) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if exact or a[key].dtype.kind not in "f":
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
        else:
            np.testing.assert_allclose(a[key], b[key], rtol=1e-9, atol=1e-12, err_msg=key)


@needs_bk
@pytest.mark.parametrize(("name", "params"), CASES)
def test_compiled_update_equals_numpy_update(name: str, params: dict[str, Any]) -> None:
    X, y = _data()
    m = _make(name, params)
    m.learn_one(X[0], y[0])
    assert m._compiled_rule() > 0
    for i in range(1, len(X)):
        x, yi = X[i], float(y[i])
        xx = m._sqnorm(x)
        score, k = m._score(x, xx)
        ref = copy.deepcopy(m)
        ref._rule = 0  # the numpy _update from the same state
        ref._update(x, xx, yi, score, None if k is None else k.copy())
        m._update(x, xx, yi, score, k)
        _assert_states(m.get_state(), ref.get_state(), exact=name not in ROUND_OFF)
        for attr in m.rule_ints + m.rule_floats:
            if attr not in getattr(m, "rule_caches", ()):
                assert getattr(m, attr) == getattr(ref, attr)
        if name in ROUND_OFF:
            m = ref  # step by step: compare single updates, not accumulated round-off
            m._rule = -1
        m.t += 1
    assert m.n_support_vectors == 12


@needs_bk
@pytest.mark.parametrize(("name", "params"), CASES)
def test_block_driver_equals_per_example_path(name: str, params: dict[str, Any]) -> None:
    X, y = _data(250, seed=1)
    blocked = _make(name, params)
    n_sv = np.zeros(len(X), dtype=np.int64)
    s1 = np.concatenate([blocked.predict_learn_many(X[:70], y[:70], n_sv[:70]),
                         blocked.predict_learn_many(X[70:], y[70:], n_sv[70:])])
    single = _make(name, params)
    s2 = np.empty(len(X))
    for i in range(len(X)):
        s2[i] = single.step(X[i], y[i])
        assert n_sv[i] == single.n_support_vectors
    np.testing.assert_array_equal(s1, s2)
    _assert_states(blocked.get_state(), single.get_state(), exact=True)
    # a restored learner continues bit for bit in blocks
    again = make(name, seed=0).__class__.from_state(blocked.get_state())
    Xn, yn = _data(60, seed=2)
    np.testing.assert_array_equal(again.predict_learn_many(Xn, yn),
                                  blocked.predict_learn_many(Xn, yn))


@needs_bk
@pytest.mark.parametrize(("name", "params"), CASES)
def test_compiled_run_matches_numpy_run(name: str, params: dict[str, Any],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = _data(400, seed=3)
    s = _make(name, params).predict_learn_many(X, y)
    monkeypatch.setattr(compiled, "bk", None)
    ref = _make(name, params)
    s_ref = ref.predict_learn_many(X, y)
    assert ref._compiled_rule() == 0
    # same rows and scores (compiled), so the rules that agree bit for bit give equal runs
    if name in ROUND_OFF:
        assert np.mean(np.sign(s) != np.sign(s_ref)) < 0.02
        np.testing.assert_allclose(s[:100], s_ref[:100], rtol=1e-8, atol=1e-10)
    else:
        np.testing.assert_array_equal(s, s_ref)


@needs_bk
@pytest.mark.parametrize("params", [{"gamma": 0.5}, {"kernel": "polynomial", "degree": 2},
                                    {"gamma": 0.5, "threshold": 0.4}])
def test_projectron_pp_margin_skips_change_nothing(params: dict[str, Any]) -> None:
    # at the budget the compiled rule skips margin errors it proves cannot update; over a scan
    # of margins y f in (0, 1), the updates near beta = 0 included, it equals the numpy update
    X, y = _data(300, seed=4)
    m = make("projectron++", seed=5, budget=12, **params)
    m.predict_learn_many(X[:150], y[:150])
    assert m.n_support_vectors == 12
    kinds = set()
    rng = np.random.default_rng(6)
    for i in range(150, 190):
        x, yi = X[i], float(y[i])
        if i % 2:  # near a support vector: a small projection error, where updates happen
            x = m.sv.X[i % 12] + 0.01 * rng.standard_normal(X.shape[1])
        xx = m._sqnorm(x)
        _, k = m._score(x, xx)
        for margin in np.linspace(0.01, 0.99, 25):
            ref = copy.deepcopy(m)
            ref._rule = 0
            ref._update(x, xx, yi, yi * margin, k.copy())
            new = copy.deepcopy(m)
            new._update(x, xx, yi, yi * margin, k.copy())
            assert not math.isnan(new._kinv_rho + new._kinv_asym)  # the bounds were used
            _assert_states(new.get_state(), ref.get_state(), exact=True)
            kinds.add(bool(np.any(ref.sv.a[:12] != m.sv.a[:12])))
        m.step(x, yi)
    assert kinds == {True, False}  # both updates and left-alone rounds were checked


@needs_bk
def test_rules_cover_only_what_they_compute() -> None:
    m = make("bpa-s", kernel="polynomial", budget=5)
    m.learn_one([1.0, 2.0], 1)
    assert m._compiled_rule() == 0  # numpy's vectorised κ_rr is a power: numpy update
    m = make("projectron", budget=0, threshold=0.5)
    m.learn_one([1.0, 2.0], 1)
    assert m._compiled_rule() == 0  # unbounded: K⁻¹'s buffer grows in numpy

    class Changed(type(make("rbp"))):  # type: ignore[misc]
        def _update(self, x, xx, y, score, aux):  # type: ignore[no-untyped-def]
            super()._update(x, xx, y, score, aux)

    c = Changed(budget=3)
    c.learn_one([1.0], 1)
    assert c._compiled_rule() == 0


@needs_bk
def test_bad_calls_raise() -> None:
    m = _make("forgetron", {})
    X, y = _data(40)
    m.predict_learn_many(X, y)
    args, _, _ = m._rule_args()
    x, k = X[0], np.ones(12)
    bk.update(*args, x, 1.0, 1.0, 0.5, k, 99)  # a well-formed call
    bad = list(args)
    bad[0] = 42
    with pytest.raises(ValueError, match="unknown rule"):
        bk.update(*bad, x, 1.0, 1.0, 0.5, k, 99)
    bad = list(args)
    bad[12] = np.array([40, 0], dtype=np.int64)  # ring head past the store
    with pytest.raises(ValueError, match="ring head"):
        bk.update(*bad, x, 1.0, 1.0, 0.5, k, 99)
    bad = list(args)
    bad[16] = np.empty(3)
    with pytest.raises(ValueError, match="scratch"):
        bk.update(*bad, x, 1.0, 1.0, 0.5, k, 99)
    with pytest.raises(ValueError, match="wrong size"):
        bk.update(*args, x[:4], 1.0, 1.0, 0.5, k, 99)
    with pytest.raises(ValueError, match="wrong size"):
        bk.run(*args, X, np.ones(3), y, 0, np.empty(len(X)), None)
    bad = list(args)
    bad[6] = 10_000
    with pytest.raises(ValueError, match="disagree"):
        bk.update(*bad, x, 1.0, 1.0, 0.5, k, 99)


# ---- the rules of the learners whose rows keep their distances (OKL-GD, OKS-SIL) ----------
DIST_CASES = [
    ("okl-gd", {"eta": 0.4, "gamma": 0.3}),
    ("okl-gd", {"eta": 0.4, "gamma": 0.3, "rho": 20.0}),
    ("oks-sil", {"eta": 0.4, "gamma": 0.3}),
    ("oks-sil", {"eta": 0.4, "gamma": 0.3, "nu": 0.3, "recheck_margin": True}),
]


def _make_dist(name: str, params: dict[str, Any]) -> Any:
    return make(name, seed=7, budget=12, **params)


@needs_bk
@pytest.mark.parametrize(("name", "params"), DIST_CASES)
def test_compiled_dist_update_equals_numpy_update(name: str, params: dict[str, Any]) -> None:
    X, y = _data()
    m = _make_dist(name, params)
    m.learn_one(X[0], y[0])
    assert m._rule > 0
    for i in range(1, len(X)):
        x, yi = X[i], float(y[i])
        xx = m._sqnorm(x)
        score, aux = m._score(x, xx)
        ref = copy.deepcopy(m)
        ref._rule = 0  # the numpy _update from the same state
        ref._update(x, xx, yi, score, copy.deepcopy(aux))
        m._update(x, xx, yi, score, aux)
        a, b = m.get_state(), ref.get_state()
        # OKS-SIL's kernel step sums Σ a_j ψ_j d²_j in another order than BLAS: γ at round-off
        g = b.pop("oks_sil.gamma", None)
        if g is not None:
            np.testing.assert_allclose(a.pop("oks_sil.gamma"), g, rtol=1e-12)
        _assert_states(a, b, exact=True)
        m = ref  # from the numpy state on: single updates, not accumulated round-off
        m._rule = compiled.DIST_RULES[name]
        m.t += 1
    assert m.n_support_vectors == 12


@needs_bk
@pytest.mark.parametrize(("name", "params"), [
    *DIST_CASES,
    ("oks-sil", {"eta": 0.4, "gamma": 200.0}),  # ψ underflows: rounds handed to Python
    ("oks-sil", {"eta": 0.4, "gamma": 0.3, "random_init": True}),
    ("oks-sil", {"eta": 0.4, "gamma": 0.3, "five_points": True}),
])
def test_dist_block_driver_equals_per_example_path(name: str, params: dict[str, Any],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = _data(250, seed=1)
    params = dict(params)
    if params.pop("five_points", False):  # a buffer of duplicates: singular RLD samples
        X = np.ascontiguousarray(X[np.arange(len(X)) % 5])
    cls = type(_make_dist(name, params))
    handed: list[int] = []
    deferred = getattr(cls, "_deferred", None)
    if deferred is not None:
        def spy(self: Any, *a: Any) -> None:
            handed.append(a[-2])
            deferred(self, *a)

        monkeypatch.setattr(cls, "_deferred", spy)
    blocked = _make_dist(name, params)
    n_sv = np.zeros(len(X), dtype=np.int64)
    s1 = np.concatenate([blocked.predict_learn_many(X[:90], y[:90], n_sv[:90]),
                         blocked.predict_learn_many(X[90:], y[90:], n_sv[90:])])
    in_blocks = len(handed)
    single = _make_dist(name, params)
    s2 = np.empty(len(X))
    for i in range(len(X)):
        s2[i] = single.step(X[i], y[i])
        assert n_sv[i] == single.n_support_vectors
    np.testing.assert_array_equal(s1, s2)
    _assert_states(blocked.get_state(), single.get_state(), exact=True)
    assert len(handed) == 2 * in_blocks  # the same rounds went to Python on both paths
    if params.get("gamma") == 200.0:
        assert compiled.DEFER_ALL in handed
    if len(X) > len(np.unique(X, axis=0)) + 100:
        assert compiled.DEFER_RLD in handed
    again = type(blocked).from_state(blocked.get_state())
    Xn, yn = _data(60, seed=2)
    np.testing.assert_array_equal(again.predict_learn_many(Xn, yn),
                                  blocked.predict_learn_many(Xn, yn))


@needs_bk
def test_oks_sil_sample_kernel_is_the_features_one() -> None:
    """The compiled rule's RLD kernel entries are _ck_features.sample_kernel's: a sample whose
    Cholesky solve fails in C fails in Python too (the pseudo-inverse then decides)."""
    X, y = _data(120, seed=4)
    m = _make_dist("oks-sil", {"eta": 0.4, "gamma": 0.3})
    m.predict_learn_many(X, y)
    sv, rng = m.sv, np.random.default_rng(0)
    for _ in range(20):
        idx = rng.choice(sv.n, 3, replace=False).tolist()
        psi = rng.random(sv.n)
        K, b = compiled.fk.sample_kernel(sv.X, psi, idx, -m.current_gamma)
        s = copy.deepcopy(m)
        s.sv.X[idx[2]] = s.sv.X[idx[0]]  # an exact duplicate: K singular, in both
        K2, _ = compiled.fk.sample_kernel(s.sv.X, psi, idx, -m.current_gamma)
        assert K2[0][2] == 1.0 and K[0][0] == 1.0 and b == psi[idx].tolist()


@needs_bk
def test_a_full_store_raises_in_both_entry_points() -> None:
    d, n = 3, 4  # a store without room, under a rule that would append (budget 10)
    X, sqn, a = np.ones((n, d)), np.full(n, 3.0), np.zeros(n)
    ids, s = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    head = (compiled.RULES["rbp"], X, sqn, a, ids, s, n, 0.0, 0, -0.5, 2, np.array([10.0]),
            np.zeros(0, dtype=np.int64), np.zeros(0), None,
            np.random.default_rng(0).bit_generator.capsule, np.empty(3 * n),
            np.empty(d, dtype=np.int64))
    x = np.array([5.0, -1.0, 2.0])
    with pytest.raises(RuntimeError, match="store is full"):
        bk.update(*head, x, 30.0, 1.0, -0.5, np.ones(n), 7)
    with pytest.raises(RuntimeError, match="store is full"):
        bk.run(*head, x[None, :], np.array([30.0]), np.array([-1.0]), 0, np.empty(1), None)
