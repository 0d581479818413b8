"""Stripe's JSON objects (payment intent, refund, dispute, payout, event) read into ``backbone.psp.model``.

Pure and strict, like ``model``: integer minor units (Stripe's ``amount`` fields already are: a
zero-decimal currency such as JPY counts yen, EUR counts cents), a known ISO-4217 currency (Stripe
writes it in lower case; ours is upper case), a documented status, consistent amounts. Anything else
raises ``PspParseError``, which the client turns into ``NoAnswer``.

Where Stripe and simpsp differ, the difference is settled here, once:
- our reference lives in ``metadata["reference"]`` (Stripe objects have no field of ours); the
  payment id in ``metadata["payment_id"]`` too, for people reading the dashboard;
- ``payment_method``, ``latest_charge``, ``payment_intent`` and ``destination`` may be an id or an
  expanded object: both read as the id;
- ``next_action`` is read for a redirect URL when it has one (``redirect_to_url``); other kinds
  (``use_stripe_sdk``: the client-side SDK finishes 3-D Secure) are still ``requires_action``;
- a payment intent carries no refunded or disputed amounts (they live on the charge): 0 here, and
  refunds are facts of their own;
- refund statuses: ``requires_action`` is pending, ``canceled`` is failed (nothing was refunded);
- payout statuses: ``in_transit`` is pending, ``canceled`` is failed (``failure_code`` "canceled").
  A payout Stripe reports ``failed`` after it was ``paid`` reads as failed (Stripe has no
  ``returned`` status): payment-state receives the fact and its own rules decide.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final, cast

from backbone.money import MoneyError, currency_exponent
from backbone.psp.model import (
    INTENT_STATUSES,
    CaptureMethod,
    Dispute,
    IntentStatus,
    PaymentError,
    PaymentIntent,
    Payout,
    PayoutStatus,
    PspObject,
    PspParseError,
    Refund,
    RefundStatus,
    WebhookEvent,
)

REFERENCE_KEY: Final = "reference"  # metadata key of our reference on every object we create
PAYMENT_ID_KEY: Final = "payment_id"
_ID_LENGTH_MAX: Final = 255
_CAPTURE_METHODS: Final[dict[str, CaptureMethod]] = {
    "manual": "manual",
    "automatic": "automatic",
    "automatic_async": "automatic",
}
_REFUND_STATUS: Final[dict[str, RefundStatus]] = {
    "pending": "pending",
    "requires_action": "pending",
    "succeeded": "succeeded",
    "failed": "failed",
    "canceled": "failed",
}
_PAYOUT_STATUS: Final[dict[str, PayoutStatus]] = {
    "pending": PayoutStatus.PENDING,
    "in_transit": PayoutStatus.PENDING,
    "paid": PayoutStatus.PAID,
    "failed": PayoutStatus.FAILED,
    "canceled": PayoutStatus.FAILED,
}


class _Doc:
    """Typed reads from one Stripe JSON object; every failure names the object and the field."""

    def __init__(self, document: Any, what: str) -> None:
        if not isinstance(document, dict):
            raise PspParseError(f"{what}: not a JSON object")
        self._d, self._what = cast(dict[str, Any], document), what

    def fail(self, name: str, expected: str) -> PspParseError:
        return PspParseError(f"{self._what}.{name}: expected {expected}")

    def kind(self, expected: str) -> None:
        if self._d.get("object") != expected:
            raise self.fail("object", repr(expected))

    def text(self, name: str) -> str:
        value = self._d.get(name)
        if not isinstance(value, str) or not 0 < len(value) <= _ID_LENGTH_MAX:
            raise self.fail(name, "a non-empty string")
        return value

    def optional_text(self, name: str) -> str | None:
        return None if self._d.get(name) in (None, "") else self.text(name)

    def id_of(self, name: str) -> str | None:
        """An id, or the id of the expanded object in its place."""
        value = self._d.get(name)
        if isinstance(value, dict):
            return _Doc(value, f"{self._what}.{name}").text("id")
        return self.optional_text(name)

    def integer(self, name: str) -> int:
        value = self._d.get(name)
        if type(value) is not int or value < 0:
            raise self.fail(name, "a non-negative integer")
        return value

    def optional_integer(self, name: str) -> int | None:
        return None if self._d.get(name) is None else self.integer(name)

    def choice(self, name: str, allowed: Mapping[str, Any] | frozenset[str]) -> str:
        value = self._d.get(name)
        if not isinstance(value, str) or value not in allowed:
            raise self.fail(name, f"one of {sorted(allowed)}")
        return value

    def currency(self) -> str:
        value = self.text("currency").upper()
        try:
            currency_exponent(value)
        except MoneyError:
            raise self.fail("currency", "a known ISO-4217 code") from None
        return value

    def metadata(self) -> Mapping[str, str]:
        value = self._d.get("metadata") or {}
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise self.fail("metadata", "an object of strings")
        return MappingProxyType(dict(value))

    def sub(self, name: str) -> Any:
        return self._d.get(name)


def _reference(metadata: Mapping[str, str]) -> str | None:
    value = metadata.get(REFERENCE_KEY)
    return value if value and len(value) <= _ID_LENGTH_MAX else None


def _payment_error(value: Any) -> PaymentError | None:
    if value is None:
        return None
    doc = _Doc(value, "last_payment_error")
    # Stripe's card errors carry a code; other kinds may carry only a type and a message.
    code = doc.optional_text("code") or doc.optional_text("type") or "payment_failed"
    return PaymentError(code, doc.optional_text("decline_code"), doc.optional_text("message") or "")


def _next_action_url(value: Any) -> str | None:
    if value is None:
        return None
    redirect = _Doc(value, "next_action").sub("redirect_to_url")
    return None if redirect is None else _Doc(redirect, "next_action.redirect_to_url").optional_text("url")


def parse_stripe_intent(document: Any) -> PaymentIntent:
    d = _Doc(document, "payment_intent")
    d.kind("payment_intent")
    metadata = d.metadata()
    intent = PaymentIntent(
        id=d.text("id"),
        status=cast(IntentStatus, d.choice("status", INTENT_STATUSES)),
        amount_minor=d.integer("amount"),
        amount_capturable_minor=d.optional_integer("amount_capturable") or 0,
        amount_received_minor=d.optional_integer("amount_received") or 0,
        amount_refunded_minor=0,
        amount_refund_pending_minor=0,
        amount_disputed_minor=0,
        currency=d.currency(),
        capture_method=_CAPTURE_METHODS[d.choice("capture_method", _CAPTURE_METHODS)],
        payment_method=d.id_of("payment_method"),
        reference=_reference(metadata),
        metadata=metadata,
        created_s=d.integer("created"),
        last_payment_error=_payment_error(d.sub("last_payment_error")),
        next_action_url=_next_action_url(d.sub("next_action")),
        latest_charge=d.id_of("latest_charge"),
        cancellation_reason=d.optional_text("cancellation_reason"),
        canceled_s=d.optional_integer("canceled_at"),
    )
    if intent.amount_minor <= 0:
        raise PspParseError("payment_intent.amount: expected a positive amount")
    if (
        intent.amount_received_minor > intent.amount_minor
        or intent.amount_capturable_minor > intent.amount_minor
    ):
        raise PspParseError("payment_intent: received/capturable exceed the amount")
    return intent


def parse_stripe_refund(document: Any) -> Refund:
    d = _Doc(document, "refund")
    d.kind("refund")
    intent_id = d.id_of("payment_intent")
    if intent_id is None:  # a refund of a charge made without a payment intent: never one of ours
        raise d.fail("payment_intent", "the id of a payment intent")
    status = _REFUND_STATUS[d.choice("status", _REFUND_STATUS)]
    failure = d.optional_text("failure_reason")
    if d.sub("status") == "canceled" and failure is None:
        failure = "canceled"
    refund = Refund(
        id=d.text("id"),
        payment_intent_id=intent_id,
        reference=_reference(d.metadata()),
        amount_minor=d.integer("amount"),
        currency=d.currency(),
        status=status,
        reason=d.optional_text("reason"),
        failure_reason=failure,
        created_s=d.integer("created"),
    )
    if refund.amount_minor <= 0:
        raise PspParseError("refund.amount: expected a positive amount")
    return refund


def parse_stripe_dispute(document: Any) -> Dispute:
    d = _Doc(document, "dispute")
    d.kind("dispute")
    intent_id = d.id_of("payment_intent")
    if intent_id is None:
        raise d.fail("payment_intent", "the id of a payment intent")
    return Dispute(
        id=d.text("id"),
        payment_intent_id=intent_id,
        reference=_reference(d.metadata()),
        amount_minor=d.integer("amount"),
        currency=d.currency(),
        reason=d.text("reason"),
        status=d.text("status"),
        created_s=d.integer("created"),
    )


def parse_stripe_payout(document: Any) -> Payout:
    d = _Doc(document, "payout")
    d.kind("payout")
    raw_status = d.choice("status", _PAYOUT_STATUS)
    status = _PAYOUT_STATUS[raw_status]
    failure_code = d.optional_text("failure_code")
    if raw_status == "canceled" and failure_code is None:
        failure_code = "canceled"
    metadata = d.metadata()
    destination = d.id_of("destination")
    payout = Payout(
        id=d.text("id"),
        status=status,
        amount_minor=d.integer("amount"),
        currency=d.currency(),
        destination=destination or "",
        reference=_reference(metadata),
        failure_code=failure_code,
        failure_message=d.optional_text("failure_message"),
        metadata=metadata,
    )
    if payout.amount_minor <= 0:
        raise PspParseError("payout.amount: expected a positive amount")
    if not payout.destination:
        raise d.fail("destination", "the id of a bank account or card")
    if status is PayoutStatus.FAILED and failure_code is None:
        raise d.fail("failure_code", "a code on a failed payout")
    if status is not PayoutStatus.FAILED and failure_code is not None:
        raise d.fail("failure_code", "null on a payout that did not fail")
    return payout


def parse_stripe_object(document: Any) -> PspObject:
    """``data.object`` of an event we act on: a payment intent, refund, dispute or payout."""
    kind = document.get("object") if isinstance(document, dict) else None
    match kind:
        case "payment_intent":
            return parse_stripe_intent(document)
        case "refund":
            return parse_stripe_refund(document)
        case "dispute":
            return parse_stripe_dispute(document)
        case "payout":
            return parse_stripe_payout(document)
        case _:
            raise PspParseError("data.object.object: expected payment_intent, refund, dispute or payout")


def parse_stripe_event(document: Any) -> WebhookEvent:
    """A Stripe event (``object: "event"``) whose ``data.object`` is one of ours."""
    d = _Doc(document, "event")
    d.kind("event")
    data = _Doc(d.sub("data"), "event.data")
    return WebhookEvent(
        d.text("id"), d.text("type"), d.integer("created"), parse_stripe_object(data.sub("object"))
    )
