"""Repairs the reconciler sends the ledger (``ExecuteRepair`` with target ``ledger``), after two
different people proposed and approved them.

``post_journal``: the ledger posts the journal a money fact lacks. The command carries that fact
(its event type and body, rebuilt by the reconciler from its read model); the ledger books it with
the very posting rule the event would have met, under the fact's own reference. So it is one
journal whatever happens next: the same command redelivered is ``AlreadyPosted``, and so is the lost
event if it turns up later. The journal's source is the repair (an operator action: who proposed,
who approved, the command's digest), its business date the day it is executed.

Every command addressed to the ledger gets exactly one ``RepairOutcome`` on ``recon.repair-outcomes`` in
the batch transaction: ``executed`` (posted, or found already posted with the same entries) or
``refused`` (a type the ledger does not execute, a fact its rules refuse, a reference already booked
with other entries, a floor). A command for another service is none of the ledger's business.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, assert_never

from backbone.repairs import RepairCommand, command_for, outcome_body

from ledger.domain.journals import DetailValue, JournalDraft, Rejected, Source, SourceType
from ledger.domain.posting import AlreadyPosted, BelowFloor, ConflictingDuplicate, Posted, PostingOutcome
from ledger.domain.rule_base import EventMeta, Ignored, PostingPolicy
from ledger.domain.rules import draft_for_event

TARGET: Final = "ledger"
EXECUTES: Final = frozenset({"post_journal"})


RepairRequest = RepairCommand  # the command as backbone.repairs reads it


@dataclass(frozen=True, slots=True)
class RepairOutcome:
    request: RepairRequest
    outcome: str  # executed | refused
    detail: str
    reference: str | None = None

    def body(self) -> dict[str, Any]:
        r = self.request
        return outcome_body(
            repair_id=r.repair_id,
            case_id=r.case_id,
            repair_type=r.repair_type,
            command_digest=r.command_digest,
            outcome=self.outcome,
            detail=self.detail,
            executed_by=TARGET,
            reference=self.reference,
        )


def request_of(payment_id: str, body: Mapping[str, Any]) -> RepairRequest | None:
    """The command, when it is the ledger's (v1 commands carry no target: not the ledger's)."""
    return command_for(TARGET, payment_id, body)


def draft_for_repair(
    request: RepairRequest, meta: EventMeta, policy: PostingPolicy
) -> JournalDraft | RepairOutcome:
    """The journal the repair posts, or its refusal."""
    if request.repair_type not in EXECUTES:
        return RepairOutcome(request, "refused", f"the ledger does not execute {request.repair_type} repairs")
    if request.same_person:  # the reconciler never sends one; never trust it
        return RepairOutcome(request, "refused", "proposed and approved by the same person")
    fact = request.fact
    if request.fact_type is None or fact is None:
        return RepairOutcome(request, "refused", "post_journal needs the money fact (fact_type, fact_json)")
    fact_meta = replace(meta, event_type=request.fact_type)
    result = draft_for_event(fact_meta, fact, policy)
    match result:
        case JournalDraft() as draft:
            detail: dict[str, DetailValue] = draft.source.detail_dict() | {
                "repair_id": request.repair_id,
                "case_id": request.case_id,
                "requested_by": request.requested_by,
                "approved_by": request.approved_by,
                "command_digest": request.command_digest,
                "command_event_id": meta.event_id,
            }
            return replace(
                draft, source=Source.of(SourceType.OPERATOR, f"repair:{request.repair_id}", detail)
            )
        case Ignored(event_type=event_type):
            return RepairOutcome(request, "refused", f"{event_type} moves no money: no journal to post")
        case Rejected(reason=reason, detail=why):
            return RepairOutcome(request, "refused", f"{reason.value}: {why}")
        case _:
            assert_never(result)


def outcome_of(request: RepairRequest, posting: PostingOutcome) -> RepairOutcome:
    match posting:
        case Posted(journal=journal):
            reference = f"{journal.draft.reference} journal {journal.journal_id}"
            return RepairOutcome(request, "executed", f"posted {reference}", reference)
        case AlreadyPosted(reference=reference, journal_id=journal_id):
            found = f"{reference} journal {journal_id}"
            return RepairOutcome(request, "executed", f"already booked with the same entries: {found}", found)
        case ConflictingDuplicate(reference=reference, journal_id=journal_id):
            detail = f"{reference} is already journal {journal_id} with other entries"
            return RepairOutcome(request, "refused", detail, f"{reference} journal {journal_id}")
        case BelowFloor(reference=reference, account=account, floor_minor=floor):
            return RepairOutcome(
                request, "refused", f"{reference} would take {account} below its floor {floor}"
            )
        case _:
            assert_never(posting)
