"""End to end on the real stack: PSP webhook -> gateway (HTTP, PostgreSQL) -> outbox relay -> the
``psp.provider-events`` topic on real Kafka, keyed by the PSP payment id, raw body intact."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from backbone.avro import AvroCodec, DecodedEvent, SchemaCatalogue
from backbone.kafka.topics import DLQ_SUFFIX, TopicCatalogue
from backbone.testing import kafka as test_kafka
from backbone.testing.processes import Proc, wait_until
from backbone.testing.stack import Stack
from confluent_kafka import Consumer, TopicPartition
from webhook_gateway.testing import Gateway, gateway_env, webhook_body

TOPIC = "psp.provider-events"
CODEC = AvroCodec(SchemaCatalogue.default())


def ensure_topic(bootstrap: str) -> None:
    """The real topic from schemas/topics.toml (``make up`` creates it; this is idempotent)."""
    catalogue = TopicCatalogue.default()
    test_kafka.create_topics(
        bootstrap, TopicCatalogue([catalogue.get(TOPIC), catalogue.get(TOPIC + DLQ_SUFFIX)])
    )


def consumer_at_end(bootstrap: str) -> Consumer:
    """A reader positioned at the topic's current end: it sees only what this test produces."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"wh-it-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    partitions = consumer.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
    assignment = []
    for p in partitions:
        _, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)
        assignment.append(TopicPartition(TOPIC, p, high))
    consumer.assign(assignment)
    return consumer


Found = dict[str, list[tuple[bytes, DecodedEvent]]]


def read_events(consumer: Consumer, wanted: set[str], timeout_s: float = 30) -> Found:
    """(key, decoded event) per provider_event_id in ``wanted``: until each was seen, then one more
    second to catch a second copy if one were published (other producers may share the topic:
    everything else is ignored)."""
    found: Found = {}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not wanted <= set(found):
        _collect(consumer, wanted, found)
    settle = time.monotonic() + 1.0
    while time.monotonic() < settle:
        _collect(consumer, wanted, found)
    return found


def _collect(consumer: Consumer, wanted: set[str], found: Found) -> None:
    for message in consumer.consume(num_messages=500, timeout=0.2):
        value = message.value()
        if message.error() is not None or value is None:
            continue
        event = CODEC.decode(value)
        if event.event_type == "ProviderEventReceived" and event.body["provider_event_id"] in wanted:
            found.setdefault(event.body["provider_event_id"], []).append((message.key() or b"", event))


def test_webhook_reaches_the_topic_keyed_by_payment_id_with_raw_body_intact(
    stack: Stack,
    start_gateway,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    """Three webhooks (a payment intent delivered twice, a refund of it, and one naming no payment)
    each land on psp.provider-events exactly once: key = PSP payment id (or 'simpsp:<event id>'),
    raw_body byte-identical to what the PSP sent, receipt id and receipt time as stored, and the
    outbox rows are marked published."""
    ensure_topic(stack.kafka_bootstrap)
    consumer = consumer_at_end(stack.kafka_bootstrap)
    try:
        gateway: Gateway = start_gateway()
        relay = Proc(
            ["-m", "webhook_gateway", "relay"],
            {**gateway_env(gateway.db_url, gateway.port), "KAFKA_BOOTSTRAP_SERVERS": stack.kafka_bootstrap},
            tmp_path / "relay.log",
        )
        gateway.procs.append(relay)
        suffix = uuid.uuid4().hex[:10]
        payment_id = f"pi_e2e_{suffix}"
        bodies = {
            f"evt_pi_{suffix}": webhook_body(f"evt_pi_{suffix}", payment_id),
            f"evt_re_{suffix}": webhook_body(f"evt_re_{suffix}", payment_id, kind="refund"),
            f"evt_none_{suffix}": webhook_body(f"evt_none_{suffix}", None),
        }
        for raw in bodies.values():
            assert gateway.deliver(raw).status == 200
        assert gateway.deliver(bodies[f"evt_pi_{suffix}"]).body["duplicate"] is True

        found = read_events(consumer, set(bodies))
        assert {event_id: len(copies) for event_id, copies in found.items()} == dict.fromkeys(bodies, 1)
        for event_id, raw in bodies.items():
            [(key, event)] = found[event_id]
            expected_key = f"simpsp:{event_id}" if "none" in event_id else payment_id
            assert key.decode() == event.envelope.payment_id == expected_key
            assert event.body["raw_body"] == raw
            assert event.body["signature_verified"] is True
            receipt_id, received_ms = gateway.rows(
                "SELECT id, (extract(epoch FROM received_at) * 1000)::bigint FROM provider_events"
                " WHERE provider_event_id = %s",
                event_id,
            )[0]
            assert event.body["receipt_id"] == receipt_id
            assert abs(event.body["received_at_ms"] - received_ms) <= 1
        wait_until(
            lambda: gateway.scalar("SELECT count(*) FROM outbox WHERE published_at IS NULL") == 0,
            15,
            "outbox marked published",
        )
        assert "relay.leader" in relay.logs()
    finally:
        consumer.close()


def test_payout_webhooks_reach_the_topic_keyed_by_the_payout_id(
    stack: Stack,
    start_gateway,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    """payout.* webhooks are not filtered: each is stored once and published once, keyed by the
    payout's own id (po_...), so a payout's paid and returned events share a partition, raw body intact."""
    ensure_topic(stack.kafka_bootstrap)
    consumer = consumer_at_end(stack.kafka_bootstrap)
    try:
        gateway: Gateway = start_gateway()
        relay = Proc(
            ["-m", "webhook_gateway", "relay"],
            {**gateway_env(gateway.db_url, gateway.port), "KAFKA_BOOTSTRAP_SERVERS": stack.kafka_bootstrap},
            tmp_path / "relay.log",
        )
        gateway.procs.append(relay)
        suffix = uuid.uuid4().hex[:10]
        payout_id = f"po_e2e_{suffix}"
        bodies = {
            f"evt_paid_{suffix}": webhook_body(f"evt_paid_{suffix}", payout_id, kind="payout"),
            f"evt_ret_{suffix}": webhook_body(f"evt_ret_{suffix}", payout_id, kind="payout"),
        }
        for raw in bodies.values():
            assert gateway.deliver(raw).status == 200
        found = read_events(consumer, set(bodies))
        assert {event_id: len(copies) for event_id, copies in found.items()} == dict.fromkeys(bodies, 1)
        for event_id, raw in bodies.items():
            [(key, event)] = found[event_id]
            assert key.decode() == event.envelope.payment_id == payout_id
            assert event.body["raw_body"] == raw
            stored = gateway.scalar(
                "SELECT provider_payment_id FROM provider_events WHERE provider_event_id = %s", event_id
            )
            assert stored == payout_id
    finally:
        consumer.close()
