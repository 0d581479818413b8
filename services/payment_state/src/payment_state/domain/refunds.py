"""Applying a refund fact, and judging a dispute: the money that goes back to the card holder.

Pure. A refund fact resolves our refund operation (found by our reference or the provider's id):
pending keeps the reserved capacity, succeeded moves it to refunded, failed releases it; a refund
already resolved here is a duplicate when the provider agrees and a conflict when it does not. A
dispute becomes one ``ChargebackReceived`` if it fits what was captured (the caller makes it unique
per provider dispute).
"""

from __future__ import annotations

from dataclasses import replace
from typing import assert_never

from payment_state.domain import events
from payment_state.domain.change import ApplyResult, Change, Conflict, Unchanged
from payment_state.domain.facts import DisputeFact, RefundFact, RefundStatus
from payment_state.domain.model import Operation, OperationStatus, OperationType, PaymentState, PaymentStatus

_S = PaymentStatus


def _find_refund(state: PaymentState, fact: RefundFact) -> Operation | None:
    for op in state.operations:
        if op.operation_type != OperationType.REFUND:
            continue
        if fact.our_reference is not None and op.operation_id == fact.our_reference:
            return op
        if op.provider_reference is not None and op.provider_reference == fact.provider_refund_id:
            return op
    return None


def apply_refund(state: PaymentState, fact: RefundFact) -> ApplyResult:
    """Apply a refund fact to the refund operation it is about (see the module docstring)."""
    op = _find_refund(state, fact)
    if op is None:
        return Conflict(f"refund {fact.provider_refund_id} is not one of ours")
    if (fact.amount_minor, fact.currency) != (op.amount_minor, op.currency):
        return Conflict(
            f"refund amount {fact.amount_minor} {fact.currency} != ours {op.amount_minor} {op.currency}"
        )
    if op.provider_reference not in (None, fact.provider_refund_id):
        return Conflict(
            f"refund {op.operation_id} is {op.provider_reference} at the provider,"
            f" not {fact.provider_refund_id}"
        )
    if op.is_terminal:
        return _refund_after_terminal(op, fact.status)
    change = Change.of(state)
    p = state.payment
    match fact.status:
        case RefundStatus.PENDING:
            change.set_op(replace(op, provider_reference=fact.provider_refund_id))
            return change.result(Unchanged("pending", "refund still pending at the provider"))
        case RefundStatus.SUCCEEDED:
            done = op.succeeded(fact.provider_refund_id)
            refunded = p.refunded_minor + op.amount_minor
            status = _S.REFUNDED if refunded == p.captured_minor else _S.PARTIALLY_REFUNDED
            change.set_op(done)
            change.set_payment(
                refunded_minor=refunded,
                pending_refund_minor=p.pending_refund_minor - op.amount_minor,
                status=status,
            )
            change.emit(events.refund_succeeded(change.payment, done))
        case RefundStatus.FAILED:
            done = replace(
                op.failed(fact.failure_code or "refund_failed"), provider_reference=fact.provider_refund_id
            )
            change.set_op(done)
            change.set_payment(pending_refund_minor=p.pending_refund_minor - op.amount_minor)
            change.emit(events.refund_failed(change.payment, done))
        case _:
            assert_never(fact.status)
    return change.result(Unchanged("duplicate", "no change"))


def _refund_after_terminal(op: Operation, theirs: RefundStatus) -> ApplyResult:
    ours = op.status
    if theirs == RefundStatus.PENDING:
        return Unchanged("stale", f"refund pending at the provider, already {ours} here")
    same = (ours, theirs) in (
        (OperationStatus.SUCCEEDED, RefundStatus.SUCCEEDED),
        (OperationStatus.FAILED, RefundStatus.FAILED),
    )
    if same:
        return Unchanged("duplicate", f"refund already {ours}")
    return Conflict(f"provider says refund {theirs}, we recorded {ours}")


# -- chargebacks -------------------------------------------------------------------------------


def chargeback(state: PaymentState, fact: DisputeFact, chargeback_id: str) -> events.OutEvent | Conflict:
    """The event announcing a new dispute; the caller makes it unique per provider dispute."""
    p = state.payment
    if fact.currency != p.currency or not 0 < fact.amount_minor <= p.captured_minor:
        return Conflict(
            f"dispute {fact.amount_minor} {fact.currency}"
            f" does not fit captured {p.captured_minor} {p.currency}"
        )
    return events.chargeback_received(
        p, chargeback_id, fact.provider_dispute_id, fact.amount_minor, fact.currency, fact.reason
    )
