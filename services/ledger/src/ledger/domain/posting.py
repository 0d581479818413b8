"""Deciding a batch of journal drafts against what the ledger already holds.

``decide_batch`` is pure: given the chain head (read under its lock), the journals already posted
under the drafts' references, the current balances of the accounts the batch could take below a
floor (``floor_risks``: only those are read, and locked), and the posting time, it returns one
outcome per draft and the journals to append. Invariants kept here:
- one journal per reference: a replay with the same content is ``AlreadyPosted`` (nothing new),
  a different content under a taken reference is ``ConflictingDuplicate`` (nothing posted);
- no account goes below its floor: drafts are applied in order against running balances, and a
  draft that would take any account below its floor is ``BelowFloor`` and posts nothing;
- accepted journals get consecutive ids after the head and are chained hash to hash;
- the balance deltas returned are exactly the sum of the accepted journals' entries.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from backbone.invariants import invariant

from ledger.domain.accounts import CHART, AccountKey, account_type, signed_delta
from ledger.domain.chain import ChainHead, PostedJournal, append
from ledger.domain.journals import Entry, JournalDraft, content_digest


@dataclass(frozen=True, slots=True)
class KnownJournal:
    """A journal already in the ledger under some reference."""

    journal_id: int
    content_digest: bytes


@dataclass(frozen=True, slots=True)
class Posted:
    journal: PostedJournal


@dataclass(frozen=True, slots=True)
class AlreadyPosted:
    reference: str
    journal_id: int


@dataclass(frozen=True, slots=True)
class ConflictingDuplicate:
    reference: str
    journal_id: int


@dataclass(frozen=True, slots=True)
class BelowFloor:
    reference: str
    account: AccountKey
    balance_minor: int
    delta_minor: int
    floor_minor: int


PostingOutcome = Posted | AlreadyPosted | ConflictingDuplicate | BelowFloor


@dataclass(frozen=True, slots=True)
class BatchDecision:
    outcomes: tuple[PostingOutcome, ...]  # one per draft, in order
    journals: tuple[PostedJournal, ...]  # the Posted ones, in chain order
    deltas: Mapping[AccountKey, int]  # per account: sum of the posted journals' entries
    head: ChainHead  # the chain head after the posted journals


def floor_risks(drafts: Iterable[JournalDraft]) -> set[AccountKey]:
    """The accounts with a floor that some draft moves down: the only balances a decision needs."""
    return {
        e.account
        for d in drafts
        for e in d.entries
        if CHART[e.account.code].floor_minor is not None
        and signed_delta(account_type(e.account.code), e.direction, e.amount_minor) < 0
    }


def decide_batch(
    head: ChainHead,
    drafts: Sequence[JournalDraft],
    known: Mapping[str, KnownJournal],
    balances: Mapping[AccountKey, int],
    posted_at: datetime,
) -> BatchDecision:
    """One outcome per draft (see the module docstring); ``balances`` covers ``floor_risks(drafts)``."""
    seen = dict(known)
    balances = dict(balances)
    deltas: dict[AccountKey, int] = {}
    outcomes: list[PostingOutcome] = []
    journals: list[PostedJournal] = []
    for draft in drafts:
        outcome, moves = _decide_one(head, draft, seen, balances, posted_at)
        if isinstance(outcome, Posted):
            head = ChainHead(outcome.journal.journal_id, outcome.journal.hash)
            seen[draft.reference] = KnownJournal(outcome.journal.journal_id, outcome.journal.content_digest)
            journals.append(outcome.journal)
            for key, delta in moves.items():
                if key in balances:
                    balances[key] += delta
                deltas[key] = deltas.get(key, 0) + delta
        outcomes.append(outcome)
    invariant(len(outcomes) == len(drafts), "one outcome per draft")
    return BatchDecision(tuple(outcomes), tuple(journals), deltas, head)


def _decide_one(
    head: ChainHead,
    draft: JournalDraft,
    seen: Mapping[str, KnownJournal],
    balances: Mapping[AccountKey, int],
    posted_at: datetime,
) -> tuple[PostingOutcome, dict[AccountKey, int]]:
    """The outcome, and the balance moves it makes (none unless Posted)."""
    digest = content_digest(draft.reference, draft.entries)
    existing = seen.get(draft.reference)
    if existing is not None:
        if existing.content_digest == digest:
            return AlreadyPosted(draft.reference, existing.journal_id), {}
        return ConflictingDuplicate(draft.reference, existing.journal_id), {}
    moves = journal_deltas(draft)
    for key, delta in moves.items():
        floor = CHART[key.code].floor_minor
        if floor is not None and delta < 0:
            invariant(key in balances, f"{key} may go below its floor: its balance must be read first")
            if balances[key] + delta < floor:
                return BelowFloor(draft.reference, key, balances[key], delta, floor), {}
    return Posted(append(head, draft, posted_at, digest)), moves


def journal_deltas(draft: JournalDraft) -> dict[AccountKey, int]:
    """Per account, how much this journal moves its (normal-side) balance."""
    deltas: dict[AccountKey, int] = {}
    for e in draft.entries:
        delta = signed_delta(account_type(e.account.code), e.direction, e.amount_minor)
        deltas[e.account] = deltas.get(e.account, 0) + delta
    return deltas


def balances_from_entries(entries: Iterable[Entry]) -> dict[AccountKey, int]:
    """Every account's normal-side balance, summed from entries alone (what a rebuild computes)."""
    totals: dict[AccountKey, int] = {}
    for e in entries:
        delta = signed_delta(account_type(e.account.code), e.direction, e.amount_minor)
        totals[e.account] = totals.get(e.account, 0) + delta
    return totals
