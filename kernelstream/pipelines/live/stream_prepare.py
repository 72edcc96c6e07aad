"""The up-front checks of ``kernelstream stream`` (:func:`prepare`), each failing in one line
(:class:`UpfrontError`, exit 2) before any pipeline starts.

In order: the checkpoint directory's writer lock and, on a resume, that it was written by the
same learners and stream settings; the broker, the topics and their partitions; the committed
offsets against the log, and the record last read of each partition against the snapshot's
fingerprint of it (a recreated topic); the ``--kafka-out`` broker and topics (created if missing);
``--init-from`` (its models' parameters, feature width and keys: :func:`_check_init_models`);
``gamma=auto``, ``--scale auto`` and ``--positive-label`` 's other class
(:mod:`~kernelstream.pipelines.live.stream_width`: a resumed run takes the snapshot's recorded
widths and feature ranges, one warm-started by ``--init-from`` the ranges its checkpoint
recorded, a fresh one reads its first records); and the
output folder (a crash's unpublished files rolled forward or dropped). Both folders must take
a small file (:func:`_check_writable`: a disk still full fails here, not at the first
snapshot), and every published output file of a resumed run must be whole
(:func:`~kernelstream.engine.live.snapshot.outputs.check_published`): one that a crash or an
older version left cut short is refused, naming it, since its rows belong to a committed
epoch that the snapshot cannot make again. They are a module of their own because they are
the part of a run that touches the broker and the file system without Beam, and each of their
failures has its own message.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import glob
import json
import os
import shutil
import sys
from dataclasses import dataclass, replace
from typing import Any

from kernelstream import kafka_client
from kernelstream.engine.keys import StreamKey
from kernelstream.engine.learner_config import recorded_target
from kernelstream.engine.live.engine import StreamEngine
from kernelstream.engine.live.rows import stream_schemas
from kernelstream.engine.live.snapshot.files import CorruptSnapshotError
from kernelstream.engine.live.snapshot.outputs import (
    UnreadableOutputError,
    check_published,
    ensure_schemas,
    publish,
)
from kernelstream.engine.live.snapshot.store import SnapshotStore, SnapshotView, is_snapshot_dir
from kernelstream.engine.offsets import LogChanged, OffsetOutOfLog
from kernelstream.engine.replay import checkpoints
from kernelstream.engine.replay.core import decode_replay_state
from kernelstream.engine.writer_lock import LOCK, CheckpointInUse
from kernelstream.errors import OutFolderError
from kernelstream.kafka_client.names import checkpoint_id, markers_topic
from kernelstream.pipelines import run_folder
from kernelstream.pipelines.config import PROG
from kernelstream.pipelines.live import stream_width
from kernelstream.pipelines.live.stream_config import (
    OUTPUT_NAMES,
    SCHEME,
    STREAM_DOC_DEFAULTS,
    StreamConfig,
    UpfrontError,
    duration_text,
    output_topic_names,
)

PROBE_BYTES = 64 << 10  # what a folder must take at start: far less than a snapshot's files


def _check_writable(directory: str, option: str) -> None:
    """Write, fsync and delete a small file in ``directory``: a disk that is full (or
    read-only) is one line now, rather than a failed snapshot commit later."""
    path = os.path.join(directory, f".kernelstream-probe-{os.getpid()}")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            if os.write(fd, bytes(PROBE_BYTES)) != PROBE_BYTES:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise UpfrontError(f"{option} {directory}: cannot write a file there "
                           f"({exc.strerror or exc}); nothing was run") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


@dataclass
class Prepared:
    """What the checks found: where the run starts and writes."""

    out: str
    start: dict[tuple[str, int], int]  # next offset of every input partition
    store: Any = None  # the checkpoint's SnapshotStore (writer lock held)
    resume_epoch: int | None = None
    init_kind: str | None = None
    config: StreamConfig | None = None  # the run's config, its widths resolved
    kafka_txn_id: str | None = None  # --kafka-exactly-once: the checkpoint's transactional id

    @property
    def resolved(self) -> StreamConfig:
        assert self.config is not None
        return self.config

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None


def _default_out(config: StreamConfig) -> str:
    return os.path.join("runs", f"stream-{config.topics[0]}-"
                        + "+".join(c.label for c in config.configs))


def _check_resume(config: StreamConfig, info: dict[str, Any], directory: str) -> None:
    """A checkpoint continues the run that wrote it: same learners, same stream settings
    (those compared first, by :func:`_check_settings`, before the recorded target and ranges
    are applied: a width changed is said as such, not as ranges that do not fit)."""
    saved_configs = info.get("configs")
    ours = json.loads(json.dumps(config.configs_doc(), default=str))
    if saved_configs is not None and saved_configs != ours:
        raise UpfrontError(f"checkpoint {directory} was written by the learner configurations "
                           f"{json.dumps(saved_configs)}; this run has {json.dumps(ours)} (use "
                           "the same ones, or a new --checkpoint)")
    _check_settings(config, info, directory)


def _check_settings(config: StreamConfig, info: dict[str, Any], directory: str) -> None:
    """The stream settings of a checkpoint (``StreamConfig.stream_doc``) are this run's."""
    saved = dict(info.get("stream") or {})
    mine = config.stream_doc()
    # a setting a snapshot leaves out: its default (older versions wrote rows and
    # hash_features only when set), or, when it never recorded the setting, not known
    saved = {**{k: v for k, v in STREAM_DOC_DEFAULTS.items() if "topics" in saved}, **saved}
    # merge is how the partitions are read, not what the models are, and forgetting quiet
    # entities may be turned on (or its interval changed) for a stream that runs: both may
    # change; turning off forgetting or exactly-once is refused (prepare(), below)
    diff = [k for k in mine if k in saved and k not in ("merge", "forget_after_ms",
                                                         "kafka_exactly_once",
                                                         "kafka_out_prefix")
            and saved[k] != mine[k]]
    # --kafka-exactly-once may be turned on, not off: an epoch a crash left out of Kafka is
    # sent (from its files) only by a run that has it, to the same topics
    prefix = saved.get("kafka_out_prefix")
    if saved.get("kafka_exactly_once") and (not mine["kafka_exactly_once"]
                                            or prefix != mine["kafka_out_prefix"]):
        raise UpfrontError(f"checkpoint {directory} sends its rows exactly once to the "
                           f"topics {prefix}-*: resume it with --kafka-out "
                           f"kafka://HOST:PORT/{prefix} --kafka-exactly-once, or use a new "
                           "--checkpoint")
    if diff:
        parts = ", ".join(f"{_OPTION.get(k, k)} {_setting(k, saved[k])} -> {_setting(k, mine[k])}"
                          for k in diff)
        raise UpfrontError(f"checkpoint {directory} was written with other stream settings "
                           f"({parts}); use the same ones, or a new --checkpoint")


# a stream setting (StreamConfig.stream_doc) by the option that sets it, for messages
_OPTION = {"topics": "SOURCE topics", "labels_topic": "--labels", "seed": "--seed",
           "format": "--format", "n_features": "--n-features (width)",
           "label_column": "--label-column", "delimiter": "--delimiter", "task": "--task",
           "positive_label": "--positive-label", "key_by": "--key-by",
           "label_ttl_ms": "--label-ttl", "metrics_window_ms": "--metrics-window",
           "rows": "--rows", "hash_features": "--hash-features",
           "negative_label": "--positive-label's other class", "init_from": "--init-from"}


def _setting(key: str, value: Any) -> str:
    """A stream setting's value as its option takes it (none: not set)."""
    if value is None:
        return "none"
    if key.endswith("_ms"):
        return duration_text(int(value))
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


def _recorded_scale(config: StreamConfig, doc: dict[str, Any] | None, what: str,
                    why: str | None = None) -> StreamConfig:
    """``config`` continuing models learnt with the scaling ``doc`` records
    (``StreamConfig.with_recorded_scale``): ``--scale none`` cannot continue scaled ones,
    and the ranges must fit the rows."""
    if (doc or {}).get("scale_ranges") and config.scale == "none":
        raise UpfrontError(f"{what}: its models learnt features scaled to [0, 1] by the "
                           "ranges of the first records (--scale auto); drop --scale none to "
                           "continue them")
    try:
        return config.with_recorded_scale(doc, why)
    except (ValueError, KeyError, TypeError) as exc:
        raise UpfrontError(f"{what}: its recorded scale_ranges: {exc}") from None


def _init_kind(config: StreamConfig,
               ) -> tuple[str | None, dict[str, Any] | None, dict[str, Any], dict[str, int]]:
    """``--init-from``: a stream checkpoint (``"stream"``) or a replay checkpoint
    (``"replay"``), whose learners must be this run's, how it scaled the features
    (``StreamConfig.scale_doc``; a replay's ``--scale auto`` of a topic records its
    ``scale_ranges`` alone) and its recorded configurations (their ``target``: how they
    learnt a regression target), and the widths its models learnt (configuration → features:
    checked by :func:`_check_init_width` once a CSV stream's first records tell its own)."""
    path = config.init_from
    if path is None:
        return None, None, {}, {}
    if not os.path.isdir(path):
        raise UpfrontError(f"--init-from {path}: no such directory")
    ours = config.configs_doc()
    if is_snapshot_dir(path):
        with SnapshotView.open(path) as view:
            info = view.info()
        saved = info.get("configs") or {}
        scaling = info.get("scaling")
        kind = "stream"
    else:
        ckpt = checkpoints.latest(path)
        if ckpt is None:
            raise UpfrontError(f"--init-from {path}: neither a stream checkpoint nor a replay "
                               "checkpoint (a replay saves its models with --checkpoint DIR)")
        info = ckpt.info()
        saved = info.get("configs") or {}
        # its models learnt rows scaled by the topic's first rows (replay --scale auto): the
        # stream scales its records by the same ranges
        scaling = {"scale_ranges": info.get("scale_ranges")}
        kind = "replay"
    for name, cfg in ours.items():
        have = saved.get(name)
        if have is not None and have.get("learner") != cfg["learner"]:
            raise UpfrontError(f"--init-from {path}: configuration {name!r} is a "
                               f"{have.get('learner')} there, a {cfg['learner']} here")
    if not any(name in saved for name in ours):
        raise UpfrontError(f"--init-from {path} has none of this run's configurations "
                           f"({', '.join(ours)}; it has {', '.join(saved) or 'none'})")
    dims = _check_init_models(config, path, kind, saved)
    return kind, scaling, dict(saved), dims


def _check_init_models(config: StreamConfig, path: str, kind: str,
                       saved: dict[str, Any]) -> dict[str, int]:
    """The models of ``--init-from`` are the ones this run continues: a model starts from
    the init model of its own key (``CONFIG#0``, or ``CONFIG#0@ENTITY`` with ``--key-by``;
    an entity the init has not seen starts afresh), as it is, with its own parameters and
    width. So refuse (one line) what would be ignored or reject every row: other
    parameters, another feature width, or keys of the other kind (global models for a
    ``--key-by`` stream, or the reverse: no model would ever start from them). Returns the
    width each shared configuration's models learnt (the check of a stream whose width its
    first records fix, CSV without ``--n-features``, waits for them: :func:`_check_init_width`)."""
    ours = json.loads(json.dumps(config.configs_doc(), default=str))
    shared = [name for name in ours if name in saved]
    for name in shared:
        theirs = json.loads(json.dumps(saved[name].get("params") or {}, default=str))
        mine = ours[name]["params"]
        diff = [k for k in mine if k in theirs and theirs[k] != mine[k]]
        if diff:
            raise UpfrontError(
                f"--init-from {path}: configuration {name!r} was learnt with "
                + ", ".join(f"{k}={theirs[k]!r}" for k in diff) + "; this run has "
                + ", ".join(f"{k}={mine[k]!r}" for k in diff)
                + " (its models go on with the parameters they were learnt with: give those "
                "with -p, or give the configuration another name to start afresh)")
    if kind == "stream":
        view = SnapshotView.open(path)
        keys, get = view.keys(), view.get
    else:
        ckpt = checkpoints.latest(path)
        assert ckpt is not None  # _init_kind found it
        states = checkpoints.SavedStates.of(ckpt)
        keys, get = states.keys(), states.get
    try:
        by_entity = config.spec.read.key_by is not None
        first: dict[str, str] = {}  # configuration -> a key of its models
        kinds: set[bool] = set()  # whether the shared configurations' keys have an entity
        for k in keys:
            try:
                sk = StreamKey.decode(k)
            except ValueError:
                continue
            if sk.config in shared and sk.rep == 0:
                first.setdefault(sk.config, k)
                kinds.add(sk.entity is not None)
        if kinds and by_entity not in kinds:
            have = ("one model per configuration (CONFIG#0)" if by_entity
                    else "one model per entity (CONFIG#0@ENTITY, --key-by)")
            want = ("one per entity (--key-by id-prefix)" if by_entity
                    else "one per configuration (no --key-by)")
            raise UpfrontError(f"--init-from {path} holds {have}; this stream learns {want}: "
                               "a model starts from the init model of its own key, so none "
                               "would start from it (use --init-from a run keyed as this one)")
        width = config.spec.width
        dims: dict[str, int] = {}
        for name, k in first.items():
            data = get(k)
            if data is None:
                continue
            learner = (StreamEngine(config.spec).decode_state(data).learner if kind == "stream"
                       else decode_replay_state(data).learner)
            dim = getattr(learner, "dim", None)
            if dim is not None:
                dims[name] = int(dim)
            if dim is not None and width is not None and int(dim) != width:
                raise UpfrontError(f"--init-from {path}: configuration {name!r} learnt rows "
                                   f"of {int(dim)} features; this stream's have {width} "
                                   "(--n-features, --hash-features): every row would be "
                                   f"refused; give the width it learnt")
        return dims
    finally:
        if kind == "stream":
            view.close()


def _check_init_width(config: StreamConfig, start: dict[tuple[str, int], int],
                      dims: dict[str, int]) -> None:
    """``--init-from`` models of a known width against a stream whose first record fixes its
    width (CSV without ``--n-features``): that record's width, from the first records read
    for ``gamma=auto`` and the rest, or else read now (``stream_width.first_width``, up to
    ``--width-wait``). Another width: refused in one line, as with ``--n-features`` (every
    row would be a dead letter); no record yet: said in one line, the stream goes on."""
    if not dims or config.spec.width is not None:
        return
    width = config.head_width
    if width is None:
        width = stream_width.first_width(config, start)
    path = config.init_from
    if width is None:
        print(f"{PROG} stream: --init-from {path}: no record within {config.width_wait:g} s "
              "(--width-wait) to tell this stream's width by; its models learnt rows of "
              + ", ".join(f"{d} features ({n!r})" for n, d in dims.items())
              + ": rows of another width will be dead letters", file=sys.stderr, flush=True)
        return
    for name, dim in dims.items():
        if dim != width:
            raise UpfrontError(f"--init-from {path}: configuration {name!r} learnt rows of "
                               f"{dim} features; this stream's have {width} (its first record's "
                               "width): every row would be refused; --init-from a run of "
                               "this width")


def _recorded_target(config: StreamConfig, saved: dict[str, Any], what: str) -> StreamConfig:
    """``config`` continuing models whose recorded configurations ``saved`` learnt the target
    standardised or not (``StreamConfig.with_recorded_target``): ``--scale-target none``
    cannot continue standardised ones."""
    target = recorded_target(saved)
    if target is not None and config.spec.read.task != "regression":
        raise UpfrontError(f"{what}: its models learnt a regression target; this stream "
                           "classifies (--task regression continues them)")
    if target is not None and config.scale_target == "none":
        raise UpfrontError(f"{what}: its models learnt a standardised regression target "
                           "(--scale-target auto); drop --scale-target none to continue them")
    return config.with_recorded_target(saved)


def _check_kafka_out(config: StreamConfig, partitions: int) -> None:
    """The ``--kafka-out`` brokers answer; the output topics exist (created if missing)."""
    if config.kafka_out is None:
        return
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import KafkaError, TopicAlreadyExistsError

    bootstrap, prefix = config.kafka_out
    topics = output_topic_names(prefix)
    names = [topics[n] for n in config.kafka_outputs]
    configs: dict[str, dict[str, str]] = {}
    if config.kafka_exactly_once:  # the epochs' markers: one partition, the latest kept
        names.append(markers_topic(prefix))
        configs[names[-1]] = {"cleanup.policy": "compact"}
    try:
        cfg = {"bootstrap_timeout_ms": 5000, "request_timeout_ms": 10000}
        typed = kafka_client.typed_settings(config.client, kafka_client.client_defaults()[0])
        cfg.update({k: v for k, v in typed.items() if k in KafkaAdminClient.DEFAULT_CONFIG})
        admin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","),
                                 client_id="kernelstream", **cfg)
    except KafkaError as exc:
        raise UpfrontError(f"--kafka-out: cannot connect to the Kafka broker(s) {bootstrap}: "
                           f"{type(exc).__name__}") from None
    try:
        have = set(admin.list_topics())
        missing = [n for n in names if n not in have]
        if missing:
            with contextlib.suppress(TopicAlreadyExistsError):
                admin.create_topics([NewTopic(n, 1 if n in configs else max(1, partitions), 1,
                                              topic_configs=configs.get(n, {}))
                                     for n in missing])
    except KafkaError as exc:
        raise UpfrontError(f"--kafka-out {bootstrap}: {type(exc).__name__}: {exc}") from None
    finally:
        admin.close()


def prepare(config: StreamConfig) -> Prepared:
    """The up-front checks (module docstring); raises :class:`UpfrontError`."""
    store = None
    out = config.out
    saved_out = None
    committed: dict[tuple[str, int], int] = {}
    resume = None
    # a --checkpoint folder this run makes is removed again when it is refused (a broker
    # down): no empty folder left behind
    made = config.checkpoint is not None and not os.path.exists(config.checkpoint)
    try:
        if (checkpoint := config.checkpoint) is not None:
            try:
                store = SnapshotStore.open(checkpoint)
            except CheckpointInUse as exc:
                raise UpfrontError(str(exc)) from None
            except (ValueError, OSError, CorruptSnapshotError) as exc:
                raise UpfrontError(f"--checkpoint {config.checkpoint}: {exc}") from None
            _check_writable(store.directory, "--checkpoint")
            resume = store.head
            if resume is not None:
                saved = store.info()
                # the warm start its new models start from: a resume without --init-from
                # continues with the recorded one (_check_resume refuses another)
                recorded_init = (saved.get("stream") or {}).get("init_from")
                if config.init_from is None and recorded_init is not None:
                    config = replace(config, init_from=str(recorded_init))
                # the class --positive-label is against, as its first records decided (an
                # older snapshot: none, every other label -1 as then)
                if config.wants_labels:
                    negative = (saved.get("stream") or {}).get("negative_label")
                    config = config.with_negative_label(None if negative is None
                                                        else str(negative))
                # the widths it was learnt with (gamma=auto resolved then), never a new estimate
                config = config.with_recorded(dict(saved.get("configs") or {}),
                                              saved.get("widths"))
                # how the reader merged the partitions: as recorded (older snapshots: a group
                # per partition number) unless --merge says otherwise
                if config.merge is None:
                    config = replace(config, merge=str((saved.get("stream") or {}).get(
                        "merge") or "partition"))
                # the settings first: recorded ranges of 24 columns do not fit rows of 25
                # features because --n-features changed, which is what to say
                _check_settings(config, saved, checkpoint)
                # and the target as its models learnt it (--scale-target auto), or as it came
                config = _recorded_target(config, dict(saved.get("configs") or {}),
                                          f"checkpoint {checkpoint}")
                # and the ranges its rows were scaled by (--scale auto), or none: as recorded
                config = _recorded_scale(config, saved.get("scaling"),
                                         f"checkpoint {checkpoint}")
                _check_resume(config, saved, checkpoint)
                # and when entities are forgotten: as recorded unless given (the settings it
                # depends on compared first); once on, it stays on (a model made without a
                # birth stamp could take the row ids of a forgotten model of its key)
                forget = (saved.get("stream") or {}).get("forget_after_ms")
                if not config.forget_given:
                    try:
                        config = replace(config, spec=replace(
                            config.spec, forget_after_ms=None if forget is None else int(forget)))
                    except ValueError as exc:  # (the settings compared equal: a damaged record)
                        raise UpfrontError(f"checkpoint {checkpoint}: {exc}") from None
                elif forget is not None and config.spec.forget_after_ms is None:
                    raise UpfrontError(
                        f"checkpoint {checkpoint} forgets quiet entities (after "
                        f"{duration_text(int(forget))}); once on, forgetting stays on (a model "
                        "made later could reuse the row ids of a forgotten one): give a "
                        "duration (a longer one keeps models longer), or a new --checkpoint")
                saved_out = saved.get("out")
                if out is None:
                    out = saved_out
                elif saved_out is not None and os.path.realpath(out) != saved_out:
                    raise UpfrontError(f"checkpoint {config.checkpoint} writes its outputs to "
                                       f"{saved_out}; give --out {saved_out} (outputs are "
                                       "committed with the snapshots)")
                committed = store.offsets()
        if out is None:
            out = _default_out(config)
        # the output folder: new, empty, this run's own (the same --checkpoint; a snapshot
        # that names it, for folders of earlier versions), or a previous run with --overwrite
        # (pipelines.run_folder): checked before the broker, claimed once it has answered
        own = run_folder.entry_within(out, config.checkpoint)
        try:
            continuing = (run_folder.continues(run_folder.inspect(out, own), config.checkpoint)
                          or (resume is not None and saved_out is not None))
            claim = functools.partial(
                run_folder.claim, out, "demo" if config.argv[:1] == ("demo",) else "stream",
                overwrite=config.overwrite, checkpoint=config.checkpoint,
                resumes=resume is not None, argv=config.argv, ignore=own,
                continuing=continuing)
            claim(dry=True)
        except OutFolderError as exc:
            raise UpfrontError(str(exc)) from None
        try:
            info = kafka_client.kafka_partition_info(config.bootstrap, config.all_topics,
                                                     config.client)
        except (ConnectionError, FileNotFoundError) as exc:
            raise UpfrontError(str(exc)) from None
        if (config.merge or "all") != "all" and config.spec.forget_after_ms is not None:
            raise UpfrontError(
                ("--forget-entities-after" if config.forget_given else
                 f"checkpoint {config.checkpoint} forgets quiet entities, which") +
                " needs --merge all: read by partition, there is no one stream clock to tell "
                "when an entity went quiet")
        try:
            merge = config.merge or "all"  # a fresh run: one order of every partition
            config = replace(config, merge=merge)
            groups = kafka_client.partition_groups(info, config.all_topics, committed,
                                                   merge=merge)
        except OffsetOutOfLog as exc:
            raise UpfrontError(str(exc)) from None
        except ValueError as exc:
            raise UpfrontError(f"{SCHEME}{config.bootstrap}: {exc}") from None
        if store is not None and committed:
            # the record each partition was last read at is still the same one: a topic
            # recreated with more records than the committed offset fails here
            try:
                kafka_client.check_fingerprints(config.bootstrap, store.fingerprints(), info,
                                                config.client)
            except (LogChanged, ConnectionError) as exc:
                raise UpfrontError(str(exc)) from None
        start = {}
        for g in groups:
            for tp, off in zip(g.partitions, g.start, strict=True):
                start[tp] = int(off)
        # the output topics get as many partitions as each input topic (co-partitioned)
        _check_kafka_out(config, len({p for _, p in start}))
        init_kind, init_scaling, init_configs, init_dims = _init_kind(config)
        if resume is None and init_kind is not None:
            # the warm-started models learnt rows scaled so (or not at all): nothing is read
            why = (None if init_kind == "stream"
                   else f"the ranges --init-from {config.init_from} recorded")
            config = _recorded_scale(config, init_scaling, f"--init-from {config.init_from}",
                                     why)
            if config.scale_ranges is not None:
                print(f"{PROG} stream: scaling features to [0, 1] by the ranges --init-from "
                      f"{config.init_from} recorded, as its models learnt them (--scale "
                      "auto)", file=sys.stderr, flush=True)
            config = _recorded_target(config, init_configs, f"--init-from {config.init_from}")
            if (t := config.target) is not None:
                print(f"{PROG} stream: standardising the target by the mean {t[0]:.4g} and "
                      f"standard deviation {t[1]:.4g} --init-from {config.init_from} "
                      "recorded, as its models learnt it (--scale-target auto)",
                      file=sys.stderr, flush=True)
        # --scale auto, --scale-target auto and gamma=auto: the first records, read once
        config = stream_width.resolve(config, start)
        if resume is None:
            _check_init_width(config, start, init_dims)
        try:
            claim()
        except OutFolderError as exc:
            raise UpfrontError(str(exc)) from None
        except OSError as exc:
            raise UpfrontError(f"--out {out}: {exc}") from None
        try:
            os.makedirs(out, exist_ok=True)
            if store is not None:
                # roll a commit forward whose publishing a crash cut short, drop the files of
                # an epoch that never committed
                publish(out, None, store.head)
            else:
                _clear_outputs(out)
            for d in glob.glob(os.path.join(out, ".run-*")):  # a killed run's control folder
                shutil.rmtree(d, ignore_errors=True)
            _check_writable(out, "--out")
            if store is not None:
                check_published(out, OUTPUT_NAMES)
            # every output folder, with its schema, from the start (a replay's empty file)
            ensure_schemas(out, stream_schemas())
        except UnreadableOutputError as exc:
            raise UpfrontError(f"--out {out}: {exc}: its rows of a committed epoch cannot be "
                               "made again from the snapshot; move the file away to go on "
                               "without them, or start over with a new --out and "
                               "--checkpoint") from None
        except OSError as exc:
            raise UpfrontError(f"--out {out}: {exc}") from None
        ident = None
        if config.kafka_exactly_once and store is not None:
            try:  # as its snapshots recorded it: a new one would find none of their markers
                ident = checkpoint_id(store.directory, store.info().get("kafka_txn_id"))
            except (OSError, ValueError) as exc:
                raise UpfrontError(str(exc)) from None
        return Prepared(out, start, store, resume, init_kind, config, ident)
    except BaseException:
        if store is not None:
            store.close()
            if made and set(os.listdir(store.directory)) <= {LOCK}:
                shutil.rmtree(store.directory, ignore_errors=True)
        raise


def _clear_outputs(out: str) -> None:
    """A run without checkpoint starts the topic over: remove the previous run's files."""
    for name in OUTPUT_NAMES:
        d = os.path.join(out, name)
        for f in glob.glob(os.path.join(d, "part-*.parquet")):
            os.unlink(f)
        shutil.rmtree(os.path.join(d, ".pending"), ignore_errors=True)

