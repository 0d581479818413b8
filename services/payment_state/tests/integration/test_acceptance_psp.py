"""The seed's acceptance scenarios end to end, against the real PSP simulator as a process.

Running: the simulator (its own database), a webhook receiver that verifies signatures and publishes
ProviderEventReceived like the gateway (``GatewayStandIn``), and payment-state's api, executor,
inbound consumer and relay as real processes on the real database and Kafka. Each scenario asserts
the payment's state, the operations' states, what the PSP holds, and that every business fact was
written (and published) exactly once."""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
from backbone.psp import Applied, Found, PspClient
from backbone.testing import databases
from backbone.testing.processes import Proc, wait_until
from backbone.testing.stack import Stack, free_port
from payment_state.domain.model import OperationStatus, PaymentStatus
from payment_state.testing import (
    PSP_API_KEY,
    PSP_SIM_MIGRATIONS,
    PSP_WEBHOOK_SECRET,
    GatewayStandIn,
    Http,
    PspSim,
    Publisher,
    Service,
    fact_keys,
)

NEW_SECRET = "whsec_payment_state_rotated_02"
_keys = itertools.count(1)


@dataclass
class World:
    service: Service
    sim: PspSim
    gateway: GatewayStandIn
    api: Http
    psp: PspClient
    executor: Proc | None = None

    def executor_env(self, **overrides: str) -> dict[str, str]:
        return {
            "PSP_BASE_URL": self.sim.api_url,
            "PSP_API_KEY": PSP_API_KEY,
            "PSP_TIMEOUT_MS": "10000",  # above the PSP's webhook timeout (webhook-before-response)
            "PSP_CONNECT_TIMEOUT_MS": "500",
            "EXECUTOR_POLL_INTERVAL_MS": "200",
            "EXECUTOR_LEASE_MS": "30000",
            "RECOVERY_BACKOFF_INITIAL_MS": "100",
            "RECOVERY_BACKOFF_MAX_MS": "500",
            "RECOVERY_ATTEMPTS_BEFORE_CASE": "4",
            "RECOVERY_RECHECK_INTERVAL_MS": "60000",  # 3-D Secure outcomes must come by webhook here
            **overrides,
        }

    def restart_executor(self, **overrides: str) -> None:
        if self.executor is not None:
            self.executor.terminate()
        self.executor = self.service.start("worker", **self.executor_env(**overrides))

    def quiet(self) -> None:
        """Wait until the PSP has no webhook left to deliver (fault rules then hit this test only)."""
        backlog = "/control/webhook-backlog"
        wait_until(lambda: self.sim.control("GET", backlog)["pending_or_held"] == 0, 20, "no webhook backlog")


@pytest.fixture(scope="module")
def world(service: Service, stack: Stack) -> Iterator[World]:
    publisher = Publisher(stack.kafka_bootstrap, service.catalogue, service.codec, "webhook_gateway")
    gateway = GatewayStandIn(publisher, service.provider_topic, [PSP_WEBHOOK_SECRET]).start()
    sim_db = databases.create_database(stack.pg_admin_url, [PSP_SIM_MIGRATIONS], prefix="pssim")
    sim = PspSim(sim_db, service.logs_dir, PSP_SIM_WEBHOOK_URL=gateway.url).start()
    port = free_port()
    service.start("api", PAYMENT_STATE_HTTP_PORT=str(port), PAYMENT_STATE_HTTP_HOST="127.0.0.1")
    inbound = service.start("consume")
    service.start("relay")
    world = World(service, sim, gateway, Http(port), sim.client())
    world.restart_executor()
    inbound.wait_for_log("consumer.assigned", timeout_s=30)
    wait_until(lambda: _answers(world.api), 30, "the API")
    yield world
    sim.stop()
    gateway.close()
    databases.drop_database(stack.pg_admin_url, sim_db)


def _answers(api: Http) -> bool:
    try:
        return api.get("/healthz", token=None).status == 200
    except OSError:
        return False


# -- helpers --------------------------------------------------------------------------------------


def create(world: World, method: str = "pm_card_visa", capture: str = "manual", amount: int = 10_000) -> str:
    body = {
        "amount_minor": amount,
        "currency": "EUR",
        "payment_method_token": method,
        "capture_method": capture,
        "deposit_reference": f"dep_{next(_keys)}",
    }
    answer = world.api.post("/payments", body, key=f"create-{next(_keys)}")
    assert answer.status == 201, answer
    return str(answer.body["payment"]["payment_id"])


def wait_status(world: World, payment_id: str, status: PaymentStatus, timeout_s: float = 20.0) -> None:
    wait_until(
        lambda: world.service.state(payment_id).payment.status == status, timeout_s, f"{payment_id} {status}"
    )


def settled(world: World, payment_id: str) -> bool:
    return all(op.status in (OperationStatus.SUCCEEDED, OperationStatus.FAILED)
               for op in world.service.state(payment_id).operations)  # fmt: skip  # aligned under its bracket


def events(world: World, payment_id: str) -> list[str]:
    """The payment's outbox events (what the relay publishes), each business fact checked once."""
    written = world.service.outbox(payment_id)
    keys = fact_keys(written)
    assert len(keys) == len(set(keys)), f"a fact was written twice: {keys}"
    return [t for t, _ in written]


def intents(world: World, payment_id: str) -> list[Any]:
    """Every PSP intent carrying our reference (a repeated create would show as two)."""
    found = world.psp.find_intent_by_reference(payment_id)
    if isinstance(found, Found):
        return [found.value]
    return list(getattr(found, "values", ()))


def facts(world: World, payment_id: str) -> list[tuple[str, str]]:
    return world.service.query(
        "SELECT source, outcome FROM provider_facts WHERE payment_id = %s ORDER BY id", payment_id
    )


def provider_id(world: World, payment_id: str) -> str:
    found = world.service.state(payment_id).payment.provider_payment_id
    assert found is not None
    return found


# -- scenarios ------------------------------------------------------------------------------------


def test_deposit_authorized_captured_and_charged_back(world: World) -> None:
    """A manual-capture deposit: AUTHORIZED by the executor, CAPTURED on request; PaymentCaptured
    carries the deposit reference; a chargeback later is announced once with it."""
    payment_id = create(world)
    wait_status(world, payment_id, PaymentStatus.AUTHORIZED)
    assert world.api.post(f"/payments/{payment_id}/capture", {}, key=f"cap-{payment_id}").status == 202
    wait_status(world, payment_id, PaymentStatus.CAPTURED)
    world.sim.control("POST", f"/control/payment_intents/{provider_id(world, payment_id)}/dispute",
                      {"amount_minor": 4_000, "reason": "fraudulent"})  # fmt: skip  # aligned
    wait_until(lambda: "ChargebackReceived" in events(world, payment_id), 20, "the chargeback")
    written = dict(world.service.outbox(payment_id))
    deposit = world.service.state(payment_id).payment.deposit_reference
    assert written["PaymentCaptured"]["deposit_reference"] == deposit
    assert written["ChargebackReceived"]["deposit_reference"] == deposit
    assert written["ChargebackReceived"]["amount_minor"] == 4_000
    assert events(world, payment_id) == ["PaymentAuthorized", "PaymentCaptured", "ChargebackReceived"]
    assert settled(world, payment_id) and len(intents(world, payment_id)) == 1


def test_client_retries_a_key_and_changes_the_amount(world: World) -> None:
    """The same key replays the first answer, the same key with another amount is refused: one
    payment, one intent at the PSP, for the first amount."""
    body = {"amount_minor": 5_000, "currency": "EUR", "payment_method_token": "pm_card_visa"}
    first = world.api.post("/payments", body, key="retry-key-1")
    replay = world.api.post("/payments", body, key="retry-key-1")
    changed = world.api.post("/payments", {**body, "amount_minor": 50_000}, key="retry-key-1")
    assert (first.status, replay.body, changed.status, changed.code) == (
        201,
        first.body,
        422,
        "idempotency_key_reused",
    )
    payment_id = first.body["payment"]["payment_id"]
    wait_status(world, payment_id, PaymentStatus.AUTHORIZED)
    found = intents(world, payment_id)
    assert len(found) == 1 and found[0].amount_minor == 5_000
    assert events(world, payment_id) == ["PaymentAuthorized"]


def test_provider_success_with_the_response_lost(world: World) -> None:
    """The PSP authorizes, the answer is lost (5xx after commit) and the webhook is dropped too: the
    operation goes UNKNOWN, never FAILED; a lookup finds the authorization. One intent, one event."""
    world.sim.fault(kind="apply_then_fail", operation="create", count=1)
    world.sim.fault(kind="webhook_drop", event_type="payment_intent.amount_capturable_updated", count=1)
    payment_id = create(world)
    wait_status(world, payment_id, PaymentStatus.AUTHORIZED)
    op = world.service.query(
        "SELECT status, unknown_since IS NOT NULL, attempts FROM payment_operations WHERE payment_id = %s",
        payment_id,
    )
    assert op == [("SUCCEEDED", True, 2)]  # one call, one lookup
    assert ("lookup", "applied") in facts(world, payment_id)
    assert len(intents(world, payment_id)) == 1
    assert events(world, payment_id) == ["PaymentAuthorized"]


def test_webhook_before_the_api_response(world: World) -> None:
    """The PSP delivers the webhook before answering the call, and the receiver acknowledges only
    once payment-state applied it: the answer that arrives after changes nothing."""

    def wait_until_applied(event: dict[str, Any]) -> None:
        sql = "SELECT count(*) FROM provider_facts WHERE provider_event_id = %s"
        wait_until(lambda: world.service.scalar(sql, event["id"]) == 1, 6, "the webhook applied")

    world.sim.fault(kind="webhook_before_response", operation="create", count=1)
    world.gateway.before_answer = wait_until_applied
    try:
        payment_id = create(world)
        wait_until(lambda: len(facts(world, payment_id)) == 2, 20, "webhook and answer")
    finally:
        world.gateway.before_answer = lambda _event: None
    assert facts(world, payment_id) == [("webhook", "applied"), ("response", "duplicate")]
    assert world.service.state(payment_id).payment.status == PaymentStatus.AUTHORIZED
    assert events(world, payment_id) == ["PaymentAuthorized"]


def test_duplicate_reordered_and_delayed_webhooks(world: World) -> None:
    """3-D Secure with automatic capture: the customer completes the challenge (only webhooks tell
    payment-state); the PSP holds the two webhooks and sends them newest first, the newest three
    times. The payment ends CAPTURED, each event once; the older webhook is kept as stale."""
    world.quiet()
    world.sim.fault(kind="webhook_reorder", group_size=2, count=1)
    world.sim.fault(kind="webhook_duplicate", event_type="payment_intent.succeeded", copies=2, count=1)
    payment_id = create(world, method="pm_card_3ds_required", capture="automatic")
    wait_status(world, payment_id, PaymentStatus.REQUIRES_ACTION)
    assert isinstance(world.psp.complete_action(f"customer-{payment_id}", provider_id(world, payment_id),
                                                succeeded=True), Applied)  # fmt: skip  # aligned
    wait_status(world, payment_id, PaymentStatus.CAPTURED)
    wait_until(lambda: len(facts(world, payment_id)) == 3, 20, "the stale webhook kept")
    assert facts(world, payment_id) == [("response", "applied"), ("webhook", "applied"), ("webhook", "stale")]
    received = Counter(t for _, t in world.gateway.received)
    assert received["payment_intent.succeeded"] >= 3
    assert events(world, payment_id) == ["PaymentRequiresAction", "PaymentAuthorized", "PaymentCaptured"]
    assert settled(world, payment_id)


def test_authorization_racing_cancel(world: World) -> None:
    """During 3-D Secure the customer completes the challenge while the merchant cancels: whatever
    the order at the PSP, the payment ends CANCELED, never captured, each event once."""
    payment_id = create(world, method="pm_card_3ds_required")
    wait_status(world, payment_id, PaymentStatus.REQUIRES_ACTION)
    intent_id = provider_id(world, payment_id)
    barrier = threading.Barrier(2)

    def customer() -> object:
        barrier.wait()
        return world.psp.complete_action(f"customer-{payment_id}", intent_id, succeeded=True)

    def merchant() -> object:
        barrier.wait()
        return world.api.post(
            f"/payments/{payment_id}/cancel", {"reason": "out of stock"}, key=f"c-{payment_id}"
        )

    with ThreadPoolExecutor(2) as pool:
        completed, canceled = pool.submit(customer), pool.submit(merchant)
        completed.result()
        assert canceled.result().status == 202  # type: ignore[attr-defined]
    wait_status(world, payment_id, PaymentStatus.CANCELED)
    wait_until(lambda: settled(world, payment_id), 20, "operations settled")
    assert intents(world, payment_id)[0].status == "canceled"
    written = events(world, payment_id)
    assert written[0] == "PaymentRequiresAction" and written[-1] == "PaymentCanceled"
    assert "PaymentCaptured" not in written and set(written) <= {
        "PaymentRequiresAction", "PaymentAuthorized", "PaymentCanceled",
    }  # fmt: skip  # packed: a few items a line read better than one each


def test_competing_refunds_then_full_refund_after_partials(world: World) -> None:
    """Two refunds of 6,000 on 10,000 at once: one is accepted. Then 3,000 (held pending at the PSP
    until it completes) and the last 1,000: REFUNDED; three RefundSucceeded; the PSP holds three
    refunds summing to the capture."""
    payment_id = create(world, capture="automatic")
    wait_status(world, payment_id, PaymentStatus.CAPTURED)
    path = f"/payments/{payment_id}/refunds"
    with ThreadPoolExecutor(2) as pool:
        six = {"amount_minor": 6_000, "currency": "EUR"}
        answers = list(
            pool.map(lambda k: world.api.post(path, six, key=k), [f"r-{payment_id}-{k}" for k in "ab"])
        )
    assert sorted(a.status for a in answers) == [202, 422]
    wait_status(world, payment_id, PaymentStatus.PARTIALLY_REFUNDED)
    world.sim.fault(kind="refund_pending", operation="refund", count=1)
    assert (
        world.api.post(path, {"amount_minor": 3_000, "currency": "EUR"}, key=f"r-{payment_id}-c").status
        == 202
    )
    wait_until(
        lambda: world.service.state(payment_id).operations[-1].provider_reference is not None, 20, "sent"
    )
    pending = world.service.state(payment_id)
    assert (
        pending.payment.pending_refund_minor == 3_000
        and pending.operations[-1].status == OperationStatus.PENDING
    )
    world.sim.control("POST", f"/control/refunds/{pending.operations[-1].provider_reference}/complete",
                      {"outcome": "succeeded"})  # fmt: skip  # continuation aligned under its bracket
    wait_until(
        lambda: world.service.state(payment_id).payment.pending_refund_minor == 0, 20, "refund completed"
    )
    assert (
        world.api.post(path, {"amount_minor": 1_000, "currency": "EUR"}, key=f"r-{payment_id}-d").status
        == 202
    )
    wait_status(world, payment_id, PaymentStatus.REFUNDED)
    refunds = world.psp.list_refunds(provider_id(world, payment_id))
    assert isinstance(refunds, tuple)
    assert sorted(r.amount_minor for r in refunds if r.status == "succeeded") == [1_000, 3_000, 6_000]
    assert events(world, payment_id).count("RefundSucceeded") == 3


def test_provider_idempotency_expiry(world: World) -> None:
    """Past the PSP's idempotency window (our setting 0 s here, the PSP's TTL 1 s): a call that never
    reached the PSP is never sent again (it could charge twice): UNKNOWN and a case for a person
    (announced: PaymentNeedsAttention), no intent, no other event. A call that did reach it is
    still resolved by lookup, with no resend."""
    world.sim.control("PATCH", "/control/config", {"idempotency_ttl_s": 1})
    world.restart_executor(PSP_IDEMPOTENCY_WINDOW_S="0")
    try:
        world.sim.fault(kind="fail_without_apply", operation="create", count=1)
        never_reached = create(world)
        case = "SELECT kind FROM payment_cases WHERE payment_id = %s"
        wait_until(
            lambda: world.service.query(case, never_reached) == [("idempotency_window_expired",)], 20, "case"
        )
        state = world.service.state(never_reached)
        assert (state.payment.status, state.operations[0].status) == (
            PaymentStatus.CREATED,
            OperationStatus.UNKNOWN,
        )
        assert intents(world, never_reached) == []
        assert events(world, never_reached) == ["PaymentNeedsAttention"]
        world.sim.fault(kind="apply_then_fail", operation="create", count=1)
        reached = create(world)
        wait_status(world, reached, PaymentStatus.AUTHORIZED)
        assert len(intents(world, reached)) == 1 and events(world, reached) == ["PaymentAuthorized"]
    finally:
        world.sim.control("PATCH", "/control/config", {"idempotency_ttl_s": 86_400})
        world.restart_executor()


def test_webhook_secret_rotation(world: World) -> None:
    """Webhooks signed before, during and after a secret rotation (the receiver knows the current and
    the previous secret) are applied the same way: three 3-D Secure payments, each CAPTURED by its
    webhook, with the same events."""

    def through_3ds() -> str:
        payment_id = create(world, method="pm_card_3ds_required", capture="automatic")
        wait_status(world, payment_id, PaymentStatus.REQUIRES_ACTION)
        world.psp.complete_action(f"customer-{payment_id}", provider_id(world, payment_id), succeeded=True)
        wait_status(world, payment_id, PaymentStatus.CAPTURED)
        return payment_id

    before = through_3ds()
    world.gateway.secrets = [NEW_SECRET, PSP_WEBHOOK_SECRET]
    world.sim.control(
        "POST", "/control/webhook-secrets/rotate", {"secret": NEW_SECRET, "keep_previous": True}
    )
    during = through_3ds()
    world.sim.control("POST", "/control/webhook-secrets/end-rotation")
    after = through_3ds()
    expected = ["PaymentRequiresAction", "PaymentAuthorized", "PaymentCaptured"]
    assert [events(world, p) for p in (before, during, after)] == [expected] * 3
    assert world.gateway.rejected == 0


def test_recovery_after_a_long_psp_outage(world: World) -> None:
    """The PSP is down while payments are created: their operations go UNKNOWN (never FAILED), a case
    is opened after the retry limit and announced (PaymentNeedsAttention), nothing else. When the PSP
    is back each payment converges to AUTHORIZED with exactly one intent at the PSP and one
    PaymentAuthorized."""
    world.sim.stop()
    try:
        payments = [create(world) for _ in range(4)]
        case = "SELECT count(*) FROM payment_cases WHERE kind = 'unknown_unresolved' AND payment_id = ANY(%s)"
        wait_until(lambda: world.service.scalar(case, payments) == 4, 30, "a case per stuck payment")
        for payment_id in payments:
            state = world.service.state(payment_id)
            assert (state.payment.status, state.operations[0].status) == ("CREATED", "UNKNOWN")
            assert events(world, payment_id) == ["PaymentNeedsAttention"]
    finally:
        world.sim.start()
    for payment_id in payments:
        wait_status(world, payment_id, PaymentStatus.AUTHORIZED, timeout_s=30)
    for payment_id in payments:
        assert len(intents(world, payment_id)) == 1
        assert events(world, payment_id) == ["PaymentNeedsAttention", "PaymentAuthorized"]


def test_everything_written_was_published_once_per_fact(world: World) -> None:
    """Every outbox event of this module reached payments.events, under one event id per business
    fact (the relay may publish an id twice after a crash; consumers dedupe on it)."""
    written = world.service.query("SELECT event_id::text FROM outbox")
    unpublished = "SELECT count(*) FROM outbox WHERE published_at IS NULL"
    wait_until(lambda: world.service.scalar(unpublished) == 0, 30, "all published")
    published = world.service.published(expect_at_least=len(written))
    ids_on_topic = {m.headers.get("event_id") for m in published}
    assert {row[0] for row in written} <= ids_on_topic
    decoded = [world.service.codec.decode(m.value or b"") for m in published]
    per_fact: dict[tuple[str, str], set[str]] = {}
    for d in decoded:
        ref = d.body.get("refund_id") or d.body.get("chargeback_id") or d.body["operation_id"]
        per_fact.setdefault((d.event_type, ref), set()).add(d.envelope.event_id)
    assert all(len(ids) == 1 for ids in per_fact.values())
