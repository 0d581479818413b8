"""Provider ``stripe`` in payment-state: Stripe's documented event payloads read as our facts, and
the state-dependent behaviour stripe-mock (stateless) cannot show: the order of a 3-D Secure
payment's events, a stale or duplicate event, a Stripe event about another provider's payment, and
every payment going to its own merchant's provider.

Payloads follow Stripe's API reference ("The PaymentIntent object", "The Refund object", "The
Dispute object", "The Payout object", "The Event object"), with our metadata as StripeClient sets it.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from payment_state.adapters.memory_psp import MemoryPsp
from payment_state.adapters.memory_store import InMemoryPaymentStore
from payment_state.adapters.stripe_objects import parse_stripe_webhook
from payment_state.application.context import Context
from payment_state.application.executor import ExecutorConfig, OperationExecutor
from payment_state.application.handlers import handle
from payment_state.application.ports import Ignored, Lookup
from payment_state.application.provider_facts import apply_provider_fact
from payment_state.application.providers import Psps
from payment_state.domain.commands import CreatePaymentRequest
from payment_state.domain.facts import DisputeFact, IntentFact, IntentStatus, RefundFact, RefundStatus
from payment_state.domain.model import CaptureMethod, PaymentStatus
from payment_state.domain.payouts import PayoutFact, PspPayoutStatus
from payment_state.domain.recovery import RecoveryPolicy

_events = itertools.count(1)


def intent(status: str, **overrides: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "id": "pi_3MtwBwLkdIwHu7ix28a3tqPa",
        "object": "payment_intent",
        "amount": 2000,
        "amount_capturable": 0,
        "amount_received": 0,
        "capture_method": "manual",
        "currency": "eur",
        "created": 1680800504,
        "status": status,
        "livemode": False,
        "metadata": {"reference": "pay_1", "payment_id": "pay_1", "merchant_id": "m_stripe"},
        "payment_method": "pm_1MtwBwLkdIwHu7ixik1ZeFq0",
        "latest_charge": None,
        "last_payment_error": None,
        "next_action": None,
        "cancellation_reason": None,
        "canceled_at": None,
    }
    document.update(overrides)
    return document


def event(event_type: str, obj: dict[str, Any], event_id: str | None = None) -> bytes:
    return json.dumps(
        {
            "id": event_id or f"evt_{next(_events)}",
            "object": "event",
            "api_version": "2026-10-28.endive",
            "created": 1680800600,
            "type": event_type,
            "livemode": False,
            "pending_webhooks": 1,
            "request": {"id": None, "idempotency_key": None},
            "data": {"object": obj},
        }
    ).encode()


REDIRECT = {"type": "redirect_to_url", "redirect_to_url": {"url": "https://hooks.stripe.com/3d_secure_2/x"}}
DECLINE = {
    "type": "card_error",
    "code": "card_declined",
    "decline_code": "insufficient_funds",
    "message": "Your card has insufficient funds.",
}


@pytest.mark.parametrize(
    ("event_type", "obj", "status"),
    [
        (
            "payment_intent.requires_action",
            intent("requires_action", next_action=REDIRECT),
            IntentStatus.REQUIRES_ACTION,
        ),
        (
            "payment_intent.requires_action",
            intent("requires_action", next_action={"type": "use_stripe_sdk", "use_stripe_sdk": {}}),
            IntentStatus.REQUIRES_ACTION,
        ),
        (
            "payment_intent.amount_capturable_updated",
            intent("requires_capture", amount_capturable=2000),
            IntentStatus.AUTHORIZED,
        ),
        (
            "payment_intent.succeeded",
            intent("succeeded", amount_received=2000, latest_charge="ch_1"),
            IntentStatus.CAPTURED,
        ),
        (
            "payment_intent.payment_failed",
            intent("requires_payment_method", last_payment_error=DECLINE),
            IntentStatus.FAILED,
        ),
        (
            "payment_intent.canceled",
            intent("canceled", cancellation_reason="abandoned", canceled_at=1680800700),
            IntentStatus.CANCELED,
        ),
        ("payment_intent.processing", intent("processing"), IntentStatus.PROCESSING),
    ],
)
def test_payment_intent_events(event_type: str, obj: dict[str, Any], status: IntentStatus) -> None:
    """Each payment intent event is a snapshot read as an IntentFact: our status, amounts in minor
    units, the currency in upper case, our reference from metadata."""
    fact = parse_stripe_webhook(event(event_type, obj))
    assert isinstance(fact, IntentFact)
    assert (fact.status, fact.currency, fact.amount_minor, fact.our_reference) == (
        status,
        "EUR",
        2000,
        "pay_1",
    )
    assert fact.provider_payment_id == "pi_3MtwBwLkdIwHu7ix28a3tqPa"


def test_details_of_3ds_decline_and_cancel() -> None:
    """The 3-D Secure redirect URL, the decline code and message, the cancellation reason and the
    capturable / received amounts are carried over."""
    action = parse_stripe_webhook(
        event("payment_intent.requires_action", intent("requires_action", next_action=REDIRECT))
    )
    failed = parse_stripe_webhook(
        event("payment_intent.payment_failed", intent("requires_payment_method", last_payment_error=DECLINE))
    )
    canceled = parse_stripe_webhook(
        event("payment_intent.canceled", intent("canceled", cancellation_reason="abandoned"))
    )
    authorized = parse_stripe_webhook(
        event("payment_intent.amount_capturable_updated", intent("requires_capture", amount_capturable=2000))
    )
    assert (
        isinstance(action, IntentFact) and action.next_action_url == "https://hooks.stripe.com/3d_secure_2/x"
    )
    assert isinstance(failed, IntentFact) and (failed.failure_code, failed.failure_message) == (
        "insufficient_funds",
        "Your card has insufficient funds.",
    )
    assert isinstance(canceled, IntentFact) and canceled.cancellation_reason == "abandoned"
    assert isinstance(authorized, IntentFact) and authorized.amount_capturable_minor == 2000


def refund(status: str, **overrides: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "id": "re_1Nispe2eZvKYlo2Cd31jOCgZ",
        "object": "refund",
        "amount": 500,
        "currency": "eur",
        "payment_intent": "pi_3MtwBwLkdIwHu7ix28a3tqPa",
        "charge": "ch_1",
        "created": 1692942318,
        "metadata": {"reference": "op_refund_1"},
        "reason": "requested_by_customer",
        "status": status,
        "failure_reason": None,
    }
    document.update(overrides)
    return document


@pytest.mark.parametrize(
    ("event_type", "status", "failure", "expected", "failure_code"),
    [
        ("refund.created", "pending", None, RefundStatus.PENDING, None),
        ("refund.updated", "requires_action", None, RefundStatus.PENDING, None),
        ("refund.updated", "succeeded", None, RefundStatus.SUCCEEDED, None),
        (
            "refund.failed",
            "failed",
            "expired_or_canceled_card",
            RefundStatus.FAILED,
            "expired_or_canceled_card",
        ),
        ("refund.updated", "canceled", None, RefundStatus.FAILED, "canceled"),
    ],
)
def test_refund_events(
    event_type: str, status: str, failure: str | None, expected: RefundStatus, failure_code: str | None
) -> None:
    """refund.* events carry the refund: its status (requires_action is pending, canceled is a
    failure: nothing was refunded), its intent, our refund operation id from metadata."""
    fact = parse_stripe_webhook(event(event_type, refund(status, failure_reason=failure)))
    assert isinstance(fact, RefundFact)
    assert (fact.status, fact.failure_code, fact.our_reference) == (expected, failure_code, "op_refund_1")
    assert (fact.provider_payment_id, fact.amount_minor, fact.currency) == (
        "pi_3MtwBwLkdIwHu7ix28a3tqPa",
        500,
        "EUR",
    )


def test_dispute_created_is_a_chargeback_fact() -> None:
    """charge.dispute.created (an expanded or plain payment_intent) is a DisputeFact."""
    dispute = {
        "id": "dp_1MtJUT2eZvKYlo2CNaw2HvEv",
        "object": "dispute",
        "amount": 2000,
        "currency": "eur",
        "charge": "ch_1",
        "payment_intent": {"id": "pi_3MtwBwLkdIwHu7ix28a3tqPa", "object": "payment_intent"},
        "reason": "fraudulent",
        "status": "warning_needs_response",
        "created": 1680651737,
        "metadata": {},
    }
    fact = parse_stripe_webhook(event("charge.dispute.created", dispute))
    assert isinstance(fact, DisputeFact)
    assert (fact.provider_payment_id, fact.amount_minor, fact.reason) == (
        "pi_3MtwBwLkdIwHu7ix28a3tqPa",
        2000,
        "fraudulent",
    )


@pytest.mark.parametrize(
    ("event_type", "status", "failure_code", "expected"),
    [
        ("payout.created", "pending", None, PspPayoutStatus.PENDING),
        ("payout.updated", "in_transit", None, PspPayoutStatus.PENDING),
        ("payout.paid", "paid", None, PspPayoutStatus.PAID),
        ("payout.failed", "failed", "account_closed", PspPayoutStatus.FAILED),
        ("payout.canceled", "canceled", None, PspPayoutStatus.FAILED),
    ],
)
def test_payout_events(
    event_type: str, status: str, failure_code: str | None, expected: PspPayoutStatus
) -> None:
    """payout.* events carry the payout: in_transit is pending, canceled a failure; our withdrawal
    id comes back from metadata."""
    payout = {
        "id": "po_1OaFDbEcg9tTZuTgNYmX0PKB",
        "object": "payout",
        "amount": 1100,
        "currency": "eur",
        "arrival_date": 1680652800,
        "destination": "ba_1MtIhL2eZvKYlo2CAElKwKu2",
        "status": status,
        "failure_code": failure_code,
        "failure_message": None,
        "metadata": {"reference": "wd_1"},
        "created": 1680651737,
    }
    fact = parse_stripe_webhook(event(event_type, payout))
    assert isinstance(fact, PayoutFact)
    assert (fact.status, fact.reference, fact.amount_minor) == (expected, "wd_1", 1100)


@pytest.mark.parametrize(
    "event_type",
    [
        "charge.refunded",
        "charge.succeeded",
        "payment_intent.created",
        "charge.dispute.updated",
        "customer.created",
        "v2.some.future",
    ],
)
def test_other_types_are_ignored_never_errors(event_type: str) -> None:
    """charge.refunded (its charge does not say which refund of ours moved: refund.* does) and
    every type we do not act on are Ignored: kept for audit, never a failure."""
    fact = parse_stripe_webhook(event(event_type, {"id": "ch_1", "object": "charge", "amount": 2000.5}))
    assert fact == Ignored(event_type)


def test_listed_type_breaking_the_contract_raises() -> None:
    """A type we act on whose object is unreadable (a float amount, another kind of object) or a
    body that is not an event raises ValueError: the consumer dead-letters it for a person."""
    for raw in [
        event("payment_intent.succeeded", intent("succeeded", amount=20.0)),
        event("payment_intent.succeeded", refund("succeeded")),
        event("refund.updated", refund("succeeded", payment_intent=None)),
        b"not json",
        b'{"id": "evt_1"}',
    ]:
        with pytest.raises(ValueError, match="stripe webhook breaks the contract"):
            parse_stripe_webhook(raw)


# -- state-dependent behaviour: the facts through payment-state's one apply function -----------------

FAST = RecoveryPolicy(
    backoff_initial_ms=10,
    backoff_max_ms=50,
    attempts_before_case=3,
    idempotency_window_ms=3_600_000,
    recheck_interval_ms=10,
)


def _world() -> tuple[InMemoryPaymentStore, Context, MemoryPsp, MemoryPsp, OperationExecutor]:
    store = InMemoryPaymentStore()
    ctx = Context("simpsp", now_ms=store.now_ms, merchant_providers={"m_stripe": "stripe"})
    simpsp, stripe = MemoryPsp(), MemoryPsp(provider_name="stripe")
    config = ExecutorConfig(worker_id="w1", batch_size_max=50, lease_ms=30_000, concurrency=1, policy=FAST)
    return (
        store,
        ctx,
        simpsp,
        stripe,
        OperationExecutor(store.transaction, Psps([simpsp, stripe]), ctx, config),
    )


def _create(store: InMemoryPaymentStore, ctx: Context, merchant: str, token: str = "pm_card_visa") -> str:  # noqa: S107 - test card
    request = CreatePaymentRequest(2000, "EUR", token, CaptureMethod.MANUAL, "dep_1")
    with store.transaction() as s:
        reply = handle(s, ctx, merchant, f"key-{merchant}-{next(_events)}", request)
    assert reply.status == 201
    return str(reply.body["payment"]["payment_id"])


def _webhook(store: InMemoryPaymentStore, ctx: Context, raw: bytes, event_id: str) -> str:
    fact = parse_stripe_webhook(raw)
    assert not isinstance(fact, Ignored | PayoutFact)
    with store.transaction() as s:
        return apply_provider_fact(
            s, ctx.for_provider("stripe"), fact, source="webhook", provider_event_id=event_id
        ).outcome


def test_each_merchant_is_sent_to_its_own_provider_only() -> None:
    """With m_stripe on stripe and everyone else on the default simpsp, each payment is created at,
    called at and recorded under its own provider; neither adapter sees the other's payment."""
    store, ctx, simpsp, stripe, executor = _world()
    on_stripe, on_simpsp = _create(store, ctx, "m_stripe"), _create(store, ctx, "m1")
    executor.run_once()
    assert [c.payment_id for c in stripe.calls] == [on_stripe]
    assert [c.payment_id for c in simpsp.calls] == [on_simpsp]
    for payment_id, provider in ((on_stripe, "stripe"), (on_simpsp, "simpsp")):
        state = store.load_state(payment_id)
        assert state is not None and state.payment.provider == provider
        assert state.payment.status == PaymentStatus.AUTHORIZED


def test_a_payment_at_an_unconfigured_provider_is_never_sent_elsewhere() -> None:
    """An executor without the stripe adapter never calls simpsp for a stripe payment: the
    operation waits (PENDING, not called) until a process configured for stripe takes it."""
    store = InMemoryPaymentStore()
    ctx = Context("simpsp", now_ms=store.now_ms, merchant_providers={"m_stripe": "stripe"})
    simpsp = MemoryPsp()
    config = ExecutorConfig(worker_id="w1", batch_size_max=50, lease_ms=30_000, concurrency=1, policy=FAST)
    payment_id = _create(store, ctx, "m_stripe")
    OperationExecutor(store.transaction, simpsp, ctx, config).run_once()
    state = store.load_state(payment_id)
    assert simpsp.calls == [] and state is not None and state.payment.status == PaymentStatus.CREATED


def test_3ds_events_in_any_order_end_authorized_and_stale_or_duplicate_change_nothing() -> None:
    """A 3-D Secure payment at Stripe: requires_action, then amount_capturable_updated, authorize
    it; the requires_action event redelivered late (another event id) is stale, and the same event
    id twice is a duplicate: neither moves the payment back."""
    store, ctx, _, stripe, executor = _world()
    payment_id = _create(store, ctx, "m_stripe", token="pm_card_3ds_required")
    executor.run_once()
    assert [c.payment_id for c in stripe.calls] == [payment_id]
    state = store.load_state(payment_id)
    assert state is not None and state.payment.status == PaymentStatus.REQUIRES_ACTION
    pi = state.payment.provider_payment_id
    assert pi is not None
    ours = {"reference": payment_id, "payment_id": payment_id}
    action = event(
        "payment_intent.requires_action",
        intent("requires_action", id=pi, metadata=ours, next_action=REDIRECT),
        "evt_a",
    )
    authorized = event(
        "payment_intent.amount_capturable_updated",
        intent("requires_capture", id=pi, metadata=ours, amount_capturable=2000),
        "evt_b",
    )
    late = event("payment_intent.requires_action", intent("requires_action", id=pi, metadata=ours), "evt_c")
    assert _webhook(store, ctx, action, "evt_a") == "duplicate"  # the call answer already said so
    assert _webhook(store, ctx, authorized, "evt_b") == "applied"
    assert _webhook(store, ctx, late, "evt_c") == "stale"
    assert _webhook(store, ctx, authorized, "evt_b") == "duplicate"
    state = store.load_state(payment_id)
    assert state is not None and state.payment.status == PaymentStatus.AUTHORIZED


def test_a_stripe_event_never_moves_a_payment_of_another_provider() -> None:
    """A Stripe event whose metadata names a payment of ours that lives at simpsp (a reused
    reference, a test-mode mix-up) is unmatched: the simpsp payment is not touched."""
    store, ctx, _, _, executor = _world()
    payment_id = _create(store, ctx, "m1")
    executor.run_once()
    ours = {"reference": payment_id, "payment_id": payment_id}
    raw = event("payment_intent.canceled", intent("canceled", id="pi_stripe_only", metadata=ours), "evt_x")
    assert _webhook(store, ctx, raw, "evt_x") == "unmatched"
    state = store.load_state(payment_id)
    assert state is not None and state.payment.status == PaymentStatus.AUTHORIZED


# -- a lost answer, the Stripe way: replay the create first, then look it up -----------------------


class CountingStripe(MemoryPsp):
    """The in-memory PSP as provider stripe (replays lost creates), counting lookups."""

    lookups: int = 0

    def find_payment(self, payment_id: str, provider_payment_id: str | None) -> Lookup:
        self.lookups += 1
        return super().find_payment(payment_id, provider_payment_id)


def _stripe_world(psp: CountingStripe) -> tuple[InMemoryPaymentStore, Context, OperationExecutor]:
    store = InMemoryPaymentStore()
    ctx = Context("stripe", now_ms=store.now_ms)
    config = ExecutorConfig(worker_id="w1", batch_size_max=50, lease_ms=30_000, concurrency=1, policy=FAST)
    return store, ctx, OperationExecutor(store.transaction, psp, ctx, config)


def test_a_lost_create_is_replayed_with_the_same_key_before_any_lookup() -> None:
    """Stripe applied our authorize but the answer was lost: the next step sends the SAME request
    (same operation id) again, and the provider's stored answer resolves it; no search was needed
    and the money moved once."""
    psp = CountingStripe(provider_name="stripe", replays_lost_creates=True, fail_next=["lost_response"])
    store, ctx, executor = _stripe_world(psp)
    payment_id = _create(store, ctx, "m1")
    executor.run_once()
    store.advance(FAST.backoff_initial_ms)
    executor.run_once()
    state = store.load_state(payment_id)
    assert state is not None and state.payment.status == PaymentStatus.AUTHORIZED
    assert [c.operation_id for c in psp.calls] == [state.operations[0].operation_id] * 2
    assert psp.lookups == 0 and len(psp.intents) == 1


def test_the_replay_happens_once_then_lookups_by_reference() -> None:
    """When the replay's answer is lost too, the executor looks the payment up by our reference
    (Stripe's search) instead of replaying again and again."""
    psp = CountingStripe(
        provider_name="stripe", replays_lost_creates=True, fail_next=["lost_response", "timeout"]
    )
    store, ctx, executor = _stripe_world(psp)
    payment_id = _create(store, ctx, "m1")
    for _ in range(3):
        executor.run_once()
        store.advance(FAST.backoff_max_ms)
    state = store.load_state(payment_id)
    assert state is not None and state.payment.status == PaymentStatus.AUTHORIZED
    assert len(psp.calls) == 2 and psp.lookups == 1


def test_simpsp_looks_up_first() -> None:
    """A provider that does not replay (simpsp) is looked up first after a lost answer, as before."""
    psp = CountingStripe(provider_name="stripe", replays_lost_creates=False, fail_next=["lost_response"])
    store, ctx, executor = _stripe_world(psp)
    payment_id = _create(store, ctx, "m1")
    executor.run_once()
    store.advance(FAST.backoff_initial_ms)
    executor.run_once()
    state = store.load_state(payment_id)
    assert state is not None and state.payment.status == PaymentStatus.AUTHORIZED
    assert len(psp.calls) == 1 and psp.lookups == 1


def test_no_replay_once_the_key_may_be_forgotten() -> None:
    """Past the idempotency window a replay could create a second payment: it is never sent; the
    lookup by reference decides."""
    psp = CountingStripe(provider_name="stripe", replays_lost_creates=True, fail_next=["lost_response"])
    store, ctx, executor = _stripe_world(psp)
    payment_id = _create(store, ctx, "m1")
    executor.run_once()
    store.advance(FAST.idempotency_window_ms + 1)
    executor.run_once()
    state = store.load_state(payment_id)
    assert state is not None and state.payment.status == PaymentStatus.AUTHORIZED
    assert len(psp.calls) == 1 and psp.lookups == 1
