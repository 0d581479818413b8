"""What the PSP API checks of a request before any use case runs, and its error answer: a write's
body refused for card data (looked for in the raw bytes first, then in the parsed text and field
names) or for what ``backbone.bodies`` refuses; an ``Idempotency-Key`` of visible ASCII; no NUL in
a query; the request digest over ``METHOD path`` and the body's canonical JSON (sorted keys), so
whitespace or key order never turn one request into two.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

from aiohttp import web
from backbone import bodies
from backbone.bodies import JSON
from backbone.carddata import find_card_field, find_card_number

from psp_sim.domain.wire import ErrorType, dumps, error_json

IDEMPOTENCY_KEY_LENGTH_MAX: Final = 255


def natural(raw: str) -> int | None:
    """A whole number 0..2**62 written in ASCII digits, or None."""
    return int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 18 else None


def error_response(status: int, error_type: ErrorType, code: str, message: str, **extra: Any) -> web.Response:
    return web.Response(
        status=status,
        body=dumps(error_json(error_type, code, message, **extra)),
        content_type="application/json",
    )


def valid_key(key: str | None) -> bool:
    return (
        key is not None
        and 0 < len(key) <= IDEMPOTENCY_KEY_LENGTH_MAX
        and all(33 <= ord(c) <= 126 for c in key)
    )


def prepare_body(raw: bytes, content_type: str = JSON) -> dict[str, Any] | web.Response:
    """The parsed JSON object of a write, or the 4xx that refuses it: what ``backbone.bodies``
    refuses (media type, syntax, nesting), card data, not an object."""
    if find_card_number(raw.decode("latin-1")):  # before anything else, valid JSON or not
        return _card_refusal()
    parsed = bodies.parse(raw, content_type, None, bodies.JSON_TYPES)
    match parsed:
        case bodies.Refusal(status=status, code=code, message=message):
            return error_response(status, "invalid_request_error", code, message)
    if find_card_number(parsed.text):
        return _card_refusal()
    document = {} if parsed.document is None else parsed.document
    if not isinstance(document, dict):
        return error_response(400, "invalid_request_error", "invalid_json", "The body must be a JSON object.")
    if find_card_field(document):
        return _card_refusal()
    return document


def has_nul(query: Mapping[str, str]) -> bool:
    """A NUL character in a query name or value (PostgreSQL's text cannot hold one)."""
    return any("\x00" in name or "\x00" in value for name, value in query.items())


def nul_refusal() -> web.Response:
    return error_response(
        400, "invalid_request_error", "parameter_invalid", "NUL characters are not accepted."
    )


def _card_refusal() -> web.Response:
    return error_response(
        400,
        "invalid_request_error",
        "card_data_forbidden",
        "Raw card data (card numbers, security codes) is not accepted: send a payment method token.",
    )


def request_digest(method: str, path: str, document: dict[str, Any]) -> bytes:
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(f"{method} {path}\n".encode() + canonical.encode()).digest()
