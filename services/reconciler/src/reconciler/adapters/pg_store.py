"""``PgReconStore``: imports, runs, matching and cases on PostgreSQL through SQLAlchemy Core.

Each method is its own transaction (``engine.begin()``), except the run lock, which holds one
connection for the whole run: ``pg_try_advisory_lock`` (or ``pg_advisory_lock`` when waiting) on a
key of the business date. PostgreSQL releases it when that connection ends, so a crashed run never
blocks the date; the next run marks the crashed run's row ``failed``. What operators read (runs,
the case queue, the gauges) is ``pg_case_reads.CaseReads``, a part of this store.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import date
from typing import Any, Final

import psycopg
from backbone import failpoints
from backbone.logs import get_logger
from backbone.money import currency_exponents as known_exponents
from backbone.outbox import OutboxWriter
from sqlalchemy import (
    Connection,
    Engine,
    Table,
    create_engine,
    func,
    select,
    text,
    update,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects.postgresql import insert

from reconciler.adapters import pg_merchants, plain_settlement
from reconciler.adapters.matching import match_all
from reconciler.adapters.pg_case_reads import CaseReads
from reconciler.adapters.tables import (
    bank_rows,
    case_history,
    cases,
    currency_exponents,
    findings,
    imports,
    mt5_deals,
    runs,
    settlement_rows,
)
from reconciler.application.ports import (
    AlreadyImported,
    Deal,
    Imported,
    ImportResult,
    MatchParams,
    RunInProgress,
)
from reconciler.domain.cases import (
    CaseAction,
    CaseClass,
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
from reconciler.domain.reports import BankRow, ParsedReport, PlainFile, ReportType, SettlementRow

LOCK_NAMESPACE: Final = 0x5EC0  # advisory lock key 1: the reconciler's runs; key 2: the date
INSERT_CHUNK: Final = 5000
ACTOR: Final = "reconciler"
log = get_logger(__name__)


def make_engine(database_url: str, *, application_name: str = "reconciler") -> Engine:
    """An engine on the psycopg (v3) dialect; ``database_url`` is a libpq URL or conninfo string,
    exactly what every other service takes."""

    def connect() -> psycopg.Connection[Any]:
        return psycopg.connect(database_url, application_name=application_name)

    return create_engine(
        "postgresql+psycopg://", creator=connect, pool_size=2, max_overflow=2, pool_pre_ping=True
    )


def _settlement_tuple(import_id: int, r: SettlementRow) -> tuple[Any, ...]:
    """A row in the column order of ``settlement_rows`` (a million a day: no dict per row)."""
    return (
        import_id, r.source_key, r.line_no, r.balance_transaction_id, r.type, r.payment_intent_id,
        r.source_id, r.reference, r.source_reference, r.currency, r.gross_minor, r.fee_minor,
        r.net_minor, r.payout_batch_id, r.created_at_ms,
    )  # fmt: skip  # packed: a few items a line read better than one each


def _bank_tuple(import_id: int, r: BankRow) -> tuple[Any, ...]:
    """A row in the column order of ``bank_rows``."""
    return (
        import_id, r.source_key, r.line_no, r.deposit_id, r.payout_batch_id, r.value_date, r.currency,
        r.amount_minor, r.item_count, r.bank_reference,
    )  # fmt: skip  # packed: a few items a line read better than one each


_COMPARED: Final = {
    "settlement": (
        "type",
        "payment_intent_id",
        "source_id",
        "currency",
        "gross_minor",
        "fee_minor",
        "net_minor",
        "payout_batch_id",
    ),
    "bank_deposits": ("payout_batch_id", "value_date", "currency", "amount_minor", "item_count"),
}


class PgReconStore(CaseReads):
    def __init__(self, engine: Engine, outbox: OutboxWriter | None, events_topic: str) -> None:
        self._engine, self._outbox, self._topic = engine, outbox, events_topic

    @property
    def engine(self) -> Engine:
        return self._engine

    # -- imports -------------------------------------------------------------------------------------

    def save_import(self, report: ParsedReport, source: str) -> ImportResult:
        with self._engine.begin() as conn:
            head = self._version(
                conn, report.provider, report.report_type, report.business_date, report.digest
            )
            if isinstance(head, AlreadyImported):
                return head
            version, previous_id = head
            changes = {} if previous_id is None else self._changes(conn, previous_id, report)
            import_id = self._import_row(conn, report, version, source, report.row_count, changes)
            if report.report_type == "settlement":
                _copy(conn, settlement_rows, (_settlement_tuple(import_id, r) for r in report.settlement))
            else:
                _copy(conn, bank_rows, (_bank_tuple(import_id, r) for r in report.bank))
            return Imported(import_id, version, report.row_count, changes)

    def import_plain_settlement(self, plain: PlainFile, data: bytes, source: str) -> ImportResult | None:
        """COPY the file's bytes, check and convert them in SQL (``adapters.plain_settlement``);
        None when a row is not plain: nothing is stored, the checked parser decides."""
        try:
            with self._engine.begin() as conn:
                head = self._version(conn, plain.provider, "settlement", plain.business_date, plain.digest)
                if isinstance(head, AlreadyImported):
                    return head
                version, previous_id = head
                conn.execute(text("SET LOCAL work_mem = '256MB'"))  # the rows sort by line in memory
                lines, times = plain_settlement.stage(conn, plain, data)
                rows = plain_settlement.typed(lines, times, plain.provider, plain.business_date.isoformat())
                changes = {} if previous_id is None else plain_settlement.changes(conn, rows, previous_id)
                import_id = self._import_row(conn, plain, version, source, plain.rows, changes)
                stored = plain_settlement.insert_rows(conn, rows, import_id)
                if stored != plain.rows:
                    raise plain_settlement.NotPlain(f"{plain.rows - stored} rows are not plain")
                return Imported(import_id, version, plain.rows, changes)
        except (plain_settlement.NotPlain, psycopg.errors.DataError, psycopg.errors.UniqueViolation) as exc:
            log.info("reconciler.plain_import_declined", reason=str(exc).splitlines()[0])
        except (sa_exc.DataError, sa_exc.IntegrityError) as exc:
            log.info("reconciler.plain_import_declined", reason=str(exc.orig).splitlines()[0])
        return None

    def _version(
        self, conn: Connection, provider: str, report_type: str, business_date: date, digest: bytes
    ) -> AlreadyImported | tuple[int, int | None]:
        """Under the import lock: the import with these bytes, or the next version number and the
        previous version's id."""
        key = (provider, report_type, business_date)
        # one importer per (provider, type, date) at a time: versions are numbered without gaps
        conn.execute(
            select(func.pg_advisory_xact_lock(LOCK_NAMESPACE + 1, func.hashtext("|".join(map(str, key)))))
        )
        same = conn.execute(
            select(imports.c.id, imports.c.version).where(
                imports.c.provider == provider,
                imports.c.report_type == report_type,
                imports.c.business_date == business_date,
                imports.c.digest == digest,
            )
        ).first()
        if same is not None:
            return AlreadyImported(same.id, same.version)
        previous = self._latest(conn, provider, report_type, business_date)
        return (1, None) if previous is None else (previous[1] + 1, previous[0])

    @staticmethod
    def _import_row(
        conn: Connection,
        report: ParsedReport | PlainFile,
        version: int,
        source: str,
        row_count: int,
        changes: dict[str, Any],
    ) -> int:
        return int(
            conn.execute(
                insert(imports)
                .values(
                    provider=report.provider,
                    report_type=report.report_type if isinstance(report, ParsedReport) else "settlement",
                    business_date=report.business_date,
                    version=version,
                    digest=report.digest,
                    source=source,
                    row_count=row_count,
                    changes=changes,
                )
                .returning(imports.c.id)
            ).scalar_one()
        )

    def _changes(self, conn: Connection, previous_id: int, report: ParsedReport) -> dict[str, Any]:
        """The difference from the previous version by source key: added, removed, changed."""
        table = settlement_rows if report.report_type == "settlement" else bank_rows
        compared = _COMPARED[report.report_type]
        old = {
            r.source_key: tuple(getattr(r, c) for c in compared)
            for r in conn.execute(
                select(table.c.source_key, *(table.c[c] for c in compared)).where(
                    table.c.import_id == previous_id
                )
            )
        }
        rows: Sequence[SettlementRow | BankRow] = report.settlement or report.bank
        new = {r.source_key: tuple(getattr(r, c) for c in compared) for r in rows}
        changed = sorted(k for k in new.keys() & old.keys() if new[k] != old[k])
        return {
            "previous_import_id": previous_id,
            "added": sorted(new.keys() - old.keys()),
            "removed": sorted(old.keys() - new.keys()),
            "changed": changed,
        }

    @staticmethod
    def _latest(
        conn: Connection, provider: str, report_type: str, business_date: date
    ) -> tuple[int, int] | None:
        row = conn.execute(
            select(imports.c.id, imports.c.version)
            .where(
                imports.c.provider == provider,
                imports.c.report_type == report_type,
                imports.c.business_date == business_date,
            )
            .order_by(imports.c.version.desc())
            .limit(1)
        ).first()
        return None if row is None else (row.id, row.version)

    def latest_import(self, provider: str, report_type: ReportType, business_date: date) -> int | None:
        with self._engine.connect() as conn:
            found = self._latest(conn, provider, report_type, business_date)
        return None if found is None else found[0]

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
            _copy(conn, mt5_deals, rows)

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

    # -- cases ---------------------------------------------------------------------------------------

    def known_cases(self, keys: Sequence[str]) -> dict[str, KnownCase]:
        found: dict[str, KnownCase] = {}
        with self._engine.connect() as conn:
            for start in range(0, len(keys), INSERT_CHUNK):
                chunk = list(keys[start : start + INSERT_CHUNK])
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
        with self._engine.connect() as conn, _raw(conn).cursor() as cur:
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
            with _raw(conn).cursor() as cur:  # every case the run found, opened or not: one statement
                pg_merchants.stamp(cur, merchants)
            if self._outbox is not None and events:
                messages = [self._outbox.event(self._topic, t, key, body) for t, key, body in events]
                self._outbox.write(_raw(conn), messages)
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


def _raw(conn: Connection) -> psycopg.Connection[Any]:
    """The transaction's own psycopg connection (under SQLAlchemy's)."""
    raw = conn.connection.driver_connection
    assert isinstance(raw, psycopg.Connection)
    return raw


def _copy(conn: Connection, table: Table, rows: Iterable[tuple[Any, ...]]) -> None:
    """Bulk insert with COPY on the transaction's own psycopg connection (an import of a million
    rows is one statement, not a million). Rows are tuples in the table's column order, without the
    generated ``id``."""
    columns = ", ".join(c.name for c in table.columns if c.name != "id")
    with _raw(conn).cursor() as cur, cur.copy(f"COPY {table.name} ({columns}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


def _opened(case_id: int, business_date: date, f: Finding) -> dict[str, Any]:
    return {
        "case_id": case_id,
        "business_date": business_date.isoformat(),
        "case_class": f.case_class.value,
        "source_key": f.case_key,
        "summary": f.summary[:500],
    }
