"""Currency conversion, done once when a credit row is created and stored on it.

The rate is "units of the account currency per one unit of the payment currency" as an exact
decimal. Conversion works in minor units with exact integer arithmetic and rounds half-even once;
a retry never recomputes it (the row keeps rate, source and time).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from backbone.invariants import invariant
from backbone.money import currency_exponent


@dataclass(frozen=True)
class FxQuote:
    """A rate from a configured source, with when it was taken (ms since the epoch, UTC)."""

    from_currency: str
    to_currency: str
    rate: Decimal
    source: str
    taken_at_ms: int

    def __post_init__(self) -> None:
        invariant(self.rate.is_finite() and self.rate > 0, f"rate must be positive, got {self.rate}")
        invariant(self.from_currency != self.to_currency, "a quote converts between two currencies")


@dataclass(frozen=True)
class Converted:
    amount_minor: int
    quote: FxQuote | None  # None when no conversion took place


def convert_minor(
    amount_minor: int, from_currency: str, to_currency: str, quote: FxQuote | None
) -> Converted:
    """``amount_minor`` of ``from_currency`` expressed in minor units of ``to_currency``.

    Same currency: unchanged, no quote. Otherwise the quote must be for this pair. Rounds half to
    even, exactly (Fraction arithmetic, no float, no decimal context). Refuses a result of zero.
    """
    invariant(amount_minor > 0, f"amount must be positive, got {amount_minor}")
    if from_currency == to_currency:
        return Converted(amount_minor, None)
    invariant(quote is not None, f"no FX quote for {from_currency}->{to_currency}")
    assert quote is not None  # for the type checker; the invariant above survives -O
    invariant(
        (quote.from_currency, quote.to_currency) == (from_currency, to_currency),
        f"quote is for {quote.from_currency}->{quote.to_currency}, not {from_currency}->{to_currency}",
    )
    shift = currency_exponent(to_currency) - currency_exponent(from_currency)
    exact = Fraction(amount_minor) * Fraction(quote.rate) * Fraction(10) ** shift
    result = round(exact)  # Fraction.__round__ rounds half to even
    invariant(result > 0, f"{amount_minor} {from_currency} converts to nothing in {to_currency}")
    return Converted(result, quote)


def proportional_minor(part_minor: int, whole_minor: int, whole_converted_minor: int) -> int:
    """The converted amount of a part (a partial refund) of a converted whole, with the whole's rate.

    A part equal to the whole gives exactly the whole's converted amount, so a full refund debits
    exactly what was credited; any other part rounds half to even once.
    """
    invariant(0 < part_minor <= whole_minor, f"part {part_minor} must be in (0, {whole_minor}]")
    if part_minor == whole_minor:
        return whole_converted_minor
    return max(1, round(Fraction(part_minor * whole_converted_minor, whole_minor)))
