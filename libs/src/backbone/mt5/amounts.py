"""Minor units ↔ MT5 decimal amounts: the only place the gateway leaves integer money.

MT5 takes an amount in the account currency with the group's ``CurrencyDigits`` decimals. The
conversion is exact or refused: ``wire_amount`` returns None when the amount cannot be written with
the account's digits (e.g. 1.05 USD into a group with 1 digit). Nothing is ever rounded.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Final

from backbone.money import MoneyError, currency_exponent, from_decimal, to_decimal

DIGITS_MAX: Final = 8


def amount_decimal(amount_minor: int, currency: str) -> Decimal:
    """The exact decimal value of ``amount_minor`` in ``currency``'s ISO-4217 minor units."""
    return to_decimal(amount_minor, currency_exponent(currency))


def wire_amount(amount_minor: int, currency: str, account_digits: int) -> str | None:
    """``amount_minor`` as plain decimal text with exactly ``account_digits`` decimals, or None."""
    if not 0 <= account_digits <= DIGITS_MAX:
        return None
    value = amount_decimal(amount_minor, currency)
    try:
        units = from_decimal(value, account_digits)
    except MoneyError:
        return None
    exact = to_decimal(units, account_digits)
    if exact != value:
        return None
    return format(exact, "f")


def amounts_equal(profit: Decimal, amount_minor: int, currency: str) -> bool:
    """Numeric equality (``100`` equals ``100.00``): a deal's Profit against our amount."""
    return profit == amount_decimal(amount_minor, currency)
