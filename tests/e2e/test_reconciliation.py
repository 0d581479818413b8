"""The daily reconciliation of the real product: card deposits through every service and both
simulators, the reconciler's consumer building its read models from the real topics, then
``python -m reconciler run`` fetching the PSP's reports from its API and MT5's deals from the Web
API. A clean day first; then discrepancies injected through the simulators' control APIs (a
dispute whose webhook is dropped, a wrong settlement amount, an extra deal with our reference, a
deal without a comment), each found as a case, and a re-run that finds the same cases again."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from backbone.testing.processes import wait_until
from backbone.testing.stack import Stack
from backbone.testing.system import System

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def system(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    workdir: Path = tmp_path_factory.mktemp("recon-system")
    # The gateway's catch-up would store the dropped dispute from the PSP's events list within
    # seconds; held back an hour here, the dispute stays lost, as if the events list were down too.
    held_back = {"gateway-catch-up": {"CATCH_UP_SETTLE_S": "3600"}}
    with System(stack, workdir, with_reconciler=True, extra_env=held_back).start() as running:
        yield running


def _kept(system: System) -> tuple[int, int, int]:
    with psycopg.connect(system.dbs["reconciler"]) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM money_facts), (SELECT count(*) FROM mt5_operations),"
            " (SELECT count(*) FROM journals)"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])


def _deposit(system: System, login: int, customer: str, amount: int) -> tuple[str, str, dict[str, object]]:
    system.open_mt5_account(login, customer)
    ref, payment_id = system.create_deposit(customer, login, amount, "pm_card_visa")
    system.wait_payment(payment_id, "AUTHORIZED")
    system.capture(payment_id)
    intent = system.wait_payment(payment_id, "CAPTURED")
    (credit,) = system.wait_credits(ref, ["done"])
    return payment_id, str(intent["provider_payment_id"]), credit


def test_a_clean_day_then_injected_discrepancies_become_cases(system: System) -> None:
    """Three deposits reconcile clean (exit 0, no case). Then: a dispute at the PSP whose webhook is
    dropped (external_only), a settlement row with a wrong amount (amount_mismatch, and its payout
    batch no longer sums to the bank deposit), a deal with our reference nobody explains
    (deal_without_record) and a balance deal without a comment (deal_without_reference). A second run
    finds the same cases and opens none."""
    assert system.mt5 is not None
    day = dt.datetime.now(dt.UTC).date().isoformat()
    made = [_deposit(system, 7201 + i, f"cust-r{i}", 10_000 * (i + 1)) for i in range(3)]
    wait_until(lambda: _kept(system) == (3, 3, 6), 60, "the reconciler's read models to hold the day")
    clean = system.reconcile(day)
    assert (clean["status"], clean["exit_code"], clean["findings"]) == ("clean", 0, []), clean
    assert clean["counts"]["settlement_rows_matched"] == 3
    assert clean["counts"]["operations_with_deal"] == 3

    disputed_payment, disputed_intent, _ = made[0]
    system.psp_fault(kind="webhook_drop", event_type="charge.dispute.created", count=1)
    status, body = system.http(
        "POST", f"{system.urls.psp_control}/control/payment_intents/{disputed_intent}/dispute", {}
    )
    assert status in (200, 201), body
    wrong_payment = made[1][0]
    status, body = system.http(
        "POST",
        f"{system.urls.psp_control}/control/reports/discrepancies",
        {"business_date": day, "kind": "wrong_amount", "reference": wrong_payment, "amount_delta_minor": 100},
    )
    assert status == 201, body
    system.mt5.control.add_deals(7203, "12.34", "dep:999999")
    system.mt5.control.add_deals(7203, "5.00", "")

    found = system.reconcile(day)
    assert (found["status"], found["exit_code"]) == ("discrepancies", 1), found
    classes = sorted(f["case_class"] for f in found["findings"])
    assert classes == [
        "amount_mismatch",
        "bank_deposit_different",
        "deal_without_record",
        "deal_without_reference",
        "external_only",
    ], found["findings"]
    assert found["cases"]["opened"] == 5
    again = system.reconcile(day)
    assert sorted(f["case_key"] for f in again["findings"]) == sorted(
        f["case_key"] for f in found["findings"]
    )
    assert again["cases"]["opened"] == 0 and again["cases"]["unchanged"] == 5
    assert disputed_payment  # the dispute's payment: payment-state never learned of it


def test_mt5_unreachable_is_incomplete(system: System) -> None:
    """With MT5's Web API unreachable the run ends incomplete (exit 3), never clean."""
    day = dt.datetime.now(dt.UTC).date().isoformat()
    env_url = system.reconciler_env()["MT5_WEBAPI_URL"]
    assert env_url
    result = system.reconcile(day, 0)
    assert result["status"] in ("discrepancies", "clean")
    assert system.mt5 is not None
    system.mt5.control.arm_fault(kind="disconnect", endpoint="deal/get_batch", count=20)
    try:
        broken = system.reconcile(day)
    finally:
        system.mt5.control.clear_faults()
    assert (broken["status"], broken["exit_code"]) == ("incomplete", 3), broken
    assert any("MT5" in p for p in broken["problems"])
