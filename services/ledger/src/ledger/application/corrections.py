"""Correcting the ledger: reversing or compensating journals that reference the original.

Run by operators (CLI), each with who and why; they post through ``post_drafts`` like any other
journal, so they are unique by reference, balanced, chained, floored and announced.
"""

from __future__ import annotations

from datetime import date

from ledger.application.ports import LedgerStore
from ledger.application.posting import post_drafts
from ledger.domain.corrections import compensation_draft, reversal_draft
from ledger.domain.journals import Entry, Rejected, RejectReason
from ledger.domain.posting import PostingOutcome

CorrectionOutcome = PostingOutcome | Rejected


def reverse_journal(
    store: LedgerStore, journal_id: int, *, action_id: str, operator: str, reason: str, business_date: date
) -> CorrectionOutcome:
    original = store.journal(journal_id)
    if original is None:
        return Rejected(RejectReason.UNKNOWN_JOURNAL, f"no journal {journal_id}")
    draft = reversal_draft(
        original, action_id=action_id, operator=operator, reason=reason, business_date=business_date
    )
    if isinstance(draft, Rejected):
        return draft
    return post_drafts(store, [draft])[0]


def compensate_journal(
    store: LedgerStore,
    journal_id: int,
    entries: tuple[Entry, ...],
    *,
    key: str,
    action_id: str,
    operator: str,
    reason: str,
    business_date: date,
    allowed_currencies: frozenset[str] | None,
) -> CorrectionOutcome:
    original = store.journal(journal_id)
    if original is None:
        return Rejected(RejectReason.UNKNOWN_JOURNAL, f"no journal {journal_id}")
    draft = compensation_draft(
        original,
        entries,
        key=key,
        action_id=action_id,
        operator=operator,
        reason=reason,
        business_date=business_date,
        allowed_currencies=allowed_currencies,
    )
    if isinstance(draft, Rejected):
        return draft
    return post_drafts(store, [draft])[0]
