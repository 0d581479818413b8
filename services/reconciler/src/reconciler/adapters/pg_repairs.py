"""``PgRepairDesk``: operators' acts on cases and repairs, on PostgreSQL (SQLAlchemy Core).

Every act is one transaction; rows are locked ``FOR UPDATE`` (the case, then the repair), so two
checkers approving the same repair at once are serialised and the second finds it already sent. The
table's own checks keep the rule too: the approver is never the proposer, and the approved digest
is the command's. The audit table is append-only (a trigger refuses UPDATE, DELETE and TRUNCATE).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from backbone.carddata import redact_card_numbers, redact_detail, redact_text
from backbone.outbox import OutboxWriter
from sqlalchemy import Connection, Engine, func, insert, select, update

from reconciler.adapters.pg_scope import sees_audit, sees_repair
from reconciler.adapters.tables import audit, case_history, cases, repairs
from reconciler.application.ports import DeskTransaction
from reconciler.domain.cases import CaseClass, CaseStatus
from reconciler.domain.merchants import Scope
from reconciler.domain.repairs import CaseView, ProposedCommand, RepairStatus, RepairType, RepairView


def _command(raw: dict[str, Any]) -> ProposedCommand:
    return ProposedCommand(
        repair_type=RepairType(raw["repair_type"]),
        case_id=int(raw["case_id"]),
        source_key=str(raw["source_key"]),
        target=str(raw["target"]),
        amount_minor=raw["amount_minor"],
        currency=raw["currency"],
        mt5_login=raw["mt5_login"],
        payment_id=raw["payment_id"],
        reason=str(raw["reason"]),
        fact_type=raw.get("fact_type"),
        fact=raw.get("fact"),
    )


def _view(row: Any) -> RepairView:
    return RepairView(
        repair_id=int(row.id),
        case_id=int(row.case_id),
        status=RepairStatus(row.status),
        command=_command(row.command),
        proposed_by=str(row.proposed_by),
        revision=int(row.revision),
    )


class _Tx:
    def __init__(self, conn: Connection, desk: PgRepairDesk) -> None:
        self._conn, self._desk = conn, desk

    def case(self, case_id: int) -> CaseView | None:
        row = self._conn.execute(
            select(
                cases.c.id,
                cases.c.case_key,
                cases.c.case_class,
                cases.c.status,
                cases.c.evidence,
                cases.c.merchant_id,
            )
            .where(cases.c.id == case_id)
            .with_for_update()
        ).first()
        if row is None:
            return None
        return CaseView(
            int(row.id),
            row.case_key,
            CaseClass(row.case_class),
            CaseStatus(row.status),
            row.evidence,
            row.merchant_id,
        )

    def repair(self, repair_id: int) -> RepairView | None:
        row = self._conn.execute(select(repairs).where(repairs.c.id == repair_id).with_for_update()).first()
        return None if row is None else _view(row)

    def repair_by_key(self, source_key: str, repair_type: RepairType) -> RepairView | None:
        row = self._conn.execute(
            select(repairs)
            .where(repairs.c.source_key == source_key, repairs.c.repair_type == repair_type.value)
            .with_for_update()
        ).first()
        return None if row is None else _view(row)

    def insert_repair(self, command: ProposedCommand, maker: str) -> int:
        return int(
            self._conn.execute(
                insert(repairs)
                .values(
                    case_id=command.case_id,
                    source_key=command.source_key,
                    repair_type=command.repair_type.value,
                    target=command.target,
                    command=command.to_json(),
                    command_digest=command.digest,
                    status=RepairStatus.PROPOSED.value,
                    proposed_by=maker,
                )
                .returning(repairs.c.id)
            ).scalar_one()
        )

    def amend_repair(self, repair_id: int, command: ProposedCommand, maker: str) -> None:
        self._conn.execute(
            update(repairs)
            .where(repairs.c.id == repair_id)
            .values(
                case_id=command.case_id,
                command=command.to_json(),
                command_digest=command.digest,
                revision=repairs.c.revision + 1,
                status=RepairStatus.PROPOSED.value,
                proposed_by=maker,
                proposed_at=func.now(),
                rejected_by=None,
                rejected_reason=None,
            )
        )

    def approve(self, repair_id: int, checker: str, digest: str, status: RepairStatus) -> None:
        done = status is RepairStatus.EXECUTED
        self._conn.execute(
            update(repairs)
            .where(repairs.c.id == repair_id)
            .values(
                approved_by=checker,
                approved_at=func.now(),
                approved_digest=digest,
                status=status.value,
                finished_at=func.now() if done else None,
                outcome_detail="executed at approval: no money moves" if done else None,
            )
        )

    def reject(self, repair_id: int, checker: str, reason: str) -> None:
        self._conn.execute(
            update(repairs)
            .where(repairs.c.id == repair_id)
            .values(status=RepairStatus.REJECTED.value, rejected_by=checker, rejected_reason=reason)
        )

    def acknowledge(self, case_id: int) -> None:
        self._conn.execute(
            update(cases)
            .where(cases.c.id == case_id)
            .values(status=CaseStatus.ACKNOWLEDGED.value, updated_at=func.now())
        )

    def reopen_case(self, case_id: int) -> None:
        row = self._conn.execute(
            update(cases)
            .where(cases.c.id == case_id)
            .values(
                status=CaseStatus.OPEN.value,
                resolved_at=None,
                resolution=None,
                updated_at=func.now(),
                reopened=cases.c.reopened + 1,
            )
            .returning(cases.c.case_key, cases.c.case_class, cases.c.business_date, cases.c.summary)
        ).one()
        body = {
            "case_id": case_id,
            "business_date": row.business_date.isoformat(),
            "case_class": row.case_class,
            "source_key": row.case_key,
            "summary": row.summary[:500],
        }
        self._desk.outbox_write(self._conn, self._desk.events_topic, "CaseOpened", row.case_key, body)

    def resolve_case(self, case_id: int, actor: str, resolution: str) -> None:
        self._conn.execute(
            update(cases)
            .where(cases.c.id == case_id)
            .values(
                status=CaseStatus.RESOLVED.value,
                resolved_at=func.now(),
                updated_at=func.now(),
                resolution=resolution,
            )
        )
        self.history(case_id, "resolved", actor, resolution)
        key = self._conn.execute(select(cases.c.case_key).where(cases.c.id == case_id)).scalar_one()
        body = {"case_id": case_id, "resolution": resolution[:500], "resolved_by": actor}
        self._desk.outbox_write(self._conn, self._desk.events_topic, "CaseResolved", key, body)

    def send(self, repair_id: int, command: ProposedCommand, maker: str, checker: str) -> None:
        body = {
            "repair_id": repair_id,
            "case_id": command.case_id,
            "repair_type": command.repair_type.value,
            "target": command.target,
            "source_key": command.source_key,
            "requested_by": maker,
            "approved_by": checker,
            "amount_minor": command.amount_minor,
            "currency": command.currency,
            "mt5_login": command.mt5_login,
            "reason": command.reason,
            "fact_type": command.fact_type,
            "fact_json": None if command.fact is None else json.dumps(command.fact, sort_keys=True),
            "command_digest": command.digest,
        }
        key = command.payment_id or command.source_key  # one payment's repairs stay in order
        self._desk.outbox_write(self._conn, self._desk.repairs_topic, "ExecuteRepair", key, body)

    def history(self, case_id: int, action: str, actor: str, note: str) -> None:
        self._conn.execute(
            insert(case_history).values(case_id=case_id, action=action, actor=actor, note=note)
        )

    def audit(
        self, operator: str, action: str, target: str, reason: str | None, detail: dict[str, Any]
    ) -> None:
        _audit(self._conn, operator, action, target, "done", reason, detail)


def _audit(
    conn: Connection,
    operator: str,
    action: str,
    target: str,
    outcome: str,
    reason: str | None,
    detail: dict[str, Any],
) -> None:
    conn.execute(
        insert(audit).values(
            operator=redact_card_numbers(operator)[:200],
            action=action,
            target=redact_card_numbers(target),
            outcome=outcome,
            reason=redact_text(reason),
            detail=redact_detail(detail),
        )
    )


class PgRepairDesk:
    def __init__(
        self, engine: Engine, outbox: OutboxWriter | None, events_topic: str, repairs_topic: str
    ) -> None:
        self._engine, self._outbox = engine, outbox
        self.events_topic, self.repairs_topic = events_topic, repairs_topic

    @contextmanager
    def acting(self) -> Iterator[DeskTransaction]:
        with self._engine.begin() as conn:
            yield _Tx(conn, self)

    def audit_refused(
        self, operator: str, action: str, target: str, reason: str, detail: dict[str, Any]
    ) -> None:
        with self._engine.begin() as conn:
            _audit(conn, operator, action, target, "refused", reason[:1000], detail)

    def outbox_write(
        self, conn: Connection, topic: str, event_type: str, key: str, body: dict[str, Any]
    ) -> None:
        if self._outbox is None:
            return
        raw = conn.connection.driver_connection
        self._outbox.write(raw, [self._outbox.event(topic, event_type, key, body)])  # type: ignore[arg-type]

    # -- reads, each within the operator's merchants (``pg_scope``) ---------------------------------------

    def repair(self, repair_id: int, *, scope: Scope) -> dict[str, Any] | None:
        with self._engine.connect() as conn:
            row = conn.execute(select(repairs).where(repairs.c.id == repair_id, sees_repair(scope))).first()
        return None if row is None else dict(row._mapping)

    def repairs_where(
        self, *, case_id: int | None = None, status: str | None = None, limit: int = 100, scope: Scope
    ) -> list[dict[str, Any]]:
        query = select(repairs).where(sees_repair(scope)).order_by(repairs.c.id.desc()).limit(limit)
        if case_id is not None:
            query = query.where(repairs.c.case_id == case_id)
        if status is not None:
            query = query.where(repairs.c.status == status)
        with self._engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(query)]

    def audit_where(
        self, *, target: str | None = None, operator: str | None = None, limit: int = 100, scope: Scope
    ) -> list[dict[str, Any]]:
        query = select(audit).where(sees_audit(scope)).order_by(audit.c.id.desc()).limit(limit)
        if target is not None:
            query = query.where(audit.c.target == target)
        if operator is not None:
            query = query.where(audit.c.operator == operator)
        with self._engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(query)]
