"""The live engine of ``kernelstream stream``: events and labels from Kafka, predicted on
arrival and learned when their label comes.

The engine (:mod:`.engine`; the runs of records it learns at once, :mod:`.runs`), the parsing
of records (:mod:`.parsing`), their routing (:mod:`.routing`) and the containers of routed
records (:mod:`.batch`), a model's state and its encoding (:mod:`.state`), the output rows
(:mod:`.rows`), the records and their merge in event-time order (:mod:`.records`,
:mod:`.merge`), the run's accounting (:mod:`.accounting`) and the snapshots a run resumes
from (:mod:`.snapshot`). No Beam: ``kernelstream.transforms.live`` runs it.
"""
