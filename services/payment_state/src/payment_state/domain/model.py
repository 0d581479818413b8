"""The payment aggregate and its operations: states, values and the invariants they keep.

Pure: standard library and the backbone's pure core only. A payment is the business intent (one
amount, one currency, one merchant); each attempt to move money at the provider is a separate
operation (authorize, capture, cancel, refund) with its own id, which is also the idempotency key
sent to the provider.

Invariants (checked by ``check_payment`` on every state the domain produces, and by the database):
- ``0 < amount``; ``captured <= authorized <= amount``;
- ``refunded + pending_refund <= captured`` (confirmed plus in-flight refunds never exceed captured);
- the status agrees with the amounts (REFUNDED means everything captured was refunded, ...);
- at most one capture or cancel is in flight (``active_operation_id``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Final

from backbone.invariants import invariant


class PaymentStatus(StrEnum):
    CREATED = "CREATED"
    REQUIRES_ACTION = "REQUIRES_ACTION"
    AUTHORIZED = "AUTHORIZED"
    CAPTURED = "CAPTURED"
    PARTIALLY_REFUNDED = "PARTIALLY_REFUNDED"
    REFUNDED = "REFUNDED"
    FAILED = "FAILED"
    CANCELED = "CANCELED"


class OperationType(StrEnum):
    AUTHORIZE = "authorize"
    CAPTURE = "capture"
    CANCEL = "cancel"
    REFUND = "refund"


class OperationStatus(StrEnum):
    PENDING = "PENDING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    UNKNOWN = "UNKNOWN"


class CaptureMethod(StrEnum):
    MANUAL = "manual"
    AUTOMATIC = "automatic"


# The forward order of the happy path; FAILED and CANCELED are terminal side exits.
RANK: Final[dict[PaymentStatus, int]] = {
    PaymentStatus.CREATED: 0,
    PaymentStatus.REQUIRES_ACTION: 1,
    PaymentStatus.AUTHORIZED: 2,
    PaymentStatus.CAPTURED: 3,
    PaymentStatus.PARTIALLY_REFUNDED: 4,
    PaymentStatus.REFUNDED: 5,
}
BEFORE_AUTHORIZATION: Final = frozenset({PaymentStatus.CREATED, PaymentStatus.REQUIRES_ACTION})
UNCAPTURED: Final = BEFORE_AUTHORIZATION | {PaymentStatus.AUTHORIZED}
CAPTURED_OR_LATER: Final = frozenset(
    {PaymentStatus.CAPTURED, PaymentStatus.PARTIALLY_REFUNDED, PaymentStatus.REFUNDED}
)
TERMINAL_OPERATION: Final = frozenset({OperationStatus.SUCCEEDED, OperationStatus.FAILED})


@dataclass(frozen=True, slots=True)
class Payment:
    payment_id: str
    merchant_id: str
    amount_minor: int
    currency: str
    capture_method: CaptureMethod
    payment_method_token: str
    deposit_reference: str | None
    provider: str
    status: PaymentStatus = PaymentStatus.CREATED
    provider_payment_id: str | None = None
    authorized_minor: int = 0
    captured_minor: int = 0
    refunded_minor: int = 0
    pending_refund_minor: int = 0
    active_operation_id: str | None = None
    next_action_url: str | None = None
    failure_code: str | None = None
    failure_message: str | None = None
    version: int = 1

    @property
    def refundable_minor(self) -> int:
        return self.captured_minor - self.refunded_minor - self.pending_refund_minor


@dataclass(frozen=True, slots=True)
class Operation:
    operation_id: str
    payment_id: str
    operation_type: OperationType
    amount_minor: int
    currency: str
    provider: str
    status: OperationStatus = OperationStatus.PENDING
    refund_id: str | None = None
    provider_reference: str | None = None
    reason: str | None = None
    attempts: int = 0
    call_in_flight: bool = False
    unknown_reason: str | None = None
    failure_code: str | None = None
    failure_message: str | None = None
    created_at_ms: int = 0

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_OPERATION

    def succeeded(self, provider_reference: str | None = None) -> Operation:
        invariant(not self.is_terminal, f"operation {self.operation_id} is already {self.status}")
        return replace(
            self,
            status=OperationStatus.SUCCEEDED,
            provider_reference=provider_reference or self.provider_reference,
            unknown_reason=None,
        )

    def failed(self, code: str, message: str | None = None) -> Operation:
        invariant(not self.is_terminal, f"operation {self.operation_id} is already {self.status}")
        return replace(
            self,
            status=OperationStatus.FAILED,
            failure_code=code,
            failure_message=message,
            unknown_reason=None,
        )


@dataclass(frozen=True, slots=True)
class PaymentState:
    """A payment with all its operations: what the domain decides on."""

    payment: Payment
    operations: tuple[Operation, ...]

    def operation(self, operation_id: str) -> Operation | None:
        return next((op for op in self.operations if op.operation_id == operation_id), None)

    def open_operation(self, operation_type: OperationType) -> Operation | None:
        """The not yet resolved operation of a type (authorize, capture, cancel: at most one each)."""
        return next(
            (o for o in self.operations if o.operation_type == operation_type and not o.is_terminal), None
        )

    def first(self, operation_type: OperationType) -> Operation | None:
        return next((o for o in self.operations if o.operation_type == operation_type), None)

    def with_operation(self, updated: Operation) -> PaymentState:
        """Replace the operation with the same id, or append a new one."""
        ops = tuple(updated if o.operation_id == updated.operation_id else o for o in self.operations)
        if self.operation(updated.operation_id) is None:
            ops = (*ops, updated)
        return PaymentState(self.payment, ops)

    def with_payment(self, payment: Payment) -> PaymentState:
        return PaymentState(payment, self.operations)


def allowed_actions(state: PaymentState) -> list[str]:
    """What the merchant may ask for next (GET /payments/{id}); the decide functions agree."""
    p = state.payment
    actions = []
    if p.active_operation_id is None:
        if p.status == PaymentStatus.AUTHORIZED:
            actions.append("capture")
        if p.status in (PaymentStatus.REQUIRES_ACTION, PaymentStatus.AUTHORIZED):
            actions.append("cancel")
    if p.status in (PaymentStatus.CAPTURED, PaymentStatus.PARTIALLY_REFUNDED) and p.refundable_minor > 0:
        actions.append("refund")
    return actions


def check_payment(p: Payment) -> None:
    """Raise InvariantViolation unless ``p`` is a possible payment (see the module docstring)."""
    invariant(p.amount_minor > 0, "amount must be positive")
    invariant(
        0 <= p.captured_minor <= p.authorized_minor <= p.amount_minor,
        f"{p.payment_id}: need 0 <= captured <= authorized <= amount",
    )
    invariant(
        p.refunded_minor >= 0 and p.pending_refund_minor >= 0, f"{p.payment_id}: negative refund amounts"
    )
    invariant(
        p.refunded_minor + p.pending_refund_minor <= p.captured_minor,
        f"{p.payment_id}: refunded + pending refunds exceed captured",
    )
    invariant(p.version >= 1, "version starts at 1")
    _check_status_amounts(p)


def _check_status_amounts(p: Payment) -> None:
    s = p.status
    if s in BEFORE_AUTHORIZATION:
        invariant(p.authorized_minor == 0, f"{p.payment_id}: {s} with an authorized amount")
    if s in CAPTURED_OR_LATER:
        invariant(p.captured_minor > 0, f"{p.payment_id}: {s} without a captured amount")
    else:
        invariant(p.captured_minor == 0 and p.refunded_minor == 0, f"{p.payment_id}: {s} with money captured")
    if s == PaymentStatus.CAPTURED:
        invariant(p.refunded_minor == 0, f"{p.payment_id}: CAPTURED with refunds")
    if s == PaymentStatus.PARTIALLY_REFUNDED:
        invariant(0 < p.refunded_minor < p.captured_minor, f"{p.payment_id}: bad partial refund amounts")
    if s == PaymentStatus.REFUNDED:
        invariant(p.refunded_minor == p.captured_minor, f"{p.payment_id}: REFUNDED but not all refunded")
