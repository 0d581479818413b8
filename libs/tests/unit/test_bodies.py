"""The one body reader (backbone.bodies) behind every service's guard (backbone.http), on a real
aiohttp server over real HTTP: bodies are refused with a 4xx and a code before any handler runs
when they are too deep, malformed, of a media type the app does not take, or carry a card number
however a form encodes it; handlers read what the guard screened; an error answer is redacted."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import FormData, web
from aiohttp.test_utils import TestClient, TestServer
from backbone import bodies
from backbone.http import service_app

PAN = "4000056655665556"
SPACED = "4000 0566 5566 5556"
Seen = list[Any]


def _app(seen: Seen, types: frozenset[str]) -> web.Application:
    async def json_echo(request: web.Request) -> web.Response:
        seen.append(bodies.json_body(request))
        return web.json_response({"ok": True})

    async def form_echo(request: web.Request) -> web.Response:
        seen.append(dict(bodies.form_body(request)))
        return web.json_response({"ok": True})

    async def quoting(_: web.Request) -> web.Response:  # a refusal quoting what another party sent
        return web.json_response({"error": {"code": "refused", "message": f"they said {SPACED}"}}, status=400)

    app = service_app(client_max_size=16_384, body_types=types)
    app.add_routes([web.post("/json", json_echo), web.post("/form", form_echo), web.get("/quote", quoting)])
    return app


Call = Callable[[TestClient[web.Request, web.Application]], Awaitable[tuple[int, Any]]]


def _run(types: frozenset[str], call: Call) -> tuple[int, Any, Seen]:
    seen: Seen = []

    async def go() -> tuple[int, Any]:
        async with TestClient(TestServer(_app(seen, types))) as client:
            return await call(client)

    status, body = asyncio.run(go())
    return status, body, seen


def _post(path: str, **kwargs: Any) -> Call:
    async def call(client: TestClient[web.Request, web.Application]) -> tuple[int, Any]:
        response = await client.post(path, **kwargs)
        return response.status, await response.json()

    return call


REFUSED_JSON = [
    ("too deep", {"data": "[" * 5000 + "]" * 5000}, 400, "body_too_deep"),
    ("just too deep", {"data": "[" * 33 + "]" * 33}, 400, "body_too_deep"),
    ("not JSON", {"data": "{nope"}, 400, "malformed_json"),
    ("not UTF-8", {"data": b"\xff\xfe\xfd"}, 400, "malformed_json"),
    ("huge integer", {"data": "1" * 5000}, 400, "malformed_json"),
    ("a NUL", {"data": '{"reason": "a\\u0000b"}'}, 400, "nul_character"),
    (
        "text/plain",
        {"data": '{"a": 1}', "headers": {"Content-Type": "text/plain"}},
        415,
        "unsupported_media_type",
    ),
    ("a form", {"data": {"a": "1"}}, 415, "unsupported_media_type"),
    ("too large", {"json": {"a": "x" * 20_000}}, 413, "body_too_large"),
]


@pytest.mark.parametrize(("why", "kwargs", "status", "code"), REFUSED_JSON, ids=[r[0] for r in REFUSED_JSON])
def test_a_json_api_refuses_bodies_it_cannot_read(
    why: str, kwargs: dict[str, Any], status: int, code: str
) -> None:
    """Each unreadable body gets its 4xx and code, and the handler never runs."""
    headers = kwargs.pop("headers", {"Content-Type": "application/json"} if "data" in kwargs else {})
    if isinstance(kwargs.get("data"), dict):
        headers = {}  # aiohttp sends a dict as a form
    got, body, seen = _run(bodies.JSON_TYPES, _post("/json", headers=headers, **kwargs))
    assert (got, body["error"]["code"], seen) == (status, code, []), why


def test_a_json_api_reads_what_it_screened() -> None:
    """32 levels of nesting pass; the handler gets the parsed document; no body reads as None."""
    deep: Any = "leaf"
    for _ in range(31):
        deep = [deep]
    status, _, seen = _run(bodies.JSON_TYPES, _post("/json", json={"deep": deep}))
    assert status == 200 and seen == [{"deep": deep}]
    status, _, seen = _run(bodies.JSON_TYPES, _post("/json"))
    assert status == 200 and seen == [None]


URLENCODED = {"Content-Type": bodies.URLENCODED}
PERCENT = "".join(f"%{ord(c):02X}" for c in SPACED)
FORMS = [
    ("plus-encoded", {"data": f"reason=card+{SPACED.replace(' ', '+')}", "headers": URLENCODED}),
    ("percent-encoded", {"data": f"reason={PERCENT}", "headers": URLENCODED}),
    ("dashed", {"data": {"reason": SPACED.replace(" ", "-")}}),
    ("in a name", {"data": {f"note {SPACED}": "x"}}),
    ("a card field", {"data": {"cvv": "123"}}),
]


@pytest.mark.parametrize(("why", "kwargs"), FORMS, ids=[f[0] for f in FORMS])
def test_a_form_is_screened_as_its_handler_reads_it(why: str, kwargs: dict[str, Any]) -> None:
    """A card number in a form field is refused however the form encodes it, urlencoded or
    multipart, and the handler never runs."""
    status, body, seen = _run(bodies.FORM_TYPES, _post("/form", **kwargs))
    assert (status, body["error"]["code"], seen) == (400, "card_data_forbidden", []), why
    multipart = FormData({"reason": f"card {SPACED}"})
    multipart.add_field("csrf", "t", content_type="text/plain")  # forces multipart/form-data
    status, body, seen = _run(bodies.FORM_TYPES, _post("/form", data=multipart))
    assert (status, body["error"]["code"], seen) == (400, "card_data_forbidden", [])


def test_a_form_the_reader_cannot_parse_is_a_400() -> None:
    """A multipart body without its boundary, a file part, or a urlencoded body not in its charset:
    400 malformed_form, not a 500; an honest form reaches the handler decoded."""
    broken = {"data": b"garbage", "headers": {"Content-Type": "multipart/form-data; boundary=xyz"}}
    status, body, seen = _run(bodies.FORM_TYPES, _post("/form", **broken))
    assert (status, body["error"]["code"], seen) == (400, "malformed_form", [])
    files = FormData()
    files.add_field("upload", b"bytes", filename="a.txt")
    status, body, seen = _run(bodies.FORM_TYPES, _post("/form", data=files))
    assert (status, body["error"]["code"], seen) == (400, "malformed_form", [])
    latin = {"data": b"reason=\xff", "headers": {"Content-Type": bodies.URLENCODED}}
    status, body, seen = _run(bodies.FORM_TYPES, _post("/form", **latin))
    assert (status, body["error"]["code"], seen) == (400, "malformed_form", [])
    status, _, seen = _run(bodies.FORM_TYPES, _post("/form", data={"reason": "card ends 4242", "n": "1"}))
    assert status == 200 and seen == [{"reason": "card ends 4242", "n": "1"}]


def test_an_error_answer_is_redacted_on_the_way_out() -> None:
    """A refusal that quotes a card number (another party's words) leaves with it redacted."""

    async def call(client: TestClient[web.Request, web.Application]) -> tuple[int, Any]:
        response = await client.get("/quote")
        return response.status, await response.text()

    status, text, _ = _run(bodies.JSON_TYPES, call)
    assert status == 400 and SPACED not in text and "[redacted]" in json.loads(text)["error"]["message"]


def test_nesting_is_measured_without_recursion() -> None:
    """nesting_exceeds walks a document a thousand levels deep without RecursionError."""
    deep: Any = []
    for _ in range(900):
        deep = [deep, {"k": deep}] if len(str(deep)) < 50 else [deep]
    assert bodies.nesting_exceeds(deep, 32)
    assert not bodies.nesting_exceeds({"a": [1, {"b": []}]}, 4)  # four containers deep
    assert bodies.nesting_exceeds({"a": [1, {"b": []}]}, 3)


def test_a_nul_is_refused_wherever_it_travels() -> None:
    """A NUL character in a form field, in the decoded path or in the query is 400 nul_character
    before any handler: no database of ours can store one."""
    form = {"data": "reason=a%00b", "headers": {"Content-Type": bodies.URLENCODED}}
    status, body, seen = _run(bodies.FORM_TYPES, _post("/form", **form))
    assert (status, body["error"]["code"], seen) == (400, "nul_character", [])
    for path in ("/json?target=%00", "/js%00on"):
        status, body, seen = _run(bodies.JSON_TYPES, _post(path, json={}))
        assert (status, body["error"]["code"], seen) == (400, "nul_character", []), path
