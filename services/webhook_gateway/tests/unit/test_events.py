"""Unit tests of the minimal webhook reader (domain/events.py) and the receipt decisions
(domain/receipts.py): what is read, what makes an event unreadable, keys and audit headers."""

from __future__ import annotations

import json

import pytest
from backbone.avro import AvroCodec, SchemaCatalogue
from backbone.psp.signature import SignatureVerified
from webhook_gateway.domain.events import EventUnreadable, ParsedEvent, parse_event
from webhook_gateway.domain.receipts import (
    AUDIT_VALUE_LENGTH_MAX,
    EVENT_TYPE,
    NewReceipt,
    audit_headers,
    outbox_key,
    provider_event_received,
)


def body(obj: object) -> bytes:
    return json.dumps(obj).encode()


def event(data_object: object, **top: object) -> bytes:
    return body(
        {"id": "evt_1", "type": "x.y", "created": 1_700_000_000, "data": {"object": data_object}, **top}
    )


def test_payment_intent_event_reads_its_id_as_payment_id() -> None:
    """For a payment intent, the payment id is the object's own id."""
    parsed = parse_event(event({"object": "payment_intent", "id": "pi_123"}))
    assert parsed == ParsedEvent("evt_1", "x.y", "pi_123", 1_700_000_000)


def test_payout_event_reads_its_own_id_as_payment_id() -> None:
    """A payout has no payment intent: its own id keys it, so a payout's events (paid, then returned
    days later) share one partition and keep their order; the type is not filtered."""
    payout = {"object": "payout", "id": "po_5", "reference": "wd_1", "status": "paid"}
    parsed = parse_event(event(payout, type="payout.paid"))
    assert parsed == ParsedEvent("evt_1", "payout.paid", "po_5", 1_700_000_000)
    assert isinstance(parsed, ParsedEvent) and outbox_key("simpsp", parsed) == "po_5"


@pytest.mark.parametrize("kind", ["refund", "dispute", "charge"])
def test_refund_and_dispute_read_payment_intent(kind: str) -> None:
    """For a refund or a dispute, the payment id is its payment_intent field."""
    parsed = parse_event(event({"object": kind, "id": "re_1", "payment_intent": "pi_9"}))
    assert isinstance(parsed, ParsedEvent)
    assert parsed.payment_id == "pi_9"


def test_expanded_payment_intent_reads_its_id() -> None:
    """An expanded payment_intent object yields its id."""
    parsed = parse_event(
        event({"object": "refund", "payment_intent": {"id": "pi_7", "object": "payment_intent"}})
    )
    assert isinstance(parsed, ParsedEvent)
    assert parsed.payment_id == "pi_7"


@pytest.mark.parametrize(
    "data",
    [
        None,
        "text",
        {"object": None},
        {"object": {"object": "balance"}},
        {"object": {"object": "payment_intent"}},  # id missing
        {"object": {"object": "payment_intent", "id": 12}},  # not a string
        {"object": {"object": "refund", "payment_intent": ""}},
        {"object": {"object": "refund", "payment_intent": "has space"}},
        {"object": {"object": "refund", "payment_intent": "p" * 256}},
    ],
)
def test_absent_or_unreadable_payment_id_is_none_not_an_error(data: object) -> None:
    """No (readable) payment id: the event is still readable, with payment_id None."""
    parsed = parse_event(body({"id": "evt_1", "type": "balance.available", "data": data}))
    assert isinstance(parsed, ParsedEvent)
    assert parsed.payment_id is None


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"", "not_json"),
        (b"{", "not_json"),
        (b"\xff\xfe{}", "not_json"),  # not UTF-8
        ('{"id":"evt_1","type":"t"}'.encode("utf-16"), "not_json"),
        (b"[" * 100_000 + b"]" * 100_000, "not_json"),  # nesting deeper than the parser allows
        (b'{"id":"evt_1","type":"t","n":' + b"9" * 5000 + b"}", "not_json"),  # int too long to read
        (b"[]", "not_an_object"),
        (b'"evt_1"', "not_an_object"),
        (b"null", "not_an_object"),
        (b'{"type":"t"}', "id_missing"),
        (b'{"id":"","type":"t"}', "id_missing"),
        (b'{"id":7,"type":"t"}', "id_missing"),
        (b'{"id":"evt 1","type":"t"}', "id_missing"),
        (b'{"id":"' + b"e" * 256 + b'","type":"t"}', "id_missing"),
        (b'{"id":"evt_1"}', "type_missing"),
        (b'{"id":"evt_1","type":null}', "type_missing"),
    ],
)
def test_unreadable_events(raw: bytes, reason: str) -> None:
    """Bodies that are not UTF-8 JSON objects with an id and a type are unreadable, with a reason."""
    assert parse_event(raw) == EventUnreadable(reason)  # type: ignore[arg-type]


def test_created_is_optional_and_must_be_a_positive_integer() -> None:
    """'created' feeds a metric only: absent, boolean or non-integer values read as None."""
    for created in (None, True, "1700000000", 1.5, -1):
        parsed = parse_event(body({"id": "evt_1", "type": "t", "created": created}))
        assert isinstance(parsed, ParsedEvent)
        assert parsed.created_s is None


def test_outbox_key_is_the_payment_id_or_a_provider_scoped_event_id() -> None:
    """Key = PSP payment id; without one, '<provider>:<event id>' (never blank, never a payment id)."""
    assert outbox_key("simpsp", ParsedEvent("evt_1", "t", "pi_1", None)) == "pi_1"
    assert outbox_key("simpsp", ParsedEvent("evt_1", "t", None, None)) == "simpsp:evt_1"


def test_audit_headers_keep_the_allow_list_only_and_bound_values() -> None:
    """Only allow-listed headers (and the signature header) are kept, values truncated."""
    headers = {
        "content-type": "application/json",
        "user-agent": "u" * 2000,
        "authorization": "Bearer secret",
        "cookie": "session=1",
        "simpsp-signature": "t=1,v1=ab",
    }
    kept = audit_headers(headers, "Simpsp-Signature")
    assert set(kept) == {"content-type", "user-agent", "simpsp-signature"}
    assert len(kept["user-agent"]) == AUDIT_VALUE_LENGTH_MAX


@pytest.mark.parametrize("payment_id", ["pi_1", None])
def test_event_body_encodes_with_the_published_schema(payment_id: str | None) -> None:
    """The ProviderEventReceived body the domain builds is valid against schemas/ (the latest, v2)
    and carries the raw body untouched, flagged as not redacted."""
    raw = b'{"id":"evt_1","type":"t"}'
    receipt = NewReceipt(
        "simpsp",
        ParsedEvent("evt_1", "t", payment_id, None),
        raw,
        SignatureVerified("current", 1),
        {},
        "req_1",
    )
    fields = provider_event_received(receipt, 42, 1_700_000_000_123)
    codec = AvroCodec(SchemaCatalogue.default())
    envelope = {
        "event_id": "01890a5d-ac96-774b-bcce-b302099a8057",
        "event_type": EVENT_TYPE,
        "payment_id": outbox_key("simpsp", receipt.event),
        "occurred_at_ms": 1_700_000_000_123,
        "producer": "webhook_gateway",
        "schema_version": 2,
        "causation_id": None,
        "correlation_id": "req_1",
    }
    decoded = codec.decode(codec.encode(EVENT_TYPE, {"envelope": envelope, **fields}))
    assert decoded.body["raw_body"] == raw
    assert decoded.body["provider_payment_id"] == payment_id
    assert decoded.body["receipt_id"] == 42
    assert decoded.body["signature_verified"] is True
    assert decoded.body["card_data_redacted"] is False
