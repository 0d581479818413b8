"""The streaming monitor on the real product: a deposit whose MT5 credit is held back (mt5-credit's
worker is paused, SIGSTOP) is a not_credited case in the reconciler's queue within seconds of N,
long before any daily run; a deposit credited within N opens nothing; when the held credit finally
lands (the worker goes on, SIGCONT), the alert clears and the case, confirmed by no run, is
resolved. The credit is held until the case is seen, not for a fixed time: under a loaded machine
the case took longer than a 40 s hold, and the credit landed before the monitor spoke."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from backbone.testing.processes import wait_until
from backbone.testing.stack import Stack
from backbone.testing.system import System

pytestmark = pytest.mark.integration
# N: above the capture-to-credit time of a loaded machine (5-7 s under make bench-e2e), so that the
# quick deposit is quick there too
AFTER_S = 10


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
    worker = running.procs["mt5_credit-worker"].popen
    worker.send_signal(signal.SIGSTOP)
    try:
        held_ref, _ = _deposit(running, 7402, "cust-m2")
        wait_until(lambda: len(_cases(running)) == 1, 12 * AFTER_S, "the monitor's case for the held credit")
        [case] = _cases(running)
        assert str(case["summary"]).startswith("monitor:") and case["status"] == "open"
    finally:
        worker.send_signal(signal.SIGCONT)
    running.wait_credits(held_ref, ["done"], timeout_s=120)
    wait_until(
        lambda: _cases(running)[0]["status"] == "resolved", 60, "the alert cleared and the case resolved"
    )
    assert len(_cases(running)) == 1
