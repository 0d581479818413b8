"""Unit tests of the ingest use case (application/ingest.py) on the in-memory store: what is stored,
what is refused before the store is touched, duplicates, and a store outage."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json

import pytest
from webhook_gateway.adapters.memory import InMemoryReceiptStore
from webhook_gateway.application.ingest import (
    Duplicate,
    EventRejected,
    IngestResult,
    IngestWebhook,
    SignatureRejected,
    Stored,
    StoreUnavailable,
    WebhookDelivery,
)
from webhook_gateway.domain.providers import SIMPSP, ProviderConfig
from webhook_gateway.domain.signatures import SigningSecrets

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
    assert ingest(store, webhook(), headers) == SignatureRejected(reason)  # type: ignore[arg-type]


def test_signature_is_checked_before_parsing() -> None:
    """An unsigned body that is not even JSON is a signature failure, not a parse failure: the
    bytes are never parsed before they are authenticated."""
    store = InMemoryReceiptStore()
    assert ingest(store, b"not json", {}) == SignatureRejected("header_missing")


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
