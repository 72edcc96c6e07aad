"""Online kernel learners: pure numpy, no Beam.

>>> from kernelstream import learners
>>> m = learners.make("bogd", seed=0, budget=100, eta=0.5)
>>> "bogd" in learners.available()
True
"""

from kernelstream.learners import (  # noqa: F401  (registers)
    bogd,
    bpas,
    fogd,
    forgetron,
    nogd,
    ogd,
    pa,
    perceptron,
    projectron,
    rbp,
)
from kernelstream.learners.base import Learner, Param, state_from_bytes, state_to_bytes
from kernelstream.learners.registry import available, get, make, register

__all__ = [
    "Learner",
    "Param",
    "available",
    "get",
    "make",
    "register",
    "state_from_bytes",
    "state_to_bytes",
]
