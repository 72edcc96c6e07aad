"""Names shared by the command line and the Kafka clients, importable without loading them."""

import os
import uuid

SCHEME = "kafka://"  # a topic URL: kafka://HOST:PORT[,HOST:PORT...]/TOPIC
KAFKA_CLIENTS = ("auto", "confluent", "kafka-python")  # the live stream reader's client
# how the live stream's reader groups the partitions it merges (kafka_client.partitions)
MERGES = ("all", "partition")

# --kafka-exactly-once (kafka_client.transactions): the epochs' markers topic of a prefix, the
# checkpoint's file holding its transactional id, and the longest snapshot interval a
# transaction can span (4 intervals under the brokers' default cap of 15 minutes)
MARKERS_SUFFIX = "epochs"
ID_FILE = "KAFKA_ID"
MAX_TXN_TIMEOUT_MS = 900_000
MAX_SNAPSHOT_SECONDS = MAX_TXN_TIMEOUT_MS / 4000


def markers_topic(prefix: str) -> str:
    """The topic of the epoch markers of ``--kafka-out kafka://HOST/PREFIX``."""
    return f"{prefix}-{MARKERS_SUFFIX}"


def checkpoint_id(directory: str, recorded: str | None = None) -> str:
    """The transactional id of the stream of checkpoint ``directory``: made (random) and kept
    in it the first time (call it holding the checkpoint's lock). ``recorded``: the id its
    last snapshot holds, which wins: a lost file is written again from it (a new id would
    find none of the epochs' markers), a different one is refused."""
    path = os.path.join(directory, ID_FILE)
    got = ""
    try:
        with open(path) as f:
            got = f.read().strip()
    except FileNotFoundError:
        pass
    if got and recorded and got != recorded:
        raise ValueError(f"checkpoint {directory}: {ID_FILE} holds the transactional id "
                         f"{got}, its snapshots were sent to Kafka as {recorded} (a file from "
                         "another checkpoint?): put back the file, or use a new --checkpoint")
    if got:
        return got
    ident = recorded or f"kernelstream-{uuid.uuid4().hex}"
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(ident + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return ident
