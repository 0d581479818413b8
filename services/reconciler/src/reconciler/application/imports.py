"""Importing a PSP report: parsed whole (``domain.reports``), stored immutably as a version.

The same bytes again: ``AlreadyImported``, nothing changes. Different bytes for the same provider,
type and date: the next version, with its differences from the previous one (rows added, removed,
changed, by source key) stored with it and returned. A bad file: ``ReportRefused`` naming the line,
and nothing of it is stored.

A settlement file whose bytes need no CSV judgement (``domain.reports.plain_settlement``) is first
offered to the store whole, to be checked and converted in bulk; the store takes it only if every
row is one the checked parser takes as it stands, and stores the same rows. Every other file, and
every file the store declines, goes through the checked parser, which is the rule.
"""

from __future__ import annotations

from datetime import date

from backbone.logs import get_logger

from reconciler.application.ports import AlreadyImported, ImportResult, ReconStore
from reconciler.domain.reports import ReportRefused, ReportType, parse_report, plain_settlement

log = get_logger(__name__)


def import_report(
    store: ReconStore, provider: str, report_type: ReportType, business_date: date, data: bytes, source: str
) -> ImportResult:
    plain = plain_settlement(provider, business_date, data) if report_type == "settlement" else None
    if plain is not None:
        fast = store.import_plain_settlement(plain, data, source)
        if fast is not None:
            _imported(provider, report_type, business_date, source, plain.rows, fast)
            return fast
    try:
        report = parse_report(provider, report_type, business_date, data)
    except ReportRefused as refused:
        log.warning(
            "reconciler.import_refused",
            provider=provider,
            report_type=report_type,
            business_date=business_date.isoformat(),
            source=source,
            line=refused.line,
            reason=refused.reason,
        )
        raise
    result = store.save_import(report, source)
    _imported(provider, report_type, business_date, source, report.row_count, result)
    return result


def _imported(
    provider: str, report_type: ReportType, business_date: date, source: str, rows: int, result: ImportResult
) -> None:
    log.info(
        "reconciler.imported",
        provider=provider,
        report_type=report_type,
        business_date=business_date.isoformat(),
        source=source,
        rows=rows,
        outcome=type(result).__name__,
        version=result.version,
        changes=None if isinstance(result, AlreadyImported) else result.changes,
    )
