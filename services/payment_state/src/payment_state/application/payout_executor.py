"""The payout executor: claims payout operations and drives each to an outcome at the PSP, with
the rules of the operation executor (``application/executor.py``, ``domain/recovery.py``):

- never called: commit ``call_in_flight``, ``create_payout`` with the operation id as the PSP's
  idempotency key and the withdrawal id as our reference, apply the answer through
  ``apply_payout_provider_fact`` (the path of webhooks and lookups too), release. ``pending`` →
  SUBMITTED (rechecked after ``recheck_interval_ms``, or a webhook comes first); ``paid`` → PAID;
  ``failed`` or a definite refusal → FAILED;
- no answer (timeout, 5xx, lost answer), a worker dead mid-call: UNKNOWN, and only a lookup (by the
  PSP's payout id when known, else by our reference) resolves it: ``Found`` applies its status; a
  complete ``Absent`` allows the *same* create again (same key: the PSP cannot make a second payout),
  only inside the PSP's idempotency window; ``Conflict`` (two payouts under our reference) → a
  person; no answer stays UNKNOWN, and after ``attempts_before_case`` a person gets it
  (``PaymentNeedsAttention``, once) while the lookups go on. Never ``PayoutFailed`` without proof.
Every PSP call runs outside a database transaction; every state change is one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Final, assert_never

from backbone import failpoints
from backbone.invariants import invariant
from backbone.lane import EachAlone, Lane, LaneConfig
from backbone.logs import get_logger

from payment_state.application import metrics
from payment_state.application.context import Context
from payment_state.application.executor import ExecutorConfig
from payment_state.application.payouts import apply_payout_provider_fact, open_payout_case
from payment_state.application.ports import (
    Absent,
    Applied,
    Conflict,
    Found,
    NoAnswer,
    PaymentStore,
    PayoutCall,
    PayoutCallResult,
    PayoutLookup,
    Psp,
    Refused,
    Transactions,
)
from payment_state.application.providers import Psps, as_psps
from payment_state.domain.payouts import PayoutOperation, PayoutState
from payment_state.domain.recovery import (
    Call,
    LookupAnswer,
    Reschedule,
    Resend,
    Skip,
    after_lookup,
    after_unknown_call,
    plan,
    replay_before_lookup,
)
from payment_state.domain.recovery import Lookup as LookupStep

# Crash tests arm these (``BACKBONE_FAILPOINTS``): the call marked in flight and committed, nothing
# sent yet; the PSP answered, nothing recorded yet.
AFTER_CLAIM_FAILPOINT: Final = "payment_state.payout_after_claim"
AFTER_CALL_FAILPOINT: Final = "payment_state.payout_after_call"
log = get_logger(__name__)


def payout_call(state: PayoutState) -> PayoutCall:
    """The create the payout stands for: the same on every send."""
    p = state.payout
    return PayoutCall(
        state.operation.operation_id, p.withdrawal_id, p.merchant_id, p.amount_minor, p.currency,
        p.destination_token,
    )  # fmt: skip  # packed: a few items a line read better than one each


class PayoutExecutor(EachAlone[PayoutOperation]):
    """Claims due payout operations in batches and takes each through ``process`` on the backbone's
    lane (its pool of ``concurrency``): payouts are few, so each keeps its own transactions."""

    name = "payout"

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
        """Claim one batch and process it; returns how many payout operations were claimed."""
        return self._lane.run_once()

    def refresh_metrics(self) -> None:
        with self._transaction() as store:
            open_operations = store.open_payout_operations()
        metrics.OPEN_PAYOUT_OPERATIONS.labels("PENDING").set(open_operations.pending)
        metrics.OPEN_PAYOUT_OPERATIONS.labels("UNKNOWN").set(open_operations.unknown)
        metrics.OLDEST_UNKNOWN_PAYOUT_SECONDS.set(open_operations.oldest_unknown_s)

    # -- the lane's strategy: every payout goes alone ----------------------------------------------

    def claim(self, limit: int) -> Sequence[PayoutOperation]:
        with self._transaction() as store:
            return store.claim_due_payouts(self._c.worker_id, limit, self._c.lease_ms)

    def alone(self, op: PayoutOperation) -> None:
        # A failure is logged by the lane; the claim expires after the lease and a call in flight
        # is found then: nothing assumed.
        self.process(op.withdrawal_id)

    def transaction(self) -> AbstractContextManager[PaymentStore]:
        return self._transaction()

    def label(self, op: PayoutOperation) -> dict[str, object]:
        return {"operation_id": op.operation_id, "withdrawal_id": op.withdrawal_id}

    def process(self, withdrawal_id: str) -> None:
        state = self._load(withdrawal_id)
        op = state.operation
        step = plan(op)
        match step:
            case Skip():
                self._release(op.operation_id, 0)
            case Call():
                self._call(state)
            case LookupStep(lost_call=lost_call):
                if lost_call:
                    with self._transaction() as store:
                        store.mark_payout_unknown(op.operation_id, "worker_lost_during_call")
                    log.warning("payout.lost_call", operation_id=op.operation_id, withdrawal_id=withdrawal_id)
                    state = self._load(withdrawal_id)
                self._lookup(state)
            case _:
                assert_never(step)

    def _psp(self, state: PayoutState) -> Psp | None:
        """The payout's own provider's adapter; None (logged, retried later) if not configured here."""
        psp = self._psps.get(state.payout.provider)
        if psp is None:
            operation_id = state.operation.operation_id
            log.error(
                "payout.provider_not_configured", operation_id=operation_id, provider=state.payout.provider
            )
            self._release(operation_id, self._c.policy.backoff_max_ms)
        return psp

    def _call(self, state: PayoutState) -> None:
        psp = self._psp(state)
        if psp is None:
            return
        call = payout_call(state)
        with self._transaction() as store:
            if not store.start_payout_call(call.operation_id, self._c.worker_id):
                return  # the claim expired and someone else has the payout now
        failpoints.hit(AFTER_CLAIM_FAILPOINT)
        result = psp.create_payout(call)
        failpoints.hit(AFTER_CALL_FAILPOINT)
        metrics.PROVIDER_CALLS.labels("call_payout", type(result).__name__).inc()
        self._record_call_result(state, result)

    def _record_call_result(self, state: PayoutState, result: PayoutCallResult) -> None:
        withdrawal_id, operation_id = state.payout.withdrawal_id, state.operation.operation_id
        ctx = self._ctx.for_provider(state.payout.provider)
        with self._transaction() as store:
            match result:
                case Applied(fact=fact):
                    apply_payout_provider_fact(
                        store, ctx, fact, source="response", withdrawal_id=withdrawal_id
                    )
                    delay_ms = self._delay_after_answer(store, withdrawal_id)
                case Refused(fact=refusal):
                    apply_payout_provider_fact(
                        store, ctx, refusal, source="response", withdrawal_id=withdrawal_id
                    )
                    delay_ms = self._delay_after_answer(store, withdrawal_id)
                case NoAnswer(reason=reason):
                    store.mark_payout_unknown(operation_id, reason)
                    log.warning("payout.outcome_unknown", operation_id=operation_id, reason=reason)
                    current = self._current(store, withdrawal_id)
                    decision = after_unknown_call(current.operation, self._c.policy)
                    self._open_case(store, current, decision)
                    delay_ms = decision.delay_ms
                case _:
                    assert_never(result)
            store.release_payout(operation_id, self._c.worker_id, delay_ms)

    def _lookup(self, state: PayoutState) -> None:
        psp = self._psp(state)
        if psp is None:
            return
        if replay_before_lookup(
            state.operation,
            provider_id_known=state.payout.provider_payout_id is not None,
            provider_replays=psp.replays_lost_creates,
            now_ms=self._ctx.now_ms(),
            policy=self._c.policy,
        ):
            log.info("payout.replay_lost_create", operation_id=state.operation.operation_id)
            self._call(state)
            return
        withdrawal_id, operation_id = state.payout.withdrawal_id, state.operation.operation_id
        with self._transaction() as store:
            if not store.count_payout_lookup(operation_id, self._c.worker_id):
                return
        lookup = psp.find_payout(withdrawal_id, state.payout.provider_payout_id)
        metrics.PROVIDER_CALLS.labels("lookup_payout", type(lookup).__name__).inc()
        with self._transaction() as store:
            answer = self._apply_lookup(store, state, lookup)
            if answer is None:
                store.release_payout(operation_id, self._c.worker_id, 0)
                return
            current = self._current(store, withdrawal_id)
            decision = after_lookup(current.operation, answer, self._ctx.now_ms(), self._c.policy)
            if isinstance(decision, Reschedule):
                self._open_case(store, current, decision)
                store.release_payout(operation_id, self._c.worker_id, decision.delay_ms)
                return
        invariant(isinstance(decision, Resend), "after_lookup returns Resend or Reschedule")
        log.info("payout.resend_same_key", operation_id=operation_id, answer=answer)
        self._call(self._load(withdrawal_id))

    def _apply_lookup(
        self, store: PaymentStore, state: PayoutState, lookup: PayoutLookup
    ) -> LookupAnswer | None:
        """Apply what a lookup found; None when the operation is resolved now."""
        withdrawal_id = state.payout.withdrawal_id
        match lookup:
            case Found(fact=fact):
                apply_payout_provider_fact(
                    store,
                    self._ctx.for_provider(state.payout.provider),
                    fact,
                    source="lookup",
                    withdrawal_id=withdrawal_id,
                )
                return None if self._current(store, withdrawal_id).operation.is_terminal else "found_pending"
            case Absent() if state.payout.provider_payout_id is not None:
                # The PSP reported this payout before and now has no such id: never a reason to
                # create again (a PSP that forgot our key would make a second payout). A person looks.
                detail = f"the PSP has no payout {state.payout.provider_payout_id}, which it reported before"
                open_payout_case(store, self._current(store, withdrawal_id), "provider_conflict", detail)
                return "no_answer"
            case Absent():
                return "absent"
            case Conflict():
                return "ambiguous"
            case NoAnswer():
                return "no_answer"
            case _:
                assert_never(lookup)

    # -- helpers ---------------------------------------------------------------------------------------

    def _delay_after_answer(self, store: PaymentStore, withdrawal_id: str) -> int:
        current = self._current(store, withdrawal_id)
        return 0 if current.operation.is_terminal else self._c.policy.recheck_interval_ms

    def _open_case(self, store: PaymentStore, state: PayoutState, decision: Reschedule) -> None:
        if decision.case is None:
            return
        op = state.operation
        detail = f"payout {op.status} after {op.attempts} attempts ({op.unknown_reason or 'no answer'})"
        open_payout_case(store, state, decision.case, detail)

    def _current(self, store: PaymentStore, withdrawal_id: str) -> PayoutState:
        state = store.load_payout(withdrawal_id)
        invariant(state is not None, f"payout {withdrawal_id} vanished")
        assert state is not None
        return state

    def _load(self, withdrawal_id: str) -> PayoutState:
        with self._transaction() as store:
            return self._current(store, withdrawal_id)

    def _release(self, operation_id: str, delay_ms: int) -> None:
        with self._transaction() as store:
            store.release_payout(operation_id, self._c.worker_id, delay_ms)
