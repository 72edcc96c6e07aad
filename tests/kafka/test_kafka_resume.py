"""A topic replay continued across runs with ``--checkpoint``: what a resume may not change
(its output folder's earlier rows, the label classes, the width), what it reports when
nothing new arrived, and a topic whose records are all unusable."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from _helpers import new_topic, output_columns, produce

from kernelstream import data, fs
from kernelstream.engine.learner_config import LearnerConfig
from kernelstream.errors import ConfigError
from kernelstream.pipelines.cli import main
from kernelstream.pipelines.replay.replay import run_replay


def _lines(n: int) -> list[bytes]:
    with fs.open_binary(str(data.embedded_path("german"))) as f:
        return [ln.rstrip(b"\n") for ln in f if ln.strip()][:n]


def _base(broker: str, topic: str, ck: Path) -> list[str]:
    return ["replay", f"kafka://{broker}/{topic}", "-l", "perceptron", "-p", "gamma=0.05",
            "--n-features", "24", "--kafka-idle", "0.5", "--runner", "loop", "-q",
            "--checkpoint", str(ck)]


def test_resume_into_the_same_out_keeps_its_rows(broker: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A resume whose --out holds the outputs of the run that committed the checkpoint is
    refused in one line (exit 2) before the run, those rows kept; a new --out continues."""
    lines = _lines(300)
    topic = new_topic(broker)
    produce(broker, topic, [(None, ln, None) for ln in lines[:200]])
    base, out = _base(broker, topic, tmp_path / "ck"), tmp_path / "o"
    assert main([*base, "--out", str(out)]) == 0
    produce(broker, topic, [(None, ln, None) for ln in lines[200:]])
    capsys.readouterr()
    for extra in ([], ["--overwrite"]):
        assert main([*base, "--out", str(out), *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "new --out" in err[0], err
        assert len(output_columns(out, "predictions")["score"]) == 200
        assert json.loads((out / "summary.json").read_text())["predictions"] == 200
    assert main([*base, "--out", str(tmp_path / "o2")]) == 0
    assert len(output_columns(tmp_path / "o2", "predictions")["score"]) == 100
    assert len(output_columns(out, "predictions")["score"]) == 200
    # the Python API refuses it too
    produce(broker, topic, [(None, ln, None) for ln in _lines(320)[300:]])
    cfg = [LearnerConfig("perceptron", "perceptron", {"gamma": 0.05})]
    with pytest.raises(ConfigError, match="new output folder"):
        run_replay(f"kafka://{broker}/{topic}", cfg, tmp_path / "o2", n_features=24,
                   kafka_idle=0.5, runner="loop", checkpoint=str(tmp_path / "ck"))
    assert len(output_columns(tmp_path / "o2", "predictions")["score"]) == 100


def test_resume_refuses_another_label_map_or_width(broker: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A resume with another --positive-label (the classes would flip midway) or another
    --n-features is refused in one line, exit 2, before the run; the same options continue."""
    lines = _lines(300)
    topic = new_topic(broker)
    produce(broker, topic, [(None, ln, None) for ln in lines[:200]])
    base = _base(broker, topic, tmp_path / "ck")
    assert main([*base, "--out", str(tmp_path / "o1")]) == 0
    produce(broker, topic, [(None, ln, None) for ln in lines[200:]])
    capsys.readouterr()
    for i, (extra, msg) in enumerate(((["--positive-label", "-1"], "--positive-label"),
                                      (["--n-features", "30"], "has 24 features, not 30"))):
        assert main([*base, *extra, "--out", str(tmp_path / f"x{i}")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and msg in err[0], err
        assert not list((tmp_path / f"x{i}").glob("predictions/part-loop*"))
    assert main([*base, "--out", str(tmp_path / "o2")]) == 0
    assert len(output_columns(tmp_path / "o2", "predictions")["score"]) == 100


def test_resume_without_new_records_reports_the_state(broker: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    """A resume that reads nothing new reports the figures it continues (examples, configs,
    n_features as the last run's), says so in one line, and writes no rows; the checkpoint
    after it still carries them."""
    lines = _lines(250)
    topic = new_topic(broker)
    produce(broker, topic, [(None, ln, None) for ln in lines[:150]])
    base = _base(broker, topic, tmp_path / "ck")
    assert main([*base, "--out", str(tmp_path / "o1")]) == 0
    produce(broker, topic, [(None, ln, None) for ln in lines[150:]])
    assert main([*base, "--out", str(tmp_path / "o2")]) == 0
    first = json.loads((tmp_path / "o2" / "summary.json").read_text())
    assert (first["examples"], first["predictions"]) == (250, 100)
    assert "no_new_examples" not in first
    for i in (3, 4):  # twice: the carried state survives a run that learnt nothing
        capsys.readouterr()
        assert main([*base, "--out", str(tmp_path / f"o{i}")]) == 0
        assert "no new examples" in capsys.readouterr().err
        doc = json.loads((tmp_path / f"o{i}" / "summary.json").read_text())
        assert (doc["examples"], doc["n_features"], doc["predictions"]) == (250, 24, 0)
        assert doc["no_new_examples"] is True
        assert [c["examples"] for c in doc["configs"]] == [250]
        assert doc["mistake_rate"] == first["mistake_rate"]


def test_topic_of_unusable_records_is_refused(broker: str, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A topic whose head records are all rejected is refused in one line, exit 2, as a file
    is; too few examples (an empty topic) give the default widths in one line, the head read
    once, no Python warning."""
    topic = new_topic(broker)
    produce(broker, topic, [(None, ln, None) for ln in _lines(50)])
    url = f"kafka://{broker}/{topic}"
    for extra, why in ((["--n-features", "0"], "index exceeds n_features"),
                       (["--format", "csv"], "would be rejected")):
        capsys.readouterr()
        rc = main(["replay", url, *extra, "--kafka-idle", "0.5", "--runner", "loop", "-q",
                   "--out", str(tmp_path / "o")])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1 and "50 of 50 records" in err[0] and why in err[0], err
        assert not (tmp_path / "o").exists()
    from kernelstream.pipelines.replay import topic_head

    reads: list[int] = []
    head_rows = topic_head.kafka_client.head_rows

    def counted(*a: object, **k: object) -> object:
        reads.append(1)
        return head_rows(*a, **k)  # type: ignore[arg-type]

    empty = new_topic(broker)
    with pytest.MonkeyPatch.context() as mp, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mp.setattr(topic_head.kafka_client, "head_rows", counted)
        rc = main(["replay", f"kafka://{broker}/{empty}", "--n-features", "24",
                   "--kafka-idle", "0.5", "--runner", "loop", "-q",
                   "--out", str(tmp_path / "e")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 0 and len(err) == 1 and "gamma=auto: 0 examples" in err[0], err
    assert reads == [1]
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)]
