"""The Dataflow Flex Template's launcher program (``FLEX_TEMPLATE_PYTHON_PY_FILE``).

Dataflow's template launcher runs ``python launch.py --data=... --out=... [the parameters of
metadata.json] [pipeline options: --project, --region, --temp_location, --job_name, ...]``.
This turns the parameters into a ``kernelstream replay ... --runner beam --submit-only``
command line with the pipeline options after ``--``, and runs it: the job is submitted and the
launcher exits (a Flex Template launcher must not wait for the job). ``kernelstream summary
OUT`` writes summary.json once the job has finished.

Plain Python, no dependency beyond kernelstream: ``replay_argv`` is tested in
``tests/deploy/test_deploy_files.py`` against metadata.json's parameters.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence

# metadata.json's parameters; each list-valued one is split on commas into repeated options
PARAMETERS = {
    "data": None,  # positional
    "out": "--out",
    "learners": "--learner",
    "params": "-p",
    "permutations": "--permutations",
    "seed": "--seed",
    "limit": "--limit",
    "n_features": "--n-features",
    "replay_options": None,  # split as a shell command line
}
REPEATED = ("learners", "params")
# options every Dataflow launch of the replay needs; the launcher's own options win
DATAFLOW_DEFAULTS = ("--runner=DataflowRunner", "--sdk_location=container",
                     "--experiments=use_runner_v2")


def replay_argv(argv: Sequence[str]) -> list[str]:
    """The ``kernelstream`` command line of the template's arguments ``argv``."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for name in PARAMETERS:
        parser.add_argument(f"--{name}", required=name in ("data", "out"))
    args, beam = parser.parse_known_args(list(argv))
    out = ["replay", args.data]
    for name, flag in PARAMETERS.items():
        value = getattr(args, name)
        if flag is None or value in (None, ""):
            continue
        values = [v.strip() for v in value.split(",")] if name in REPEATED else [value]
        for v in values:
            out += [flag, v]
    if args.replay_options:
        out += shlex.split(args.replay_options)
    given = {a.split("=", 1)[0] for a in beam}
    defaults = [d for d in DATAFLOW_DEFAULTS if d.split("=", 1)[0] not in given]
    return [*out, "--runner", "beam", "--submit-only", "-q", "--", *defaults, *beam]


def main(argv: Sequence[str] | None = None) -> int:
    from kernelstream.pipelines import cli

    return cli.main(replay_argv(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
