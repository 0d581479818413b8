"""The facts payment-state announces on ``payments.events``, as (type, body) pairs.

Bodies follow schemas/events/<Type>/v1.avsc without the envelope (the outbox writer adds it).
Pure: built from the payment and the operation the fact comes from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from payment_state.domain.model import Operation, Payment


@dataclass(frozen=True, slots=True)
class OutEvent:
    event_type: str
    body: dict[str, Any]


def _base(p: Payment, op: Operation) -> dict[str, Any]:
    return {"merchant_id": p.merchant_id, "operation_id": op.operation_id, "provider": p.provider}


def requires_action(p: Payment, op: Operation) -> OutEvent:
    body = {
        **_base(p, op),
        "provider_payment_id": p.provider_payment_id,
        "amount_minor": p.amount_minor,
        "currency": p.currency,
        "next_action_url": p.next_action_url,
    }
    return OutEvent("PaymentRequiresAction", body)


def authorized(p: Payment, op: Operation) -> OutEvent:
    body = {
        **_base(p, op),
        "provider_payment_id": p.provider_payment_id,
        "amount_minor": p.authorized_minor,
        "currency": p.currency,
    }
    return OutEvent("PaymentAuthorized", body)


def captured(p: Payment, op: Operation) -> OutEvent:
    body = {
        **_base(p, op),
        "provider_payment_id": p.provider_payment_id,
        "amount_minor": p.captured_minor,
        "currency": p.currency,
        "deposit_reference": p.deposit_reference,
        # the only destination a later withdrawal of this client may be paid out to (v2)
        "payment_method_token": p.payment_method_token,
    }
    return OutEvent("PaymentCaptured", body)


def canceled(p: Payment, op: Operation, reason: str | None) -> OutEvent:
    body = {**_base(p, op), "provider_payment_id": p.provider_payment_id, "reason": reason}
    return OutEvent("PaymentCanceled", body)


def failed(p: Payment, op: Operation) -> OutEvent:
    body = {
        **_base(p, op),
        "provider_payment_id": p.provider_payment_id,
        "failure_code": p.failure_code or "unknown_failure",
        "failure_message": p.failure_message,
    }
    return OutEvent("PaymentFailed", body)


def refund_succeeded(p: Payment, op: Operation) -> OutEvent:
    body = {
        **_base(p, op),
        "refund_id": op.refund_id,
        "provider_refund_id": op.provider_reference,
        "amount_minor": op.amount_minor,
        "currency": op.currency,
        "deposit_reference": p.deposit_reference,
    }
    return OutEvent("RefundSucceeded", body)


def refund_failed(p: Payment, op: Operation) -> OutEvent:
    body = {
        **_base(p, op),
        "refund_id": op.refund_id,
        "amount_minor": op.amount_minor,
        "currency": op.currency,
        "failure_code": op.failure_code or "refund_failed",
    }
    return OutEvent("RefundFailed", body)


def chargeback_received(
    p: Payment,
    chargeback_id: str,
    provider_dispute_id: str,
    amount_minor: int,
    currency: str,
    reason: str | None,
) -> OutEvent:
    body = {
        "merchant_id": p.merchant_id,
        "chargeback_id": chargeback_id,
        "provider": p.provider,
        "provider_dispute_id": provider_dispute_id,
        "amount_minor": amount_minor,
        "currency": currency,
        "deposit_reference": p.deposit_reference,
        "reason": reason,
    }
    return OutEvent("ChargebackReceived", body)


def needs_attention(p: Payment, op: Operation | None, kind: str, detail: str) -> OutEvent:
    """A case was opened for a person (``PaymentNeedsAttention``): what it is about and what the
    resolver last said."""
    body: dict[str, Any] = {
        "merchant_id": p.merchant_id,
        "provider": p.provider,
        "kind": kind,
        "detail": detail[:2000],
        "operation_id": None if op is None else op.operation_id,
        "operation_type": None if op is None else op.operation_type.value,
        "operation_status": None if op is None else op.status.value,
        "attempts": 0 if op is None else op.attempts,
        "operation_started_at_ms": None if op is None or not op.created_at_ms else op.created_at_ms,
    }
    return OutEvent("PaymentNeedsAttention", body)
