"""What callers see of a payment or a payout (JSON-ready dicts): the API's response bodies.

The payment method token is never shown; amounts are integers of minor units.
"""

from __future__ import annotations

from typing import Any

from payment_state.domain.model import Operation, PaymentState, PaymentStatus, allowed_actions
from payment_state.domain.payouts import PayoutState


def operation_view(op: Operation) -> dict[str, Any]:
    view: dict[str, Any] = {
        "operation_id": op.operation_id,
        "type": str(op.operation_type),
        "status": str(op.status),
        "amount_minor": op.amount_minor,
        "currency": op.currency,
        "provider_reference": op.provider_reference,
    }
    if op.refund_id is not None:
        view["refund_id"] = op.refund_id
    if op.failure_code is not None:
        view["failure_code"] = op.failure_code
    if op.unknown_reason is not None:
        view["unknown_reason"] = op.unknown_reason
    return view


def payment_view(state: PaymentState) -> dict[str, Any]:
    p = state.payment
    next_action = None
    if p.status == PaymentStatus.REQUIRES_ACTION and p.next_action_url is not None:
        next_action = {"type": "redirect_to_url", "url": p.next_action_url}
    failure = None if p.failure_code is None else {"code": p.failure_code, "message": p.failure_message}
    return {
        "payment_id": p.payment_id,
        "merchant_id": p.merchant_id,
        "status": str(p.status),
        "amount_minor": p.amount_minor,
        "currency": p.currency,
        "capture_method": str(p.capture_method),
        "deposit_reference": p.deposit_reference,
        "provider": p.provider,
        "provider_payment_id": p.provider_payment_id,
        "authorized_minor": p.authorized_minor,
        "captured_minor": p.captured_minor,
        "refunded_minor": p.refunded_minor,
        "pending_refund_minor": p.pending_refund_minor,
        "refundable_minor": p.refundable_minor,
        "next_action": next_action,
        "failure": failure,
        "allowed_actions": allowed_actions(state),
        "operations": [operation_view(op) for op in state.operations],
        "version": p.version,
    }


def error_body(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def payout_view(state: PayoutState) -> dict[str, Any]:
    """A payout as its merchant sees it (the destination token is not shown)."""
    p, op = state.payout, state.operation
    failure = None if p.failure_code is None else {"code": p.failure_code, "message": p.failure_message}
    return {
        "withdrawal_id": p.withdrawal_id,
        "merchant_id": p.merchant_id,
        "status": str(p.status),
        "amount_minor": p.amount_minor,
        "currency": p.currency,
        "provider": p.provider,
        "provider_payout_id": p.provider_payout_id,
        "source_payment_id": p.source_payment_id,
        "mt5_login": p.mt5_login,
        "mt5_debit_id": p.mt5_debit_id,
        "failure": failure,
        "operation": {
            "operation_id": op.operation_id,
            "type": op.operation_type,
            "status": str(op.status),
            "attempts": op.attempts,
            "unknown_reason": op.unknown_reason,
        },
        "version": p.version,
    }
