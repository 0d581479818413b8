"""Money as integer minor units plus an ISO-4217 currency; no floats anywhere.

Invariants kept here:
- an amount is an ``int`` of minor units (``bool`` is rejected although it is an ``int``);
- a currency is a known ISO-4217 alpha-3 code whose exponent (minor-unit digits) we know;
- arithmetic only between equal currencies;
- conversion to and from decimal text is exact or raises: nothing is ever rounded silently.
``Decimal`` appears only at the edges (PSP, MT5), through ``to_decimal`` / ``from_decimal``.

The amount a request may ask to move (``request_amount``): an integer of minor units, positive,
and at most a ceiling the deployment configures (DESIGN §6, §9), one check at every edge
(payment-state's API and commands, mt5-credit's deposit intents and withdrawals). The ceiling is a
sanity bound, not a business limit: it refuses what no honest client sends (``2**53 + 1`` minor
units, which a JavaScript client cannot even represent, or a number a broker's MT5 would round),
long before a 64-bit sum could overflow. It is stated in minor units (``AMOUNT_MINOR_MAX``,
default ``DEFAULT_MINOR_MAX``: 100,000,000.00 in a two-digit currency) and may be set per currency
(``AMOUNT_MINOR_MAX_BY_CURRENCY=JPY=1000000000,KWD=10000000``), since one number of minor units is
worth very different sums in JPY and KWD (``backbone.settings.AmountSettings``). An amount is a JSON
integer: the text ``"100"`` is refused (``invalid_amount``), as a float or a boolean is, because a
caller that sends text has a different idea of the field than we do.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from types import MappingProxyType
from typing import Final, Literal

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
_DIGITS_MAX: Final = 8
_SHIFT_MAX: Final = 19  # 10**19 minor units already exceeds AMOUNT_MINOR_ABS_MAX
_DECIMAL_TEXT: Final = re.compile(r"-?[0-9]+(\.[0-9]+)?", re.ASCII)


class MoneyError(ValueError):
    """Bad money input: unknown currency, non-integer amount, inexact conversion, mixed currencies."""


def currency_exponent(currency: str) -> int:
    """Minor-unit digits of an ISO-4217 currency; raises MoneyError for an unknown code."""
    exponent = _EXPONENT_BY_CURRENCY.get(currency)
    if exponent is None:
        raise MoneyError(f"unknown or unsupported currency {currency!r} (ISO-4217 alpha-3 expected)")
    return exponent


def currency_exponents() -> dict[str, int]:
    """Every ISO-4217 currency this module knows, with its minor-unit digits."""
    return dict(_EXPONENT_BY_CURRENCY)


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
    """Minor units to a Decimal with exactly ``digits`` decimal places.

    Built from the digit tuple, so the result is exact whatever the thread's decimal context
    (precision, rounding) happens to be.
    """
    check_amount_minor(amount_minor)
    invariant(0 <= digits <= _DIGITS_MAX, f"digits out of range: {digits}")
    magnitude = tuple(int(c) for c in str(abs(amount_minor)))
    return Decimal((1 if amount_minor < 0 else 0, magnitude, -digits))


def _parse_decimal_text(text: str) -> Decimal:
    if _DECIMAL_TEXT.fullmatch(text):
        return Decimal(text)
    if text.strip().lstrip("+-").lower() in {"nan", "snan", "inf", "infinity"}:
        raise MoneyError(f"not a finite amount: {text!r}")
    raise MoneyError(f"not a decimal amount: {text!r} (digits, optional '-' and '.', e.g. -123.45)")


def from_decimal(value: Decimal | str, digits: int) -> int:
    """Major units (Decimal or plain decimal text) to minor units, exactly, or raise MoneyError.

    Text must look like ``-123.45`` (ASCII digits, optional sign and point; no exponent,
    underscores or spaces). ``float`` is refused: a binary float cannot represent most decimal
    amounts. Integer arithmetic on the digit tuple makes the result independent of the thread's
    decimal context: nothing is ever rounded.
    """
    invariant(0 <= digits <= _DIGITS_MAX, f"digits out of range: {digits}")
    if isinstance(value, float):  # type: ignore[unreachable]  # callers are not all typed
        raise MoneyError("float is not accepted for money; pass Decimal or decimal text")
    if isinstance(value, str):
        value = _parse_decimal_text(value)
    if not isinstance(value, Decimal):
        raise MoneyError(f"money must be Decimal or decimal text, not {type(value).__name__}")
    sign, digit_tuple, exponent = value.as_tuple()
    if not isinstance(exponent, int):
        raise MoneyError(f"not a finite amount: {value!r}")
    shift = exponent + digits
    if shift > _SHIFT_MAX:
        raise MoneyError(f"{value} is out of range for a 64-bit amount")
    coefficient = int("".join(map(str, digit_tuple)) or "0")
    if shift >= 0:
        magnitude = coefficient * 10**shift
    else:
        magnitude, remainder = divmod(coefficient, 10**-shift)
        if remainder:
            raise MoneyError(f"{value} has more than {digits} decimal places")
    return check_amount_minor(-magnitude if sign else magnitude)


# -- the ceiling of a request's amount ---------------------------------------------------------------

DEFAULT_MINOR_MAX: Final = 10_000_000_000


@dataclass(frozen=True, slots=True)
class AmountLimit:
    """The largest amount one request may move, in minor units, by currency."""

    default_minor: int = DEFAULT_MINOR_MAX
    by_currency: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        for value in (self.default_minor, *self.by_currency.values()):
            if not 0 < value <= AMOUNT_MINOR_ABS_MAX:
                raise ValueError(f"an amount ceiling is 1..{AMOUNT_MINOR_ABS_MAX} minor units")

    def of(self, currency: object) -> int:
        """The ceiling for ``currency`` (the default one for an unknown or missing currency)."""
        return (
            self.by_currency.get(currency, self.default_minor)
            if isinstance(currency, str)
            else self.default_minor
        )


DEFAULT_LIMIT: Final = AmountLimit()


@dataclass(frozen=True, slots=True)
class AmountRefused:
    """Why an amount is refused: ``invalid_amount`` (not a positive integer) or
    ``amount_too_large`` (over the ceiling); the message names the field and the ceiling."""

    code: Literal["invalid_amount", "amount_too_large"]
    message: str


def request_amount(
    value: object, currency: object, limit: AmountLimit, name: str = "amount_minor"
) -> int | AmountRefused:
    """``value`` if it is a positive integer of minor units within ``limit`` for ``currency``."""
    if isinstance(value, bool) or not isinstance(value, int):
        return AmountRefused("invalid_amount", f"{name} must be an integer number of minor units, not text")
    if value <= 0:
        return AmountRefused("invalid_amount", f"{name} must be positive")
    ceiling = limit.of(currency)
    if value > ceiling:
        where = f" of {currency}" if isinstance(currency, str) and currency in limit.by_currency else ""
        return AmountRefused(
            "amount_too_large", f"{name} is at most {ceiling} minor units{where} per request"
        )
    return value


def parse_ceilings(text: str) -> dict[str, int]:
    """``AMOUNT_MINOR_MAX_BY_CURRENCY``'s ``CUR=minor,…`` as a mapping; raises ValueError naming
    the first part it cannot read."""
    ceilings: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        currency, _, raw = part.partition("=")
        try:
            currency_exponent(currency.strip())
            ceilings[currency.strip()] = int(raw.strip())
        except (MoneyError, ValueError):
            raise ValueError(f"expected CUR=minor_units, e.g. JPY=1000000000; got {part!r}") from None
    return ceilings
