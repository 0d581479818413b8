"""The payout executor and the CreatePayout handler on the in-memory store and PSP (no database):
one payout per withdrawal whatever the commands, the capture's UNKNOWN rules for the create (lookup
first, the same key again only after a complete "absent", a person after the silent-lookup limit,
never PayoutFailed without proof), a dead worker and two workers. The same scenarios run against
PostgreSQL and the real simulator in tests/integration/test_payouts.py."""

from __future__ import annotations

import threading
from collections import Counter

from payment_state.adapters.memory_psp import MemoryPsp
from payment_state.adapters.memory_store import InMemoryPaymentStore
from payment_state.application.context import Context
from payment_state.application.executor import ExecutorConfig
from payment_state.application.payout_executor import PayoutExecutor, payout_call
from payment_state.application.payouts import apply_payout_provider_fact, create_payout
from payment_state.domain.commands import Rejection
from payment_state.domain.model import OperationStatus
from payment_state.domain.payout_requests import CreatePayoutRequest
from payment_state.domain.payouts import PayoutFact, PayoutState, PayoutStatus, PspPayoutStatus
from payment_state.domain.recovery import RecoveryPolicy

WD = "wd_" + "b" * 32
FAST = RecoveryPolicy(
    backoff_initial_ms=10, backoff_max_ms=50, attempts_before_case=3, idempotency_window_ms=3_600_000,
    recheck_interval_ms=10,
)  # fmt: skip  # packed: a few items a line read better than one each


def _request(token: str = "pm_card_visa", amount_minor: int = 5_000) -> CreatePayoutRequest:  # noqa: S107 - test card
    return CreatePayoutRequest(WD, "simpsp", amount_minor, "EUR", token, "pay_1", 1001, 7)


def _ctx(store: InMemoryPaymentStore) -> Context:
    return Context("simpsp", now_ms=store.now_ms)


def _executor(store: InMemoryPaymentStore, psp: MemoryPsp, worker: str = "w1") -> PayoutExecutor:
    config = ExecutorConfig(worker_id=worker, batch_size_max=20, lease_ms=30_000, concurrency=2, policy=FAST)
    return PayoutExecutor(store.transaction, psp, _ctx(store), config)


def _command(
    store: InMemoryPaymentStore, request: CreatePayoutRequest, merchant: str = "m1"
) -> PayoutState | Rejection:
    with store.transaction() as s:
        return create_payout(s, _ctx(store), merchant, request.withdrawal_id, request)


def _payout(store: InMemoryPaymentStore) -> PayoutState:
    with store.transaction() as s:
        state = s.load_payout(WD)
    assert state is not None
    return state


def _drive(store: InMemoryPaymentStore, executor: PayoutExecutor, rounds: int = 10) -> None:
    for _ in range(rounds):
        store.advance(100)
        executor.run_once()


def _events(store: InMemoryPaymentStore) -> list[str]:
    return [kind for key, kind, _ in store.events if key == WD]


def test_duplicate_and_conflicting_commands_make_one_payout() -> None:
    """The same command twice is one payout (the second returns the first's); the same withdrawal id
    with another amount or from another merchant is refused and changes nothing."""
    store = InMemoryPaymentStore()
    first = _command(store, _request())
    assert isinstance(first, PayoutState)
    assert _command(store, _request()) == first
    assert isinstance(_command(store, _request(amount_minor=6_000)), Rejection)
    refused = _command(store, _request(), merchant="m2")
    assert isinstance(refused, Rejection) and refused.code == "idempotency_key_reused"
    assert _payout(store) == first


def test_paid_at_once_announces_payout_paid_once() -> None:
    """The create answered paid: PAID, PayoutPaid once, the PSP called once with the operation id as
    key and the withdrawal id as reference."""
    store, psp = InMemoryPaymentStore(), MemoryPsp()
    state = _command(store, _request())
    assert isinstance(state, PayoutState)
    _drive(store, _executor(store, psp))
    assert _payout(store).payout.status == PayoutStatus.PAID
    assert _events(store) == ["PayoutPaid"]
    assert [(c.operation_id, c.withdrawal_id) for c in psp.payout_calls] == [
        (state.operation.operation_id, WD)
    ]


def test_lost_answer_is_unknown_until_the_lookup_finds_the_one_payout() -> None:
    """The PSP paid but the answer was lost: UNKNOWN, then the lookup (by reference) finds it; no
    second create is sent; PayoutPaid once."""
    store, psp = InMemoryPaymentStore(), MemoryPsp(fail_next=["lost_response"])
    _command(store, _request())
    executor = _executor(store, psp)
    executor.run_once()
    assert _payout(store).operation.status == OperationStatus.UNKNOWN
    _drive(store, executor)
    assert _payout(store).payout.status == PayoutStatus.PAID
    assert len(psp.payout_calls) == 1 and len(psp.payouts) == 1
    assert _events(store) == ["PayoutPaid"]


def test_nothing_reached_the_psp_then_absent_then_the_same_create_again() -> None:
    """The create never reached the PSP: UNKNOWN, lookup Absent, the same create (same key) again:
    one payout."""
    store, psp = InMemoryPaymentStore(), MemoryPsp(fail_next=["timeout"])
    _command(store, _request())
    _drive(store, _executor(store, psp))
    assert len(psp.payout_calls) == 2 and len({c.operation_id for c in psp.payout_calls}) == 1
    assert len(psp.payouts) == 1 and _events(store) == ["PayoutPaid"]


def test_a_silent_psp_leaves_the_payout_unknown_and_asks_a_person_once() -> None:
    """No answer to the create nor to any lookup: the payout stays UNKNOWN (never PayoutFailed), and
    after the silent-lookup limit exactly one PaymentNeedsAttention (operation type payout)."""
    store, psp = InMemoryPaymentStore(), MemoryPsp(unavailable=True)
    _command(store, _request())
    _drive(store, _executor(store, psp), rounds=30)
    state = _payout(store)
    assert state.operation.status == OperationStatus.UNKNOWN and state.payout.status == PayoutStatus.PENDING
    assert _events(store) == ["PaymentNeedsAttention"]
    body = next(b for key, kind, b in store.events if kind == "PaymentNeedsAttention")
    assert (body["kind"], body["operation_type"]) == ("unknown_unresolved", "payout")
    assert len(psp.payout_calls) == 1  # never sent again without proof it did not land


def test_a_definite_refusal_fails_once() -> None:
    """An unknown destination is refused by the PSP: FAILED, PayoutFailed once, no lookups after."""
    store, psp = InMemoryPaymentStore(), MemoryPsp()
    _command(store, _request(token="pm_unknown"))
    _drive(store, _executor(store, psp))
    assert _payout(store).payout.status == PayoutStatus.FAILED
    assert _events(store) == ["PayoutFailed"] and len(psp.payout_calls) == 1


def test_pending_then_webhook_then_return() -> None:
    """A pending answer (SUBMITTED) is rechecked; the paid webhook and later the return webhook go
    through the same apply function: PayoutPaid and PayoutReturned once each, a redelivered webhook
    changes nothing."""
    store, psp = InMemoryPaymentStore(), MemoryPsp(payouts_pending=True)
    _command(store, _request())
    executor = _executor(store, psp)
    executor.run_once()
    state = _payout(store)
    assert state.payout.status == PayoutStatus.SUBMITTED and state.payout.provider_payout_id is not None
    paid = psp.settle_payout(state.payout.provider_payout_id, paid=True)
    for event_id in ("evt_1", "evt_1"):
        with store.transaction() as s:
            apply_payout_provider_fact(s, _ctx(store), paid, source="webhook", provider_event_id=event_id)
    returned = psp.return_payout(state.payout.provider_payout_id)
    with store.transaction() as s:
        apply_payout_provider_fact(s, _ctx(store), returned, source="webhook", provider_event_id="evt_2")
    _drive(store, executor)
    assert _payout(store).payout.status == PayoutStatus.RETURNED
    assert _events(store) == ["PayoutPaid", "PayoutReturned"]


def test_a_webhook_before_the_answer() -> None:
    """payout.paid arrives before the create's answer is recorded: the answer is then a duplicate."""
    store = InMemoryPaymentStore()
    _command(store, _request())
    fact = PayoutFact("po_9", PspPayoutStatus.PAID, 5_000, "EUR", WD)
    with store.transaction() as s:
        apply_payout_provider_fact(s, _ctx(store), fact, source="webhook", provider_event_id="evt_9")
    with store.transaction() as s:
        outcome = apply_payout_provider_fact(s, _ctx(store), fact, source="response", withdrawal_id=WD)
    assert outcome.outcome == "duplicate" and _events(store) == ["PayoutPaid"]


def test_a_worker_dead_mid_call_is_looked_up_not_resent() -> None:
    """A claim that expired with the call in flight is UNKNOWN (worker_lost_during_call) and resolved
    by a lookup: the PSP is never asked to create twice."""
    store, psp = InMemoryPaymentStore(), MemoryPsp()
    state = _command(store, _request())
    assert isinstance(state, PayoutState)
    with store.transaction() as s:
        s.claim_due_payouts("dead", 10, 1_000)
        assert s.start_payout_call(state.operation.operation_id, "dead")
    psp.create_payout(payout_call(state))  # the dead worker's call landed
    store.advance(5_000)
    _drive(store, _executor(store, psp))
    assert len(psp.payout_calls) == 1 and _payout(store).payout.status == PayoutStatus.PAID
    assert _events(store) == ["PayoutPaid"]


def test_two_workers_racing_make_one_call() -> None:
    """Two executors on one store claim at the same time: one payout call, one PayoutPaid."""
    store, psp = InMemoryPaymentStore(), MemoryPsp()
    _command(store, _request())
    workers = [_executor(store, psp, f"w{i}") for i in range(2)]
    threads = [threading.Thread(target=w.run_once) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert Counter(c.operation_id for c in psp.payout_calls).most_common(1)[0][1] == 1
    assert _events(store) == ["PayoutPaid"]


def test_two_payouts_under_our_reference_go_to_a_person() -> None:
    """The lookup after a lost answer finds two PSP payouts carrying our withdrawal id (Conflict):
    nothing is applied, nothing is sent again, one case provider_duplicates for a person."""
    store, psp = InMemoryPaymentStore(), MemoryPsp(fail_next=["lost_response"])
    _command(store, _request())
    executor = _executor(store, psp)
    executor.run_once()
    psp.payouts["po_other"] = PayoutFact("po_other", PspPayoutStatus.PAID, 5_000, "EUR", WD)
    _drive(store, executor)
    state = _payout(store)
    assert (state.payout.status, state.operation.status) == (PayoutStatus.PENDING, OperationStatus.UNKNOWN)
    assert _events(store) == ["PaymentNeedsAttention"] and len(psp.payout_calls) == 1
    assert [kind for (key, _, kind) in store.cases if key == WD] == ["provider_duplicates"]


def test_a_payout_the_psp_forgets_is_never_created_again() -> None:
    """The PSP answered pending (we hold its payout id), then a lookup by that id says Absent: no
    second create is sent, ever; a case provider_conflict for a person, the payout stays SUBMITTED."""
    store, psp = InMemoryPaymentStore(), MemoryPsp(payouts_pending=True)
    _command(store, _request())
    executor = _executor(store, psp)
    executor.run_once()
    psp.payouts.clear()
    _drive(store, executor)
    state = _payout(store)
    assert state.payout.status == PayoutStatus.SUBMITTED and len(psp.payout_calls) == 1
    # provider_conflict at once; the lookups go on, so unknown_unresolved follows after the limit
    assert [kind for (key, _, kind) in store.cases if key == WD] == [
        "provider_conflict",
        "unknown_unresolved",
    ]
    assert set(_events(store)) == {"PaymentNeedsAttention"}


def test_a_lost_payout_is_replayed_with_the_same_key_at_a_provider_that_replays() -> None:
    """At a provider that replays lost creates (Stripe: payouts cannot be searched by metadata), a
    payout whose answer was lost is sent again once with the same operation id; the provider's
    stored answer resolves it: two sends of one request, one payout, paid once."""
    store = InMemoryPaymentStore()
    psp = MemoryPsp(fail_next=["lost_response"], replays_lost_creates=True)
    _command(store, _request())
    executor = _executor(store, psp)
    executor.run_once()
    _drive(store, executor)
    assert _payout(store).payout.status == PayoutStatus.PAID
    assert [c.operation_id for c in psp.payout_calls] == [_payout(store).operation.operation_id] * 2
    assert len(psp.payouts) == 1 and _events(store) == ["PayoutPaid"]
