"""Test and benchmark support for the gateway; production code never imports it.

- ``psp_signature``: the ``Simpsp-Signature`` header computed from the PSP's written contract with
  ``hmac`` directly (not with ``domain.signatures``), so tests check two implementations against
  each other;
- ``webhook_body``: PSP events of each shape (payment intent, refund, dispute, no payment);
- ``stripe_event``: a Stripe event as Stripe documents it (signed in tests by the official SDK);
- ``Gateway``: a gateway process with its database, an HTTP client and a few queries.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backbone.postgres import connect
from backbone.testing.processes import Proc, wait_until

MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"  # services/webhook_gateway/migrations
CURRENT = "whsec_it_current_0123456789"
PREVIOUS = "whsec_it_previous_0123456789"
WEBHOOKS = "/providers/simpsp/webhooks"
STRIPE_CURRENT = "whsec_it_stripe_current_0123456789"
STRIPE_PREVIOUS = "whsec_it_stripe_previous_0123456789"
STRIPE_WEBHOOKS = "/providers/stripe/webhooks"


def stripe_event(
    event_id: str, event_type: str = "payment_intent.succeeded", obj: dict[str, Any] | None = None
) -> bytes:
    """A Stripe event as Stripe documents it ("The Event object", a snapshot event of API version
    2026-10-28), by default about a captured payment intent of ours."""
    if obj is None:
        obj = {
            "id": "pi_3MtwBwLkdIwHu7ix28a3tqPa",
            "object": "payment_intent",
            "amount": 2000,
            "amount_capturable": 0,
            "amount_received": 2000,
            "capture_method": "manual",
            "currency": "eur",
            "created": 1680800504,
            "status": "succeeded",
            "livemode": False,
            "metadata": {"reference": "pay_it", "payment_id": "pay_it"},
            "latest_charge": "ch_3MtwBwLkdIwHu7ix28a3tqPa",
            "payment_method": "pm_1MtwBwLkdIwHu7ixik1ZeFq0",
        }
    event = {
        "id": event_id,
        "object": "event",
        "api_version": "2026-10-28.endive",
        "created": int(time.time()),
        "data": {"object": obj},
        "livemode": False,
        "pending_webhooks": 1,
        "request": {"id": "req_8K7iFeaN3Gg0bO", "idempotency_key": "op_it"},
        "type": event_type,
    }
    return json.dumps(event, indent=2).encode()  # Stripe sends pretty-printed JSON


def psp_signature(secret: str, raw: bytes, t: int | None = None) -> str:
    """``Simpsp-Signature`` as the PSP computes it: HMAC-SHA256(secret, f"{t}." + raw body)."""
    t = int(time.time()) if t is None else t
    digest = hmac.new(secret.encode(), f"{t}.".encode() + raw, hashlib.sha256).hexdigest()
    return f"t={t},v1={digest}"


def webhook_body(event_id: str, payment_id: str | None = "pi_it", kind: str = "payment_intent") -> bytes:
    """A PSP event: a payment intent (its id is the payment id), a refund or a dispute (whose
    payment_intent is), a payout (``payment_id`` is its own ``po_`` id), or - with payment_id None - a
    balance event that names no payment."""
    if payment_id is None:
        obj: dict[str, Any] = {"object": "balance", "available": [{"amount": 1, "currency": "usd"}]}
    elif kind == "payout":
        obj = {
            "object": "payout",
            "id": payment_id,
            "status": "paid",
            "amount_minor": 2500,
            "currency": "EUR",
            "destination": "pm_card_visa",
            "reference": f"wd_{event_id}",
        }
    elif kind == "payment_intent":
        obj = {"object": "payment_intent", "id": payment_id, "amount": 12_345, "currency": "usd"}
    else:
        obj = {"object": kind, "id": f"{kind[:2]}_{event_id}", "payment_intent": payment_id, "amount": 100}
    event = {
        "id": event_id,
        "type": "payout.paid" if kind == "payout" else f"{obj['object']}.updated",
        "created": int(time.time()),
        "data": {"object": obj},
    }
    return json.dumps(event).encode()


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict[str, Any]
    headers: dict[str, str]

    @property
    def code(self) -> str | None:
        error = self.body.get("error")
        return error.get("code") if isinstance(error, dict) else None


@dataclass
class Gateway:
    """One gateway process with its own database."""

    db_url: str
    port: int
    proc: Proc
    procs: list[Proc] = field(default_factory=list)

    def post(
        self,
        raw: bytes,
        signature: str | None = None,
        *,
        path: str = WEBHOOKS,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        all_headers = {"Content-Type": "application/json", **(headers or {})}
        if signature is not None:
            all_headers["Simpsp-Signature"] = signature
        return self.request("POST", path, raw, all_headers)

    def deliver(self, raw: bytes, secret: str = CURRENT) -> Answer:
        """What the PSP does: sign now with ``secret`` and POST."""
        return self.post(raw, psp_signature(secret, raw))

    def request(
        self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> Answer:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            response = conn.getresponse()
            payload = response.read()
            parsed = (
                json.loads(payload)
                if response.getheader("Content-Type", "").startswith("application/json")
                else {}
            )
            return Answer(response.status, parsed, {k.lower(): v for k, v in response.getheaders()})
        finally:
            conn.close()

    def text(self, path: str) -> str:
        """GET ``path`` and return the body as text (for /metrics)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("GET", path)
            return conn.getresponse().read().decode()
        finally:
            conn.close()

    def scalar(self, sql: str, *params: Any) -> Any:
        with connect(self.db_url, autocommit=True) as conn:
            row = conn.execute(sql, params).fetchone()
        return None if row is None else row[0]

    def rows(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with connect(self.db_url, autocommit=True) as conn:
            return conn.execute(sql, params).fetchall()

    def receipts(self, event_id: str) -> int:
        return int(self.scalar("SELECT count(*) FROM provider_events WHERE provider_event_id = %s", event_id))

    def outbox_rows(self, event_id: str) -> int:
        return int(
            self.scalar(
                "SELECT count(*) FROM outbox o JOIN provider_events e ON e.outbox_event_id = o.event_id"
                " WHERE e.provider_event_id = %s",
                event_id,
            )
        )

    def total(self, table: str) -> int:
        return int(self.scalar(f"SELECT count(*) FROM {table}"))


def gateway_env(db_url: str, port: int, **overrides: str) -> dict[str, str]:
    return {
        "DATABASE_URL": db_url,
        "SIMPSP_WEBHOOK_SECRET": CURRENT,
        "SIMPSP_WEBHOOK_SECRET_PREVIOUS": PREVIOUS,
        "STRIPE_WEBHOOK_SECRET": STRIPE_CURRENT,
        "STRIPE_WEBHOOK_SECRET_PREVIOUS": STRIPE_PREVIOUS,
        "HTTP_HOST": "127.0.0.1",
        "HTTP_PORT": str(port),
        "WEBHOOK_BODY_MAX_BYTES": "65536",
        "WEBHOOK_BODY_TIMEOUT_MS": "1000",
        "DB_TIMEOUT_MS": "1500",
        "DB_PROBE_INTERVAL_MS": "200",
        "SHUTDOWN_GRACE_MS": "10000",
        "OUTBOX_POLL_INTERVAL_MS": "200",
        "OUTBOX_DELIVERY_TIMEOUT_MS": "10000",
        "OUTBOX_STANDBY_RETRY_MS": "200",
        **overrides,
    }


def wait_ready(gateway: Gateway, timeout_s: float = 30) -> None:
    def ready() -> bool:
        try:
            return gateway.request("GET", "/readyz").status == 200
        except OSError:
            return False

    wait_until(ready, timeout_s, "gateway /readyz", alive=lambda: gateway.proc.popen.poll() is None)
