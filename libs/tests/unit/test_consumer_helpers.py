"""Unit tests of the pure helpers of backbone.consumer.loop (no Kafka, no PostgreSQL).

The loop dedupes repeated event ids within a batch, adapts per-event handlers to batches, and turns
librdkafka messages into checked ``Polled`` values. These tests prove that the first occurrence wins
in order, that handlers see every event in order (and that a failure stops the batch), and how keys,
values and both header shapes are normalised.
"""

from __future__ import annotations

from typing import Any, cast

import pytest
from backbone.avro import DecodedEvent, Envelope
from backbone.consumer.messages import InboundEvent, Polled, UnitOfWork, first_occurrences, per_event
from backbone.invariants import InvariantViolation

EVENT_A = "018f0000-0000-7000-8000-00000000000a"
EVENT_B = "018f0000-0000-7000-8000-00000000000b"
EVENT_C = "018f0000-0000-7000-8000-00000000000c"


def _inbound(event_id: str, offset: int, topic: str = "payments.events", partition: int = 0) -> InboundEvent:
    envelope = Envelope(
        event_id=event_id,
        event_type="PaymentCaptured",
        payment_id="pay_1",
        occurred_at_ms=1_767_225_600_000,
        producer="payment_state",
        schema_version=1,
        causation_id=None,
        correlation_id=None,
    )
    event = DecodedEvent(envelope=envelope, event_type="PaymentCaptured", writer_version=1, body={})
    return InboundEvent(event, topic, partition, offset)


def _coords(events: list[InboundEvent]) -> list[tuple[str, int]]:
    return [(event.event_id, event.offset) for event in events]


# --- first_occurrences ---------------------------------------------------------------------------


def testfirst_occurrences_keeps_the_first_of_each_event_id_in_order() -> None:
    """Repeats of an event id (a relay republished it) are dropped; the first copy and the batch
    order are kept."""
    batch = [_inbound(EVENT_A, 0), _inbound(EVENT_B, 1), _inbound(EVENT_A, 2), _inbound(EVENT_C, 3)]
    batch += [_inbound(EVENT_B, 4), _inbound(EVENT_A, 5)]
    assert _coords(first_occurrences(batch)) == [(EVENT_A, 0), (EVENT_B, 1), (EVENT_C, 3)]
    assert len(batch) == 6, "the input list is left alone"


def testfirst_occurrences_dedupes_across_partitions() -> None:
    """The same event id on two partitions (or topics) is still one event: dedup is by id only."""
    batch = [_inbound(EVENT_A, 7, partition=1), _inbound(EVENT_A, 3, partition=2)]
    [kept] = first_occurrences(batch)
    assert (kept.partition, kept.offset) == (1, 7)


def testfirst_occurrences_of_distinct_or_empty_batches() -> None:
    """A batch without repeats comes back unchanged; an empty batch stays empty."""
    batch = [_inbound(EVENT_C, 0), _inbound(EVENT_A, 1), _inbound(EVENT_B, 2)]
    assert first_occurrences(batch) == batch
    assert first_occurrences([]) == []


# --- per_event --------------------------------------------------------------------------------------

UOW = UnitOfWork(conn=cast(Any, object()), outbox=None, consumer="ledger")


def test_per_event_calls_the_handler_for_each_event_in_order() -> None:
    """The adapter calls the one-event handler once per event, in batch order, with the same unit of work."""
    calls: list[tuple[UnitOfWork, str]] = []
    handle = per_event(lambda uow, event: calls.append((uow, event.event_id)))
    handle(UOW, [_inbound(EVENT_B, 0), _inbound(EVENT_A, 1), _inbound(EVENT_C, 2)])
    assert calls == [(UOW, EVENT_B), (UOW, EVENT_A), (UOW, EVENT_C)]
    handle(UOW, [])
    assert len(calls) == 3


def test_per_event_stops_at_the_first_failure_and_propagates_it() -> None:
    """A handler error escapes the batch (so its transaction rolls back) and later events are not run."""
    seen: list[str] = []

    def handler(_: UnitOfWork, event: InboundEvent) -> None:
        seen.append(event.event_id)
        if event.event_id == EVENT_B:
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        per_event(handler)(UOW, [_inbound(EVENT_A, 0), _inbound(EVENT_B, 1), _inbound(EVENT_C, 2)])
    assert seen == [EVENT_A, EVENT_B]


# --- Polled.of --------------------------------------------------------------------------------------


class _FakeMessage:
    """Just the accessors of confluent_kafka.Message that Polled.of reads."""

    def __init__(self, **fields: Any) -> None:
        self._fields = {
            "topic": "payments.events",
            "partition": 3,
            "offset": 42,
            "key": b"pay_1",
            "value": b"\xc3\x01payload",
            "headers": None,
            **fields,
        }

    def topic(self) -> Any:
        return self._fields["topic"]

    def partition(self) -> Any:
        return self._fields["partition"]

    def offset(self) -> Any:
        return self._fields["offset"]

    def key(self) -> Any:
        return self._fields["key"]

    def value(self) -> Any:
        return self._fields["value"]

    def headers(self) -> Any:
        return self._fields["headers"]


def _polled(**fields: Any) -> Polled:
    return Polled.of(cast(Any, _FakeMessage(**fields)))


def test_polled_copies_coordinates_key_and_value() -> None:
    """Topic, partition, offset and bytes key/value are taken as they are; no headers means {}."""
    polled = _polled()
    coordinates = (polled.topic, polled.partition, polled.offset, polled.key, polled.value)
    assert coordinates == ("payments.events", 3, 42, b"pay_1", b"\xc3\x01payload")
    assert polled.headers == {}


def test_polled_headers_as_list_of_tuples() -> None:
    """librdkafka's list of (name, bytes) pairs becomes a dict of text; None values are dropped."""
    headers = [("trace_id", b"abc"), ("empty", b""), ("absent", None), ("text", "already-str")]
    assert _polled(headers=headers).headers == {"trace_id": "abc", "empty": "", "text": "already-str"}


def test_polled_headers_as_dict() -> None:
    """A dict of headers (as some clients and test fakes give) is accepted the same way."""
    assert _polled(headers={"trace_id": b"abc", "absent": None, "n": "1"}).headers == {
        "trace_id": "abc",
        "n": "1",
    }


def test_polled_converts_str_key_and_value_to_bytes() -> None:
    """A str key or value (possible from some producers and fakes) becomes UTF-8 bytes; None stays None."""
    polled = _polled(key="pay_é", value="text")
    assert polled.key == "pay_é".encode()
    assert polled.value == b"text"
    polled = _polled(key=None, value=None)
    assert polled.key is None
    assert polled.value is None


@pytest.mark.parametrize("missing", ["topic", "partition", "offset"])
def test_polled_refuses_a_message_without_coordinates(missing: str) -> None:
    """A message lacking topic, partition or offset cannot be committed or dead-lettered: invariant."""
    with pytest.raises(InvariantViolation, match="without topic/partition/offset"):
        _polled(**{missing: None})


def test_polled_keeps_partition_and_offset_zero() -> None:
    """Partition 0 and offset 0 are real coordinates, not 'missing' (no truthiness checks)."""
    polled = _polled(partition=0, offset=0)
    assert (polled.partition, polled.offset) == (0, 0)


def test_per_event_names_the_event_a_handler_refused() -> None:
    """A one-event handler raises ``Refuse(reason)`` without saying which event: the batch adapter
    fills in that event's id, so the loop can dead-letter exactly it."""
    from backbone.consumer.messages import Refuse  # noqa: PLC0415 - only this test

    def handler(_: UnitOfWork, event: InboundEvent) -> None:
        if event.offset == 1:
            raise Refuse("never")

    batch = [_inbound(EVENT_A, 0), _inbound(EVENT_B, 1), _inbound(EVENT_C, 2)]
    with pytest.raises(Refuse) as refused:
        per_event(handler)(cast(UnitOfWork, None), batch)
    assert (refused.value.event_id, refused.value.reason) == (EVENT_B, "never")
