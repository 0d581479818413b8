"""What the reconciler keeps of each event it consumes: its own read models, never another
service's tables (DESIGN.md §2).

- money facts from payment-state (a capture, a refund, a chargeback, a withdrawal's payout paid or
  returned), keyed by the reference the ledger books them under (``capture:<operation_id>``,
  ``refund:<refund_id>``, ``chargeback:<chargeback_id>``, ``payout:<withdrawal_id>``,
  ``payout-return:<withdrawal_id>``);
- MT5 balance operations from mt5-credit (``mt5-credit:<id>`` / ``mt5-debit:<id>``), with the exact
  comment the deal carries (``dep:<id>`` / ``dbt:<id>``; a withdrawal's debit ``wdr:<id>``, its
  give-back credit ``wbk:<id>``);
- journals from the ledger, by reference;
- layer 1: what a service's resolver handed to a person (``PaymentNeedsAttention``,
  ``Mt5CreditNeedsAttention``), and the later events that settle it (a terminal payment fact of the
  same operation; an ``Mt5Credited`` / ``Mt5Debited`` / ``Mt5CreditFailed`` of the same row).

Each record is given its business date here, once, from the event's time. Events that move no
money are not kept: ``PayoutFailed`` among them, on purpose. No money moved at the PSP, so it has
no settlement row, no journal and no deal to be matched with; the give-back credit that follows it
is an MT5 operation like any other (its deal, its journal). It still settles an attention raised
about its payout operation, as ``PayoutPaid`` and ``PayoutReturned`` do.
A ``debit_reason`` or ``credit_reason`` outside the closed set is refused, never guessed. A money
event that lacks a field the matching needs is refused (``IntakeRefused``:
dead-lettered with the reason, never dropped silently).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any, Final

from reconciler.domain.dates import BusinessCalendar
from reconciler.domain.records import (
    Attention,
    Journal,
    MoneyFact,
    MonitorCase,
    Mt5Operation,
    Record,
    RepairDone,
    Settled,
)

FACT_EVENTS: Final = frozenset(
    {"PaymentCaptured", "RefundSucceeded", "ChargebackReceived", "PayoutPaid", "PayoutReturned"}
)
# a withdrawal's money facts (ADR 0008): kind -> the ledger's reference prefix
PAYOUT_KINDS: Final = {"payout": "payout", "payout_return": "payout-return"}
DEBIT_REASONS: Final = frozenset({"refund", "chargeback", "repair", "withdrawal"})
CREDIT_REASONS: Final = frozenset({"deposit", "withdrawal_return"})
MT5_EVENTS: Final = frozenset({"Mt5Credited", "Mt5Debited"})
JOURNAL_EVENTS: Final = frozenset({"JournalPosted"})
ATTENTION_EVENTS: Final = frozenset({"PaymentNeedsAttention", "Mt5CreditNeedsAttention"})
REPAIR_EVENTS: Final = frozenset({"RepairOutcome"})
MONITOR_EVENTS: Final = frozenset({"MonitorAlert"})
# the monitor raises early the very case the daily run would open, under the same key
MONITOR_CASES: Final = {"captured_not_credited": "not_credited", "credited_not_booked": "missing_journal"}
REPAIR_OUTCOMES: Final = frozenset({"executed", "refused", "unknown"})
# events that end an operation: they settle an attention raised about it earlier
OPERATION_END_EVENTS: Final = frozenset(
    {
        "PaymentAuthorized",
        "PaymentCaptured",
        "PaymentCanceled",
        "PaymentFailed",
        "RefundSucceeded",
        "RefundFailed",
        "PayoutPaid",
        "PayoutFailed",
        "PayoutReturned",
    }
)
MT5_END_EVENTS: Final = frozenset({"Mt5Credited", "Mt5Debited", "Mt5CreditFailed"})
KEPT_EVENTS: Final = (
    FACT_EVENTS | MT5_EVENTS | JOURNAL_EVENTS | ATTENTION_EVENTS | REPAIR_EVENTS | MONITOR_EVENTS
)


class IntakeRefused(ValueError):
    """The event claims to be a money fact but lacks what matching needs."""


@dataclass(frozen=True, slots=True)
class EventInfo:
    event_id: str
    event_type: str
    payment_id: str
    occurred_at_ms: int


def records_of(info: EventInfo, body: Mapping[str, Any], calendar: BusinessCalendar) -> list[Record]:
    """The read-model records of one event (none for an event the reconciler does not keep): its
    record, and what it settles."""
    try:
        out: list[Record] = []
        if info.event_type in KEPT_EVENTS:
            out.append(_record(info, body, calendar))
        settled = _settled(info, body)
        if settled is not None:
            out.append(settled)
        return out
    except (KeyError, TypeError, ValueError) as exc:
        raise IntakeRefused(f"{info.event_type} {info.event_id}: {type(exc).__name__}: {exc}") from None


def _record(info: EventInfo, body: Mapping[str, Any], calendar: BusinessCalendar) -> Record:
    if info.event_type in FACT_EVENTS:
        return _fact(info, body, calendar)
    if info.event_type in MT5_EVENTS:
        return _mt5(info, body, calendar)
    if info.event_type in ATTENTION_EVENTS:
        return _attention(info, body, calendar)
    if info.event_type in REPAIR_EVENTS:
        return _repair_done(info, body)
    if info.event_type in MONITOR_EVENTS:
        return _monitor_case(info, body, calendar)
    return _journal(info, body)


def _monitor_case(info: EventInfo, body: Mapping[str, Any], calendar: BusinessCalendar) -> MonitorCase:
    alert, state, subject = str(body["alert"]), str(body["state"]), str(body["subject_key"])
    case_class = MONITOR_CASES.get(alert)
    if case_class is None or state not in ("raised", "cleared"):
        raise ValueError(f"alert {alert!r} / state {state!r} is not one the reconciler knows")
    minutes = int(body["overdue_ms"]) // 60_000
    missing = "no MT5 credit" if alert == "captured_not_credited" else "no journal"
    summary = (
        f"monitor: {subject} ({body['amount_minor']} {body['currency']}, deposit"
        f" {body.get('deposit_reference') or '-'}) has {missing} after {minutes} min"
    )
    evidence = {"monitor": {k: v for k, v in body.items() if k != "envelope"}, "payment_id": info.payment_id}
    return MonitorCase(
        case_key=f"{case_class}:{subject}",
        case_class=case_class,
        raised=state == "raised",
        summary=summary,
        evidence=evidence,
        business_date=calendar.date_of(int(body["subject_occurred_at_ms"])),
        event_id=info.event_id,
    )


def _repair_done(info: EventInfo, body: Mapping[str, Any]) -> RepairDone:
    outcome = str(body["outcome"])
    if outcome not in REPAIR_OUTCOMES:
        raise ValueError(f"outcome {outcome!r} is not one of {sorted(REPAIR_OUTCOMES)}")
    return RepairDone(
        repair_id=int(body["repair_id"]),
        outcome=outcome,
        detail=str(body["detail"]),
        executed_by=str(body["executed_by"]),
        reference=body.get("reference"),
        command_digest=str(body["command_digest"]),
        event_id=info.event_id,
    )


def _settled(info: EventInfo, body: Mapping[str, Any]) -> Settled | None:
    if info.event_type in OPERATION_END_EVENTS:
        return Settled(f"operation:{body['operation_id']}", info.event_type, info.occurred_at_ms)
    if info.event_type in MT5_END_EVENTS:
        row_id = int(body["debit_id"] if info.event_type == "Mt5Debited" else body["credit_id"])
        return Settled(f"mt5-row:{row_id}", info.event_type, info.occurred_at_ms)
    return None


def _attention(info: EventInfo, body: Mapping[str, Any], calendar: BusinessCalendar) -> Attention:
    raised, event_id, date_ = info.occurred_at_ms, info.event_id, calendar.date_of(info.occurred_at_ms)
    if info.event_type == "PaymentNeedsAttention":
        operation_id = body.get("operation_id")
        started = body.get("operation_started_at_ms")
        return Attention(
            attention_key=f"payment:{info.payment_id}:{operation_id or ''}:{body['kind']}",
            source="payment_state",
            subject_key=None if operation_id is None else f"operation:{operation_id}",
            payment_id=info.payment_id,
            kind=str(body["kind"]),
            status=body.get("operation_status"),
            detail=str(body["detail"]),
            facts={
                "merchant_id": str(body["merchant_id"]),
                "provider": str(body["provider"]),
                "operation_id": operation_id,
                "operation_type": body.get("operation_type"),
                "attempts": int(body.get("attempts", 0)),
            },
            started_at_ms=None if started is None else int(started),
            raised_at_ms=raised,
            business_date=date_,
            event_id=event_id,
        )
    row_id = int(body["credit_id"])
    kind = str(body.get("operation_kind", "credit"))
    if kind not in ("credit", "debit"):
        raise ValueError(f"operation_kind {kind!r} is neither credit nor debit")
    return Attention(
        attention_key=f"mt5-row:{row_id}",
        source="mt5_credit",
        subject_key=f"mt5-row:{row_id}",
        payment_id=info.payment_id,
        kind=kind,
        status=str(body["credit_status"]),
        detail=str(body["reason"]),
        facts={
            "row_id": row_id,
            # v3 says the row's own comment (wdr:/wbk: for a withdrawal's rows); before, by kind
            "comment": str(body.get("comment") or f"{'dep' if kind == 'credit' else 'dbt'}:{row_id}"),
            "deposit_reference": str(body["deposit_reference"]),
            "mt5_login": int(body["mt5_login"]),
            "amount_minor": int(body["amount_minor"]),
            "currency": str(body["currency"]),
        },
        started_at_ms=None,
        raised_at_ms=raised,
        business_date=date_,
        event_id=event_id,
    )


def _fact(info: EventInfo, body: Mapping[str, Any], calendar: BusinessCalendar) -> MoneyFact:
    match info.event_type:
        case "PaymentCaptured":
            kind, key, obj = "capture", f"capture:{body['operation_id']}", body["provider_payment_id"]
        case "RefundSucceeded":
            kind, key, obj = "refund", f"refund:{body['refund_id']}", body["provider_refund_id"]
        case "PayoutPaid" | "PayoutReturned":
            kind = "payout" if info.event_type == "PayoutPaid" else "payout_return"
            key, obj = f"{PAYOUT_KINDS[kind]}:{_present(body, 'withdrawal_id')}", body["provider_payout_id"]
        case _:
            kind, key, obj = "chargeback", f"chargeback:{body['chargeback_id']}", body["provider_dispute_id"]
    amount = int(body["amount_minor"])
    if amount < 0:
        raise ValueError(f"amount_minor {amount} is negative")
    # a withdrawal's facts are the withdrawal's: its id joins them to its MT5 debit and give-back
    payment_id = _present(body, "withdrawal_id") if kind in PAYOUT_KINDS else info.payment_id
    return MoneyFact(
        source_key=key,
        kind=kind,
        payment_id=payment_id,
        merchant_id=str(body["merchant_id"]),
        provider=str(body["provider"]),
        provider_object_id=str(obj),
        amount_minor=amount,
        currency=str(body["currency"]),
        deposit_reference=body.get("deposit_reference"),
        occurred_at_ms=info.occurred_at_ms,
        business_date=calendar.date_of(info.occurred_at_ms),
        event_id=info.event_id,
    )


def _present(body: Mapping[str, Any], name: str) -> str:
    value = body[name]
    if type(value) is not str or not value.strip():
        raise ValueError(f"{name} is missing or blank")
    return value


def _mt5(info: EventInfo, body: Mapping[str, Any], calendar: BusinessCalendar) -> Mt5Operation:
    credit = info.event_type == "Mt5Credited"
    row_id = int(body["credit_id"] if credit else body["debit_id"])
    payment_amount = body.get("payment_amount_minor")
    # v1 credits have no credit_reason: a deposit
    reason = str(body.get("credit_reason", "deposit")) if credit else str(body["debit_reason"])
    if reason not in (CREDIT_REASONS if credit else DEBIT_REASONS):
        raise ValueError(f"{'credit' if credit else 'debit'}_reason {reason[:40]!r} is not one we know")
    cause = f"{reason}:{body['source_reference']}" if reason in ("refund", "chargeback") else None
    withdrawal = None
    if reason == "withdrawal":
        withdrawal = _present(body, "source_reference")
    elif reason == "withdrawal_return":
        withdrawal = _present(body, "withdrawal_id")
    prefix = {"deposit": "dep", "withdrawal": "wdr", "withdrawal_return": "wbk"}.get(reason, "dbt")
    return Mt5Operation(
        source_key=f"mt5-credit:{row_id}" if credit else f"mt5-debit:{row_id}",
        kind="credit" if credit else "debit",
        row_id=row_id,
        comment=f"{prefix}:{row_id}",
        payment_id=info.payment_id,
        mt5_login=int(body["mt5_login"]),
        amount_minor=int(body["amount_minor"]),
        currency=str(body["currency"]),
        deal_ticket=int(body["deal_ticket"]),
        payment_amount_minor=int(payment_amount) if payment_amount is not None else None,
        payment_currency=body.get("payment_currency"),
        fx_rate=body.get("fx_rate"),
        cause_key=cause,
        withdrawal_id=withdrawal,
        occurred_at_ms=info.occurred_at_ms,
        business_date=calendar.date_of(info.occurred_at_ms),
        event_id=info.event_id,
    )


def _journal(info: EventInfo, body: Mapping[str, Any]) -> Journal:
    entries = tuple(
        (str(e["account"]), str(e["direction"]), int(e["amount_minor"]), str(e["currency"]))
        for e in body["entries"]
    )
    return Journal(
        journal_id=int(body["journal_id"]),
        reference=str(body["reference"]),
        payment_id=info.payment_id,
        business_date=date.fromisoformat(str(body["business_date"])),
        balanced=is_balanced(entries),
        entries=entries,
        event_id=info.event_id,
    )


def is_balanced(entries: tuple[tuple[str, str, int, str], ...]) -> bool:
    """At least two entries, and debits equal credits in every currency."""
    sums: dict[str, int] = {}
    for _, direction, amount, currency in entries:
        sums[currency] = sums.get(currency, 0) + (amount if direction == "debit" else -amount)
    return len(entries) >= 2 and all(v == 0 for v in sums.values())
