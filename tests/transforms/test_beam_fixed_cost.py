"""The direct runner's fixed-cost cuts: the permuted source's read started before the pipeline
(``sources.PrefetchedLoad``) and the sink's files finalized by the caller of the FnApiRunner
(``sinks.WriteOutputs(finalize=False)``)."""

from __future__ import annotations

import pickle
import threading
from pathlib import Path
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from kernelstream.engine.replay import Dataset
from kernelstream.transforms import sources
from kernelstream.transforms.sinks import WriteOutputs
from kernelstream.transforms.sources import PrefetchedLoad

_GATE = threading.Event()  # module-level: a loader must stay picklable


class _Counting:
    """A loader that counts its calls (and can be made to fail, or to wait for a gate)."""

    def __init__(self, fail: bool = False, gated: bool = False) -> None:
        self.calls = 0
        self.fail = fail
        self.gated = gated

    def __call__(self) -> Dataset:
        self.calls += 1
        if self.gated:
            _GATE.wait(5)
        if self.fail:
            raise ValueError("line 3: bad label")
        return Dataset(np.eye(3), np.array([1.0, -1.0, 1.0]))


def test_prefetched_load_is_read_once_then_by_each_further_call() -> None:
    load = _Counting()
    with PrefetchedLoad(load) as pre:
        first = pre()
        assert load.calls == 1  # the background read's result, not a second read
        again = pre()  # a retried source reads the file itself
        assert load.calls == 2
    assert np.array_equal(first.X, again.X) and np.array_equal(first.y, again.y)


def test_prefetched_load_raises_the_reads_error_where_the_source_asks() -> None:
    with PrefetchedLoad(_Counting(fail=True)) as pre, pytest.raises(ValueError, match="line 3"):
        pre()


def test_prefetched_load_in_another_process_reads_itself(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _GATE.clear()
    load = _Counting(gated=True)
    with PrefetchedLoad(load) as pre:
        copy = pickle.loads(pickle.dumps(pre))
        started = dict(sources._STARTED)
        monkeypatch.setattr(sources, "_STARTED", {})  # a worker process: no read started
        _GATE.set()
        before = copy.load.calls
        copy()
        assert copy.load.calls == before + 1
        monkeypatch.setattr(sources, "_STARTED", started)
    assert load.calls == 1  # exit waited for the background read, which nobody took
    assert pre.token not in sources._STARTED


_SCHEMA = pa.schema([("v", pa.int64())])


def _write(out: Path, finalize: bool) -> WriteOutputs:
    sink = WriteOutputs({"a": (str(out / "a"), _SCHEMA), "b": (str(out / "b"), _SCHEMA)},
                        _route, finalize=finalize)
    with beam.Pipeline(runner=FnApiRunner()) as p:
        _ = p | beam.Create([{"v": i} for i in range(10)]) | sink
    return sink


def _route(row: dict[str, Any]) -> str:
    return "a" if row["v"] % 2 else "b"


def _rows(d: Path) -> list[int]:
    return sorted(v for f in d.glob("*.parquet") for v in pq.read_table(f)["v"].to_pylist())


def test_sink_finalized_by_the_caller_matches_the_pipelines_finalizer(tmp_path: Path) -> None:
    _write(tmp_path / "in", finalize=True)
    stale = tmp_path / "out" / "a" / ".part-000000000000-x.parquet.tmp"  # another sink's
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"")
    sink = _write(tmp_path / "out", finalize=False)
    # until finalize, the rows are in hidden temporary files only
    assert not list((tmp_path / "out").rglob("*.parquet"))
    assert len(list((tmp_path / "out").rglob(f".part-{sink.token}-*.parquet.tmp"))) == 2
    sink.finalize()
    assert not list((tmp_path / "out").rglob(f".part-{sink.token}-*"))
    assert stale.exists()  # another sink's file is left alone
    for name in ("a", "b"):
        assert _rows(tmp_path / "out" / name) == _rows(tmp_path / "in" / name)
    assert _rows(tmp_path / "out" / "a") == [1, 3, 5, 7, 9]


def test_preloaded_rows_are_what_load_rows_returns_until_forgotten(tmp_path: Path) -> None:
    from kernelstream.data.options import ReadOptions
    from kernelstream.engine.replay import forget_preloaded, load_rows, preload_rows

    f = tmp_path / "d.libsvm"
    f.write_text("+1 1:0.5 3:1\n-1 2:0.25\n+1 1:1\n")
    opts = ReadOptions(path=str(f))
    fresh = load_rows(opts)
    preload_rows(opts)
    try:
        shared = load_rows(opts)
        assert shared is load_rows(opts)  # the same rows: what forked workers share
        assert np.array_equal(shared.y, fresh.y)
        assert load_rows(ReadOptions(path=str(f), limit=2)) is not shared  # other options
    finally:
        forget_preloaded()
    assert load_rows(opts) is not shared


def test_a_file_that_fails_to_preload_is_read_and_reported_by_load_rows(
        tmp_path: Path) -> None:
    from kernelstream.data.options import ReadOptions
    from kernelstream.engine.replay import forget_preloaded, load_rows, preload_rows

    opts = ReadOptions(path=str(tmp_path / "missing.libsvm"))
    preload_rows(opts)  # no error here: each worker's own read reports it
    try:
        with pytest.raises(OSError):
            load_rows(opts)
    finally:
        forget_preloaded()


@pytest.mark.parametrize("ahead", [True, False])
def test_direct_replay_reading_ahead_or_not_writes_the_loops_outputs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ahead: bool) -> None:
    from kernelstream import data
    from kernelstream.engine.core import LearnerConfig
    from kernelstream.engine.outputs import PREDICTIONS_SCHEMA, read_table
    from kernelstream.pipelines import beam_replay
    from kernelstream.pipelines.replay import run_loop_outputs, run_replay

    X, y = data.load_dataset("german", limit=120)
    f = tmp_path / "g.libsvm"
    f.write_text("".join(f"{int(yi):+d} " + " ".join(f"{j + 1}:{float(v)!r}"
                                                      for j, v in enumerate(xi) if v) + "\n"
                         for xi, yi in zip(X, y, strict=True)))
    loads: list[str] = []
    real = sources.PrefetchedLoad.__call__

    def taken(self: PrefetchedLoad) -> Any:
        loads.append(threading.current_thread().name)
        return real(self)

    monkeypatch.setattr(beam_replay, "core_free", lambda: ahead)
    monkeypatch.setattr(sources.PrefetchedLoad, "__call__", taken)
    configs = [LearnerConfig("bogd", "bogd", {"budget": 20})]
    kw = dict(seed=3, permutations=2, block_size=16, metrics_window=40)
    res = run_replay(str(f), configs, tmp_path / "direct", runner="direct", **kw)
    ref = run_loop_outputs(str(f), configs, tmp_path / "loop", **kw)
    assert len(loads) == (1 if ahead else 0)  # the source took the rows read ahead
    keys = [("key", "ascending"), ("position", "ascending")]
    assert read_table(tmp_path / "direct" / "predictions", PREDICTIONS_SCHEMA).sort_by(
        keys).equals(read_table(tmp_path / "loop" / "predictions", PREDICTIONS_SCHEMA)
                     .sort_by(keys))
    assert [s["mistakes"] for s in res.summaries] == [s["mistakes"] for s in ref.summaries]
    assert not list((tmp_path / "direct").rglob(".*.tmp"))  # every part finalized
