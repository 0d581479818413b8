"""The payment-intent state machine, pure: every allowed transition, every refusal, and the invariants
(captured <= amount, refunds + pending refunds <= captured) under any sequence of refunds."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st
from psp_sim.domain import intents as d
from psp_sim.domain.intents import Applied, Declined, Intent, RefundApplied, Refused


def _intent(method: str | None = "pm_card_visa", capture_method: d.CaptureMethod = "manual") -> Intent:
    return d.new_intent(
        "pi_1",
        amount_minor=1000,
        currency="EUR",
        capture_method=capture_method,
        payment_method=method,
        reference="pay_1",
        metadata={},
        now_s=100,
    )


def _applied(decision: object) -> Intent:
    assert isinstance(decision, Applied), decision
    return decision.intent


def _authorized() -> Intent:
    return _applied(d.confirm(_intent(), None, charge_id="ch_1", now_s=101))


def _captured(amount_minor: int | None = None) -> Intent:
    return _applied(d.capture(_authorized(), amount_minor, now_s=102))


def test_create_status_depends_on_the_payment_method() -> None:
    """With a payment method: requires_confirmation; without: requires_payment_method."""
    assert _intent().status == "requires_confirmation"
    assert _intent(None).status == "requires_payment_method"


def test_confirm_outcomes_by_token() -> None:
    """Visa authorizes (manual: requires_capture; automatic: succeeded), 3DS challenges, declines 402."""
    held = _authorized()
    assert (held.status, held.amount_capturable_minor, held.latest_charge) == (
        "requires_capture",
        1000,
        "ch_1",
    )
    taken = _applied(d.confirm(_intent(capture_method="automatic"), None, charge_id="ch_1", now_s=101))
    assert (taken.status, taken.amount_received_minor) == ("succeeded", 1000)
    challenged = _applied(d.confirm(_intent("pm_card_3ds_required"), None, charge_id="ch_1", now_s=101))
    assert challenged.status == "requires_action" and challenged.next_action_url
    declined = d.confirm(_intent("pm_card_insufficient_funds"), None, charge_id="ch_1", now_s=101)
    assert isinstance(declined, Declined) and declined.error.decline_code == "insufficient_funds"
    assert declined.intent.status == "requires_payment_method" and declined.events == (
        "payment_intent.payment_failed",
    )


def test_confirm_refusals() -> None:
    """No payment method, an unknown token, or a state that cannot be confirmed: refused, no change."""
    assert d.confirm(_intent(None), None, charge_id="c", now_s=1) == Refused(
        400, "payment_method_required", "A payment method is required to confirm."
    )
    assert isinstance(d.confirm(_intent("pm_nope"), None, charge_id="c", now_s=1), Refused)
    refused = d.confirm(_authorized(), None, charge_id="c", now_s=1)
    assert isinstance(refused, Refused) and refused.code == "payment_intent_unexpected_state"


def test_complete_action() -> None:
    """Only from requires_action: success authorizes, failure is a 402-style decline."""
    challenged = _applied(d.confirm(_intent("pm_card_3ds_required"), None, charge_id="c", now_s=1))
    assert (
        _applied(d.complete_action(challenged, "succeeded", charge_id="c", now_s=2)).status
        == "requires_capture"
    )
    failed = d.complete_action(challenged, "failed", charge_id="c", now_s=2)
    assert isinstance(failed, Declined) and failed.error.code == "payment_intent_authentication_failure"
    assert isinstance(d.complete_action(_authorized(), "succeeded", charge_id="c", now_s=2), Refused)


def test_capture_full_partial_and_refused() -> None:
    """Full or partial capture moves to succeeded and releases the rest; too much or twice is refused."""
    assert _captured().amount_received_minor == 1000
    partial = _captured(600)
    assert (partial.amount_received_minor, partial.amount_capturable_minor) == (600, 0)
    too_much = d.capture(_authorized(), 1001, now_s=1)
    assert isinstance(too_much, Refused) and too_much.code == "amount_too_large"
    assert isinstance(d.capture(partial, None, now_s=1), Refused)
    assert d.newly_captured_minor(_authorized(), partial) == 600
    assert d.newly_captured_minor(partial, partial) == 0


@pytest.mark.parametrize(
    "state", ["requires_payment_method", "requires_confirmation", "requires_action", "requires_capture"]
)
def test_cancel_from_any_state_before_capture(state: d.IntentStatus) -> None:
    """Cancel works before capture and never after."""
    intent = dataclasses.replace(_intent(), status=state)
    assert _applied(d.cancel(intent, "abandoned", now_s=5)).status == "canceled"


def test_cancel_after_capture_or_cancel_is_refused() -> None:
    """A captured or canceled intent cannot be canceled."""
    assert isinstance(d.cancel(_captured(), None, now_s=5), Refused)
    canceled = _applied(d.cancel(_authorized(), None, now_s=5))
    assert isinstance(d.cancel(canceled, None, now_s=6), Refused)


def _refund(intent: Intent, amount: int | None, *, pending: bool = False) -> d.RefundDecision:
    return d.refund(
        intent, amount, refund_id="re_1", reference=None, reason=None, metadata={}, pending=pending, now_s=9
    )


def test_refunds_only_after_capture_and_capped() -> None:
    """A refund needs a captured intent; the total never exceeds what was captured."""
    assert isinstance(_refund(_authorized(), 1), Refused)
    first = _refund(_captured(600), 400)
    assert isinstance(first, RefundApplied) and first.intent.amount_refunded_minor == 400
    over = _refund(first.intent, 201)
    assert isinstance(over, Refused) and over.code == "amount_too_large"
    rest = _refund(first.intent, None)
    assert isinstance(rest, RefundApplied) and rest.refund.amount_minor == 200
    assert isinstance(_refund(rest.intent, None), Refused)


def test_pending_refund_reserves_and_settles() -> None:
    """A pending refund reserves capacity; failure releases it, success moves it to refunded."""
    pending = _refund(_captured(), 700, pending=True)
    assert isinstance(pending, RefundApplied) and pending.intent.refundable_minor() == 300
    assert pending.events == ()
    failed = d.settle_refund(pending.intent, pending.refund, "failed")
    assert isinstance(failed, RefundApplied) and failed.intent.refundable_minor() == 1000
    assert failed.events == ("refund.failed",)
    done = d.settle_refund(pending.intent, pending.refund, "succeeded")
    assert isinstance(done, RefundApplied) and done.intent.amount_refunded_minor == 700
    assert isinstance(d.settle_refund(done.intent, done.refund, "failed"), Refused)


@given(
    st.lists(
        st.tuples(st.integers(1, 1200), st.booleans(), st.sampled_from(["succeeded", "failed", None])),
        max_size=12,
    )
)
def test_refund_invariant_holds_for_any_sequence(steps: list[tuple[int, bool, str | None]]) -> None:
    """Property: whatever refunds (pending or not, settled either way) are tried, refunded + pending
    never exceeds the captured amount."""
    intent = _captured(900)
    for amount, pending, settle in steps:
        decision = _refund(intent, amount, pending=pending)
        if isinstance(decision, RefundApplied):
            intent = decision.intent
            if pending and settle is not None:
                settled = d.settle_refund(intent, decision.refund, settle)  # type: ignore[arg-type]
                assert isinstance(settled, RefundApplied)
                intent = settled.intent
        assert (
            intent.amount_refunded_minor + intent.amount_refund_pending_minor <= intent.amount_received_minor
        )


def test_dispute() -> None:
    """A dispute needs a captured intent and at most what was received and not yet disputed."""
    captured = _captured()
    disputed = d.dispute(captured, 400)
    assert isinstance(disputed, Intent) and disputed.amount_disputed_minor == 400
    assert isinstance(d.dispute(disputed, 601), Refused)
    assert isinstance(d.dispute(_authorized(), None), Refused)
