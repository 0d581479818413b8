"""Repairs the reconciler sends payment-state (``ExecuteRepair`` with target ``payment_state``), after
two different people proposed and approved them: receipt (the consumer) and execution (the worker).

Receipt, in the consumer's batch transaction with its dedup rows (``receive_repair``): the request is
recorded once per repair id, so a redelivery or a second event id of the same repair records
nothing and will have no second outcome. What the command alone refuses (``domain.repairs``:
another type, the maker approving their own repair, a malformed row) is decided there and then, its
``RepairOutcome`` in the same transaction. The consumer never calls the PSP: its transaction holds
the batch's dedup rows and payment locks, and a PSP call can take seconds.

Execution, in the worker (``RepairExecutor``, next to the operation executor, which already claims
work and calls the PSP with every call outside a transaction): claim due repairs with a lease; in
one short transaction plan the lookup against our state (or refuse: no such payment of ours, a
refund we never asked for) and count it; look the object up at the PSP (lookups never move money);
then in one transaction, under the repair's row lock and only while the claim is still ours,
compare the PSP's answer with the row and either apply it through ``apply_provider_fact`` (as any
lookup, so the normal events go out) and decide ``executed``, or decide ``refused``, or, without an
answer, look again after a capped backoff and decide ``unknown`` after the bound. Deciding writes
the one ``RepairOutcome`` (``PaymentStore.finish_repair``). A crash anywhere before that commit
leaves the repair ``requested``: its claim expires and the lookup is made again; the apply function
and ``finish_repair`` make the second pass apply nothing twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import assert_never

from backbone import failpoints
from backbone.consumer.messages import InboundEvent
from backbone.invariants import invariant
from backbone.lane import EachAlone, Lane, LaneConfig
from backbone.logs import get_logger

from payment_state.application import metrics
from payment_state.application.context import Context
from payment_state.application.ports import (
    Absent,
    Conflict,
    Found,
    Lookup,
    NoAnswer,
    PaymentStore,
    Psp,
    StoredRepair,
    Transactions,
)
from payment_state.application.provider_facts import apply_provider_fact
from payment_state.application.providers import Psps, as_psps
from payment_state.domain.repairs import (
    LookAgain,
    LookUpPayment,
    LookUpRefund,
    RepairOutcome,
    RepairPolicy,
    RepairRequest,
    SettlementRow,
    after_no_answer,
    executed,
    mismatch,
    parse_row,
    plan,
    refusal_at_receipt,
    refused,
    request_of,
)

log = get_logger(__name__)
AFTER_LOOKUP_FAILPOINT = "payment_state.repair_after_lookup"


def receive_repair(store: PaymentStore, event: InboundEvent) -> None:
    """Record an ``ExecuteRepair`` addressed to payment-state once, or decide its refusal now."""
    request = request_of(event.event.envelope.payment_id, event.event_id, event.event.body)
    if request is None:
        return  # another service's repair: none of payment-state's business
    if not store.record_repair(request):
        first = store.load_repair(request.repair_id)
        assert first is not None
        log.info(
            "repair.seen_before",
            repair_id=request.repair_id,
            event_id=event.event_id,
            first_event_id=first.request.command_event_id,
            status=first.status,
            same_command=first.request.command_digest == request.command_digest,
        )
        return
    refusal = refusal_at_receipt(request)
    if refusal is not None:
        decided = store.finish_repair(request.repair_id, refusal, None)
        invariant(decided, "a repair recorded in this transaction is decided once")
        _decided(request, refusal)
        return
    log.info("repair.requested", repair_id=request.repair_id, payment_id=request.payment_id)


@dataclass(frozen=True)
class RepairConfig:
    worker_id: str
    batch_size_max: int
    lease_ms: int
    policy: RepairPolicy

    def __post_init__(self) -> None:
        invariant(0 < self.batch_size_max <= 100, "repair batch_size_max in 1..100")
        invariant(self.lease_ms > 0, "lease_ms > 0")


Step = tuple[StoredRepair, SettlementRow, LookUpPayment | LookUpRefund, int, str]  # ..., provider


class RepairExecutor(EachAlone[int]):
    """Claims requested repairs and takes each one to its outcome (see the module docstring), one
    after the other on the backbone's lane: they are rare."""

    name = "repair"

    def __init__(
        self, transaction: Transactions, psp: Psp | Psps, ctx: Context, config: RepairConfig
    ) -> None:
        self._transaction = transaction
        self._psps = as_psps(psp)
        self._ctx = ctx
        self._c = config
        self._lane = Lane(self, LaneConfig(config.batch_size_max))

    def run_once(self) -> int:
        """Claim one batch and process it; returns how many were claimed."""
        return self._lane.run_once()

    def claim(self, limit: int) -> Sequence[int]:
        with self._transaction() as store:
            return store.claim_repairs(self._c.worker_id, limit, self._c.lease_ms)

    def alone(self, repair_id: int) -> None:
        # A failure is logged by the lane: nothing of this attempt committed after its lookup, the
        # claim expires after the lease and the repair is looked up again (a lookup moves no money).
        self.process(repair_id)

    def transaction(self) -> AbstractContextManager[PaymentStore]:
        return self._transaction()

    def label(self, repair_id: int) -> dict[str, object]:
        return {"repair_id": repair_id}

    def process(self, repair_id: int) -> None:
        step = self._plan(repair_id)
        if step is None:
            return
        stored, row, lookup_plan, attempts, provider = step
        psp = self._psps.get(provider)
        # A payment at a provider this process is not configured for: no lookup, never another
        # provider's; the repair is looked up again later (and stays unknown after its limit).
        lookup = (
            NoAnswer(f"provider {provider} not configured")
            if psp is None
            else self._look_up(psp, lookup_plan)
        )
        metrics.PROVIDER_CALLS.labels("lookup_repair", type(lookup).__name__).inc()
        failpoints.hit(AFTER_LOOKUP_FAILPOINT)  # crash tests: the lookup made, nothing committed
        with self._transaction() as store:
            current = store.load_repair(repair_id, for_update=True)
            if current is None or current.status != "requested" or current.claimed_by != self._c.worker_id:
                log.warning("repair.claim_lost", repair_id=repair_id)
                return  # someone else has it now; this lookup moved no money
            decision = self._judge(store, stored.request, row, lookup, attempts, provider)
            match decision:
                case LookAgain(delay_ms=delay_ms):
                    store.release_repair(repair_id, self._c.worker_id, delay_ms)
                    log.warning("repair.no_answer", repair_id=repair_id, attempts=attempts, delay_ms=delay_ms)
                case RepairOutcome():
                    self._finish(store, stored.request, decision)
                case _:
                    assert_never(decision)

    def _plan(self, repair_id: int) -> Step | None:
        """In one transaction: the lookup to make (counted), or the refusal decided now."""
        with self._transaction() as store:
            stored = store.load_repair(repair_id, for_update=True)
            if stored is None or stored.status != "requested" or stored.claimed_by != self._c.worker_id:
                return None
            request = stored.request
            invariant(request.fact_json is not None, f"repair {repair_id} was recorded without its row")
            assert request.fact_json is not None
            row = parse_row(request.fact_json)
            invariant(not isinstance(row, str), f"repair {repair_id}'s row was checked at receipt")
            assert not isinstance(row, str)
            state = store.load_state(request.payment_id)
            step = plan(row, state)
            if isinstance(step, RepairOutcome):
                self._finish(store, request, step)
                return None
            attempts = store.count_repair_lookup(repair_id, self._c.worker_id)
            if attempts is None:
                return None
        assert state is not None  # plan refuses a row without a payment
        return stored, row, step, attempts, state.payment.provider

    def _look_up(self, psp: Psp, step: LookUpPayment | LookUpRefund) -> Lookup:
        match step:
            case LookUpPayment(payment_id=payment_id, provider_payment_id=provider_payment_id):
                return psp.find_payment(payment_id, provider_payment_id)
            case LookUpRefund(
                operation_id=operation_id,
                provider_refund_id=provider_refund_id,
                provider_payment_id=provider_payment_id,
            ):
                return psp.find_refund(operation_id, provider_refund_id, provider_payment_id)
            case _:
                assert_never(step)

    def _judge(
        self,
        store: PaymentStore,
        request: RepairRequest,
        row: SettlementRow,
        lookup: Lookup,
        attempts: int,
        provider: str,
    ) -> LookAgain | RepairOutcome:
        """What the PSP's answer decides, applied (in the caller's transaction) when it confirms."""
        what = "payment intent" if row.type == "charge" else "refund"
        match lookup:
            case Found(fact=fact):
                problem = mismatch(row, fact)
                if problem is not None:
                    return refused(problem)
                applied = apply_provider_fact(
                    store,
                    self._ctx.for_provider(provider),
                    fact,
                    source="lookup",
                    operation_id=row.source_reference if row.type == "refund" else None,
                    payment_id=request.payment_id,
                    causation_id=request.command_event_id,
                )
                state = store.load_state(request.payment_id)
                invariant(state is not None, f"repaired payment {request.payment_id} vanished")
                assert state is not None
                return executed(row, applied.outcome, applied.detail, state)
            case Absent():
                return refused(f"the PSP has no such {what} ({row.source_id}): the row is not confirmed")
            case Conflict(count=count):
                return refused(f"{count} {what}s at the PSP carry our reference: a person resolves it")
            case NoAnswer(reason=reason):
                return after_no_answer(attempts, reason, self._c.policy)
            case _:
                assert_never(lookup)

    def _finish(self, store: PaymentStore, request: RepairRequest, outcome: RepairOutcome) -> None:
        decided = store.finish_repair(request.repair_id, outcome, self._c.worker_id)
        invariant(decided, f"repair {request.repair_id} is ours under its row lock or claim")
        _decided(request, outcome)


def _decided(request: RepairRequest, outcome: RepairOutcome) -> None:
    metrics.REPAIRS.labels(outcome.outcome).inc()
    log.info(
        "repair.decided",
        repair_id=request.repair_id,
        case_id=request.case_id,
        payment_id=request.payment_id,
        outcome=outcome.outcome,
        detail=outcome.detail,
        reference=outcome.reference,
    )
