"""The records of the reconciler's read models: what it keeps of the events it consumes
(``domain.intake`` makes them), each with its business date, the event it came from, and only the
fields the matching reads. ``Record`` is any of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any


@dataclass(frozen=True, slots=True)
class MoneyFact:
    source_key: str
    kind: str  # capture | refund | chargeback | payout | payout_return
    payment_id: str  # a payout's: the withdrawal id (every message about a withdrawal is keyed by it)
    merchant_id: str
    provider: str
    provider_object_id: str  # the intent (capture), the refund, the dispute, the payout at the provider
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
    withdrawal_id: str | None  # a withdrawal's debit (wdr:) or give-back credit (wbk:); else None
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


@dataclass(frozen=True, slots=True)
class Attention:
    """A service's resolver could not settle something and handed it to a person."""

    attention_key: str
    source: str  # payment_state | mt5_credit
    subject_key: str | None  # operation:<id> | mt5-row:<id>; None: about the payment as a whole
    payment_id: str
    kind: str
    status: str | None
    detail: str
    facts: dict[str, Any]
    started_at_ms: int | None
    raised_at_ms: int
    business_date: date
    event_id: str


@dataclass(frozen=True, slots=True)
class Settled:
    """A later event ended the operation an attention may be about."""

    subject_key: str
    event_type: str
    occurred_at_ms: int


@dataclass(frozen=True, slots=True)
class RepairDone:
    """What the service an approved repair was sent to did with it."""

    repair_id: int
    outcome: str  # executed | refused | unknown
    detail: str
    executed_by: str
    reference: str | None
    command_digest: str
    event_id: str


@dataclass(frozen=True, slots=True)
class MonitorCase:
    """The streaming monitor raised (or cleared) what the daily run would find: the case of the
    same key (``not_credited:capture:<op>``, ``missing_journal:mt5-credit:<id>``), opened early."""

    case_key: str
    case_class: str
    raised: bool  # False: cleared (the missing event arrived)
    summary: str
    evidence: dict[str, Any]
    business_date: date
    event_id: str


Record = MoneyFact | Mt5Operation | Journal | Attention | Settled | RepairDone | MonitorCase
