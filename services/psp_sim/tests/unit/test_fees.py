"""Fees in integer minor units: percentage rounded half up, plus the fixed part, capped at the gross."""

from __future__ import annotations

import pytest
from backbone.invariants import InvariantViolation
from hypothesis import given
from hypothesis import strategies as st
from psp_sim.domain.fees import FeeSchedule, charge_amounts, charge_fee_minor, dispute_amounts, refund_amounts

SCHEDULE = FeeSchedule(percent_bp=290, fixed_minor=30, dispute_fee_minor=1500)


@pytest.mark.parametrize(
    ("gross", "fee"),
    [(10_000, 320), (2_345, 98), (99, 33), (1, 1), (17_241, 530), (17_242, 530), (1_724_138, 50_030)],
)
def test_charge_fee(gross: int, fee: int) -> None:
    """2.90 % rounded half up + 30, never more than the gross (17 241 * 2.9 % = 499.989 -> 500)."""
    assert charge_fee_minor(gross, SCHEDULE) == fee


def test_half_up_rounding_at_exactly_half() -> None:
    """50 * 1 % = 0.5 -> 1 (half up, not half even)."""
    assert charge_fee_minor(50, FeeSchedule(100, 0, 0)) == 1
    assert charge_fee_minor(150, FeeSchedule(100, 0, 0)) == 2


@given(st.integers(min_value=1, max_value=10**12))
def test_net_is_gross_minus_fee_and_never_negative_for_charges(gross: int) -> None:
    """Property: net = gross - fee and 0 <= fee <= gross."""
    amounts = charge_amounts(gross, SCHEDULE)
    assert amounts.net_minor == amounts.gross_minor - amounts.fee_minor
    assert 0 <= amounts.fee_minor <= gross


def test_refund_and_dispute_amounts() -> None:
    """A refund has no fee; a dispute withdraws the amount and charges the dispute fee."""
    assert refund_amounts(700) == refund_amounts(700)
    assert (refund_amounts(700).gross_minor, refund_amounts(700).net_minor) == (-700, -700)
    dispute = dispute_amounts(400, SCHEDULE)
    assert (dispute.gross_minor, dispute.fee_minor, dispute.net_minor) == (-400, 1500, -1900)


def test_bad_schedules_and_amounts_are_bugs() -> None:
    """A negative fee or a non-positive amount violates an invariant."""
    with pytest.raises(InvariantViolation):
        FeeSchedule(-1, 0, 0)
    with pytest.raises(InvariantViolation):
        charge_fee_minor(0, SCHEDULE)
