"""The PSP simulator as a real process (``python -m psp_sim``; see services/psp_sim/README.md) and a
stand-in for the webhook gateway in front of it."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final

from backbone.invariants import invariant
from backbone.psp import HEADER as SIGNATURE_HEADER
from backbone.psp import PspClient, SignatureVerified, verify_signature
from backbone.testing.http import serve_posts
from backbone.testing.processes import Proc
from backbone.testing.stack import free_port

from payment_state.testing.kafka import Publisher
from payment_state.testing.psp_objects import provider_event

PSP_API_KEY: Final = "sk_test_payment_state_0123"
PSP_WEBHOOK_SECRET: Final = "whsec_payment_state_current_01"  # noqa: S105 - a test value
PSP_SIM_MIGRATIONS: Final = Path(__file__).resolve().parents[4] / "psp_sim" / "migrations"


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

    def payout_count(self, reference: str) -> int:
        """How many payouts the simulator holds under this reference (our withdrawal id)."""
        return int(self.control("GET", f"/control/payouts/count?reference={reference}")["count"])

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
        if obj["object"] == "payout":  # keyed by our withdrawal id (the reference), no payment id
            key, intent_id = str(obj.get("reference") or obj["id"]), None
        else:
            intent_id = obj["id"] if obj["object"] == "payment_intent" else obj["payment_intent"]
            key = intent_id
        body = provider_event(event["id"], event["type"], raw, provider_payment_id=intent_id)
        self.publisher.send([self.publisher.message(self.topic, "ProviderEventReceived", key, body)])
        with self._lock:
            self.received.append((event["id"], event["type"]))
        self.before_answer(event)
        return 200

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
