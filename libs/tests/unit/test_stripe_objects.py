"""Stripe's JSON read into ``backbone.psp.model`` (``stripe_objects``): strict like simpsp's parser,
with Stripe's differences settled once (amount names, lower-case currency, expanded ids, our
reference in metadata, statuses simpsp does not have)."""

from __future__ import annotations

from typing import Any

import pytest
from backbone.psp import PayoutStatus, PspParseError
from backbone.psp.stripe_objects import parse_stripe_intent, parse_stripe_payout, parse_stripe_refund


def intent(**overrides: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "id": "pi_1",
        "object": "payment_intent",
        "amount": 2000,
        "amount_capturable": 2000,
        "amount_received": 0,
        "capture_method": "manual",
        "currency": "eur",
        "created": 1680800504,
        "status": "requires_capture",
        "metadata": {"reference": "pay_1"},
    }
    document.update(overrides)
    return document


def test_amounts_currency_reference_and_expanded_ids() -> None:
    """amount → amount_minor (zero-decimal JPY counts yen), currency upper case, our reference from
    metadata, expanded payment_method / latest_charge read as their ids, automatic_async as automatic."""
    parsed = parse_stripe_intent(
        intent(
            currency="jpy",
            amount=5000,
            amount_capturable=5000,
            capture_method="automatic_async",
            payment_method={"id": "pm_1", "object": "payment_method"},
            latest_charge={"id": "ch_1"},
        )
    )
    assert (parsed.amount_minor, parsed.currency, parsed.reference) == (5000, "JPY", "pay_1")
    assert (parsed.payment_method, parsed.latest_charge, parsed.capture_method) == (
        "pm_1",
        "ch_1",
        "automatic",
    )


@pytest.mark.parametrize(
    "bad",
    [
        {"amount": 20.5},
        {"amount": True},
        {"currency": "xxx"},
        {"status": "requires_nothing"},
        {"object": "charge"},
        {"amount_capturable": 2001},
        {"metadata": {"reference": 7}},
    ],
)
def test_unreadable_intents_are_refused(bad: dict[str, Any]) -> None:
    """A float, a bool, an unknown currency or status, another object, amounts that do not add up,
    metadata that is not strings: PspParseError (the client's NoAnswer)."""
    with pytest.raises(PspParseError):
        parse_stripe_intent(intent(**bad))


def test_refund_statuses_and_payout_statuses() -> None:
    """A canceled refund is failed (failure 'canceled'); a payout in transit is pending, a failed one
    must say why, a paid one must not carry a failure."""
    refund = {
        "id": "re_1",
        "object": "refund",
        "amount": 100,
        "currency": "eur",
        "payment_intent": "pi_1",
        "status": "canceled",
        "created": 1,
        "metadata": {"reference": "op_1"},
    }
    parsed = parse_stripe_refund(refund)
    assert (parsed.status, parsed.failure_reason, parsed.reference) == ("failed", "canceled", "op_1")
    payout = {
        "id": "po_1",
        "object": "payout",
        "amount": 100,
        "currency": "eur",
        "destination": "ba_1",
        "status": "in_transit",
        "failure_code": None,
        "metadata": {"reference": "wd_1"},
    }
    assert parse_stripe_payout(payout).status is PayoutStatus.PENDING
    with pytest.raises(PspParseError):
        parse_stripe_payout({**payout, "status": "failed"})
    with pytest.raises(PspParseError):
        parse_stripe_payout({**payout, "status": "paid", "failure_code": "account_closed"})
