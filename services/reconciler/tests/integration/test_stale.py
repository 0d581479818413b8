"""Layer 1 on real PostgreSQL: what a service's resolver could not settle and handed to a person
(PaymentNeedsAttention, Mt5CreditNeedsAttention, through the real intake) becomes a case with its
age and what the resolver last said; a later event that ends the operation settles it, and a re-run
resolves the case; an event that came before the attention settles nothing."""

from __future__ import annotations

from typing import Any

import pytest
from reconciler.domain.cases import CaseStatus
from reconciler.domain.merchants import EVERY_MERCHANT
from reconciler.testing.world import DAY, HOUR_MS, World, at

pytestmark = pytest.mark.integration


def _payment_attention(operation_id: str | None, kind: str, started_ms: int | None) -> dict[str, Any]:
    return {
        "merchant_id": "m1",
        "provider": "simpsp",
        "kind": kind,
        "detail": "authorize UNKNOWN after 5 attempts (timeout)",
        "operation_id": operation_id,
        "operation_type": None if operation_id is None else "authorize",
        "operation_status": None if operation_id is None else "UNKNOWN",
        "attempts": 0 if operation_id is None else 5,
        "operation_started_at_ms": started_ms,
    }


def _credit_attention(made: dict[str, Any], status: str = "unknown") -> dict[str, Any]:
    return {
        "credit_id": made["credit_id"],
        "deposit_reference": f"dr-{str(made['payment_id']).removeprefix('pay-')}",
        "mt5_login": 7001,
        "amount_minor": 50_000,
        "currency": "USD",
        "operation_kind": "credit",
        "credit_status": status,
        "reason": "conflicting deals" if status == "unknown" else "MT5 refused: account disabled",
        "case_id": None,
    }


def test_a_stuck_payment_operation_is_a_case_until_its_end_is_seen(world: World) -> None:
    """An authorize left UNKNOWN by payment-state's resolver is a stale_operation case of the day it
    was raised, its age counted from the operation's start and the resolver's words in the summary
    and evidence; a run as of before the end still finds it; once PaymentAuthorized of that operation
    arrives, a re-run resolves the case as fixed."""
    world.deposit(1)
    world.publish_reports()
    started, raised = at(DAY, 9), at(DAY, 12)
    world.deliver(
        "PaymentNeedsAttention", "pay-9", _payment_attention("op-a9", "unknown_unresolved", started), raised
    )
    result = world.run()  # as of the next day 06:00
    assert result.status == "discrepancies" and world.classes(result) == ["stale_operation"]
    [finding] = result.findings
    assert finding.case_key == "stale_operation:payment:pay-9:op-a9:unknown_unresolved"
    assert "for 21:00:00" in finding.summary and "after 5 attempts (timeout)" in finding.summary
    assert finding.evidence["attention"]["facts"]["attempts"] == 5
    ended = at(DAY, 18)
    world.deliver(
        "PaymentAuthorized",
        "pay-9",
        {
            "merchant_id": "m1",
            "operation_id": "op-a9",
            "provider": "simpsp",
            "provider_payment_id": "pi_9",
            "amount_minor": 100,
            "currency": "USD",
        },
        ended,
    )
    before_the_end = world.run(as_of_ms=ended - 1)
    assert world.classes(before_the_end) == ["stale_operation"]
    assert before_the_end.findings[0].digest == finding.digest  # the age is not evidence
    after = world.run()
    assert after.status == "clean"
    [case] = world.store.cases_where(scope=EVERY_MERCHANT)
    assert case["status"] == CaseStatus.RESOLVED


def test_a_provider_conflict_without_operation_needs_attention(world: World) -> None:
    """A case about the payment as a whole (a provider fact contradicting our state) is a
    needs_attention case; no event of an operation settles it; redelivery changes nothing."""
    world.deposit(1)
    world.publish_reports()
    body = _payment_attention(None, "provider_conflict", None) | {"detail": "PSP says canceled, we captured"}
    for _ in range(2):
        world.deliver("PaymentNeedsAttention", "pay-1", body, at(DAY, 13))
    result = world.run()
    assert world.classes(result) == ["needs_attention"]
    assert "PSP says canceled, we captured" in result.findings[0].summary
    assert "for 17:00:00" in result.findings[0].summary  # from when it was raised


def test_a_stuck_mt5_credit_is_a_case_beside_the_missing_credit(world: World) -> None:
    """A credit mt5-credit's resolver left unknown (two deals one comment, say): the deposit is
    not_credited (layer 2) and its row stale_mt5_operation (layer 1, with the resolver's reason);
    once Mt5Credited of the row arrives with its deal and journal, a re-run resolves both."""
    made = world.deposit(2, credited=False)
    world.publish_reports()
    world.deliver("Mt5CreditNeedsAttention", "pay-2", _credit_attention(made), at(DAY, 11))
    result = world.run()
    assert world.classes(result) == ["not_credited", "stale_mt5_operation"]
    stale = next(f for f in result.findings if f.case_class.value == "stale_mt5_operation")
    assert stale.case_key == f"stale_mt5_operation:mt5-row:{made['credit_id']}"
    assert "conflicting deals" in stale.summary and stale.evidence["attention"]["facts"]["comment"] == (
        f"dep:{made['credit_id']}"
    )
    t = at(DAY, 15)
    world.deliver(
        "Mt5Credited",
        "pay-2",
        {
            "credit_id": made["credit_id"],
            "deposit_reference": "dr-2",
            "mt5_login": 7001,
            "amount_minor": 50_000,
            "currency": "USD",
            "deal_ticket": 777,
            "provider": "simpsp",
            "provider_payment_id": "pi_2",
            "payment_amount_minor": 50_000,
            "payment_currency": "USD",
            "fx_rate": None,
        },
        t,
    )
    world.journal(f"mt5-credit:{made['credit_id']}", "pay-2", 50_000, "USD", t)
    world.deals.add(7001, f"dep:{made['credit_id']}", "500.00", t - 500)
    assert world.run().status == "clean"
    assert {c["status"] for c in world.store.cases_where(scope=EVERY_MERCHANT)} == {CaseStatus.RESOLVED}


def test_an_end_seen_before_the_attention_settles_nothing(world: World) -> None:
    """mt5-credit failed a row (Mt5CreditFailed) and then handed it to a person: the failure came
    first, so it does not settle the attention; the case stays, and so does the missing credit."""
    made = world.deposit(3, credited=False)
    world.publish_reports()
    failed = _credit_attention(made, "failed")
    world.deliver(
        "Mt5CreditFailed",
        "pay-3",
        {k: failed[k] for k in ("credit_id", "deposit_reference", "mt5_login", "amount_minor", "currency")}
        | {"retcode": "10019", "reason": "account disabled"},
        at(DAY, 11),
    )
    world.deliver("Mt5CreditNeedsAttention", "pay-3", failed, at(DAY, 11) + 1)
    result = world.run()
    assert world.classes(result) == ["not_credited", "stale_mt5_operation"]
    assert world.run().findings == result.findings  # a re-run: the same cases
    assert len(world.store.cases_where(scope=EVERY_MERCHANT)) == 2


def test_an_attention_raised_inside_the_day_window_only(world: World) -> None:
    """An attention belongs to the business date it was raised on: the next day's attention is not
    a case of this date, and one raised after the run's as-of is not seen yet."""
    world.deposit(1)
    world.publish_reports()
    tomorrow = at(DAY, 12) + 24 * HOUR_MS
    world.deliver(
        "PaymentNeedsAttention", "pay-8", _payment_attention("op-8", "unknown_unresolved", None), tomorrow
    )
    late = at(DAY, 23)
    world.deliver(
        "PaymentNeedsAttention", "pay-7", _payment_attention("op-7", "unknown_unresolved", None), late
    )
    assert world.run(as_of_ms=late - 1).findings == []
    assert world.classes(world.run()) == ["stale_operation"]


def test_an_attention_is_a_case_at_once_and_its_end_resolves_it_before_any_run(world: World) -> None:
    """The one queue: an attention opens its case when it arrives (the key layer 1 uses, CaseOpened
    announced), not at the next day's run; the event that ends the operation, arriving before any
    run, resolves it; a run that then finds nothing leaves it resolved."""
    world.deposit(1)
    world.publish_reports()
    world.deliver(
        "PaymentNeedsAttention", "pay-5", _payment_attention("op-5", "unknown_unresolved", None), at(DAY, 9)
    )
    [case] = world.store.cases_where(scope=EVERY_MERCHANT)
    assert (case["case_key"], case["status"]) == (
        "stale_operation:payment:pay-5:op-5:unknown_unresolved",
        "open",
    )
    world.deliver(
        "PaymentFailed",
        "pay-5",
        {
            "merchant_id": "m1",
            "operation_id": "op-5",
            "provider": "simpsp",
            "provider_payment_id": None,
            "failure_code": "card_declined",
            "failure_message": None,
        },
        at(DAY, 10),
    )
    assert world.store.cases_where(scope=EVERY_MERCHANT)[0]["status"] == CaseStatus.RESOLVED
    assert world.run().status == "clean"
    assert world.store.cases_where(scope=EVERY_MERCHANT)[0]["status"] == CaseStatus.RESOLVED
