"""An operator's act at a service, and the console's audit entry for it.

Every act and every refusal is audited: who, what, on which target, the outcome (``ok``, ``refused``
by the console or the service, ``failed`` when the service did not answer) and why, with the
service's own words kept beside the operator's reason. The act is made for the operator
(``OperatorApi``), or, for a refund, with the merchant's token (``Payments``): the console never
acts as itself. A refund's payment is asked for only under one of the operator's merchants.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ops_console.application.ports import ConsoleStore, OperatorApi, Payments, Refunded, ServiceError, Session


@dataclass(frozen=True, slots=True)
class Done:
    """The service did it; its answer."""

    answer: Any


@dataclass(frozen=True, slots=True)
class NotDone:
    """The service refused (4xx) or did not answer (5xx): nothing is known to have changed."""

    error: ServiceError


async def record(
    store: ConsoleStore,
    session: Session,
    action: str,
    target: str,
    outcome: str,
    reason: str = "",
    **detail: Any,
) -> None:
    """One audit entry, in the operator's name."""
    await store.audit(session.operator.username, action, target, reason, outcome, detail)


async def act(
    store: ConsoleStore,
    session: Session,
    api: OperatorApi,
    action: str,
    target: str,
    path: str,
    payload: dict[str, Any],
) -> Done | NotDone:
    """``POST path`` at the service for the operator, audited with the payload's reason (or note)."""
    reason = str(payload.get("reason") or payload.get("note") or "")
    try:
        answer = await api.post(session.operator, path, payload)
    except ServiceError as exc:
        await _not_done(store, session, action, target, reason, exc)
        return NotDone(exc)
    await record(store, session, action, target, "ok", reason, answer=answer)
    return Done(answer)


async def refundable(
    store: ConsoleStore, session: Session, payments: Payments | None, merchant: str, payment_id: str
) -> dict[str, Any] | None:
    """The payment, asked for with its merchant's token when the merchant is the operator's; else
    None, audited: another merchant's payment is never even asked for. ``ServiceError`` passes on."""
    payment = None
    if payments is not None and session.operator.sees(merchant):
        payment = await payments.payment(merchant, payment_id)
    if payment is None:
        why = "no such payment under your merchants"
        await record(store, session, "refund", f"payment:{payment_id}", "refused", why)
    return payment


async def refund(
    store: ConsoleStore,
    session: Session,
    payments: Payments,
    merchant: str,
    payment_id: str,
    key: str,
    body: dict[str, Any],
    reason: str,
) -> Refunded | NotDone:
    """payment-state's ``POST /payments/{id}/refunds`` with the merchant's token under ``key``,
    audited with who, why, the amount and the key; a replayed answer is audited as such."""
    target = f"payment:{payment_id}"
    detail = {
        "merchant": merchant,
        "amount_minor": body["amount_minor"],
        "currency": body["currency"],
        "idempotency_key": key,
    }
    try:
        done = await payments.refund(merchant, payment_id, key, body)
    except ServiceError as exc:
        await _not_done(store, session, "refund", target, reason, exc, **detail)
        return NotDone(exc)
    await record(store, session, "refund", target, "ok", reason, replayed=done.replayed, **detail)
    return done


async def _not_done(
    store: ConsoleStore,
    session: Session,
    action: str,
    target: str,
    reason: str,
    exc: ServiceError,
    **detail: Any,
) -> None:
    outcome = "failed" if exc.status >= 500 else "refused"
    said = f"{exc.service}: {exc.detail or exc.error}"
    why = f"{reason} | {said}" if reason else said
    await record(store, session, action, target, outcome, why, service_error=exc.error, **detail)
