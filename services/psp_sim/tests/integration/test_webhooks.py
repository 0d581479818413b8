"""Webhooks end to end: a real receiver, signatures checked with backbone.psp's verify helper (an
independent implementation), and each webhook fault of the control API."""

from __future__ import annotations

import time

import pytest
from backbone.ids import new_id
from backbone.psp import (
    Applied,
    PaymentIntent,
    SignatureInvalid,
    SignatureVerified,
    WebhookEvent,
    parse_event,
    verify_signature,
)
from backbone.psp.client import EventsPage
from backbone.psp.signature import HEADER
from backbone.testing.processes import wait_until
from psp_sim.testing import WEBHOOK_SECRET, Received, Receiver, SimProcess, _intent_of


def _authorized(psp: SimProcess, reference: str) -> PaymentIntent:
    with psp.client() as client:
        result = client.create_intent(
            new_id("op"),
            amount_minor=2500,
            currency="GBP",
            reference=reference,
            payment_method="pm_card_visa",
            confirm=True,
        )
    assert isinstance(result, Applied)
    return result.value


def _capture(psp: SimProcess, intent_id: str) -> PaymentIntent:
    with psp.client() as client:
        result = client.capture_intent(new_id("op"), intent_id)
    assert isinstance(result, Applied)
    return result.value


def _verify(received: Received, secrets: list[str]) -> object:
    return verify_signature(received.headers.get(HEADER), received.body, secrets, now_s=int(time.time()))


def test_events_are_signed_typed_and_carry_the_intent(psp: SimProcess, receiver: Receiver) -> None:
    """Authorize then capture: two events in order, each verifiable with the secret, each parsing to
    the intent as it was after the change."""
    intent = _authorized(psp, new_id("pay"))
    _capture(psp, intent.id)
    got = receiver.wait_for(2, intent_id=intent.id)
    assert [r.event["type"] for r in got] == [
        "payment_intent.amount_capturable_updated",
        "payment_intent.succeeded",
    ]
    for received in got:
        assert isinstance(_verify(received, [WEBHOOK_SECRET]), SignatureVerified)
        event = parse_event(received.body)
        assert isinstance(event, WebhookEvent) and isinstance(event.object, PaymentIntent)
    last = parse_event(got[1].body)
    assert isinstance(last, WebhookEvent) and isinstance(last.object, PaymentIntent)
    assert (last.object.status, last.object.amount_received_minor) == ("succeeded", 2500)


def test_webhook_before_the_synchronous_response(psp: SimProcess, receiver: Receiver) -> None:
    """With the fault, the PSP delivers the capture's webhook before it answers the capture call: the
    receiver holds it the moment the client returns (no waiting)."""
    intent = _authorized(psp, new_id("pay"))
    psp.fault(kind="webhook_before_response", operation="capture", count=1)
    _capture(psp, intent.id)
    assert [r.event["type"] for r in receiver.events(intent_id=intent.id)][-1] == "payment_intent.succeeded"


def test_duplicated_webhook_arrives_n_plus_one_times_identically(psp: SimProcess, receiver: Receiver) -> None:
    """``webhook_duplicate`` copies=2: the same event id and the same bytes arrive three times."""
    reference = new_id("pay")
    psp.fault(kind="webhook_duplicate", reference=reference, event_type="payment_intent.succeeded", copies=2)
    intent = _authorized(psp, reference)
    _capture(psp, intent.id)
    got = receiver.wait_for(3, event_type="payment_intent.succeeded", intent_id=intent.id)
    assert len({r.event["id"] for r in got}) == 1 and len({r.body for r in got}) == 1


def test_reordered_webhooks_arrive_newest_first(psp: SimProcess, receiver: Receiver) -> None:
    """``webhook_reorder`` group_size=2 holds the authorization's event until the capture's exists, then
    releases both, newest first: the receiver sees "succeeded" before "authorized"."""
    reference = new_id("pay")
    psp.fault(kind="webhook_reorder", reference=reference, group_size=2, count=1)
    intent = _authorized(psp, reference)
    assert receiver.events(intent_id=intent.id) == []
    _capture(psp, intent.id)
    got = receiver.wait_for(2, intent_id=intent.id)
    assert [r.event["type"] for r in got] == [
        "payment_intent.succeeded",
        "payment_intent.amount_capturable_updated",
    ]


def test_dropped_webhook_is_never_sent_but_listed(psp: SimProcess, receiver: Receiver) -> None:
    """A dropped event is listed as ``dropped`` and never arrives; the next event still does."""
    reference = new_id("pay")
    psp.fault(kind="webhook_drop", event_type="payment_intent.amount_capturable_updated", reference=reference)
    intent = _authorized(psp, reference)
    _capture(psp, intent.id)
    receiver.wait_for(1, event_type="payment_intent.succeeded", intent_id=intent.id)
    assert receiver.events(event_type="payment_intent.amount_capturable_updated", intent_id=intent.id) == []
    dropped = psp.deliveries(reference=reference, event_type="payment_intent.amount_capturable_updated")
    assert [(d["state"], d["attempt_log"]) for d in dropped] == [("dropped", [])]


def test_delayed_webhook_is_overtaken_by_a_later_one(psp: SimProcess, receiver: Receiver) -> None:
    """``webhook_delay`` holds the authorization's event 2 s: the capture's event, created later,
    arrives first; the delayed one still arrives."""
    reference = new_id("pay")
    psp.fault(
        kind="webhook_delay",
        reference=reference,
        event_type="payment_intent.amount_capturable_updated",
        delay_ms=2000,
    )
    intent = _authorized(psp, reference)
    _capture(psp, intent.id)
    got = receiver.wait_for(2, intent_id=intent.id)
    assert [r.event["type"] for r in got] == [
        "payment_intent.succeeded",
        "payment_intent.amount_capturable_updated",
    ]


def test_wrong_secret_and_expired_timestamp_are_rejected_by_the_verifier(
    psp: SimProcess, receiver: Receiver
) -> None:
    """A webhook signed with a wrong secret fails as mismatch; one stamped an hour ago
    (right secret) fails as timestamp_outside_tolerance."""
    wrong, old = new_id("pay"), new_id("pay")
    psp.fault(kind="webhook_wrong_secret", reference=wrong)
    psp.fault(kind="webhook_expired_signature", reference=old, age_s=3600)
    first, second = _authorized(psp, wrong), _authorized(psp, old)
    (forged,) = receiver.wait_for(1, intent_id=first.id)
    (stale,) = receiver.wait_for(1, intent_id=second.id)
    assert _verify(forged, [WEBHOOK_SECRET]) == SignatureInvalid("mismatch")
    assert _verify(stale, [WEBHOOK_SECRET]) == SignatureInvalid("timestamp_outside_tolerance")


@pytest.mark.parametrize("kind", ["webhook_wrong_secret", "webhook_expired_signature"])
def test_a_webhook_refused_for_its_signature_is_retried_signed_afresh(psp: SimProcess, kind: str) -> None:
    """A receiver that verifies refuses the attempt the fault spoiled; the retry is signed with the
    current secret and time, as Stripe signs every attempt, so it verifies and is delivered (a drill
    saw a dispute's webhook retried with the same stale timestamp until the PSP gave up)."""
    verifying = Receiver()
    verifying.answer = lambda n: (
        200 if isinstance(_verify(verifying.received[n - 1], [WEBHOOK_SECRET]), SignatureVerified) else 400
    )
    verifying.start()
    try:
        psp.ok("PATCH", "/control/config", {"webhook_url": verifying.url})
        reference = new_id("pay")
        psp.fault(kind=kind, reference=reference, age_s=3600, count=1)
        intent = _authorized(psp, reference)

        def delivered() -> list[list[int]]:
            found = psp.deliveries(intent=intent.id)
            if not found or any(d["state"] != "delivered" for d in found):
                return []
            return [[a["status_code"] for a in d["attempt_log"]] for d in found]

        wait_until(lambda: delivered() != [], 30, "every webhook of the intent delivered")
        codes = delivered()
        assert codes.count([400, 200]) == 1  # the one event the fault spoiled: refused, then verified
        assert all(c == [200] for c in codes if c != [400, 200]), codes
    finally:
        verifying.close()


def test_secret_rotation_signs_with_both_then_only_the_new(psp: SimProcess, receiver: Receiver) -> None:
    """During a rotation each webhook carries two v1 signatures, so receivers holding either secret
    verify it; after the rotation ends only the new secret verifies."""
    new_secret = "whsec_rotated_secret_abcdefgh"
    psp.ok("POST", "/control/webhook-secrets/rotate", {"secret": new_secret})
    during = _authorized(psp, new_id("pay"))
    (rotating,) = receiver.wait_for(1, intent_id=during.id)
    assert rotating.headers[HEADER].count("v1=") == 2
    assert isinstance(_verify(rotating, [WEBHOOK_SECRET]), SignatureVerified)
    assert isinstance(_verify(rotating, [new_secret]), SignatureVerified)
    psp.ok("POST", "/control/webhook-secrets/end-rotation")
    after = _authorized(psp, new_id("pay"))
    (rotated,) = receiver.wait_for(1, intent_id=after.id)
    assert _verify(rotated, [WEBHOOK_SECRET]) == SignatureInvalid("mismatch")
    assert isinstance(_verify(rotated, [new_secret, WEBHOOK_SECRET]), SignatureVerified)


def test_failed_deliveries_are_retried_with_backoff_then_given_up(psp: SimProcess) -> None:
    """A receiver answering 500 twice gets the event on the third attempt (three attempts recorded);
    a receiver that always fails gets attempts_max attempts, then the copy is ``failed``."""
    flaky = Receiver(answer=lambda n: 500 if n <= 2 else 200).start()
    try:
        psp.ok("PATCH", "/control/config", {"webhook_url": flaky.url, "webhook_attempts_max": 3})
        intent = _authorized(psp, new_id("pay"))
        flaky.wait_for(3, intent_id=intent.id)
        # The receiver holds the third attempt before the simulator records its 200.
        wait_until(lambda: psp.deliveries(intent=intent.id)[0]["state"] == "delivered", 10, "delivered")
        (delivery,) = psp.deliveries(intent=intent.id)
        assert [a["status_code"] for a in delivery["attempt_log"]] == [500, 500, 200]
    finally:
        flaky.close()
    dead = Receiver(answer=lambda _: 503).start()
    try:
        psp.ok("PATCH", "/control/config", {"webhook_url": dead.url})
        intent = _authorized(psp, new_id("pay"))
        dead.wait_for(3, intent_id=intent.id)
        wait_until(lambda: psp.deliveries(intent=intent.id)[0]["state"] == "failed", 10, "delivery failed")
        assert len(psp.deliveries(intent=intent.id)[0]["attempt_log"]) == 3
    finally:
        dead.close()


def _all_events(psp: SimProcess, since_s: int, limit: int) -> list[dict[str, object]]:
    """Every event created since ``since_s``, read page by page (``limit`` per page), newest first."""
    found: list[dict[str, object]] = []
    after: str | None = None
    with psp.client() as client:
        while True:
            page = client.list_events(
                created_gte=since_s, created_lte=int(time.time()) + 5, starting_after=after, limit=limit
            )
            assert isinstance(page, EventsPage), page
            found.extend(page.events)
            if not page.has_more:
                return found
            after = str(page.events[-1]["id"])


def test_the_events_list_holds_every_event_even_one_whose_webhook_was_dropped(
    psp: SimProcess, receiver: Receiver
) -> None:
    """``GET /v1/events`` (Stripe's list) gives every event newest first, paged one at a time with
    ``starting_after``: the same objects the webhooks carried, and also the event whose webhook a
    ``webhook_drop`` fault never sent, so that a merchant can catch up on it."""
    since, reference = int(time.time()) - 1, new_id("pay")
    intent = _authorized(psp, reference)
    [authorized] = receiver.wait_for(1, intent_id=intent.id)
    psp.fault(kind="webhook_drop", event_type="payment_intent.succeeded", reference=reference)
    _capture(psp, intent.id)
    time.sleep(1.0)
    assert len(receiver.events(intent_id=intent.id)) == 1, "the capture's webhook was not dropped"
    listed = [e for e in _all_events(psp, since, limit=1) if _intent_of(e) == intent.id]
    types = ["payment_intent.succeeded", "payment_intent.amount_capturable_updated"]
    assert [e["type"] for e in listed] == types
    assert listed[1] == authorized.event
    created = [int(str(e["created"])) for e in _all_events(psp, since, limit=100)]
    assert created == sorted(created, reverse=True)


@pytest.mark.parametrize(
    "query",
    ["limit=0", "limit=101", "limit=x", "created[gte]=-1", "ending_before=evt_1", "starting_after=evt_nope"],
)
def test_a_bad_events_list_request_is_refused(psp: SimProcess, query: str) -> None:
    """A limit outside 1..100, a non-numeric or negative bound, an unknown parameter: 400; a cursor
    that names no event: 404. Nothing is listed."""
    with psp.client() as client:
        answer = client._get(f"/v1/events?{query}")
    assert getattr(answer, "status", None) == (404 if "nope" in query else 400)
