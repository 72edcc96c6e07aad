"""Runners and the command line: :mod:`.config` (what a run is), :mod:`.cli` (``kernelstream``)."""
