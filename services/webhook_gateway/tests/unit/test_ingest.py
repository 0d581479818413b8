"""Unit tests of the ingest use case (application/ingest.py) on the in-memory store: what is stored,
what is refused before the store is touched, duplicates, and a store outage."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json

import pytest
from backbone.psp.signature import SignatureInvalid, SigningSecrets
from webhook_gateway.adapters.memory import InMemoryReceiptStore
from webhook_gateway.application.ingest import (
    Duplicate,
    EventRejected,
    IngestResult,
    IngestWebhook,
    Stored,
    StoreUnavailable,
    WebhookDelivery,
)
from webhook_gateway.domain.providers import SIMPSP, ProviderConfig

SECRET = b"whsec_unit_0123456789"
NOW = 1_700_000_000
CONFIG = ProviderConfig(SIMPSP, SigningSecrets(SECRET))


def signed(raw: bytes, t: int = NOW, secret: bytes = SECRET) -> dict[str, str]:
    digest = hmac.new(secret, f"{t}.".encode() + raw, hashlib.sha256).hexdigest()
    return {"Simpsp-Signature": f"t={t},v1={digest}", "content-type": "application/json"}


def webhook(event_id: str = "evt_1", payment_id: str = "pi_1", amount: int = 100) -> bytes:
    obj = {"object": "payment_intent", "id": payment_id, "amount": amount}
    return json.dumps({"id": event_id, "type": "payment_intent.succeeded", "data": {"object": obj}}).encode()


def ingest(store: InMemoryReceiptStore, raw: bytes, headers: dict[str, str]) -> IngestResult:
    use_case = IngestWebhook(store, clock=lambda: NOW + 0.9, tolerance_s=300)
    return asyncio.run(use_case(WebhookDelivery(CONFIG, raw, headers, "req_test")))


def test_verified_webhook_is_stored_with_one_event() -> None:
    """A valid delivery becomes one receipt and one ProviderEventReceived keyed by the payment id,
    carrying the raw body byte for byte."""
    store = InMemoryReceiptStore()
    raw = webhook()
    result = ingest(store, raw, signed(raw))
    assert isinstance(result, Stored)
    assert result.secret == "current"
    assert len(store.receipts) == 1
    assert len(store.events) == 1
    assert store.events[0].key == "pi_1"
    assert store.events[0].body["raw_body"] == raw
    assert store.events[0].body["receipt_id"] == result.receipt_id
    _, receipt = store.receipts[("simpsp", "evt_1")]
    assert receipt.request_id == "req_test"
    assert receipt.audit_headers["simpsp-signature"].startswith(f"t={NOW},v1=")


def test_redelivery_is_a_duplicate_and_writes_nothing() -> None:
    """The same event delivered again (re-signed later, as PSPs do) is Duplicate of the first
    receipt; no second receipt, no second event."""
    store = InMemoryReceiptStore()
    raw = webhook()
    first = ingest(store, raw, signed(raw))
    second = ingest(store, raw, signed(raw, t=NOW + 60))
    assert isinstance(first, Stored)
    assert second == Duplicate(first.receipt_id, first.event, same_body=True)
    assert len(store.receipts) == 1
    assert len(store.events) == 1


def test_same_event_id_with_different_body_keeps_the_first() -> None:
    """An event id reused for different bytes is a duplicate flagged same_body=False; the first
    body stays the record."""
    store = InMemoryReceiptStore()
    first_raw, second_raw = webhook(amount=100), webhook(amount=999)
    ingest(store, first_raw, signed(first_raw))
    second = ingest(store, second_raw, signed(second_raw))
    assert isinstance(second, Duplicate)
    assert second.same_body is False
    assert store.receipts[("simpsp", "evt_1")][1].raw_body == first_raw
    assert len(store.events) == 1


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({}, "header_missing"),
        ({"Simpsp-Signature": "nonsense"}, "header_malformed"),
        (signed(webhook(), secret=b"whsec_attacker_000000"), "mismatch"),
        (signed(webhook(), t=NOW - 301), "timestamp_outside_tolerance"),
    ],
)
def test_signature_failures_store_nothing(headers: dict[str, str], reason: str) -> None:
    """A delivery whose signature fails is refused with its reason and never reaches the store."""
    store = InMemoryReceiptStore()
    store.available = False  # touching the store would raise: proves it is not touched
    assert ingest(store, webhook(), headers) == SignatureInvalid(reason)  # type: ignore[arg-type]


def test_signature_is_checked_before_parsing() -> None:
    """An unsigned body that is not even JSON is a signature failure, not a parse failure: the
    bytes are never parsed before they are authenticated."""
    store = InMemoryReceiptStore()
    assert ingest(store, b"not json", {}) == SignatureInvalid("header_missing")


@pytest.mark.parametrize(
    ("raw", "reason"),
    [(b"{not json", "not_json"), (b'{"type":"t"}', "id_missing"), (b'{"id":"evt_1"}', "type_missing")],
)
def test_verified_but_unreadable_body_stores_nothing(raw: bytes, reason: str) -> None:
    """A correctly signed body that is not JSON or lacks id/type is refused; nothing is stored."""
    store = InMemoryReceiptStore()
    assert ingest(store, raw, signed(raw)) == EventRejected(reason)  # type: ignore[arg-type]
    assert store.receipts == {}
    assert store.events == []


def test_event_without_payment_id_is_stored_with_a_scoped_key() -> None:
    """An event naming no payment is stored and announced with a null payment id and the key
    '<provider>:<event id>'."""
    store = InMemoryReceiptStore()
    raw = json.dumps(
        {"id": "evt_b", "type": "balance.available", "data": {"object": {"object": "balance"}}}
    ).encode()
    assert isinstance(ingest(store, raw, signed(raw)), Stored)
    assert store.events[0].key == "simpsp:evt_b"
    assert store.events[0].body["provider_payment_id"] is None


def test_store_outage_propagates_and_nothing_is_stored() -> None:
    """When the store is down the use case raises StoreUnavailable (the caller answers 503)."""
    store = InMemoryReceiptStore()
    store.available = False
    raw = webhook()
    with pytest.raises(StoreUnavailable):
        ingest(store, raw, signed(raw))
    assert store.receipts == {}


PAN = "4000056655665556"


def _with_card_data(event_id: str = "evt_card", note: str = f"paid with {PAN}") -> bytes:
    obj = {"object": "payment_intent", "id": "pi_1", "amount": 100, "metadata": {"note": note, "cvc": "123"}}
    return json.dumps({"id": event_id, "type": "payment_intent.succeeded", "data": {"object": obj}}).encode()


def test_card_data_in_a_signed_body_is_stored_and_published_redacted() -> None:
    """A verified webhook carrying a card number and a cvc (ADR 0004): stored, acknowledged, flagged;
    the receipt, its digest and its event hold the redacted body (card data replaced, everything
    else the same), no signature header, and nowhere the digits."""
    store = InMemoryReceiptStore()
    raw = _with_card_data()
    result = ingest(store, raw, signed(raw))
    assert isinstance(result, Stored) and result.card_data_redacted
    _, receipt = store.receipts[("simpsp", "evt_card")]
    assert receipt.card_data_redacted and "simpsp-signature" not in receipt.audit_headers
    kept = json.loads(receipt.raw_body)
    assert kept["data"]["object"]["metadata"] == {"note": "paid with [redacted]", "cvc": "[redacted]"}
    assert kept["data"]["object"]["id"] == "pi_1" and kept["id"] == "evt_card"
    assert receipt.body_sha256 == hashlib.sha256(receipt.raw_body).digest()
    [event] = store.events
    assert event.body["raw_body"] == receipt.raw_body and event.body["card_data_redacted"] is True
    assert PAN.encode() not in receipt.raw_body and b"123" not in receipt.raw_body


def test_a_redelivered_card_data_webhook_is_a_duplicate_of_the_same_body() -> None:
    """Redaction is deterministic: the PSP's retry of the same bytes is Duplicate(same_body=True)."""
    store = InMemoryReceiptStore()
    raw = _with_card_data()
    first = ingest(store, raw, signed(raw))
    second = ingest(store, raw, signed(raw, t=NOW + 30))
    assert isinstance(first, Stored) and isinstance(second, Duplicate) and second.same_body
    assert len(store.events) == 1


def test_card_data_in_the_identifiers_is_refused_and_nothing_is_stored() -> None:
    """An event id that is a card number cannot be kept without it: refused, nothing written."""
    store = InMemoryReceiptStore()
    raw = _with_card_data(event_id=PAN)
    assert ingest(store, raw, signed(raw)) == EventRejected("card_data_unredactable")
    assert store.receipts == {} and store.events == []


def test_a_clean_body_is_kept_byte_for_byte() -> None:
    """No card data: the bytes as signed, not a re-serialisation (spacing, key order kept)."""
    store = InMemoryReceiptStore()
    raw = (
        b'{"type": "payment_intent.succeeded",  "id": "evt_2",'
        b' "data": {"object": {"object": "payment_intent", "id": "pi_2"}}}'
    )
    result = ingest(store, raw, signed(raw))
    assert isinstance(result, Stored) and not result.card_data_redacted
    assert store.receipts[("simpsp", "evt_2")][1].raw_body == raw
