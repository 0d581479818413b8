"""The payment flows of the simulator through the real client: 3-D Secure, declines, partial capture,
cancel, refunds capped at the captured amount, pending refunds, chargebacks, and refused input."""

from __future__ import annotations

from backbone.ids import new_id
from backbone.psp import (
    Absent,
    Applied,
    Declined,
    Found,
    PaymentIntent,
    Refund,
    Refused,
    WebhookEvent,
    parse_event,
)
from backbone.psp.model import Dispute
from psp_sim.testing import Receiver, SimProcess


def _create(
    psp: SimProcess, reference: str, method: str = "pm_card_visa", amount_minor: int = 1000
) -> object:
    with psp.client() as client:
        return client.create_intent(
            new_id("op"),
            amount_minor=amount_minor,
            currency="EUR",
            reference=reference,
            payment_method=method,
            confirm=True,
        )


def _captured(psp: SimProcess, amount_minor: int = 1000, capture_minor: int | None = None) -> PaymentIntent:
    created = _create(psp, new_id("pay"), amount_minor=amount_minor)
    assert isinstance(created, Applied)
    with psp.client() as client:
        result = client.capture_intent(new_id("op"), created.value.id, amount_minor=capture_minor)
    assert isinstance(result, Applied) and result.value.status == "succeeded"
    return result.value


def test_3ds_challenge_then_success_then_capture(psp: SimProcess, receiver: Receiver) -> None:
    """3-D Secure: requires_action (a redirect URL, a webhook), the customer passes, requires_capture,
    capture. requires_action is an Applied result, not a failure."""
    created = _create(psp, new_id("pay"), "pm_card_3ds_required")
    assert isinstance(created, Applied)
    assert created.value.status == "requires_action" and created.value.next_action_url
    receiver.wait_for(1, event_type="payment_intent.requires_action", intent_id=created.value.id)
    with psp.client() as client:
        passed = client.complete_action(new_id("op"), created.value.id, succeeded=True)
        assert isinstance(passed, Applied) and passed.value.status == "requires_capture"
        captured = client.capture_intent(new_id("op"), created.value.id)
    assert isinstance(captured, Applied) and captured.value.amount_received_minor == 1000


def test_3ds_challenge_failed_is_a_decline(psp: SimProcess, receiver: Receiver) -> None:
    """A failed challenge is a definite failure (Declined, 402) and sends payment_intent.payment_failed."""
    created = _create(psp, new_id("pay"), "pm_card_3ds_required")
    assert isinstance(created, Applied)
    with psp.client() as client:
        failed = client.complete_action(new_id("op"), created.value.id, succeeded=False)
    assert isinstance(failed, Declined) and failed.code == "payment_intent_authentication_failure"
    assert failed.intent.status == "requires_payment_method"
    receiver.wait_for(1, event_type="payment_intent.payment_failed", intent_id=created.value.id)


def test_declined_cards(psp: SimProcess) -> None:
    """Declining tokens answer Declined with the decline code; the intent can be retried later."""
    declined = _create(psp, new_id("pay"), "pm_card_declined")
    poor = _create(psp, new_id("pay"), "pm_card_insufficient_funds")
    assert isinstance(declined, Declined) and (declined.code, declined.decline_code) == (
        "card_declined",
        "generic_decline",
    )
    assert isinstance(poor, Declined) and poor.decline_code == "insufficient_funds"
    with psp.client() as client:
        retried = client.confirm_intent(new_id("op"), poor.intent.id, payment_method="pm_card_visa")
    assert isinstance(retried, Applied) and retried.value.status == "requires_capture"


def test_partial_capture_caps_refunds_at_the_captured_amount(psp: SimProcess) -> None:
    """Capture 600 of 1000: refunds of 400 and 200 succeed, one more minor unit is refused, and a
    refund without an amount after that has nothing left."""
    intent = _captured(psp, 1000, 600)
    assert intent.amount_received_minor == 600
    with psp.client() as client:
        first = client.create_refund(new_id("op"), intent.id, amount_minor=400, reference=new_id("rf"))
        second = client.create_refund(new_id("op"), intent.id, amount_minor=200, reference=new_id("rf"))
        over = client.create_refund(new_id("op"), intent.id, amount_minor=1, reference=new_id("rf"))
        found = client.retrieve_intent(intent.id)
    assert isinstance(first, Applied) and isinstance(second, Applied)
    assert first.value.status == second.value.status == "succeeded"
    assert isinstance(over, Refused) and over.code == "charge_already_refunded"
    assert isinstance(found, Found) and found.value.amount_refunded_minor == 600


def test_refund_larger_than_what_is_left_is_rejected_and_full_refund_takes_the_rest(psp: SimProcess) -> None:
    """After a 300 refund of 1000, 800 is refused (amount_too_large); no amount refunds the 700 left."""
    intent = _captured(psp)
    with psp.client() as client:
        assert isinstance(client.create_refund(new_id("op"), intent.id, amount_minor=300), Applied)
        too_much = client.create_refund(new_id("op"), intent.id, amount_minor=800)
        rest = client.create_refund(new_id("op"), intent.id)
    assert isinstance(too_much, Refused) and (too_much.status, too_much.code) == (400, "amount_too_large")
    assert isinstance(rest, Applied) and rest.value.amount_minor == 700


def test_refund_found_by_our_reference(psp: SimProcess) -> None:
    """A refund whose answer was lost is found by our refund reference (and listed under its intent)."""
    intent, reference = _captured(psp), new_id("rf")
    psp.fault(kind="apply_then_fail", operation="refund", count=1)
    with psp.client() as client:
        lost = client.create_refund(new_id("op"), intent.id, amount_minor=250, reference=reference)
        found = client.find_refund_by_reference(reference)
        listed = client.list_refunds(intent.id)
        assert client.find_refund_by_reference(new_id("rf")) == Absent()
    assert not isinstance(lost, Applied)
    assert isinstance(found, Found) and found.value.amount_minor == 250
    assert isinstance(listed, tuple) and [r.id for r in listed] == [found.value.id]


def test_pending_refund_reserves_capacity_until_it_settles(psp: SimProcess, receiver: Receiver) -> None:
    """A pending refund of 600 of 1000 leaves 400 refundable; when it fails the 600 is released
    (refund.failed); a second one that succeeds sends refund.succeeded and charge.refunded."""
    intent = _captured(psp)
    psp.fault(kind="refund_pending", count=2)
    with psp.client() as client:
        pending = client.create_refund(new_id("op"), intent.id, amount_minor=600)
        assert isinstance(pending, Applied) and pending.value.status == "pending"
        assert isinstance(client.create_refund(new_id("op"), intent.id, amount_minor=401), Refused)
        psp.ok("POST", f"/control/refunds/{pending.value.id}/complete", {"outcome": "failed"})
        again = client.create_refund(new_id("op"), intent.id, amount_minor=1000)
        assert isinstance(again, Applied) and again.value.status == "pending"
        psp.ok("POST", f"/control/refunds/{again.value.id}/complete", {"outcome": "succeeded"})
        done = client.retrieve_refund(again.value.id)
    assert isinstance(done, Found) and done.value.status == "succeeded"
    receiver.wait_for(1, event_type="refund.failed", intent_id=intent.id)
    (succeeded,) = receiver.wait_for(1, event_type="refund.succeeded", intent_id=intent.id)
    event = parse_event(succeeded.body)
    assert (
        isinstance(event, WebhookEvent)
        and isinstance(event.object, Refund)
        and event.object.amount_minor == 1000
    )
    receiver.wait_for(1, event_type="charge.refunded", intent_id=intent.id)


def test_cancel_releases_the_authorization_and_capture_after_cancel_is_rejected(psp: SimProcess) -> None:
    """Cancel from requires_capture -> canceled; a capture afterwards is a definite Refused."""
    created = _create(psp, new_id("pay"))
    assert isinstance(created, Applied)
    with psp.client() as client:
        canceled = client.cancel_intent(new_id("op"), created.value.id, reason="abandoned")
        late = client.capture_intent(new_id("op"), created.value.id)
    assert isinstance(canceled, Applied) and canceled.value.status == "canceled"
    assert isinstance(late, Refused) and late.code == "payment_intent_unexpected_state"


def test_chargeback_sends_a_dispute_event(psp: SimProcess, receiver: Receiver) -> None:
    """A dispute triggered on the control API sends charge.dispute.created carrying our reference."""
    intent = _captured(psp)
    psp.ok("POST", f"/control/payment_intents/{intent.id}/dispute", {"amount_minor": 400})
    (got,) = receiver.wait_for(1, event_type="charge.dispute.created", intent_id=intent.id)
    event = parse_event(got.body)
    assert isinstance(event, WebhookEvent) and isinstance(event.object, Dispute)
    assert (event.object.amount_minor, event.object.reference) == (400, intent.reference)


def test_card_data_is_refused_and_nothing_is_stored(psp: SimProcess) -> None:
    """A card number in metadata or a cvc field: 400 card_data_forbidden, and no intent exists."""
    reference = new_id("pay")
    with psp.client() as client:
        pan = client.create_intent(
            new_id("op"),
            amount_minor=100,
            currency="EUR",
            reference=reference,
            metadata={"note": "card 4242 4242 4242 4242"},
        )
        cvc = client.create_intent(
            new_id("op"), amount_minor=100, currency="EUR", reference=reference, metadata={"cvc": "123"}
        )
        assert client.find_intent_by_reference(reference) == Absent()
    assert isinstance(pan, Refused) and pan.code == "card_data_forbidden"
    assert isinstance(cvc, Refused) and cvc.code == "card_data_forbidden"


def test_invalid_input_is_rejected_unrecorded_and_the_key_stays_free(psp: SimProcess) -> None:
    """An unknown currency is a 400 that is not recorded: the same operation id with a valid body then
    executes. A wrong API key is 401."""
    op, reference = new_id("op"), new_id("pay")
    with psp.client() as client:
        bad = client.create_intent(op, amount_minor=100, currency="XXX", reference=reference)
        good = client.create_intent(op, amount_minor=100, currency="EUR", reference=reference)
    assert isinstance(bad, Refused) and (bad.status, bad.code) == (400, "parameter_invalid")
    assert isinstance(good, Applied)
    with psp.client(api_key="sk_wrong") as intruder:
        denied = intruder.retrieve_intent(good.value.id)
        refused = intruder.create_intent(new_id("op"), amount_minor=100, currency="EUR", reference=reference)
    assert denied.__class__.__name__ == "NoAnswer"  # a read we may not do proves nothing either way
    assert isinstance(refused, Refused) and refused.status == 401
