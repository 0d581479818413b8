"""``CaseWrites``: what a run does to the case queue on PostgreSQL. A part of ``PgReconStore``.

A run's case actions (``domain.cases``) are applied in one transaction: new cases opened, known
ones updated, reopened or resolved, each with its history row; the merchant of every case the run
found is stamped in one statement, and the ``CaseOpened``/``CaseResolved`` events go to the outbox
in the same transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date
from typing import Any, Final

from backbone import failpoints
from backbone.outbox import OutboxWriter
from sqlalchemy import Connection, Engine, func, select, update
from sqlalchemy.dialects.postgresql import insert

from reconciler.adapters import pg_merchants
from reconciler.adapters.pg_raw import raw
from reconciler.adapters.tables import case_history, cases
from reconciler.domain.cases import (
    CaseAction,
    CaseStatus,
    Finding,
    KnownCase,
    Open,
    Reopen,
    ResolveFixed,
    Unchanged,
    UpdateEvidence,
)
from reconciler.domain.merchants import KnownMerchants, MerchantRefs

KEYS_CHUNK: Final = 5000  # case keys read in one statement
ACTOR: Final = "reconciler"


class CaseWrites:
    _engine: Engine
    _outbox: OutboxWriter | None
    _topic: str

    def known_cases(self, keys: Sequence[str]) -> dict[str, KnownCase]:
        found: dict[str, KnownCase] = {}
        with self._engine.connect() as conn:
            for start in range(0, len(keys), KEYS_CHUNK):
                chunk = list(keys[start : start + KEYS_CHUNK])
                for r in conn.execute(
                    select(cases.c.id, cases.c.case_key, cases.c.status, cases.c.evidence_digest).where(
                        cases.c.case_key.in_(chunk)
                    )
                ):
                    found[r.case_key] = KnownCase(
                        r.id, r.case_key, CaseStatus(r.status), bytes(r.evidence_digest)
                    )
        return found

    def open_cases_of(self, business_date: date) -> list[KnownCase]:
        with self._engine.connect() as conn:
            return [
                KnownCase(r.id, r.case_key, CaseStatus(r.status), bytes(r.evidence_digest))
                for r in conn.execute(
                    select(cases.c.id, cases.c.case_key, cases.c.status, cases.c.evidence_digest).where(
                        cases.c.business_date == business_date,
                        cases.c.status.in_([CaseStatus.OPEN.value, CaseStatus.ACKNOWLEDGED.value]),
                    )
                )
            ]

    def known_merchants(self, refs: MerchantRefs) -> KnownMerchants:
        with self._engine.connect() as conn, raw(conn).cursor() as cur:
            return pg_merchants.known(cur, refs)

    def apply_cases(
        self,
        run_id: int,
        business_date: date,
        actions: Sequence[CaseAction],
        merchants: Mapping[str, str | None],
    ) -> dict[str, int]:
        counts = {"opened": 0, "updated": 0, "reopened": 0, "resolved": 0, "unchanged": 0}
        events: list[tuple[str, str, dict[str, Any]]] = []
        with self._engine.begin() as conn:
            for action in actions:
                match action:
                    case Open(finding=f):
                        case_id = self._open(conn, f, business_date, run_id)
                        self._history(conn, case_id, "opened", run_id, f.summary)
                        events.append(("CaseOpened", f.case_key, _opened(case_id, business_date, f)))
                        counts["opened"] += 1
                    case Unchanged(case_id=case_id):
                        conn.execute(update(cases).where(cases.c.id == case_id).values(last_run_id=run_id))
                        counts["unchanged"] += 1
                    case UpdateEvidence(case_id=case_id, finding=f):
                        self._evidence(conn, case_id, run_id, f)
                        self._history(conn, case_id, "evidence_changed", run_id, f.summary)
                        counts["updated"] += 1
                    case Reopen(case_id=case_id, finding=f):
                        self._evidence(conn, case_id, run_id, f, reopen=True)
                        self._history(conn, case_id, "reopened", run_id, f.summary)
                        events.append(("CaseOpened", f.case_key, _opened(case_id, business_date, f)))
                        counts["reopened"] += 1
                    case ResolveFixed(case_id=case_id, case_key=key):
                        note = f"run {run_id} no longer finds it: the evidence was fixed"
                        conn.execute(
                            update(cases)
                            .where(cases.c.id == case_id)
                            .values(
                                status=CaseStatus.RESOLVED.value,
                                resolved_at=func.now(),
                                updated_at=func.now(),
                                resolution=note,
                                last_run_id=run_id,
                            )
                        )
                        self._history(conn, case_id, "resolved", run_id, note)
                        events.append(
                            (
                                "CaseResolved",
                                key,
                                {"case_id": case_id, "resolution": note, "resolved_by": ACTOR},
                            )
                        )
                        counts["resolved"] += 1
            with raw(conn).cursor() as cur:  # every case the run found, opened or not: one statement
                pg_merchants.stamp(cur, merchants)
            if self._outbox is not None and events:
                messages = [self._outbox.event(self._topic, t, key, body) for t, key, body in events]
                self._outbox.write(raw(conn), messages)
            failpoints.hit("reconciler.run.cases_written")  # written, not committed
        return counts

    @staticmethod
    def _open(conn: Connection, f: Finding, business_date: date, run_id: int) -> int:
        """A new case of the run's finding (its merchant is written with the run's others)."""
        return int(
            conn.execute(
                insert(cases)
                .values(
                    case_key=f.case_key,
                    case_class=f.case_class.value,
                    severity=f.severity.value,
                    business_date=business_date,
                    status=CaseStatus.OPEN.value,
                    summary=f.summary,
                    evidence=f.evidence,
                    evidence_digest=f.digest,
                    first_run_id=run_id,
                    last_run_id=run_id,
                )
                .returning(cases.c.id)
            ).scalar_one()
        )

    @staticmethod
    def _evidence(conn: Connection, case_id: int, run_id: int, f: Finding, *, reopen: bool = False) -> None:
        values: dict[str, Any] = {
            "summary": f.summary,
            "evidence": f.evidence,
            "evidence_digest": f.digest,
            "last_run_id": run_id,
            "updated_at": func.now(),
        }
        if reopen:
            values |= {
                "status": CaseStatus.OPEN.value,
                "resolved_at": None,
                "resolution": None,
                "reopened": cases.c.reopened + 1,
            }
        conn.execute(update(cases).where(cases.c.id == case_id).values(**values))

    @staticmethod
    def _history(
        conn: Connection, case_id: int, action: str, run_id: int | None, note: str, actor: str = ACTOR
    ) -> None:
        conn.execute(
            insert(case_history).values(case_id=case_id, action=action, run_id=run_id, actor=actor, note=note)
        )


def _opened(case_id: int, business_date: date, f: Finding) -> dict[str, Any]:
    return {
        "case_id": case_id,
        "business_date": business_date.isoformat(),
        "case_class": f.case_class.value,
        "source_key": f.case_key,
        "summary": f.summary[:500],
    }
