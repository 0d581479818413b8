"""Applying a provider fact (call answer, webhook, lookup) to our records: the one entry point.

In the store's transaction: locate the payment, lock its row, run the domain's ``apply_fact``,
save the new state and write its events to the outbox, and keep the fact for audit whatever it
did (applied, stale, duplicate, pending, conflict, unmatched). The row lock serializes a webhook
and a call answer for the same payment, so the second one sees the first one's result and changes
nothing. A conflict (the provider contradicting an authoritative record) opens a case.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final, assert_never

from backbone.invariants import invariant
from backbone.logs import get_logger

from payment_state.application import metrics
from payment_state.application.context import Context
from payment_state.application.ports import PaymentStore
from payment_state.domain.apply import Applied, Conflict, Unchanged, apply_fact, chargeback
from payment_state.domain.events import needs_attention
from payment_state.domain.facts import (
    CallRefused,
    DisputeFact,
    IntentFact,
    ProviderFact,
    RefundFact,
    fact_type,
)
from payment_state.domain.model import Operation, PaymentState

log = get_logger(__name__)
Source = str  # 'response' | 'webhook' | 'lookup'
SOURCES: Final = frozenset({"response", "webhook", "lookup"})


class _Seen(enum.Enum):
    SEEN = "seen"


SEEN: Final = _Seen.SEEN  # a provider event recorded before


@dataclass(frozen=True, slots=True)
class FactOutcome:
    outcome: str  # applied | stale | duplicate | pending | conflict | unmatched
    payment_id: str | None
    detail: str | None = None
    # The payment as this transaction leaves it (locked), when the fact reached one: the caller reads
    # its operations from here instead of loading them again.
    state: PaymentState | None = None


def locate(store: PaymentStore, provider: str, fact: ProviderFact) -> str | None:
    """Our payment id for a fact, by the provider's ids first, then by the reference we gave it."""
    match fact:
        case IntentFact():
            found = store.payment_id_by_provider_payment(provider, fact.provider_payment_id)
            if found is None and fact.our_reference is not None:
                found = store.payment_id_if_exists(fact.our_reference)
            return found
        case RefundFact():
            found = store.payment_id_by_operation(fact.our_reference) if fact.our_reference else None
            found = found or store.payment_id_by_refund(provider, fact.provider_refund_id)
            if found is None and fact.provider_payment_id is not None:
                found = store.payment_id_by_provider_payment(provider, fact.provider_payment_id)
            return found
        case DisputeFact():
            return store.payment_id_by_provider_payment(provider, fact.provider_payment_id)
        case CallRefused():
            return store.payment_id_by_operation(fact.operation_id)
        case _:
            assert_never(fact)


def apply_provider_fact(
    store: PaymentStore,
    ctx: Context,
    fact: ProviderFact,
    *,
    source: Source,
    provider_event_id: str | None = None,
    operation_id: str | None = None,
    payment_id: str | None = None,
    causation_id: str | None = None,
) -> FactOutcome:
    """Apply one fact in the store's transaction and keep it for audit."""
    invariant(source in SOURCES, f"unknown fact source {source!r}")
    state = _lock(store, ctx.provider, fact, payment_id, provider_event_id)
    if state is SEEN:
        metrics.PROVIDER_FACTS.labels(source, "duplicate").inc()
        return FactOutcome("duplicate", None, "provider event seen before")
    unmatched = FactOutcome("unmatched", None)
    outcome = unmatched if state is None else _apply_locked(store, ctx, fact, state, causation_id)
    if outcome.outcome in ("unmatched", "conflict"):
        log.warning(
            "provider_fact." + outcome.outcome,
            source=source,
            fact=fact_type(fact),
            payment_id=outcome.payment_id,
            provider_event_id=provider_event_id,
            detail=outcome.detail,
        )
    store.record_fact(
        provider=ctx.provider,
        provider_event_id=provider_event_id,
        source=source,
        fact_type=fact_type(fact),
        payment_id=outcome.payment_id,
        operation_id=operation_id,
        outcome=outcome.outcome,
        detail=outcome.detail,
        causation_id=causation_id,
    )
    metrics.PROVIDER_FACTS.labels(source, outcome.outcome).inc()
    return outcome


def _lock(
    store: PaymentStore, provider: str, fact: ProviderFact, payment_id: str | None, event_id: str | None
) -> PaymentState | _Seen | None:
    """The payment a fact is about, locked: the one named, else located as ``locate`` does; ``SEEN``
    for a provider event (``event_id``) recorded before, whatever it is about, checked before anything
    is locked."""
    if payment_id is None and isinstance(fact, (IntentFact, DisputeFact)):
        return _lock_by_provider_payment(store, provider, fact, event_id)
    if event_id is not None and store.webhook_seen(provider, event_id):
        return SEEN
    if payment_id is not None:
        state = store.load_state(payment_id, for_update=True)
        invariant(state is not None, f"the payment {payment_id} a fact names must exist")
        return state
    target = locate(store, provider, fact)
    if target is None:
        return None
    state = store.load_state(target, for_update=True)
    invariant(state is not None, f"located payment {target} must exist")
    return state


def _lock_by_provider_payment(
    store: PaymentStore, provider: str, fact: IntentFact | DisputeFact, event_id: str | None
) -> PaymentState | _Seen | None:
    """A fact carrying the provider's payment id: the event's check, the locating and the locked load
    are one round trip when the payment is found (the common case); else the event is checked on its
    own, and an intent is looked for by the reference we gave the provider."""
    state = store.lock_by_provider_payment(provider, fact.provider_payment_id, unless_seen=event_id)
    if state is not None:
        return state
    if event_id is not None and store.webhook_seen(provider, event_id):
        return SEEN
    if isinstance(fact, IntentFact) and fact.our_reference is not None:
        return store.load_state(fact.our_reference, for_update=True)
    return None


def _apply_locked(
    store: PaymentStore, ctx: Context, fact: ProviderFact, state: PaymentState, causation_id: str | None
) -> FactOutcome:
    payment_id = state.payment.payment_id
    if state.payment.provider != ctx.provider:
        # Located by the reference we gave a provider, but the payment lives at another one: a
        # fact of one provider never moves a payment of another (per-merchant providers).
        return FactOutcome("unmatched", None, f"payment {payment_id} is at {state.payment.provider}")
    if isinstance(fact, DisputeFact):
        return _apply_dispute(store, ctx, state, fact, causation_id)
    result = apply_fact(state, fact)
    match result:
        case Applied(state=new_state, events=out):
            # The row is locked: no one else can have moved the version.
            invariant(store.save(state, new_state), f"version moved under a lock on {payment_id}")
            store.publish(payment_id, out, causation_id)
            return FactOutcome("applied", payment_id, ",".join(e.event_type for e in out) or None, new_state)
        case Unchanged(outcome=outcome, detail=detail):
            return FactOutcome(outcome, payment_id, detail, state)
        case Conflict(detail=detail):
            open_case(store, state, None, "provider_conflict", detail, causation_id)
            return FactOutcome("conflict", payment_id, detail, state)
        case _:
            assert_never(result)


def _apply_dispute(
    store: PaymentStore, ctx: Context, state: PaymentState, fact: DisputeFact, causation_id: str | None
) -> FactOutcome:
    payment_id = state.payment.payment_id
    chargeback_id = ctx.new_id("cb")
    event = chargeback(state, fact, chargeback_id)
    if isinstance(event, Conflict):
        open_case(store, state, None, "chargeback_mismatch", event.detail, causation_id)
        return FactOutcome("conflict", payment_id, event.detail, state)
    inserted = store.insert_chargeback(
        chargeback_id=chargeback_id,
        payment_id=payment_id,
        provider=ctx.provider,
        provider_dispute_id=fact.provider_dispute_id,
        amount_minor=fact.amount_minor,
        currency=fact.currency,
        reason=fact.reason,
    )
    if not inserted:
        detail = f"dispute {fact.provider_dispute_id} already recorded"
        return FactOutcome("duplicate", payment_id, detail, state)
    store.publish(payment_id, [event], causation_id)
    return FactOutcome("applied", payment_id, event.event_type, state)


def open_case(
    store: PaymentStore,
    state: PaymentState,
    op: Operation | None,
    kind: str,
    detail: str,
    causation_id: str | None = None,
) -> None:
    """Open a case for a person (once per payment, operation and kind) and announce it
    (``PaymentNeedsAttention``) in the same transaction: the reconciler's queue learns of it from
    the event, this service keeps its row as evidence."""
    payment_id = state.payment.payment_id
    operation_id = None if op is None else op.operation_id
    if store.open_case(payment_id, operation_id, kind, detail):
        store.publish(payment_id, [needs_attention(state.payment, op, kind, detail)], causation_id)
        metrics.CASES_OPENED.labels(kind).inc()
        log.error("case.opened", payment_id=payment_id, operation_id=operation_id, kind=kind, detail=detail)
