"""The inbound consumer's handler: commands (payments.commands), verified provider webhooks
(psp.provider-events) and approved repairs (recon.repair-commands), applied in the batch's
transaction with its dedup rows.

- A command goes through exactly the HTTP API's handlers and idempotency rules; a command the
  request rules refuse (a bad amount, a missing key; card data never gets here) changes nothing and
  is refused (``Refuse``): dead-lettered at once with its code, where operators see it (a command
  has no reply channel; the caller sees the payment through GET). A refusal that depends on the
  payment's state (409/422) is recorded under its key, as over HTTP.
- A webhook is parsed by its provider's parser and goes through ``apply_provider_fact``; a body
  that breaks the provider contract, an unknown provider or an unverified signature is refused:
  dead-lettered at once for a person (no retry can fix it; nothing is dropped silently).
- A repair (``ExecuteRepair``) addressed to payment-state is recorded once per repair id for the
  worker to execute, or refused at once with its ``RepairOutcome`` (``application/repairs.py``);
  one addressed to another service is ignored. No PSP call is made in this transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Final

from backbone.consumer.messages import BatchHandler, InboundEvent, Refuse, UnitOfWork
from backbone.logs import get_logger
from backbone.money import AmountLimit

from payment_state.application import metrics
from payment_state.application.context import Context
from payment_state.application.handlers import handle
from payment_state.application.payouts import apply_payout_provider_fact, create_payout
from payment_state.application.ports import Ignored, PaymentStore, WebhookParser
from payment_state.application.provider_facts import apply_provider_fact
from payment_state.application.repairs import receive_repair
from payment_state.domain.commands import PaymentRequest, Rejection
from payment_state.domain.payouts import PayoutFact
from payment_state.domain.validation import (
    check_idempotency_key,
    parse_cancel,
    parse_capture,
    parse_create,
    parse_create_payout,
    parse_refund,
    valid_payment_id,
)

log = get_logger(__name__)
COMMAND_TYPES: Final = frozenset({"CreatePayment", "CapturePayment", "CancelPayment", "RefundPayment"})
PAYOUT_COMMAND: Final = "CreatePayout"
PAYOUT_PRODUCER: Final = "mt5_credit"  # the one service that debits MT5 before a payout is asked


class UnusableWebhook(Refuse):
    """A provider event payment-state cannot act on safely (dead-lettered at once)."""


def make_handler(
    ctx: Context, parsers: Mapping[str, WebhookParser], store_for: Callable[[UnitOfWork], PaymentStore]
) -> BatchHandler:
    """The batch handler; ``store_for`` opens the store on the batch's unit of work (its connection
    and outbox: the batch's transaction)."""

    def handle_batch(uow: UnitOfWork, events: Sequence[InboundEvent]) -> None:
        store = store_for(uow)
        for event in events:
            if event.event_type == "ProviderEventReceived":
                _provider_event(store, ctx, parsers, event)
            elif event.event_type in COMMAND_TYPES:
                _command(store, ctx, event)
            elif event.event_type == PAYOUT_COMMAND:
                _payout_command(store, ctx, event)
            elif event.event_type == "ExecuteRepair":
                receive_repair(store, event)
            else:
                raise ValueError(f"payment-state does not handle {event.event_type}")

    return handle_batch


def _provider_event(
    store: PaymentStore, ctx: Context, parsers: Mapping[str, WebhookParser], event: InboundEvent
) -> None:
    body = event.event.body
    if body["signature_verified"] is not True:
        raise UnusableWebhook("a provider event whose signature was not verified", event.event_id)
    provider = body["provider"]
    if provider not in ctx.providers or provider not in parsers:
        raise UnusableWebhook(f"no webhook parser for provider {provider!r}", event.event_id)
    ctx = ctx.for_provider(provider)  # the fact is recorded, deduplicated and located under its provider
    try:
        fact = parsers[provider](bytes(body["raw_body"]))
    except ValueError as exc:  # the parser's "breaks the contract"
        raise UnusableWebhook(str(exc), event.event_id) from exc
    provider_event_id = str(body["provider_event_id"])
    if isinstance(fact, Ignored):
        store.record_fact(
            provider=provider, provider_event_id=provider_event_id, source="webhook",
            fact_type=fact.provider_event_type[:100], payment_id=None, operation_id=None, outcome="ignored",
            causation_id=event.event_id,
        )  # fmt: skip  # packed: a few items a line read better than one each
        return
    if isinstance(fact, PayoutFact):
        outcome = apply_payout_provider_fact(
            store,
            ctx,
            fact,
            source="webhook",
            provider_event_id=provider_event_id,
            causation_id=event.event_id,
        )
    else:
        outcome = apply_provider_fact(
            store,
            ctx,
            fact,
            source="webhook",
            provider_event_id=provider_event_id,
            causation_id=event.event_id,
        )
    log.info(
        "webhook.applied",
        provider_event_id=provider_event_id,
        provider_event_type=body["provider_event_type"],
        outcome=outcome.outcome,
        payment_id=outcome.payment_id,
    )


def _command_request(event: InboundEvent, limit: AmountLimit) -> PaymentRequest | Rejection:
    body: dict[str, Any] = event.event.body
    payment_id = event.event.envelope.payment_id
    if not valid_payment_id(payment_id):
        return Rejection(400, "invalid_payment_id", "payment_id must be 1-64 of [A-Za-z0-9_-]")
    fields = {k: v for k, v in body.items() if k not in ("envelope", "merchant_id", "idempotency_key")}
    match event.event_type:
        case "CreatePayment":
            parsed = parse_create(fields, limit=limit)
            if isinstance(parsed, Rejection):
                return parsed
            return replace(parsed, payment_id=payment_id)
        case "CapturePayment":
            return parse_capture(payment_id, fields, limit=limit)
        case "CancelPayment":
            return parse_cancel(payment_id, fields)
        case _:
            return parse_refund(payment_id, fields, limit=limit)


def _command(store: PaymentStore, ctx: Context, event: InboundEvent) -> None:
    body = event.event.body
    merchant_id, key = str(body["merchant_id"]), str(body["idempotency_key"])
    request = check_idempotency_key(key) or _command_request(event, ctx.amount_limit)
    if isinstance(request, Rejection):
        metrics.COMMANDS.labels(event.event_type, str(request.http_status)).inc()
        raise Refuse(f"{request.code}: {request.message}", event.event_id)
    reply = handle(store, ctx, merchant_id, key, request)
    metrics.COMMANDS.labels(event.event_type, str(reply.status)).inc()
    error = reply.body.get("error")
    log.info(
        "command.handled",
        event_id=event.event_id,
        command=event.event_type,
        payment_id=event.event.envelope.payment_id,
        status=reply.status,
        replayed=reply.replayed,
        code=error["code"] if isinstance(error, dict) else None,
    )


def _payout_command(store: PaymentStore, ctx: Context, event: InboundEvent) -> None:
    """``CreatePayout`` (from mt5-credit, keyed by the withdrawal id): one payout per withdrawal. A
    refusal (bad fields, another provider, the withdrawal id reused for another request) changes
    nothing and is dead-lettered with its code: recorded where operators see it."""
    producer = event.event.envelope.producer
    if producer != PAYOUT_PRODUCER:  # the topic's ACL is the control; this says so when it fails
        reason = (
            f"producer_not_allowed: CreatePayout is accepted from {PAYOUT_PRODUCER} only, not {producer!r}"
        )
        raise Refuse(reason, event.event_id)
    body = event.event.body
    merchant_id, key = str(body["merchant_id"]), str(body["idempotency_key"])
    fields = {k: v for k, v in body.items() if k not in ("envelope", "merchant_id", "idempotency_key")}
    request = check_idempotency_key(key) or parse_create_payout(
        event.event.envelope.payment_id, fields, limit=ctx.amount_limit
    )
    result = (
        request if isinstance(request, Rejection) else create_payout(store, ctx, merchant_id, key, request)
    )
    if isinstance(result, Rejection):
        metrics.COMMANDS.labels(PAYOUT_COMMAND, str(result.http_status)).inc()
        log.warning("payout_command.refused", event_id=event.event_id, code=result.code,
                    withdrawal_id=event.event.envelope.payment_id)  # fmt: skip  # aligned under its bracket
        raise Refuse(f"{result.code}: {result.message}", event.event_id)
    metrics.COMMANDS.labels(PAYOUT_COMMAND, "202").inc()
    log.info(
        "payout_command.handled",
        event_id=event.event_id,
        withdrawal_id=result.payout.withdrawal_id,
        operation_id=result.operation.operation_id,
        status=str(result.payout.status),
    )
