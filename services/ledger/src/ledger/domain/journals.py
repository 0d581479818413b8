"""Journals: a balanced set of entries that books one business operation, and its checks.

Invariants kept here (checked on every draft before it is posted, and again by ``verify`` on
every journal read back):
- at least two entries, each a positive integer amount of minor units on a bookable account;
- debits equal credits in every currency the journal touches;
- the reference is ``<source>:<operation id>`` and unique in the ledger (the store enforces the
  uniqueness; the content digest tells a replay from a conflicting duplicate);
- a posting corrects nothing; a reversal or compensation names the journal it corrects.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date
from enum import StrEnum
from typing import Final

from backbone.money import AMOUNT_MINOR_ABS_MAX

from ledger.domain.accounts import AccountKey, Direction, account_problem

REFERENCE_MAX: Final = 200
_REFERENCE_RE: Final = re.compile(r"[a-z0-9-]{1,32}:[\x21-\x7e]{1,198}", re.ASCII)

DetailValue = str | int | None


class JournalKind(StrEnum):
    POSTING = "posting"
    REVERSAL = "reversal"
    COMPENSATION = "compensation"


class SourceType(StrEnum):
    """Where a journal came from: a consumed event, a settlement import, an operator's action."""

    EVENT = "event"
    SETTLEMENT = "settlement"
    OPERATOR = "operator"


class RejectReason(StrEnum):
    """Why something cannot be booked. A closed set: every rejection names one."""

    UNBALANCED = "unbalanced"
    TOO_FEW_ENTRIES = "too_few_entries"
    BAD_AMOUNT = "bad_amount"
    UNKNOWN_ACCOUNT = "unknown_account"
    UNKNOWN_CURRENCY = "unknown_currency"
    BAD_REFERENCE = "bad_reference"
    BAD_EVENT = "bad_event"
    UNKNOWN_DEBIT_REASON = "unknown_debit_reason"
    UNKNOWN_CREDIT_REASON = "unknown_credit_reason"
    FX_MISMATCH = "fx_mismatch"
    BAD_SETTLEMENT = "bad_settlement"
    CANNOT_REVERSE = "cannot_reverse"
    MISSING_AUDIT = "missing_audit"
    UNKNOWN_JOURNAL = "unknown_journal"


@dataclass(frozen=True, slots=True)
class Rejected:
    """Input the ledger refuses to book, with the reason (safe to log: no payloads)."""

    reason: RejectReason
    detail: str


@dataclass(frozen=True, slots=True)
class Entry:
    """One line: an amount debited or credited to one account (in the account's currency)."""

    account: AccountKey
    direction: Direction
    amount_minor: int

    @property
    def currency(self) -> str:
        return self.account.currency


def debit(account: AccountKey, amount_minor: int) -> Entry:
    return Entry(account, Direction.DEBIT, amount_minor)


def credit(account: AccountKey, amount_minor: int) -> Entry:
    return Entry(account, Direction.CREDIT, amount_minor)


@dataclass(frozen=True, slots=True)
class Source:
    """The record a journal came from; ``detail`` is sorted (name, value) pairs, canonical."""

    source_type: SourceType
    source_id: str
    detail: tuple[tuple[str, DetailValue], ...] = ()

    @classmethod
    def of(cls, source_type: SourceType, source_id: str, detail: Mapping[str, DetailValue]) -> Source:
        return cls(source_type, source_id, tuple(sorted(detail.items())))

    def detail_dict(self) -> dict[str, DetailValue]:
        return dict(self.detail)


@dataclass(frozen=True, slots=True)
class JournalDraft:
    """A journal before it has a place in the chain (id, time, hashes)."""

    reference: str
    kind: JournalKind
    rule: str
    business_date: date
    payment_id: str | None
    source: Source
    entries: tuple[Entry, ...]
    corrects_journal_id: int | None = None


def content_digest(reference: str, entries: Iterable[Entry]) -> bytes:
    """What makes two journals "the same operation booked the same way": the reference and the
    multiset of entries. A replay with this digest is a duplicate; a different digest under the
    same reference is a conflict. Time, source and business date are deliberately left out."""
    lines = sorted(
        f"{e.account.code}|{e.account.currency}|{e.account.holder}|{e.direction}|{e.amount_minor}"
        for e in entries
    )
    return hashlib.sha256("\n".join([reference, *lines]).encode()).digest()


def reference_problem(reference: str) -> str | None:
    if len(reference) > REFERENCE_MAX or not _REFERENCE_RE.fullmatch(reference):
        return "reference must look like '<source>:<operation id>' (printable ASCII, <= 200 chars)"
    return None


def journal_problem(draft: JournalDraft, allowed_currencies: frozenset[str] | None) -> Rejected | None:
    """The first rule ``draft`` breaks, or None when it may be posted."""
    problem = reference_problem(draft.reference)
    if problem is not None:
        return Rejected(RejectReason.BAD_REFERENCE, problem)
    if (draft.kind is JournalKind.POSTING) != (draft.corrects_journal_id is None):
        return Rejected(RejectReason.BAD_REFERENCE, "only reversals and compensations correct a journal")
    if len(draft.entries) < 2:
        return Rejected(RejectReason.TOO_FEW_ENTRIES, f"{draft.reference}: a journal needs >= 2 entries")
    for entry in draft.entries:
        rejected = entry_problem(entry, allowed_currencies)
        if rejected is not None:
            return rejected
    unbalanced = unbalanced_currencies(draft.entries)
    if unbalanced:
        return Rejected(
            RejectReason.UNBALANCED,
            f"{draft.reference}: debits != credits in {', '.join(sorted(unbalanced))}",
        )
    return None


def entry_problem(entry: Entry, allowed_currencies: frozenset[str] | None) -> Rejected | None:
    amount = entry.amount_minor
    if type(amount) is not int or not 0 < amount <= AMOUNT_MINOR_ABS_MAX:
        return Rejected(RejectReason.BAD_AMOUNT, f"{entry.account}: amount must be a positive int")
    problem = account_problem(entry.account, allowed_currencies)
    if problem is not None:
        return Rejected(RejectReason(problem[0]), problem[1])
    return None


def unbalanced_currencies(entries: Iterable[Entry]) -> set[str]:
    """Currencies whose debits and credits differ."""
    net: dict[str, int] = {}
    for e in entries:
        signed = e.amount_minor if e.direction is Direction.DEBIT else -e.amount_minor
        net[e.currency] = net.get(e.currency, 0) + signed
    return {currency for currency, total in net.items() if total != 0}


def reversed_entries(entries: Iterable[Entry]) -> tuple[Entry, ...]:
    """The same lines on the opposite sides: what undoes a journal."""
    return tuple(Entry(e.account, e.direction.flipped(), e.amount_minor) for e in entries)
