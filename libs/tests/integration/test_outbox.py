"""The outbox writer inside business transactions, against real PostgreSQL (and Kafka for (e))."""

from __future__ import annotations

import pytest
from backbone.avro import AvroCodec, SchemaCatalogue
from backbone.invariants import InvariantViolation
from backbone.outbox import OutboxWriter
from backbone.postgres import connect
from backbone.testing import kafka as test_kafka
from backbone.testing.harness import EVENTS, Probe
from backbone.testing.probe import EVENT_TYPE, captured_body
from backbone.testing.processes import wait_until


def writer_for(topic: str) -> OutboxWriter:
    codec = AvroCodec(SchemaCatalogue.default())
    return OutboxWriter(codec, test_kafka.probe_catalogue(topic, 3, EVENTS), "probe")


def test_rolled_back_business_transaction_publishes_nothing(probe_service: Probe) -> None:
    """(e) An outbox row written in a transaction that rolls back never reaches Kafka: the relay
    publishes a later committed marker event, and the topic holds only that marker."""
    writer = writer_for(probe_service.topic)
    with connect(probe_service.db_url) as conn:
        with pytest.raises(RuntimeError, match="business rule failed"), conn.transaction():
            writer.add(conn, probe_service.topic, EVENT_TYPE, "pay-rolled-back", captured_body(1))
            conn.execute(
                "INSERT INTO probe_effects (event_id, payment_id, seq, consumer, kafka_partition,"
                " kafka_offset, occurred_at_ms) VALUES (gen_random_uuid(), 'x', 1, 'x', 0, 0, 1)"
            )
            raise RuntimeError("business rule failed")
        with conn.transaction():
            marker = writer.add(conn, probe_service.topic, EVENT_TYPE, "pay-marker", captured_body(2))
    probe_service.start("relay")
    records = test_kafka.read_topic(
        probe_service.stack.kafka_bootstrap, probe_service.topic, expect_at_least=1
    )
    assert [r.headers["event_id"] for r in records] == [marker]
    assert probe_service.scalar("SELECT count(*) FROM outbox") == 1
    assert probe_service.effects() == 0


def test_outbox_write_outside_a_transaction_is_refused(probe_service: Probe) -> None:
    """Writing the outbox in autocommit mode (no business transaction) raises and stores nothing:
    an event must never be published for a change that could still roll back."""
    writer = writer_for(probe_service.topic)
    with connect(probe_service.db_url, autocommit=True) as conn, pytest.raises(InvariantViolation):
        writer.add(conn, probe_service.topic, EVENT_TYPE, "pay-1", captured_body(1))
    assert probe_service.scalar("SELECT count(*) FROM outbox") == 0


def test_bad_events_fail_the_business_transaction(probe_service: Probe) -> None:
    """An event type the topic does not carry, or a body that does not match its schema, raises
    ValueError inside the business transaction: the caller's transaction rolls back, nothing stored."""
    writer = writer_for(probe_service.topic)
    with connect(probe_service.db_url) as conn:
        with pytest.raises(ValueError, match="not allowed on topic"), conn.transaction():
            writer.add(conn, probe_service.topic, "Mt5Credited", "pay-1", {})
        with pytest.raises(ValueError), conn.transaction():
            writer.add(
                conn, probe_service.topic, EVENT_TYPE, "pay-1", {**captured_body(1), "amount_minor": "12.5"}
            )
    assert probe_service.scalar("SELECT count(*) FROM outbox") == 0


def test_notify_fires_only_at_commit(probe_service: Probe) -> None:
    """The outbox trigger's NOTIFY reaches a listener when the writing transaction commits, and
    not before: the relay is woken for committed rows only."""
    writer = writer_for(probe_service.topic)
    with connect(probe_service.db_url, autocommit=True) as listener, connect(probe_service.db_url) as conn:
        listener.execute("LISTEN backbone_outbox")
        with conn.transaction():
            writer.add(conn, probe_service.topic, EVENT_TYPE, "pay-1", captured_body(1))
            assert list(listener.notifies(timeout=0.5)) == []
        received: list[object] = []
        wait_until(lambda: received.extend(listener.notifies(timeout=0.2)) or bool(received), 5, "NOTIFY")
