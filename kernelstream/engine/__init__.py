"""The Beam-free prequential core: the one test-then-train engine every runner drives.

Nothing in this package imports Apache Beam. The Beam transforms (``kernelstream.transforms``)
hold only state, coders and timers around it; the loop runner and the reference loop of a
live stream drive it directly.
"""
