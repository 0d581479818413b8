"""What callers ask for (create, capture, cancel, refund) and the decisions on a payment's state.

Pure. A decision returns the new state (payment with version + 1, plus the new operation) or a
closed ``Rejection`` with an HTTP status and a machine-readable code. The same decisions serve the
HTTP API and the commands topic. ``request_digest`` is the fingerprint of the normalized request
that idempotency keys are bound to; ``StoredResponse`` is what a key recorded.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, replace
from typing import Any, Final, Literal

from backbone.invariants import invariant

from payment_state.domain.model import (
    CaptureMethod,
    Operation,
    OperationType,
    Payment,
    PaymentState,
    PaymentStatus,
    check_payment,
)

RequestKind = Literal["create", "capture", "cancel", "refund"]


@dataclass(frozen=True, slots=True)
class CreatePaymentRequest:
    amount_minor: int
    currency: str
    payment_method_token: str
    capture_method: CaptureMethod
    deposit_reference: str | None = None
    payment_id: str | None = None  # minted by the caller on the commands topic; by us over HTTP


@dataclass(frozen=True, slots=True)
class CaptureRequest:
    payment_id: str
    amount_minor: int | None = None  # None: the whole authorized amount
    currency: str | None = None


@dataclass(frozen=True, slots=True)
class CancelRequest:
    payment_id: str
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class RefundRequest:
    payment_id: str
    amount_minor: int
    currency: str
    reason: str | None = None


PaymentRequest = CreatePaymentRequest | CaptureRequest | CancelRequest | RefundRequest


@dataclass(frozen=True, slots=True)
class Rejection:
    """A request refused with a reason the caller can act on; nothing changed."""

    http_status: int
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """What an idempotency key recorded: the digest of the request it was first used for, and the
    answer given then (``status``/``body`` are None only inside the transaction that claimed it)."""

    request_digest: str
    payment_id: str | None
    status: int | None
    body: dict[str, Any] | None


_KIND: Final[dict[type, RequestKind]] = {
    CreatePaymentRequest: "create",
    CaptureRequest: "capture",
    CancelRequest: "cancel",
    RefundRequest: "refund",
}


def request_kind(request: PaymentRequest) -> RequestKind:
    return _KIND[type(request)]


def request_digest(request: PaymentRequest) -> str:
    """SHA-256 of the normalized request (kind + every field, canonical JSON)."""
    fields = {k: (str(v) if isinstance(v, CaptureMethod) else v) for k, v in asdict(request).items()}
    canonical = json.dumps({"kind": request_kind(request), **fields}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def decide_create(
    request: CreatePaymentRequest,
    *,
    merchant_id: str,
    payment_id: str,
    operation_id: str,
    provider: str,
    now_ms: int,
) -> PaymentState:
    """A new payment and its authorize operation (PENDING: a worker calls the provider)."""
    payment = Payment(
        payment_id=payment_id,
        merchant_id=merchant_id,
        amount_minor=request.amount_minor,
        currency=request.currency,
        capture_method=request.capture_method,
        payment_method_token=request.payment_method_token,
        deposit_reference=request.deposit_reference,
        provider=provider,
    )
    check_payment(payment)
    authorize = Operation(
        operation_id=operation_id,
        payment_id=payment_id,
        operation_type=OperationType.AUTHORIZE,
        amount_minor=request.amount_minor,
        currency=request.currency,
        provider=provider,
        created_at_ms=now_ms,
    )
    return PaymentState(payment, (authorize,))


def _state_rejection(p: Payment, action: str) -> Rejection:
    return Rejection(409, "invalid_state", f"cannot {action} a payment that is {p.status}")


def _in_progress(p: Payment) -> Rejection | None:
    if p.active_operation_id is None:
        return None
    return Rejection(409, "operation_in_progress", f"operation {p.active_operation_id} is in progress")


def _new_operation(
    p: Payment,
    operation_type: OperationType,
    operation_id: str,
    amount_minor: int,
    now_ms: int,
    **extra: str | None,
) -> Operation:
    return Operation(
        operation_id=operation_id,
        payment_id=p.payment_id,
        operation_type=operation_type,
        amount_minor=amount_minor,
        currency=p.currency,
        provider=p.provider,
        created_at_ms=now_ms,
        **extra,  # type: ignore[arg-type]
    )


def _next(state: PaymentState, payment: Payment, op: Operation) -> PaymentState:
    payment = replace(payment, version=state.payment.version + 1)
    check_payment(payment)
    return PaymentState(payment, (*state.operations, op))


def decide_capture(
    state: PaymentState, request: CaptureRequest, operation_id: str, now_ms: int
) -> PaymentState | Rejection:
    p = state.payment
    if p.status != PaymentStatus.AUTHORIZED:
        return _state_rejection(p, "capture")
    busy = _in_progress(p)
    if busy is not None:
        return busy
    if request.currency is not None and request.currency != p.currency:
        return Rejection(422, "currency_mismatch", f"the payment is in {p.currency}")
    amount = p.authorized_minor if request.amount_minor is None else request.amount_minor
    if amount > p.authorized_minor:
        return Rejection(422, "amount_exceeds_authorized", f"at most {p.authorized_minor} can be captured")
    invariant(amount > 0, "capture amount must be positive")
    op = _new_operation(p, OperationType.CAPTURE, operation_id, amount, now_ms)
    return _next(state, replace(p, active_operation_id=operation_id), op)


def decide_cancel(
    state: PaymentState, request: CancelRequest, operation_id: str, now_ms: int
) -> PaymentState | Rejection:
    p = state.payment
    if p.status == PaymentStatus.CREATED:
        return Rejection(
            409, "authorization_in_progress", "the authorization has no outcome yet; retry later"
        )
    if p.status not in (PaymentStatus.REQUIRES_ACTION, PaymentStatus.AUTHORIZED):
        return _state_rejection(p, "cancel")
    busy = _in_progress(p)
    if busy is not None:
        return busy
    op = _new_operation(p, OperationType.CANCEL, operation_id, 0, now_ms, reason=request.reason)
    return _next(state, replace(p, active_operation_id=operation_id), op)


def decide_refund(
    state: PaymentState, request: RefundRequest, operation_id: str, refund_id: str, now_ms: int
) -> PaymentState | Rejection:
    """Reserve refund capacity: ``captured - refunded - pending_refund >= amount``."""
    p = state.payment
    if p.status not in (PaymentStatus.CAPTURED, PaymentStatus.PARTIALLY_REFUNDED):
        return _state_rejection(p, "refund")
    if request.currency != p.currency:
        return Rejection(422, "currency_mismatch", f"the payment is in {p.currency}")
    if request.amount_minor > p.refundable_minor:
        return Rejection(
            422, "amount_exceeds_refundable", f"at most {p.refundable_minor} can be refunded now"
        )
    invariant(request.amount_minor > 0, "refund amount must be positive")
    op = _new_operation(
        p,
        OperationType.REFUND,
        operation_id,
        request.amount_minor,
        now_ms,
        refund_id=refund_id,
        reason=request.reason,
    )
    reserved = replace(p, pending_refund_minor=p.pending_refund_minor + request.amount_minor)
    return _next(state, reserved, op)
