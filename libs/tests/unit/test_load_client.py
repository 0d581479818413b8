"""Unit tests of the load driver's HTTP client (``backbone.testing.load.KeepAliveHttp``), against a
real HTTP/1.1 server on loopback: requests on one thread share one connection, as a broker's pooled
client would (so bench-e2e does not charge the services a TCP connect per request), and a
connection the server closed is reported as no answer, never as an answer, and replaced."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest
from backbone.testing.load import KeepAliveHttp


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive unless told otherwise
    connections: ClassVar[set[int]] = set()

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length)) if length else None
        _Handler.connections.add(self.client_address[1])  # one client port per connection
        reply = json.dumps({"echo": body, "key": self.headers.get("Idempotency-Key")}).encode()
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        if body == "close":
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    _Handler.connections = set()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_one_thread_reuses_one_connection(server: str) -> None:
    """Three requests from one thread arrive on one connection, each with its own answer and the
    Idempotency-Key it was given."""
    send = KeepAliveHttp(timeout_s=5)
    answers = [send("POST", f"{server}/x?a=1", {"n": n}, key=f"k{n}") for n in range(3)]
    assert answers == [(201, {"echo": {"n": n}, "key": f"k{n}"}) for n in range(3)]
    assert len(_Handler.connections) == 1


def test_a_connection_the_server_closes_is_replaced(server: str) -> None:
    """The server answers and closes ("Connection: close"): the answer counts, and the next request
    opens a new connection instead of writing into a closed one."""
    send = KeepAliveHttp(timeout_s=5)
    assert send("POST", f"{server}/x", "close")[0] == 201
    assert send("POST", f"{server}/x", "again")[0] == 201
    assert len(_Handler.connections) == 2


def test_no_server_is_no_answer() -> None:
    """Nothing listening is an OSError (no answer: the caller repeats with the same key), never a
    status that could be mistaken for an answer."""
    with pytest.raises(OSError, match="no answer"):
        KeepAliveHttp(timeout_s=2)("POST", "http://127.0.0.1:9/x", {})
