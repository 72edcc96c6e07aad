"""Experiment protocols: tuning and the papers' reproductions."""
