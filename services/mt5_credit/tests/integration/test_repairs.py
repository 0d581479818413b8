"""Repairs the reconciler sends mt5-credit (ExecuteRepair, target mt5_credit), on real PostgreSQL
with the in-memory MT5: a repair credit is a new row with its own comment through the normal
claim -> call -> resolve flow, answered once when MT5 decided it; what it must not do is refused
at once with a reason; the lost event arriving after a repair credits nothing twice."""

from __future__ import annotations

from mt5_credit.testing import World
from mt5_credit.testing.facts import captured_body, payment_id_for, refunded_body, repair_body


def _failed_credit(world: World) -> tuple[str, int]:
    """A deposit whose automatic credit MT5 refused (the case the reconciler calls not_credited)."""
    world.account(5001, "cust-1")
    ref = world.intent("cust-1", 5001, 50_000)
    world.captured(ref, 50_000)
    world.mt5.script.append("refuse")
    world.executor().run_once()
    (row,) = world.rows()
    assert row["status"] == "failed"
    return ref, int(row["id"])


def _outcomes(world: World) -> list[dict[str, object]]:
    return world.events("RepairOutcome")


def test_a_repair_credit_goes_through_the_normal_flow_and_is_answered_once(world: World) -> None:
    """The approved credit becomes its own row (business key repair:<id>, its own comment dep:<row>)
    beside the failed one; the executor credits it once; Mt5Credited for the deposit's payment and
    one RepairOutcome executed naming the row, comment and deal; the same command again, and the
    lost capture event itself, create nothing."""
    ref, failed = _failed_credit(world)
    body = repair_body("PaymentCaptured", captured_body(ref, 50_000), repair_id=9)
    world.deliver("ExecuteRepair", payment_id_for("pi_1"), body)
    rows = world.rows()
    assert len(rows) == 2
    repair_row = rows[1]
    assert (repair_row["source_key"], repair_row["repair_id"], repair_row["status"]) == (
        "repair:9",
        9,
        "pending",
    )
    assert world.executor().run_once() == 1
    assert len(world.mt5.deals_with(f"dep:{repair_row['id']}")) == 1
    assert world.mt5.deals_with(f"dep:{failed}") == []
    credited = world.events("Mt5Credited")
    assert [e["credit_id"] for e in credited] == [repair_row["id"]]
    [answer] = _outcomes(world)
    assert (answer["repair_id"], answer["outcome"], answer["executed_by"]) == (9, "executed", "mt5_credit")
    assert f"comment dep:{repair_row['id']}" in str(answer["reference"])
    world.deliver("ExecuteRepair", payment_id_for("pi_1"), body)
    world.captured(ref, 50_000)
    assert len(world.rows()) == 2 and len(_outcomes(world)) == 1
    world.executor().run_once()
    assert len(world.mt5.deals_with(f"dep:{repair_row['id']}")) == 1


def test_what_must_not_be_credited_is_refused_at_once(world: World) -> None:
    """Another login than the deposit intent's, a maker who is the checker, more than the captured
    amount of a deposit already credited, a type mt5-credit does not execute: no row, one refused
    outcome each with the reason; a command for another service is not ours."""
    ref, _ = _failed_credit(world)
    fact = captured_body(ref, 50_000)
    cases = [
        (1, repair_body("PaymentCaptured", fact, repair_id=1, mt5_login=5002), "pays login 5001"),
        (2, repair_body("PaymentCaptured", fact, repair_id=2, approved_by="alice"), "same person"),
        (
            3,
            repair_body("PaymentCaptured", fact, repair_id=3, repair_type="post_journal"),
            "does not execute",
        ),
    ]
    for _, body, _ in cases:
        world.deliver("ExecuteRepair", payment_id_for("pi_1"), body)
    world.deliver(
        "ExecuteRepair",
        payment_id_for("pi_1"),
        repair_body("PaymentCaptured", fact, repair_id=4, target="ledger"),
    )
    assert len(world.rows()) == 1
    answers = {a["repair_id"]: str(a["detail"]) for a in _outcomes(world)}
    assert sorted(answers) == [1, 2, 3]
    for repair_id, _, expected in cases:
        assert expected in answers[repair_id], answers[repair_id]
    assert {a["outcome"] for a in _outcomes(world)} == {"refused"}


def test_a_deposit_credited_already_is_not_credited_again(world: World) -> None:
    """A repair credit for a deposit whose credit is done is refused (nothing is missing)."""
    world.account(5001, "cust-1")
    ref = world.intent("cust-1", 5001, 50_000)
    world.captured(ref, 50_000)
    world.executor().run_once()
    world.deliver(
        "ExecuteRepair", payment_id_for("pi_1"), repair_body("PaymentCaptured", captured_body(ref, 50_000))
    )
    [answer] = _outcomes(world)
    assert answer["outcome"] == "refused" and "credited already" in str(answer["detail"])
    assert len(world.rows()) == 1


def test_a_repair_credit_mt5_refuses_is_answered_refused(world: World) -> None:
    """MT5 clearly refuses the repair credit too: its row fails and the repair is answered refused."""
    ref, _ = _failed_credit(world)
    world.deliver(
        "ExecuteRepair", payment_id_for("pi_1"), repair_body("PaymentCaptured", captured_body(ref, 50_000))
    )
    world.mt5.script.append("refuse")
    world.executor().run_once()
    [answer] = _outcomes(world)
    assert answer["outcome"] == "refused" and "refused" in str(answer["detail"])


def test_a_refund_never_taken_back_is_debited_by_its_repair(world: World) -> None:
    """A refund of a credited deposit whose debit MT5 refused (not_debited): the repair debit is a
    new row for that refund from the done credit, debited once, answered executed."""
    world.account(5001, "cust-1", balance=100_000)
    ref = world.intent("cust-1", 5001, 50_000)
    world.captured(ref, 50_000)
    world.executor().run_once()
    world.refunded(ref, 20_000, "rf-1")
    world.mt5.script.append("refuse")
    world.executor().run_once()
    assert [r["status"] for r in world.rows()] == ["done", "failed"]
    fact = refunded_body(ref, 20_000, "rf-1")
    world.deliver(
        "ExecuteRepair",
        payment_id_for("pi_1"),
        repair_body("RefundSucceeded", fact, repair_type="mt5_debit", repair_id=5),
    )
    repair_row = world.rows()[2]
    assert (repair_row["kind"], repair_row["source_reference"], repair_row["repair_id"]) == (
        "debit",
        "rf-1",
        5,
    )
    world.executor().run_once()
    assert len(world.mt5.deals_with(f"dbt:{repair_row['id']}")) == 1
    [answer] = _outcomes(world)
    assert (answer["repair_id"], answer["outcome"]) == (5, "executed")
