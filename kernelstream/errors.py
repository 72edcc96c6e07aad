"""The errors kernelstream reports to its user: each one's message is the one line the command
prints (exit code 2 unless said otherwise), never a traceback.

They are defined here, in a module that imports nothing, so that every layer raises them and
the commands catch them without importing each other. Errors that concern one mechanism only
(a corrupt snapshot, a broker that does not start, the Kafka offsets of a log) stay with it.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """An invalid run configuration: options that contradict each other or the data, an unknown
    learner, a bad parameter (``pipelines.config``, each command's ``from_args``)."""


class DataError(ValueError):
    """The data of a run cannot be read (missing file, parse error, unusable contents). Runners
    raise it for anything that goes wrong while reading, so the CLI can tell data problems
    (exit 2) from failures during learning."""


class WorkerError(Exception):
    """A worker process of ``replay --workers`` (``pipelines.replay.workers``) failed: ``code``
    is the exit code the run ends with, ``lines`` what to print on stderr (the worker's own
    error line where it wrote one)."""

    def __init__(self, code: int, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.code = code
        self.lines = lines


class WidthError(ValueError):
    """A learner cannot run at the given width / budget: the memory it needs does not fit
    (``learners.registry.check_width``). The message says why and what to use instead."""


class OutFolderError(ValueError):
    """An output folder a run may not write into (``pipelines.run_folder``): it holds something
    that is not a kernelstream run, or a run that ``--overwrite`` was not given for."""


class ReportError(ValueError):
    """An input ``kernelstream report`` cannot use: neither a run folder nor a results file
    (``kernelstream.report``)."""


class ProtocolError(ValueError):
    """A reproduction cannot run as asked: a missing tuned file, an unknown table or data set
    (``experiments.protocol``)."""


class TunedFileError(ValueError):
    """A ``--params-from`` file that cannot be used (``experiments.tuning``)."""


class FileChangedError(ValueError):
    """The input file of a run changed while the run read it (its size or modification time
    differ from the run's start): its readers would see different rows
    (``data.stamp``)."""
