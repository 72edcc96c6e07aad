"""Helpers of the benchmark scripts that decide what a results file says."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import _common
import _streaming_report
import learners as bench_learners
import peers
import pipeline as bench_pipeline
import skegd_scaling

from kernelstream.experiments import report
from kernelstream.learners import make
from kernelstream.learners.testing import make_stream
from kernelstream.pipelines.config import learner_configs


def test_snapshots_are_the_states_of_one_straight_run() -> None:
    """The scaling benchmark times windows from snapshots taken in one blocked pass; each must
    be the state a plain run reaches at that position (block cuts and position cuts alike)."""
    X, y = make_stream("classification", 900, 4, seed=3)
    positions = [100, 250, 600]
    m = make("oks-sil", seed=1, budget=20)
    snaps = skegd_scaling.snapshots(m, X, y, positions, 700, block=170)
    assert len(snaps) == len(positions)
    for p, st in zip(positions, snaps, strict=True):
        ref = make("oks-sil", seed=1, budget=20)
        ref.predict_learn_many(X[:p], y[:p])
        want = ref.get_state()
        assert set(st) == set(want)
        assert all(np.array_equal(st[k], want[k], equal_nan=st[k].dtype.kind == "f")
                   for k in want)
    end = make("oks-sil", seed=1, budget=20)
    end.predict_learn_many(X[:700], y[:700])
    assert np.array_equal(m.get_state()["sv.X"], end.get_state()["sv.X"])


def test_machines_line_names_each_machine_with_its_cells() -> None:
    # the package's, which the benchmarks import (one copy)
    assert _common.machines_line is report.machines_line
    one = [{"machine": "A", "t": "x"}, {"machine": "A", "t": "y"}]
    assert report.machines_line(one, lambda c: c["t"], "tables") == "A"
    two = [*one, {"machine": "B", "t": "y"}, {"machine": "B", "t": "z"}]
    assert report.machines_line(two, lambda c: c["t"], "tables") == (
        "A (tables x, y); B (tables y, z)")


def test_random_feature_learners_have_a_floor_and_are_judged() -> None:
    """rff-rls (the default learner on dense rows) is a fixed-memory single-kernel learner:
    its floor is FOGD's map plus its O(D²) update, not "unbudgeted" with a NaN floor."""
    params, kind, size = bench_learners.learner_config("rff-rls", 200)
    assert (kind, size, params["n_components"]) == ("rls", 200, 200)
    params, kind, size = bench_learners.learner_config("fogd", 200)
    assert (kind, size) == ("rff", 800)
    over = bench_learners.learner_config("rff-rls", 200, {"n_components": 50})
    assert over[2] == 50 and over[0]["n_components"] == 50
    X, _ = make_stream("classification", 50, 4, seed=0)
    t = bench_learners.time_floor("rls", np.ascontiguousarray(X), 20, 0.5)
    assert 0 < t < 5
    keep, excluded = peers.selected_learners()
    assert "rff-rls" in keep and "fogd" in keep and "rff-rls" not in excluded


def test_param_overrides_parse_numbers() -> None:
    assert bench_learners.parse_params(["rff-rls.n_components=500", "fogd.gamma=0.5",
                                        "bpa-s.kernel=gaussian", "bpa-s.sigma=0.5"]) == {
        "rff-rls": {"n_components": 500}, "fogd": {"gamma": 0.5},
        "bpa-s": {"kernel": "gaussian", "gamma": 2.0}}
    for bad in ("rff-rls:n_components=500", "n_components=500", "fogd.nope=1"):
        with pytest.raises(SystemExit):
            bench_learners.parse_params([bad])


def test_param_overrides_are_the_cli_values() -> None:
    # the benchmark's --param LEARNER.KEY=VALUE is the CLI's -p LABEL.key=value, same values
    specs = ["rff-rls.n_components=500", "rff-rls.lam=0.01", "rff-rls.sigma=2"]
    (cli,) = learner_configs(["rff-rls"], specs)
    got = bench_learners.parse_params(specs)["rff-rls"]
    assert got == {k: cli.params[k] for k in got}


def test_results_header_names_command_code_and_load() -> None:
    prov = _common.provenance("learners.py", ["--rows", "20000", "--pre-issue", ""])
    assert prov["command"] == "python benchmarks/learners.py --rows 20000 --pre-issue ''"
    line = _common.provenance_line({**prov, "load_end": "9.00 / 9.00 / 9.00"})
    assert prov["command"] in line and prov["load_start"] in line and "9.00 / 9.00" in line
    assert prov["git_head"].split()[0] in line


def _streaming_results(broker: dict[str, str] | None) -> dict[str, object]:
    """A streaming.py result: the floor and one live rate (1k events/s) on one data set."""
    load = {"busy": 0.5, "own": 0.5, "others": 0.0}
    step = {"rate": 1000, "achieved": 1000.0, "sent": 12000, "arrived": 12000,
            "samples": 10000, "p50": 20.0, "p99": 40.0, "max": 50.0, "growth_ms": 0.0,
            "stream_cpu_share": 0.1, "load": load, "bounded": True}
    res: dict[str, object] = {
        "machine": "M", "load_start": "0.10 / 0.20 / 0.30", "load_end": "0.40 / 0.50 / 0.60",
        "command": "python benchmarks/streaming.py", "git_head": "abc",
        "data": {"a9a": "rows"}, "stream_kafka": "client X; reader fetch wait 100 ms",
        "floor": {"rate": 1000, "samples": 9999, "p50": 5.0, "p99": 9.0},
        "datasets": {"a9a": {"live": {"ready_s": 1.0, "duplicates": 0, "exit_code": 130,
                                      "steps": [step], "fetch_wait_raises": [200]}}}}
    if broker is not None:
        res["broker"] = broker
    return res


def test_streaming_report_names_the_broker_of_every_figure() -> None:
    """Each broker has its own results file, and the report says which broker the latencies
    and the floor were measured on; results of before --broker are tansu's."""
    a = SimpleNamespace(stream_arg=None, beam_option=None, labels_topic=False,
                        label_delay_ms=500.0, step_seconds=12.0, warmup=2.0, bound_ms=1000.0,
                        backlog_runs=5, replay_runs=7)
    assert _streaming_report.results_stem("tansu") == "streaming"  # the committed file
    assert _streaming_report.results_stem("apache") == "streaming_apache"
    _, apache = _streaming_report.broker("apache")
    text = "\n".join(_streaming_report.render(a, _streaming_results(apache), "now", 1.0))
    label = apache["label"]
    assert label.startswith("Apache Kafka ") and label in text.splitlines()[0]
    assert f"* Broker: **{label}**, every phase (the floor too)" in text
    assert f"Measured on {label} (the floor above too)" in text
    assert f"a9a at 1,000 events/s on {label}" in text
    assert f"floor, this run, {label}) p50 5.0 ms" in text
    assert "0.10 / 0.20 / 0.30 at the start, 0.40 / 0.50 / 0.60 at the end" in text
    assert "client X; reader fetch wait 100 ms" in text and "a9a live to 200 ms" in text
    old = "\n".join(_streaming_report.render(a, _streaming_results(None), "now", 1.0))
    assert "* Broker: **tansu**" in old and "Measured on tansu" in old
    log = ("WARNING Kafka reader: no record for 1 s at ev[0] although the broker has more; "
           "fetch_max_wait_ms 100 -> 200 ms (a broker ...)\nfetch_max_wait_ms 200 -> 400 ms")
    assert _streaming_report.fetch_wait_raises(log) == [200, 400]


def _kol_parse_float(tok: str) -> float:
    """KOL's parseFloat (src/data/parser.h): every digit into a 32-bit int (wrapping, as its
    ``int acc`` does), then × 10^(exponent − decimals)."""
    m = re.fullmatch(r"([+-]?)(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?", tok)
    assert m, tok
    sign, whole, frac, exp = m.groups()
    acc = 0
    for ch in whole + (frac or ""):
        acc = (acc * 10 + int(ch) + 2**31) % 2**32 - 2**31
    return (-1.0 if sign == "-" else 1.0) * acc * 10.0 ** (int(exp or 0) - len(frac or ""))


def test_kol_input_reads_back_through_kols_own_parser(tmp_path: Path) -> None:
    """KOL must read the rows we time it on: repr's 17 digits overflowed its parser's int
    (magic04 and SUSY_30k came out as garbage, 64.6 % and 45.6 % mistakes)."""
    X = np.array([[0.1234567890123, 0.0, -123.456789012], [1e-7 / 3, 5e8 / 7, 1.0]])
    y = np.array([1.0, -1.0])
    path = tmp_path / "rows.svm"
    peers.write_libsvm(path, X, y)
    for line, xi, yi in zip(path.read_text().splitlines(), X, y, strict=True):
        label, *feats = line.split()
        assert int(label) == yi
        got = np.zeros(X.shape[1])
        for f in feats:
            j, v = f.split(":")
            got[int(j) - 1] = _kol_parse_float(v)
        np.testing.assert_allclose(got, xi.astype(np.float32), rtol=1e-6)


def test_the_loop_runs_fixed_cost_command_runs_twice_into_one_folder(tmp_path: Path) -> None:
    """benchmarks/pipeline.py times the same loop replay again and again into one --out:
    the replay refuses a folder holding an earlier run unless told to replace it."""
    import subprocess

    data = tmp_path / "d.libsvm"
    data.write_text("".join(f"{1 if i % 3 else -1} 1:{i % 7 / 7:.3f} 2:{i % 5 / 5:.3f}\n"
                            for i in range(60)))
    cmd = bench_pipeline.loop_command(data, tmp_path / "out", 20, 0)
    for _ in range(2):
        r = subprocess.run(cmd, capture_output=True, text=True, check=False)
        assert r.returncode == 0, r.stderr


def test_peers_report_names_one_revision() -> None:
    # the revision taken before the timings (provenance's git_head), not the end's "git"
    from _peers_report import render

    js = json.loads((_common.RESULTS / "peers.json").read_text())
    page = "\n".join(render({**js, "git": "git 0000000"}))
    assert "0000000" not in page
    assert len(re.findall(r"\bgit [0-9a-f]{7}", page)) == 1 and js["git_head"] in page
