"""Input and output URLs (``gs://`` on Dataflow) go through Beam's file systems everywhere:
data loading, both Beam readers, the sinks, reading the outputs back and ``summary.json``.
A test file system (``kstest://``, files under a temporary directory) stands in for Cloud
Storage; anything that used ``open``/``pathlib`` on a URL would fail or write to a local
``kstest:`` directory instead."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _remote_fs import PREFIX, ROOT_ENV

from kernelstream import data, fs
from kernelstream.engine.learner_config import LearnerConfig
from kernelstream.engine.replay.outputs import (
    DEAD_LETTER_SCHEMA,
    METRICS_SCHEMA,
    PREDICTIONS_SCHEMA,
    read_table,
)
from kernelstream.pipelines.cli import main
from kernelstream.pipelines.replay.replay import run_loop_outputs, run_replay

CONFIGS = [LearnerConfig("bogd", "bogd", {"budget": 20}),
           LearnerConfig("ea2oks", "ea2oks", {"sigmas": "2^-1:1:1"})]


@pytest.fixture()
def remote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The local directory behind ``kstest://``; the working directory is an empty one that
    must stay empty."""
    root = tmp_path / "bucket"
    (root / "in").mkdir(parents=True)
    monkeypatch.setenv(ROOT_ENV, str(root))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    X, y = data.load_dataset("german", limit=150)
    lines = [f"{int(yi):+d} " + " ".join(f"{j + 1}:{float(v)!r}" for j, v in enumerate(xi)
                                         if v != 0) for xi, yi in zip(X, y, strict=True)]
    lines.insert(40, "+1 3:abc")  # a malformed line: a dead letter with its line number
    text = "\n".join(lines) + "\n"
    (root / "in" / "g.libsvm").write_text(text)
    (root / "in" / "g.libsvm.gz").write_bytes(gzip.compress(text.encode()))
    clean = "\n".join(lines[:40] + lines[41:]) + "\n"
    (root / "in" / "clean.libsvm").write_text(clean)
    shutil.copy(root / "in" / "clean.libsvm", tmp_path / "clean.libsvm")
    yield root
    assert list(cwd.iterdir()) == [], "something wrote a URL as a local path"


def _tables(out: str) -> dict[str, pa.Table]:
    schemas = {"predictions": PREDICTIONS_SCHEMA, "metrics": METRICS_SCHEMA,
               "dead_letters": DEAD_LETTER_SCHEMA}
    res = {}
    for name, schema in schemas.items():
        t = read_table(fs.join(out, name), schema)
        drop = [c for c in t.column_names if "second" in c or c == "max_buffered_blocks"]
        res[name] = t.drop_columns(drop).sort_by([(c, "ascending") for c in (
            ("key", "position") if name == "predictions" else ("key", "window_end", "final")
            if name == "metrics" else ("line",))])
    return res


def test_fs_helpers_on_urls(remote: Path) -> None:
    url = f"{PREFIX}in/g.libsvm.gz"
    assert fs.is_remote(url) and not fs.is_remote("/tmp/x") and not fs.is_remote("file:///x")
    assert fs.exists(url) and not fs.exists(f"{PREFIX}in/nope")
    assert fs.size(url) == (remote / "in" / "g.libsvm.gz").stat().st_size
    assert fs.compression(url) == "gzip"
    with fs.open_binary(url) as f:
        assert f.read() == (remote / "in" / "g.libsvm").read_bytes()
    assert fs.list_files(f"{PREFIX}in", "*.gz") == [url]
    fs.write_bytes_atomic(f"{PREFIX}out/a.txt", b"hi")
    assert (remote / "out" / "a.txt").read_bytes() == b"hi"


@pytest.mark.parametrize("name", ["clean.libsvm", "g.libsvm.gz"])
def test_data_load_reads_urls(remote: Path, name: str) -> None:
    if name == "g.libsvm.gz":
        with pytest.raises(data.ParseError, match=r"g\.libsvm\.gz:41: bad value"):
            data.load(f"{PREFIX}in/{name}")
        return
    X, y = data.load(f"{PREFIX}in/{name}", scale="01")
    X0, y0 = data.load(str(remote / "in" / name), scale="01")
    assert np.array_equal(X, X0) and np.array_equal(y, y0)


@pytest.mark.parametrize("order", ["permuted", "file"])
def test_replay_from_and_to_urls_equals_local(remote: Path, tmp_path: Path, order: str) -> None:
    kw = dict(seed=2, block_size=32, metrics_window=50, order=order, chunk_bytes=1500)
    kw["permutations"] = 2 if order == "permuted" else 1
    res = run_replay(f"{PREFIX}in/g.libsvm.gz" if order == "permuted" else
                     f"{PREFIX}in/g.libsvm", CONFIGS, f"{PREFIX}out/beam", runner="direct",
                     **kw)
    ref = run_loop_outputs(str(remote / "in" / "g.libsvm"), CONFIGS, str(tmp_path / "loop"),
                           **kw)
    def untimed(rows: list[dict]) -> list[dict]:
        return [{k: v for k, v in r.items() if "second" not in k} for r in rows]

    assert untimed(res.summaries) == untimed(ref.summaries)
    got, want = _tables(f"{PREFIX}out/beam"), _tables(str(tmp_path / "loop"))
    for name in got:
        if name == "dead_letters":  # the source column names the file read
            got[name] = got[name].drop_columns(["source"])
            want[name] = want[name].drop_columns(["source"])
        assert got[name].equals(want[name]), name
    assert got["dead_letters"].column("line").to_pylist() == [41]
    assert sorted(os.listdir(remote / "out" / "beam")) == ["dead_letters", "metrics",
                                                          "predictions"]


def test_cli_replay_with_url_input_and_output(remote: Path) -> None:
    rc = main(["replay", f"{PREFIX}in/g.libsvm", "--learner", "bogd", "-p", "budget=20",
               "--out", f"{PREFIX}out/cli", "--quiet"])
    assert rc == 0
    doc = json.loads((remote / "out" / "cli" / "summary.json").read_text())
    assert doc["dead_letters"] == 1 and doc["predictions"] == 150
    assert pq.read_table(remote / "out" / "cli" / "dead_letters").num_rows == 1
    # the loop runner writes its outputs there too
    rc = main(["replay", f"{PREFIX}in/clean.libsvm", "--learner", "bogd", "--runner", "loop",
               "--out", f"{PREFIX}out/loop", "--quiet"])
    assert rc == 0 and (remote / "out" / "loop" / "summary.json").exists()
