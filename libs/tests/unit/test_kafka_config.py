"""Unit tests of backbone.kafka.config: the librdkafka options the delivery guarantees rest on.

Exactly-once effects depend on an idempotent, acks=all producer with a stable partitioner and on a
consumer whose offsets move only when the loop commits them. These tests pin those options, so a
"harmless" config tweak that weakens a guarantee fails here first.
"""

from __future__ import annotations

from backbone.kafka.config import consumer_config, producer_config

PRODUCER = producer_config("broker:9092", "relay-1", delivery_timeout_ms=30_000)
CONSUMER = consumer_config(
    "broker:9092", "ledger", "ledger-1", session_timeout_ms=10_000, max_poll_interval_ms=300_000
)


def test_producer_is_idempotent_and_waits_for_all_replicas() -> None:
    """Retries never duplicate or reorder (idempotence) and delivery means every in-sync replica."""
    assert PRODUCER["enable.idempotence"] is True
    assert PRODUCER["acks"] == "all"


def test_producer_partitions_like_the_java_client() -> None:
    """murmur2_random keeps one payment_id on the same partition whichever client produced it."""
    assert PRODUCER["partitioner"] == "murmur2_random"


def test_producer_passes_its_arguments_through() -> None:
    """Bootstrap servers, client id and the delivery timeout come from the caller unchanged."""
    assert PRODUCER["bootstrap.servers"] == "broker:9092"
    assert PRODUCER["client.id"] == "relay-1"
    assert PRODUCER["message.timeout.ms"] == 30_000


def test_consumer_never_commits_or_stores_offsets_on_its_own() -> None:
    """Auto-commit and auto offset store are off: offsets move only after the database commit."""
    assert CONSUMER["enable.auto.commit"] is False
    assert CONSUMER["enable.auto.offset.store"] is False


def test_consumer_starts_a_new_group_at_the_earliest_offset() -> None:
    """A new consumer group reads history from the start instead of skipping unread events."""
    assert CONSUMER["auto.offset.reset"] == "earliest"


def test_consumer_reads_committed_only_and_passes_its_arguments_through() -> None:
    """read_committed isolation; group, client id and timeouts come from the caller unchanged."""
    assert CONSUMER["isolation.level"] == "read_committed"
    assert CONSUMER["bootstrap.servers"] == "broker:9092"
    assert CONSUMER["group.id"] == "ledger"
    assert CONSUMER["client.id"] == "ledger-1"
    assert CONSUMER["session.timeout.ms"] == 10_000
    assert CONSUMER["max.poll.interval.ms"] == 300_000


def test_each_call_returns_a_fresh_dict() -> None:
    """Callers add callbacks (error_cb) to the dict; that must not leak into another caller's config."""
    first = consumer_config("b:1", "g", "c", session_timeout_ms=1, max_poll_interval_ms=2)
    first["error_cb"] = print
    assert "error_cb" not in consumer_config("b:1", "g", "c", session_timeout_ms=1, max_poll_interval_ms=2)
    assert producer_config("b:1", "c", delivery_timeout_ms=1) is not producer_config(
        "b:1", "c", delivery_timeout_ms=1
    )
