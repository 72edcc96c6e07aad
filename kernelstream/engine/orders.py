"""Synthetic stream orders built from a data set: the adversarial streams of
Zhang & Liao, ICML 2019 (§6.4, Table 4).

An adversarial stream has ``n_blocks`` blocks of ``block_len`` rounds. Each block draws one
example of the data set uniformly at random (with replacement, (recon)) and presents it
``block_len`` times in a row; on even blocks (the 2nd, 4th, … — 1-based, as in the paper) its
label is multiplied by −1. The presets reproduce the paper's streams built from ``german``:

* ``german-1``: 500 blocks × 10 rounds (T = 5,000);
* ``german-2``: 500 blocks × 20 rounds (T = 10,000).

They are named after the paper but apply to any data set.

Evaluation (:func:`evaluate_stream`): repetition ``r`` builds its own stream from the seed
``(seed, r, stream tag)`` and runs a fresh learner seeded with ``learner_seed(seed, r, name)``
(:mod:`kernelstream.seeding`) over it in stream order — the stream is *not* permuted (that would
destroy its structure). ``kernelstream replay --stream german-1`` uses it.

>>> import numpy as np
>>> X = np.arange(10.0).reshape(5, 2); y = np.array([1.0, -1, 1, -1, 1])
>>> Xs, ys = adversarial_stream(X, y, n_blocks=3, block_len=2, seed=0)
>>> Xs.shape, ys.shape
((6, 2), (6,))
>>> bool(np.all(Xs[0] == Xs[1]) and ys[0] == ys[1])  # a block repeats one example
True
>>> i = int(Xs[2, 0] // 2)  # row i of X is (2i, 2i + 1); block 2 has its label negated
>>> bool(ys[2] == -y[i] and ys[0] == y[int(Xs[0, 0] // 2)])
True
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from kernelstream._suggest import row_error
from kernelstream.data import widths
from kernelstream.data.errors import SCALES
from kernelstream.engine.evaluate import block_progress, evaluate_runs, warn_skill
from kernelstream.engine.learner_config import learner_config
from kernelstream.numbers import sig

if TYPE_CHECKING:
    from kernelstream.engine.evaluate import EvalResult, Stream
    from kernelstream.engine.learner_config import LearnerConfig


@dataclass(frozen=True)
class StreamPreset:
    """A named adversarial stream: ``n_blocks`` blocks of ``block_len`` repeated rounds."""

    name: str
    n_blocks: int
    block_len: int
    doc: str

    @property
    def length(self) -> int:
        return self.n_blocks * self.block_len


PRESETS: dict[str, StreamPreset] = {
    p.name: p
    for p in (
        StreamPreset("german-1", 500, 10,
                     "Zhang & Liao, ICML 2019, german-1: k_b = 500 blocks of k_r = 10"),
        StreamPreset("german-2", 500, 20,
                     "Zhang & Liao, ICML 2019, german-2: k_b = 500 blocks of k_r = 20"),
    )
}
STREAMS = ("none", *PRESETS)  # choices of ``kernelstream replay --stream``
STREAM_BLOCK = 1024  # rows per predict_learn_many call of a stream (a replay's block_size)

_TAG = zlib.crc32(b"adversarial-stream")  # keeps stream draws apart from the permutations


def adversarial_stream(X: Any, y: Any, n_blocks: int, block_len: int,
                       seed: int | Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """The adversarial stream (Zhang & Liao, ICML 2019, §6.4) as arrays ``(X_s, y_s)`` of
    ``n_blocks·block_len`` rows.

    Block ``b = 1..n_blocks`` repeats one example drawn uniformly with replacement; the labels of
    even blocks are negated. ``seed`` (an int or a sequence of ints) seeds a
    ``numpy.random.SeedSequence``; the draw does not depend on anything else.
    """
    try:
        Xa = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError) as exc:  # rows as dicts: say what is expected
        raise row_error("adversarial_stream", X, many=True) or exc from None
    ya = np.asarray(y, dtype=np.float64).reshape(-1)
    if Xa.ndim != 2:
        raise ValueError(f"X must be a 2-D array, got shape {Xa.shape}")
    n = Xa.shape[0]
    if ya.shape[0] != n:
        raise ValueError(f"X has {n} rows but y has {ya.shape[0]} labels")
    if n == 0:
        raise ValueError("cannot build a stream from an empty data set")
    if n_blocks < 1 or block_len < 1:
        raise ValueError(f"n_blocks and block_len must be >= 1, got {n_blocks}, {block_len}")
    ss = np.random.SeedSequence(seed if isinstance(seed, (int, np.integer))
                                else [int(s) for s in seed])
    rng = np.random.Generator(np.random.PCG64(ss))
    picks = rng.integers(0, n, size=n_blocks)
    rows = np.repeat(picks, block_len)
    flip = np.where(np.arange(n_blocks) % 2 == 1, -1.0, 1.0)  # 0-based odd = 1-based even
    return np.ascontiguousarray(Xa[rows]), ya[rows] * np.repeat(flip, block_len)


def preset_stream(name: str, X: Any, y: Any, seed: int,
                  r: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Stream ``name`` (a key of :data:`PRESETS`) of repetition ``r`` under base seed ``seed``."""
    try:
        p = PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown stream {name!r}; valid streams: {', '.join(PRESETS)}") from None
    return adversarial_stream(X, y, p.n_blocks, p.block_len, seed=(int(seed), int(r), _TAG))


def evaluate_stream(
    X: Any,
    y: Any,
    stream: str,
    learner: str | LearnerConfig,
    params: Mapping[str, Any] | None = None,
    *,
    seed: int = 0,
    permutations: int = 1,
    progress: Callable[[str], None] | None = None,
    scale: str = "none",
    warn: bool = True,
    progress_interval: float = 2.0,
) -> EvalResult:
    """Prequential evaluation on adversarial streams: repetition ``r`` runs a fresh learner
    (seed ``learner_seed(seed, r, seed_name)``) over ``preset_stream(stream, X, y, seed, r)`` in
    stream order. Same metrics and result type as :func:`kernelstream.engine.evaluate.evaluate`
    (``PermutationResult.permutation`` holds ``r``). ``learner``: a registry name (with
    ``params``) or a :class:`~kernelstream.engine.learner_config.LearnerConfig` (its label and
    seed name).

    Gaussian widths left to the data (``gamma`` unset or ``"auto"``) are estimated as
    :func:`~kernelstream.engine.evaluate.evaluate` estimates them, from the first rows of ``X``
    in its own order (``scale``: how ``X`` was loaded), as ``kernelstream replay --stream``
    does from its file; the number learnt with is in the result's ``params``. The result's
    skill warnings are issued as ``evaluate`` issues them (``warn=False``: only kept in
    :attr:`EvalResult.warnings`, for a caller that prints them its own way, as the CLI).
    ``progress`` gets ``evaluate``'s line during a repetition, at most every
    ``progress_interval`` seconds, and one line at its end."""
    during = block_progress(progress, permutations, progress_interval)

    def report(r: int, result: EvalResult) -> None:
        if progress is not None:
            last = result.runs[-1]  # a regression has no mistakes: its average loss
            figure = (f"{sig(last.mistake_rate)}% mistakes" if last.mistake_rate is not None
                      else f"{result.loss} loss {sig(last.avg_loss)}")
            progress(f"[{result.label}] stream {stream} {r + 1}/{permutations}: {figure}")

    def build(r: int) -> Stream:
        Xs, ys = preset_stream(stream, X, y, seed, r)
        return Xs, ys, None

    # blocks of STREAM_BLOCK rows, for the progress lines between them (the scores are the
    # same in any blocks: the engine learns row by row)
    if scale not in SCALES:  # how X was loaded: "auto" was decided by then
        raise ValueError(f"scale must be one of {', '.join(SCALES)}, got {scale!r}")
    try:  # dense rows, as the streams are built (the width estimate reads them first)
        X = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError) as exc:  # rows as dicts: say what is expected
        raise row_error("evaluate_stream", X, many=True) or exc from None
    config = learner_config(learner, params).with_widths(lambda: widths.array_gamma(X, scale))
    result = evaluate_runs(build, config, seed=seed, permutations=permutations,
                           block_size=STREAM_BLOCK, on_block=during, on_run=report)
    if warn:
        warn_skill(result)
    return result
