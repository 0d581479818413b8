"""mt5-credit's parts on one real PostgreSQL database, driven in-process: the real intake, executor
and resolver on ``PgCreditStore``, a scriptable in-memory MT5 (its contract test runs the same
scenarios against the simulator), and readers of the rows, cases and outbox they leave."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import psycopg
from backbone.avro import AvroCodec, SchemaCatalogue
from backbone.consumer.messages import InboundEvent, UnitOfWork
from backbone.kafka.topics import TopicCatalogue
from backbone.outbox.writer import OutboxWriter
from psycopg.rows import dict_row

from mt5_credit.adapters.memory_mt5 import MemoryMt5
from mt5_credit.adapters.postgres_store import PgCreditStore
from mt5_credit.adapters.rates import FixedRates
from mt5_credit.application.executor import Executor, ExecutorConfig
from mt5_credit.application.intake import Intake
from mt5_credit.application.intents import Created, IntentRequest, create_intent
from mt5_credit.application.resolver import Resolver
from mt5_credit.domain.intake import Account
from mt5_credit.domain.resolve import ResolveTiming
from mt5_credit.testing.facts import captured_body, charged_back_body, payment_id_for, refunded_body

CODEC = AvroCodec(SchemaCatalogue.default())
CATALOGUE = TopicCatalogue.default()
RATES = FixedRates.parse("EUR:USD=1.0835")
_seq = itertools.count(1)


@dataclass
class World:
    """The service's parts on one real database, with a scriptable in-memory MT5."""

    url: str
    conn: psycopg.Connection
    mt5: MemoryMt5 = field(default_factory=MemoryMt5)
    outbox: OutboxWriter = field(default_factory=lambda: OutboxWriter(CODEC, CATALOGUE, "mt5_credit"))
    lease_ms: int = 60_000

    def __post_init__(self) -> None:
        self.store = PgCreditStore(self.conn, self.outbox)
        self.intake = Intake(RATES, lambda uow: PgCreditStore(uow.conn, self.outbox))
        self.timing = ResolveTiming(1, 0, 900_000, 1, 1, 3)  # lookups due at once, backoff ~0

    def executor(self, conn: psycopg.Connection | None = None) -> Executor:
        config = ExecutorConfig(
            batch_size_max=50, lease_ms=self.lease_ms, call_timeout_ms=1, lease_margin_ms=0
        )
        store = self.store if conn is None else PgCreditStore(conn, self.outbox)
        return Executor(store, self.mt5, config)

    def resolver(self) -> Resolver:
        return Resolver(self.store, self.mt5, self.timing, 50)

    def account(
        self, login: int, customer: str, currency: str = "USD", enabled: bool = True, balance: int = 0
    ) -> None:
        with self.store.transaction():
            self.store.upsert_account(Account(login, customer, currency, enabled))
        self.mt5.open_account(login, currency, balance)

    def intent(self, customer: str, login: int, amount_minor: int = 50_000, currency: str = "USD") -> str:
        result = create_intent(
            self.store,
            IntentRequest("m1", customer, login, amount_minor, currency),
            f"key-{next(_seq):08d}",
            RATES,
        )
        assert isinstance(result, Created), result
        return result.intent.deposit_reference

    def deliver(self, event_type: str, payment_id: str, body: dict[str, Any]) -> None:
        """One event through the real intake handler, in its own transaction (as the consumer does)."""
        topic = "recon.repair-commands" if event_type == "ExecuteRepair" else "payments.events"
        message = self.outbox.event(topic, event_type, payment_id, body)
        inbound = InboundEvent(CODEC.decode(message.payload), topic, 0, next(_seq))
        with self.conn.transaction():
            self.intake.handle(UnitOfWork(self.conn, None, "test"), inbound)

    def captured(
        self, ref: str | None, amount_minor: int = 50_000, currency: str = "USD", pi: str = "pi_1"
    ) -> None:
        self.deliver("PaymentCaptured", payment_id_for(pi), captured_body(ref, amount_minor, currency, pi))

    def refunded(
        self, ref: str, amount_minor: int, refund_id: str, currency: str = "USD", pi: str = "pi_1"
    ) -> None:
        body = refunded_body(ref, amount_minor, refund_id, currency)
        self.deliver("RefundSucceeded", payment_id_for(pi), body)

    def charged_back(
        self, ref: str, amount_minor: int, cb_id: str, currency: str = "USD", pi: str = "pi_1"
    ) -> None:
        body = charged_back_body(ref, amount_minor, cb_id, currency)
        self.deliver("ChargebackReceived", payment_id_for(pi), body)

    def rows(self) -> list[dict[str, Any]]:
        cur = self.conn.cursor(row_factory=dict_row)
        return list(cur.execute("SELECT * FROM mt5_credits ORDER BY id"))

    def row(self, credit_id: int) -> dict[str, Any]:
        return next(r for r in self.rows() if r["id"] == credit_id)

    def cases(self) -> list[tuple[str, str, str]]:
        return [
            (str(a), str(b), str(c))
            for a, b, c in self.conn.execute(
                "SELECT subject, case_kind, reason FROM credit_cases ORDER BY id"
            )
        ]

    def events(self, event_type: str | None = None) -> list[dict[str, Any]]:
        out = []
        for (payload,) in self.conn.execute("SELECT payload FROM outbox ORDER BY id"):
            decoded = CODEC.decode(bytes(payload))
            if event_type is None or decoded.event_type == event_type:
                out.append({"type": decoded.event_type, **decoded.body})
        return out
