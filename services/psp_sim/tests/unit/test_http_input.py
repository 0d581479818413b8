"""What the API does with a raw write body before any use case runs: card refusal, JSON checks, and a
digest that ignores formatting but not content."""

from __future__ import annotations

import json

from aiohttp import web
from psp_sim.entrypoints.http_input import prepare_body, request_digest


def _code(result: object, status: int = 400) -> str:
    assert isinstance(result, web.Response) and result.status == status
    assert isinstance(result.body, bytes)
    return str(json.loads(result.body)["error"]["code"])


def test_bodies_refused_before_parsing() -> None:
    """Card numbers (even in invalid JSON), card fields, non-UTF-8, nesting past the shared reader's
    bound, another media type, non-objects: a 4xx with a code, never an exception."""
    assert _code(prepare_body(b'{"x": "4242424242424242"')) == "card_data_forbidden"
    assert _code(prepare_body(b'{"card": {"cvc": "123"}}')) == "card_data_forbidden"
    assert _code(prepare_body(b"\xff\xfe")) == "malformed_json"
    assert _code(prepare_body(b"[1, 2]")) == "invalid_json"
    assert _code(prepare_body(b"{nope")) == "malformed_json"
    assert _code(prepare_body(b"[" * 5000 + b"]" * 5000)) == "body_too_deep"
    assert _code(prepare_body(b'{"a": 1}', "text/plain"), 415) == "unsupported_media_type"
    assert prepare_body(b"") == {}
    assert prepare_body(b'{"amount_minor": 5}') == {"amount_minor": 5}


def test_digest_is_canonical_over_content_and_route() -> None:
    """Key order and whitespace do not change the digest; a value, the path or the method does."""
    a = request_digest("POST", "/v1/refunds", {"a": 1, "b": {"c": 2}})
    assert a == request_digest("POST", "/v1/refunds", json.loads('{ "b": {"c":2}, "a":1 }'))
    assert a != request_digest("POST", "/v1/refunds", {"a": 2, "b": {"c": 2}})
    assert a != request_digest("POST", "/v1/payment_intents", {"a": 1, "b": {"c": 2}})
