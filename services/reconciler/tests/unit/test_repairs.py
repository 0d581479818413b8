"""Maker-checker rules and repair commands (domain.repairs), pure: what may be proposed against
which case, how much, and who may approve exactly which command."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from reconciler.domain.cases import CaseClass, CaseStatus
from reconciler.domain.repairs import (
    CaseView,
    RepairRefused,
    RepairStatus,
    RepairType,
    RepairView,
    check_amend,
    check_approve,
    check_reject,
    command_for,
)

FACT: dict[str, Any] = {
    "source_key": "capture:op-1",
    "kind": "capture",
    "payment_id": "pay-1",
    "merchant_id": "m1",
    "provider": "simpsp",
    "provider_object_id": "pi_1",
    "amount_minor": 50_000,
    "currency": "USD",
    "deposit_reference": "dr-1",
}


def _case(case_class: CaseClass = CaseClass.NOT_CREDITED, **evidence: Any) -> CaseView:
    return CaseView(
        7, f"{case_class.value}:capture:op-1", case_class, CaseStatus.OPEN, evidence or {"fact": FACT}
    )


def _refused(error: str, fn: Any, *args: Any, **kwargs: Any) -> RepairRefused:
    with pytest.raises(RepairRefused) as caught:
        fn(*args, **kwargs)
    assert caught.value.error == error, caught.value.detail
    return caught.value


def test_a_credit_repair_moves_at_most_what_the_case_explains() -> None:
    """A not_credited case explains its capture's amount: the repair defaults to it, may be less,
    never more, never another currency, and needs the login it credits; the command names the
    record, the payment and the executing service."""
    command = command_for(_case(), RepairType.MT5_CREDIT, reason="credit lost", mt5_login=7001)
    assert (command.amount_minor, command.currency, command.mt5_login, command.payment_id) == (
        50_000,
        "USD",
        7001,
        "pay-1",
    )
    assert (command.source_key, command.target, command.fact_type) == (
        "capture:op-1",
        "mt5_credit",
        "PaymentCaptured",
    )
    assert command.fact is not None and command.fact["deposit_reference"] == "dr-1"
    assert (
        command_for(
            _case(), RepairType.MT5_CREDIT, reason="part", amount_minor=100, mt5_login=7001
        ).amount_minor
        == 100
    )
    _refused(
        "amount_above_case",
        command_for,
        _case(),
        RepairType.MT5_CREDIT,
        reason="x",
        amount_minor=50_001,
        mt5_login=1,
    )
    _refused(
        "currency_differs",
        command_for,
        _case(),
        RepairType.MT5_CREDIT,
        reason="x",
        currency="EUR",
        mt5_login=1,
    )
    _refused("bad_repair", command_for, _case(), RepairType.MT5_CREDIT, reason="x")
    _refused(
        "bad_repair", command_for, _case(), RepairType.MT5_CREDIT, reason="x", amount_minor=0, mt5_login=1
    )
    _refused("bad_repair", command_for, _case(), RepairType.MT5_CREDIT, reason="  ", mt5_login=1)


def test_a_repair_must_fit_its_case() -> None:
    """Each type repairs only the classes it can (a journal for a missing journal, a credit for a
    missing credit, a provider fact for an external-only row); a close fits every class and moves
    no money; a resolved case takes no repair; a missing journal is repaired with the fact it lacks
    (an MT5 operation's is not yet supported)."""
    error = _refused("repair_does_not_fit", command_for, _case(), RepairType.POST_JOURNAL, reason="x")
    assert "fits: close, mt5_credit" in error.detail
    close = command_for(
        _case(CaseClass.DEAL_WITHOUT_REFERENCE, deal={}), RepairType.CLOSE, reason="manual bonus"
    )
    assert (close.amount_minor, close.target) == (None, "reconciler")
    _refused("bad_repair", command_for, _case(), RepairType.CLOSE, reason="x", amount_minor=5)
    resolved = replace(_case(), status=CaseStatus.RESOLVED)
    _refused("case_resolved", command_for, resolved, RepairType.CLOSE, reason="x")
    settled = {"settlement": {"gross_minor": -700, "currency": "EUR", "reference": "pay-9"}}
    fact = command_for(
        _case(CaseClass.EXTERNAL_ONLY, **settled), RepairType.APPLY_PROVIDER_FACT, reason="lost webhook"
    )
    assert (fact.amount_minor, fact.currency, fact.payment_id, fact.target) == (
        700,
        "EUR",
        "pay-9",
        "payment_state",
    )
    booked = FACT | {
        "kind": "capture",
        "merchant_id": "m1",
        "provider": "simpsp",
        "provider_object_id": "pi_1",
    }
    journal = command_for(_case(CaseClass.MISSING_JOURNAL, fact=booked), RepairType.POST_JOURNAL, reason="y")
    assert (journal.target, journal.mt5_login, journal.fact_type) == ("ledger", None, "PaymentCaptured")
    assert journal.fact is not None and journal.fact["operation_id"] == "op-1"
    operation = _case(CaseClass.MISSING_JOURNAL, operation=FACT | {"mt5_login": 7001})
    _refused("not_yet_supported", command_for, operation, RepairType.POST_JOURNAL, reason="y")


def test_the_digest_binds_every_field_of_the_command() -> None:
    """The same command has the same digest; any change (amount, login, reason) gives another."""
    a = command_for(_case(), RepairType.MT5_CREDIT, reason="credit lost", mt5_login=7001)
    assert (
        a.digest == command_for(_case(), RepairType.MT5_CREDIT, reason="credit lost", mt5_login=7001).digest
    )
    for changed in (replace(a, amount_minor=1), replace(a, mt5_login=7002), replace(a, reason="other")):
        assert changed.digest != a.digest
    assert len(a.digest) == 64


def _repair(status: RepairStatus = RepairStatus.PROPOSED) -> RepairView:
    command = command_for(_case(), RepairType.MT5_CREDIT, reason="credit lost", mt5_login=7001)
    return RepairView(3, 7, status, command, "alice", 1)


def test_the_maker_never_approves_and_an_approval_names_the_exact_command_once() -> None:
    """The proposer cannot approve or reject (whatever their permissions); another person can
    approve the command whose digest they saw, only while it waits; an amended command needs a new
    look; once sent or executed nothing is amended."""
    repair = _repair()
    _refused("maker_cannot_approve", check_approve, repair, "alice", repair.command.digest)
    check_approve(repair, "bob", repair.command.digest)
    _refused("command_changed", check_approve, repair, "bob", "0" * 64)
    _refused("not_awaiting_approval", check_approve, _repair(RepairStatus.SENT), "bob", repair.command.digest)
    _refused("maker_cannot_reject", check_reject, repair, "alice", "no")
    assert check_reject(repair, "bob", " wrong login ") == "wrong login"
    _refused("bad_repair", check_reject, repair, "bob", "")
    check_amend(_repair(RepairStatus.REJECTED))
    for done in (RepairStatus.SENT, RepairStatus.EXECUTED, RepairStatus.REFUSED):
        _refused("repair_not_amendable", check_amend, _repair(done))


def test_a_missing_journal_of_a_payout_is_repaired_with_the_payout_event() -> None:
    """post_journal of a withdrawal's payout fact rebuilds PayoutPaid / PayoutReturned (withdrawal id,
    the PSP's payout id, amount), never a chargeback: the ledger books it under payout:<withdrawal>
    / payout-return:<withdrawal>, the reference the lost event would have had."""
    wid = "wd_" + "0" * 31 + "1"
    for kind, key, event_type in (
        ("payout", f"payout:{wid}", "PayoutPaid"),
        ("payout_return", f"payout-return:{wid}", "PayoutReturned"),
    ):
        fact = FACT | {
            "source_key": key,
            "kind": kind,
            "payment_id": wid,
            "provider_object_id": "po_1",
            "deposit_reference": None,
        }
        case = CaseView(
            8, f"missing_journal:{key}", CaseClass.MISSING_JOURNAL, CaseStatus.OPEN, {"fact": fact}
        )
        command = command_for(case, RepairType.POST_JOURNAL, reason="the payout event was lost")
        assert command.fact_type == event_type
        assert command.fact is not None
        assert {k: command.fact[k] for k in ("withdrawal_id", "provider_payout_id", "amount_minor")} == {
            "withdrawal_id": wid,
            "provider_payout_id": "po_1",
            "amount_minor": 50_000,
        }
        assert "deposit_reference" not in command.fact
