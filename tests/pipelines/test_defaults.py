"""Data-driven defaults (issue 27): ``gamma=auto`` resolved from the data and recorded, the
default learner per task, ``check``'s feature ranges and scaling hint, tune's default grid."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from kernelstream import learners
from kernelstream.data import widths
from kernelstream.data.options import ReadOptions
from kernelstream.learners.kernels import parse_sigmas
from kernelstream.pipelines import config
from kernelstream.pipelines.cli import main
from kernelstream.sparse import CSR

DATA = Path(__file__).resolve().parents[1] / "data"
A9A = str(DATA / "a9a_300.svm")
RCV1 = str(DATA / "rcv1_100.svm")
DOC = Path(__file__).resolve().parents[2] / "docs" / "which-learner.md"


def _replay(out: Path, *args: str) -> dict:
    assert main(["replay", *args, "--out", str(out), "--quiet", "--runner", "loop"]) == 0
    return json.loads((out / "summary.json").read_text())


def _default(learner: str, param: str) -> object:
    return next(p.default for p in learners.get(learner).params if p.name == param)


def _scores(out: Path) -> np.ndarray:
    t = pq.read_table(out / "predictions", columns=["position", "score"]).sort_by("position")
    return t.column("score").to_numpy()


# -- the estimators ------------------------------------------------------------------------------
def test_scale_gamma_is_sklearns_scale_dense_or_sparse() -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 7)) * np.arange(1, 8)
    X[X < 0] = 0.0  # zeros, so that the CSR form leaves entries out
    assert widths.scale_gamma(X) == pytest.approx(1.0 / (X.shape[1] * X.var()), rel=1e-12)
    assert widths.scale_gamma(CSR.from_dense(X)) == pytest.approx(widths.scale_gamma(X),
                                                                   rel=1e-12)
    assert widths.scale_gamma(np.ones((4, 3))) == 1.0  # no variance: sklearn's 1.0


def test_median_gamma_same_on_dense_and_sparse_rows() -> None:
    rng = np.random.default_rng(1)
    X = rng.normal(size=(40, 9))
    X[np.abs(X) < 0.7] = 0.0
    dense, sparse = widths.median_gamma(X), widths.median_gamma(CSR.from_dense(X))
    assert sparse == pytest.approx(dense, rel=1e-9)
    d = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)[np.triu_indices(40, 1)]
    assert 0.5 / np.median(d) < dense < 2.0 / np.median(d)  # a sample of the same pairs


def test_median_gamma_leaves_out_distances_that_overflow() -> None:
    """Rows with values near 1e308 among the first ones: the learners refuse them (their
    squared norms overflow) and their distances (inf, or NaN in the sparse form) say nothing
    of the scale, even two such rows a finite distance apart; the estimate is the other
    rows', dense or sparse alike, never 0 (a width every learner refuses)."""
    ok = np.array([[0.1, 0.2], [0.3, 0.1], [0.5, 0.6], [0.2, 0.2], [0.1, 0.0]])
    X = np.insert(ok, [2, 4, 4, 5], [[1e308, 1e308], [-1e308, 0.0], [1e200, 0.0],
                                     [1e200, 1.0]], axis=0)
    want = widths.median_gamma(ok)
    for rows in (X, CSR.from_dense(X)):
        assert widths.median_gamma(rows) == pytest.approx(want, rel=1e-12)
        assert widths.auto_gamma(rows) > 0
    huge = np.array([[1e308, 0.0], [-1e308, 0.0], [1e308, 1e308]])
    for rows in (huge, CSR.from_dense(huge), np.zeros((3, 2))):
        assert widths.median_distance(rows) is None
        assert widths.median_gamma(rows) == 1.0  # the documented fallback


def test_auto_factor_and_centred_sigmas() -> None:
    assert widths.auto_factor("auto") == 1.0 and widths.auto_factor("AUTO*0.25") == 0.25
    assert widths.auto_factor("0.5") is None and widths.auto_factor("auto*-1") is None
    grid = parse_sigmas(widths.centred_sigmas(0.5, parse_sigmas("2^-2:1:3")))  # σ = 1
    assert len(grid) == 6 and np.allclose(grid[1:] / grid[:-1], 2.0, rtol=1e-3)
    assert np.exp(np.log(grid).mean()) == pytest.approx(1.0, rel=1e-3)


# -- replay: resolved, recorded, rerun exactly --------------------------------------------------
def test_auto_gamma_resolved_from_the_first_rows_and_recorded(tmp_path: Path) -> None:
    s = _replay(tmp_path / "a", A9A, "-l", "bpa-s")
    expected = widths.file_gamma(ReadOptions(path=A9A))
    assert expected != _default("bpa-s", "gamma")  # not the learner's fixed 0.5
    assert s["params"]["gamma"] == expected == s["configs"][0]["params"]["gamma"]
    assert isinstance(s["params"]["gamma"], float)
    # a width given stays as given, as gamma or as sigma
    assert _replay(tmp_path / "b", A9A, "-l", "bogd", "-p", "gamma=0.5")["params"]["gamma"] == 0.5
    assert _replay(tmp_path / "c", A9A, "-l", "bogd", "-p", "sigma=1")["params"]["gamma"] == 0.5


def test_rerun_from_the_recorded_width_is_bit_identical(tmp_path: Path) -> None:
    s = _replay(tmp_path / "a", A9A, "-l", "bogd")
    assert s["params"]["gamma"] == widths.file_gamma(ReadOptions(path=A9A))  # auto, resolved
    again = _replay(tmp_path / "b", A9A, "-l", "bogd", "-p", f"gamma={s['params']['gamma']!r}")
    assert again["params"] == s["params"]
    assert np.array_equal(_scores(tmp_path / "a"), _scores(tmp_path / "b"))
    assert again["per_permutation"][0]["mistakes"] == s["per_permutation"][0]["mistakes"]


def test_sigma_grid_centred_on_the_auto_width(tmp_path: Path) -> None:
    s = _replay(tmp_path / "a", A9A, "-l", "raker", "--limit", "100")
    gamma = widths.file_gamma(ReadOptions(path=A9A))
    assert s["params"]["sigmas"] == widths.centred_sigmas(
        gamma, parse_sigmas(_default("raker", "sigmas")))


def test_tune_default_grid_is_around_the_auto_width(tmp_path: Path) -> None:
    out = tmp_path / "t"
    assert main(["tune", A9A, "-l", "bogd", "--limit", "120", "--runner", "loop", "-q",
                 "--out", str(out)]) == 0
    tuned = json.loads((out / "tuned.json").read_text())
    gamma = widths.file_gamma(ReadOptions(path=A9A))
    factor = widths.auto_factor(tuned["cells"][tuned["cell"]]["grid"]["gamma"])
    assert factor in widths.TUNE_FACTORS
    assert tuned["params"]["gamma"] == widths.rounded(gamma * factor)
    # --params-from reads the number, so the suggested replay is the tuned cell exactly
    s = _replay(tmp_path / "r", A9A, "--params-from", str(out / "tuned.json"), "--limit", "120")
    assert s["params"]["gamma"] == tuned["params"]["gamma"]


# -- the default learner -------------------------------------------------------------------------
def test_default_learner_is_the_documented_one_with_its_own_budget(tmp_path: Path) -> None:
    doc = " ".join(DOC.read_text().split())  # one line: the phrases may wrap anywhere
    m = re.search(r"Classification on dense rows: `(\S+)`.*on sparse rows: `(\S+)`.*"
                  r"regression on dense rows: `(\S+)`.*on sparse rows: `(\S+)`.*"
                  r"A Kafka topic or a stream.*gets `(\S+)` \(regression: `(\S+)[ `]", doc,
                  re.S)
    assert m is not None, "docs/which-learner.md names the defaults"
    by_rows = config.DEFAULT_BY_ROWS
    assert m.groups() == (by_rows["classification"]["dense"][0],
                          by_rows["classification"]["sparse"][0],
                          by_rows["regression"]["dense"][0], by_rows["regression"]["sparse"][0],
                          config.DEFAULT_LEARNERS["classification"][0],
                          config.DEFAULT_LEARNERS["regression"][0])
    reg, _ = _regression_csv(tmp_path / "reg.csv")
    for task, data, rows in (("classification", A9A, "dense"), ("classification", RCV1, "sparse"),
                             ("regression", str(reg), "dense")):
        name, params = by_rows[task][rows]
        default = _replay(tmp_path / f"d-{task}-{rows}", data, "--limit", "150", "--task", task)
        named = _replay(tmp_path / f"n-{task}-{rows}", data, "--limit", "150", "--task", task,
                        "-l", name, *(a for k, v in params.items() for a in ("-p", f"{k}={v}")))
        assert default["learner"] == name
        assert default["default_learner"] == {"rows": rows, "learner": name}
        assert "default_learner" not in named  # a learner named: nothing was chosen
        assert default["params"] == named["params"]  # e.g. the budget of `-l NAME` (was 100)
        assert default["avg_loss"] == named["avg_loss"]
        assert np.array_equal(_scores(tmp_path / f"d-{task}-{rows}"),
                              _scores(tmp_path / f"n-{task}-{rows}"))


def test_default_on_dense_rows_reruns_exactly_from_its_record(tmp_path: Path) -> None:
    s = _replay(tmp_path / "a", A9A)
    assert (s["learner"], s["params"]["n_components"]) == ("rff-rls", 500)  # not bpa-s
    assert s["params"]["gamma"] == widths.file_gamma(ReadOptions(path=A9A))
    again = _replay(tmp_path / "b", A9A, "-l", s["learner"],
                    *(a for k, v in s["params"].items() for a in ("-p", f"{k}={v!r}"
                                                                  if isinstance(v, float)
                                                                  else f"{k}={v}")))
    assert again["params"] == s["params"]
    assert np.array_equal(_scores(tmp_path / "a"), _scores(tmp_path / "b"))


def test_a_param_the_default_lacks_names_the_learner_the_rows_chose(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["replay", A9A, "-p", "budget=100", "--out", str(tmp_path / "o"), "-q"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "default learner on dense rows (this file's) is rff-rls" in err and "-l bpa-s" in err
    assert len(err.splitlines()) == 1
    # a parameter the default has is taken, as with -l
    assert _replay(tmp_path / "e", A9A, "-p", "lam=0.25", "--limit", "50")["params"]["lam"] == 0.25
    # a misspelt one of the default's is a typo, not another learner's parameter
    assert main(["replay", A9A, "-p", "gama=0.1", "--out", str(tmp_path / "t"), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("has no parameter 'gama'; did you mean 'gamma'?") and "-l bpa-s" not in err


def test_file_rows_is_the_rows_the_learners_get(tmp_path: Path) -> None:
    assert widths.file_rows(ReadOptions(path=A9A)) == "dense"  # 123 columns
    assert widths.file_rows(ReadOptions(path=RCV1)) == "sparse"  # wider than 2048
    assert widths.file_rows(ReadOptions(path=A9A, n_features=5000)) == "sparse"
    assert widths.file_rows(ReadOptions(path=RCV1, scale="01")) == "dense"  # scaled: dense
    assert widths.file_rows(ReadOptions(path=A9A, rows="sparse")) == "sparse"
    assert widths.file_rows(ReadOptions(path=RCV1, hash_features=8)) == "dense"
    csv = tmp_path / "x.csv"
    csv.write_text("1,2,1\n3,4,-1\n")
    assert widths.file_rows(ReadOptions(path=str(csv))) == "dense"


def test_regression_has_a_default_learner(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    X = rng.normal(size=(120, 3))
    y = X @ np.array([0.5, -1.0, 2.0])
    path = tmp_path / "reg.csv"
    np.savetxt(path, np.column_stack([X, y]), delimiter=",", fmt="%.6f")
    s = _replay(tmp_path / "r", str(path), "--task", "regression")
    assert s["learner"] == config.DEFAULT_BY_ROWS["regression"]["dense"][0]
    assert s["task"] == "regression" and s["default_learner"]["rows"] == "dense"


# -- check: ranges and the scaling hint -----------------------------------------------------------
def _csv(path: Path, scales: list[float], target: float = 1.0) -> Path:
    rng = np.random.default_rng(3)
    X = rng.uniform(size=(200, len(scales))) * np.array(scales)
    y = np.where(rng.uniform(size=200) < 0.5, -1, 1) * target
    np.savetxt(path, np.column_stack([X, y]), delimiter=",", fmt="%.6f")
    return path


def test_check_reports_feature_ranges_and_hints_scaling(tmp_path: Path, capsys) -> None:
    wide = _csv(tmp_path / "wide.csv", [1.0, 1.0, 5000.0])
    assert main(["check", str(wide)]) == 0
    out = capsys.readouterr().out
    assert "features" in out and "ranges" in out
    assert "hint:" in out and "--scale 01" in out and "feature 3" in out
    even = _csv(tmp_path / "even.csv", [1.0, 2.0, 1.5])
    assert main(["check", str(even)]) == 0
    assert "hint:" not in capsys.readouterr().out
    assert main(["check", str(even), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["hint"] is None and doc["features"]["max"] <= 2.0


def test_check_of_a_regression_file_says_so_without_a_class_table(tmp_path: Path,
                                                                   capsys) -> None:
    reg, _ = _regression_csv(tmp_path / "reg.csv")
    assert main(["check", str(reg)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.strip().endswith("use --task regression")
    assert len(err.strip().splitlines()) == 1
    assert main(["check", str(reg), "--task", "regression"]) == 0
    assert "rows" in capsys.readouterr().out


def test_check_hints_a_regression_target_far_from_unit_scale(tmp_path: Path, capsys) -> None:
    tiny = _csv(tmp_path / "tiny.csv", [1.0, 1.0], target=0.001)
    assert main(["check", str(tiny), "--task", "regression"]) == 0
    out = capsys.readouterr().out
    # the defaults (the target standardised), not --scale-target 01, which did worse on the
    # shared regression sets
    assert "target" in out and "--scale-target auto" in out and "--scale 01" not in out
    assert "did worse" in out


def test_replay_scales_wide_features_by_default_and_records_it(tmp_path: Path, capsys) -> None:
    wide = _csv(tmp_path / "wide.csv", [1.0, 1.0, 5000.0])
    auto = _replay(tmp_path / "a", str(wide))
    err = capsys.readouterr().err
    assert err.count("scaling features to [0, 1]") == 1 and "feature 3" in err
    assert "hint:" not in err
    assert auto["scale"] == "01" and "feature 3" in auto["auto_scale"]
    given = _replay(tmp_path / "b", str(wide), "--scale", "01")  # the same run, asked for
    assert "scaling features" not in capsys.readouterr().err and "auto_scale" not in given
    assert np.array_equal(_scores(tmp_path / "a"), _scores(tmp_path / "b"))
    assert given["configs"][0]["params"] == auto["configs"][0]["params"]  # gamma on scaled rows
    kept = _replay(tmp_path / "c", str(wide), "--scale", "none")  # asked not to: no line
    assert kept["scale"] == "none" and "auto_scale" not in kept
    assert "scaling features" not in capsys.readouterr().err
    even = _replay(tmp_path / "d", str(_csv(tmp_path / "even.csv", [1.0, 2.0, 1.5])))
    assert even["scale"] == "none" and "auto_scale" not in even
    assert capsys.readouterr().err.count("scaling") == 0


def test_replay_never_auto_scales_sparse_rows(tmp_path: Path, capsys) -> None:
    s = _replay(tmp_path / "r", RCV1)
    assert s["scale"] == "none" and "scaling" not in capsys.readouterr().err


def _regression_csv(path: Path) -> tuple[Path, np.ndarray]:
    rng = np.random.default_rng(4)
    X = rng.uniform(size=(300, 3)) * np.array([1.0, 1.0, 5000.0])
    y = 0.02 + 0.001 * X[:, 0]  # a target far from unit scale
    np.savetxt(path, np.column_stack([X, y]), delimiter=",", fmt="%.6f")
    return path, y


def test_replay_standardises_a_regression_target_and_keeps_its_units(tmp_path: Path,
                                                                     capsys) -> None:
    """--scale-target auto (the default): the learners learn the target standardised by the
    first rows' mean and std, and every output (scores, losses) is in the target's units."""
    path, y = _regression_csv(tmp_path / "reg.csv")
    s = _replay(tmp_path / "r", str(path), "--task", "regression")
    err = capsys.readouterr().err
    assert err.count("standardising the target") == 1 and "hint:" not in err
    assert s["target_standardised"] == {"mean": pytest.approx(float(y.mean()), rel=1e-5),
                                        "std": pytest.approx(float(y.std()), rel=1e-3)}
    assert s["scale"] == "01" and s["scale_target"] == "auto"  # its features are scaled too
    scores = _scores(tmp_path / "r")
    assert abs(float(scores[100:].mean()) - float(y.mean())) < float(y.std())  # its units
    again = _replay(tmp_path / "r2", str(path), "--task", "regression")  # the same run again
    assert np.array_equal(_scores(tmp_path / "r2"), scores)
    assert again["target_standardised"] == s["target_standardised"]
    kept = _replay(tmp_path / "k", str(path), "--task", "regression", "--scale-target", "none")
    assert "target_standardised" not in kept and kept["avg_loss"] > s["avg_loss"]
    # a target left as it is asks for scaling too: no feature scaling alone, a hint for both
    err = capsys.readouterr().err
    assert kept["scale"] == "none" and err.count("hint: ") == 1
    assert "--scale 01 --scale-target 01" in err
    scaled = _replay(tmp_path / "t", str(path), "--task", "regression", "--scale-target", "01")
    assert scaled["scale"] == "01" and "target_standardised" not in scaled


# -- stream: --init-from continues with the widths the models were learnt with --------------------
def test_stream_takes_the_widths_of_its_init_from(tmp_path: Path, monkeypatch) -> None:
    from kernelstream.pipelines import cli
    from kernelstream.pipelines.live import stream_config

    saved = {"b": {"learner": "bogd", "params": {"gamma": 0.0371, "budget": 20}},
             "r": {"learner": "raker", "params": {"sigmas": "0.5,1,2"}}}
    monkeypatch.setattr(stream_config, "_saved_configs", lambda path: saved)

    def configs(*extra: str) -> dict[str, dict]:
        args = cli.build_parser().parse_args(
            ["stream", "kafka://127.0.0.1:9/t", "--n-features", "3", "-l", "b=bogd",
             "-l", "r=raker", "--init-from", str(tmp_path), "--out", str(tmp_path / "o"),
             *extra])
        return {c.label: dict(c.params) for c in stream_config.StreamConfig.from_args(args).configs}

    got = configs()
    assert got["b"]["gamma"] == 0.0371 and got["r"]["sigmas"] == "0.5,1,2"
    assert got["b"]["budget"] == 500  # only the widths come from there
    assert configs("-p", "b.gamma=2")["b"]["gamma"] == 2.0  # a width given wins
    assert configs("-p", "sigma=1")["b"]["gamma"] == 0.5


def test_reproduction_runs_keep_the_learners_fixed_widths() -> None:
    """A paper's table runs as a replay command line: a width its protocol leaves to the
    learner stays the learner's fixed default (the published setting), not gamma=auto."""
    from kernelstream.experiments.grid import Run

    assert "c.sigmas=2^-2:1:3" in Run("bank32nh", "ioks", {"loss": "square"}).param_args("c")
    assert "c.gamma=0.5" in Run("german", "bogd", {"budget": 10}).param_args("c")
    explicit = Run("german", "bogd", {"sigma": 2.0}).param_args("c")
    assert not any(a.startswith("c.gamma=") for a in explicit)


def test_tune_tunes_the_learner_replay_runs_on_sparse_rows(tmp_path: Path) -> None:
    # tune looked at the rows before --scale auto was resolved: scaled rows are dense, so it
    # tuned rff-rls on a file whose replay runs bpa-s (and refused --rows sparse)
    replayed = _replay(tmp_path / "r", RCV1, "--limit", "40")
    out = tmp_path / "t"
    assert main(["tune", RCV1, "--limit", "40", "--runner", "loop", "-q", "--out", str(out),
                 "--grid", "gamma=auto,auto*2"]) == 0
    tuned = json.loads((out / "tuned.json").read_text())
    assert replayed["learner"] == "bpa-s" and tuned["learner"] == replayed["learner"]
    assert tuned["baseline"]["learner"] == "bpa-s"
    out = tmp_path / "s"
    assert main(["tune", A9A, "--rows", "sparse", "--limit", "40", "--runner", "loop", "-q",
                 "--out", str(out), "--grid", "gamma=auto,auto*2"]) == 0
    assert json.loads((out / "tuned.json").read_text())["learner"] == "bpa-s"


def test_scale_auto_does_not_flip_on_one_added_row(tmp_path: Path, capsys) -> None:
    # three features in 50 .. 52 and one in 0 .. 3000 (german.numer's shape: offsets far from
    # zero): one all-zero row stretched the narrow ranges to 0 .. 52 and turned the min-max
    # range rule off (1500x -> 58x); the spreads' ratio stays far above its threshold
    rng = np.random.default_rng(7)
    X = np.column_stack([rng.uniform(50, 52, (200, 3)), rng.uniform(0, 3000, 200)])
    lines = [",".join(f"{v:.3f}" for v in x) + f",{i % 2}" for i, x in enumerate(X)]
    clean, zero = tmp_path / "clean.csv", tmp_path / "zero.csv"
    clean.write_text("\n".join(lines) + "\n")
    zero.write_text("\n".join([*lines, "0,0,0,0,1"]) + "\n")
    for path in (zero, clean):
        s = _replay(tmp_path / path.stem, str(path), "-l", "bpa-s")
        assert s["scale"] == "01", path.name
        assert s["auto_scale"].startswith("feature spreads (standard deviations) differ by")
    assert main(["check", str(zero)]) == 0 and "--scale 01" in capsys.readouterr().out


def test_a_model_per_key_gets_the_streams_small_default(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    """``--key-by`` without ``-l``: bpa-s on dense rows too (not rff-rls's 4 MB a model)."""
    path = tmp_path / "k.csv"
    rng = np.random.default_rng(5)
    path.write_text("key,a,b,label\n" + "".join(
        f"k{i % 4},{x:.4f},{z:.4f},{1 if x > 0 else -1}\n"
        for i, (x, z) in enumerate(rng.normal(size=(80, 2)).tolist())))
    s = _replay(tmp_path / "o", str(path), "--key-by", "key", "--label-column", "label",
                "--header")
    assert s["default_learner"] == {"rows": "dense", "learner": "bpa-s", "key_by": "key"}
    assert {k["learner"] for k in s["keys"]} == {config.DEFAULT_LEARNERS["classification"][0]}
    # a -p the small default lacks names it
    assert main(["replay", str(path), "--key-by", "key", "--label-column", "label", "--header",
                 "-p", "n_components=10", "-o", str(tmp_path / "p"), "-q"]) == 2
    err = capsys.readouterr().err
    assert "default learner of a model per --key-by entity is bpa-s" in err, err


def test_a_model_per_key_that_cannot_fit_is_refused_before_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``-l rff-rls --key-by``: the entities of the file's head times 4 MB a model, checked
    against the memory available before any model is made."""
    path = tmp_path / "k.csv"
    path.write_text("key,a,b,label\n" + "".join(f"k{i % 20},{i % 7},{i % 3},{i % 2}\n"
                                                 for i in range(100)))
    monkeypatch.setenv("KERNELSTREAM_MEMORY_LIMIT", str(40 << 20))  # 40 MiB
    args = ["replay", str(path), "--key-by", "key", "--label-column", "label", "--header",
            "--runner", "loop", "-q"]
    assert main([*args, "-l", "rff-rls", "-p", "n_components=500", "-o",
                 str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err.strip()
    assert "--key-by key: a model per entity, and the first 100 records hold 20 entities" in err
    assert "learner rff-rls" in err and len(err.splitlines()) == 1
    assert main([*args, "-o", str(tmp_path / "b")]) == 0  # the default per key: bpa-s
