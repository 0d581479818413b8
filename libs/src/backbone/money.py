"""Money as integer minor units plus an ISO-4217 currency; no floats anywhere.

Invariants kept here:
- an amount is an ``int`` of minor units (``bool`` is rejected although it is an ``int``);
- a currency is a known ISO-4217 alpha-3 code whose exponent (minor-unit digits) we know;
- arithmetic only between equal currencies;
- conversion to and from decimal text is exact or raises: nothing is ever rounded silently.
``Decimal`` appears only at the edges (PSP, MT5), through ``to_decimal`` / ``from_decimal``.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Final

from backbone.invariants import invariant

# ISO 4217 minor-unit exponents. Most currencies use 2; listed here are the common ones plus every
# non-2 exponent, so a typo fails instead of silently defaulting to 2.
_EXPONENT_BY_CURRENCY: Final[dict[str, int]] = {
    # exponent 0
    "BIF": 0,
    "CLP": 0,
    "DJF": 0,
    "GNF": 0,
    "ISK": 0,
    "JPY": 0,
    "KMF": 0,
    "KRW": 0,
    "PYG": 0,
    "RWF": 0,
    "UGX": 0,
    "UYI": 0,
    "VND": 0,
    "VUV": 0,
    "XAF": 0,
    "XOF": 0,
    "XPF": 0,
    # exponent 3
    "BHD": 3,
    "IQD": 3,
    "JOD": 3,
    "KWD": 3,
    "LYD": 3,
    "OMR": 3,
    "TND": 3,
    # exponent 4
    "CLF": 4,
    "UYW": 4,
    # exponent 2 (common)
    "AED": 2,
    "AUD": 2,
    "BRL": 2,
    "CAD": 2,
    "CHF": 2,
    "CNY": 2,
    "CZK": 2,
    "DKK": 2,
    "EUR": 2,
    "GBP": 2,
    "HKD": 2,
    "HUF": 2,
    "IDR": 2,
    "ILS": 2,
    "INR": 2,
    "MXN": 2,
    "MYR": 2,
    "NOK": 2,
    "NZD": 2,
    "PHP": 2,
    "PLN": 2,
    "RON": 2,
    "SAR": 2,
    "SEK": 2,
    "SGD": 2,
    "THB": 2,
    "TRY": 2,
    "TWD": 2,
    "USD": 2,
    "ZAR": 2,
    "NGN": 2,
    "KES": 2,
    "EGP": 2,
    "PKR": 2,
    "COP": 2,
    "PEN": 2,
    "ARS": 2,
    "UAH": 2,
    "KZT": 2,
    "QAR": 2,
    "BGN": 2,
}

AMOUNT_MINOR_ABS_MAX: Final[int] = 2**63 - 1  # fits Postgres bigint and Avro long


class MoneyError(ValueError):
    """Bad money input: unknown currency, non-integer amount, inexact conversion, mixed currencies."""


def currency_exponent(currency: str) -> int:
    """Minor-unit digits of an ISO-4217 currency; raises MoneyError for an unknown code."""
    exponent = _EXPONENT_BY_CURRENCY.get(currency)
    if exponent is None:
        raise MoneyError(f"unknown or unsupported currency {currency!r} (ISO-4217 alpha-3 expected)")
    return exponent


def check_amount_minor(amount_minor: object) -> int:
    """Return ``amount_minor`` if it is a plain int within bigint range, else raise MoneyError."""
    if isinstance(amount_minor, bool) or not isinstance(amount_minor, int):
        raise MoneyError(f"amount_minor must be an int of minor units, got {type(amount_minor).__name__}")
    if abs(amount_minor) > AMOUNT_MINOR_ABS_MAX:
        raise MoneyError("amount_minor out of range for a 64-bit integer")
    return amount_minor


@dataclass(frozen=True, slots=True)
class Money:
    """An amount in integer minor units of one currency. May be negative (a delta)."""

    amount_minor: int
    currency: str

    def __post_init__(self) -> None:
        check_amount_minor(self.amount_minor)
        currency_exponent(self.currency)

    def __add__(self, other: Money) -> Money:
        self._same_currency(other)
        return Money(self.amount_minor + other.amount_minor, self.currency)

    def __sub__(self, other: Money) -> Money:
        self._same_currency(other)
        return Money(self.amount_minor - other.amount_minor, self.currency)

    def __neg__(self) -> Money:
        return Money(-self.amount_minor, self.currency)

    def is_positive(self) -> bool:
        return self.amount_minor > 0

    def to_decimal(self) -> Decimal:
        """The amount in major units, exactly (for PSP/MT5 edges only)."""
        return to_decimal(self.amount_minor, currency_exponent(self.currency))

    @classmethod
    def from_decimal(cls, value: Decimal | str, currency: str) -> Money:
        """Parse major units exactly; raises MoneyError if ``value`` has more digits than the currency."""
        return cls(from_decimal(value, currency_exponent(currency)), currency)

    def _same_currency(self, other: Money) -> None:
        if not isinstance(other, Money):
            raise MoneyError(f"cannot combine Money with {type(other).__name__}")
        if other.currency != self.currency:
            raise MoneyError(f"currency mismatch: {self.currency} vs {other.currency}")


def to_decimal(amount_minor: int, digits: int) -> Decimal:
    """Minor units to a Decimal with exactly ``digits`` decimal places."""
    check_amount_minor(amount_minor)
    invariant(0 <= digits <= 8, f"digits out of range: {digits}")
    return Decimal(amount_minor).scaleb(-digits)


def from_decimal(value: Decimal | str, digits: int) -> int:
    """Major units (Decimal or decimal text) to minor units, exactly, or raise MoneyError.

    ``float`` is refused on purpose: a binary float cannot represent most decimal amounts.
    """
    if isinstance(value, float):  # type: ignore[unreachable]
        raise MoneyError("float is not accepted for money; pass Decimal or decimal text")
    invariant(0 <= digits <= 8, f"digits out of range: {digits}")
    try:
        decimal_value = Decimal(value) if isinstance(value, str) else value
    except InvalidOperation as exc:
        raise MoneyError(f"not a decimal amount: {value!r}") from exc
    if not decimal_value.is_finite():
        raise MoneyError(f"not a finite amount: {value!r}")
    scaled = decimal_value.scaleb(digits)
    if scaled != scaled.to_integral_value():
        raise MoneyError(f"{value} has more than {digits} decimal places")
    return check_amount_minor(int(scaled))
