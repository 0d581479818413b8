"""The provider port: what payment-state needs from a PSP, as closed result types.

An adapter (``adapters/simpsp.py`` for the simulator's Stripe-like API, ``adapters/memory_psp.py``
for unit tests) turns the provider's answers into our facts. Contract:
- every call carries our operation id as the provider idempotency key; sending the same call again
  with the same id never moves money twice (as long as the provider remembers the key);
- ``Applied`` is the provider's object after the call, ``Refused`` a definite refusal (a decline,
  an invalid request): both are facts;
- anything else (timeout, 5xx, connection lost, an answer we cannot read) is ``NoAnswer``: the
  money may or may not have moved, and only a lookup or a webhook will tell;
- lookups never move money: ``Found`` the object, ``Absent`` (the provider says it has no such
  object: authoritative), ``Conflict`` (several objects carry our reference) or ``NoAnswer``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from payment_state.domain.facts import CallRefused, DisputeFact, IntentFact, RefundFact


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
class Applied:
    fact: IntentFact | RefundFact


@dataclass(frozen=True, slots=True)
class Refused:
    fact: CallRefused


@dataclass(frozen=True, slots=True)
class NoAnswer:
    """The provider may or may not have acted (a call), or could not be asked (a lookup)."""

    reason: str  # e.g. "timeout", "http_503", "connection_lost"


CallResult = Applied | Refused | NoAnswer


@dataclass(frozen=True, slots=True)
class Found:
    fact: IntentFact | RefundFact


@dataclass(frozen=True, slots=True)
class Absent:
    pass


@dataclass(frozen=True, slots=True)
class Conflict:
    """More than one provider object carries our reference (e.g. a create repeated after the
    provider forgot the idempotency key): a possible double charge, for a person."""

    count: int


Lookup = Found | Absent | Conflict | NoAnswer


class Psp(Protocol):
    """One payment service provider."""

    @property
    def provider(self) -> str: ...

    def execute(self, call: ProviderCall) -> CallResult: ...

    def find_payment(self, payment_id: str, provider_payment_id: str | None) -> Lookup: ...

    def find_refund(self, operation_id: str, provider_refund_id: str | None) -> Lookup: ...


@dataclass(frozen=True, slots=True)
class Ignored:
    """A webhook type payment-state does not act on (kept for audit)."""

    provider_event_type: str


WebhookFact = IntentFact | RefundFact | DisputeFact | Ignored


class WebhookParser(Protocol):
    """Turns a provider's verified raw webhook body into a fact; raises ValueError on a body that
    does not follow the provider's contract (the consumer dead-letters it)."""

    def __call__(self, raw_body: bytes) -> WebhookFact: ...
