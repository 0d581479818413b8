"""Repairs the reconciler sends the ledger (ExecuteRepair, target ledger), on the in-memory store
through the consumer's semantics: the missing journal is booked by the fact's own rule under the
fact's own reference, once, whatever arrives next; every command for the ledger gets one outcome;
what the ledger cannot do is refused with a reason, never dead-lettered; other targets are ignored."""

from __future__ import annotations

import dataclasses

from ledger.testing.facts import deposit, repair
from ledger.testing.memory import MemoryLedger


def test_a_lost_capture_is_booked_once_by_its_repair_and_the_late_event_changes_nothing() -> None:
    """The capture event never reached the ledger; the repair books the journal its rule would have,
    as an operator action naming the repair and both people; the same repair again (a new command
    event) and then the lost event itself are AlreadyPosted: one journal; two executed outcomes."""
    captured = deposit(1, amount_minor=5_000)[0]
    ledger = MemoryLedger()
    ledger.deliver([repair(captured, repair_id=7)])
    [journal] = ledger.store.journals()
    assert journal.draft.reference == f"capture:{captured.body['operation_id']}"
    assert journal.draft.source.source_type.value == "operator"
    assert journal.draft.source.source_id == "repair:7"
    detail = journal.draft.source.detail_dict()
    assert (detail["requested_by"], detail["approved_by"], detail["event_type"]) == (
        "alice",
        "bob",
        "PaymentCaptured",
    )
    ledger.deliver([repair(captured, repair_id=7)])
    ledger.deliver([captured])
    assert len(ledger.store.journals()) == 1 and ledger.dead_letters == {}
    outcomes = [(o.request.repair_id, o.outcome) for o in ledger.store.repair_outcomes]
    assert outcomes == [(7, "executed"), (7, "executed")]
    assert "already booked" in ledger.store.repair_outcomes[1].detail
    assert ledger.store.repair_outcomes[0].body()["executed_by"] == "ledger"


def test_what_the_ledger_cannot_do_is_refused_with_a_reason() -> None:
    """A type the ledger does not execute, a command whose maker is its checker, a fact that
    conflicts with what is booked under its reference: one refused outcome each, nothing posted,
    nothing dead-lettered; a command for another service is not the ledger's (no outcome)."""
    captured = deposit(2, amount_minor=5_000)[0]
    ledger = MemoryLedger()
    ledger.deliver([captured])
    conflicting = repair(
        dataclasses.replace(captured, body=captured.body | {"amount_minor": 4_000}), repair_id=3
    )
    ledger.deliver(
        [
            repair(captured, repair_id=1, repair_type="mt5_credit"),
            repair(captured, repair_id=2, approved_by="alice"),
            conflicting,
            repair(captured, repair_id=4, target="mt5_credit", repair_type="mt5_credit"),
        ]
    )
    assert len(ledger.store.journals()) == 1 and ledger.dead_letters == {}
    refused = {o.request.repair_id: o.detail for o in ledger.store.repair_outcomes if o.outcome == "refused"}
    assert sorted(refused) == [1, 2, 3]
    assert "does not execute mt5_credit" in refused[1]
    assert "same person" in refused[2]
    assert "other entries" in refused[3]
