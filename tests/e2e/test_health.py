"""Health that tells the truth, for every process type of the product, as real processes: the
gateway, payment-state's API, executor, inbound consumer and relay, mt5-credit's HTTP API,
consumer, worker and relay, the ledger's API, consumer and relay.

With a liveness timeout of 2.5 s, every /healthz stays 200 for several periods while the system is
idle and while deposits flow (mt5-credit's HTTP process used to report itself dead 60 s after
every start), and every /readyz is 200 with the dependencies it needs; a worker whose lane is stuck
right after a claim, and payment-state's executor stuck after a pass, turn red while their health
servers still answer; an HTTP API whose event loop is blocked by a handler stops answering
/healthz at all (what a probe counts as red).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from backbone.testing.processes import wait_until
from backbone.testing.stack import Stack
from backbone.testing.system import System

pytestmark = pytest.mark.integration
LIVENESS_MS = 2500


@pytest.fixture(scope="module")
def system(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    workdir: Path = tmp_path_factory.mktemp("health-system")
    with System(stack, workdir, liveness_timeout_ms=LIVENESS_MS).start() as running:
        yield running


def _all_health(system: System, seconds: float) -> dict[str, set[int]]:
    """Every process's /healthz statuses, probed every 200 ms for ``seconds``."""
    seen: dict[str, set[int]] = {name: set() for name in system.procs}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for name in system.procs:
            seen[name].add(system.health(name)[0])
        time.sleep(0.2)
    return seen


def test_every_process_is_alive_and_ready_idle_and_under_load(system: System) -> None:
    """Idle for 4 liveness periods, then three deposits end to end: every process answers 200 on
    /healthz all along, and /readyz 200 naming what it depends on."""
    wait_until(lambda: all(system.readiness(n)[0] == 200 for n in system.procs), 60, "every process ready")
    idle = _all_health(system, 4 * LIVENESS_MS / 1000)
    assert {name: statuses for name, statuses in idle.items() if statuses != {200}} == {}
    for name in system.procs:
        status, body = system.readiness(name)
        assert status == 200 and "database" in body, (name, body)
    for name in ("payment_state-consume", "mt5_credit-consume", "ledger-consume"):
        assert {"kafka", "group"} <= set(system.readiness(name)[1]), name

    def deposits() -> None:
        for n in range(3):
            system.open_mt5_account(7400 + n, f"cust-h{n}")
            ref, payment_id = system.create_deposit(f"cust-h{n}", 7400 + n, 5_000, "pm_card_visa")
            system.wait_payment(payment_id, "AUTHORIZED")
            system.capture(payment_id)
            system.wait_credits(ref, ["done"])

    flow = threading.Thread(target=deposits)
    flow.start()
    busy = _all_health(system, 4 * LIVENESS_MS / 1000)
    flow.join(120)
    assert not flow.is_alive()
    assert {name: statuses for name, statuses in busy.items() if statuses != {200}} == {}


def test_a_worker_with_a_stuck_lane_reports_itself_dead(system: System) -> None:
    """mt5-credit's worker restarted with a lane that hangs right after its first claim: once a
    deposit is captured, /healthz turns 503 naming the silent lane, while the process still answers."""
    system.restart("mt5_credit-worker", BACKBONE_FAILPOINTS="mt5_credit.after_claim=hang")
    wait_until(lambda: system.health("mt5_credit-worker")[0] == 200, 30, "the restarted worker alive")
    system.open_mt5_account(7410, "cust-stuck")
    _, payment_id = system.create_deposit("cust-stuck", 7410, 5_000, "pm_card_visa")
    system.wait_payment(payment_id, "AUTHORIZED")
    system.capture(payment_id)
    wait_until(lambda: system.health("mt5_credit-worker")[0] == 503, 60, "the worker's liveness to fail")
    _, body = system.health("mt5_credit-worker")
    assert max(body["loops"].values()) >= LIVENESS_MS
    assert system.procs["mt5_credit-worker"].popen.poll() is None


def test_a_stuck_executor_and_a_blocked_api_are_red(system: System) -> None:
    """payment-state's executor restarted to hang after its first pass that claimed work: a new
    payment makes it claim, and its /healthz turns 503. mt5-credit's HTTP API restarted to block its
    event loop in the next handler: one request, and /healthz no longer answers."""
    system.restart("payment_state-worker", BACKBONE_FAILPOINTS="payment_state.after_executor_pass=hang")
    wait_until(lambda: system.health("payment_state-worker")[0] == 200, 30, "the restarted executor alive")
    system.open_mt5_account(7420, "cust-exec")
    system.create_deposit("cust-exec", 7420, 5_000, "pm_card_visa")
    wait_until(lambda: system.health("payment_state-worker")[0] == 503, 60, "the executor's liveness to fail")

    api = system.restart("mt5_credit-api", BACKBONE_FAILPOINTS="http.request=hang")
    wait_until(lambda: system.health("mt5_credit-api")[0] == 200, 30, "the restarted API alive")

    def blocking_request() -> None:
        with contextlib.suppress(OSError):  # never answered: the process is killed at the end
            system.http("GET", f"{system.urls.mt5_credit}/credits/1")

    blocked = threading.Thread(target=blocking_request, daemon=True)
    blocked.start()
    wait_until(lambda: system.health("mt5_credit-api")[0] == 0, 30, "the blocked API to stop answering")
    assert api.popen.poll() is None
