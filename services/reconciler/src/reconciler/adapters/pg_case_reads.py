"""``CaseReads``: what operators read of the reconciler (runs, the case queue, one case with its
history) and the gauges the alerts read, on PostgreSQL through SQLAlchemy Core. A part of
``PgReconStore``; each read is its own short transaction. Cases are read within the operator's
merchants (``scope``, ``pg_scope``); runs and the gauges are the whole day's, of no merchant."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import Any, Final

from sqlalchemy import Engine, and_, func, literal_column, or_, select, text
from sqlalchemy.dialects.postgresql import distinct_on

from reconciler.adapters.pg_scope import sees_case
from reconciler.adapters.tables import case_history, cases, runs
from reconciler.domain.cases import CaseStatus
from reconciler.domain.merchants import Scope

# what names a payment in a case's records: migration 0010's index expression, exactly
CASE_PAYMENT_REFS: Final = func.jsonb_path_query_array(
    cases.c.evidence, literal_column("'strict $.**.payment_id'::jsonpath")
).op("||")(
    func.jsonb_path_query_array(cases.c.evidence, literal_column("'strict $.**.payment_intent_id'::jsonpath"))
)


class CaseReads:
    _engine: Engine

    def runs_of(self, business_date: date | None, limit: int = 50) -> list[dict[str, Any]]:
        query = select(runs).order_by(runs.c.id.desc()).limit(limit)
        if business_date is not None:
            query = query.where(runs.c.business_date == business_date)
        with self._engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(query)]

    def run(self, run_id: int) -> dict[str, Any] | None:
        with self._engine.connect() as conn:
            row = conn.execute(select(runs).where(runs.c.id == run_id)).first()
        return None if row is None else dict(row._mapping)

    def cases_where(
        self,
        *,
        business_date: date | None = None,
        status: str | None = None,
        case_class: str | None = None,
        limit: int = 100,
        payment_refs: Sequence[str] = (),
        scope: Scope,
    ) -> list[dict[str, Any]]:
        """Cases by date, status and class, of the operator's merchants (``scope``); with
        ``payment_refs``, only those whose records name one of them (our payment id or the PSP's
        payment id: the ``cases_payment_refs`` index)."""
        query = (
            select(
                cases.c.id,
                cases.c.case_key,
                cases.c.case_class,
                cases.c.severity,
                cases.c.business_date,
                cases.c.status,
                cases.c.summary,
                cases.c.opened_at,
                cases.c.updated_at,
                cases.c.reopened,
                cases.c.merchant_id,
            )
            .where(sees_case(scope))
            .order_by(cases.c.id)
            .limit(limit)
        )
        conditions = []
        if business_date is not None:
            conditions.append(cases.c.business_date == business_date)
        if status is not None:
            conditions.append(cases.c.status == status)
        if case_class is not None:
            conditions.append(cases.c.case_class == case_class)
        if payment_refs:
            named = [CASE_PAYMENT_REFS.op("@>")(func.jsonb_build_array(ref)) for ref in payment_refs]
            conditions.append(or_(*named))
        if conditions:
            query = query.where(and_(*conditions))
        with self._engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(query)]

    def ping(self) -> None:
        with self._engine.connect() as conn:
            conn.execute(select(1))

    def gauges(self, days: int = 7) -> dict[str, Any]:
        """What the alerts read (seed 002 §6.1): open cases by class and severity, the oldest open
        case's age, and per business date of the last ``days``: the last successful run, the last
        run's duration, the incomplete or failed runs."""
        with self._engine.connect() as conn:
            open_by = conn.execute(
                select(cases.c.case_class, cases.c.severity, func.count())
                .where(cases.c.status != CaseStatus.RESOLVED.value)
                .group_by(cases.c.case_class, cases.c.severity)
            ).all()
            oldest = conn.execute(
                select(func.extract("epoch", func.now() - func.min(cases.c.opened_at))).where(
                    cases.c.status != CaseStatus.RESOLVED.value
                )
            ).scalar()
            recent = runs.c.started_at > func.now() - text(f"interval '{int(days)} days'")
            per_date = conn.execute(
                select(
                    runs.c.business_date,
                    func.max(func.extract("epoch", runs.c.finished_at)).filter(
                        runs.c.status.in_(["clean", "discrepancies"])
                    ),
                    func.count().filter(runs.c.status.in_(["incomplete", "failed"])),
                )
                .where(recent)
                .group_by(runs.c.business_date)
            ).all()
            durations = conn.execute(
                select(
                    runs.c.business_date,
                    func.extract("epoch", runs.c.finished_at - runs.c.started_at),
                )
                .where(recent, runs.c.finished_at.is_not(None))
                .ext(distinct_on(runs.c.business_date))
                .order_by(runs.c.business_date, runs.c.id.desc())
            ).all()
        return {
            "open": [(c, s, int(n)) for c, s, n in open_by],
            "oldest_open_s": float(oldest) if oldest is not None else 0.0,
            "dates": [(str(d), float(ok) if ok is not None else None, int(bad)) for d, ok, bad in per_date],
            "durations": [(str(d), float(s)) for d, s in durations],
        }

    def case(self, case_id: int, *, scope: Scope) -> dict[str, Any] | None:
        """The case with its history, if the operator sees it (None: none, or not of their merchants)."""
        with self._engine.connect() as conn:
            row = conn.execute(select(cases).where(cases.c.id == case_id, sees_case(scope))).first()
            if row is None:
                return None
            history = [
                dict(h._mapping)
                for h in conn.execute(
                    select(case_history).where(case_history.c.case_id == case_id).order_by(case_history.c.id)
                )
            ]
        found = dict(row._mapping)
        found.pop("evidence_digest", None)
        found["history"] = history
        return found
