"""The one apply function: every provider fact, in any order, any number of times."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from payment_state.domain.apply import Applied, Conflict, Unchanged, apply_fact, chargeback, intent_verdict
from payment_state.domain.commands import (
    CancelRequest,
    CaptureRequest,
    CreatePaymentRequest,
    RefundRequest,
    decide_cancel,
    decide_capture,
    decide_create,
    decide_refund,
)
from payment_state.domain.facts import (
    CallRefused,
    DisputeFact,
    IntentFact,
    IntentStatus,
    RefundFact,
    RefundStatus,
)
from payment_state.domain.model import (
    CaptureMethod,
    OperationStatus,
    OperationType,
    PaymentState,
    PaymentStatus,
    check_payment,
)

AMOUNT = 10_000
PI = "pi_1"


def new_payment(method: CaptureMethod = CaptureMethod.MANUAL, deposit: str | None = "dep_1") -> PaymentState:
    request = CreatePaymentRequest(AMOUNT, "EUR", "tok_visa", method, deposit)
    return decide_create(
        request, merchant_id="m1", payment_id="pay_1", operation_id="op_auth", provider="simpsp", now_ms=1
    )


def intent(status: IntentStatus, **fields: object) -> IntentFact:
    base = IntentFact(PI, status, AMOUNT, "EUR", our_reference="pay_1")
    if status == IntentStatus.AUTHORIZED:
        base = replace(base, amount_capturable_minor=AMOUNT)
    if status == IntentStatus.CAPTURED:
        base = replace(base, amount_received_minor=AMOUNT)
    return replace(base, **fields)  # type: ignore[arg-type]


def applied(state: PaymentState, fact: IntentFact | RefundFact | CallRefused) -> Applied:
    result = apply_fact(state, fact)
    assert isinstance(result, Applied), result
    return result


def types(result: Applied) -> list[str]:
    return [e.event_type for e in result.events]


def authorized_state() -> PaymentState:
    return applied(new_payment(), intent(IntentStatus.AUTHORIZED)).state


def captured_state(amount: int = AMOUNT) -> PaymentState:
    state = authorized_state()
    decided = decide_capture(state, CaptureRequest("pay_1", amount, "EUR"), "op_cap", 2)
    assert isinstance(decided, PaymentState)
    return applied(decided, intent(IntentStatus.CAPTURED, amount_received_minor=amount)).state


def with_refund(state: PaymentState, amount: int, op_id: str) -> PaymentState:
    decided = decide_refund(state, RefundRequest("pay_1", amount, "EUR"), op_id, "rf_" + op_id, 3)
    assert isinstance(decided, PaymentState), decided
    return decided


def refund(op_id: str, status: RefundStatus, amount: int, **fields: object) -> RefundFact:
    base = RefundFact("re_" + op_id, PI, status, amount, "EUR", our_reference=op_id)
    return replace(base, **fields)  # type: ignore[arg-type]


# -- payment intents -----------------------------------------------------------------------------


def test_authorization_answer_authorizes_once() -> None:
    """An authorized intent moves CREATED to AUTHORIZED, succeeds the authorize operation and
    announces PaymentAuthorized once; the same fact again (webhook after the answer) is a duplicate."""
    first = applied(new_payment(), intent(IntentStatus.AUTHORIZED))
    p = first.state.payment
    assert (p.status, p.authorized_minor, p.provider_payment_id, p.version) == ("AUTHORIZED", AMOUNT, PI, 2)
    assert first.state.operations[0].status == OperationStatus.SUCCEEDED
    assert first.state.operations[0].provider_reference == PI
    assert types(first) == ["PaymentAuthorized"]
    assert first.events[0].body["operation_id"] == "op_auth"
    again = apply_fact(first.state, intent(IntentStatus.AUTHORIZED))
    assert isinstance(again, Unchanged) and again.outcome == "duplicate"


def test_requires_action_is_not_a_failure_and_leads_to_authorization() -> None:
    """3-D Secure: REQUIRES_ACTION keeps the authorize operation open with the redirect URL, then the
    customer's success authorizes it; two events, in order."""
    url = "https://psp/3ds/pi_1"
    waiting = applied(new_payment(), intent(IntentStatus.REQUIRES_ACTION, next_action_url=url))
    assert waiting.state.payment.status == PaymentStatus.REQUIRES_ACTION
    assert waiting.state.payment.next_action_url == url
    assert waiting.state.operations[0].status == OperationStatus.PENDING
    assert types(waiting) == ["PaymentRequiresAction"]
    assert waiting.events[0].body["next_action_url"] == url
    done = applied(waiting.state, intent(IntentStatus.AUTHORIZED))
    assert done.state.payment.status == PaymentStatus.AUTHORIZED
    assert done.state.payment.next_action_url is None
    assert types(done) == ["PaymentAuthorized"]


def test_capture_webhook_before_authorization_webhook() -> None:
    """A captured intent arriving first authorizes and captures in one step (both events, once);
    the authorization that arrives afterwards is stale and changes nothing."""
    first = applied(new_payment(CaptureMethod.AUTOMATIC), intent(IntentStatus.CAPTURED))
    p = first.state.payment
    assert (p.status, p.authorized_minor, p.captured_minor) == ("CAPTURED", AMOUNT, AMOUNT)
    assert types(first) == ["PaymentAuthorized", "PaymentCaptured"]
    assert first.events[1].body["deposit_reference"] == "dep_1"
    late = apply_fact(first.state, intent(IntentStatus.AUTHORIZED))
    assert isinstance(late, Unchanged) and late.outcome == "stale"
    late_action = apply_fact(first.state, intent(IntentStatus.REQUIRES_ACTION))
    assert isinstance(late_action, Unchanged) and late_action.outcome == "stale"


def test_manual_capture_resolves_the_capture_operation() -> None:
    """A partial capture: the capture operation succeeds, the active operation is cleared and
    PaymentCaptured carries the captured amount, the capture operation id and the deposit reference."""
    state = captured_state(amount=6_000)
    p = state.payment
    assert (p.status, p.captured_minor, p.active_operation_id) == ("CAPTURED", 6_000, None)
    capture = state.operation("op_cap")
    assert capture is not None and capture.status == OperationStatus.SUCCEEDED


def test_captured_event_body() -> None:
    """PaymentCaptured is what mt5-credit credits: amount captured, currency, deposit reference, and
    the payment method token (the only destination a later withdrawal may be paid out to)."""
    state = authorized_state()
    decided = decide_capture(state, CaptureRequest("pay_1"), "op_cap", 2)
    assert isinstance(decided, PaymentState)
    result = applied(decided, intent(IntentStatus.CAPTURED))
    assert result.events[0].body == {
        "merchant_id": "m1",
        "operation_id": "op_cap",
        "provider": "simpsp",
        "provider_payment_id": PI,
        "amount_minor": AMOUNT,
        "currency": "EUR",
        "deposit_reference": "dep_1",
        "payment_method_token": "tok_visa",
    }


def test_capture_amount_differing_from_ours_is_a_conflict() -> None:
    """The provider capturing another amount than our capture asked for is not applied."""
    state = authorized_state()
    decided = decide_capture(state, CaptureRequest("pay_1", 5_000, "EUR"), "op_cap", 2)
    assert isinstance(decided, PaymentState)
    assert isinstance(
        apply_fact(decided, intent(IntentStatus.CAPTURED, amount_received_minor=7_000)), Conflict
    )


def test_cancel_succeeds_and_fails_a_pending_capture() -> None:
    """A canceled intent cancels the payment: the cancel operation succeeds, and an open capture
    (the loser of a race decided by the provider) fails; PaymentCanceled names the cancel op."""
    state = authorized_state()
    decided = decide_cancel(state, CancelRequest("pay_1", "out of stock"), "op_cancel", 2)
    assert isinstance(decided, PaymentState)
    result = applied(decided, intent(IntentStatus.CANCELED))
    assert result.state.payment.status == PaymentStatus.CANCELED
    assert result.state.payment.active_operation_id is None
    assert result.state.operation("op_cancel").status == OperationStatus.SUCCEEDED  # type: ignore[union-attr]
    assert types(result) == ["PaymentCanceled"]
    assert result.events[0].body["operation_id"] == "op_cancel"
    assert result.events[0].body["reason"] == "out of stock"


def test_decline_fails_payment_and_later_authorization_is_a_conflict() -> None:
    """A failed intent fails the payment with the decline code; an authorization after an
    authoritative failure contradicts it: a conflict for a person, nothing applied."""
    failed = applied(new_payment(), intent(IntentStatus.FAILED, failure_code="card_declined"))
    assert failed.state.payment.status == PaymentStatus.FAILED
    assert failed.state.operations[0].status == OperationStatus.FAILED
    assert failed.state.operations[0].failure_code == "card_declined"
    assert types(failed) == ["PaymentFailed"]
    assert failed.events[0].body["failure_code"] == "card_declined"
    assert isinstance(apply_fact(failed.state, intent(IntentStatus.AUTHORIZED)), Conflict)


def test_captured_after_canceled_is_a_conflict() -> None:
    """Money captured on a payment we hold as canceled is never applied silently."""
    canceled = applied(authorized_state(), intent(IntentStatus.CANCELED)).state
    result = apply_fact(canceled, intent(IntentStatus.CAPTURED))
    assert isinstance(result, Conflict)


def test_foreign_or_mismatched_intent_is_a_conflict() -> None:
    """Another provider payment id, another amount or another currency: not ours, not applied."""
    state = authorized_state()
    assert isinstance(apply_fact(state, intent(IntentStatus.CAPTURED, provider_payment_id="pi_2")), Conflict)
    assert isinstance(apply_fact(new_payment(), intent(IntentStatus.AUTHORIZED, amount_minor=1)), Conflict)
    assert isinstance(apply_fact(new_payment(), intent(IntentStatus.AUTHORIZED, currency="USD")), Conflict)


def test_processing_only_learns_the_provider_id() -> None:
    """'processing' teaches the provider id once (no event), then changes nothing."""
    learned = applied(new_payment(), intent(IntentStatus.PROCESSING))
    assert learned.state.payment.provider_payment_id == PI
    assert learned.state.payment.status == PaymentStatus.CREATED
    assert learned.events == ()
    again = apply_fact(learned.state, intent(IntentStatus.PROCESSING))
    assert isinstance(again, Unchanged) and again.outcome == "pending"


_S, _I = PaymentStatus, IntentStatus
VERDICTS = {
    _S.CREATED: ["advance", "advance", "advance", "advance", "advance"],
    _S.REQUIRES_ACTION: ["duplicate", "advance", "advance", "advance", "advance"],
    _S.AUTHORIZED: ["stale", "duplicate", "advance", "advance", "stale"],
    _S.CAPTURED: ["stale", "stale", "duplicate", "conflict", "stale"],
    _S.PARTIALLY_REFUNDED: ["stale", "stale", "duplicate", "conflict", "stale"],
    _S.REFUNDED: ["stale", "stale", "duplicate", "conflict", "stale"],
    _S.CANCELED: ["stale", "stale", "conflict", "duplicate", "stale"],
    _S.FAILED: ["stale", "conflict", "conflict", "settle", "duplicate"],
}
THEIRS = [_I.REQUIRES_ACTION, _I.AUTHORIZED, _I.CAPTURED, _I.CANCELED, _I.FAILED]


@pytest.mark.parametrize("ours", list(VERDICTS))
def test_verdict_table(ours: PaymentStatus) -> None:
    """The verdict of every (our status, provider status) pair is the documented table: forward
    only, a captured payment never goes back."""
    assert [intent_verdict(ours, theirs) for theirs in THEIRS] == VERDICTS[ours]


# -- refunds -------------------------------------------------------------------------------------


def test_partial_then_full_refund() -> None:
    """Two refunds: the first leaves PARTIALLY_REFUNDED, the second (the rest) REFUNDED; each moves its
    amount from pending to refunded and announces RefundSucceeded once with the deposit reference."""
    state = with_refund(captured_state(), 3_000, "op_r1")
    assert state.payment.pending_refund_minor == 3_000 and state.payment.refundable_minor == 7_000
    first = applied(state, refund("op_r1", RefundStatus.SUCCEEDED, 3_000))
    p = first.state.payment
    assert (p.status, p.refunded_minor, p.pending_refund_minor) == ("PARTIALLY_REFUNDED", 3_000, 0)
    assert types(first) == ["RefundSucceeded"]
    assert first.events[0].body["refund_id"] == "rf_op_r1"
    assert first.events[0].body["provider_refund_id"] == "re_op_r1"
    assert first.events[0].body["deposit_reference"] == "dep_1"
    second = applied(with_refund(first.state, 7_000, "op_r2"), refund("op_r2", RefundStatus.SUCCEEDED, 7_000))
    p = second.state.payment
    assert (p.status, p.refunded_minor, p.refundable_minor) == ("REFUNDED", AMOUNT, 0)
    dup = apply_fact(second.state, refund("op_r2", RefundStatus.SUCCEEDED, 7_000))
    assert isinstance(dup, Unchanged) and dup.outcome == "duplicate"


def test_refund_failure_releases_capacity() -> None:
    """A definite refund failure releases the reservation and announces RefundFailed."""
    state = with_refund(captured_state(), 4_000, "op_r1")
    result = applied(
        state, refund("op_r1", RefundStatus.FAILED, 4_000, failure_code="expired_or_canceled_card")
    )
    p = result.state.payment
    assert (p.status, p.pending_refund_minor, p.refundable_minor) == ("CAPTURED", 0, AMOUNT)
    assert types(result) == ["RefundFailed"]
    assert result.events[0].body["failure_code"] == "expired_or_canceled_card"


def test_pending_refund_keeps_the_reservation_and_records_the_reference() -> None:
    """A pending refund learns the provider refund id and keeps its capacity reserved; a later
    success after a failure, or the reverse, is a conflict."""
    state = with_refund(captured_state(), 4_000, "op_r1")
    pending = applied(state, refund("op_r1", RefundStatus.PENDING, 4_000))
    assert pending.events == ()
    assert pending.state.payment.pending_refund_minor == 4_000
    assert pending.state.operation("op_r1").provider_reference == "re_op_r1"  # type: ignore[union-attr]
    failed = applied(pending.state, refund("op_r1", RefundStatus.FAILED, 4_000))
    assert isinstance(apply_fact(failed.state, refund("op_r1", RefundStatus.SUCCEEDED, 4_000)), Conflict)
    stale = apply_fact(failed.state, refund("op_r1", RefundStatus.PENDING, 4_000))
    assert isinstance(stale, Unchanged) and stale.outcome == "stale"


def test_unknown_or_mismatched_refund_is_a_conflict() -> None:
    """A refund we never asked for, or with another amount, is not applied."""
    state = with_refund(captured_state(), 4_000, "op_r1")
    assert isinstance(apply_fact(state, refund("op_other", RefundStatus.SUCCEEDED, 4_000)), Conflict)
    assert isinstance(apply_fact(state, refund("op_r1", RefundStatus.SUCCEEDED, 4_001)), Conflict)


# -- refusals of our calls -----------------------------------------------------------------------


def test_refused_authorization_fails_the_payment() -> None:
    """A decline answer fails the authorize operation and the payment, with PaymentFailed."""
    result = applied(new_payment(), CallRefused("op_auth", "card_declined", "declined", "pi_9"))
    p = result.state.payment
    assert (p.status, p.failure_code, p.provider_payment_id) == ("FAILED", "card_declined", "pi_9")
    assert types(result) == ["PaymentFailed"]
    dup = apply_fact(result.state, CallRefused("op_auth", "card_declined"))
    assert isinstance(dup, Unchanged) and dup.outcome == "duplicate"


def test_refused_capture_keeps_the_authorization() -> None:
    """A refused capture fails only the operation: the payment stays AUTHORIZED, capture is allowed
    again, nothing is announced."""
    decided = decide_capture(authorized_state(), CaptureRequest("pay_1"), "op_cap", 2)
    assert isinstance(decided, PaymentState)
    result = applied(decided, CallRefused("op_cap", "payment_intent_unexpected_state"))
    assert result.state.payment.status == PaymentStatus.AUTHORIZED
    assert result.state.payment.active_operation_id is None
    assert result.events == ()


def test_refused_refund_releases_capacity() -> None:
    """A refused refund releases its reservation and announces RefundFailed."""
    state = with_refund(captured_state(), 2_500, "op_r1")
    result = applied(state, CallRefused("op_r1", "amount_too_large"))
    assert result.state.payment.pending_refund_minor == 0
    assert types(result) == ["RefundFailed"]


def test_chargeback_event_carries_the_deposit_reference() -> None:
    """A dispute on a captured payment announces ChargebackReceived with the deposit reference; one
    that does not fit the payment is a conflict."""
    state = captured_state()
    event = chargeback(state, DisputeFact("dp_1", PI, 2_000, "EUR", "fraudulent"), "cb_1")
    assert not isinstance(event, Conflict)
    assert event.event_type == "ChargebackReceived"
    assert event.body["deposit_reference"] == "dep_1" and event.body["chargeback_id"] == "cb_1"
    assert isinstance(chargeback(state, DisputeFact("dp_2", PI, AMOUNT + 1, "EUR"), "cb_2"), Conflict)
    assert isinstance(chargeback(authorized_state(), DisputeFact("dp_3", PI, 1, "EUR"), "cb_3"), Conflict)


# -- convergence ---------------------------------------------------------------------------------

HAPPY_3DS = [
    intent(IntentStatus.PROCESSING),
    intent(IntentStatus.REQUIRES_ACTION, next_action_url="https://psp/3ds"),
    intent(IntentStatus.AUTHORIZED),
    intent(IntentStatus.CAPTURED),
]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(range(len(HAPPY_3DS))), min_size=1, max_size=12))
def test_any_order_and_repetition_converges(order: list[int]) -> None:
    """Webhooks, answers and lookups in any order and any number: the payment ends in the state of the
    most advanced fact seen, every produced state keeps the invariants, and each event type is produced
    at most once."""
    state = new_payment(CaptureMethod.AUTOMATIC)
    produced: list[str] = []
    for index in order:
        result = apply_fact(state, HAPPY_3DS[index])
        assert not isinstance(result, Conflict)
        if isinstance(result, Applied):
            check_payment(result.state.payment)
            state = result.state
            produced.extend(types(result))
    assert len(produced) == len(set(produced))
    best = max(order)
    expected = [
        PaymentStatus.CREATED,
        PaymentStatus.REQUIRES_ACTION,
        PaymentStatus.AUTHORIZED,
        PaymentStatus.CAPTURED,
    ]
    assert state.payment.status == expected[best]
    if best == 3:
        assert {"PaymentAuthorized", "PaymentCaptured"} <= set(produced)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(["r1_ok", "r1_pending", "r2_ok", "r2_fail", "r2_pending"]), max_size=12))
def test_refund_facts_in_any_order_keep_the_capacity_invariant(order: list[str]) -> None:
    """Two refunds whose facts arrive duplicated and reordered: refunded + pending never exceeds
    captured, each refund is announced at most once, and a refund's first final fact wins."""
    state = with_refund(with_refund(captured_state(), 6_000, "op_r1"), 4_000, "op_r2")
    facts = {
        "r1_ok": refund("op_r1", RefundStatus.SUCCEEDED, 6_000),
        "r1_pending": refund("op_r1", RefundStatus.PENDING, 6_000),
        "r2_ok": refund("op_r2", RefundStatus.SUCCEEDED, 4_000),
        "r2_fail": refund("op_r2", RefundStatus.FAILED, 4_000),
        "r2_pending": refund("op_r2", RefundStatus.PENDING, 4_000),
    }
    announced: list[tuple[str, str]] = []
    for name in order:
        result = apply_fact(state, facts[name])
        if isinstance(result, Applied):
            state = result.state
            announced.extend((e.event_type, e.body["refund_id"]) for e in result.events)
    p = state.payment
    assert p.refunded_minor + p.pending_refund_minor <= p.captured_minor
    assert len({refund_id for _, refund_id in announced}) == len(announced)
    op2 = state.operation("op_r2")
    assert op2 is not None and op2.operation_type == OperationType.REFUND
    finals = [n for n in order if n in ("r2_ok", "r2_fail")]
    if finals:
        assert op2.status == (OperationStatus.SUCCEEDED if finals[0] == "r2_ok" else OperationStatus.FAILED)
