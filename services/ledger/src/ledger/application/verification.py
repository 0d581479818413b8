"""Proving the ledger: the hash chain verifies, and balances rebuilt from entries equal the
projections.

``verify_chain`` reads every journal in id order (bounded pages) and reports the first broken
link. ``check_balances`` compares, in one consistent snapshot (the caller's transaction), each
projection with the sum of its account's entries; ``rebuild_balances`` also overwrites drifted
projections, under the chain lock so that no posting runs meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass

from backbone.invariants import invariant

from ledger.application.ports import LedgerStore
from ledger.domain.accounts import AccountKey
from ledger.domain.chain import ChainBreak, ChainHead, ChainVerifier

PAGE_SIZE_DEFAULT = 2000


@dataclass(frozen=True, slots=True)
class ChainReport:
    ok: bool
    journals_checked: int
    head: ChainHead
    first_break: ChainBreak | None


@dataclass(frozen=True, slots=True)
class BalanceMismatch:
    account: AccountKey
    projection_minor: int | None  # None: entries on an account without a projection
    rebuilt_minor: int


@dataclass(frozen=True, slots=True)
class BalanceReport:
    ok: bool
    accounts: int
    mismatches: tuple[BalanceMismatch, ...]
    overwritten: bool


def verify_chain(store: LedgerStore, page_size: int = PAGE_SIZE_DEFAULT) -> ChainReport:
    invariant(page_size > 0, "page size must be positive")
    head = store.chain_head()
    verifier = ChainVerifier()
    after = 0
    # Bounded: the head says how many journals there are; one extra page finds rows past it.
    for _ in range(head.last_journal_id // page_size + 2):
        page = store.journals_after(after, page_size)
        if not page:
            break
        for journal in page:
            broken = verifier.check(journal)
            if broken is not None:
                return ChainReport(False, verifier.checked, head, broken)
        after = page[-1].journal_id
    broken = verifier.finish(head)
    return ChainReport(broken is None, verifier.checked, head, broken)


def check_balances(store: LedgerStore) -> BalanceReport:
    projections = store.projections()
    rebuilt = store.rebuilt_balances()
    mismatches = tuple(
        BalanceMismatch(key, projections.get(key), rebuilt.get(key, 0))
        for key in sorted(set(projections) | set(rebuilt))
        if projections.get(key) != rebuilt.get(key, 0)
    )
    return BalanceReport(not mismatches, len(projections), mismatches, overwritten=False)


def rebuild_balances(store: LedgerStore) -> BalanceReport:
    """Check, and overwrite drifted projections with the rebuilt values (chain lock held)."""
    store.lock_chain()
    report = check_balances(store)
    if report.ok:
        return report
    store.overwrite_projections({m.account: m.rebuilt_minor for m in report.mismatches})
    return BalanceReport(False, report.accounts, report.mismatches, overwritten=True)
