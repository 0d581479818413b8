"""Request parsing: strict types, unknown parameters refused, every failure names its parameter."""

from __future__ import annotations

from typing import Any

import pytest
from psp_sim.domain import requests as r


def test_create_defaults_and_values() -> None:
    """Minimal create: manual capture, no confirm, empty metadata."""
    parsed = r.parse_create({"amount_minor": 100, "currency": "EUR"})
    assert parsed == r.CreateIntent(100, "EUR", None, None, {}, "manual", False)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"currency": "EUR"}, "amount_minor"),
        ({"amount_minor": 1.5, "currency": "EUR"}, "amount_minor"),
        ({"amount_minor": True, "currency": "EUR"}, "amount_minor"),
        ({"amount_minor": "100", "currency": "EUR"}, "amount_minor"),
        ({"amount_minor": 0, "currency": "EUR"}, "amount_minor"),
        ({"amount_minor": 100, "currency": "eur"}, "currency"),
        ({"amount_minor": 100, "currency": "EUR", "metadata": {"a": 1}}, "metadata"),
        ({"amount_minor": 100, "currency": "EUR", "confirm": "yes"}, "confirm"),
        ({"amount_minor": 100, "currency": "EUR", "capture_method": "later"}, "capture_method"),
        ({"amount_minor": 100, "currency": "EUR", "amount": 100}, "amount"),
        ({"amount_minor": 100, "currency": "EUR", "reference": ""}, "reference"),
    ],
)
def test_create_refusals_name_the_parameter(body: dict[str, Any], param: str) -> None:
    """Each malformed create is Invalid and names the parameter at fault."""
    parsed = r.parse_create(body)
    assert isinstance(parsed, r.Invalid) and parsed.param == param


def test_other_commands() -> None:
    """Capture, cancel, refund and complete_action parse their few fields strictly."""
    assert r.parse_capture({}) == r.CaptureIntent(None)
    assert isinstance(r.parse_capture({"amount_to_capture_minor": -1}), r.Invalid)
    assert r.parse_cancel({"cancellation_reason": "abandoned"}) == r.CancelIntent("abandoned")
    assert isinstance(r.parse_cancel({"cancellation_reason": "bored"}), r.Invalid)
    assert isinstance(r.parse_refund({"amount_minor": 5}), r.Invalid)
    assert r.parse_refund({"payment_intent": "pi_1"}) == r.CreateRefund("pi_1", None, None, None, {})
    assert r.parse_complete_action({"outcome": "failed"}) == r.CompleteAction("failed")
    assert isinstance(r.parse_complete_action({}), r.Invalid)
