"""``python -m reconciler <command>``: every process and operator tool of the reconciler (typer + rich).

    api                             the HTTP API (port 8085): runs, cases, acknowledge, gauges
    consume                         the idempotent consumer feeding the read models
    relay                           the outbox relay (CaseOpened / CaseResolved)
    monitor                         the streaming monitor (faust): MonitorAlert within minutes, port 8086
    migrate                         the backbone's and the reconciler's migrations on DATABASE_URL
    run --date D [--wait]           reconcile one business date (progress on stderr, summary table)
    import-settlement FILE --date D the PSP's settlement report from a file drop
    import-bank FILE --date D       the bank-deposit file from a file drop
    runs list [--date D] | runs show ID
    cases list [--date D] [--status S] [--class C] | cases show ID
    dlq list|replay|discard         dead letters of the consumer

Exit codes: 0 done (a run: clean), 1 a run with discrepancies, 3 a run incomplete, 2 bad input or
configuration, 4 another run of the date holds the lock. ``--json`` prints one JSON object instead of
tables.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import date
from pathlib import Path
from typing import Annotated, Any, Final

import typer
from backbone.cli import refuse_card_data
from backbone.consumer.dlq import dlq_main
from backbone.consumer.settings import ConsumerSettings
from backbone.logs import configure_logging
from backbone.mt5.settings import Mt5GatewaySettings
from backbone.outbox.relay import run_relay_from_env
from backbone.postgres.migrations import MigrationSource, backbone_source, migrate
from backbone.runtime import health_for
from backbone.settings import SettingsError, env_value, load_settings
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from reconciler.application.imports import import_report
from reconciler.application.ports import AlreadyImported, RunInProgress
from reconciler.application.runs import RunResult, run_date
from reconciler.bootstrap import (
    deal_source,
    mt5_gateway,
    recon_store,
    repair_desk,
    replay_context,
    report_source,
    run_config,
)
from reconciler.domain.merchants import EVERY_MERCHANT
from reconciler.domain.reports import ReportRefused, ReportType
from reconciler.entrypoints import operator_cli
from reconciler.entrypoints.consumer import consumer_environ, run_consumer
from reconciler.settings import SERVICE_NAME, ApiSettings, MonitorSettings, ReconSettings, RunSettings

MIGRATIONS: Final = Path(__file__).resolve().parents[3] / "migrations"
EXIT_FOR_STATUS: Final = {"clean": 0, "discrepancies": 1, "incomplete": 3, "failed": 3}

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="The reconciler: PSP, books and MT5 agree."
)
runs_app = typer.Typer(no_args_is_help=True, help="Reconciliation runs.")
cases_app = typer.Typer(no_args_is_help=True, help="Discrepancy cases.")
app.add_typer(runs_app, name="runs")
app.add_typer(cases_app, name="cases")
app.add_typer(operator_cli.repairs_app, name="repairs")
app.add_typer(operator_cli.audit_app, name="audit")
cases_app.command(name="acknowledge")(operator_cli.acknowledge)
cases_app.command(name="reopen")(operator_cli.reopen)
cases_app.command(name="export")(operator_cli.export)
cases_app.command(name="decide")(operator_cli.decide)
out = Console()
err = Console(stderr=True)

DateOption = Annotated[str, typer.Option("--date", help="business date YYYY-MM-DD")]
JsonOption = Annotated[bool, typer.Option("--json", help="one JSON object instead of tables")]


def _settings() -> ReconSettings:
    try:
        return load_settings(ReconSettings)
    except SettingsError as exc:
        err.print(str(exc))
        raise typer.Exit(2) from None


def _date(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        err.print(f"--date {text!r} is not a date YYYY-MM-DD")
        raise typer.Exit(2) from None


def _json(payload: Any) -> None:
    print(json.dumps(payload, default=str, sort_keys=True))


@app.command()
def consume() -> None:
    """The idempotent consumer feeding the read models."""
    run_consumer()


@app.command()
def relay() -> None:
    """The outbox relay (CaseOpened / CaseResolved)."""
    run_relay_from_env(SERVICE_NAME)


@app.command()
def api() -> None:
    """The HTTP API: runs, cases, repairs and the audit (cases:view), acknowledge (cases:work),
    propose (repairs:propose), approve/reject (repairs:approve), the alerts' gauges."""
    settings = _settings()
    try:
        api_settings = load_settings(ApiSettings)
    except SettingsError as exc:
        err.print(str(exc))
        raise typer.Exit(2) from None
    from backbone.consumer.dlq_http import DeadLetterSource  # noqa: PLC0415 - aiohttp only here

    from reconciler.entrypoints.api import serve  # noqa: PLC0415 - aiohttp only for this process

    store = recon_store(settings)
    consumer = api_settings.consumer_name
    source = DeadLetterSource(consumer, settings.database_url, lambda: replay_context(consumer, settings))
    serve(api_settings, store, repair_desk(settings, store.engine), [source])


@app.command()
def monitor() -> None:
    """The streaming monitor: captured deposits not credited, credits not booked, within minutes
    (non-authoritative: MonitorAlert on recon.monitor-events; the daily run stays the proof)."""
    try:
        settings = load_settings(MonitorSettings)
    except SettingsError as exc:
        err.print(str(exc))
        raise typer.Exit(2) from None
    configure_logging(f"{SERVICE_NAME}-monitor")
    health = health_for(settings.metrics_port)
    from reconciler.monitor.app import run_monitor  # noqa: PLC0415 - faust only for this process

    run_monitor(settings, health)


@app.command(name="migrate")
def migrate_command() -> None:
    """Apply the backbone's and the reconciler's migrations on DATABASE_URL (or DATABASE_URL_FILE)."""
    try:
        url = env_value("DATABASE_URL")
    except SettingsError as exc:
        err.print(str(exc))
        raise typer.Exit(2) from exc
    if not url:
        err.print("DATABASE_URL is required but not set")
        raise typer.Exit(2)
    _json({"applied": migrate(url, [backbone_source(), MigrationSource(SERVICE_NAME, MIGRATIONS)])})


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def dlq(ctx: typer.Context) -> None:
    """Dead letters of the consumer: list | replay ID --by --reason | discard ID --by --reason."""
    recon = _settings()
    consumer = load_settings(ConsumerSettings, consumer_environ(None, recon))
    raise typer.Exit(
        dlq_main(
            list(ctx.args),
            consumer.database_url.reveal(),
            lambda: replay_context(consumer.consumer_name, recon),
        )
    )


def _import(kind: ReportType, path: Path, day_text: str, as_json: bool) -> None:
    settings, day = _settings(), _date(day_text)
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
        _json(payload)
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


@app.command(name="import-settlement")
def import_settlement(
    path: Annotated[Path, typer.Argument(help="the settlement CSV")],
    date_: DateOption,
    as_json: JsonOption = False,
) -> None:
    """Import the PSP's settlement report for a business date from a file."""
    _import("settlement", path, date_, as_json)


@app.command(name="import-bank")
def import_bank(
    path: Annotated[Path, typer.Argument(help="the bank-deposit CSV")],
    date_: DateOption,
    as_json: JsonOption = False,
) -> None:
    """Import the bank-deposit file for a business date from a file."""
    _import("bank_deposits", path, date_, as_json)


@app.command()
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
    settings, day = _settings(), _date(date_)
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
        _json(_result_json(result))
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


_STATUS_STYLE: Final = {"clean": "green", "discrepancies": "red", "incomplete": "yellow", "failed": "red"}


def _print_result(result: RunResult) -> None:
    style = _STATUS_STYLE.get(result.status, "white")
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


@runs_app.command(name="list")
def runs_list(
    date_: Annotated[str | None, typer.Option("--date")] = None, as_json: JsonOption = False
) -> None:
    """The latest runs (of one date)."""
    rows = recon_store(_settings()).runs_of(_date(date_) if date_ else None)
    if as_json:
        _json({"runs": rows})
        return
    table = Table(title="runs")
    for column in ("id", "date", "status", "started", "finished", "findings", "problems"):
        table.add_column(column)
    for r in rows:
        style = _STATUS_STYLE.get(r["status"], "white")
        table.add_row(
            str(r["id"]),
            str(r["business_date"]),
            f"[{style}]{r['status']}[/{style}]",
            str(r["started_at"])[:19],
            str(r["finished_at"] or "")[:19],
            str((r["summary"] or {}).get("findings", "")),
            "; ".join(r["problems"]),
        )
    out.print(table)


@runs_app.command(name="show")
def runs_show(run_id: int) -> None:
    """One run with its counts and problems (JSON)."""
    found = recon_store(_settings()).run(run_id)
    if found is None:
        err.print(f"no run {run_id}")
        raise typer.Exit(2)
    _json(found)


@cases_app.command(name="list")
def cases_list(
    date_: Annotated[str | None, typer.Option("--date")] = None,
    status: Annotated[str | None, typer.Option("--status", help="open | acknowledged | resolved")] = None,
    case_class: Annotated[str | None, typer.Option("--class")] = None,
    as_json: JsonOption = False,
) -> None:
    """Cases, oldest first."""
    day = _date(date_) if date_ else None  # the database's own reader: every merchant's cases
    rows = recon_store(_settings()).cases_where(
        business_date=day, status=status, case_class=case_class, scope=EVERY_MERCHANT
    )
    if as_json:
        _json({"cases": rows})
        return
    table = Table(title="cases")
    for column in ("id", "date", "class", "severity", "status", "summary"):
        table.add_column(column)
    for r in rows:
        table.add_row(
            str(r["id"]), str(r["business_date"]), r["case_class"], r["severity"], r["status"], r["summary"]
        )
    out.print(table)


@cases_app.command(name="show")
def cases_show(case_id: int) -> None:
    """One case with its evidence side by side and its history (JSON)."""
    found = recon_store(_settings()).case(case_id, scope=EVERY_MERCHANT)
    if found is None:
        err.print(f"no case {case_id}")
        raise typer.Exit(2)
    _json(found)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if refuse_card_data(args):
        return 2
    try:
        code = app(args, prog_name="python -m reconciler", standalone_mode=False)
    except typer.Exit as done:
        return int(done.exit_code)
    except SystemExit as done:
        return int(done.code or 0)
    except typer.TyperException as exc:  # a usage error: typer printed nothing yet
        err.print(f"usage error: {exc}")
        return 2
    return code if isinstance(code, int) else 0
