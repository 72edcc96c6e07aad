"""The report of benchmarks/sparse.py (its markdown, from its results), with the memory
target it states."""

from __future__ import annotations

from typing import Any

import _common

RSS_FACTOR = 1.5  # RSS growth <= this x (CSR bytes + model bytes)


def mib(b: float) -> str:
    return f"{b / 2**20:.1f}"


def render(res: dict[str, Any]) -> list[str]:
    B = res["budget"]
    lines = [f"# Sparse rows: BOGD, BPA-S, NOGD, SkeGD at B={B}; renumbered columns; linear "
             "models on text", "",
             _common.generated_line("sparse.py", res["generated"],
                                    f"{res['minutes']:.1f} min; {res['machine']}"), ""]
    lines += ["## Sparse sets (CSR rows, one subprocess per run)", "",
              "Mistake rate of one test-then-train pass over permutation 0 (untuned: default "
              "steps, gamma = 1/mean‖x‖²; *minority* = the rate of always predicting the "
              "majority class). RSS growth = peak RSS − RSS after imports and a warm-up; the "
              f"check is growth ≤ {RSS_FACTOR}× (CSR bytes + model bytes).", "",
              "| data | rows | width (max index) | nnz/row | learner | mistake rate (minority) "
              "| ex/s | CSR MiB | model MiB | peak RSS MiB (growth) | growth / (CSR+model) "
              "| ≤ 1.5× |",
              "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    verdicts = []
    for ds in res["sparse_sets"]:
        for r in ds["runs"]:
            head = (f"| {ds['dataset']} | {ds['rows']} | {ds['width']:,} ({ds['max_index']:,}) "
                    f"| {ds['nnz'] / ds['rows']:.0f} | {r['learner']} ")
            if "error" in r:
                lines.append(head + f"| ERROR: {r['error']} | | | | | | | |")
                verdicts.append(False)
                continue
            verdicts.append(r["pass"])
            lines.append(head + f"| {r['mistakes'] / r['rows']:.3f} "
                         f"({ds['minority_rate']:.3f}) | "
                         f"{r['rows'] / r['seconds']:.0f} | {mib(r['csr_bytes'])} | "
                         f"{mib(r['model_bytes'])} | {mib(r['rss_peak'])} "
                         f"({mib(r['rss_growth'])}) | {r['rss_ratio']:.2f} | "
                         f"{'PASS' if r['pass'] else 'FAIL'} |")
    lines.append("")
    ok = sum(verdicts)
    lines.append(f"{'PASS' if verdicts and all(verdicts) else 'FAIL'}: {ok}/{len(verdicts)} runs "
                 f"within {RSS_FACTOR}× (CSR + model) of RSS growth, whatever the largest index.")
    lines += ["", "## Sparse path vs dense path on narrow data (one process, alternating)", "",
              "| data | rows | learner | dense µs/round | sparse µs/round | sparse/dense | "
              "mistakes dense | mistakes sparse | max score diff (rel.) |",
              "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for ds in res["dense_sets"]:
        for r in ds["runs"]:
            lines.append(f"| {ds['dataset']} ({ds['file']}) | {r['rows']} | {r['learner']} | "
                         f"{r['dense_us']:.1f} | {r['sparse_us']:.1f} | {r['ratio']:.2f} | "
                         f"{r['dense_mistakes']} | {r['sparse_mistakes']} | "
                         f"{r['max_rel_diff']:.1e} |")
    if res.get("replays"):
        lines += ["", f"## End to end: `kernelstream replay -l bpa-s -p budget={B}`", "",
                  "Wall time from process start to exit (imports, reading, learning, Parquet "
                  "outputs); peak RSS of the run and every process it waited for.", "",
                  "| data | runner | examples | mistake rate (%) | seconds | ex/s (wall) "
                  "| peak RSS MiB |", "|---|---|---:|---:|---:|---:|---:|"]
        for r in res["replays"]:
            lines.append(f"| {r['dataset']} | {r['runner']} | {r['examples']} | "
                         f"{r['mistake_rate']:.2f} | {r['seconds']:.1f} | "
                         f"{r['examples'] / r['seconds']:.0f} | {mib(r['rss_peak'])} |")
    lines += _render_issue28(res)
    if res["missing"]:
        lines += ["", f"Missing (skipped): {', '.join(res['missing'])}."]
    if res.get("kept"):
        lines += ["", "Parts kept from an earlier run (not rerun here): " + ", ".join(
            f"part {k} ({v})" for k, v in sorted(res["kept"].items())) + "."]
    return lines


def _render_issue28(res: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    rn = res.get("renumbered")
    if rn:
        lines += ["", f"## Renumbered columns: news20, first {rn['rows']:,} rows, columns × "
                  f"{rn['factor']:,} (largest index {rn['max_index']:,}, width 2^31 − 1)", "",
                  "Same rows, same order within each row; `predict_learn_many` in this process, "
                  "alternating, medians. ex/s from the CPU time of this process (the machine is "
                  "shared; wall-clock ratio beside it). Pass: bit-identical scores and CPU-time "
                  "ratio ≤ 1.2.",
                  "", "| learner | params | mistakes | original ex/s | renumbered ex/s | "
                  "ratio (CPU time) | ratio (wall) | identical scores | pass |",
                  "|---|---|---:|---:|---:|---:|---:|---|---|"]
        for r in rn["runs"]:
            ok = r["identical"] and r["ratio"] <= 1.2
            prm = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                            for k, v in r["params"].items())
            lines.append(f"| {r['learner']} | {prm} | {r['mistakes']} | "
                         f"{rn['rows'] / r['orig_cpu']:.0f} | {rn['rows'] / r['renum_cpu']:.0f} | "
                         f"{r['ratio']:.2f} | {r['wall_ratio']:.2f} | "
                         f"{'yes' if r['identical'] else 'NO'} | "
                         f"{'PASS' if ok else 'FAIL'} |")
    for ds in res.get("linear", []):
        lines += ["", f"## Linear models on text: {ds['dataset']} ({ds['rows']:,} rows, "
                  f"{ds['nnz']:,} non-zeros), whole file", "",
                  "kernelstream: one `predict_learn_many` over the parsed CSR (block "
                  "validation included), median of the repeats; peers one row at a time, "
                  "test-then-train, in the same run. ex/s (CPU): from this process's CPU "
                  "time; ex/s (wall): from the wall clock of a shared, loaded machine.", "",
                  "| learner | ex/s (CPU) | ex/s (wall) | wall seconds | mistakes (rate) |",
                  "|---|---:|---:|---:|---:|"]
        for r in ds["runs"]:
            lines.append(f"| {r['learner']} | {ds['rows'] / r['cpu']:,.0f} | "
                         f"{ds['rows'] / r['seconds']:,.0f} | "
                         f"{r['seconds']:.3f} | {r['mistakes']} "
                         f"({r['mistakes'] / ds['rows']:.3f}) |")
        rp = ds.get("replay")
        if rp:
            lines += ["", f"End to end, `kernelstream replay -l perceptron -p kernel=linear` "
                      f"(process start to exit: imports, reading, learning, outputs): "
                      f"{rp['seconds']:.1f} s for {rp['examples']:,} examples, mistake rate "
                      f"{rp['mistake_rate']:.2f} %."]
    return lines
