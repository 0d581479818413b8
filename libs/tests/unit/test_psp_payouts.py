"""Payouts in backbone.psp: strict parsing of the payout object and its events, and the mapping of
every HTTP answer to a create or a lookup onto the closed sets PayoutWrite and PayoutLookup."""

from __future__ import annotations

import json
from typing import Any

import pytest
from backbone.psp import (
    EVENT_TYPES,
    Absent,
    Applied,
    Conflict,
    Found,
    NoAnswer,
    Payout,
    PayoutStatus,
    PspParseError,
    Refused,
    WebhookEvent,
    parse_event,
    parse_object,
    parse_payout,
)
from backbone.psp import answers as a
from backbone.psp.transport import Answer, Failure


def payout_json(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "object": "payout",
        "id": "po_1",
        "status": "pending",
        "amount_minor": 2500,
        "currency": "EUR",
        "destination": "pm_card_visa",
        "reference": "wd_1",
        "failure_code": None,
        "failure_message": None,
        "metadata": {"login": "1001"},
        "created": 1_800_000_000,
        "livemode": False,
    }
    return {**base, **changes}


def ans(status: int, document: Any) -> Answer:
    return Answer(status, document if isinstance(document, bytes) else json.dumps(document).encode())


def test_payout_parses_to_typed_values() -> None:
    """Every field of the wire format lands in the frozen value; the status is the enum."""
    payout = parse_payout(payout_json())
    assert payout == Payout(
        id="po_1",
        status=PayoutStatus.PENDING,
        amount_minor=2500,
        currency="EUR",
        destination="pm_card_visa",
        reference="wd_1",
        failure_code=None,
        failure_message=None,
        metadata={"login": "1001"},
    )
    assert payout.status == "pending"
    with pytest.raises(TypeError):
        payout.metadata["x"] = "y"  # type: ignore[index]


def test_failed_and_returned_payouts_carry_their_codes() -> None:
    """A failed payout says why; a returned one may carry the bank's return code."""
    failed = parse_payout(payout_json(status="failed", failure_code="card_declined", failure_message="no"))
    assert (failed.status, failed.failure_code, failed.failure_message) == (
        PayoutStatus.FAILED,
        "card_declined",
        "no",
    )
    returned = parse_payout(payout_json(status="returned", failure_code="account_closed"))
    assert returned.status is PayoutStatus.RETURNED


@pytest.mark.parametrize(
    "changes",
    [
        {"object": "refund"},
        {"status": "succeeded"},
        {"amount_minor": 0},
        {"amount_minor": -5},
        {"amount_minor": 25.0},
        {"amount_minor": True},
        {"amount_minor": "2500"},
        {"currency": "XXQ"},
        {"destination": None},
        {"destination": ""},
        {"status": "failed"},  # failed without a code
        {"status": "paid", "failure_code": "card_declined"},  # paid yet failed
        {"metadata": {"n": 1}},
        {"id": None},
    ],
)
def test_a_payout_breaking_the_contract_is_unreadable(changes: dict[str, Any]) -> None:
    """Floats, bools, text money, unknown statuses or currencies and contradictions are refused."""
    with pytest.raises(PspParseError):
        parse_payout(payout_json(**changes))


def test_payout_events_are_known_and_parse_to_payouts() -> None:
    """payout.* are documented event types, and their data.object is read as a Payout."""
    assert {"payout.created", "payout.paid", "payout.failed", "payout.returned"} <= EVENT_TYPES
    assert isinstance(parse_object(payout_json()), Payout)
    body = {
        "id": "evt_1",
        "object": "event",
        "type": "payout.paid",
        "created": 1_800_000_001,
        "data": {"object": payout_json(status="paid")},
    }
    event = parse_event(json.dumps(body).encode())
    assert isinstance(event, WebhookEvent)
    assert event.type == "payout.paid"
    assert isinstance(event.object, Payout) and event.object.status is PayoutStatus.PAID


def test_payout_write_mapping() -> None:
    """2xx is Applied; a 4xx or a 402 with an error code is Refused (nothing created); key reuse is
    Refused; every timeout, connection error, 5xx, other 409 or unreadable answer is NoAnswer."""
    assert a.payout_write(ans(200, payout_json())) == Applied(parse_payout(payout_json()))
    declined = {"error": {"type": "card_error", "code": "card_declined", "message": "m"}}
    assert a.payout_write(ans(402, declined)) == Refused(402, "card_declined", "m")
    invalid = {"error": {"type": "invalid_request_error", "code": "card_data_forbidden", "message": "m"}}
    assert a.payout_write(ans(400, invalid)) == Refused(400, "card_data_forbidden", "m")
    reused = {"error": {"type": "idempotency_error", "code": "idempotency_key_reused", "message": "m"}}
    assert isinstance(a.payout_write(ans(409, reused)), Refused)
    in_progress = {"error": {"type": "idempotency_error", "code": "idempotency_key_in_use", "message": "m"}}
    for result in (
        Failure("timeout"),
        Failure("connection_error: ConnectionResetError"),
        ans(500, {"error": {"type": "api_error", "code": "simulated_failure", "message": "m"}}),
        ans(503, b"<html>"),
        ans(504, b""),
        ans(402, b"garbage"),
        ans(409, in_progress),
        ans(200, b"not json"),
        ans(200, payout_json(amount_minor=1.5)),
        ans(200, {"object": "payment_intent"}),
    ):
        assert isinstance(a.payout_write(result), NoAnswer), result


def test_payout_lookup_mapping() -> None:
    """By id: Found, 404 resource_missing is Absent, any other 404 is NoAnswer. By reference: one is
    Found, none is Absent, two are Conflict, a payout of another reference is NoAnswer."""
    missing = {"error": {"type": "invalid_request_error", "code": "resource_missing", "message": "m"}}
    assert isinstance(a.lookup_one(ans(200, payout_json()), parse_payout), Found)
    assert isinstance(a.lookup_one(ans(404, missing), parse_payout), Absent)
    assert isinstance(a.lookup_one(ans(404, b"nginx"), parse_payout), NoAnswer)
    assert isinstance(a.lookup_one(Failure("timeout"), parse_payout), NoAnswer)

    def listing(*items: dict[str, Any]) -> Answer:
        return ans(200, {"object": "list", "data": list(items), "has_more": False})

    def ref(p: Payout) -> bool:
        return p.reference == "wd_1"

    assert isinstance(a.lookup_list(listing(), parse_payout, ref), Absent)
    assert isinstance(a.lookup_list(listing(payout_json()), parse_payout, ref), Found)
    two = a.lookup_list(listing(payout_json(), payout_json(id="po_2")), parse_payout, ref)
    assert isinstance(two, Conflict) and len(two.values) == 2
    other = a.lookup_list(listing(payout_json(reference="wd_2")), parse_payout, ref)
    assert isinstance(other, NoAnswer)
