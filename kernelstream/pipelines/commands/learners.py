"""``kernelstream learners [NAME]``: the registered learners with their task, budget, sparse
rows and parameters, as text, JSON or the README's markdown table. It needs the learner
registry and nothing else (no data, no runner)."""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from kernelstream import learners
from kernelstream.pipelines.commands._common import Command, error
from kernelstream.pipelines.config import (
    DEFAULT_BY_ROWS,
    DEFAULT_LEARNERS,
    PROG,
    TASKS,
    loss_tasks,
    resolve_widths,
)

# the first line of the plain listing: where a new user starts
START_HERE = (f"start here: `{PROG} replay DATA` runs the default learner ("
              + "; ".join(f"{task}: " + ", ".join(f"{name} on {rows} rows"
                                                  for rows, (name, _) in by_rows.items())
                          for task, by_rows in DEFAULT_BY_ROWS.items())
              + "); docs/which-learner.md says which learner fits which data")
# the default learners, listed first (by the order START_HERE names them)
DEFAULTS = tuple(dict.fromkeys(
    [name for by_rows in DEFAULT_BY_ROWS.values() for name, _ in by_rows.values()]
    + [name for name, _ in DEFAULT_LEARNERS.values()]))
# the label of an estimated parameter's Python default on its line, which AUTO_NOTE names
MAKE_LABEL = "learners.make:"
# what the default column's "auto" means, said once under the listing
AUTO_NOTE = (f"auto: the Gaussian width gamma (and a sigmas grid centred on it) that `{PROG} "
             "replay`, `tune` and `stream` estimate from the data's first rows when it is not "
             "given (the median heuristic; -p gamma=NUMBER fixes it); the number after "
             f"\"{MAKE_LABEL}\" is the default of kernelstream.learners.make")

COMMAND = Command(
    "learners", help="list the learners and their parameters",
    description="List every registered learner (or one, or those of a task: --task, "
    "--budgeted) with its parameters, types, defaults and documentation.",
    wrap=True,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``learners``' arguments and handler."""
    p.add_argument("name", nargs="?", help="show only this learner")
    p.add_argument("--format", choices=("text", "json", "markdown"), default="text",
                   help="output format (default: text)")
    p.add_argument("--task", choices=TASKS,
                   help="only the learners that run this task (some run both, by their loss)")
    p.add_argument("--budgeted", action="store_true",
                   help="only the budgeted learners (bounded memory with their defaults)")
    p.set_defaults(handler=cmd_learners)


def _learner_tasks(name: str) -> list[str]:
    """The tasks a learner runs: its class-level ``task`` first, then any other task one of its
    ``loss`` choices gives it (``config.loss_tasks``)."""
    tasks = [learners.get(name).task]
    tasks += [t for t in dict.fromkeys(loss_tasks(name).values()) if t not in tasks]
    return tasks


def _task_label(tasks: Sequence[str]) -> str:
    """``classification`` or ``classification, regression (by loss)``."""
    return tasks[0] if len(tasks) == 1 else f"{', '.join(tasks)} (by loss)"


def _learner_info(name: str) -> dict[str, Any]:
    cls = learners.get(name)
    doc = inspect.getdoc(cls) or ""
    tasks = _learner_tasks(name)
    auto: dict[str, Any] = {}  # the widths the commands leave to the data (gamma=auto)
    resolve_widths(name, auto, lambda: 1.0)
    # what `replay DATA` (no --learner) sets when the rows choose this learner
    by_default = {k: v for rows in DEFAULT_BY_ROWS.values() for n, fixed in rows.values()
                  if n == name for k, v in fixed.items() if k != "loss"}
    return {
        "name": name,
        "summary": doc.split("\n\n", 1)[0].replace("\n", " "),
        "reference": cls.reference,
        "task": tasks,  # every task the learner runs (more than one: chosen by ``loss``)
        "default_task": cls.task,  # the task of its default parameters (class-level)
        "tasks": tasks,  # as "task" (the name of earlier versions)
        "budgeted": learners.registry.bounded(cls),
        "randomized": bool(cls.randomized),
        "sparse_rows": bool(cls.accepts_sparse),  # keeps sparse SVs for CSR rows
        "compiled": bool(cls.compiled_rounds()),  # dense rounds on the compiled kernels
        # their updates too (else the rounds call back the Python _update)
        "compiled_updates": bool(cls.compiled_updates()),
        "params": [
            {
                "name": p.name,
                "type": p.type.__name__,
                "default": p.default,  # kernelstream.learners.make's
                **({"cli_default": "auto"} if p.name in auto else {}),
                **({"replay_default": by_default[p.name]} if p.name in by_default else {}),
                "doc": p.doc,
                **({"choices": list(p.choices)} if p.choices else {}),
                **({"rule": p.rule} if p.rule else {}),
            }
            for p in cls.params
        ],
    }


def _print_learners_text(infos: list[dict[str, Any]], out: TextIO) -> None:
    for i, info in enumerate(infos):
        if i:
            print(file=out)
        flags = [_task_label(info["tasks"])] + [f for f in ("budgeted", "randomized")
                                                 if info[f]]
        flags += ["sparse rows"] if info["sparse_rows"] else []
        if info["compiled"]:
            flags += ["compiled rounds" if info["compiled_updates"]
                      else "compiled scores, Python updates"]
        print(f"{info['name']}  [{', '.join(flags)}]", file=out)
        if info["summary"]:
            print(f"  {info['summary']}", file=out)
        if info["reference"]:
            print(f"  reference: {info['reference']}", file=out)
        ps = info["params"]
        if not ps:
            print("  (no parameters)", file=out)
            continue
        cells = [(p["name"], p["type"], p.get("cli_default", repr(p["default"]))) for p in ps]
        w = [max(len(c[j]) for c in cells) for j in range(3)]
        for p, c in zip(ps, cells, strict=True):
            extra = []
            if "choices" in p:
                extra.append("one of " + ", ".join(map(str, p["choices"])))
            if "rule" in p:
                extra.append(p["rule"])
            if "cli_default" in p:  # evaluate / run_replay estimate it too; make() does not
                extra.append(f"{MAKE_LABEL} {p['default']!r}")
            if "replay_default" in p:
                extra.append(f"replay DATA without -l: {p['replay_default']}")
            doc = p["doc"] + (f" ({'; '.join(extra)})" if extra else "")
            print(f"    {c[0]:<{w[0]}}  {c[1]:<{w[1]}}  {c[2]:<{w[2]}}  {doc}", file=out)


# Parameters most kernel learners share; the markdown table lists them once in a footnote.
_SHARED_PARAMS = ("kernel", "gamma", "degree", "tie")


def _print_learners_markdown(infos: list[dict[str, Any]], out: TextIO) -> None:
    print("| learner | reference | task | budgeted | sparse rows | own parameters (default) |",
          file=out)
    print("| --- | --- | --- | --- | --- | --- |", file=out)
    for info in infos:
        ps = ", ".join(f"`{p['name']}`={p['default']!r}" for p in info["params"]
                       if p["name"] not in _SHARED_PARAMS) or "—"
        print(f"| `{info['name']}` | {info['reference']} | {_task_label(info['tasks'])} | "
              f"{'yes' if info['budgeted'] else 'no'} | "
              f"{'yes' if info['sparse_rows'] else 'no'} | {ps} |", file=out)
    print(f"\nThe last column leaves out the shared parameters {', '.join(_SHARED_PARAMS)} "
          f"(where a learner has them); `{PROG} learners NAME` shows the full signature. "
          "A task marked \"(by loss)\" is chosen by the learner's `loss` parameter.",
          file=out)


def cmd_learners(args: argparse.Namespace, argv: Sequence[str] = ()) -> int:
    if args.name:
        if args.task is not None or args.budgeted:
            return error("learners", "--task and --budgeted filter the list: give them or NAME")
        try:
            learners.get(args.name)
        except ValueError as exc:  # an unknown name: one line, exit 2
            return error("learners", str(exc))
    names = [args.name] if args.name else learners.available()
    if args.format == "text":  # the defaults first, where a new user starts
        names = ([n for n in DEFAULTS if n in names]
                 + [n for n in names if n not in DEFAULTS])
    infos = [info for info in map(_learner_info, names)
             if (args.task is None or args.task in info["task"])
             and (not args.budgeted or info["budgeted"])]
    if args.format == "json":
        print(json.dumps(infos if not args.name else infos[0], indent=2))
    elif args.format == "markdown":
        _print_learners_markdown(infos, sys.stdout)
    else:
        if not args.name:
            print(START_HERE + "\n")
        _print_learners_text(infos, sys.stdout)
        if any("cli_default" in p for info in infos for p in info["params"]):
            print(f"\n{AUTO_NOTE}")
        # the compiled kernels (C extensions): loaded to say which code runs, not by the parser
        from kernelstream.learners import compiled

        print(f"\nper-round kernels: {compiled.STATUS}")
    return 0
