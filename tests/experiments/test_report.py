"""`kernelstream report`: the HTML page from small replay runs (loop runner), its figures,
tables, the reproduction tables, the errors, and the page in headless Chromium."""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from kernelstream.pipelines.cli import main
from kernelstream.report import curves
from kernelstream.report.runs import load_run

REPO = Path(__file__).resolve().parents[2]
FIGURE = re.compile(r'<figure id="(fig-[a-z]+)"><img src="data:image/png;base64,([^"]+)"')


def _replay(out: Path, *args: str, window: int | None = None) -> Path:
    beam = ["--", f"--metrics_window={window}"] if window else []
    assert main(["replay", *args, "--runner", "loop", "--quiet", "--out", str(out), *beam]) == 0
    return out


def _entity_csv(path: Path, rows: int = 600) -> Path:
    """Six entities, two features, and three lines a reader rejects."""
    rng = np.random.default_rng(1)
    lines = ["user,f1,f2,label"]
    for i in range(rows):
        x = rng.normal(size=2)
        lines.append(f"u{i % 6},{x[0]:.4f},{x[1]:.4f},{int(x[0] + 0.5 * x[1] > 0)}")
    lines[10] = "u1,abc,1,0"
    lines[20] = "u2,1"
    lines[30] = "u3,0.1,0.2,7"
    path.write_text("\n".join(lines) + "\n")
    return path


def _regression_csv(path: Path, rows: int = 300) -> Path:
    rng = np.random.default_rng(2)
    x = rng.uniform(-1.0, 1.0, (rows, 2))
    y = np.sin(3 * x[:, 0]) + 0.5 * x[:, 1] + 0.1 * rng.normal(size=rows)
    path.write_text("f1,f2,y\n" + "".join(f"{a:.4f},{b:.4f},{t:.4f}\n"
                                          for (a, b), t in zip(x, y, strict=True)))
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("runs")
    return {
        "budgets": _replay(tmp / "budgets", "--limit", "400", "-l", "a=bogd", "-l", "b=bpa-s",
                           "-p", "a.budget=30", "-p", "b.budget=30", "-R", "3", window=50),
        "selection": _replay(tmp / "selection", "--limit", "300", "-l", "ea2oks",
                             "-l", "perceptron", "-R", "2", window=25),
        "entities": _replay(tmp / "entities", str(_entity_csv(tmp / "users.csv")),
                            "--label-column", "label", "--key-by", "user", "-l", "bogd",
                            "-p", "budget=20", "-R", "2"),
        "regression": _replay(tmp / "regression", str(_regression_csv(tmp / "reg.csv")),
                              "--task", "regression", "-l", "oks++", "-p", "loss=square",
                              "-R", "2"),
    }


def _report(tmp_path: Path, *paths: Path | str) -> str:
    out = tmp_path / "report.html"
    assert main(["report", *map(str, paths), "--out", str(out)]) == 0
    return out.read_text()


def _figures(page: str) -> dict[str, bytes]:
    return {m.group(1): base64.b64decode(m.group(2)) for m in FIGURE.finditer(page)}


def _check_png(name: str, png: bytes) -> None:
    from matplotlib import image

    assert png[:8] == b"\x89PNG\r\n\x1a\n", name
    pixels = image.imread(io.BytesIO(png))
    assert pixels.shape[0] > 100 and pixels.shape[1] > 500, name
    assert float(pixels[..., :3].std()) > 0.01, f"{name} is blank"


def test_two_run_report_has_every_figure(tmp_path: Path, runs: dict[str, Path]) -> None:
    page = _report(tmp_path, runs["budgets"], runs["selection"])
    figs = _figures(page)
    assert set(figs) == {"fig-mistakes", "fig-resources", "fig-kernels"}
    for name, png in figs.items():
        _check_png(name, png)
    # the summary table has every configuration of both runs, labelled by run folder
    for run, config in [("budgets", "a"), ("budgets", "b"), ("selection", "ea2oks"),
                        ("selection", "perceptron")]:
        assert re.search(rf"<td>{run}</td><td>{config}</td>", page), (run, config)
    assert 'id="dead-letters"' in page and "budgets: no dead letters." in page
    # self-contained: nothing fetched from anywhere
    assert not re.search(r"""(src|href)=["']?(https?:|//|file:)""", page)


def test_curves_are_the_predictions_over_the_stream(runs: dict[str, Path]) -> None:
    run = load_run(str(runs["budgets"]), "budgets")
    preds = pq.read_table(runs["budgets"] / "predictions").to_pylist()
    for s in run.series:
        assert s.cumulative is not None and s.windowed is not None and s.n_sv is not None
        assert s.cumulative.y.shape == (3, 400) and s.cumulative.x[-1] == 400
        for r in range(3):
            rows = sorted((p for p in preds if p["config"] == s.config
                           and p["permutation"] == r), key=lambda p: p["position"])
            m = np.array([p["mistake"] for p in rows], dtype=float)
            assert np.allclose(s.cumulative.y[r], 100 * np.cumsum(m) / np.arange(1, 401))
            w = s.window
            assert np.isclose(s.windowed.y[r][-1], 100 * m[-w:].mean())
            assert s.n_sv.y[r][-1] == rows[-1]["n_support_vectors"]
        # examples/s per metrics window of 50 positions
        assert s.speed is not None and list(s.speed.x) == list(range(50, 401, 50))


def test_kernel_heat_map_holds_the_learners_distribution(runs: dict[str, Path]) -> None:
    s = {x.config: x for x in load_run(str(runs["selection"]), "sel").series}
    km = s["ea2oks"].kernels
    assert km is not None and s["perceptron"].kernels is None
    # the default sigmas: 2^-2:1:3 around the auto width, six kernels a factor 2 apart
    widths = [float(label.removeprefix("σ=")) for label in km.labels]
    assert len(widths) == 6 and np.allclose(np.diff(np.log2(widths)), 1.0, atol=1e-3)
    assert np.allclose(km.p.sum(axis=0), 1.0) and list(km.x) == list(range(25, 301, 25))
    assert km.what.startswith("kernel probabilities")
    final = pq.read_table(runs["selection"] / "metrics",
                          filters=[("final", "==", True), ("config", "==", "ea2oks")])
    expect = np.mean([np.array(d) for d in final.column("kernel_distribution").to_pylist()],
                     axis=0)
    assert np.allclose(km.p[:, -1], expect)


def test_few_windows_map_the_selected_kernels(runs: dict[str, Path]) -> None:
    # one metrics window of 1000 for 300 examples: the map counts predictions.selected_kernel
    km = load_run(str(runs["regression"]), "reg").series[0].kernels
    assert km is not None and km.what.startswith("share of predictions")
    assert km.p.shape == (6, curves.KERNEL_BINS) and np.allclose(km.p.sum(axis=0), 1.0)
    preds = pq.read_table(runs["regression"] / "predictions").to_pylist()
    # the first of 50 stretches of 300 examples: positions 0-5 of each permutation
    shares = [np.bincount([p["selected_kernel"] for p in preds
                           if p["position"] < 6 and p["permutation"] == r], minlength=6) / 6
              for r in (0, 1)]
    assert np.allclose(km.p[:, 0], np.mean(shares, axis=0))


def test_key_by_report_lists_entities_worst_first(tmp_path: Path,
                                                  runs: dict[str, Path]) -> None:
    page = _report(tmp_path, runs["entities"])
    figs = _figures(page)
    assert {"fig-mistakes", "fig-resources", "fig-entities"} <= set(figs)
    _check_png("fig-entities", figs["fig-entities"])
    run = load_run(str(runs["entities"]), "entities")
    rates = [e.rate for e in run.entities]
    assert len(rates) == 6 and rates == sorted(rates, reverse=True)
    table = page[page.index("worst entities"):]
    assert table.index(f"<td>{run.entities[0].entity}</td>") < table.index(
        f"<td>{run.entities[-1].entity}</td>")
    # the stream over all entities ends at every entity's own result
    s = run.series[0]
    summary = json.loads((runs["entities"] / "summary.json").read_text())
    for r in range(2):
        keys = [k for k in summary["keys"] if k["permutation"] == r]
        total = 100 * sum(k["mistakes"] for k in keys) / sum(k["examples"] for k in keys)
        assert np.isclose(s.cumulative.y[r][-1], total)
        assert s.n_sv.y[r][-1] == sum(k["n_support_vectors"] for k in keys)
    # the summary row: every entity's own no-skill baseline, pooled over its examples
    pooled = [sum(k["noskill_mistake_rate"] * k["examples"] for k in summary["keys"]
                  if k["permutation"] == r)
              / sum(k["examples"] for k in summary["keys"] if k["permutation"] == r)
              for r in range(2)]
    assert np.isclose(run.rows[0]["noskill_mistake_rate"], np.mean(pooled))
    # the replay's entity streams are the permuted stream restricted to each entity
    from kernelstream.seeding import permutation

    preds = pq.read_table(runs["entities"] / "predictions",
                          filters=[("permutation", "==", 1)]).to_pydict()
    ids = np.array(preds["id"])
    order = curves.global_order(ids, np.array(preds["entity"]), np.array(preds["position"]),
                                summary["seed"], 1)
    assert np.array_equal(ids[order], permutation(len(ids), summary["seed"], 1))
    # dead letters by stage and reason, with where the first ones are
    assert [(g.stage, g.kind, g.count) for g in run.dead] == [
        ("parse", "non-numeric value", 1), ("parse", "unknown label", 1),
        ("parse", "wrong number of columns", 1)]
    assert run.dead[0].first == ["line 11"] and "u1,abc,1,0" in page


def test_global_order_rebuilds_the_permuted_stream() -> None:
    from kernelstream.seeding import permutation

    n, seed, r = 200, 3, 1
    rng = np.random.default_rng(0)
    entity_of_id = rng.integers(0, 5, n)
    stream = permutation(n, seed, r)  # ids in stream order
    ent = entity_of_id[stream]
    pos = np.zeros(n, dtype=np.int64)
    for e in range(5):
        pos[ent == e] = np.arange((ent == e).sum())
    shuffle = rng.permutation(n)  # rows as a runner may write them
    ids, ents, poss = stream[shuffle], ent[shuffle], pos[shuffle]
    order = curves.global_order(ids, ents, poss, seed, r)
    assert np.array_equal(ids[order], stream)
    # not the rows of a permuted replay (a Kafka topic's ids): by id
    kafka = ids + (1 << 48)
    assert np.array_equal(kafka[curves.global_order(kafka, ents, poss, seed, r)],
                          np.sort(kafka))
    # another seed contradicts the entities' own positions: by id as well
    assert np.array_equal(ids[curves.global_order(ids, ents, poss, seed + 1, r)], np.arange(n))


def test_regression_draws_the_loss(tmp_path: Path, runs: dict[str, Path]) -> None:
    figs = _figures(_report(tmp_path, runs["regression"]))
    assert "fig-loss" in figs and "fig-mistakes" not in figs
    _check_png("fig-loss", figs["fig-loss"])
    s = load_run(str(runs["regression"]), "reg").series[0]
    summary = json.loads((runs["regression"] / "summary.json").read_text())
    assert np.isclose(s.cumulative.mean[-1], summary["avg_loss"])


def test_reproduce_results_get_their_tables(tmp_path: Path) -> None:
    doc = {"generated": "today", "permutations": 5,
           "cells": [{"table": "2", "dataset": "german", "learner": "bogd",
                      "params": {"budget": 50}, "mistake_mean": 30.123456, "passed": True,
                      "runs": [{"r": 0}, {"r": 1}]},
                     {"table": "2", "dataset": "a9a", "learner": "bogd", "params": {"budget": 50},
                      "mistake_mean": 19.5, "passed": False, "runs": [{"r": 0}]},
                     {"table": "3", "dataset": "w7a", "learner": "rbp", "mistake_mean": 2.0,
                      "passed": True}]}
    path = tmp_path / "p9.json"
    path.write_text(json.dumps(doc))
    page = _report(tmp_path, path)
    assert "Results: p9.json" in page and "<td>permutations</td><td>5</td>" in page
    assert "cells: table 2 (2 rows)" in page and "1 PASS" in page and "1 FAIL" in page
    assert "cells: table 3 (1 rows)" in page
    assert "30.12" in page and "2 runs" in page and "params = budget=50" in page
    assert not _figures(page)
    # the repository's own reproduction results, whatever their layout
    results = sorted((REPO / "benchmarks" / "results").glob("*.json"))
    if results:
        page = _report(tmp_path, *results)
        assert page.count("<h2>Results: ") == len(results)


def test_errors_are_one_line_with_exit_2(tmp_path: Path, runs: dict[str, Path],
                                         capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*args: str, out: Path = tmp_path / "r.html") -> str:
        assert main(["report", *args, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and err.startswith("kernelstream report: error: ")
        return err

    assert "no such file" in refused(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    assert "no summary.json" in refused(str(tmp_path / "empty"))
    follow = tmp_path / "follow" / "ckpt-000001"  # replay --follow: one run per folder
    follow.mkdir(parents=True)
    shutil.copy(runs["budgets"] / "summary.json", follow)
    assert "its folders ckpt-000001 are runs" in refused(str(follow.parent))
    stream = tmp_path / "stream"
    stream.mkdir()
    (stream / "summary.json").write_text(json.dumps({"schema": 1, "command": "stream"}))
    assert "not a replay run folder" in refused(str(stream))
    (tmp_path / "list.json").write_text("[1, 2]")
    assert "JSON object" in refused(str(tmp_path / "list.json"))
    # any JSON object, or one named summary.json, is no run nor results
    (tmp_path / "any.json").write_text('{"a": 1}')
    assert "not a results file of `kernelstream reproduce`" in refused(str(tmp_path / "any.json"))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "summary.json").write_text('{"a": 1}')
    assert "not written by kernelstream" in refused(str(tmp_path / "other"))
    assert "does not exist" in refused(str(runs["budgets"]), out=tmp_path / "no" / "r.html")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    assert "pip install 'kernelstream[report]'" in refused(str(runs["budgets"]))
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize(("run", "damage", "says"), [
    ("budgets", lambda s: s["configs"][0].update(mistake_rate="abc"),
     "configs[0].mistake_rate is 'abc', not a number"),
    ("budgets", lambda s: s["configs"][1].update(noskill_mistake_rate="n"),
     "configs[1].noskill_mistake_rate is 'n', not a number"),
    ("budgets", lambda s: s.update(configs={"a": 1}), "configs is {'a': 1}, not a list"),
    ("budgets", lambda s: s.update(examples="lots"), "examples is 'lots', not a number"),
    ("budgets", lambda s: s["configs"][0].update(params=[1]),
     "configs[0].params is [1], not an object"),
    ("budgets", lambda s: s.update(permutations=2.5), "permutations is 2.5, not an integer"),
    ("entities", lambda s: s["keys"][3].update(examples="x"),
     "keys[3].examples is 'x', not a number"),
    ("entities", lambda s: s["keys"][0].pop("entity"), "keys[0].entity is missing"),
])
def test_damaged_summary_is_one_line_with_exit_2(
        tmp_path: Path, runs: dict[str, Path], capsys: pytest.CaptureFixture[str],
        run: str, damage: Any, says: str) -> None:
    """A summary.json with a field of the wrong type: its file and field, no traceback."""
    folder = shutil.copytree(runs[run], tmp_path / run)
    summary = json.loads((folder / "summary.json").read_text())
    damage(summary)
    (folder / "summary.json").write_text(json.dumps(summary))
    assert main(["report", str(folder), "--out", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.endswith(f"{folder / 'summary.json'}: damaged: {says}")


@pytest.mark.parametrize("output", ["predictions", "metrics", "dead_letters"])
def test_damaged_parquet_is_one_line_with_exit_2(
        tmp_path: Path, runs: dict[str, Path], capsys: pytest.CaptureFixture[str],
        output: str) -> None:
    folder = shutil.copytree(runs["budgets"], tmp_path / "budgets")
    first = sorted((folder / output).glob("*.parquet"))[0]
    first.write_text("garbage\n")
    assert main(["report", str(folder), "--out", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{first}: damaged: not a readable Parquet file" in err


def test_summary_only_run(tmp_path: Path) -> None:
    """An adversarial --stream run writes summary.json alone: its table, and why no more."""
    run = _replay(tmp_path / "adv", "--stream", "german-1", "-l", "bogd")
    page = _report(tmp_path, run)
    assert "<td>adv</td><td>german</td>" in page and not _figures(page)
    assert "summary table only" in page and "no dead_letters/ output" in page


def test_report_command_never_imports_beam(tmp_path: Path, runs: dict[str, Path]) -> None:
    code = ("import sys; from kernelstream.pipelines.cli import main; "
            f"rc = main(['report', {str(runs['entities'])!r}, {str(runs['selection'])!r}, "
            f"'--out', {str(tmp_path / 'r.html')!r}]); "
            "sys.exit(rc or ('apache_beam' in sys.modules and 3))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr


# -- the page in a browser ----------------------------------------------------------------------
# Put at the top of a copy of the page: records console errors and failed loads, then (on load)
# every image's natural size, into the DOM that --dump-dom prints.
PROBE = """<script>
window.__ks=[];console.error=function(){window.__ks.push(Array.from(arguments).join(" "))};
addEventListener("error",function(e){window.__ks.push("error: "+(e.message||
(e.target&&e.target.tagName)||"?"))},true);
addEventListener("load",function(){var r={errors:window.__ks,images:Array.from(document.images)
.map(function(i){var f=i.closest("figure");return [f?f.id:"",i.naturalWidth,i.naturalHeight]})};
var p=document.createElement("pre");p.id="ks-probe";p.textContent=JSON.stringify(r);
document.body.appendChild(p)});
</script>"""


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("headless Chromium is not installed (apt-get install chromium; .ci/run does it "
                "when it runs as root)")


def _browse(browser: str, page: Path, profile: Path, *action: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [browser, "--headless", "--disable-gpu", "--no-sandbox", f"--user-data-dir={profile}",
         "--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000", *action,
         page.as_uri()], capture_output=True, text=True, timeout=180)


def _probe(browser: str, page: Path, tmp_path: Path) -> tuple[dict, list[str]]:
    probed = page.with_name("probed-" + page.name)
    probed.write_text(page.read_text().replace("<head>", "<head>" + PROBE, 1))
    proc = _browse(browser, probed, tmp_path / "profile", "--dump-dom")
    m = re.search(r'<pre id="ks-probe">(.*?)</pre>', proc.stdout)
    assert m, f"the page did not load: {proc.stderr[-2000:]}"
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    import html

    return json.loads(html.unescape(m.group(1))), console


def test_page_loads_in_headless_chromium(tmp_path: Path, runs: dict[str, Path]) -> None:
    browser = _chromium()
    _report(tmp_path, runs["budgets"], runs["selection"], runs["entities"])
    page = tmp_path / "report.html"
    result, console = _probe(browser, page, tmp_path)
    assert result["errors"] == [] and console == []
    names = [i[0] for i in result["images"]]
    assert names == ["fig-mistakes", "fig-resources", "fig-kernels", "fig-entities"]
    assert all(w > 500 and h > 100 for _, w, h in result["images"]), result["images"]
    shot = tmp_path / "shot.png"
    _browse(browser, page, tmp_path / "profile", f"--screenshot={shot}", "--hide-scrollbars",
            "--window-size=1200,1600")
    from matplotlib import image

    pixels = image.imread(str(shot))
    assert pixels.shape[:2] == (1600, 1200) and float(pixels[..., :3].std()) > 0.05
    # the probe itself sees a broken image and a console error
    broken = tmp_path / "broken.html"
    broken.write_text("<!doctype html><html><head><title>x</title></head><body>"
                      '<figure id="fig-x"><img src="data:image/png;base64,AAAA"></figure>'
                      "<script>console.error('boom')</script></body></html>")
    result, _ = _probe(browser, broken, tmp_path)
    assert "boom" in result["errors"] and result["images"] == [["fig-x", 0, 0]]


def test_runs_table_shows_scaling_and_rows_used(tmp_path: Path, runs: dict[str, Path]) -> None:
    """The resolved scaling (with --scale auto's reason) and --limit / --sample are in the
    Runs table: two runs that differ only there do not look the same."""
    summary = json.loads((runs["budgets"] / "summary.json").read_text())
    sampled = tmp_path / "sampled"
    sampled.mkdir()
    why = "feature spreads (standard deviations) differ by 52.9x"
    (sampled / "summary.json").write_text(json.dumps(
        {**summary, "limit": None, "scale": "01", "auto_scale": why,
         "sample": {"rows": 2000, "from": "x", "seed": 3, "order": "file"}}))
    page = _report(tmp_path, runs["budgets"], sampled, runs["regression"])
    head = re.search(r'<section id="runs">.*?</thead>', page)
    assert head and "<th>scaling</th><th>rows</th>" in head.group(0)
    assert f"<td>{summary['scale']}</td><td>first 400</td>" in page
    assert f'<td><span title="{why}">01 (auto)</span></td><td>sample of 2,000 (seed 3)</td>' \
        in page
    assert f"sampled: --scale auto scaled 01: {why}" in page
    reg = json.loads((runs["regression"] / "summary.json").read_text())
    target = "standardised" if reg.get("target_standardised") else reg["scale_target"]
    assert f"; target {target}</td><td>all</td>" in page


def test_kernel_panels_say_what_they_plot(tmp_path: Path, runs: dict[str, Path]) -> None:
    """A combining learner's panel says it combines (its selected kernel is only the largest
    weight); the caption names what the panels plot, not "weight" for every map."""
    from kernelstream.report import figures

    run = _replay(tmp_path / "raker", "--limit", "300", "-l", "raker", "-l", "oks", "-R", "1")
    loaded = load_run(str(run), "raker")
    km = {s.config: s.kernels for s in loaded.series}
    assert km["raker"] is not None and km["oks"] is not None
    assert km["raker"].shares and km["raker"].what.startswith(
        "share of predictions in which each kernel had the largest weight (raker combines")
    assert km["oks"].what.startswith("share of predictions made by each kernel")
    sel = {s.config: s.kernels for s in load_run(str(runs["selection"]), "sel").series}
    assert sel["ea2oks"] is not None and not sel["ea2oks"].shares
    chart = figures.kernels([loaded])
    assert chart is not None and "share of predictions" in chart.caption
    assert not chart.caption.startswith("Weight of each kernel")


def test_learners_without_stored_examples_have_no_sv_count(tmp_path: Path) -> None:
    from kernelstream.pipelines.commands._runs import format_table

    run = _replay(tmp_path / "rf", "--limit", "200", "-l", "rff-rls", "-l", "bogd")
    page = _report(tmp_path, run)
    summary_table = page[page.index('<section id="summary">'):page.index("</table>",
                                                                          page.index("#SV"))]
    head = re.findall(r"<th>([^<]*)</th>", summary_table)
    cells = {m[0]: m for m in (re.findall(r"<td[^>]*>(.*?)</td>", row) for row in
                               re.findall(r"<tr>(.*?)</tr>", summary_table)) if m}
    assert cells["rff-rls"][head.index("#SV")] == "–"
    assert re.fullmatch(r"\d[\d,.]*", cells["bogd"][head.index("#SV")])
    summary = json.loads((run / "summary.json").read_text())
    rows = {line.split()[0]: line.split() for line in
            format_table(summary["configs"]).splitlines()[1:3]}
    assert rows["rff-rls"][-3] == "-" and rows["bogd"][-3] != "-"


def test_summary_has_the_tasks_columns_only(tmp_path: Path, runs: dict[str, Path]) -> None:
    """No empty RMSE / MAE / R² beside classifiers (they pushed the parameters off screen)."""
    page = _report(tmp_path, runs["budgets"], runs["selection"])
    head = re.search(r'<section id="summary">.*?</thead>', page)
    assert head and "<th>RMSE</th>" not in head.group(0)
    assert "<th>no-skill</th><th>#SV</th>" in head.group(0)
    page = _report(tmp_path, runs["budgets"], runs["regression"])
    head = re.search(r'<section id="summary">.*?</thead>', page)
    assert head and "<th>mistake rate (%)</th>" in head.group(0) \
        and "<th>RMSE</th><th>MAE</th><th>R²</th>" in head.group(0)


def test_one_window_speeds_are_bars(runs: dict[str, Path],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream of one metrics window: examples/s as one bar per configuration, not a column
    of dots at one x; several windows: lines."""
    from matplotlib.axes import Axes

    from kernelstream.report import figures

    bars: list[int] = []
    real = Axes.barh

    def barh(self: Axes, y: object, width: list[float], *a: object, **k: object) -> object:
        bars.append(len(width))
        return real(self, y, width, *a, **k)

    monkeypatch.setattr(Axes, "barh", barh)
    one = load_run(str(runs["regression"]), "reg")
    assert one.series[0].speed is not None and one.series[0].speed.x.size == 1
    assert figures.resources([one]) is not None and bars == [1]
    assert figures.resources([load_run(str(runs["budgets"]), "b")]) is not None and bars == [1]
