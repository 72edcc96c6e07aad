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


def _seed_int(s: Any) -> int | None:
    """``s`` as a non-negative int, or None when it is not one (bools, floats and strings are
    not seeds: ``"12"`` would otherwise be read as the sequence ``[1, 2]``)."""
    if isinstance(s, (int, np.integer)) and not isinstance(s, (bool, np.bool_)) and s >= 0:
        return int(s)
    return None


def check_seed(seed: Any, who: str) -> Seed:
    """``seed`` as a :data:`Seed` (an int >= 0 or a non-empty sequence of them), or a
    ValueError naming ``who``."""
    v = _seed_int(seed)
    if v is not None:
        return v
    if isinstance(seed, (list, tuple, np.ndarray)) and len(seed) > 0:
        vs = [_seed_int(s) for s in seed]
        if all(s is not None for s in vs):
            return tuple(s for s in vs if s is not None)
    raise ValueError(f"{who}: seed must be an int >= 0 or a non-empty sequence of them, "
                     f"got {seed!r}")


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
