"""Fixtures for integration tests: the real Kafka and PostgreSQL, a fresh database and topic per
test, and the probe service as real processes (relay, consumer) started with test settings."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from backbone.testing import databases, probe
from backbone.testing import kafka as test_kafka
from backbone.testing import stack as test_stack
from backbone.testing.harness import EVENTS, PARTITIONS, Probe


@pytest.fixture
def probe_service(stack: test_stack.Stack, tmp_path: Path) -> Iterator[Probe]:
    db_url = databases.create_database(stack.pg_admin_url, [probe.MIGRATIONS])
    topic, emit_topic = test_kafka.unique_topic("it"), test_kafka.unique_topic("it-emit")
    for name in (topic, emit_topic):
        test_kafka.create_topics(stack.kafka_bootstrap, test_kafka.probe_catalogue(name, PARTITIONS, EVENTS))
    service = Probe(stack, db_url, topic, emit_topic, tmp_path)
    yield service
    for proc in service.procs:
        proc.kill()
    databases.drop_database(stack.pg_admin_url, db_url)
    test_kafka.delete_topics(stack.kafka_bootstrap, [topic, emit_topic])
