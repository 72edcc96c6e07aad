"""Conformance suite: every registered learner × configuration × applicable common check.

Parametrised at collection time over ``available()``, so a newly registered learner (and each
value of its choice / boolean parameters) is covered without editing this file. The checks
live in :mod:`kernelstream.learners.testing`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kernelstream.learners import available, get, registry
from kernelstream.learners._kernel_learner import KernelLearner
from kernelstream.learners.base import KERNEL_PARAMS, TIE_PARAM, Learner, Param
from kernelstream.learners.kernels import Gaussian
from kernelstream.learners.perceptron import Perceptron
from kernelstream.learners.sparse_store import SparseSVStore
from kernelstream.learners.store import SVStore
from kernelstream.learners.testing import (
    CHECKS,
    cases,
    check_batch_equals_loop,
    check_bounded_scores,
    check_kernel_loss_pairs,
    check_learner,
    check_reproducible,
    check_seeds,
    check_state_roundtrip,
)
from kernelstream.learners.testing.support import global_rng_hint

CASES = [(name, cid, check, params) for name in available() for cid, check, params in cases(name)]


@pytest.mark.parametrize(
    ("name", "cid", "check", "params"), CASES, ids=[f"{n}[{c}]-{k}" for n, c, k, _ in CASES]
)
def test_conformance(name: str, cid: str, check: str, params: dict[str, Any]) -> None:
    CHECKS[check].fn(name, params)


def test_every_learner_is_covered() -> None:
    names = available()
    assert names, "no learner registered"
    covered = {(n, k) for n, c, k, _ in CASES if c == "default"}
    for name in names:
        for check in ("metadata", "state_roundtrip", "batch_equals_loop", "bad_input"):
            assert (name, check) in covered, f"{name} misses {check}"
        if get(name)().memory_bound() is not None:
            assert (name, "bounded_memory") in covered, f"{name} misses bounded_memory"


# -- the suite can fail: deliberately broken learners are caught ------------------------------
class _Decaying(Perceptron):
    """Perceptron whose coefficients decay every round (so in-place mutation is observable).

    Test double, not a published algorithm."""

    name = "test-decaying-perceptron"
    reference = "test double"

    def _update(self, x, xx, y, score, aux):  # type: ignore[no-untyped-def]
        self.sv.scale(0.999)
        super()._update(x, xx, y, score, aux)


class _RandomWidth(Learner):
    """Draws one of two Gaussian widths per round in predict (OKS-like), Perceptron update on
    the drawn hypothesis: exercises the ``draws_in_predict`` paths. Test double."""

    name = "test-random-width"
    params = (next(p for p in KERNEL_PARAMS if p.name == "gamma"), TIE_PARAM)
    randomized = True
    draws_in_predict = True
    reference = "test double"

    def _setup(self, d: int) -> None:
        self.kerns = [Gaussian(self.hparams["gamma"]), Gaussian(4 * self.hparams["gamma"])]
        self.svs = [SVStore(d), SVStore(d)]

    def _score(self, x: np.ndarray, xx: float) -> tuple[float, Any]:
        i = int(self.rng.integers(2))
        sv = self.svs[i]
        return (sv.eval(self.kerns[i], x, xx), i) if sv.n else (0.0, i)

    def _update(self, x: np.ndarray, xx: float, y: float, score: float, aux: Any) -> None:
        if y * score <= 0.0:
            self.svs[aux].append(x, xx, y, id_=self.t, s=self.t, fz=score)

    @property
    def n_support_vectors(self) -> int:
        return sum(s.n for s in self.svs) if self.dim is not None else 0

    def _get_state(self) -> dict[str, np.ndarray]:
        return {**self.svs[0].get_state("s0."), **self.svs[1].get_state("s1.")}

    def _set_state(self, state: dict[str, np.ndarray]) -> None:
        self.svs = [SVStore.from_state(state, f"s{i}.", self.dim or 0) for i in range(2)]


class _KLMS(KernelLearner):
    """Kernel LMS (square loss, unbounded): exercises the regression paths. Test double."""

    name = "test-klms"
    task = "regression"
    params = (*KERNEL_PARAMS, Param("eta", 0.2, float, "step", lambda v: v > 0, "> 0"))
    reference = "test double"

    def _update(self, x: np.ndarray, xx: float, y: float, score: float, aux: Any) -> None:
        c = -self.hparams["eta"] * 2.0 * (score - y)
        self.sv.append(x, xx, c, id_=self.t, s=self.t, fz=score, kzz=self.kern.diag(xx))


DOUBLES = {c.name: c for c in (_Decaying, _RandomWidth, _KLMS)}


@pytest.mark.parametrize("name", sorted(DOUBLES))
def test_suite_passes_sound_doubles(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Learners of other shapes (draws in predict, regression) pass every check."""
    monkeypatch.setitem(registry._REGISTRY, name, DOUBLES[name])
    check_learner(name, gamma=0.5)  # one configuration is enough for a double


def _break(mp: pytest.MonkeyPatch, what: str) -> None:
    cls = _Decaying
    score, update = cls._score, cls._update
    if what == "predict-draws":  # an undeclared draw while forming the prediction
        def f(self, x, xx):  # type: ignore[no-untyped-def]
            self.rng.random()
            return score(self, x, xx)

        mp.setattr(cls, "_score", f)
    elif what == "state-alias":  # get_state hands out the live coefficient array
        mp.setattr(cls, "_get_state",
                   lambda self: {**self.sv.get_state("sv."), "sv.a": self.sv.a[: self.sv.n]})
    elif what == "lost-state":  # a counter that is not part of the state
        def u(self, x, xx, y, s, aux):  # type: ignore[no-untyped-def]
            self.extra = getattr(self, "extra", 0) + 1
            update(self, x, xx, y, s + 1e-3 * (self.extra % 2), aux)

        mp.setattr(cls, "_update", u)
    elif what == "nan-accepted":  # validation bypassed
        mp.setattr(cls, "_check_x", lambda self, x: (np.asarray(x, float), 0.0))
    elif what == "seed-ignored":  # claims to be randomized but ignores its seed
        mp.setattr(cls, "randomized", True)
    elif what == "sparse-sv-order":  # restored sparse SVs lose their slot order
        get_state = SparseSVStore.get_state

        def g(self, prefix):  # type: ignore[no-untyped-def]
            st = get_state(self, prefix)
            if self.n > 1:
                P = self.points.take(np.arange(self.n)[::-1])
                st.update({f"{prefix}indptr": P.indptr, f"{prefix}indices": P.indices,
                           f"{prefix}data": P.data})
            return st

        mp.setattr(SparseSVStore, "get_state", g)
    elif what == "sparse-dots":  # a sparse dot that drops the last non-zero of the query
        dots = SparseSVStore.dots

        def dd(self, z):  # type: ignore[no-untyped-def]
            if hasattr(z, "indices") and len(z.indices) > 1:
                z = type(z)(z.indices[:-1], z.values[:-1], z.n_features)
            return dots(self, z)

        mp.setattr(SparseSVStore, "dots", dd)
    elif what == "dense-at-any-width":  # a learner that densifies sparse rows, width unchecked
        mp.setattr(cls, "accepts_sparse", False)
        mp.setattr(registry, "memory_estimate", lambda *a, **k: (0, "nothing"))
        mp.setattr(registry, "_estimate", lambda *a, **k: (0, "nothing", "rows"))  # check_width's
    elif what == "diverging":  # coefficients that grow 10 % a round: finite, but unbounded
        def grow(self, x, xx, y, s, aux):  # type: ignore[no-untyped-def]
            update(self, x, xx, y, s, aux)
            self.sv.scale(1.1 / 0.999)

        mp.setattr(cls, "_update", grow)
    elif what == "unbounded":  # a budget parameter that is ignored
        budget = Param("budget", 500, int, "ignored", lambda v: v > 0)
        mp.setattr(cls, "params", (*cls.params, budget))


@pytest.mark.parametrize(
    ("what", "check"),
    [("predict-draws", "predict_is_pure"), ("state-alias", "state_roundtrip"),
     ("lost-state", "state_roundtrip"), ("nan-accepted", "bad_input"),
     ("seed-ignored", "seeds"), ("unbounded", "bounded_memory"),
     ("sparse-sv-order", "sparse_rows"), ("sparse-dots", "sparse_rows"),
     ("dense-at-any-width", "sparse_rows"), ("diverging", "bounded_scores")],
)
def test_suite_catches_broken_learner(monkeypatch: pytest.MonkeyPatch, what: str,
                                      check: str) -> None:
    monkeypatch.setitem(registry._REGISTRY, _Decaying.name, _Decaying)
    _break(monkeypatch, what)
    params = {"budget": 20} if what == "unbounded" else {"kernel": "gaussian"}
    with pytest.raises(AssertionError, match=rf"\] {check}:"):
        check_learner(_Decaying.name, **params)


def test_failures_name_the_global_rng(monkeypatch: pytest.MonkeyPatch) -> None:
    """A learner that draws from numpy's global RNG fails the same-seed checks with a hint at
    self.rng (the suite reseeds np.random to tell); the global state is left as it was."""
    monkeypatch.setitem(registry._REGISTRY, _Decaying.name, _Decaying)
    update = _Decaying._update

    def u(self, x, xx, y, s, aux):  # type: ignore[no-untyped-def]
        if np.random.random() < 0.7:
            update(self, x, xx, y, s, aux)

    monkeypatch.setattr(_Decaying, "_update", u)
    for check in (check_reproducible, check_seeds):
        with pytest.raises(AssertionError, match=r"instead of self\.rng"):
            check(_Decaying.name, {"kernel": "gaussian"})
    params = {"kernel": "gaussian"}
    assert global_rng_hint(_Decaying.name, params)
    monkeypatch.setattr(_Decaying, "_update", update)  # sound again: no hint is made up
    np.random.seed(5)
    before = np.random.get_state()[1].copy()
    assert global_rng_hint(_Decaying.name, params) == ""
    np.testing.assert_array_equal(np.random.get_state()[1], before)  # put back


def test_failed_round_trip_names_the_attribute(monkeypatch: pytest.MonkeyPatch) -> None:
    """A state that leaves out an attribute the rounds use: the failure names it."""
    monkeypatch.setitem(registry._REGISTRY, _Decaying.name, _Decaying)
    _break(monkeypatch, "lost-state")
    with pytest.raises(AssertionError, match=r"saved the state, or only one of them has "
                       r"them: extra\b.*get_state / set_state"):
        check_state_roundtrip(_Decaying.name, {"kernel": "gaussian"})


class _EagerMistake(_Decaying):
    """Declares update_when="mistake" but its _update (the decay) changes the model on every
    round: the compiled blocks skip those rounds. Test double."""

    name = "test-eager-mistake"
    update_when = "mistake"


def test_update_when_is_named_when_blocks_differ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry._REGISTRY, _EagerMistake.name, _EagerMistake)
    if not _EagerMistake.compiled_rounds() or _compiled_ck() is None:
        pytest.skip("without the compiled kernels every round calls _update")
    with pytest.raises(AssertionError, match=r"update_when='mistake'"):
        check_batch_equals_loop(_EagerMistake.name, {"kernel": "gaussian"})


def _compiled_ck() -> Any:
    from kernelstream.learners import compiled

    return compiled.ck


def test_declared_divergence_is_exempt_and_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    """A configuration the class declares ``known_divergent`` is exempt from the bound (by
    the values it names only), and a declaration must name real parameters and values."""
    monkeypatch.setitem(registry._REGISTRY, _Decaying.name, _Decaying)
    _break(monkeypatch, "diverging")
    monkeypatch.setattr(_Decaying, "known_divergent", ({"kernel": "gaussian"},), raising=False)
    check_bounded_scores(_Decaying.name, {"kernel": "gaussian"})
    with pytest.raises(AssertionError, match="scores diverge"):
        check_bounded_scores(_Decaying.name, {"kernel": "linear"})
    monkeypatch.setattr(_Decaying, "known_divergent", ({"kernel": "gausian"},))
    with pytest.raises(AssertionError, match="not one of"):
        check_bounded_scores(_Decaying.name, {"kernel": "gaussian"})


_FAST = {"skegd": {"budget": 20}}  # a smaller sketch: the same divergence, sooner


@pytest.mark.parametrize(("name", "params"), [
    (name, d) for name in available() for d in getattr(get(name), "known_divergent", ())])
def test_every_declared_divergent_configuration_diverges(
        monkeypatch: pytest.MonkeyPatch, name: str, params: dict[str, Any]) -> None:
    """Every ``known_divergent`` entry of every learner is what the bound catches on the
    suite's stream: without its declaration the suite fails it (naming the pair when it is a
    kernel × loss one), so a declaration cannot exempt a configuration that works."""
    monkeypatch.setattr(get(name), "known_divergent", ())
    with pytest.raises(AssertionError, match="scores diverge"):
        check_bounded_scores(name, {**_FAST.get(name, {}), **params})
    if "kernel" in params:
        with pytest.raises(AssertionError, match=f"kernel={params['kernel']}, "
                                                 f"loss={params['loss']}"):
            check_kernel_loss_pairs(name, _FAST.get(name, {}))
