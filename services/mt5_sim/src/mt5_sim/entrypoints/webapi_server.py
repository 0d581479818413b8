"""The Web API listener: keep-alive connections, one session per connection, idle drop.

Each accepted connection gets its own ``SessionState``; requests on it are read and answered one at a
time (no pipelining is needed by any client; a pipelined request simply waits its turn). A
connection that sends nothing for ``idle_timeout_ms`` is closed (reference §6.1: 180 s). Faults that
"drop" close the connection instead of answering. Stopping closes idle connections at once, lets
busy ones finish their request for up to ``grace_s``, then cancels what is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import ssl
import time
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import parse_qsl

from backbone.logs import get_logger

from mt5_sim import metrics
from mt5_sim.application.webapi import Drop, Reply, SessionState, WebApi
from mt5_sim.domain import retcodes
from mt5_sim.domain.params import unescape
from mt5_sim.entrypoints.http11 import HEAD_BYTES_MAX, BadRequest, Request, read_request, response_bytes

TLS_HANDSHAKE_TIMEOUT_S: Final = 10.0
CLOSE_WAIT_S: Final = 2.0
log = get_logger(__name__)


@dataclass(slots=True)
class _Connection:
    session: SessionState
    writer: asyncio.StreamWriter
    task: asyncio.Task[None] | None
    opened_s: float
    busy: bool = False


class WebApiServer:
    def __init__(
        self, api: WebApi, host: str, port: int, *, idle_timeout_ms: int, tls: ssl.SSLContext | None
    ) -> None:
        self._api, self._host, self._port, self._tls = api, host, port, tls
        self._idle_s = idle_timeout_ms / 1000
        self._ids = itertools.count(1)
        self._connections: dict[int, _Connection] = {}
        self._server: asyncio.Server | None = None
        self._stopping = False

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve,
            self._host,
            self._port,
            ssl=self._tls,
            limit=HEAD_BYTES_MAX,
            ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S if self._tls else None,
            reuse_address=True,
        )
        log.info("webapi.listening", host=self._host, port=self._port, tls=self._tls is not None)

    async def stop(self, grace_s: float) -> None:
        self._stopping = True
        if self._server is not None:
            self._server.close()
        for conn in list(self._connections.values()):
            if not conn.busy:
                conn.writer.close()
        deadline = time.monotonic() + grace_s
        while any(c.busy for c in self._connections.values()) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for conn in list(self._connections.values()):
            if conn.task is not None:
                conn.task.cancel()
        await asyncio.sleep(0)

    def sessions(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        return [
            {
                "conn_id": c.session.conn_id,
                "peer": c.session.peer,
                "manager_login": c.session.manager_login,
                "authenticated": c.session.authenticated,
                "requests": c.session.requests,
                "age_ms": int((now - c.opened_s) * 1000),
                "busy": c.busy,
            }
            for c in self._connections.values()
        ]

    def disconnect(self, manager_login: int | None = None) -> int:
        """Abort connections now (all, or one manager's): the client finds its session gone."""
        doomed = [
            c
            for c in self._connections.values()
            if manager_login is None or c.session.manager_login == manager_login
        ]
        for conn in doomed:
            conn.writer.transport.abort()
        return len(doomed)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        conn = _Connection(
            SessionState(next(self._ids), str(peer)), writer, asyncio.current_task(), time.monotonic()
        )
        self._connections[conn.session.conn_id] = conn
        metrics.CONNECTIONS.inc()
        try:
            await self._loop(conn, reader)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, asyncio.CancelledError):
            pass  # the peer went away (or we are stopping): the session ends with the connection
        except Exception:
            # A bug or the database failing mid-request: the client gets no answer (a balance may or
            # may not have committed, which is exactly what the client's lookup is for).
            log.exception("webapi.request_failed", conn_id=conn.session.conn_id)
        finally:
            del self._connections[conn.session.conn_id]
            metrics.CONNECTIONS.dec()
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), CLOSE_WAIT_S)

    async def _loop(self, conn: _Connection, reader: asyncio.StreamReader) -> None:
        while not self._stopping:
            try:
                async with asyncio.timeout(self._idle_s):  # no extra task per request, unlike wait_for
                    request = await read_request(reader)
            except TimeoutError:
                log.info("webapi.idle_drop", conn_id=conn.session.conn_id, idle_ms=int(self._idle_s * 1000))
                return
            except BadRequest as exc:
                await _write(
                    conn.writer, response_bytes(exc.status, str(exc).encode(), "text/plain", keep_alive=False)
                )
                return
            if request is None:
                return
            conn.busy = True
            try:
                keep_open = await self._respond(conn, request)
            finally:
                conn.busy = False
            if not keep_open:
                return

    async def _respond(self, conn: _Connection, request: Request) -> bool:
        started = time.perf_counter()
        conn.session.requests += 1
        endpoint, immediate = _route(request, self._api.endpoints)
        outcome: Reply | Drop | None = immediate
        if outcome is None:
            params = _params(request)
            outcome = (
                await self._api.handle(conn.session, endpoint, params)
                if params is not None
                else Reply(retcodes.ERR_PARAMS)
            )
        metrics.REQUEST_SECONDS.labels(endpoint).observe(time.perf_counter() - started)
        if isinstance(outcome, Drop):
            metrics.REQUESTS.labels(endpoint, "dropped").inc()
            log.info("webapi.dropped", conn_id=conn.session.conn_id, endpoint=endpoint, reason=outcome.reason)
            return False
        metrics.REQUESTS.labels(endpoint, str(outcome.retcode)).inc()
        keep_alive = request.keep_alive and not outcome.close and not self._stopping
        body, content_type = _body(outcome)
        await _write(
            conn.writer, response_bytes(outcome.http_status, body, content_type, keep_alive=keep_alive)
        )
        return keep_alive


def _route(request: Request, endpoints: frozenset[str]) -> tuple[str, Reply | None]:
    """The endpoint name, or an immediate reply for requests no command can take."""
    if not request.path.startswith("/api/"):
        return "unknown", Reply(retcodes.ERR_NOTIMPLEMENT, http_status=404)
    endpoint = request.path.removeprefix("/api/").strip("/")
    if endpoint not in endpoints:
        return "unknown", Reply(retcodes.ERR_NOTIMPLEMENT, http_status=404)
    if request.method not in ("GET", "POST"):
        return endpoint, Reply(retcodes.ERR_PARAMS, http_status=405)
    return endpoint, None


def _params(request: Request) -> dict[str, str] | None:
    """Query (and form-body) parameters: names case-insensitive, values unescaped (reference §5).

    ``None`` when malformed: bad percent-encoding or UTF-8, or a parameter given twice.
    """
    form = request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded")
    params: dict[str, str] = {}
    try:
        sources = [request.query, request.body.decode("utf-8")] if form else [request.query]
        pairs = [p for s in sources for p in parse_qsl(s, keep_blank_values=True, errors="strict")]
    except (UnicodeDecodeError, ValueError):
        return None
    for name, value in pairs:
        key = name.lower()
        if key in params:
            return None
        params[key] = unescape(value)
    return params


def _body(reply: Reply) -> tuple[bytes, str]:
    if reply.raw is not None:
        return reply.raw, "text/html"
    payload: dict[str, Any] = {"retcode": retcodes.retcode_text(reply.retcode), **reply.top}
    if reply.answer is not None:
        payload["answer"] = reply.answer
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode(), "application/json"


async def _write(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(data)
    await writer.drain()
