"""Processing fees and balance-transaction amounts, in integer minor units.

Fee of a charge = ``round_half_up(gross * percent_bp / 10_000) + fixed_minor``, capped at the gross
(a fee never turns a charge's net negative). Refunds carry no fee (the charge's fee is not returned,
as with most acquirers). A dispute withdraws the disputed amount and charges ``dispute_fee_minor``.
``net = gross - fee`` always; refunds and disputes have a negative gross.
"""

from __future__ import annotations

from dataclasses import dataclass

from backbone.invariants import invariant

BASIS_POINTS = 10_000


@dataclass(frozen=True, slots=True)
class FeeSchedule:
    percent_bp: int  # 290 = 2.90 %
    fixed_minor: int
    dispute_fee_minor: int

    def __post_init__(self) -> None:
        invariant(0 <= self.percent_bp <= BASIS_POINTS, "fee percent_bp must be 0..10000")
        invariant(self.fixed_minor >= 0 and self.dispute_fee_minor >= 0, "fees are not negative")


@dataclass(frozen=True, slots=True)
class Amounts:
    gross_minor: int
    fee_minor: int
    net_minor: int


def charge_fee_minor(gross_minor: int, schedule: FeeSchedule) -> int:
    invariant(gross_minor > 0, "a charge has a positive gross")
    percent = (gross_minor * schedule.percent_bp + BASIS_POINTS // 2) // BASIS_POINTS
    return min(gross_minor, percent + schedule.fixed_minor)


def charge_amounts(captured_minor: int, schedule: FeeSchedule) -> Amounts:
    fee = charge_fee_minor(captured_minor, schedule)
    return _checked(Amounts(captured_minor, fee, captured_minor - fee))


def refund_amounts(refunded_minor: int) -> Amounts:
    invariant(refunded_minor > 0, "a refund has a positive amount")
    return _checked(Amounts(-refunded_minor, 0, -refunded_minor))


def dispute_amounts(disputed_minor: int, schedule: FeeSchedule) -> Amounts:
    invariant(disputed_minor > 0, "a dispute has a positive amount")
    fee = schedule.dispute_fee_minor
    return _checked(Amounts(-disputed_minor, fee, -disputed_minor - fee))


def _checked(amounts: Amounts) -> Amounts:
    invariant(amounts.net_minor == amounts.gross_minor - amounts.fee_minor, "net = gross - fee")
    return amounts
