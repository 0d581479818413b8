"""Repairs under maker-checker on real PostgreSQL (the reconciler's desk): the server refuses the
maker as checker, a changed command, a second approval, a repair of a resolved case; every act and
every refusal is audited append-only; an approved close resolves the case, an approved money repair
goes out as ExecuteRepair through the outbox, once."""

from __future__ import annotations

import json
import threading
from functools import partial
from typing import Any

import psycopg
import pytest
from backbone.avro import AvroCodec, SchemaCatalogue
from reconciler.application import repairs
from reconciler.domain.cases import CaseStatus
from reconciler.domain.merchants import EVERY_MERCHANT
from reconciler.domain.repairs import RepairRefused, RepairStatus, RepairType
from reconciler.testing.world import World

# the operators here have every merchant (an operator limited to merchants: test_scope_api.py)
propose, approve, reject, acknowledge = (
    partial(act, scope=EVERY_MERCHANT)
    for act in (repairs.propose, repairs.approve, repairs.reject, repairs.acknowledge)
)

pytestmark = pytest.mark.integration
CODEC = AvroCodec(SchemaCatalogue.default())


def _not_credited(world: World) -> int:
    world.deposit(1)
    world.deposit(2, credited=False)
    world.publish_reports()
    assert world.classes(world.run()) == ["not_credited"]
    [case] = world.store.cases_where(scope=EVERY_MERCHANT)
    return int(case["id"])


def _outbox(world: World) -> list[tuple[str, str, dict[str, Any]]]:
    with psycopg.connect(world.url) as conn:
        rows = conn.execute("SELECT event_type, topic, payload FROM outbox ORDER BY id").fetchall()
    return [(t, topic, CODEC.decode(bytes(p)).body) for t, topic, p in rows]


def _audit(world: World) -> list[tuple[str, str, str, str]]:
    return [
        (a["operator"], a["action"], a["target"], a["outcome"])
        for a in reversed(world.desk.audit_where(scope=EVERY_MERCHANT))
    ]


def _refused(error: str, fn: Any, *args: Any, **kwargs: Any) -> None:
    with pytest.raises(RepairRefused) as caught:
        fn(*args, **kwargs)
    assert caught.value.error == error, caught.value.detail


def test_a_money_repair_needs_a_second_person_and_goes_out_once(world: World) -> None:
    """alice proposes a credit for a not_credited deposit; alice cannot approve it; bob cannot
    approve a digest he did not see; bob approves the one he saw: ExecuteRepair (v2: target,
    source key, login, digest) is in the outbox once; a second approval is refused. Every act and
    refusal is in the audit, in order."""
    case_id = _not_credited(world)
    proposed = propose(
        world.desk, "alice", case_id, RepairType.MT5_CREDIT, reason="credit lost", mt5_login=7001
    )
    assert proposed.changed and proposed.revision == 1
    _refused(
        "maker_cannot_approve", approve, world.desk, "alice", proposed.repair_id, proposed.command_digest
    )
    _refused("command_changed", approve, world.desk, "bob", proposed.repair_id, "f" * 64)
    assert approve(world.desk, "bob", proposed.repair_id, proposed.command_digest) is RepairStatus.SENT
    _refused(
        "not_awaiting_approval", approve, world.desk, "carol", proposed.repair_id, proposed.command_digest
    )
    commands = [(topic, body) for t, topic, body in _outbox(world) if t == "ExecuteRepair"]
    assert len(commands) == 1
    topic, body = commands[0]
    assert topic == "recon.repair-commands"
    assert (body["repair_id"], body["case_id"], body["repair_type"], body["target"]) == (
        proposed.repair_id,
        case_id,
        "mt5_credit",
        "mt5_credit",
    )
    assert (body["source_key"], body["amount_minor"], body["currency"], body["mt5_login"]) == (
        "capture:op-2",
        50_000,
        "USD",
        7001,
    )
    assert (body["requested_by"], body["approved_by"], body["command_digest"]) == (
        "alice",
        "bob",
        proposed.command_digest,
    )
    repair = world.desk.repair(proposed.repair_id, scope=EVERY_MERCHANT)
    assert repair is not None and (repair["status"], repair["approved_by"]) == ("sent", "bob")
    assert _audit(world) == [
        ("alice", "propose", f"repair:{proposed.repair_id}", "done"),
        ("alice", "approve", f"repair:{proposed.repair_id}", "refused"),
        ("bob", "approve", f"repair:{proposed.repair_id}", "refused"),
        ("bob", "approve", f"repair:{proposed.repair_id}", "done"),
        ("carol", "approve", f"repair:{proposed.repair_id}", "refused"),
    ]


def test_the_same_repair_twice_is_one_and_an_amended_one_needs_a_new_approval(world: World) -> None:
    """Proposing the same command again changes nothing (one repair per record and type); bob
    rejects it with a reason; alice amends the amount (revision 2, another digest); bob's approval of
    the old digest is refused, of the new one accepted."""
    case_id = _not_credited(world)
    first = propose(world.desk, "alice", case_id, RepairType.MT5_CREDIT, reason="credit lost", mt5_login=7001)
    again = propose(world.desk, "alice", case_id, RepairType.MT5_CREDIT, reason="credit lost", mt5_login=7001)
    assert (again.repair_id, again.changed, again.command_digest) == (
        first.repair_id,
        False,
        first.command_digest,
    )
    reject(world.desk, "bob", first.repair_id, "the client asked for part of it only")
    amended = propose(
        world.desk,
        "alice",
        case_id,
        RepairType.MT5_CREDIT,
        reason="part",
        amount_minor=20_000,
        mt5_login=7001,
    )
    assert (amended.repair_id, amended.revision) == (first.repair_id, 2)
    assert amended.command_digest != first.command_digest
    _refused("command_changed", approve, world.desk, "bob", first.repair_id, first.command_digest)
    assert approve(world.desk, "bob", first.repair_id, amended.command_digest) is RepairStatus.SENT
    _refused(
        "repair_not_amendable",
        propose,
        world.desk,
        "alice",
        case_id,
        RepairType.MT5_CREDIT,
        reason="more",
        amount_minor=30_000,
        mt5_login=7001,
    )
    [sent] = [b for t, _, b in _outbox(world) if t == "ExecuteRepair"]
    assert sent["amount_minor"] == 20_000


def test_an_approved_close_resolves_the_case_and_it_stays_resolved(world: World) -> None:
    """A close moves no money: approved by a second person, the case is resolved with the reason
    and who did what (CaseResolved in the outbox); a re-run with the same evidence leaves it
    resolved; a repair of the resolved case is refused and audited."""
    case_id = _not_credited(world)
    close = propose(
        world.desk, "alice", case_id, RepairType.CLOSE, reason="test deposit, credited by hand in MT5"
    )
    assert approve(world.desk, "bob", close.repair_id, close.command_digest) is RepairStatus.EXECUTED
    case = world.store.case(case_id, scope=EVERY_MERCHANT)
    assert case is not None and case["status"] == CaseStatus.RESOLVED
    assert "proposed by alice, approved by bob" in case["resolution"]
    assert [h["action"] for h in case["history"]][-3:] == ["repair_proposed", "resolved", "repair_executed"]
    assert [t for t, _, _ in _outbox(world)][-1] == "CaseResolved"
    world.run()
    case = world.store.case(case_id, scope=EVERY_MERCHANT)
    assert case is not None and case["status"] == CaseStatus.RESOLVED
    _refused(
        "case_resolved",
        propose,
        world.desk,
        "carol",
        case_id,
        RepairType.MT5_CREDIT,
        reason="x",
        mt5_login=7001,
    )
    assert _audit(world)[-1] == ("carol", "propose", f"case:{case_id}", "refused")


def test_two_checkers_at_once_one_approval(world: World) -> None:
    """bob and carol approve the same repair at the same moment: the rows are locked, one approval
    wins, the other is refused; one ExecuteRepair."""
    case_id = _not_credited(world)
    proposed = propose(
        world.desk, "alice", case_id, RepairType.MT5_CREDIT, reason="credit lost", mt5_login=7001
    )
    outcomes: list[str] = []
    barrier = threading.Barrier(2)

    def checker(name: str) -> None:
        barrier.wait()
        try:
            approve(world.desk, name, proposed.repair_id, proposed.command_digest)
            outcomes.append("approved")
        except RepairRefused as refused:
            outcomes.append(refused.error)

    threads = [threading.Thread(target=checker, args=(n,)) for n in ("bob", "carol")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["approved", "not_awaiting_approval"]
    assert sum(1 for t, _, _ in _outbox(world) if t == "ExecuteRepair") == 1


def test_acknowledge_is_audited_and_the_audit_is_append_only(world: World) -> None:
    """Acknowledging is an audited act (a second one changes nothing but is recorded too); the
    database refuses UPDATE, DELETE and TRUNCATE of the audit; an unknown case is refused."""
    case_id = _not_credited(world)
    assert acknowledge(world.desk, "alice", case_id, "looking") is CaseStatus.ACKNOWLEDGED
    assert acknowledge(world.desk, "bob", case_id, "me too") is CaseStatus.ACKNOWLEDGED
    _refused("not_found", acknowledge, world.desk, "bob", 999_999, "x")
    assert [(o, a, outcome) for o, a, _, outcome in _audit(world)] == [
        ("alice", "acknowledge", "done"),
        ("bob", "acknowledge", "done"),
        ("bob", "acknowledge", "refused"),
    ]
    with psycopg.connect(world.url) as conn:
        for sql in ("UPDATE audit SET operator = 'mallory'", "DELETE FROM audit", "TRUNCATE audit"):
            with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
                conn.execute(sql)
            conn.rollback()


def test_the_database_keeps_the_rule_too(world: World) -> None:
    """Even a statement that bypasses the application cannot record the maker as checker, or an
    approval of another digest (CHECK constraints)."""
    case_id = _not_credited(world)
    proposed = propose(
        world.desk, "alice", case_id, RepairType.MT5_CREDIT, reason="credit lost", mt5_login=7001
    )
    with psycopg.connect(world.url) as conn:
        for sql in (
            "UPDATE repairs SET approved_by = 'alice', approved_digest = command_digest",
            "UPDATE repairs SET approved_by = 'bob', approved_digest = repeat('0', 64)",
        ):
            with pytest.raises(psycopg.errors.CheckViolation):
                conn.execute(sql)
            conn.rollback()
    assert proposed.repair_id > 0


def _approved_credit(world: World) -> tuple[int, str, int]:
    case_id = _not_credited(world)
    proposed = propose(
        world.desk, "alice", case_id, RepairType.MT5_CREDIT, reason="credit lost", mt5_login=7001
    )
    approve(world.desk, "bob", proposed.repair_id, proposed.command_digest)
    return proposed.repair_id, proposed.command_digest, case_id


def _outcome(repair_id: int, digest: str, outcome: str = "executed") -> dict[str, Any]:
    return {
        "repair_id": repair_id,
        "case_id": 0,
        "repair_type": "mt5_credit",
        "outcome": outcome,
        "detail": "credited through the normal flow",
        "executed_by": "mt5_credit",
        "reference": "rep:77",
        "command_digest": digest,
    }


def test_the_executing_services_answer_is_recorded_once(world: World) -> None:
    """A RepairOutcome (through the real intake) moves the sent repair to executed and writes the
    case's history with what the service did; a redelivered or second answer changes nothing, and an
    answer naming another digest is ignored."""
    repair_id, digest, case_id = _approved_credit(world)
    world.deliver("RepairOutcome", "pay-2", _outcome(repair_id, "0" * 64), 1)
    assert (world.desk.repair(repair_id, scope=EVERY_MERCHANT) or {})["status"] == "sent"
    world.deliver("RepairOutcome", "pay-2", _outcome(repair_id, digest), 2)
    world.deliver("RepairOutcome", "pay-2", _outcome(repair_id, digest, "refused"), 3)
    repair = world.desk.repair(repair_id, scope=EVERY_MERCHANT)
    assert repair is not None and (repair["status"], repair["outcome_detail"]) == (
        "executed",
        "credited through the normal flow",
    )
    case = world.store.case(case_id, scope=EVERY_MERCHANT)
    assert case is not None
    executed = [h for h in case["history"] if h["action"] == "repair_executed"]
    assert len(executed) == 1 and executed[0]["actor"] == "mt5_credit" and "rep:77" in executed[0]["note"]


def test_a_missing_journal_repair_carries_the_fact_the_ledger_books(world: World) -> None:
    """A capture the ledger never booked: the post_journal repair moves exactly the fact's amount
    (not part of it) and its ExecuteRepair carries the PaymentCaptured the ledger missed, rebuilt
    from the reconciler's read model."""
    world.deposit(1, journals=False, credited=False)
    world.publish_reports()
    world.run()
    [case] = [
        c for c in world.store.cases_where(scope=EVERY_MERCHANT) if c["case_class"] == "missing_journal"
    ]
    _refused(
        "fact_is_whole",
        propose,
        world.desk,
        "alice",
        case["id"],
        RepairType.POST_JOURNAL,
        reason="x",
        amount_minor=10,
    )
    proposed = propose(world.desk, "alice", case["id"], RepairType.POST_JOURNAL, reason="event lost")
    approve(world.desk, "bob", proposed.repair_id, proposed.command_digest)
    [body] = [b for t, _, b in _outbox(world) if t == "ExecuteRepair"]
    assert (body["target"], body["fact_type"]) == ("ledger", "PaymentCaptured")
    fact = json.loads(body["fact_json"])
    assert fact == {
        "merchant_id": "m1",
        "operation_id": "op-1",
        "provider": "simpsp",
        "provider_payment_id": "pi_1",
        "amount_minor": 50_000,
        "currency": "USD",
        "deposit_reference": "dr-1",
    }


def test_an_external_only_repair_carries_the_settlement_row_for_payment_state(world: World) -> None:
    """A capture the PSP settled and we never learned of (a lost webhook): the apply_provider_fact
    repair goes to payment-state with the settlement row it is to verify at the PSP (never applied
    as such), for the whole amount and under the payment the row names."""
    world.deposit(1)
    ghost = world.deposit(3, settled=True, credited=False, journals=False)
    world.publish_reports()
    # the ghost's capture never reached us: drop our fact of it from the read model
    with psycopg.connect(world.url) as conn:
        conn.execute("DELETE FROM money_facts WHERE payment_id = %s", (ghost["payment_id"],))
    world.run()
    [case] = [c for c in world.store.cases_where(scope=EVERY_MERCHANT) if c["case_class"] == "external_only"]
    proposed = propose(world.desk, "alice", case["id"], RepairType.APPLY_PROVIDER_FACT, reason="webhook lost")
    approve(world.desk, "bob", proposed.repair_id, proposed.command_digest)
    [body] = [b for t, _, b in _outbox(world) if t == "ExecuteRepair"]
    assert (body["target"], body["fact_type"], body["amount_minor"]) == (
        "payment_state",
        "SettlementRow",
        50_000,
    )
    row = json.loads(body["fact_json"])
    assert (row["type"], row["payment_intent_id"], row["reference"]) == ("charge", "pi_3", "pay-3")
