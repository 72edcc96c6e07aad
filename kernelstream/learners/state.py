"""The pieces of a learner's state that are not the learner's own: seeds, RNG, bytes.

:meth:`~kernelstream.learners.base.Learner.get_state` stores the seed as JSON and the PCG64
generator as six ``uint64`` words (:func:`_rng_to_array`, :func:`_rng_from_array`), so a
restored learner draws the very numbers the original would have; :func:`state_to_bytes` and
:func:`state_from_bytes` pack the flat dict of arrays as an uncompressed ``.npz`` (numpy's own
format, never pickle), as checkpoints and the stream state store it. :data:`STATE_VERSION` is
the layout version every state carries. :func:`check_header`, :func:`check_layout` and
:func:`check_seed` are the checks ``set_state`` runs before it restores anything.

Kept apart from :mod:`kernelstream.learners.base` because it is the format, not the interface:
it changes only with :data:`STATE_VERSION`, and its helpers need no learner. ``base``
re-exports every name.
"""

from __future__ import annotations

import io
import json
import math
import zipfile
from collections.abc import Sequence
from typing import Any, NamedTuple

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
    # anything but a zip (an .npz) numpy would try as .npy or pickle: "allow_pickle", EOFError
    try:
        if bytes(data[:2]) != b"PK":
            raise zipfile.BadZipFile
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (zipfile.BadZipFile, EOFError, OSError):
        raise ValueError("not a kernelstream learner state (an .npz archive of "
                         "state_to_bytes)") from None


def state_nbytes(state: dict[str, np.ndarray]) -> int:
    return sum(v.nbytes for v in state.values())


# -- checks of a state before it is restored (Learner.set_state) -------------------------------
Layout = dict[str, tuple[np.dtype[Any], tuple[int, ...]]]  # entry -> (dtype, shape)
_HEADER = ("__learner__", "__version__", "__params__", "__seed__", "__rng__", "__dim__", "__t__")


class Header(NamedTuple):
    """The checked entries every state has (:func:`check_header`)."""

    params: dict[str, Any]
    seed: Seed
    dim: int  # -1: before the first example
    t: int
    rng: np.ndarray
    sparse: bool


def state_name(state: Any, who: str = "") -> str:
    """The learner name a state holds, or a ValueError (prefixed with ``who``)."""
    if not isinstance(state, dict) or "__learner__" not in state:
        raise ValueError(f"{who + ': ' if who else ''}not a learner state: a dict of arrays "
                         "with a '__learner__' entry (Learner.get_state) is expected")
    return str(state["__learner__"])


def _array(state: dict[str, Any], key: str, who: str) -> np.ndarray:
    v = state[key]
    if not isinstance(v, np.ndarray):
        raise ValueError(f"{who}: state[{key!r}] is a {type(v).__name__}, not a numpy array")
    return v


def check_shape(key: str, a: np.ndarray, shape: tuple[int | None, ...]) -> None:
    """A ValueError naming ``key`` unless ``a`` has ``shape`` (None: any size along that axis):
    for a ``_set_state`` whose sizes follow from the parameters (set_state adds the learner's
    name). Only at restore: a mis-sized array would fail later, in a round, with a raw error."""
    if a.ndim != len(shape) or any(w is not None and g != w
                                   for g, w in zip(a.shape, shape, strict=True)):
        want = "x".join("n" if w is None else str(w) for w in shape) or "scalar"
        raise ValueError(f"state[{key!r}] has shape {a.shape}, expected {want} (for this "
                         "learner's parameters)")


def check_ints(key: str, a: np.ndarray, lo: int, hi: int) -> None:
    """A ValueError naming ``key`` unless every entry of ``a`` lies in ``[lo, hi)``."""
    if a.size and (int(a.min()) < lo or int(a.max()) >= hi):
        raise ValueError(f"state[{key!r}] has entries outside [{lo}, {hi})")


def check_reals(key: str, a: Any, lo: float = -math.inf, hi: float = math.inf) -> None:
    """A ValueError naming ``key`` unless every entry of ``a`` is finite and in ``[lo, hi]``
    (for values a learner cannot hold: a NaN width loops, an overflowing weight raises)."""
    v = np.asarray(a, dtype=np.float64)
    if not (np.all(np.isfinite(v)) and np.all(v >= lo) and np.all(v <= hi)):
        raise ValueError(f"state[{key!r}] must be finite numbers in [{lo:g}, {hi:g}]")


def _scalar(state: dict[str, Any], key: str, who: str, kinds: str) -> Any:
    v = _array(state, key, who)
    if v.shape != () or v.dtype.kind not in kinds:
        raise ValueError(f"{who}: state[{key!r}] must be a scalar of kind {kinds!r}, got "
                         f"{v.dtype}{v.shape}")
    return v.item()


def _json(state: dict[str, Any], key: str, who: str) -> Any:
    try:
        return json.loads(_scalar(state, key, who, "U"))
    except ValueError as e:
        raise ValueError(f"{who}: state[{key!r}] must be a JSON string ({e})") from None


def check_header(state: Any, who: str) -> Header:
    """The header of a state for learner ``who``, checked: its name, version, parameters (a
    JSON object), seed, width and rounds (``__dim__`` >= 1, or -1 with no round yet), RNG (six
    uint64 words). Every rejection is a ValueError naming ``who`` and the entry."""
    name = state_name(state, who)
    if name != who:
        raise ValueError(f"state belongs to learner {name!r}, not {who!r}")
    for k in _HEADER:
        if k not in state:
            raise ValueError(f"{who}: state misses {k!r}")
    version = _scalar(state, "__version__", who, "iu")
    if version != STATE_VERSION:
        raise ValueError(f"unsupported state version {version} (this build reads "
                         f"{STATE_VERSION})")
    params, seed = _json(state, "__params__", who), _json(state, "__seed__", who)
    if not isinstance(params, dict):
        raise ValueError(f"{who}: state['__params__'] is not a JSON object")
    seed = check_seed(_seed_from_json(seed) if isinstance(seed, (int, list)) else seed,
                      f"{who}: state['__seed__']")
    d, t = _scalar(state, "__dim__", who, "iu"), _scalar(state, "__t__", who, "iu")
    if d < -1 or d == 0 or t < 0 or (d < 0 and t > 0):
        raise ValueError(f"{who}: state has __dim__={d}, __t__={t} (a width >= 1, or -1 "
                         "before the first example; rounds >= 0)")
    rng = _array(state, "__rng__", who)
    if rng.dtype != np.uint64 or rng.shape != (6,):
        raise ValueError(f"{who}: state['__rng__'] must be 6 uint64 words, got "
                         f"{rng.dtype}{rng.shape}")
    sparse = bool(_scalar(state, "__sparse__", who, "b")) if "__sparse__" in state else False
    return Header(params, seed, int(d), int(t), rng, sparse)


def check_layout(who: str, want: Layout, state: dict[str, Any],
                 legacy: frozenset[str]) -> None:
    """The entries ``state`` shares with the learner's own layout ``want`` (dtype and shape of
    each array before its first round) have its dtypes, ranks and sizes along every axis
    longer than 1 there (the width, the hyper-parameters' sizes; the others grow with the
    stream: rows stored, an index pointer's n + 1); ``legacy`` entries only its dtypes. A
    missing entry is ``_set_state``'s to report (some are read in one of two layouts).

    Entries outside ``want`` are ignored, not refused: ``want`` is the layout before the first
    round, and some learners store other entries later (``skegd``'s sketch replaces its
    kernel matrix once built), so an extra entry cannot be told from a later phase's here; a
    change of the format itself bumps :data:`STATE_VERSION`, which :func:`check_header`
    refuses."""
    for k, (dtype, want_shape) in want.items():
        if k not in state:
            continue
        g = _array(state, k, who)
        if g.dtype != dtype:
            raise ValueError(f"{who}: state[{k!r}] has dtype {g.dtype}, expected {dtype}")
        if k not in legacy and (g.ndim != len(want_shape)
                                or any(b > 1 and a != b for a, b in zip(g.shape, want_shape,
                                                                         strict=True))):
            shape = "x".join(str(b) if b > 1 else "n" for b in want_shape) or "scalar"
            raise ValueError(f"{who}: state[{k!r}] has shape {g.shape}, expected {shape} "
                             "(for this learner's parameters and width)")
