"""Intake of a withdrawal's events (ADR 0008), as pure functions: payouts paid and returned are
money facts under the ledger's references, PayoutFailed is kept as nothing but settles an attention,
the MT5 debit and give-back credit carry their own comments, and unknown reasons are refused."""

from __future__ import annotations

from datetime import UTC, date, time
from typing import Any

import pytest
from reconciler.domain.dates import BusinessCalendar
from reconciler.domain.intake import EventInfo, IntakeRefused, records_of
from reconciler.domain.records import MoneyFact, Mt5Operation, Settled
from reconciler.testing.world import at

UTC_CAL = BusinessCalendar(UTC, time(0, 0))
WID = "wd_" + "0" * 31 + "7"
PAYOUT: dict[str, Any] = {
    "merchant_id": "m1",
    "withdrawal_id": WID,
    "operation_id": "op-po-7",
    "provider": "simpsp",
    "provider_payout_id": "po_7",
    "amount_minor": 2_500,
    "currency": "USD",
}
DEBIT: dict[str, Any] = {
    "debit_id": 41,
    "mt5_login": 7001,
    "amount_minor": 2_500,
    "currency": "USD",
    "deal_ticket": 9,
    "debit_reason": "withdrawal",
    "source_reference": WID,
    "original_credit_id": None,
}
GIVE_BACK: dict[str, Any] = {
    "credit_id": 42,
    "deposit_reference": "dr-1",
    "mt5_login": 7001,
    "amount_minor": 2_500,
    "currency": "USD",
    "deal_ticket": 10,
    "provider": "simpsp",
    "provider_payment_id": "",
    "payment_amount_minor": 2_500,
    "payment_currency": "USD",
    "fx_rate": None,
    "credit_reason": "withdrawal_return",
    "withdrawal_id": WID,
}


def _info(event_type: str) -> EventInfo:
    return EventInfo("e1", event_type, WID, at(date(2026, 11, 30), 12))


def test_paid_and_returned_payouts_are_money_facts_keyed_by_withdrawal_and_kind() -> None:
    """PayoutPaid -> kind payout, key payout:<withdrawal>; PayoutReturned -> payout_return,
    payout-return:<withdrawal>; both name the PSP's payout as their provider object, carry no
    deposit, and settle an attention about their payout operation."""
    for event_type, kind, key in (
        ("PayoutPaid", "payout", f"payout:{WID}"),
        ("PayoutReturned", "payout_return", f"payout-return:{WID}"),
    ):
        fact, ends = records_of(_info(event_type), PAYOUT, UTC_CAL)
        assert isinstance(fact, MoneyFact)
        assert (fact.kind, fact.source_key, fact.provider_object_id) == (kind, key, "po_7")
        assert (fact.payment_id, fact.amount_minor, fact.deposit_reference) == (WID, 2_500, None)
        assert ends == Settled("operation:op-po-7", event_type, fact.occurred_at_ms)
    with pytest.raises(IntakeRefused, match="withdrawal_id"):
        records_of(_info("PayoutPaid"), PAYOUT | {"withdrawal_id": " "}, UTC_CAL)


def test_a_failed_payout_is_no_record_but_settles_its_attention() -> None:
    """No money moved at the PSP: nothing to match (no settlement row, no journal); it still ends
    the payout operation a resolver may have handed to a person."""
    failed = PAYOUT | {"provider_payout_id": None, "failure_code": "card_declined"}
    [ends] = records_of(_info("PayoutFailed"), failed, UTC_CAL)
    assert isinstance(ends, Settled) and ends.subject_key == "operation:op-po-7"


def test_withdrawal_debits_and_give_back_credits_carry_their_own_comments() -> None:
    """A withdrawal debit is wdr:<debit_id>, a give-back credit wbk:<credit_id>, both with the
    withdrawal id; a deposit credit (v1: no credit_reason) stays dep:, a refund debit dbt:."""
    [debit, _] = records_of(_info("Mt5Debited"), DEBIT, UTC_CAL)
    assert isinstance(debit, Mt5Operation)
    assert (debit.comment, debit.source_key, debit.withdrawal_id, debit.cause_key) == (
        "wdr:41",
        "mt5-debit:41",
        WID,
        None,
    )
    [credit, _] = records_of(_info("Mt5Credited"), GIVE_BACK, UTC_CAL)
    assert isinstance(credit, Mt5Operation)
    assert (credit.comment, credit.source_key, credit.kind, credit.withdrawal_id) == (
        "wbk:42",
        "mt5-credit:42",
        "credit",
        WID,
    )
    deposit = {k: v for k, v in GIVE_BACK.items() if k not in ("credit_reason", "withdrawal_id")}
    [dep, _] = records_of(_info("Mt5Credited"), deposit, UTC_CAL)
    assert isinstance(dep, Mt5Operation) and (dep.comment, dep.withdrawal_id) == ("dep:42", None)
    [refund, _] = records_of(
        _info("Mt5Debited"), DEBIT | {"debit_reason": "refund", "source_reference": "rf-1"}, UTC_CAL
    )
    assert isinstance(refund, Mt5Operation) and (refund.comment, refund.cause_key) == (
        "dbt:41",
        "refund:rf-1",
    )


def test_unknown_reasons_and_a_give_back_without_its_withdrawal_are_refused() -> None:
    """A debit_reason or credit_reason outside the closed set is refused (dead-lettered with the
    reason), never guessed into a comment; so is a give-back credit that names no withdrawal."""
    with pytest.raises(IntakeRefused, match="debit_reason 'goodwill'"):
        records_of(_info("Mt5Debited"), DEBIT | {"debit_reason": "goodwill"}, UTC_CAL)
    with pytest.raises(IntakeRefused, match="credit_reason 'bonus'"):
        records_of(_info("Mt5Credited"), GIVE_BACK | {"credit_reason": "bonus"}, UTC_CAL)
    with pytest.raises(IntakeRefused, match="withdrawal_id"):
        records_of(_info("Mt5Credited"), GIVE_BACK | {"withdrawal_id": None}, UTC_CAL)
