"""Kafka input: what the webhook gateway and upstream services would publish."""

from __future__ import annotations

from typing import Any

from backbone.avro import AvroCodec
from backbone.invariants import invariant
from backbone.kafka.config import producer_config
from backbone.kafka.topics import TopicCatalogue
from backbone.outbox.writer import OutboxMessage, OutboxWriter
from confluent_kafka import Producer


class Publisher:
    """Publishes encoded events like another service's relay would (idempotent, murmur2, acks=all)."""

    def __init__(
        self, bootstrap_servers: str, catalogue: TopicCatalogue, codec: AvroCodec, producer: str
    ) -> None:
        self._writer = OutboxWriter(codec, catalogue, producer)
        self._producer = Producer(
            producer_config(bootstrap_servers, f"test-{producer}", delivery_timeout_ms=10_000)
        )

    def message(self, topic: str, event_type: str, key: str, body: dict[str, Any]) -> OutboxMessage:
        return self._writer.event(topic, event_type, key, body)

    def send(self, messages: list[OutboxMessage]) -> None:
        """Send in order and wait for every delivery (a message sent twice is a duplicate delivery)."""
        for m in messages:
            self._producer.produce(m.topic, value=m.payload, key=m.key.encode(), headers=dict(m.headers))
        remaining = self._producer.flush(15)
        invariant(remaining == 0, f"{remaining} test messages were not delivered")
