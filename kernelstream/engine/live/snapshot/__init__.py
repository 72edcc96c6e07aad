"""Snapshots of a live stream: the store and its epochs (:mod:`.store`), the files of one
snapshot (:mod:`.files`) and the output files published once their snapshot commits
(:mod:`.outputs`)."""
