"""The provider's objects in the simulator's wire format (see services/psp_sim/README.md), its
webhook bodies, and the ``ProviderEventReceived`` the gateway publishes for one."""

from __future__ import annotations

import json
from typing import Any


def webhook_body(event_id: str, event_type: str, obj: dict[str, Any]) -> bytes:
    """A simulator webhook as the gateway forwards it (raw bytes)."""
    return json.dumps({"id": event_id, "type": event_type, "created": 1, "data": {"object": obj}}).encode()


def intent_object(
    provider_payment_id: str, status: str, amount_minor: int, reference: str, **extra: Any
) -> dict[str, Any]:
    """A payment intent in the simulator's wire format (see services/psp_sim/README.md)."""
    return {
        "id": provider_payment_id,
        "object": "payment_intent",
        "status": status,
        "amount_minor": amount_minor,
        "amount_capturable_minor": amount_minor if status == "requires_capture" else 0,
        "amount_received_minor": amount_minor if status == "succeeded" else 0,
        "amount_refunded_minor": 0,
        "amount_refund_pending_minor": 0,
        "amount_disputed_minor": 0,
        "currency": "EUR",
        "capture_method": "automatic",
        "payment_method": "pm_card_visa",
        "reference": reference,
        "metadata": {},
        "created": 1_700_000_000,
        "canceled_at": None,
        "cancellation_reason": None,
        "last_payment_error": None,
        "next_action": None,
        "latest_charge": None,
        "livemode": False,
        **extra,
    }


def refund_object(provider_refund_id: str, provider_payment_id: str, amount_minor: int, reference: str,
                  status: str = "succeeded") -> dict[str, Any]:  # fmt: skip  # aligned under its bracket
    return {
        "id": provider_refund_id,
        "object": "refund",
        "payment_intent": provider_payment_id,
        "reference": reference,
        "amount_minor": amount_minor,
        "currency": "EUR",
        "status": status,
        "reason": None,
        "failure_reason": None,
        "metadata": {},
        "created": 1_700_000_000,
    }


def dispute_object(provider_dispute_id: str, provider_payment_id: str, amount_minor: int) -> dict[str, Any]:
    return {
        "id": provider_dispute_id,
        "object": "dispute",
        "payment_intent": provider_payment_id,
        "reference": None,
        "amount_minor": amount_minor,
        "currency": "EUR",
        "reason": "fraudulent",
        "status": "needs_response",
        "created": 1_700_000_000,
    }


def provider_event(
    provider_event_id: str,
    event_type: str,
    raw_body: bytes,
    *,
    provider_payment_id: str | None,
    verified: bool = True,
    provider: str = "simpsp",
) -> dict[str, Any]:
    """The body of a ProviderEventReceived (without envelope), as the gateway publishes it."""
    return {
        "provider": provider,
        "provider_event_id": provider_event_id,
        "provider_event_type": event_type,
        "provider_payment_id": provider_payment_id,
        "receipt_id": abs(hash(provider_event_id)) % 1_000_000,
        "received_at_ms": 1_700_000_000_000,
        "signature_verified": verified,
        "raw_body": raw_body,
    }
