"""A small HTTP/1.1 server-side codec on asyncio streams: one request at a time per connection.

The simulator owns its connections on purpose: the Web API session *is* the connection, and faults
must be able to close it at an exact point (after a commit, instead of an answer). Limits: a request
head of at most ``HEAD_BYTES_MAX`` (the stream's limit), a body of at most ``BODY_BYTES_MAX`` with a
Content-Length; chunked request bodies are refused (501), as is anything that is not HTTP/1.x.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Final

HEAD_BYTES_MAX: Final = 16 * 1024
BODY_BYTES_MAX: Final = 1024 * 1024
HEADERS_MAX: Final = 100
_REASONS: Final = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    501: "Not Implemented",
    505: "HTTP Version Not Supported",
}


class BadRequest(Exception):
    """A request we cannot parse; answered with ``status`` and the connection closed."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    query: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    keep_alive: bool


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    """The next request, ``None`` at a clean end of stream, or BadRequest."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial.strip():
            raise BadRequest(400, "truncated request head") from exc
        return None
    except asyncio.LimitOverrunError as exc:
        raise BadRequest(431, "request head too large") from exc
    method, target, version, headers = _parse_head(head)
    if "transfer-encoding" in headers:
        raise BadRequest(501, "chunked request bodies are not supported")
    body = await reader.readexactly(_content_length(headers)) if "content-length" in headers else b""
    path, _, query = target.partition("?")
    connection = headers.get("connection", "").lower()
    keep_alive = "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection
    return Request(method, path, query, headers, body, keep_alive)


def _parse_head(head: bytes) -> tuple[str, str, str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[1].startswith("/"):
        raise BadRequest(400, "malformed request line")
    method, target, version = parts
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise BadRequest(505, "only HTTP/1.0 and HTTP/1.1")
    header_lines = [line for line in lines[1:] if line]
    if len(header_lines) > HEADERS_MAX:
        raise BadRequest(431, "too many header fields")
    headers: dict[str, str] = {}
    for line in header_lines:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise BadRequest(400, "malformed header field")
        headers[name.lower()] = value.strip()
    return method, target, version, headers


def _content_length(headers: dict[str, str]) -> int:
    raw = headers["content-length"]
    if not raw.isdigit():
        raise BadRequest(400, "malformed Content-Length")
    length = int(raw)
    if length > BODY_BYTES_MAX:
        raise BadRequest(413, "request body too large")
    return length


def response_bytes(status: int, body: bytes, content_type: str, *, keep_alive: bool) -> bytes:
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n"
    )
    return head.encode("latin-1") + body
