"""Throwaway topics and reading a whole topic back, for tests."""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from backbone.consumer.messages import Polled
from backbone.kafka.topics import DLQ_SUFFIX, TopicCatalogue, TopicSpec, ensure_topics


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def probe_catalogue(topic: str, partitions: int, events: frozenset[str] = frozenset()) -> TopicCatalogue:
    """A catalogue with one topic and its dead-letter topic (test topics are not in topics.toml)."""
    base = TopicSpec(topic, partitions, 1, 3_600_000, "delete", events=events)
    dlq = TopicSpec(topic + DLQ_SUFFIX, partitions, 1, 3_600_000, "delete", is_dead_letter=True)
    return TopicCatalogue([base, dlq])


def delete_topics(bootstrap: str, names: list[str]) -> None:
    """Best-effort removal of throwaway topics (their dead-letter twins included)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics(
        [*names, *(n + DLQ_SUFFIX for n in names)], operation_timeout=10
    ).values():
        with contextlib.suppress(Exception):
            future.result()


def create_topics(bootstrap: str, catalogue: TopicCatalogue) -> None:
    problems = ensure_topics(AdminClient({"bootstrap.servers": bootstrap}), catalogue)
    if problems:
        raise RuntimeError(f"could not create test topics: {problems}")


def read_topic(
    bootstrap: str, topic: str, *, expect_at_least: int = 0, timeout_s: float = 30.0
) -> list[Polled]:
    """Every message of ``topic`` from the beginning, once at least ``expect_at_least`` arrived and
    no more came for a short while (or the timeout passed)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics[topic]
        consumer.assign([TopicPartition(topic, p, 0) for p in metadata.partitions])
        records: list[Polled] = []
        deadline = time.monotonic() + timeout_s
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            batch = consumer.consume(num_messages=1000, timeout=0.2)
            good = [m for m in batch if m.error() is None]
            records.extend(Polled.of(m) for m in good)
            if good:
                quiet_since = time.monotonic()
            elif len(records) >= expect_at_least and time.monotonic() - quiet_since > 1.0:
                break
        return records
    finally:
        consumer.close()


@contextlib.contextmanager
def topic_namespace(bootstrap: str, partitions: int = 3) -> Iterator[str]:
    """The whole catalogue under a fresh ``KAFKA_TOPIC_PREFIX`` (fewer partitions: tests are small).

    Yields the prefix; processes started with ``KAFKA_TOPIC_PREFIX=<prefix>`` see only these topics.
    The topics are deleted afterwards.
    """
    prefix = f"t{uuid.uuid4().hex[:8]}."
    base = TopicCatalogue.default() if not os.environ.get("KAFKA_TOPIC_PREFIX") else None
    if base is None:
        raise RuntimeError("topic_namespace() must run without KAFKA_TOPIC_PREFIX in its own environment")
    specs = [replace(spec, name=prefix + spec.name, partitions=partitions) for spec in base]
    create_topics(bootstrap, TopicCatalogue(specs))
    try:
        yield prefix
    finally:
        delete_topics(bootstrap, [s.name for s in specs if not s.is_dead_letter])
