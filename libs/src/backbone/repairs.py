"""Approved repairs as every executing service reads them (``ExecuteRepair`` v2 on
``recon.repair-commands``), and the ``RepairOutcome`` each answers with on ``recon.repair-outcomes``:
one reading and one answer for the ledger, mt5-credit and payment-state (what each *does* with a
repair is its own).

A v1 command names no target: it is nobody's. A command whose maker is its checker is never
executed, whoever sent it (``same_person``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

OUTCOMES: Final = frozenset({"executed", "refused", "unknown"})
DETAIL_MAX: Final = 1000  # RepairOutcome.detail's bound


@dataclass(frozen=True, slots=True)
class RepairCommand:
    repair_id: int
    case_id: int
    repair_type: str
    target: str
    source_key: str
    payment_id: str  # the command's Kafka key: the payment, or the record's key when it has none
    requested_by: str
    approved_by: str
    amount_minor: int | None
    currency: str | None
    mt5_login: int | None
    reason: str
    fact_type: str | None
    fact_json: str | None  # the money fact (or settlement row) the repair books, as sent
    command_digest: str

    @property
    def same_person(self) -> bool:
        return not self.requested_by or self.requested_by == self.approved_by

    @property
    def fact(self) -> dict[str, Any] | None:
        """``fact_json`` read as a JSON object (None when absent or not an object)."""
        if self.fact_json is None:
            return None
        try:
            found = json.loads(self.fact_json)
        except ValueError:
            return None
        return found if isinstance(found, dict) else None


def command_for(target: str, payment_id: str, body: Mapping[str, Any]) -> RepairCommand | None:
    """The command when it is addressed to ``target``; None otherwise."""
    if body.get("target") != target:
        return None
    amount, login, fact_json = body.get("amount_minor"), body.get("mt5_login"), body.get("fact_json")
    return RepairCommand(
        repair_id=int(body["repair_id"]),
        case_id=int(body["case_id"]),
        repair_type=str(body["repair_type"]),
        target=target,
        source_key=str(body.get("source_key") or ""),
        payment_id=payment_id,
        requested_by=str(body["requested_by"]),
        approved_by=str(body["approved_by"]),
        amount_minor=None if amount is None else int(amount),
        currency=body.get("currency"),
        mt5_login=None if login is None else int(login),
        reason=str(body.get("reason") or ""),
        fact_type=body.get("fact_type"),
        fact_json=fact_json if isinstance(fact_json, str) else None,
        command_digest=str(body.get("command_digest") or ""),
    )


def outcome_body(
    *,
    repair_id: int,
    case_id: int,
    repair_type: str,
    command_digest: str,
    outcome: str,
    detail: str,
    executed_by: str,
    reference: str | None = None,
) -> dict[str, Any]:
    """The ``RepairOutcome`` v1 body (without its envelope)."""
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome {outcome!r} is not one of {sorted(OUTCOMES)}")
    return {
        "repair_id": repair_id,
        "case_id": case_id,
        "repair_type": repair_type,
        "outcome": outcome,
        "detail": detail[:DETAIL_MAX],
        "executed_by": executed_by,
        "reference": reference,
        "command_digest": command_digest,
    }
