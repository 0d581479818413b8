"""``RepairOutcome`` bodies: how mt5-credit answers an approved repair (topic recon.repair-outcomes).

A repair row answers once, when MT5 has decided it: ``executed`` when its deal is confirmed (the
comment and ticket are the reference), ``refused`` when MT5 or our pre-check clearly refused it,
``unknown`` when the resolver could not tell and handed it to a person. A command refused before
any row exists is answered at once.
"""

from __future__ import annotations

from typing import Any, Final

from backbone.repairs import outcome_body

from mt5_credit.application.ports import CreditStore
from mt5_credit.domain.model import CreditKind, CreditRow
from mt5_credit.domain.repairs import RepairRef

EXECUTED_BY: Final = "mt5_credit"


def _body(ref: RepairRef, outcome: str, detail: str, reference: str | None) -> dict[str, Any]:
    return outcome_body(
        repair_id=ref.repair_id,
        case_id=ref.case_id,
        repair_type=ref.repair_type,
        command_digest=ref.command_digest,
        outcome=outcome,
        detail=detail,
        executed_by=EXECUTED_BY,
        reference=reference,
    )


def refused(ref: RepairRef, reason: str) -> dict[str, Any]:
    return _body(ref, "refused", reason, None)


def answer(store: CreditStore, row: CreditRow, outcome: str, detail: str, ticket: int | None = None) -> None:
    """If ``row`` executes a repair, answer it (in the transaction that decided the row)."""
    if row.repair_id is None:
        return
    ref = store.repair_of(row.id)
    if ref is None:
        return
    kind = "credit" if row.kind is CreditKind.CREDIT else "debit"
    reference = f"{kind} row {row.id}, comment {row.comment}"
    if ticket is not None:
        reference += f", deal {ticket}"
    store.publish_outcome(row.payment_id, _body(ref, outcome, detail, reference))
