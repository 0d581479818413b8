"""Decisions on caller requests (capture, cancel, refund) and the request digest."""

from __future__ import annotations

from dataclasses import replace

import pytest
from payment_state.domain.commands import (
    CancelRequest,
    CaptureRequest,
    CreatePaymentRequest,
    PaymentRequest,
    RefundRequest,
    Rejection,
    decide_cancel,
    decide_capture,
    decide_create,
    decide_refund,
    request_digest,
)
from payment_state.domain.model import (
    CaptureMethod,
    OperationStatus,
    OperationType,
    PaymentState,
    PaymentStatus,
    allowed_actions,
)


def state(status: PaymentStatus, captured: int = 0, refunded: int = 0, pending: int = 0) -> PaymentState:
    created = decide_create(
        CreatePaymentRequest(10_000, "EUR", "tok_visa", CaptureMethod.MANUAL),
        merchant_id="m1",
        payment_id="pay_1",
        operation_id="op_auth",
        provider="simpsp",
        now_ms=1,
    )
    authorized = 0 if status in (PaymentStatus.CREATED, PaymentStatus.REQUIRES_ACTION) else 10_000
    payment = replace(
        created.payment,
        status=status,
        authorized_minor=authorized,
        captured_minor=captured,
        refunded_minor=refunded,
        pending_refund_minor=pending,
        provider_payment_id="pi_1",
    )
    return PaymentState(payment, created.operations)


def rejected(result: PaymentState | Rejection) -> Rejection:
    assert isinstance(result, Rejection), result
    return result


def accepted(result: PaymentState | Rejection) -> PaymentState:
    assert isinstance(result, PaymentState), result
    return result


def test_create_starts_a_pending_authorization() -> None:
    """A new payment is CREATED at version 1 with one PENDING authorize operation for the full amount."""
    created = state(PaymentStatus.CREATED)
    assert created.payment.version == 1
    (op,) = created.operations
    assert (op.operation_type, op.status, op.amount_minor) == (
        OperationType.AUTHORIZE,
        OperationStatus.PENDING,
        10_000,
    )
    assert allowed_actions(created) == []


def test_capture_reserves_the_payment_for_one_operation() -> None:
    """A capture (full by default) adds a PENDING capture, bumps the version and makes the capture the
    active operation: a second capture or a cancel is refused while it is in flight."""
    authorized = state(PaymentStatus.AUTHORIZED)
    assert allowed_actions(authorized) == ["capture", "cancel"]
    after = accepted(decide_capture(authorized, CaptureRequest("pay_1"), "op_c", 5))
    assert after.payment.version == 2 and after.payment.active_operation_id == "op_c"
    assert after.operations[-1].amount_minor == 10_000
    assert allowed_actions(after) == []
    assert rejected(decide_cancel(after, CancelRequest("pay_1"), "op_x", 6)).code == "operation_in_progress"
    assert rejected(decide_capture(after, CaptureRequest("pay_1"), "op_y", 6)).code == "operation_in_progress"


@pytest.mark.parametrize(
    ("request_", "code", "status"),
    [
        (CaptureRequest("pay_1", 10_001, "EUR"), "amount_exceeds_authorized", 422),
        (CaptureRequest("pay_1", 100, "USD"), "currency_mismatch", 422),
    ],
)
def test_capture_refusals(request_: CaptureRequest, code: str, status: int) -> None:
    """More than authorized, or another currency: refused with a code, nothing decided."""
    rejection = rejected(decide_capture(state(PaymentStatus.AUTHORIZED), request_, "op_c", 5))
    assert (rejection.code, rejection.http_status) == (code, status)


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (PaymentStatus.CREATED, "invalid_state"),
        (PaymentStatus.REQUIRES_ACTION, "invalid_state"),
        (PaymentStatus.CANCELED, "invalid_state"),
        (PaymentStatus.FAILED, "invalid_state"),
    ],
)
def test_capture_needs_authorized(status: PaymentStatus, code: str) -> None:
    """Capture is only possible on an AUTHORIZED payment (409 otherwise)."""
    assert rejected(decide_capture(state(status), CaptureRequest("pay_1"), "op_c", 5)).http_status == 409


def test_cancel_rules() -> None:
    """Cancel: refused while the authorization has no outcome (retry later), allowed during 3-D
    Secure and when authorized, refused once captured."""
    assert rejected(decide_cancel(state(PaymentStatus.CREATED), CancelRequest("pay_1"), "op", 1)).code == (
        "authorization_in_progress"
    )
    accepted(decide_cancel(state(PaymentStatus.REQUIRES_ACTION), CancelRequest("pay_1"), "op", 1))
    accepted(decide_cancel(state(PaymentStatus.AUTHORIZED), CancelRequest("pay_1", "why"), "op", 1))
    captured = state(PaymentStatus.CAPTURED, captured=10_000)
    assert rejected(decide_cancel(captured, CancelRequest("pay_1"), "op", 1)).code == "invalid_state"


def test_two_refunds_compete_for_the_same_capacity() -> None:
    """Two refunds of 60 on a capture of 100: the first reserves 60; deciding the second on the new
    state finds 40 left and refuses it (the version race makes the loser decide again like this)."""
    captured = state(PaymentStatus.CAPTURED, captured=100)
    first = accepted(decide_refund(captured, RefundRequest("pay_1", 60, "EUR"), "op_r1", "rf_1", 1))
    assert first.payment.pending_refund_minor == 60 and first.payment.refundable_minor == 40
    second = rejected(decide_refund(first, RefundRequest("pay_1", 60, "EUR"), "op_r2", "rf_2", 1))
    assert (second.code, second.http_status) == ("amount_exceeds_refundable", 422)
    exact = accepted(decide_refund(first, RefundRequest("pay_1", 40, "EUR"), "op_r3", "rf_3", 1))
    assert exact.payment.refundable_minor == 0
    assert "refund" not in allowed_actions(exact)


def test_refund_refusals() -> None:
    """Refunds need a captured payment and its currency."""
    assert rejected(
        decide_refund(state(PaymentStatus.AUTHORIZED), RefundRequest("pay_1", 1, "EUR"), "op", "rf", 1)
    ).code == ("invalid_state")
    captured = state(PaymentStatus.CAPTURED, captured=100)
    assert rejected(decide_refund(captured, RefundRequest("pay_1", 1, "USD"), "op", "rf", 1)).code == (
        "currency_mismatch"
    )
    partially = state(PaymentStatus.PARTIALLY_REFUNDED, captured=100, refunded=30)
    assert accepted(decide_refund(partially, RefundRequest("pay_1", 70, "EUR"), "op", "rf", 1))


def test_digest_binds_the_whole_request() -> None:
    """Same request, same digest; any changed field (amount, currency, payment, kind) changes it."""
    base = RefundRequest("pay_1", 100, "EUR", "damaged")
    assert request_digest(base) == request_digest(RefundRequest("pay_1", 100, "EUR", "damaged"))
    others: list[PaymentRequest] = [
        replace(base, amount_minor=101),
        replace(base, currency="USD"),
        replace(base, payment_id="pay_2"),
        replace(base, reason=None),
        CaptureRequest("pay_1", 100, "EUR"),
    ]
    digests = {request_digest(o) for o in others}
    assert request_digest(base) not in digests and len(digests) == len(others)
    create = CreatePaymentRequest(100, "EUR", "tok", CaptureMethod.MANUAL)
    assert request_digest(create) != request_digest(replace(create, capture_method=CaptureMethod.AUTOMATIC))
