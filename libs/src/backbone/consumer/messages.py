"""What the idempotent consumer works with: polled messages, decoded events, the unit of work a
handler gets, and the contract check that turns a message into an event or a rejection.

Pure: no I/O. ``decode_inbound`` is shared by the consumer loop and the dead-letter replay, so a
replayed message passes exactly the checks a consumed one does.

Card data (DESIGN §9): a message that carries a card number in any text or bytes field, or in a map
key (and, for commands, which come from upstream services, also in an integer field or a Kafka
header) is refused as ``card_data_forbidden`` before any other check and never reaches a handler.
Its dead letter keeps a redacted re-encoding of it (card numbers replaced, integers zeroed), never
the bytes as received; so does the dead-letter topic. Bytes that do not decode at all are kept with
any card-shaped digits in them masked (they cannot be replayed anyway).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import psycopg
from confluent_kafka import Message

from backbone import tracing
from backbone.avro import AvroCodec, DecodedEvent, DecodeError, InvalidEnvelope, MalformedDatum, UnknownSchema
from backbone.carddata import (
    CARD_DATA_CODE,
    card_spans,
    encoded_may_hold_card_number,
    find_card_data,
    find_card_number,
    find_in_text_pairs,
    redact_card_numbers,
)
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
    trace_headers: Mapping[str, str] = field(default_factory=dict)  # traceparent/tracestate, if any

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
REFUSED: Final = "refused"  # the error class of a message a handler refused (dead_letters.error_class)
WAITED: Final = "waited"  # ... of a message that waited (NotYet) longer than CONSUMER_WAIT_MAX_MS


class Refuse(Exception):
    """Raised by a handler for a message that can never succeed: input the service must not act on,
    whatever is retried (a contract broken, a command the request rules refuse, a posting the books
    cannot take). The loop dead-letters that message at once (error class ``refused``, this reason),
    without counting attempts, and applies the rest of its batch in the same transaction.

    A batch handler names the message (``event_id``); ``per_event`` fills it in. Raise it before the
    message's own writes, or let the batch roll back: the loop re-applies the batch without it."""

    def __init__(self, reason: str, event_id: str | None = None) -> None:
        super().__init__(reason)
        self.reason, self.event_id = reason, event_id


class NotYet(Exception):
    """Raised by a handler for a message that cannot be applied *yet*: it needs a fact that travels
    under another key (so on another partition, in no order with it) and has not been applied.
    The message's partition waits and the others move on, as after a failure, but a wait is not a
    failed attempt: it is asked again every ``CONSUMER_RETRY_BACKOFF_MS`` until the fact is there.
    After ``CONSUMER_WAIT_MAX_MS`` of waiting it is dead-lettered (error class ``waited``): the fact
    it waits for may never come, and a person decides. The batch handler names the message
    (``event_id``), as with ``Refuse``."""

    def __init__(self, reason: str, event_id: str | None = None) -> None:
        super().__init__(reason)
        self.reason, self.event_id = reason, event_id


def per_event(handler: Callable[[UnitOfWork, InboundEvent], None]) -> BatchHandler:
    """Adapt a one-event handler to the batch interface (a ``Refuse`` names its event)."""

    def handle(uow: UnitOfWork, events: Sequence[InboundEvent]) -> None:
        for event in events:
            try:
                handler(uow, event)
            except Refuse as refusal:
                if refusal.event_id is None:
                    refusal.event_id = event.event_id
                raise

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

    @property
    def trace_headers(self) -> dict[str, str]:
        """Only the W3C trace headers (the hot path decodes nothing else)."""
        raw = self.raw_headers or []
        return tracing.trace_headers(raw.items() if isinstance(raw, dict) else raw)


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
    """Why a message cannot be applied, whatever the handler: it goes straight to the dead letters.
    ``redacted`` is set when the message carried card data: the (key, payload) to keep instead."""

    error_class: str
    reason: str
    event: DecodedEvent | None = None
    redacted: tuple[bytes | None, bytes | None] | None = None


CARD_DATA_REASON: Final = (
    "the message carries card data (a card number or security code); only tokens are accepted."
    " Kept redacted: the original bytes are not stored"
)


def decode_inbound(
    codec: AvroCodec,
    catalogue: TopicCatalogue,
    topic: str,
    key: bytes | None,
    value: bytes | None,
    headers: Callable[[], Mapping[str, str]] | None = None,
) -> DecodedEvent | Rejection:
    """Decode and check one message against the contract: Avro + envelope, card data, key, topic's
    event types. ``headers`` gives the message's Kafka headers when asked (commands only)."""
    try:
        event = codec.decode(value or b"")
    except UnknownSchema as exc:
        return Rejection("unknown_schema", exc.reason)
    except DecodeError as exc:
        return Rejection(_decode_error_class(exc), exc.reason)
    card_data = _card_data(codec, event, value or b"", key, headers)
    if card_data is not None:
        return card_data
    if key is None or key.decode("utf-8", "replace") != event.envelope.payment_id:
        reason = "Kafka key does not equal the envelope's payment_id: per-payment order is not guaranteed"
        return Rejection("key_mismatch", reason, event)
    try:
        catalogue.check_event(topic, event.event_type)
    except ValueError as exc:
        return Rejection("unexpected_event_type", str(exc), event)
    return event


def _card_data(
    codec: AvroCodec,
    event: DecodedEvent,
    encoded: bytes,
    key: bytes | None,
    headers: Callable[[], Mapping[str, str]] | None,
) -> Rejection | None:
    """A rejection with the redacted message when ``event`` (or its key, or a command's headers)
    carries card data; None otherwise. Our own events are scanned as text only (their integers are
    amounts, tickets and millisecond timestamps, never typed by a person), so their encoded bytes
    are screened first: walking every decoded record cost more than decoding it."""
    command = codec.catalogue.entry(event.event_type, event.writer_version).kind == "commands"
    screened_out = not command and not encoded_may_hold_card_number(encoded)
    found = not screened_out and find_card_data(event.body, numbers=command, fields=False)
    found = found or (key is not None and find_card_number(key.decode("latin-1")))
    found = found or (command and headers is not None and find_in_text_pairs(headers().items()))
    if not found:
        return None
    return Rejection(CARD_DATA_CODE, CARD_DATA_REASON, event, (redact_bytes(key), _reencoded(codec, event)))


def _reencoded(codec: AvroCodec, event: DecodedEvent) -> bytes | None:
    """``event`` with its card data replaced, encoded with its type's latest schema (the body is
    already resolved to it); None if the redacted record cannot be encoded."""
    record = _redact_record(event.body)
    record["envelope"] = {
        **record["envelope"],
        "schema_version": codec.catalogue.latest_version(event.event_type),
    }
    try:
        return codec.encode(event.event_type, record)
    except Exception:  # a redacted rendition is best effort; the letter is kept without it
        return None


def _redact_record(value: Any) -> Any:
    """A decoded Avro value with card numbers replaced, types kept: text and bytes masked, a
    card-shaped integer becomes 0."""
    if isinstance(value, str):
        return redact_card_numbers(value)
    if isinstance(value, bytes):
        return redact_bytes(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return 0 if find_card_number(str(value)) else value
    if isinstance(value, dict):
        return {redact_card_numbers(str(k)): _redact_record(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_record(item) for item in value]
    return value


def redact_bytes(data: bytes | None) -> bytes | None:
    """``data`` with every card-shaped run of ASCII digits masked (read as Latin-1: one byte, one
    character, so every other byte stays as it was)."""
    if data is None:
        return None
    text = data.decode("latin-1")
    return redact_card_numbers(text).encode("latin-1") if card_spans(text) else data


def dead_letter_for(
    message: Polled,
    error_class: str,
    reason: str,
    event: DecodedEvent | None = None,
    attempts: int = 1,
    redacted: tuple[bytes | None, bytes | None] | None = None,
) -> DeadLetter:
    """The dead letter of ``message``. Its key and payload are ``redacted`` when given (card data);
    bytes that never decoded are kept with card-shaped digits masked; header values always are."""
    if redacted is not None:
        key, payload = redacted
    elif event is None:
        key, payload = redact_bytes(message.key), redact_bytes(message.value)
    else:
        key, payload = message.key, message.value
    return DeadLetter(
        topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        key=key,
        payload=payload,
        headers={redact_card_numbers(k): redact_card_numbers(v) for k, v in message.headers.items()},
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
