"""The "add a learner" recipe (docs/adding-a-learner.md) and the learner family pages
(docs/learners/) are tested, so neither can drift from the code.

The recipe's module blocks are written into a temporary directory and imported by path, which
registers them; the conformance suite, the documented `kernelstream learners` output, the replay
command and the recipe's Python snippets then run on them. The registry and ``sys.modules`` are
restored afterwards, so the toys never reach other tests. The family pages must cover every
registered learner exactly once, list each learner's parameters with their current defaults,
quote verdict lines that still stand in the results files, and be linked from the README.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelstream.learners import available, get, registry
from kernelstream.learners.testing import CHECKS, check_learner
from kernelstream.pipelines import cli

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "docs" / "adding-a-learner.md"
FAMILIES = ROOT / "docs" / "learners"
MODULE_MARK = re.compile(r"\A# kernelstream/learners/(\w+)\.py\n")
SHARED = ("kernel", "gamma", "degree", "tie")  # listed once per page, not per learner


def _blocks(text: str) -> list[tuple[str, str]]:
    """``(language, code)`` of every fenced block of a Markdown text."""
    return [(m[1], m[2]) for m in re.finditer(r"^```(\w*)\n(.*?)^```$", text, re.S | re.M)]


def _recipe_blocks() -> list[tuple[str, str]]:
    return _blocks(RECIPE.read_text(encoding="utf-8"))


def _module_blocks() -> list[tuple[str, str]]:
    """``(module stem, source)`` of the recipe's blocks headed ``# kernelstream/learners/X.py``."""
    out = []
    for lang, code in _recipe_blocks():
        m = MODULE_MARK.match(code)
        if lang == "python" and m:
            out.append((m[1], code))
    return out


@pytest.fixture
def recipe_learners(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """Import the recipe's modules from a temporary directory; yield the names they register.
    Teardown puts the registry and sys.modules back as they were."""
    available()  # every learner module loaded first, so that what is saved is the whole registry
    saved = dict(registry._REGISTRY)
    added: list[str] = []
    try:
        blocks = _module_blocks()
        assert len(blocks) >= 2, "docs/adding-a-learner.md lost its module examples"
        tmp = tmp_path_factory.mktemp("recipe")
        for stem, code in blocks:
            path = tmp / f"{stem}.py"
            path.write_text(code, encoding="utf-8")
            modname = f"_recipe_{stem}"  # a name no real module has
            spec = importlib.util.spec_from_file_location(modname, path)
            assert spec is not None and spec.loader is not None
            mod = importlib.util.module_from_spec(spec)
            sys.modules[modname] = mod  # pickle (the `pickle` check) finds the class by module
            added.append(modname)
            spec.loader.exec_module(mod)
        names = sorted(set(registry._REGISTRY) - set(saved))
        assert len(names) == len(blocks), f"the recipe's modules registered {names}"
        yield names
    finally:
        registry._REGISTRY.clear()
        registry._REGISTRY.update(saved)
        for modname in added:
            sys.modules.pop(modname, None)


def test_recipe_learners_pass_the_conformance_suite(recipe_learners: list[str]) -> None:
    assert recipe_learners == ["rff-perceptron", "stoptron"]
    for name in recipe_learners:
        check_learner(name)  # every check on every configuration


def test_recipe_learners_are_listed(recipe_learners: list[str],
                                    capsys: pytest.CaptureFixture[str]) -> None:
    for name in recipe_learners:
        assert cli.main(["learners", name]) == 0
        assert capsys.readouterr().out.startswith(f"{name}  [")
    assert cli.main(["learners", "--format", "markdown"]) == 0
    table = capsys.readouterr().out
    for name in recipe_learners:
        assert f"| `{name}` |" in table


def test_recipe_shows_the_real_listing(recipe_learners: list[str],
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """The ``text`` block of the recipe is what `kernelstream learners stoptron` prints (up to
    the compiled-kernels status line, which depends on the build)."""
    shown = [code for lang, code in _recipe_blocks() if lang == "text"]
    assert len(shown) == 1, "expected one text block (the `kernelstream learners` output)"
    assert cli.main(["learners", "stoptron"]) == 0
    out = capsys.readouterr().out.split("\n\nper-round kernels:")[0]
    assert out.rstrip("\n") == shown[0].rstrip("\n")


def test_recipe_replay_command_runs(recipe_learners: list[str], tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    cmds = [line for lang, code in _recipe_blocks() if lang == ""
            for line in code.splitlines() if line.startswith("kernelstream replay")]
    assert len(cmds) == 1, f"expected one replay command in the recipe, got {cmds}"
    argv = shlex.split(cmds[0])[1:]
    argv[argv.index("--out") + 1] = str(tmp_path / "run")
    assert cli.main(argv) == 0, capsys.readouterr().err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert "stoptron" in json.dumps(summary)


def test_recipe_python_snippets_run(recipe_learners: list[str]) -> None:
    """Every other Python block of the recipe runs as written."""
    snippets = [code for lang, code in _recipe_blocks()
                if lang == "python" and not MODULE_MARK.match(code)]
    assert len(snippets) >= 2
    for code in snippets:
        exec(compile(code, str(RECIPE), "exec"), {})


def test_recipe_explains_every_check() -> None:
    text = RECIPE.read_text(encoding="utf-8")
    missing = [c for c in CHECKS if f"| `{c}` |" not in text]
    assert not missing, f"docs/adding-a-learner.md does not describe the checks {missing}"


def test_registry_is_clean_outside_the_recipe_tests() -> None:
    """Runs after the tests above: their fixture's teardown removed the toys."""
    assert "stoptron" not in available() and "rff-perceptron" not in available()


# -- the family pages --------------------------------------------------------------------------
def _pages() -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(FAMILIES.glob("*.md"))
            if p.name != "README.md"}


def _sections(text: str) -> dict[str, str]:
    """Learner name → its section (from ``### `name` `` to the next heading of level ≤ 3)."""
    parts = re.split(r"^(#{1,3} .*)$", text, flags=re.M)
    out = {}
    for head, body in zip(parts[1::2], parts[2::2], strict=True):
        m = re.fullmatch(r"### `([a-z0-9+-]+)`.*", head)
        if m:
            out[m[1]] = body
    return out


def test_every_learner_is_on_exactly_one_family_page() -> None:
    where: dict[str, list[str]] = {}
    for page, text in _pages().items():
        for name in _sections(text):
            where.setdefault(name, []).append(page)
    missing = [n for n in available() if n not in where]
    assert not missing, f"learners on no page of docs/learners/ (add a section): {missing}"
    twice = {n: p for n, p in where.items() if len(p) > 1}
    assert not twice, f"learners on more than one page: {twice}"
    unknown = sorted(set(where) - set(available()))
    assert not unknown, f"docs/learners/ documents learners that are not registered: {unknown}"


def test_family_pages_list_the_current_parameters() -> None:
    """Each section's parameter table lists the learner's own parameters with their defaults;
    its ``Shared:`` line names the shared ones it takes."""
    problems = []
    for page, text in _pages().items():
        for name, body in _sections(text).items():
            if name not in available():
                continue
            want = {p.name: p.default for p in get(name).params}
            rows = dict(re.findall(r"^\| `(\w+)` \| `(.*?)` \|", body, flags=re.M))
            shared = re.search(r"^Shared: (.*)$", body, flags=re.M)
            have_shared = set(re.findall(r"`(\w+)`", shared[1])) if shared else set()
            for p, default in want.items():
                if p in SHARED:
                    if p not in have_shared:
                        problems.append(f"{page} {name}: shared parameter {p} not on its "
                                        "'Shared:' line")
                elif p not in rows:
                    problems.append(f"{page} {name}: parameter {p} missing from the table")
                elif rows[p] != repr(default):
                    problems.append(f"{page} {name}: {p} default is {default!r}, the table "
                                    f"says {rows[p]}")
            extra = sorted((set(rows) | have_shared) - set(want))
            if extra:
                problems.append(f"{page} {name}: documents parameters it does not have {extra}")
    assert not problems, "\n".join(problems)


def test_readme_counts_the_registered_learners() -> None:
    """README.md's "The N learners" is the registry's count (docs/adding-a-learner.md, step 7)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"\bThe (\d+) learners\b", readme)
    assert m, "README.md no longer says how many learners there are (\"The N learners\")"
    assert int(m[1]) == len(available()), (
        f"README.md says 'The {m[1]} learners' but {len(available())} are registered: "
        "update the number")


_NUMBER = r"2\^-?\d+|-?\d+(?:\.\d+)?(?:e-?\d+)?"
# "default 0.5", "default: 4", "default 2^-12 to 2^12"; a formula after "default"
# (``⌊3B/4⌋``, ``round(0.1 B)``, ``2^-2..2^3``) is no number
_STATED = re.compile(rf"\bdefault:?\s+`*({_NUMBER})\b(?!\s*[·*/^]|\.\.)"
                     rf"(?:\s+(?:to|and)\s+({_NUMBER})\b)?")


def _parameter_entries(doc: str) -> dict[tuple[str, ...], str]:
    """``(names, text)`` of the numpy-style Parameters section of a docstring: an entry is a
    line of comma-separated names at the margin and its indented text; any other line at the
    margin ends the section."""
    m = re.search(r"^Parameters\n-+\n(.*?)(?=^\S[^\n]*\n-+\n|\Z)", doc, re.S | re.M)
    out: dict[tuple[str, ...], str] = {}
    cur = None
    for line in (m[1] if m else "").splitlines():
        if re.fullmatch(r"\w+(?:, \w+)*", line):
            cur = tuple(line.split(", "))
            out[cur] = ""
        elif line and not line.startswith(" "):
            break
        elif cur is not None:
            out[cur] += line + "\n"
    return out


def _stated_defaults(text: str) -> list[float]:
    values = [v for m in _STATED.finditer(text) for v in m.groups() if v]
    return [2.0 ** int(v[2:]) if v.startswith("2^") else float(v) for v in values]


# "default True"; "default ``logistic``"; "default None" or what None means: "(None: 5/√T)",
# "``None`` = the C-P2 value", "None = unknown"
_STATED_BOOL = re.compile(r"\bdefault:?\s+`*(True|False)\b")
_STATED_STR = re.compile(r"\bdefault:?\s+``([^`\s]+)``")
_STATED_NONE = re.compile(r"\bdefault:?\s+`*None\b")
_NONE_TOLD = re.compile(rf"{_STATED_NONE.pattern}|`*\bNone`*(?::|\s+=)")


def _written(default: str) -> str:
    """How a string default is written in a docstring: a sigma grid of step 1, ``2^a:1:b``,
    as the modules write grids (``2^a..2^b``); any other string as it is."""
    return re.sub(r"\A2\^(-?\d+):1:(-?\d+)\Z", r"2^\1..2^\2", default)


def _default_problems(name: str, spec: dict[str, object],
                      entries: dict[tuple[str, ...], str]) -> list[str]:
    """What the Parameters ``entries`` of learner ``name`` get wrong about the defaults
    ``spec`` (parameter → the code's default): the rules of the test below."""
    problems = []
    for names, text in entries.items():
        own = {n: spec[n] for n in names if n in spec}
        numeric = {n: float(v) for n, v in own.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)}
        bools = {n: v for n, v in own.items() if isinstance(v, bool)}
        strings = {n: _written(v) for n, v in own.items() if isinstance(v, str)}
        nones = [n for n, v in own.items() if v is None]
        stated = _stated_defaults(text)
        stated_bools = [m[1] == "True" for m in _STATED_BOOL.finditer(text)]
        stated_strs = [m[1] for m in _STATED_STR.finditer(text)] if strings else []
        where = f"{name}: docstring says {', '.join(names)} default"
        problems += [f"{where} {v:g}, the code has {sorted(numeric.values()) or 'no number'}"
                     for v in stated if numeric and v not in numeric.values()]
        problems += [f"{where} {v}, the code has {', '.join(map(str, bools.values())) or 'no bool'}"
                     for v in stated_bools if v not in bools.values()]
        problems += [f"{where} ``{v}``, the code has ``{'``, ``'.join(strings.values())}``"
                     for v in stated_strs if v not in strings.values()]
        if _STATED_NONE.search(text) and not nones:
            problems.append(f"{where} None, the code has {', '.join(map(repr, own.values()))}")
        if text.lstrip().startswith("As :class:"):
            continue
        own = {n: v for n, v in own.items() if n not in SHARED}
        problems += [f"{name}: the docstring does not state {n}'s default {v:g} "
                     "(write 'default N' in its entry)" for n, v in numeric.items()
                     if n in own and v not in stated]
        problems += [f"{name}: the docstring does not state {n}'s default {v} "
                     f"(write 'default {v}' in its entry)" for n, v in bools.items()
                     if n in own and v not in stated_bools]
        problems += [f"{name}: the docstring does not state {n}'s default '{v}' "
                     f"(write 'default ``{v}``' in its entry)" for n, v in strings.items()
                     if n in own and v not in stated_strs]
        told = len(_NONE_TOLD.findall(text))
        problems += [f"{name}: the docstring does not state {n}'s default None (write "
                     "'default None' or what None means, '(None: ...)' or '``None`` = ...')"
                     for n in [n for n in nones if n in own][told:]]
    return problems


def test_docstrings_document_every_parameter_and_its_default() -> None:
    """Every registered learner's docstring has a Parameters section naming each of its
    parameters, and each entry states its parameters' defaults as the code has them:

    * a number as "default 0.5" (also "default: 4", "default 2^-12"), and each number given
      as a default is the code's;
    * a bool as "default True" / "default False";
    * a string as "default ``VALUE``", the value without quotes; a sigma grid of step 1,
      ``'2^a:1:b'``, is written ``2^a..2^b``, the form the modules use for grids;
    * None as "default None" or by saying what None means: "None:" or "None =" (the word
      with or without double backticks: "(None: ``5/√T``)", "``None`` = the C-P2 value");
      an entry of several parameters tells it once for each parameter whose default is None.

    A stated default the code does not have fails: a number, bool or ``VALUE`` given as a
    default that none of the entry's parameters has (a ``VALUE`` only counts in an entry with
    a string parameter: elsewhere "default ``⌊3B/4⌋``" is a formula), or "default None" for
    an entry with no None default. Entries that refer to another class
    ("As :class:`EA2OKS`.") and the shared kernel parameters are exempt from stating their
    defaults, not from stating them right."""
    problems = []
    for name in available():
        cls = get(name)
        spec = {p.name: p.default for p in cls.params}
        entries = _parameter_entries(inspect.getdoc(cls) or "")
        named = {n for names in entries for n in names}
        problems += [f"{name}: parameter {p} not in its docstring's Parameters section"
                     for p in spec if p not in named]
        problems += _default_problems(name, spec, entries)
    assert not problems, "\n".join(problems)


_FAKE_DOC = """Fake.

Parameters
----------
eta
    Step (default {eta}).
loss
    ``hinge`` or ``logistic`` (default ``{loss}``).
sigmas
    Widths (default ``{sigmas}``).
averaged
    Average (default {averaged}).
horizon, radius
    ``T`` (None = unknown) and ``U`` ({radius}).
rank
    Rank; default {rank}: ``round(0.1 B)``.
"""
_FAKE_SPEC = {"eta": 0.5, "loss": "hinge", "sigmas": "2^-2:1:3", "averaged": True,
              "horizon": None, "radius": None, "rank": None}
_FAKE_RIGHT = {"eta": "0.5", "loss": "hinge", "sigmas": "2^-2..2^3", "averaged": "True",
               "radius": "``None``: 15", "rank": "None"}


@pytest.mark.parametrize(("wrong", "expect"), [
    ({}, []),
    ({"eta": "0.25"}, ["says eta default 0.25", "not state eta's default 0.5"]),
    ({"loss": "logistic"}, ["says loss default ``logistic``", "not state loss's default"]),
    ({"sigmas": "2^-2:1:3"}, ["says sigmas default ``2^-2:1:3``", "not state sigmas's"]),
    ({"sigmas": "2^-2..2^4"}, ["says sigmas default ``2^-2..2^4``", "not state sigmas's"]),
    ({"averaged": "False"}, ["says averaged default False", "not state averaged's"]),
    ({"averaged": "on"}, ["not state averaged's default True"]),
    ({"radius": "the loss's value"}, ["not state radius's default None"]),
    ({"rank": "``round(0.1 B)``"}, ["not state rank's default None"]),
])
def test_default_checker_catches_missing_and_wrong_defaults(wrong: dict[str, str],
                                                            expect: list[str]) -> None:
    """The docstring check on a fake learner: right, and each way of going wrong."""
    entries = _parameter_entries(_FAKE_DOC.format(**{**_FAKE_RIGHT, **wrong}))
    problems = _default_problems("fake", _FAKE_SPEC, entries)
    assert len(problems) == len(expect), problems
    for p, e in zip(problems, expect, strict=True):
        assert e in p, problems


def test_default_checker_catches_a_none_the_code_does_not_have() -> None:
    entries = _parameter_entries(_FAKE_DOC.format(**_FAKE_RIGHT))
    problems = _default_problems("fake", {**_FAKE_SPEC, "rank": 10}, entries)
    assert len(problems) == 2 and "says rank default None, the code has 10" in problems[0]


def test_family_pages_quote_results_as_they_stand() -> None:
    """A quoted verdict (``> ...`` right after a link to ``benchmarks/results/X.md``) must still
    be a line of that file, so a rerun that changes it shows here."""
    problems, n = [], 0
    for page, text in _pages().items():
        for m in re.finditer(r"\(\.\./\.\./benchmarks/results/(\w+\.md)\)[^\n]*\n\n((?:> .*\n)+)",
                             text):
            lines = (ROOT / "benchmarks" / "results" / m[1]).read_text(encoding="utf-8")
            for q in m[2].splitlines():
                n += 1
                if q[2:].strip() not in lines:
                    problems.append(f"{page}: no longer in {m[1]}: {q[2:]}")
    assert n >= 10, f"only {n} quoted result lines found"
    assert not problems, "\n".join(problems)


def test_family_pages_are_linked() -> None:
    index = (FAMILIES / "README.md").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for page in _pages():
        assert f"({page})" in index, f"docs/learners/README.md does not link {page}"
        assert f"(docs/learners/{page})" in readme, f"README.md does not link {page}"
    assert "(docs/adding-a-learner.md)" in readme, "README.md does not link the recipe"
    for target in re.findall(r"\]\(([^)#]+)", index):
        assert (FAMILIES / target).exists(), f"docs/learners/README.md links a missing {target}"
