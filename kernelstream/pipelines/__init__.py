"""Runners and the command line: :mod:`.config` (what a run is), :mod:`.replay` (a replay run
and its runners, no Beam), :mod:`.beam_replay` (the Beam pipeline), :mod:`.cli`
(``kernelstream``: the parser and main) and :mod:`.commands` (one module per command)."""
