"""Operators' acts on cases and repairs: propose (or amend), approve, reject, acknowledge.

Each act is one transaction through the ``RepairDesk`` port: the case and repair rows are locked,
the domain's rules decide (``domain.repairs``), the change, the case's history and the audit row
commit together. A refused act changes nothing, and its refusal is audited in a transaction of its
own (who tried what, and why it was refused).

Every act reaches its case through ``_case`` (a repair's through ``_repair``), with the operator's
``Scope``: a case of a merchant the operator does not have is, to them, a case that does not exist
(404 ``not_found``, the same words), and the audit says why (``domain.merchants.out_of_scope``).

Approving a ``close`` executes it at once (the case is resolved with the reason: no money moves).
Approving any other type sends ``ExecuteRepair`` through the outbox, in the approving transaction,
to the service that executes it; the repair is ``sent`` until that service answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from backbone.logs import get_logger

from reconciler.application.ports import DeskTransaction, RepairDesk
from reconciler.domain.cases import CaseStatus
from reconciler.domain.decisions import Decision
from reconciler.domain.merchants import Scope, out_of_scope
from reconciler.domain.repairs import (
    REASON_MAX,
    CaseView,
    RepairRefused,
    RepairStatus,
    RepairType,
    RepairView,
    check_amend,
    check_approve,
    check_reject,
    command_for,
)

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Proposed:
    repair_id: int
    status: RepairStatus
    command_digest: str
    revision: int
    changed: bool  # False: the same command was already proposed (nothing changed)


class _Refusals:
    """Audits a refusal of the act in the ``with`` block, then lets it through."""

    def __init__(
        self, desk: RepairDesk, operator: str, action: str, target: str, detail: dict[str, Any]
    ) -> None:
        self._desk, self._operator, self._action, self._target, self._detail = (
            desk,
            operator,
            action,
            target,
            detail,
        )

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _: Any) -> Literal[False]:
        if isinstance(exc, RepairRefused):
            self._desk.audit_refused(self._operator, self._action, self._target, exc.audited, self._detail)
            log.warning(
                "repairs.refused",
                operator=self._operator,
                action=self._action,
                target=self._target,
                error=exc.error,
            )
        return False


def _case(tx: DeskTransaction, case_id: int, scope: Scope) -> CaseView:
    """The case, locked, if the operator sees it; else refused as if there were no such case."""
    case = tx.case(case_id)
    if case is None:
        raise RepairRefused(404, "not_found", f"no case {case_id}")
    if not scope.sees(case.merchant_id):
        raise RepairRefused(404, "not_found", f"no case {case_id}", out_of_scope(f"case:{case_id}"))
    return case


def _repair(tx: DeskTransaction, repair_id: int, scope: Scope) -> tuple[RepairView, CaseView]:
    """The repair and its case, locked, if the operator sees the case; else refused as if there
    were no such repair (its case's id is not told)."""
    repair = tx.repair(repair_id)
    if repair is None:
        raise RepairRefused(404, "not_found", f"no repair {repair_id}")
    case = tx.case(repair.case_id)
    if case is None or not scope.sees(case.merchant_id):
        why = out_of_scope(f"case:{repair.case_id}")
        raise RepairRefused(404, "not_found", f"no repair {repair_id}", why)
    return repair, case


def propose(
    desk: RepairDesk,
    operator: str,
    case_id: int,
    repair_type: RepairType,
    *,
    reason: str,
    amount_minor: int | None = None,
    currency: str | None = None,
    mt5_login: int | None = None,
    scope: Scope,
) -> Proposed:
    """Propose a repair of ``case_id`` (or amend the proposal of the same record and type)."""
    asked = {"repair_type": repair_type.value, "amount_minor": amount_minor, "currency": currency}
    with _Refusals(desk, operator, "propose", f"case:{case_id}", asked), desk.acting() as tx:
        case = _case(tx, case_id, scope)
        command = command_for(
            case,
            repair_type,
            reason=reason,
            amount_minor=amount_minor,
            currency=currency,
            mt5_login=mt5_login,
        )
        existing = tx.repair_by_key(command.source_key, repair_type)
        if existing is not None and existing.command == command:  # the same repair again: one repair
            target = f"repair:{existing.repair_id}"
            tx.audit(
                operator, "propose", target, command.reason, {"unchanged": True, "digest": command.digest}
            )
            return Proposed(
                existing.repair_id, existing.status, command.digest, existing.revision, changed=False
            )
        if existing is None:
            repair_id, revision, action = tx.insert_repair(command, operator), 1, "propose"
        else:
            check_amend(existing)
            tx.amend_repair(existing.repair_id, command, operator)
            repair_id, revision, action = existing.repair_id, existing.revision + 1, "amend"
        note = (
            f"repair {repair_id} ({repair_type.value}, revision {revision}) by {operator}: {command.reason}"
        )
        tx.history(case_id, "repair_proposed", operator, note)
        tx.audit(
            operator,
            action,
            f"repair:{repair_id}",
            command.reason,
            command.to_json() | {"digest": command.digest},
        )
        return Proposed(repair_id, RepairStatus.PROPOSED, command.digest, revision, changed=True)


def approve(
    desk: RepairDesk, operator: str, repair_id: int, seen_digest: str, *, scope: Scope
) -> RepairStatus:
    """Approve exactly the command seen (by its digest): a close is executed now, any other type is
    sent to the service that executes it."""
    with (
        _Refusals(desk, operator, "approve", f"repair:{repair_id}", {"digest": seen_digest}),
        desk.acting() as tx,
    ):
        repair, case = _repair(tx, repair_id, scope)
        check_approve(repair, operator, seen_digest)
        if case.status is CaseStatus.RESOLVED:
            raise RepairRefused(409, "case_resolved", f"case {case.case_id} is resolved: nothing to repair")
        command = repair.command
        if command.repair_type is RepairType.CLOSE:
            tx.approve(repair_id, operator, seen_digest, RepairStatus.EXECUTED)
            resolution = (
                f"closed by repair {repair_id}: {command.reason} (proposed by {repair.proposed_by},"
                f" approved by {operator})"
            )
            tx.resolve_case(case.case_id, operator, resolution)
            tx.history(case.case_id, "repair_executed", operator, resolution)
            status = RepairStatus.EXECUTED
        else:
            tx.approve(repair_id, operator, seen_digest, RepairStatus.SENT)
            tx.send(repair_id, command, repair.proposed_by, operator)
            tx.history(
                case.case_id,
                "repair_approved",
                operator,
                f"repair {repair_id} approved by {operator}, sent to {command.target}",
            )
            status = RepairStatus.SENT
        tx.audit(
            operator, "approve", f"repair:{repair_id}", None, {"digest": seen_digest, "status": status.value}
        )
        return status


def reject(desk: RepairDesk, operator: str, repair_id: int, reason: str, *, scope: Scope) -> None:
    with _Refusals(desk, operator, "reject", f"repair:{repair_id}", {}), desk.acting() as tx:
        repair, _ = _repair(tx, repair_id, scope)
        why = check_reject(repair, operator, reason)
        tx.reject(repair_id, operator, why)
        tx.history(
            repair.case_id, "repair_rejected", operator, f"repair {repair_id} rejected by {operator}: {why}"
        )
        tx.audit(operator, "reject", f"repair:{repair_id}", why, {})


def acknowledge(desk: RepairDesk, operator: str, case_id: int, note: str, *, scope: Scope) -> CaseStatus:
    """open → acknowledged, with who and why; an acknowledged or resolved case is left as it is."""
    with _Refusals(desk, operator, "acknowledge", f"case:{case_id}", {}), desk.acting() as tx:
        case = _case(tx, case_id, scope)
        if case.status is CaseStatus.OPEN:
            tx.acknowledge(case_id)
            tx.history(case_id, "acknowledged", operator, note)
        tx.audit(operator, "acknowledge", f"case:{case_id}", note, {"status_before": case.status.value})
        return CaseStatus.ACKNOWLEDGED if case.status is CaseStatus.OPEN else case.status


def reopen(desk: RepairDesk, operator: str, case_id: int, reason: str, *, scope: Scope) -> CaseStatus:
    """A resolved case opened again by a person, with why (new evidence outside the run, a close
    made in error)."""
    with _Refusals(desk, operator, "reopen", f"case:{case_id}", {}), desk.acting() as tx:
        case = _case(tx, case_id, scope)
        why = reason.strip()
        if not why or len(why) > REASON_MAX:
            raise RepairRefused(400, "bad_reopen", f"reason: why, 1-{REASON_MAX} characters")
        if case.status is not CaseStatus.RESOLVED:
            raise RepairRefused(
                409, "not_resolved", f"case {case_id} is {case.status.value}: it is open already"
            )
        tx.reopen_case(case_id)
        tx.history(case_id, "reopened", operator, why)
        tx.audit(operator, "reopen", f"case:{case_id}", why, {})
        return CaseStatus.OPEN


@dataclass(frozen=True, slots=True)
class Decided:
    line: int
    case_id: int
    action: str
    outcome: str  # done | refused
    detail: str
    repair_id: int | None = None
    command_digest: str | None = None


def decide(desk: RepairDesk, operator: str, decisions: list[Decision], *, scope: Scope) -> list[Decided]:
    """Every decision of a checked file, each its own act (audited on its own; a refusal of one
    leaves the others as they are; a case of a merchant the operator does not have is refused as
    one that does not exist). Proposed repairs still wait for a second person each."""
    results: list[Decided] = []
    for d in decisions:
        try:
            if d.action == "acknowledge":
                status = acknowledge(desk, operator, d.case_id, d.reason, scope=scope)
                results.append(Decided(d.line, d.case_id, d.action, "done", status.value))
            elif d.action == "reopen":
                status = reopen(desk, operator, d.case_id, d.reason, scope=scope)
                results.append(Decided(d.line, d.case_id, d.action, "done", status.value))
            else:
                assert d.repair_type is not None
                proposed = propose(
                    desk,
                    operator,
                    d.case_id,
                    d.repair_type,
                    reason=d.reason,
                    amount_minor=d.amount_minor,
                    currency=d.currency,
                    mt5_login=d.mt5_login,
                    scope=scope,
                )
                detail = "proposed" if proposed.changed else "the same repair was proposed already"
                results.append(
                    Decided(
                        d.line,
                        d.case_id,
                        d.action,
                        "done",
                        detail,
                        proposed.repair_id,
                        proposed.command_digest,
                    )
                )
        except RepairRefused as refused:
            results.append(
                Decided(d.line, d.case_id, d.action, "refused", f"{refused.error}: {refused.detail}")
            )
    return results
