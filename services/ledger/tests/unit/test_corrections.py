"""Corrections: reversals and compensations are new journals that name the original."""

from __future__ import annotations

from datetime import date

from ledger.application.corrections import compensate_journal, reverse_journal
from ledger.application.verification import check_balances, verify_chain
from ledger.domain.accounts import AccountKey
from ledger.domain.journals import JournalKind, Rejected, RejectReason, credit, debit
from ledger.domain.posting import AlreadyPosted, BelowFloor, Posted
from ledger.testing.facts import deposit
from ledger.testing.memory import MemoryLedger

DAY = date(2025, 12, 2)
ACTION = "0190a000-0000-7000-8000-0000000000aa"


def reverse(ledger: MemoryLedger, journal_id: int, operator: str = "alice", reason: str = "wrong") -> object:
    with ledger.store.transaction():
        return reverse_journal(
            ledger.store, journal_id, action_id=ACTION, operator=operator, reason=reason, business_date=DAY
        )


def test_a_reversal_undoes_the_original_and_names_it() -> None:
    """Reversing the capture: flipped entries, reference reversal:<ref>, balances back to zero, chain ok."""
    ledger = MemoryLedger()
    ledger.deliver(deposit(1, ending="not_deposit"))
    outcome = reverse(ledger, 1)
    assert isinstance(outcome, Posted)
    reversal = outcome.journal.draft
    assert reversal.reference == "reversal:capture:op_cap_1"
    assert reversal.kind is JournalKind.REVERSAL and reversal.corrects_journal_id == 1
    assert reversal.source.detail_dict()["operator"] == "alice"
    assert set(ledger.store.projections().values()) == {0}
    assert verify_chain(ledger.store).ok and check_balances(ledger.store).ok


def test_a_journal_is_reversed_once_and_a_reversal_is_not_reversed() -> None:
    """The second reversal is the same operation (already posted); reversing the reversal is refused."""
    ledger = MemoryLedger()
    ledger.deliver(deposit(1))
    first = reverse(ledger, 1)
    assert isinstance(first, Posted)
    assert reverse(ledger, 1) == AlreadyPosted("reversal:capture:op_cap_1", first.journal.journal_id)
    refused = reverse(ledger, first.journal.journal_id)
    assert isinstance(refused, Rejected) and refused.reason is RejectReason.CANNOT_REVERSE
    missing = reverse(ledger, 99)
    assert isinstance(missing, Rejected) and missing.reason is RejectReason.UNKNOWN_JOURNAL


def test_corrections_need_who_and_why() -> None:
    """No operator or no reason: refused, nothing posted."""
    ledger = MemoryLedger()
    ledger.deliver(deposit(1))
    refused = reverse(ledger, 1, operator=" ")
    assert isinstance(refused, Rejected) and refused.reason is RejectReason.MISSING_AUDIT
    assert len(ledger.store.journals()) == 2


def test_reversing_a_credit_that_the_client_spent_is_stopped_by_the_floor() -> None:
    """The client's MT5 account was debited by a refund; reversing the credit would take it below 0."""
    ledger = MemoryLedger()
    ledger.deliver(deposit(1, ending="refunded"))
    outcome = reverse(ledger, 2)  # the Mt5Credited journal
    assert isinstance(outcome, BelowFloor)
    assert outcome.account == AccountKey("client_mt5_balances", "EUR", "mt5:700001")
    assert len(ledger.store.journals()) == 4


def test_a_compensation_books_a_difference_and_names_the_original() -> None:
    """A write-off of a chargeback that MT5 could not take back, as a compensation of journal 3."""
    ledger = MemoryLedger()
    ledger.deliver(deposit(1, ending="charged_back")[:3])  # chargeback booked, MT5 debit never came
    pending = AccountKey("client_deposits_pending", "EUR")
    entries = (debit(AccountKey("chargeback_losses", "EUR"), 10_000), credit(pending, 10_000))
    with ledger.store.transaction():
        outcome = compensate_journal(
            ledger.store,
            3,
            entries,
            key="repair-17",
            action_id=ACTION,
            operator="bob",
            reason="client withdrew",
            business_date=DAY,
            allowed_currencies=None,
        )
    assert isinstance(outcome, Posted)
    assert outcome.journal.draft.reference == "compensation:repair-17"
    assert outcome.journal.draft.corrects_journal_id == 3
    assert ledger.store.projections()[pending] == 0
    with ledger.store.transaction():
        lopsided = compensate_journal(
            ledger.store,
            3,
            entries[:1],
            key="repair-18",
            action_id=ACTION,
            operator="bob",
            reason="x",
            business_date=DAY,
            allowed_currencies=None,
        )
    assert isinstance(lopsided, Rejected) and lopsided.reason is RejectReason.TOO_FEW_ENTRIES
