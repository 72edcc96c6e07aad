"""Bad records of a file never crash a run nor vanish: each is a dead letter with its reason
and position, in ``check`` as in ``replay`` (QA review of the replay/check CLI): non-finite
labels, rows all rejected by ``--n-features``, bad regression targets, truncated compressed
files, missing ``--key-by`` values, plain values in reasons, read options that do not apply."""

from __future__ import annotations

import json
import math
import re
import warnings
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from kernelstream.data import LabelMap, ParseError, label_mix
from kernelstream.data.options import ReadOptions
from kernelstream.pipelines import cli

LOOP = ["-q", "-l", "perceptron"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, [ln for ln in err.splitlines() if ln.strip()], out


def summary(out: Path) -> dict:  # type: ignore[type-arg]
    return json.loads((out / "summary.json").read_text())


def dead_letters(out: Path) -> list[dict]:  # type: ignore[type-arg]
    rows: list[dict] = []  # type: ignore[type-arg]
    for f in sorted((out / "dead_letters").glob("*.parquet")):
        rows += pq.read_table(f).to_pylist()
    return rows


def svm_rows(n: int, bad: dict[int, str] | None = None) -> str:
    """``n`` LIBSVM rows of labels ±1 (both classes from the first rows); ``bad`` replaces
    the label of some rows (0-based)."""
    lines = []
    for i in range(n):
        lab = (bad or {}).get(i, "+1" if i % 3 == 0 else "-1")
        lines.append(f"{lab} 1:{(i % 7) / 7:.3f} 2:{(i % 5) / 5:.3f} 3:{i % 2}")
    return "\n".join(lines) + "\n"


# -- 1: a non-finite label is a dead letter, never a class ------------------------------------
def test_nonfinite_label_is_no_class() -> None:
    m = LabelMap.from_labels(["-1", "nan", "+1", "inf"])
    assert m.classes == ("-1", "+1")
    for tok in ("nan", "-inf", " NaN "):
        with pytest.raises(ParseError, match="non-finite label"):
            m(tok)
        with pytest.raises(ParseError, match="non-finite label"):
            LabelMap.regression()(tok)
    with pytest.raises(ValueError, match="non-finite"):
        LabelMap("-1", "nan")


@pytest.mark.parametrize("fmt", ["libsvm", "csv"])
def test_nonfinite_label_is_a_dead_letter(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          fmt: str) -> None:
    if fmt == "libsvm":
        path = tmp_path / "nl.svm"
        path.write_text(svm_rows(60, {1: "nan"}))
    else:  # 0/1 labels, a nan among the first two rows
        path = tmp_path / "nl.csv"
        path.write_text("".join(f"{i % 7},{i % 3},{'nan' if i == 1 else i % 2}\n"
                                for i in range(60)))
    rc, err, out = run(capsys, "check", str(path))
    assert rc == 0, err
    assert "labels        2 distinct" in out and "nan" not in out.split("dead letters")[0]
    assert "non-finite label: 1 (first at line 2)" in out
    assert label_mix.run_positive_label(ReadOptions(path=str(path))) is None
    for runner in ("loop", "direct"):
        o = tmp_path / f"run-{runner}"
        rc, err, _ = run(capsys, "replay", str(path), *LOOP, "--runner", runner, "--out", str(o))
        assert rc == 0, err
        assert summary(o)["examples"] == 59
        (d,) = dead_letters(o)
        assert d["line"] == 2 and d["reason"] == "non-finite label 'nan'"


# -- 2: rows all rejected by --n-features -----------------------------------------------------
def test_rows_rejected_by_n_features(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "w.svm"
    path.write_text(svm_rows(40))  # indices up to 3
    rc, err, out = run(capsys, "check", str(path), "--n-features", "2")
    assert rc == 2 and len(err) == 1 and "check --n-features" in err[0]
    assert "index exceeds n_features: 40 (first at line 1)" in out
    for cmd in (["replay", str(path), *LOOP], ["tune", str(path), "--limit", "40"],
                ["replay", "german", *LOOP]):  # an embedded set is checked too
        o = tmp_path / f"out-{cmd[0]}-{len(cmd)}"
        rc, err, _ = run(capsys, *cmd, "--n-features", "2", "--out", str(o))
        assert rc == 2, (cmd, err)
        assert len(err) == 1 and "would be rejected" in err[0], err
        assert not (o / "summary.json").exists()


# -- 3: bad regression targets ----------------------------------------------------------------
def reg_rows(n: int, bad: dict[int, str] | None = None) -> str:
    return "".join(f"{(bad or {}).get(i, f'{50 + (i % 11) * 7.5:.2f}')} 1:{(i % 7) / 7:.3f} "
                   f"2:{(i % 5) / 5:.3f}\n" for i in range(n))


@pytest.mark.parametrize("bad", ["nan", "inf"])
def test_nonfinite_target_is_left_out_of_the_head(tmp_path: Path, bad: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.svm"
    path.write_text(reg_rows(80, {3: bad}))
    rc, err, out = run(capsys, "check", str(path), "--task", "regression")
    assert rc == 0, err
    assert "rows          79" in out and "non-finite label: 1 (first at line 4)" in out
    assert "target        50 .. 125" in out
    o = tmp_path / "run"
    with warnings.catch_warnings():  # an inf target leaked numpy's overflow warning
        warnings.simplefilter("error", RuntimeWarning)
        rc, err, _ = run(capsys, "replay", str(path), "-q", "--runner", "loop", "--task",
                         "regression", "--out", str(o))
    assert rc == 0, err
    assert any("standardising the target" in ln for ln in err), err
    assert summary(o)["examples"] == 79
    (d,) = dead_letters(o)
    assert d["line"] == 4 and d["reason"] == f"non-finite label '{bad}'"


def test_losses_never_raise() -> None:
    from kernelstream.engine.prequential import judge_one
    from kernelstream.learners.losses import LOSSES

    for loss in LOSSES.values():
        for f, y in ((0.0, 1e308), (-1e200, 1e200), (1e308, -1.0), (0.5, 1.0)):
            v = loss.value(f, y)
            assert v >= 0.0 and not math.isnan(v), (loss.name, f, y)
            loss.deriv(f, y)
    assert LOSSES["square"].value(0.0, 1e308) == math.inf
    assert LOSSES["square"].value(0.5, 2.0) == 2.25
    assert judge_one(False, 0.0, 0.0, 1e200, LOSSES["square"].value) == (None, math.inf)

    def raising(f: float, y: float) -> float:
        return (f - y) ** 2  # Python's float ** raises OverflowError

    assert judge_one(False, 0.0, 0.0, 1e200, raising) == (None, math.inf)


def test_an_infinite_loss_sums_to_inf() -> None:
    """A stream's exact sums take an overflowing (inf) loss: their total is inf, where the
    live stream's per-row sum raised OverflowError (and died on every restart)."""
    import numpy as np

    from kernelstream.engine.exact import exact_add, exact_value
    from kernelstream.engine.noskill import NoSkill

    assert exact_value(exact_add(0, np.array([1.0, math.inf, 2.0]))) == math.inf
    assert exact_value(exact_add(0, np.array([1.5, 2.5]))) == 4.0
    a, b = NoSkill(), NoSkill()
    for y in (1.0, 1e200, 2.0):
        a.add_one(y, 0.0, False, lambda f, t: (f - t) * (f - t))
    b.add(np.array([1.0, 1e200, 2.0]), np.zeros(3), False, lambda f, t: (f - t) * (f - t))
    assert a == b and a.figures(False)["rmse"] == math.inf


def test_a_target_the_learner_refuses_is_a_dead_letter(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A finite target beyond the learners' bound (``Learner._check_y``: |y| <= Y_MAX, a
    ValueError before any change): the replay makes it a dead letter of stage ``learn``, with
    the number as a plain float, and goes on."""
    path = tmp_path / "big.svm"
    path.write_text(reg_rows(80, {5: "1e308"}))
    o = tmp_path / "run"
    rc, err, _ = run(capsys, "replay", str(path), "-q", "--runner", "loop", "--task",
                     "regression", "--scale-target", "none", "--out", str(o))
    assert rc == 0, err
    assert summary(o)["examples"] == 79
    (d,) = dead_letters(o)
    assert d["stage"] == "learn" and "|y| <= 1e+50" in d["reason"], d
    assert d["reason"].endswith("got 1e+308"), d


# -- 4: a truncated compressed file -----------------------------------------------------------
@pytest.mark.parametrize("kind", ["gz", "xz"])
def test_truncated_compressed_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   kind: str) -> None:
    import gzip
    import lzma

    text = svm_rows(3000).encode()
    packed = gzip.compress(text) if kind == "gz" else lzma.compress(text)
    path = tmp_path / f"t.svm.{kind}"
    path.write_bytes(packed[: len(packed) * 2 // 3])
    rc, err, out = run(capsys, "check", str(path))
    assert rc == 0, err
    rows = int(out.split("rows", 1)[1].split()[0])
    assert 0 < rows < 3000
    assert f"compressed file ends early: 1 (first at line {rows + 1})" in out
    for runner in ("loop", "direct"):
        o = tmp_path / f"run-{runner}"
        rc, err, _ = run(capsys, "replay", str(path), *LOOP, "--runner", runner, "--out", str(o))
        assert rc == 0, err
        assert summary(o)["examples"] == rows  # rows read = learnt + dead-lettered
        (d,) = dead_letters(o)
        assert d["line"] == rows + 1 and d["reason"].startswith("compressed file ends early")
    # the file-order reader (Python API, order="file") reads it the same way
    from kernelstream.engine.learner_config import LearnerConfig
    from kernelstream.pipelines.replay.replay import run_loop_outputs

    o = tmp_path / "file-order"
    run_loop_outputs(str(path), [LearnerConfig("perceptron", "perceptron", {})], o,
                     order="file")
    (d,) = dead_letters(o)
    assert d["line"] == rows + 1 and d["reason"].startswith("compressed file ends early")
    small = tmp_path / "s.svm.bz2"  # a bz2 block decompresses nothing before its end
    import bz2

    small.write_bytes(bz2.compress(text)[:200])
    rc, err, _ = run(capsys, "replay", str(small), *LOOP, "--out", str(tmp_path / "s"))
    assert rc == 2 and len(err) == 1 and "cut short" in err[0], err


# -- 5: a row without its --key-by value ------------------------------------------------------
@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_missing_key_is_a_dead_letter(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      fmt: str) -> None:
    keys = ["a", "b", None, "None", "a", "b"] * 10
    feats = [i / 60 for i in range(60)]
    labels = [i % 2 for i in range(60)]
    if fmt == "csv":
        path = tmp_path / "k.csv"
        path.write_text("f,k,label\n" + "".join(
            f"{f},{'' if k is None else k},{y}\n" for f, k, y in zip(feats, keys, labels,
                                                                     strict=True)))
    else:
        import pyarrow as pa

        path = tmp_path / "k.parquet"
        pq.write_table(pa.table({"f": feats, "k": keys, "label": labels}), path)
    rc, err, out = run(capsys, "check", str(path), "--key-by", "k", "--label-column", "label")
    assert rc == 0, err
    assert "entities      3 (--key-by); rows without a key: 10" in out
    assert "missing key-by value: 10" in out
    o = tmp_path / "run"
    rc, err, _ = run(capsys, "replay", str(path), *LOOP, "--runner", "loop", "--key-by", "k",
                     "--label-column", "label", "--out", str(o))
    assert rc == 0, err
    assert summary(o)["examples"] == 50
    dead = dead_letters(o)
    assert len(dead) == 10 and all(d["reason"].startswith("missing key-by value") for d in dead)
    first = 3 if fmt == "parquet" else 4  # Parquet rows from 1; the CSV's header is line 1
    assert dead[0]["line"] == first
    ents: set[str] = set()
    for f in (o / "metrics").rglob("*.parquet"):
        ents |= set(pq.read_table(f, columns=["entity"]).column(0).to_pylist())
    assert ents == {"a", "b", "None"}  # the real key "None" only; no '' entity


# -- 6: plain values in reasons, reason kinds cut at a word's end ------------------------------
def test_parquet_reasons_hold_plain_values(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    import pyarrow as pa

    from kernelstream.data.errors import reason_kind
    from kernelstream.engine.deadletters import reasons_summary

    assert reason_kind("non-finite value np.float64(nan) in column 'https'") == \
        "non-finite value"
    assert reason_kind("bad value 1.5e in column 2") == "bad value"
    assert reasons_summary([("bad cell np.float64(1.5)", 2)]) == "2 bad cell"
    path = tmp_path / "p.parquet"
    n = 40
    f = [float("nan") if i == 7 else i / n for i in range(n)]
    pq.write_table(pa.table({"f": f, "g": [i % 3 for i in range(n)],
                             "label": [1 if i % 2 else -1 for i in range(n)]}), path)
    rc, err, out = run(capsys, "check", str(path))
    assert rc == 0 and "non-finite value: 1 (first at line 8)" in out, (err, out)
    o = tmp_path / "run"
    rc, err, out = run(capsys, "replay", str(path), *LOOP, "--runner", "loop", "--out", str(o))
    assert rc == 0, err
    (d,) = dead_letters(o)
    assert d["reason"] == "non-finite value 'nan' in column 'f'"
    assert "1 rejected input records: 1 non-finite value (see" in out


# -- 7: read options the format or task would ignore are refused ------------------------------
@pytest.mark.parametrize("case", ["delimiter on libsvm", "header on libsvm", "header on parquet",
                                  "positive label in regression"])
def test_inapplicable_read_options_are_refused(tmp_path: Path, case: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    import pyarrow as pa

    svm = tmp_path / "d.svm"
    svm.write_text(svm_rows(40))
    if case == "delimiter on libsvm":
        data, opt, expected = "german", ["--delimiter", ";"], "applies to CSV files only"
    elif case == "header on libsvm":
        data, opt, expected = str(svm), ["--no-header"], "applies to CSV files only"
    elif case == "header on parquet":
        data = str(tmp_path / "d.parquet")
        pq.write_table(pa.table({"f": [0.1 * i for i in range(40)],
                                 "label": [i % 2 for i in range(40)]}), data)
        opt, expected = ["--header"], "applies to CSV files only; "
    else:
        reg = tmp_path / "r.svm"
        reg.write_text(reg_rows(40))
        data, opt = str(reg), ["--task", "regression", "--positive-label", "1"]
        expected = "applies to classification only"
    for cmd in (["check"], ["replay", "-q", "--runner", "loop"], ["tune", "--limit", "40"]):
        o = [] if cmd[0] == "check" else ["--out", str(tmp_path / cmd[0])]
        rc, err, _ = run(capsys, cmd[0], data, *cmd[1:], *opt, *o)
        assert rc == 2 and len(err) == 1 and expected in err[0], (cmd, err)


def test_target_head_leaves_out_what_the_learners_refuse() -> None:
    """``--scale-target auto``'s statistics skip a target every learner refuses (NaN, inf,
    beyond Y_MAX): one such row does not switch the standardisation off."""
    from kernelstream.data.scaling import TARGET_MAX, target_standardisation
    from kernelstream.learners.base import Y_MAX

    assert TARGET_MAX == Y_MAX
    clean, _ = target_standardisation([0.1, 0.2, 0.3, 0.4])
    for bad in (float("nan"), float("inf"), 1e308):
        got, line = target_standardisation([0.1, 0.2, bad, 0.3, 0.4])
        assert got == clean, (bad, line)


def spread_csv(n: int = 120, overflow_at: int | None = None) -> str:
    """Dense CSV rows whose feature 1 spans 0..1000 and the others 0..1 (``--scale auto``
    scales them); ``overflow_at``: one row of values near 1e308 there."""
    lines = [f"{(i * 37) % 1000}.5,{(i % 7) / 7:.3f},{(i % 5) / 5:.3f},{1 if i % 2 else -1}"
             for i in range(n)]
    if overflow_at is not None:
        lines.insert(overflow_at, "1e308,1e308,0.5,1")
    return "\n".join(lines) + "\n"


def test_head_statistics_leave_out_rows_every_learner_refuses(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A row whose squared norm is beyond KERNEL_MAX (a dead letter of every learner) is no
    part of check's ranges and spreads, nor of ``--scale auto``'s decision; no numpy
    warning."""
    from kernelstream.data.scaling import KERNEL_MAX
    from kernelstream.learners.base import KERNEL_MAX as LEARNERS_MAX

    assert KERNEL_MAX == LEARNERS_MAX
    clean, bad = tmp_path / "clean.csv", tmp_path / "ovf.csv"
    clean.write_text(spread_csv())
    bad.write_text(spread_csv(overflow_at=3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rc, err, out = run(capsys, "check", str(bad), "--json")
        assert rc == 0, err
        got = json.loads(out)["features"]
        rc, _, out = run(capsys, "check", str(clean), "--json")
        want = json.loads(out)["features"]
        assert got.pop("rows_left_out") == 1
        assert got == want
        rc, err, out = run(capsys, "check", str(bad))
        assert "nan" not in out and "1 row left out" in out, out
        for data in (clean, bad):
            rc, err, _ = run(capsys, "replay", str(data), *LOOP, "--runner", "loop",
                             "--out", str(tmp_path / data.stem))
            assert rc == 0 and any("scaling features" in ln for ln in err), err


@pytest.mark.parametrize("case", ["target", "row"])
def test_learn_dead_letters_name_what_was_given(tmp_path: Path, case: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A target of 1e308 under --scale-target auto (standardised before the learner's check)
    and a row whose squared norm overflows: the reason names the value as given, the raw
    column holds plain numbers, the kind says the learner rejected the row (as the stream
    words it), and no numpy warning leaks."""
    path = tmp_path / "d.svm"
    if case == "target":
        path.write_text(reg_rows(80, {5: "1e308"}))
        opts = ["--task", "regression"]
    else:
        path.write_text(svm_rows(40) + "+1 1:1e200 2:0.5\n" + svm_rows(10))
        opts = ["--task", "classification", "--scale", "none"]
    o = tmp_path / "run"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        learner = ["-l", "perceptron"] if case == "row" else []  # regression: the default
        rc, err, _ = run(capsys, "replay", str(path), *learner, "-q", "--runner", "loop", *opts,
                         "--out", str(o))
    assert rc == 0, err
    (d,) = dead_letters(o)
    assert d["reason"].startswith("learner rejected the row: "), d
    assert "np.float64" not in d["raw"], d
    if case == "target":
        assert d["reason"].endswith("got 1e+308") and d["raw"].startswith("1e+308 "), d
    from kernelstream.data.errors import reason_kind

    assert reason_kind(d["reason"]) == "learner rejected the row", d  # the summary line's kind


def test_an_empty_label_column_is_no_class(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A CSV whose label column is empty in every row (a trailing comma on each line): no
    class named '' (``run_positive_label``), but the refusal naming the empty label column
    and --label-column, in check and replay alike."""
    path = tmp_path / "trail.csv"
    path.write_text("".join(f"{i % 3}.5,{i % 2},{(i + 1) % 2},\n" for i in range(60)))
    assert label_mix.run_positive_label(ReadOptions(path=str(path))) is None
    for cmd in (["check"], ["replay", *LOOP, "--runner", "loop", "--out",
                            str(tmp_path / "run")]):
        rc, err, _ = run(capsys, cmd[0], str(path), *cmd[1:])
        assert rc == 2 and len(err) == 1, (cmd, err)
        assert "60 of 60 records would be rejected (most: 'empty label in column 3'" in err[0]
        assert "--label-column" in err[0] and "('')" not in err[0], err


def test_wide_dense_refusal(tmp_path: Path) -> None:
    """A wide dense run is refused naming what made its rows dense (--rows dense as asked),
    and gamma=auto's scaled reservoir stays small at any width (its full-width arrays took
    3.3 GB before the refusal of a 200-row file at --n-features 1e8)."""
    import tracemalloc

    from kernelstream.data import widths
    from kernelstream.data.rows import ParsedRow
    from kernelstream.errors import ConfigError
    from kernelstream.pipelines.replay.replay_checks import check_dense_rows

    for scale, rows, why in (("01", "dense", "(--rows dense)"), ("none", "dense", "(--rows dense)"),
                             ("01", "auto", "(--scale 01 makes them dense)")):
        read = ReadOptions(path="g.svm", scale=scale, rows=rows)
        with pytest.raises(ConfigError, match=re.escape(why)):
            check_dense_rows(read, 10**12, 200)
    parsed = [ParsedRow(str(i % 2), np.array([1, 4, 9 + i]), np.array([0.5 * i, 3.0, 1.0]), None)
              for i in range(50)]
    small = widths.reservoir_from_rows(parsed, 60, scale="01")
    tracemalloc.start()
    try:
        wide = widths.reservoir_from_rows(parsed, 10**8, scale="01")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 10 << 20, peak
    assert np.array_equal(wide.data, small.data) and np.array_equal(wide.indices, small.indices)


def test_check_and_replay_say_what_is_missing(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """check with every row rejected says "labels 0 distinct: none"; a replay whose gamma=auto
    has no pair of rows to measure (--limit 1) says so in one line."""
    path = tmp_path / "d.svm"
    path.write_text(svm_rows(30))
    rc, err, out = run(capsys, "check", str(path), "--n-features", "2")
    assert "labels        0 distinct: none" in out, out
    rc, err, _ = run(capsys, "replay", str(path), "-q", "--runner", "loop", "--limit", "1",
                     "--out", str(tmp_path / "run"))
    assert rc == 0, err
    (line,) = [ln for ln in err if "gamma=auto" in ln]
    assert "a single row" in line and "gamma=1.0" in line, err


def test_minmax_ranges_leave_out_rows_every_learner_refuses() -> None:
    """A row whose squared norm is beyond the learners' bound (a dead letter of the run) does
    not stretch the scaling ranges of the rows that are learnt."""
    from kernelstream.data.scaling import KERNEL_MAX, fit_minmax
    from kernelstream.learners.base import KERNEL_MAX as LEARNERS

    assert KERNEL_MAX == LEARNERS
    X = np.array([[0.0, 1.0], [2.0, 3.0], [1e308, 1e308], [1.0, 2.0]])
    lo, hi = fit_minmax(X)
    assert lo.tolist() == [0.0, 1.0] and hi.tolist() == [2.0, 3.0]
    assert [v.tolist() for v in fit_minmax(X[[2]])] == [[1e308, 1e308]] * 2  # nothing else
