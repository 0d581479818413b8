"""From a domain decision to what one transaction writes and answers (``Effect``), pure.

An ``Effect`` is the complete result of one API write: the HTTP status and JSON body (stored with the
idempotency key, replayed byte for byte), the rows to save, the balance transactions (the settlement
report's source) and the webhook events to queue. Building it is pure; ``service`` writes it in one
transaction.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Literal

from psp_sim.domain import intents as domain
from psp_sim.domain import payouts
from psp_sim.domain.fees import FeeSchedule, charge_amounts, dispute_amounts, refund_amounts
from psp_sim.domain.intents import EventType, Intent, Refund
from psp_sim.domain.payouts import Payout, PayoutEventType
from psp_sim.domain.reports import BalanceTxn
from psp_sim.domain.wire import (
    Dispute,
    decline_json,
    dispute_json,
    error_json,
    intent_json,
    payout_json,
    refund_json,
)


@dataclass(frozen=True, slots=True)
class EventOut:
    type: EventType | PayoutEventType
    object_id: str
    object_json: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Effect:
    status: int
    body: dict[str, Any]
    intent: Intent | None = None
    refund: Refund | None = None
    dispute: Dispute | None = None
    payout: Payout | None = None
    balance: tuple[BalanceTxn, ...] = ()
    events: tuple[EventOut, ...] = field(default=())

    @property
    def applied(self) -> bool:
        return any(x is not None for x in (self.intent, self.refund, self.dispute, self.payout))


def business_date(created_s: int) -> dt.date:
    """The settlement day of a money movement: its UTC calendar date."""
    return dt.datetime.fromtimestamp(created_s, dt.UTC).date()


def refused(decision: domain.Refused) -> Effect:
    return Effect(decision.status, error_json("invalid_request_error", decision.code, decision.message))


def _charge_txn(
    before: Intent | None, after: Intent, txn_id: str, fees: FeeSchedule, now_s: int
) -> tuple[BalanceTxn, ...]:
    captured = domain.newly_captured_minor(before, after)
    if captured == 0:
        return ()
    a = charge_amounts(captured, fees)
    source = after.latest_charge or after.id
    return (
        BalanceTxn(
            txn_id,
            "charge",
            source,
            after.id,
            after.reference,
            None,
            after.currency,
            a.gross_minor,
            a.fee_minor,
            a.net_minor,
            now_s,
        ),
    )


def intent_effect(
    before: Intent | None, decision: domain.IntentDecision, *, txn_id: str, fees: FeeSchedule, now_s: int
) -> Effect:
    match decision:
        case domain.Applied(intent=after, events=types):
            body = intent_json(after)
            events = tuple(EventOut(t, after.id, body) for t in types)
            balance = _charge_txn(before, after, txn_id, fees, now_s)
            return Effect(200, body, intent=after, balance=balance, events=events)
        case domain.Declined(intent=after, error=error, events=types):
            events = tuple(EventOut(t, after.id, intent_json(after)) for t in types)
            return Effect(402, decline_json(after, error), intent=after, events=events)
        case domain.Refused():
            return refused(decision)


def refund_effect(decision: domain.RefundDecision, *, txn_id: str, now_s: int) -> Effect:
    match decision:
        case domain.RefundApplied(intent=intent, refund=refund, events=types):
            body = refund_json(refund)
            events = tuple(
                EventOut(t, intent.id, intent_json(intent))
                if t == "charge.refunded"
                else EventOut(t, refund.id, body)
                for t in types
            )
            balance: tuple[BalanceTxn, ...] = ()
            if refund.status == "succeeded":
                a = refund_amounts(refund.amount_minor)
                balance = (
                    BalanceTxn(
                        txn_id,
                        "refund",
                        refund.id,
                        intent.id,
                        intent.reference,
                        refund.reference,
                        refund.currency,
                        a.gross_minor,
                        a.fee_minor,
                        a.net_minor,
                        now_s,
                    ),
                )
            return Effect(200, body, intent=intent, refund=refund, balance=balance, events=events)
        case domain.Refused():
            return refused(decision)


def dispute_effect(
    before: Intent, after: Intent, *, dispute_id: str, txn_id: str, reason: str, fees: FeeSchedule, now_s: int
) -> Effect:
    amount = after.amount_disputed_minor - before.amount_disputed_minor
    dispute = Dispute(
        dispute_id, after.id, after.reference, amount, after.currency, reason, "needs_response", now_s
    )
    a = dispute_amounts(amount, fees)
    txn = BalanceTxn(
        txn_id,
        "dispute",
        dispute_id,
        after.id,
        after.reference,
        None,
        after.currency,
        a.gross_minor,
        a.fee_minor,
        a.net_minor,
        now_s,
    )
    body = dispute_json(dispute)
    event = EventOut("charge.dispute.created", dispute_id, body)
    return Effect(200, body, intent=after, dispute=dispute, balance=(txn,), events=(event,))


def _payout_txns(before: Payout | None, after: Payout, txn_id: str, now_s: int) -> tuple[BalanceTxn, ...]:
    """Paid: ``payout`` (-amount, no fee); returned: ``payout_return`` (+amount). Failed moves nothing."""
    was = before.status if before is not None else None
    kind: Literal["payout", "payout_return"]
    if after.status == "paid" and was != "paid":
        kind, gross = "payout", -after.amount_minor
    elif after.status == "returned" and was != "returned":
        kind, gross = "payout_return", after.amount_minor
    else:
        return ()
    txn = BalanceTxn(
        txn_id, kind, after.id, None, after.reference, None, after.currency, gross, 0, gross, now_s
    )
    return (txn,)


def payout_effect(
    before: Payout | None, decision: payouts.PayoutDecision, *, txn_id: str, now_s: int
) -> Effect:
    """The answer, the payout row, its balance transaction and its events (each carries the payout
    as it is after the whole decision: a payout settled at create sends created and paid alike)."""
    match decision:
        case payouts.PayoutApplied(payout=after, events=types):
            body = payout_json(after)
            events = tuple(EventOut(t, after.id, body) for t in types)
            balance = _payout_txns(before, after, txn_id, now_s)
            return Effect(200, body, payout=after, balance=balance, events=events)
        case domain.Refused():
            return refused(decision)
