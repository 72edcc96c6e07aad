"""The `kernelstream` command line, run in-process through main([...])."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kernelstream import __version__, learners
from kernelstream.engine.evaluate import evaluate
from kernelstream.pipelines.cli import main

REQUIRED = {
    "dataset", "learner", "params", "runner", "permutations", "examples", "mistake_rate",
    "mistake_rate_std", "avg_loss", "n_support_vectors", "seconds", "examples_per_second",
    "per_permutation", "seed", "scale", "task", "kernelstream_version", "configs",
}
PER_PERMUTATION = {
    "permutation", "examples", "mistakes", "mistake_rate", "avg_loss", "n_support_vectors",
    "seconds", "examples_per_second",
}


def _replay(tmp_path: Path, *args: str) -> tuple[int, dict | None]:
    out = tmp_path / "run"
    code = main(["replay", "--out", str(out), "--quiet", *args])
    path = out / "summary.json"
    return code, json.loads(path.read_text()) if path.exists() else None


def test_learners_lists_every_learner(capsys) -> None:
    assert main(["learners"]) == 0
    text = capsys.readouterr().out
    for name in learners.available():
        assert any(line.startswith(name + " ") for line in text.splitlines())
    assert "perceptron" in text and "gamma" in text and "0.5" in text


def test_learners_one_as_json(capsys) -> None:
    assert main(["learners", "perceptron", "--format", "json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["name"] == "perceptron"
    expected = [p.name for p in learners.get("perceptron").params]
    assert [p["name"] for p in info["params"]] == expected
    assert {"type", "default", "doc"} <= set(info["params"][0])


def test_learners_unknown(capsys) -> None:
    assert main(["learners", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown learner 'nope'" in err and "perceptron" in err


@pytest.mark.parametrize("runner", [None, "loop"])
def test_replay_german(tmp_path, capsys, runner) -> None:
    extra = [] if runner is None else ["--runner", runner]
    code, s = _replay(tmp_path, "german", "--learner", "perceptron", "--permutations", "2",
                      "--limit", "200", "-p", "gamma=0.25", *extra)
    assert code == 0, capsys.readouterr().err
    assert REQUIRED <= set(s)
    assert s["dataset"] == "german" and s["learner"] == "perceptron"
    assert s["runner"] == (runner or "direct")  # Beam's FnApiRunner is the default
    for out in ("predictions", "metrics", "dead_letters"):  # every runner writes Parquet
        assert list((tmp_path / "run" / out).glob("*.parquet"))
    assert s["examples"] == 200 and s["permutations"] == 2 and s["n_features"] == 24
    assert s["params"] == {"kernel": "gaussian", "gamma": 0.25, "degree": 2, "tie": "positive"}
    assert s["kernelstream_version"] == __version__ and s["seed"] == 0
    assert s["scale"] == "none" and s["task"] == "classification"
    assert 0 < s["mistake_rate"] < 100 and s["mistake_rate_std"] >= 0
    assert s["avg_loss"] > 0 and 0 < s["n_support_vectors"] <= 200
    assert s["seconds"] > 0 and s["examples_per_second"] > 0
    assert len(s["per_permutation"]) == 2
    assert PER_PERMUTATION <= set(s["per_permutation"][0])
    assert len(s["configs"]) == 1 and s["configs"][0]["mistake_rate"] == s["mistake_rate"]
    table = capsys.readouterr().out
    assert "perceptron" in table and "±" in table and "summary.json" in table

    # the CLI result is the library's result on the same rows and seeds
    from kernelstream import data

    X, y = data.load_dataset("german", limit=200)
    ref = evaluate(X, y, "perceptron", {"gamma": 0.25}, permutations=2, progress=None)
    assert [p["mistakes"] for p in s["per_permutation"]] == [p.mistakes for p in ref.runs]


def test_replay_grid(tmp_path) -> None:
    code, s = _replay(tmp_path, "german_scale", "--limit", "100", "-l", "perceptron",
                      "-l", "neg=perceptron", "-p", "neg.tie=negative", "-p", "gamma=0.1")
    assert code == 0
    assert s["dataset"] == "german" and s["data"] == "german_scale"  # an alias of the embedded set
    assert [c["label"] for c in s["configs"]] == ["perceptron", "neg"]
    assert [c["params"]["tie"] for c in s["configs"]] == ["positive", "negative"]
    assert all(c["params"]["gamma"] == 0.1 for c in s["configs"])
    assert s["label"] == "perceptron" and s["params"]["tie"] == "positive"
    # same registry name → same learner seeds; only the tie rule differs
    assert s["configs"][0]["seed_name"] == s["configs"][1]["seed_name"] == "perceptron"


def test_replay_default_learner(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["replay", "--limit", "150", "--quiet"]) == 0
    s = json.loads((tmp_path / "runs" / "german-rff-rls" / "summary.json").read_text())
    # dense rows: as -l rff-rls -p n_components=500
    assert s["learner"] == "rff-rls" and s["params"]["n_components"] == 500
    assert s["default_learner"] == {"rows": "dense", "learner": "rff-rls"}
    assert s["params"]["gamma"] != 0.5  # gamma=auto, from the data


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--learner", "nope"], "unknown learner 'nope'"),
        (["--learner", "perceptron", "-p", "gamma=abc"], "'gamma' must be float"),
        (["--learner", "perceptron", "-p", "gamma=-1"], "'gamma' must be > 0"),
        (["--learner", "perceptron", "-p", "nope=1"], "unknown parameter(s) nope"),
        (["--learner", "perceptron", "-p", "gamma"], "expected key=value"),
        (["--learner", "perceptron", "-p", "other.gamma=1"], "no learner configuration"),
        (["-l", "perceptron", "-l", "perceptron"], "given twice"),
        (["--learner", "perceptron", "--permutations", "0"], "--permutations must be >= 1"),
    ],
)
def test_replay_bad_configuration(tmp_path, capsys, args, message) -> None:
    code, s = _replay(tmp_path, "german", *args)
    err = capsys.readouterr().err
    assert code == 2 and s is None
    assert message in err and "Traceback" not in err
    assert err.startswith("kernelstream replay: error:")


@pytest.mark.parametrize("runner", ["direct", "loop"])
def test_replay_bad_lines_go_to_dead_letters(tmp_path, capsys, runner) -> None:
    """A malformed line does not stop the run: it is a dead letter with its line number and
    reason, every good line is predicted, and the counts in summary.json add up."""
    import pyarrow.parquet as pq

    bad = tmp_path / "bad.libsvm"
    bad.write_text("+1 1:0.5 2:0.25\n-1 1:zero\n-1 1:0.1\n+1 2:nan\n+1 1:0.9 2:0.8\n")
    code, s = _replay(tmp_path, str(bad), "--learner", "perceptron", "--runner", runner)
    assert code == 0, capsys.readouterr().err
    assert s["examples"] == 3 and s["predictions"] == 3 and s["dead_letters"] == 2
    dead = pq.read_table(tmp_path / "run" / "dead_letters").to_pylist()
    assert sorted(d["line"] for d in dead) == [2, 4]
    assert all(d["reason"] for d in dead)
    assert "dead letters: 2" in capsys.readouterr().out


def test_replay_unreadable_data(tmp_path, capsys) -> None:
    code, _ = _replay(tmp_path, str(tmp_path / "missing.libsvm"), "--learner", "perceptron")
    assert code == 2 and "missing.libsvm" in capsys.readouterr().err


def test_replay_bad_out(tmp_path, capsys) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    code = main(["replay", "-l", "perceptron", "--limit", "10", "-q", "--out", str(blocker / "x")])
    assert code == 2 and "output directory" in capsys.readouterr().err


def test_version_of_installed_script() -> None:
    exe = Path(sys.executable).with_name("kernelstream")
    script = str(exe) if exe.exists() else shutil.which("kernelstream")
    assert script, "the kernelstream console script is not installed (pip install -e .)"
    proc = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"kernelstream {__version__}"


def test_installed_script_output_is_clean(tmp_path) -> None:
    """A Beam replay from the console script prints the table and the progress lines only,
    not the warning Beam logs on import about the optional Google API client."""
    exe = Path(sys.executable).with_name("kernelstream")
    script = str(exe) if exe.exists() else shutil.which("kernelstream")
    assert script
    proc = subprocess.run([script, "replay", "--limit", "50", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "summary:" in proc.stdout
    assert "apitools" not in proc.stderr and "WARNING" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("given", [None, "DEBUG"])
def test_cli_silences_grpc_core_unless_asked(monkeypatch, given) -> None:
    """gRPC's C core logs lines such as an ``epoll_wait`` error after a Ctrl-C'd Beam run: the
    CLI sets ``GRPC_VERBOSITY=NONE`` before Beam starts gRPC, and keeps a value the user set."""
    if given is None:
        monkeypatch.delenv("GRPC_VERBOSITY", raising=False)
    else:
        monkeypatch.setenv("GRPC_VERBOSITY", given)
    assert main(["--version"]) == 0
    assert os.environ["GRPC_VERBOSITY"] == (given or "NONE")


def test_replay_pipeline_options_pass_through(tmp_path) -> None:
    """Options after "--" reach Beam: two in-process workers, smaller blocks; same result."""
    code, a = _replay(tmp_path / "a", "german", "--limit", "120", "-l", "perceptron")
    assert code == 0
    code, b = _replay(tmp_path / "b", "german", "--limit", "120", "-l", "perceptron",
                      "-R", "2", "--", "--block_size=16", "--direct_num_workers=2")
    assert code == 0
    assert b["per_permutation"][0]["mistakes"] == a["per_permutation"][0]["mistakes"]
    # recorded with the rest of the command line (summary.json, the folder's marker)
    tail = ["--", "--block_size=16", "--direct_num_workers=2"]
    assert b["argv"][-3:] == tail and b["argv"][0] == "replay"
    marker = json.loads((tmp_path / "b" / "run" / ".kernelstream-run").read_text())
    assert marker["argv"] == b["argv"]


@pytest.mark.parametrize("option", ["--block_size=0", "--metrics_window=0", "--block_size=x"])
def test_replay_refuses_bad_replay_options_after_the_separator(tmp_path, capsys,
                                                               option: str) -> None:
    assert main(["replay", "german", "--limit", "50", "-l", "bpa-s", "--runner", "loop",
                 "--out", str(tmp_path / "o"), "--", option]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("kernelstream replay: error:") and option.split("=")[0] in line


def test_replay_beam_runner_needs_a_runner_option(tmp_path, capsys) -> None:
    assert main(["replay", "--limit", "50", "--runner", "beam", "--out", str(tmp_path)]) == 2
    assert "--runner=FlinkRunner" in capsys.readouterr().err


def test_replay_key_by_one_model_per_entity(tmp_path) -> None:
    rng = np.random.default_rng(0)
    rows = ["user,f1,f2,label"]
    for i in range(60):
        x = rng.random(2)
        rows.append(f"{'ab'[i % 2]},{x[0]:.4f},{x[1]:.4f},{int(x[0] > 0.5)}")
    path = tmp_path / "entities.csv"
    path.write_text("\n".join(rows) + "\n")
    code, s = _replay(tmp_path, str(path), "-l", "perceptron", "--key-by", "user")
    assert code == 0
    assert s["key_by"] == "user" and s["examples"] == 60 and s["dead_letters"] == 0
    assert sorted(k["entity"] for k in s["keys"]) == ["a", "b"]
    assert [k["examples"] for k in s["keys"]] == [30, 30]


def test_replay_key_by_prints_its_entities_pooled_beside_no_skill(tmp_path, capsys) -> None:
    # labels that the one feature does not tell (15 % positive): every entity is pooled into
    # one row per configuration, with the no-skill rate of the same rows and its warnings
    rng = np.random.default_rng(0)
    rows = ["user,f1,label"]
    for _ in range(40):
        for user in "ab":
            rows.append(f"{user},{rng.random():.4f},{int(rng.random() < 0.15)}")
    path = tmp_path / "entities.csv"
    path.write_text("\n".join(rows) + "\n")
    code, s = _replay(tmp_path, str(path), "-l", "p=perceptron", "-l", "q=bpa-s",
                      "--key-by", "user", "-R", "2")
    assert code == 0 and s is not None
    out, err = capsys.readouterr()
    header, *lines = out.splitlines()[:3]
    assert "entities" in header and "no-skill (%)" in header
    assert [ln.split()[0] for ln in lines] == ["p", "q"]  # the command line's order
    by_label = {r["label"]: r for r in s["pooled"]}
    for label, row in by_label.items():
        for perm in range(2):
            keys = [k for k in s["keys"] if k["config"] == label and k["permutation"] == perm]
            assert sum(k["examples"] for k in keys) == 80
        mistakes = [sum(k["mistakes"] for k in s["keys"]
                        if k["config"] == label and k["permutation"] == p) for p in range(2)]
        assert row["mistake_rate"] == pytest.approx(np.mean(mistakes) / 80 * 100)
        assert row["entities"] == 2 and row["noskill_mistake_rate"] is not None
        assert f"{row['mistake_rate']:.4g}"[:4] in lines[list(by_label).index(label)]
    # permutation 0's examples over every entity, of one configuration (was summed over both)
    assert s["examples"] == 80
    assert "2 entities: 8 models (entity × configuration × order), pooled per configuration" in out
    # the warning a plain run gives, for the pooled rows (both worse than the majority's 20 %)
    for label, row in by_label.items():
        assert row["mistake_rate"] >= row["noskill_mistake_rate"] == 20.0
        assert f"warning: {label}: mistake rate {row['mistake_rate']:.4g}% is not better" in err
