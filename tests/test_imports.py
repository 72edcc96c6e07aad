"""The package's imports, read from its source with :mod:`ast` (nothing is imported).

Two rules (issue 29):

* no import circle at module level: the graph of the imports each module runs when it is
  loaded (those under ``if TYPE_CHECKING:`` excepted) has no cycle;
* a module of the package is imported inside a function only at a seam to an optional heavy
  dependency (Beam, pyarrow, a Kafka client, Dask), at most :data:`MAX_FUNCTION_IMPORTS` of
  them, each with a comment on its line or just above it saying why.

An edge goes to the module named: ``import a.b`` and ``from a import b`` (``b`` a module) lead
to ``a.b``, ``from a.b import name`` to ``a.b``. The parent packages Python also loads on the
way are not edges: a package's ``__init__`` importing its own modules is not a circle.
"""

from __future__ import annotations

import ast
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "kernelstream"

# The aim is 25; the real number today is the limit, so that it can only go down. Of
# the 14: 6 load Beam or Dask (the replay's runner dispatch, ``pipelines.replay.replay._beam``
# and its Dask branch; the live stream's Beam transforms in ``pipelines/live``); 4 the compiled
# kernels or the learner modules (``learners.compiled`` loading the C extension; ``learners``,
# ``reproduce``: the protocols import the compiled learners when they load), 1 matplotlib (the
# report's page); 3 would close a circle at module level (``data`` and ``data.embedded``; the
# worker pool, which imports the CLI whose ``replay`` command uses it).
MAX_FUNCTION_IMPORTS = 14

# Modules other branches of issue 29 are rewriting: their function-level imports count, but
# the comment they need is theirs to write.
_COMMENTS_PENDING = ("kernelstream/experiments/", "kernelstream/learners/",
                     "kernelstream/engine/live/rows.py")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


@dataclass(frozen=True)
class _Import:
    """One import statement naming modules of the package."""

    targets: tuple[str, ...]
    line: int
    end_line: int
    in_function: bool


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(body: list[ast.stmt], in_function: bool) -> Iterator[tuple[ast.stmt, bool]]:
    """Every statement of ``body`` and the bodies it holds, with whether it runs in a function;
    the bodies of ``if TYPE_CHECKING:`` never run, so they are left out."""
    for node in body:
        yield node, in_function
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _walk(node.orelse, in_function)
            continue
        inner = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            for child in getattr(node, field, []) or []:
                if isinstance(child, ast.ExceptHandler | ast.match_case):
                    yield from _walk(child.body, inner)
                elif isinstance(child, ast.stmt):
                    yield from _walk([child], inner)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base.pop()
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str, path: Path, known: dict[str, Path]) -> Iterator[_Import]:
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    for node, in_function in _walk(tree.body, False):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(module, is_package, node)
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                targets.append(sub if sub in known else source)
        own = tuple(dict.fromkeys(t for t in targets if t in known))
        if own:
            yield _Import(own, node.lineno, node.end_lineno or node.lineno, in_function)


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports at module level."""
    known = _modules()
    graph: dict[str, set[str]] = {m: set() for m in known}
    for module, path in known.items():
        for imp in _imports(module, path, known):
            if not imp.in_function:
                graph[module].update(t for t in imp.targets if t != module)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each given as
    one circle through it, so that the failure names modules that import each other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_circle(graph, sorted(c)) for c in components]


def _circle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest path from the component's first module back to itself, inside it."""
    start, members = component[0], set(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    return [*paths[v], start]
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"not a strongly connected component: {component}")


def function_imports() -> list[tuple[str, _Import, bool]]:
    """Every import of a package module inside a function: (file, import, has a comment)."""
    known = _modules()
    found = []
    for module, path in known.items():
        with tokenize.open(path) as f:
            comments = {tok.start[0] for tok in tokenize.generate_tokens(f.readline)
                        if tok.type == tokenize.COMMENT}
        start, end = 0, -1  # the lines of the run of imports the last one belongs to
        for imp in _imports(module, path, known):
            if imp.in_function:
                # a comment on the line above the run of imports this one is part of (alone
                # or after the code that opens the block) or on one of the run's lines
                start = start if imp.line == end + 1 else imp.line
                end = imp.end_line
                commented = any(n in comments for n in range(start - 1, end + 1))
                found.append((str(path.relative_to(ROOT.parent)), imp, commented))
    return found


def test_cycles_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert cycles(graph) == [["a", "b", "c", "a"]]


def test_no_import_circle_at_module_level() -> None:
    found = cycles(import_graph())
    assert not found, "import circles at module level:\n" + "\n".join(
        " -> ".join(c) for c in found)


def test_function_level_imports_are_few_and_commented() -> None:
    found = function_imports()
    bare = [f"{f}:{imp.line}" for f, imp, commented in found
            if not commented and not f.startswith(_COMMENTS_PENDING)]
    assert not bare, "function-level imports of the package without a comment saying why: " \
        + ", ".join(bare)
    assert len(found) <= MAX_FUNCTION_IMPORTS, (
        f"{len(found)} function-level imports of the package (at most "
        f"{MAX_FUNCTION_IMPORTS}): " + ", ".join(f"{f}:{imp.line}" for f, imp, _ in found))


def test_user_errors_live_in_errors_py() -> None:
    """The errors of :mod:`kernelstream.errors` are defined there only, and every module that
    names one imports it from there (no second definition, no re-export to import it from);
    ``errors`` itself imports no module of the package, so any layer may raise them."""
    known = _modules()
    path = known["kernelstream.errors"]
    tree = ast.parse(path.read_text())
    names = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    assert {"ConfigError", "DataError", "WorkerError", "WidthError"} <= names
    assert not list(_imports("kernelstream.errors", path, known))
    wrong = []
    for module, p in known.items():
        if module == "kernelstream.errors":
            continue
        module_tree = ast.parse(p.read_text())
        for node in ast.walk(module_tree):
            if isinstance(node, ast.ClassDef) and node.name in names:
                wrong.append(f"{module}: class {node.name}")
            elif isinstance(node, ast.ImportFrom) and node.module != "kernelstream.errors":
                wrong += [f"{module}: {a.name} from {node.module}" for a in node.names
                          if a.name in names]
            elif isinstance(node, ast.Attribute) and node.attr in names and not (
                    isinstance(node.value, ast.Name) and node.value.id == "errors"):
                wrong.append(f"{module}: {ast.unparse(node)}")
    assert not wrong, "user-facing errors outside kernelstream.errors: " + ", ".join(wrong)


def test_no_two_classes_share_a_name() -> None:
    """Issue 29: a class name names one class in the package (a newcomer's search finds it)."""
    where: dict[str, list[str]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, []).append(str(path.relative_to(ROOT.parent)))
    shared = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not shared, shared
