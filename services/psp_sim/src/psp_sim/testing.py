"""Test support: the simulator as a real process on free ports, and a real HTTP webhook receiver.

For this service's integration tests, the PSP client's, and any test that needs a PSP (start it with
``python -m psp_sim`` and the env of ``SimProcess.env``). Not used by the running service.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.message import Message
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final

from backbone.psp import PspClient
from backbone.testing.http import serve_posts
from backbone.testing.processes import Proc, wait_until
from backbone.testing.stack import free_port

API_KEY: Final = "sk_test_simpsp_integration"
WEBHOOK_SECRET: Final = "whsec_test_current_0123456789"  # noqa: S105 - a test value, not a secret
FAST_ENV: Final = {
    "PSP_SIM_WEBHOOK_TIMEOUT_MS": "2000",
    "PSP_SIM_WEBHOOK_BACKOFF_INITIAL_MS": "50",
    "PSP_SIM_WEBHOOK_BACKOFF_MAX_MS": "400",
    "PSP_SIM_WEBHOOK_ATTEMPTS_MAX": "6",
    "PSP_SIM_WEBHOOK_POLL_INTERVAL_MS": "50",
    "PSP_SIM_SHUTDOWN_GRACE_MS": "2000",
    "PSP_SIM_DB_POOL_SIZE_MAX": "6",
}


@dataclass(frozen=True)
class Received:
    headers: Mapping[str, str]
    body: bytes

    @property
    def event(self) -> dict[str, Any]:
        document: dict[str, Any] = json.loads(self.body)
        return document


@dataclass
class Receiver:
    """A real HTTP server that records every webhook; ``answer`` picks the status of each request."""

    answer: Callable[[int], int] = lambda _n: 200
    received: list[Received] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    def start(self) -> Receiver:
        self._server = serve_posts(self._record)
        return self

    def _record(self, headers: Message, body: bytes) -> int:
        with self._lock:
            self.received.append(Received(dict(headers.items()), body))
            return self.answer(len(self.received))

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/webhooks"

    def events(self, event_type: str | None = None, intent_id: str | None = None) -> list[Received]:
        with self._lock:
            found = list(self.received)
        return [
            r
            for r in found
            if (event_type is None or r.event["type"] == event_type)
            and (intent_id is None or _intent_of(r.event) == intent_id)
        ]

    def wait_for(self, count: int, timeout_s: float = 10.0, **filters: str) -> list[Received]:
        wait_until(lambda: len(self.events(**filters)) >= count, timeout_s, f"{count} webhooks {filters}")
        return self.events(**filters)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def _intent_of(event: dict[str, Any]) -> str:
    """The lane an event belongs to: its payment intent, or a payout's own id."""
    obj = event["data"]["object"]
    return str(obj["id"] if obj["object"] in ("payment_intent", "payout") else obj["payment_intent"])


class SimProcess:
    """``python -m psp_sim`` on free ports against ``db_url``."""

    def __init__(self, db_url: str, logs_dir: Path, **env: str) -> None:
        self.db_url, self.logs_dir = db_url, logs_dir
        self.api_port, self.control_port = free_port(), free_port()
        self.extra_env = env
        self.proc: Proc | None = None
        self._starts = 0

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def control_url(self) -> str:
        return f"http://127.0.0.1:{self.control_port}"

    def env(self) -> dict[str, str]:
        base = {
            "DATABASE_URL": self.db_url,
            "PSP_SIM_API_KEY": API_KEY,
            "PSP_SIM_WEBHOOK_SECRET": WEBHOOK_SECRET,
            "PSP_SIM_API_HOST": "127.0.0.1",
            "PSP_SIM_API_PORT": str(self.api_port),
            "PSP_SIM_CONTROL_PORT": str(self.control_port),
        }
        return {**base, **FAST_ENV, **self.extra_env}

    def start(self, timeout_s: float = 30.0) -> SimProcess:
        self._starts += 1
        log_path = self.logs_dir / f"psp_sim-{self.api_port}-{self._starts}.log"
        self.proc = Proc(["-m", "psp_sim"], self.env(), log_path)
        self.proc.wait_for_log("psp_sim.started", timeout_s)
        return self

    def terminate(self) -> int:
        assert self.proc is not None
        return self.proc.terminate()

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()

    def client(self, timeout_ms: int = 3000, api_key: str = API_KEY) -> PspClient:
        return PspClient(
            self.api_url, api_key, timeout_ms=timeout_ms, connect_timeout_ms=min(timeout_ms, 1000)
        )

    def control(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        url = self.control_url + path  # always http://127.0.0.1:<port>
        request = urllib.request.Request(url, data=data, method=method, headers=headers)  # noqa: S310 - local
        try:
            with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - local test URL
                return response.status, _decode(response.read(), response.headers.get_content_type())
        except urllib.error.HTTPError as error:
            return error.code, _decode(error.read(), error.headers.get_content_type())

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        status, document = self.control(method, path, body)
        assert 200 <= status < 300, (status, document)
        return document

    def fault(self, **spec: Any) -> dict[str, Any]:
        result: dict[str, Any] = self.ok("POST", "/control/faults", spec)
        return result

    def deliveries(self, **filters: str) -> list[dict[str, Any]]:
        query = "&".join(f"{k}={v}" for k, v in filters.items())
        return list(self.ok("GET", f"/control/webhook-deliveries?{query}")["data"])

    def payout_count(self, reference: str) -> int:
        """How many payouts carry our reference (the exactly-one checks of withdrawal tests)."""
        return int(self.ok("GET", f"/control/payouts/count?reference={reference}")["count"])

    def reset(self, webhook_url: str) -> None:
        self.ok("POST", "/control/reset")
        self.ok("PATCH", "/control/config", {"webhook_url": webhook_url})


def _decode(raw: bytes, content_type: str) -> Any:
    if content_type == "application/json":
        return json.loads(raw) if raw else None
    return raw.decode()
