"""What a provider can tell us, in our words, whatever the channel.

The synchronous answer to a call, a verified webhook and an active lookup are all turned into one
of these facts by the provider adapter, and all go through the same ``apply_fact``. A fact is a
snapshot of the provider's object (its payment intent, refund or dispute) or a definite refusal
of one of our calls; it is never "a timeout" (that is no fact at all, the operation stays
UNKNOWN).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import assert_never


class IntentStatus(StrEnum):
    """The provider payment intent's state, mapped onto what it means for us."""

    PROCESSING = "processing"  # accepted, no outcome yet (includes requires_confirmation)
    REQUIRES_ACTION = "requires_action"  # 3-D Secure or similar: the customer must act
    AUTHORIZED = "authorized"  # requires_capture: held on the card
    CAPTURED = "captured"  # succeeded: the money is captured
    CANCELED = "canceled"  # voided (by us, the provider or the authorization expiring)
    FAILED = "failed"  # a definite decline (requires_payment_method after an attempt)


class RefundStatus(StrEnum):
    PENDING = "pending"
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # failed or canceled: no money moved


@dataclass(frozen=True, slots=True)
class IntentFact:
    provider_payment_id: str
    status: IntentStatus
    amount_minor: int
    currency: str
    amount_capturable_minor: int = 0
    amount_received_minor: int = 0
    our_reference: str | None = None  # our payment_id, as we gave it to the provider
    next_action_url: str | None = None
    failure_code: str | None = None
    failure_message: str | None = None
    cancellation_reason: str | None = None


@dataclass(frozen=True, slots=True)
class RefundFact:
    provider_refund_id: str
    provider_payment_id: str | None
    status: RefundStatus
    amount_minor: int
    currency: str
    our_reference: str | None = None  # our refund operation id, as we gave it to the provider
    failure_code: str | None = None


@dataclass(frozen=True, slots=True)
class DisputeFact:
    provider_dispute_id: str
    provider_payment_id: str
    amount_minor: int
    currency: str
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class CallRefused:
    """The provider definitively refused one of our calls (a decline, an invalid request): the
    operation failed and will not succeed later."""

    operation_id: str
    code: str
    message: str | None = None
    provider_payment_id: str | None = None


ProviderFact = IntentFact | RefundFact | DisputeFact | CallRefused


def fact_type(fact: ProviderFact) -> str:
    """A short label for the audit table."""
    match fact:
        case IntentFact(status=status):
            return f"intent.{status}"
        case RefundFact(status=status):
            return f"refund.{status}"
        case DisputeFact():
            return "dispute"
        case CallRefused():
            return "call_refused"
        case _:
            assert_never(fact)
