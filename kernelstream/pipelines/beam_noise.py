"""The log filter that drops the warning Beam logs on import about Google's optional API
client: the CLI installs it before any command imports Beam, and the tuning grid's pool
processes, which import Beam without the CLI, install it too."""

from __future__ import annotations

import logging


class BeamImportNoise(logging.Filter):
    """Drops the warning Beam logs on import when Google's optional API client is absent
    ("apitools not found, and bigquery client libraries are not available ..."): it concerns
    BigQuery only and would otherwise open every command's output."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not ("apache_beam" in record.pathname
                    and str(record.msg).startswith("apitools not found"))


def quiet_beam_import() -> None:
    """Add :class:`BeamImportNoise` to the root logger (once)."""
    root = logging.getLogger()
    if not any(isinstance(f, BeamImportNoise) for f in root.filters):
        root.addFilter(BeamImportNoise())
