"""``POST /providers/stripe/webhooks`` over real HTTP against a real gateway process and real
PostgreSQL, with every signature made by Stripe's official SDK (``stripe.WebhookSignature``): what
Stripe signs is accepted and stored once under ``(stripe, event.id)``; tampered, stale and
unknown-secret deliveries are refused and store nothing; unknown event types are stored; card data
is refused or redacted as for simpsp (ADR 0004)."""

from __future__ import annotations

import json
import time
import uuid

import stripe
from webhook_gateway.testing import (
    CURRENT,
    STRIPE_CURRENT,
    STRIPE_PREVIOUS,
    STRIPE_WEBHOOKS,
    Answer,
    Gateway,
    stripe_event,
)


def new_event_id() -> str:
    return f"evt_{uuid.uuid4().hex[:24]}"


def sdk_header(raw: bytes, secret: str, t: int | None = None) -> str:
    """The Stripe-Signature header as Stripe computes it, by the official SDK's own helper."""
    return str(stripe.WebhookSignature.generate_signature_header(raw.decode(), secret, timestamp=t))


def send(gateway: Gateway, raw: bytes, header: str | None, path: str = STRIPE_WEBHOOKS) -> Answer:
    headers = {"Content-Type": "application/json; charset=utf-8", "User-Agent": "Stripe/1.0"}
    if header is not None:
        headers["Stripe-Signature"] = header
    return gateway.request("POST", path, raw, headers)


def test_sdk_signed_event_is_stored_once_under_stripe_and_its_event_id(gateway: Gateway) -> None:
    """A Stripe event signed by the SDK with the endpoint secret is answered 200 once committed:
    one receipt under (stripe, evt_…), the raw bytes kept byte for byte, its payment intent as the
    Kafka key of the one outbox row; a redelivery is a duplicate and stores nothing more."""
    event_id = new_event_id()
    raw = stripe_event(event_id)
    first = send(gateway, raw, sdk_header(raw, STRIPE_CURRENT))
    again = send(gateway, raw, sdk_header(raw, STRIPE_CURRENT))
    assert (first.status, first.body["duplicate"]) == (200, False)
    assert (again.status, again.body["duplicate"]) == (200, True)
    rows = gateway.rows(
        "SELECT provider, provider_event_type, provider_payment_id, raw_body, signature_secret, audit_headers"
        " FROM provider_events WHERE provider_event_id = %s",
        event_id,
    )
    assert len(rows) == 1
    provider, event_type, payment_id, stored, secret, audit = rows[0]
    assert (provider, event_type, payment_id, secret) == (
        "stripe",
        "payment_intent.succeeded",
        "pi_3MtwBwLkdIwHu7ix28a3tqPa",
        "current",
    )
    assert bytes(stored) == raw
    assert audit["stripe-signature"].startswith("t=")
    assert gateway.outbox_rows(event_id) == 1


def test_during_a_secret_roll_both_signatures_and_the_previous_secret_are_accepted(gateway: Gateway) -> None:
    """While Stripe rolls the endpoint secret it sends one v1 per secret: a header with both is
    accepted, and so is one signed with the previous secret alone (recorded as 'previous')."""
    both_id, previous_id = new_event_id(), new_event_id()
    raw_both = stripe_event(both_id)
    t = int(time.time())
    old, new = sdk_header(raw_both, STRIPE_PREVIOUS, t), sdk_header(raw_both, STRIPE_CURRENT, t)
    header = f"{new},{old.split(',', 1)[1]}"  # t=…,v1=<new>,v1=<old>, as Stripe sends it
    assert send(gateway, raw_both, header).status == 200
    raw_previous = stripe_event(previous_id)
    assert send(gateway, raw_previous, sdk_header(raw_previous, STRIPE_PREVIOUS)).status == 200
    secret = gateway.scalar(
        "SELECT signature_secret FROM provider_events WHERE provider_event_id = %s", previous_id
    )
    assert secret == "previous"


def test_tampered_stale_and_unknown_secret_are_refused_and_store_nothing(gateway: Gateway) -> None:
    """A body changed after signing, a signature older than the tolerance (300 s), one made with
    a secret we do not hold (simpsp's, or none) and a missing header are each 400 with the
    published code, and nothing is stored."""
    event_id = new_event_id()
    raw = stripe_event(event_id)
    tampered = raw.replace(b'"amount": 2000', b'"amount": 2001')
    cases = [
        (tampered, sdk_header(raw, STRIPE_CURRENT), "signature_mismatch"),
        (
            raw,
            sdk_header(raw, STRIPE_CURRENT, int(time.time()) - 301),
            "signature_timestamp_outside_tolerance",
        ),
        (raw, sdk_header(raw, "whsec_someone_elses_secret_0000"), "signature_mismatch"),
        (raw, sdk_header(raw, CURRENT), "signature_mismatch"),
        (raw, None, "signature_header_missing"),
    ]
    for body, header, code in cases:
        answer = send(gateway, body, header)
        assert (answer.status, answer.code) == (400, code), code
    assert gateway.receipts(event_id) == 0


def test_unknown_event_types_are_stored_never_refused(gateway: Gateway) -> None:
    """An authentic event of a type we do not act on (a customer, a balance) is stored and
    forwarded like any other: payment-state ignores it, the gateway never fails it."""
    for event_type, obj in [
        ("customer.created", {"id": "cus_NffrFeUfNV2Hib", "object": "customer", "email": None}),
        ("balance.available", {"object": "balance", "available": [{"amount": 1, "currency": "eur"}]}),
        ("some.future_type", {"object": "thing", "id": "thg_1"}),
    ]:
        event_id = new_event_id()
        raw = stripe_event(event_id, event_type, obj)
        answer = send(gateway, raw, sdk_header(raw, STRIPE_CURRENT))
        assert answer.status == 200, event_type
        assert gateway.receipts(event_id) == 1


def test_charge_events_are_keyed_by_their_payment_intent(gateway: Gateway) -> None:
    """charge.refunded carries a charge: its payment_intent is the routing key (the payment's
    partition), like a refund's or a dispute's."""
    event_id = new_event_id()
    charge = {
        "id": "ch_1",
        "object": "charge",
        "amount": 2000,
        "amount_refunded": 500,
        "currency": "eur",
        "payment_intent": "pi_charged",
        "refunded": False,
    }
    raw = stripe_event(event_id, "charge.refunded", charge)
    assert send(gateway, raw, sdk_header(raw, STRIPE_CURRENT)).status == 200
    key = gateway.scalar(
        "SELECT provider_payment_id FROM provider_events WHERE provider_event_id = %s", event_id
    )
    assert key == "pi_charged"


def test_card_data_is_refused_at_the_edge_and_redacted_in_a_signed_body(gateway: Gateway) -> None:
    """As for simpsp (ADR 0004): a card number in the query is refused before anything else;
    a signed Stripe body carrying one (a PSP's mistake) is stored redacted, flagged."""
    event_id = new_event_id()
    raw = stripe_event(event_id)
    refused = send(
        gateway, raw, sdk_header(raw, STRIPE_CURRENT), path=f"{STRIPE_WEBHOOKS}?pan=4242424242424242"
    )
    assert (refused.status, refused.code) == (400, "card_data_forbidden")
    assert gateway.receipts(event_id) == 0
    document = json.loads(stripe_event(event_id))
    document["data"]["object"]["description"] = "card 4242 4242 4242 4242"
    carrying = json.dumps(document).encode()
    stored = send(gateway, carrying, sdk_header(carrying, STRIPE_CURRENT))
    assert stored.status == 200
    body, flagged = gateway.rows(
        "SELECT raw_body, card_data_redacted FROM provider_events WHERE provider_event_id = %s", event_id
    )[0]
    assert flagged is True and b"4242 4242" not in bytes(body)


def test_simpsp_header_does_not_sign_a_stripe_event(gateway: Gateway) -> None:
    """Each provider's signature travels in its own header: a Stripe path with only a
    Simpsp-Signature header has no signature."""
    raw = stripe_event(new_event_id())
    answer = gateway.post(raw, sdk_header(raw, STRIPE_CURRENT), path=STRIPE_WEBHOOKS)
    assert (answer.status, answer.code) == (400, "signature_header_missing")


def test_stripe_endpoint_without_a_secret_is_not_there(start_gateway) -> None:  # type: ignore[no-untyped-def]
    """A gateway configured without STRIPE_WEBHOOK_SECRET has no Stripe endpoint (404, body unread)."""
    gateway = start_gateway(STRIPE_WEBHOOK_SECRET="", STRIPE_WEBHOOK_SECRET_PREVIOUS="")
    raw = stripe_event(new_event_id())
    answer = send(gateway, raw, sdk_header(raw, STRIPE_CURRENT))
    assert (answer.status, answer.code) == (404, "unknown_provider")
