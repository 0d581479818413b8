"""What every posting rule (``rules``, ``mt5_rules``) is built from: the event's envelope
(``EventMeta``), the ledger's policy, the checked reading of the event's fields (a missing or
malformed one raises ``BadField``, which ``rules.draft_for_event`` turns into a ``Rejected``), and
the draft of the journal a rule books, with its business date and its source.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo
from typing import Any, Final

from ledger.domain import accounts as acc
from ledger.domain.accounts import AccountKey, currency_problem
from ledger.domain.journals import (
    DetailValue,
    Entry,
    JournalDraft,
    JournalKind,
    Rejected,
    Source,
    SourceType,
)

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class EventMeta:
    """Where an event came from and what its envelope says."""

    event_id: str
    event_type: str
    payment_id: str
    occurred_at_ms: int
    producer: str
    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class PostingPolicy:
    """The ledger's configuration that rules depend on."""

    business_tz: tzinfo = UTC
    allowed_currencies: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class Ignored:
    """An event that moves no money: nothing to book."""

    event_type: str


RuleResult = JournalDraft | Rejected | Ignored


class BadField(Exception):
    """A field is missing or malformed (turned into a Rejected by ``rules.draft_for_event``)."""


def business_date(occurred_at_ms: int, tz: tzinfo) -> date:
    """The accounting date of a fact: the day it happened in the ledger's business time zone."""
    return (_EPOCH + timedelta(milliseconds=occurred_at_ms)).astimezone(tz).date()


Rule = Callable[[EventMeta, Mapping[str, Any], PostingPolicy], RuleResult]


def text_field(body: Mapping[str, Any], name: str) -> str:
    value = body.get(name)
    if type(value) is not str or not value.strip():
        raise BadField(f"{name} is missing or blank")
    return value


def optional_text_field(body: Mapping[str, Any], name: str) -> str | None:
    value = body.get(name)
    return None if value is None else text_field(body, name)


def kept_text_field(body: Mapping[str, Any], name: str) -> str | None:
    """A field kept as detail only: its text when it has one, else None (never a refusal)."""
    value = body.get(name)
    return value[:200] if type(value) is str and value.strip() else None


def positive_field(body: Mapping[str, Any], name: str) -> int:
    value = body.get(name)
    if type(value) is not int or value <= 0:
        what = "integer of minor units" if name.endswith("_minor") else "integer"
        raise BadField(f"{name} must be a positive {what}")
    return value


def currency_field(body: Mapping[str, Any], name: str, policy: PostingPolicy) -> str:
    value = text_field(body, name)
    problem = currency_problem(value, policy.allowed_currencies)
    if problem is not None:
        raise BadField(f"{name}: {problem}")
    return value


def draft(
    meta: EventMeta,
    policy: PostingPolicy,
    reference: str,
    rule: str,
    entries: tuple[Entry, ...],
    detail: Mapping[str, DetailValue],
) -> JournalDraft:
    source_detail = {
        "event_type": meta.event_type,
        "topic": meta.topic,
        "partition": meta.partition,
        "offset": meta.offset,
        "producer": meta.producer,
        **detail,
    }
    return JournalDraft(
        reference=reference,
        kind=JournalKind.POSTING,
        rule=rule,
        business_date=business_date(meta.occurred_at_ms, policy.business_tz),
        payment_id=meta.payment_id,
        source=Source.of(SourceType.EVENT, meta.event_id, source_detail),
        entries=entries,
    )


def client_liability(deposit_reference: str | None, currency: str) -> AccountKey:
    """Where client money waits: the deposit clearing account, or unallocated without a deposit."""
    code = acc.CLIENT_DEPOSITS_PENDING if deposit_reference is not None else acc.UNALLOCATED_RECEIPTS
    return AccountKey(code, currency)
