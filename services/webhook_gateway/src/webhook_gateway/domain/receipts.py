"""A webhook receipt and the ``ProviderEventReceived`` event that announces it.

Decisions kept here (pure; the store adapter applies them):
- the Kafka key of ``ProviderEventReceived`` is the PSP's payment id, so every webhook of one
  payment lands on one partition, in order, next to nothing else of that payment's PSP traffic;
- an event that names no payment (or whose payment id is unreadable) is still stored and
  published, with ``provider_payment_id = null`` and the key ``<provider>:<provider_event_id>``:
  unique, so it orders with nothing, and never blank (the outbox refuses blank keys). The prefix
  keeps it from ever colliding with a payment id;
- the audit headers are an allow-list, each value truncated: nothing secret is in them (the
  signature header is a MAC of the body, not a secret, and lets an auditor re-verify later; it is
  not kept for a redacted body, whose signed bytes are gone);
- ``raw_body`` is what is stored and published: the bytes as verified, or their redacted rendition
  when they carried card data (``card_data_redacted``; ADR 0004). ``body_sha256`` digests it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from backbone.invariants import invariant
from backbone.psp.signature import SignatureVerified

from webhook_gateway.domain.events import ParsedEvent

EVENT_TYPE: Final = "ProviderEventReceived"
TOPIC: Final = "psp.provider-events"
AUDIT_HEADERS: Final = ("content-type", "content-length", "user-agent", "x-forwarded-for", "x-request-id")
AUDIT_VALUE_LENGTH_MAX: Final = 512


@dataclass(frozen=True, slots=True)
class FetchedFromPsp:
    """Not a webhook: an event the gateway read itself from the PSP's authenticated events API (the
    catch-up of webhooks that never came, ``application.catch_up``). Its authenticity is that call's
    (our API key, the PSP's TLS), not a signature; it is stored as ``signature_result = 'fetched'``
    with ``signature_secret = 'api'`` and the event's creation time in ``signature_timestamp_s``."""

    created_s: int

    @property
    def secret(self) -> str:
        return "api"

    @property
    def timestamp_s(self) -> int:
        return self.created_s

    @property
    def result(self) -> str:
        return "fetched"


Provenance = SignatureVerified | FetchedFromPsp


def provenance_result(provenance: Provenance) -> str:
    """``provider_events.signature_result``: 'verified' (a signed webhook) or 'fetched' (catch-up)."""
    return provenance.result if isinstance(provenance, FetchedFromPsp) else "verified"


@dataclass(frozen=True, slots=True)
class NewReceipt:
    """A verified, readable webhook about to be stored (once per provider and provider event id), or
    an event the catch-up fetched from the PSP (``FetchedFromPsp``)."""

    provider: str
    event: ParsedEvent
    raw_body: bytes
    signature: Provenance
    audit_headers: Mapping[str, str]
    request_id: str
    card_data_redacted: bool = False

    @property
    def body_sha256(self) -> bytes:
        return hashlib.sha256(self.raw_body).digest()


def outbox_key(provider: str, event: ParsedEvent) -> str:
    """The Kafka key (envelope ``payment_id``) of the event announcing this receipt."""
    key = event.payment_id if event.payment_id is not None else f"{provider}:{event.event_id}"
    invariant(key.strip() != "", "outbox key must not be blank")
    return key


def provider_event_received(receipt: NewReceipt, receipt_id: int, received_at_ms: int) -> dict[str, Any]:
    """The ``ProviderEventReceived`` v1 body (without its envelope) for a stored receipt."""
    invariant(receipt_id > 0, "receipt id must be positive")
    invariant(received_at_ms > 0, "received_at_ms must be positive")
    return {
        "provider": receipt.provider,
        "provider_event_id": receipt.event.event_id,
        "provider_event_type": receipt.event.event_type,
        "provider_payment_id": receipt.event.payment_id,
        "receipt_id": receipt_id,
        "received_at_ms": received_at_ms,
        # unverified webhooks never get this far; an event the catch-up fetched from the PSP's API is
        # authentic by that call (the receipt row says which: signature_result 'fetched')
        "signature_verified": True,
        "raw_body": receipt.raw_body,
        "card_data_redacted": receipt.card_data_redacted,
    }


def audit_headers(headers: Mapping[str, str], signature_header: str | None) -> dict[str, str]:
    """The request headers worth keeping with a receipt, from ``headers`` keyed by lower-case names;
    values truncated. ``signature_header`` None: the signature is not kept."""
    wanted = (*AUDIT_HEADERS, *([signature_header.lower()] if signature_header else []))
    kept: dict[str, str] = {}
    for name in wanted:
        value = headers.get(name)
        if value is not None:
            kept[name] = value[:AUDIT_VALUE_LENGTH_MAX]
    return kept
