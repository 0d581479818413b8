"""Corrections: the only way to change what the ledger says is to post another journal.

- A *reversal* books the original's entries on the opposite sides; its reference is
  ``reversal:<original reference>``, so a journal can be reversed once (the reference is unique,
  and the database has a unique index on the corrected id of reversals). A reversal itself is not
  reversed: to re-book, post the right journal as a compensation.
- A *compensation* books any balanced entries that correct an original (e.g. the difference of
  a wrong amount), under ``compensation:<key>`` where the key is the repair's own id.
Both name the journal they correct, who asked and why (operator source), and go through the same
checks and floors as every other journal.
"""

from __future__ import annotations

import re
from datetime import date
from typing import Final

from ledger.domain.chain import PostedJournal
from ledger.domain.journals import (
    Entry,
    JournalDraft,
    JournalKind,
    Rejected,
    RejectReason,
    Source,
    SourceType,
    journal_problem,
    reversed_entries,
)

AUDIT_TEXT_MAX: Final = 500
_KEY_RE: Final = re.compile(r"[\x21-\x7e]{1,120}", re.ASCII)


def _audit_problem(operator: str, reason: str) -> Rejected | None:
    if not operator.strip() or not reason.strip():
        return Rejected(RejectReason.MISSING_AUDIT, "a correction needs who (operator) and why (reason)")
    if len(operator) > AUDIT_TEXT_MAX or len(reason) > AUDIT_TEXT_MAX:
        return Rejected(RejectReason.MISSING_AUDIT, f"operator and reason are at most {AUDIT_TEXT_MAX} chars")
    return None


def _source(action_id: str, operator: str, reason: str, original: PostedJournal) -> Source:
    detail = {"operator": operator, "reason": reason, "corrects_reference": original.draft.reference}
    return Source.of(SourceType.OPERATOR, action_id, detail)


def reversal_draft(
    original: PostedJournal, *, action_id: str, operator: str, reason: str, business_date: date
) -> JournalDraft | Rejected:
    """The journal that undoes ``original`` entirely."""
    problem = _audit_problem(operator, reason)
    if problem is not None:
        return problem
    if original.draft.kind is JournalKind.REVERSAL:
        return Rejected(
            RejectReason.CANNOT_REVERSE, "a reversal is not reversed; post a compensation instead"
        )
    draft = JournalDraft(
        reference=f"reversal:{original.draft.reference}",
        kind=JournalKind.REVERSAL,
        rule="reversal",
        business_date=business_date,
        payment_id=original.draft.payment_id,
        source=_source(action_id, operator, reason, original),
        entries=reversed_entries(original.draft.entries),
        corrects_journal_id=original.journal_id,
    )
    return journal_problem(draft, None) or draft


def compensation_draft(
    original: PostedJournal,
    entries: tuple[Entry, ...],
    *,
    key: str,
    action_id: str,
    operator: str,
    reason: str,
    business_date: date,
    allowed_currencies: frozenset[str] | None,
) -> JournalDraft | Rejected:
    """A balanced journal that corrects ``original`` by the given entries."""
    problem = _audit_problem(operator, reason)
    if problem is not None:
        return problem
    if not _KEY_RE.fullmatch(key):
        return Rejected(RejectReason.BAD_REFERENCE, "a compensation key is printable ASCII, 1..120 chars")
    draft = JournalDraft(
        reference=f"compensation:{key}",
        kind=JournalKind.COMPENSATION,
        rule="compensation",
        business_date=business_date,
        payment_id=original.draft.payment_id,
        source=_source(action_id, operator, reason, original),
        entries=entries,
        corrects_journal_id=original.journal_id,
    )
    return journal_problem(draft, allowed_currencies) or draft
