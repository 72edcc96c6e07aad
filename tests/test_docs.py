"""The README stays a short front page and the documentation holds together: every relative
link of README.md and docs/ resolves, anchors included, and the README's map names every page
of docs/ (issue 29)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernelstream.pipelines import cli
from kernelstream.pipelines.live import stream_monitor

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = sorted([README, *(ROOT / "docs").rglob("*.md")])

# [text](target) and ![alt](target); the target ends at the first space or ")"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
SETUP = (
    "python3 -m venv .venv && .venv/bin/pip install -e . && "
    ".venv/bin/kernelstream replay --out runs/demo --overwrite",
    "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest",
)


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {_slug(m[1]) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def _links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)  # a link written as code is an example, not a link
    return [t for t in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def test_readme_is_a_short_front_page() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.encode("utf-8")) <= 25_000, "README.md is over 25 KB: move detail to docs/"
    assert len(text.splitlines()) <= 250, "README.md is over 250 lines: move detail to docs/"
    # .ci/run runs the second command; a fresh machine needs exactly these two
    first_block = text.split("```")[1]
    assert tuple(first_block.strip().splitlines()) == SETUP
    for needed in ("KERNELSTREAM_DATA", "kernelstream check", "kernelstream tune",
                   "kernelstream report", "--task regression", "kernelstream reproduce",
                   "kernelstream demo", "minutes"):
        assert needed in text, f"the README's quick start lost {needed!r}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in _links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target}: no heading with that anchor")
    assert not broken, f"{page.relative_to(ROOT)}:\n" + "\n".join(broken)


def test_readme_maps_every_docs_page() -> None:
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in _links(README)}
    missing = [str(p.relative_to(ROOT)) for p in PAGES if p != README and p not in linked]
    assert not missing, f"pages of docs/ the README's map does not link: {missing}"


def test_cli_page_gives_the_replay_checks_record_count() -> None:
    # docs/cli.md said 5,000 while the check read 1,000
    from kernelstream.pipelines.replay.replay_checks import _PRECHECK_RECORDS

    text = " ".join((ROOT / "docs" / "cli.md").read_text(encoding="utf-8").split())
    assert f"the same check on the first {_PRECHECK_RECORDS:,} records of a file" in text


def test_streaming_page_says_what_a_stream_does() -> None:
    """docs/streaming.md: its examples run the learners they name (a ``--kafka-out`` prefix
    ``clicks-bogd`` with ``-l bogd``, not the default), it says how to get the local broker
    they need, and every ``stopped_by`` of summary.json (the reasons the stream's monitor
    drains for, and the signals); a stopped stream flushes no open window, so the accounting
    page does not promise a flush at the end."""
    page = (ROOT / "docs" / "streaming.md").read_text(encoding="utf-8")
    first = FENCE.search(page)
    assert first is not None
    for command in first[0].strip("`\n").replace("\\\n", " ").splitlines():
        args = cli.build_parser().parse_args(command.split()[1:])
        if args.kafka_out is not None:
            suffix = args.kafka_out.rsplit("-", 1)[-1]
            assert any(suffix in spec for spec in args.learner or ()), command
    assert "kafka_client import local_broker" in page and "kafka-local" in page
    source = Path(stream_monitor.__file__).read_text(encoding="utf-8")
    reasons = set(re.findall(r'self\.drain\("([^"]+)"\)', source)) | {"SIGINT", "SIGTERM"}
    assert len(reasons) >= 5
    stopped = page[page.index("`stopped_by`"):][:600]
    for reason in reasons:
        assert f"`{reason}`" in stopped, reason
    accounting = (ROOT / "docs" / "stream-accounting.md").read_text(encoding="utf-8")
    assert "plus a flush at the end" not in accounting
    assert "does not flush its open windows" in accounting
