#!/usr/bin/env bash
# A one-node Apache Kafka broker (KRaft: broker and controller in one JVM) from the Maven
# Central jars, with `java -cp`: no Kafka distribution, no Docker, no kernelstream needed.
#
#   deploy/kafka/kafka-broker.sh fetch     resolve the jars into ~/.m2 (mvn; once)
#   deploy/kafka/kafka-broker.sh up        format a fresh log directory, start, wait until it
#                                          accepts connections, print HOST:PORT
#   deploy/kafka/kafka-broker.sh down      stop it (SIGTERM: controlled shutdown) and delete
#                                          its log directory
#   deploy/kafka/kafka-broker.sh status    HOST:PORT and exit 0 if it runs, else exit 1
#
# Settings (environment): KAFKA_VERSION (4.1.1), HOST (127.0.0.1), PORT (9092),
# CONTROLLER_PORT (9093), STATE_DIR (${TMPDIR:-/tmp}/kernelstream-kafka: server.properties,
# logs/, broker.out, broker.pid), KEEP_LOGS=1 (down keeps the log directory).
# Needs java (17+ for Kafka 4) and mvn. kernelstream's tests start the same broker from
# Python: kernelstream.kafka_client.apache_broker().
set -euo pipefail

KAFKA_VERSION=${KAFKA_VERSION:-4.1.1}
SCALA_VERSION=2.13
HOST=${HOST:-127.0.0.1}
PORT=${PORT:-9092}
CONTROLLER_PORT=${CONTROLLER_PORT:-9093}
STATE_DIR=${STATE_DIR:-${TMPDIR:-/tmp}/kernelstream-kafka}
JVM_OPTIONS=(-Xms256m -Xmx512m -XX:+UseSerialGC -Djava.awt.headless=true)
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/kernelstream/kafka_${SCALA_VERSION}-${KAFKA_VERSION}.classpath

die() { echo "kafka-broker: $*" >&2; exit 1; }

classpath() {
    # the cached classpath while every jar it names is still in ~/.m2, else ask mvn
    if [ -s "$CACHE" ]; then
        local ok=1 jar
        IFS=: read -r -a jars <"$CACHE"
        for jar in "${jars[@]}"; do [ -f "$jar" ] || ok=0; done
        if [ "$ok" = 1 ]; then cat "$CACHE"; return; fi
    fi
    command -v mvn >/dev/null || die "mvn is not on the PATH (it fetches the Kafka jars)"
    local pom
    pom=$(mktemp -d)
    cat >"$pom/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kernelstream.local</groupId>
  <artifactId>kafka-broker-classpath</artifactId>
  <version>1</version>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_${SCALA_VERSION}</artifactId>
      <version>${KAFKA_VERSION}</version>
    </dependency>
  </dependencies>
</project>
POM
    if ! (cd "$pom" && mvn -q -B dependency:build-classpath -Dmdep.outputFile="$pom/cp.txt" \
            </dev/null >"$pom/mvn.log" 2>&1); then
        tail -3 "$pom/mvn.log" >&2
        rm -rf "$pom"
        die "mvn could not resolve org.apache.kafka:kafka_${SCALA_VERSION}:${KAFKA_VERSION}"
    fi
    mkdir -p "$(dirname "$CACHE")"
    cp "$pom/cp.txt" "$CACHE"
    rm -rf "$pom"
    cat "$CACHE"
}

storage_tool() {
    # kafka.tools.StorageTool (Scala, core jar) up to 4.1; org.apache.kafka.tools.StorageTool after
    local core
    core=$(tr ':' '\n' <<<"$1" | grep "/kafka_${SCALA_VERSION}-${KAFKA_VERSION}.jar$" || true)
    # grep -c reads the whole listing (grep -q would end unzip with SIGPIPE under pipefail)
    if [ -n "$core" ] && [ "$(unzip -Z1 "$core" 2>/dev/null | grep -c '^kafka/tools/StorageTool.class$')" != 0 ]; then
        echo kafka.tools.StorageTool
    else
        echo org.apache.kafka.tools.StorageTool
    fi
}

running() { [ -f "$STATE_DIR/broker.pid" ] && kill -0 "$(cat "$STATE_DIR/broker.pid")" 2>/dev/null; }

up() {
    command -v java >/dev/null || die "java is not on the PATH"
    running && die "already running (pid $(cat "$STATE_DIR/broker.pid")); run 'down' first"
    local cp
    cp=$(classpath)
    rm -rf "$STATE_DIR" && mkdir -p "$STATE_DIR"
    cat >"$STATE_DIR/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@${HOST}:${CONTROLLER_PORT}
listeners=PLAINTEXT://${HOST}:${PORT},CONTROLLER://${HOST}:${CONTROLLER_PORT}
advertised.listeners=PLAINTEXT://${HOST}:${PORT}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=${STATE_DIR}/logs
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
PROPS
    local cluster_id
    # base64url of 16 random bytes, as `kafka-storage random-uuid`; never starting with "-"
    # (the tool's argument parser would take it for an option)
    cluster_id=-
    while [ "${cluster_id#-}" != "$cluster_id" ]; do
        cluster_id=$(head -c16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
    done
    java "${JVM_OPTIONS[@]}" -cp "$cp" "$(storage_tool "$cp")" format -t "$cluster_id" \
        -c "$STATE_DIR/server.properties" >"$STATE_DIR/format.out" 2>&1 \
        || { cat "$STATE_DIR/format.out" >&2; die "kafka-storage format failed"; }
    nohup java "${JVM_OPTIONS[@]}" -cp "$cp" kafka.Kafka "$STATE_DIR/server.properties" \
        >"$STATE_DIR/broker.out" 2>&1 </dev/null &
    echo $! >"$STATE_DIR/broker.pid"
    for _ in $(seq 240); do
        running || { tail -5 "$STATE_DIR/broker.out" >&2; die "the broker exited"; }
        if (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null; then
            echo "$HOST:$PORT"
            return
        fi
        sleep 0.5
    done
    down
    die "the broker did not listen on $HOST:$PORT within 120 s"
}

down() {
    if running; then
        local pid
        pid=$(cat "$STATE_DIR/broker.pid")
        kill "$pid"
        for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    fi
    rm -f "$STATE_DIR/broker.pid"
    [ -n "${KEEP_LOGS:-}" ] || rm -rf "$STATE_DIR"
}

case "${1:-}" in
    fetch) classpath | tr ':' '\n' | wc -l | sed "s/\$/ jars (kafka_${SCALA_VERSION}-${KAFKA_VERSION})/" ;;
    up) up ;;
    down) down ;;
    status) if running; then echo "$HOST:$PORT"; else exit 1; fi ;;
    *) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
