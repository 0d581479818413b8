"""Importing a PSP report: parsed whole (``domain.reports``), stored immutably as a version.

The same bytes again: ``AlreadyImported``, nothing changes. Different bytes for the same provider,
type and date: the next version, with its differences from the previous one (rows added, removed,
changed, by source key) stored with it and returned. A bad file: ``ReportRefused`` naming the line,
and nothing of it is stored.
"""

from __future__ import annotations

from datetime import date

from backbone.logs import get_logger

from reconciler.application.ports import AlreadyImported, ImportResult, ReconStore
from reconciler.domain.reports import ReportRefused, ReportType, parse_report

log = get_logger(__name__)


def import_report(
    store: ReconStore, provider: str, report_type: ReportType, business_date: date, data: bytes, source: str
) -> ImportResult:
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
    log.info(
        "reconciler.imported",
        provider=provider,
        report_type=report_type,
        business_date=business_date.isoformat(),
        source=source,
        rows=report.row_count,
        outcome=type(result).__name__,
        version=result.version,
        changes=None if isinstance(result, AlreadyImported) else result.changes,
    )
    return result
