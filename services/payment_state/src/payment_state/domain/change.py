"""What applying one provider fact gives, and the accumulator the apply functions build it with.

Pure. ``Change`` collects one application (the payment, the operations it changed, the events in
order); ``result`` bumps the version once and checks the payment's invariants on the way out, so an
apply function can return neither an impossible payment nor events without a state change.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from backbone.invariants import invariant

from payment_state.domain import events
from payment_state.domain.model import Operation, OperationType, Payment, PaymentState, check_payment


@dataclass(frozen=True, slots=True)
class Applied:
    """The state changed (payment and/or operations); ``events`` go to the outbox with it."""

    state: PaymentState
    events: tuple[events.OutEvent, ...]


@dataclass(frozen=True, slots=True)
class Unchanged:
    outcome: Literal["stale", "duplicate", "pending"]
    detail: str


@dataclass(frozen=True, slots=True)
class Conflict:
    """The provider contradicts our records: nothing applied, a person has to look."""

    detail: str


ApplyResult = Applied | Unchanged | Conflict


@dataclass
class Change:
    """Accumulates one application: the payment, changed operations and events, in order."""

    payment: Payment
    ops: dict[str, Operation]
    out: list[events.OutEvent] = field(default_factory=list)
    changed: bool = False

    @classmethod
    def of(cls, state: PaymentState) -> Change:
        return cls(state.payment, {o.operation_id: o for o in state.operations})

    def set_payment(self, **fields: object) -> None:
        updated = replace(self.payment, **fields)  # type: ignore[arg-type]
        if updated != self.payment:
            self.payment, self.changed = updated, True

    def set_op(self, op: Operation) -> None:
        if self.ops.get(op.operation_id) != op:
            self.ops[op.operation_id], self.changed = op, True

    def open_op(self, operation_type: OperationType) -> Operation | None:
        return next(
            (o for o in self.ops.values() if o.operation_type == operation_type and not o.is_terminal), None
        )

    def first_op(self, operation_type: OperationType) -> Operation | None:
        return next((o for o in self.ops.values() if o.operation_type == operation_type), None)

    def emit(self, event: events.OutEvent) -> None:
        self.out.append(event)

    def result(self, unchanged: Unchanged) -> ApplyResult:
        if not self.changed:
            invariant(not self.out, "events without a state change")
            return unchanged
        payment = replace(self.payment, version=self.payment.version + 1)
        check_payment(payment)
        return Applied(PaymentState(payment, tuple(self.ops.values())), tuple(self.out))
