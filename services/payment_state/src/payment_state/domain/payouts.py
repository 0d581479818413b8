"""The payout of a withdrawal and its one operation, and the one function that applies what the PSP
says about it (the create's answer, a lookup, a ``payout.*`` webhook).

Pure. Invariants (``check_payout`` on every state this module produces; the database too):
- one payout per withdrawal, one operation per payout (its id is the PSP's idempotency key);
- the status only moves forward: ``PENDING → SUBMITTED → PAID → RETURNED``, ``PENDING | SUBMITTED →
  FAILED``; FAILED needs definite proof (a refusal or a failed payout), never a silence;
- a payout the PSP knows has its provider payout id, and it never changes;
- each of ``PayoutPaid``, ``PayoutFailed``, ``PayoutReturned`` is produced by the transition into its
  status only, so at most once per payout (a return we learn of before the payment out produces
  both ``PayoutPaid`` and ``PayoutReturned``: the books need both legs).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Final, assert_never

from backbone.invariants import invariant

from payment_state.domain.events import OutEvent
from payment_state.domain.model import TERMINAL_OPERATION, OperationStatus


class PayoutStatus(StrEnum):
    PENDING = "PENDING"
    SUBMITTED = "SUBMITTED"
    PAID = "PAID"
    FAILED = "FAILED"
    RETURNED = "RETURNED"


class PspPayoutStatus(StrEnum):
    """The PSP's payout status, in our words (simpsp's are the same)."""

    PENDING = "pending"
    PAID = "paid"
    FAILED = "failed"
    RETURNED = "returned"


RANK: Final[dict[PayoutStatus, int]] = {
    PayoutStatus.PENDING: 0,
    PayoutStatus.SUBMITTED: 1,
    PayoutStatus.PAID: 2,
    PayoutStatus.RETURNED: 3,
}
PAYOUT_OPERATION_TYPE: Final = "payout"


@dataclass(frozen=True, slots=True)
class Payout:
    withdrawal_id: str
    merchant_id: str
    provider: str
    amount_minor: int
    currency: str
    destination_token: str
    source_payment_id: str
    mt5_login: int
    mt5_debit_id: int
    request_digest: str
    status: PayoutStatus = PayoutStatus.PENDING
    provider_payout_id: str | None = None
    failure_code: str | None = None
    failure_message: str | None = None
    version: int = 1


@dataclass(frozen=True, slots=True)
class PayoutOperation:
    """The payout's operation; the executor's bookkeeping fields (attempts, call in flight, unknown
    reason) are the store's, read here for the recovery rules (``domain.recovery``)."""

    operation_id: str
    withdrawal_id: str
    status: OperationStatus = OperationStatus.PENDING
    attempts: int = 0
    call_in_flight: bool = False
    unknown_reason: str | None = None
    created_at_ms: int = 0

    @property
    def operation_type(self) -> str:
        return PAYOUT_OPERATION_TYPE

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_OPERATION


@dataclass(frozen=True, slots=True)
class PayoutState:
    payout: Payout
    operation: PayoutOperation


@dataclass(frozen=True, slots=True)
class PayoutFact:
    """A snapshot of the PSP's payout object."""

    provider_payout_id: str
    status: PspPayoutStatus
    amount_minor: int
    currency: str
    reference: str | None  # our withdrawal id, as we gave it to the PSP
    failure_code: str | None = None
    failure_message: str | None = None


@dataclass(frozen=True, slots=True)
class PayoutRefused:
    """The PSP definitely refused our create (a definite 4xx): no payout exists and none will."""

    operation_id: str
    code: str
    message: str | None = None


PayoutProviderFact = PayoutFact | PayoutRefused


def payout_fact_type(fact: PayoutProviderFact) -> str:
    """A short label for the audit table."""
    match fact:
        case PayoutFact(status=status):
            return f"payout.{status}"
        case PayoutRefused():
            return "payout.call_refused"
        case _:
            assert_never(fact)


def check_payout(state: PayoutState) -> PayoutState:
    p, op = state.payout, state.operation
    invariant(p.amount_minor > 0, "payout amount > 0")
    invariant(op.withdrawal_id == p.withdrawal_id, "the operation is the payout's")
    invariant(p.status in (PayoutStatus.PENDING, PayoutStatus.FAILED) or p.provider_payout_id is not None,
              "a payout the PSP has carries its id")  # fmt: skip  # continuation aligned under its bracket
    resolved = p.status in (PayoutStatus.PAID, PayoutStatus.FAILED, PayoutStatus.RETURNED)
    invariant(resolved == op.is_terminal, f"payout {p.status} with operation {op.status}")
    return state


# -- the apply function ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PayoutApplied:
    state: PayoutState
    events: tuple[OutEvent, ...]


@dataclass(frozen=True, slots=True)
class PayoutUnchanged:
    outcome: str  # stale | duplicate | pending
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class PayoutContradicted:
    """The PSP says something our records cannot take (another amount, paid after failed): nothing
    changes, a person looks."""

    detail: str


PayoutChange = PayoutApplied | PayoutUnchanged | PayoutContradicted


def apply_payout_fact(state: PayoutState, fact: PayoutProviderFact) -> PayoutChange:
    """Judge a fact against our payout; forward only, each outcome announced once."""
    check_payout(state)
    match fact:
        case PayoutRefused():
            return _refused(state, fact)
        case PayoutFact():
            mismatch = _mismatch(state.payout, fact)
            if mismatch is not None:
                return PayoutContradicted(mismatch)
            return _snapshot(state, fact)
        case _:
            assert_never(fact)


def _mismatch(p: Payout, fact: PayoutFact) -> str | None:
    if p.provider_payout_id is not None and fact.provider_payout_id != p.provider_payout_id:
        return f"PSP payout {fact.provider_payout_id} is not ours ({p.provider_payout_id})"
    if fact.reference is not None and fact.reference != p.withdrawal_id:
        return (
            f"PSP payout {fact.provider_payout_id} carries reference {fact.reference}, not {p.withdrawal_id}"
        )
    if (fact.amount_minor, fact.currency) != (p.amount_minor, p.currency):
        return (
            f"PSP payout {fact.provider_payout_id} is {fact.amount_minor} {fact.currency},"
            f" ours {p.amount_minor} {p.currency}"
        )
    return None


def _refused(state: PayoutState, fact: PayoutRefused) -> PayoutChange:
    p = state.payout
    if p.status == PayoutStatus.FAILED:
        return PayoutUnchanged("duplicate", "refusal of a failed payout")
    if p.status != PayoutStatus.PENDING:
        # The PSP has a payout under our key: a refusal of the same key cannot be about it.
        return PayoutContradicted(
            f"create refused ({fact.code}) but the PSP has payout {p.provider_payout_id}"
        )
    failed = replace(p, status=PayoutStatus.FAILED, failure_code=fact.code, failure_message=fact.message)
    return _moved(state, failed, OperationStatus.FAILED, (PayoutStatus.FAILED,))


def _snapshot(state: PayoutState, fact: PayoutFact) -> PayoutChange:
    p = state.payout
    ours, theirs = p.status, _ours(fact.status)
    known = replace(p, provider_payout_id=fact.provider_payout_id)
    if ours == theirs:
        return PayoutUnchanged(
            "pending" if ours == PayoutStatus.SUBMITTED else "duplicate", f"already {ours}"
        )
    if ours == PayoutStatus.FAILED or (
        theirs == PayoutStatus.FAILED and ours in (PayoutStatus.PAID, PayoutStatus.RETURNED)
    ):
        return PayoutContradicted(f"PSP says {fact.status}, we hold the payout {ours}")
    if theirs == PayoutStatus.FAILED:
        failed = replace(
            known, status=theirs, failure_code=fact.failure_code, failure_message=fact.failure_message
        )
        return _moved(state, failed, OperationStatus.FAILED, (PayoutStatus.FAILED,))
    if RANK[theirs] < RANK[ours]:
        return PayoutUnchanged("stale", f"PSP {fact.status} after we hold {ours}")
    if theirs == PayoutStatus.SUBMITTED:
        return _moved(state, replace(known, status=theirs), OperationStatus.PENDING, ())
    announced = tuple(
        s for s in (PayoutStatus.PAID, PayoutStatus.RETURNED) if RANK[ours] < RANK[s] <= RANK[theirs]
    )
    after = replace(
        known, status=theirs, failure_code=fact.failure_code if theirs == PayoutStatus.RETURNED else None
    )
    return _moved(state, after, OperationStatus.SUCCEEDED, announced)


def _ours(status: PspPayoutStatus) -> PayoutStatus:
    match status:
        case PspPayoutStatus.PENDING:
            return PayoutStatus.SUBMITTED
        case PspPayoutStatus.PAID:
            return PayoutStatus.PAID
        case PspPayoutStatus.FAILED:
            return PayoutStatus.FAILED
        case PspPayoutStatus.RETURNED:
            return PayoutStatus.RETURNED
        case _:
            assert_never(status)


def _moved(
    state: PayoutState, after: Payout, op_status: OperationStatus, announced: tuple[PayoutStatus, ...]
) -> PayoutApplied:
    op = state.operation
    if not op.is_terminal:
        # A fact ends the unknown: the PSP has (or definitely has not) our payout.
        op = replace(op, status=op_status, unknown_reason=None)
    new = check_payout(PayoutState(replace(after, version=state.payout.version + 1), op))
    return PayoutApplied(new, tuple(payout_event(new, s) for s in announced))


# -- events ------------------------------------------------------------------------------------------


def payout_event(state: PayoutState, status: PayoutStatus) -> OutEvent:
    """``PayoutPaid``, ``PayoutFailed`` or ``PayoutReturned`` (schemas/events/Payout*/v1.avsc)."""
    p = state.payout
    body: dict[str, Any] = {
        "merchant_id": p.merchant_id,
        "withdrawal_id": p.withdrawal_id,
        "operation_id": state.operation.operation_id,
        "provider": p.provider,
        "provider_payout_id": p.provider_payout_id,
        "amount_minor": p.amount_minor,
        "currency": p.currency,
    }
    match status:
        case PayoutStatus.PAID:
            return OutEvent("PayoutPaid", body)
        case PayoutStatus.FAILED:
            body["failure_code"] = p.failure_code or "payout_failed"
            body["failure_message"] = p.failure_message
            return OutEvent("PayoutFailed", body)
        case PayoutStatus.RETURNED:
            body["failure_code"] = p.failure_code
            return OutEvent("PayoutReturned", body)
        case _:
            raise AssertionError(f"no event for payout status {status}")


def payout_needs_attention(state: PayoutState, kind: str, detail: str) -> OutEvent:
    """A case about a payout (``PaymentNeedsAttention``, operation type ``payout``)."""
    p, op = state.payout, state.operation
    body: dict[str, Any] = {
        "merchant_id": p.merchant_id,
        "provider": p.provider,
        "kind": kind,
        "detail": detail[:2000],
        "operation_id": op.operation_id,
        "operation_type": PAYOUT_OPERATION_TYPE,
        "operation_status": op.status.value,
        "attempts": op.attempts,
        "operation_started_at_ms": op.created_at_ms or None,
    }
    return OutEvent("PaymentNeedsAttention", body)
