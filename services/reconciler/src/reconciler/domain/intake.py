"""What the reconciler keeps of each event it consumes: its own read models, never another
service's tables (DESIGN.md §2).

- money facts from payment-state (a capture, a refund, a chargeback), keyed by the reference the
  ledger books them under (``capture:<operation_id>``, ``refund:<refund_id>``,
  ``chargeback:<chargeback_id>``);
- MT5 balance operations from mt5-credit (``mt5-credit:<id>`` / ``mt5-debit:<id>``), with the exact
  comment the deal carries (``dep:<id>`` / ``dbt:<id>``);
- journals from the ledger, by reference.

Each record is given its business date here, once, from the event's time. Events that move no
money are not kept. A money event that lacks a field the matching needs is refused (``IntakeRefused``:
dead-lettered with the reason, never dropped silently).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any, Final

from reconciler.domain.dates import BusinessCalendar

FACT_EVENTS: Final = frozenset({"PaymentCaptured", "RefundSucceeded", "ChargebackReceived"})
MT5_EVENTS: Final = frozenset({"Mt5Credited", "Mt5Debited"})
JOURNAL_EVENTS: Final = frozenset({"JournalPosted"})
KEPT_EVENTS: Final = FACT_EVENTS | MT5_EVENTS | JOURNAL_EVENTS


class IntakeRefused(ValueError):
    """The event claims to be a money fact but lacks what matching needs."""


@dataclass(frozen=True, slots=True)
class EventInfo:
    event_id: str
    event_type: str
    payment_id: str
    occurred_at_ms: int


@dataclass(frozen=True, slots=True)
class MoneyFact:
    source_key: str
    kind: str  # capture | refund | chargeback
    payment_id: str
    merchant_id: str
    provider: str
    provider_object_id: str  # the intent (capture), the refund, the dispute at the provider
    amount_minor: int
    currency: str
    deposit_reference: str | None
    occurred_at_ms: int
    business_date: date
    event_id: str


@dataclass(frozen=True, slots=True)
class Mt5Operation:
    source_key: str
    kind: str  # credit | debit
    row_id: int
    comment: str
    payment_id: str
    mt5_login: int
    amount_minor: int  # positive, in the account currency
    currency: str
    deal_ticket: int
    payment_amount_minor: int | None
    payment_currency: str | None
    fx_rate: str | None
    cause_key: str | None  # a debit's money fact (refund:<id> | chargeback:<id>); None for credits
    occurred_at_ms: int
    business_date: date
    event_id: str


@dataclass(frozen=True, slots=True)
class Journal:
    journal_id: int
    reference: str
    payment_id: str
    business_date: date
    balanced: bool
    entries: tuple[tuple[str, str, int, str], ...]  # (account, direction, amount_minor, currency)
    event_id: str


Record = MoneyFact | Mt5Operation | Journal


def record_of(info: EventInfo, body: Mapping[str, Any], calendar: BusinessCalendar) -> Record | None:
    """The read-model record of one event, or None for an event the reconciler does not keep."""
    if info.event_type not in KEPT_EVENTS:
        return None
    try:
        if info.event_type in FACT_EVENTS:
            return _fact(info, body, calendar)
        if info.event_type in MT5_EVENTS:
            return _mt5(info, body, calendar)
        return _journal(info, body)
    except (KeyError, TypeError, ValueError) as exc:
        raise IntakeRefused(f"{info.event_type} {info.event_id}: {type(exc).__name__}: {exc}") from None


def _fact(info: EventInfo, body: Mapping[str, Any], calendar: BusinessCalendar) -> MoneyFact:
    match info.event_type:
        case "PaymentCaptured":
            kind, key, obj = "capture", f"capture:{body['operation_id']}", body["provider_payment_id"]
        case "RefundSucceeded":
            kind, key, obj = "refund", f"refund:{body['refund_id']}", body["provider_refund_id"]
        case _:
            kind, key, obj = "chargeback", f"chargeback:{body['chargeback_id']}", body["provider_dispute_id"]
    amount = int(body["amount_minor"])
    if amount < 0:
        raise ValueError(f"amount_minor {amount} is negative")
    return MoneyFact(
        source_key=key,
        kind=kind,
        payment_id=info.payment_id,
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


def _mt5(info: EventInfo, body: Mapping[str, Any], calendar: BusinessCalendar) -> Mt5Operation:
    credit = info.event_type == "Mt5Credited"
    row_id = int(body["credit_id"] if credit else body["debit_id"])
    payment_amount = body.get("payment_amount_minor")
    reason = None if credit else str(body["debit_reason"])
    cause = f"{reason}:{body['source_reference']}" if reason in ("refund", "chargeback") else None
    return Mt5Operation(
        source_key=f"mt5-credit:{row_id}" if credit else f"mt5-debit:{row_id}",
        kind="credit" if credit else "debit",
        row_id=row_id,
        comment=f"dep:{row_id}" if credit else f"dbt:{row_id}",
        payment_id=info.payment_id,
        mt5_login=int(body["mt5_login"]),
        amount_minor=int(body["amount_minor"]),
        currency=str(body["currency"]),
        deal_ticket=int(body["deal_ticket"]),
        payment_amount_minor=int(payment_amount) if payment_amount is not None else None,
        payment_currency=body.get("payment_currency"),
        fx_rate=body.get("fx_rate"),
        cause_key=cause,
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
