"""The mapping from HTTP answers to closed results: every timeout/5xx/unreadable answer is NoAnswer;
only definite answers become Declined, Refused or Absent."""

from __future__ import annotations

import json
from typing import Any

import pytest
from backbone.psp import Absent, Applied, Conflict, Declined, Found, NoAnswer, Refused
from backbone.psp import answers as a
from backbone.psp.model import parse_intent
from backbone.psp.transport import Answer, Failure


def intent_json(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "pi_1",
        "object": "payment_intent",
        "status": "requires_capture",
        "amount_minor": 1000,
        "amount_capturable_minor": 1000,
        "amount_received_minor": 0,
        "amount_refunded_minor": 0,
        "currency": "EUR",
        "capture_method": "manual",
        "reference": "pay_1",
        "created": 1_800_000_000,
    }
    return {**base, **changes}


def ans(status: int, document: Any) -> Answer:
    return Answer(status, document if isinstance(document, bytes) else json.dumps(document).encode())


def err(code: str, error_type: str = "invalid_request_error", **extra: Any) -> dict[str, Any]:
    return {"error": {"type": error_type, "code": code, "message": "m", **extra}}


def test_transport_failures_are_unknown() -> None:
    """Timeouts and connection errors are NoAnswer with the reason, for writes and lookups alike."""
    assert a.intent_write(Failure("timeout")) == NoAnswer("timeout")
    assert a.refund_write(Failure("connection_error: ConnectionResetError")) == NoAnswer(
        "connection_error: ConnectionResetError"
    )
    assert a.lookup_one(Failure("timeout"), parse_intent) == NoAnswer("timeout")


def test_success_is_applied_and_garbage_is_unknown() -> None:
    """A 200 with a valid intent is Applied; a 200 we cannot read is NoAnswer."""
    assert isinstance(a.intent_write(ans(200, intent_json())), Applied)
    assert isinstance(a.intent_write(ans(200, b"<html>")), NoAnswer)
    assert isinstance(a.intent_write(ans(200, intent_json(amount_minor=1.5))), NoAnswer)


def test_decline_needs_a_card_error_with_the_intent() -> None:
    """402 card_error with the intent: Declined; a 402 without them: NoAnswer."""
    declined = a.intent_write(
        ans(
            402,
            err(
                "card_declined",
                "card_error",
                decline_code="generic_decline",
                payment_intent=intent_json(status="requires_payment_method", amount_capturable_minor=0),
            ),
        )
    )
    assert isinstance(declined, Declined) and declined.decline_code == "generic_decline"
    assert isinstance(a.intent_write(ans(402, err("card_declined"))), NoAnswer)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 405, 413, 415, 422])
def test_definite_4xx_is_rejected(status: int) -> None:
    """These statuses with an error code say the request was not executed: Refused."""
    assert a.intent_write(ans(status, err("x"))) == Refused(status, "x", "m")


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504, 301, 418])
def test_everything_else_is_unknown(status: int) -> None:
    """Timeouts, throttling, server errors, redirects and oddities: NoAnswer, never a failure."""
    assert isinstance(a.intent_write(ans(status, err("x"))), NoAnswer)
    assert isinstance(a.refund_write(ans(status, err("x"))), NoAnswer)


def test_409_only_for_key_reuse() -> None:
    """409 idempotency_key_reused is Refused; any other 409 (a concurrent request) is NoAnswer."""
    assert isinstance(a.intent_write(ans(409, err("idempotency_key_reused"))), Refused)
    assert isinstance(a.intent_write(ans(409, err("idempotency_key_in_use"))), NoAnswer)


def test_4xx_without_an_error_code_is_unknown() -> None:
    """A 400 from a proxy (no JSON error) proves nothing about the PSP."""
    assert isinstance(a.intent_write(ans(400, b"Bad Request")), NoAnswer)


def test_lookup_by_id() -> None:
    """404 resource_missing is Absent; a 404 of a wrong URL, a 401, a 500 are NoAnswer."""
    assert isinstance(a.lookup_one(ans(200, intent_json()), parse_intent), Found)
    assert a.lookup_one(ans(404, err("resource_missing")), parse_intent) == Absent()
    assert isinstance(a.lookup_one(ans(404, err("unknown_route")), parse_intent), NoAnswer)
    assert isinstance(a.lookup_one(ans(401, err("invalid_api_key")), parse_intent), NoAnswer)
    assert isinstance(a.lookup_one(ans(500, err("x")), parse_intent), NoAnswer)


def test_lookup_by_reference() -> None:
    """Empty complete list: Absent; one: Found; two: Conflict; incomplete or foreign: NoAnswer."""

    def lst(*items: Any, has_more: bool = False) -> Answer:
        return ans(200, {"object": "list", "data": list(items), "has_more": has_more})

    def by_ref(answer: Answer) -> object:
        return a.lookup_list(answer, parse_intent, lambda i: i.reference == "pay_1")

    assert by_ref(lst()) == Absent()
    assert isinstance(by_ref(lst(intent_json())), Found)
    assert isinstance(by_ref(lst(intent_json(), intent_json(id="pi_2"))), Conflict)
    assert isinstance(by_ref(lst(intent_json(), has_more=True)), NoAnswer)
    assert isinstance(by_ref(lst(intent_json(reference="pay_2"))), NoAnswer)
    assert isinstance(by_ref(ans(200, {"data": "nope"})), NoAnswer)
