"""The provider call each operation stands for, and an operation claimed with its call marked in
flight: what the operation executor sends (``application.executor``)."""

from __future__ import annotations

from dataclasses import dataclass

from backbone.invariants import invariant

from payment_state.application.ports import (
    AuthorizeCall,
    CancelCall,
    CaptureCall,
    ProviderCall,
    RefundCall,
)
from payment_state.domain.model import Operation, OperationType, PaymentState


def build_call(state: PaymentState, op: Operation) -> ProviderCall:
    """The provider call an operation stands for (the same every time it is sent)."""
    p = state.payment
    if op.operation_type == OperationType.AUTHORIZE:
        return AuthorizeCall(
            op.operation_id, p.payment_id, p.merchant_id, op.amount_minor, op.currency,
            p.payment_method_token, str(p.capture_method),
        )  # fmt: skip  # packed: a few items a line read better than one each
    invariant(p.provider_payment_id is not None, f"{op.operation_type} before the provider knew the payment")
    assert p.provider_payment_id is not None
    match op.operation_type:
        case OperationType.CAPTURE:
            return CaptureCall(op.operation_id, p.payment_id, p.provider_payment_id, op.amount_minor)
        case OperationType.CANCEL:
            return CancelCall(op.operation_id, p.payment_id, p.provider_payment_id, op.reason)
        case OperationType.REFUND:
            return RefundCall(
                op.operation_id, p.payment_id, p.provider_payment_id, op.amount_minor, op.currency, op.reason
            )
        case _:
            raise AssertionError(f"unexpected operation type {op.operation_type}")


@dataclass(frozen=True)
class Started:
    """A claimed operation whose call was marked in flight in the claim's transaction."""

    state: PaymentState
    op: Operation
    call: ProviderCall


Work = Operation | Started  # claimed as it is, or with its call marked in flight


def provider_id_known(state: PaymentState, op: Operation) -> bool:
    """Whether the provider's id of what ``op`` creates is known (then a retrieve is exact)."""
    if op.operation_type == OperationType.AUTHORIZE:
        return state.payment.provider_payment_id is not None
    if op.operation_type == OperationType.REFUND:
        return op.provider_reference is not None
    return True  # capture and cancel act on a payment intent whose id we have
