"""One manager session: one keep-alive HTTP(S) connection, authenticated, used one call at a time.

The Web API session *is* the connection (reference §1.5): a new connection is a new, unauthenticated
session. So a ``Session`` is never repaired: on any failure it is closed and the gateway opens a new
one (with a new generation number). Two guards keep a request off a connection the server has left:
- before each call, a connection the peer has closed (readable while idle) counts as dead;
- ``http.client`` would silently reconnect a closed connection without authenticating; a session
  whose socket is gone is dead instead.

Timeouts: ``connect_timeout_s`` bounds the TCP/TLS connect, ``timeout_s`` each socket read or write
of a call. Answers are bounded in size.
"""

from __future__ import annotations

import http.client
import select
import socket
import ssl
import time
from dataclasses import dataclass
from http import HTTPStatus
from typing import Final
from urllib.parse import urlsplit

from backbone import tracing
from backbone.mt5 import auth
from backbone.mt5.protocol import Answer, AnswerError, parse_answer, query

ANSWER_BYTES_MAX: Final = 8 * 1024 * 1024
READ_CHUNK_BYTES: Final = 64 * 1024
CLIENT_VERSION: Final = 484
USER_AGENT: Final = "MetaTrader 5 Web API/5.2005 (backbone.mt5)"


@dataclass(frozen=True, slots=True)
class Endpoint:
    scheme: str
    host: str
    port: int
    tls: ssl.SSLContext | None

    @classmethod
    def from_url(cls, url: str, ca_file: str | None) -> Endpoint:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"MT5 Web API URL must be http(s)://host:port, got {url!r}")
        default_port = 443 if parts.scheme == "https" else 80
        tls = ssl.create_default_context(cafile=ca_file) if parts.scheme == "https" else None
        return cls(parts.scheme, parts.hostname, parts.port or default_port, tls)


@dataclass(frozen=True, slots=True)
class TransportFailure:
    """The call did not produce a usable answer. ``sent`` is False only if no byte left us."""

    reason: str
    sent: bool
    retcode: int | None = None


@dataclass(frozen=True, slots=True)
class Credentials:
    login: int
    pw_hash: bytes
    agent: str


class Session:
    def __init__(self, conn: http.client.HTTPConnection, generation: int, timeout_s: float) -> None:
        self._conn, self.generation, self._timeout_s = conn, generation, timeout_s
        self.last_used_s = time.monotonic()
        self._dead = False

    @classmethod
    def open(
        cls,
        endpoint: Endpoint,
        creds: Credentials,
        generation: int,
        connect_timeout_s: float,
        timeout_s: float,
    ) -> Session | TransportFailure:
        """Connect and authenticate; a failure leaves nothing open."""
        if endpoint.tls is not None:
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                endpoint.host, endpoint.port, timeout=connect_timeout_s, context=endpoint.tls
            )
        else:
            conn = http.client.HTTPConnection(endpoint.host, endpoint.port, timeout=connect_timeout_s)
        try:
            conn.connect()
        except (OSError, http.client.HTTPException):
            conn.close()
            return TransportFailure("connect_failed", sent=False)
        session = cls(conn, generation, timeout_s)
        failure = session._authenticate(creds)
        if failure is not None:
            session.close()
            return failure
        return session

    def _authenticate(self, creds: Credentials) -> TransportFailure | None:
        start = self.call(
            "auth/start",
            {"version": CLIENT_VERSION, "agent": creds.agent, "login": creds.login, "type": "manager"},
        )
        if isinstance(start, TransportFailure):
            return TransportFailure(f"auth_{start.reason}", sent=False)
        srv_rand = start.body.get("srv_rand")
        if start.retcode != 0 or not auth.is_rand_hex(srv_rand):
            return TransportFailure("auth_refused", sent=False, retcode=start.retcode)
        cli_rand = auth.new_cli_rand()
        answer = self.call(
            "auth/answer",
            {"srv_rand_answer": auth.rand_answer(creds.pw_hash, str(srv_rand)), "cli_rand": cli_rand},
        )
        if isinstance(answer, TransportFailure):
            return TransportFailure(f"auth_{answer.reason}", sent=False)
        if answer.retcode != 0:
            return TransportFailure("auth_refused", sent=False, retcode=answer.retcode)
        if not auth.server_answer_ok(creds.pw_hash, cli_rand, answer.body.get("cli_rand_answer")):
            return TransportFailure("auth_server_not_authenticated", sent=False, retcode=1008)
        return None

    @property
    def usable(self) -> bool:
        """Open, not failed, and the server has not closed it while idle."""
        sock = self._conn.sock
        if self._dead or sock is None:
            return False
        if _peer_closed(sock):
            self._dead = True
        return not self._dead

    def call(self, endpoint: str, params: dict[str, str | int]) -> Answer | TransportFailure:
        """One request and its answer. Any failure kills the session (a new one must be opened)."""
        if not self.usable:
            return TransportFailure("session_closed", sent=False)
        path = f"/api/{endpoint}" + (f"?{query(params)}" if params else "")
        self.last_used_s = time.monotonic()
        sock = self._conn.sock
        if sock is not None:
            sock.settimeout(self._timeout_s)
        # A CLIENT span per call, its traceparent on the request (ADR 0012); the answer's retcode
        # or the failure is the span's outcome.
        with tracing.client_span(f"mt5 {endpoint}", {"mt5.endpoint": endpoint}) as trace_headers:
            headers = {"Connection": "keep-alive", "User-Agent": USER_AGENT, **trace_headers}
            try:
                self._conn.request("GET", path, headers=headers)
            except (OSError, http.client.HTTPException):
                failure = self._fail("send_failed")  # some bytes may have left: sent stays True
                tracing.note_failure(failure.reason)
                return failure
            answer = self._read()
            if isinstance(answer, TransportFailure):
                tracing.note_failure(answer.reason)
            return answer

    def _read(self) -> Answer | TransportFailure:
        """The answer, bounded in size whether framed by Content-Length or chunked."""
        try:
            response = self._conn.getresponse()
            raw = _bounded_body(response)
        except TimeoutError:
            return self._fail("timeout")
        except (OSError, http.client.HTTPException):
            return self._fail("disconnected")
        if response.status != HTTPStatus.OK or raw is None:
            return self._fail(
                f"http_{response.status}" if response.status != HTTPStatus.OK else "answer_too_large"
            )
        if response.will_close:
            self._dead = True  # the server said Connection: close; the answer itself still counts
        try:
            return parse_answer(raw)
        except AnswerError:
            return self._fail("unparseable")

    def _fail(self, reason: str) -> TransportFailure:
        self.close()
        return TransportFailure(reason, sent=True)

    def idle_s(self) -> float:
        return time.monotonic() - self.last_used_s

    def close(self) -> None:
        self._dead = True
        self._conn.close()


def _bounded_body(response: http.client.HTTPResponse) -> bytes | None:
    """The whole body, or None beyond ANSWER_BYTES_MAX (checked before reading when announced)."""
    length = response.getheader("Content-Length")
    if length is not None and (not length.isdigit() or int(length) > ANSWER_BYTES_MAX):
        return None
    parts: list[bytes] = []
    size = 0
    while part := response.read(READ_CHUNK_BYTES):
        size += len(part)
        if size > ANSWER_BYTES_MAX:
            return None
        parts.append(part)
    return b"".join(parts)


def _peer_closed(sock: socket.socket) -> bool:
    """True if an idle connection has something to read: a FIN, a TLS close_notify or junk.

    An HTTP server never speaks first, so readable-while-idle means the connection is over. A TLS
    record that carries no application data (a session ticket) is not counted.
    """
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    timeout = sock.gettimeout()
    sock.settimeout(0)
    try:
        sock.recv(1)
    except (BlockingIOError, ssl.SSLWantReadError):
        return False
    except OSError:
        return True
    finally:
        sock.settimeout(timeout)
    return True
