"""The seed's failure table with real processes: the mt5-credit consumer and workers as separate
processes, real Kafka (an isolated topic namespace), real PostgreSQL and the MT5 simulator over
real HTTP. Crashes are SIGKILLs at named failpoints; MT5 faults are armed in the simulator. Each
test asserts the number of MT5 deals carrying the row's comment afterwards."""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from backbone.avro import AvroCodec, SchemaCatalogue
from backbone.kafka.topics import TopicCatalogue
from backbone.mt5.testing import MANAGER_LOGIN, MANAGER_PASSWORD, SimulatorProcess, running_simulator
from backbone.outbox.writer import OutboxWriter
from backbone.postgres import connect
from backbone.testing import databases
from backbone.testing.kafka import topic_namespace
from backbone.testing.processes import Proc, wait_until
from backbone.testing.stack import Stack
from backbone.testing.system import MT5_WORKER_ENV
from confluent_kafka import Producer
from mt5_credit.adapters.postgres_store import PgCreditStore
from mt5_credit.adapters.rates import FixedRates
from mt5_credit.application.intents import Created, IntentRequest, create_intent
from mt5_credit.domain.intake import Account

MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"
GROUP = "real\\usd"
CODEC = AvroCodec(SchemaCatalogue.default())
_seq = itertools.count(1)

# Short, related timings, from their one home (the lease covers the call budget plus a margin).
WORKER_ENV = {**MT5_WORKER_ENV, "CREDIT_LANES": "4"}  # the default lanes, as these tests always ran


@pytest.fixture(scope="module")
def namespace(stack: Stack) -> Iterator[str]:
    with topic_namespace(stack.kafka_bootstrap) as prefix:
        yield prefix


@dataclass
class System:
    stack: Stack
    prefix: str
    db_url: str
    sim: SimulatorProcess
    tmp: Path
    procs: list[Proc] = field(default_factory=list)
    group: str = field(default_factory=lambda: f"mt5c-{uuid.uuid4().hex[:8]}")

    def __post_init__(self) -> None:
        self.writer = OutboxWriter(CODEC, _catalogue(self.prefix), "test")
        self.producer = Producer(
            {
                "bootstrap.servers": self.stack.kafka_bootstrap,
                "enable.idempotence": True,
                "partitioner": "murmur2_random",
            }
        )

    def _env(self, **extra: str) -> dict[str, str]:
        return {
            "DATABASE_URL": self.db_url,
            "KAFKA_BOOTSTRAP_SERVERS": self.stack.kafka_bootstrap,
            "KAFKA_TOPIC_PREFIX": self.prefix,
            **extra,
        }

    def consumer(self, n: int = 1) -> Proc:
        env = self._env(
            CONSUMER_NAME=self.group, CONSUMER_POLL_TIMEOUT_MS="100", CONSUMER_SESSION_TIMEOUT_MS="6000"
        )
        proc = Proc(["-m", "mt5_credit", "consume"], env, self.tmp / f"consume-{next(_seq)}.log")
        self.procs.append(proc)
        return proc

    def worker(self, failpoints: str = "") -> Proc:
        env = self._env(
            MT5_WEBAPI_URL=self.sim.url,
            MT5_MANAGER_LOGIN=str(MANAGER_LOGIN),
            MT5_MANAGER_PASSWORD=MANAGER_PASSWORD,
            BACKBONE_FAILPOINTS=failpoints,
            **WORKER_ENV,
        )
        proc = Proc(["-m", "mt5_credit", "worker"], env, self.tmp / f"worker-{next(_seq)}.log")
        self.procs.append(proc)
        return proc

    def account(self, login: int, customer: str, balance: str = "0") -> None:
        self.sim.control.create_account(login, GROUP, balance=balance)
        with connect(self.db_url, autocommit=True) as conn:
            PgCreditStore(conn).upsert_account(Account(login, customer, "USD", True))

    def intent(self, customer: str, login: int, amount_minor: int) -> str:
        with connect(self.db_url, autocommit=True) as conn:
            result = create_intent(
                PgCreditStore(conn),
                IntentRequest("m1", customer, login, amount_minor, "USD"),
                f"key-{uuid.uuid4().hex}",
                FixedRates({}),
            )
        assert isinstance(result, Created)
        return result.intent.deposit_reference

    def publish(self, event_type: str, payment_id: str, body: dict[str, Any], copies: int = 1) -> None:
        """Publish one event (``copies`` times with the same event id: a duplicate delivery)."""
        message = self.writer.event(self.prefix + "payments.events", event_type, payment_id, body)
        for _ in range(copies):
            self.producer.produce(message.topic, key=payment_id.encode(), value=message.payload)
        assert self.producer.flush(10) == 0

    def captured(self, ref: str, amount_minor: int, pi: str, copies: int = 1) -> None:
        self.publish(
            "PaymentCaptured",
            f"pay-{pi}",
            {
                "merchant_id": "m1",
                "operation_id": f"op-{pi}",
                "provider": "simpsp",
                "provider_payment_id": pi,
                "amount_minor": amount_minor,
                "currency": "USD",
                "deposit_reference": ref,
            },
            copies,
        )

    def refunded(self, ref: str, amount_minor: int, refund_id: str, pi: str) -> None:
        self.publish(
            "RefundSucceeded",
            f"pay-{pi}",
            {
                "merchant_id": "m1",
                "refund_id": refund_id,
                "operation_id": f"op-{refund_id}",
                "provider": "simpsp",
                "provider_refund_id": f"re_{refund_id}",
                "amount_minor": amount_minor,
                "currency": "USD",
                "deposit_reference": ref,
            },
        )

    def rows(self) -> list[dict[str, Any]]:
        with connect(self.db_url) as conn:
            cur = conn.execute(
                "SELECT id, kind, status, mt5_deal_ticket, attempts, deposit_reference,"
                " amount_minor, last_reason FROM mt5_credits ORDER BY id"
            )
            names = [d.name for d in cur.description or []]
            return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]

    def transitions(self, credit_id: int) -> list[tuple[str | None, str, str]]:
        with connect(self.db_url) as conn:
            return [
                (a, b, c)
                for a, b, c in conn.execute(
                    "SELECT from_status, to_status, reason FROM mt5_credit_transitions"
                    " WHERE credit_id = %s ORDER BY id",
                    (credit_id,),
                )
            ]

    def deals(self, comment: str) -> list[dict[str, Any]]:
        return self.sim.control.deals(comment=comment)

    def wait_status(
        self, want: dict[int, str] | str, count: int = 1, timeout_s: float = 60
    ) -> list[dict[str, Any]]:
        def done() -> bool:
            rows = self.rows()
            if isinstance(want, str):
                return len(rows) >= count and all(r["status"] == want for r in rows)
            by_id = {r["id"]: r["status"] for r in rows}
            return all(by_id.get(k) == v for k, v in want.items())

        wait_until(done, timeout_s, f"credit rows {want}")
        return self.rows()


def _catalogue(prefix: str) -> TopicCatalogue:
    old = os.environ.get("KAFKA_TOPIC_PREFIX")
    os.environ["KAFKA_TOPIC_PREFIX"] = prefix
    try:
        return TopicCatalogue.default()
    finally:
        if old is None:
            del os.environ["KAFKA_TOPIC_PREFIX"]
        else:
            os.environ["KAFKA_TOPIC_PREFIX"] = old


@pytest.fixture
def system(stack: Stack, namespace: str, tmp_path: Path) -> Iterator[System]:
    db_url = databases.create_database(stack.pg_admin_url, [MIGRATIONS])
    with running_simulator(stack.pg_admin_url, tmp_path) as sim:
        sim.control.create_group(GROUP, "USD", 2)
        system = System(stack, namespace, db_url, sim, tmp_path)
        try:
            yield system
        finally:
            for proc in system.procs:
                proc.kill()
    databases.drop_database(stack.pg_admin_url, db_url)


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
