"""Numbers for people: losses and rates that never print as ``0.0000``.

A fixed number of decimals hides small values (a loss of 8.2e-07 printed as ``0.0000``);
:func:`sig` keeps two decimals from 1 up (``26.67``, ``9.71``, ``1234.57``: what rates in
percent and most losses printed before) up to a million, exponent form beyond
(``6.09e+130``, a diverged learner's loss), and significant digits below 1 (``0.983``,
``0.0123``, ``8.2e-07``).
"""

from __future__ import annotations

import math

# From here up, ``digits`` significant digits in exponent form (``1.23e+07``): two decimals of
# a diverged learner's loss printed 130 digits.
LARGE = 1e6


def sig(v: float | None, digits: int = 3) -> str:
    """``v`` for a table or a message: two decimals when ``1 <= |v| <`` :data:`LARGE`, above
    that ``digits`` significant digits in exponent form (``6.09e+130``); below 1 ``digits``
    significant digits (``0.0123``), in exponent form below 1e-4 (``8.2e-07``, trailing zeros
    dropped); ``0`` for zero, ``-`` for None, ``nan``/``inf`` as Python prints them."""
    if v is None:
        return "-"
    v = float(v)
    if v == 0.0:
        return "0"
    if not math.isfinite(v):
        return str(v)
    a = abs(v)
    if a >= LARGE:  # a diverged loss: 6.09e+130, not its 130 digits
        return format(v, f".{digits}g")
    if a >= 0.9995:  # rounds to 1.00 or more: decimals
        return f"{v:.2f}"
    if a < 1e-4:
        return format(v, f".{digits}g")
    return format(v, f".{digits}g")


# A std below this fraction of its mean is the floating-point noise of summing equal values
# (e.g. a no-skill rate the same in every permutation: std 4.35e-15), not a spread.
_NOISE = 1e-12


def sig_pm(mean: float | None, std: float | None, digits: int = 3) -> str:
    """``mean ± std`` with :func:`sig` (``-`` without a mean); a std within rounding noise of
    the mean prints as ``0``. When the mean has two decimals, so has the std (``28.90 ± 0.70``
    beside ``33.00 ± 1.20``, not ``± 0.7``), unless that rounds a spread to ``0.00``."""
    if mean is None:
        return "-"
    if std is not None and math.isfinite(mean) and abs(std) <= _NOISE * abs(mean):
        std = 0.0
    s = float(std or 0.0)
    if (s and math.isfinite(mean) and 0.9995 <= abs(mean) < LARGE
            and 0.005 <= abs(s) < LARGE):
        return f"{sig(mean, digits)} ± {s:.2f}"
    return f"{sig(mean, digits)} ± {sig(s, digits)}"
