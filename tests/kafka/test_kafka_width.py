"""``gamma=auto`` of a bounded Kafka-topic replay (``kernelstream replay kafka://...``): the
width a file replay estimates from the same rows, read from the first records the replay
will learn (bad records skipped), recorded in ``summary.json`` so that the recorded command
(or the recorded number) reruns the run exactly; an empty topic keeps the learners' default
widths and says so. (Resuming a ``--checkpoint`` continues with the recorded width:
``test_kafka.py::test_checkpoints_continue_exactly``.)

The tests run the tansu broker of the ``test`` extra (``kernelstream.kafka_client.local_broker``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _helpers import new_topic, output_columns, produce

from kernelstream import learners
from kernelstream.data import widths
from kernelstream.data.options import ReadOptions
from kernelstream.data.rows import ParsedRow
from kernelstream.engine.learner_config import LearnerConfig
from kernelstream.errors import ConfigError
from kernelstream.pipelines.cli import main
from kernelstream.pipelines.replay.replay import run_replay
from kernelstream.pipelines.replay.replay_args import KafkaOptions, ReplayConfig
from kernelstream.pipelines.replay.topic_head import head_scaling
from kernelstream.seeding import learner_seed


def _libsvm(X: np.ndarray, y: np.ndarray) -> list[bytes]:
    return [(f"{int(t):+d} " + " ".join(f"{j + 1}:{v:.4f}" for j, v in enumerate(x))).encode()
            for x, t in zip(X, y, strict=True)]


def _as_text(X: np.ndarray) -> np.ndarray:
    """``X`` as its 4-decimal text reads back (np.round can be an ulp away from it)."""
    return np.vectorize(lambda v: float(f"{v:.4f}"))(X)


def _summary(out: Path) -> dict[str, Any]:
    return json.loads((out / "summary.json").read_text())


def _scores(out: Path) -> list[float]:
    pred = output_columns(out, "predictions")
    return [s for _, s in sorted(zip(pred["position"], pred["score"], strict=True))]


def _direct(X: np.ndarray, y: np.ndarray, name: str, **params: Any) -> list[float]:
    m = learners.make(name, seed=learner_seed(0, 0, name), **params)
    return m.predict_learn_many(np.asarray(X, np.float64), np.asarray(y, np.float64)).tolist()


def test_topic_width_and_scaling_are_the_files(broker: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """The topic's recorded gamma and --scale auto are those a replay of a file of the same
    rows records: from the first RESERVOIR_ROWS good rows, the records the run dead-letters
    (unparsable, an index past --n-features, a third class) skipped and not counted; the
    topic's rows are scaled by those rows' ranges (recorded), a file's by all of its own."""
    rng = np.random.default_rng(11)
    X = _as_text(rng.random((1300, 5)) * [1.0, 2.0, 0.5, 300.0, 1.0])  # ranges 600x apart
    y = np.where(X[:, 0] > 0.5, 1, -1)
    good = _libsvm(X, y)
    bad = {10: b"+1 nonsense", 500: b"+1 9:1.0", 900: b"3 1:0.5"}
    msgs = list(good)
    for i in sorted(bad):
        msgs.insert(i, bad[i])
    topic = new_topic(broker)
    produce(broker, topic, [(None, m, None) for m in msgs])
    file = tmp_path / "rows.libsvm"
    file.write_bytes(b"\n".join(good) + b"\n")
    common = ["-l", "bogd", "-p", "budget=30", "--n-features", "5", "-q"]
    assert main(["replay", f"kafka://{broker}/{topic}", *common, "--kafka-idle", "1",
                 "--out", str(tmp_path / "topic")]) == 0
    assert main(["replay", str(file), *common, "--out", str(tmp_path / "file")]) == 0
    err = capsys.readouterr().err
    assert "scaling features to [0, 1] by the ranges of the first 1,000 rows of kafka://" in err
    t, f = _summary(tmp_path / "topic"), _summary(tmp_path / "file")
    assert (t["width_source"], t["width_records"]) == ("auto", widths.RESERVOIR_ROWS)
    gamma = f["configs"][0]["params"]["gamma"]
    assert t["auto_gamma"] == gamma == t["configs"][0]["params"]["gamma"]
    assert (t["predictions"], t["dead_letters"]) == (1300, 3)
    assert t["scale"] == f["scale"] == "01" and t["auto_scale"] == f["auto_scale"]
    lo, hi = X[:1000].min(axis=0), X[:1000].max(axis=0)
    assert t["scale_ranges"] == {"lo": lo.tolist(), "hi": hi.tolist()}
    assert _scores(tmp_path / "topic") == _direct((X - lo) / (hi - lo), y, "bogd", budget=30,
                                                  gamma=gamma)
    # without scaling, the width of the rows as they are (the file's again)
    assert main(["replay", f"kafka://{broker}/{topic}", *common, "--kafka-idle", "1",
                 "--scale", "none", "--out", str(tmp_path / "topic-none")]) == 0
    assert main(["replay", str(file), *common, "--scale", "none",
                 "--out", str(tmp_path / "file-none")]) == 0
    t, f = _summary(tmp_path / "topic-none"), _summary(tmp_path / "file-none")
    assert t["scale"] == "none" and "scale_ranges" not in t
    assert t["auto_gamma"] == f["configs"][0]["params"]["gamma"] != gamma


def test_a_rerun_of_the_recorded_command_is_identical(broker: str, tmp_path: Path) -> None:
    """The recorded command (summary.json ``argv``) reruns a topic of two partitions with the
    same width and scores; so does the recorded number given as ``-p gamma=``."""
    rng = np.random.default_rng(5)
    X = _as_text(rng.random((600, 4)) * [1.0, 4.0, 1.0, 2.0])
    y = np.where(X[:, 0] + X[:, 2] > 1, 1, -1)
    topic = new_topic(broker, partitions=2)
    produce(broker, topic, [(None, (",".join(f"{v:.4f}" for v in x) + f",{t}").encode(), i % 2)
                            for i, (x, t) in enumerate(zip(X, y, strict=True))])
    out = tmp_path / "run"
    url = f"kafka://{broker}/{topic}"
    assert main(["replay", url, "--format", "csv", "-l", "bpa-s", "--kafka-idle", "1",
                 "--out", str(out), "-q"]) == 0
    first, scores = _summary(out), _scores(out)
    assert first["width_source"] == "auto" and first["width_records"] == 600
    gamma = first["auto_gamma"]
    assert len(scores) == 600
    shutil.rmtree(out)
    assert main(first["argv"]) == 0
    again = _summary(out)
    assert _scores(out) == scores
    assert again["auto_gamma"] == gamma
    assert [c["params"] for c in again["configs"]] == [c["params"] for c in first["configs"]]
    given = tmp_path / "given"
    assert main(["replay", url, "--format", "csv", "-l", "bpa-s", "-p", f"gamma={gamma!r}",
                 "--kafka-idle", "1", "--out", str(given), "-q"]) == 0
    assert _scores(given) == scores
    assert "width_source" not in _summary(given)  # a width given: nothing read for it


def test_an_empty_topic_keeps_the_default_widths(broker: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """No example to estimate from (an empty topic; one good record among bad ones): the
    learners' default widths, one line on stderr (with -q too), recorded as
    width_source "default"; an explicit ``-p gamma=auto`` falls back alike."""
    empty = new_topic(broker)
    for i, extra in enumerate(([], ["-p", "gamma=auto"])):
        out = tmp_path / f"e{i}"
        assert main(["replay", f"kafka://{broker}/{empty}", "-l", "bogd", "--n-features", "3",
                     "--kafka-idle", "1", "--out", str(out), "-q", *extra]) == 0
        err = [ln for ln in capsys.readouterr().err.splitlines() if "gamma=auto" in ln]
        assert len(err) == 1 and "gamma=auto: 0 examples among 0 records" in err[0], err
        assert "the learners' default widths (bogd gamma=" in err[0]
        doc = _summary(out)
        assert (doc["width_source"], doc["auto_gamma"], doc["width_records"]) == (
            "default", None, 0)
    one = new_topic(broker)
    produce(broker, one, [(None, b"+1 1:0.5", None), (None, b"+1 nonsense", None),
                          (None, b"-1 7:1", None)])
    out = tmp_path / "one"
    assert main(["replay", f"kafka://{broker}/{one}", "-l", "bogd", "--n-features", "3",
                 "--kafka-idle", "1", "--out", str(out), "-q"]) == 0
    assert "gamma=auto: 1 example among 3 records" in capsys.readouterr().err
    doc = _summary(out)
    assert (doc["width_source"], doc["width_records"], doc["predictions"]) == ("default", 1, 1)
    assert doc["configs"][0]["params"]["gamma"] == 0.5  # bogd's own default


def test_a_checkpoint_continues_its_width_and_scaling(broker: str, tmp_path: Path) -> None:
    """A resumed --checkpoint keeps the width and the ranges of its first run (recorded in
    the checkpoint), though the new records alone would give others: the two runs' scores
    are those of one run over all the rows. A stream --init-from it continues its models on
    its records scaled by those ranges (and reads nothing)."""
    rng = np.random.default_rng(2)
    X = rng.random((800, 3)) * [1.0, 500.0, 2.0]
    X[400:, 1] *= 3.0  # the second run's records: another range
    X = _as_text(X)
    y = np.where(X[:, 0] + X[:, 2] / 2 > 1, 1, -1)
    msgs = [(None, (",".join(f"{v:.4f}" for v in x) + f",{t}").encode(), None)
            for x, t in zip(X, y, strict=True)]
    topic = new_topic(broker)
    base = ["replay", f"kafka://{broker}/{topic}", "--format", "csv", "-l", "bogd", "-p",
            "budget=40", "--kafka-idle", "1", "--checkpoint", str(tmp_path / "ck"), "-q"]
    docs, scores = [], []
    for i, part in enumerate((msgs[:400], msgs[400:])):
        produce(broker, topic, part)
        assert main([*base, "--out", str(tmp_path / f"o{i}")]) == 0
        docs.append(_summary(tmp_path / f"o{i}"))
        scores += _scores(tmp_path / f"o{i}")
    first, second = docs
    assert (first["width_source"], second["width_source"]) == ("auto", "checkpoint")
    gamma = first["auto_gamma"]
    assert second["configs"][0]["params"]["gamma"] == gamma
    lo, hi = X[:400].min(axis=0), X[:400].max(axis=0)
    assert first["scale_ranges"] == second["scale_ranges"] == {"lo": lo.tolist(),
                                                               "hi": hi.tolist()}
    assert second["scale"] == "01"
    assert scores == _direct((X - lo) / (hi - lo), y, "bogd", budget=40, gamma=gamma)
    # a stream continues these models on its records, scaled by the recorded ranges
    X2 = _as_text(rng.random((60, 3)) * [1.0, 1500.0, 2.0])
    y2 = np.where(X2[:, 0] + X2[:, 2] / 2 > 1, 1, -1)
    live = new_topic(broker)
    produce(broker, live, [(f"e{i}".encode(), (",".join(f"{v:.4f}" for v in x)
                                               + f",{t}").encode(), None)
                           for i, (x, t) in enumerate(zip(X2, y2, strict=True))])
    r = subprocess.run([str(Path(sys.executable).parent / "kernelstream"), "stream",
                        f"kafka://{broker}/{live}", "--format", "csv", "-l", "bogd", "-p",
                        "budget=40", "--init-from", str(tmp_path / "ck"), "--out",
                        str(tmp_path / "s"), "--idle-stop", "2s", "-q"],
                       capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    assert "scaling features to [0, 1] by the ranges --init-from" in r.stderr
    assert "gamma=auto" not in r.stderr
    doc = _summary(tmp_path / "s")
    assert (doc["scale"], doc["scale_ranges"]) == ("01", first["scale_ranges"])
    assert doc["learners"]["bogd"]["params"]["gamma"] == gamma
    m = learners.make("bogd", seed=learner_seed(0, 0, "bogd"), budget=40, gamma=gamma)
    m.predict_learn_many((X - lo) / (hi - lo), y.astype(np.float64))
    want = m.predict_learn_many((X2 - lo) / (hi - lo), y2.astype(np.float64)).tolist()
    pred = output_columns(tmp_path / "s", "predictions")
    assert [s for _, s in sorted(zip(pred["position"], pred["score"], strict=True))] == want


def test_head_scaling_takes_the_learners_columns() -> None:
    """--scale auto of a topic's first rows (no broker): the ranges are those of the
    learners' columns (hashed: 2^k of them) when the rule fires on dense rows; rows that go
    to the learners as CSR (LIBSVM wider than 2,048 columns) and ranges within 100x of each
    other are left alone."""
    rng = np.random.default_rng(4)
    X = rng.random((50, 3)) * [1.0, 1000.0, 2.0]
    head = [ParsedRow("+1", np.arange(1, 4), x, None) for x in X]
    url = "kafka://127.0.0.1:9/t"
    ranges, why = head_scaling(head, ReadOptions(url, n_features=3))
    assert ranges == (tuple(X.min(axis=0)), tuple(X.max(axis=0)))
    assert why is not None and why.startswith("feature spreads (standard deviations) differ by")
    hashed, _ = head_scaling(head, ReadOptions(url, hash_features=4))
    assert hashed is not None and len(hashed[0]) == len(hashed[1]) == 16
    assert head_scaling(head, ReadOptions(url, n_features=5000)) == (None, None)  # sparse
    even = [ParsedRow("+1", None, x, None) for x in rng.random((50, 3))]
    assert head_scaling(even, ReadOptions(url, fmt="csv")) == (None, None)


def test_summary_of_a_submitted_topic_replay_reads_nothing(
        broker: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``replay --submit-only`` of a topic records what its head decided (the width and the
    scaling ranges) in ``submitted.json``; ``summary`` rebuilds the same configuration from
    that record without reading the topic again (which may have moved on by then)."""
    from kernelstream.pipelines.commands import replay as replay_command
    from kernelstream.pipelines.commands._common import command_parser
    from kernelstream.pipelines.commands._runs import write_submitted
    from kernelstream.pipelines.commands.summary import submitted_config
    from kernelstream.pipelines.replay import topic_head
    from kernelstream.pipelines.replay.replay_args import ReplayConfig

    rng = np.random.default_rng(3)
    X = _as_text(rng.random((300, 3)) * [1.0, 500.0, 2.0])
    topic = new_topic(broker)
    produce(broker, topic, [(None, m, None) for m in _libsvm(X, np.where(X[:, 0] > .5, 1, -1))])
    out = tmp_path / "out"
    argv = ["replay", f"kafka://{broker}/{topic}", "-l", "bogd", "-l", "pa=bpa-s",
            "-p", "pa.gamma=0.25", "--n-features", "3", "--kafka-idle", "1", "--out", str(out),
            "--submit-only", "--runner", "beam"]
    args = command_parser(replay_command).parse_args(argv)
    args.pipeline_args = ["--runner=DataflowRunner"]
    config = ReplayConfig.from_args(args, argv)
    assert config.widths is not None and config.widths["width_source"] == "auto"
    assert config.read.scale_ranges is not None
    out.mkdir()
    write_submitted(config, "job-1")
    submitted = json.loads((out / "submitted.json").read_text())

    def no_read(*_: Any, **__: Any) -> Any:
        raise AssertionError("summary read the topic again")

    monkeypatch.setattr(topic_head.kafka_client, "head_rows", no_read)
    again = submitted_config(submitted, str(out))
    assert again.learners == config.learners  # bogd's auto width, bpa-s's given one
    assert again.read == config.read and again.widths == config.widths
    assert again.auto_scale == config.auto_scale and again.read.scale == "01"

    # a regression whose head decided only its target (no width left to the data, no
    # scaling): recorded all the same, and rebuilt without a read
    reg = new_topic(broker)
    produce(broker, reg, [(None, f"{1000 + 50 * x[0]:.4f} 1:{x[0]:.4f} 2:{x[1]:.4f} "
                           f"3:{x[2]:.4f}".encode(), None) for x in X])
    argv = ["replay", f"kafka://{broker}/{reg}", "--task", "regression", "-l", "raker",
            "-p", "loss=square", "-p", "sigmas=1,2", "--scale", "none", "--n-features", "3",
            "--kafka-idle", "1", "--out", str(tmp_path / "reg"), "--submit-only", "--runner",
            "beam"]
    monkeypatch.undo()
    args = command_parser(replay_command).parse_args(argv)
    args.pipeline_args = ["--runner=DataflowRunner"]
    config = ReplayConfig.from_args(args, argv)
    assert config.widths is None and config.read.scale_ranges is None
    assert config.learners[0].target is not None
    (tmp_path / "reg").mkdir()
    write_submitted(config, "job-2")
    submitted = json.loads((tmp_path / "reg" / "submitted.json").read_text())
    monkeypatch.setattr(topic_head.kafka_client, "head_rows", no_read)
    again = submitted_config(submitted, str(tmp_path / "reg"))
    assert again.learners == config.learners and again.read == config.read
    # a record of an earlier version (no topic_head: it never standardised a topic's target)
    monkeypatch.undo()
    del submitted["topic_head"]
    assert submitted_config(submitted, str(tmp_path / "reg")).learners[0].target is None


def test_a_topic_regression_target_is_standardised_by_its_head(
        broker: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--scale-target auto of a topic (the default, as a file's): the learners learn the
    target standardised by the mean and deviation of the first rows' targets (a file of the
    same rows gives the same numbers), every output stays in its units; a resumed
    --checkpoint keeps the first run's numbers; a stream warm-started from those models goes
    on with them (and reads nothing for them)."""
    from kernelstream.engine.prequential import PrequentialPass

    rng = np.random.default_rng(8)
    X = _as_text(rng.random((600, 3)))
    y = np.vectorize(lambda v: float(f"{v:.4f}"))(1000 + 300 * X[:, 0] - 200 * X[:, 1] ** 2)
    msgs = [f"{t:.4f} {' '.join(f'{j + 1}:{v:.4f}' for j, v in enumerate(x))}".encode()
            for x, t in zip(X, y, strict=True)]
    file = tmp_path / "rows.libsvm"
    file.write_bytes(b"\n".join(msgs[:400]) + b"\n")
    topic = new_topic(broker)
    common = ["--task", "regression", "-l", "raker", "-p", "loss=square", "-p", "n_components=50",
              "--n-features", "3", "-q"]
    base = ["replay", f"kafka://{broker}/{topic}", *common, "--kafka-idle", "1",
            "--checkpoint", str(tmp_path / "ck")]
    docs, scores = [], []
    for i, part in enumerate((msgs[:400], msgs[400:])):
        produce(broker, topic, [(None, m, None) for m in part])
        assert main([*base, "--out", str(tmp_path / f"o{i}")]) == 0
        docs.append(_summary(tmp_path / f"o{i}"))
        scores += _scores(tmp_path / f"o{i}")
    err = capsys.readouterr().err
    assert err.count("standardising the target by the mean") == 1, err  # the first run only
    assert f"of the first 400 rows of kafka://{broker}/{topic}" in err
    assert main(["replay", str(file), *common, "--out", str(tmp_path / "file")]) == 0
    want = {"mean": float(y[:400].mean()), "std": float(y[:400].std())}
    assert docs[0]["target_standardised"] == docs[1]["target_standardised"] == want
    assert _summary(tmp_path / "file")["target_standardised"] == want
    assert docs[1]["width_source"] == "checkpoint"
    params = docs[0]["configs"][0]["params"]
    model = learners.make("raker", seed=learner_seed(0, 0, "raker"), **params)
    run = PrequentialPass(model, X, y, target=(want["mean"], want["std"]))
    run.run()
    assert scores == run.scores.tolist()  # in the target's units, both runs as one
    live = new_topic(broker)
    produce(broker, live, [(f"e{i}".encode(), m, None) for i, m in enumerate(msgs[:50])])
    stream = [str(Path(sys.executable).parent / "kernelstream"), "stream",
              f"kafka://{broker}/{live}", *common, "--init-from", str(tmp_path / "ck"),
              "--idle-stop", "2s"]
    r = subprocess.run([*stream, "--out", str(tmp_path / "s")], capture_output=True,
                       text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    assert f"--init-from {tmp_path / 'ck'} recorded, as its models learnt it" in r.stderr
    assert "gamma=auto" not in r.stderr
    doc = _summary(tmp_path / "s")
    assert doc["target_standardised"] == want and doc["predictions"] == 50
    assert doc["scale_target"] == docs[0]["scale_target"] == "auto"
    # those models cannot go on learning the target as it comes, nor classify
    classify = [*stream[:3], "-l", "raker", "--n-features", "3", *stream[-4:]]
    for i, cmd in enumerate(([*stream, "--scale-target", "none"], classify)):
        r = subprocess.run([*cmd, "--out", str(tmp_path / f"s-{i}")], capture_output=True,
                           text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert r.returncode == 2, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        # a classifying raker has other parameters than the models (loss): refused first
        assert ("drop --scale-target none" if i == 0 else "was learnt with loss='square'"
                ) in r.stderr
    # nor can the replay's own checkpoint be resumed so
    capsys.readouterr()
    assert main([*base, "--scale-target", "none", "--out", str(tmp_path / "o2")]) == 2
    assert "resume it as it ran (--task regression, --scale-target auto)" in (
        capsys.readouterr().err)


def _spread_topic(broker: str, n: int, seed: int, spreads: list[float]
                  ) -> tuple[str, np.ndarray, np.ndarray]:
    """A new topic of ``n`` LIBSVM rows whose features spread as ``spreads``, labelled by the
    first and third: its URL, the rows and the labels."""
    rng = np.random.default_rng(seed)
    X = _as_text(rng.random((n, len(spreads))) * spreads)
    y = np.where(X[:, 0] + X[:, 2] > 1, 1, -1)
    topic = new_topic(broker)
    produce(broker, topic, [(None, m, None) for m in _libsvm(X, y)])
    return f"kafka://{broker}/{topic}", X, y


def test_the_python_api_reads_a_topics_head_as_the_cli(broker: str, tmp_path: Path) -> None:
    """``run_replay`` of a topic decides ``scale="auto"`` and the widths left to the data on
    the topic's first examples, as ``kernelstream replay`` does (before: no scaling and the
    learner's own gamma, 0.5); an empty topic keeps the default widths with a warning, and an
    explicit ``gamma="auto"`` is refused there."""
    url, _, _ = _spread_topic(broker, 700, 3, [1.0, 50.0, 1.0, 0.2])  # ranges 250x apart
    assert main(["replay", url, "-l", "bpa-s", "--n-features", "4", "--kafka-idle", "1",
                 "--out", str(tmp_path / "cli"), "-q"]) == 0
    cli = _summary(tmp_path / "cli")
    with pytest.warns(RuntimeWarning, match="scaling features to"):
        res = run_replay(url, [LearnerConfig("bpa-s", "bpa-s", {})], tmp_path / "api",
                         n_features=4, kafka_idle=1)
    assert res.scale == cli["scale"] == "01" and res.auto_scale == cli["auto_scale"]
    assert res.configs[0].params["gamma"] == cli["auto_gamma"] != 0.5
    assert _scores(tmp_path / "api") == _scores(tmp_path / "cli")  # the same rows learnt
    empty = f"kafka://{broker}/{new_topic(broker)}"
    with pytest.warns(RuntimeWarning, match="too few to estimate a width"):
        config = ReplayConfig.of(empty, [LearnerConfig("r", "rff-rls", {})], tmp_path / "e",
                                 n_features=3, kafka_idle=1)
    assert config.learners[0].params["gamma"] == 0.5
    with pytest.raises(ConfigError, match="gamma=auto is estimated from the data"), \
            pytest.warns(RuntimeWarning):
        ReplayConfig.of(empty, [LearnerConfig("r", "rff-rls", {"gamma": "auto"})],
                        tmp_path / "e2", n_features=3, kafka_idle=1)


def test_the_python_api_resumes_a_topic_with_what_its_checkpoint_recorded(
        broker: str, tmp_path: Path) -> None:
    """A resumed ``checkpoint=`` reads no head: its learners go on with the width and the
    ranges they were learnt with, whatever the rows that came since look like."""
    rng = np.random.default_rng(4)
    X = _as_text(rng.random((400, 3)) * [1.0, 30.0, 1.0])
    y = np.where(X[:, 0] > 0.5, 1, -1)
    topic = new_topic(broker)
    produce(broker, topic, [(None, m, None) for m in _libsvm(X, y)])
    url, ckpt = f"kafka://{broker}/{topic}", tmp_path / "ckpt"
    cfg = [LearnerConfig("b", "bpa-s", {"budget": 20})]
    with pytest.warns(RuntimeWarning, match="scaling features to"):
        first = run_replay(url, cfg, tmp_path / "a", n_features=3, kafka_idle=1,
                           checkpoint=str(ckpt))
    produce(broker, topic, [(None, m, None) for m in _libsvm(X * 5, y)])  # wider rows
    again = run_replay(url, cfg, tmp_path / "b", n_features=3, kafka_idle=1,
                       checkpoint=str(ckpt))
    assert again.configs[0].params == first.configs[0].params
    assert again.scale == first.scale == "01"


def test_topic_decisions_with_hashing_a_limit_a_target_and_a_config_built_directly(
        broker: str, tmp_path: Path) -> None:
    """The rest of what the CLI and the Python API must agree on for a topic: hashed LIBSVM
    features (the CLI refused --hash-features, asking for --hash-features), a limit (the
    head is the rows the run reads), a regression target (standardised by the head, as the
    CLI's), and a ReplayConfig built directly (it kept gamma 0.5)."""
    url, X, y = _spread_topic(broker, 500, 6, [1.0, 40.0, 1.0, 0.5])
    assert main(["replay", url, "-l", "bpa-s", "--hash-features", "3", "--kafka-idle", "1",
                 "--out", str(tmp_path / "hash"), "-q"]) == 0
    with pytest.warns(RuntimeWarning):
        res = run_replay(url, [LearnerConfig("bpa-s", "bpa-s", {})], tmp_path / "hash-api",
                         hash_features=3, kafka_idle=1)
    assert res.configs[0].params["gamma"] == _summary(tmp_path / "hash")["auto_gamma"]
    # a limit: the head is the rows the run reads, as a file's --limit
    assert main(["replay", url, "-l", "bpa-s", "--n-features", "4", "--limit", "60",
                 "--kafka-idle", "1", "--out", str(tmp_path / "lim"), "-q"]) == 0
    file = tmp_path / "rows.libsvm"
    file.write_bytes(b"\n".join(_libsvm(X, y)) + b"\n")
    assert main(["replay", str(file), "-l", "bpa-s", "--limit", "60", "--runner", "loop",
                 "--out", str(tmp_path / "lim-file"), "-q"]) == 0
    lim = _summary(tmp_path / "lim")
    assert lim["width_records"] == 60
    assert lim["auto_gamma"] == _summary(tmp_path / "lim-file")["configs"][0]["params"]["gamma"]
    # a regression target: standardised by the head, as the CLI does
    r_topic = new_topic(broker)
    yr = 3.0 + 2.0 * X[:, 0]
    produce(broker, r_topic, [(None, m, None) for m in _libsvm(X, yr)])
    r_url = f"kafka://{broker}/{r_topic}"
    assert main(["replay", r_url, "--task", "regression", "-l", "raker", "-p", "loss=square",
                 "--n-features", "4",
                 "--kafka-idle", "1", "--out", str(tmp_path / "reg"), "-q"]) == 0
    with pytest.warns(RuntimeWarning, match="standardis"):
        reg = run_replay(r_url, [LearnerConfig("raker", "raker", {"loss": "square"})],
                         tmp_path / "reg-api", n_features=4, kafka_idle=1, task="regression")
    target = _summary(tmp_path / "reg")["target_standardised"]
    assert reg.configs[0].target == (target["mean"], target["std"])
    # built directly: the topic's head decides the width all the same
    direct = ReplayConfig(data=url, learners=(LearnerConfig("b", "bpa-s", {}),),
                          out=str(tmp_path / "direct"),
                          read=ReadOptions(path=url, n_features=4),
                          kafka=KafkaOptions(idle=1))
    assert direct.widths is not None and direct.widths["width_source"] == "auto"
    assert direct.learners[0].params["gamma"] == direct.widths["auto_gamma"] != 0.5
