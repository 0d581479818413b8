"""Payouts through the real backbone.psp client against the simulator process over HTTP: create,
replay, key reuse, lookups, the pending -> paid | failed lifecycle, returns, every payout fault, signed
webhooks, and the settlement rows. The payout count per reference (control API) is the "exactly one"
check withdrawal tests rely on."""

from __future__ import annotations

import concurrent.futures
import csv
import io
import json
import time
import urllib.error
import urllib.request
from typing import Any

from backbone.ids import new_id
from backbone.psp import (
    Absent,
    Applied,
    Conflict,
    Found,
    NoAnswer,
    Payout,
    PayoutStatus,
    PayoutWrite,
    Refused,
    SignatureVerified,
    WebhookEvent,
    parse_event,
    verify_signature,
)
from backbone.psp.signature import HEADER
from backbone.testing.processes import wait_until
from psp_sim.testing import API_KEY, WEBHOOK_SECRET, Receiver, SimProcess


def _delay(psp: SimProcess, delay_ms: int) -> None:
    psp.ok("PATCH", "/control/config", {"payout_settle_delay_ms": delay_ms})


def _pay_out(
    psp: SimProcess,
    reference: str,
    *,
    op: str | None = None,
    amount_minor: int = 2500,
    destination: str = "pm_card_visa",
    timeout_ms: int = 3000,
) -> PayoutWrite:
    with psp.client(timeout_ms=timeout_ms) as client:
        return client.create_payout(
            op or new_id("op"),
            amount_minor=amount_minor,
            currency="EUR",
            destination=destination,
            reference=reference,
            metadata={"login": "1001"},
        )


def _applied(result: PayoutWrite) -> Payout:
    assert isinstance(result, Applied), result
    return result.value


def _status_becomes(psp: SimProcess, payout_id: str, status: PayoutStatus) -> Payout:
    def current() -> Payout | None:
        with psp.client() as client:
            found = client.retrieve_payout(payout_id)
        return found.value if isinstance(found, Found) else None

    wait_until(lambda: (p := current()) is not None and p.status is status, 10.0, f"{payout_id} {status}")
    payout = current()
    assert payout is not None
    return payout


def _raw_post(psp: SimProcess, key: str, body: bytes) -> tuple[int, dict[str, Any]]:
    headers = {
        "Authorization": f"Bearer {API_KEY}",
        "Idempotency-Key": key,
        "Content-Type": "application/json",
    }
    request = urllib.request.Request(psp.api_url + "/v1/payouts", body, headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_create_is_pending_then_paid_with_a_signed_webhook(psp: SimProcess, receiver: Receiver) -> None:
    """A payout answers pending with every field; after the settle delay it is paid, and the receiver
    gets payout.created then payout.paid, signed with the current secret, parsing to the Payout."""
    _delay(psp, 300)
    reference = new_id("wd")
    payout = _applied(_pay_out(psp, reference))
    assert payout.id.startswith("po_")
    assert (payout.status, payout.amount_minor, payout.currency) == (PayoutStatus.PENDING, 2500, "EUR")
    assert (payout.destination, payout.reference, payout.failure_code) == ("pm_card_visa", reference, None)
    assert payout.metadata == {"login": "1001"}
    assert _status_becomes(psp, payout.id, PayoutStatus.PAID).failure_code is None
    got = receiver.wait_for(2, intent_id=payout.id)
    assert [r.event["type"] for r in got] == ["payout.created", "payout.paid"]
    for received in got:
        check = verify_signature(
            received.headers.get(HEADER), received.body, [WEBHOOK_SECRET], now_s=int(time.time())
        )
        assert isinstance(check, SignatureVerified)
    event = parse_event(got[1].body)
    assert isinstance(event, WebhookEvent) and isinstance(event.object, Payout)
    assert event.object.status is PayoutStatus.PAID and event.object.reference == reference
    assert psp.payout_count(reference) == 1


def test_settle_at_once_when_the_delay_is_zero(psp: SimProcess) -> None:
    """With payout_settle_delay_ms 0 the create itself answers paid."""
    _delay(psp, 0)
    assert _applied(_pay_out(psp, new_id("wd"))).status is PayoutStatus.PAID


def test_same_key_replays_and_a_different_body_is_key_reuse(psp: SimProcess) -> None:
    """The same operation id and request replay the same payout (still one per reference); the same
    operation id with another amount is Refused idempotency_key_reused and creates nothing."""
    reference, op = new_id("wd"), new_id("op")
    first = _applied(_pay_out(psp, reference, op=op))
    again = _applied(_pay_out(psp, reference, op=op))
    assert again == first
    reused = _pay_out(psp, reference, op=op, amount_minor=2600)
    assert isinstance(reused, Refused) and (reused.status, reused.code) == (409, "idempotency_key_reused")
    assert psp.payout_count(reference) == 1


def test_concurrent_creates_with_one_operation_id_make_one_payout(psp: SimProcess) -> None:
    """Eight workers send the same payout with the same operation id at once: eight identical answers,
    exactly one payout for the reference (the key is claimed once, the others replay)."""
    reference, op = new_id("wd"), new_id("op")
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: _pay_out(psp, reference, op=op), range(8)))
    assert len({_applied(r).id for r in results}) == 1
    assert psp.payout_count(reference) == 1


def test_lookups_by_id_and_by_reference(psp: SimProcess) -> None:
    """retrieve_payout finds it, an unknown id is Absent; find_payout_by_reference is Found for one,
    Absent for none and Conflict for two payouts with one reference (two operation ids)."""
    reference = new_id("wd")
    payout = _applied(_pay_out(psp, reference))
    with psp.client() as client:
        found = client.retrieve_payout(payout.id)
        assert isinstance(found, Found) and found.value.id == payout.id
        assert isinstance(client.retrieve_payout("po_missing"), Absent)
        by_ref = client.find_payout_by_reference(reference)
        assert isinstance(by_ref, Found) and by_ref.value.id == payout.id
        assert isinstance(client.find_payout_by_reference(new_id("wd")), Absent)
        _applied(_pay_out(psp, reference))
        two = client.find_payout_by_reference(reference)
        assert isinstance(two, Conflict) and len(two.values) == 2
    assert psp.payout_count(reference) == 2


def test_bad_input_is_a_clear_4xx_and_creates_nothing(psp: SimProcess) -> None:
    """A card number as destination is card_data_forbidden; an unknown token is resource_missing;
    a float amount, a missing reference or an unknown parameter are 400s; no payout exists after."""
    reference = new_id("wd")
    card = _pay_out(psp, reference, destination="4242 4242 4242 4242")
    assert isinstance(card, Refused) and (card.status, card.code) == (400, "card_data_forbidden")
    unknown = _pay_out(psp, reference, destination="pm_nonexistent")
    assert isinstance(unknown, Refused) and (unknown.status, unknown.code) == (400, "resource_missing")
    for body, code in (
        ({"amount_minor": 10.5, "currency": "EUR", "destination": "pm_card_visa", "reference": reference},
         "parameter_invalid_integer"),
        ({"amount_minor": 100, "currency": "EUR", "destination": "pm_card_visa"}, "parameter_missing"),
        ({"amount_minor": 100, "currency": "EUR", "destination": "pm_card_visa", "reference": reference,
          "card_number": "x"}, "card_data_forbidden"),
        ({"amount_minor": 100, "currency": "EUR", "destination": "pm_card_visa", "reference": reference,
          "speed": "instant"}, "parameter_unknown"),
    ):  # fmt: skip  # packed: a few items a line read better than one each
        status, answer = _raw_post(psp, new_id("op"), json.dumps(body).encode())
        assert (status, answer["error"]["code"]) == (400, code), answer
    assert psp.payout_count(reference) == 0


def test_faults_on_payout_reads_are_no_answer_never_absent(psp: SimProcess) -> None:
    """A status query that fails (503) or never answers (past the client's timeout) is NoAnswer for
    both lookups of a payout, never Absent; once the rule is spent the payout is found."""
    reference = new_id("wd")
    payout = _applied(_pay_out(psp, reference))
    psp.fault(kind="fail_without_apply", operation="retrieve", reference=reference, count=1)
    psp.fault(kind="hang_without_apply", operation="retrieve", reference=reference, hang_ms=2000, count=1)
    with psp.client(timeout_ms=700) as client:
        assert client.find_payout_by_reference(reference) == NoAnswer("http_503")
    # A fresh client: a read failing on a reused connection is retried once (transport), which
    # would take the answer after the hang rule is spent.
    with psp.client(timeout_ms=700) as client:
        assert client.retrieve_payout(payout.id) == NoAnswer("timeout")
    with psp.client() as client:
        assert isinstance(client.retrieve_payout(payout.id), Found)


def test_a_failing_destination_fails_after_pending(psp: SimProcess, receiver: Receiver) -> None:
    """pm_card_declined is accepted (pending) and then fails with card_declined: payout.failed."""
    _delay(psp, 200)
    payout = _applied(_pay_out(psp, new_id("wd"), destination="pm_card_declined"))
    assert payout.status is PayoutStatus.PENDING
    failed = _status_becomes(psp, payout.id, PayoutStatus.FAILED)
    assert failed.failure_code == "card_declined" and failed.failure_message
    assert receiver.wait_for(1, event_type="payout.failed", intent_id=payout.id)


def test_fault_apply_then_lose_the_response(psp: SimProcess) -> None:
    """apply_then_fail: the client gets NoAnswer, the lookup by reference finds the payout, and the
    same operation id replays it: exactly one payout."""
    reference, op = new_id("wd"), new_id("op")
    psp.fault(kind="apply_then_fail", operation="payout", reference=reference, count=1)
    first = _pay_out(psp, reference, op=op)
    assert isinstance(first, NoAnswer) and first.reason == "http_500"
    with psp.client() as client:
        found = client.find_payout_by_reference(reference)
    assert isinstance(found, Found)
    assert _applied(_pay_out(psp, reference, op=op)).id == found.value.id
    assert psp.payout_count(reference) == 1


def test_fault_apply_then_hang_is_no_answer_within_the_timeout(psp: SimProcess) -> None:
    """apply_then_hang past the client's timeout: NoAnswer("timeout"), and the payout exists."""
    reference = new_id("wd")
    psp.fault(kind="apply_then_hang", operation="payout", reference=reference, hang_ms=3000, count=1)
    assert _pay_out(psp, reference, timeout_ms=700) == NoAnswer("timeout")
    assert psp.payout_count(reference) == 1


def test_fault_fail_without_apply_creates_nothing(psp: SimProcess) -> None:
    """fail_without_apply: NoAnswer (503), a complete Absent by reference, then the same operation id
    creates the payout (the key was not kept)."""
    reference, op = new_id("wd"), new_id("op")
    psp.fault(kind="fail_without_apply", operation="payout", count=1)
    first = _pay_out(psp, reference, op=op)
    assert isinstance(first, NoAnswer) and first.reason == "http_503"
    with psp.client() as client:
        assert isinstance(client.find_payout_by_reference(reference), Absent)
    assert psp.payout_count(reference) == 0
    _applied(_pay_out(psp, reference, op=op))
    assert psp.payout_count(reference) == 1


def test_fault_webhook_before_response(psp: SimProcess, receiver: Receiver) -> None:
    """webhook_before_response: payout.created is at the receiver when the create returns."""
    psp.fault(kind="webhook_before_response", operation="payout", count=1)
    payout = _applied(_pay_out(psp, new_id("wd")))
    assert [r.event["type"] for r in receiver.events(intent_id=payout.id)] == ["payout.created"]


def test_fault_payout_refuse_at_create_is_a_definite_refusal(psp: SimProcess) -> None:
    """payout_refuse: a 402 card_error with the code asked for (Refused, definite), nothing created;
    the same operation id replays the refusal; the next payout is accepted again."""
    reference, op = new_id("wd"), new_id("op")
    psp.fault(kind="payout_refuse", code="card_declined", count=1)
    refused = _pay_out(psp, reference, op=op)
    assert isinstance(refused, Refused) and (refused.status, refused.code) == (402, "card_declined")
    assert _pay_out(psp, reference, op=op) == refused
    assert psp.payout_count(reference) == 0
    _applied(_pay_out(psp, new_id("wd")))


def test_fault_payout_fail_after_pending(psp: SimProcess, receiver: Receiver) -> None:
    """payout_fail: accepted pending, then failed with the code asked for, and payout.failed sent."""
    _delay(psp, 200)
    reference = new_id("wd")
    psp.fault(kind="payout_fail", reference=reference, code="account_closed", count=1)
    payout = _applied(_pay_out(psp, reference))
    assert payout.status is PayoutStatus.PENDING
    assert _status_becomes(psp, payout.id, PayoutStatus.FAILED).failure_code == "account_closed"
    got = receiver.wait_for(1, event_type="payout.failed", intent_id=payout.id)
    event = parse_event(got[0].body)
    assert isinstance(event, WebhookEvent) and isinstance(event.object, Payout)
    assert event.object.failure_code == "account_closed"


def test_a_replay_does_not_spend_a_payout_fault(psp: SimProcess) -> None:
    """payout_fail with count 2: payout A fails, its replay answers the same without spending the
    budget, so the next payout B fails too; the one after is paid again."""
    _delay(psp, 0)
    psp.fault(kind="payout_fail", count=2)
    op_a = new_id("op")
    a = _applied(_pay_out(psp, new_id("wd"), op=op_a))
    assert _applied(_pay_out(psp, a.reference or "", op=op_a)) == a
    b = _applied(_pay_out(psp, new_id("wd")))
    c = _applied(_pay_out(psp, new_id("wd")))
    assert [x.status for x in (a, b, c)] == [PayoutStatus.FAILED, PayoutStatus.FAILED, PayoutStatus.PAID]


def test_return_after_paid(psp: SimProcess, receiver: Receiver) -> None:
    """A paid payout returned over the control API is returned (with the code), sends payout.returned;
    returning it again, or returning a pending payout, is a 400 that changes nothing."""
    _delay(psp, 0)
    payout = _applied(_pay_out(psp, new_id("wd")))
    status, body = psp.control("POST", f"/control/payouts/{payout.id}/return", {"code": "account_closed"})
    assert status == 200 and (body["status"], body["failure_code"]) == ("returned", "account_closed")
    assert receiver.wait_for(1, event_type="payout.returned", intent_id=payout.id)
    status, body = psp.control("POST", f"/control/payouts/{payout.id}/return", {})
    assert (status, body["error"]["code"]) == (400, "payout_unexpected_state")
    _delay(psp, 600_000)
    pending = _applied(_pay_out(psp, new_id("wd")))
    status, _ = psp.control("POST", f"/control/payouts/{pending.id}/return", {})
    assert status == 400
    assert psp.control("POST", "/control/payouts/po_missing/return", {})[0] == 404
    with psp.client() as client:
        found = client.retrieve_payout(payout.id)
    assert isinstance(found, Found) and found.value.status is PayoutStatus.RETURNED


def test_webhook_faults_apply_to_payout_events(psp: SimProcess, receiver: Receiver) -> None:
    """webhook_duplicate on payout.paid: the same event (same id, same bytes) arrives twice."""
    _delay(psp, 0)
    psp.fault(kind="webhook_duplicate", event_type="payout.paid", copies=1)
    payout = _applied(_pay_out(psp, new_id("wd")))
    got = receiver.wait_for(2, event_type="payout.paid", intent_id=payout.id)
    assert got[0].body == got[1].body


def test_webhook_drop_and_reorder_apply_to_payout_events(psp: SimProcess, receiver: Receiver) -> None:
    """webhook_drop on payout.created: listed as dropped, never sent, while payout.paid arrives;
    webhook_reorder scoped by our reference: payout.created is held until payout.paid fills the group,
    then both go newest first."""
    _delay(psp, 0)
    psp.fault(kind="webhook_drop", event_type="payout.created", count=1)
    dropped = _applied(_pay_out(psp, new_id("wd")))
    receiver.wait_for(1, event_type="payout.paid", intent_id=dropped.id)
    assert [d["state"] for d in psp.deliveries(event_type="payout.created", intent=dropped.id)] == ["dropped"]
    assert receiver.events(event_type="payout.created", intent_id=dropped.id) == []

    reference = new_id("wd")
    psp.fault(kind="webhook_reorder", reference=reference, group_size=2, count=1)
    _delay(psp, 100)
    payout = _applied(_pay_out(psp, reference))
    got = receiver.wait_for(2, intent_id=payout.id)
    assert [r.event["type"] for r in got] == ["payout.paid", "payout.created"]


def test_settlement_rows_for_paid_and_returned_payouts(psp: SimProcess) -> None:
    """A paid payout is a `payout` row (gross = net = -amount, fee 0, no payment intent, source the
    payout, reference ours); its return a `payout_return` row (+amount); a failed one has no row."""
    _delay(psp, 0)
    reference = new_id("wd")
    payout = _applied(_pay_out(psp, reference, amount_minor=4321))
    psp.ok("POST", f"/control/payouts/{payout.id}/return", {})
    _applied(_pay_out(psp, new_id("wd"), destination="pm_card_declined"))
    txns = psp.ok("GET", f"/control/balance-transactions?reference={reference}")["data"]
    assert [(t["type"], t["gross_minor"], t["fee_minor"], t["net_minor"]) for t in txns] == [
        ("payout", -4321, 0, -4321),
        ("payout_return", 4321, 0, 4321),
    ]
    day = txns[0]["business_date"]
    rows = list(csv.DictReader(io.StringIO(psp.ok("GET", f"/control/reports/settlement?date={day}"))))
    mine = [r for r in rows if r["reference"] == reference]
    assert [(r["type"], r["payment_intent_id"], r["source_id"], r["gross_minor"]) for r in mine] == [
        ("payout", "", payout.id, "-4321"),
        ("payout_return", "", payout.id, "4321"),
    ]
    assert len(rows) == 2  # the failed payout moved no money
