"""Fixtures for mt5-credit's store-level tests: a real PostgreSQL database with the service's
migrations, the real intake/executor/resolver, and the in-memory MT5 (its contract test runs the
same scenarios against the simulator)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from backbone.avro import AvroCodec, SchemaCatalogue
from backbone.consumer.messages import InboundEvent, UnitOfWork
from backbone.kafka.topics import TopicCatalogue
from backbone.outbox.writer import OutboxWriter
from backbone.postgres import connect
from backbone.testing import databases
from backbone.testing.stack import Stack
from mt5_credit.adapters.memory_mt5 import MemoryMt5
from mt5_credit.adapters.postgres_store import PgCreditStore
from mt5_credit.adapters.rates import FixedRates
from mt5_credit.application.executor import Executor, ExecutorConfig
from mt5_credit.application.intake import Intake
from mt5_credit.application.intents import Created, IntentRequest, create_intent
from mt5_credit.application.resolver import Resolver
from mt5_credit.domain.intake import Account
from mt5_credit.domain.resolve import ResolveTiming
from psycopg.rows import dict_row

MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"
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
        message = self.outbox.event("payments.events", event_type, payment_id, body)
        inbound = InboundEvent(CODEC.decode(message.payload), "payments.events", 0, next(_seq))
        with self.conn.transaction():
            self.intake.handle(UnitOfWork(self.conn, None, "test"), inbound)

    def captured(
        self, ref: str | None, amount_minor: int = 50_000, currency: str = "USD", pi: str = "pi_1"
    ) -> None:
        self.deliver(
            "PaymentCaptured",
            f"pay-{pi}",
            {
                "merchant_id": "m1",
                "operation_id": f"op-{pi}",
                "provider": "simpsp",
                "provider_payment_id": pi,
                "amount_minor": amount_minor,
                "currency": currency,
                "deposit_reference": ref,
            },
        )

    def refunded(
        self, ref: str, amount_minor: int, refund_id: str, currency: str = "USD", pi: str = "pi_1"
    ) -> None:
        self.deliver(
            "RefundSucceeded",
            f"pay-{pi}",
            {
                "merchant_id": "m1",
                "refund_id": refund_id,
                "operation_id": f"op-{refund_id}",
                "provider": "simpsp",
                "provider_refund_id": f"re_{refund_id}",
                "amount_minor": amount_minor,
                "currency": currency,
                "deposit_reference": ref,
            },
        )

    def charged_back(
        self, ref: str, amount_minor: int, cb_id: str, currency: str = "USD", pi: str = "pi_1"
    ) -> None:
        self.deliver(
            "ChargebackReceived",
            f"pay-{pi}",
            {
                "merchant_id": "m1",
                "chargeback_id": cb_id,
                "provider": "simpsp",
                "provider_dispute_id": f"dp_{cb_id}",
                "amount_minor": amount_minor,
                "currency": currency,
                "deposit_reference": ref,
                "reason": "fraudulent",
            },
        )

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


@pytest.fixture
def world(stack: Stack) -> Iterator[World]:
    url = databases.create_database(stack.pg_admin_url, [MIGRATIONS])
    conn = connect(url, autocommit=True)
    try:
        yield World(url, conn)
    finally:
        conn.close()
        databases.drop_database(stack.pg_admin_url, url)
