"""One contract for payment-state's two stores: every test runs against the in-memory twin
(``adapters.memory_store``, what the application's unit tests use) and against PostgreSQL
(``adapters.postgres_store`` on a fresh migrated database, what runs), so the twin cannot drift
from the real one unnoticed.

The rules under test are the ones that keep a payment's money moving once: an idempotency key is
claimed once and replays what it stored (another body under it is a conflict); a save is
conditional on the version read; a provider payment id, a webhook, a dispute and a case are each
recorded once; the executor's claim takes due operations earliest first up to its limit, two
claimers never both win, an expired lease is claimable again and its old holder loses every right
to the operation; old keys are pruned in bounded batches; a repair request is recorded once per
repair id, claimed like an operation and decided once with one outcome; events and every other
change commit with their transaction or not at all.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import replace

import pytest
from backbone import tracing
from backbone.testing.stack import Stack
from payment_state.application.context import Context
from payment_state.application.handlers import handle
from payment_state.application.ports import Created, PaymentIdTaken
from payment_state.domain.commands import (
    CaptureRequest,
    StoredResponse,
)
from payment_state.domain.events import OutEvent
from payment_state.domain.model import (
    Operation,
    OperationStatus,
    OperationType,
    PaymentState,
    PaymentStatus,
)
from payment_state.domain.payout_requests import CreatePayoutRequest, decide_payout
from payment_state.domain.payouts import (
    PayoutApplied,
    PayoutFact,
    PayoutState,
    PayoutStatus,
    PspPayoutStatus,
    apply_payout_fact,
)
from payment_state.domain.repairs import RepairOutcome, RepairRequest, request_of
from payment_state.testing import (
    StoreHarness,
    create_request,
    memory_harness,
    new_payment_state,
    postgres_harness,
    repair_body,
    requires_action_body,
    settlement_row,
)


@pytest.fixture(params=["memory", "postgres"])
def h(request: pytest.FixtureRequest, stack: Stack) -> Iterator[StoreHarness]:
    if request.param == "memory":
        yield memory_harness()
        return
    with postgres_harness(stack.pg_admin_url) as harness:
        yield harness


# -- payments and idempotency keys ---------------------------------------------------------------


def test_a_create_stores_the_payment_and_its_authorize_operation(h: StoreHarness) -> None:
    """Created: the payment reads back as decided (version 1, CREATED), with one PENDING authorize
    operation that no call has touched; scoped to its merchant."""
    state = new_payment_state()
    pid = state.payment.payment_id
    with h.transaction() as store:
        assert isinstance(store.create_with_key("k1", "d1", state, 201, {"id": pid}), Created)
    with h.transaction() as store:
        loaded = store.load_state(pid)
        assert store.load_state(pid, merchant_id="m2") is None
        assert store.load_state(pid, merchant_id="m1", for_update=True) == loaded
    assert loaded is not None and loaded.payment == state.payment
    (op,) = loaded.operations
    assert replace(op, created_at_ms=0) == replace(state.operations[0], created_at_ms=0)
    assert (op.status, op.attempts, op.call_in_flight) == (OperationStatus.PENDING, 0, False)


def test_a_create_key_replays_what_it_stored_and_a_taken_payment_id_creates_nothing(h: StoreHarness) -> None:
    """The same create key returns what it recorded (digest, payment, answer) and creates nothing; a
    new key for a payment id that exists is PaymentIdTaken, with no second payment."""
    state = new_payment_state()
    pid = state.payment.payment_id
    with h.transaction() as store:
        assert isinstance(store.create_with_key("k1", "d1", state, 201, {"id": pid}), Created)
    with h.transaction() as store:
        again = store.create_with_key("k1", "d2", new_payment_state(), 201, {"id": "other"})
        assert again == StoredResponse("d1", pid, 201, {"id": pid})
        assert isinstance(store.create_with_key("k2", "d1", state, 201, {"id": pid}), PaymentIdTaken)
        store.store_response("m1", "create", "k2", None, 409, {"error": "taken"})
    with h.transaction() as store:
        assert store.claim_idempotency_key("m1", "create", "k2", "d1", None) == StoredResponse(
            "d1", None, 409, {"error": "taken"}
        )
        assert store.load_state("other") is None
        loaded = store.load_state(pid)
    assert loaded is not None and len(loaded.operations) == 1


def test_an_idempotency_key_is_claimed_once_per_merchant_and_kind(h: StoreHarness) -> None:
    """A new key: None (execute). Claimed again: what it recorded (no answer yet inside the claiming
    transaction, the answer after). Another merchant or kind is another key; a forgotten key is new."""
    with h.transaction() as store:
        assert store.claim_idempotency_key("m1", "capture", "k", "d", "pay_1") is None
        assert store.claim_idempotency_key("m1", "capture", "k", "d2", "pay_2") == StoredResponse(
            "d", "pay_1", None, None
        )
        store.store_response("m1", "capture", "k", "pay_1", 202, {"ok": [1, 2]})
    with h.transaction() as store:
        assert store.claim_idempotency_key("m1", "capture", "k", "d", "pay_1") == StoredResponse(
            "d", "pay_1", 202, {"ok": [1, 2]}
        )
        assert store.claim_idempotency_key("m2", "capture", "k", "d", "pay_1") is None
        assert store.claim_idempotency_key("m1", "refund", "k", "d", "pay_1") is None
        store.forget_idempotency_key("m1", "refund", "k")
    with h.transaction() as store:
        assert store.claim_idempotency_key("m1", "refund", "k", "d", "pay_1") is None


def test_through_the_handlers_the_same_key_replays_and_another_body_conflicts(h: StoreHarness) -> None:
    """The application's idempotency rules on either store: the same key and body replay the first
    answer (create and capture), the same key with another body is 422 ``idempotency_key_reused``
    and changes nothing."""
    ctx = Context("simpsp")
    with h.transaction() as store:
        first = handle(store, ctx, "m1", "create-1", create_request())
    with h.transaction() as store:
        replay = handle(store, ctx, "m1", "create-1", create_request())
        reused = handle(store, ctx, "m1", "create-1", create_request(amount_minor=5))
    assert (first.status, replay.status, replay.replayed, replay.body) == (201, 201, True, first.body)
    assert (reused.status, reused.body["error"]["code"]) == (422, "idempotency_key_reused")
    pid = first.body["payment"]["payment_id"]
    with h.transaction() as store:
        created = store.load_state(pid)
    assert created is not None
    h.authorized(created)
    with h.transaction() as store:
        capture = handle(store, ctx, "m1", "cap-1", CaptureRequest(pid))
    with h.transaction() as store:
        again = handle(store, ctx, "m1", "cap-1", CaptureRequest(pid))
        other = handle(store, ctx, "m1", "cap-1", CaptureRequest(pid, 5_000, "EUR"))
        after = store.load_state(pid)
    assert (capture.status, again.replayed, again.body) == (202, True, capture.body)
    assert (other.status, other.body["error"]["code"]) == (422, "idempotency_key_reused")
    assert after is not None and [o.operation_type for o in after.operations] == ["authorize", "capture"]


def test_a_save_is_conditional_on_the_version_it_read(h: StoreHarness) -> None:
    """``after`` is written only over ``before``'s version: a second decision on the same (now
    stale) version is refused and overwrites nothing, neither the payment nor its operations (a
    changed one or a new one); a new operation is inserted, a changed one takes the domain's fields
    and keeps the executor's bookkeeping (attempts)."""
    created = h.create()
    (authorize,) = created.operations
    h.claim("w1")
    with h.transaction() as store:
        assert store.start_call(authorize.operation_id, "w1")
    authorized = h.authorized(created)
    failed_op = replace(authorize, status=OperationStatus.FAILED, failure_code="stale")
    stray = Operation("op_stray", created.payment.payment_id, OperationType.CAPTURE, 1, "EUR", "simpsp")
    stale = PaymentState(replace(created.payment, status=PaymentStatus.FAILED, version=2), (failed_op, stray))
    with h.transaction() as store:
        assert not store.save(created, stale)
        current = store.load_state(created.payment.payment_id)
    assert current == authorized and current.payment.version == 2
    (saved,) = authorized.operations
    assert (saved.status, saved.provider_reference, saved.attempts) == (
        OperationStatus.SUCCEEDED, authorized.payment.provider_payment_id, 1,
    )  # fmt: skip  # packed: a few items a line read better than one each
    capture = Operation("op_cap", created.payment.payment_id, OperationType.CAPTURE, 10_000, "EUR", "simpsp")
    later = PaymentState(
        replace(authorized.payment, active_operation_id="op_cap", version=3),
        (*authorized.operations, capture),
    )
    with h.transaction() as store:
        assert store.save(authorized, later)
    assert h.op(created, 1).operation_type == OperationType.CAPTURE


def test_a_provider_payment_id_belongs_to_one_payment(h: StoreHarness) -> None:
    """Two payments can never carry the same provider payment id: the second save is refused as
    the unique index refuses it (and its transaction rolls back)."""
    first, second = h.create(), h.create()
    h.authorized(first, "pi_same")
    with pytest.raises(Exception, match="payments_provider_payment_idx"):
        h.authorized(second, "pi_same")
    assert h.op(second).status == OperationStatus.PENDING


def test_lookups_find_the_payment_by_each_of_its_references(h: StoreHarness) -> None:
    """By the provider payment id, by our payment id, by an operation id, by a provider refund id
    (refunds only); anything else is None. Locked by the provider payment id ``unless_seen``: None
    once that provider event is recorded, the payment for any other event."""
    state = h.authorized(h.create(), "pi_look")
    pid = state.payment.payment_id
    refund = Operation(
        "op_rf", pid, OperationType.REFUND, 4_000, "EUR", "simpsp", refund_id="rf_1", reason="asked"
    )
    captured = replace(state.payment, status=PaymentStatus.CAPTURED, captured_minor=10_000, version=3)
    with h.transaction() as store:
        assert store.save(state, PaymentState(captured, state.operations))
        at_3 = store.load_state(pid)
        assert at_3 is not None
        pending = replace(at_3.payment, pending_refund_minor=4_000, version=4)
        assert store.save(at_3, PaymentState(pending, (*at_3.operations, refund)))
        at_4 = store.load_state(pid)
        assert at_4 is not None
        sent = at_4.with_operation(replace(at_4.operations[1], provider_reference="re_1"))
        assert store.save(at_4, PaymentState(replace(at_4.payment, version=5), sent.operations))
    with h.transaction() as store:
        assert store.payment_id_by_provider_payment("simpsp", "pi_look") == pid
        assert store.payment_id_by_provider_payment("other", "pi_look") is None
        locked = store.lock_by_provider_payment("simpsp", "pi_look")
        assert locked is not None and locked == store.load_state(pid)
        assert [op.operation_id for op in locked.operations] == [op.operation_id for op in at_4.operations]
        assert store.lock_by_provider_payment("other", "pi_look") is None
        assert store.lock_by_provider_payment("simpsp", "pi_none") is None
        # unless_seen: the same payment while the event is new; None once the event is recorded
        assert store.lock_by_provider_payment("simpsp", "pi_look", unless_seen="evt_look") == locked
        fact = {"source": "webhook", "fact_type": "intent", "payment_id": pid, "operation_id": None}
        assert store.record_fact(provider="simpsp", provider_event_id="evt_look", outcome="applied", **fact)
        assert store.lock_by_provider_payment("simpsp", "pi_look", unless_seen="evt_look") is None
        assert store.lock_by_provider_payment("simpsp", "pi_look", unless_seen="evt_other") == locked
        assert store.payment_id_if_exists(pid) == pid and store.payment_id_if_exists("pay_none") is None
        assert store.payment_id_by_operation("op_rf") == pid and store.payment_id_by_operation("x") is None
        assert store.payment_id_by_refund("simpsp", "re_1") == pid
        assert store.payment_id_by_refund("simpsp", "pi_look") is None  # the authorize's reference


# -- audit, chargebacks, cases -------------------------------------------------------------------


def test_a_webhook_is_kept_once_per_provider_event(h: StoreHarness) -> None:
    """A provider event id is recorded once (a second delivery is False) and is then seen, for its
    provider only; facts without an event id (answers, lookups) are all kept."""
    fact = {"source": "webhook", "fact_type": "intent", "payment_id": None, "operation_id": None}
    with h.transaction() as store:
        assert not store.webhook_seen("simpsp", "evt_1")
        assert store.record_fact(provider="simpsp", provider_event_id="evt_1", outcome="applied", **fact)
        assert not store.record_fact(
            provider="simpsp", provider_event_id="evt_1", outcome="duplicate", **fact
        )
    with h.transaction() as store:
        assert store.webhook_seen("simpsp", "evt_1") and not store.webhook_seen("other", "evt_1")
        answer = {**fact, "source": "response", "provider_event_id": None, "outcome": "stale"}
        assert store.record_fact(provider="simpsp", **answer) and store.record_fact(
            provider="simpsp", **answer
        )


def test_a_chargeback_is_recorded_once_per_dispute(h: StoreHarness) -> None:
    """One chargeback per provider dispute: the same dispute under another chargeback id, or the
    same chargeback id, records nothing more."""
    pid = h.create().payment.payment_id
    dispute = {
        "payment_id": pid,
        "provider": "simpsp",
        "amount_minor": 500,
        "currency": "EUR",
        "reason": None,
    }
    with h.transaction() as store:
        assert store.insert_chargeback(chargeback_id="cb_1", provider_dispute_id="dp_1", **dispute)
    with h.transaction() as store:
        assert not store.insert_chargeback(chargeback_id="cb_2", provider_dispute_id="dp_1", **dispute)
        assert not store.insert_chargeback(chargeback_id="cb_1", provider_dispute_id="dp_2", **dispute)
        assert store.insert_chargeback(chargeback_id="cb_3", provider_dispute_id="dp_3", **dispute)


def test_a_case_opens_once_per_payment_operation_and_kind(h: StoreHarness) -> None:
    """However often asked; no operation and an empty one are the same subject."""
    with h.transaction() as store:
        assert store.open_case("pay_1", None, "provider_conflict", "x" * 3000)
        assert not store.open_case("pay_1", "", "provider_conflict", "again")
        assert store.open_case("pay_1", "op_1", "provider_conflict", "another operation")
        assert store.open_case("pay_1", "op_1", "unknown_unresolved", "another kind")
    with h.transaction() as store:
        assert not store.open_case("pay_1", "op_1", "unknown_unresolved", "again")


# -- the executor's claims, leases and schedule -------------------------------------------------


def test_a_claim_takes_due_operations_earliest_first_up_to_its_limit(h: StoreHarness) -> None:
    """Never more than ``limit``, earliest next attempt first; a live lease is not taken again; a
    released operation is due after its delay, in the order the delays give."""
    ops = []
    for _ in range(3):
        ops.append(h.create().operations[0].operation_id)
        h.wait(2)
    assert h.claim("w1", limit=2) == ops[:2]
    assert h.claim("w2", limit=10) == ops[2:]
    assert h.claim("w3") == []
    with h.transaction() as store:
        store.release(ops[0], "w1", 300)
        store.release(ops[1], "w1", 100)
        store.release(ops[2], "w2", 200)
    assert h.claim("w3") == []
    h.wait(400)
    assert h.claim("w3", limit=2) == [ops[1], ops[2]]
    assert h.claim("w4", limit=2) == [ops[0]]


def test_two_claimers_racing_never_both_win(h: StoreHarness) -> None:
    """Two workers claim at the same moment: every due operation goes to exactly one of them."""
    ops = {h.create().operations[0].operation_id for _ in range(12)}
    start = threading.Barrier(2)
    won: dict[str, list[str]] = {}

    def claim(worker: str) -> None:
        start.wait(5)
        won[worker] = h.claim(worker, limit=12)

    threads = [threading.Thread(target=claim, args=(w,)) for w in ("w1", "w2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not set(won["w1"]) & set(won["w2"])
    assert set(won["w1"]) | set(won["w2"]) == ops


def test_an_expired_lease_is_claimable_again_and_its_old_holder_loses_the_operation(h: StoreHarness) -> None:
    """After the lease another worker takes the operation; the old holder can then neither start a
    call, count a lookup nor release it."""
    (op_id,) = [op.operation_id for op in h.create().operations]
    assert h.claim("w1", lease_ms=50) == [op_id]
    h.wait(120)
    assert h.claim("w2") == [op_id]
    with h.transaction() as store:
        assert not store.start_call(op_id, "w1") and not store.count_lookup(op_id, "w1")
        store.release(op_id, "w1", 0)
    assert h.claim("w3") == []  # still w2's
    with h.transaction() as store:
        assert store.start_call(op_id, "w2")


def test_the_bookkeeping_counts_calls_and_lookups_and_marks_unknown(h: StoreHarness) -> None:
    """A started call is in flight and counted; UNKNOWN clears the marker (only while open); a
    lookup is counted; a release ends the claim (due again at once with no delay); the metrics
    count open operations by status."""
    state = h.create()
    op_id = state.operations[0].operation_id
    h.claim("w1")
    with h.transaction() as store:
        assert store.start_call(op_id, "w1")
    assert (h.op(state).attempts, h.op(state).call_in_flight) == (1, True)
    with h.transaction() as store:
        store.mark_unknown(op_id, "timeout " * 40)
        assert store.count_lookup(op_id, "w1")
        store.release(op_id, "w1", 0)
        stats = store.open_operations()
    op = h.op(state)
    assert (op.status, op.unknown_reason, op.attempts, op.call_in_flight) == (
        OperationStatus.UNKNOWN, ("timeout " * 40)[:200], 2, False,
    )  # fmt: skip  # packed: a few items a line read better than one each
    assert (stats.pending, stats.unknown) == (0, 1) and stats.oldest_unknown_s >= 0
    assert h.claim("w2") == [op_id]
    resolved = h.authorized(h.create())
    with h.transaction() as store:
        store.mark_unknown(resolved.operations[0].operation_id, "late")
        assert not store.start_call(resolved.operations[0].operation_id, "w2")
    assert h.op(resolved).status == OperationStatus.SUCCEEDED


def test_a_claimed_batch_is_read_and_its_calls_started_together(h: StoreHarness) -> None:
    """``load_states`` reads several payments as ``load_state`` reads each (a missing one is absent,
    a repeated id read once); ``start_calls`` marks in flight and counts only the operations still
    open and claimed by the caller, each once, and says which."""
    mine, theirs, resolved = h.create(), h.create(), h.authorized(h.create())
    mine_id, theirs_id = mine.payment.payment_id, theirs.payment.payment_id
    with h.transaction() as store:
        states = store.load_states([mine_id, theirs_id, mine_id, "pay_none"])
        assert states == {mine_id: store.load_state(mine_id), theirs_id: store.load_state(theirs_id)}
        assert store.load_states([]) == {}
    h.claim("w1")
    op_mine, op_theirs = mine.operations[0].operation_id, theirs.operations[0].operation_id
    op_resolved = resolved.operations[0].operation_id
    with h.transaction() as store:
        store.release(op_theirs, "w1", 0)
    h.claim("w2")  # takes theirs only: mine is still w1's
    with h.transaction() as store:
        started = store.start_calls([op_mine, op_mine, op_theirs, op_resolved, "op_none"], "w1")
        assert started == {op_mine}
        assert store.start_calls([], "w1") == set()
    assert (h.op(mine).attempts, h.op(mine).call_in_flight) == (1, True)
    assert (h.op(theirs).attempts, h.op(theirs).call_in_flight) == (0, False)


def test_old_keys_are_pruned_in_bounded_batches(h: StoreHarness) -> None:
    """Keys older than the retention go, at most ``batch_max`` per call; newer keys and the
    payments stay."""
    old = [h.create() for _ in range(3)]
    h.wait(1_100)
    new = h.create()
    with h.transaction() as store:
        assert store.prune_idempotency_keys(1, 2) == 2
    with h.transaction() as store:
        assert store.prune_idempotency_keys(1, 2) == 1
        assert store.prune_idempotency_keys(1, 2) == 0
        key = f"k-{new.payment.payment_id}"
        assert store.claim_idempotency_key("m1", "create", key, "d", None) is not None
        assert all(store.load_state(s.payment.payment_id) is not None for s in old)


# -- repair requests ----------------------------------------------------------------------------


def _repair(payment_id: str, event_id: str | None = None, **overrides: object) -> RepairRequest:
    body = repair_body(settlement_row(payment_id, "pi_1", 10_000), **overrides)
    request = request_of(payment_id, event_id or str(uuid.uuid4()), body)
    assert request is not None
    return request


def test_a_repair_is_recorded_once_per_repair_id_and_decided_once_with_one_outcome(h: StoreHarness) -> None:
    """The first delivery of a repair id is recorded (requested); another event id of the same
    repair records nothing and the first stands; deciding it writes one RepairOutcome, keyed by the
    payment; a second decision, whoever asks, is refused and writes nothing."""
    request = _repair("pay_r1")
    with h.transaction() as store:
        assert store.record_repair(request)
        assert not store.record_repair(replace(request, command_event_id=str(uuid.uuid4())))
    with h.transaction() as store:
        stored = store.load_repair(request.repair_id)
        assert stored is not None and (stored.status, stored.attempts, stored.claimed_by) == (
            "requested",
            0,
            None,
        )
        assert stored.request == request
        assert store.load_repair(request.repair_id + 10_000) is None
    with h.transaction() as store:
        assert store.finish_repair(request.repair_id, RepairOutcome("refused", "no"), None)
    with h.transaction() as store:
        assert not store.finish_repair(request.repair_id, RepairOutcome("executed", "again"), None)
        assert not store.record_repair(request)
        decided = store.load_repair(request.repair_id)
        assert decided is not None and decided.status == "refused"
    assert h.published() == [("pay_r1", "RepairOutcome")]


def test_a_repair_claim_takes_due_requested_repairs_earliest_first_under_a_lease(h: StoreHarness) -> None:
    """Requested repairs are claimed earliest first up to the limit, never by two workers at once;
    lookups are counted and releases made only under the claim; a released repair is due again
    after its delay; a decided one is never claimed; the claimer decides it, no one else does."""
    first, second, third = (_repair(f"pay_c{i}") for i in range(3))
    for request in (first, second, third):
        with h.transaction() as store:
            assert store.record_repair(request)
        h.wait(5)
    with h.transaction() as store:
        assert store.claim_repairs("w1", 2, 60_000) == [first.repair_id, second.repair_id]
    with h.transaction() as store:
        assert store.claim_repairs("w2", 10, 60_000) == [third.repair_id]
        assert store.count_repair_lookup(first.repair_id, "w1") == 1
        assert store.count_repair_lookup(first.repair_id, "w1") == 2
        assert store.count_repair_lookup(first.repair_id, "w2") is None
        store.release_repair(first.repair_id, "w2", 0)  # not w2's: nothing
    with h.transaction() as store:
        assert store.claim_repairs("w3", 10, 60_000) == []
        store.release_repair(first.repair_id, "w1", 60_000)
        store.release_repair(second.repair_id, "w1", 0)
    with h.transaction() as store:
        assert store.claim_repairs("w3", 10, 60_000) == [second.repair_id]  # first waits its delay
        assert not store.finish_repair(third.repair_id, RepairOutcome("executed", "x"), "w3")
        assert store.finish_repair(third.repair_id, RepairOutcome("unknown", "no answer"), "w2")
        assert store.count_repair_lookup(third.repair_id, "w2") is None  # decided
        stored = store.load_repair(first.repair_id, for_update=True)
        assert stored is not None and (stored.attempts, stored.claimed_by) == (2, None)
    assert h.published() == [(third.payment_id, "RepairOutcome")]


def test_an_expired_repair_lease_is_claimable_again_and_its_old_holder_loses_it(h: StoreHarness) -> None:
    """After the lease another worker takes the repair; the old holder can then neither count a
    lookup, release nor decide it."""
    request = _repair("pay_lease")
    with h.transaction() as store:
        store.record_repair(request)
    with h.transaction() as store:
        assert store.claim_repairs("w1", 10, 50) == [request.repair_id]
    h.wait(120)
    with h.transaction() as store:
        assert store.claim_repairs("w2", 10, 60_000) == [request.repair_id]
    with h.transaction() as store:
        assert store.count_repair_lookup(request.repair_id, "w1") is None
        store.release_repair(request.repair_id, "w1", 0)
        assert not store.finish_repair(request.repair_id, RepairOutcome("executed", "late"), "w1")
        assert store.claim_repairs("w3", 10, 60_000) == []  # still w2's
    assert h.published() == []


def test_a_repair_decided_in_a_transaction_that_raises_is_still_requested(h: StoreHarness) -> None:
    """Recording or deciding a repair commits with its transaction or not at all: after a rollback
    the repair is requested again and its outcome was never written."""
    request = _repair("pay_rb")
    with pytest.raises(RuntimeError), h.transaction() as store:
        store.record_repair(request)
        raise RuntimeError("the batch failed")
    with h.transaction() as store:
        assert store.load_repair(request.repair_id) is None
        assert store.record_repair(request)
    with pytest.raises(RuntimeError), h.transaction() as store:
        assert store.finish_repair(request.repair_id, RepairOutcome("executed", "x"), None)
        raise RuntimeError("the worker died")
    with h.transaction() as store:
        stored = store.load_repair(request.repair_id)
        assert stored is not None and stored.status == "requested"
    assert h.published() == []


# -- transactions ---------------------------------------------------------------------------------


def test_events_and_changes_commit_with_their_transaction_or_not_at_all(h: StoreHarness) -> None:
    """Published events appear once their transaction commits, in order; a transaction that raises
    leaves no payment, key, case, fact or event behind."""
    pid = h.create().payment.payment_id
    with h.transaction() as store:
        store.publish(pid, [OutEvent("PaymentRequiresAction", requires_action_body(pid))])
        store.publish(pid, [])
    failed = new_payment_state()
    with pytest.raises(RuntimeError), h.transaction() as store:
        store.create_with_key("k-rolled-back", "d", failed, 201, {})
        store.open_case(pid, None, "provider_conflict", "x")
        store.record_fact(
            provider="simpsp", provider_event_id="evt_rb", source="webhook", fact_type="intent",
            payment_id=pid, operation_id=None, outcome="applied",
        )  # fmt: skip  # packed: a few items a line read better than one each
        store.publish(pid, [OutEvent("PaymentRequiresAction", requires_action_body(pid))])
        raise RuntimeError("the handler failed")
    assert h.published() == [(pid, "PaymentRequiresAction")]
    with h.transaction() as store:
        assert store.load_state(failed.payment.payment_id) is None
        assert store.claim_idempotency_key("m1", "create", "k-rolled-back", "d", None) is None
        assert store.open_case(pid, None, "provider_conflict", "x")
        assert not store.webhook_seen("simpsp", "evt_rb")


# -- payouts ----------------------------------------------------------------------------------------


def _payout_state(withdrawal_id: str | None = None) -> PayoutState:
    wd = withdrawal_id or "wd_" + uuid.uuid4().hex
    request = CreatePayoutRequest(wd, "simpsp", 2_500, "EUR", "pm_card_visa", "pay_1", 1001, 7)
    return decide_payout(
        request, merchant_id="m1", operation_id=f"op_{uuid.uuid4().hex[:12]}", now_ms=1_800_000_000_000
    )


def test_a_payout_is_created_once_per_withdrawal_and_read_by_its_merchant_only(h: StoreHarness) -> None:
    """create_payout inserts the payout and its operation once; a second create for the same
    withdrawal (whatever it asks) inserts nothing; another merchant does not see it."""
    state = _payout_state()
    wd = state.payout.withdrawal_id
    with h.transaction() as store:
        assert store.create_payout(state)
        assert not store.create_payout(_payout_state(wd))
    with h.transaction() as store:
        loaded = store.load_payout(wd, merchant_id="m1")
        assert store.load_payout(wd, merchant_id="m2") is None
    assert loaded is not None
    assert loaded.payout == state.payout and loaded.operation.operation_id == state.operation.operation_id
    assert (loaded.operation.status, loaded.operation.attempts) == (OperationStatus.PENDING, 0)


def test_a_payout_save_is_conditional_on_its_version_and_its_psp_id_is_unique(h: StoreHarness) -> None:
    """save_payout writes only at the version read (a second writer on the same version loses) and
    finds the payout by its provider payout id afterwards; its operation's outcome is saved with it."""
    state = _payout_state()
    with h.transaction() as store:
        store.create_payout(state)
        before = store.load_payout(state.payout.withdrawal_id)
    assert before is not None
    paid = PayoutFact(
        "po_" + uuid.uuid4().hex, PspPayoutStatus.PAID, 2_500, "EUR", state.payout.withdrawal_id
    )
    result = apply_payout_fact(before, paid)
    assert isinstance(result, PayoutApplied)
    with h.transaction() as store:
        assert store.save_payout(before, result.state)
        assert not store.save_payout(before, result.state)
        ppid = result.state.payout.provider_payout_id
        assert ppid is not None
        assert store.withdrawal_id_by_provider_payout("simpsp", ppid) == state.payout.withdrawal_id
    with h.transaction() as store:
        after = store.load_payout(state.payout.withdrawal_id)
    assert after is not None
    assert (after.payout.status, after.operation.status) == (PayoutStatus.PAID, OperationStatus.SUCCEEDED)


def test_payout_claims_follow_the_operation_rules(h: StoreHarness) -> None:
    """A payout operation is claimed by one worker while its lease runs; only the holder starts a
    call; UNKNOWN moves only an open operation; after the lease expires another worker takes it and
    the old holder's release changes nothing."""
    state = _payout_state()
    op_id = state.operation.operation_id
    with h.transaction() as store:
        store.create_payout(state)
    with h.transaction() as store:
        assert [o.operation_id for o in store.claim_due_payouts("w1", 100, 300)] == [op_id]
        assert op_id not in [o.operation_id for o in store.claim_due_payouts("w2", 100, 300)]
        assert not store.start_payout_call(op_id, "w2")
        assert store.start_payout_call(op_id, "w1")
        store.mark_payout_unknown(op_id, "timeout")
    h.wait(400)
    with h.transaction() as store:
        assert [o.operation_id for o in store.claim_due_payouts("w2", 100, 300)] == [op_id]
        store.release_payout(op_id, "w1", 60_000)  # the old holder: nothing
        assert store.count_payout_lookup(op_id, "w2") and not store.count_payout_lookup(op_id, "w1")
        loaded = store.load_payout(state.payout.withdrawal_id)
    assert loaded is not None
    assert (loaded.operation.status, loaded.operation.attempts, loaded.operation.unknown_reason) == (
        OperationStatus.UNKNOWN, 2, "timeout")  # fmt: skip  # continuation aligned under its bracket


def test_open_payout_operations_count_pending_and_unknown(h: StoreHarness) -> None:
    """The payout metrics' figures: open payout operations by status and the oldest UNKNOWN's age."""
    with h.transaction() as store:
        before = store.open_payout_operations()
    first, second = _payout_state(), _payout_state()
    with h.transaction() as store:
        store.create_payout(first)
        store.create_payout(second)
        store.mark_payout_unknown(second.operation.operation_id, "timeout")
    h.wait(200)
    with h.transaction() as store:
        after = store.open_payout_operations()
    assert (after.pending - before.pending, after.unknown - before.unknown) == (1, 1)
    assert after.oldest_unknown_s >= 0.1


def test_on_postgresql_a_save_that_learns_the_psp_id_files_the_trace_under_it_too(stack: Stack) -> None:
    """PostgreSQL only (the twin keeps no traces): the save that first records the PSP's payment id
    also stores the payment's trace under that id (its webhooks are keyed by it), in the save's own
    statement; a refused (stale) save files nothing."""
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with postgres_harness(stack.pg_admin_url) as h:
        created = h.create()
        pid = created.payment.payment_id
        with h.transaction() as store:
            tracing.remember(store._conn, {pid: traceparent})  # the store's own connection
        stale = PaymentState(
            replace(created.payment, provider_payment_id="pi_stale", version=2), created.operations
        )
        h.authorized(created, "pi_traced")
        with h.transaction() as store:
            assert not store.save(created, stale)
            traces = tracing.recall(store._conn, [pid, "pi_traced", "pi_stale"])
    assert traces == {pid: traceparent, "pi_traced": traceparent}


def test_on_postgresql_a_locked_payment_never_blocks_its_operations_bookkeeping(stack: Stack) -> None:
    """PostgreSQL only: a payment locked for a fact (a webhook's ``lock_by_provider_payment``, an
    answer's ``load_state(for_update=True)``) takes a lock that still lets the worker mark the
    payment's operation in flight in the claim's own transaction. That second update of a row the
    transaction already changed makes PostgreSQL check the foreign key (``FOR KEY SHARE`` on the
    payment), which a ``FOR UPDATE`` would block; with several payments per claim and per consumer
    batch, locked in different orders, that was a deadlock (17 of 44 in one day's bench-e2e runs).
    ``FOR NO KEY UPDATE`` still serializes the payment's writers with each other."""
    with postgres_harness(stack.pg_admin_url) as h:
        state = h.authorized(h.create(), "pi_keyshare")
        pid = state.payment.payment_id
        capture = Operation("op_ks", pid, OperationType.CAPTURE, 10_000, "EUR", "simpsp")
        later = PaymentState(
            replace(state.payment, version=state.payment.version + 1), (*state.operations, capture)
        )
        with h.transaction() as store:
            assert store.save(state, later)
        with h.transaction() as worker:
            (claimed,) = worker.claim_due("w1", 10, 60_000)
            with h.transaction() as webhook:
                assert webhook.lock_by_provider_payment("simpsp", "pi_keyshare") is not None
                worker._conn.execute("SET LOCAL lock_timeout = '3s'")
                assert worker.start_calls([claimed.operation_id], "w1") == {claimed.operation_id}
                with h.transaction() as answer:
                    answer._conn.execute("SET LOCAL lock_timeout = '300ms'")
                    with pytest.raises(Exception, match="lock timeout"):
                        answer.load_state(pid, for_update=True)  # writers still wait for each other
