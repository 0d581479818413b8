"""Typed values of the PSP's objects (payment intent, refund, dispute, payout, webhook event) and their strict
parsing from the PSP's JSON.

Strict on purpose: money is ``int`` minor units (a float, a bool or text is refused), the currency is a
known ISO-4217 code, the status is one of the documented set, and the amounts must be consistent
(``received <= amount``, ``refunded + refund_pending <= received``). Anything else raises
``PspParseError``, which the client turns into ``NoAnswer``: an answer we cannot read proves nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Final, Literal, cast, get_args

from backbone.money import MoneyError, currency_exponent

IntentStatus = Literal[
    "requires_payment_method",
    "requires_confirmation",
    "requires_action",
    "requires_capture",
    "processing",
    "succeeded",
    "canceled",
]
RefundStatus = Literal["pending", "succeeded", "failed"]
CaptureMethod = Literal["manual", "automatic"]
EventType = Literal[
    "payment_intent.requires_action",
    "payment_intent.amount_capturable_updated",
    "payment_intent.succeeded",
    "payment_intent.canceled",
    "payment_intent.payment_failed",
    "charge.refunded",
    "refund.succeeded",
    "refund.failed",
    "charge.dispute.created",
    "payout.created",
    "payout.paid",
    "payout.failed",
    "payout.returned",
]
INTENT_STATUSES: Final = frozenset(get_args(IntentStatus))
REFUND_STATUSES: Final = frozenset(get_args(RefundStatus))
EVENT_TYPES: Final = frozenset(get_args(EventType))
_ID_LENGTH_MAX: Final = 255


class PspParseError(ValueError):
    """The PSP's JSON is not what the contract says; the message names the field (never card data)."""


@dataclass(frozen=True, slots=True)
class PaymentError:
    code: str
    decline_code: str | None
    message: str


@dataclass(frozen=True, slots=True)
class PaymentIntent:
    id: str
    status: IntentStatus
    amount_minor: int
    amount_capturable_minor: int
    amount_received_minor: int
    amount_refunded_minor: int
    amount_refund_pending_minor: int
    amount_disputed_minor: int
    currency: str
    capture_method: CaptureMethod
    payment_method: str | None
    reference: str | None
    metadata: Mapping[str, str]
    created_s: int
    last_payment_error: PaymentError | None
    next_action_url: str | None
    latest_charge: str | None
    cancellation_reason: str | None
    canceled_s: int | None


@dataclass(frozen=True, slots=True)
class Refund:
    id: str
    payment_intent_id: str
    reference: str | None
    amount_minor: int
    currency: str
    status: RefundStatus
    reason: str | None
    failure_reason: str | None
    created_s: int


@dataclass(frozen=True, slots=True)
class Dispute:
    id: str
    payment_intent_id: str
    reference: str | None
    amount_minor: int
    currency: str
    reason: str
    status: str
    created_s: int


class PayoutStatus(StrEnum):
    """A payout: ``pending -> paid | failed``, ``paid -> returned`` (the bank sent it back, days later)."""

    PENDING = "pending"
    PAID = "paid"
    FAILED = "failed"
    RETURNED = "returned"


PAYOUT_STATUSES: Final = frozenset(s.value for s in PayoutStatus)


@dataclass(frozen=True, slots=True)
class Payout:
    """Money out of our PSP balance to a payment method token; ``reference`` is our withdrawal id."""

    id: str
    status: PayoutStatus
    amount_minor: int
    currency: str
    destination: str
    reference: str | None
    failure_code: str | None
    failure_message: str | None
    metadata: Mapping[str, str]


PspObject = PaymentIntent | Refund | Dispute | Payout


@dataclass(frozen=True, slots=True)
class WebhookEvent:
    """A webhook event, parsed after its signature was verified over the raw bytes."""

    id: str
    type: str  # one of EVENT_TYPES for the types documented today; kept open for new ones
    created_s: int
    object: PspObject


class _Doc:
    """Typed reads from one JSON object; every failure names the object and the field."""

    def __init__(self, document: Any, what: str) -> None:
        if not isinstance(document, dict):
            raise PspParseError(f"{what}: not a JSON object")
        self._d, self._what = cast(dict[str, Any], document), what

    def _fail(self, name: str, expected: str) -> PspParseError:
        return PspParseError(f"{self._what}.{name}: expected {expected}")

    def text(self, name: str) -> str:
        value = self._d.get(name)
        if not isinstance(value, str) or not 0 < len(value) <= _ID_LENGTH_MAX:
            raise self._fail(name, "a non-empty string")
        return value

    def optional_text(self, name: str) -> str | None:
        return None if self._d.get(name) is None else self.text(name)

    def integer(self, name: str) -> int:
        value = self._d.get(name)
        if type(value) is not int or value < 0:
            raise self._fail(name, "a non-negative integer")
        return value

    def optional_integer(self, name: str) -> int | None:
        return None if self._d.get(name) is None else self.integer(name)

    def choice(self, name: str, allowed: frozenset[str]) -> str:
        value = self._d.get(name)
        if value not in allowed:
            raise self._fail(name, f"one of {sorted(allowed)}")
        return cast(str, value)

    def currency(self) -> str:
        value = self.text("currency")
        try:
            currency_exponent(value)
        except MoneyError:
            raise self._fail("currency", "a known ISO-4217 code") from None
        return value

    def metadata(self) -> Mapping[str, str]:
        value = self._d.get("metadata") or {}
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise self._fail("metadata", "an object of strings")
        return MappingProxyType(dict(value))

    def sub(self, name: str) -> Any:
        return self._d.get(name)


def _payment_error(value: Any) -> PaymentError | None:
    if value is None:
        return None
    doc = _Doc(value, "last_payment_error")
    return PaymentError(doc.text("code"), doc.optional_text("decline_code"), doc.text("message"))


def _next_action_url(value: Any) -> str | None:
    if value is None:
        return None
    redirect = _Doc(value, "next_action").sub("redirect_to_url")
    return _Doc(redirect, "next_action.redirect_to_url").optional_text("url")


def parse_intent(document: Any) -> PaymentIntent:
    d = _Doc(document, "payment_intent")
    if d.sub("object") != "payment_intent":
        raise PspParseError("payment_intent.object: expected 'payment_intent'")
    intent = PaymentIntent(
        id=d.text("id"),
        status=cast(IntentStatus, d.choice("status", INTENT_STATUSES)),
        amount_minor=d.integer("amount_minor"),
        amount_capturable_minor=d.integer("amount_capturable_minor"),
        amount_received_minor=d.integer("amount_received_minor"),
        amount_refunded_minor=d.integer("amount_refunded_minor"),
        amount_refund_pending_minor=d.optional_integer("amount_refund_pending_minor") or 0,
        amount_disputed_minor=d.optional_integer("amount_disputed_minor") or 0,
        currency=d.currency(),
        capture_method=cast(CaptureMethod, d.choice("capture_method", frozenset({"manual", "automatic"}))),
        payment_method=d.optional_text("payment_method"),
        reference=d.optional_text("reference"),
        metadata=d.metadata(),
        created_s=d.integer("created"),
        last_payment_error=_payment_error(d.sub("last_payment_error")),
        next_action_url=_next_action_url(d.sub("next_action")),
        latest_charge=d.optional_text("latest_charge"),
        cancellation_reason=d.optional_text("cancellation_reason"),
        canceled_s=d.optional_integer("canceled_at"),
    )
    _check_amounts(intent)
    return intent


def _check_amounts(i: PaymentIntent) -> None:
    if i.amount_minor <= 0:
        raise PspParseError("payment_intent.amount_minor: expected a positive amount")
    if i.amount_received_minor > i.amount_minor or i.amount_capturable_minor > i.amount_minor:
        raise PspParseError("payment_intent: received/capturable exceed the amount")
    if i.amount_refunded_minor + i.amount_refund_pending_minor > i.amount_received_minor:
        raise PspParseError("payment_intent: refunds exceed the amount received")


def parse_refund(document: Any) -> Refund:
    d = _Doc(document, "refund")
    if d.sub("object") != "refund":
        raise PspParseError("refund.object: expected 'refund'")
    refund = Refund(
        id=d.text("id"),
        payment_intent_id=d.text("payment_intent"),
        reference=d.optional_text("reference"),
        amount_minor=d.integer("amount_minor"),
        currency=d.currency(),
        status=cast(RefundStatus, d.choice("status", REFUND_STATUSES)),
        reason=d.optional_text("reason"),
        failure_reason=d.optional_text("failure_reason"),
        created_s=d.integer("created"),
    )
    if refund.amount_minor <= 0:
        raise PspParseError("refund.amount_minor: expected a positive amount")
    return refund


def parse_dispute(document: Any) -> Dispute:
    d = _Doc(document, "dispute")
    if d.sub("object") != "dispute":
        raise PspParseError("dispute.object: expected 'dispute'")
    return Dispute(
        id=d.text("id"),
        payment_intent_id=d.text("payment_intent"),
        reference=d.optional_text("reference"),
        amount_minor=d.integer("amount_minor"),
        currency=d.currency(),
        reason=d.text("reason"),
        status=d.text("status"),
        created_s=d.integer("created"),
    )


def parse_payout(document: Any) -> Payout:
    d = _Doc(document, "payout")
    if d.sub("object") != "payout":
        raise PspParseError("payout.object: expected 'payout'")
    payout = Payout(
        id=d.text("id"),
        status=PayoutStatus(d.choice("status", PAYOUT_STATUSES)),
        amount_minor=d.integer("amount_minor"),
        currency=d.currency(),
        destination=d.text("destination"),
        reference=d.optional_text("reference"),
        failure_code=d.optional_text("failure_code"),
        failure_message=d.optional_text("failure_message"),
        metadata=d.metadata(),
    )
    if payout.amount_minor <= 0:
        raise PspParseError("payout.amount_minor: expected a positive amount")
    # A failed payout says why; a pending or paid one has no failure; a returned one may carry the
    # bank's return code. A contradiction proves nothing, so it is unreadable.
    if payout.status is PayoutStatus.FAILED and payout.failure_code is None:
        raise PspParseError("payout.failure_code: expected on a failed payout")
    if payout.status in (PayoutStatus.PENDING, PayoutStatus.PAID) and payout.failure_code is not None:
        raise PspParseError("payout.failure_code: expected null on a pending or paid payout")
    return payout


_PARSERS: Final[dict[str, Callable[[Any], PspObject]]] = {
    "payment_intent": parse_intent,
    "refund": parse_refund,
    "dispute": parse_dispute,
    "payout": parse_payout,
}


def parse_object(document: Any) -> PspObject:
    kind = document.get("object") if isinstance(document, dict) else None
    parser = _PARSERS.get(kind) if isinstance(kind, str) else None
    if parser is None:
        raise PspParseError("data.object.object: expected payment_intent, refund, dispute or payout")
    return parser(document)


def parse_event_document(document: Any) -> WebhookEvent:
    d = _Doc(document, "event")
    data = _Doc(d.sub("data"), "event.data")
    return WebhookEvent(d.text("id"), d.text("type"), d.integer("created"), parse_object(data.sub("object")))
