"""Payouts of withdrawals: the ``CreatePayout`` command's handler and the one entry point for every
provider fact about a payout (the create's answer, a lookup, a ``payout.*`` webhook).

- ``create_payout``: one payout per withdrawal (the idempotency key is the withdrawal id): a new id
  inserts the payout and its operation (the worker picks it up); the same id with the same request
  (a redelivery, a duplicate command) creates nothing; the same id with another request is refused
  (``idempotency_key_reused``), never a second payout.
- ``apply_payout_provider_fact``: in the store's transaction, locate the payout (by the provider's
  payout id, else our reference), lock it, run the domain's ``apply_payout_fact``, save and write its
  events to the outbox, and keep the fact for audit (``provider_facts``, ``payment_id`` = the
  withdrawal id) whatever it did. The row lock serializes a webhook and a call answer for the same
  payout, so the later one sees the first one's result and changes nothing.
"""

from __future__ import annotations

from typing import assert_never

from backbone.invariants import invariant
from backbone.logs import get_logger

from payment_state.application import metrics
from payment_state.application.context import Context
from payment_state.application.ports import PaymentStore
from payment_state.application.provider_facts import SOURCES, FactOutcome
from payment_state.domain.commands import Rejection
from payment_state.domain.payout_requests import CreatePayoutRequest, decide_payout
from payment_state.domain.payouts import (
    PayoutApplied,
    PayoutContradicted,
    PayoutFact,
    PayoutProviderFact,
    PayoutRefused,
    PayoutState,
    PayoutUnchanged,
    apply_payout_fact,
    payout_fact_type,
    payout_needs_attention,
)

log = get_logger(__name__)


def create_payout(
    store: PaymentStore, ctx: Context, merchant_id: str, key: str, request: CreatePayoutRequest
) -> PayoutState | Rejection:
    """The payout for ``request`` (new or the one recorded before), or why it is refused."""
    if key != request.withdrawal_id:
        return Rejection(
            400, "invalid_idempotency_key", "the idempotency key of a payout is its withdrawal id"
        )
    if request.provider != ctx.provider_for(merchant_id):
        return Rejection(
            422,
            "provider_not_supported",
            f"payouts of {merchant_id} go to {ctx.provider_for(merchant_id)}, not {request.provider}",
        )
    state = decide_payout(
        request, merchant_id=merchant_id, operation_id=ctx.new_id("op"), now_ms=ctx.now_ms()
    )
    if store.create_payout(state):
        log.info(
            "payout.created", withdrawal_id=request.withdrawal_id, operation_id=state.operation.operation_id
        )
        return state
    existing = store.load_payout(request.withdrawal_id)
    invariant(existing is not None, f"payout {request.withdrawal_id} exists but cannot be read")
    assert existing is not None
    if existing.payout.request_digest != state.payout.request_digest:
        return Rejection(
            422, "idempotency_key_reused", "this withdrawal has a payout for a different request"
        )
    metrics.IDEMPOTENT_REPLAYS.labels("payout").inc()
    return existing


def locate_payout(store: PaymentStore, provider: str, fact: PayoutProviderFact) -> str | None:
    """Our withdrawal id for a fact: by the PSP's payout id first, then by the reference we gave it."""
    match fact:
        case PayoutFact():
            found = store.withdrawal_id_by_provider_payout(provider, fact.provider_payout_id)
            if found is None and fact.reference is not None and store.load_payout(fact.reference) is not None:
                found = fact.reference
            return found
        case PayoutRefused():
            return None  # a refusal is the answer to our own call: the caller names the payout
        case _:
            assert_never(fact)


def apply_payout_provider_fact(
    store: PaymentStore,
    ctx: Context,
    fact: PayoutProviderFact,
    *,
    source: str,
    provider_event_id: str | None = None,
    withdrawal_id: str | None = None,
    causation_id: str | None = None,
) -> FactOutcome:
    """Apply one payout fact in the store's transaction and keep it for audit."""
    invariant(source in SOURCES, f"unknown fact source {source!r}")
    if provider_event_id is not None and store.webhook_seen(ctx.provider, provider_event_id):
        metrics.PROVIDER_FACTS.labels(source, "duplicate").inc()
        return FactOutcome("duplicate", None, "provider event seen before")
    target = withdrawal_id or locate_payout(store, ctx.provider, fact)
    state = None if target is None else store.load_payout(target, for_update=True)
    if state is not None and state.payout.provider != ctx.provider:
        state = None  # a payout at another provider: this provider's fact never moves it
    outcome = (
        FactOutcome("unmatched", None) if state is None else _apply_located(store, state, fact, causation_id)
    )
    if outcome.outcome in ("unmatched", "conflict"):
        log.warning(
            "payout_fact." + outcome.outcome,
            source=source,
            fact=payout_fact_type(fact),
            withdrawal_id=outcome.payment_id,
            provider_event_id=provider_event_id,
            detail=outcome.detail,
        )
    store.record_fact(
        provider=ctx.provider,
        provider_event_id=provider_event_id,
        source=source,
        fact_type=payout_fact_type(fact),
        payment_id=outcome.payment_id,
        operation_id=None if state is None else state.operation.operation_id,
        outcome=outcome.outcome,
        detail=outcome.detail,
        causation_id=causation_id,
    )
    metrics.PROVIDER_FACTS.labels(source, outcome.outcome).inc()
    return outcome


def _apply_located(
    store: PaymentStore, state: PayoutState, fact: PayoutProviderFact, causation_id: str | None
) -> FactOutcome:
    withdrawal_id = state.payout.withdrawal_id
    result = apply_payout_fact(state, fact)
    match result:
        case PayoutApplied(state=new_state, events=out):
            # The row is locked: no one else can have moved the version.
            invariant(store.save_payout(state, new_state), f"version moved under a lock on {withdrawal_id}")
            store.publish(withdrawal_id, out, causation_id)
            detail = ",".join(e.event_type for e in out) or f"now {new_state.payout.status}"
            return FactOutcome("applied", withdrawal_id, detail)
        case PayoutUnchanged(outcome=outcome, detail=detail):
            return FactOutcome(outcome, withdrawal_id, detail)
        case PayoutContradicted(detail=detail):
            open_payout_case(store, state, "provider_conflict", detail, causation_id)
            return FactOutcome("conflict", withdrawal_id, detail)
        case _:
            assert_never(result)


def open_payout_case(
    store: PaymentStore, state: PayoutState, kind: str, detail: str, causation_id: str | None = None
) -> None:
    """Open a case about a payout for a person (once per payout, operation and kind, in
    ``payment_cases`` under the withdrawal id) and announce it (``PaymentNeedsAttention``, keyed by
    the withdrawal id) in the same transaction."""
    withdrawal_id, operation_id = state.payout.withdrawal_id, state.operation.operation_id
    if store.open_case(withdrawal_id, operation_id, kind, detail):
        store.publish(withdrawal_id, [payout_needs_attention(state, kind, detail)], causation_id)
        metrics.CASES_OPENED.labels(kind).inc()
        log.error(
            "case.opened", withdrawal_id=withdrawal_id, operation_id=operation_id, kind=kind, detail=detail
        )
