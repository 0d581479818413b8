"""mt5-credit as real processes for the seed's failure table: the consumer and workers as separate
processes on real Kafka (an isolated topic namespace), real PostgreSQL and the MT5 simulator over
real HTTP, with the facts published as payment-state would and readers of what they did."""

from __future__ import annotations

import itertools
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from backbone.avro import AvroCodec, SchemaCatalogue
from backbone.kafka.topics import TopicCatalogue
from backbone.mt5.testing import MANAGER_LOGIN, MANAGER_PASSWORD, SimulatorProcess
from backbone.outbox.writer import OutboxWriter
from backbone.postgres import connect
from backbone.testing.processes import Proc, wait_until
from backbone.testing.stack import Stack
from backbone.testing.system_config import MT5_WORKER_ENV
from confluent_kafka import Producer

from mt5_credit.adapters.postgres_store import PgCreditStore
from mt5_credit.adapters.rates import FixedRates
from mt5_credit.application.intents import Created, IntentRequest, create_intent
from mt5_credit.domain.intake import Account
from mt5_credit.testing.facts import captured_body, payment_id_for, refunded_body

GROUP: Final = "real\\usd"
CODEC = AvroCodec(SchemaCatalogue.default())
_seq = itertools.count(1)

# Short, related timings, from their one home (the lease covers the call budget plus a margin).
WORKER_ENV: Final = {**MT5_WORKER_ENV, "CREDIT_LANES": "4"}  # the default lanes, as these tests always ran


@dataclass
class System:
    """One test's mt5-credit: its database, topic namespace, simulator and processes."""

    stack: Stack
    prefix: str
    db_url: str
    sim: SimulatorProcess
    tmp: Path
    procs: list[Proc] = field(default_factory=list)
    group: str = field(default_factory=lambda: f"mt5c-{uuid.uuid4().hex[:8]}")

    def __post_init__(self) -> None:
        self.writer = OutboxWriter(CODEC, catalogue_in(self.prefix), "test")
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

    def consumer(self, n: int = 1, failpoints: str = "") -> Proc:
        env = self._env(
            CONSUMER_NAME=self.group,
            CONSUMER_POLL_TIMEOUT_MS="100",
            CONSUMER_SESSION_TIMEOUT_MS="6000",
            BACKBONE_FAILPOINTS=failpoints,
        )
        proc = Proc(["-m", "mt5_credit", "consume"], env, self.tmp / f"consume-{next(_seq)}.log")
        self.procs.append(proc)
        return proc

    def worker(self, failpoints: str = "", **settings: str) -> Proc:
        env = self._env(
            MT5_WEBAPI_URL=self.sim.url,
            MT5_MANAGER_LOGIN=str(MANAGER_LOGIN),
            MT5_MANAGER_PASSWORD=MANAGER_PASSWORD,
            BACKBONE_FAILPOINTS=failpoints,
            **{**WORKER_ENV, **settings},
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
        topic = "recon.repair-commands" if event_type == "ExecuteRepair" else "payments.events"
        message = self.writer.event(self.prefix + topic, event_type, payment_id, body)
        for _ in range(copies):
            self.producer.produce(message.topic, key=payment_id.encode(), value=message.payload)
        assert self.producer.flush(10) == 0

    def captured(self, ref: str, amount_minor: int, pi: str, copies: int = 1) -> None:
        self.publish(
            "PaymentCaptured", payment_id_for(pi), captured_body(ref, amount_minor, "USD", pi), copies
        )

    def refunded(self, ref: str, amount_minor: int, refund_id: str, pi: str) -> None:
        self.publish("RefundSucceeded", payment_id_for(pi), refunded_body(ref, amount_minor, refund_id))

    def outcomes(self) -> list[dict[str, Any]]:
        """The RepairOutcome bodies in the outbox, in commit order."""
        with connect(self.db_url) as conn:
            rows = conn.execute("SELECT payload FROM outbox WHERE event_type = 'RepairOutcome' ORDER BY id")
            return [CODEC.decode(bytes(p)).body for (p,) in rows]

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


def catalogue_in(prefix: str) -> TopicCatalogue:
    """The repository's topic catalogue in the namespace ``prefix`` (read as a process would)."""
    old = os.environ.get("KAFKA_TOPIC_PREFIX")
    os.environ["KAFKA_TOPIC_PREFIX"] = prefix
    try:
        return TopicCatalogue.default()
    finally:
        if old is None:
            del os.environ["KAFKA_TOPIC_PREFIX"]
        else:
            os.environ["KAFKA_TOPIC_PREFIX"] = old
