"""Sparse rows in the learners (issue 13): the LIBSVM→CSR reader, the sparse support-vector
store, sparse ≈ dense on real samples, memory independent of the width, and the up-front
width/memory check. The conformance suite (``sparse_rows``) covers every learner."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kernelstream.errors import WidthError
from kernelstream.learners import compiled, make, registry, sparse_store
from kernelstream.learners.kernels import make_kernel
from kernelstream.learners.registry import check_width, memory_estimate
from kernelstream.learners.sparse_store import SparseSVStore
from kernelstream.learners.store import SVStore
from kernelstream.sparse import CSR, SparseRow

DATA = Path(__file__).resolve().parents[1] / "data"
SPARSE_LEARNERS = ("bogd", "bpa-s", "nogd", "skegd")


def _load(name: str) -> tuple[CSR, np.ndarray]:
    width = 123 if name.startswith("a9a") else None  # a9a's documented width
    X, y = CSR.from_libsvm_bytes((DATA / name).read_bytes(), n_features=width)
    return X.check(), np.where(y > 0, 1.0, -1.0)


# -- reader ------------------------------------------------------------------------------------
def test_libsvm_reader() -> None:
    text = b"+1 3:1 1:2.5 # comment\n\n-1 qid:4 2:-1e-3\n# only a comment\n1\n"
    X, y = CSR.from_libsvm_bytes(text)
    assert y.tolist() == [1.0, -1.0, 1.0]
    assert X.indptr.tolist() == [0, 2, 3, 3] and X.n_features == 3
    assert X.indices.tolist() == [0, 2, 1]  # the first row is sorted by index
    assert X.data.tolist() == [2.5, 1.0, -1e-3]
    X0, _ = CSR.from_libsvm_bytes(b"1 0:1 7:2\n", zero_based=True, n_features=10)
    assert X0.indices.tolist() == [0, 7] and X0.n_features == 10
    for bad, pat in ((b"1 2:1 2:3\n", "repeated"), (b"1 0:1\n", ">= 1"), (b"x 1:1\n", "label"),
                     (b"1 1:1 2\n", "idx:value"), (b"1 1.5:1\n", "integers")):
        with pytest.raises(ValueError, match=pat):
            CSR.from_libsvm_bytes(bad)
    with pytest.raises(ValueError, match="n_features"):
        CSR.from_libsvm_bytes(b"1 9:1\n", n_features=5)


def test_samples_match_dense_parsing() -> None:
    X, y = _load("a9a_300.svm")
    assert X.shape == (300, 123) and set(np.unique(y)) == {-1.0, 1.0}
    R, _ = _load("rcv1_100.svm")
    assert R.n_rows == 100 and R.nnz > 5000
    np.testing.assert_array_equal(CSR.from_dense(R.to_dense()).data, R.data)


# -- the sparse store ----------------------------------------------------------------------------
def _rand_rows(rng: np.random.Generator, n: int, d: int, nnz: int) -> list[SparseRow]:
    rows = []
    for _ in range(n):
        idx = np.sort(rng.choice(d, size=int(rng.integers(0, nnz + 1)), replace=False))
        rows.append(SparseRow(idx.astype(np.int64), rng.normal(size=len(idx)), d))
    return rows


@pytest.mark.parametrize("width", [50, (1 << 31) - 1])
@pytest.mark.parametrize("kernel", ["gaussian", "polynomial", "linear"])
def test_sparse_store_matches_dense_store(monkeypatch: pytest.MonkeyPatch, kernel: str,
                                          width: int) -> None:
    """Random appends/replaces/removes (forcing compactions): kernel rows of the sparse store
    agree with a dense store of the same points; a restored store gives identical rows."""
    monkeypatch.setattr(sparse_store, "_MIN_GARBAGE", 16)  # compact often
    compactions = []
    compact = SparseSVStore._compact
    monkeypatch.setattr(SparseSVStore, "_compact",
                        lambda self, extra: (compactions.append(1), compact(self, extra))[1])
    rng = np.random.default_rng(0)
    kern = make_kernel(kernel, gamma=0.3, degree=2)
    d_dense = 50
    rows = _rand_rows(rng, 400, d_dense, 12)
    sp, de = SparseSVStore(width, capacity=4), SVStore(d_dense, capacity=4)
    for i, r in enumerate(rows):
        wide = SparseRow(r.indices, r.values, width)
        zz = float(r.values @ r.values)
        op = rng.integers(4) if sp.n > 3 else 0
        if op == 0:
            sp.append(wide, zz, float(i), id_=i)
            de.append(r.to_dense(), zz, float(i), id_=i)
        elif op == 1:
            sp.replace(int(sp.n // 2), wide, zz, -1.0, id_=i)
            de.replace(int(de.n // 2), r.to_dense(), zz, -1.0, id_=i)
        elif op == 2:
            sp.remove(1)
            de.remove(1)
        else:
            sp.scale(0.9)
            de.scale(0.9)
        q = rows[(7 * i) % len(rows)]
        qw = SparseRow(q.indices, q.values, width)
        qq = float(q.values @ q.values)
        np.testing.assert_allclose(sp.row(kern, qw, qq), de.row(kern, q.to_dense(), qq),
                                   rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(sp.a[: sp.n], de.a[: de.n])
    assert len(compactions) > 5
    # memory: the pool holds O(live nnz), whatever the width
    assert len(sp._ind) <= 4 * max(sp.nnz, 16) + 64
    back = SparseSVStore.from_state(sp.get_state("p."), "p.", width)
    for q in rows[:50]:
        qw = SparseRow(q.indices, q.values, width)
        qq = float(q.values @ q.values)
        assert np.array_equal(back.row(kern, qw, qq), sp.row(kern, qw, qq))
    np.testing.assert_allclose(sp.exact_norm2(kern), de.exact_norm2(kern), rtol=1e-9)


@pytest.mark.parametrize("index", ["compiled", "numpy"])
@pytest.mark.parametrize("name", [*SPARSE_LEARNERS, "perceptron", "pa-i", "ogd"])
def test_renumbered_columns_change_nothing_and_cost_follows_the_non_zeros(
        name: str, index: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28: the same rows with their columns spread up to 2^31 - 2 give bit-identical
    scores, and no per-round search or scatter runs over the store's pool or the width: every
    binary search a query makes looks up at most its own non-zeros (the old intersection
    searched every pool non-zero in the query, ~10x slower on news20), with the compiled
    column index or its numpy levels."""
    if index == "numpy":
        monkeypatch.setattr(sparse_store, "_lk", None)
    elif sparse_store._lk is None:
        pytest.skip("the compiled _ck_linear is not built")
    X, y = _load("rcv1_100.svm")
    wide = CSR(X.indptr, X.indices * 40_000, X.data, (1 << 31) - 1)
    params = {"budget": 30, "gamma": 0.5} if name in SPARSE_LEARNERS else {"gamma": 0.5}
    base = make(name, seed=0, **params).predict_learn_many(X, y)
    searched: list[int] = []
    real = np.searchsorted

    def counting(a: np.ndarray, v: np.ndarray, *args: object, **kw: object) -> np.ndarray:
        searched.append(int(np.size(v)))
        return real(a, v, *args, **kw)  # type: ignore[call-overload, no-any-return]

    monkeypatch.setattr(np, "searchsorted", counting)
    m = make(name, seed=0, **params)
    assert np.array_equal(m.predict_learn_many(wide, y), base)
    # a query looks up its own non-zeros; the column index's small level is merged into
    # the large one when it outgrows sparse_store._RECENT columns (amortised over the appends)
    most = int(np.diff(X.indptr).max())
    assert max(searched, default=0) <= sparse_store._RECENT + most, (max(searched), most)
    assert sum(searched) <= 8 * X.nnz * 3, (sum(searched), X.nnz)
    assert len(m.sv._buf) <= X.nnz  # the work vector follows the known columns


# -- learners: sparse ≈ dense on real rows --------------------------------------------------------
@pytest.mark.parametrize("sample", ["a9a_300.svm", "rcv1_100.svm"])
@pytest.mark.parametrize("name", SPARSE_LEARNERS)
def test_sparse_agrees_with_dense(name: str, sample: str) -> None:
    X, y = _load(sample)
    params = {"budget": 40, "gamma": 0.5}
    sp = make(name, seed=4, **params)
    de = make(name, seed=4, **params)
    s = sp.predict_learn_many(X, y)
    d = de.predict_learn_many(X.to_dense(), y)
    assert sp.sparse and not de.sparse
    np.testing.assert_allclose(s, d, rtol=1e-9, atol=1e-12)
    assert np.array_equal(np.sign(s), np.sign(d)), "different mistakes"
    # per-example path with 1-row CSRs is bit-identical to the block path
    one = make(name, seed=4, **params)
    loop = np.array([one.step(X.rows(i, i + 1), y[i]) for i in range(X.n_rows)])
    assert np.array_equal(loop, s)


def test_sparse_learner_memory_ignores_the_width() -> None:
    """The same rows with their indices spread up to 2^31 - 2: identical scores, and a store
    whose bytes follow the non-zeros (a dense store would need 200 × 16 GiB)."""
    X, y = _load("rcv1_100.svm")
    wide = CSR(X.indptr, X.indices * 40_000, X.data, (1 << 31) - 1)
    assert int(wide.indices.max()) < wide.n_features
    a = make("bogd", seed=0, budget=200, gamma=0.5)
    b = make("bogd", seed=0, budget=200, gamma=0.5)
    sa, sb = a.predict_learn_many(X, y), b.predict_learn_many(wide, y)
    np.testing.assert_array_equal(sa, sb)
    assert b.sv.nbytes < 4 * 16 * X.nnz + 64 * 201 + 65536, b.sv.nbytes


# -- the width / memory check --------------------------------------------------------------------
def test_check_width_refuses_huge_budget_in_one_line() -> None:
    with pytest.raises(WidthError) as e:
        check_width("bogd", {"budget": 100_000_000_000}, 123)
    msg = str(e.value)
    assert "\n" not in msg and "budget" in msg and "TiB" in msg
    with pytest.raises(WidthError, match="budget"):
        make("bogd", budget=100_000_000_000).predict_one([0.0] * 123)
    need, _ = memory_estimate("bogd", {"budget": 200}, 123)
    assert 200 * 123 * 8 <= need < 2 * 201 * (123 * 8 + 64) + 64 * 1024


def test_check_width_suggests_what_would_shrink_the_estimate() -> None:
    # a projection of 10^9 frequencies at width 123: hashing the features cannot help
    with pytest.raises(WidthError) as e:
        check_width("fogd", {"n_components": 10**9}, 123)
    assert str(e.value).endswith("; lower n_components") and "hash" not in str(e.value)
    with pytest.raises(WidthError, match=r"lower n_components, hash .*2\^18"):
        check_width("fogd", {"n_components": 4000}, 3_000_000)  # the width is part of it
    with pytest.raises(WidthError, match=r"matrix P .*; lower n_components$"):
        check_width("rff-rls", {"n_components": 20_000}, 24, limit_bytes=2 ** 30)
    with pytest.raises(WidthError, match="hash the features"):  # dense stored rows: hashing
        check_width("oks", {}, 30_000_000)


def test_check_width_counts_a_second_order_matrix() -> None:
    """RFF-RLS's matrix P (its packed upper triangle, ``D(2D+1)`` numbers, with the compiled
    rounds), not only its ``D × d`` projection: 20,000 frequencies on 24 features need 6.4 GB
    for P and 3.8 MB for the projection."""
    need, what = memory_estimate("rff-rls", {"n_components": 20_000}, 24)
    full = compiled.fk is None  # the numpy reference keeps the full (2D)² matrix
    assert need >= (8 * 40_000 ** 2 if full else 4 * 40_000 * 40_001) and "matrix P" in what
    with pytest.raises(WidthError, match=r"matrix P .*would take 11\.9 GiB" if full
                       else r"matrix P .*would take 6\.0 GiB") as e:
        check_width("rff-rls", {"n_components": 20_000}, 24, limit_bytes=2 ** 30)
    assert "\n" not in str(e.value)
    check_width("rff-rls", {"n_components": 200}, 24, limit_bytes=2 ** 30)  # 0.6 MB


def test_check_width_dense_learners_name_alternatives() -> None:
    with pytest.raises(WidthError) as e:
        check_width("fogd", {"n_components": 4000}, 3_231_887, sparse=True)
    msg = str(e.value)
    assert "\n" not in msg and "hash-features" in msg and "bogd" in msg and "projection" in msg
    check_width("bogd", {"budget": 200}, 3_231_887, sparse=True, nnz_per_row=115)
    # a dense learner at moderate width densifies: allowed while d × budget fits
    check_width("okl-gd", {"budget": 200}, 53_975, sparse=True)
    with pytest.raises(WidthError):
        check_width("okl-gd", {"budget": 200}, 53_975, sparse=True, limit_bytes=10 << 20)
    assert set(SPARSE_LEARNERS) <= set(registry.sparse_learners())


@pytest.mark.parametrize("name", SPARSE_LEARNERS)
def test_sparse_pool_stays_bounded(name: str) -> None:
    """3000 rounds of churn at B=20: the pool of sparse SVs (live + garbage) stays within a
    constant factor of the live non-zeros (a leak would hold all 42,000 written ones)."""
    X, y = _load("a9a_300.svm")
    m = make(name, seed=0, budget=20, gamma=0.5)
    rng = np.random.default_rng(0)
    for rep in range(10):
        m.predict_learn_many(X, np.where(rng.random(len(y)) < 0.3, -y, y))
        sv = m.sv
        assert len(sv._ind) <= 4 * max(sv.nnz, sparse_store._MIN_GARBAGE) + 64, (rep, len(sv._ind))
    assert m.t == 3000


def test_integer_csr_data_is_summed_in_float64() -> None:
    """Integer CSR data are converted to float64 at the input: ``‖x‖²`` of 2^32 counts no
    longer wraps to 0 in int64 (which let the row through the input bound and learnt it as a
    zero row), and the learners learn the same as from the float64 row of those values."""
    idx = np.array([1, 2], np.int64)
    xi = CSR.one_row(idx, np.array([2**32, 2**32], np.int64), 10)
    xf = CSR.one_row(idx, np.array([2.0**32, 2.0**32]), 10)
    assert xi.row_sq_norms()[0] == 2.0**65
    assert xi.canonical().data.dtype == np.float64 and xf.canonical() is xf
    z = CSR.one_row(idx, np.array([2.0**32, 2.0**32 + 1e6]), 10)
    for name in ("perceptron", "bogd", "pa-i"):
        a, b = make(name), make(name)
        a.learn_one(xi, 1.0)
        b.learn_one(xf, 1.0)
        assert a.predict_one(z) == b.predict_one(z), name
        # blocks too (the block path converts the whole CSR once)
        a, b = make(name), make(name)
        assert np.array_equal(a.predict_learn_many(CSR.vstack([xi, z]), [1.0, -1.0]),
                              b.predict_learn_many(CSR.vstack([xf, z]), [1.0, -1.0])), name
    # ‖x‖² = 2^125 (wrapped to 0 before): beyond the input bound of a cubic kernel
    big = CSR.one_row(idx, np.array([2**62, 2**62], np.int64), 10)
    with pytest.raises(ValueError, match="too large"):
        make("bogd", kernel="polynomial", degree=3).learn_one(big, 1.0)


@pytest.mark.skipif(compiled.lk is None, reason=f"compiled kernels not in use: {compiled.STATUS}")
def test_compiled_argument_errors_name_their_module() -> None:
    """A refused array names the C module that refused it (it said ``_ckernels`` for all)."""
    tab = np.zeros(4, np.int64)
    with pytest.raises(TypeError, match=r"^_ck_linear: cols must be a C-contiguous"):
        compiled.lk.col_find(tab, np.arange(6, dtype=np.int64)[::2], np.zeros(3, np.int64))


def test_widths_beyond_int64_are_refused_before_learning() -> None:
    """A width of 2^63 or more was learnt, and then get_state overflowed (no checkpoint)."""
    from kernelstream.sparse import MAX_FEATURES

    idx, vals = np.array([0, 3], np.int64), np.array([1.0, -2.0])
    for w in (2**63, 2**64 + 5):
        m = make("perceptron")
        with pytest.raises(ValueError, match=r"perceptron: .*n_features must lie in"):
            m.learn_one(CSR.one_row(idx, vals, w), 1.0)
        with pytest.raises(ValueError, match=r"n_features must lie in"):
            m.predict_learn_many(CSR.one_row(idx, vals, w), [1.0])
        assert m.dim is None and m.t == 0
    m = make("perceptron")
    m.learn_one(CSR.one_row(idx, vals, MAX_FEATURES), 1.0)
    assert int(m.get_state()["__dim__"]) == MAX_FEATURES
