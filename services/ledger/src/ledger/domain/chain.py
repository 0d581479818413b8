"""The hash chain over journals: tamper evidence for an append-only ledger.

Journal ``n`` (ids are 1, 2, 3, ... without gaps) stores ``prev_hash`` = the hash of journal
``n - 1`` (32 zero bytes for the first) and ``hash = sha256(prev_hash || canonical(journal))``,
where the canonical form covers every stored field of the journal and every entry with its
account key. Changing, removing or inserting any journal or entry breaks the chain at that journal
(or at the head), which ``ChainVerifier`` reports as the first broken link.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Final

from backbone.invariants import invariant

from ledger.domain.journals import JournalDraft, content_digest, journal_problem

GENESIS_HASH: Final = bytes(32)
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class ChainHead:
    """The last journal in the chain (0 and the genesis hash for an empty ledger)."""

    last_journal_id: int
    last_hash: bytes


GENESIS: Final = ChainHead(0, GENESIS_HASH)


@dataclass(frozen=True, slots=True)
class PostedJournal:
    """A journal with its place in the chain."""

    journal_id: int
    draft: JournalDraft
    posted_at: datetime
    content_digest: bytes
    prev_hash: bytes
    hash: bytes


def epoch_us(moment: datetime) -> int:
    """Microseconds since the epoch, exactly (what PostgreSQL's timestamptz keeps)."""
    invariant(moment.tzinfo is not None, "posting times are timezone-aware")
    return (moment - _EPOCH) // _MICROSECOND


def canonical(journal_id: int, draft: JournalDraft, posted_at: datetime) -> bytes:
    """The bytes the hash covers: a JSON array in a fixed field order (unambiguous)."""
    # Enum members are str subclasses: json writes their values, without the cost of ``.value``.
    entries = [
        [line, *e.account, e.direction, e.amount_minor] for line, e in enumerate(draft.entries, start=1)
    ]
    record = [
        journal_id,
        draft.reference,
        draft.kind,
        draft.rule,
        draft.business_date.isoformat(),
        epoch_us(posted_at),
        draft.payment_id,
        draft.source.source_type,
        draft.source.source_id,
        [[k, v] for k, v in draft.source.detail],
        draft.corrects_journal_id,
        entries,
    ]
    return json.dumps(record, separators=(",", ":"), ensure_ascii=True).encode()


def link(prev_hash: bytes, journal_id: int, draft: JournalDraft, posted_at: datetime) -> bytes:
    invariant(len(prev_hash) == len(GENESIS_HASH), "a chain hash is 32 bytes")
    return hashlib.sha256(prev_hash + canonical(journal_id, draft, posted_at)).digest()


def append(
    head: ChainHead, draft: JournalDraft, posted_at: datetime, digest: bytes | None = None
) -> PostedJournal:
    """Place ``draft`` right after ``head`` (``digest``: its content digest, if already computed)."""
    journal_id = head.last_journal_id + 1
    digest = content_digest(draft.reference, draft.entries) if digest is None else digest
    return PostedJournal(
        journal_id,
        draft,
        posted_at,
        digest,
        head.last_hash,
        link(head.last_hash, journal_id, draft, posted_at),
    )


class BreakKind(StrEnum):
    GAP = "gap"  # a journal id is missing (deleted) or out of order
    PREV_HASH_MISMATCH = "prev_hash_mismatch"  # the stored link to the previous journal is wrong
    HASH_MISMATCH = "hash_mismatch"  # the journal's content (or an entry) changed
    DIGEST_MISMATCH = "digest_mismatch"  # the stored content digest does not match the entries
    INVALID_JOURNAL = "invalid_journal"  # unbalanced, too few entries, unknown account...
    TIME_REVERSED = "time_reversed"  # posted before the previous journal (ids and times grow together)
    HEAD_MISMATCH = "head_mismatch"  # the chain head does not point at the last journal


@dataclass(frozen=True, slots=True)
class ChainBreak:
    """The first broken link: at which journal, and what is wrong there."""

    journal_id: int
    kind: BreakKind
    detail: str


class ChainVerifier:
    """Feed journals in id order; the first problem found is the answer."""

    def __init__(self, allowed_currencies: frozenset[str] | None = None) -> None:
        self._expected = GENESIS
        self._last_posted_at: datetime | None = None
        self._allowed = allowed_currencies
        self.checked = 0

    def check(self, journal: PostedJournal) -> ChainBreak | None:
        broken = self._link_problem(journal) or self._content_problem(journal)
        if broken is None:
            self._expected = ChainHead(journal.journal_id, journal.hash)
            self._last_posted_at = journal.posted_at
            self.checked += 1
        return broken

    def _link_problem(self, journal: PostedJournal) -> ChainBreak | None:
        """Is it the next journal, linked to the previous one, and hashed as stored?"""
        expected_id, jid = self._expected.last_journal_id + 1, journal.journal_id
        if jid != expected_id:
            return ChainBreak(expected_id, BreakKind.GAP, f"expected journal {expected_id}, found {jid}")
        if journal.prev_hash != self._expected.last_hash:
            return ChainBreak(
                jid, BreakKind.PREV_HASH_MISMATCH, "prev_hash is not the previous journal's hash"
            )
        if link(journal.prev_hash, jid, journal.draft, journal.posted_at) != journal.hash:
            return ChainBreak(jid, BreakKind.HASH_MISMATCH, "journal or entries differ from what was hashed")
        return None

    def _content_problem(self, journal: PostedJournal) -> ChainBreak | None:
        """Does it keep the journal rules (a writer could have hashed a bad journal)?"""
        jid = journal.journal_id
        if content_digest(journal.draft.reference, journal.draft.entries) != journal.content_digest:
            return ChainBreak(jid, BreakKind.DIGEST_MISMATCH, "content digest does not match the entries")
        rejected = journal_problem(journal.draft, self._allowed)
        if rejected is not None:
            return ChainBreak(jid, BreakKind.INVALID_JOURNAL, f"{rejected.reason.value}: {rejected.detail}")
        if self._last_posted_at is not None and journal.posted_at < self._last_posted_at:
            return ChainBreak(jid, BreakKind.TIME_REVERSED, "posted before the journal ahead of it")
        return None

    def finish(self, head: ChainHead) -> ChainBreak | None:
        """Compare the stored head with the last journal checked."""
        if head != self._expected:
            return ChainBreak(
                head.last_journal_id,
                BreakKind.HEAD_MISMATCH,
                f"head says journal {head.last_journal_id}, chain ends at {self._expected.last_journal_id}",
            )
        return None
