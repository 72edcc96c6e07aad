"""Kafka topics without Beam (kafka-python): topic URLs, client settings, reading a topic's
records, turning them into blocks, and writing output rows as messages.

The Beam transforms (``kernelstream.transforms.replay.kafka``, ``transforms.live.kafka_read``) and
the loop runner both use these. The package is split by concern, and every name below can be
imported from the package itself.

The package is the seam to the Kafka client: importing it loads none of its modules (nor
kafka-python), and each name loads its module on first use. So a module that reaches Kafka only
on some paths imports the package at its top (``from kernelstream import kafka_client``) and
writes ``kafka_client.NAME`` where it needs it: a file's replay and ``check`` never load the
client (``tests/engine/replay/test_engine.py``).

* :mod:`~kernelstream.kafka_client.clients`: topic URLs (:class:`KafkaTopic`), client
  settings, consumers, :func:`check_reachable`, the local test brokers (:func:`local_broker`:
  tansu; :func:`apache_broker`: Apache Kafka from its Maven jars,
  :mod:`~kernelstream.kafka_client.apache`);
* :mod:`~kernelstream.kafka_client.bounded`: the bounded read of one topic
  (:func:`iter_topic_records`, :class:`KafkaReadOptions`, :func:`snapshot_ends`);
* :mod:`~kernelstream.kafka_client.blocks`: records → blocks and dead letters
  (:class:`KafkaBlocks`, :class:`SourcePosition`);
* :mod:`~kernelstream.kafka_client.sink`: output rows as messages (:class:`KafkaWriter`);
* :mod:`~kernelstream.kafka_client.partitions`: a live stream's partition groups
  (:func:`kafka_partition_info`, :func:`partition_groups`);
* :mod:`~kernelstream.kafka_client.confluent`: the live stream reader's consumer over
  confluent-kafka (librdkafka) and the choice of client (``reader_consumer``, which only
  the stream reader imports; :func:`check_confluent` is named here, loaded on first use).

Reading: :func:`iter_topic_records` and :class:`KafkaBlocks`
    One message is one example: its value is one line in the LIBSVM (default) or CSV
    (``fmt="csv"``) format of a data file (``"+1 3:0.5 7:1"``, ``"0.1,0.7,1"``), so a file
    can be replayed onto a topic line by line. The topic is read from its beginning up to the
    end offsets of a snapshot taken when the run starts (a *bounded* read: a replay of the
    topic; see :func:`snapshot_ends` and :class:`KafkaReadOptions`) and cut into
    :class:`~kernelstream.engine.replay.blocks.Block` s, as the file readers do, so everything
    downstream is the same.

    * Order. Kafka orders records within a partition only. With ``key_by="key"`` each entity
      (message key) has its own model and stream, in its partition's offset order (all records
      of a key are in one partition with Kafka's default partitioner). Without ``key_by`` there
      is one stream over the whole topic; records of several partitions are merged by
      ``(timestamp, partition, offset)``, an order that depends only on the topic's contents,
      so a replay is reproducible.
    * What the stream cannot know in advance. A file reader scans its file first; a stream is
      read once, so the LIBSVM feature dimension must be given (``n_features``; CSV rows take
      the width of the first valid row), min-max scaling can only use the ranges of the first
      rows (``--scale auto``: ``ReadOptions.scale_ranges``, fitted before the run by
      ``pipelines.replay.topic_head.topic_head`` over :func:`head_rows`), and labels are
      mapped as they arrive: ``positive_label`` names the +1 class (the first other label seen
      is -1), or without it numeric -1/0 are -1 and 1 is +1 (as ``data.LabelMap`` does for a
      one-class file).
    * Bad messages (unparsable value, wrong width, a third label class, a missing key) become
      dead letters with the topic and partition as ``source`` and the message offset as
      ``line``; nothing is dropped.
    * Row ids: ``partition * 2**48 + offset``, unique within the topic.

Writing: :class:`KafkaWriter`
    Writes the rows of an output (predictions, metrics or dead letters) as JSON objects (the
    Parquet schema's field names; NaN as null). The message key is the row's identity
    (:func:`row_id`: ``STREAMKEY/p/POSITION``, ``STREAMKEY/m/WINDOW_END``, ...), the same
    in every run that writes the row, so a retried run's duplicates carry the same key and can
    be dropped by key. The partition is the one Kafka's default partitioner gives the entity
    (else the stream key, else the source), so one entity's rows stay in order in one
    partition although their keys differ.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names for type checkers; at run time each loads on first use
    from kernelstream.data.labels import StreamLabels
    from kernelstream.kafka_client.blocks import (
        ID_PARTITION_SHIFT,
        MESSAGE_KEY,
        KafkaBlocks,
        SourcePosition,
        check_read_options,
        head_rows,
        text_format_for,
    )
    from kernelstream.kafka_client.bounded import (
        KafkaReadOptions,
        KafkaRecord,
        iter_topic_records,
        snapshot_ends,
    )
    from kernelstream.kafka_client.clients import (
        READ_DEFAULTS,
        SCHEME,
        KafkaTopic,
        apache_broker,
        assigned_consumer,
        check_reachable,
        client_defaults,
        client_settings,
        is_kafka_url,
        local_broker,
        typed_settings,
    )
    from kernelstream.kafka_client.confluent import check_confluent
    from kernelstream.kafka_client.partitions import (
        MERGES,
        PartitionGroup,
        check_fingerprints,
        kafka_partition_info,
        partition_groups,
    )
    from kernelstream.kafka_client.sink import (
        OUTPUT_TOPICS,
        KafkaWriter,
        message,
        output_topics,
        partition_for,
        prediction_rows,
        routing_key,
        row_id,
    )

# Loaded on first use, so that a light submodule (``names``) can be imported without the
# clients, the blocks and the sink (about 0.2 s).
_LAZY = {
    "ID_PARTITION_SHIFT": "kernelstream.kafka_client.blocks",
    "KafkaBlocks": "kernelstream.kafka_client.blocks",
    "KafkaReadOptions": "kernelstream.kafka_client.bounded",
    "KafkaRecord": "kernelstream.kafka_client.bounded",
    "KafkaTopic": "kernelstream.kafka_client.clients",
    "KafkaWriter": "kernelstream.kafka_client.sink",
    "MERGES": "kernelstream.kafka_client.partitions",
    "MESSAGE_KEY": "kernelstream.kafka_client.blocks",
    "OUTPUT_TOPICS": "kernelstream.kafka_client.sink",
    "PartitionGroup": "kernelstream.kafka_client.partitions",
    "READ_DEFAULTS": "kernelstream.kafka_client.clients",
    "SCHEME": "kernelstream.kafka_client.clients",
    "SourcePosition": "kernelstream.kafka_client.blocks",
    "StreamLabels": "kernelstream.data.labels",
    "apache_broker": "kernelstream.kafka_client.clients",
    "assigned_consumer": "kernelstream.kafka_client.clients",
    "check_confluent": "kernelstream.kafka_client.confluent",
    "check_fingerprints": "kernelstream.kafka_client.partitions",
    "check_reachable": "kernelstream.kafka_client.clients",
    "check_read_options": "kernelstream.kafka_client.blocks",
    "client_defaults": "kernelstream.kafka_client.clients",
    "client_settings": "kernelstream.kafka_client.clients",
    "head_rows": "kernelstream.kafka_client.blocks",
    "is_kafka_url": "kernelstream.kafka_client.clients",
    "iter_topic_records": "kernelstream.kafka_client.bounded",
    "kafka_partition_info": "kernelstream.kafka_client.partitions",
    "local_broker": "kernelstream.kafka_client.clients",
    "message": "kernelstream.kafka_client.sink",
    "output_topics": "kernelstream.kafka_client.sink",
    "partition_for": "kernelstream.kafka_client.sink",
    "partition_groups": "kernelstream.kafka_client.partitions",
    "prediction_rows": "kernelstream.kafka_client.sink",
    "routing_key": "kernelstream.kafka_client.sink",
    "row_id": "kernelstream.kafka_client.sink",
    "snapshot_ends": "kernelstream.kafka_client.bounded",
    "text_format_for": "kernelstream.kafka_client.blocks",
    "typed_settings": "kernelstream.kafka_client.clients",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "ID_PARTITION_SHIFT",
    "MERGES",
    "MESSAGE_KEY",
    "OUTPUT_TOPICS",
    "READ_DEFAULTS",
    "SCHEME",
    "KafkaBlocks",
    "KafkaReadOptions",
    "KafkaRecord",
    "KafkaTopic",
    "KafkaWriter",
    "PartitionGroup",
    "SourcePosition",
    "StreamLabels",
    "apache_broker",
    "assigned_consumer",
    "check_confluent",
    "check_fingerprints",
    "check_reachable",
    "check_read_options",
    "client_defaults",
    "client_settings",
    "head_rows",
    "is_kafka_url",
    "iter_topic_records",
    "kafka_partition_info",
    "local_broker",
    "message",
    "output_topics",
    "partition_for",
    "partition_groups",
    "prediction_rows",
    "routing_key",
    "row_id",
    "snapshot_ends",
    "text_format_for",
    "typed_settings",
]
