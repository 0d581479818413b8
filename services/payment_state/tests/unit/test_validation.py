"""Untrusted bodies: MT5 logins and malformed fields are refused with a code (card data is refused
before a body gets here: backbone.http and the consumer's contract check, tested in libs)."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest
from backbone.money import AmountLimit
from payment_state.domain.commands import CreatePaymentRequest, Rejection
from payment_state.domain.model import CaptureMethod
from payment_state.domain.validation import (
    check_idempotency_key,
    parse_capture,
    parse_create,
    parse_refund,
)

GOOD: dict[str, Any] = {"amount_minor": 1000, "currency": "EUR", "payment_method_token": "pm_tok_123"}


def code(result: object) -> str:
    assert isinstance(result, Rejection), result
    assert result.http_status == 400
    return result.code


def test_mt5_login_is_never_accepted() -> None:
    """The MT5 account comes from mt5-credit's deposit intent; a body naming one is refused."""
    assert code(parse_create({**GOOD, "mt5_login": 5001234})) == "mt5_login_not_accepted"
    assert code(parse_create({**GOOD, "login": "5001234"})) == "mt5_login_not_accepted"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"amount_minor": 0}, "invalid_amount"),
        ({"amount_minor": -5}, "invalid_amount"),
        ({"amount_minor": 10.5}, "invalid_amount"),
        ({"amount_minor": "1000"}, "invalid_amount"),
        ({"amount_minor": True}, "invalid_amount"),
        ({"amount_minor": 2**63}, "amount_too_large"),
        ({"amount_minor": 2**53 + 1}, "amount_too_large"),
        ({"currency": "eur"}, "invalid_currency"),
        ({"currency": "XXX"}, "invalid_currency"),
        ({"currency": 978}, "invalid_currency"),
        ({"payment_method_token": ""}, "invalid_payment_method_token"),
        ({"payment_method_token": "tok with spaces"}, "invalid_payment_method_token"),
        ({"capture_method": "later"}, "invalid_capture_method"),
        ({"deposit_reference": "dep/../x"}, "invalid_deposit_reference"),
        ({"surprise": 1}, "unknown_field"),
    ],
)
def test_create_field_errors(change: dict[str, Any], expected: str) -> None:
    """Each malformed field gets its own machine-readable code."""
    assert code(parse_create({**GOOD, **change})) == expected


def test_create_normalizes_defaults() -> None:
    """A valid body becomes a typed request; capture_method defaults to manual."""
    parsed = parse_create({**GOOD, "deposit_reference": "dep_01"})
    assert parsed == CreatePaymentRequest(1000, "EUR", "pm_tok_123", CaptureMethod.MANUAL, "dep_01")


def test_non_object_bodies() -> None:
    """A JSON array or string is not a request."""
    assert code(parse_create([1, 2])) == "invalid_body"
    assert code(parse_capture("pay_1", "x")) == "invalid_body"


def test_capture_amount_needs_its_currency() -> None:
    """A partial capture names amount and currency; an empty body captures everything."""
    assert parse_capture("pay_1", {}) == parse_capture("pay_1", {"amount_minor": None})
    assert code(parse_capture("pay_1", {"amount_minor": 10})) == "invalid_currency"


def test_idempotency_key_rules() -> None:
    """Missing, empty, too long or non-printable keys are refused."""
    assert check_idempotency_key("order-42:attempt-1") is None
    cases = [
        (None, "idempotency_key_missing"),
        ("", "idempotency_key_missing"),
        ("a" * 256, "invalid_idempotency_key"),
        ("has space", "invalid_idempotency_key"),
    ]
    for bad, expected in cases:
        assert code(check_idempotency_key(bad)) == expected


def test_the_configured_ceiling_holds_for_every_money_request() -> None:
    """Create, capture, refund and a payout refuse an amount over the deployment's ceiling for its
    currency (amount_too_large) and take one at it: the one check in backbone.money, per currency."""
    limit = AmountLimit(1_000_000, MappingProxyType({"JPY": 500}))
    at, over = {**GOOD, "amount_minor": 1_000_000}, {**GOOD, "amount_minor": 1_000_001}
    assert isinstance(parse_create(at, limit=limit), CreatePaymentRequest)
    assert code(parse_create(over, limit=limit)) == "amount_too_large"
    assert (
        code(parse_create({**GOOD, "currency": "JPY", "amount_minor": 501}, limit=limit))
        == "amount_too_large"
    )
    assert code(parse_capture("pay_1", {"amount_minor": 1_000_001, "currency": "EUR"}, limit=limit)) == (
        "amount_too_large"
    )
    assert code(parse_refund("pay_1", {"amount_minor": 1_000_001, "currency": "EUR"}, limit=limit)) == (
        "amount_too_large"
    )
