"""The direct runner's fixed-cost cut, the sink's files finalized by the caller of the
FnApiRunner (``sinks.WriteOutputs(finalize=False)``), and the rows ``replay --workers`` reads
once before forking its workers (``engine.replay.sources.preload_rows``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from kernelstream.transforms.replay.sinks import WriteOutputs

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
    from kernelstream.engine.replay.sources import forget_preloaded, load_rows, preload_rows

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
    from kernelstream.engine.replay.sources import forget_preloaded, load_rows, preload_rows

    opts = ReadOptions(path=str(tmp_path / "missing.libsvm"))
    preload_rows(opts)  # no error here: each worker's own read reports it
    try:
        with pytest.raises(OSError):
            load_rows(opts)
    finally:
        forget_preloaded()


def test_direct_replay_writes_the_loops_outputs_with_every_part_finalized(
        tmp_path: Path) -> None:
    from kernelstream import data
    from kernelstream.engine.learner_config import LearnerConfig
    from kernelstream.engine.replay.outputs import PREDICTIONS_SCHEMA, read_table
    from kernelstream.pipelines.replay.replay import run_loop_outputs, run_replay

    X, y = data.load_dataset("german", limit=120)
    f = tmp_path / "g.libsvm"
    f.write_text("".join(f"{int(yi):+d} " + " ".join(f"{j + 1}:{float(v)!r}"
                                                      for j, v in enumerate(xi) if v) + "\n"
                         for xi, yi in zip(X, y, strict=True)))
    configs = [LearnerConfig("bogd", "bogd", {"budget": 20})]
    kw = dict(seed=3, permutations=2, block_size=16, metrics_window=40)
    res = run_replay(str(f), configs, tmp_path / "direct", runner="direct", **kw)
    ref = run_loop_outputs(str(f), configs, tmp_path / "loop", **kw)
    keys = [("key", "ascending"), ("position", "ascending")]
    assert read_table(tmp_path / "direct" / "predictions", PREDICTIONS_SCHEMA).sort_by(
        keys).equals(read_table(tmp_path / "loop" / "predictions", PREDICTIONS_SCHEMA)
                     .sort_by(keys))
    assert [s["mistakes"] for s in res.summaries] == [s["mistakes"] for s in ref.summaries]
    assert not list((tmp_path / "direct").rglob(".*.tmp"))  # every part finalized
