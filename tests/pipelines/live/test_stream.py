"""``kernelstream stream`` end to end, on a real Kafka-protocol broker (tansu).

The stream runs as a subprocess of the installed CLI. Its Parquet outputs must equal, bit for
bit (all but the wall-clock metrics columns), what the reference loop
(``engine.live.engine.reference_outputs``) makes of the same topic contents read back from the
broker: a labelled stream whose labels come late on a labels topic, some after the TTL, some
twice, some for ids never seen, with malformed records, labelled-at-once events and label
records on the events topic; in two runs on one checkpoint (the second resumes from the
snapshot, models restored by key). Also: the one-line failures (a second writer, a resume
offset outside the log, a broker that is down, a bad option), SIGINT (drain, final snapshot,
exit 130, one line) and the same stream through Beam's portable job service with an EXTERNAL
worker pool.
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _helpers import WorkerPool, start_worker_pool, without_warnings
from stream_accounting import assert_accounting

from kernelstream import data
from kernelstream.data.options import ReadOptions
from kernelstream.engine.live.engine import reference_outputs
from kernelstream.engine.live.merge import merged
from kernelstream.engine.live.records import SourceRecord
from kernelstream.engine.live.rows import OUTPUTS, stream_schemas
from kernelstream.engine.live.snapshot.store import SnapshotStore, SnapshotView
from kernelstream.kafka_client import local_broker
from kernelstream.numbers import sig
from kernelstream.pipelines import cli
from kernelstream.pipelines.live.stream_config import StreamConfig

BIN = Path(sys.executable).parent / "kernelstream"
# metrics columns measured on the wall clock: the only ones that differ between runs
WALL_CLOCK = ("seconds", "examples_per_second", "total_seconds")
N_FEATURES = 24


# -- helpers (also used by test_stream_crash.py) ----------------------------------------------


@pytest.fixture(scope="module")
def broker() -> Iterator[str]:
    with local_broker() as hp:
        yield hp


def create_topics(broker: str, names: Sequence[str], partitions: int) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=broker)
    try:
        admin.create_topics([NewTopic(n, partitions, 1) for n in names])
    finally:
        admin.close()


Message = tuple[str, int, bytes | None, bytes, int]  # topic, partition, key, value, timestamp


def produce(broker: str, messages: Sequence[Message], client_id: str | None = None) -> None:
    """Send ``messages`` and wait for them (``client_id``: the producer's, when a test's
    proxy tells clients apart by it)."""
    from kafka import KafkaProducer

    prod = KafkaProducer(bootstrap_servers=broker, linger_ms=0,
                         **({} if client_id is None else {"client_id": client_id}))
    try:
        for topic, part, key, value, ts in messages:
            prod.send(topic, key=key, value=value, partition=part, timestamp_ms=ts)
        prod.flush()
    finally:
        prod.close()


def read_back(broker: str, topic: str, partitions: int) -> list[list[SourceRecord]]:
    """Every record of ``topic``, per partition in offset order (waits until they are all
    there: the producers flushed before)."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=broker, enable_auto_commit=False, group_id=None)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    out: list[list[SourceRecord]] = [[] for _ in tps]
    idle = time.monotonic()
    while time.monotonic() - idle < 1.5:
        for tp, recs in c.poll(timeout_ms=200).items():
            idle = time.monotonic()
            out[tp.partition] += [SourceRecord(r.topic, r.partition, r.offset, r.timestamp,
                                               r.key, r.value) for r in recs]
    c.close()
    return out


def reference_records(broker: str, topics: Sequence[str], partitions: int,
                      merge: str = "all") -> list[SourceRecord]:
    """The records in the stream's merge order: with ``merge="all"`` (the stream's default)
    one merge of every partition, topic by topic; with ``"partition"`` each partition group
    merged on its own, group after group (a model fed by one group sees the same order)."""
    per_topic = [read_back(broker, t, partitions) for t in topics]
    if merge == "all":
        return merged([recs[p] for recs in per_topic for p in range(partitions)])
    out: list[SourceRecord] = []
    for p in range(partitions):
        out += merged([recs[p] for recs in per_topic])
    return out


def stream_argv(broker: str, *args: str) -> list[str]:
    return ["stream", *(a.replace("BROKER", broker) for a in args)]


def spec_for(argv: Sequence[str]) -> Any:
    """The LiveSpec the CLI builds from ``argv`` (the reference loop's spec), with the widths,
    feature ranges and target standardisation the run recorded once it has run (``gamma=auto``,
    ``--scale auto``, ``--scale-target auto`` and ``--positive-label`` 's other class, resolved
    from its first records: its
    ``--checkpoint``'s snapshot, else its ``--out`` summary.json)."""
    args = cli.build_parser().parse_args(list(argv))
    config = StreamConfig.from_args(args)
    if args.checkpoint is not None and (Path(args.checkpoint) / "HEAD").exists():
        with SnapshotView.open(args.checkpoint) as view:
            info = view.info()
        return config.with_recorded(info["configs"], info["widths"]).with_recorded_scale(
            info.get("scaling")).with_recorded_target(info["configs"]).with_negative_label(
                info["stream"].get("negative_label")).spec
    summary = Path(args.out or "-") / "summary.json"
    if summary.exists():
        doc = json.loads(summary.read_text())
        return config.with_recorded(doc["learners"], {"source": doc["width_source"],
                                                      "gamma": doc["auto_gamma"]},
                                    ).with_recorded_scale(doc).with_recorded_target(
                                        doc["learners"]).with_negative_label(
                                            doc.get("negative_label")).spec
    return config.spec


def run_cli(argv: Sequence[str], timeout: float = 120, env: dict[str, str] | None = None,
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN), *argv], capture_output=True, text=True, timeout=timeout,
                          env=env, stdin=subprocess.DEVNULL)


def start_cli(argv: Sequence[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([str(BIN), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, stdin=subprocess.DEVNULL)


def reap(proc: subprocess.Popen[str]) -> None:
    """A test's ``finally``: kill the stream if it still runs (a failed assertion, a
    timeout), so it holds no broker connection or folder lock after the test."""
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


def outputs(out: Path) -> dict[str, pa.Table]:
    """Every published output file, as one table per output, sorted by row_id (no
    wall-clock columns)."""
    schemas = stream_schemas()
    tables = {}
    for name in OUTPUTS:
        files = sorted((out / name).glob("*.parquet"))
        t = (pa.concat_tables([pq.read_table(f, schema=schemas[name]) for f in files])
             if files else schemas[name].empty_table())
        keep = [c for c in t.column_names if c not in WALL_CLOCK]
        tables[name] = t.select(keep).sort_by("row_id")
    return tables


def reference_tables(records: Sequence[SourceRecord], spec: Any,
                     states: dict[str, Any] | None = None,
                     ) -> tuple[dict[str, pa.Table], dict[str, Any]]:
    out, states = reference_outputs(records, spec, states)
    schemas = stream_schemas()
    tables = {}
    for name in OUTPUTS:
        t = pa.Table.from_pylist(out[name], schema=schemas[name])
        keep = [c for c in t.column_names if c not in WALL_CLOCK]
        tables[name] = t.select(keep).sort_by("row_id")
    return tables, states


def assert_same(got: dict[str, pa.Table], want: dict[str, pa.Table]) -> None:
    for name in OUTPUTS:
        g, w = got[name], want[name]
        assert g.num_rows == w.num_rows, (name, g.num_rows, w.num_rows)
        if not g.equals(w):
            for a, b in zip(g.to_pylist(), w.to_pylist(), strict=True):
                assert a == b, name
        assert g.equals(w), name


def status(out: Path) -> dict[str, Any]:
    """The running stream's status (``OUT/.run-*/status.json``), or {}."""
    for f in out.glob(".run-*/status.json"):
        with contextlib.suppress(OSError, ValueError):
            return dict(json.loads(f.read_text()))
    return {}


def wait_for_records(proc: subprocess.Popen[str], out: Path, n: int,
                     timeout: float = 60) -> None:
    """Until the stream in ``proc`` has read ``n`` records."""
    deadline = time.monotonic() + timeout
    while status(out).get("records", 0) < n:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"the stream did not read {n} records: {status(out)}"
        time.sleep(0.1)


def one_line(stderr: str) -> str:
    lines = [ln for ln in without_warnings(stderr).splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


# -- the labelled stream ----------------------------------------------------------------------

TTL_MS = 2000
T0 = 1_700_000_000_000


def labelled_stream(n: int, first: int, t0: int, seed: int) -> list[Message]:
    """``n`` events of 4 entities (``u{k}/e{i}``, entity k on partition k % 2 of ``ev`` and
    ``lab``) from german rows, 30 ms apart from ``t0``; most labels later on ``lab`` (0 to 3
    s: past the 2 s TTL for some), some twice, some for unknown ids, some as ``label:Y`` on
    ``ev``; some events labelled at once; some records malformed."""
    X, y = data.load_dataset("german")
    rng = random.Random(seed)
    events: list[Message] = []
    labels: list[Message] = []
    for i in range(first, first + n):
        k = i % 4
        part, eid = k % 2, f"u{k}/e{i}"
        ts = t0 + (i - first) * 30
        row = i % len(y)
        feats = " ".join(f"{j + 1}:{float(v)!r}" for j, v in enumerate(X[row]) if v != 0)
        lab = f"{int(y[row]):+d}"
        r = rng.random()
        if r < 0.04:
            events.append(("ev", part, eid.encode(), b"? 3:abc", ts))  # malformed
            continue
        if r < 0.14:
            events.append(("ev", part, eid.encode(), f"{lab} {feats}".encode(), ts))
            continue
        events.append(("ev", part, eid.encode(), f"? {feats}".encode(), ts))
        s = rng.random()
        if s < 0.05:
            continue  # never labelled: expires
        delay = rng.randint(0, 3000)
        if s < 0.15:  # the label on the events topic
            events.append(("ev", part, eid.encode(), f"label:{lab}".encode(), ts + delay))
        else:
            labels.append(("lab", part, eid.encode(), lab.encode(), ts + delay))
        if s > 0.93:  # twice
            labels.append(("lab", part, eid.encode(), lab.encode(), ts + delay + 50))
        if rng.random() < 0.03:  # for an id never seen
            labels.append(("lab", part, f"u{k}/never{i}".encode(), b"-1", ts + delay))
    events.append(("ev", 0, None, b"? 1:1", t0 + 5))  # no event id
    events.append(("ev", 1, b"u1/x", b"label:maybe", t0 + 7))  # unknown label token
    # each partition in timestamp order, as a producer writing live would
    return sorted(events + labels, key=lambda m: (m[0], m[1], m[4]))


STREAM_ARGS = ("kafka://BROKER/ev", "--labels", "kafka://BROKER/lab", "--n-features", "24",
               "-l", "b=bogd", "-p", "b.budget=20", "-l", "perceptron", "--key-by",
               "id-prefix", "--label-ttl", "2s", "--metrics-window", "1s", "--seed", "3")


def _renamed(msgs: Sequence[Message], ev: str, lab: str) -> list[Message]:
    return [((ev if m[0] == "ev" else lab), *m[1:]) for m in msgs]


def _majority_rate(out: Path, run: str, config: str | None = None) -> float:
    """The majority-class predictor's mistake rate over the outcomes run ``run`` published
    (of configuration ``config``; None: all), by hand: each model's labels in learning order
    (a tie predicts +1), pooled."""
    files = sorted((out / "outcomes").glob(f"part-e*-{run}.parquet"))
    rows = sorted((r["key"], r["learn_position"], r["label"])
                  for f in files for r in pq.read_table(f).to_pylist()
                  if config is None or r["config"] == config)
    seen: dict[str, list[int]] = {}
    wrong = 0
    for key, _, label in rows:
        pos_neg = seen.setdefault(key, [0, 0])
        wrong += (1.0 if pos_neg[0] >= pos_neg[1] else -1.0) != label
        pos_neg[0 if label > 0 else 1] += 1
    return 100.0 * wrong / len(rows)


def _assert_by_config(out: Path, doc: dict[str, Any], stdout: str, stderr: str) -> None:
    """The summary's row of each configuration is its own outcomes' (every key's pooled), by
    hand from the rows run ``doc["run"]`` published, printed one line each, each warned
    about on its own."""
    files = sorted((out / "outcomes").glob(f"part-e*-{doc['run']}.parquet"))
    rows = [r for f in files for r in pq.read_table(f).to_pylist()]
    assert [c["label"] for c in doc["by_config"]] == ["b", "perceptron"]
    for c in doc["by_config"]:
        mine = [r for r in rows if r["config"] == c["label"]]
        mistakes = sum(r["mistake"] for r in mine)
        assert (c["outcomes"], c["mistakes"], c["keys"]) == (
            len(mine), mistakes, len({r["key"] for r in mine}))
        assert c["mistake_rate"] == pytest.approx(100.0 * mistakes / len(mine))
        assert c["avg_loss"] == pytest.approx(sum(r["loss"] for r in mine) / len(mine))
        assert c["noskill_mistake_rate"] == pytest.approx(
            _majority_rate(out, doc["run"], c["label"]))
        assert (f"  {c['label']}: outcomes {c['outcomes']:,} of {c['keys']} keys  mistake "
                f"rate {sig(c['mistake_rate'])}% (no-skill {sig(c['noskill_mistake_rate'])}%)"
                ) in stdout
        warned = f"warning: {c['label']}'s outcomes: mistake rate" in stderr
        assert warned == (c["mistake_rate"] >= c["noskill_mistake_rate"])
    assert sum(c["outcomes"] for c in doc["by_config"]) == doc["outcomes"] == len(rows)
    assert "this run's outcomes" not in stderr  # never the blend of the two


# each reader client on its own topics (one broker per module)
@pytest.mark.parametrize(("client", "ev", "lab"), [("confluent", "ev", "lab"),
                                                   ("kafka-python", "kp-ev", "kp-lab")])
def test_stream_equals_the_reference_loop_across_a_restart(broker: str, tmp_path: Path,
                                                            client: str, ev: str, lab: str,
                                                            ) -> None:
    create_topics(broker, [ev, lab], 2)
    produce(broker, _renamed(labelled_stream(260, 0, T0, seed=1), ev, lab))
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    argv = stream_argv(broker, f"kafka://BROKER/{ev}", "--labels", f"kafka://BROKER/{lab}",
                       *STREAM_ARGS[3:], "--out", str(out), "--checkpoint", str(ckpt),
                       "--snapshot-every", "150", "--idle-stop", "2s", "-q",
                       "--kafka-client", client, "--", "--max_records=60")
    t = time.monotonic()
    first = run_cli(argv)
    assert first.returncode == 0, first.stderr
    first_s = time.monotonic() - t
    assert without_warnings(first.stderr).strip() == "", first.stderr
    epoch1 = SnapshotView.open(ckpt).head
    assert epoch1 is not None and epoch1 >= 2, "snapshots every 150 records"
    first_totals = assert_accounting(out)
    # the summary's no-skill baseline: over the run's outcomes, by hand
    first_summary = json.loads((out / "summary.json").read_text())
    # no width given: gamma=auto, from the topic's first records (german's: not 0.5)
    assert first_summary["width_source"] == "auto"
    assert first_summary["learners"]["b"]["params"]["gamma"] == first_summary["auto_gamma"]
    assert first_summary["auto_gamma"] != 0.5
    assert first_summary["noskill_mistake_rate"] == pytest.approx(
        _majority_rate(out, first_summary["run"]))
    assert first_summary["top_class_share"] is not None and first_summary["rmse"] is None
    # each configuration's figures (its keys pooled), printed and warned about on its own
    _assert_by_config(out, first_summary, first.stdout, first.stderr)
    # more traffic, later; the second run resumes from the snapshot
    produce(broker, _renamed(labelled_stream(200, 260, T0 + 60_000, seed=2), ev, lab))
    second = run_cli(argv)
    assert second.returncode == 0, second.stderr
    assert "records" in second.stdout and "outcomes" in second.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["snapshot_epoch"] > epoch1
    assert summary["learners"] == first_summary["learners"]  # the resume keeps its width
    totals = assert_accounting(out, summary)
    # the second run's counts continue the first's
    assert summary["pending_start"] == first_totals["pending"]
    for f in ("records", "offsets", "predictions", "outcomes", "dead_letters", "processed"):
        assert totals[f] == first_totals[f] + summary[f], f
    # a resumed run's baseline is over its own outcomes, as its mistake rate
    assert summary["noskill_mistake_rate"] == pytest.approx(_majority_rate(out, summary["run"]))
    _assert_by_config(out, summary, second.stdout, second.stderr)

    spec = spec_for(argv[: argv.index("--")])
    records = reference_records(broker, [ev, lab], 2)
    want, states = reference_tables(records, spec)
    got = outputs(out)
    assert_same(got, want)
    # every kind of row and dead letter is there
    reasons = {r["reason"].split(":")[0] for r in got["dead_letters"].to_pylist()}
    for reason in ("label for unknown event id", "label for expired event id",
                   "duplicate label"):
        assert reason in reasons, reasons
    assert any("no event id" in r for r in reasons), reasons
    assert got["unlabeled"].num_rows > 0 and got["metrics"].num_rows > 0
    assert any(r["delay_ms"] == 0 for r in got["outcomes"].to_pylist())
    assert len({r["key"] for r in got["predictions"].to_pylist()}) == 8  # 2 configs x 4
    # counts add up per model: predictions = outcomes + unlabeled + pending (the snapshot's)
    view = SnapshotView.open(ckpt)
    from kernelstream.engine.live.engine import StreamEngine

    engine = StreamEngine(spec)
    for key in view.keys():
        st = engine.decode_state(view.get(key))
        n = {name: sum(1 for r in got[name].to_pylist() if r.get("key") == key)
             for name in ("predictions", "outcomes", "unlabeled")}
        assert n["predictions"] == n["outcomes"] + n["unlabeled"] + len(st.pending)
        assert st.counts() == states[key].counts()
        assert st.learner.get_state().keys() == states[key].learner.get_state().keys()
    # the totals are the reference loop's: every record of both topics read once
    assert totals["records"] == totals["offsets"] == len(records)
    assert totals["pending"] == sum(len(st.pending) for st in states.values())
    assert totals["skipped"] == 0 and totals["labelled"] > 0 and totals["rejected"] == 0
    # the process reads each record once: none is left, none is counted twice
    assert summary["records"] > 0
    print(f"first run {first_s:.1f} s")


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_transaction_markers_are_offsets_not_records(broker: str, tmp_path: Path,
                                                     client: str) -> None:
    """Three committed transactions of 4 records: 15 offsets (a commit marker each), 12
    records, and the counts add up."""
    import logging

    from confluent_kafka import Producer

    topic = f"tx-{client}"
    create_topics(broker, [topic], 1)
    quiet = logging.getLogger("kernelstream.test.rdkafka")
    quiet.setLevel(logging.CRITICAL)
    prod = Producer({"bootstrap.servers": broker, "transactional.id": topic}, logger=quiet)
    prod.init_transactions(10)
    for t in range(3):
        prod.begin_transaction()
        for i in range(4):
            prod.produce(topic, f"? 1:{i}".encode(), key=f"e{t}-{i}".encode(), partition=0,
                         timestamp=T0 + 10 * (4 * t + i))
        prod.commit_transaction(10)
    out = tmp_path / "out"
    r = run_cli(stream_argv(broker, f"kafka://BROKER/{topic}", "--n-features", "3", "--out",
                            str(out), "--checkpoint", str(tmp_path / "ckpt"), "--idle-stop",
                            "2s", "-q", "--kafka-client", client))
    assert r.returncode == 0, r.stderr
    totals = assert_accounting(out)
    assert (totals["records"], totals["offsets"], totals["predictions"]) == (12, 15, 12)
    assert "12 records" in r.stdout
    # and the check sees a count that is off, or a file that is missing
    summary = json.loads((out / "summary.json").read_text())
    summary["totals"]["pending"] -= 1
    with pytest.raises(AssertionError, match="totals: predictions"):
        assert_accounting(out, summary)
    for f in (out / "predictions").glob("*.parquet"):
        f.unlink()
    with pytest.raises(AssertionError, match="the run's files"):
        assert_accounting(out)


# -- one-line failures ------------------------------------------------------------------------


def test_option_errors_are_one_line(tmp_path: Path) -> None:
    for args, words in [
        (["kafka://h:1/t", "--n-features", "3", "--label-ttl", "soon"], "--label-ttl"),
        (["kafka://h:1/t"], "--n-features"),
        (["kafka://h:1/t", "--n-features", "3", "-l", "nope"], "nope"),
        (["kafka://h:1/t", "--labels", "kafka://g:1/l", "--n-features", "3"], "--labels"),
        (["kafka://h:1/t", "--format", "csv", "--label-column", "y"], "position"),
        (["kafka://h:1/t", "--n-features", "3", "--hash-features", "10"], "drop --n-features"),
        # dense support vectors of 10^9 features cannot fit: refused before connecting
        (["kafka://h:1/t", "--n-features", "1000000000", "--rows", "dense", "-l", "bogd"],
         "bogd: budget=500 stored rows"),
        # asked for confluent-kafka with a setting librdkafka cannot take: no silent fallback
        (["kafka://h:1/t", "--n-features", "3", "--kafka-client", "confluent",
          "--kafka-option", "sasl_mechanism=OAUTHBEARER"], "sasl_mechanism=OAUTHBEARER"),
    ]:
        r = run_cli(["stream", *args, "--out", str(tmp_path / "o")])
        assert r.returncode == 2, r.stderr
        assert words in one_line(r.stderr), r.stderr
        assert one_line(r.stderr).startswith("kernelstream stream: error:")


def test_a_stream_reads_with_the_replays_read_options() -> None:
    """A stream's parsing options are one ``ReadOptions``, the replay's, whose path is the
    topic URL; what a checkpoint records of them (``stream_doc``, compared when a run
    resumes) stays what it was, with every setting now written (``rows``, ``hash_features``,
    ``init_from``, ``negative_label``: an older snapshot without them stands for their
    defaults)."""
    hashed = spec_for(["stream", "kafka://h:1/a,b", "--hash-features", "12", "--key-by",
                       "id-prefix", "--positive-label", "x"])
    assert hashed.read == ReadOptions("kafka://h:1/a,b", fmt="libsvm", delimiter=",",
                                      positive_label="x", key_by="id-prefix",
                                      hash_features=12)
    assert hashed.width == 4096 and hashed.sparse  # wider than AUTO_SPARSE_WIDTH
    assert StreamConfig.from_args(cli.build_parser().parse_args(
        ["stream", "kafka://h:1/a,b", "--hash-features", "12", "--key-by", "id-prefix",
         "--positive-label", "x"])).stream_doc() == {
        "topics": ["a", "b"], "labels_topic": None, "seed": 0, "format": "libsvm",
        "n_features": 4096, "label_column": None, "delimiter": ",", "task": "classification",
        "positive_label": "x", "key_by": "id-prefix", "label_ttl_ms": 3600000,
        "metrics_window_ms": 60000, "rows": "auto", "hash_features": 12, "init_from": None,
        "negative_label": None, "merge": None,  # merge: resolved by prepare (all, or resumed)
        "forget_after_ms": None, "kafka_exactly_once": False,
        "kafka_out_prefix": None}
    argv = ["stream", "kafka://h:1/t", "--format", "csv", "--label-column", "0",
            "--delimiter", ";", "--task", "regression", "--rows", "sparse", "--labels",
            "kafka://h:1/l"]
    assert spec_for(argv).read == ReadOptions("kafka://h:1/t", fmt="csv", label_column=0,
                                              delimiter=";", task="regression", rows="sparse")
    assert StreamConfig.from_args(cli.build_parser().parse_args(argv)).stream_doc() == {
        "topics": ["t"], "labels_topic": "l", "seed": 0, "format": "csv", "n_features": None,
        "label_column": 0, "delimiter": ";", "task": "regression", "positive_label": None,
        "key_by": None, "label_ttl_ms": 3600000, "metrics_window_ms": 60000, "rows": "sparse",
        "hash_features": None, "init_from": None, "negative_label": None, "merge": None,
        "forget_after_ms": None, "kafka_exactly_once": False,
        "kafka_out_prefix": None}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_broker_down_is_one_line(tmp_path: Path) -> None:
    port = _closed_port()
    r = run_cli(["stream", f"kafka://127.0.0.1:{port}/t", "--n-features", "3", "--out",
                 str(tmp_path / "o"), "--checkpoint", str(tmp_path / "c"), "-q"], timeout=60)
    assert r.returncode == 2, r.stderr
    assert f"cannot connect to the Kafka broker(s) 127.0.0.1:{port}" in one_line(r.stderr)
    # the --checkpoint folder the refused run made is gone again, as its --out
    assert not (tmp_path / "c").exists() and not (tmp_path / "o").exists()


def test_offset_outside_the_log_is_one_line(broker: str, tmp_path: Path) -> None:
    create_topics(broker, ["short"], 1)
    produce(broker, [("short", 0, b"a", b"? 1:1", T0), ("short", 0, b"b", b"? 1:2", T0 + 1)])
    ckpt = tmp_path / "ckpt"
    # a checkpoint that read further than the log now goes (the topic was recreated)
    store = SnapshotStore.open(ckpt)
    store.commit({}, {("short", 0): 500}, {})
    store.close()
    r = run_cli(stream_argv(broker, "kafka://BROKER/short", "--n-features", "3", "--out",
                            str(tmp_path / "o"), "--checkpoint", str(ckpt), "-q"))
    assert r.returncode == 2, r.stderr
    line = one_line(r.stderr)
    assert "cannot resume short/0 at offset 500" in line and "new --checkpoint" in line


def test_a_rerun_without_checkpoint_is_refused(broker: str, tmp_path: Path) -> None:
    """docs/streaming.md (Limits): without ``--checkpoint`` a second run on the same ``--out``
    is refused (exit 2, one line), not a replacement of the first's outputs; ``--overwrite``
    replaces them."""
    create_topics(broker, ["nockpt"], 1)
    produce(broker, [("nockpt", 0, f"e{i}".encode(), f"+1 1:{i % 5}".encode(), T0 + i)
                     for i in range(20)])
    out = tmp_path / "out"
    argv = stream_argv(broker, "kafka://BROKER/nockpt", "--n-features", "3", "--out", str(out),
                       "--idle-stop", "1s", "-q")
    first = run_cli(argv)
    assert first.returncode == 0, first.stderr
    files = sorted((out / "predictions").glob("*.parquet"))
    again = run_cli(argv)
    assert again.returncode == 2
    line = one_line(again.stderr)
    assert f"--out {out} holds a previous kernelstream stream run" in line
    assert "--overwrite" in line
    assert sorted((out / "predictions").glob("*.parquet")) == files  # kept as they were
    replaced = run_cli([*argv, "--overwrite"])
    assert replaced.returncode == 0, replaced.stderr
    assert not set(files) & set((out / "predictions").glob("*.parquet"))


def test_second_writer_then_sigint(broker: str, tmp_path: Path) -> None:
    """A second run on the same checkpoint fails in one line while the first runs; SIGINT
    drains the first: final snapshot, exit 130, one line."""
    create_topics(broker, ["live"], 1)
    produce(broker, [("live", 0, f"e{i}".encode(), f"? 1:{i % 5}".encode(), T0 + i)
                     for i in range(50)])
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    argv = stream_argv(broker, "kafka://BROKER/live", "--n-features", "3", "--out", str(out),
                       "--checkpoint", str(ckpt), "--snapshot-every", "1000000",
                       "--snapshot-seconds", "1h", "-q")
    first = start_cli(argv)
    try:
        wait_for_records(first, out, 50)
        second = run_cli(argv)
        assert second.returncode == 2, second.stderr
        line = one_line(second.stderr)
        assert f"checkpoint directory {ckpt} is in use by another run (pid {first.pid}" in line
        assert SnapshotView.open(ckpt).head is None  # nothing committed yet (1 h interval)
        first.send_signal(signal.SIGINT)
        stdout, stderr = first.communicate(timeout=60)
    finally:
        reap(first)
    assert first.returncode == 130, stderr
    assert one_line(stderr) == (f"kernelstream stream: stopped (SIGINT): 50 records, "
                                f"snapshot epoch 1 in {ckpt}")
    view = SnapshotView.open(ckpt)
    assert view.head == 1 and view.offsets() == {("live", 0): 50}
    assert len(view.keys()) == 1
    preds = pq.read_table(out / "predictions").num_rows
    assert preds == 50 and "predictions 50" in stdout
    assert assert_accounting(out)["pending"] == 50


# -- portable runner, EXTERNAL worker pool ----------------------------------------------------


@pytest.fixture(scope="module")
def worker_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerPool]:
    with start_worker_pool(tmp_path_factory.mktemp("pool") / "pool.log") as pool:
        yield pool


@pytest.mark.slow
def test_portable_job_service_with_external_workers(broker: str, tmp_path: Path,
                                                    worker_pool: WorkerPool) -> None:
    create_topics(broker, ["ext", "ext-lab"], 2)
    msgs = [(("ext" if m[0] == "ev" else "ext-lab"), *m[1:])
            for m in labelled_stream(160, 0, T0, seed=7)]
    produce(broker, msgs)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    base = stream_argv(broker, "kafka://BROKER/ext", "--labels", "kafka://BROKER/ext-lab",
                       *STREAM_ARGS[3:], "--out", str(out), "--checkpoint", str(ckpt),
                       "--snapshot-every", "100", "--idle-stop", "3s", "-q")
    r = run_cli([*base, "--runner", "portable", "--",
                 "--environment_type=EXTERNAL", f"--environment_config={worker_pool.endpoint}",
                 "--max_records=50"], timeout=180)
    assert r.returncode == 0, r.stderr
    assert worker_pool.workers_started() > 0, "no SDK worker was started by the pool"
    assert SnapshotView.open(ckpt).head is not None
    want, _ = reference_tables(reference_records(broker, ["ext", "ext-lab"], 2),
                               spec_for(base))
    assert_same(outputs(out), want)


# -- warm start -------------------------------------------------------------------------------


def test_init_from_a_stream_checkpoint_or_a_replay_checkpoint(broker: str,
                                                              tmp_path: Path) -> None:
    """``--init-from``: the models start from the learners a stream checkpoint or a replay
    checkpoint holds (history first, then live traffic), exactly as the reference loop
    continues them."""
    from kernelstream.engine.live.engine import StreamEngine
    from kernelstream.engine.replay import checkpoints
    from kernelstream.engine.replay.core import decode_replay_state

    create_topics(broker, ["hist", "fresh"], 1)
    X, y = data.load_dataset("german", limit=150)
    feats = [" ".join(f"{j + 1}:{float(v)!r}" for j, v in enumerate(x) if v != 0) for x in X]
    produce(broker, [("hist", 0, f"h{i}".encode(), f"{int(y[i]):+d} {feats[i]}".encode(),
                      T0 + i) for i in range(100)])
    live: list[Message] = []
    for i in range(100, 150):
        live.append(("fresh", 0, f"f{i}".encode(), f"? {feats[i]}".encode(), T0 + 10 * i))
        live.append(("fresh", 0, f"f{i}".encode(), f"label:{int(y[i]):+d}".encode(),
                     T0 + 10 * i + 5))
    produce(broker, live)
    learner = ("--n-features", "24", "-l", "b=bogd", "-p", "b.budget=20")
    hist_ckpt = tmp_path / "hist-ckpt"
    r = run_cli(stream_argv(broker, "kafka://BROKER/hist", *learner, "--checkpoint",
                            str(hist_ckpt), "--out", str(tmp_path / "hist"), "--idle-stop",
                            "2s", "-q"))
    assert r.returncode == 0, r.stderr
    replay_ckpt = tmp_path / "replay-ckpt"
    r = run_cli(["replay", f"kafka://{broker}/hist", *learner, "--runner", "loop",
                 "--checkpoint", str(replay_ckpt), "--out", str(tmp_path / "replay"),
                 "--kafka-idle", "1", "-q"])
    assert r.returncode == 0, r.stderr

    records = read_back(broker, "fresh", 1)[0]
    for init in (hist_ckpt, replay_ckpt):
        out = tmp_path / f"from-{init.name}"
        argv = stream_argv(broker, "kafka://BROKER/fresh", *learner, "--init-from", str(init),
                           "--out", str(out), "--idle-stop", "2s", "-q")
        r = run_cli(argv)
        assert r.returncode == 0, r.stderr
        spec = spec_for(argv)
        if init == hist_ckpt:
            view = SnapshotView.open(init)
            trained = StreamEngine(spec).decode_state(view.get("b#0")).learner
        else:
            states = dict(checkpoints.read_states(checkpoints.latest(str(init))))
            trained = decode_replay_state(states["b#0"]).learner
        assert trained.n_support_vectors > 0
        start = {"b#0": StreamEngine(spec).new_state("b#0", trained)}
        want, _ = reference_tables(records, spec, start)
        got = outputs(out)
        assert_same(got, want)
        assert assert_accounting(out)["outcomes"] == 50  # no checkpoint: the run's counts
        first = got["predictions"].to_pylist()[0]
        assert first["n_support_vectors"] == trained.n_support_vectors  # not a new model
