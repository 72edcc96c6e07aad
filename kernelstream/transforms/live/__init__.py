"""Beam transforms of the live stream (``kernelstream stream``): the Kafka reader over
partition groups, the stream graph and job, output rows to Kafka and the committer of output
files and snapshots."""
