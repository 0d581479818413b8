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

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, assert_never

from ledger.domain.journals import DetailValue, JournalDraft, Rejected, Source, SourceType
from ledger.domain.posting import AlreadyPosted, BelowFloor, ConflictingDuplicate, Posted, PostingOutcome
from ledger.domain.rules import EventMeta, Ignored, PostingPolicy, draft_for_event

TARGET: Final = "ledger"
EXECUTES: Final = frozenset({"post_journal"})


@dataclass(frozen=True, slots=True)
class RepairRequest:
    repair_id: int
    case_id: int
    repair_type: str
    requested_by: str
    approved_by: str
    command_digest: str
    payment_id: str  # the command's key: the payment, or the record's key when it has none
    fact_type: str | None
    fact: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class RepairOutcome:
    request: RepairRequest
    outcome: str  # executed | refused
    detail: str
    reference: str | None = None

    def body(self) -> dict[str, Any]:
        r = self.request
        return {
            "repair_id": r.repair_id,
            "case_id": r.case_id,
            "repair_type": r.repair_type,
            "outcome": self.outcome,
            "detail": self.detail[:1000],
            "executed_by": TARGET,
            "reference": self.reference,
            "command_digest": r.command_digest,
        }


def request_of(payment_id: str, body: Mapping[str, Any]) -> RepairRequest | None:
    """The command, when it is the ledger's (v1 commands carry no target: not the ledger's)."""
    if body.get("target") != TARGET:
        return None
    raw_fact = body.get("fact_json")
    try:
        fact = json.loads(raw_fact) if isinstance(raw_fact, str) else None
    except ValueError:
        fact = None
    return RepairRequest(
        repair_id=int(body["repair_id"]),
        case_id=int(body["case_id"]),
        repair_type=str(body["repair_type"]),
        requested_by=str(body["requested_by"]),
        approved_by=str(body["approved_by"]),
        command_digest=str(body.get("command_digest", "")),
        payment_id=payment_id,
        fact_type=body.get("fact_type"),
        fact=fact if isinstance(fact, dict) else None,
    )


def draft_for_repair(
    request: RepairRequest, meta: EventMeta, policy: PostingPolicy
) -> JournalDraft | RepairOutcome:
    """The journal the repair posts, or its refusal."""
    if request.repair_type not in EXECUTES:
        return RepairOutcome(request, "refused", f"the ledger does not execute {request.repair_type} repairs")
    if request.requested_by == request.approved_by:  # the reconciler never sends one; never trust it
        return RepairOutcome(request, "refused", "proposed and approved by the same person")
    if request.fact_type is None or request.fact is None:
        return RepairOutcome(request, "refused", "post_journal needs the money fact (fact_type, fact_json)")
    fact_meta = replace(meta, event_type=request.fact_type)
    result = draft_for_event(fact_meta, request.fact, policy)
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
