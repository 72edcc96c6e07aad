"""A real Apache Kafka broker for tests and trials: one KRaft node (broker and controller in
one JVM) run from the Maven Central jars of ``org.apache.kafka:kafka_2.13`` with ``java -cp``.

The embedded tansu broker (:func:`~kernelstream.kafka_client.clients.local_broker`) is a
Kafka-protocol broker, not Kafka: its ``read_committed`` shows aborted transactions and its
end offsets are reported too low. This one is Apache Kafka itself, for the guarantees only
Kafka gives. It needs ``java`` (17+ for Kafka 4) and ``mvn`` on the PATH; the jars are
resolved once by Maven into ``~/.m2`` and the classpath is cached in
``~/.cache/kernelstream/`` (``python -m kernelstream.kafka_client.apache fetch`` does only
that, for CI). Without them :func:`apache_broker` raises :class:`BrokerUnavailableError` with the
reason, which tests turn into a skip.

``deploy/kafka/kafka-broker.sh`` starts the same broker from a shell, without kernelstream.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

KAFKA_VERSION = "4.1.1"
SCALA_VERSION = "2.13"
# the JVM of a throw-away broker: small heap, quick start (C1 only) rather than peak speed
JVM_OPTIONS = ("-Xms256m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               "-Djava.awt.headless=true")

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kernelstream.local</groupId>
  <artifactId>kafka-broker-classpath</artifactId>
  <version>1</version>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_{scala}</artifactId>
      <version>{version}</version>
    </dependency>
  </dependencies>
</project>
"""


class BrokerUnavailableError(RuntimeError):
    """Apache Kafka cannot be started here (no java or mvn, or the jars do not resolve)."""


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kernelstream"


def classpath(version: str = KAFKA_VERSION, timeout: float = 900.0) -> str:
    """The broker's classpath (jars in ``~/.m2``): from the cache file when every jar it names
    is still there, else resolved by ``mvn dependency:build-classpath`` (downloads once)."""
    cached = cache_dir() / f"kafka_{SCALA_VERSION}-{version}.classpath"
    with contextlib.suppress(OSError):
        cp = cached.read_text().strip()
        if cp and all(Path(j).is_file() for j in cp.split(os.pathsep)):
            return cp
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BrokerUnavailableError("mvn is not on the PATH (it fetches the Kafka jars)")
    with tempfile.TemporaryDirectory(prefix="kafka-pom-") as d:
        (Path(d) / "pom.xml").write_text(_POM.format(scala=SCALA_VERSION, version=version))
        out = Path(d) / "classpath.txt"
        try:
            res = subprocess.run(
                [mvn, "-q", "-B", "dependency:build-classpath", f"-Dmdep.outputFile={out}"],
                cwd=d, capture_output=True, text=True, timeout=timeout,
                stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise BrokerUnavailableError(f"mvn did not resolve kafka_{SCALA_VERSION}:{version} "
                                    f"within {timeout:g} s") from None
        if res.returncode != 0 or not out.is_file():
            tail = (res.stdout + res.stderr).strip().splitlines()[-3:]
            raise BrokerUnavailableError(f"mvn could not resolve kafka_{SCALA_VERSION}:{version}: "
                                    + " | ".join(tail))
        cp = out.read_text().strip()
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(cp + "\n")
    return cp


def storage_tool(cp: str) -> str:
    """The main class of ``kafka-storage``: Scala ``kafka.tools.StorageTool`` in the core jar up
    to Kafka 4.1, ``org.apache.kafka.tools.StorageTool`` where it has moved to Java."""
    for jar in cp.split(os.pathsep):
        if Path(jar).name.startswith(f"kafka_{SCALA_VERSION}-"):
            with zipfile.ZipFile(jar) as z:
                if "kafka/tools/StorageTool.class" in z.namelist():
                    return "kafka.tools.StorageTool"
    return "org.apache.kafka.tools.StorageTool"


def random_cluster_id() -> str:
    """A cluster id as ``kafka-storage random-uuid`` makes it (a UUID, base64url, 22 chars),
    never starting with "-" (Kafka's ``Uuid.randomUuid`` draws again: the tools' argument
    parser would take it for an option)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):
            return cid


def server_properties(port: int, controller_port: int, log_dir: str | Path,
                      host: str = "127.0.0.1") -> str:
    """``server.properties`` of a one-node KRaft cluster (broker and controller, node 1) on
    ``host``; internal topics with one replica, so transactions and groups work."""
    return "\n".join((
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.voters=1@{host}:{controller_port}",
        f"listeners=PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}",
        f"advertised.listeners=PLAINTEXT://{host}:{port}",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=PLAINTEXT",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        f"log.dirs={log_dir}",
        "num.partitions=1",
        "offsets.topic.replication.factor=1",
        "offsets.topic.num.partitions=1",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "transaction.state.log.num.partitions=1",
        "share.coordinator.state.topic.replication.factor=1",
        "share.coordinator.state.topic.min.isr=1",
        "group.initial.rebalance.delay.ms=0",
        "auto.create.topics.enable=false",
        "",
    ))


def _free_ports(n: int, host: str) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:  # all bound at once: n different ports
            s.bind((host, 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def _tail(path: Path, lines: int = 5) -> str:
    with contextlib.suppress(OSError):
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    return ""


def _serves(bootstrap: str) -> bool:
    """Whether the broker answers a metadata request with its controller known."""
    from kafka import KafkaAdminClient  # kafka-python: only once a broker runs
    from kafka.errors import KafkaError

    host, _, port = bootstrap.rpartition(":")
    with contextlib.suppress(OSError), socket.create_connection((host, int(port)), 1):
        try:  # only "not (yet) there" answers count as no: a bad setting must raise
            admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=3000)
        except (KafkaError, OSError):
            return False
        try:
            admin.describe_cluster()
            admin.list_topics()
            return True
        except (KafkaError, OSError):
            return False
        finally:
            admin.close()
    return False


@contextlib.contextmanager
def apache_broker(version: str = KAFKA_VERSION, timeout: float = 120.0,
                  host: str = "127.0.0.1") -> Iterator[str]:
    """Start Apache Kafka ``version`` (one KRaft node, logs in a temporary directory) on free
    ports of ``host``; yield its ``HOST:PORT`` once it serves metadata; stop it (SIGTERM: a
    controlled shutdown; SIGKILL after 30 s) and delete its logs on exit. Raises
    :class:`BrokerUnavailableError` when java or mvn is missing or the jars do not resolve, and
    ``RuntimeError`` with the tail of its output when the broker fails to start."""
    java = shutil.which("java")
    if java is None:
        raise BrokerUnavailableError("java is not on the PATH")
    cp = classpath(version)
    work = Path(tempfile.mkdtemp(prefix="kafka-kraft-"))
    proc: subprocess.Popen[bytes] | None = None
    try:
        port, cport = _free_ports(2, host)
        props = work / "server.properties"
        props.write_text(server_properties(port, cport, work / "logs", host))
        base = [java, *JVM_OPTIONS, "-cp", cp]
        fmt = subprocess.run([*base, storage_tool(cp), "format", "-t", random_cluster_id(),
                              "-c", str(props)], capture_output=True, text=True,
                             timeout=timeout, stdin=subprocess.DEVNULL)
        if fmt.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed ({fmt.returncode}): "
                               + (fmt.stdout + fmt.stderr).strip()[-500:])
        log = work / "broker.out"
        with open(log, "wb") as fh:
            proc = subprocess.Popen([*base, "kafka.Kafka", str(props)], stdout=fh,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        bootstrap = f"{host}:{port}"
        deadline = time.monotonic() + timeout
        while not _serves(bootstrap):
            if proc.poll() is not None:
                raise RuntimeError(f"the Kafka broker exited ({proc.returncode}): {_tail(log)}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the Kafka broker did not serve on {bootstrap} within "
                                   f"{timeout:g} s: {_tail(log)}")
            time.sleep(0.5)
        yield bootstrap
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """``python -m kernelstream.kafka_client.apache fetch [VERSION]``: resolve and cache the
    jars (CI runs it once; a failure is one line and exit 1, and the tests then skip)."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] != "fetch" or len(args) > 2:
        print("usage: python -m kernelstream.kafka_client.apache fetch [VERSION]",
              file=sys.stderr)
        return 2
    version = args[1] if len(args) > 1 else KAFKA_VERSION
    try:
        cp = classpath(version)
    except BrokerUnavailableError as exc:
        print(f"kafka {version}: {exc}", file=sys.stderr)
        return 1
    print(f"kafka {version}: {len(cp.split(os.pathsep))} jars")
    return 0


if __name__ == "__main__":
    sys.exit(main())
