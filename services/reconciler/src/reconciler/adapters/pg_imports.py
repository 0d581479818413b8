"""``Imports``: the reports a run reconciles, stored on PostgreSQL. A part of ``PgReconStore``.

A report's bytes are imported once: the same digest again is ``AlreadyImported``. Another file of
the same provider, type and date is its next version, stored whole with its difference from the
previous one (rows added, removed, changed by source key). Versions of one report are numbered
under an advisory lock, so they have no gaps. A plain settlement file is checked and converted in
SQL (``plain_settlement``); any other report arrives parsed and is written with COPY.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import Any, Final

import psycopg
from backbone.logs import get_logger
from sqlalchemy import Connection, Engine, func, select, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects.postgresql import insert

from reconciler.adapters import plain_settlement
from reconciler.adapters.pg_raw import IMPORT_LOCK_NAMESPACE, copy_rows
from reconciler.adapters.tables import bank_rows, imports, settlement_rows
from reconciler.application.ports import AlreadyImported, Imported, ImportResult
from reconciler.domain.reports import BankRow, ParsedReport, PlainFile, ReportType, SettlementRow

log = get_logger(__name__)


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


class Imports:
    _engine: Engine

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
                copy_rows(conn, settlement_rows, (_settlement_tuple(import_id, r) for r in report.settlement))
            else:
                copy_rows(conn, bank_rows, (_bank_tuple(import_id, r) for r in report.bank))
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
            select(func.pg_advisory_xact_lock(IMPORT_LOCK_NAMESPACE, func.hashtext("|".join(map(str, key)))))
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
