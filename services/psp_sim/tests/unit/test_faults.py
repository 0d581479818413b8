"""Fault rules: scope (operation, reference, event type), budgets, and how webhook rules shape delivery."""

from __future__ import annotations

import pytest
from psp_sim.application.faults import CALL_KINDS, FaultBook, FaultRuleError


def test_scope_and_budget() -> None:
    """A rule hits only matching calls, at most ``count`` times, oldest rule first."""
    book = FaultBook()
    book.add({"kind": "apply_then_fail", "operation": "capture", "reference": "pay_1", "count": 1})
    book.add({"kind": "fail_without_apply", "count": 2})
    assert book.take(CALL_KINDS, "create", ["pay_1"]).kind == "fail_without_apply"  # type: ignore[union-attr]
    hit = book.take(CALL_KINDS, "capture", ["pay_1"])
    assert hit is not None and hit.kind == "apply_then_fail"
    assert book.take(CALL_KINDS, "capture", ["pay_1"]).kind == "fail_without_apply"  # type: ignore[union-attr]
    assert book.take(CALL_KINDS, "capture", ["pay_1"]) is None


def test_unlimited_rule_until_cleared() -> None:
    """Without count a rule hits until removed."""
    book = FaultBook()
    rule = book.add({"kind": "apply_then_fail"})
    assert all(book.take(CALL_KINDS, "create", []) is not None for _ in range(5))
    assert book.remove(rule.id) and book.take(CALL_KINDS, "create", []) is None


def test_removing_an_unknown_rule_changes_no_version() -> None:
    """An unknown id removes nothing and leaves the version alone: a bumped version made the next
    write save the book again, so a refused ``DELETE`` changed the saved row a moment later (seen
    when the suite first ran in parallel)."""
    book = FaultBook()
    rule = book.add({"kind": "apply_then_fail"})
    version = book.version
    assert not book.remove("flt_nobody") and book.version == version
    assert book.remove(rule.id) and book.version == version + 1 and book.rules == []


def test_webhook_rules_compose() -> None:
    """Duplicate and wrong-secret rules both apply to one event; the event type scopes them."""
    book = FaultBook()
    book.add({"kind": "webhook_duplicate", "copies": 2, "event_type": "payment_intent.succeeded"})
    book.add({"kind": "webhook_wrong_secret"})
    plan = book.plan_webhook("payment_intent.succeeded", "capture", []).plan
    assert (plan.copies, plan.signing) == (3, "wrong_secret")
    other = book.plan_webhook("payment_intent.canceled", "cancel", []).plan
    assert (other.copies, other.signing) == (1, "wrong_secret")


def test_reorder_holds_a_group_then_releases_it() -> None:
    """group_size 3: the first two events are held, the third fills the group and releases it."""
    book = FaultBook()
    book.add({"kind": "webhook_reorder", "group_size": 3, "count": 1})
    decisions = [book.plan_webhook("payment_intent.succeeded", "capture", []) for _ in range(4)]
    assert [d.plan.hold_group is not None for d in decisions] == [True, True, True, False]
    assert [d.release_group for d in decisions[:3]] == [None, None, decisions[0].plan.hold_group]


@pytest.mark.parametrize(
    "spec",
    [
        {"kind": "boom"},
        {"kind": "apply_then_fail", "count": 0},
        {"kind": "apply_then_fail", "status": 404},
        {"kind": "webhook_duplicate", "copies": 99},
        {"kind": "apply_then_fail", "operation": "pay"},
        {"kind": "webhook_expired_signature", "age_s": 60},
        {"kind": "apply_then_fail", "colour": "red"},
    ],
)
def test_malformed_rules_are_refused(spec: dict[str, object]) -> None:
    """Unknown kinds/fields, zero budgets, non-5xx statuses, ages inside the tolerance: refused."""
    with pytest.raises(FaultRuleError):
        FaultBook().add(spec)
