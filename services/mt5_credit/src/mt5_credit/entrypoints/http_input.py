"""The HTTP API's input: its error answer and the parsers of path, query and body values every
route shares. A value is accepted only in its narrow shape (short identifiers, ISO currencies,
payment method tokens, positive integers); anything else is a ``ValueError`` its route answers
with 400.
"""

from __future__ import annotations

import re
from typing import Any, Final

from aiohttp import web
from backbone.bodies import json_body
from backbone.money import AmountLimit, AmountRefused, currency_exponent, request_amount

KEY_RE: Final = re.compile(r"^[A-Za-z0-9_.:-]{8,128}$")
ID_RE: Final = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
_INT_MAX: Final = 2**63 - 1
_TOKEN_RE: Final = re.compile(r"^[A-Za-z0-9_]{3,128}$")


def error_response(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=status)


def json_object(request: web.Request) -> dict[str, Any] | web.Response:
    body = json_body(request)  # read, bounded and screened by backbone.http's guard
    if not isinstance(body, dict):
        return error_response(400, "malformed_json", "body must be a JSON object")
    return body


def parse_amount(body: dict[str, Any], limit: AmountLimit) -> int | web.Response:
    """The request's amount: an integer within the ceiling (``backbone.amounts``), or its 400."""
    found = request_amount(body.get("amount_minor"), body.get("currency"), limit)
    match found:
        case int():
            return found
        case AmountRefused(code="amount_too_large", message=message):
            return error_response(400, "amount_too_large", message)
        case AmountRefused(message=message):
            return error_response(400, "invalid_amount", message)


def text(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not ID_RE.match(value):
        raise ValueError(f"{name} must be a short identifier")
    return value


def token(body: dict[str, Any], name: str) -> str:
    """A payment method token (letters, digits, underscores); a card number is refused before this."""
    value = body.get(name)
    if not isinstance(value, str) or not _TOKEN_RE.match(value) or value.isdigit():
        raise ValueError(f"{name} must be a payment method token like pm_card_visa, never a card number")
    return value


def positive_int(value: object) -> int:
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if type(value) is not int or not 0 < value <= _INT_MAX:
        raise ValueError("must be a positive integer")
    return value


def currency(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not re.fullmatch(r"[A-Z]{3}", value):
        raise ValueError(f"{name} must be an ISO 4217 code like USD")
    try:
        currency_exponent(value)
    except ValueError as exc:
        raise ValueError(f"{name}: unknown currency {value}") from exc
    return value


def boolean(body: dict[str, Any], name: str) -> bool:
    value = body.get(name)
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false")
    return value
