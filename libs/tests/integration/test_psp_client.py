"""The PSP client's transport against real HTTP servers that misbehave on purpose: whatever goes wrong
on the wire, a write answers NoAnswer (never a failure, never a silent retry), a read is retried only
when that is harmless, and connections are kept alive and bounded in time."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from backbone.psp import Applied, Found, NoAnswer, PspClient
from backbone.testing.stack import free_port

INTENT = {
    "id": "pi_1",
    "object": "payment_intent",
    "status": "requires_capture",
    "amount_minor": 1000,
    "amount_capturable_minor": 1000,
    "amount_received_minor": 0,
    "amount_refunded_minor": 0,
    "currency": "EUR",
    "capture_method": "manual",
    "reference": "pay_1",
    "created": 1_800_000_000,
}


class Script:
    """What the server does for each request (by 1-based request number), and what it saw."""

    def __init__(self, behave: Callable[[int, BaseHTTPRequestHandler], None]) -> None:
        self.behave = behave
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        self.connections = 0
        self.lock = threading.Lock()


def send_json(handler: BaseHTTPRequestHandler, status: int, document: Any) -> None:
    body = json.dumps(document).encode()
    try:
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
    except (BrokenPipeError, ConnectionResetError):
        handler.close_connection = True  # the client gave up first (the timeout tests)


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[[int, BaseHTTPRequestHandler], None]], tuple[str, Script]]]:
    servers: list[ThreadingHTTPServer] = []

    def start(behave: Callable[[int, BaseHTTPRequestHandler], None]) -> tuple[str, Script]:
        script = Script(behave)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with script.lock:
                    script.connections += 1

            def _any(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with script.lock:
                    script.requests.append((self.command, self.path, dict(self.headers.items()), body))
                    number = len(script.requests)
                script.behave(number, self)

            do_GET = do_POST = _any  # noqa: N815 - http.server's method names

            def log_message(self, format: str, *args: Any) -> None:
                return

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}", script

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_writes_carry_the_operation_id_and_reuse_one_connection(serve: Any) -> None:
    """Idempotency-Key = our operation id, bearer auth, our JSON fields; five calls, one TCP connection."""
    url, script = serve(lambda _n, h: send_json(h, 200, INTENT))
    with PspClient(url, "sk_test_1") as client:
        results = [client.capture_intent(f"op_{i}", "pi_1", amount_minor=700) for i in range(5)]
    assert all(isinstance(r, Applied) for r in results)
    method, path, headers, body = script.requests[0]
    assert (method, path) == ("POST", "/v1/payment_intents/pi_1/capture")
    assert headers["Idempotency-Key"] == "op_0" and headers["Authorization"] == "Bearer sk_test_1"
    assert json.loads(body) == {"amount_to_capture_minor": 700}
    assert script.connections == 1


def test_a_slow_answer_is_unknown_within_the_deadline(serve: Any) -> None:
    """The server answers after 3 s; the client's 300 ms deadline makes it NoAnswer("timeout")."""
    url, _ = serve(lambda _n, h: (time.sleep(3), send_json(h, 200, INTENT)))
    with PspClient(url, "k", timeout_ms=300, connect_timeout_ms=300) as client:
        assert client.capture_intent("op_1", "pi_1") == NoAnswer("timeout")


def test_a_dripping_answer_cannot_stretch_the_deadline(serve: Any) -> None:
    """Headers at once, then one body byte every 100 ms for 3 s: still NoAnswer("timeout") at 500 ms."""

    def drip(_n: int, h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Length", "30")
        h.end_headers()
        for _ in range(30):
            try:
                h.wfile.write(b" ")
                h.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                return
            time.sleep(0.1)

    url, _ = serve(drip)
    with PspClient(url, "k", timeout_ms=500, connect_timeout_ms=300) as client:
        assert client.retrieve_intent("pi_1") == NoAnswer("timeout")


def test_connection_cut_without_an_answer_is_unknown_and_not_retried(serve: Any) -> None:
    """The server reads the write and closes the socket: NoAnswer, and the write was sent exactly once."""

    def cut(_n: int, h: BaseHTTPRequestHandler) -> None:
        h.connection.shutdown(socket.SHUT_RDWR)
        h.close_connection = True

    url, script = serve(cut)
    with PspClient(url, "k") as client:
        result = client.create_intent("op_1", amount_minor=100, currency="EUR", reference="pay_1")
    assert isinstance(result, NoAnswer) and result.reason.startswith("connection_error")
    assert len(script.requests) == 1


def test_connection_refused_is_unknown() -> None:
    """Nobody listening: NoAnswer, for a write and for a read."""
    port = free_port()  # below the ephemeral range: no outgoing connection takes it meanwhile
    with PspClient(f"http://127.0.0.1:{port}", "k", timeout_ms=500, connect_timeout_ms=300) as client:
        assert isinstance(client.cancel_intent("op_1", "pi_1"), NoAnswer)
        assert isinstance(client.retrieve_intent("pi_1"), NoAnswer)


def test_server_errors_and_garbage_are_unknown(serve: Any) -> None:
    """A 500 with an error body, a 502 from a proxy, and a 200 that is not an intent: all NoAnswer."""
    answers = {
        1: (500, {"error": {"code": "api_error", "message": "x"}}),
        2: (502, "<html>"),
        3: (200, {"id": 5}),
    }
    url, _ = serve(lambda n, h: send_json(h, *answers[n]))
    with PspClient(url, "k") as client:
        results = [client.capture_intent(f"op_{i}", "pi_1") for i in range(3)]
    assert [r.__class__ for r in results] == [NoAnswer, NoAnswer, NoAnswer]


def test_stale_keep_alive_read_is_retried_but_a_write_is_not(serve: Any) -> None:
    """The server drops each connection silently after one answer. A read on the stale pooled
    connection is retried once on a new one (Found); a write on it is NoAnswer and not resent."""

    def once_per_connection(_n: int, h: BaseHTTPRequestHandler) -> None:
        send_json(h, 200, INTENT)
        h.close_connection = True  # closes after answering, without a Connection: close header

    url, script = serve(once_per_connection)
    with PspClient(url, "k") as client:
        assert isinstance(client.retrieve_intent("pi_1"), Found)
        time.sleep(0.05)
        assert isinstance(client.retrieve_intent("pi_1"), Found)  # stale socket, retried
        time.sleep(0.05)
        write = client.capture_intent("op_1", "pi_1")
    posts = [r for r in script.requests if r[0] == "POST"]
    assert isinstance(write, NoAnswer) and posts == []
