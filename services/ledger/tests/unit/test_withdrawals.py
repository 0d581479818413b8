"""Withdrawals in the books (ADR 0008, "Books"): each rule's journal, the refusals, and the whole
life of a withdrawal bringing ``payouts_in_transit`` back to zero, redeliveries included."""

from __future__ import annotations

import pytest
from ledger.domain.accounts import CHART, AccountKey, AccountType
from ledger.domain.journals import JournalDraft, Rejected, RejectReason, unbalanced_currencies
from ledger.domain.rule_base import EventMeta, Ignored, PostingPolicy, RuleResult
from ledger.domain.rules import draft_for_event
from ledger.testing.facts import (
    WITHDRAWAL_ENDINGS,
    Fact,
    WithdrawalEnding,
    deposit,
    with_body,
    withdrawal,
    withdrawal_id,
)
from ledger.testing.memory import MemoryLedger

POLICY = PostingPolicy()
TRANSIT = AccountKey("payouts_in_transit", "EUR")
PSP = AccountKey("psp_receivable", "EUR")


def post(fact: Fact) -> RuleResult:
    meta = EventMeta(fact.event_id, fact.event_type, fact.payment_id, fact.occurred_at_ms, "test", "t", 0, 1)
    return draft_for_event(meta, fact.body, POLICY)


def lines(result: RuleResult) -> list[tuple[str, str, str, str, int]]:
    assert isinstance(result, JournalDraft), result
    assert not unbalanced_currencies(result.entries)
    return [
        (e.account.code, e.account.currency, e.account.holder, e.direction.value, e.amount_minor)
        for e in result.entries
    ]


def reference(result: RuleResult) -> str:
    assert isinstance(result, JournalDraft), result
    return result.reference


def test_payouts_in_transit_is_a_liability_without_a_floor() -> None:
    """The chart has the new account: a liability (money we owe the client until it is paid out or
    back on MT5), one per currency, no floor (a PayoutPaid may be booked before its MT5 debit)."""
    code = CHART["payouts_in_transit"]
    assert (code.account_type, code.per_holder, code.floor_minor) == (AccountType.LIABILITY, False, None)


def test_the_withdrawal_debit_moves_client_money_into_transit() -> None:
    """Mt5Debited 'withdrawal': Dr client_mt5_balances/<login>, Cr payouts_in_transit, under the
    debit's own reference, recording its source event and the withdrawal id."""
    debit = withdrawal(1, login=555, amount_minor=2_500)[0]
    result = post(debit)
    assert lines(result) == [
        ("client_mt5_balances", "EUR", "mt5:555", "debit", 2_500),
        ("payouts_in_transit", "EUR", "", "credit", 2_500),
    ]
    assert isinstance(result, JournalDraft)
    assert result.reference == "mt5-debit:1000001"
    assert result.source.source_id == debit.event_id
    assert result.payment_id == withdrawal_id(1)
    assert result.source.detail_dict()["source_reference"] == withdrawal_id(1)


def test_payout_paid_and_returned_move_money_between_transit_and_the_psp() -> None:
    """PayoutPaid: Dr payouts_in_transit, Cr psp_receivable (``payout:<withdrawal>``); PayoutReturned:
    the reverse (``payout-return:<withdrawal>``), each with the PSP's payout id as detail."""
    _, paid, returned, _ = withdrawal(2, login=1, amount_minor=900, ending="returned")
    assert lines(post(paid)) == [
        ("payouts_in_transit", "EUR", "", "debit", 900),
        ("psp_receivable", "EUR", "", "credit", 900),
    ]
    assert lines(post(returned)) == [
        ("psp_receivable", "EUR", "", "debit", 900),
        ("payouts_in_transit", "EUR", "", "credit", 900),
    ]
    assert reference(post(paid)) == f"payout:{withdrawal_id(2)}"
    assert reference(post(returned)) == f"payout-return:{withdrawal_id(2)}"
    result = post(paid)
    assert isinstance(result, JournalDraft)
    assert result.source.detail_dict()["provider_payout_id"] == "po_2"


def test_the_give_back_credit_moves_transit_back_to_the_client() -> None:
    """Mt5Credited 'withdrawal_return': Dr payouts_in_transit, Cr client_mt5_balances/<login>; it
    checks no payment amount (the deposit fields only name the card's deposit)."""
    give_back = withdrawal(3, login=77, amount_minor=400, ending="failed")[-1]
    assert give_back.body["credit_reason"] == "withdrawal_return"
    assert lines(post(give_back)) == [
        ("payouts_in_transit", "EUR", "", "debit", 400),
        ("client_mt5_balances", "EUR", "mt5:77", "credit", 400),
    ]
    assert reference(post(give_back)) == "mt5-credit:1000003"


def test_a_deposit_credit_keeps_its_rule_with_or_without_a_credit_reason() -> None:
    """'deposit' books today's rule; a v1 event (no credit_reason) reads as 'deposit'."""
    credited = deposit(1, login=5, amount_minor=100)[1]
    assert "credit_reason" not in credited.body
    expected = [
        ("client_deposits_pending", "EUR", "", "debit", 100),
        ("client_mt5_balances", "EUR", "mt5:5", "credit", 100),
    ]
    assert lines(post(credited)) == expected
    assert lines(post(with_body(credited, credit_reason="deposit", withdrawal_id=None))) == expected


def test_payout_failed_books_nothing() -> None:
    """No money moved at the PSP: the event is acknowledged and nothing is booked (no fake journal);
    the give-back credit books the money's way back."""
    failed = withdrawal(4, login=1, ending="failed")[1]
    assert failed.event_type == "PayoutFailed"
    assert post(failed) == Ignored("PayoutFailed")


def test_unknown_reasons_and_missing_fields_are_refused_never_guessed() -> None:
    """An unknown credit_reason or debit_reason is refused with its own reason; a give-back without
    its withdrawal id, or a payout without its PSP id or with no amount, is a bad event."""
    debit, paid = withdrawal(5, login=1)
    give_back = withdrawal(6, login=1, ending="failed")[-1]

    def refused(result: RuleResult) -> RejectReason:
        assert isinstance(result, Rejected), result
        return result.reason

    assert refused(post(with_body(give_back, credit_reason="bonus"))) is RejectReason.UNKNOWN_CREDIT_REASON
    assert refused(post(with_body(debit, debit_reason="withdraw"))) is RejectReason.UNKNOWN_DEBIT_REASON
    assert refused(post(with_body(give_back, withdrawal_id=None))) is RejectReason.BAD_EVENT
    assert refused(post(with_body(paid, provider_payout_id=" "))) is RejectReason.BAD_EVENT
    assert refused(post(with_body(paid, amount_minor=0))) is RejectReason.BAD_EVENT
    assert refused(post(with_body(paid, currency="XXX1"))) is RejectReason.BAD_EVENT


def _life(ending: WithdrawalEnding, n: int = 1) -> tuple[list[Fact], list[Fact]]:
    """A credited deposit of 10,000 on login 42 (the floor), then one withdrawal of 3,000."""
    return deposit(n, login=42, amount_minor=10_000), withdrawal(
        n, login=42, amount_minor=3_000, ending=ending
    )


@pytest.mark.parametrize("ending", WITHDRAWAL_ENDINGS)
def test_the_whole_life_of_a_withdrawal_brings_payouts_in_transit_back_to_zero(
    ending: WithdrawalEnding,
) -> None:
    """Paid (debit + paid), failed (debit + give-back), returned (debit + paid + returned + give-back):
    payouts_in_transit ends at 0, the client keeps the money unless it was paid out, and the PSP owes
    us less exactly by what it paid out. Every journal balances per currency."""
    dep, wd = _life(ending)
    ledger = MemoryLedger()
    ledger.deliver(dep)
    for fact in wd:
        ledger.deliver([fact])
    assert ledger.dead_letters == {}
    balances = ledger.store.projections()
    paid_out = 3_000 if ending == "paid" else 0
    assert balances.get(TRANSIT, 0) == 0
    assert balances[AccountKey("client_mt5_balances", "EUR", "mt5:42")] == 10_000 - paid_out
    assert balances[PSP] == 10_000 - paid_out
    assert all(not unbalanced_currencies(j.draft.entries) for j in ledger.store.journals())
    journals = {j.draft.reference for j in ledger.store.journals()}
    assert (
        len(journals)
        == len(ledger.store.journals())
        == 2 + len([f for f in wd if post(f) != Ignored("PayoutFailed")])
    )


def test_redelivered_and_republished_withdrawal_facts_post_nothing_twice() -> None:
    """The same events again (redelivery) and the same business facts under new event ids (a
    producer's retry) book nothing new: one journal per reference, the same balances."""
    facts: list[Fact] = []
    for n, ending in enumerate(WITHDRAWAL_ENDINGS, start=1):
        dep, wd = _life(ending, n)
        facts += dep + wd
    ledger = MemoryLedger()
    ledger.deliver(facts)
    before = (len(ledger.store.journals()), ledger.store.projections())
    ledger.deliver(facts)
    ledger.deliver([f.with_new_event_id() for f in facts])
    assert ledger.dead_letters == {}
    assert (len(ledger.store.journals()), ledger.store.projections()) == before
    assert before[1].get(TRANSIT, 0) == 0


def test_a_payout_rebuilt_by_a_repair_books_the_journal_the_lost_event_would_have() -> None:
    """The reconciler's post_journal repair rebuilds PayoutPaid from its read model, which keeps no
    operation id: the rule books the same reference and entries without it, so the lost event,
    arriving later, is a replay of the repair's journal, not a conflict."""
    paid = withdrawal(7, login=1)[1]
    rebuilt = post(with_body(paid, operation_id=""))
    assert isinstance(rebuilt, JournalDraft)
    assert (reference(rebuilt), lines(rebuilt)) == (reference(post(paid)), lines(post(paid)))
