"""Online kernel learners: pure numpy, no Beam.

Every module of this package that defines a learner registers it with ``@register``; importing
the package imports them all, so adding a learner is adding one module (no list to edit).

>>> from kernelstream import learners
>>> m = learners.make("bogd", seed=0, budget=100, eta=0.5)
>>> "bogd" in learners.available()
True
"""

import importlib
import pkgutil

from kernelstream.learners.base import Learner, Param, state_from_bytes, state_to_bytes
from kernelstream.learners.registry import (
    WidthError,
    available,
    check_width,
    from_state,
    get,
    make,
    register,
    sparse_learners,
)

for _mod in pkgutil.iter_modules(__path__):
    if not _mod.name.startswith("_") and _mod.name != "testing":
        importlib.import_module(f"{__name__}.{_mod.name}")

__all__ = [
    "Learner",
    "Param",
    "WidthError",
    "available",
    "check_width",
    "from_state",
    "get",
    "make",
    "register",
    "sparse_learners",
    "state_from_bytes",
    "state_to_bytes",
]
