"""One test module's payment-state on the real stack: a throwaway database and topics, the
processes it starts, and in-process access through the application's own functions and the store."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from backbone.avro import AvroCodec
from backbone.consumer.messages import Polled
from backbone.kafka.topics import DLQ_SUFFIX, TopicCatalogue
from backbone.postgres import connect
from backbone.testing import kafka
from backbone.testing.processes import Proc
from backbone.testing.stack import Stack
from psycopg_pool import ConnectionPool

from payment_state import bootstrap
from payment_state.adapters.postgres_store import PgTransactions
from payment_state.application.context import Context
from payment_state.application.handlers import Reply, handle
from payment_state.application.provider_facts import FactOutcome, apply_provider_fact
from payment_state.domain.commands import PaymentRequest
from payment_state.domain.facts import ProviderFact
from payment_state.domain.model import PaymentState

MIGRATIONS = Path(__file__).resolve().parents[3] / "migrations"
TOKEN_A, TOKEN_B = "tok-merchant-a-0123456789", "tok-merchant-b-0123456789"
MERCHANT_A, MERCHANT_B = "merchant_a", "merchant_b"


@dataclass
class Service:
    """One test module's payment-state: database, topics, processes and in-process helpers."""

    stack: Stack
    db_url: str
    events_topic: str
    commands_topic: str
    provider_topic: str
    logs_dir: Path
    ctx: Context
    pool: ConnectionPool
    codec: AvroCodec
    catalogue: TopicCatalogue
    payout_commands_topic: str = "-"  # "-": this module's processes never read payout commands
    procs: list[Proc] = field(default_factory=list)

    def env(self, **overrides: str) -> dict[str, str]:
        base = {
            "DATABASE_URL": self.db_url,
            "KAFKA_BOOTSTRAP_SERVERS": self.stack.kafka_bootstrap,
            "SERVICE_NAME": "payment_state",
            "PAYMENT_STATE_EVENTS_TOPIC": self.events_topic,
            "PAYMENT_STATE_COMMANDS_TOPIC": self.commands_topic,
            "PAYMENT_STATE_PROVIDER_EVENTS_TOPIC": self.provider_topic,
            "PAYMENT_STATE_API_TOKENS": f"{TOKEN_A}={MERCHANT_A},{TOKEN_B}={MERCHANT_B}",
            "CONSUMER_NAME": f"payment-state-{self.events_topic}",
            "CONSUMER_SESSION_TIMEOUT_MS": "6000",
            "CONSUMER_RETRY_BACKOFF_MS": "100",
            "CONSUMER_MAX_ATTEMPTS": "2",
            "OUTBOX_POLL_INTERVAL_MS": "200",
            "OUTBOX_DELIVERY_TIMEOUT_MS": "5000",
            "OUTBOX_STANDBY_RETRY_MS": "200",
            "BACKBONE_FAILPOINTS": "",
        }
        if self.payout_commands_topic != "-":
            base["PAYMENT_STATE_PAYOUT_COMMANDS_TOPIC"] = self.payout_commands_topic
        return {**base, **overrides}

    def start(self, command: str, name: str | None = None, **overrides: str) -> Proc:
        log_path = self.logs_dir / f"{name or command}-{len(self.procs)}.log"
        proc = Proc(["-m", "payment_state", command], self.env(**overrides), log_path)
        self.procs.append(proc)
        return proc

    # -- in-process access through the application's own functions ------------------------------

    @cached_property
    def transaction(self) -> PgTransactions:
        """The store in a new transaction per call, on the test's pool and events topic."""
        outbox = bootstrap.outbox_writer(self.catalogue, self.codec)
        return bootstrap.transactions(self.pool, outbox, self.events_topic)

    def handle(self, merchant_id: str, key: str, request: PaymentRequest) -> Reply:
        with self.transaction() as store:
            return handle(store, self.ctx, merchant_id, key, request)

    def apply(self, fact: ProviderFact, source: str = "webhook", **kwargs: Any) -> FactOutcome:
        with self.transaction() as store:
            return apply_provider_fact(store, self.ctx, fact, source=source, **kwargs)

    def state(self, payment_id: str) -> PaymentState:
        with self.transaction() as store:
            found = store.load_state(payment_id)
        assert found is not None, payment_id
        return found

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with connect(self.db_url) as conn:
            return conn.execute(sql.encode(), params).fetchall()

    def scalar(self, sql: str, *params: Any) -> Any:
        return self.query(sql, *params)[0][0]

    def counts(self) -> tuple[int, ...]:
        """Rows in every table a request could change: for 'nothing changed' assertions."""
        return tuple(
            int(self.scalar(f"SELECT count(*) FROM {table}"))
            for table in ("payments", "payment_operations", "idempotency_keys", "outbox", "provider_facts")
        )

    def outbox(self, payment_id: str) -> list[tuple[str, dict[str, Any]]]:
        """(event type, decoded body) of the payment's outbox rows, in commit order."""
        rows = self.query("SELECT payload FROM outbox WHERE message_key = %s ORDER BY id", payment_id)
        decoded = [self.codec.decode(bytes(row[0])) for row in rows]
        return [(d.event_type, d.body) for d in decoded]

    def published(self, expect_at_least: int, timeout_s: float = 30.0) -> list[Polled]:
        return kafka.read_topic(
            self.stack.kafka_bootstrap,
            self.events_topic,
            expect_at_least=expect_at_least,
            timeout_s=timeout_s,
        )


def fact_keys(events: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, str]]:
    """One key per business fact: (event type, the operation/refund/chargeback it is about)."""
    return [(t, str(b.get("refund_id") or b.get("chargeback_id") or b["operation_id"])) for t, b in events]


def only_topics(catalogue: TopicCatalogue, names: set[str]) -> TopicCatalogue:
    """The part of a catalogue with these topics and their dead-letter twins (to create them)."""
    wanted = names | {n + DLQ_SUFFIX for n in names}
    return TopicCatalogue([spec for spec in catalogue if spec.name in wanted])
