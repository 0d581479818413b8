"""Stripe's answers, as the stripe provider's outcomes: the reading side of ``stripe_client``.

What the SDK returned or raised, turned into the same closed sets as simpsp's ``PspClient``
(``results``); pure, no call to Stripe here:
- a 2xx object that parses: ``Applied`` / ``Found``;
- ``CardError`` (402) on a create or confirm, carrying the payment intent: ``Declined``;
- a definite 4xx (400, 401, 403, 404, 405, 413, 415, 422) with a code or type: ``Refused``; the
  ``idempotency_error`` (400) as ``Refused(code="idempotency_key_reused")`` like simpsp's, which the
  caller treats as "the earlier request stands: look it up"; 404 ``resource_missing`` on a lookup:
  ``Absent``;
- every ``APIConnectionError`` (timeout, refused, reset, TLS), every 5xx, 408, 409 (a concurrent
  request with the same key, a lock timeout), 429, and any answer the SDK or we cannot read:
  ``NoAnswer``.

A lookup by our reference reads the objects' ``metadata`` (``matching``): an object is ours only if
it carries the reference.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import stripe

from backbone.psp.answers import DEFINITE_4XX
from backbone.psp.model import PaymentIntent, Payout, PspParseError, Refund
from backbone.psp.results import Absent, Conflict, Declined, Found, IntentLookup, NoAnswer, Refused
from backbone.psp.stripe_objects import REFERENCE_KEY, parse_stripe_intent, parse_stripe_refund

T = TypeVar("T")
R = TypeVar("R", PaymentIntent, Refund, Payout)


def message_of(exc: stripe.StripeError) -> str:
    """The error's message for people, bounded."""
    return str(exc.user_message or type(exc).__name__)[:200]


def error_code(exc: stripe.StripeError) -> str | None:
    """The error body's ``code``, else its ``type``; None when it carries neither."""
    error = (exc.json_body or {}).get("error") if isinstance(exc.json_body, dict) else None
    if not isinstance(error, dict):
        return None
    code = error.get("code") or error.get("type")
    return code if isinstance(code, str) else None


def classify(exc: stripe.StripeError) -> Refused | NoAnswer:
    """A Stripe error that is not a card decline: a definite refusal or an unknown outcome."""
    if isinstance(exc, stripe.APIConnectionError):
        return NoAnswer(f"connection_error: {type(exc).__name__}")  # timeouts are connection errors here
    status, code = exc.http_status, error_code(exc)
    if isinstance(exc, stripe.IdempotencyError) and status == 400:
        return Refused(400, "idempotency_key_reused", message_of(exc))  # the earlier request stands
    if status is None or code is None:
        return NoAnswer(f"http_{status}_unparseable")
    if status in DEFINITE_4XX and status != 409:
        return Refused(status, code, message_of(exc))
    return NoAnswer(f"http_{status}")


def classify_read(exc: stripe.StripeError) -> NoAnswer:
    """A lookup that failed: whatever Stripe said, it is not an answer about the object."""
    return NoAnswer(
        f"connection_error: {type(exc).__name__}" if exc.http_status is None else f"http_{exc.http_status}"
    )


def document_of(obj: Any) -> Any:
    """The JSON Stripe sent for ``obj`` (what the SDK read), not the SDK's object model."""
    response = getattr(obj, "last_response", None)
    if response is not None and isinstance(getattr(response, "body", None), str):
        return json.loads(response.body)
    return obj.to_dict()


def parsed(obj: Any, parse: Callable[[Any], T]) -> T | NoAnswer:
    """``parse`` of the JSON Stripe sent for ``obj``; NoAnswer when it does not parse."""
    try:
        return parse(document_of(obj))
    except (ValueError, PspParseError) as exc:
        return NoAnswer(f"unparseable: {str(exc)[:200]}")


def declined(exc: stripe.CardError) -> Declined | NoAnswer:
    """A 402 on a create or confirm: Declined with the payment intent Stripe sent along."""
    error = (exc.json_body or {}).get("error") if isinstance(exc.json_body, dict) else None
    if not isinstance(error, dict):
        return NoAnswer("http_402_unparseable")
    try:
        intent = parse_stripe_intent(error.get("payment_intent"))
    except PspParseError as exc2:
        return NoAnswer(f"unparseable: {str(exc2)[:200]}")
    decline = error.get("decline_code")
    code = error.get("code")
    return Declined(
        code if isinstance(code, str) else "card_declined",
        decline if isinstance(decline, str) else None,
        message_of(exc),
        intent,
    )


def matching(
    documents: list[Any], parse: Callable[[Any], R], reference: str
) -> Found[R] | Absent | Conflict[R] | NoAnswer:
    """The objects among ``documents`` that carry our reference. An unreadable object proves nothing
    about the others, but it may be the one we look for: NoAnswer."""
    matching: list[R] = []
    for document in documents:
        metadata = document.get("metadata") if isinstance(document, dict) else None
        if isinstance(metadata, dict) and metadata.get(REFERENCE_KEY) != reference:
            continue  # someone else's object: not read further
        try:
            matching.append(parse(document))
        except PspParseError as exc:
            return NoAnswer(f"unparseable: {str(exc)[:200]}")
    if not all(v.reference == reference for v in matching):
        return NoAnswer("a match does not carry our reference")
    if not matching:
        return Absent()
    return Found(matching[0]) if len(matching) == 1 else Conflict(tuple(matching))


def search_matches(document: Any, reference: str) -> IntentLookup:
    """The payment intents of a Search API answer that carry our reference. A result with more
    pages is an answer only when it already holds two matches (a Conflict)."""
    data = document.get("data") if isinstance(document, dict) else None
    if not isinstance(data, list) or not isinstance(document.get("has_more"), bool):
        return NoAnswer("unparseable: expected a search result")
    found = matching(data, parse_stripe_intent, reference)
    if document["has_more"] and not isinstance(found, Conflict | NoAnswer):
        return NoAnswer("search result has more pages but fewer than two matches")
    return found


def refunds_of(items: list[Any], intent_id: str) -> tuple[Refund, ...] | NoAnswer:
    """Every refund of a listed payment intent, or NoAnswer if any is unreadable or another's."""
    try:
        refunds = tuple(parse_stripe_refund(item) for item in items)
    except PspParseError as exc:
        return NoAnswer(f"unparseable: {str(exc)[:200]}")
    if not all(r.payment_intent_id == intent_id for r in refunds):
        return NoAnswer("list holds a refund of another intent")
    return refunds
