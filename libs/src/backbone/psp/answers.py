"""From an HTTP answer (or a transport failure) to the closed result sets of ``results``, pure.

The mapping (the contract payment-state relies on):

| answer                                        | write result | lookup result                 |
|-----------------------------------------------|--------------|-------------------------------|
| transport failure (timeout, refused, cut)     | NoAnswer      | NoAnswer                       |
| 2xx with a valid object                       | Applied      | Found / Absent / Conflict  |
| 2xx we cannot parse                           | NoAnswer      | NoAnswer                       |
| 402 card_error carrying the intent            | Declined     | -                             |
| 402 on a payout create (e.g. card_declined)   | Refused      | -                             |
| 400 401 403 404 405 413 415 422 + error code  | Refused     | 404 resource_missing: Absent |
| 409 idempotency_key_reused                    | Refused     | NoAnswer                       |
| 409 other, 408, 429, 3xx, 5xx, other          | NoAnswer      | NoAnswer                       |
| any non-2xx without a JSON error code         | NoAnswer      | NoAnswer                       |
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final, TypeVar

from backbone.psp.model import PspParseError, parse_intent, parse_payout, parse_refund
from backbone.psp.results import (
    Absent,
    Applied,
    Conflict,
    Declined,
    Found,
    IntentWrite,
    NoAnswer,
    PayoutWrite,
    RefundWrite,
    Refused,
)
from backbone.psp.transport import Answer, Failure

T = TypeVar("T")
# 4xx answers that say "not executed, and it will not be by repeating it" (see the table above).
DEFINITE_4XX: Final = frozenset({400, 401, 403, 404, 405, 409, 413, 415, 422})


def _error_of(answer: Answer) -> dict[str, Any] | None:
    try:
        document = json.loads(answer.body)
    except ValueError:
        return None
    error = document.get("error") if isinstance(document, dict) else None
    if not isinstance(error, dict) or not isinstance(error.get("code"), str):
        return None
    return error


def _classify_failure(answer: Answer) -> Refused | NoAnswer:
    """A non-2xx, non-402 answer: a definite refusal or an unknown outcome."""
    error = _error_of(answer)
    if error is None:
        return NoAnswer(f"http_{answer.status}_unparseable")
    code, message = error["code"], str(error.get("message", ""))
    if answer.status == 409 and code != "idempotency_key_reused":
        return NoAnswer(f"http_409_{code}")  # e.g. a concurrent request with this key still running
    if answer.status in DEFINITE_4XX:
        return Refused(answer.status, code, message)
    return NoAnswer(f"http_{answer.status}")


def _decline(answer: Answer) -> Declined | NoAnswer:
    error = _error_of(answer)
    if error is None or error.get("type") != "card_error":
        return NoAnswer("http_402_unparseable")
    try:
        intent = parse_intent(error.get("payment_intent"))
    except PspParseError as exc:
        return NoAnswer(f"unparseable: {exc}")
    decline = error.get("decline_code")
    return Declined(
        error["code"], decline if isinstance(decline, str) else None, str(error.get("message", "")), intent
    )


def _applied(answer: Answer, parse: Callable[[Any], T]) -> Applied[T] | NoAnswer:
    try:
        return Applied(parse(json.loads(answer.body)))
    except (ValueError, PspParseError) as exc:
        return NoAnswer(f"unparseable: {str(exc)[:200]}")


def intent_write(result: Answer | Failure) -> IntentWrite:
    if isinstance(result, Failure):
        return NoAnswer(result.reason)
    if 200 <= result.status < 300:
        return _applied(result, parse_intent)
    if result.status == 402:
        return _decline(result)
    return _classify_failure(result)


def refund_write(result: Answer | Failure) -> RefundWrite:
    if isinstance(result, Failure):
        return NoAnswer(result.reason)
    if 200 <= result.status < 300:
        return _applied(result, parse_refund)
    return _classify_failure(result) if result.status != 402 else NoAnswer("http_402_on_refund")


def payout_write(result: Answer | Failure) -> PayoutWrite:
    """A 402 with an error code is the PSP refusing to create the payout (nothing created): Refused."""
    if isinstance(result, Failure):
        return NoAnswer(result.reason)
    if 200 <= result.status < 300:
        return _applied(result, parse_payout)
    if result.status == 402:
        error = _error_of(result)
        if error is None:
            return NoAnswer("http_402_unparseable")
        return Refused(402, error["code"], str(error.get("message", "")))
    return _classify_failure(result)


def lookup_one(result: Answer | Failure, parse: Callable[[Any], T]) -> Found[T] | Absent | NoAnswer:
    if isinstance(result, Failure):
        return NoAnswer(result.reason)
    if result.status == 404:
        error = _error_of(result)
        # Only the PSP's "no such object" is an answer; a 404 from a wrong URL or a proxy is not.
        return Absent() if error is not None and error["code"] == "resource_missing" else NoAnswer("http_404")
    if result.status != 200:
        return NoAnswer(f"http_{result.status}")
    try:
        return Found(parse(json.loads(result.body)))
    except (ValueError, PspParseError) as exc:
        return NoAnswer(f"unparseable: {str(exc)[:200]}")


def parse_list(result: Answer | Failure, parse: Callable[[Any], T]) -> tuple[T, ...] | NoAnswer:
    """Every object of a complete list answer, or NoAnswer."""
    if isinstance(result, Failure):
        return NoAnswer(result.reason)
    if result.status != 200:
        return NoAnswer(f"http_{result.status}")
    try:
        document = json.loads(result.body)
        items = document.get("data") if isinstance(document, dict) else None
        if not isinstance(items, list) or document.get("has_more") is not False:
            return NoAnswer("unparseable: expected a complete list")
        return tuple(parse(item) for item in items)
    except (ValueError, PspParseError) as exc:
        return NoAnswer(f"unparseable: {str(exc)[:200]}")


def lookup_list(
    result: Answer | Failure, parse: Callable[[Any], T], matches: Callable[[T], bool]
) -> Found[T] | Absent | Conflict[T] | NoAnswer:
    found = parse_list(result, parse)
    if isinstance(found, NoAnswer):
        return found
    if not all(matches(item) for item in found):
        return NoAnswer("list holds an object with another reference")
    if not found:
        return Absent()
    return Found(found[0]) if len(found) == 1 else Conflict(found)
