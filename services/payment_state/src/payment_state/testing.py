"""Test support for payment-state on the real stack (imported by its integration tests and its
benchmark only): a throwaway service (database, topics, processes) with in-process access to the
application's own functions, and a small HTTP client for the API.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final

from backbone.avro import AvroCodec
from backbone.consumer.messages import Polled
from backbone.invariants import invariant
from backbone.kafka.config import producer_config
from backbone.kafka.topics import DLQ_SUFFIX, TopicCatalogue
from backbone.outbox.writer import OutboxMessage, OutboxWriter
from backbone.postgres import connect
from backbone.psp import HEADER as SIGNATURE_HEADER
from backbone.psp import PspClient, SignatureVerified, verify_signature
from backbone.testing import kafka
from backbone.testing.http import serve_posts
from backbone.testing.processes import Proc
from backbone.testing.stack import Stack, free_port
from confluent_kafka import Producer
from psycopg_pool import ConnectionPool

from payment_state import bootstrap
from payment_state.adapters.postgres_store import PgTransactions
from payment_state.application.context import Context
from payment_state.application.handlers import Reply, handle
from payment_state.application.provider_facts import FactOutcome, apply_provider_fact
from payment_state.domain.commands import PaymentRequest
from payment_state.domain.facts import ProviderFact
from payment_state.domain.model import PaymentState

MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"
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


# -- the HTTP API as a real process ----------------------------------------------------------------


@dataclass(frozen=True)
class Response:
    status: int
    body: dict[str, Any]
    headers: dict[str, str]

    @property
    def code(self) -> str | None:
        error = self.body.get("error")
        return error.get("code") if isinstance(error, dict) else None


@dataclass(frozen=True)
class Http:
    port: int

    def call(
        self,
        method: str,
        path: str,
        body: object | None = None,
        *,
        key: str | None = None,
        token: str | None = TOKEN_A,
        raw: bytes | None = None,
    ) -> Response:
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        if key is not None:
            headers["Idempotency-Key"] = key
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(method, path, body=data, headers=headers)
            answer = conn.getresponse()
            payload = answer.read()
            return Response(answer.status, json.loads(payload) if payload else {}, dict(answer.getheaders()))
        finally:
            conn.close()

    def post(self, path: str, body: object | None = None, **kwargs: Any) -> Response:
        return self.call("POST", path, body, **kwargs)

    def get(self, path: str, **kwargs: Any) -> Response:
        return self.call("GET", path, **kwargs)


# -- Kafka input: what the webhook gateway and upstream services would publish ----------------------


class Publisher:
    """Publishes encoded events like another service's relay would (idempotent, murmur2, acks=all)."""

    def __init__(
        self, bootstrap_servers: str, catalogue: TopicCatalogue, codec: AvroCodec, producer: str
    ) -> None:
        self._writer = OutboxWriter(codec, catalogue, producer)
        self._producer = Producer(
            producer_config(bootstrap_servers, f"test-{producer}", delivery_timeout_ms=10_000)
        )

    def message(self, topic: str, event_type: str, key: str, body: dict[str, Any]) -> OutboxMessage:
        return self._writer.event(topic, event_type, key, body)

    def send(self, messages: list[OutboxMessage]) -> None:
        """Send in order and wait for every delivery (a message sent twice is a duplicate delivery)."""
        for m in messages:
            self._producer.produce(m.topic, value=m.payload, key=m.key.encode(), headers=dict(m.headers))
        remaining = self._producer.flush(15)
        invariant(remaining == 0, f"{remaining} test messages were not delivered")


def webhook_body(event_id: str, event_type: str, obj: dict[str, Any]) -> bytes:
    """A simulator webhook as the gateway forwards it (raw bytes)."""
    return json.dumps({"id": event_id, "type": event_type, "created": 1, "data": {"object": obj}}).encode()


def intent_object(
    provider_payment_id: str, status: str, amount_minor: int, reference: str, **extra: Any
) -> dict[str, Any]:
    """A payment intent in the simulator's wire format (see services/psp_sim/README.md)."""
    return {
        "id": provider_payment_id,
        "object": "payment_intent",
        "status": status,
        "amount_minor": amount_minor,
        "amount_capturable_minor": amount_minor if status == "requires_capture" else 0,
        "amount_received_minor": amount_minor if status == "succeeded" else 0,
        "amount_refunded_minor": 0,
        "amount_refund_pending_minor": 0,
        "amount_disputed_minor": 0,
        "currency": "EUR",
        "capture_method": "automatic",
        "payment_method": "pm_card_visa",
        "reference": reference,
        "metadata": {},
        "created": 1_700_000_000,
        "canceled_at": None,
        "cancellation_reason": None,
        "last_payment_error": None,
        "next_action": None,
        "latest_charge": None,
        "livemode": False,
        **extra,
    }


def refund_object(provider_refund_id: str, provider_payment_id: str, amount_minor: int, reference: str,
                  status: str = "succeeded") -> dict[str, Any]:  # fmt: skip
    return {
        "id": provider_refund_id,
        "object": "refund",
        "payment_intent": provider_payment_id,
        "reference": reference,
        "amount_minor": amount_minor,
        "currency": "EUR",
        "status": status,
        "reason": None,
        "failure_reason": None,
        "metadata": {},
        "created": 1_700_000_000,
    }


def dispute_object(provider_dispute_id: str, provider_payment_id: str, amount_minor: int) -> dict[str, Any]:
    return {
        "id": provider_dispute_id,
        "object": "dispute",
        "payment_intent": provider_payment_id,
        "reference": None,
        "amount_minor": amount_minor,
        "currency": "EUR",
        "reason": "fraudulent",
        "status": "needs_response",
        "created": 1_700_000_000,
    }


def provider_event(
    provider_event_id: str,
    event_type: str,
    raw_body: bytes,
    *,
    provider_payment_id: str | None,
    verified: bool = True,
    provider: str = "simpsp",
) -> dict[str, Any]:
    """The body of a ProviderEventReceived (without envelope), as the gateway publishes it."""
    return {
        "provider": provider,
        "provider_event_id": provider_event_id,
        "provider_event_type": event_type,
        "provider_payment_id": provider_payment_id,
        "receipt_id": abs(hash(provider_event_id)) % 1_000_000,
        "received_at_ms": 1_700_000_000_000,
        "signature_verified": verified,
        "raw_body": raw_body,
    }


# -- the PSP simulator as a real process (python -m psp_sim; see services/psp_sim/README.md) -------

PSP_API_KEY: Final = "sk_test_payment_state_0123"
PSP_WEBHOOK_SECRET: Final = "whsec_payment_state_current_01"  # noqa: S105 - a test value
PSP_SIM_MIGRATIONS: Final = Path(__file__).resolve().parents[3] / "psp_sim" / "migrations"


class PspSim:
    """``python -m psp_sim`` on free ports with its own database, and its control API."""

    def __init__(self, db_url: str, logs_dir: Path, **env: str) -> None:
        self.db_url, self.logs_dir, self.extra_env = db_url, logs_dir, env
        self.api_port, self.control_port = free_port(), free_port()
        self.proc: Proc | None = None
        self._starts = 0

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def start(self, timeout_s: float = 30.0) -> PspSim:
        self._starts += 1
        env = {
            "DATABASE_URL": self.db_url,
            "PSP_SIM_API_KEY": PSP_API_KEY,
            "PSP_SIM_WEBHOOK_SECRET": PSP_WEBHOOK_SECRET,
            "PSP_SIM_API_HOST": "127.0.0.1",
            "PSP_SIM_API_PORT": str(self.api_port),
            "PSP_SIM_CONTROL_PORT": str(self.control_port),
            "PSP_SIM_WEBHOOK_TIMEOUT_MS": "8000",
            "PSP_SIM_WEBHOOK_BACKOFF_INITIAL_MS": "50",
            "PSP_SIM_WEBHOOK_BACKOFF_MAX_MS": "400",
            "PSP_SIM_WEBHOOK_POLL_INTERVAL_MS": "50",
            "PSP_SIM_SHUTDOWN_GRACE_MS": "2000",
            "PSP_SIM_DB_POOL_SIZE_MAX": "6",
            **self.extra_env,
        }
        self.proc = Proc(["-m", "psp_sim"], env, self.logs_dir / f"psp_sim-{self._starts}.log")
        self.proc.wait_for_log("psp_sim.started", timeout_s)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc = None

    def control(self, method: str, path: str, body: Any = None) -> Any:
        """Call the control API; fails the test on a non-2xx answer."""
        data = None if body is None else json.dumps(body).encode()
        conn = http.client.HTTPConnection("127.0.0.1", self.control_port, timeout=15)
        try:
            conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
            answer = conn.getresponse()
            payload = answer.read()
        finally:
            conn.close()
        invariant(200 <= answer.status < 300, f"control {method} {path}: {answer.status} {payload[:300]!r}")
        content_type = answer.getheader("Content-Type", "")
        return json.loads(payload) if payload and "json" in content_type else payload

    def fault(self, **rule: Any) -> Any:
        return self.control("POST", "/control/faults", rule)

    def client(self, timeout_ms: int = 3000) -> PspClient:
        return PspClient(self.api_url, PSP_API_KEY, timeout_ms=timeout_ms, connect_timeout_ms=1000)


class GatewayStandIn:
    """What payment-state needs of the webhook gateway, as a real HTTP receiver: verify the signature
    over the raw bytes with the current and previous secret (``backbone.psp.verify_signature``), then
    publish ``ProviderEventReceived`` (key: the PSP payment id) to the test's provider-events topic.
    It deliberately does NOT deduplicate, so payment-state's own dedup is what is tested.

    The real gateway publishes to the fixed topic ``psp.provider-events`` shared by everyone on this
    Kafka, so tests that need their own topic use this stand-in instead.
    """

    def __init__(self, publisher: Publisher, topic: str, secrets: list[str]) -> None:
        self.publisher, self.topic, self.secrets = publisher, topic, secrets
        self.received: list[tuple[str, str]] = []  # (event id, type)
        self.rejected = 0
        self.before_answer: Callable[[dict[str, Any]], None] = lambda _event: None
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    def start(self) -> GatewayStandIn:
        self._server = serve_posts(lambda headers, raw: self.receive(headers.get(SIGNATURE_HEADER), raw))
        return self

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/providers/simpsp/webhooks"

    def receive(self, header: str | None, raw: bytes) -> int:
        if not isinstance(
            verify_signature(header, raw, self.secrets, now_s=int(time.time())), SignatureVerified
        ):
            with self._lock:
                self.rejected += 1
            return 400
        event = json.loads(raw)
        obj = event["data"]["object"]
        intent_id = obj["id"] if obj["object"] == "payment_intent" else obj["payment_intent"]
        body = provider_event(event["id"], event["type"], raw, provider_payment_id=intent_id)
        self.publisher.send([self.publisher.message(self.topic, "ProviderEventReceived", intent_id, body)])
        with self._lock:
            self.received.append((event["id"], event["type"]))
        self.before_answer(event)
        return 200

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
