"""The one apply function: a provider fact meets the payment state.

``apply_fact`` is called for the synchronous answer to a call, for a verified webhook and for a
lookup alike, so the three can arrive in any order, any number of times, and converge on the same
state with each outgoing event produced once.

How a fact about the payment intent is judged against the payment's status (rows: ours, columns:
the provider's):

    ours \\ provider   REQ_ACTION  AUTHORIZED  CAPTURED  CANCELED  FAILED
    CREATED            advance     advance     advance   advance   advance
    REQUIRES_ACTION    duplicate   advance     advance   advance   advance
    AUTHORIZED         stale       duplicate   advance   advance   stale
    CAPTURED or later  stale       stale       duplicate conflict  stale
    CANCELED           stale       stale       conflict  duplicate stale
    FAILED             stale       conflict    conflict  settle    duplicate

- advance: the payment moves forward, operations resolve, events are produced;
- duplicate / settle: the payment keeps its status, still-open operations may resolve (a cancel
  answered "canceled" after a decline had already failed the payment);
- stale: older news; kept for audit by the caller, changes nothing;
- conflict: the provider contradicts an authoritative record of ours (money captured on a payment
  we hold as canceled): changes nothing, the caller opens a case for a person.
Transitions therefore only move forward, and a captured payment can never go back to authorized.

Refund facts and disputes are judged in ``domain/refunds.py``; the results and the accumulator
that builds them are ``domain/change.py``'s (re-exported here: callers import from this module).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final, Literal, assert_never

from backbone.invariants import invariant

from payment_state.domain import events
from payment_state.domain.change import Applied, ApplyResult, Change, Conflict, Unchanged
from payment_state.domain.facts import CallRefused, IntentFact, IntentStatus, RefundFact
from payment_state.domain.model import (
    BEFORE_AUTHORIZATION,
    CAPTURED_OR_LATER,
    RANK,
    Operation,
    OperationType,
    Payment,
    PaymentState,
    PaymentStatus,
    check_payment,
)
from payment_state.domain.refunds import apply_refund, chargeback

__all__ = [
    "Applied",
    "ApplyResult",
    "Conflict",
    "Unchanged",
    "Verdict",
    "apply_fact",
    "chargeback",
    "intent_verdict",
]

Verdict = Literal["advance", "duplicate", "settle", "stale", "conflict"]

_S = PaymentStatus
_I = IntentStatus
_TARGET: Final[dict[IntentStatus, PaymentStatus]] = {
    _I.REQUIRES_ACTION: _S.REQUIRES_ACTION,
    _I.AUTHORIZED: _S.AUTHORIZED,
    _I.CAPTURED: _S.CAPTURED,
    _I.CANCELED: _S.CANCELED,
    _I.FAILED: _S.FAILED,
}
_TERMINAL_VERDICTS: Final[dict[tuple[PaymentStatus, IntentStatus], Verdict]] = {
    (_S.CANCELED, _I.CAPTURED): "conflict",
    (_S.CANCELED, _I.CANCELED): "duplicate",
    (_S.FAILED, _I.AUTHORIZED): "conflict",
    (_S.FAILED, _I.CAPTURED): "conflict",
    (_S.FAILED, _I.CANCELED): "settle",
    (_S.FAILED, _I.FAILED): "duplicate",
}
_CAPTURED_VERDICTS: Final[dict[IntentStatus, Verdict]] = {_I.CAPTURED: "duplicate", _I.CANCELED: "conflict"}


def intent_verdict(ours: PaymentStatus, theirs: IntentStatus) -> Verdict:
    """The table in the module docstring."""
    invariant(theirs in _TARGET, f"no verdict for {theirs}")
    if ours in (_S.CANCELED, _S.FAILED):
        return _TERMINAL_VERDICTS.get((ours, theirs), "stale")
    if ours in CAPTURED_OR_LATER:
        return _CAPTURED_VERDICTS.get(theirs, "stale")
    if theirs in (_I.CANCELED, _I.FAILED):
        return "stale" if (ours, theirs) == (_S.AUTHORIZED, _I.FAILED) else "advance"
    target_rank, our_rank = RANK[_TARGET[theirs]], RANK[ours]
    if target_rank == our_rank:
        return "duplicate"
    return "advance" if target_rank > our_rank else "stale"


def apply_fact(state: PaymentState, fact: IntentFact | RefundFact | CallRefused) -> ApplyResult:
    """Apply one provider fact to a payment; pure and deterministic."""
    check_payment(state.payment)
    match fact:
        case IntentFact():
            return _apply_intent(state, fact)
        case RefundFact():
            return apply_refund(state, fact)
        case CallRefused():
            return _apply_refusal(state, fact)
        case _:
            assert_never(fact)


# -- payment intent ----------------------------------------------------------------------------


def _intent_mismatch(p: Payment, fact: IntentFact) -> str | None:
    if p.provider_payment_id is not None and p.provider_payment_id != fact.provider_payment_id:
        return f"provider payment id {fact.provider_payment_id} is not ours ({p.provider_payment_id})"
    if (fact.amount_minor, fact.currency) != (p.amount_minor, p.currency):
        return f"provider amount {fact.amount_minor} {fact.currency} != ours {p.amount_minor} {p.currency}"
    return None


def _apply_intent(state: PaymentState, fact: IntentFact) -> ApplyResult:
    p = state.payment
    mismatch = _intent_mismatch(p, fact)
    if mismatch is not None:
        return Conflict(mismatch)
    change = Change.of(state)
    if fact.status == _I.PROCESSING:
        _learn_reference(change, fact.provider_payment_id)
        return change.result(Unchanged("pending", "provider is processing"))
    verdict = intent_verdict(p.status, fact.status)
    if verdict in ("conflict", "stale"):
        detail = f"provider says {fact.status}, the payment is {p.status}"
        return Conflict(detail) if verdict == "conflict" else Unchanged("stale", detail)
    _learn_reference(change, fact.provider_payment_id)
    if verdict == "advance":
        problem = _advance(change, fact)
        if problem is not None:
            return Conflict(problem)
    _resolve_operations(change, fact)
    return change.result(Unchanged("duplicate", f"payment already {p.status}"))


def _learn_reference(change: Change, provider_payment_id: str) -> None:
    if change.payment.provider_payment_id is None:
        change.set_payment(provider_payment_id=provider_payment_id)
    authorize = change.first_op(OperationType.AUTHORIZE)
    if authorize is not None and authorize.provider_reference is None:
        change.set_op(replace(authorize, provider_reference=provider_payment_id))


def _advance(change: Change, fact: IntentFact) -> str | None:
    """Move the payment to the fact's status; returns a conflict description or None."""
    match fact.status:
        case _I.REQUIRES_ACTION:
            change.set_payment(status=_S.REQUIRES_ACTION, next_action_url=fact.next_action_url)
            change.emit(events.requires_action(change.payment, _authorize_op(change)))
        case _I.AUTHORIZED:
            _authorize(change, fact.amount_capturable_minor or fact.amount_minor)
        case _I.CAPTURED:
            return _capture(change, fact)
        case _I.CANCELED:
            _cancel(change, fact.cancellation_reason)
        case _I.FAILED:
            code = fact.failure_code or "payment_failed"
            change.set_payment(status=_S.FAILED, failure_code=code, failure_message=fact.failure_message)
            change.emit(events.failed(change.payment, _authorize_op(change)))
        case _I.PROCESSING:
            raise AssertionError("processing never advances")  # handled by the caller
        case _:
            assert_never(fact.status)
    return None


def _authorize_op(change: Change) -> Operation:
    op = change.first_op(OperationType.AUTHORIZE)
    invariant(op is not None, f"payment {change.payment.payment_id} has no authorize operation")
    assert op is not None
    return op


def _authorize(change: Change, authorized_minor: int) -> None:
    if change.payment.status not in BEFORE_AUTHORIZATION:
        return
    change.set_payment(
        status=_S.AUTHORIZED, authorized_minor=authorized_minor, next_action_url=None, failure_code=None
    )
    authorize = change.open_op(OperationType.AUTHORIZE)
    if authorize is not None:
        change.set_op(authorize.succeeded())
    change.emit(events.authorized(change.payment, _authorize_op(change)))


def _capture(change: Change, fact: IntentFact) -> str | None:
    received = fact.amount_received_minor
    if not 0 < received <= fact.amount_minor:
        return f"captured amount {received} out of range"
    capture = change.open_op(OperationType.CAPTURE)
    if capture is not None and capture.amount_minor != received:
        return f"provider captured {received}, our capture asked for {capture.amount_minor}"
    _authorize(change, fact.amount_minor)  # captured without a separate authorization answer
    if capture is not None:
        change.set_op(capture.succeeded())
    change.set_payment(status=_S.CAPTURED, captured_minor=received, active_operation_id=None)
    source = change.ops[capture.operation_id] if capture is not None else _authorize_op(change)
    change.emit(events.captured(change.payment, source))
    return None


def _cancel(change: Change, provider_reason: str | None) -> None:
    cancel = change.open_op(OperationType.CANCEL)
    reason = (cancel.reason if cancel is not None else None) or provider_reason  # the merchant's words first
    if cancel is not None:
        change.set_op(cancel.succeeded())
    change.set_payment(status=_S.CANCELED, active_operation_id=None, next_action_url=None)
    source = change.ops[cancel.operation_id] if cancel is not None else _authorize_op(change)
    change.emit(events.canceled(change.payment, source, reason))


def _resolve_operations(change: Change, fact: IntentFact) -> None:
    """Close the still-open authorize/capture/cancel operations this intent status decides."""
    for op in list(change.ops.values()):
        if op.is_terminal or op.operation_type == OperationType.REFUND:
            continue
        outcome = _operation_outcome(op.operation_type, fact)
        if outcome is None:
            continue
        if outcome == "succeeded":
            change.set_op(op.succeeded())
        else:
            change.set_op(op.failed(outcome))
        if change.payment.active_operation_id == op.operation_id:
            change.set_payment(active_operation_id=None)


_OPERATION_OUTCOMES: Final[dict[tuple[OperationType, IntentStatus], str]] = {
    (OperationType.AUTHORIZE, _I.AUTHORIZED): "succeeded",
    (OperationType.AUTHORIZE, _I.CAPTURED): "succeeded",
    (OperationType.AUTHORIZE, _I.CANCELED): "payment_canceled",
    (OperationType.CAPTURE, _I.CAPTURED): "succeeded",
    (OperationType.CAPTURE, _I.CANCELED): "payment_canceled",
    (OperationType.CAPTURE, _I.FAILED): "payment_canceled",
    (OperationType.CANCEL, _I.CANCELED): "succeeded",
    (OperationType.CANCEL, _I.CAPTURED): "payment_captured",
    (OperationType.CANCEL, _I.FAILED): "payment_failed",
}


def _operation_outcome(operation_type: OperationType, fact: IntentFact) -> str | None:
    """'succeeded', a failure code, or None while the intent's status does not decide the op."""
    if (operation_type, fact.status) == (OperationType.AUTHORIZE, _I.FAILED):
        return fact.failure_code or "payment_failed"
    return _OPERATION_OUTCOMES.get((operation_type, fact.status))


# -- refusals of our calls ---------------------------------------------------------------------


def _apply_refusal(state: PaymentState, fact: CallRefused) -> ApplyResult:
    op = state.operation(fact.operation_id)
    invariant(op is not None, f"refusal for an operation of another payment: {fact.operation_id}")
    assert op is not None
    if op.is_terminal:
        return Unchanged("duplicate", f"operation already {op.status}")
    change = Change.of(state)
    p = state.payment
    failed = op.failed(fact.code, fact.message)
    change.set_op(failed)
    if p.active_operation_id == op.operation_id:
        change.set_payment(active_operation_id=None)
    match op.operation_type:
        case OperationType.AUTHORIZE:
            if p.status not in BEFORE_AUTHORIZATION:
                return Conflict(f"provider refused the authorization of a payment that is {p.status}")
            if fact.provider_payment_id is not None and p.provider_payment_id is None:
                change.set_payment(provider_payment_id=fact.provider_payment_id)
            change.set_payment(status=_S.FAILED, failure_code=fact.code, failure_message=fact.message)
            change.emit(events.failed(change.payment, failed))
        case OperationType.REFUND:
            change.set_payment(pending_refund_minor=p.pending_refund_minor - op.amount_minor)
            change.emit(events.refund_failed(change.payment, failed))
        case OperationType.CAPTURE | OperationType.CANCEL:
            pass  # the payment keeps its status; a refused capture or cancel moves no money
        case _:
            assert_never(op.operation_type)
    return change.result(Unchanged("duplicate", "no change"))
