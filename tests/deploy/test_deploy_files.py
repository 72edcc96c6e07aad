"""The files under deploy/ (none of which can run here: no Docker engine, no Kubernetes, no
Dataflow): every YAML and JSON file parses, and every version they name agrees with the
others and with the project: Beam = the installed apache_beam, Python = pyproject's
requires-python, kernelstream's image tag = the package version, Kafka = the version the tests'
broker runs (``kafka_client.apache.KAFKA_VERSION``), and Flink one version everywhere. A
version changed in one file only is found (checked on edited copies). The Flex Template's
launcher turns every parameter of metadata.json into a command line kernelstream parses.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys
import tomllib
from collections import defaultdict
from pathlib import Path

import apache_beam
import pytest
import yaml

import kernelstream
from kernelstream.kafka_client.apache import KAFKA_VERSION

ROOT = Path(__file__).resolve().parents[2]

# (what, pattern): the version is the pattern's groups joined with "."
PATTERNS: tuple[tuple[str, str], ...] = (
    ("beam", r"ARG BEAM_VERSION=(\d+\.\d+\.\d+)"),
    ("beam", r"beam_python\d+\.\d+_sdk:(\d+\.\d+\.\d+)"),
    ("beam", r"beam_flink\d+\.\d+_job_server:(\d+\.\d+\.\d+)"),
    ("beam", r"apache-beam(?:\[[\w,]+\])?==(\d+\.\d+\.\d+)"),
    ("beam minor", r"\bBeam (\d+\.\d+)\b"),
    ("beam minor", r"apache-beam` (\d+\.\d+)\b"),
    ("flink", r"beam_flink(\d+\.\d+)_job_server"),
    ("flink", r"\bflink:(\d+\.\d+)(?:\.\d+)?(?:-scala_[\d.]+)?-java\d+"),
    ("flink", r"flinkVersion:\s*v(\d+)_(\d+)"),
    ("flink", r"--flink_version=(\d+\.\d+)"),
    ("python", r"ARG PYTHON_VERSION=(\d+\.\d+)"),
    ("python", r"beam_python(\d+\.\d+)_sdk"),
    ("python", r"python(3)(\d+)-template-launcher-base"),
    ("python", r"\bpython:(\d+\.\d+)-slim"),
    ("kernelstream", r"kernelstream-beam:(\d+\.\d+\.\d+)"),
    ("kafka", r"apache/kafka:(\d+\.\d+\.\d+)"),
    ("kafka", r"KAFKA_VERSION:-(\d+\.\d+\.\d+)"),
    ("kafka minor", r"metadataVersion:\s*(\d+\.\d+)-IV\d+"),
)


def expected() -> dict[str, str | None]:
    """What each version must be (None: one value, whichever)."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        requires = tomllib.load(f)["project"]["requires-python"]
    m = re.fullmatch(r">=\s*(\d+\.\d+)", requires)
    assert m, f"requires-python {requires!r}: expected >=X.Y"
    beam = apache_beam.__version__
    return {"beam": beam, "beam minor": beam.rsplit(".", 1)[0], "flink": None,
            "python": m.group(1), "kernelstream": kernelstream.__version__,
            "kafka": KAFKA_VERSION, "kafka minor": KAFKA_VERSION.rsplit(".", 1)[0]}


def text_files(deploy: Path) -> list[Path]:
    return sorted(p for p in deploy.rglob("*") if p.is_file() and p.suffix not in (".pyc",))


def versions(deploy: Path) -> dict[str, dict[str, list[str]]]:
    """what -> version -> the places (file:line) that name it."""
    found: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path in text_files(deploy):
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for what, pattern in PATTERNS:
                for m in re.finditer(pattern, line):
                    found[what][".".join(m.groups())].append(
                        f"{path.relative_to(deploy.parent)}:{n}")
    # Strimzi's Kafka resource names its version under spec.kafka
    for path in deploy.rglob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "Kafka":
                found["kafka"][str(doc["spec"]["kafka"]["version"])].append(
                    f"{path.relative_to(deploy.parent)} (spec.kafka.version)")
    return found


def problems(found: dict[str, dict[str, list[str]]]) -> list[str]:
    out = []
    for what, want in expected().items():
        seen = found.get(what, {})
        if want is not None:
            out += [f"{what} {v} (want {want}): {', '.join(places)}"
                    for v, places in seen.items() if v != want]
        elif len(seen) > 1:
            out.append(f"{what}: several versions: {dict(seen)}")
    return out


def test_every_yaml_and_json_file_under_deploy_parses() -> None:
    ymls = sorted([*ROOT.glob("deploy/**/*.yaml"), *ROOT.glob("deploy/**/*.yml")])
    jsons = sorted(ROOT.glob("deploy/**/*.json"))
    assert len(ymls) >= 6 and jsons, (ymls, jsons)
    for path in ymls:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        assert docs and all(isinstance(d, dict) for d in docs), path
        for d in docs:  # a Kubernetes manifest names its kind; the compose file its services
            assert "kind" in d or "services" in d, path
    for path in jsons:
        assert isinstance(json.loads(path.read_text()), dict), path


def test_versions_in_deploy_agree_with_the_project() -> None:
    found = versions(ROOT / "deploy")
    assert problems(found) == []
    # every kind of version is found (else its check could not fail); Flink's, compared only
    # between files, in at least two
    for what, want in expected().items():
        files = {p.split(":")[0].split(" ")[0] for places in found[what].values()
                 for p in places}
        assert len(files) >= (1 if want is not None else 2), (what, files)


@pytest.mark.parametrize(("file", "old", "new"), [
    ("flink/docker-compose.yml", "flink:1.19-java11", "flink:1.20-java11"),
    ("k8s/flink-session.yaml", "flinkVersion: v1_19", "flinkVersion: v1_20"),
    ("k8s/beam-job-server.yaml", "job_server:2.77.0", "job_server:2.76.0"),
    ("Dockerfile", "ARG PYTHON_VERSION=3.11", "ARG PYTHON_VERSION=3.12"),
    ("Dockerfile", "ARG BEAM_VERSION=2.77.0", "ARG BEAM_VERSION=2.78.0"),
    ("dataflow/flex/Dockerfile", "python311-template", "python312-template"),
    ("k8s/replay-job.yaml", "kernelstream-beam:0.1.0", "kernelstream-beam:0.2.0"),
    ("flink/docker-compose.yml", "apache/kafka:4.1.1", "apache/kafka:4.0.0"),
    ("k8s/kafka.yaml", "version: 4.1.1", "version: 4.1.0"),
    ("kafka/kafka-broker.sh", "KAFKA_VERSION:-4.1.1", "KAFKA_VERSION:-3.9.1"),
])
def test_a_version_changed_in_one_file_only_is_found(tmp_path: Path, file: str, old: str,
                                                     new: str) -> None:
    deploy = tmp_path / "deploy"
    shutil.copytree(ROOT / "deploy", deploy)
    path = deploy / file
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    found = problems(versions(deploy))
    assert found and any(f"deploy/{file}" in p for p in found), found


def _launcher() -> object:
    spec = importlib.util.spec_from_file_location(
        "flex_launch", ROOT / "deploy" / "dataflow" / "flex" / "launch.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["flex_launch"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_the_flex_template_launcher_takes_every_parameter_of_metadata_json() -> None:
    from kernelstream.pipelines import cli
    from kernelstream.pipelines.replay.replay_args import ReplayConfig

    launch = _launcher()
    meta = json.loads((ROOT / "deploy" / "dataflow" / "metadata.json").read_text())
    names = [p["name"] for p in meta["parameters"]]
    assert sorted(names) == sorted(launch.PARAMETERS)  # type: ignore[attr-defined]
    for p in meta["parameters"]:  # Dataflow checks values against these
        for rx in p.get("regexes", []):
            re.compile(rx)
    argv = launch.replay_argv([  # type: ignore[attr-defined]
        "--data=gs://b/data/a9a", "--out=gs://b/runs/x", "--learners=a=bogd,b=bpa-s",
        "--params=a.budget=50,gamma=0.5", "--permutations=3", "--seed=2", "--limit=1000",
        "--n_features=123", "--replay_options=--format libsvm --scale none",
        "--project=p", "--region=europe-west1", "--temp_location=gs://b/tmp",
        "--sdk_location=default"])
    cut = argv.index("--")
    args = cli.build_parser().parse_args(argv[:cut])
    args.pipeline_args = argv[cut + 1:]
    config = ReplayConfig.from_args(args, argv[:cut])
    assert args.submit_only and config.runner == "beam"
    assert [c.label for c in config.learners] == ["a", "b"]
    assert config.learners[0].params["budget"] == 50
    assert (config.permutations, config.seed, config.read.limit,
            config.read.n_features) == (3, 2, 1000, 123)
    assert config.data == "gs://b/data/a9a" and config.out == "gs://b/runs/x"
    # the launch's own options win over the defaults; Dataflow's runner unless told otherwise
    assert config.pipeline_args == ("--runner=DataflowRunner", "--experiments=use_runner_v2",
                                    "--project=p", "--region=europe-west1",
                                    "--temp_location=gs://b/tmp", "--sdk_location=default")
