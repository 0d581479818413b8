"""The reconciliation from a terminal: ``import-settlement`` and ``import-bank`` store a report from
a file drop (a refused file stores nothing), ``run`` reconciles one business date with its progress
on stderr and exits with the run's status (``EXIT_FOR_STATUS``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any, Final

import typer
from backbone.logs import configure_logging
from backbone.mt5.settings import Mt5GatewaySettings
from backbone.settings import SettingsError, load_settings
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from reconciler.application.imports import import_report
from reconciler.application.ports import AlreadyImported, RunInProgress
from reconciler.application.runs import RunResult, run_date
from reconciler.bootstrap import deal_source, mt5_gateway, recon_store, report_source, run_config
from reconciler.domain.reports import ReportRefused, ReportType
from reconciler.entrypoints.cli_common import (
    STATUS_STYLE,
    DateOption,
    JsonOption,
    err,
    out,
    parse_date,
    print_json,
    recon_settings,
)
from reconciler.settings import RunSettings

EXIT_FOR_STATUS: Final = {"clean": 0, "discrepancies": 1, "incomplete": 3, "failed": 3}


def _import(kind: ReportType, path: Path, day_text: str, as_json: bool) -> None:
    settings, day = recon_settings(), parse_date(day_text)
    try:
        data = path.read_bytes()
    except OSError as exc:
        err.print(f"cannot read {path}: {exc.strerror}")
        raise typer.Exit(2) from None
    store = recon_store(settings)
    try:
        result = import_report(store, settings.provider, kind, day, data, f"file:{path.name}")
    except ReportRefused as refused:
        err.print(f"[red]refused[/red] {path}: {refused} (nothing of the file was stored)")
        raise typer.Exit(2) from None
    payload = {"outcome": type(result).__name__, "import_id": result.import_id, "version": result.version}
    if not isinstance(result, AlreadyImported):
        payload |= {"rows": result.row_count, "changes": result.changes}
    if as_json:
        print_json(payload)
        return
    if isinstance(result, AlreadyImported):
        out.print(
            f"{path.name}: already imported as version {result.version} "
            f"(import {result.import_id}); nothing changed"
        )
        return
    out.print(
        f"{path.name}: imported as version {result.version} (import {result.import_id}), "
        f"{result.row_count} rows"
    )
    changes = result.changes
    if changes:
        out.print(
            f"  against version {result.version - 1}: {len(changes['added'])} added, "
            f"{len(changes['removed'])} removed, {len(changes['changed'])} changed"
        )
        for name in ("added", "removed", "changed"):
            for key in changes[name][:20]:
                out.print(f"    {name}: {key}")


def import_settlement(
    path: Annotated[Path, typer.Argument(help="the settlement CSV")],
    date_: DateOption,
    as_json: JsonOption = False,
) -> None:
    """Import the PSP's settlement report for a business date from a file."""
    _import("settlement", path, date_, as_json)


def import_bank(
    path: Annotated[Path, typer.Argument(help="the bank-deposit CSV")],
    date_: DateOption,
    as_json: JsonOption = False,
) -> None:
    """Import the bank-deposit file for a business date from a file."""
    _import("bank_deposits", path, date_, as_json)


def run(
    date_: DateOption,
    wait: Annotated[
        bool, typer.Option("--wait", help="wait for a running run of the date instead of refusing")
    ] = False,
    as_of_ms: Annotated[
        int | None, typer.Option("--as-of-ms", help="'now' for the grace period (tests, replays)")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Reconcile one business date: fetch the reports, read MT5, match, update cases."""
    settings, day = recon_settings(), parse_date(date_)
    try:
        run_settings = load_settings(RunSettings)
        mt5_settings = load_settings(Mt5GatewaySettings)
        reports = report_source(settings, run_settings)
    except SettingsError as exc:
        err.print(str(exc))
        raise typer.Exit(2) from None
    configure_logging("reconciler-run")
    store = recon_store(settings)
    now_ms = as_of_ms if as_of_ms is not None else time.time_ns() // 1_000_000
    with mt5_gateway(mt5_settings) as gateway:
        try:
            with Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                TimeElapsedColumn(),
                console=err,
                transient=True,
            ) as bar:
                task = bar.add_task(f"reconciling {day}")
                result = run_date(
                    store,
                    reports,
                    deal_source(gateway, run_settings),
                    run_config(settings, run_settings),
                    day,
                    now_ms,
                    wait=wait,
                    progress=lambda step: bar.update(task, description=f"{day}: {step}"),
                )
        except RunInProgress as busy:
            err.print(str(busy))
            raise typer.Exit(4) from None
    if as_json:
        print_json(_result_json(result))
    else:
        _print_result(result)
    raise typer.Exit(EXIT_FOR_STATUS[result.status])


def _result_json(result: RunResult) -> dict[str, Any]:
    return {
        "run_id": result.run_id,
        "business_date": result.business_date.isoformat(),
        "status": result.status,
        "problems": result.problems,
        "counts": result.counts,
        "cases": result.cases,
        "findings": [
            {
                "case_key": f.case_key,
                "case_class": f.case_class.value,
                "severity": f.severity.value,
                "summary": f.summary,
            }
            for f in result.findings
        ],
    }


def _print_result(result: RunResult) -> None:
    style = STATUS_STYLE.get(result.status, "white")
    out.print(f"run {result.run_id} of {result.business_date}: [{style}]{result.status}[/{style}]")
    for problem in result.problems:
        out.print(f"  [yellow]incomplete:[/yellow] {problem}")
    table = Table(title="findings", show_lines=False)
    for column in ("class", "severity", "case key", "summary"):
        table.add_column(column)
    for f in result.findings:
        table.add_row(f.case_class.value, f.severity.value, f.case_key, f.summary)
    if result.findings:
        out.print(table)
    counts = Table(title="counts")
    counts.add_column("what")
    counts.add_column("n", justify="right")
    for name, n in sorted(result.counts.items()):
        counts.add_row(name, str(n))
    for name, n in sorted(result.cases.items()):
        counts.add_row(f"cases {name}", str(n))
    out.print(counts)
