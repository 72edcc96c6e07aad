"""``--scale auto`` on ``kernelstream stream``: a fresh stream whose first feature records
are dense with feature ranges over 100x apart (german's rows with feature 1 times 1,000)
min-max scales every record by their ranges (the rule of a replay of a topic,
``data.check.head_ranges``), read once with ``gamma=auto`` (estimated on the scaled rows);
the parser applies the ranges, so the outputs equal the reference loop's with them. The
snapshot records them: a resumed stream keeps them bit for bit although its own first records
would give others, and reads nothing. ``--scale none`` keeps the features.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from test_stream import (
    T0,
    Message,
    assert_same,
    create_topics,
    labelled_stream,
    outputs,
    produce,
    read_back,
    reference_records,
    reference_tables,
    run_cli,
    spec_for,
    stream_argv,
)
from test_stream_width import head, restart_argv

from kernelstream.data import widths
from kernelstream.engine.live.merge import merged
from kernelstream.engine.live.snapshot.store import SnapshotView
from kernelstream.kafka_client import local_broker

_FIRST = re.compile(rb"(?<= )1:([-+0-9.e]+)(?=\s|$)")  # feature 1 of a LIBSVM record


@pytest.fixture(scope="module")
def broker() -> Iterator[str]:
    with local_broker() as hp:
        yield hp


def wide(msgs: Sequence[Message], factor: float) -> list[Message]:
    """``msgs`` with feature 1 of every feature record times ``factor``: its range
    ``factor`` times the others' (german's features are within [-1, 1])."""
    def scale(m: re.Match[bytes]) -> bytes:
        return b"1:" + repr(float(m.group(1)) * factor).encode()

    return [(t, p, k, v if v.startswith(b"label:") or t == "lab" else _FIRST.sub(scale, v), ts)
            for t, p, k, v, ts in msgs]


def traffic(topic: str, n: int, first: int, t0: int, seed: int, factor: float) -> list[Message]:
    return [((topic if t == "ev" else f"{topic}-lab"), *rest)
            for t, *rest in wide(labelled_stream(n, first, t0, seed), factor)]


def test_a_stream_scales_wide_ranges_and_a_restart_keeps_them(broker: str,
                                                              tmp_path: Path) -> None:
    create_topics(broker, ["sc", "sc-lab"], 2)
    produce(broker, traffic("sc", 240, 0, T0, seed=7, factor=1000.0))
    argv, out, ckpt = restart_argv(broker, "sc", tmp_path)
    first = run_cli(argv)
    assert first.returncode == 0, first.stderr
    X = head(merged(read_back(broker, "sc", 2)))
    lo, hi = X.min(axis=0), X.max(axis=0)
    assert hi[0] - lo[0] > 1000  # feature 1: the widest range
    assert ("kernelstream stream: scaling features to [0, 1] by the ranges of the first "
            f"{len(X)} feature records of sc (feature spreads (standard deviations) differ "
            "by") in first.stderr
    s1 = json.loads((out / "summary.json").read_text())
    ranges = {"lo": lo.tolist(), "hi": hi.tolist()}
    assert (s1["scale"], s1["scale_ranges"]) == ("01", ranges)
    assert s1["auto_scale"].startswith("feature spreads (standard deviations) differ by")
    # gamma=auto of the rows as the learners get them: scaled (constant columns shifted)
    span = np.where(hi > lo, hi - lo, 1.0)
    assert s1["auto_gamma"] == widths.auto_gamma((X - lo) / span) != widths.auto_gamma(X)
    with SnapshotView.open(ckpt) as view:
        assert view.info()["scaling"] == {"scale": "01", "auto_scale": s1["auto_scale"],
                                          "scale_ranges": ranges}

    # the next records alone would give other ranges: the resumed run keeps the recorded ones
    produce(broker, traffic("sc", 200, 240, T0 + 60_000, seed=8, factor=5000.0))
    second = run_cli([*argv, "-q"])
    assert second.returncode == 0, second.stderr
    assert "scaling" not in second.stderr and "gamma=auto" not in second.stderr
    s2 = json.loads((out / "summary.json").read_text())
    assert (s2["scale"], s2["scale_ranges"], s2["auto_gamma"]) == ("01", ranges,
                                                                    s1["auto_gamma"])
    # models learnt on scaled rows cannot go on with the features as they come
    refused = run_cli([*argv, "--scale", "none", "-q"])
    assert refused.returncode == 2
    assert "learnt features scaled to [0, 1]" in refused.stderr
    spec = spec_for(argv)
    assert spec.read.scale_ranges == (tuple(lo), tuple(hi))
    # both runs' outputs: those of one uninterrupted reference loop with the first ranges
    wanted, _ = reference_tables(reference_records(broker, ["sc", "sc-lab"], 2), spec)
    assert_same(outputs(out), wanted)


def test_scale_none_keeps_the_features(broker: str, tmp_path: Path) -> None:
    create_topics(broker, ["sn", "sn-lab"], 2)
    produce(broker, traffic("sn", 160, 0, T0, seed=9, factor=1000.0))
    out = tmp_path / "out"
    argv = stream_argv(broker, "kafka://BROKER/sn", "--labels", "kafka://BROKER/sn-lab",
                       "--n-features", "24", "-l", "bogd", "-p", "budget=20", "--key-by",
                       "id-prefix", "--label-ttl", "2s", "--out", str(out), "--idle-stop",
                       "2s", "--scale", "none")
    r = run_cli(argv)
    assert r.returncode == 0, r.stderr
    assert "scaling" not in r.stderr
    doc = json.loads((out / "summary.json").read_text())
    assert (doc["scale"], doc["auto_scale"], doc["scale_ranges"]) == ("none", None, None)
    X = head(merged(read_back(broker, "sn", 2)))
    assert doc["auto_gamma"] == widths.auto_gamma(X)  # of the features as they came
    spec = spec_for(argv)
    assert spec.read.scale_ranges is None
    wanted, _ = reference_tables(reference_records(broker, ["sn", "sn-lab"], 2), spec)
    assert_same(outputs(out), wanted)
