"""Unit tests of the simulator's HTTP/1.1 request reader and of the JSON objects it answers with."""

from __future__ import annotations

import asyncio
from decimal import Decimal

import pytest
from mt5_sim.domain.model import Deal, deal_json, money_text, time_text
from mt5_sim.entrypoints.http11 import BadRequest, read_request


def read(data: bytes, limit: int = 16 * 1024) -> object:
    async def run() -> object:
        reader = asyncio.StreamReader(limit=limit)
        reader.feed_data(data)
        reader.feed_eof()
        return await read_request(reader)

    return asyncio.run(run())


def test_keep_alive_request_and_clean_end() -> None:
    """HTTP/1.1 keeps the connection by default, ``Connection: close`` ends it; EOF is not an error."""
    request = read(b"GET /api/test/access?x=1 HTTP/1.1\r\nHost: a\r\n\r\n")
    assert request.path == "/api/test/access" and request.query == "x=1" and request.keep_alive  # type: ignore[attr-defined]
    assert not read(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n").keep_alive  # type: ignore[attr-defined]
    assert not read(b"GET / HTTP/1.0\r\n\r\n").keep_alive  # type: ignore[attr-defined]
    assert read(b"") is None


def test_body_by_content_length() -> None:
    """A POST body is read by its Content-Length."""
    request = read(b"POST /api/quit HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc")
    assert request.body == b"abc"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"GET /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 501),
        (b"GET /x HTTP/2\r\n\r\n", 505),
        (b"BROKEN\r\n\r\n", 400),
        (b"GET /x HTTP/1.1\r\nbad header\r\n\r\n", 400),
        (b"GET /x HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n", 413),
        (b"GET /x HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
        (b"GET /x HTTP/1.1\r\nHost", 400),
        (b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\n\r\n", 431),
    ],
)
def test_malformed_requests(data: bytes, status: int) -> None:
    """Requests the server cannot take are refused with a status; none reaches a command."""
    with pytest.raises(BadRequest) as caught:
        read(data)
    assert caught.value.status == status


def test_json_objects_use_strings_and_currency_digits() -> None:
    """Scalars are strings; Profit carries the amount with the account currency's digits."""
    deal = deal_json(Deal(100001, 7001, 2, Decimal("25.5"), "dep:1", 1_700_000_000_123, 2, 1000))
    assert (deal["Deal"], deal["Login"], deal["Profit"], deal["Time"], deal["TimeMsc"]) == (
        "100001",
        "7001",
        "25.50",
        "1700000000",
        "1700000000123",
    )
    assert money_text(Decimal("-1"), 3) == "-1.000"
    assert time_text(1572518788) == "1572518788 2019.10.31 10:46:28"
