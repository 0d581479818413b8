"""Liveness, readiness and Prometheus metrics over HTTP.

``Health`` holds named readiness checks (set by the process as its dependencies come and go) and a
heartbeat per loop that does the work: the consumer's poll loop, the relay's, each worker lane, the
HTTP server's own event loop. ``/healthz`` fails when any loop has not beaten within
``liveness_timeout_ms`` (a wedged loop, or a handler stuck inside one, should be restarted), and
before any loop has beaten once that long after start; ``/readyz`` fails while any check is not
ready (a standby relay or a consumer without its database is alive but not ready), and ``/metrics``
serves the Prometheus registry. A loop that ends on purpose (a lane shutting down) calls
``forget``.

The liveness timeout comes from ``HEALTH_LIVENESS_TIMEOUT_MS`` (``Health.configured()``; default
60 s): longer than any step a loop takes between beats (a consumer's batch, a worker's MT5 call
budget, a relay's delivery timeout), shorter than an operator's patience with a frozen process.

Synchronous processes (relay, consumers) serve these with ``serve_health`` on a daemon thread (which
refuses card data in the path, query or headers like every other HTTP server of the product,
``backbone.carddata``); aiohttp services mount ``aiohttp_routes`` on ``backbone.http.service_app``.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final
from urllib.parse import parse_qsl, unquote, unquote_plus

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

from backbone.carddata import CARD_DATA_CODE, CARD_DATA_MESSAGE, find_in_request
from backbone.settings import load_settings_or_exit, setting

MAIN_LOOP: Final = "main"


@dataclass(frozen=True)
class HealthSettings:
    liveness_timeout_ms: int = setting(
        "HEALTH_LIVENESS_TIMEOUT_MS", 60_000, doc="a loop silent this long makes /healthz fail"
    )


class Health:
    """Thread-safe readiness checks plus one liveness heartbeat per loop."""

    def __init__(self, liveness_timeout_ms: int = 60_000) -> None:
        self._lock = threading.Lock()
        self._checks: dict[str, tuple[bool, str]] = {}
        self._beats: dict[str, float] = {}
        self._started = time.monotonic()
        self._liveness_timeout_s = liveness_timeout_ms / 1000

    @classmethod
    def configured(cls) -> Health:
        """A Health with the liveness timeout from the environment (exit 2 if it is malformed)."""
        return cls(load_settings_or_exit(HealthSettings).liveness_timeout_ms)

    @property
    def liveness_timeout_s(self) -> float:
        return self._liveness_timeout_s

    def set(self, name: str, ready: bool, detail: str = "") -> None:
        with self._lock:
            self._checks[name] = (ready, detail)

    def beat(self, loop: str = MAIN_LOOP) -> None:
        self._beats[loop] = time.monotonic()  # one dict store: atomic under the GIL

    def forget(self, loop: str) -> None:
        """``loop`` ended on purpose: it no longer counts for liveness."""
        with self._lock:
            self._beats.pop(loop, None)

    def liveness(self) -> tuple[bool, dict[str, Any]]:
        now = time.monotonic()
        with self._lock:
            beats = dict(self._beats)
        if not beats:
            age_s = now - self._started
            return age_s <= self._liveness_timeout_s, {"last_beat_age_ms": int(age_s * 1000), "loops": {}}
        ages = {loop: now - at for loop, at in beats.items()}
        oldest_s = max(ages.values())
        loops = {loop: int(age * 1000) for loop, age in sorted(ages.items())}
        return oldest_s <= self._liveness_timeout_s, {
            "last_beat_age_ms": int(oldest_s * 1000),
            "loops": loops,
        }

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        with self._lock:
            checks = dict(self._checks)
        ready = bool(checks) and all(ok for ok, _ in checks.values())
        return ready, {name: {"ready": ok, "detail": detail} for name, (ok, detail) in checks.items()}


def _answer(ok: bool, body: dict[str, Any]) -> tuple[int, bytes]:
    return (200 if ok else 503), json.dumps({"ok": ok, **body}).encode()


def serve_health(
    health: Health, host: str, port: int, registry: CollectorRegistry = REGISTRY
) -> ThreadingHTTPServer:
    """Serve /healthz, /readyz and /metrics on a daemon thread; returns the server (for .shutdown())."""

    class _Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path, _, query = self.path.partition("?")
            pairs = [*parse_qsl(query, keep_blank_values=True), ("", unquote_plus(query))]
            if find_in_request(unquote(path), pairs, self.headers.items(), None) is not None:
                body = {"error": {"code": CARD_DATA_CODE, "message": CARD_DATA_MESSAGE}}
                self._send(400, json.dumps(body).encode(), "application/json")
            elif path == "/metrics":
                self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                self._send(*_answer(*health.liveness()), "application/json")
            elif path == "/readyz":
                self._send(*_answer(*health.readiness()), "application/json")
            else:
                self._send(404, b'{"error":"not found"}', "application/json")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return  # probes every few seconds would drown the structured logs

    server = ThreadingHTTPServer((host, port), _Handler)
    threading.Thread(target=server.serve_forever, name="health-http", daemon=True).start()
    return server


def aiohttp_routes(health: Health, registry: CollectorRegistry = REGISTRY) -> list[web.RouteDef]:
    """The same three endpoints for an aiohttp application."""

    async def healthz(_: web.Request) -> web.Response:
        status, body = _answer(*health.liveness())
        return web.Response(status=status, body=body, content_type="application/json")

    async def readyz(_: web.Request) -> web.Response:
        status, body = _answer(*health.readiness())
        return web.Response(status=status, body=body, content_type="application/json")

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    return [web.get("/healthz", healthz), web.get("/readyz", readyz), web.get("/metrics", metrics)]
