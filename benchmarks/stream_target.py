"""``--scale-target auto`` on a live stream and on a replay of a Kafka topic: a regression
target standardised by the mean and standard deviation of the first 1,000 targets, against
the target learnt as it comes.

Every regression set of ``benchmarks/results/defaults.md`` (elevators, bank8FM, bank32nh:
targets of standard deviation 0.007 to 0.15), each in ``--orders`` shuffled orders (the
replay's permutations 0, 1, ...), is produced to a fresh topic of a local broker (tansu,
``kernelstream.kafka_client.local_broker``) as labelled events (key ``e<i>``, value
``TARGET i:v ...``, one partition), then learnt three times by the commands a user runs, with
their defaults (raker ``loss=square``, ``gamma=auto``, ``--scale auto``):

* ``kernelstream stream kafka://.../T --task regression --n-features D --idle-stop 2s``, with
  ``--scale-target none`` and with its default ``auto``;
* ``kernelstream replay kafka://.../T --task regression --n-features D`` (its default
  ``--scale-target auto``), the same rows in the same order.

Column: the MSE over the run against the running-mean predictor's on the same outcomes
(``avg_loss / noskill_avg_loss`` of ``summary.json``: below 1 beats predicting the mean; the
issue's bar is 0.8). Results: ``--out-dir``/stream_target.md and .json.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # the benchmarks' shared helpers, beside this script

from kernelstream import data
from kernelstream.kafka_client import local_broker

FILES = {"elevators": "elevators.libsvm", "bank8FM": "bank8FM.libsvm",
         "bank32nh": "bank32nh.libsvm"}
SETS = tuple(FILES)
KERNELSTREAM = str(Path(sys.executable).with_name("kernelstream"))
RUNS = ("stream_none", "stream_auto", "topic_replay")


def messages(X: np.ndarray, y: np.ndarray) -> list[bytes]:
    """LIBSVM lines of the rows (the exact doubles: ``repr``), zeros left out."""
    return [(repr(float(t)) + " " + " ".join(f"{j + 1}:{float(v)!r}"
                                             for j, v in enumerate(x) if v != 0)).encode()
            for x, t in zip(X, y, strict=True)]


def run(argv: list[str], out: Path) -> dict[str, Any]:
    """Run ``kernelstream ARGV --out OUT -q``; its summary.json, with the wall time."""
    t0 = time.perf_counter()
    p = subprocess.run([KERNELSTREAM, *argv, "--out", str(out), "-q"], capture_output=True,
                       text=True, stdin=subprocess.DEVNULL, timeout=1800)
    if p.returncode != 0:
        raise RuntimeError(f"kernelstream {' '.join(argv)} failed ({p.returncode}):\n"
                           f"{p.stderr[-3000:]}")
    doc = json.loads((out / "summary.json").read_text())
    doc["wall_seconds"] = time.perf_counter() - t0
    return dict(doc)


def cell(doc: dict[str, Any]) -> dict[str, Any]:
    t = doc.get("target_standardised")
    return {"mse_ratio": doc["avg_loss"] / doc["noskill_avg_loss"], "r2": doc.get("r2"),
            "examples": doc.get("predictions"), "target": t,
            "gamma": doc.get("auto_gamma"), "scale": doc.get("scale"),
            "wall_seconds": doc["wall_seconds"]}


def measure(broker: str, name: str, X: np.ndarray, y: np.ndarray, r: int,
            tmp: Path) -> dict[str, Any]:
    topic = f"{name}-{r}"
    msgs = messages(X, y)
    _common.produce(broker, topic, msgs, [f"e{i}".encode() for i in range(len(msgs))])
    src = f"kafka://{broker}/{topic}"
    common = ["--task", "regression", "--n-features", str(X.shape[1])]
    stream = ["stream", src, *common, "--idle-stop", "2s"]
    res = {
        "stream_none": cell(run([*stream, "--scale-target", "none"], tmp / f"{topic}-none")),
        "stream_auto": cell(run(stream, tmp / f"{topic}-auto")),
        "topic_replay": cell(run(["replay", src, *common, "--kafka-idle", "2"],
                                 tmp / f"{topic}-replay")),
    }
    for k in RUNS:
        if res[k]["examples"] != len(y):
            raise RuntimeError(f"{name} order {r} {k}: {res[k]['examples']} predictions of "
                               f"{len(y)} rows")
    return res


def main(argv: list[str] | None = None) -> int:
    ap = _common.script_parser(__doc__ or "")
    ap.add_argument("--orders", type=int, default=3, help="shuffled orders (default 3)")
    _common.add_list_arg(ap, "--datasets", SETS)
    _common.add_output_args(ap, "stream_target")
    args = ap.parse_args(argv)
    names = _common.parse_list(ap, args.datasets, SETS, "data set")
    res: dict[str, Any] = {"generated": _common.now_utc(), "machine": _common.machine_info(),
                           "orders": args.orders, "sets": {}}
    t_all = time.perf_counter()
    with local_broker() as broker, tempfile.TemporaryDirectory() as tmp:
        for name in names:
            X, y = data.load(str(Path(args.data_dir) / FILES[name]), task="regression")
            X = np.asarray(X, np.float64)
            y = np.asarray(y, np.float64)
            runs = []
            for r in range(args.orders):
                Xp, yp = _common.permuted(X, y, 0, r)
                runs.append(measure(broker, name, Xp, yp, r, Path(tmp)))
                print(f"{name} order {r}: " + ", ".join(
                    f"{k} {runs[-1][k]['mse_ratio']:.3f}" for k in RUNS),
                    file=sys.stderr, flush=True)
            res["sets"][name] = {"rows": len(y), "target_std": float(y.std()), "runs": runs}
    res["wall_minutes"] = (time.perf_counter() - t_all) / 60
    lines = ["# `--scale-target auto` on a live stream and a topic replay", "",
             _common.generated_line("stream_target.py", res["generated"],
                                    f"wall time {res['wall_minutes']:.1f} min"), "",
             "The default regression learner (raker `loss=square`, `gamma=auto`, "
             "`--scale auto`) on each set produced to a Kafka topic as labelled events; MSE of "
             "the run / MSE of the running-mean predictor on the same outcomes (below 1 beats "
             f"predicting the mean), mean ± std over {args.orders} shuffled orders.", "",
             "| set | rows | target std | stream, `--scale-target none` | stream, "
             "`--scale-target auto` (default) | topic replay (default) |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, c in res["sets"].items():
        cols = [_common.fmt_pm(*_common.mean_std([r[k]["mse_ratio"] for r in c["runs"]]), 3)
                for k in RUNS]
        lines.append(f"| {name} | {c['rows']:,} | {c['target_std']:.3g} | "
                     f"{' | '.join(cols)} |")
    lines += ["", "The stream and the replay standardise by the same first 1,000 targets "
              "(`target_standardised` in each summary.json, in the .json beside this file); "
              "the replay of the file itself is in [defaults.md](defaults.md) (other orders)."]
    _common.write_report(args.out_dir, "stream_target", lines, res)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
