"""Provider ``stripe``'s webhook events as our facts: the raw body the gateway verified, to a fact.

Stripe's objects are first read into ``backbone.psp``'s model (``backbone.psp.stripe_objects``:
integer amounts, upper-case currency, our reference from ``metadata``), then mapped by the same
functions as simpsp's (``simpsp_objects``), so a Stripe webhook, a Stripe call answer and a Stripe
lookup about one object can never be read differently, and neither can the two providers.

The events acted on (each carries the object's whole state: a snapshot, applied forward-only by
``apply_provider_fact``, so duplicates, reordering and stale events change nothing):

| Stripe event                                   | ``data.object`` | fact                          |
|------------------------------------------------|-----------------|-------------------------------|
| payment_intent.requires_action                 | payment intent  | IntentFact REQUIRES_ACTION    |
| payment_intent.amount_capturable_updated       | payment intent  | IntentFact AUTHORIZED         |
| payment_intent.succeeded                       | payment intent  | IntentFact CAPTURED           |
| payment_intent.payment_failed                  | payment intent  | IntentFact FAILED (the error) |
| payment_intent.canceled                        | payment intent  | IntentFact CANCELED           |
| payment_intent.processing                      | payment intent  | IntentFact PROCESSING         |
| refund.created / refund.updated / refund.failed| refund          | RefundFact (its status)       |
| charge.dispute.created                         | dispute         | DisputeFact (a chargeback)    |
| payout.created / .updated / .paid / .failed / .canceled | payout | PayoutFact (its status)       |

``charge.refunded`` is stored and ignored: its object is the charge, which on Stripe's current API
versions no longer lists its refunds, so it cannot say which refund of ours moved; the
``refund.*`` event about the same refund (and the refund lookups) carry it. Every other type
(``charge.succeeded``, ``payment_intent.created``, ``charge.dispute.updated``, types Stripe adds
later) is ``Ignored``: recorded for audit, never an error. A listed type whose object breaks the
contract raises ``ValueError`` (the consumer dead-letters it, for a person).
"""

from __future__ import annotations

import json
from typing import Any, Final

from backbone.psp import Dispute, PaymentIntent, Payout, PspParseError, Refund
from backbone.psp.stripe_objects import parse_stripe_event

from payment_state.adapters.simpsp_objects import dispute_fact, intent_fact, payout_fact, refund_fact
from payment_state.application.ports import Ignored, WebhookFact

ACTED_ON: Final = frozenset(
    {
        "payment_intent.requires_action",
        "payment_intent.amount_capturable_updated",
        "payment_intent.succeeded",
        "payment_intent.payment_failed",
        "payment_intent.canceled",
        "payment_intent.processing",
        "refund.created",
        "refund.updated",
        "refund.failed",
        "charge.dispute.created",
        "payout.created",
        "payout.updated",
        "payout.paid",
        "payout.failed",
        "payout.canceled",
    }
)
_TYPE_LENGTH_MAX: Final = 100


def _document(raw_body: bytes) -> dict[str, Any]:
    try:
        document = json.loads(raw_body)
    except (ValueError, RecursionError) as exc:
        raise ValueError("stripe webhook breaks the contract: not JSON") from exc
    if not isinstance(document, dict) or not isinstance(document.get("type"), str):
        raise ValueError("stripe webhook breaks the contract: no event type")
    return document


def parse_stripe_webhook(raw_body: bytes) -> WebhookFact:
    """The webhook parser for provider 'stripe' (see the module docstring for the mapping)."""
    document = _document(raw_body)
    event_type: str = document["type"]
    if event_type not in ACTED_ON:
        return Ignored(event_type[:_TYPE_LENGTH_MAX])
    try:
        event = parse_stripe_event(document)
    except PspParseError as exc:
        raise ValueError(f"stripe webhook breaks the contract: {str(exc)[:200]}") from exc
    expected = event_type.split(".", maxsplit=1)[0]
    match event.object:
        case PaymentIntent() if expected == "payment_intent":
            return intent_fact(event.object)
        case Refund() if expected == "refund":
            return refund_fact(event.object)
        case Dispute() if expected == "charge":
            return dispute_fact(event.object)
        case Payout() if expected == "payout":
            return payout_fact(event.object)
        case _:
            raise ValueError(f"stripe webhook breaks the contract: {event_type} about another kind of object")
