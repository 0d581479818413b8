"""The streaming monitor's alerts become cases in the one queue (through the real intake): an alert
opens, minutes after the fact, the very case the daily run would open (same key), the run takes it
over with its proof, and a cleared alert resolves only a case no run has confirmed."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from reconciler.domain.cases import CaseStatus
from reconciler.domain.merchants import EVERY_MERCHANT
from reconciler.testing.world import DAY, World, at

pytestmark = pytest.mark.integration


def _alert(made: dict[str, Any], state: str = "raised") -> dict[str, Any]:
    return {
        "alert": "captured_not_credited",
        "state": state,
        "subject_key": f"capture:op-{str(made['payment_id']).removeprefix('pay-')}",
        "deposit_reference": "dr-2",
        "amount_minor": 50_000,
        "currency": "USD",
        "observed_at_ms": made["at_ms"],
        "subject_occurred_at_ms": made["at_ms"],
        "overdue_ms": 600_000,
        "after_ms": 600_000,
    }


def _announced(world: World) -> list[str]:
    with psycopg.connect(world.url) as conn:
        return [r[0] for r in conn.execute("SELECT event_type FROM outbox ORDER BY id")]


def test_an_alert_opens_the_runs_case_early_and_the_run_takes_it_over(world: World) -> None:
    """captured_not_credited opens not_credited:capture:<op> at once (CaseOpened, no run yet; a
    redelivered alert changes nothing); the daily run finds the same key and puts its own evidence
    on that one case; a clear after that does not resolve what the run confirmed."""
    world.deposit(1)
    made = world.deposit(2, credited=False)
    world.publish_reports()
    for _ in range(2):
        world.deliver("MonitorAlert", "pay-2", _alert(made), at(DAY, 11))
    [listed] = world.store.cases_where(scope=EVERY_MERCHANT)
    case = world.store.case(int(listed["id"]), scope=EVERY_MERCHANT) or {}
    assert (case["case_key"], case["status"], case["first_run_id"]) == (
        "not_credited:capture:op-2",
        "open",
        None,
    )
    assert case["summary"].startswith("monitor: capture:op-2") and _announced(world) == ["CaseOpened"]
    result = world.run()
    assert world.classes(result) == ["not_credited"] and result.cases["updated"] == 1
    case = world.store.case(int(listed["id"]), scope=EVERY_MERCHANT) or {}
    assert "fact" in case["evidence"] and case["last_run_id"] == result.run_id
    world.deliver("MonitorAlert", "pay-2", _alert(made, "cleared"), at(DAY, 12))
    assert (world.store.case(int(listed["id"]), scope=EVERY_MERCHANT) or {})["status"] == CaseStatus.OPEN


def test_a_cleared_alert_resolves_the_case_no_run_confirmed(world: World) -> None:
    """The credit came late but before any run: the clear resolves the case (by the monitor, with
    CaseResolved); the run then finds nothing and the day is clean."""
    world.deposit(1)
    made = world.deposit(2, credited=False)
    world.publish_reports()
    world.deliver("MonitorAlert", "pay-2", _alert(made), at(DAY, 11))
    world.deliver("MonitorAlert", "pay-2", _alert(made, "cleared"), at(DAY, 12))
    [listed] = world.store.cases_where(scope=EVERY_MERCHANT)
    case = world.store.case(int(listed["id"]), scope=EVERY_MERCHANT) or {}
    assert case["status"] == CaseStatus.RESOLVED and "monitor saw" in case["resolution"]
    assert _announced(world) == ["CaseOpened", "CaseResolved"]
