"""Payment intents and refunds of the simulated PSP: values and the state machine, pure.

State machine (Stripe-like; ``capture_method`` manual or automatic)::

    create ─► requires_payment_method        (no payment method yet)
           └► requires_confirmation          (payment method given; confirm=true goes straight on)
    requires_payment_method ─confirm(pm)─► as requires_confirmation
    requires_confirmation ─confirm─► requires_capture  (manual: authorized)
                                  ├► succeeded         (automatic: authorized and captured)
                                  ├► requires_action   (3-D Secure challenge: not a failure)
                                  └► requires_payment_method + last_payment_error   (declined, HTTP 402)
    requires_action ─complete_action(succeeded)─► requires_capture | succeeded
                    └complete_action(failed)───► requires_payment_method + last_payment_error
    requires_capture ─capture(amount <= capturable)─► succeeded (the rest of the authorization is released)
    any state before succeeded ─cancel─► canceled (final)
    succeeded: refunds (succeeded + pending <= received) and disputes; it never leaves succeeded.

Invariants kept here (and again by CHECK constraints in the database):
``0 <= amount_received <= amount``; ``amount_refunded + amount_refund_pending <= amount_received``;
``amount_capturable`` is non-zero only in ``requires_capture``. Every decision is a closed result:
``Applied`` (200), ``Declined`` (402, the intent changed), ``Refused`` (4xx, nothing changed).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Final, Literal

from backbone.invariants import invariant

IntentStatus = Literal[
    "requires_payment_method",
    "requires_confirmation",
    "requires_action",
    "requires_capture",
    "succeeded",
    "canceled",
]
CaptureMethod = Literal["manual", "automatic"]
RefundStatus = Literal["pending", "succeeded", "failed"]
ActionOutcome = Literal["succeeded", "failed"]
EventType = Literal[
    "payment_intent.requires_action",
    "payment_intent.amount_capturable_updated",
    "payment_intent.succeeded",
    "payment_intent.canceled",
    "payment_intent.payment_failed",
    "charge.refunded",
    "refund.succeeded",
    "refund.failed",
    "charge.dispute.created",
]

CANCELABLE: Final[frozenset[str]] = frozenset(
    {"requires_payment_method", "requires_confirmation", "requires_action", "requires_capture"}
)
CONFIRMABLE: Final[frozenset[str]] = frozenset({"requires_payment_method", "requires_confirmation"})


@dataclass(frozen=True, slots=True)
class CardBehaviour:
    """What a test payment-method token does on confirm."""

    outcome: Literal["authorize", "challenge", "decline"]
    decline_code: str = ""
    message: str = ""


# The test tokens the simulator knows (documented in the README). Anything else is "no such payment method".
PAYMENT_METHODS: Final[dict[str, CardBehaviour]] = {
    "pm_card_visa": CardBehaviour("authorize"),
    "pm_card_mastercard": CardBehaviour("authorize"),
    "pm_card_3ds_required": CardBehaviour("challenge"),
    "pm_card_declined": CardBehaviour("decline", "generic_decline", "Your card was declined."),
    "pm_card_insufficient_funds": CardBehaviour(
        "decline", "insufficient_funds", "Your card has insufficient funds."
    ),
    "pm_card_expired": CardBehaviour("decline", "expired_card", "Your card has expired."),
}


@dataclass(frozen=True, slots=True)
class PaymentError:
    code: str
    decline_code: str | None
    message: str


@dataclass(frozen=True, slots=True)
class Intent:
    id: str
    status: IntentStatus
    amount_minor: int
    currency: str
    capture_method: CaptureMethod
    payment_method: str | None
    reference: str | None
    metadata: dict[str, str]
    created_s: int
    amount_capturable_minor: int = 0
    amount_received_minor: int = 0
    amount_refunded_minor: int = 0
    amount_refund_pending_minor: int = 0
    amount_disputed_minor: int = 0
    last_payment_error: PaymentError | None = None
    next_action_url: str | None = None
    cancellation_reason: str | None = None
    latest_charge: str | None = None
    canceled_s: int | None = None
    captured_s: int | None = None

    def refundable_minor(self) -> int:
        return self.amount_received_minor - self.amount_refunded_minor - self.amount_refund_pending_minor


@dataclass(frozen=True, slots=True)
class Refund:
    id: str
    payment_intent_id: str
    reference: str | None
    amount_minor: int
    currency: str
    status: RefundStatus
    reason: str | None
    failure_reason: str | None
    metadata: dict[str, str]
    created_s: int


@dataclass(frozen=True, slots=True)
class Applied:
    """The call changed (or, for a repeated confirm of a terminal state, kept) the intent; HTTP 200."""

    intent: Intent
    events: tuple[EventType, ...]


@dataclass(frozen=True, slots=True)
class Declined:
    """The card was declined: the intent went back to requires_payment_method; HTTP 402."""

    intent: Intent
    error: PaymentError
    events: tuple[EventType, ...]


@dataclass(frozen=True, slots=True)
class Refused:
    """The call is not allowed now (state, amount); nothing changes; HTTP ``status``."""

    status: int
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class RefundApplied:
    intent: Intent
    refund: Refund
    events: tuple[EventType, ...]


IntentDecision = Applied | Declined | Refused
RefundDecision = RefundApplied | Refused


def _unexpected_state(intent: Intent, action: str) -> Refused:
    return Refused(
        400,
        "payment_intent_unexpected_state",
        f"You cannot {action} this PaymentIntent because it has a status of {intent.status}.",
    )


def new_intent(
    intent_id: str,
    *,
    amount_minor: int,
    currency: str,
    capture_method: CaptureMethod,
    payment_method: str | None,
    reference: str | None,
    metadata: dict[str, str],
    now_s: int,
) -> Intent:
    invariant(amount_minor > 0, "amount_minor must be positive")
    status: IntentStatus = "requires_confirmation" if payment_method else "requires_payment_method"
    return Intent(
        id=intent_id,
        status=status,
        amount_minor=amount_minor,
        currency=currency,
        capture_method=capture_method,
        payment_method=payment_method,
        reference=reference,
        metadata=metadata,
        created_s=now_s,
    )


def _authorized(intent: Intent, charge_id: str, now_s: int) -> Applied:
    """Authorization succeeded: hold the amount (manual) or take it at once (automatic)."""
    base = dataclasses.replace(intent, last_payment_error=None, next_action_url=None, latest_charge=charge_id)
    if intent.capture_method == "automatic":
        done = dataclasses.replace(
            base, status="succeeded", amount_received_minor=intent.amount_minor, captured_s=now_s
        )
        return Applied(done, ("payment_intent.succeeded",))
    held = dataclasses.replace(base, status="requires_capture", amount_capturable_minor=intent.amount_minor)
    return Applied(held, ("payment_intent.amount_capturable_updated",))


def _failed(intent: Intent, error: PaymentError) -> Declined:
    failed = dataclasses.replace(
        intent, status="requires_payment_method", last_payment_error=error, next_action_url=None
    )
    return Declined(failed, error, ("payment_intent.payment_failed",))


def confirm(intent: Intent, payment_method: str | None, *, charge_id: str, now_s: int) -> IntentDecision:
    """Authorize with the intent's (or the given) payment method."""
    if intent.status not in CONFIRMABLE:
        return _unexpected_state(intent, "confirm")
    method = payment_method or intent.payment_method
    if method is None:
        return Refused(400, "payment_method_required", "A payment method is required to confirm.")
    behaviour = PAYMENT_METHODS.get(method)
    if behaviour is None:
        return Refused(400, "resource_missing", f"No such PaymentMethod: '{method}'")
    ready = dataclasses.replace(intent, payment_method=method)
    match behaviour.outcome:
        case "authorize":
            return _authorized(ready, charge_id, now_s)
        case "challenge":
            url = f"https://simpsp.test/3ds/{intent.id}"
            challenged = dataclasses.replace(
                ready, status="requires_action", next_action_url=url, last_payment_error=None
            )
            return Applied(challenged, ("payment_intent.requires_action",))
        case "decline":
            return _failed(ready, PaymentError("card_declined", behaviour.decline_code, behaviour.message))


def complete_action(intent: Intent, outcome: ActionOutcome, *, charge_id: str, now_s: int) -> IntentDecision:
    """The customer finished (or failed) the 3-D Secure challenge."""
    if intent.status != "requires_action":
        return _unexpected_state(intent, "complete the next action of")
    if outcome == "succeeded":
        return _authorized(intent, charge_id, now_s)
    error = PaymentError(
        "payment_intent_authentication_failure",
        None,
        "The provided payment method has failed authentication.",
    )
    # A failed challenge is a definite failure of this attempt, reported like a decline (402).
    return _failed(intent, error)


def capture(intent: Intent, amount_minor: int | None, *, now_s: int) -> IntentDecision:
    """Capture all or part of the authorized amount; the remainder is released."""
    if intent.status != "requires_capture":
        return _unexpected_state(intent, "capture")
    amount = intent.amount_capturable_minor if amount_minor is None else amount_minor
    if not 0 < amount <= intent.amount_capturable_minor:
        return Refused(
            400,
            "amount_too_large",
            f"amount_to_capture_minor must be between 1 and {intent.amount_capturable_minor}.",
        )
    done = dataclasses.replace(
        intent, status="succeeded", amount_capturable_minor=0, amount_received_minor=amount, captured_s=now_s
    )
    invariant(done.amount_received_minor <= done.amount_minor, "captured more than the intent")
    return Applied(done, ("payment_intent.succeeded",))


def cancel(intent: Intent, reason: str | None, *, now_s: int) -> IntentDecision:
    if intent.status not in CANCELABLE:
        return _unexpected_state(intent, "cancel")
    canceled = dataclasses.replace(
        intent,
        status="canceled",
        amount_capturable_minor=0,
        cancellation_reason=reason,
        canceled_s=now_s,
        next_action_url=None,
    )
    return Applied(canceled, ("payment_intent.canceled",))


def refund(
    intent: Intent,
    amount_minor: int | None,
    *,
    refund_id: str,
    reference: str | None,
    reason: str | None,
    metadata: dict[str, str],
    pending: bool,
    now_s: int,
) -> RefundDecision:
    """Refund part or all of what was captured; never more than what is left (pending refunds count)."""
    if intent.status != "succeeded":
        return _unexpected_state(intent, "refund")
    available = intent.refundable_minor()
    if available <= 0:
        return Refused(400, "charge_already_refunded", "This charge has already been refunded in full.")
    amount = available if amount_minor is None else amount_minor
    if not 0 < amount <= available:
        return Refused(400, "amount_too_large", f"Refund amount_minor must be between 1 and {available}.")
    status: RefundStatus = "pending" if pending else "succeeded"
    new_refund = Refund(
        refund_id, intent.id, reference, amount, intent.currency, status, reason, None, metadata, now_s
    )
    if pending:
        held = dataclasses.replace(
            intent, amount_refund_pending_minor=intent.amount_refund_pending_minor + amount
        )
        return RefundApplied(held, new_refund, ())
    refunded = dataclasses.replace(intent, amount_refunded_minor=intent.amount_refunded_minor + amount)
    _check_refund_capacity(refunded)
    return RefundApplied(refunded, new_refund, ("refund.succeeded", "charge.refunded"))


def settle_refund(intent: Intent, pending_refund: Refund, outcome: ActionOutcome) -> RefundDecision:
    """A pending refund finishes: success moves the reservation to refunded, failure releases it."""
    if pending_refund.status != "pending":
        return Refused(400, "refund_unexpected_state", f"The refund is already {pending_refund.status}.")
    amount = pending_refund.amount_minor
    released = dataclasses.replace(
        intent, amount_refund_pending_minor=intent.amount_refund_pending_minor - amount
    )
    if outcome == "failed":
        failed = dataclasses.replace(pending_refund, status="failed", failure_reason="declined")
        return RefundApplied(released, failed, ("refund.failed",))
    done = dataclasses.replace(released, amount_refunded_minor=released.amount_refunded_minor + amount)
    _check_refund_capacity(done)
    return RefundApplied(
        done, dataclasses.replace(pending_refund, status="succeeded"), ("refund.succeeded", "charge.refunded")
    )


def dispute(intent: Intent, amount_minor: int | None) -> Intent | Refused:
    """A chargeback on a captured payment: at most what was received and not yet disputed."""
    if intent.status != "succeeded":
        return _unexpected_state(intent, "dispute")
    available = intent.amount_received_minor - intent.amount_disputed_minor
    amount = available if amount_minor is None else amount_minor
    if not 0 < amount <= available:
        return Refused(400, "amount_too_large", f"Dispute amount_minor must be between 1 and {available}.")
    return dataclasses.replace(intent, amount_disputed_minor=intent.amount_disputed_minor + amount)


def newly_captured_minor(before: Intent | None, after: Intent) -> int:
    """The amount a transition captured (the source of a ``charge`` balance transaction), else 0."""
    was_succeeded = before is not None and before.status == "succeeded"
    if after.status == "succeeded" and not was_succeeded:
        return after.amount_received_minor
    return 0


def _check_refund_capacity(intent: Intent) -> None:
    invariant(
        intent.amount_refunded_minor + intent.amount_refund_pending_minor <= intent.amount_received_minor,
        "refunds exceed the captured amount",
    )
