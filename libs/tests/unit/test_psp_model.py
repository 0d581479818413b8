"""Parsing the PSP's objects and events into typed values: strict on money, statuses and consistency."""

from __future__ import annotations

import json
from typing import Any

import pytest
from backbone.psp import (
    Malformed,
    PaymentIntent,
    PspParseError,
    Refund,
    WebhookEvent,
    parse_event,
    parse_intent,
)
from backbone.psp.model import Dispute, parse_refund


def intent_json(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "pi_1",
        "object": "payment_intent",
        "status": "requires_capture",
        "amount_minor": 1000,
        "amount_capturable_minor": 1000,
        "amount_received_minor": 0,
        "amount_refunded_minor": 0,
        "amount_refund_pending_minor": 0,
        "amount_disputed_minor": 0,
        "currency": "EUR",
        "capture_method": "manual",
        "payment_method": "pm_card_visa",
        "reference": "pay_1",
        "metadata": {"order": "42"},
        "created": 1_800_000_000,
        "canceled_at": None,
        "cancellation_reason": None,
        "last_payment_error": None,
        "next_action": None,
        "latest_charge": "ch_1",
        "livemode": False,
    }
    base.update(changes)
    return base


def test_intent_parses_to_typed_values() -> None:
    """Every documented field lands in the typed value; metadata is read-only."""
    intent = parse_intent(intent_json())
    assert isinstance(intent, PaymentIntent)
    assert (intent.status, intent.amount_minor, intent.currency, intent.reference) == (
        "requires_capture",
        1000,
        "EUR",
        "pay_1",
    )
    assert intent.metadata == {"order": "42"}
    with pytest.raises(TypeError):
        intent.metadata["x"] = "y"  # type: ignore[index]


def test_3ds_and_decline_details() -> None:
    """next_action's redirect URL and last_payment_error are parsed."""
    intent = parse_intent(
        intent_json(
            status="requires_payment_method",
            amount_capturable_minor=0,
            next_action={"type": "redirect_to_url", "redirect_to_url": {"url": "https://x/3ds"}},
            last_payment_error={
                "code": "card_declined",
                "decline_code": "insufficient_funds",
                "message": "no",
            },
        )
    )
    assert intent.next_action_url == "https://x/3ds"
    assert (
        intent.last_payment_error is not None
        and intent.last_payment_error.decline_code == "insufficient_funds"
    )


@pytest.mark.parametrize(
    "changes",
    [
        {"amount_minor": 10.0},
        {"amount_minor": True},
        {"amount_minor": "1000"},
        {"amount_minor": 0, "amount_capturable_minor": 0},
        {"currency": "XXX"},
        {"currency": "eur"},
        {"status": "paid"},
        {"object": "charge"},
        {"id": ""},
        {"amount_received_minor": 1001},
        {
            "status": "succeeded",
            "amount_received_minor": 500,
            "amount_refunded_minor": 400,
            "amount_refund_pending_minor": 101,
        },
        {"metadata": {"n": 1}},
        {"created": -1},
    ],
)
def test_intent_refusals(changes: dict[str, Any]) -> None:
    """Floats, bools or text as money, unknown currencies/statuses, inconsistent amounts: PspParseError."""
    with pytest.raises(PspParseError):
        parse_intent(intent_json(**changes))


def test_refund_and_event_parsing() -> None:
    """A refund event parses to a Refund; a dispute event to a Dispute; unknown objects are Malformed."""
    refund = {
        "id": "re_1",
        "object": "refund",
        "payment_intent": "pi_1",
        "reference": "rf_1",
        "amount_minor": 300,
        "currency": "EUR",
        "status": "succeeded",
        "reason": None,
        "failure_reason": None,
        "metadata": {},
        "created": 1,
    }
    assert isinstance(parse_refund(refund), Refund)
    event = parse_event(
        json.dumps(
            {"id": "evt_1", "type": "refund.succeeded", "created": 2, "data": {"object": refund}}
        ).encode()
    )
    assert (
        isinstance(event, WebhookEvent)
        and isinstance(event.object, Refund)
        and event.object.amount_minor == 300
    )
    dispute = {
        "id": "dp_1",
        "object": "dispute",
        "payment_intent": "pi_1",
        "reference": "pay_1",
        "amount_minor": 10,
        "currency": "EUR",
        "reason": "fraudulent",
        "status": "needs_response",
        "created": 3,
    }
    parsed = parse_event(
        json.dumps(
            {"id": "evt_2", "type": "charge.dispute.created", "created": 3, "data": {"object": dispute}}
        ).encode()
    )
    assert isinstance(parsed, WebhookEvent) and isinstance(parsed.object, Dispute)
    assert isinstance(parse_event(b"{"), Malformed)
    assert isinstance(
        parse_event(b'{"id":"e","type":"x","created":1,"data":{"object":{"object":"coupon"}}}'), Malformed
    )
