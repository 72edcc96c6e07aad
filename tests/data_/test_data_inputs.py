"""Inputs that cannot fool a run (rc 2 and one line before the pipeline), ``kernelstream
check`` on every format, feature hashing and sparse (CSR) reading."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kernelstream import data
from kernelstream.data import check as data_check
from kernelstream.data.hashing import hash_index
from kernelstream.pipelines import cli
from kernelstream.pipelines.replay import replay_checks

ROOT = Path(__file__).resolve().parents[2]
SVM = b"+1 1:0.5 3:1\n-1 2:0.25\n+1 1:1 2:1\n-1 3:2\n"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, [ln for ln in err.splitlines() if ln.strip()], out


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    rc, err, _ = run(capsys, *argv)
    assert rc == 2, err
    assert len(err) == 1, err
    return err[0]


def write(path: Path, raw: bytes) -> str:
    path.write_bytes(raw)
    return str(path)


# -- replay refuses bad input up front -------------------------------------------------------


def test_bom_is_stripped_libsvm_and_csv_header(tmp_path: Path) -> None:
    X, y = data.load(write(tmp_path / "b.svm", b"\xef\xbb\xbf" + SVM))
    X0, y0 = data.load(write(tmp_path / "a.svm", SVM))
    assert np.array_equal(X, X0) and np.array_equal(y, y0)
    p = write(tmp_path / "b.csv", b"\xef\xbb\xbfid,f1,y\nu1,1,a\nu2,2,b\n")
    rep = data_check.check_file(data.ReadOptions(p, key_by="id"))
    assert rep.rows == 2 and not rep.dead and rep.labels == {"a": 1, "b": 1}


def test_bom_run_has_no_dead_letters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path / "b.svm", b"\xef\xbb\xbf" + SVM)
    rc, _, _ = run(capsys, "replay", p, "--runner", "loop", "-q", "-o", str(tmp_path / "o"))
    assert rc == 0
    doc = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert doc.get("dead_letters", 0) == 0


@pytest.mark.parametrize("name,raw,needle", [
    ("empty.svm", b"", "no data lines"),
    ("bin.svm", bytes(range(256)) * 20, "not a libsvm text file"),
])
def test_empty_and_binary_files(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str,
                                raw: bytes, needle: str) -> None:
    assert needle in refused(capsys, "replay", write(tmp_path / name, raw), "--runner", "loop")


def test_wrong_delimiter(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path / "s.csv", b"1;2;x\n3;4;z\n5;6;x\n")
    assert "--delimiter" in refused(capsys, "replay", p, "--delimiter", ",", "--runner", "loop")


def test_wrong_format_mostly_rejected(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path / "d.svm", SVM)
    assert "--format" in refused(capsys, "replay", p, "--format", "csv", "--runner", "loop")


def test_continuous_labels_in_classification(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(0)
    lines = "".join(f"{v:.4f} 1:{a:.3f}\n" for v, a in rng.random((50, 2)))
    p = write(tmp_path / "r.svm", lines.encode())
    assert "--task regression" in refused(capsys, "replay", p, "-l", "bogd", "--runner", "loop")



def test_check_names_the_task_the_labels_ask_for(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    # check leaves out the table of a regression file read as classes (the one line says what
    # to do) by the verdict's task, not by its wording; a third class keeps the table
    rng = np.random.default_rng(0)
    cont = write(tmp_path / "r.svm", "".join(f"{v:.4f} 1:{a:.3f}\n"
                                             for v, a in rng.random((50, 2))).encode())
    three = write(tmp_path / "t.svm", "".join(f"{i % 5} 1:{i / 50:.3f}\n"
                                              for i in range(50)).encode())
    found = data_check.diagnose(data_check.check_file(data.ReadOptions(path=str(cont))))
    assert found is not None and found.task == "regression"
    assert data_check.verdict(data_check.check_file(data.ReadOptions(path=str(cont)))) == found.text
    rc, err, out = run(capsys, "check", str(cont))
    assert rc == 2 and out == "" and err == [f"kernelstream check: error: {found.text}"]
    found = data_check.diagnose(data_check.check_file(data.ReadOptions(path=str(three))))
    assert found is not None and found.task is None and "third class" in found.text
    rc, err, out = run(capsys, "check", str(three))
    assert rc == 2 and "rows" in out

@pytest.mark.parametrize("argv", [
    ["--key-by", "nosuchcol"], ["--label-column", "nosuch"], ["--label-column", "9"],
])
def test_csv_column_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                           argv: list[str]) -> None:
    p = write(tmp_path / "h.csv", b"id,f1,f2,y\nu1,1,2,a\nu2,2,1,b\n")
    refused(capsys, "replay", p, *argv, "--runner", "direct")


def test_key_by_on_libsvm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(capsys, "replay", write(tmp_path / "d.svm", SVM), "--key-by", "0",
                   "--runner", "direct")
    assert "--key-by" in line


def test_negative_seed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "--seed" in refused(capsys, "replay", write(tmp_path / "d.svm", SVM), "--seed", "-1")


def test_huge_budget(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(capsys, "replay", write(tmp_path / "d.svm", SVM), "-l", "bogd",
                   "-p", "budget=100000000000", "--runner", "loop")
    assert "budget" in line and "GiB" in line


def test_check_memory_is_budget_times_width() -> None:
    from kernelstream.engine.learner_config import LearnerConfig

    small = LearnerConfig("bogd", "bogd", {"budget": 100})
    replay_checks.check_memory([small], 1000)
    big = LearnerConfig("bogd", "bogd", {"budget": 10**6})
    width = replay_checks.available_memory() // (8 * 10**6) + 1
    with pytest.raises(ValueError, match="budget"):
        replay_checks.check_memory([big], width)


# -- kernelstream check ----------------------------------------------------------------------


@pytest.mark.parametrize("opener", [None, gzip.open, bz2.open, lzma.open])
def test_check_libsvm_compressed(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                 opener) -> None:
    raw = SVM + b"+1 1:x\n"
    p = tmp_path / "d.svm"
    if opener is None:
        p.write_bytes(raw)
    else:
        with opener(p, "wb") as f:
            f.write(raw)
    rc, err, out = run(capsys, "check", str(p), "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["rows"] == 4 and doc["width"] == 3 and doc["records"] == 5
    assert doc["nnz_per_row"] == {"min": 1, "mean": 1.5, "max": 2}
    assert doc["labels"] == {"+1": 2, "-1": 2}
    assert doc["dead_letters"] == {"bad value": {"count": 1, "first_line": 5}}


def test_check_csv_and_parquet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = write(tmp_path / "d.csv", b"f1,f2,y\n1,0,a\n2,3,b\n")
    rc, _, out = run(capsys, "check", p)
    assert rc == 0 and "rows          2" in out and "width         2" in out
    q = tmp_path / "d.parquet"
    pq.write_table(pa.table({"f1": [1.0, 2.0, None], "label": ["a", "b", "a"]}), q)
    rc, _, out = run(capsys, "check", str(q), "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["rows"] == 2
    assert doc["dead_letters"] == {"missing value in column": {"count": 1, "first_line": 3}}


def test_check_hash_width_and_refusal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, out = run(capsys, "check", write(tmp_path / "d.svm", SVM), "--hash-features", "10",
                     "--json")
    assert rc == 0 and json.loads(out)["width"] == 1024
    assert "no data lines" in run(capsys, "check", write(tmp_path / "e.svm", b""))[1][0]


def test_check_topic(capsys: pytest.CaptureFixture[str]) -> None:
    from kafka import KafkaProducer

    from kernelstream.kafka_client import local_broker

    with local_broker() as broker:
        prod = KafkaProducer(bootstrap_servers=broker)
        for line in [b"1,0,a", b"2,3,b", b"x,3,b"]:
            prod.send("chk", value=line)
        prod.flush()
        prod.close()
        rc, err, out = run(capsys, "check", f"kafka://{broker}/chk", "--format", "csv",
                           "--json", "--kafka-idle", "1")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["rows"] == 2 and doc["dead_letters"]["non-numeric value"]["count"] == 1


# -- hashing and sparse reading --------------------------------------------------------------


def test_hash_is_fixed() -> None:
    # the documented splitmix64 finalizer: these values must never change
    assert hash_index(np.arange(4), 20).tolist() == [926218, 594082, 619907, 118961]
    big = hash_index(np.array([2**31 - 1, 0]), 31)
    assert big.dtype == np.int64 and (0 <= big).all() and (big < 2**31).all()


def test_hashed_sparse_sums_collisions(tmp_path: Path) -> None:
    p = write(tmp_path / "d.svm", SVM)
    X, _ = data.load(p)
    H, _ = data.load_sparse(p, hash_features=1)
    assert H.check().n_features == 2
    assert np.allclose(H.to_dense().sum(axis=1), X.sum(axis=1))
    S, _ = data.load_sparse(p)
    assert np.array_equal(S.to_dense(), X)


def test_sparse_reading_memory_grows_with_nonzeros(tmp_path: Path) -> None:
    p = tmp_path / "wide.svm"
    long_line = "+1 " + " ".join(f"{i}:1" for i in range(1, 250_000)) + "\n"
    assert len(long_line) > 2_000_000
    p.write_text("-1 3:1 2147483647:0.5\n" + long_line + "-1 1:1\n")
    code = ("import resource, sys; from kernelstream import data; "
            f"X, y = data.load_sparse({str(p)!r}); "
            "assert X.n_features == 2**31 - 1 and X.n_rows == 3; "
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=True).stdout
    assert int(out.strip()) * 1024 < 1 << 30  # ru_maxrss is in KiB on Linux
