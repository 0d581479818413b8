"""The operation executor: claims open operations and drives each one to an outcome at the PSP.

Per claimed operation (``domain.recovery`` decides, this module does):
- never called: commit ``call_in_flight``, call the provider with the operation id as idempotency
  key, apply the answer through ``apply_provider_fact`` (the same path as webhooks), release;
- no outcome (timeout, 5xx, lost answer): the operation becomes UNKNOWN and is looked up later with
  capped exponential backoff; after the limit a case is opened for a person;
- UNKNOWN or waiting on someone (3-D Secure, a pending refund): look it up (lookups never move
  money); only if the provider proves it has no outcome, and only while it still remembers the
  idempotency key, is the *same* call sent again. Never a new operation, never another provider.
Every provider call runs outside a database transaction; every state change is one transaction
(``Transactions``: a store bound to a new transaction per step).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import assert_never

from backbone import tracing
from backbone.invariants import invariant
from backbone.lane import Alone, Lane, LaneConfig, Send
from backbone.logs import get_logger
from backbone.postgres import is_infrastructure_error

from payment_state.application import metrics
from payment_state.application.context import Context
from payment_state.application.operation_calls import Started, Work, build_call, provider_id_known
from payment_state.application.ports import (
    Absent,
    Applied,
    CallResult,
    Conflict,
    Found,
    Lookup,
    NoAnswer,
    PaymentStore,
    ProviderCall,
    Psp,
    Refused,
    Transactions,
)
from payment_state.application.provider_facts import apply_provider_fact, open_case
from payment_state.application.providers import Psps, as_psps
from payment_state.domain.facts import IntentFact
from payment_state.domain.model import Operation, OperationType, PaymentState
from payment_state.domain.recovery import (
    Call,
    LookupAnswer,
    RecoveryPolicy,
    Reschedule,
    Resend,
    Skip,
    after_lookup,
    after_unknown_call,
    intent_shows_not_done,
    plan,
    replay_before_lookup,
)
from payment_state.domain.recovery import (
    Lookup as LookupStep,
)

log = get_logger(__name__)


@dataclass(frozen=True)
class ExecutorConfig:
    worker_id: str
    batch_size_max: int
    lease_ms: int
    concurrency: int
    policy: RecoveryPolicy

    def __post_init__(self) -> None:
        invariant(0 < self.batch_size_max <= 1000, "batch_size_max in 1..1000")
        invariant(0 < self.concurrency <= 64, "concurrency in 1..64")
        invariant(self.lease_ms > 0, "lease_ms > 0")


class OperationExecutor:
    """Claims due operations in batches and sends their calls on the backbone's lane, a bounded
    pool of ``concurrency`` calls; the answers are written in groups."""

    name = "operation"

    def __init__(
        self, transaction: Transactions, psp: Psp | Psps, ctx: Context, config: ExecutorConfig
    ) -> None:
        self._transaction = transaction
        self._psps = as_psps(psp)
        self._ctx = ctx
        self._c = config
        self._lane = Lane(self, LaneConfig(config.batch_size_max, config.concurrency))

    def close(self) -> None:
        self._lane.close()

    def run_once(self) -> int:
        """Claim one batch and process it; returns how many operations were claimed."""
        return self._lane.run_once()

    def refresh_metrics(self) -> None:
        with self._transaction() as store:
            open_operations = store.open_operations()
        metrics.OPEN_OPERATIONS.labels("PENDING").set(open_operations.pending)
        metrics.OPEN_OPERATIONS.labels("UNKNOWN").set(open_operations.unknown)
        metrics.OLDEST_UNKNOWN_SECONDS.set(open_operations.oldest_unknown_s)

    # -- the lane's strategy -----------------------------------------------------------------------

    def claim(self, limit: int) -> Sequence[Work]:
        """An operation that is to be sent now (``plan`` says ``Call``: never sent, nothing in flight)
        is read and marked in flight in the claim's own transaction, so that its provider call
        follows the commit at once: one transaction for the batch instead of two more per call.
        The mark is committed before any call is made, as ``_call`` does on its own."""
        with self._transaction() as store:
            claimed = store.claim_due(self._c.worker_id, limit, self._c.lease_ms)
            return self._prepare(store, claimed) if claimed else []

    def plan(self, claimed: Sequence[Work]) -> Sequence[Send[Work] | Alone[Work]]:
        return [Send(work) if isinstance(work, Started) else Alone(work) for work in claimed]

    def ready(self, work: Work, waited_s: float) -> Send[Work]:
        # Marked in flight under this worker's claim: if the lease ran out meanwhile, whoever
        # takes the operation next finds the call in flight and looks it up before any resend,
        # and a resend carries the same idempotency key.
        return Send(work)

    def send(self, work: Work) -> CallResult:
        """The provider call itself, its call already marked in flight and committed."""
        invariant(isinstance(work, Started), "only a call marked in flight is sent")
        assert isinstance(work, Started)
        psp = self._psps.get(work.op.provider)
        invariant(psp is not None, f"a call marked in flight for an unconfigured provider {work.op.provider}")
        assert psp is not None
        result = psp.execute(work.call)
        metrics.PROVIDER_CALLS.labels(f"call_{work.op.operation_type}", type(result).__name__).inc()
        return result

    def traced(self, work: Work) -> AbstractContextManager[object]:
        # In the payment's stored trace: the PSP call's span is the deposit's (ADR 0012).
        op = work.op if isinstance(work, Started) else work
        return tracing.for_payment(op.payment_id, f"payment_state.execute {op.operation_type.value}")

    def alone(self, work: Work) -> None:
        op = work.op if isinstance(work, Started) else work
        self.process(op.operation_id, op.payment_id)

    def transaction(self) -> AbstractContextManager[PaymentStore]:
        return self._transaction()

    def record(self, store: PaymentStore, work: Work, result: CallResult) -> None:
        assert isinstance(work, Started)  # only sends are answered
        self._record_call_result(store, work.state.payment.payment_id, work.op, result)

    def label(self, work: Work) -> dict[str, object]:
        op = work.op if isinstance(work, Started) else work
        return {"operation_id": op.operation_id, "payment_id": op.payment_id}

    # -- one operation ---------------------------------------------------------------------------

    def _prepare(self, store: PaymentStore, claimed: list[Operation]) -> list[Work]:
        """In the claim's transaction: each operation to be sent now, with its payment read and the
        call marked in flight (``Started``); any other stays as claimed, for ``process``. The batch's
        payments are read in one statement and its calls marked in another. A defect in one operation
        (its call cannot be built) leaves it to ``process`` too, where it is logged and its claim
        expires; it never rolls back the batch's claim."""
        to_call = [
            op for op in claimed if isinstance(plan(op), Call) and self._psps.get(op.provider) is not None
        ]
        states = store.load_states([op.payment_id for op in to_call]) if to_call else {}
        ready: dict[str, Started] = {}
        for claimed_op in to_call:
            started = self._started(states.get(claimed_op.payment_id), claimed_op)
            if started is not None:
                ready[claimed_op.operation_id] = started
        marked = store.start_calls(list(ready), self._c.worker_id) if ready else set()
        return [ready[op.operation_id] if op.operation_id in marked else op for op in claimed]

    @staticmethod
    def _started(state: PaymentState | None, claimed: Operation) -> Started | None:
        """The call ``claimed`` stands for, if it is still to be sent now; None otherwise."""
        try:
            op = None if state is None else state.operation(claimed.operation_id)
            call = None if state is None or op is None else build_call(state, op)
        except Exception as exc:
            if is_infrastructure_error(exc):
                raise
            return None
        if state is None or op is None or call is None or not isinstance(plan(op), Call):
            return None
        return Started(state, op, call)

    def process(self, operation_id: str, payment_id: str) -> None:
        state, op = self._load(payment_id, operation_id)
        step = plan(op)
        match step:
            case Skip():
                self._release(operation_id, 0)
            case Call():
                self._call(state, op)
            case LookupStep(lost_call=lost_call):
                if lost_call:
                    with self._transaction() as store:
                        store.mark_unknown(operation_id, "worker_lost_during_call")
                    log.warning("executor.lost_call", operation_id=operation_id, payment_id=payment_id)
                    state, op = self._load(payment_id, operation_id)
                self._lookup(state, op)
            case _:
                assert_never(step)

    def _psp(self, op: Operation) -> Psp | None:
        """The adapter of the operation's own provider; None (logged, retried later) when this
        process is not configured for it: never another provider."""
        psp = self._psps.get(op.provider)
        if psp is None:
            log.error("executor.provider_not_configured", operation_id=op.operation_id, provider=op.provider)
            self._release(op.operation_id, self._c.policy.backoff_max_ms)
        return psp

    def _call(self, state: PaymentState, op: Operation) -> None:
        psp = self._psp(op)
        if psp is None:
            return
        call = build_call(state, op)
        with self._transaction() as store:
            if not store.start_call(op.operation_id, self._c.worker_id):
                return  # the claim expired and someone else has the operation now
        self._send(state, op, call)

    def _send(self, state: PaymentState, op: Operation, call: ProviderCall) -> None:
        """The provider call and its answer's own transaction (a call decided after a lookup)."""
        result = self.send(Started(state, op, call))
        with self._transaction() as store:
            self._record_call_result(store, state.payment.payment_id, op, result)

    def _record_call_result(
        self, store: PaymentStore, payment_id: str, op: Operation, result: CallResult
    ) -> None:
        match result:
            case Applied(fact=fact) | Refused(fact=fact):
                outcome = apply_provider_fact(
                    store,
                    self._ctx.for_provider(op.provider),
                    fact,
                    source="response",
                    operation_id=op.operation_id,
                    payment_id=payment_id,
                )
                delay_ms = self._delay_after_answer(store, payment_id, op.operation_id, outcome.state)
            case NoAnswer(reason=reason):
                store.mark_unknown(op.operation_id, reason)
                log.warning("executor.outcome_unknown", operation_id=op.operation_id, reason=reason)
                delay_ms = self._reschedule_unknown(store, payment_id, op.operation_id)
            case _:
                assert_never(result)
        store.release(op.operation_id, self._c.worker_id, delay_ms)

    def _lookup(self, state: PaymentState, op: Operation) -> None:
        psp = self._psp(op)
        if psp is None:
            return
        if replay_before_lookup(
            op,
            provider_id_known=provider_id_known(state, op),
            provider_replays=psp.replays_lost_creates,
            now_ms=self._ctx.now_ms(),
            policy=self._c.policy,
        ):
            log.info("executor.replay_lost_create", operation_id=op.operation_id, provider=op.provider)
            self._call(state, op)
            return
        with self._transaction() as store:
            if not store.count_lookup(op.operation_id, self._c.worker_id):
                return
        lookup = self._find(psp, state, op)
        metrics.PROVIDER_CALLS.labels(f"lookup_{op.operation_type}", type(lookup).__name__).inc()
        payment_id = state.payment.payment_id
        with self._transaction() as store:
            answer = self._apply_lookup(store, payment_id, op, lookup)
            if answer is None:
                store.release(op.operation_id, self._c.worker_id, 0)
                return
            current = self._operation(store, payment_id, op.operation_id)
            decision = after_lookup(current, answer, self._ctx.now_ms(), self._c.policy)
            if isinstance(decision, Reschedule):
                self._open_case(store, payment_id, current, decision)
                store.release(op.operation_id, self._c.worker_id, decision.delay_ms)
                return
        invariant(isinstance(decision, Resend), "after_lookup returns Resend or Reschedule")
        log.info("executor.resend_same_key", operation_id=op.operation_id, answer=answer)
        fresh_state, fresh_op = self._load(payment_id, op.operation_id)
        self._call(fresh_state, fresh_op)

    def _find(self, psp: Psp, state: PaymentState, op: Operation) -> Lookup:
        if op.operation_type == OperationType.REFUND:
            return psp.find_refund(op.operation_id, op.provider_reference, state.payment.provider_payment_id)
        return psp.find_payment(state.payment.payment_id, state.payment.provider_payment_id)

    def _apply_lookup(
        self, store: PaymentStore, payment_id: str, op: Operation, lookup: Lookup
    ) -> LookupAnswer | None:
        """Apply what a lookup found; None when the operation is resolved now."""
        match lookup:
            case Found(fact=fact):
                outcome = apply_provider_fact(
                    store,
                    self._ctx.for_provider(op.provider),
                    fact,
                    source="lookup",
                    operation_id=op.operation_id,
                    payment_id=payment_id,
                )
                current = self._operation(store, payment_id, op.operation_id, outcome.state)
                if current.is_terminal:
                    return None
                not_done = isinstance(fact, IntentFact) and intent_shows_not_done(current, fact)
                return "found_not_done" if not_done else "found_pending"
            case Absent():
                return "absent"
            case Conflict():
                return "ambiguous"
            case NoAnswer():
                return "no_answer"
            case _:
                assert_never(lookup)

    # -- helpers -----------------------------------------------------------------------------------

    def _delay_after_answer(
        self, store: PaymentStore, payment_id: str, operation_id: str, state: PaymentState | None
    ) -> int:
        current = self._operation(store, payment_id, operation_id, state)
        return 0 if current.is_terminal else self._c.policy.recheck_interval_ms

    def _reschedule_unknown(self, store: PaymentStore, payment_id: str, operation_id: str) -> int:
        current = self._operation(store, payment_id, operation_id)
        decision = after_unknown_call(current, self._c.policy)
        self._open_case(store, payment_id, current, decision)
        return decision.delay_ms

    def _open_case(self, store: PaymentStore, payment_id: str, op: Operation, decision: Reschedule) -> None:
        if decision.case is None:
            return
        why = op.unknown_reason or "no answer"
        detail = f"{op.operation_type} {op.status} after {op.attempts} attempts ({why})"
        state = store.load_state(payment_id)
        invariant(state is not None, f"operation {op.operation_id} of a missing payment {payment_id}")
        assert state is not None
        open_case(store, state, op, decision.case, detail)

    def _operation(
        self, store: PaymentStore, payment_id: str, operation_id: str, known: PaymentState | None = None
    ) -> Operation:
        """The operation as this transaction sees it: from ``known`` (the state an apply left, in
        this transaction, under its lock) when it is this payment's, else read again."""
        state = known if known is not None and known.payment.payment_id == payment_id else None
        state = state or store.load_state(payment_id)
        assert state is not None
        op = state.operation(operation_id)
        invariant(op is not None, f"operation {operation_id} vanished")
        assert op is not None
        return op

    def _load(self, payment_id: str, operation_id: str) -> tuple[PaymentState, Operation]:
        with self._transaction() as store:
            state = store.load_state(payment_id)
        invariant(state is not None, f"claimed operation of a missing payment {payment_id}")
        assert state is not None
        op = state.operation(operation_id)
        invariant(op is not None, f"claimed operation {operation_id} not found")
        assert op is not None
        return state, op

    def _release(self, operation_id: str, delay_ms: int) -> None:
        with self._transaction() as store:
            store.release(operation_id, self._c.worker_id, delay_ms)
