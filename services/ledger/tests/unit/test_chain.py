"""The hash chain: verify passes on an honest ledger and names the first broken link otherwise."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from ledger.application.verification import verify_chain
from ledger.domain.accounts import AccountKey
from ledger.domain.chain import GENESIS, BreakKind, ChainHead, append
from ledger.domain.journals import Entry
from ledger.testing.facts import deposit
from ledger.testing.memory import MemoryLedger


def ledger_with(journals: int) -> MemoryLedger:
    ledger = MemoryLedger()
    for n in range(1, journals // 2 + 1):
        ledger.deliver(deposit(n))
    return ledger


def test_an_honest_ledger_verifies() -> None:
    """Every journal checked, the head matches, no break."""
    ledger = ledger_with(10)
    report = verify_chain(ledger.store, page_size=3)
    assert report.ok and report.journals_checked == 10 and report.first_break is None


def test_a_changed_amount_is_the_first_broken_link() -> None:
    """Change one entry of journal 4 (the superuser's UPDATE): verify reports journal 4, hash mismatch."""
    ledger = ledger_with(10)
    original = ledger.store.journal(4)
    assert original is not None
    entries = list(original.draft.entries)
    entries[0] = dataclasses.replace(entries[0], amount_minor=entries[0].amount_minor + 1)
    entries[1] = dataclasses.replace(entries[1], amount_minor=entries[1].amount_minor + 1)  # still balanced
    forged = dataclasses.replace(original, draft=dataclasses.replace(original.draft, entries=tuple(entries)))
    ledger.store.tamper(4, forged)
    report = verify_chain(ledger.store)
    assert not report.ok
    assert report.first_break is not None
    assert (report.first_break.journal_id, report.first_break.kind) == (4, BreakKind.HASH_MISMATCH)
    assert report.journals_checked == 3


def test_a_rehashed_forgery_breaks_the_next_link() -> None:
    """A forger who also recomputes journal 4's hash still breaks journal 5's prev_hash."""
    ledger = ledger_with(10)
    original = ledger.store.journal(4)
    assert original is not None
    other = AccountKey("mt5_suspense", "EUR")
    entries = (original.draft.entries[0], Entry(other, original.draft.entries[1].direction, 10_000))
    forged_draft = dataclasses.replace(original.draft, entries=entries)
    forged = append(ChainHead(3, original.prev_hash), forged_draft, original.posted_at)
    ledger.store.tamper(4, forged)
    report = verify_chain(ledger.store)
    assert report.first_break is not None
    assert (report.first_break.journal_id, report.first_break.kind) == (5, BreakKind.PREV_HASH_MISMATCH)


def test_a_removed_journal_is_a_gap_and_a_moved_head_is_reported() -> None:
    """Journal 6 replaced by journal 7 (a deletion): gap at 6. A head that is not the chain's end."""
    ledger = ledger_with(10)
    seven = ledger.store.journal(7)
    assert seven is not None
    ledger.store.tamper(6, seven)
    report = verify_chain(ledger.store)
    assert report.first_break is not None
    assert (report.first_break.journal_id, report.first_break.kind) == (6, BreakKind.GAP)

    honest = ledger_with(4)
    honest.store._head = ChainHead(3, honest.store.chain_head().last_hash)
    moved = verify_chain(honest.store)
    assert moved.first_break is not None and moved.first_break.kind is BreakKind.HEAD_MISMATCH


def test_an_unbalanced_journal_with_a_valid_hash_is_still_reported() -> None:
    """Verify re-checks every journal's rules, not only the hashes (a buggy writer that hashed junk)."""
    ledger = MemoryLedger()
    ledger.deliver(deposit(1))
    original = ledger.store.journal(1)
    assert original is not None
    lopsided = (original.draft.entries[0], dataclasses.replace(original.draft.entries[1], amount_minor=1))
    junk = append(GENESIS, dataclasses.replace(original.draft, entries=lopsided), original.posted_at)
    second = ledger.store.journal(2)
    assert second is not None
    ledger.store.tamper(1, junk)
    ledger.store.tamper(2, dataclasses.replace(second, prev_hash=junk.hash))
    report = verify_chain(ledger.store)
    assert report.first_break is not None
    assert (report.first_break.journal_id, report.first_break.kind) == (1, BreakKind.INVALID_JOURNAL)


def test_a_journal_posted_before_the_one_ahead_of_it_is_reported() -> None:
    """Ids and posting times grow together ("balance as of" relies on it); a writer that broke that,
    even with valid hashes, is caught."""
    ledger = MemoryLedger()
    ledger.deliver(deposit(1))
    first, second = ledger.store.journals()
    earlier = first.posted_at - timedelta(seconds=1)
    rewritten = append(ChainHead(1, first.hash), second.draft, earlier)
    ledger.store.tamper(2, rewritten)
    ledger.store._head = ChainHead(2, rewritten.hash)
    report = verify_chain(ledger.store)
    assert report.first_break is not None
    assert (report.first_break.journal_id, report.first_break.kind) == (2, BreakKind.TIME_REVERSED)
