"""What the idempotent consumer works with: polled messages, decoded events, the unit of work a
handler gets, and the contract check that turns a message into an event or a rejection.

Pure: no I/O. ``decode_inbound`` is shared by the consumer loop and the dead-letter replay, so a
replayed message passes exactly the checks a consumed one does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from confluent_kafka import Message

from backbone.avro import AvroCodec, DecodedEvent, DecodeError, InvalidEnvelope, MalformedDatum, UnknownSchema
from backbone.consumer.inbox import DeadLetter, TopicPartitionKey
from backbone.invariants import invariant
from backbone.kafka.topics import TopicCatalogue
from backbone.outbox.writer import OutboxWriter


@dataclass(frozen=True)
class InboundEvent:
    """A decoded event with where it came from."""

    event: DecodedEvent
    topic: str
    partition: int
    offset: int

    @property
    def event_id(self) -> str:
        return self.event.envelope.event_id

    @property
    def event_type(self) -> str:
        return self.event.event_type


@dataclass(frozen=True)
class UnitOfWork:
    """What a handler works with: the batch's connection inside its open transaction, the outbox."""

    conn: psycopg.Connection
    outbox: OutboxWriter | None
    consumer: str


BatchHandler = Callable[[UnitOfWork, Sequence[InboundEvent]], None]


def per_event(handler: Callable[[UnitOfWork, InboundEvent], None]) -> BatchHandler:
    """Adapt a one-event handler to the batch interface."""

    def handle(uow: UnitOfWork, events: Sequence[InboundEvent]) -> None:
        for event in events:
            handler(uow, event)

    return handle


@dataclass(frozen=True)
class Polled:
    """A consumed Kafka message with its coordinates checked once (librdkafka types them optional).

    Headers stay as librdkafka gave them until someone asks (dead letters do): converting them
    for every message cost as much as half an Avro decode.
    """

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    raw_headers: Any = None

    @classmethod
    def of(cls, message: Message) -> Polled:
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        has_coordinates = topic is not None and partition is not None and offset is not None
        invariant(has_coordinates, "a consumed message without topic/partition/offset")
        assert topic is not None and partition is not None and offset is not None
        return cls(
            topic, partition, offset, _as_bytes(message.key()), _as_bytes(message.value()), message.headers()
        )

    @property
    def headers(self) -> dict[str, str]:
        raw = self.raw_headers or []
        pairs = raw.items() if isinstance(raw, dict) else raw
        return {k: _text(v) for k, v in pairs if v is not None}


def _text(value: str | bytes) -> str:
    return value if isinstance(value, str) else value.decode("utf-8", "replace")


def _as_bytes(value: str | bytes | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


@dataclass(frozen=True)
class Item:
    """One polled message: decoded, or the dead letter it turns into."""

    message: Polled
    inbound: InboundEvent | None
    letter: DeadLetter | None

    @property
    def tp(self) -> TopicPartitionKey:
        return (self.message.topic, self.message.partition)


@dataclass(frozen=True)
class Rejection:
    """Why a message cannot be applied, whatever the handler: it goes straight to the dead letters."""

    error_class: str
    reason: str
    event: DecodedEvent | None = None


def decode_inbound(
    codec: AvroCodec, catalogue: TopicCatalogue, topic: str, key: bytes | None, value: bytes | None
) -> DecodedEvent | Rejection:
    """Decode and check one message against the contract: Avro + envelope, key, topic's event types."""
    try:
        event = codec.decode(value or b"")
    except UnknownSchema as exc:
        return Rejection("unknown_schema", exc.reason)
    except DecodeError as exc:
        return Rejection(_decode_error_class(exc), exc.reason)
    if key is None or key.decode("utf-8", "replace") != event.envelope.payment_id:
        reason = "Kafka key does not equal the envelope's payment_id: per-payment order is not guaranteed"
        return Rejection("key_mismatch", reason, event)
    try:
        catalogue.check_event(topic, event.event_type)
    except ValueError as exc:
        return Rejection("unexpected_event_type", str(exc), event)
    return event


def dead_letter_for(
    message: Polled, error_class: str, reason: str, event: DecodedEvent | None = None, attempts: int = 1
) -> DeadLetter:
    return DeadLetter(
        topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        key=message.key,
        payload=message.value,
        headers=message.headers,
        error_class=error_class,
        reason=reason,
        attempts=attempts,
        event_id=event.envelope.event_id if event else None,
        event_type=event.event_type if event else None,
    )


def _decode_error_class(exc: DecodeError) -> str:
    if isinstance(exc, InvalidEnvelope):
        return "invalid_envelope"
    if isinstance(exc, MalformedDatum):
        return "malformed_datum"
    return "undecodable"


def first_occurrences(events: list[InboundEvent]) -> list[InboundEvent]:
    """Drop repeats of an event_id within one batch (a relay republished it): apply the first."""
    seen: set[str] = set()
    unique = []
    for event in events:
        if event.event_id not in seen:
            seen.add(event.event_id)
            unique.append(event)
    return unique


def offset_ranges(items: list[Item]) -> dict[TopicPartitionKey, tuple[int, int]]:
    """Per partition, the first and last offset in the batch."""
    ranges: dict[TopicPartitionKey, tuple[int, int]] = {}
    for item in items:
        first, _ = ranges.get(item.tp, (item.message.offset, item.message.offset))
        ranges[item.tp] = (first, item.message.offset)
    return ranges


def first_offsets(items: list[Item]) -> dict[TopicPartitionKey, int]:
    positions: dict[TopicPartitionKey, int] = {}
    for item in items:
        positions.setdefault(item.tp, item.message.offset)
    return positions
