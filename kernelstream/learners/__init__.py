"""Online kernel learners: pure numpy, no Beam.

Every module of this package that defines a learner registers it with ``@register``; the
registry imports them all the first time a learner is looked up (``make``, ``get``,
``available``, ...), so adding a learner is adding one module (no list to edit), and importing
the package itself is cheap: it loads no learner module (:mod:`~kernelstream.learners.registry`).

>>> from kernelstream import learners
>>> m = learners.make("bogd", seed=0, budget=100, eta=0.5)
>>> "bogd" in learners.available()
True
"""

from kernelstream.learners.base import Learner, Param, state_from_bytes, state_to_bytes
from kernelstream.learners.registry import (
    available,
    check_width,
    from_state,
    get,
    make,
    register,
    sparse_learners,
)

__all__ = [
    "Learner",
    "Param",
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
