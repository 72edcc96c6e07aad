"""The log filter that drops the warning Beam logs on import about Google's optional API
client, and gRPC's own C-core log lines: the CLI installs both before any command imports
Beam, and the tuning grid's pool processes, which import Beam without the CLI, do too."""

from __future__ import annotations

import logging
import os


class BeamImportNoise(logging.Filter):
    """Drops the warning Beam logs on import when Google's optional API client is absent
    ("apitools not found, and bigquery client libraries are not available ..."): it concerns
    BigQuery only and would otherwise open every command's output."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not ("apache_beam" in record.pathname
                    and str(record.msg).startswith("apitools not found"))


def quiet_beam_import() -> None:
    """Add :class:`BeamImportNoise` to the root logger (once), and silence gRPC's C core
    unless the user set ``GRPC_VERBOSITY``: Beam's in-process runner talks to its workers
    over gRPC, and a run stopped by Ctrl-C could print a core line such as
    ``E1128 ... ev_epoll1_linux.cc:373] ... epoll_wait error: Bad file descriptor`` after
    the command's own message. A real gRPC failure still ends the run as a Python error."""
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")  # read when gRPC's core starts
    root = logging.getLogger()
    if not any(isinstance(f, BeamImportNoise) for f in root.filters):
        root.addFilter(BeamImportNoise())
