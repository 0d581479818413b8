"""A small synchronous HTTP/1.1 keep-alive pool on ``http.client`` with a deadline per request.

Bounded everywhere: connect timeout, a total deadline per request (each socket operation gets the time
left, so a server that drips its answer cannot stretch it), a response body limit, a pool size limit,
an idle limit (a connection idle longer than ``idle_timeout_ms`` is closed instead of reused, well
under the server's keep-alive, so a stale socket is rare). Failures are values (``Failure(reason)``),
never exceptions.

Retries: none for writes. A write whose answer was lost may have been applied; the caller decides
(status query, or the same operation id again). A read is retried once, on a fresh connection, when a
reused connection fails: reads change nothing.
"""

from __future__ import annotations

import http.client
import threading
import time
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from backbone import tracing
from backbone.invariants import invariant

BODY_MAX_BYTES: Final = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes


@dataclass(frozen=True, slots=True)
class Failure:
    reason: str
    reused: bool = False  # the connection came from the pool (a stale socket is possible)


class _DeadlineExceeded(Exception):
    pass


@dataclass(frozen=True, slots=True)
class TransportSettings:
    timeout_ms: int = 5000
    connect_timeout_ms: int = 2000
    pool_size_max: int = 8
    idle_timeout_ms: int = 20_000

    def __post_init__(self) -> None:
        invariant(0 < self.connect_timeout_ms <= self.timeout_ms <= 600_000, "0 < connect <= total <= 600 s")
        invariant(1 <= self.pool_size_max <= 256, "pool size 1..256")
        invariant(self.idle_timeout_ms > 0, "idle timeout positive")


class HttpPool:
    def __init__(self, base_url: str, settings: TransportSettings) -> None:
        parts = urlsplit(base_url)
        invariant(
            parts.scheme in ("http", "https") and bool(parts.hostname), f"bad PSP base URL {base_url!r}"
        )
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")
        self._s = settings
        self._idle: list[tuple[http.client.HTTPConnection, float]] = []
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn, _ in idle:
            conn.close()

    def request(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> Answer | Failure:
        # A CLIENT span per request (the route's first segment names it: ids stay out of names), its
        # traceparent on the request (ADR 0012).
        name = f"psp {method} /{path.lstrip('/').split('/', 2)[0]}"
        with tracing.client_span(name, {"http.request.method": method}) as trace_headers:
            headers = {**headers, **trace_headers}
            result = self._once(method, path, body, headers)
            if isinstance(result, Failure) and result.reused and method == "GET":
                result = self._once(method, path, body, headers, fresh=True)
            if isinstance(result, Failure):
                tracing.note_failure(result.reason)
            else:
                tracing.note_status(result.status)
            return result

    def _take(self, fresh: bool) -> tuple[http.client.HTTPConnection, bool]:
        now = time.monotonic()
        with self._lock:
            while self._idle and not fresh:
                conn, since = self._idle.pop()
                if (now - since) * 1000 < self._s.idle_timeout_ms:
                    return conn, True
                conn.close()
        timeout_s = self._s.connect_timeout_ms / 1000
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        return cls(self._host, self._port, timeout=timeout_s), False

    def _give_back(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < self._s.pool_size_max:
                self._idle.append((conn, time.monotonic()))
                return
        conn.close()

    def _once(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str], *, fresh: bool = False
    ) -> Answer | Failure:
        deadline = time.monotonic() + self._s.timeout_ms / 1000
        conn, reused = self._take(fresh)
        try:
            if conn.sock is None:
                conn.connect()
            _arm(conn, deadline)
            conn.request(method, self._prefix + path, body=body, headers=headers)
            _arm(conn, deadline)
            response = conn.getresponse()
            data = _read_body(conn, response, deadline)
        except (TimeoutError, _DeadlineExceeded):
            conn.close()
            return Failure("timeout", reused)
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            return Failure(f"connection_error: {type(exc).__name__}", reused)
        if data is None:
            conn.close()
            return Failure("response_too_large")
        if response.will_close or not response.isclosed():
            conn.close()  # not reusable: the server closes it, or the body was not read to its end
        else:
            self._give_back(conn)
        return Answer(response.status, data)


def _read_body(
    conn: http.client.HTTPConnection, response: http.client.HTTPResponse, deadline: float
) -> bytes | None:
    """The whole body, each read bounded by the time left (a server dripping bytes cannot stretch the
    deadline); None if it exceeds BODY_MAX_BYTES."""
    chunks: list[bytes] = []
    size = 0
    while True:
        _arm(conn, deadline)
        chunk = response.read1(65_536)
        if not chunk:
            response.read()  # nothing left to read; marks the response complete (the socket is reusable)
            return b"".join(chunks)
        size += len(chunk)
        if size > BODY_MAX_BYTES:
            return None
        chunks.append(chunk)


def _arm(conn: http.client.HTTPConnection, deadline: float) -> None:
    """Give the next socket operation only the time left before the request's deadline."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise _DeadlineExceeded
    if conn.sock is not None:
        conn.sock.settimeout(left)
