"""Unit tests of how the gateway reads an answer's body (backbone.mt5.transport): both HTTP framings
a server may use (Content-Length or chunked; which one a real MT5 access server uses is not
documented), and a size bound either way, so a huge or endless answer cannot exhaust memory."""

from __future__ import annotations

import http.client
import socket

import pytest
from backbone.mt5 import transport

BODY = b'{"retcode":"0 Done","answer":{"Ticket":"1"}}'


def response(raw: bytes) -> http.client.HTTPResponse:
    ours, theirs = socket.socketpair()
    theirs.sendall(raw)
    theirs.close()
    resp = http.client.HTTPResponse(ours)
    resp.begin()
    return resp


def chunked(body: bytes, size: int) -> bytes:
    chunks = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"


def test_content_length_body() -> None:
    """An answer framed by Content-Length is read whole."""
    raw = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
    assert transport._bounded_body(response(raw)) == BODY


def test_chunked_body() -> None:
    """A chunked answer is reassembled whole."""
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(BODY, 7)
    assert transport._bounded_body(response(raw)) == BODY


def test_bodies_beyond_the_bound_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Over the bound: refused before reading when announced, after the bound when chunked."""
    monkeypatch.setattr(transport, "ANSWER_BYTES_MAX", 20)
    monkeypatch.setattr(transport, "READ_CHUNK_BYTES", 8)
    announced = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
    assert transport._bounded_body(response(announced)) is None
    streamed = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(BODY, 5)
    assert transport._bounded_body(response(streamed)) is None
    bogus = b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n"
    assert transport._bounded_body(response(bogus)) is None
