"""Posting journals for consumed events: the idempotent consumer's batch handler.

The backbone's consumer calls ``handle`` inside the batch transaction, after it inserted the dedup
rows, so the dedup rows, the journals, the balance deltas and the JournalPosted outbox rows commit
together or not at all. Every event of the batch is decided in one ``post_drafts`` call (one
chain-head lock, set-based inserts).

An event the ledger must not book (bad amounts, unknown account or currency, a reference already
booked with different content, a floor) raises ``PostingRejected``, the backbone's ``Refuse``
naming the event: the consumer dead-letters it at once with the reason (``dead_letters`` +
``<topic>.dlq``, error class ``refused``; no retry can change the answer) and books the rest of the
batch; operators see it and can replay it once the cause is fixed. Nothing is half-posted and
nothing is dropped silently.

One floor is not a refusal: a withdrawal's MT5 debit that finds the client's balance short may have
come before the credits that filled it (another key, another partition). It raises ``PostingWaits``
(the backbone's ``NotYet``): its partition waits for them, up to ``CONSUMER_WAIT_MAX_MS``, then it
is dead-lettered as ``waited``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import assert_never

from backbone.consumer import InboundEvent, NotYet, Refuse, UnitOfWork
from backbone.logs import get_logger

from ledger.application.ports import LedgerStore
from ledger.application.posting import apply_decision, decide_drafts
from ledger.application.repairs import RepairOutcome, RepairRequest, draft_for_repair, outcome_of, request_of
from ledger.domain.journals import JournalDraft, Rejected
from ledger.domain.mt5_rules import waits_for_other_keys
from ledger.domain.posting import AlreadyPosted, BelowFloor, ConflictingDuplicate, Posted, PostingOutcome
from ledger.domain.rule_base import EventMeta, Ignored, PostingPolicy
from ledger.domain.rules import draft_for_event

log = get_logger(__name__)


class PostingRejected(Refuse):
    """The ledger refuses to book this event; the reason is the dead letter's."""


class PostingWaits(NotYet):
    """The ledger cannot book this event yet: it waits for facts on other keys."""


def meta_of(event: InboundEvent) -> EventMeta:
    env = event.event.envelope
    return EventMeta(
        event_id=env.event_id,
        event_type=event.event_type,
        payment_id=env.payment_id,
        occurred_at_ms=env.occurred_at_ms,
        producer=env.producer,
        topic=event.topic,
        partition=event.partition,
        offset=event.offset,
    )


def drafts_for(events: Sequence[InboundEvent], policy: PostingPolicy) -> list[JournalDraft]:
    """The journal of every money event; raises PostingRejected for the first one refused.
    Repair commands are not events: ``repairs_for`` takes them."""
    drafts = []
    for event in events:
        if event.event_type == "ExecuteRepair":
            continue
        meta = meta_of(event)
        match draft_for_event(meta, event.event.body, policy):
            case JournalDraft() as draft:
                drafts.append(draft)
            case Ignored():
                continue
            case Rejected(reason=reason, detail=detail):
                _reject(meta, f"{reason.value}: {detail}")
    return drafts


def make_handler(
    policy: PostingPolicy, store_for: Callable[[UnitOfWork], LedgerStore]
) -> Callable[[UnitOfWork, Sequence[InboundEvent]], None]:
    """The batch handler for ``IdempotentConsumer``."""

    def handle(uow: UnitOfWork, events: Sequence[InboundEvent]) -> None:
        drafts = drafts_for(events, policy)
        repairs, outcomes = repairs_for(events, policy)
        store = store_for(uow)
        decision = decide_drafts(store, [*drafts, *(d for _, d in repairs)])
        by_event_id = {e.event_id: e for e in events}
        for draft, outcome in zip(drafts, decision.outcomes, strict=False):
            refusal = refusal_of(outcome)
            if refusal is not None:  # refused (or waiting) before anything of the batch is written
                meta = meta_of(by_event_id[draft.source.source_id])
                if isinstance(outcome, BelowFloor) and waits_for_other_keys(draft):
                    _wait(meta, refusal)
                _reject(meta, refusal)
        posted = decision.outcomes[len(drafts) :]
        outcomes += [outcome_of(request, o) for (request, _), o in zip(repairs, posted, strict=True)]
        apply_decision(store, decision)
        if outcomes:
            store.report_repairs(outcomes)
            for o in outcomes:
                log.info("ledger.repair", repair_id=o.request.repair_id, outcome=o.outcome, detail=o.detail)

    return handle


def repairs_for(
    events: Sequence[InboundEvent], policy: PostingPolicy
) -> tuple[list[tuple[RepairRequest, JournalDraft]], list[RepairOutcome]]:
    """The ledger's repair commands: the journals to post, and the ones refused already."""
    drafts: list[tuple[RepairRequest, JournalDraft]] = []
    refused: list[RepairOutcome] = []
    for event in events:
        if event.event_type != "ExecuteRepair":
            continue
        request = request_of(event.event.envelope.payment_id, event.event.body)
        if request is None:
            continue
        match draft_for_repair(request, meta_of(event), policy):
            case JournalDraft() as draft:
                drafts.append((request, draft))
            case RepairOutcome() as outcome:
                refused.append(outcome)
    return drafts, refused


def refusal_of(outcome: PostingOutcome) -> str | None:
    """Why an outcome means "not booked", or None when the operation is in the ledger."""
    match outcome:
        case Posted() | AlreadyPosted():
            return None
        case ConflictingDuplicate(reference=reference, journal_id=journal_id):
            return f"conflicting_duplicate: {reference} is journal {journal_id} with other entries"
        case BelowFloor(
            reference=ref, account=account, balance_minor=balance, delta_minor=delta, floor_minor=fl
        ):
            return f"below_floor: {ref} would move {account} from {balance} by {delta}, below its floor {fl}"
        case _:
            assert_never(outcome)


def _wait(meta: EventMeta, reason: str) -> None:
    log.info("ledger.posting_waits", event_id=meta.event_id, payment_id=meta.payment_id, reason=reason)
    raise PostingWaits(f"waits for the credits of the login: {reason}", meta.event_id)


def _reject(meta: EventMeta, reason: str) -> None:
    log.warning(
        "ledger.posting_rejected",
        event_id=meta.event_id,
        event_type=meta.event_type,
        payment_id=meta.payment_id,
        reason=reason,
    )
    raise PostingRejected(reason, meta.event_id)
