"""The seed's failure table with real processes: the mt5-credit consumer and workers as separate
processes, real Kafka (an isolated topic namespace), real PostgreSQL and the MT5 simulator over
real HTTP. Crashes are SIGKILLs at named failpoints; MT5 faults are armed in the simulator. Each
test asserts the number of MT5 deals carrying the row's comment afterwards."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from backbone.mt5.testing import running_simulator
from backbone.postgres import connect
from backbone.testing.kafka import topic_namespace
from backbone.testing.processes import wait_until
from backbone.testing.stack import Stack
from mt5_credit.testing import GROUP, System, credit_database
from mt5_credit.testing.facts import captured_body, payment_id_for, repair_body


@pytest.fixture(scope="module")
def namespace(stack: Stack) -> Iterator[str]:
    with topic_namespace(stack.kafka_bootstrap) as prefix:
        yield prefix


@pytest.fixture
def system(stack: Stack, namespace: str, tmp_path: Path) -> Iterator[System]:
    with (
        credit_database(stack.pg_admin_url) as db_url,
        running_simulator(stack.pg_admin_url, tmp_path) as sim,
    ):
        sim.control.create_group(GROUP, "USD", 2)
        system = System(stack, namespace, db_url, sim, tmp_path)
        try:
            yield system
        finally:
            for proc in system.procs:
                proc.kill()


def _deposit(system: System, amount_minor: int = 50_000, copies: int = 1, login: int = 7001) -> str:
    pi = f"pi_{uuid.uuid4().hex[:10]}"
    ref = system.intent("cust-1", login, amount_minor)
    system.captured(ref, amount_minor, pi, copies)
    return ref


def test_duplicate_events_credit_once(system: System) -> None:
    """The same PaymentCaptured delivered 3 times: one credit row, one MT5 deal 'dep:<id>' of 500.00."""
    system.account(7001, "cust-1")
    system.consumer()
    system.worker()
    _deposit(system, 50_000, copies=3)
    (row,) = system.wait_status("done")
    (deal,) = system.deals(f"dep:{row['id']}")
    assert (deal["Profit"], int(deal["Deal"])) == ("500.00", row["mt5_deal_ticket"])


def test_a_new_credit_row_wakes_an_idle_worker_at_once(system: System) -> None:
    """A worker that polls only every 60 s, idle (its first pass long done): the credit row the
    consumer writes wakes it through the table's NOTIFY, and the deposit is credited in seconds. The
    row keeps the capture's time (the event's occurred_at), which the worker times done from."""
    system.account(7001, "cust-1")
    system.worker(CREDIT_POLL_INTERVAL_MS="60000")
    system.consumer()
    time.sleep(3)  # the worker's first passes found nothing; it now waits on its listening connection
    sent_ms = time.time() * 1000
    _deposit(system, 12_300)
    (row,) = system.wait_status("done", timeout_s=20)
    assert len(system.deals(f"dep:{row['id']}")) == 1
    with connect(system.db_url) as conn:
        found = conn.execute("SELECT extract(epoch FROM fact_at) * 1000 FROM mt5_credits").fetchone()
    assert found is not None and abs(float(found[0]) - sent_ms) < 5_000


@pytest.mark.parametrize(
    "failpoint", ["mt5_credit.after_claim", "mt5_credit.after_mt5_call", "mt5_credit.before_record_outcome"]
)
def test_worker_killed_between_steps_credits_exactly_once(system: System, failpoint: str) -> None:
    """SIGKILL after the claim (before the call), after the call, or inside the outcome transaction
    (MT5 applied, our DB write lost): the lease expires into unknown, the lookup settles it, 1 deal."""
    system.account(7001, "cust-1")
    system.consumer()
    doomed = system.worker(failpoints=f"{failpoint}=kill")
    _deposit(system)
    wait_until(lambda: doomed.popen.poll() is not None, 60, "the worker to die at its failpoint")
    (row,) = system.rows()
    assert row["status"] == "claimed"
    system.worker()
    (row,) = system.wait_status("done", timeout_s=60)
    assert len(system.deals(f"dep:{row['id']}")) == 1
    statuses = [t[1] for t in system.transitions(row["id"])]
    assert "unknown" in statuses and "pending" not in statuses[2:3]  # claimed -> unknown, never -> pending


def test_mt5_timeout_after_apply_is_resolved_by_lookup(system: System) -> None:
    """MT5 applies, then holds the answer past the client's timeout: unknown, no retry; the resolver
    finds it."""
    system.account(7001, "cust-1")
    system.sim.control.arm_fault(kind="hang_after_apply", endpoint="trade/balance", count=1, delay_ms=3000)
    system.consumer()
    system.worker()
    _deposit(system)
    (row,) = system.wait_status("done", timeout_s=60)
    assert len(system.deals(f"dep:{row['id']}")) == 1
    assert row["attempts"] == 1  # never called twice
    assert [t[1] for t in system.transitions(row["id"])] == ["pending", "claimed", "unknown", "done"]


def test_cross_account_answer_is_never_taken_as_success(system: System) -> None:
    """MT5 applies but answers with another account's data: the gateway refuses it (unknown); the lookup
    settles it."""
    system.account(7001, "cust-1")
    system.account(7002, "cust-2")
    system.sim.control.arm_fault(kind="cross_account", endpoint="trade/balance", count=1, other_login=7002)
    system.consumer()
    system.worker()
    _deposit(system)
    (row,) = system.wait_status("done", timeout_s=60)
    reasons = [t[2] for t in system.transitions(row["id"]) if t[1] == "unknown"]
    assert reasons, "a cross-account answer must not be success"
    assert len(system.deals(f"dep:{row['id']}")) == 1


def test_clear_rejection_fails_without_deal(system: System) -> None:
    """MT5 says the account is gone (13 Not found): failed with the retcode, no deal, no retry."""
    system.account(7001, "cust-1")
    system.sim.control.arm_fault(kind="retcode", endpoint="trade/balance", count=1, retcode=3)
    system.consumer()
    system.worker()
    _deposit(system)
    (row,) = system.wait_status("failed", timeout_s=60)
    assert system.deals(f"dep:{row['id']}") == []


def test_partial_refund_after_credit_is_a_linked_debit(system: System) -> None:
    """Deposit 500.00, refund 120.00: a debit row 'dbt:<id>' with a -120.00 deal; the credit stays done."""
    system.account(7001, "cust-1")
    system.consumer()
    system.worker()
    pi = f"pi_{uuid.uuid4().hex[:10]}"
    ref = system.intent("cust-1", 7001, 50_000)
    system.captured(ref, 50_000, pi)
    system.wait_status("done")
    system.refunded(ref, 12_000, "rf-1", pi)
    rows = system.wait_status("done", count=2)
    debit = next(r for r in rows if r["kind"] == "debit")
    (deal,) = system.deals(f"dbt:{debit['id']}")
    assert deal["Profit"] == "-120.00"
    assert system.sim.control.account(7001)["balance"] in ("380.00", "380")


def test_three_instances_and_rebalances_credit_each_deposit_once(system: System) -> None:
    """3 consumers + 3 workers, 60 deposits; consumers are stopped and started (rebalances) and a worker
    is SIGKILLed mid-stream: every deposit is done with exactly one deal."""
    for login in (7001, 7002, 7003):
        system.account(login, f"cust-{login}")
    consumers = [system.consumer() for _ in range(3)]
    workers = [system.worker() for _ in range(3)]
    refs = []
    for n in range(60):
        login = 7001 + n % 3
        pi = f"pi_{uuid.uuid4().hex[:10]}"
        ref = system.intent(f"cust-{login}", login, 1_000 + n)
        system.captured(ref, 1_000 + n, pi, copies=1 + (n % 7 == 0))
        refs.append(ref)
        if n == 15:
            consumers[0].terminate()
        if n == 25:
            workers[1].kill()
        if n == 35:
            consumers[1].kill()
            consumers.append(system.consumer())
        if n == 45:
            workers.append(system.worker())
    rows = system.wait_status("done", count=60, timeout_s=120)
    assert len(rows) == 60
    for row in rows:
        assert len(system.deals(f"dep:{row['id']}")) == 1, row


def test_a_repair_survives_a_consumer_and_a_worker_killed_between_steps(system: System) -> None:
    """A deposit whose credit MT5 refused, then its approved repair on the real repair topic: the
    consumer is killed right after committing the repair row (Kafka redelivers the command), the
    worker right after the MT5 call (the lookup settles it). One repair row, one deal with its own
    comment, one RepairOutcome executed."""
    system.account(7001, "cust-1")
    system.sim.control.arm_fault(kind="retcode", endpoint="trade/balance", count=1, retcode=3)
    system.consumer()
    system.worker()
    pi = f"pi_{uuid.uuid4().hex[:10]}"
    ref = system.intent("cust-1", 7001, 50_000)
    system.captured(ref, 50_000, pi)
    system.wait_status("failed")
    for proc in system.procs:
        proc.kill()
    system.procs.clear()
    body = repair_body("PaymentCaptured", captured_body(ref, 50_000, "USD", pi), repair_id=77, mt5_login=7001)
    system.publish("ExecuteRepair", payment_id_for(pi), body)
    doomed = system.consumer(failpoints="consumer.after_db_commit=kill")
    wait_until(lambda: doomed.popen.poll() is not None, 60, "the consumer to die after its commit")
    system.consumer()
    crashing = system.worker(failpoints="mt5_credit.after_mt5_call=kill")
    wait_until(lambda: crashing.popen.poll() is not None, 60, "the worker to die after the MT5 call")
    system.worker()
    wait_until(lambda: [r["status"] for r in system.rows()] == ["failed", "done"], 90, "the repair row done")
    failed, repaired = system.rows()
    assert len(system.deals(f"dep:{repaired['id']}")) == 1 and system.deals(f"dep:{failed['id']}") == []
    wait_until(lambda: len(system.outcomes()) >= 1, 30, "the repair's answer")
    [answer] = system.outcomes()
    assert (answer["repair_id"], answer["outcome"]) == (77, "executed")
