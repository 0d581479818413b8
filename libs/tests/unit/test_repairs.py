"""backbone.repairs: one reading of ExecuteRepair and one RepairOutcome body for every executing
service: a command is only its target's, a maker who is the checker is flagged, a fact that is not a
JSON object reads as none, an outcome outside the three is refused."""

from __future__ import annotations

import pytest
from backbone.repairs import DETAIL_MAX, command_for, outcome_body

BODY = {
    "repair_id": 3,
    "case_id": 9,
    "repair_type": "post_journal",
    "target": "ledger",
    "source_key": "capture:op-1",
    "requested_by": "alice",
    "approved_by": "bob",
    "amount_minor": 500,
    "currency": "USD",
    "mt5_login": None,
    "reason": "lost",
    "fact_type": "PaymentCaptured",
    "fact_json": '{"amount_minor": 500}',
    "command_digest": "d" * 64,
}


def test_a_command_is_its_targets_and_reads_its_fact() -> None:
    """Another target (or a v1 command with none) is nobody's here; the fact is parsed; the same
    person as maker and checker is flagged, whoever sent it."""
    assert command_for("mt5_credit", "pay-1", BODY) is None
    assert command_for("ledger", "pay-1", {k: v for k, v in BODY.items() if k != "target"}) is None
    command = command_for("ledger", "pay-1", BODY)
    assert command is not None and command.fact == {"amount_minor": 500} and not command.same_person
    for bad in ("[1, 2]", "{not json"):
        broken = command_for("ledger", "pay-1", BODY | {"fact_json": bad})
        assert broken is not None and broken.fact is None
    selfish = command_for("ledger", "pay-1", BODY | {"approved_by": "alice"})
    assert selfish is not None and selfish.same_person


def test_an_outcome_body_is_bounded_and_one_of_three() -> None:
    """The detail is cut to its bound; an outcome other than executed/refused/unknown is refused."""
    body = outcome_body(
        repair_id=3, case_id=9, repair_type="post_journal", command_digest="d" * 64,
        outcome="executed", detail="x" * 5000, executed_by="ledger",
    )  # fmt: skip  # packed: a few items a line read better than one each
    assert len(body["detail"]) == DETAIL_MAX and body["reference"] is None
    with pytest.raises(ValueError, match="outcome"):
        outcome_body(
            repair_id=3, case_id=9, repair_type="x", command_digest="", outcome="done", detail="d",
            executed_by="ledger",
        )  # fmt: skip  # packed: a few items a line read better than one each
