"""The Apache Kafka broker of the tests that need Kafka itself (transactions, its
``read_committed``), not the tansu stand-in: one KRaft node per test module, started from
the Maven jars (``kafka_client.apache_broker``); skipped, with the reason, where java or mvn
is missing or the jars do not resolve (``.ci/run`` fetches them first)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kernelstream.kafka_client import apache_broker
from kernelstream.kafka_client.apache import BrokerUnavailableError


@pytest.fixture(scope="module")
def kafka() -> Iterator[str]:
    try:
        with apache_broker() as bootstrap:
            yield bootstrap
    except BrokerUnavailableError as exc:
        pytest.skip(f"Apache Kafka unavailable: {exc}")
