"""The pieces of a learner's state that are not the learner's own: seeds, RNG, bytes.

:meth:`~kernelstream.learners.base.Learner.get_state` stores the seed as JSON and the PCG64
generator as six ``uint64`` words (:func:`_rng_to_array`, :func:`_rng_from_array`), so a
restored learner draws the very numbers the original would have; :func:`state_to_bytes` and
:func:`state_from_bytes` pack the flat dict of arrays as an uncompressed ``.npz`` (numpy's own
format, never pickle), as checkpoints and the stream state store it. :data:`STATE_VERSION` is
the layout version every state carries.

Kept apart from :mod:`kernelstream.learners.base` because it is the format, not the interface:
it changes only with :data:`STATE_VERSION`, and its helpers need no learner. ``base``
re-exports every name.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import numpy as np

STATE_VERSION = 1

Seed = int | Sequence[int]


def _seed_seq(seed: Seed) -> np.random.SeedSequence:
    if isinstance(seed, (int, np.integer)):
        return np.random.SeedSequence(int(seed))
    return np.random.SeedSequence([int(s) for s in seed])


def _seed_json(seed: Seed) -> Any:
    return int(seed) if isinstance(seed, (int, np.integer)) else [int(s) for s in seed]


def _seed_from_json(v: Any) -> Seed:
    return v if isinstance(v, int) else tuple(v)


_M64 = (1 << 64) - 1


def _rng_to_array(rng: np.random.Generator) -> np.ndarray:
    st = rng.bit_generator.state
    s, inc = st["state"]["state"], st["state"]["inc"]
    return np.array(
        [s >> 64, s & _M64, inc >> 64, inc & _M64, st["has_uint32"], st["uinteger"]],
        dtype=np.uint64,
    )


def _rng_from_array(rng: np.random.Generator, a: np.ndarray) -> None:
    v = [int(x) for x in a]
    rng.bit_generator.state = {
        "bit_generator": "PCG64",
        "state": {"state": (v[0] << 64) | v[1], "inc": (v[2] << 64) | v[3]},
        "has_uint32": v[4],
        "uinteger": v[5],
    }


def state_to_bytes(state: dict[str, np.ndarray]) -> bytes:
    """Pack a learner state as an uncompressed ``.npz`` (numpy's own format, no pickle)."""
    buf = io.BytesIO()
    # Any values: numpy's stub types savez's **kwds like its allow_pickle keyword (bool)
    arrays: dict[str, Any] = state
    np.savez(buf, **arrays)
    return buf.getvalue()


def state_from_bytes(data: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def state_nbytes(state: dict[str, np.ndarray]) -> int:
    return sum(v.nbytes for v in state.values())
