"""kernelstream: online kernel learning on data streams, run by Apache Beam."""

__version__ = "0.1.0"
