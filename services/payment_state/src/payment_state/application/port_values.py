"""The values payment-state's ports carry: the provider calls and their closed results, the facts a
webhook parser gives, and the store's answers (``application/ports.py`` declares the ports)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from payment_state.domain.commands import StoredResponse
from payment_state.domain.facts import CallRefused, DisputeFact, IntentFact, RefundFact
from payment_state.domain.payouts import PayoutFact, PayoutRefused
from payment_state.domain.repairs import RepairRequest


@dataclass(frozen=True, slots=True)
class AuthorizeCall:
    operation_id: str
    payment_id: str  # our reference, stored at the provider so lookups and webhooks find us
    merchant_id: str
    amount_minor: int
    currency: str
    payment_method_token: str
    capture_method: str


@dataclass(frozen=True, slots=True)
class CaptureCall:
    operation_id: str
    payment_id: str
    provider_payment_id: str
    amount_minor: int


@dataclass(frozen=True, slots=True)
class CancelCall:
    operation_id: str
    payment_id: str
    provider_payment_id: str
    reason: str | None


@dataclass(frozen=True, slots=True)
class RefundCall:
    operation_id: str  # also our reference for the refund at the provider
    payment_id: str
    provider_payment_id: str
    amount_minor: int
    currency: str
    reason: str | None


ProviderCall = AuthorizeCall | CaptureCall | CancelCall | RefundCall


@dataclass(frozen=True, slots=True)
class PayoutCall:
    """Pay a withdrawal out: the same call, with the same operation id, on every send."""

    operation_id: str
    withdrawal_id: str  # our reference at the provider: lookups and webhooks find us by it
    merchant_id: str
    amount_minor: int
    currency: str
    destination_token: str


F = TypeVar("F")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Applied(Generic[F]):
    fact: F


@dataclass(frozen=True, slots=True)
class Refused(Generic[R]):
    fact: R


@dataclass(frozen=True, slots=True)
class NoAnswer:
    """The provider may or may not have acted (a call), or could not be asked (a lookup)."""

    reason: str  # e.g. "timeout", "http_503", "connection_lost"


CallResult = Applied[IntentFact | RefundFact] | Refused[CallRefused] | NoAnswer
PayoutCallResult = Applied[PayoutFact] | Refused[PayoutRefused] | NoAnswer


@dataclass(frozen=True, slots=True)
class Found(Generic[F]):
    fact: F


@dataclass(frozen=True, slots=True)
class Absent:
    pass


@dataclass(frozen=True, slots=True)
class Conflict:
    """More than one provider object carries our reference (e.g. a create repeated after the
    provider forgot the idempotency key): a possible double charge, for a person."""

    count: int


Lookup = Found[IntentFact | RefundFact] | Absent | Conflict | NoAnswer
PayoutLookup = Found[PayoutFact] | Absent | Conflict | NoAnswer


@dataclass(frozen=True, slots=True)
class Ignored:
    """A webhook type payment-state does not act on (kept for audit)."""

    provider_event_type: str


WebhookFact = IntentFact | RefundFact | DisputeFact | PayoutFact | Ignored


@dataclass(frozen=True, slots=True)
class Created:
    """The create key was new: the payment, its authorize operation and the answer are stored."""


@dataclass(frozen=True, slots=True)
class PaymentIdTaken:
    """The key is new but the (caller-minted) payment id exists: nothing else was created; the key
    holds the create's answer until the caller stores its own (``store_response``)."""


CreateOutcome = Created | PaymentIdTaken | StoredResponse


@dataclass(frozen=True, slots=True)
class OpenOperations:
    """What the executor's metrics show: open operations by status, and how long the oldest UNKNOWN
    one has waited."""

    pending: int
    unknown: int
    oldest_unknown_s: float


@dataclass(frozen=True, slots=True)
class StoredRepair:
    """A repair request as recorded, with where it stands (``requested`` until it is decided)."""

    request: RepairRequest
    status: str  # requested | executed | refused | unknown
    attempts: int  # PSP lookups made
    claimed_by: str | None
