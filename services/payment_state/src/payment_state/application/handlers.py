"""The request handlers shared by the HTTP API and the commands topic: idempotency, decide, save.

Each handler works on a store bound to the caller's open transaction (one per HTTP request, the
batch's for a command), so the idempotency key, the payment and its new operation commit together
or not at all.
Idempotency rules (unique ``(merchant, operation type, key)``):
- a new key: execute, store the response with the key;
- the same key and the same normalized request: replay the stored response (errors included);
- the same key and a different request: 422 ``idempotency_key_reused``, nothing changes;
- the same key concurrently: the second insert waits for the first transaction, then replays.
A request that names a payment the caller cannot see gets 404 and leaves no key behind.
Money-moving decisions race on the payment's version: a lost race decides again on fresh state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, assert_never

from backbone.logs import get_logger

from payment_state.application.context import Context
from payment_state.application.ports import Created, PaymentIdTaken, PaymentStore
from payment_state.application.views import error_body, operation_view, payment_view
from payment_state.domain.commands import (
    CancelRequest,
    CaptureRequest,
    CreatePaymentRequest,
    PaymentRequest,
    RefundRequest,
    Rejection,
    StoredResponse,
    decide_cancel,
    decide_capture,
    decide_create,
    decide_refund,
    request_digest,
    request_kind,
)
from payment_state.domain.model import PaymentState

DECIDE_ROUNDS_MAX: Final = 8  # lost version races before giving up (each loser re-reads fresh state)
log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: dict[str, Any]
    replayed: bool = False


class Contention(RuntimeError):
    """A payment kept changing under a decision DECIDE_ROUNDS_MAX times; the request is retryable."""


def rejection_reply(rejection: Rejection) -> Reply:
    return Reply(rejection.http_status, error_body(rejection.code, rejection.message))


def handle(
    store: PaymentStore, ctx: Context, merchant_id: str, idempotency_key: str, request: PaymentRequest
) -> Reply:
    """Run ``request`` for ``merchant_id`` under ``idempotency_key`` in the store's transaction."""
    if isinstance(request, CreatePaymentRequest):
        return _create(store, ctx, merchant_id, idempotency_key, request)
    kind, digest = request_kind(request), request_digest(request)
    stored = store.claim_idempotency_key(merchant_id, kind, idempotency_key, digest, request.payment_id)
    if stored is not None:
        return _replay(stored, digest)
    reply = _operate(store, ctx, merchant_id, request)
    if reply.status == 404:
        store.forget_idempotency_key(merchant_id, kind, idempotency_key)
        return reply
    store.store_response(merchant_id, kind, idempotency_key, request.payment_id, reply.status, reply.body)
    return reply


def _replay(stored: StoredResponse, digest: str) -> Reply:
    if stored.request_digest != digest:
        return rejection_reply(
            Rejection(422, "idempotency_key_reused", "this Idempotency-Key was used for a different request")
        )
    assert stored.status is not None and stored.body is not None  # written in the same transaction
    return Reply(stored.status, stored.body, replayed=True)


def _create(
    store: PaymentStore, ctx: Context, merchant_id: str, key: str, request: CreatePaymentRequest
) -> Reply:
    """Decide (pure), then claim the key and insert payment + operation + answer in one statement."""
    payment_id = request.payment_id or ctx.new_id("pay")
    state = decide_create(
        request,
        merchant_id=merchant_id,
        payment_id=payment_id,
        operation_id=ctx.new_id("op"),
        provider=ctx.provider_for(merchant_id),
        now_ms=ctx.now_ms(),
    )
    digest = request_digest(request)
    reply = Reply(201, {"payment": payment_view(state)})
    outcome = store.create_with_key(key, digest, state, reply.status, reply.body)
    match outcome:
        case Created():
            return reply
        case PaymentIdTaken():
            taken = rejection_reply(Rejection(409, "payment_id_taken", "a payment with this id exists"))
            store.store_response(merchant_id, "create", key, None, taken.status, taken.body)
            return taken
        case StoredResponse():
            return _replay(outcome, digest)
        case _:
            assert_never(outcome)


def _decide(
    ctx: Context, state: PaymentState, request: CaptureRequest | CancelRequest | RefundRequest
) -> PaymentState | Rejection:
    now_ms, operation_id = ctx.now_ms(), ctx.new_id("op")
    match request:
        case CaptureRequest():
            return decide_capture(state, request, operation_id, now_ms)
        case CancelRequest():
            return decide_cancel(state, request, operation_id, now_ms)
        case RefundRequest():
            return decide_refund(state, request, operation_id, ctx.new_id("rf"), now_ms)


def _operate(
    store: PaymentStore,
    ctx: Context,
    merchant_id: str,
    request: CaptureRequest | CancelRequest | RefundRequest,
) -> Reply:
    for _ in range(DECIDE_ROUNDS_MAX):
        state = store.load_state(request.payment_id, merchant_id=merchant_id)
        if state is None:
            return rejection_reply(Rejection(404, "payment_not_found", "no such payment"))
        decision = _decide(ctx, state, request)
        if isinstance(decision, Rejection):
            return rejection_reply(decision)
        if store.save(state, decision):
            new_op = decision.operations[-1]
            return Reply(202, {"payment": payment_view(decision), "operation": operation_view(new_op)})
        log.info("decision.lost_version_race", payment_id=request.payment_id, version=state.payment.version)
    raise Contention(f"payment {request.payment_id} kept changing; retry")
