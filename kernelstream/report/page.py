"""The report page: one HTML file with its styles and images inline (PNG data URIs), no
script, so it opens from disk in any browser and can be mailed or archived as it is."""

from __future__ import annotations

import base64
import glob
import html
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kernelstream import __version__
from kernelstream.errors import ReportError
from kernelstream.learners.registry import stores_rows
from kernelstream.numbers import sig, sig_pm
from kernelstream.report import GENERATOR, figures
from kernelstream.report.reproduce import ResultFile, ResultTable, TableCell, load_results
from kernelstream.report.runs import LoadedRun, is_run_dir, load_run, run_labels

ENTITY_ROWS = 20  # worst entities listed per run
RAW_CHARS = 160  # of a dead letter's raw input
TASK_COLUMNS = ("mistake rate (%)", "RMSE", "MAE", "R²")  # shown when a row has them

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d1d1f;
background:#fff}
main{max-width:1500px;margin:0 auto;padding:12px 20px 40px}
h1{font-size:22px;margin:8px 0 2px}h2{font-size:18px;margin:26px 0 8px;border-bottom:1px solid
#ddd;padding-bottom:3px}h3{font-size:15px;margin:16px 0 6px}
.meta{color:#666;font-size:12px}
table{border-collapse:collapse;margin:6px 0 10px;font-size:12.5px}
th,td{border:1px solid #e2e2e2;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f5f5f7;font-weight:600}td:first-child{white-space:nowrap}td.n{text-align:right;font-variant-numeric:tabular-nums;
white-space:nowrap}
.params{color:#666;font-size:11px;display:inline-block;min-width:16em}
code{font:11.5px ui-monospace,Menlo,Consolas,monospace;background:#f5f5f7;padding:0 3px;
word-break:break-all}
figure{margin:10px 0 18px}figure img{max-width:100%;height:auto;display:block}
figcaption{color:#555;font-size:12px;margin-top:2px}
.pass{color:#0a7d28;font-weight:600}.fail{color:#c01818;font-weight:600}
.unjudged{color:#888;white-space:nowrap}
.note{color:#8a5a00;font-size:12px}.scroll{overflow-x:auto}
"""


def esc(v: Any) -> str:
    return html.escape(str(v), quote=True)


def _num(v: Any, spec: str) -> str:
    return "–" if v is None else format(v, spec)


def _table(head: list[str], rows: Iterable[list[str]], numeric: set[int] | None = None) -> str:
    """An HTML table; cells are already escaped HTML."""
    numeric = numeric or set()
    out = ["<div class=scroll><table><thead><tr>"]
    out += [f"<th>{h}</th>" for h in head]
    out.append("</tr></thead><tbody>")
    for row in rows:
        out.append("<tr>" + "".join(
            f"<td class=n>{c}</td>" if i in numeric else f"<td>{c}</td>"
            for i, c in enumerate(row)) + "</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


def _scaling(s: dict[str, Any]) -> str:
    """How the run scaled its features (and a regression's target), as it resolved them:
    ``--scale auto``'s decision, with its reason on hover."""
    scale = str(s.get("scale") or "none")
    out = esc(scale)
    if s.get("auto_scale"):
        out = f"<span title=\"{esc(s['auto_scale'])}\">{esc(scale)} (auto)</span>"
    if s.get("task") == "regression":
        target = ("standardised" if s.get("target_standardised")
                  else str(s.get("scale_target") or "none"))
        out += f"; target {esc(target)}"
    return out


def _rows_used(s: dict[str, Any]) -> str:
    """Which rows of the data the run read: all, ``--limit``'s first or ``--sample``'s."""
    sample = s.get("sample")
    if isinstance(sample, dict) and sample.get("rows") is not None:
        return esc(f"sample of {sample['rows']:,} (seed {sample.get('seed', 0)})")
    if s.get("limit") is not None:
        return esc(f"first {s['limit']:,}")
    return "all"


def _runs_table(runs: list[LoadedRun]) -> str:
    rows = []
    for r in runs:
        s = r.summary
        argv = " ".join(s.get("argv") or [])
        rows.append([esc(r.label), esc(s.get("dataset", "?")), _num(s.get("examples"), ","),
                     _num(s.get("n_features"), ","), esc(s.get("task") or "auto"),
                     _scaling(s), _rows_used(s),
                     _num(s.get("permutations"), "d"), _num(s.get("seed"), "d"),
                     esc(s.get("runner", "?")), esc(s.get("key_by") or "–"),
                     _num(s.get("dead_letters"), ","),
                     f"<code>kernelstream {esc(argv)}</code>" if argv else "–"])
    return _table(["run", "data set", "examples", "features", "task", "scaling", "rows",
                   "perms", "seed", "runner", "key-by", "dead letters", "command"], rows,
                  {2, 3, 7, 8, 11})


def _summary_table(runs: list[LoadedRun]) -> str:
    many = len(runs) > 1
    rows = []
    for r in runs:
        for c in r.rows:
            params = ", ".join(f"{k}={v}" for k, v in (c.get("params") or {}).items())
            name = esc(c["label"]) + (f" ({c['entities']} entities)" if c.get("entities")
                                      else "")
            regress = c.get("task") == "regression"
            rows.append(([esc(r.label)] if many else []) + [
                name, esc(c.get("learner")), _num(c.get("examples"), ","),
                _num(c.get("permutations"), "d"),
                _sig(c, "mistake_rate"),
                _sig(c, "avg_loss") + (f" ({esc(c['loss'])})" if c.get("loss") else ""),
                # the no-skill predictor of the same streams: the rate or the loss
                _sig(c, "noskill_avg_loss" if regress else "noskill_mistake_rate"),
                _sig(c, "rmse"), _sig(c, "mae"), _sig(c, "r2"),
                # a learner that keeps no examples (random features): no count, not 0.0
                _num(c.get("n_support_vectors") if stores_rows(str(c.get("learner")))
                     else None, ",.1f"), _num(c.get("seconds"), ".3f"),
                _num(c.get("examples_per_second"), ",.0f"),
                f"<span class=params>{esc(params)}</span>"])
    head = (["run"] if many else []) + [
        "configuration", "learner", "examples", "perms", "mistake rate (%)", "avg loss",
        "no-skill", "RMSE", "MAE", "R²", "#SV", "seconds", "examples/s", "parameters"]
    k = 1 if many else 0
    numeric = {k + i for i in range(2, 13)}
    # the task's columns only (no empty RMSE / MAE / R² beside classifiers): the parameters
    # stay on screen
    keep = [i for i, h in enumerate(head)
            if h not in TASK_COLUMNS or any(row[i] != "–" for row in rows)]
    return _table([head[i] for i in keep], ([row[i] for i in keep] for row in rows),
                  {j for j, i in enumerate(keep) if i in numeric})


def _sig(c: dict[str, Any], key: str) -> str:
    """``mean ± std`` of a summary's figure with significant digits (``numbers.sig``)."""
    return "–" if c.get(key) is None else esc(sig_pm(c[key], c.get(f"{key}_std")))


def _figure(chart: Any) -> str:
    data = base64.b64encode(chart.png).decode("ascii")
    return (f'<figure id="{chart.id}"><img src="data:image/png;base64,{data}" '
            f'alt="{esc(chart.title)}"><figcaption>{esc(chart.caption)}</figcaption></figure>')


def _entities(runs: list[LoadedRun]) -> str:
    out = []
    for r in runs:
        if not r.entities:
            continue
        n_ent = len({(e.config, e.entity) for e in r.entities})
        shown = r.entities[:ENTITY_ROWS]
        out.append(f"<h3>{esc(r.label)}: worst entities</h3><p class=meta>{n_ent:,} "
                   f"(configuration, entity) models; the {len(shown)} with the highest mistake "
                   "rate (regression: average loss) first, over the permutations.</p>")
        rows = [[esc(e.config), esc(e.entity), _num(e.examples, ",.0f"),
                 esc(sig_pm(e.rate, e.rate_std)) if e.rate is not None else "–",
                 "–" if e.avg_loss is None else esc(sig(e.avg_loss)),
                 _num(e.n_sv, ",.1f"), _num(e.rejected, ",")] for e in shown]
        out.append(_table(["configuration", "entity", "examples", "mistake rate (%)",
                           "avg loss", "#SV", "rejected"], rows, {2, 3, 4, 5, 6}))
    return "".join(out)


def _dead(runs: list[LoadedRun]) -> str:
    out = []
    for r in runs:
        if r.dead_total is None:
            out.append(f"<p>{esc(r.label)}: no dead_letters/ output.</p>")
            continue
        if not r.dead:
            out.append(f"<p>{esc(r.label)}: no dead letters.</p>")
            continue
        out.append(f"<h3>{esc(r.label)}: {r.dead_total:,} dead letters</h3>")
        rows = []
        for g in r.dead:
            raw = g.raw if len(g.raw) <= RAW_CHARS else g.raw[:RAW_CHARS] + " …"
            rows.append([esc(g.stage), esc(g.kind), f"{g.count:,}", esc(", ".join(g.first)),
                         esc(g.reason), f"<code>{esc(raw)}</code>"])
        out.append(_table(["stage", "reason", "count", "first at", "first reason",
                           "first input"], rows, {2}))
    return "".join(out)


def _result_table(t: ResultTable) -> str:
    def cell(c: TableCell) -> str:
        return f"<span class={c.css}>{esc(c.text)}</span>" if c.css else esc(c.text)

    verdict = ""
    if t.passed + t.failed:
        verdict = (f" — <span class=pass>{t.passed} PASS</span>, "
                   f"<span class=fail>{t.failed} FAIL</span>")
        if t.unjudged:
            verdict += f" of {t.passed + t.failed} judged; {t.unjudged} not judged"
    elif t.unjudged:
        verdict = " — not judged"
    parts = [f"<h3>{esc(t.title)} ({len(t.rows)} rows){verdict}</h3>"]
    if t.constant:
        parts.append("<p class=meta>in every row: "
                     + "; ".join(f"{esc(k)} = {esc(v)}" for k, v in t.constant) + "</p>")
    parts.append(_table([esc(c) for c in t.columns], ([cell(c) for c in row] for row in t.rows)))
    return "".join(parts)


def _results(res: ResultFile, i: int) -> str:
    parts = [f'<section id="results-{i}"><h2>Results: {esc(res.label)}</h2>',
             f"<p class=meta>{esc(res.path)}</p>"]
    if res.paper:
        npass = sum(t.passed for t in res.tables)
        judged = npass + sum(t.failed for t in res.tables)
        parts.append(f"<p><b>{esc(res.paper)}: passed {npass}/{judged} judged rows</b> "
                     f"<span class=meta>(the rows {esc(res.paper)}'s verdict judges, counted as "
                     f"{esc(res.paper)}.md counts them; the other rows' marks are "
                     "informative)</span></p>")
    if res.settings:
        parts.append(_table(["setting", "value"],
                            ([esc(k), esc(v)] for k, v in res.settings)))
    parts += [_result_table(t) for t in res.tables]
    parts.append("</section>")
    return "".join(parts)


def build_page(runs: list[LoadedRun], results: list[ResultFile]) -> str:
    """The whole HTML document."""
    charts = figures.all_charts(runs) if runs else []
    body = ["<main><h1>kernelstream report</h1>",
            f"<p class=meta>written {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by "
            f"kernelstream {esc(__version__)}</p>"]
    if runs:
        body += ['<section id="runs"><h2>Runs</h2>', _runs_table(runs)]
        body += [f"<p class=meta>{esc(r.label)}: --scale auto scaled {esc(r.summary.get('scale'))}"
                 f": {esc(r.summary['auto_scale'])}</p>" for r in runs
                 if r.summary.get("auto_scale")]
        body += [f"<p class=note>{esc(r.label)}: {esc(n)}</p>" for r in runs for n in r.notes]
        body += ["</section>", '<section id="summary"><h2>Summary</h2>',
                 "<p class=meta>Mean ± sample std over the permutations.</p>",
                 _summary_table(runs), "</section>"]
        for chart in charts:
            body.append(f"<section><h2>{esc(chart.title)}</h2>{_figure(chart)}"
                        + (_entities(runs) if chart.id == "fig-entities" else "")
                        + "</section>")
        if any(r.entities for r in runs) and not any(c.id == "fig-entities" for c in charts):
            body.append(f"<section><h2>Entities</h2>{_entities(runs)}</section>")
        body.append(f'<section id="dead-letters"><h2>Dead letters</h2>{_dead(runs)}</section>')
    body += [_results(r, i) for i, r in enumerate(results)]
    body.append("</main>")
    return ("<!doctype html>\n<html lang=en><head><meta charset=utf-8>"
            "<meta name=viewport content='width=device-width, initial-scale=1'>"
            f"{GENERATOR}<title>kernelstream report</title><style>{CSS}</style></head>"
            f"<body>{''.join(body)}</body></html>\n")


def classify(paths: list[str]) -> tuple[list[str], list[str]]:
    """Split the inputs into run folders and JSON result files."""
    run_dirs, result_files = [], []
    for p in paths:
        if os.path.isdir(p) and is_run_dir(p):
            run_dirs.append(p)
        elif os.path.basename(p) == "summary.json" and os.path.isfile(p):
            run_dirs.append(os.path.dirname(p) or ".")
        elif os.path.isfile(p) and p.endswith(".json"):
            result_files.append(p)
        elif not os.path.exists(p):
            raise ReportError(f"{p}: no such file or directory")
        elif os.path.isdir(p) and (inner := sorted(glob.glob(os.path.join(p, "*",
                                                                       "summary.json")))):
            # e.g. a `replay --follow` folder: one run per ckpt-NNNNNN/ folder
            names = ", ".join(os.path.basename(os.path.dirname(f)) for f in inner[:3])
            raise ReportError(f"{p}: no summary.json here; its folders {names}"
                              f"{', ...' if len(inner) > 3 else ''} are runs")
        else:
            raise ReportError(f"{p}: neither a run folder (no summary.json) nor a JSON results "
                              "file")
    return run_dirs, result_files


def render_report(paths: list[str], out: str) -> str:
    """Read the inputs, draw, and write the page to ``out`` (replaced whole, never left half
    written); returns ``out``."""
    if not paths:
        raise ReportError("nothing to report: give run folders or JSON results files")
    run_dirs, result_files = classify(paths)
    runs = [load_run(p, label) for p, label in zip(run_dirs, run_labels(run_dirs), strict=True)]
    results = [load_results(p, os.path.basename(p)) for p in result_files]
    page = build_page(runs, results)
    target = Path(out)
    if target.parent and not target.parent.exists():
        raise ReportError(f"{out}: its folder does not exist")
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, target)
    return str(target)
