"""``backbone.psp``: the client of the card PSP (simpsp, Stripe-like) and the webhook signature check.

Used by payment-state (writes, status queries), the webhook gateway (``verify_signature`` over raw
bytes, before anything is parsed) and the reconciler (lookups by our reference)::

    from backbone.psp import PspClient, Applied, Declined, Refused, NoAnswer

    match client.capture_intent(operation_id, intent_id):
        case Applied(value=intent): ...      # intent.status == "succeeded"
        case Declined() | Refused(): ...    # definite: see results.py
        case NoAnswer(reason=why): ...        # may have been applied: resolve, never fail
        case _ as never: assert_never(never)

Payouts (money out to a payment method token, ``reference`` = our withdrawal id)::

    match client.create_payout(operation_id, amount_minor=500, currency="EUR",
                               destination="pm_card_visa", reference=withdrawal_id):
        case Applied(value=payout): ...      # payout.status: pending, later paid | failed (webhook)
        case Refused(): ...                  # definite: nothing was created
        case NoAnswer(): ...                 # find_payout_by_reference before anything else

Two providers behind one Protocol (``provider.PspProvider``): ``PspClient`` (``simpsp``, the
simulator) and ``stripe_client.StripeClient`` (``stripe``, the official SDK; imported from its module
so that only the processes that talk to Stripe load the SDK).

Contracts: ``results`` (what each HTTP answer maps to), ``signature`` (the header), ``model`` (the
typed objects and event types). The simulator's README documents the wire format.
"""

from backbone.psp.client import PspClient, PspClientSettings
from backbone.psp.events import Malformed, parse_event
from backbone.psp.model import (
    EVENT_TYPES,
    Dispute,
    EventType,
    IntentStatus,
    PaymentError,
    PaymentIntent,
    Payout,
    PayoutStatus,
    PspParseError,
    Refund,
    RefundStatus,
    WebhookEvent,
    parse_event_document,
    parse_intent,
    parse_object,
    parse_payout,
    parse_refund,
)
from backbone.psp.provider import PspProvider
from backbone.psp.results import (
    Absent,
    Applied,
    Conflict,
    Declined,
    Found,
    IntentLookup,
    IntentWrite,
    NoAnswer,
    PayoutLookup,
    PayoutWrite,
    RefundLookup,
    RefundWrite,
    Refused,
)
from backbone.psp.signature import (
    HEADER,
    SignatureCheck,
    SignatureInvalid,
    SignatureVerified,
    SigningSecrets,
    verify_signature,
)

__all__ = [
    "EVENT_TYPES",
    "HEADER",
    "Absent",
    "Applied",
    "Conflict",
    "Declined",
    "Dispute",
    "EventType",
    "Found",
    "IntentLookup",
    "IntentStatus",
    "IntentWrite",
    "Malformed",
    "NoAnswer",
    "PaymentError",
    "PaymentIntent",
    "Payout",
    "PayoutLookup",
    "PayoutStatus",
    "PayoutWrite",
    "PspClient",
    "PspClientSettings",
    "PspParseError",
    "PspProvider",
    "Refund",
    "RefundLookup",
    "RefundStatus",
    "RefundWrite",
    "Refused",
    "SignatureCheck",
    "SignatureInvalid",
    "SignatureVerified",
    "SigningSecrets",
    "WebhookEvent",
    "parse_event",
    "parse_event_document",
    "parse_intent",
    "parse_object",
    "parse_payout",
    "parse_refund",
    "verify_signature",
]
