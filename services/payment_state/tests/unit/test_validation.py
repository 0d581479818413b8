"""Untrusted bodies: card data, MT5 logins and malformed fields are refused with a code."""

from __future__ import annotations

from typing import Any

import pytest
from backbone.carddata import luhn_valid
from payment_state.domain.commands import CreatePaymentRequest, Rejection
from payment_state.domain.model import CaptureMethod
from payment_state.domain.validation import (
    check_idempotency_key,
    contains_card_data,
    parse_capture,
    parse_create,
    parse_refund,
)

GOOD: dict[str, Any] = {"amount_minor": 1000, "currency": "EUR", "payment_method_token": "pm_tok_123"}


def code(result: object) -> str:
    assert isinstance(result, Rejection), result
    assert result.http_status == 400
    return result.code


def test_luhn() -> None:
    """The Luhn check accepts real test card numbers and rejects a changed digit."""
    assert luhn_valid("4242424242424242") and luhn_valid("5555555555554444") and luhn_valid("378282246310005")
    assert not luhn_valid("4242424242424241")


@pytest.mark.parametrize(
    "body",
    [
        {**GOOD, "payment_method_token": "4242424242424242"},
        {**GOOD, "payment_method_token": "tok_4242424242424242"},
        {**GOOD, "card": {"number": "4242 4242 4242 4242"}},
        {**GOOD, "pan": "5555-5555-5555-4444"},
        {**GOOD, "notes": ["x", {"y": "378282246310005"}]},
        {**GOOD, "cvv": "123"},
        {**GOOD, "CVC": 123},
        {**GOOD, "security_code": "123"},
        {**GOOD, "4242424242424242": "as a key"},
        {**GOOD, "amount_minor": 4242424242424242},
    ],
)
def test_card_data_anywhere_is_rejected(body: dict[str, Any]) -> None:
    """A Luhn-valid 12-19 digit run anywhere (value, key, nested, spaced, as a number) or a CVV-like
    field: card_data_rejected, before any other check."""
    assert code(parse_create(body)) == "card_data_rejected"
    assert code(parse_refund("pay_1", body)) == "card_data_rejected"


def test_digit_runs_that_are_not_card_numbers_pass_the_card_check() -> None:
    """A non-Luhn 16-digit reference or a short number is not card data (it may still be refused
    for other reasons)."""
    assert not contains_card_data({"deposit_reference": "dep_4242424242424241"})
    assert not contains_card_data({"amount_minor": 123456})


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
        ({"amount_minor": 2**63}, "invalid_amount"),
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
