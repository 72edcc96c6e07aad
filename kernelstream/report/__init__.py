"""Reports: one self-contained HTML page from replay run folders and reproduction results.

``kernelstream report RUN_DIR [RUN_DIR ...]`` reads what a replay wrote (``summary.json`` and
the Parquet outputs ``predictions/``, ``metrics/``, ``dead_letters/``), draws its figures with
matplotlib (PNG, inlined as data URIs) and writes one HTML file that opens from disk without a
server. Several run folders are overlaid; a reproduction's JSON results get tables of their
own. Nothing here imports Apache Beam.

Modules: :mod:`.runs` (a run folder: summary rows, entities, dead letters), :mod:`.curves`
(per-configuration curves over the stream), :mod:`.figures` (matplotlib), :mod:`.reproduce`
(reproduction results), :mod:`.checks` (the summary fields the report reads, type-checked),
:mod:`.page` (the HTML page and :func:`render_report`).
"""

from __future__ import annotations

import os

__all__ = ["GENERATOR", "is_report", "render_report"]

# how a page says it is a kernelstream report (its <head>): `report --out` replaces such a file
# without --overwrite, and no other
GENERATOR = "<meta name=generator content=kernelstream>"
_TITLE = "<title>kernelstream report</title>"  # (pages written before the generator tag)


def is_report(path: str) -> bool:
    """``path`` is a page :func:`render_report` wrote (its head names the generator)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            head = f.read(4096)
    except OSError:
        return False
    return os.path.isfile(path) and (GENERATOR in head or _TITLE in head)


def render_report(paths: list[str], out: str) -> str:
    """Write the report of ``paths`` (run folders and reproduction JSON files) to ``out``;
    returns the path written. Needs matplotlib; raises
    :class:`~kernelstream.errors.ReportError` for an input that is neither."""
    # matplotlib (the figures): only when a report is drawn, not when the CLI parses
    from kernelstream.report.page import render_report as _render

    return _render(paths, out)
