"""``kernelstream stream`` options checked against what a run continues: a resumed
``--checkpoint`` (every stream setting compared, a setting an older snapshot left out standing
for its default; the ``--init-from`` recorded) and ``--init-from`` (its models' parameters,
feature width and keys). Each refusal is one line, exit 2, before Beam starts; the checkpoints
are written in process (no stream is run)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_stream import T0, create_topics, produce, stream_argv

from kernelstream.engine.live.engine import StreamEngine, reference_outputs
from kernelstream.engine.live.records import SourceRecord
from kernelstream.engine.live.snapshot.store import SnapshotStore
from kernelstream.engine.replay import checkpoints
from kernelstream.engine.replay.core import ReplayState, encode_replay_state
from kernelstream.kafka_client import local_broker
from kernelstream.pipelines import cli
from kernelstream.pipelines.live.stream_config import StreamConfig
from kernelstream.pipelines.live.stream_prepare import prepare

LEARNER = ("-l", "b=bogd", "-p", "b.budget=20", "-p", "b.gamma=0.25")


@pytest.fixture(scope="module")
def broker() -> Iterator[str]:
    with local_broker() as hp:
        create_topics(hp, ["opt"], 1)
        produce(hp, [("opt", 0, f"u{i % 3}/e{i}".encode(), f"{(-1) ** i:+d} 1:{i % 5}".encode(),
                      T0 + i) for i in range(20)])
        yield hp


def config_of(argv: Sequence[str]) -> StreamConfig:
    return StreamConfig.from_args(cli.build_parser().parse_args(list(argv)))


def argv_of(broker: str, tmp_path: Path, *args: str) -> list[str]:
    # a run that is not refused ends soon (the old code's)
    return stream_argv(broker, "kafka://BROKER/opt", *args, "--out", str(tmp_path / "out"),
                       "--idle-stop", "1s", "--width-wait", "1s", "-q")


def trained_states(config: StreamConfig, n: int = 30) -> dict[str, Any]:
    """The models of ``config`` after ``n`` labelled records of its width."""
    width = config.spec.width or 4
    rng = np.random.default_rng(0)
    recs = [SourceRecord("t", 0, i, T0 + i, f"u{i % 3}/e{i}".encode(),
                         (f"{(-1) ** i:+d} " + " ".join(
                             f"{j + 1}:{rng.normal():.3f}" for j in range(width))).encode())
            for i in range(n)]
    _, states = reference_outputs(recs, config.spec)
    return states


def stream_checkpoint(directory: Path, config: StreamConfig, *, stream: Any = None,
                      out: Path | None = None) -> Path:
    """A stream checkpoint of ``config`` 's models as a run of it commits one (``stream``:
    its recorded settings instead of ``config`` 's)."""
    engine = StreamEngine(config.spec)
    store = SnapshotStore.open(directory)
    try:
        store.commit({k: engine.encode_state(st) for k, st in trained_states(config).items()},
                     {}, {"out": os.path.realpath(out) if out else None,
                          "configs": config.configs_doc(),
                          "stream": config.stream_doc() if stream is None else stream,
                          "widths": config.widths_doc(), "scaling": config.scale_doc()})
    finally:
        store.close()
    return directory


def replay_checkpoint(directory: Path, config: StreamConfig) -> Path:
    """A replay checkpoint of ``config`` 's models (its states and configurations)."""
    directory.mkdir()
    ckpt = checkpoints.next_checkpoint(str(directory))
    checkpoints.write_states(ckpt, {k: encode_replay_state(ReplayState(learner=st.learner))
                                    for k, st in trained_states(config).items()}, "w0")
    checkpoints.write_position(ckpt, "{}")
    checkpoints.commit(ckpt, {"configs": config.configs_doc(), "scale_ranges": None})
    return directory


def refused(argv: Sequence[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one line a refused run prints (exit 2, before Beam)."""
    capsys.readouterr()
    assert cli.main(list(argv)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_init_from_with_other_parameters_is_refused(broker: str, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """``-p`` of a configuration ``--init-from`` holds would be ignored (its learner goes on
    whole) yet recorded in summary.json: refused; the same values, or none, are fine."""
    init = stream_checkpoint(tmp_path / "init", config_of(argv_of(
        broker, tmp_path, "--n-features", "4", *LEARNER)))
    err = refused(argv_of(broker, tmp_path, "--n-features", "4", "-l", "b=bogd", "-p",
                          "b.budget=30", "--init-from", str(init)), capsys)
    assert err == (f"kernelstream stream: error: --init-from {init}: configuration 'b' was "
                   "learnt with budget=20; this run has budget=30 (its models go on with the "
                   "parameters they were learnt with: give those with -p, or give the "
                   "configuration another name to start afresh)")
    for given in (LEARNER, ("-l", "b=bogd", "-p", "b.budget=20")):
        prep = prepare(config_of(argv_of(broker, tmp_path, "--n-features", "4", *given,
                                          "--init-from", str(init))))
        try:
            assert prep.init_kind == "stream"
            assert dict(prep.resolved.configs[0].params)["gamma"] == 0.25
        finally:
            prep.close()


@pytest.mark.parametrize("kind", ["stream", "replay"])
def test_init_from_of_another_width_or_keying_is_refused(
        broker: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    """Models learnt on 24 features would refuse every row of a 30-feature stream (an
    all-dead-letter run with exit 0); global models never start a ``--key-by`` stream's
    (a model starts from the init model of its own key), nor entity models a global one."""
    make = stream_checkpoint if kind == "stream" else replay_checkpoint
    narrow = make(tmp_path / "narrow", config_of(argv_of(broker, tmp_path, "--n-features",
                                                         "24", *LEARNER)))
    err = refused(argv_of(broker, tmp_path, "--n-features", "30", *LEARNER, "--init-from",
                          str(narrow)), capsys)
    assert err.endswith(f"--init-from {narrow}: configuration 'b' learnt rows of 24 features; "
                        "this stream's have 30 (--n-features, --hash-features): every row "
                        "would be refused; give the width it learnt")
    err = refused(argv_of(broker, tmp_path, "--n-features", "24", *LEARNER, "--key-by",
                          "id-prefix", "--init-from", str(narrow)), capsys)
    assert err.endswith(f"--init-from {narrow} holds one model per configuration (CONFIG#0); "
                        "this stream learns one per entity (--key-by id-prefix): a model starts "
                        "from the init model of its own key, so none would start from it (use "
                        "--init-from a run keyed as this one)")
    keyed = make(tmp_path / "keyed", config_of(argv_of(broker, tmp_path, "--n-features", "24",
                                                       *LEARNER, "--key-by", "id-prefix")))
    err = refused(argv_of(broker, tmp_path, "--n-features", "24", *LEARNER, "--init-from",
                          str(keyed)), capsys)
    assert "holds one model per entity (CONFIG#0@ENTITY, --key-by); this stream learns " \
           "one per configuration (no --key-by)" in err
    prep = prepare(config_of(argv_of(broker, tmp_path, "--n-features", "24", *LEARNER,
                                     "--key-by", "id-prefix", "--init-from", str(keyed))))
    prep.close()
    assert prep.init_kind == kind


def test_init_from_of_another_width_than_the_first_csv_record_is_refused(
        broker: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A CSV stream without ``--n-features`` has the width of its first record: models learnt
    on 2 features are refused against 3-feature records as against ``--n-features 3`` (it
    was an exit-0 run whose every record was a dead letter), whether the first records are
    read for ``--positive-label`` or only for the width; no record within ``--width-wait``:
    said in one line, the stream goes on."""
    create_topics(broker, ["csv3", "csv0"], 1)
    produce(broker, [("csv3", 0, f"e{i}".encode(), f"0.{i},1.5,2,{(-1) ** i}".encode(),
                      T0 + i) for i in range(10)])

    def csv(topic: str, *args: str) -> list[str]:
        return stream_argv(broker, f"kafka://BROKER/{topic}", "--format", "csv", *LEARNER,
                           *args, "--out", str(tmp_path / "out"), "--idle-stop", "1s",
                           "--width-wait", "1s", "-q")

    narrow = stream_checkpoint(tmp_path / "narrow", config_of(argv_of(
        broker, tmp_path, "--n-features", "2", *LEARNER)))
    for more in ((), ("--positive-label", "1")):
        capsys.readouterr()  # (--positive-label says its -1 class first)
        assert cli.main(csv("csv3", "--init-from", str(narrow), *more)) == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err.endswith(f"--init-from {narrow}: configuration 'b' learnt rows of 2 "
                            "features; this stream's have 3 (its first record's width): every "
                            "row would be refused; --init-from a run of this width")
    wide = stream_checkpoint(tmp_path / "wide", config_of(argv_of(
        broker, tmp_path, "--n-features", "3", *LEARNER)))
    prep = prepare(config_of(csv("csv3", "--init-from", str(wide))))
    prep.close()
    assert prep.init_kind == "stream"
    capsys.readouterr()
    prep = prepare(config_of(csv("csv0", "--init-from", str(narrow))))
    prep.close()
    assert (f"--init-from {narrow}: no record within 1 s (--width-wait) to tell this "
            "stream's width by; its models learnt rows of 2 features ('b'): rows of another "
            "width will be dead letters") in capsys.readouterr().err


def test_resume_compares_every_setting(broker: str, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """``--hash-features 12`` is not ``--n-features 4096`` (both record n_features 4096), nor
    ``--rows sparse`` the default: a snapshot that left a default setting out (older
    versions wrote rows and hash_features only when set) stands for the default."""
    ckpt = tmp_path / "ckpt"
    base = argv_of(broker, tmp_path, "--n-features", "4096", *LEARNER, "--checkpoint",
                   str(ckpt))
    doc = config_of(base).stream_doc()
    old = {k: v for k, v in doc.items() if k not in ("rows", "hash_features", "init_from")}
    stream_checkpoint(ckpt, config_of(base), stream=old, out=tmp_path / "out")
    hashed = argv_of(broker, tmp_path, "--hash-features", "12", *LEARNER, "--checkpoint",
                     str(ckpt))
    assert config_of(hashed).stream_doc()["n_features"] == 4096
    err = refused(hashed, capsys)
    assert "other stream settings (--hash-features none -> 12)" in err
    err = refused([*base, "--rows", "sparse"], capsys)
    assert "other stream settings (--rows auto -> sparse)" in err
    prepare(config_of(base)).close()  # the same settings resume


def test_resume_with_another_width_of_scaled_models_says_the_setting(
        broker: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A checkpoint whose rows were scaled (--scale auto) resumed with another --n-features
    is refused by the settings line, as with --scale none: not by its recorded ranges, which
    do not fit the new width only because the width changed."""
    ckpt = tmp_path / "ckpt"
    argv = argv_of(broker, tmp_path, *LEARNER, "--checkpoint", str(ckpt))
    scaled = config_of([*argv, "--n-features", "4"]).with_scale(
        ((0.0,) * 4, (1.0, 10.0, 100.0, 1000.0)), "spreads differ")
    stream_checkpoint(ckpt, scaled, out=tmp_path / "out")
    err = refused([*argv, "--n-features", "5"], capsys)
    assert err.endswith(f"checkpoint {ckpt} was written with other stream settings "
                        "(--n-features (width) 4 -> 5); use the same ones, or a new "
                        "--checkpoint"), err
    prepare(config_of([*argv, "--n-features", "4"])).close()  # the same settings resume


def test_resume_keeps_its_init_from(broker: str, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A checkpoint records the ``--init-from`` its new models start from: a resume with
    another is refused; one without it continues with the recorded one (new entities start
    warm, as before the restart)."""
    init = stream_checkpoint(tmp_path / "init", config_of(argv_of(
        broker, tmp_path, "--n-features", "4", *LEARNER, "--key-by", "id-prefix")))
    other = stream_checkpoint(tmp_path / "other", config_of(argv_of(
        broker, tmp_path, "--n-features", "4", *LEARNER, "--key-by", "id-prefix")))
    ckpt = tmp_path / "ckpt"
    argv = argv_of(broker, tmp_path, "--n-features", "4", *LEARNER, "--key-by", "id-prefix",
                   "--checkpoint", str(ckpt))
    first = config_of([*argv, "--init-from", str(init)])
    assert first.stream_doc()["init_from"] == os.path.realpath(init)
    stream_checkpoint(ckpt, first, out=tmp_path / "out")
    err = refused([*argv, "--init-from", str(other)], capsys)
    assert (f"other stream settings (--init-from {os.path.realpath(init)} "
            f"-> {os.path.realpath(other)})") in err
    prep = prepare(config_of(argv))
    try:
        assert prep.resolved.init_from == os.path.realpath(init)
        assert prep.init_kind == "stream"
    finally:
        prep.close()


def test_every_output_folder_has_its_schema_from_the_start(broker: str,
                                                           tmp_path: Path) -> None:
    """``--out`` gets all five folders, as a replay's: one with no rows (no dead letters, no
    expiry) holds an empty file of its schema, so ``pd.read_parquet`` reads it (it once
    did not exist: FileNotFoundError)."""
    import pyarrow.parquet as pq

    from kernelstream.engine.live.rows import stream_schemas

    config = config_of(argv_of(broker, tmp_path, "--n-features", "4", *LEARNER))
    prep = prepare(config)
    prep.close()
    for name, schema in stream_schemas().items():
        t = pq.read_table(tmp_path / "out" / name)
        assert t.num_rows == 0 and t.schema.equals(schema), name
    assert sorted(p.name for p in (tmp_path / "out" / "dead_letters").iterdir()) == [
        "part-empty.parquet"]
    # nothing written yet: a run that stopped there leaves a folder the next one may take
    prepare(config).close()
    # the folder's first rows replace it (a rerun's files are then all its own)
    from kernelstream.engine.live.snapshot.outputs import pending_path, publish

    pq.write_table(stream_schemas()["predictions"].empty_table(),
                   pending_path(tmp_path / "out", "predictions", 1, "r"))
    publish(tmp_path / "out", ["predictions"], 1)
    assert sorted(p.name for p in (tmp_path / "out" / "predictions").iterdir()) == [
        ".pending", "part-e0000001-r.parquet"]


def test_resume_maps_labels_as_recorded(broker: str, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """``--positive-label``'s other class, decided on a fresh stream's first records, is
    recorded: a resume maps as before without reading anything (a snapshot of an older
    version, which has none, continues one-vs-rest)."""
    from kernelstream.pipelines.live import stream_width

    def no_peek(*args: object, **kw: object) -> None:
        raise AssertionError("a resume read the first records")

    ckpt = tmp_path / "ckpt"
    argv = argv_of(broker, tmp_path, "--n-features", "4", *LEARNER, "--positive-label", "yes",
                   "--scale", "none", "--checkpoint", str(ckpt))
    first = config_of(argv).with_negative_label("no")
    stream_checkpoint(ckpt, first, out=tmp_path / "out")
    monkeypatch.setattr(stream_width, "first_rows", no_peek)
    prep = prepare(config_of(argv))
    prep.close()
    assert prep.resolved.spec.negative_label == "no" and not prep.resolved.wants_labels
    old = {k: v for k, v in first.stream_doc().items() if k != "negative_label"}
    stream_checkpoint(tmp_path / "old", first, stream=old, out=tmp_path / "out2")
    argv = argv_of(broker, tmp_path, "--n-features", "4", *LEARNER, "--positive-label", "yes",
                   "--scale", "none", "--checkpoint", str(tmp_path / "old"))
    argv[argv.index(str(tmp_path / "out"))] = str(tmp_path / "out2")
    prep = prepare(config_of(argv))
    prep.close()
    assert prep.resolved.spec.negative_label is None


def test_a_third_label_is_a_dead_letter_end_to_end(broker: str, tmp_path: Path) -> None:
    """The CLI: ``--positive-label yes`` over labels yes, no, maybe: 'no' (the first other)
    is -1, 'maybe' a dead letter, as a replay of the same records maps them; summary.json
    records it, and the outputs equal the reference loop's with the recorded spec."""
    from test_stream import assert_same, outputs, read_back, reference_tables, run_cli, spec_for

    create_topics(broker, ["yn"], 1)
    labels = ["yes", "no", "maybe", "yes", "no", "YES", "no", "maybe"]
    produce(broker, [("yn", 0, f"e{i}".encode(), f"{y} 1:{i % 3} 2:1".encode(), T0 + i)
                     for i, y in enumerate(labels)])
    out = tmp_path / "yn"
    argv = stream_argv(broker, "kafka://BROKER/yn", "--n-features", "2", "-l", "perceptron",
                       "-p", "gamma=1", "--positive-label", "yes", "--out", str(out),
                       "--idle-stop", "1s", "--width-wait", "2s", "-q")
    r = run_cli(argv)
    assert r.returncode == 0, r.stderr
    assert "--positive-label yes: 'no' is -1" in r.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["negative_label"] == "no"
    got = outputs(out)
    assert got["outcomes"].num_rows == 5
    assert sorted(got["dead_letters"].column("reason").to_pylist()) == [
        f"a third label {t!r}: the stream maps 'yes' to +1 and 'no' to -1 (the first two "
        "labels of its first records)" for t in ("YES", "maybe", "maybe")]
    want, _ = reference_tables(read_back(broker, "yn", 1)[0], spec_for(argv))
    assert_same(got, want)


def test_reader_tuning_after_the_double_dash_reaches_the_job() -> None:
    from kernelstream.pipelines.live.stream import _reader_options

    assert _reader_options(["--poll_linger_ms=2", "--call_ms=300"]) == {
        "poll_linger_ms": 2, "call_ms": 300}
    assert _reader_options([]) == {}
