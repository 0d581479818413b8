"""The simulator's wire objects read as facts: a webhook and an answer about the same object can never
be read differently (both go through ``backbone.psp``'s strict parser, then this mapping)."""

from __future__ import annotations

import json

import pytest
from payment_state.adapters.simpsp_objects import parse_webhook
from payment_state.application.ports import Ignored
from payment_state.domain.facts import DisputeFact, IntentFact, IntentStatus, RefundFact, RefundStatus
from payment_state.domain.payouts import PayoutFact, PspPayoutStatus
from payment_state.testing import dispute_object, intent_object, refund_object, webhook_body


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ("requires_action", IntentStatus.REQUIRES_ACTION),
        ("requires_capture", IntentStatus.AUTHORIZED),
        ("succeeded", IntentStatus.CAPTURED),
        ("canceled", IntentStatus.CANCELED),
        ("processing", IntentStatus.PROCESSING),
        ("requires_confirmation", IntentStatus.PROCESSING),
        ("requires_payment_method", IntentStatus.PROCESSING),
    ],
)
def test_intent_statuses(status: str, expected: IntentStatus) -> None:
    """Each provider status maps to one of ours, with amounts and our reference."""
    fact = parse_webhook(
        webhook_body("evt_1", "payment_intent.x", intent_object("pi_1", status, 1500, "pay_1"))
    )
    assert isinstance(fact, IntentFact)
    assert (fact.status, fact.currency, fact.our_reference, fact.amount_minor) == (
        expected,
        "EUR",
        "pay_1",
        1500,
    )


def test_failed_attempt_is_a_failure_with_its_decline_code() -> None:
    """requires_payment_method after an attempt (a last payment error) is a definite failure."""
    error = {"code": "card_declined", "decline_code": "insufficient_funds", "message": "no money"}
    obj = intent_object("pi_1", "requires_payment_method", 1500, "pay_1", last_payment_error=error)
    fact = parse_webhook(webhook_body("evt_1", "payment_intent.payment_failed", obj))
    assert isinstance(fact, IntentFact)
    assert (fact.status, fact.failure_code, fact.failure_message) == (
        IntentStatus.FAILED,
        "insufficient_funds",
        "no money",
    )


def test_redirect_url_of_3ds() -> None:
    """The 3-D Secure redirect URL is carried on to PaymentRequiresAction."""
    action = {"type": "redirect_to_url", "redirect_to_url": {"url": "https://psp/3ds/pi_1"}}
    obj = intent_object("pi_1", "requires_action", 1500, "pay_1", next_action=action)
    fact = parse_webhook(webhook_body("evt_1", "payment_intent.requires_action", obj))
    assert isinstance(fact, IntentFact) and fact.next_action_url == "https://psp/3ds/pi_1"


def test_refund_and_dispute() -> None:
    """Refunds carry our refund operation as reference; only a dispute's creation is a chargeback;
    an authentic event of a type the contract does not list is kept for audit, not dead-lettered."""
    fact = parse_webhook(
        webhook_body("evt_2", "refund.succeeded", refund_object("re_1", "pi_1", 500, "op_9"))
    )
    assert fact == RefundFact("re_1", "pi_1", RefundStatus.SUCCEEDED, 500, "EUR", our_reference="op_9")
    dispute = dispute_object("dp_1", "pi_1", 1500)
    assert parse_webhook(webhook_body("evt_3", "charge.dispute.created", dispute)) == DisputeFact(
        "dp_1", "pi_1", 1500, "EUR", "fraudulent"
    )
    assert parse_webhook(webhook_body("evt_4", "charge.dispute.closed", dispute)) == Ignored(
        "charge.dispute.closed"
    )
    # payout.* events are payout facts, read exactly as a lookup's answer
    payout = {
        "id": "po_1",
        "object": "payout",
        "status": "paid",
        "amount_minor": 5,
        "currency": "EUR",
        "destination": "pm_card_visa",
        "reference": "wd_1",
    }
    assert parse_webhook(webhook_body("evt_5", "payout.paid", payout)) == PayoutFact(
        "po_1", PspPayoutStatus.PAID, 5, "EUR", "wd_1"
    )


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[]",
        webhook_body(
            "e",
            "payment_intent.succeeded",
            {**intent_object("pi_1", "succeeded", 1, "p"), "amount_minor": "1"},
        ),
        webhook_body("e", "payment_intent.succeeded", {**intent_object("pi_1", "exploded", 1, "p")}),
        webhook_body(
            "e",
            "payment_intent.succeeded",
            {**intent_object("pi_1", "succeeded", 1, "p"), "amount_minor": 1.5},
        ),
        json.dumps({"id": "evt", "type": "payment_intent.succeeded", "created": 1, "data": {}}).encode(),
    ],
)
def test_contract_breaches_raise(raw: bytes) -> None:
    """A body that breaks the contract raises ValueError (the consumer dead-letters it)."""
    with pytest.raises(ValueError, match=r".+"):
        parse_webhook(raw)
