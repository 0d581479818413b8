"""The inbound consumer (commands and verified webhooks) and the relay as real processes on real
Kafka and PostgreSQL: duplicate, reordered and delayed webhooks, commands with the API's
idempotency rules, unusable webhooks dead-lettered, duplicate outbox publication, chargebacks."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from backbone.outbox.writer import OutboxMessage
from backbone.testing.processes import Proc, wait_until
from payment_state.domain.commands import CreatePaymentRequest
from payment_state.domain.model import CaptureMethod, PaymentStatus
from payment_state.testing import (
    MERCHANT_A,
    Publisher,
    Service,
    dispute_object,
    fact_keys,
    intent_object,
    provider_event,
    webhook_body,
)

_seq = itertools.count(1)


@pytest.fixture(scope="module")
def running(service: Service) -> Iterator[dict[str, Proc]]:
    procs = {"consume": service.start("consume"), "relay": service.start("relay")}
    procs["consume"].wait_for_log("consumer.assigned", timeout_s=30)
    yield procs


@pytest.fixture(scope="module")
def gateway(service: Service) -> Publisher:
    """Publishes ProviderEventReceived like the webhook gateway's relay."""
    return Publisher(service.stack.kafka_bootstrap, service.catalogue, service.codec, "webhook_gateway")


@pytest.fixture(scope="module")
def upstream(service: Service) -> Publisher:
    """Publishes payment commands like an upstream platform service."""
    return Publisher(service.stack.kafka_bootstrap, service.catalogue, service.codec, "platform")


def create(service: Service, method: CaptureMethod = CaptureMethod.AUTOMATIC) -> str:
    reply = service.handle(
        MERCHANT_A, f"c-{next(_seq)}", CreatePaymentRequest(5_000, "EUR", "tok", method, "dep_9")
    )
    return str(reply.body["payment"]["payment_id"])


def webhook(
    gateway: Publisher,
    service: Service,
    payment_id: str,
    event_id: str,
    event_type: str,
    obj: dict[str, Any],
    **kwargs: Any,
) -> OutboxMessage:
    raw = webhook_body(event_id, event_type, obj)
    body = provider_event(event_id, event_type, raw, provider_payment_id=obj.get("id"), **kwargs)
    return gateway.message(service.provider_topic, "ProviderEventReceived", payment_id, body)


def facts(service: Service, payment_id: str) -> list[tuple[str, str]]:
    return service.query(
        "SELECT coalesce(provider_event_id, source), outcome FROM provider_facts"
        " WHERE payment_id = %s ORDER BY id",
        payment_id,
    )


def test_duplicate_reordered_and_delayed_webhooks(
    service: Service, running: dict[str, Proc], gateway: Publisher
) -> None:
    """The PSP's 'succeeded' webhook arrives first (twice, the same delivery published twice), the
    older 'requires_action' after it and once more later: the payment is CAPTURED, PaymentAuthorized
    and PaymentCaptured are published once each, the stale ones are kept for audit as stale."""
    payment_id = create(service)
    pi = f"pi_{next(_seq)}"
    action = {"type": "redirect_to_url", "redirect_to_url": {"url": "https://psp/3ds"}}
    ra_obj = intent_object(pi, "requires_action", 5_000, payment_id, next_action=action)
    requires_action = webhook(
        gateway, service, payment_id, f"evt_{pi}_1", "payment_intent.requires_action", ra_obj
    )
    succeeded = webhook(gateway, service, payment_id, f"evt_{pi}_2", "payment_intent.succeeded",
                        intent_object(pi, "succeeded", 5_000, payment_id))  # fmt: skip  # aligned
    gateway.send([succeeded, succeeded, requires_action])
    wait_until(lambda: len(facts(service, payment_id)) == 2, 30, "two webhooks applied")
    # Later: the same delivery once more (the dedup row absorbs it), then a marker on the same
    # partition (same key) to know the redelivery has been consumed before asserting.
    marker = webhook(gateway, service, payment_id, f"evt_{pi}_3", "payment_intent.processing",
                     intent_object(pi, "processing", 5_000, payment_id))  # fmt: skip  # aligned
    gateway.send([requires_action, marker])
    wait_until(lambda: len(facts(service, payment_id)) == 3, 30, "the marker applied")
    assert service.state(payment_id).payment.status == PaymentStatus.CAPTURED
    assert facts(service, payment_id) == [
        (f"evt_{pi}_2", "applied"), (f"evt_{pi}_1", "stale"), (f"evt_{pi}_3", "pending"),
    ]  # fmt: skip  # packed: a few items a line read better than one each
    published = [m for m in service.published(expect_at_least=2) if m.key == payment_id.encode()]
    decoded = [service.codec.decode(m.value or b"") for m in published]
    assert [d.event_type for d in decoded] == ["PaymentAuthorized", "PaymentCaptured"]
    assert decoded[1].body["deposit_reference"] == "dep_9"
    assert decoded[1].envelope.causation_id == succeeded.event_id


def test_commands_follow_the_api_idempotency_rules(
    service: Service, running: dict[str, Proc], upstream: Publisher
) -> None:
    """CreatePayment from the commands topic: a redelivered command with the same key replays (one
    payment); the same key with another amount changes nothing; card data never reaches the
    handler: it is dead-lettered with the payload redacted (no digits kept anywhere); a capture
    before authorization is refused and recorded like over HTTP."""
    payment_id = f"pay_cmd_{next(_seq)}"
    create = {
        "merchant_id": MERCHANT_A,
        "idempotency_key": "cmd-1",
        "amount_minor": 7_000,
        "currency": "EUR",
        "payment_method_token": "pm_tok",
        "capture_method": "manual",
        "deposit_reference": "dep_c",
    }
    card = {**create, "idempotency_key": "cmd-card", "payment_method_token": "4111111111111111"}
    capture = {
        "merchant_id": MERCHANT_A,
        "idempotency_key": "cmd-cap",
        "amount_minor": None,
        "currency": None,
    }
    topic = service.commands_topic
    commands = [
        upstream.message(topic, "CreatePayment", payment_id, create),
        upstream.message(topic, "CreatePayment", payment_id, create),
        upstream.message(topic, "CreatePayment", payment_id, {**create, "amount_minor": 9_000}),
        upstream.message(topic, "CreatePayment", payment_id, card),
        upstream.message(topic, "CapturePayment", payment_id, capture),
    ]
    upstream.send(commands)
    keys = "SELECT idempotency_key, response_status FROM idempotency_keys WHERE payment_id = %s ORDER BY 1"
    wait_until(lambda: len(service.query(keys, payment_id)) == 2, 30, "the capture command handled")
    assert service.query(keys, payment_id) == [("cmd-1", 201), ("cmd-cap", 409)]
    state = service.state(payment_id)
    assert (state.payment.amount_minor, state.payment.deposit_reference, len(state.operations)) == (
        7_000,
        "dep_c",
        1,
    )
    assert service.scalar("SELECT count(*) FROM idempotency_keys WHERE idempotency_key = 'cmd-card'") == 0
    letters = service.query("SELECT error_class, payload, headers::text FROM dead_letters")
    assert [row[0] for row in letters] == ["card_data_forbidden"]
    redacted = service.codec.decode(bytes(letters[0][1]))
    assert redacted.body["payment_method_token"] == "[redacted]"
    assert redacted.body["idempotency_key"] == "cmd-card"
    assert b"4111111111111111" not in bytes(letters[0][1]) and "4111111111111111" not in letters[0][2]


def test_unusable_webhooks_are_dead_lettered(
    service: Service, running: dict[str, Proc], gateway: Publisher
) -> None:
    """An unverified signature, a body that breaks the provider contract and an unknown provider are
    never applied and never dropped: each becomes a dead letter for a person; later events flow."""
    payment_id = create(service)
    pi = f"pi_{next(_seq)}"
    good = intent_object(pi, "succeeded", 5_000, payment_id)
    unverified = webhook(
        gateway, service, payment_id, f"evt_{pi}_u", "payment_intent.succeeded", good, verified=False
    )
    bad_body = provider_event(f"evt_{pi}_g", "payment_intent.succeeded", b"{not json", provider_payment_id=pi)
    garbage = gateway.message(service.provider_topic, "ProviderEventReceived", payment_id, bad_body)
    stranger = webhook(
        gateway, service, payment_id, f"evt_{pi}_s", "payment_intent.succeeded", good, provider="otherpsp"
    )
    fine = webhook(gateway, service, payment_id, f"evt_{pi}_ok", "payment_intent.succeeded", good)
    gateway.send([unverified, garbage, stranger, fine])
    ids = {m.event_id for m in (unverified, garbage, stranger)}
    letters = "SELECT event_id::text, error_class FROM dead_letters"
    wait_until(lambda: ids <= {r[0] for r in service.query(letters)}, 60, "three dead letters")
    wait_until(
        lambda: service.state(payment_id).payment.status == PaymentStatus.CAPTURED, 30, "the good one applied"
    )
    assert facts(service, payment_id) == [(f"evt_{pi}_ok", "applied")]


def test_duplicate_outbox_publication(service: Service, running: dict[str, Proc], gateway: Publisher) -> None:
    """The relay is killed after Kafka acknowledged a batch and before marking it: on restart the same
    events are published again (same event ids). Each business fact still has exactly one event id,
    which consumers deduplicate on."""
    running["relay"].terminate()
    payment_id = create(service)
    pi = f"pi_{next(_seq)}"
    gateway.send([webhook(gateway, service, payment_id, f"evt_{pi}", "payment_intent.succeeded",
                          intent_object(pi, "succeeded", 5_000, payment_id))])  # fmt: skip  # aligned
    wait_until(lambda: len(service.outbox(payment_id)) == 2, 30, "events in the outbox")
    crashing = service.start("relay", name="relay-crash", BACKBONE_FAILPOINTS="relay.after_delivery=kill")
    assert crashing.wait_exit(30) != 0
    assert (
        service.scalar(
            "SELECT count(*) FROM outbox WHERE message_key = %s AND published_at IS NULL", payment_id
        )
        == 2
    )
    running["relay"] = service.start("relay")
    wait_until(
        lambda: service.scalar("SELECT count(*) FROM outbox WHERE published_at IS NULL") == 0, 30, "marked"
    )
    mine = [m for m in service.published(expect_at_least=4) if m.key == payment_id.encode()]
    decoded = [service.codec.decode(m.value or b"") for m in mine]
    by_id = Counter(d.envelope.event_id for d in decoded)
    assert len(decoded) == 4 and set(by_id.values()) == {2}  # every event published twice ...
    facts_by_id = {(d.event_type, d.body["operation_id"]): d.envelope.event_id for d in decoded}
    assert len(facts_by_id) == 2 and set(facts_by_id.values()) == set(by_id)  # ... under one id per fact


def test_chargeback_webhook(service: Service, running: dict[str, Proc], gateway: Publisher) -> None:
    """A dispute on a captured deposit: ChargebackReceived with the deposit reference, once, even when
    the provider sends the same dispute webhook twice (two deliveries, two envelopes)."""
    payment_id = create(service)
    pi = f"pi_{next(_seq)}"
    dispute = dispute_object(f"dp_{pi}", pi, 5_000)
    gateway.send([
        webhook(gateway, service, payment_id, f"evt_{pi}", "payment_intent.succeeded",
                intent_object(pi, "succeeded", 5_000, payment_id)),
        webhook(gateway, service, payment_id, f"evt_{pi}_d", "charge.dispute.created", dispute),
        webhook(gateway, service, payment_id, f"evt_{pi}_d", "charge.dispute.created", dispute),
    ])  # fmt: skip  # packed: a few items a line read better than one each
    wait_until(lambda: len(service.outbox(payment_id)) == 3, 30, "three events")
    events = service.outbox(payment_id)
    assert [t for t, _ in events] == ["PaymentAuthorized", "PaymentCaptured", "ChargebackReceived"]
    assert events[2][1]["deposit_reference"] == "dep_9" and events[2][1]["reason"] == "fraudulent"
    assert len(set(fact_keys(events))) == 3
    assert service.scalar("SELECT count(*) FROM chargebacks WHERE payment_id = %s", payment_id) == 1
