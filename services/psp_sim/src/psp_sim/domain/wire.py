"""The JSON wire format of the simulated PSP: objects (payment intent, refund, dispute, payout), lists,
errors and webhook events. One compact encoding, so a stored response replays byte for byte.

Errors always have the shape ``{"error": {"type", "code", "message", ...}}``; a decline (402) also
carries ``decline_code`` and the ``payment_intent`` after the decline, as Stripe does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from psp_sim.domain.intents import Intent, PaymentError, Refund
from psp_sim.domain.payouts import Payout

ErrorType = Literal[
    "invalid_request_error", "card_error", "idempotency_error", "api_error", "authentication_error"
]


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


def dumps(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


def _error(error: PaymentError | None) -> dict[str, Any] | None:
    if error is None:
        return None
    return {"code": error.code, "decline_code": error.decline_code, "message": error.message}


def intent_json(intent: Intent) -> dict[str, Any]:
    next_action = None
    if intent.next_action_url is not None:
        next_action = {"type": "redirect_to_url", "redirect_to_url": {"url": intent.next_action_url}}
    return {
        "id": intent.id,
        "object": "payment_intent",
        "status": intent.status,
        "amount_minor": intent.amount_minor,
        "amount_capturable_minor": intent.amount_capturable_minor,
        "amount_received_minor": intent.amount_received_minor,
        "amount_refunded_minor": intent.amount_refunded_minor,
        "amount_refund_pending_minor": intent.amount_refund_pending_minor,
        "amount_disputed_minor": intent.amount_disputed_minor,
        "currency": intent.currency,
        "capture_method": intent.capture_method,
        "payment_method": intent.payment_method,
        "reference": intent.reference,
        "metadata": intent.metadata,
        "created": intent.created_s,
        "canceled_at": intent.canceled_s,
        "cancellation_reason": intent.cancellation_reason,
        "last_payment_error": _error(intent.last_payment_error),
        "next_action": next_action,
        "latest_charge": intent.latest_charge,
        "livemode": False,
    }


def refund_json(refund: Refund) -> dict[str, Any]:
    return {
        "id": refund.id,
        "object": "refund",
        "payment_intent": refund.payment_intent_id,
        "reference": refund.reference,
        "amount_minor": refund.amount_minor,
        "currency": refund.currency,
        "status": refund.status,
        "reason": refund.reason,
        "failure_reason": refund.failure_reason,
        "metadata": refund.metadata,
        "created": refund.created_s,
    }


def dispute_json(dispute: Dispute) -> dict[str, Any]:
    return {
        "id": dispute.id,
        "object": "dispute",
        "payment_intent": dispute.payment_intent_id,
        "reference": dispute.reference,
        "amount_minor": dispute.amount_minor,
        "currency": dispute.currency,
        "reason": dispute.reason,
        "status": dispute.status,
        "created": dispute.created_s,
    }


def payout_json(payout: Payout) -> dict[str, Any]:
    """The payout as the API answers it (``forced_failure_code`` and ``settle_at_ms`` are internal)."""
    return {
        "id": payout.id,
        "object": "payout",
        "status": payout.status,
        "amount_minor": payout.amount_minor,
        "currency": payout.currency,
        "destination": payout.destination,
        "reference": payout.reference,
        "failure_code": payout.failure_code,
        "failure_message": payout.failure_message,
        "metadata": payout.metadata,
        "created": payout.created_s,
        "paid_at": payout.paid_s,
        "failed_at": payout.failed_s,
        "returned_at": payout.returned_s,
        "livemode": False,
    }


def list_json(items: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {"object": "list", "data": list(items), "has_more": False}


def error_json(error_type: ErrorType, code: str, message: str, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"type": error_type, "code": code, "message": message}
    body.update({k: v for k, v in extra.items() if v is not None})
    return {"error": body}


def decline_json(intent: Intent, error: PaymentError) -> dict[str, Any]:
    return error_json(
        "card_error",
        error.code,
        error.message,
        decline_code=error.decline_code,
        payment_intent=intent_json(intent),
    )


def event_body(event_id: str, event_type: str, created_s: int, obj: dict[str, Any]) -> bytes:
    """The exact bytes of a webhook event; fixed at creation, sent identically on every attempt."""
    return dumps(
        {
            "id": event_id,
            "object": "event",
            "type": event_type,
            "created": created_s,
            "livemode": False,
            "data": {"object": obj},
        }
    )
