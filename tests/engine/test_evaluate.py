"""The prequential loop (kernelstream.engine.evaluate) against a hand-written per-example loop."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from kernelstream import learners
from kernelstream.engine.evaluate import EvalResult, evaluate, mean_std
from kernelstream.engine.prequential import learner_loss
from kernelstream.seeding import learner_seed, permutation


def _blobs(n: int = 300, d: int = 3, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = np.where(rng.random(n) < 0.4, 1.0, -1.0)
    X = rng.normal(size=(n, d)) + 0.8 * y[:, None]
    return X, y


def _hand_loop(X, y, name, params, seed, R):
    """§2.1 written out with predict_one / learn_one, one example at a time."""
    out = []
    for r in range(R):
        m = learners.make(name, seed=learner_seed(seed, r, name), **params)
        mistakes, loss = 0, 0.0
        for j in permutation(len(y), seed, r):
            s = m.predict_one(X[j])
            mistakes += m.predict_label(s) != y[j]
            loss += max(0.0, 1.0 - y[j] * s)
            m.learn_one(X[j], y[j])
        out.append((100.0 * mistakes / len(y), loss / len(y), m.n_support_vectors))
    return out


def _metrics(res: EvalResult) -> list[tuple]:
    """Everything but the timings."""
    return [(p.mistakes, p.mistake_rate, p.avg_loss, p.n_support_vectors) for p in res.runs]


@pytest.mark.parametrize("tie", ["positive", "negative"])
def test_matches_hand_written_loop(tie: str) -> None:
    X, y = _blobs()
    params = {"gamma": 0.7, "tie": tie}
    res = evaluate(X, y, "perceptron", params, seed=5, permutations=3, progress=None)
    ref = _hand_loop(X, y, "perceptron", params, seed=5, R=3)
    assert [p.mistake_rate for p in res.runs] == [r[0] for r in ref]
    assert [p.n_support_vectors for p in res.runs] == [r[2] for r in ref]
    for p, r in zip(res.runs, ref, strict=True):
        assert p.avg_loss == pytest.approx(r[1], rel=1e-12)
    assert res.loss == "hinge" and res.task == "classification"
    assert res.params == learners.get("perceptron").resolve_params(params)


def test_block_size_does_not_change_results() -> None:
    X, y = _blobs(250)
    runs = [
        _metrics(evaluate(X, y, "perceptron", seed=2, permutations=2, block_size=b, progress=None))
        for b in (None, 1, 7, 1000)
    ]
    assert all(r == runs[0] for r in runs[1:])  # bit-identical, including avg_loss


def test_streams_differ_per_permutation_and_are_reproducible() -> None:
    X, y = _blobs(200)
    a = evaluate(X, y, "perceptron", seed=3, permutations=4, progress=None)
    b = evaluate(X, y, "perceptron", seed=3, permutations=4, progress=None)
    c = evaluate(X, y, "perceptron", seed=4, permutations=4, progress=None)
    assert _metrics(a) == _metrics(b)
    assert _metrics(a) != _metrics(c)
    # different orders give different trajectories (4 identical runs would be a seeding bug)
    assert len({(p.mistakes, p.avg_loss) for p in a.runs}) > 1
    assert [p.permutation for p in a.runs] == [0, 1, 2, 3]


def test_aggregates_use_sample_std() -> None:
    X, y = _blobs(200)
    res = evaluate(X, y, "perceptron", seed=0, permutations=4, progress=None)
    s = res.to_summary()
    rates = [p.mistake_rate for p in res.runs]
    assert s["mistake_rate"] == pytest.approx(np.mean(rates))
    assert s["mistake_rate_std"] == pytest.approx(np.std(rates, ddof=1))
    assert s["n_support_vectors"] == pytest.approx(np.mean([p.n_support_vectors for p in res.runs]))
    assert s["permutations"] == 4 and len(s["per_permutation"]) == 4
    assert s["examples_per_second"] == pytest.approx(200 / s["seconds"])
    one = evaluate(X, y, "perceptron", seed=0, permutations=1, progress=None).to_summary()
    assert one["mistake_rate_std"] == 0.0 and one["seconds_std"] == 0.0
    assert mean_std([1.0, 2.0, 4.0]) == (pytest.approx(7 / 3), pytest.approx(math.sqrt(7 / 3)))


def test_first_rows_then_permute() -> None:
    """`limit` means the first N rows of the file; the permutations are drawn over those N."""
    X, y = _blobs(300)
    res = evaluate(X[:120], y[:120], "perceptron", seed=1, permutations=2, progress=None)
    assert res.examples == 120
    # (the width learnt with: the data's gamma=auto, recorded in the result)
    ref = _hand_loop(X[:120], y[:120], "perceptron", {"gamma": res.params["gamma"]}, seed=1,
                     R=2)
    assert [p.mistake_rate for p in res.runs] == [r[0] for r in ref]


def test_limit_applied_when_loading(tmp_path) -> None:
    from kernelstream import data
    X, y = _blobs(50, d=2)
    path = tmp_path / "blobs.libsvm"
    path.write_text("".join(
        f"{int(t):+d} 1:{float(a)!r} 2:{float(b)!r}\n" for (a, b), t in zip(X, y, strict=True)
    ))
    Xl, yl = data.load(str(path), limit=20)
    np.testing.assert_allclose(Xl, X[:20])
    np.testing.assert_array_equal(yl, y[:20])


def test_progress_lines() -> None:
    X, y = _blobs(100)
    lines: list[str] = []
    evaluate(X, y, "perceptron", permutations=2, block_size=10, progress=lines.append,
             progress_interval=0.0)
    assert lines and "permutation 1/2" in lines[0] and "rows" in lines[0]
    assert any("100/100" in s for s in lines)


def test_loss_choice() -> None:
    assert learner_loss(SimpleNamespace(task="classification")).name == "hinge"
    assert learner_loss(SimpleNamespace(task="regression")).name == "square"
    assert learner_loss(SimpleNamespace(task="regression", loss="absolute")).name == "absolute"


def test_bad_input() -> None:
    X, y = _blobs(10)
    with pytest.raises(ValueError, match="no examples"):
        evaluate(X[:0], y[:0], "perceptron", progress=None)
    with pytest.raises(ValueError, match="permutations"):
        evaluate(X, y, "perceptron", permutations=0, progress=None)
    with pytest.raises(ValueError, match="unknown learner"):
        evaluate(X, y, "no-such-learner", progress=None)
    with pytest.raises(ValueError, match="unknown parameter"):
        evaluate(X, y, "perceptron", {"nope": 1}, progress=None)


def test_a_diverged_run_warns_as_the_cli_does(tmp_path) -> None:
    """oks with loss=square diverges on a plain regression stream: evaluate and run_replay
    issue the CLI's warning (engine.noskill.skill_warnings) as a RuntimeWarning, and the
    results carry it; a healthy run issues none."""
    import warnings

    from kernelstream.learners.testing import make_stream
    from kernelstream.pipelines.replay.replay import run_replay

    X, y = make_stream("regression", 400)
    with pytest.warns(RuntimeWarning, match="oks: the learner diverged") as got:
        res = evaluate(X, y, "oks", {"loss": "square"}, progress=None)
    assert res.avg_loss > 1e6 and len(res.warnings) == 1
    assert [str(w.message) for w in got] == res.warnings
    path = tmp_path / "reg.libsvm"
    path.write_text("".join(f"{t!r} " + " ".join(f"{j + 1}:{v!r}" for j, v in enumerate(row))
                            + "\n" for row, t in zip(X.tolist(), y.tolist(), strict=True)))
    with pytest.warns(RuntimeWarning, match="oks: the learner diverged"):
        rr = run_replay(str(path), [("oks", "oks", {"loss": "square"})], tmp_path / "out",
                        runner="loop", order="file", task="regression")
    assert rr.warnings == rr.eval_results()[0].warnings
    assert "diverged" in rr.warnings[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Xc, yc = _blobs(200)
        assert evaluate(Xc, yc, "perceptron", progress=None).warnings == []


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # pa-i is no better than no skill here
def test_sparse_rows_evaluate_as_the_replay_does(tmp_path) -> None:
    """A CSR X runs as a replay of the sparse file does: the sparse replay's figures bit for
    bit, and the dense form's to the replay's own rule (the same mistakes; losses equal to
    the rounding of sums taken in another order)."""
    from pathlib import Path

    from kernelstream.data.options import ReadOptions
    from kernelstream.engine.replay.sources import load_rows
    from kernelstream.pipelines.replay.replay import run_replay
    from kernelstream.sparse import CSR

    rcv1 = Path(__file__).resolve().parents[1] / "data" / "rcv1_100.svm"
    rows = load_rows(ReadOptions(str(rcv1), rows="sparse"))
    assert isinstance(rows.X, CSR)
    for name in ("bogd", "pa-i"):
        sparse = evaluate(rows.X, rows.y, name, {"budget": 30} if name == "bogd" else {},
                          permutations=2, progress=None)
        dense = evaluate(rows.X.to_dense(), rows.y, name,
                         {"budget": 30} if name == "bogd" else {}, permutations=2,
                         progress=None)
        assert sparse.params == dense.params
        assert [r.mistakes for r in sparse.runs] == [r.mistakes for r in dense.runs]
        np.testing.assert_allclose([r.avg_loss for r in sparse.runs],
                                   [r.avg_loss for r in dense.runs], rtol=1e-9, atol=1e-12)
        rr = run_replay(str(rcv1), [(name, name, sparse.params)], tmp_path / name,
                        runner="loop", permutations=2, rows="sparse").eval_results()[0]
        assert [(r.mistakes, r.avg_loss) for r in rr.runs] == [
            (r.mistakes, r.avg_loss) for r in sparse.runs]
