"""The stream reader's consumer over confluent-kafka (librdkafka), and the choice of client.

The unbounded reader (:class:`kernelstream.kafka_client.group_reader.GroupReader`) was written
against kafka-python's ``KafkaConsumer``; :class:`ConfluentConsumer` gives it the same calls
(``assign``, ``seek``, ``pause``, ``resume``, ``poll``, ``position``, ``highwater``,
``beginning_offsets``, ``end_offsets``, ``close``) over ``confluent_kafka.Consumer``, plus
:meth:`ConfluentConsumer.poll_records`, which returns the reader's
:class:`~kernelstream.engine.live.records.SourceRecord` s directly. Why: kafka-python decodes
record batches in Python (a seventh of a stream's drain time, measured) and its ``poll``
sometimes blocks for 40-150 ms; librdkafka decodes in C and prefetches in background threads.

What it keeps of the kafka-python reader's contract:

* no consumer group: partitions are assigned with explicit offsets, nothing is committed
  (librdkafka still wants a ``group.id``: a fixed one that is never joined);
* a position outside the log raises :class:`~kernelstream.engine.offsets.OffsetOutOfLog`
  (``auto.offset.reset=error``), never a silent jump;
* ``position`` is the offset after the last record returned (librdkafka moves it past
  transaction markers as kafka-python does); ``highwater`` is the high watermark of the
  last fetch response (None until there is one);
* the same records: ``read_uncommitted`` (kafka-python's default, not librdkafka's), exact
  offsets, Kafka timestamps, keys and values.

Broker reachability (:attr:`ConfluentConsumer.broker_reachable`,
:meth:`ConfluentConsumer.hw_confirmed`). librdkafka caches each partition's high watermark
from the last fetch response and keeps answering it while the broker is away, so a cached
value alone does not say the partition is caught up *now*. A lost connection (librdkafka's
``FAIL`` log line of any broker connection, or the errors ``_TRANSPORT``,
``_ALL_BROKERS_DOWN``, ``_TIMED_OUT``) marks the broker unreachable and every partition's high
watermark unconfirmed, and re-assigns the partitions at their positions (dropping what was
prefetched before the loss). A partition is confirmed again, and the broker reachable, by the
first fetch result after that: a record, or the end-of-partition event
(``enable.partition.eof``: a fetch that found nothing past the position). Only librdkafka
tells about lost connections this way; kafka-python's consumer gets the same from its fetch
callbacks (:class:`kernelstream.kafka_client.group_reader.FetchEvidence`).

Settings. Users give kafka-python names (``--kafka-option KEY=VALUE``);
:func:`confluent_config` translates the consumer's ones to librdkafka properties.
:func:`reader_consumer` picks the client: ``auto`` (the default) takes confluent-kafka when
it imports and every setting translates, else kafka-python (no error: the settings are
valid kafka-python ones); ``confluent`` insists (an error otherwise); ``kafka-python`` never
uses librdkafka. Producers, sinks and the bounded reader stay on kafka-python.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from kernelstream.engine.live.records import SourceRecord
from kernelstream.engine.offsets import OffsetOutOfLog
from kernelstream.kafka_client.clients import (
    READ_DEFAULTS,
    assigned_consumer,
    client_defaults,
    typed_settings,
)
from kernelstream.kafka_client.names import KAFKA_CLIENTS

GROUP_ID = "kernelstream-reader"  # never joined, nothing committed: librdkafka needs one
LOGGER = logging.getLogger("kernelstream.rdkafka")


def librdkafka_names(dotted: str, **renamed: str) -> dict[str, str]:
    """kafka-python setting -> librdkafka property: each name of ``dotted`` (white-space
    separated) is the property with ``.`` for ``_``; ``renamed`` gives the others."""
    return {**{k: k.replace("_", ".") for k in dotted.split()}, **renamed}


# kafka-python setting -> librdkafka property, the same for consumers and producers: connection,
# retries and security (values pass as they are)
CONNECTION_SETTINGS = librdkafka_names(
    "retry_backoff_ms reconnect_backoff_ms reconnect_backoff_max_ms "
    "max_in_flight_requests_per_connection allow_auto_create_topics metadata_max_age_ms "
    "connections_max_idle_ms receive_message_max_bytes client_dns_lookup security_protocol "
    "sasl_mechanism sasl_kerberos_service_name",
    receive_buffer_bytes="socket.receive.buffer.bytes",
    send_buffer_bytes="socket.send.buffer.bytes",
    sasl_plain_username="sasl.username", sasl_plain_password="sasl.password",
    ssl_cafile="ssl.ca.location", ssl_certfile="ssl.certificate.location",
    ssl_keyfile="ssl.key.location", ssl_password="ssl.key.password",
    ssl_crlfile="ssl.crl.location", ssl_ciphers="ssl.cipher.suites",
)
# kafka-python consumer setting -> librdkafka property; the value passes as it is
_SAME = {
    **librdkafka_names("fetch_min_bytes fetch_max_bytes max_partition_fetch_bytes check_crcs "
                       "isolation_level client_rack",
                       fetch_max_wait_ms="fetch.wait.max.ms",
                       request_timeout_ms="socket.timeout.ms"),
    **CONNECTION_SETTINGS,
}
# Meaningless for an assigned reader without group (kafka-python's own connection probe,
# group membership, the iterator API, its metrics): dropped.
_IGNORED = frozenset({
    "bootstrap_timeout_ms", "max_poll_records", "max_poll_interval_ms", "session_timeout_ms",
    "heartbeat_interval_ms", "auto_commit_interval_ms", "group_instance_id",
    "consumer_timeout_ms", "exclude_internal_topics", "enable_incremental_fetch_sessions",
    "metrics_enabled", "metrics_num_samples", "metrics_sample_window_ms",
    "metric_group_prefix",
})
# SASL mechanisms librdkafka runs from string settings alone (OAUTHBEARER needs
# kafka-python's token provider object)
_SASL = frozenset({"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI"})

# The reader's own librdkafka settings (a user setting of the same meaning wins).
# isolation.level: kafka-python's default, so both clients return the same records.
# queued.max.messages.kbytes: the background prefetch per consumer (one per partition group),
# 16 MB instead of 64: enough to keep a reader busy, bounded for many groups per worker.
# fetch.queue.backoff.ms: once the prefetch queue is full, refetch soon after the reader
# drains it (librdkafka waits 1 s by default).
_BASE: dict[str, Any] = {
    "client.id": "kernelstream",
    "group.id": GROUP_ID,
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "auto.offset.reset": "error",
    "isolation.level": "read_uncommitted",
    "socket.nagle.disable": True,
    "queued.max.messages.kbytes": 16384,
    "fetch.queue.backoff.ms": 10,
    # a fetch that finds nothing past the position says so: the evidence that confirms a
    # partition's high watermark after a lost connection (see the module docstring)
    "enable.partition.eof": True,
}


def confluent_available() -> bool:
    """Whether confluent-kafka (librdkafka) imports here."""
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        return False
    return True


def without_librdkafka(client: tuple[tuple[str, str], ...], accepted: dict[str, Any],
                       same: dict[str, str], ignored: frozenset[str]) -> list[str]:
    """The settings among ``client`` that a kafka-python client (its settings ``accepted``)
    takes but librdkafka has no equivalent for: neither in ``same`` (kafka-python -> librdkafka
    names) nor ``ignored`` (dropped), or an unsupported SASL mechanism. Settings the client
    does not take are skipped (producer-only ones never reach a consumer)."""
    out = []
    for k, v in client:
        if k not in accepted or k in ignored:
            continue
        if k not in same and k != "ssl_check_hostname":
            out.append(k)
        elif k == "sasl_mechanism" and v.strip().upper() not in _SASL:
            out.append(f"{k}={v}")
    return out


def untranslatable(client: tuple[tuple[str, str], ...]) -> list[str]:
    """The consumer settings among ``client`` that have no librdkafka equivalent."""
    return without_librdkafka(client, client_defaults()[0], _SAME, _IGNORED)


def confluent_config(bootstrap: str, client: tuple[tuple[str, str], ...] = ()
                     ) -> dict[str, Any] | None:
    """librdkafka settings of the reader's consumer from kafka-python-named ``client``
    settings (with :data:`~kernelstream.kafka_client.clients.READ_DEFAULTS`), or None when
    one of them has no librdkafka equivalent."""
    if untranslatable(client):
        return None
    typed = typed_settings(client, client_defaults()[0])
    cfg = dict(_BASE)
    for k, v in {**READ_DEFAULTS, **typed}.items():
        if k in _SAME:
            cfg[_SAME[k]] = v
        elif k == "ssl_check_hostname":
            cfg["ssl.endpoint.identification.algorithm"] = "https" if v else "none"
    cfg["bootstrap.servers"] = bootstrap
    return cfg


def reader_consumer(bootstrap: str, client: tuple[tuple[str, str], ...] = (),
                    kind: str = "auto") -> Any:
    """The stream reader's consumer for ``kind`` (:data:`KAFKA_CLIENTS`): a
    :class:`ConfluentConsumer`, or kafka-python's (``assigned_consumer``) when ``kind`` is
    ``kafka-python``, or ``auto`` and confluent-kafka is missing or a setting does not
    translate. ``confluent`` raises :class:`ValueError` where ``auto`` would fall back."""
    if kind not in KAFKA_CLIENTS:
        raise ValueError(f"Kafka client {kind!r}: expected one of {', '.join(KAFKA_CLIENTS)}")
    if kind != "kafka-python":
        problem = check_confluent(client)
        if problem is None:
            from confluent_kafka import KafkaException

            cfg = confluent_config(bootstrap, client)
            assert cfg is not None
            try:
                return ConfluentConsumer(cfg)
            except KafkaException as e:  # e.g. a librdkafka too old for a property
                if kind == "confluent":
                    raise ValueError(f"--kafka-client confluent: {e}") from None
                LOGGER.warning("confluent-kafka consumer: %s; reading with kafka-python", e)
        elif kind == "confluent":
            raise ValueError(problem)
    return assigned_consumer(bootstrap, client)


def check_confluent(client: tuple[tuple[str, str], ...] = ()) -> str | None:
    """Why the confluent-kafka reader cannot take ``client`` (one line), or None."""
    if not confluent_available():
        return "--kafka-client confluent: the confluent-kafka package is not installed"
    bad = untranslatable(client)
    if bad:
        return (f"--kafka-client confluent: no librdkafka equivalent for the Kafka client "
                f"setting(s) {', '.join(bad)} (use --kafka-client kafka-python or auto)")
    return None


class TP(NamedTuple):
    """A topic partition as the keys of :meth:`ConfluentConsumer.poll` (kafka-python's
    ``TopicPartition`` has the same fields)."""

    topic: str
    partition: int


class ConsumerRecord(NamedTuple):
    """A record of :meth:`ConfluentConsumer.poll`, with kafka-python's field names."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


_new_tuple = tuple.__new__  # builds a NamedTuple without its Python-level __new__
# How long a new assignment may take to reset the positions; a librdkafka that does not
# reset them only costs this once per seek (its positions then count after a record).
_RESET_WAIT_S = 0.5


class ConfluentConsumer:
    """kafka-python's ``KafkaConsumer`` calls the stream reader makes, over
    ``confluent_kafka.Consumer`` with settings ``config`` (see :func:`confluent_config`).
    Partitions are any ``(topic, partition)`` tuples (kafka-python's ``TopicPartition``s
    too)."""

    def __init__(self, config: dict[str, Any]) -> None:
        from confluent_kafka import Consumer

        self._errors: list[Any] = []
        self._config = dict(config)
        self._c = Consumer({**config, "error_cb": self._errors.append},
                           logger=_LossWatch(self))
        # reachability (module docstring): False from a lost connection until the first
        # fetch result after it; per partition, whether its cached high watermark came from a
        # fetch after the last loss
        self.broker_reachable = True
        self.heard_at: float | None = None  # monotonic time of the last fetch result
        self._confirmed: dict[tuple[str, int], bool] = {}
        self._loss_seen = False  # a loss reported while consume() ran (_LossWatch)
        self._keys: list[tuple[str, int]] = []
        self._tps: dict[tuple[str, int], Any] = {}  # confluent TopicPartitions, reused
        # The next offset of each partition as far as this side knows (seeks, records
        # returned); librdkafka's own position also moves past transaction markers, but
        # right after an assignment it may still answer the old one (assign() is
        # asynchronous), so it counts only once it is known to be the new assignment's:
        # after it answered "none" (-1001, the reset of a new assignment), or after a record
        # of it (_fresh).
        self._pos: dict[tuple[str, int], int | None] = {}
        self._fresh: dict[tuple[str, int], bool] = {}
        self._paused: set[tuple[str, int]] = set()
        self._dirty = False  # seeks not yet given to librdkafka

    # -- assignment and positions

    def assign(self, tps: Iterable[Sequence[Any]]) -> None:
        """Read these partitions; each needs a :meth:`seek` before the first poll."""
        from confluent_kafka import TopicPartition

        self._keys = [(str(t), int(p)) for t, p in tps]
        self._tps = {k: TopicPartition(*k) for k in self._keys}
        self._pos = dict.fromkeys(self._keys)
        self._fresh = dict.fromkeys(self._keys, False)
        self._confirmed = dict.fromkeys(self._keys, False)
        self._paused = set()
        self._c.unassign()
        self._dirty = True

    def seek(self, tp: Sequence[Any], offset: int) -> None:
        key = (tp[0], tp[1])
        if key not in self._pos:
            raise ValueError(f"seek of {key[0]}/{key[1]}: not assigned")
        if not self._dirty:  # the new assignment keeps the other partitions where they are
            for k in self._keys:
                self._pos[k] = self.position(k)
        self._pos[key] = int(offset)
        self._dirty = True

    def _apply_seeks(self) -> None:
        # librdkafka's seek needs a partition that is assigned and fetching; a new
        # assignment with explicit offsets positions every partition, fetching or not (and
        # drops what was prefetched for the old positions)
        from confluent_kafka import TopicPartition

        missing = [k for k, o in self._pos.items() if o is None]
        if missing:
            raise ValueError(f"{missing[0][0]}/{missing[0][1]}: seek before reading")
        self._c.assign([TopicPartition(t, p, int(self._pos[(t, p)] or 0))  # all set: above
                        for t, p in self._keys])
        if self._paused:
            self._c.pause([self._tps[k] for k in self._paused])
        self._dirty = False
        # Wait (well under a millisecond, measured) for the reset, so that a position that
        # passes a trailing transaction marker is believed even when no record follows it.
        # Nothing is consumed meanwhile, so the position stays "none" once it is.
        tps = [self._tps[k] for k in self._keys]
        deadline = time.monotonic() + _RESET_WAIT_S
        while True:
            fresh = [tp.offset < 0 for tp in self._c.position(tps)]
            if all(fresh) or time.monotonic() > deadline:
                break
            time.sleep(0.0002)
        self._fresh = dict(zip(self._keys, fresh, strict=True))

    @property
    def fetch_wait_ms(self) -> int:
        """``fetch.wait.max.ms`` (librdkafka's default if not set)."""
        return int(self._config.get("fetch.wait.max.ms", 500))

    @property
    def request_timeout_ms(self) -> int:
        return int(self._config.get("socket.timeout.ms", 60000))

    def set_fetch_wait(self, ms: int) -> None:
        """Fetch with ``fetch.wait.max.ms`` = ``ms`` from now on. librdkafka reads it only when
        a consumer is made: the consumer is made anew, assigned where this one stands
        (positions, pauses); what it had prefetched is fetched again."""
        from confluent_kafka import Consumer

        if not self._dirty and all(o is not None for o in self._pos.values()):
            for k in self._keys:
                self._pos[k] = self.position(k)
        self._c.close()
        # the new consumer's high watermarks come from its own fetches: confirmed anew
        self._confirmed = dict.fromkeys(self._keys, False)
        self._config["fetch.wait.max.ms"] = int(ms)
        self._c = Consumer({**self._config, "error_cb": self._errors.append},
                           logger=_LossWatch(self))
        self._dirty = True

    def pause(self, *tps: Sequence[Any]) -> None:
        keys = [(tp[0], tp[1]) for tp in tps]
        self._paused.update(keys)
        if not self._dirty:
            self._c.pause([self._tps[k] for k in keys])

    def resume(self, *tps: Sequence[Any]) -> None:
        keys = [(tp[0], tp[1]) for tp in tps]
        self._paused.difference_update(keys)
        if not self._dirty:
            self._c.resume([self._tps[k] for k in keys])

    def position(self, tp: Sequence[Any]) -> int:
        """The offset after the last record returned (or the sought offset), moved past
        transaction markers once librdkafka has consumed them."""
        key = (tp[0], tp[1])
        if self._dirty:
            self._apply_seeks()
        mine = self._pos[key]
        assert mine is not None
        theirs = self._c.position([self._tps[key]])[0].offset
        if theirs < 0:
            self._fresh[key] = True
        elif self._fresh[key] and theirs > mine:
            self._pos[key] = mine = int(theirs)
        return mine

    def hw_confirmed(self, tp: Sequence[Any]) -> bool:
        """Whether :meth:`highwater` of ``tp`` comes from a fetch after the last lost
        connection (and after the assignment): a record or an end-of-partition event."""
        return self._confirmed.get((tp[0], tp[1]), False)

    def _lost(self) -> None:
        """A connection to a broker was lost: unreachable, every high watermark unconfirmed,
        and the partitions re-assigned at their positions, so that what was prefetched
        before the loss is dropped and the next result of each partition is a new fetch."""
        self.broker_reachable = False
        self._confirmed = dict.fromkeys(self._keys, False)
        if self._keys and not self._dirty:
            for k in self._keys:
                self._pos[k] = self.position(k)
            self._dirty = True

    def missing(self, timeout_s: float = 1.0) -> list[tuple[str, int]] | None:
        """The assigned partitions the cluster's metadata does not have now (a topic deleted,
        a broker back without its data, where librdkafka waits silently), or None when no
        broker answers within ``timeout_s``. (All topics are asked for: asking for these
        would let a broker auto-create them.)"""
        from confluent_kafka import KafkaException

        try:
            md = self._c.list_topics(timeout=timeout_s)
        except KafkaException:
            return None
        out = []
        for t, p in self._keys:
            tm = md.topics.get(t)
            if tm is None or tm.error is not None or p not in tm.partitions:
                out.append((t, p))
        return out

    def highwater(self, tp: Sequence[Any]) -> int | None:
        """The high watermark of the last fetch response, or None before one."""
        if self._dirty:
            self._apply_seeks()
        marks = self._c.get_watermark_offsets(self._tps[(tp[0], tp[1])], cached=True)
        return None if marks is None or marks[1] < 0 else int(marks[1])

    def beginning_offsets(self, tps: Iterable[Sequence[Any]]) -> dict[Any, int | None]:
        return {tp: self._query(tp, 0) for tp in tps}

    def end_offsets(self, tps: Iterable[Sequence[Any]]) -> dict[Any, int | None]:
        return {tp: self._query(tp, 1) for tp in tps}

    def _query(self, tp: Sequence[Any], which: int) -> int | None:
        from confluent_kafka import KafkaException, TopicPartition

        try:
            marks = self._c.get_watermark_offsets(TopicPartition(tp[0], tp[1]), timeout=5.0)
        except KafkaException:
            return None
        return None if marks is None or marks[which] < 0 else int(marks[which])

    # -- records

    def poll_records(self, timeout_s: float, max_records: int,
                     linger_s: float = 0.0) -> list[SourceRecord]:
        """At most ``max_records`` records (each partition's in offset order) as
        :class:`SourceRecord` s, waiting up to ``timeout_s`` for the first; when it had to
        wait for one, up to ``linger_s`` more for others to come with it."""
        if self._loss_seen:  # reported during another call (a watermark query, ...)
            self._loss_seen = False
            self._lost()
        if self._dirty:
            self._apply_seeks()
        # librdkafka's consume() waits for all ``max_records`` (or the timeout), kafka-python's
        # poll() only for the first: take what is there; if nothing, wait for one message,
        # then take what came with it
        consume = self._c.consume
        msgs = consume(max_records, 0)
        if not msgs and timeout_s > 0:
            msgs = consume(1, timeout_s)
            if msgs and max_records > 1:
                msgs += consume(max_records - 1, linger_s)
        if self._errors:
            self._raise_errors()
        # a loss reported meanwhile: these messages may have been fetched before it, so they
        # confirm nothing (the re-assignment drops the rest of that prefetch)
        evidence = not self._loss_seen
        if self._loss_seen:
            self._loss_seen = False
            self._lost()
        new, rec = _new_tuple, SourceRecord
        if len(self._keys) == 1:  # one partition: every record is of it (two calls fewer)
            t, p = self._keys[0]
            out = [new(rec, (t, p, m.offset(), m.timestamp()[1], m.key(), m.value()))
                   for m in msgs if m.error() is None]
        else:
            out = [new(rec, (m.topic(), m.partition(), m.offset(), m.timestamp()[1], m.key(),
                             m.value()))
                   for m in msgs if m.error() is None]
        if len(out) != len(msgs):
            errs: list[Any] = [m for m in msgs if m.error() is not None]
            if evidence:
                eof = _partition_eof()
                self._confirm({(m.topic(), m.partition()) for m in errs
                               if m.error().code() == eof})
            self._message_errors(errs)
        if out:  # each partition's last record (records come in offset order)
            pos, fresh = self._pos, self._fresh
            if len(self._keys) == 1:  # a pass over every record saved (~10 % of a read)
                last = {self._keys[0]: out[-1][2]}
            else:
                last = {(r[0], r[1]): r[2] for r in out}
            for key, off in last.items():
                pos[key] = off + 1
                fresh[key] = True
            if evidence:
                self._confirm(last)
        return out

    def _confirm(self, keys: Iterable[tuple[str, int]]) -> None:
        """A fetch result (records, end of partition) of ``keys``: the broker answers."""
        confirmed = self._confirmed
        n = 0
        for key in keys:
            if key in confirmed:
                confirmed[key] = True
                n += 1
        if n:
            self.broker_reachable = True
            self.heard_at = time.monotonic()

    def poll(self, timeout_ms: int = 0, max_records: int | None = None
             ) -> dict[TP, list[ConsumerRecord]]:
        """kafka-python's ``poll``: ``{partition: records}``."""
        out: dict[TP, list[ConsumerRecord]] = {}
        for r in self.poll_records(timeout_ms / 1000.0, max_records or 500):
            out.setdefault(TP(r.topic, r.partition), []).append(ConsumerRecord(*r))
        return out

    def _message_errors(self, msgs: list[Any]) -> None:
        from confluent_kafka import KafkaError

        for m in msgs:
            err = m.error()
            code = err.code()
            if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                # records deleted (retention) before they were read, or a log truncated
                tp = (m.topic(), m.partition())
                raise OffsetOutOfLog(tp[0], tp[1], int(m.offset()), self._query(tp, 0),
                                     self._query(tp, 1))
            if code == KafkaError._PARTITION_EOF:
                continue
            if err.fatal() or code in _failure_codes():
                raise RuntimeError(f"Kafka consumer: {err.str()}")
            # else transient (a broker restarting): librdkafka retries, as kafka-python does
            LOGGER.debug("Kafka consumer: %s", err.str())

    def _raise_errors(self) -> None:
        errors, self._errors[:] = list(self._errors), []
        for err in errors:
            if err.fatal() or err.code() in _failure_codes():
                raise RuntimeError(f"Kafka consumer: {err.str()}")
            if err.code() in _loss_codes():
                self._loss_seen = True
            LOGGER.debug("Kafka consumer: %s", err.str())

    def close(self) -> None:
        self._c.close()


class _LossWatch:
    """librdkafka's log lines go to :data:`LOGGER` through this; a ``FAIL`` line (a broker
    connection lost or refused, also when librdkafka reports no error for it, e.g. one of
    several brokers) tells its consumer that the connection was lost."""

    def __init__(self, consumer: ConfluentConsumer) -> None:
        self.consumer = consumer

    def log(self, level: int, msg: str, *args: Any, **kwargs: Any) -> None:
        if args and args[0] == "FAIL":
            self.consumer._loss_seen = True
        LOGGER.log(level, msg, *args, **kwargs)


@functools.cache
def _partition_eof() -> int:
    from confluent_kafka import KafkaError

    return int(KafkaError._PARTITION_EOF)


@functools.cache
def _loss_codes() -> frozenset[int]:
    """librdkafka errors that mean a lost connection (retried by librdkafka)."""
    from confluent_kafka import KafkaError

    names = ("_TRANSPORT", "_ALL_BROKERS_DOWN", "_TIMED_OUT")
    return frozenset(getattr(KafkaError, n) for n in names if hasattr(KafkaError, n))


@functools.cache
def _failure_codes() -> frozenset[int]:
    """Errors no retry cures: fail the reader instead of waiting forever. (A missing topic
    or a denied group are not among them: kafka-python waits out the first, and the second
    does not matter to a reader that never joins its group.)"""
    try:
        from confluent_kafka import KafkaError
    except ImportError:
        return frozenset()
    names = ("_AUTHENTICATION", "_SSL", "TOPIC_AUTHORIZATION_FAILED",
             "SASL_AUTHENTICATION_FAILED", "UNSUPPORTED_SASL_MECHANISM")
    return frozenset(getattr(KafkaError, n) for n in names if hasattr(KafkaError, n))

