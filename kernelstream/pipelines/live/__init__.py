"""The live stream's launcher (:mod:`.stream`): its options (:mod:`.stream_config`), up-front
checks (:mod:`.stream_prepare`), stop signals (:mod:`.stream_monitor`) and summary
(:mod:`.stream_summary`)."""
