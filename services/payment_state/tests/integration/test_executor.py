"""The operation executor on a real database against the in-memory PSP (the same scenarios run against
the real simulator in test_acceptance_psp.py): lost answers, timeouts, outages, the provider's
idempotency window, dead workers, 3-D Secure, pending refunds, competing executors."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from backbone.testing import databases, kafka
from backbone.testing.stack import Stack
from payment_state import bootstrap
from payment_state.adapters.memory_psp import MemoryPsp
from payment_state.application.executor import ExecutorConfig, OperationExecutor
from payment_state.application.ports import CallResult, ProviderCall
from payment_state.domain.commands import CaptureRequest, CreatePaymentRequest, RefundRequest
from payment_state.domain.model import CaptureMethod, OperationStatus, PaymentStatus
from payment_state.domain.recovery import RecoveryPolicy
from payment_state.testing import MERCHANT_A, MIGRATIONS, Service, fact_keys

FAST = RecoveryPolicy(
    backoff_initial_ms=1, backoff_max_ms=5, attempts_before_case=3, idempotency_window_ms=3_600_000,
    recheck_interval_ms=1,
)  # fmt: skip  # packed: a few items a line read better than one each


@pytest.fixture
def svc(stack: Stack, tmp_path: Path) -> Iterator[Service]:
    """A fresh database per test: the executor claims every due operation in it."""
    db_url = databases.create_database(stack.pg_admin_url, [MIGRATIONS], prefix="psx")
    events = kafka.unique_topic("psx-events")  # outbox rows only: no relay runs here
    catalogue = bootstrap.topic_catalogue(events_topic=events)
    avro = bootstrap.codec()
    pool = bootstrap.pool(db_url, 6, "payment-state-executor-tests")
    ctx = bootstrap.context("simpsp")
    service = Service(stack, db_url, events, "-", "-", tmp_path, ctx, pool, avro, catalogue)
    yield service
    pool.close()
    databases.drop_database(stack.pg_admin_url, db_url)


def executor(
    svc: Service, psp: MemoryPsp, policy: RecoveryPolicy = FAST, worker: str = "w1"
) -> OperationExecutor:
    config = ExecutorConfig(
        worker_id=worker, batch_size_max=50, lease_ms=30_000, concurrency=4, policy=policy
    )
    return OperationExecutor(svc.transaction, psp, svc.ctx, config)


def drive(ex: OperationExecutor, until: Callable[[], bool], rounds_max: int = 200) -> None:
    """Run executor passes until ``until()`` holds (backoffs are milliseconds in these tests)."""
    for _ in range(rounds_max):
        if until():
            return
        if ex.run_once() == 0:
            time.sleep(0.005)
    assert until(), "the executor did not reach the expected state"


def create(svc: Service, token: str = "pm_card_visa", method: CaptureMethod = CaptureMethod.MANUAL) -> str:  # noqa: S107 - test card
    request = CreatePaymentRequest(10_000, "EUR", token, method, "dep_7")
    reply = svc.handle(MERCHANT_A, f"create-{time.monotonic_ns()}", request)
    assert reply.status == 201
    return str(reply.body["payment"]["payment_id"])


def status(svc: Service, payment_id: str) -> PaymentStatus:
    return svc.state(payment_id).payment.status


def op_status(svc: Service, payment_id: str, index: int = 0) -> OperationStatus:
    return svc.state(payment_id).operations[index].status


def event_types(svc: Service, payment_id: str) -> list[str]:
    return [t for t, _ in svc.outbox(payment_id)]


def cases(svc: Service, payment_id: str) -> list[str]:
    return [r[0] for r in svc.query("SELECT kind FROM payment_cases WHERE payment_id = %s", payment_id)]


def test_authorize_then_capture(svc: Service) -> None:
    """The happy path: the executor authorizes (one call), the merchant captures, the executor
    captures (one call); PaymentAuthorized then PaymentCaptured, each once."""
    psp = MemoryPsp()
    ex = executor(svc, psp)
    payment_id = create(svc)
    drive(ex, lambda: status(svc, payment_id) == PaymentStatus.AUTHORIZED)
    assert svc.handle(MERCHANT_A, "cap-1", CaptureRequest(payment_id)).status == 202
    drive(ex, lambda: status(svc, payment_id) == PaymentStatus.CAPTURED)
    assert event_types(svc, payment_id) == ["PaymentAuthorized", "PaymentCaptured"]
    assert [type(c).__name__ for c in psp.calls] == ["AuthorizeCall", "CaptureCall"]
    assert all(op.status == OperationStatus.SUCCEEDED for op in svc.state(payment_id).operations)


def test_provider_success_with_the_response_lost(svc: Service) -> None:
    """The PSP authorizes but the answer is lost: the operation is UNKNOWN (never FAILED, no event),
    a lookup finds the intent and applies it; one intent at the PSP, one call, one event."""
    psp = MemoryPsp(fail_next=["lost_response"])
    ex = executor(svc, psp)
    payment_id = create(svc)
    ex.run_once()
    assert (status(svc, payment_id), op_status(svc, payment_id)) == ("CREATED", "UNKNOWN")
    assert svc.state(payment_id).operations[0].unknown_reason == "timeout"
    assert event_types(svc, payment_id) == []
    drive(ex, lambda: status(svc, payment_id) == PaymentStatus.AUTHORIZED)
    assert len(psp.intents) == 1 and len(psp.calls) == 1
    assert event_types(svc, payment_id) == ["PaymentAuthorized"]


def test_timeout_before_the_provider_is_resent_with_the_same_key(svc: Service) -> None:
    """A call that never reached the PSP: the lookup proves it absent, so the *same* call (same
    operation id as idempotency key) is sent again, within the provider's window; one intent."""
    psp = MemoryPsp(fail_next=["timeout"])
    ex = executor(svc, psp)
    payment_id = create(svc)
    drive(ex, lambda: status(svc, payment_id) == PaymentStatus.AUTHORIZED)
    assert len(psp.calls) == 2 and len({c.operation_id for c in psp.calls}) == 1
    assert len(psp.intents) == 1


def test_provider_idempotency_window_expired(svc: Service) -> None:
    """After the provider's idempotency window, an absent call is never sent again (it could charge
    twice if the first one surfaced later): the operation stays UNKNOWN and a person gets a case,
    announced once (PaymentNeedsAttention, Avro-encoded in the outbox with what the resolver said).
    A lost answer is still resolved by lookup after the window: lookups never move money."""
    window_passed = RecoveryPolicy(1, 5, 50, idempotency_window_ms=1, recheck_interval_ms=1)
    psp = MemoryPsp(fail_next=["timeout", "lost_response"])
    ex = executor(svc, psp, window_passed)
    never_reached = create(svc)
    drive(ex, lambda: "idempotency_window_expired" in cases(svc, never_reached))
    assert (status(svc, never_reached), op_status(svc, never_reached)) == ("CREATED", "UNKNOWN")
    op = svc.state(never_reached).operations[0]
    assert [c.operation_id for c in psp.calls] == [op.operation_id]
    [(event_type, body)] = svc.outbox(never_reached)
    assert event_type == "PaymentNeedsAttention"
    assert (body["kind"], body["operation_id"], body["operation_type"], body["operation_status"]) == (
        "idempotency_window_expired",
        op.operation_id,
        "authorize",
        "UNKNOWN",
    )
    assert body["attempts"] == op.attempts and "timeout" in body["detail"]
    psp.forget_keys()
    answered_lost = create(svc)
    drive(ex, lambda: status(svc, answered_lost) == PaymentStatus.AUTHORIZED)
    assert sum(1 for c in psp.calls if c.payment_id == answered_lost) == 1


def test_recovery_after_a_long_provider_outage(svc: Service) -> None:
    """The PSP is down: operations go UNKNOWN, lookups back off, and after the limit a case is opened;
    nothing is failed and nothing is announced. When it is back, every payment converges to
    AUTHORIZED with one intent at the PSP and one PaymentAuthorized each (after the one
    PaymentNeedsAttention that announced the case)."""
    psp = MemoryPsp(unavailable=True)
    ex = executor(svc, psp)
    payments = [create(svc) for _ in range(5)]
    drive(ex, lambda: all("unknown_unresolved" in cases(svc, p) for p in payments))
    assert {op_status(svc, p) for p in payments} == {OperationStatus.UNKNOWN}
    assert all(event_types(svc, p) == ["PaymentNeedsAttention"] for p in payments)
    psp.unavailable = False
    drive(ex, lambda: all(status(svc, p) == PaymentStatus.AUTHORIZED for p in payments))
    assert len(psp.intents) == 5
    assert all(event_types(svc, p) == ["PaymentNeedsAttention", "PaymentAuthorized"] for p in payments)


def test_worker_that_died_mid_call(svc: Service) -> None:
    """A worker claimed, marked the call and died. After its lease, the next worker never assumes:
    UNKNOWN ('worker_lost_during_call'), then a lookup. If the dead worker's call had reached the
    PSP, the lookup finds it (no second call); if not, the same call is sent again."""
    psp = MemoryPsp()
    reached, lost = create(svc), create(svc)
    with svc.transaction() as store:
        for op in store.claim_due("dead-worker", 10, 30_000):
            store.start_call(op.operation_id, "dead-worker")
    reached_op = svc.state(reached).operations[0]
    psp.execute(ex_call(svc, reached, reached_op.operation_id))
    svc.query("UPDATE payment_operations SET claimed_until = now() - interval '1 second' RETURNING 1")
    ex = executor(svc, psp, worker="w2")
    drive(ex, lambda: status(svc, reached) == status(svc, lost) == PaymentStatus.AUTHORIZED)
    per_op = Counter(c.operation_id for c in psp.calls)
    assert per_op[reached_op.operation_id] == 1
    assert per_op[svc.state(lost).operations[0].operation_id] == 1
    facts = "SELECT source, outcome FROM provider_facts WHERE payment_id = %s ORDER BY id"
    assert svc.query(facts, reached) == [("lookup", "applied")]
    assert svc.query(facts, lost) == [("response", "applied")]  # absent at the PSP: resent, answered


def ex_call(svc: Service, payment_id: str, operation_id: str) -> ProviderCall:
    from payment_state.application.operation_calls import build_call  # noqa: PLC0415 - used by this helper alone

    state = svc.state(payment_id)
    op = state.operation(operation_id)
    assert op is not None
    return build_call(state, op)


def test_3ds_requires_action_then_authorized(svc: Service) -> None:
    """3-D Secure: REQUIRES_ACTION is announced (not a failure); when the customer completes it and
    no webhook comes, the periodic lookup finds the authorization."""
    psp = MemoryPsp()
    ex = executor(svc, psp)
    payment_id = create(svc, token="pm_card_3ds_required")
    drive(ex, lambda: status(svc, payment_id) == PaymentStatus.REQUIRES_ACTION)
    assert op_status(svc, payment_id) == OperationStatus.PENDING
    psp.complete_action(svc.state(payment_id).payment.provider_payment_id or "", succeed=True)
    drive(ex, lambda: status(svc, payment_id) == PaymentStatus.AUTHORIZED)
    assert event_types(svc, payment_id) == ["PaymentRequiresAction", "PaymentAuthorized"]
    assert len(psp.calls) == 1


def test_pending_refund_then_settled_and_full_refund_after_partial(svc: Service) -> None:
    """An automatic-capture payment refunded in two parts: the first refund stays pending at the PSP
    (capacity stays reserved) until it settles; the second refunds the rest: REFUNDED, two
    RefundSucceeded, each once."""
    psp = MemoryPsp(refunds_pending=True)
    ex = executor(svc, psp)
    payment_id = create(svc, method=CaptureMethod.AUTOMATIC)
    drive(ex, lambda: status(svc, payment_id) == PaymentStatus.CAPTURED)
    assert svc.handle(MERCHANT_A, "r1", RefundRequest(payment_id, 4_000, "EUR")).status == 202
    drive(ex, lambda: svc.state(payment_id).operations[-1].provider_reference is not None)
    assert svc.state(payment_id).payment.pending_refund_minor == 4_000
    psp.settle_refund(svc.state(payment_id).operations[-1].provider_reference or "", succeed=True)
    psp.refunds_pending = False
    drive(ex, lambda: status(svc, payment_id) == PaymentStatus.PARTIALLY_REFUNDED)
    assert svc.handle(MERCHANT_A, "r2", RefundRequest(payment_id, 6_000, "EUR")).status == 202
    drive(ex, lambda: status(svc, payment_id) == PaymentStatus.REFUNDED)
    events = svc.outbox(payment_id)
    assert [t for t, _ in events] == [
        "PaymentAuthorized",
        "PaymentCaptured",
        "RefundSucceeded",
        "RefundSucceeded",
    ]
    assert len(set(fact_keys(events))) == 4


def test_webhook_before_the_call_answer(svc: Service) -> None:
    """The webhook for the authorization is applied while the call is still waiting for its answer;
    the answer then changes nothing: one PaymentAuthorized, the answer kept as a duplicate."""

    class WebhookFirst(MemoryPsp):
        def execute(self, call: ProviderCall) -> CallResult:
            result = super().execute(call)
            fact = getattr(result, "fact", None)
            assert fact is not None
            assert svc.apply(fact, provider_event_id=f"evt_{call.operation_id}").outcome == "applied"
            return result

    ex = executor(svc, WebhookFirst())
    payment_id = create(svc)
    drive(ex, lambda: status(svc, payment_id) == PaymentStatus.AUTHORIZED)
    assert event_types(svc, payment_id) == ["PaymentAuthorized"]
    outcomes = svc.query(
        "SELECT source, outcome FROM provider_facts WHERE payment_id = %s ORDER BY id", payment_id
    )
    assert outcomes == [("webhook", "applied"), ("response", "duplicate")]


def test_two_executors_never_call_an_operation_twice(svc: Service) -> None:
    """Two executors race over 40 payments: each authorize operation is called exactly once and every
    payment is authorized once (claims with SKIP LOCKED, not luck)."""
    psp = MemoryPsp()
    payments = [create(svc) for _ in range(40)]
    done = threading.Event()

    def run(worker: str) -> None:
        ex = executor(svc, psp, worker=worker)
        while not done.is_set():
            if ex.run_once() == 0:
                time.sleep(0.005)
        ex.close()

    threads = [threading.Thread(target=run, args=(f"w{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(
        status(svc, p) == PaymentStatus.AUTHORIZED for p in payments
    ):
        time.sleep(0.05)
    done.set()
    for t in threads:
        t.join()
    assert all(status(svc, p) == PaymentStatus.AUTHORIZED for p in payments)
    assert set(Counter(c.operation_id for c in psp.calls).values()) == {1}
    assert len(psp.calls) == 40


def test_old_idempotency_keys_are_pruned_in_bounded_batches(svc: Service) -> None:
    """Keys older than the retention are forgotten, at most a batch per pass; newer keys and every
    payment stay."""
    payment_id = create(svc)
    svc.query("UPDATE idempotency_keys SET created_at = now() - interval '40 days' RETURNING 1")
    create(svc)
    create(svc)
    with svc.transaction() as store:
        assert store.prune_idempotency_keys(30 * 24 * 3600, 10) == 1
    with svc.transaction() as store:
        assert store.prune_idempotency_keys(30 * 24 * 3600, 10) == 0
    assert svc.scalar("SELECT count(*) FROM idempotency_keys") == 2
    assert svc.state(payment_id).payment.status == PaymentStatus.CREATED
