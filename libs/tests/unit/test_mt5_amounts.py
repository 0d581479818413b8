"""Unit tests of the one place the gateway leaves integer money (backbone.mt5.amounts): minor units
to the account's digits exactly, or a refusal; never a rounded amount."""

from __future__ import annotations

from decimal import Decimal

import pytest
from backbone.money import currency_exponent
from backbone.mt5.amounts import amounts_equal, wire_amount
from hypothesis import given
from hypothesis import strategies as st


@pytest.mark.parametrize(
    ("amount_minor", "currency", "digits", "wire"),
    [
        (12_345, "USD", 2, "123.45"),
        (-12_345, "USD", 2, "-123.45"),
        (12_345, "USD", 3, "123.450"),
        (1, "USD", 8, "0.01000000"),  # plain notation, never "1E-8"
        (100, "JPY", 2, "100.00"),
        (100, "JPY", 0, "100"),
        (50, "USD", 1, "0.5"),
        (1_234, "KWD", 3, "1.234"),
        (100_000_000_000, "USD", 2, "1000000000.00"),
    ],
)
def test_exact_conversions(amount_minor: int, currency: str, digits: int, wire: str) -> None:
    """Amounts that the account's digits can carry are written exactly, with exactly those digits."""
    assert wire_amount(amount_minor, currency, digits) == wire


@pytest.mark.parametrize(
    ("amount_minor", "currency", "digits"),
    [(5, "USD", 1), (12_345, "USD", 0), (1_235, "KWD", 2), (1, "USD", 9), (1, "USD", -1), (10**11, "JPY", 8)],
)
def test_unrepresentable_amounts_are_refused(amount_minor: int, currency: str, digits: int) -> None:
    """An amount with more significant decimals than the account keeps is refused (None), not rounded."""
    assert wire_amount(amount_minor, currency, digits) is None


@given(
    amount_minor=st.integers(min_value=-(10**10), max_value=10**10).filter(bool),  # 64-bit even at 8 digits
    currency=st.sampled_from(["USD", "JPY", "KWD", "EUR"]),
    digits=st.integers(min_value=0, max_value=8),
)
def test_conversion_is_exact_or_refused(amount_minor: int, currency: str, digits: int) -> None:
    """For any amount and digits: either the wire text equals the amount exactly and has exactly
    ``digits`` decimals, or the amount needs more decimals than ``digits`` and is refused."""
    exponent = currency_exponent(currency)
    wire = wire_amount(amount_minor, currency, digits)
    value = Decimal(amount_minor).scaleb(-exponent)
    representable = digits >= exponent or amount_minor % 10 ** (exponent - digits) == 0
    if not representable:
        assert wire is None
        return
    assert wire is not None
    assert Decimal(wire) == value
    assert (len(wire.split(".")[1]) if "." in wire else 0) == digits


def test_profit_comparison_is_numeric() -> None:
    """A deal's Profit written as "100" or "100.00" equals 10000 USD cents; 100.001 does not."""
    assert amounts_equal(Decimal("100"), 10_000, "USD")
    assert amounts_equal(Decimal("100.00"), 10_000, "USD")
    assert not amounts_equal(Decimal("100.001"), 10_000, "USD")
    assert not amounts_equal(Decimal("-100.00"), 10_000, "USD")
