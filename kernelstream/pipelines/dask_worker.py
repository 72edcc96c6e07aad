"""Preloaded by the workers of ``--runner dask``'s local cluster (``dask worker --preload
kernelstream.pipelines.dask_worker`` does the same on a cluster of one's own): Beam's import
warning about BigQuery's absent client dropped, as the CLI does, and the replay's modules
(Beam, the engine, the learners) imported as the worker starts rather than by its first
task."""

from __future__ import annotations

import logging

from kernelstream.pipelines.cli import _BeamImportNoise

if not any(isinstance(f, _BeamImportNoise) for f in logging.getLogger().filters):
    logging.getLogger().addFilter(_BeamImportNoise())  # before Beam is imported

import kernelstream.pipelines.dask_replay  # noqa: F401  (Beam and the replay)
