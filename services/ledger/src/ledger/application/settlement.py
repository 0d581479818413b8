"""Importing a normalized settlement batch (CLI or HTTP): one journal per payout batch.

Idempotent by the batch's reference (``settlement:<provider>:<payout_batch_id>``): the same batch
again is ``AlreadyImported``; the same batch id with other amounts is ``ImportConflict`` and books
nothing. Outcomes are a closed set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, assert_never

from ledger.application.ports import LedgerStore
from ledger.application.posting import post_drafts
from ledger.domain.journals import JournalDraft, Rejected
from ledger.domain.posting import AlreadyPosted, BelowFloor, ConflictingDuplicate, Posted
from ledger.domain.settlement import NothingToPost, parse_batch, settlement_draft


@dataclass(frozen=True, slots=True)
class Imported:
    reference: str
    journal_id: int


@dataclass(frozen=True, slots=True)
class AlreadyImported:
    reference: str
    journal_id: int


@dataclass(frozen=True, slots=True)
class NothingToImport:
    reference: str


@dataclass(frozen=True, slots=True)
class ImportConflict:
    reference: str
    journal_id: int


@dataclass(frozen=True, slots=True)
class ImportRejected:
    reason: str
    detail: str


ImportOutcome = Imported | AlreadyImported | NothingToImport | ImportConflict | ImportRejected


def import_settlement(
    store: LedgerStore,
    doc: Any,
    *,
    import_id: str,
    imported_by: str,
    source_name: str,
    allowed_currencies: frozenset[str] | None,
) -> ImportOutcome:
    """Check and book one settlement batch in the store's transaction."""
    batch = parse_batch(doc, allowed_currencies)
    if isinstance(batch, Rejected):
        return ImportRejected(batch.reason.value, batch.detail)
    draft = settlement_draft(batch, import_id, imported_by, source_name)
    match draft:
        case NothingToPost(reference=reference):
            return NothingToImport(reference)
        case Rejected(reason=reason, detail=detail):
            return ImportRejected(reason.value, detail)
        case _:
            return _book(store, draft)


def _book(store: LedgerStore, draft: JournalDraft) -> ImportOutcome:
    (outcome,) = post_drafts(store, [draft])
    match outcome:
        case Posted(journal=journal):
            return Imported(draft.reference, journal.journal_id)
        case AlreadyPosted(journal_id=journal_id):
            return AlreadyImported(draft.reference, journal_id)
        case ConflictingDuplicate(journal_id=journal_id):
            return ImportConflict(draft.reference, journal_id)
        case BelowFloor(account=account):
            return ImportRejected("below_floor", f"{draft.reference} would take {account} below its floor")
        case _:
            assert_never(outcome)
