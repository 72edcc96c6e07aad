"""The replay engine: a data set replayed as permuted streams, block by block.

Keys and blocks (:mod:`.blocks`), the block sources (:mod:`.sources` in memory, :mod:`.chunks`
from file chunks), the learner of one stream (:mod:`.core`), early blocks parked until their
turn (:mod:`.ordering`), metrics (:mod:`.metrics`), the output tables (:mod:`.outputs`) and the
checkpoints of a resumable replay (:mod:`.checkpoints`). No Beam: the runners drive it.
"""
