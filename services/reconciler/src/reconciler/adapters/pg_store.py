"""``PgReconStore``: imports, runs, matching and cases on PostgreSQL through SQLAlchemy Core.

Each method is its own transaction (``engine.begin()``), except the run lock, which holds one
connection for the whole run: ``pg_try_advisory_lock`` (or ``pg_advisory_lock`` when waiting) on a
key of the business date. PostgreSQL releases it when that connection ends, so a crashed run never
blocks the date; the next run marks the crashed run's row ``failed``. The store's other parts:
storing reports is ``pg_imports.Imports``, writing a run's cases ``pg_case_writes.CaseWrites``, and
what operators read (runs, the case queue, the gauges) ``pg_case_reads.CaseReads``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import date
from typing import Any

import psycopg
from backbone.money import currency_exponents as known_exponents
from backbone.outbox import OutboxWriter
from sqlalchemy import Engine, create_engine, func, select, text, update
from sqlalchemy.dialects.postgresql import insert

from reconciler.adapters.matching import match_all
from reconciler.adapters.pg_case_reads import CaseReads
from reconciler.adapters.pg_case_writes import CaseWrites
from reconciler.adapters.pg_imports import Imports
from reconciler.adapters.pg_raw import LOCK_NAMESPACE, copy_rows
from reconciler.adapters.tables import currency_exponents, findings, mt5_deals, runs
from reconciler.application.ports import Deal, MatchParams, RunInProgress
from reconciler.domain.cases import CaseClass, Finding


def make_engine(database_url: str, *, application_name: str = "reconciler") -> Engine:
    """An engine on the psycopg (v3) dialect; ``database_url`` is a libpq URL or conninfo string,
    exactly what every other service takes."""

    def connect() -> psycopg.Connection[Any]:
        return psycopg.connect(database_url, application_name=application_name)

    return create_engine(
        "postgresql+psycopg://", creator=connect, pool_size=2, max_overflow=2, pool_pre_ping=True
    )


class PgReconStore(Imports, CaseWrites, CaseReads):
    def __init__(self, engine: Engine, outbox: OutboxWriter | None, events_topic: str) -> None:
        self._engine, self._outbox, self._topic = engine, outbox, events_topic

    @property
    def engine(self) -> Engine:
        return self._engine

    # -- runs ----------------------------------------------------------------------------------------

    @contextmanager
    def run_lock(self, business_date: date, *, wait: bool) -> Iterator[None]:
        day = business_date.toordinal()
        with self._engine.connect() as conn:
            if wait:
                conn.execute(select(func.pg_advisory_lock(LOCK_NAMESPACE, day)))
            elif not conn.execute(select(func.pg_try_advisory_lock(LOCK_NAMESPACE, day))).scalar_one():
                conn.rollback()
                running = self._running(business_date)
                raise RunInProgress(
                    f"a reconciliation of {business_date} is already running"
                    + (f" (run {running})" if running is not None else "")
                    + "; wait for it (--wait) or try later"
                )
            conn.commit()
            try:
                yield
            finally:
                conn.execute(select(func.pg_advisory_unlock(LOCK_NAMESPACE, day)))
                conn.commit()

    def _running(self, business_date: date) -> int | None:
        with self._engine.connect() as conn:
            return conn.execute(
                select(runs.c.id).where(runs.c.business_date == business_date, runs.c.status == "running")
            ).scalar()

    def start_run(self, business_date: date, as_of_ms: int) -> int:
        """A new run row; a 'running' row of the date left by a crashed run (the lock is ours now,
        so nobody runs it) is marked failed first."""
        with self._engine.begin() as conn:
            conn.execute(
                update(runs)
                .where(runs.c.business_date == business_date, runs.c.status == "running")
                .values(
                    status="failed",
                    finished_at=func.now(),
                    problems=["the run did not finish (crashed)"],
                )
            )
            conn.execute(
                insert(currency_exponents)
                .values([{"currency": c, "exponent": e} for c, e in sorted(known_exponents().items())])
                .on_conflict_do_nothing()
            )
            return int(
                conn.execute(
                    insert(runs)
                    .values(business_date=business_date, status="running", as_of_ms=as_of_ms)
                    .returning(runs.c.id)
                ).scalar_one()
            )

    def save_deals(self, run_id: int, deals: Sequence[Deal]) -> None:
        rows = ((run_id, d.ticket, d.login, d.action, d.comment, d.profit, d.time_ms) for d in deals)
        with self._engine.begin() as conn:
            copy_rows(conn, mt5_deals, rows)

    def match(self, params: MatchParams) -> tuple[dict[str, int], list[Finding]]:
        with self._engine.begin() as conn:
            # the run's own memory: day-wide hashes and sorts in memory; no JIT (compiling cost more
            # than it saved here). maintenance_work_mem stays the server's: 1GB made the seal's two
            # index builds slower (1M payments: 9.4 s against 4.2 s)
            for setting in ("work_mem = '256MB'", "jit = off"):
                conn.execute(text(f"SET LOCAL {setting}"))
            counts = match_all(conn, params)
            rows = conn.execute(
                select(findings.c.case_key, findings.c.case_class, findings.c.summary, findings.c.evidence)
                .where(findings.c.run_id == params.run_id)
                .order_by(findings.c.case_key)
            ).all()
        return counts, [Finding(r.case_key, CaseClass(r.case_class), r.summary, r.evidence) for r in rows]

    def finish_run(
        self,
        run_id: int,
        status: str,
        problems: Sequence[str],
        summary: dict[str, Any],
        settlement_import_id: int | None,
        bank_import_id: int | None,
    ) -> None:
        with self._engine.begin() as conn:
            conn.execute(
                update(runs)
                .where(runs.c.id == run_id)
                .values(
                    status=status,
                    finished_at=func.now(),
                    problems=list(problems),
                    summary=summary,
                    settlement_import_id=settlement_import_id,
                    bank_import_id=bank_import_id,
                )
            )
