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

This module assembles the commands and runs the processes; imports and runs are ``run_cli``'s, the
reads of runs and cases ``reads_cli``'s, operators' acts through the API ``operator_cli``'s.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Final

import typer
from backbone.cli import refuse_card_data
from backbone.consumer.dlq import dlq_main
from backbone.consumer.settings import ConsumerSettings
from backbone.logs import configure_logging
from backbone.outbox.relay import run_relay_from_env
from backbone.postgres.migrations import MigrationSource, backbone_source, migrate
from backbone.runtime import health_for
from backbone.settings import SettingsError, env_value, load_settings

from reconciler.bootstrap import recon_store, repair_desk, replay_context
from reconciler.entrypoints import operator_cli, reads_cli, run_cli
from reconciler.entrypoints.cli_common import err, print_json, recon_settings
from reconciler.entrypoints.consumer import consumer_environ, run_consumer
from reconciler.settings import SERVICE_NAME, ApiSettings, MonitorSettings

MIGRATIONS: Final = Path(__file__).resolve().parents[3] / "migrations"

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="The reconciler: PSP, books and MT5 agree."
)
runs_app = typer.Typer(no_args_is_help=True, help="Reconciliation runs.")
cases_app = typer.Typer(no_args_is_help=True, help="Discrepancy cases.")
app.add_typer(runs_app, name="runs")
app.add_typer(cases_app, name="cases")
app.add_typer(operator_cli.repairs_app, name="repairs")
app.add_typer(operator_cli.audit_app, name="audit")
runs_app.command(name="list")(reads_cli.runs_list)
runs_app.command(name="show")(reads_cli.runs_show)
cases_app.command(name="acknowledge")(operator_cli.acknowledge)
cases_app.command(name="reopen")(operator_cli.reopen)
cases_app.command(name="export")(operator_cli.export)
cases_app.command(name="decide")(operator_cli.decide)
cases_app.command(name="list")(reads_cli.cases_list)
cases_app.command(name="show")(reads_cli.cases_show)


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
    settings = recon_settings()
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
    print_json({"applied": migrate(url, [backbone_source(), MigrationSource(SERVICE_NAME, MIGRATIONS)])})


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def dlq(ctx: typer.Context) -> None:
    """Dead letters of the consumer: list | replay ID --by --reason | discard ID --by --reason."""
    recon = recon_settings()
    consumer = load_settings(ConsumerSettings, consumer_environ(None, recon))
    raise typer.Exit(
        dlq_main(
            list(ctx.args),
            consumer.database_url.reveal(),
            lambda: replay_context(consumer.consumer_name, recon),
        )
    )


app.command(name="import-settlement")(run_cli.import_settlement)
app.command(name="import-bank")(run_cli.import_bank)
app.command(name="run")(run_cli.run)


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
