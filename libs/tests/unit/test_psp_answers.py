"""The mapping from HTTP answers to closed results: every timeout/5xx/unreadable answer is Unknown;
only definite answers become Declined, Rejected or NotFound."""

from __future__ import annotations

import json
from typing import Any

import pytest
from backbone.psp import Ambiguous, Applied, Declined, Found, NotFound, Rejected, Unknown
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
    """Timeouts and connection errors are Unknown with the reason, for writes and lookups alike."""
    assert a.intent_write(Failure("timeout")) == Unknown("timeout")
    assert a.refund_write(Failure("connection_error: ConnectionResetError")) == Unknown(
        "connection_error: ConnectionResetError"
    )
    assert a.lookup_one(Failure("timeout"), parse_intent) == Unknown("timeout")


def test_success_is_applied_and_garbage_is_unknown() -> None:
    """A 200 with a valid intent is Applied; a 200 we cannot read is Unknown."""
    assert isinstance(a.intent_write(ans(200, intent_json())), Applied)
    assert isinstance(a.intent_write(ans(200, b"<html>")), Unknown)
    assert isinstance(a.intent_write(ans(200, intent_json(amount_minor=1.5))), Unknown)


def test_decline_needs_a_card_error_with_the_intent() -> None:
    """402 card_error with the intent: Declined; a 402 without them: Unknown."""
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
    assert isinstance(a.intent_write(ans(402, err("card_declined"))), Unknown)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 405, 413, 415, 422])
def test_definite_4xx_is_rejected(status: int) -> None:
    """These statuses with an error code say the request was not executed: Rejected."""
    assert a.intent_write(ans(status, err("x"))) == Rejected(status, "x", "m")


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504, 301, 418])
def test_everything_else_is_unknown(status: int) -> None:
    """Timeouts, throttling, server errors, redirects and oddities: Unknown, never a failure."""
    assert isinstance(a.intent_write(ans(status, err("x"))), Unknown)
    assert isinstance(a.refund_write(ans(status, err("x"))), Unknown)


def test_409_only_for_key_reuse() -> None:
    """409 idempotency_key_reused is Rejected; any other 409 (a concurrent request) is Unknown."""
    assert isinstance(a.intent_write(ans(409, err("idempotency_key_reused"))), Rejected)
    assert isinstance(a.intent_write(ans(409, err("idempotency_key_in_use"))), Unknown)


def test_4xx_without_an_error_code_is_unknown() -> None:
    """A 400 from a proxy (no JSON error) proves nothing about the PSP."""
    assert isinstance(a.intent_write(ans(400, b"Bad Request")), Unknown)


def test_lookup_by_id() -> None:
    """404 resource_missing is NotFound; a 404 of a wrong URL, a 401, a 500 are Unknown."""
    assert isinstance(a.lookup_one(ans(200, intent_json()), parse_intent), Found)
    assert a.lookup_one(ans(404, err("resource_missing")), parse_intent) == NotFound()
    assert isinstance(a.lookup_one(ans(404, err("unknown_route")), parse_intent), Unknown)
    assert isinstance(a.lookup_one(ans(401, err("invalid_api_key")), parse_intent), Unknown)
    assert isinstance(a.lookup_one(ans(500, err("x")), parse_intent), Unknown)


def test_lookup_by_reference() -> None:
    """Empty complete list: NotFound; one: Found; two: Ambiguous; incomplete or foreign: Unknown."""

    def lst(*items: Any, has_more: bool = False) -> Answer:
        return ans(200, {"object": "list", "data": list(items), "has_more": has_more})

    def by_ref(answer: Answer) -> object:
        return a.lookup_list(answer, parse_intent, lambda i: i.reference == "pay_1")

    assert by_ref(lst()) == NotFound()
    assert isinstance(by_ref(lst(intent_json())), Found)
    assert isinstance(by_ref(lst(intent_json(), intent_json(id="pi_2"))), Ambiguous)
    assert isinstance(by_ref(lst(intent_json(), has_more=True)), Unknown)
    assert isinstance(by_ref(lst(intent_json(reference="pay_2"))), Unknown)
    assert isinstance(by_ref(ans(200, {"data": "nope"})), Unknown)
