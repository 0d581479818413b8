"""Settlement batches: the normalized format, its checks, and the journal a payout batch books."""

from __future__ import annotations

import copy
from typing import Any

from ledger.application.settlement import (
    AlreadyImported,
    ImportConflict,
    Imported,
    ImportRejected,
    NothingToImport,
    import_settlement,
)
from ledger.testing.facts import deposit, withdrawal, withdrawal_id
from ledger.testing.memory import MemoryLedger


def batch(*items: dict[str, Any], batch_id: str = "po_1") -> dict[str, Any]:
    return {
        "format": "ledger.settlement.v1",
        "provider": "simpsp",
        "payout_batch_id": batch_id,
        "settlement_date": "2025-12-01",
        "currency": "EUR",
        "items": list(items),
    }


def item(kind: str, gross: int, fee: int, ref: str = "op_cap_1", **extra: Any) -> dict[str, Any]:
    return {
        "type": kind,
        "gross_minor": gross,
        "fee_minor": fee,
        "net_minor": gross - fee,
        "currency": "EUR",
        "our_reference": ref,
        "psp_payment_id": "pi_1",
        **extra,
    }


def run(ledger: MemoryLedger, doc: Any) -> object:
    with ledger.store.transaction():
        return import_settlement(
            ledger.store,
            doc,
            import_id="0190a000-0000-7000-8000-000000000001",
            imported_by="finance",
            source_name="report.csv",
            allowed_currencies=None,
        )


def test_a_payout_batch_clears_psp_receivable_into_bank_cash_and_fees() -> None:
    """Two captures (100.00, 50.00), a refund of 30.00; fees 3.20: the bank gets 116.80, fees 3.20,
    and psp_receivable, which the events filled, is back to zero."""
    ledger = MemoryLedger()
    ledger.deliver(
        deposit(1, amount_minor=10_000)
        + deposit(2, amount_minor=5_000, ending="refunded", returned_minor=3_000)
    )
    doc = batch(
        item("charge", 10_000, 200, "op_cap_1"),
        item("charge", 5_000, 120, "op_cap_2"),
        item("refund", -3_000, 0, "op_ref_2"),
    )
    outcome = run(ledger, doc)
    assert isinstance(outcome, Imported) and outcome.reference == "settlement:simpsp:po_1"
    balances = {str(k): v for k, v in ledger.store.projections().items()}
    assert balances["psp_receivable/EUR"] == 0
    assert balances["bank_cash/EUR"] == 11_680
    assert balances["psp_fees/EUR"] == 320
    journal = ledger.store.journal(outcome.journal_id)
    assert journal is not None and journal.draft.business_date.isoformat() == "2025-12-01"
    assert journal.draft.payment_id is None
    assert journal.draft.source.detail_dict()["imported_by"] == "finance"


def test_reimport_is_idempotent_and_other_amounts_under_the_same_batch_id_conflict() -> None:
    """The same batch again books nothing; the same batch id with other amounts is a conflict."""
    ledger = MemoryLedger()
    doc = batch(item("charge", 10_000, 200))
    first = run(ledger, doc)
    assert isinstance(first, Imported)
    assert run(ledger, copy.deepcopy(doc)) == AlreadyImported(first.reference, first.journal_id)
    changed = batch(item("charge", 10_000, 250))
    assert run(ledger, changed) == ImportConflict(first.reference, first.journal_id)
    assert len(ledger.store.journals()) == 1


def test_a_batch_that_nets_to_nothing_books_nothing() -> None:
    """A charge and its full refund, no fees: no money moved, no journal."""
    outcome = run(MemoryLedger(), batch(item("charge", 500, 0), item("refund", -500, 0, "op_ref_1")))
    assert outcome == NothingToImport("settlement:simpsp:po_1")


def test_a_negative_payout_credits_bank_cash() -> None:
    """Refunds exceed charges: the PSP takes money from our bank account."""
    ledger = MemoryLedger()
    outcome = run(ledger, batch(item("refund", -800, 0, "op_ref_1"), item("charge", 300, 10)))
    assert isinstance(outcome, Imported)
    balances = {str(k): v for k, v in ledger.store.projections().items()}
    assert balances["bank_cash/EUR"] == -510 and balances["psp_fees/EUR"] == 10


def test_bad_batches_are_rejected_whole_with_the_reason() -> None:
    """Each malformed batch is refused with a reason naming the problem; nothing is booked."""
    good = item("charge", 1000, 10)
    bad_docs = {
        "net_minor": batch({**good, "net_minor": 991}),
        "currency differs": batch({**good, "currency": "USD"}),
        "unknown type": batch(item("bonus", 1000, 0)),
        "must be > 0": batch(item("charge", -1000, 0)),
        "integer of minor units": batch({**good, "gross_minor": 10.5}),
        "needs our_reference": batch({**good, "our_reference": None}),
        "repeats": batch(item("charge", 1, 0, psp_item_id="t1"), item("charge", 2, 0, psp_item_id="t1")),
        "format": {**batch(good), "format": "csv"},
        "settlement_date": {**batch(good), "settlement_date": "01/12/2025"},
        "unknown currency": {**batch({**good, "currency": "ZZZ"}), "currency": "ZZZ"},
        "items must be": batch(),
        "JSON object": [good],
    }
    ledger = MemoryLedger()
    for needle, doc in bad_docs.items():
        outcome = run(ledger, doc)
        assert isinstance(outcome, ImportRejected), (needle, outcome)
        assert needle in outcome.detail, (needle, outcome.detail)
    assert ledger.store.journals() == []


def test_withdrawal_payouts_in_a_batch_leave_psp_receivable_at_zero() -> None:
    """A capture of 100.00 (fee 2.00), a withdrawal of 30.00 paid out and one of 10.00 paid and
    returned: the batch's payout (gross < 0) and payout_return (gross > 0) items net what the
    PayoutPaid and PayoutReturned journals moved, so psp_receivable ends at 0 and the bank gets
    68.00. A payout with a positive gross, or a return with a negative one, refuses the batch."""
    ledger = MemoryLedger()
    ledger.deliver(deposit(1, login=9, amount_minor=10_000))
    ledger.deliver(withdrawal(1, login=9, amount_minor=3_000))
    ledger.deliver(withdrawal(2, login=9, amount_minor=1_000, ending="returned"))
    doc = batch(
        item("charge", 10_000, 200, "op_cap_1"),
        item("payout", -3_000, 0, withdrawal_id(1), psp_payment_id=None),
        item("payout", -1_000, 0, withdrawal_id(2), psp_payment_id=None),
        item("payout_return", 1_000, 0, withdrawal_id(2), psp_payment_id=None),
    )
    assert isinstance(run(ledger, doc), Imported)
    balances = {str(k): v for k, v in ledger.store.projections().items() if v}
    assert balances == {
        "bank_cash/EUR": 6_800,
        "psp_fees/EUR": 200,
        "client_mt5_balances/EUR/mt5:9": 7_000,
    }
    for wrong in (item("payout", 500, 0), item("payout_return", -500, 0)):
        assert isinstance(run(MemoryLedger(), batch(wrong, batch_id="po_9")), ImportRejected)
