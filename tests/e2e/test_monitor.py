"""The streaming monitor on the real product: a deposit whose MT5 credit is held back (the MT5
simulator hangs the call) is a not_credited case in the reconciler's queue within seconds of N, long
before any daily run; a deposit credited within N opens nothing; when the held credit finally lands,
the alert clears and the case, confirmed by no run, is resolved."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from backbone.testing.processes import wait_until
from backbone.testing.stack import Stack
from backbone.testing.system import System

pytestmark = pytest.mark.integration
AFTER_S = 4


@pytest.fixture(scope="module")
def running(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    workdir: Path = tmp_path_factory.mktemp("monitor-system")
    with System(stack, workdir, with_reconciler=True, monitor_after_s=AFTER_S).start() as system:
        yield system


def _cases(running: System) -> list[dict[str, object]]:
    status, body = running.recon_api("bob", "GET", "/v1/cases?class=not_credited")
    assert status == 200, body
    return list(body["cases"])


def _deposit(running: System, login: int, customer: str) -> tuple[str, str]:
    running.open_mt5_account(login, customer)
    ref, payment_id = running.create_deposit(customer, login, 15_000, "pm_card_visa")
    running.wait_payment(payment_id, "AUTHORIZED")
    running.capture(payment_id)
    running.wait_payment(payment_id, "CAPTURED")
    return ref, payment_id


def test_a_held_back_credit_is_a_case_within_minutes_and_a_quick_one_is_not(running: System) -> None:
    """See the module's docstring."""
    assert running.mt5 is not None
    quick_ref, _ = _deposit(running, 7401, "cust-m1")
    running.wait_credits(quick_ref, ["done"])
    # held for 10 N: a busy machine may take several N to show the case; it must still be open then
    running.mt5.control.arm_fault(
        kind="slow", endpoint="trade/balance", login=7402, count=1, delay_ms=10 * AFTER_S * 1000
    )
    held_ref, _ = _deposit(running, 7402, "cust-m2")
    wait_until(lambda: len(_cases(running)) == 1, 6 * AFTER_S + 30, "the monitor's case for the held credit")
    [case] = _cases(running)
    assert str(case["summary"]).startswith("monitor:") and case["status"] == "open"
    running.wait_credits(held_ref, ["done"], timeout_s=120)
    wait_until(
        lambda: _cases(running)[0]["status"] == "resolved", 60, "the alert cleared and the case resolved"
    )
    assert len(_cases(running)) == 1
