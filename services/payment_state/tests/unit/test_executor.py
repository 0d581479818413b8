"""The operation executor's rules on the in-memory store and the in-memory PSP (no database): what
is called and when, what a lost claim, an expired lease, a dead worker or a silent provider lead
to, and when a call is sent again. The same store rules hold on PostgreSQL
(tests/integration/test_store_contract.py); the same scenarios run on a real database in
tests/integration/test_executor.py and against the simulator in test_acceptance_psp.py.
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from payment_state.adapters.memory_psp import MemoryPsp
from payment_state.adapters.memory_store import InMemoryPaymentStore
from payment_state.application.context import Context
from payment_state.application.executor import ExecutorConfig, OperationExecutor
from payment_state.application.handlers import handle
from payment_state.application.operation_calls import build_call
from payment_state.application.ports import CallResult, Lookup, ProviderCall
from payment_state.domain.commands import CreatePaymentRequest
from payment_state.domain.model import CaptureMethod, Operation, OperationStatus, PaymentState, PaymentStatus
from payment_state.domain.recovery import RecoveryPolicy

LEASE_MS = 30_000
_keys = itertools.count(1)
FAST = RecoveryPolicy(
    backoff_initial_ms=10, backoff_max_ms=50, attempts_before_case=3, idempotency_window_ms=3_600_000,
    recheck_interval_ms=10,
)  # fmt: skip  # packed: a few items a line read better than one each


class CountingPsp(MemoryPsp):
    """The in-memory PSP, counting lookups too."""

    lookups: int = 0

    def find_payment(self, payment_id: str, provider_payment_id: str | None) -> Lookup:
        self.lookups += 1
        return super().find_payment(payment_id, provider_payment_id)


def _world(
    psp: MemoryPsp | None = None, policy: RecoveryPolicy = FAST, worker: str = "w1"
) -> tuple[InMemoryPaymentStore, MemoryPsp, OperationExecutor]:
    store = InMemoryPaymentStore()
    psp = psp or CountingPsp()
    return store, psp, _executor(store, psp, policy, worker)


def _executor(
    store: InMemoryPaymentStore, psp: MemoryPsp, policy: RecoveryPolicy = FAST, worker: str = "w1"
) -> OperationExecutor:
    config = ExecutorConfig(
        worker_id=worker, batch_size_max=50, lease_ms=LEASE_MS, concurrency=2, policy=policy
    )
    return OperationExecutor(store.transaction, psp, _ctx(store), config)


def _ctx(store: InMemoryPaymentStore) -> Context:
    return Context("simpsp", now_ms=store.now_ms)  # one clock: the store's


def _create(store: InMemoryPaymentStore, token: str = "pm_card_visa") -> str:  # noqa: S107 - a test card
    request = CreatePaymentRequest(10_000, "EUR", token, CaptureMethod.MANUAL, "dep_7")
    with store.transaction() as s:
        reply = handle(s, _ctx(store), "m1", f"create-{next(_keys)}", request)
    assert reply.status == 201
    return str(reply.body["payment"]["payment_id"])


def _state(store: InMemoryPaymentStore, payment_id: str) -> PaymentState:
    found = store.load_state(payment_id)
    assert found is not None
    return found


def _op(store: InMemoryPaymentStore, payment_id: str) -> Operation:
    return _state(store, payment_id).operations[0]


def _drive(
    store: InMemoryPaymentStore, ex: OperationExecutor, until: Callable[[], bool], rounds_max: int = 100
) -> None:
    """Executor passes until ``until()`` holds; an idle pass lets the store's clock run a backoff."""
    for _ in range(rounds_max):
        if until():
            return
        if ex.run_once() == 0:
            store.advance(FAST.backoff_max_ms)
    assert until(), "the executor did not reach the expected state"


def _types(store: InMemoryPaymentStore) -> list[str]:
    return [kind for _, kind, _ in store.events]


def test_a_due_operation_is_called_once_and_its_answer_applied_with_its_event() -> None:
    """One call with the operation id as the provider key; the answer goes through the same path as
    webhooks (authorized, PaymentAuthorized, the fact kept); the claim is released and the resolved
    operation is never claimed again."""
    store, psp, ex = _world()
    payment_id = _create(store)
    assert ex.run_once() == 1
    op = _op(store, payment_id)
    assert [c.operation_id for c in psp.calls] == [op.operation_id]
    assert _state(store, payment_id).payment.status == PaymentStatus.AUTHORIZED
    assert (op.status, op.attempts, op.call_in_flight) == (OperationStatus.SUCCEEDED, 1, False)
    assert _types(store) == ["PaymentAuthorized"]
    assert [(f.source, f.outcome) for f in store.facts] == [("response", "applied")]
    store.advance(LEASE_MS + 1)
    assert ex.run_once() == 0 and len(psp.calls) == 1


class WatchingPsp(CountingPsp):
    """The in-memory PSP, noting what the store held for the operation when the call arrived."""

    def __init__(self, store: InMemoryPaymentStore) -> None:
        super().__init__()
        self.store = store
        self.seen: list[tuple[bool, int]] = []

    def execute(self, call: ProviderCall) -> CallResult:
        self.seen.append(
            (_op(self.store, call.payment_id).call_in_flight, _op(self.store, call.payment_id).attempts)
        )
        return super().execute(call)


def test_a_first_call_is_marked_in_flight_in_the_claims_transaction() -> None:
    """A never-sent operation costs two transactions, not four: the claim (which also reads it and
    marks its call in flight) and the answer. The mark is committed before the provider is asked
    (a worker dying in the call leaves it to be looked up, never sent blindly again)."""
    store = InMemoryPaymentStore()
    psp = WatchingPsp(store)
    ex = _executor(store, psp)
    payment_id = _create(store)
    opened = Counter[str]()
    real = store.transaction

    @contextmanager
    def counted() -> Iterator[InMemoryPaymentStore]:
        opened["tx"] += 1
        with real() as s:
            yield s

    ex._transaction = counted
    assert ex.run_once() == 1
    assert psp.seen == [(True, 1)]
    assert opened["tx"] == 2
    assert _state(store, payment_id).payment.status == PaymentStatus.AUTHORIZED


def test_a_live_lease_keeps_another_executor_away_until_it_expires() -> None:
    """Claimed by a worker that then went quiet (never started its call): nobody else touches the
    operation while its lease runs; after it, the next executor calls it, once."""
    store, psp, ex = _world()
    payment_id = _create(store)
    with store.transaction() as s:
        assert len(s.claim_due("quiet-worker", 10, LEASE_MS)) == 1
    assert ex.run_once() == 0 and psp.calls == []
    store.advance(LEASE_MS + 1)
    assert ex.run_once() == 1
    assert len(psp.calls) == 1 and _op(store, payment_id).status == OperationStatus.SUCCEEDED


def test_an_executor_whose_claim_was_taken_neither_calls_nor_looks_up() -> None:
    """Freshness: the claim is re-checked in the transaction right before the provider is asked; an
    executor whose lease ran out and whose operation another worker holds now sends nothing."""
    store, psp, ex = _world()
    assert isinstance(psp, CountingPsp)
    payment_id = _create(store)
    op = _op(store, payment_id)
    with store.transaction() as s:
        s.claim_due("other-worker", 10, LEASE_MS)
    ex.process(op.operation_id, payment_id)  # plan: a first call
    assert psp.calls == []
    with store.transaction() as s:
        assert s.start_call(op.operation_id, "other-worker")
        s.mark_unknown(op.operation_id, "timeout")
    ex.process(op.operation_id, payment_id)  # plan: a lookup
    assert psp.lookups == 0 and _op(store, payment_id).attempts == 1


def test_a_worker_that_died_mid_call_is_looked_up_never_assumed() -> None:
    """Two operations whose worker died after marking its calls: after the lease each becomes
    UNKNOWN ('worker_lost_during_call') and is looked up. The one whose call reached the provider is
    found (no second call); the other is absent and is sent again under the same key."""
    store, psp, ex = _world()
    reached, lost = _create(store), _create(store)
    with store.transaction() as s:
        for op in s.claim_due("dead-worker", 10, LEASE_MS):
            assert s.start_call(op.operation_id, "dead-worker")
    psp.execute(build_call(_state(store, reached), _op(store, reached)))
    store.advance(LEASE_MS + 1)
    _drive(store, ex, lambda: {_state(store, p).payment.status for p in (reached, lost)} == {"AUTHORIZED"})
    per_op = Counter(c.operation_id for c in psp.calls)
    assert per_op == {_op(store, reached).operation_id: 1, _op(store, lost).operation_id: 1}
    facts = {(f.payment_id, f.source, f.outcome) for f in store.facts}
    assert facts == {(reached, "lookup", "applied"), (lost, "response", "applied")}
    assert _op(store, lost).unknown_reason is None  # resolved: the domain clears the reason


def test_no_answer_is_unknown_then_looked_up_after_the_backoff() -> None:
    """The provider acted but its answer was lost: UNKNOWN with the reason, no event, nothing due
    before the backoff; the lookup then finds the authorization: one call, one event."""
    store, psp, ex = _world(MemoryPsp(fail_next=["lost_response"]))
    payment_id = _create(store)
    ex.run_once()
    op = _op(store, payment_id)
    assert (op.status, op.unknown_reason, store.events) == (OperationStatus.UNKNOWN, "timeout", [])
    assert ex.run_once() == 0  # rescheduled FAST.backoff_initial_ms ahead
    store.advance(FAST.backoff_initial_ms)
    assert ex.run_once() == 1
    assert _state(store, payment_id).payment.status == PaymentStatus.AUTHORIZED
    assert len(psp.calls) == 1 and _types(store) == ["PaymentAuthorized"]


def test_an_absent_call_is_sent_again_with_the_same_key_only_inside_the_window() -> None:
    """A call that never reached the provider is proved absent by the lookup and sent again with the
    same operation id while the provider still remembers keys; once the window has passed it is never
    sent again (it could surface later and charge twice): UNKNOWN and a case for a person, announced
    once as PaymentNeedsAttention with what the resolver last said."""
    store, psp, ex = _world(MemoryPsp(fail_next=["timeout"]))
    payment_id = _create(store)
    _drive(store, ex, lambda: _state(store, payment_id).payment.status == PaymentStatus.AUTHORIZED)
    assert len(psp.calls) == 2 and len({c.operation_id for c in psp.calls}) == 1

    window = RecoveryPolicy(10, 50, 50, idempotency_window_ms=100, recheck_interval_ms=10)
    store, psp, ex = _world(MemoryPsp(fail_next=["timeout"]), policy=window)
    payment_id = _create(store)
    ex.run_once()
    store.advance(100)  # the operation is now older than the provider's window
    case = (payment_id, _op(store, payment_id).operation_id, "idempotency_window_expired")
    _drive(store, ex, lambda: case in store.cases)
    assert len(psp.calls) == 1 and _op(store, payment_id).status == OperationStatus.UNKNOWN
    assert _types(store) == ["PaymentNeedsAttention"]
    body = store.events[0][2]
    assert (body["kind"], body["operation_id"], body["operation_status"]) == (
        "idempotency_window_expired",
        case[1],
        "UNKNOWN",
    )
    attempts = _op(store, payment_id).attempts
    assert body["detail"] == f"authorize UNKNOWN after {attempts} attempts (timeout)"
    assert body["attempts"] == attempts and body["operation_started_at_ms"] is not None


def test_after_the_attempt_limit_a_person_gets_a_case_and_lookups_go_on() -> None:
    """A provider that answers nothing: UNKNOWN, lookups back off, a case after the limit (once),
    nothing failed, only the case announced (PaymentNeedsAttention, once); when it answers again the
    payment converges, one intent."""
    store, psp, ex = _world(MemoryPsp(unavailable=True))
    payment_id = _create(store)
    op_id = _op(store, payment_id).operation_id
    _drive(store, ex, lambda: (payment_id, op_id, "unknown_unresolved") in store.cases)
    assert _op(store, payment_id).status == OperationStatus.UNKNOWN
    assert _types(store) == ["PaymentNeedsAttention"]
    assert _op(store, payment_id).attempts >= FAST.attempts_before_case
    psp.unavailable = False
    _drive(store, ex, lambda: _state(store, payment_id).payment.status == PaymentStatus.AUTHORIZED)
    assert len(psp.intents) == 1 and _types(store) == ["PaymentNeedsAttention", "PaymentAuthorized"]
    assert [kind for (_, _, kind) in store.cases] == ["unknown_unresolved"]


def test_3ds_waits_on_the_customer_with_periodic_lookups() -> None:
    """REQUIRES_ACTION is announced and the operation stays PENDING (not a failure, no second
    call); the periodic lookup finds the authorization once the customer completed the action."""
    store, psp, ex = _world()
    payment_id = _create(store, token="pm_card_3ds_required")
    ex.run_once()
    assert _state(store, payment_id).payment.status == PaymentStatus.REQUIRES_ACTION
    assert _op(store, payment_id).status == OperationStatus.PENDING
    psp.complete_action(_state(store, payment_id).payment.provider_payment_id or "", succeed=True)
    _drive(store, ex, lambda: _state(store, payment_id).payment.status == PaymentStatus.AUTHORIZED)
    assert len(psp.calls) == 1 and _types(store) == ["PaymentRequiresAction", "PaymentAuthorized"]


def test_two_executors_sharing_the_store_call_each_operation_once() -> None:
    """Two executors (each with its threads) race over 20 payments: every authorize is called exactly
    once, every payment authorized once."""
    store, psp = InMemoryPaymentStore(), MemoryPsp()
    payments = [_create(store) for _ in range(20)]
    executors = [_executor(store, psp, worker=f"w{i}") for i in range(2)]
    threads = [threading.Thread(target=lambda e=e: [e.run_once() for _ in range(3)]) for e in executors]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for e in executors:
        e.close()
    assert all(_state(store, p).payment.status == PaymentStatus.AUTHORIZED for p in payments)
    assert set(Counter(c.operation_id for c in psp.calls).values()) == {1} and len(psp.calls) == 20
