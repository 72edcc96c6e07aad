"""``gamma=auto`` on ``kernelstream stream``: a fresh stream estimates the Gaussian width from
its first records (``pipelines/live/stream_width.py``), records it, and a resumed stream
continues with the recorded number.

On unscaled data (german's rows times 1,000: squared distances in the millions, where the
learners' fixed ``gamma=0.5`` makes every kernel value 0): the estimate equals
``data.widths.auto_gamma`` (``median_gamma``, rounded) of the first 1,000 feature records in
the stream's own order, read from the stream's start offsets, label records and malformed
records skipped; a resume keeps it although the records it starts at would give another; the
outputs equal the reference loop's with that width. An empty topic falls back to the
learners' defaults with one line; an explicit width reads nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from _helpers import without_warnings
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

from kernelstream.data import widths
from kernelstream.engine.live.merge import merged
from kernelstream.engine.live.records import SourceRecord
from kernelstream.engine.live.snapshot.store import SnapshotView
from kernelstream.kafka_client import local_broker
from kernelstream.learners.kernels import parse_sigmas
from kernelstream.pipelines import cli
from kernelstream.pipelines.live import stream_width
from kernelstream.pipelines.live.stream_config import StreamConfig
from kernelstream.pipelines.live.stream_prepare import prepare
from kernelstream.sparse import CSR

SCALE = 1000.0  # unscaled features: the learners' default gamma=0.5 sees no similarity
_FEATURE = re.compile(rb"(\d+):([-+0-9.e]+)(?=\s|$)")  # a malformed "3:abc" is kept


@pytest.fixture(scope="module")
def broker() -> Iterator[str]:
    with local_broker() as hp:
        yield hp


def unscaled(msgs: Sequence[Message]) -> list[Message]:
    """``msgs`` with every feature value times :data:`SCALE`."""
    def scale(m: re.Match[bytes]) -> bytes:
        return m.group(1) + b":" + repr(float(m.group(2)) * SCALE).encode()

    return [(t, p, k, v if v.startswith(b"label:") or t.endswith("lab")
             else _FEATURE.sub(scale, v), ts) for t, p, k, v, ts in msgs]


def head(records: Sequence[SourceRecord], limit: int = widths.RESERVOIR_ROWS) -> np.ndarray:
    """The first ``limit`` well-formed feature records of ``records`` (in the stream's
    order) as dense rows of german's 24 features, by hand."""
    rows = []
    for r in records:
        text = (r.value or b"").decode()
        if text.startswith("label:") or "abc" in text or r.key is None:
            continue  # label records, malformed ones, no event id
        x = np.zeros(24)
        for j, v in _FEATURE.findall(r.value or b""):
            x[int(j) - 1] = float(v)
        rows.append(x)
    return np.array(rows[:limit])


def expected_gamma(records: Sequence[SourceRecord],
                   limit: int = widths.RESERVOIR_ROWS) -> float:
    """``gamma=auto`` by hand: the median width of :func:`head`."""
    return widths.rounded(widths.median_gamma(head(records, limit)))


def restart_argv(broker: str, topic: str, tmp_path: Path) -> tuple[list[str], Path, Path]:
    """A checkpointed stream of ``topic`` (labels on ``topic-lab``) of two configurations,
    one model per entity, that stops 2 s after its last record: its argv, out and
    checkpoint folders (the restart tests run it twice)."""
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    argv = stream_argv(broker, f"kafka://BROKER/{topic}", "--labels",
                       f"kafka://BROKER/{topic}-lab", "--n-features", "24", "-l", "b=bogd",
                       "-p", "b.budget=20", "-l", "perceptron", "--key-by", "id-prefix",
                       "--label-ttl", "2s", "--metrics-window", "1s", "--seed", "3", "--out",
                       str(out), "--checkpoint", str(ckpt), "--snapshot-every", "150",
                       "--idle-stop", "2s")
    return argv, out, ckpt


def config_of(argv: Sequence[str]) -> StreamConfig:
    return StreamConfig.from_args(cli.build_parser().parse_args(list(argv)))


def test_gamma_auto_is_the_median_width_of_the_first_records(broker: str) -> None:
    """In process (no Beam): the estimate from the log start and from later start offsets,
    a sigma grid centred on it."""
    create_topics(broker, ["wa", "wa-lab"], 2)
    msgs = unscaled(labelled_stream(1500, 0, T0, seed=5))
    produce(broker, [(("wa" if t == "ev" else "wa-lab"), *rest) for t, *rest in msgs])
    argv = stream_argv(broker, "kafka://BROKER/wa", "--labels", "kafka://BROKER/wa-lab",
                       "--n-features", "24", "-l", "b=bogd", "-l", "r=raker",
                       "--key-by", "id-prefix", "--width-wait", "20s")
    config = config_of(argv)
    assert config.wants_width and config.width_source == "default"
    assert dict(config.configs[0].params)["gamma"] == 0.5  # until the records are read
    records = merged(read_back(broker, "wa", 2))  # by timestamp, as the reader merges
    want = expected_gamma(records)
    assert want != 0.5 and want < 1e-4
    # the cut at the first 1,000 feature records matters: all of them give another width
    assert want != expected_gamma(records, limit=len(records))
    start = {("wa", 0): 0, ("wa", 1): 0, ("wa-lab", 0): 0, ("wa-lab", 1): 0}
    got = stream_width.resolve(config, start)
    params = {c.label: dict(c.params) for c in got.configs}
    assert params["b"]["gamma"] == want
    assert params["r"]["sigmas"] == widths.centred_sigmas(
        want, parse_sigmas("2^-2:1:3").tolist())
    assert got.spec.configs == got.configs and not got.wants_width
    assert got.widths_doc() == {"source": "auto", "gamma": want, "records": 1000}
    # from committed offsets: the first records the stream reads from there
    later = {**start, ("wa", 0): 300, ("wa", 1): 250}
    lat = merged([[r for r in recs if r.offset >= {0: 300, 1: 250}[r.partition]]
                  for recs in read_back(broker, "wa", 2)])
    again = stream_width.resolve(config, later)
    assert dict(again.configs[0].params)["gamma"] == expected_gamma(lat) != want


def test_huge_values_among_the_first_records_give_a_usable_width(
        broker: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Feature values near 1e308 among the first records: their distances overflow and are
    left out (a median of inf once gave gamma 0.0, which every learner refuses: the stream
    died on every fresh start); every record huge: gamma 1.0, said in one line."""
    vals = ["+1 1:0.1 2:0.2", "-1 1:0.3 2:0.1", "+1 1:1e308 2:1e308", "-1 1:0.5 2:0.6",
            "+1 1:0.2 2:0.2", "-1 1:-1e308", "+1 1:0.1"]
    create_topics(broker, ["wh", "wh2"], 1)
    produce(broker, [("wh", 0, f"u/e{i}".encode(), v.encode(), T0 + i)
                     for i, v in enumerate(vals)])
    produce(broker, [("wh2", 0, f"u/e{i}".encode(), v.encode(), T0 + i)
                     for i, v in enumerate(["+1 1:1e308", "-1 1:-1e308 2:1e308"])])
    argv = stream_argv(broker, "kafka://BROKER/wh", "--n-features", "2", "-l", "a=bogd",
                       "-l", "perceptron", "--width-wait", "5s", "-q")
    got = stream_width.resolve(config_of(argv), {("wh", 0): 0})
    rows = np.array([[0.1, 0.2], [0.3, 0.1], [1e308, 1e308], [0.5, 0.6], [0.2, 0.2],
                     [-1e308, 0.0], [0.1, 0.0]])
    gamma = dict(got.configs[0].params)["gamma"]
    assert gamma == widths.auto_gamma(rows) == widths.auto_gamma(CSR.from_dense(rows))
    assert 1.0 < gamma < 100 and got.widths_doc()["source"] == "auto"
    argv = stream_argv(broker, "kafka://BROKER/wh2", "--n-features", "2", "-l", "a=bogd",
                       "--width-wait", "5s", "-q")
    got = stream_width.resolve(config_of(argv), {("wh2", 0): 0})
    assert dict(got.configs[0].params)["gamma"] == 1.0
    assert "gamma=auto: no usable distance between the first 2 feature records of wh2" in (
        capsys.readouterr().err)


def test_positive_label_is_against_the_first_other_label(
        broker: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``--positive-label yes``: the -1 class is the first other label the stream reads
    (labels topic included, in the stream's order), as a replay maps the first two labels
    it reads; a third is then a dead letter. No other label among the first records:
    one-vs-rest, said in one line."""
    create_topics(broker, ["wl", "wl-lab", "wm", "wm-lab"], 1)
    for topic, labels in (("wl", ["yes", "no", "maybe"]), ("wm", ["yes", "yes"])):
        msgs: list[Message] = []
        for i, y in enumerate(labels):
            msgs.append((topic, 0, f"e{i}".encode(), b"? 1:1", T0 + 10 * i))
            msgs.append((f"{topic}-lab", 0, f"e{i}".encode(), y.encode(), T0 + 10 * i + 1))
        if topic == "wl":  # first of all: a labelled event's label counts too
            msgs.insert(0, (topic, 0, b"x", b"maybe 1:2", T0 - 1))
        produce(broker, msgs)
    argv = stream_argv(broker, "kafka://BROKER/wl", "--labels", "kafka://BROKER/wl-lab",
                       "--n-features", "2", "-l", "perceptron", "-p", "gamma=1",
                       "--scale", "none", "--positive-label", "yes", "--width-wait", "5s",
                       "-q")
    config = config_of(argv)
    assert config.wants_labels and not config.wants_width
    got = stream_width.resolve(config, {("wl", 0): 0, ("wl-lab", 0): 0})
    assert got.spec.negative_label == "maybe" and not got.wants_labels  # the first other
    assert got.stream_doc()["negative_label"] == "maybe"
    assert "--positive-label yes: 'maybe' is -1 (the first other label of wl,wl-lab); a " \
           "third label is a dead letter, as in a replay" in capsys.readouterr().err
    argv = [a.replace("wl", "wm") for a in argv]
    got = stream_width.resolve(config_of(argv), {("wm", 0): 0, ("wm-lab", 0): 0})
    assert got.spec.negative_label is None
    assert "no other label among the first 2 labels of wm,wm-lab: every label but 'yes' is " \
           "-1 (one-vs-rest)" in capsys.readouterr().err



def test_a_first_read_sees_each_labels_own_token() -> None:
    """The token a first read records for a label is that label's, also when the router maps
    a label record's value once and reuses it: a repeated 'yes' after a 'no' was recorded as
    'no' (the last token mapped), which could make the wrong label the -1 class of
    ``--positive-label`` once the stream's order put that record first."""
    from _helpers import live_spec

    from kernelstream.engine.learner_config import LearnerConfig
    from kernelstream.engine.live.routing import StreamRouter

    spec = live_spec(configs=(LearnerConfig("p", "perceptron", {"kernel": "linear"}),),
                     n_features=3, label_ttl_ms=1000, metrics_window_ms=100)
    token = stream_width._Tokens()
    router = StreamRouter(spec, labels=token)
    values = [b"label:yes", b"label: no", b"label:yes", b"yes 1:1", b"label:no", b"maybe 1:2"]
    got = []
    for i, v in enumerate(values):
        _, y, _ = stream_width._example(router, SourceRecord("ev", 0, i, i, b"e%d" % i, v))
        assert y is not None
        got.append(token.name(y))
    assert got == ["yes", "no", "yes", "yes", "no", "maybe"]

@pytest.mark.parametrize("first", ["nan", "inf", "", " "])
def test_positive_label_skips_dead_letter_labels(broker: str, first: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A first label that is never a class (nan, inf, empty: a dead letter whatever the map)
    is not the -1 class: the first other real label is, as a replay's first labels decide
    (``labels.never_a_class``). (It was chosen: nan/inf failed the pipeline, an empty one
    made every 'no' a dead letter.)"""
    from kernelstream.engine.live.routing import StreamRouter

    topic = f"wd{['nan', 'inf', '', ' '].index(first)}"
    create_topics(broker, [topic], 1)
    msgs: list[Message] = []
    for i, y in enumerate([first, "yes", "no", "yes", "no"]):
        msgs.append((topic, 0, f"e{i}".encode(), b"? 1:1 2:0.5", T0 + 10 * i))
        msgs.append((topic, 0, f"e{i}".encode(), f"label:{y}".encode(), T0 + 10 * i + 1))
    produce(broker, msgs)
    argv = stream_argv(broker, f"kafka://BROKER/{topic}", "--n-features", "2", "-l",
                       "perceptron", "-p", "gamma=1", "--scale", "none", "--positive-label",
                       "yes", "--width-wait", "5s", "-q")
    got = stream_width.resolve(config_of(argv), {(topic, 0): 0})
    assert got.spec.negative_label == "no"
    assert f"--positive-label yes: 'no' is -1 (the first other label of {topic})" in (
        capsys.readouterr().err)
    labels = StreamRouter(got.spec).labels  # the stream's own map: no crash, 'no' is -1
    assert (labels("yes"), labels("no")) == (1.0, -1.0)


def test_explicit_width_reads_no_records(broker: str, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing to decide on the first records: an explicit width with ``--scale none``, or
    with sparse rows (never scaled)."""
    create_topics(broker, ["wg"], 1)

    def no_peek(*args: object, **kw: object) -> None:
        raise AssertionError("an explicit width read the topic")

    monkeypatch.setattr(stream_width, "first_rows", no_peek)
    for given in (["-p", "gamma=0.25", "--scale", "none"], ["-p", "sigma=2", "--rows",
                                                            "sparse"]):
        config = config_of(stream_argv(broker, "kafka://BROKER/wg", "--n-features", "3",
                                       "-l", "bogd", *given, "--out", str(tmp_path / "o")))
        assert not config.wants_width and config.width_source == "given"
        assert not config.wants_scale
        prep = prepare(config)
        try:
            assert prep.resolved == replace(config, merge="all")  # a fresh run's default
            assert dict(prep.resolved.configs[0].params)["gamma"] == (
                0.25 if given[1] == "gamma=0.25" else 0.125)
        finally:
            prep.close()


def test_empty_topic_falls_back_to_the_default_width(broker: str, tmp_path: Path) -> None:
    create_topics(broker, ["we"], 1)
    out = tmp_path / "out"
    r = run_cli(stream_argv(broker, "kafka://BROKER/we", "--n-features", "24", "-l", "bogd",
                            "--width-wait", "1s", "--out", str(out), "--idle-stop", "1s",
                            "-q"))
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in without_warnings(r.stderr).splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr  # the one line, with --quiet too
    assert lines[0].startswith("kernelstream stream: gamma=auto: 0 feature records")
    assert "the learners' default widths (bogd gamma=0.5)" in lines[0]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["width_source"] == "default" and summary["auto_gamma"] is None
    assert summary["learners"]["bogd"]["params"]["gamma"] == 0.5


def test_fresh_stream_resolves_records_and_resumes_with_its_width(broker: str,
                                                                 tmp_path: Path) -> None:
    """The CLI: resolved from the first records, recorded in the snapshot and summary.json;
    the resumed run keeps it (its own first records would give another); both runs' outputs
    equal the reference loop's with that width."""
    create_topics(broker, ["wr", "wr-lab"], 2)

    def traffic(n: int, first: int, t0: int, seed: int) -> list[Message]:
        return [(("wr" if t == "ev" else "wr-lab"), *rest)
                for t, *rest in unscaled(labelled_stream(n, first, t0, seed))]

    produce(broker, traffic(240, 0, T0, seed=7))
    argv, out, ckpt = restart_argv(broker, "wr", tmp_path)
    first = run_cli(argv)
    assert first.returncode == 0, first.stderr
    want = expected_gamma(merged(read_back(broker, "wr", 2)))
    assert f"gamma=auto = {want!r}, from the first " in first.stderr
    s1 = json.loads((out / "summary.json").read_text())
    assert s1["width_source"] == "auto" and s1["auto_gamma"] == want
    assert {k: v["params"]["gamma"] for k, v in s1["learners"].items()} == {
        "b": want, "perceptron": want}
    with SnapshotView.open(ckpt) as view:
        info = view.info()
    assert info["configs"]["b"]["params"]["gamma"] == want
    assert info["widths"] == {"source": "auto", "gamma": want, "records": s1["width_records"]}

    produce(broker, traffic(200, 240, T0 + 60_000, seed=8))
    config = config_of(argv)
    with SnapshotView.open(ckpt) as view:
        committed = view.offsets()
    rows = stream_width.first_rows(config, committed, 5.0).rows
    assert widths.auto_gamma(rows) != want  # what a new estimate would give
    second = run_cli([*argv, "-q"])
    assert second.returncode == 0, second.stderr
    assert "gamma=auto" not in second.stderr  # nothing read, nothing estimated
    s2 = json.loads((out / "summary.json").read_text())
    assert s2["learners"] == s1["learners"]
    assert s2["width_source"] == "auto" and s2["auto_gamma"] == want

    spec = spec_for(argv)
    assert {c.label: dict(c.params)["gamma"] for c in spec.configs} == {
        "b": want, "perceptron": want}
    wanted, _ = reference_tables(reference_records(broker, ["wr", "wr-lab"], 2), spec)
    assert_same(outputs(out), wanted)


@pytest.mark.parametrize("wrong", [["--key-by", "id-prefix"], ["--format", "csv"]])
def test_first_records_all_rejected_are_refused(broker: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str],
                                                wrong: list[str]) -> None:
    """A wrong ``--key-by`` (keys without '/') or ``--format`` (CSV of LIBSVM records): every
    record the first read finds would be a dead letter, so the stream is refused before it
    starts, in one line naming the most common reason and the options to check (not run to
    the end with every record a dead letter and only a width line)."""
    topic = "wrej" + wrong[0][2:5]
    create_topics(broker, [topic], 1)
    produce(broker, [(topic, 0, f"e{i}".encode(), f"{(-1) ** i:+d} 1:{i % 5} 3:0.5".encode(),
                      T0 + i) for i in range(20)])
    out = tmp_path / "out"
    capsys.readouterr()
    assert cli.main(stream_argv(broker, f"kafka://BROKER/{topic}", "--n-features", "3",
                                "-l", "bogd", *wrong, "--out", str(out), "--idle-stop", "1s",
                                "--width-wait", "5s", "-q")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"kernelstream stream: error: {topic}: 20 of 20 records read first "
                          "would be rejected ("), err
    # a reason naming the record (its key) is said for the first one
    assert (", 20 times): " in err if wrong[0] == "--format" else
            "(the first: \"event id 'e0' has no entity prefix" in err), err
    assert "): check --format, --key-by, --n-features" in err
    assert not out.exists()


def test_some_first_records_rejected_are_counted(broker: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Some first records parse: the stream goes on; the width line counts the others
    apart from the feature records and says how long the read took (the topic went quiet
    well before --width-wait)."""
    create_topics(broker, ["wsome"], 1)
    produce(broker, [("wsome", 0, f"u/e{i}".encode(),
                      (b"+1 1:0.5" if i == 0 else b"+1 1:abc"), T0 + i) for i in range(6)])
    capsys.readouterr()
    prep = prepare(config_of(stream_argv(broker, "kafka://BROKER/wsome", "--n-features", "3",
                                         "-l", "bogd", "--out", str(tmp_path / "o"),
                                         "--width-wait", "30s", "-q")))
    prep.close()
    err = capsys.readouterr().err
    m = re.search(r"gamma=auto: 1 feature record among 6 records of wsome \(5 of them would "
                  r"be dead letters\) after reading for ([0-9.]+) s \(at most 30 s, "
                  r"--width-wait\)", err)
    assert m is not None, err
    assert float(m.group(1)) < 20
