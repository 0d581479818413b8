"""Unit tests of mt5-credit's pure domain: states, comments, FX, intake plans, resolver verdicts."""

from __future__ import annotations

from decimal import Decimal

import pytest
from backbone.invariants import InvariantViolation
from hypothesis import given
from hypothesis import strategies as st
from mt5_credit.domain.fx import FxQuote, convert_minor, proportional_minor
from mt5_credit.domain.intake import (
    Account,
    Captured,
    DepositIntent,
    NewRow,
    OpenCase,
    OriginalCredit,
    TakenBack,
    plan_credit,
    plan_debit,
    precheck,
)
from mt5_credit.domain.model import (
    CreditKind,
    CreditStatus,
    DebitReason,
    can_move,
    mt5_comment,
    signed_amount_minor,
)
from mt5_credit.domain.resolve import LookupKind, ResolveTiming, after_lookup, backoff_ms, lookup_window_ms

TIMING = ResolveTiming(10_000, 5_000, 900_000, 1_000, 60_000, 3)
ACCOUNT = Account(5001, "cust-1", "USD", enabled=True)
INTENT = DepositIntent("dpi_1", "m1", "cust-1", 5001, 50_000, "USD")
CAPTURED = Captured("simpsp", "pi_1", "pay-1", 50_000, "USD", "dpi_1")


def test_comment_is_compact_stable_and_fits_mt5() -> None:
    """The MT5 comment depends only on kind and id, so every attempt carries the same one, <= 31 chars."""
    assert mt5_comment(CreditKind.CREDIT, 48213) == "dep:48213"
    assert mt5_comment(CreditKind.DEBIT, 7) == "dbt:7"
    assert len(mt5_comment(CreditKind.CREDIT, 2**63 - 1)) <= 31
    with pytest.raises(InvariantViolation):
        mt5_comment(CreditKind.CREDIT, 0)


def test_expired_or_unknown_never_goes_straight_to_pending_except_by_lookup() -> None:
    """claimed -> pending does not exist (a dead worker may have reached MT5); done and failed are final."""
    assert not can_move(CreditStatus.CLAIMED, CreditStatus.PENDING)
    assert can_move(CreditStatus.CLAIMED, CreditStatus.UNKNOWN)
    assert can_move(CreditStatus.UNKNOWN, CreditStatus.PENDING)
    assert not any(can_move(CreditStatus.DONE, s) for s in CreditStatus)
    assert not any(can_move(CreditStatus.FAILED, s) for s in CreditStatus)


def test_signed_amount_direction_by_kind() -> None:
    """Credits are positive and debits negative on MT5; a row's own amount is always positive."""
    assert signed_amount_minor(CreditKind.CREDIT, 100) == 100
    assert signed_amount_minor(CreditKind.DEBIT, 100) == -100
    with pytest.raises(InvariantViolation):
        signed_amount_minor(CreditKind.DEBIT, -5)


def test_fx_converts_once_exactly_with_half_even() -> None:
    """EUR 100.00 at 1.0835 is USD 108.35; JPY (0 digits) to USD shifts exponents; ties round to even."""
    q = FxQuote("EUR", "USD", Decimal("1.0835"), "fixed", 1)
    assert convert_minor(10_000, "EUR", "USD", q).amount_minor == 10_835
    jpy = FxQuote("JPY", "USD", Decimal("0.0067"), "fixed", 1)
    assert convert_minor(10_000, "JPY", "USD", jpy).amount_minor == 6_700  # 10,000 JPY = 67.00 USD
    half = FxQuote("EUR", "USD", Decimal("0.5"), "fixed", 1)
    assert convert_minor(1, "EUR", "USD", FxQuote("EUR", "USD", Decimal("2.5"), "f", 1)).amount_minor == 2
    assert convert_minor(3, "EUR", "USD", half).amount_minor == 2  # 1.5 -> 2 (even)
    assert convert_minor(10_000, "USD", "USD", None).quote is None


def test_fx_refuses_a_wrong_pair_or_a_missing_quote() -> None:
    """A quote for another pair, or none at all, is a bug, never a silent 1:1."""
    with pytest.raises(InvariantViolation):
        convert_minor(100, "EUR", "USD", FxQuote("GBP", "USD", Decimal(1), "f", 1))
    with pytest.raises(InvariantViolation):
        convert_minor(100, "EUR", "USD", None)


@given(whole=st.integers(1, 10**12), converted=st.integers(1, 10**12), data=st.data())
def test_partial_debits_never_exceed_the_credit(whole: int, converted: int, data: st.DataObject) -> None:
    """Proportional parts of a converted credit are >= 1, and the full part is exactly the credit."""
    part = data.draw(st.integers(1, whole))
    got = proportional_minor(part, whole, converted)
    assert got >= 1
    assert proportional_minor(whole, whole, converted) == converted
    assert got <= converted or converted < part  # only rounding up of tiny amounts to 1 can exceed


def test_plan_credit_takes_the_login_from_the_intent() -> None:
    """The credit's login is the intent's (server-side), checked against the mapping; amount is captured."""
    plan = plan_credit(CAPTURED, INTENT, ACCOUNT, None)
    assert isinstance(plan, NewRow)
    assert (plan.mt5_login, plan.amount_minor, plan.currency, plan.fx) == (5001, 50_000, "USD", None)
    assert plan.source_key == "payment:simpsp:pi_1"


@pytest.mark.parametrize(
    ("fact", "intent", "account", "why"),
    [
        (Captured("simpsp", "pi_1", "p", 1, "USD", None), None, ACCOUNT, "no valid deposit reference"),
        (CAPTURED, None, ACCOUNT, "no valid deposit reference"),
        (CAPTURED, INTENT, None, "not a known MT5 account"),
        (CAPTURED, INTENT, Account(5001, "someone-else", "USD", True), "is not the intent customer's"),
        (Captured("simpsp", "pi_1", "p", 1, "EUR", "dpi_1"), INTENT, ACCOUNT, "no FX rate EUR->USD"),
    ],
)
def test_plan_credit_refuses_bad_facts(
    fact: Captured, intent: DepositIntent | None, account: Account | None, why: str
) -> None:
    """No deposit reference, unknown intent or login, another customer's login, no rate: a case, no row."""
    plan = plan_credit(fact, intent, account, None)
    assert isinstance(plan, OpenCase)
    assert why in plan.reason


def _original(**kw: object) -> OriginalCredit:
    base = dict(
        credit_id=9,
        status=CreditStatus.DONE,
        mt5_login=5001,
        customer_id="cust-1",
        amount_minor=10_835,
        currency="USD",
        payment_amount_minor=10_000,
        payment_currency="EUR",
        debited_minor=0,
    )
    base.update(kw)
    return OriginalCredit(**base)  # type: ignore[arg-type]


def test_plan_debit_uses_the_original_rate_and_caps_at_the_credit() -> None:
    """A full refund debits exactly what was credited; a partial uses the stored rate; too much is a case."""
    full = plan_debit(
        TakenBack(DebitReason.REFUND, "rf1", "simpsp", "p", 10_000, "EUR", "dpi_1"), _original()
    )
    assert isinstance(full, NewRow)
    assert (full.kind, full.amount_minor, full.currency, full.original_credit_id) == (
        CreditKind.DEBIT,
        10_835,
        "USD",
        9,
    )
    half = plan_debit(TakenBack(DebitReason.REFUND, "rf2", "simpsp", "p", 5_000, "EUR", "dpi_1"), _original())
    assert isinstance(half, NewRow) and half.amount_minor == 5_418  # 5417.5 -> even
    over = plan_debit(
        TakenBack(DebitReason.CHARGEBACK, "cb1", "simpsp", "p", 6_000, "EUR", "dpi_1"),
        _original(debited_minor=5_418),
    )
    assert isinstance(over, OpenCase) and "more than was credited" in over.reason


def test_plan_debit_of_a_failed_or_missing_credit_is_a_case() -> None:
    """Nothing was credited, so nothing is taken back automatically: a person decides."""
    fact = TakenBack(DebitReason.REFUND, "rf1", "simpsp", "p", 100, "EUR", "dpi_1")
    assert isinstance(plan_debit(fact, None), OpenCase)
    assert isinstance(plan_debit(fact, _original(status=CreditStatus.FAILED)), OpenCase)


def test_precheck_rechecks_owner_enabled_and_currency() -> None:
    """Right before the call: a re-mapped, disabled or re-denominated account stops the credit."""
    assert precheck(5001, "cust-1", "USD", ACCOUNT) is None
    assert "no longer belongs" in (precheck(5001, "cust-1", "USD", Account(5001, "x", "USD", True)) or "")
    assert "disabled" in (precheck(5001, "cust-1", "USD", Account(5001, "cust-1", "USD", False)) or "")
    assert "now in EUR" in (precheck(5001, "cust-1", "USD", Account(5001, "cust-1", "EUR", True)) or "")
    assert "no longer a known" in (precheck(5001, "cust-1", "USD", None) or "")


def test_lookup_verdicts_follow_the_seed() -> None:
    """found -> done; absent -> pending; conflict -> unknown + person, no more lookups; no answer ->
    unknown + alert, then a person is told but the row is still looked up (MT5 may come back)."""
    assert after_lookup(LookupKind.FOUND, 0, TIMING).target == "done"
    assert after_lookup(LookupKind.ABSENT, 0, TIMING).target == "pending"
    conflict = after_lookup(LookupKind.CONFLICT, 0, TIMING)
    assert (conflict.target, conflict.needs_person, conflict.stop_looking) == ("unknown", True, True)
    first = after_lookup(LookupKind.NO_ANSWER, 1, TIMING)
    assert (first.target, first.alert, first.needs_person) == ("unknown", True, False)
    given_up = after_lookup(LookupKind.NO_ANSWER, 3, TIMING)
    assert (given_up.needs_person, given_up.stop_looking) == (True, False)


def test_lookup_window_starts_before_the_claim_on_the_server_clock() -> None:
    """A server clock 2 h ahead moves the window; the lookback reaches before the first claim."""
    claim, db_now = 1_000_000_000, 1_000_060_000
    server_now = db_now + 7_200_000
    start, end = lookup_window_ms(claim, db_now, server_now, TIMING)
    assert start == claim + 7_200_000 - TIMING.lookback_ms
    assert end > server_now


def test_a_deal_made_before_the_server_clock_stepped_back_is_inside_the_window() -> None:
    """The call's deal is stamped on the server's clock at the time of the call; then the server's
    clock steps back 87 s before the lookup (a drill's MT5 clock offset). The window, placed with
    the offset measured at the lookup, still holds the deal, so "absent" cannot be said of it (it
    was, and the credit went out twice); so does one after a step forward."""
    claim, db_now = 1_000_000_000, 1_000_013_000
    deal_at = claim + 3_000  # server time when MT5 applied the call: no offset then
    for step_ms in (-87_000, 87_000, -600_000):
        server_now = db_now + step_ms
        start, end = lookup_window_ms(claim, db_now, server_now, TIMING)
        assert start <= deal_at <= end, (step_ms, start, end)


def test_backoff_grows_and_is_capped() -> None:
    """Unanswered lookups back off exponentially up to the cap."""
    assert [backoff_ms(n, TIMING) for n in (1, 2, 3)] == [1_000, 2_000, 4_000]
    assert backoff_ms(50, TIMING) == 60_000


def test_one_credit_per_deposit_intent() -> None:
    """A second captured payment for an intent already credited is a case (money received twice)."""
    plan = plan_credit(CAPTURED, INTENT, ACCOUNT, None, credited_by="payment:simpsp:pi_0")
    assert isinstance(plan, OpenCase) and "paid twice" in plan.reason
    same = plan_credit(CAPTURED, INTENT, ACCOUNT, None, credited_by="payment:simpsp:pi_1")
    assert isinstance(same, NewRow)  # the same payment again: the row's own unique key absorbs it
