"""The simulator's objects (``backbone.psp`` model: payment intent, refund, dispute, payout) as our facts.

Shared by the API adapter (call answers and lookups) and the webhook parser, so a webhook and the
synchronous answer about the same object can never be read differently. ``backbone.psp`` already
parsed them strictly (integer minor units, known currency, consistent amounts); this module only
maps the provider's statuses onto ours.
"""

from __future__ import annotations

import json
from typing import Final

from backbone.psp import EVENT_TYPES, Dispute, Malformed, PaymentIntent, Payout, Refund, parse_event

from payment_state.application.ports import Ignored, WebhookFact
from payment_state.domain.facts import DisputeFact, IntentFact, IntentStatus, RefundFact, RefundStatus
from payment_state.domain.payouts import PayoutFact, PspPayoutStatus

_INTENT_STATUS: Final[dict[str, IntentStatus]] = {
    "requires_confirmation": IntentStatus.PROCESSING,
    "processing": IntentStatus.PROCESSING,
    "requires_action": IntentStatus.REQUIRES_ACTION,
    "requires_capture": IntentStatus.AUTHORIZED,
    "succeeded": IntentStatus.CAPTURED,
    "canceled": IntentStatus.CANCELED,
}
_REFUND_STATUS: Final[dict[str, RefundStatus]] = {
    "pending": RefundStatus.PENDING,
    "succeeded": RefundStatus.SUCCEEDED,
    "failed": RefundStatus.FAILED,
}


def intent_fact(intent: PaymentIntent) -> IntentFact:
    """``requires_payment_method`` after an attempt (a payment error) is a definite failure; before
    any attempt it only means "not confirmed yet"."""
    error = intent.last_payment_error
    if intent.status == "requires_payment_method":
        status = IntentStatus.FAILED if error is not None else IntentStatus.PROCESSING
    else:
        status = _INTENT_STATUS[intent.status]
    return IntentFact(
        provider_payment_id=intent.id,
        status=status,
        amount_minor=intent.amount_minor,
        currency=intent.currency,
        amount_capturable_minor=intent.amount_capturable_minor,
        amount_received_minor=intent.amount_received_minor,
        our_reference=intent.reference,
        next_action_url=intent.next_action_url,
        failure_code=(error.decline_code or error.code) if error is not None else None,
        failure_message=error.message if error is not None else None,
        cancellation_reason=intent.cancellation_reason,
    )


def refund_fact(refund: Refund) -> RefundFact:
    return RefundFact(
        provider_refund_id=refund.id,
        provider_payment_id=refund.payment_intent_id,
        status=_REFUND_STATUS[refund.status],
        amount_minor=refund.amount_minor,
        currency=refund.currency,
        our_reference=refund.reference,
        failure_code=refund.failure_reason,
    )


def dispute_fact(dispute: Dispute) -> DisputeFact:
    return DisputeFact(
        provider_dispute_id=dispute.id,
        provider_payment_id=dispute.payment_intent_id,
        amount_minor=dispute.amount_minor,
        currency=dispute.currency,
        reason=dispute.reason,
    )


def payout_fact(payout: Payout) -> PayoutFact:
    return PayoutFact(
        provider_payout_id=payout.id,
        status=PspPayoutStatus(payout.status.value),
        amount_minor=payout.amount_minor,
        currency=payout.currency,
        reference=payout.reference,
        failure_code=payout.failure_code,
        failure_message=payout.failure_message,
    )


def _event_type(raw_body: bytes) -> str | None:
    try:
        document = json.loads(raw_body)
    except ValueError:
        return None
    event_type = document.get("type") if isinstance(document, dict) else None
    return event_type if isinstance(event_type, str) else None


def parse_webhook(raw_body: bytes) -> WebhookFact:
    """The webhook parser for provider 'simpsp': the raw body the gateway verified, to a fact.

    A body that breaks the contract raises ``ValueError`` (the consumer dead-letters it); an event
    about a dispute other than its creation, or of a type the contract does not list, is kept for
    audit only.
    """
    event = parse_event(raw_body)
    if isinstance(event, Malformed):
        event_type = _event_type(raw_body)
        if event_type is not None and event_type not in EVENT_TYPES:
            return Ignored(event_type[:100])  # an authentic event of a kind we do not act on
        raise ValueError(f"simpsp webhook breaks the contract: {event.reason}")
    match event.object:
        case PaymentIntent():
            return intent_fact(event.object)
        case Refund():
            return refund_fact(event.object)
        case Dispute():
            return (
                dispute_fact(event.object) if event.type == "charge.dispute.created" else Ignored(event.type)
            )
        case Payout():
            # payout.created / .paid / .failed / .returned: a snapshot of the payout, as a lookup's
            return payout_fact(event.object)
