"""Reading what a person typed or a path carries, for every page: ids, dates, reasons and amounts.

A path's malformed id is a 400 (``web.HTTPBadRequest``); a form's bad value is ``FormError``, which
the page shows next to the form, and nothing is sent anywhere. Amounts are typed in major units
(``500.00``) and become integer minor units in the currency's own digits; never a float.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import date
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from aiohttp import web
from backbone.money import MoneyError, currency_exponent, from_decimal

NOTE_MAX: Final = 500
ID_RE: Final = re.compile(r"[1-9][0-9]{0,17}")


class FormError(Exception):
    """A form's value is wrong: shown next to the form, nothing sent anywhere."""


def path_id(request: web.Request, name: str) -> int:
    raw = request.match_info[name]
    if ID_RE.fullmatch(raw) is None:
        raise web.HTTPBadRequest(text=f"{name} must be a positive whole number")
    return int(raw)


def form_id(value: object) -> int:
    if not isinstance(value, str) or ID_RE.fullmatch(value) is None:
        raise web.HTTPBadRequest(text="case_id must be a positive whole number")
    return int(value)


def day(value: str) -> str:
    try:
        return date.fromisoformat(value).isoformat()
    except ValueError:
        raise FormError("date must be YYYY-MM-DD") from None


def reason(value: object, name: str) -> str:
    text = value.strip() if isinstance(value, str) else ""
    if not text or len(text) > NOTE_MAX:
        raise FormError(f"{name}: say why, 1-{NOTE_MAX} characters")
    return text


def reason_only(form: Mapping[str, object]) -> Callable[[], dict[str, Any]]:
    """The body of an act that carries the operator's reason alone, read when the act is made."""
    return lambda: {"reason": reason(form.get("reason"), "reason")}


def digest(value: object, what: str) -> str:
    """The 64-hex digest an approval names: what the approver saw, so nothing else is approved."""
    text = str(value)
    if re.fullmatch(r"[0-9a-f]{64}", text) is None:
        raise FormError(f"the approval must name the {what} digest you saw")
    return text


def amount_minor(amount: str, currency: str) -> int:
    """``500.00`` in ``USD`` → 50000: what a person types, in the currency's own digits."""
    try:
        digits = currency_exponent(currency)
    except MoneyError:
        raise FormError(f"currency: an ISO 4217 code such as USD (got {currency[:10]!r})") from None
    try:
        value = Decimal(amount)
    except InvalidOperation:
        raise FormError("amount: a number such as 500.00") from None
    if not value.is_finite() or value <= 0:
        raise FormError("amount: more than zero")
    try:
        return from_decimal(value, digits)
    except MoneyError as exc:
        raise FormError(f"amount: {exc}") from None
