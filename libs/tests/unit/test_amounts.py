"""The ceiling of a request's amount (backbone.money.request_amount, backbone.settings.AmountSettings)."""

from __future__ import annotations

from types import MappingProxyType

import pytest
from backbone.money import DEFAULT_MINOR_MAX, AmountLimit, AmountRefused, request_amount
from backbone.settings import AmountSettings, SettingsError, load_settings


@pytest.mark.parametrize("value", ["100", 100.0, 10.5, True, None, [100], {"v": 1}])
def test_only_an_integer_is_an_amount(value: object) -> None:
    """Text, floats (even integral), booleans and containers are invalid_amount, never converted."""
    refused = request_amount(value, "USD", AmountLimit())
    assert isinstance(refused, AmountRefused) and refused.code == "invalid_amount"


@pytest.mark.parametrize("value", [0, -1, -(2**63)])
def test_an_amount_is_positive(value: int) -> None:
    """Zero and negative amounts are invalid_amount."""
    refused = request_amount(value, "USD", AmountLimit())
    assert isinstance(refused, AmountRefused) and refused.code == "invalid_amount"


def test_the_ceiling_is_inclusive_and_per_currency() -> None:
    """At the ceiling passes, one over is amount_too_large naming the ceiling; a currency with its
    own ceiling uses it, any other (or none) the default."""
    limit = AmountLimit(1_000, MappingProxyType({"JPY": 50}))
    assert request_amount(1_000, "USD", limit) == 1_000
    over = request_amount(1_001, "USD", limit)
    assert isinstance(over, AmountRefused) and over.code == "amount_too_large" and "1000" in over.message
    assert isinstance(request_amount(51, "JPY", limit), AmountRefused)
    assert request_amount(1_000, None, limit) == 1_000
    assert isinstance(request_amount(2**53 + 1, "USD", AmountLimit()), AmountRefused)
    assert request_amount(DEFAULT_MINOR_MAX, "USD", AmountLimit()) == DEFAULT_MINOR_MAX


def test_the_ceiling_comes_from_the_environment_and_is_checked_at_start() -> None:
    """AMOUNT_MINOR_MAX and AMOUNT_MINOR_MAX_BY_CURRENCY make the limit; an unknown currency, a
    ceiling of 0 or one beyond a 64-bit integer refuses to start, naming the variable."""
    env = {"AMOUNT_MINOR_MAX": "5000", "AMOUNT_MINOR_MAX_BY_CURRENCY": "JPY=700, KWD=90"}
    limit = load_settings(AmountSettings, env).amount_limit
    assert (limit.of("USD"), limit.of("JPY"), limit.of("KWD")) == (5000, 700, 90)
    assert load_settings(AmountSettings, {}).amount_limit == AmountLimit()
    for bad in (
        {"AMOUNT_MINOR_MAX": "0"},
        {"AMOUNT_MINOR_MAX_BY_CURRENCY": "XYZ=5"},
        {"AMOUNT_MINOR_MAX_BY_CURRENCY": f"USD={2**63}"},
        {"AMOUNT_MINOR_MAX_BY_CURRENCY": "USD"},
    ):
        with pytest.raises(SettingsError, match="AMOUNT_MINOR_MAX"):
            load_settings(AmountSettings, bad)
