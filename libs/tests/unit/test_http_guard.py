"""The card-data guard every service's HTTP server is made with (backbone.http.service_app), on a real
aiohttp server over real HTTP: card data in the path, the query, a header or the body is refused
with one code and shape before any handler runs (for routes that do not exist too), nothing of it
reaches the log, an honest request passes with its body intact, and a screened-off body (the
webhook gateway's) is left to the handler."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from aiohttp import web
from backbone import logs
from backbone.http import is_guarded, route_name, service_app
from backbone.outage import Dependency
from backbone.testing.stack import free_port

PAN = "4000056655665556"
DATABASE = Dependency("database", "guard-test")
GROUPED = "4000 0566 5566 5556"


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _app(seen: list[tuple[str, bytes]]) -> web.Application:
    async def echo(request: web.Request) -> web.Response:
        body = await request.read()
        seen.append((request.path, body))
        return web.json_response({"ok": True, "bytes": len(body)})

    async def database_gone(_: web.Request) -> web.Response:
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    async def defect(_: web.Request) -> web.Response:
        raise KeyError("a bug")

    app = service_app(
        client_max_size=1024, screen_body=lambda r: route_name(r) != "/webhooks", database=DATABASE
    )
    app.add_routes(
        [web.post("/things/{id}", echo), web.get("/things/{id}", echo), web.post("/webhooks", echo)]
    )
    app.add_routes([web.get("/gone", database_gone), web.get("/defect", defect)])
    return app


Server = tuple[str, list[tuple[str, bytes]]]


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    """The app on a real port, served by aiohttp in a thread of its own."""
    seen: list[tuple[str, bytes]] = []
    port, ready, loop = free_port(), threading.Event(), asyncio.new_event_loop()
    runner = web.AppRunner(_app(seen), access_log=None)

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(10)
    yield f"http://127.0.0.1:{port}", seen
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def _call(server: Server, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
    status, body, _ = _call_with_headers(server, method, path, **kwargs)
    return status, body


def _call_with_headers(server: Server, method: str, path: str, **kwargs: Any) -> tuple[int, Any, Any]:
    server[1].clear()
    data = kwargs.get("data")
    headers = dict(kwargs.get("headers", {}))
    if "json" in kwargs:
        data, headers["Content-Type"] = json.dumps(kwargs["json"]).encode(), "application/json"
    request = urllib.request.Request(server[0] + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read()), response.headers
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read()), error.headers


REFUSED = [
    ("path", "GET", f"/things/{PAN}", {}),
    ("path", "GET", "/things/" + GROUPED.replace(" ", "%20"), {}),
    ("path", "GET", f"/no-such-route/{PAN}", {}),
    ("query", "GET", f"/things/t1?reference={PAN}", {}),
    ("query", "GET", "/things/t1?reference=" + GROUPED.replace(" ", "+"), {}),
    ("query", "GET", "/things/t1?cvv=1", {}),
    ("header", "POST", "/things/t1", {"headers": {"Idempotency-Key": PAN}}),
    ("header", "POST", "/things/t1", {"headers": {"X-Note": f"card {GROUPED}"}}),
    ("header", "POST", "/webhooks", {"headers": {"User-Agent": PAN}}),
    ("body", "POST", "/things/t1", {"json": {"note": GROUPED}}),
    ("body", "POST", "/things/t1", {"json": {"card": {"cvc": "123"}}}),
    ("body", "POST", "/things/t1", {"data": f"amount={PAN}".encode()}),
]


@pytest.mark.parametrize(
    ("where", "method", "path", "kwargs"), REFUSED, ids=[f"{r[0]}:{r[2][:24]}" for r in REFUSED]
)
def test_card_data_is_refused_before_any_handler(
    server: Server,
    capsys: pytest.CaptureFixture[str],
    where: str,
    method: str,
    path: str,
    kwargs: dict[str, Any],
) -> None:
    """400 card_data_forbidden naming the part, the handler never runs, the log names the route
    pattern and the part only."""
    logs.configure_logging("guard-test")
    status, body = _call(server, method, path, **kwargs)
    assert status == 400
    assert body["error"]["code"] == "card_data_forbidden" and where in body["error"]["message"]
    assert server[1] == []
    err = capsys.readouterr().err
    lines = [json.loads(x) for x in err.splitlines()]
    # trace_id and span_id are random hex: a digit run in them is no leak
    text = json.dumps([{k: v for k, v in x.items() if k not in ("trace_id", "span_id")} for x in lines])
    assert PAN not in text and "0566" not in text
    [line] = [x for x in lines if x["event"] == "http.card_data_forbidden"]
    assert line["where"] == where
    assert line["route"] in ("/things/{id}", "/webhooks", "unmatched")


def test_honest_requests_pass_with_their_body(server: Server) -> None:
    """A request without card data reaches the handler, which reads the body the guard read."""
    payload = {"amount_minor": 123456789012, "ref": "dep_01J4242", "at": "2026-11-30T00:00:00Z"}
    status, body = _call(server, "POST", "/things/t1?limit=10", json=payload)
    assert (status, body["ok"]) == (200, True)
    assert server[1] == [("/things/t1", json.dumps(payload).encode())]


def test_a_screened_off_body_reaches_its_handler(server: Server) -> None:
    """The webhook route's body is the handler's to judge (the gateway redacts it): it passes."""
    status, _ = _call(server, "POST", "/webhooks", json={"note": PAN})
    assert status == 200 and server[1][0][0] == "/webhooks"


def test_too_large_a_body_is_413_without_reaching_the_handler(server: Server) -> None:
    """Larger than client_max_size: 413 body_too_large in the same shape."""
    status, body = _call(server, "POST", "/things/t1", data=b"x" * 5000)
    assert (status, body["error"]["code"]) == (413, "body_too_large")
    assert server[1] == []


def test_make_app_puts_the_guard_first() -> None:
    """is_guarded tells an app made by service_app (the guard outermost) from a plain one."""
    assert is_guarded(service_app(client_max_size=10, middlewares=[]))
    assert not is_guarded(web.Application())


def test_a_database_outage_is_503_with_retry_after_and_reported(server: Server) -> None:
    """An infrastructure error in a handler: 503 unavailable with Retry-After, in the one shape,
    and the process's database dependency is marked down (one warning, readiness false)."""
    status, body, headers = _call_with_headers(server, "GET", "/gone")
    assert (status, body["error"]["code"]) == (503, "unavailable") and headers["Retry-After"]
    assert DATABASE.up is False
    DATABASE.ok()


def test_a_defect_is_500_without_a_traceback_in_the_answer(
    server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bug: 500 internal_error, the answer names nothing of the code; the traceback is logged."""
    logs.configure_logging("guard-test")
    status, body = _call(server, "GET", "/defect")
    assert (status, body["error"]["code"]) == (500, "internal_error")
    assert "Traceback" not in json.dumps(body) and "KeyError" not in json.dumps(body)
    assert "KeyError" in capsys.readouterr().err


def test_unknown_routes_and_methods_answer_in_the_same_shape(server: Server) -> None:
    """aiohttp's own 404 and 405 come out as {"error": {"code", "message"}} too."""
    assert _call(server, "GET", "/nowhere")[1]["error"]["code"] == "not_found"
    assert _call(server, "DELETE", "/things/t1")[1]["error"]["code"] == "method_not_allowed"
