"""One reconciliation run of one business date. The run never moves money.

1. Take the date's lock (a second run of the date waits, or refuses with a clear message).
2. Fetch the PSP's settlement report and bank-deposit file from its API and import them (a file
   dropped earlier with ``import-settlement`` / ``import-bank`` counts too: the latest version of
   the date is matched). A report that cannot be fetched or is refused makes the run incomplete.
   A report type the source does not serve (Stripe's bank deposits: ``report_types``) is not
   fetched; it counts when imported, and a missing one makes the run incomplete as any other.
3. Read MT5's balance deals for the day's window widened by the grace period on both sides; a read
   that did not complete makes the run incomplete, and the MT5 layer is skipped (never "no deals").
4. Match every layer the inputs allow (``adapters.matching``), then move the case queue
   (``domain.cases.decide``): an incomplete run opens and updates cases but resolves none. Every
   case the run finds is given the merchant its records name (``domain.merchants``), so a merchant
   that became known since (a fact that arrived late) reaches a case found again too.

Status: ``clean`` (complete, no finding), ``discrepancies`` (complete, findings), ``incomplete``
(an input missing or unreadable; findings still become cases), ``failed`` (the run itself broke).

A run killed anywhere (the failpoints ``reconciler.run.<step>`` let a test or a drill kill it exactly
between two steps) leaves its row ``running`` and its lock to PostgreSQL, which drops the lock with
the connection; the next run of the date marks the row ``failed`` and does the whole run again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from backbone import failpoints
from backbone.logs import get_logger

from reconciler.application.imports import import_report
from reconciler.application.ports import (
    DealSource,
    MatchParams,
    NoAnswer,
    ReconStore,
    ReportSource,
    Unavailable,
)
from reconciler.domain.cases import Finding, decide
from reconciler.domain.dates import BusinessCalendar
from reconciler.domain.merchants import MerchantRefs, merchant_of, refs_of
from reconciler.domain.reports import ReportRefused

log = get_logger(__name__)
Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class RunConfig:
    provider: str
    calendar: BusinessCalendar
    grace_ms: int
    require_bank: bool = True


@dataclass(frozen=True, slots=True)
class RunResult:
    run_id: int
    business_date: date
    status: str
    problems: list[str]
    counts: dict[str, int]
    cases: dict[str, int]
    findings: list[Finding] = field(default_factory=list)


def _quiet(_: str) -> None:
    pass


def run_date(
    store: ReconStore,
    reports: ReportSource | None,
    deals: DealSource,
    config: RunConfig,
    business_date: date,
    as_of_ms: int,
    *,
    wait: bool = False,
    progress: Progress = _quiet,
) -> RunResult:
    """Reconcile ``business_date`` as of ``as_of_ms``; raises RunInProgress if another run holds it."""
    with store.run_lock(business_date, wait=wait):
        run_id = store.start_run(business_date, as_of_ms)
        log.info("reconciler.run_started", run_id=run_id, business_date=business_date.isoformat())
        failpoints.hit("reconciler.run.started")
        try:
            return _run(store, reports, deals, config, business_date, as_of_ms, run_id, progress)
        except BaseException as exc:
            store.finish_run(run_id, "failed", [f"{type(exc).__name__}: {exc}"], {}, None, None)
            raise


def _run(
    store: ReconStore,
    reports: ReportSource | None,
    deals: DealSource,
    config: RunConfig,
    day: date,
    as_of_ms: int,
    run_id: int,
    progress: Progress,
) -> RunResult:
    problems = [] if reports is None else _fetch_reports(store, reports, config, day, progress)
    failpoints.hit("reconciler.run.imported")
    settlement_id = store.latest_import(config.provider, "settlement", day)
    bank_id = store.latest_import(config.provider, "bank_deposits", day)
    if settlement_id is None:
        problems.append(f"no settlement report of {config.provider} for {day} has been imported")
    if bank_id is None and config.require_bank:
        problems.append(f"no bank-deposit file of {config.provider} for {day} has been imported")
    start_ms, end_ms = config.calendar.window_ms(day)
    progress("reading MT5 balance deals")
    found = deals.balance_deals(start_ms - config.grace_ms, end_ms + config.grace_ms)
    mt5_complete = not isinstance(found, NoAnswer)
    if isinstance(found, NoAnswer):
        problems.append(f"MT5 deals could not be read completely: {found.reason}")
    else:
        store.save_deals(run_id, found)
    failpoints.hit("reconciler.run.deals_read")
    progress("matching")
    params = MatchParams(
        run_id=run_id,
        business_date=day,
        provider=config.provider,
        as_of_ms=as_of_ms,
        grace_ms=config.grace_ms,
        day_start_ms=start_ms,
        day_end_ms=end_ms,
        settlement_import_id=settlement_id,
        bank_import_id=bank_id,
        mt5_complete=mt5_complete,
    )
    counts, findings = store.match(params)
    counts["mt5_deals_read"] = len(found) if not isinstance(found, NoAnswer) else 0
    failpoints.hit("reconciler.run.matched")
    progress("updating cases")
    complete = not problems
    known = store.known_cases([f.case_key for f in findings])
    actions = decide(findings, known, store.open_cases_of(day), complete=complete)
    case_counts = store.apply_cases(run_id, day, actions, _merchants(store, findings))
    status = "incomplete" if problems else ("discrepancies" if findings else "clean")
    summary: dict[str, Any] = {"counts": counts, "cases": case_counts, "findings": len(findings)}
    store.finish_run(run_id, status, problems, summary, settlement_id, bank_id)
    log.info(
        "reconciler.run_finished",
        run_id=run_id,
        business_date=day.isoformat(),
        status=status,
        findings=len(findings),
        problems=problems,
    )
    return RunResult(run_id, day, status, problems, counts, case_counts, findings)


def _fetch_reports(
    store: ReconStore, reports: ReportSource, config: RunConfig, day: date, progress: Progress
) -> list[str]:
    """Fetch and import every report type the source serves; the problems of those that could not
    be fetched or were refused (the run is then incomplete)."""
    problems: list[str] = []
    for report_type in reports.report_types:
        progress(f"fetching the {report_type} report")
        data = reports.fetch(report_type, day)
        if isinstance(data, Unavailable):
            problems.append(f"{report_type} report of {config.provider} unavailable: {data.reason}")
            continue
        try:
            import_report(store, config.provider, report_type, day, data, "api")
        except ReportRefused as refused:
            problems.append(f"{report_type} report refused: {refused}")
    return problems


def _merchants(store: ReconStore, findings: list[Finding]) -> dict[str, str | None]:
    """Each finding's merchant, from the records it names: one lookup for the whole run."""
    refs = {f.case_key: refs_of(f.evidence) for f in findings}
    known = store.known_merchants(MerchantRefs.union(refs.values()))
    return {key: merchant_of(r, known) for key, r in refs.items()}
