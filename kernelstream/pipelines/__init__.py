"""Runners and the command line: :mod:`.config` (what a run is), :mod:`.replay` (a replay run,
its runners and the Beam pipeline), :mod:`.live` (the live stream's launcher), :mod:`.cli`
(``kernelstream``: the parser and main) and :mod:`.commands` (one module per command)."""
