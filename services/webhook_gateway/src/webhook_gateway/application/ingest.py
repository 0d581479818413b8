"""Ingest one webhook delivery: verify, read minimally, store once together with its outbox event.

Invariants kept here:
- the signature is verified over the raw bytes before anything parses them; an unverified or
  unreadable delivery never reaches the store (nothing is written for it);
- card data never reaches the store: a body carrying it is stored (and published) redacted, with
  a flag, or refused when even its identifiers carry it (``domain.redaction``, ADR 0004);
- the store writes the receipt and its ``ProviderEventReceived`` outbox row atomically, unique on
  ``(provider, provider_event_id)``: a redelivery is ``Duplicate`` and writes nothing;
- a result is returned only after the store committed (``Stored``) or found the committed original
  (``Duplicate``); when the store cannot answer it raises ``StoreUnavailable`` and the caller must
  not acknowledge (the PSP retries, and the retry is deduplicated whatever happened).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol, assert_never

from backbone.invariants import invariant
from backbone.psp.signature import SecretUsed, SignatureInvalid, SignatureVerified, verify_signature

from webhook_gateway.domain.events import EventUnreadable, ParsedEvent, Unreadable, parse_event
from webhook_gateway.domain.providers import ProviderConfig
from webhook_gateway.domain.receipts import NewReceipt, audit_headers
from webhook_gateway.domain.redaction import UNREDACTABLE, Clean, Redacted, Unredactable, screen_body


class StoreUnavailable(Exception):
    """The receipt store failed or did not answer in time. Whether the write committed is unknown:
    answer 503 so the PSP retries; the retry finds the receipt (``Duplicate``) or stores it."""


class StoreRejected(Exception):
    """The store refused a receipt for a reason that is not the infrastructure (a constraint, a
    bug). Nothing was stored. The message names the error class only, never data from the row."""


@dataclass(frozen=True, slots=True)
class Saved:
    receipt_id: int
    received_at_ms: int


@dataclass(frozen=True, slots=True)
class AlreadyStored:
    receipt_id: int
    same_body: bool  # False: the PSP reused an event id for different bytes (kept: the first)


SaveOutcome = Saved | AlreadyStored


class ReceiptStore(Protocol):
    async def save(self, receipt: NewReceipt) -> SaveOutcome:
        """Store ``receipt`` and its ``ProviderEventReceived`` outbox event in one transaction,
        unless a receipt with the same (provider, provider_event_id) exists. Raises StoreUnavailable
        (infrastructure: retry later) or StoreRejected (this receipt can never be stored)."""
        ...


@dataclass(frozen=True, slots=True)
class WebhookDelivery:
    """One HTTP delivery of a webhook, as received."""

    config: ProviderConfig
    raw_body: bytes
    headers: Mapping[str, str]  # any case; a repeated header counts by its first value
    request_id: str

    def lowered_headers(self) -> dict[str, str]:
        lowered: dict[str, str] = {}
        for name, value in self.headers.items():
            lowered.setdefault(name.lower(), value)
        return lowered


@dataclass(frozen=True, slots=True)
class Stored:
    receipt_id: int
    event: ParsedEvent
    secret: SecretUsed
    received_at_ms: int
    card_data_redacted: bool = False


@dataclass(frozen=True, slots=True)
class Duplicate:
    receipt_id: int
    event: ParsedEvent
    same_body: bool


@dataclass(frozen=True, slots=True)
class EventRejected:
    reason: Unreadable | Literal["card_data_unredactable"]


IngestResult = Stored | Duplicate | SignatureInvalid | EventRejected  # SignatureInvalid: backbone.psp's


class IngestWebhook:
    """The one use case of the gateway. ``clock`` returns Unix seconds (``time.time`` in production)."""

    def __init__(self, store: ReceiptStore, *, clock: Callable[[], float], tolerance_s: int) -> None:
        invariant(tolerance_s > 0, "signature tolerance must be positive")
        self._store = store
        self._clock = clock
        self._tolerance_s = tolerance_s

    async def __call__(self, delivery: WebhookDelivery) -> IngestResult:
        provider = delivery.config.provider
        headers = delivery.lowered_headers()
        check = verify_signature(
            headers.get(provider.signature_header.lower()),
            delivery.raw_body,
            delivery.config.secrets,
            now_s=int(self._clock()),
            tolerance_s=self._tolerance_s,
        )
        if isinstance(check, SignatureInvalid):
            return check
        event = parse_event(delivery.raw_body)
        if isinstance(event, EventUnreadable):
            return EventRejected(event.reason)
        screening = screen_body(delivery.raw_body, event)
        if isinstance(screening, Unredactable):
            return EventRejected(UNREDACTABLE)
        return await self._store_receipt(delivery, headers, check, event, screening)

    async def _store_receipt(
        self,
        delivery: WebhookDelivery,
        headers: Mapping[str, str],
        signature: SignatureVerified,
        event: ParsedEvent,
        screening: Clean | Redacted,
    ) -> Stored | Duplicate:
        provider = delivery.config.provider
        redacted = isinstance(screening, Redacted)
        receipt = NewReceipt(
            provider=provider.name,
            event=event,
            raw_body=screening.body if isinstance(screening, Redacted) else delivery.raw_body,
            signature=signature,
            # The signature is a MAC of the bytes as signed: kept only when those are the bytes kept.
            audit_headers=audit_headers(headers, None if redacted else provider.signature_header),
            request_id=delivery.request_id,
            card_data_redacted=redacted,
        )
        outcome = await self._store.save(receipt)
        match outcome:
            case Saved(receipt_id=receipt_id, received_at_ms=received_at_ms):
                return Stored(receipt_id, event, signature.secret, received_at_ms, receipt.card_data_redacted)
            case AlreadyStored(receipt_id=receipt_id, same_body=same_body):
                return Duplicate(receipt_id, event, same_body)
            case _:
                assert_never(outcome)
