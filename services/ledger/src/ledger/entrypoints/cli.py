"""The ledger's operator commands (typer), run by ``python -m ledger`` (``__main__.py``, through
``backbone.cli.dispatch``) beside its processes (consume, relay, api, dlq).

    migrate --url URL        apply the backbone's and the ledger's migrations (as the owner role)
    provision-role --admin-url URL [--database ledger] [--role ledger_app] [--password-env VAR]
                             create the runtime role if missing and grant it what it needs, no more
    verify                   check the hash chain; prints the first broken link; exit 1 if broken
    check-balances           rebuild balances from entries and compare with the projections
    rebuild-balances         the same, and overwrite projections that drifted (chain locked)
    import-settlement FILE --by WHO
    reverse JOURNAL_ID --by WHO --reason WHY [--business-date YYYY-MM-DD]
    compensate JOURNAL_ID --key KEY --entries JSON --by WHO --reason WHY [--business-date ...]

Outputs are one JSON object per line on stdout; logs go to stderr. The environment is the one
``typer.Context.obj`` holds (None: the process's; tests pass their own).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, is_dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Annotated, Any, Final, NoReturn

import typer
from backbone.cli import console, refuse_card_data
from backbone.ids import new_event_id
from backbone.logs import configure_logging
from backbone.postgres.migrations import MigrationSource, backbone_source, migrate
from backbone.settings import env_value
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ledger.adapters.roles import provision_runtime_role
from ledger.application.corrections import compensate_journal, reverse_journal
from ledger.application.settlement import import_settlement
from ledger.application.verification import check_balances, rebuild_balances, verify_chain
from ledger.bootstrap import ledger_transaction
from ledger.domain.accounts import AccountKey, Direction
from ledger.domain.journals import Entry
from ledger.domain.posting import AlreadyPosted, Posted
from ledger.settings import SERVICE_NAME, CliSettings, LedgerSettings, load_together

MIGRATIONS: Final = Path(__file__).resolve().parents[3] / "migrations"
Environ = Mapping[str, str] | None  # None: the process's (tests pass their own)

app = typer.Typer(add_completion=False, help="The ledger's operator commands.")
JournalArgument = Annotated[int, typer.Argument(metavar="JOURNAL_ID", help="the journal to correct")]
ByOption = Annotated[str, typer.Option("--by", help="who (audited)")]
ReasonOption = Annotated[str, typer.Option("--reason", help="why (audited)")]
DateOption = Annotated[str | None, typer.Option("--business-date", help="YYYY-MM-DD (default: today)")]


def _print(payload: Any) -> None:
    print(json.dumps(_plain(payload), default=str, sort_keys=True))


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return {"outcome": type(value).__name__, **{k: _plain(v) for k, v in asdict(value).items()}}
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _done(payload: Any, ok: bool) -> None:
    """Print the outcome; exit 1 unless ``ok``."""
    _print(payload)
    if not ok:
        raise typer.Exit(1)


def _rejected(payload: dict[str, str]) -> NoReturn:
    _print(payload)
    raise typer.Exit(1)


def _environ(ctx: typer.Context) -> Environ:
    """The command's environment; logs configured as every operator command has them."""
    environ: Environ = ctx.obj
    configure_logging(SERVICE_NAME)
    return environ


def _settings(ctx: typer.Context) -> tuple[CliSettings, LedgerSettings]:
    cli, ledger = load_together(_environ(ctx), CliSettings, LedgerSettings)
    return cli, ledger


def _today(ledger: LedgerSettings, given: str | None) -> date:
    return date.fromisoformat(given) if given else datetime.now(ledger.policy().business_tz).date()


@app.command()
def verify(ctx: typer.Context) -> None:
    """Check the hash chain; prints the first broken link; exit 1 if broken."""
    cli, ledger = _settings(ctx)
    with ledger_transaction(cli.database_url.reveal(), ledger, snapshot=True) as store:
        report = verify_chain(store)
    _done(report, report.ok)


@app.command(name="check-balances")
def check(ctx: typer.Context) -> None:
    """Rebuild every balance from the entries and compare with the projections; exit 1 on a mismatch."""
    cli, ledger = _settings(ctx)
    with ledger_transaction(cli.database_url.reveal(), ledger, snapshot=True) as store:
        report = check_balances(store)
    _done(report, report.ok or report.overwritten)


@app.command(name="rebuild-balances")
def rebuild(ctx: typer.Context) -> None:
    """The same, and overwrite the projections that drifted (the chain locked meanwhile)."""
    cli, ledger = _settings(ctx)
    with ledger_transaction(cli.database_url.reveal(), ledger) as store:
        report = rebuild_balances(store)
    _done(report, report.ok or report.overwritten)


@app.command(name="import-settlement")
def import_file(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(metavar="FILE", help="a normalized settlement batch (JSON)")],
    by: Annotated[str, typer.Option("--by", help="who imports (recorded on the journal)")],
) -> None:
    """Book a normalized settlement batch from a file."""
    cli, ledger = _settings(ctx)
    doc = _read_json(file)
    with ledger_transaction(cli.database_url.reveal(), ledger) as store:
        outcome = import_settlement(
            store,
            doc,
            import_id=new_event_id(),
            imported_by=by,
            source_name=file.name,
            allowed_currencies=ledger.allowed_currencies,
        )
    _done(outcome, type(outcome).__name__ in {"Imported", "AlreadyImported", "NothingToImport"})


def _read_json(file: Path) -> Any:
    """The file's JSON; card data in it refused (exit 2), a file unreadable or not JSON rejected."""
    try:
        raw = file.read_bytes()
        refused = refuse_card_data((), [raw])
        doc = None if refused else json.loads(raw)
    except (OSError, ValueError) as exc:
        _rejected(
            {"outcome": "ImportRejected", "reason": "bad_json", "detail": f"{file}: {type(exc).__name__}"}
        )
    if refused:
        raise typer.Exit(2)
    return doc


@app.command()
def reverse(
    ctx: typer.Context,
    journal_id: JournalArgument,
    by: ByOption,
    reason: ReasonOption,
    business_date: DateOption = None,
) -> None:
    """Post the journal that reverses JOURNAL_ID."""
    cli, ledger = _settings(ctx)
    with ledger_transaction(cli.database_url.reveal(), ledger) as store:
        outcome = reverse_journal(
            store,
            journal_id,
            action_id=new_event_id(),
            operator=by,
            reason=reason,
            business_date=_today(ledger, business_date),
        )
    _correction_result(outcome)


@app.command()
def compensate(
    ctx: typer.Context,
    journal_id: JournalArgument,
    key: Annotated[str, typer.Option("--key", help="the repair's id: reference compensation:<key>")],
    entries_json: Annotated[str, typer.Option("--entries", help="JSON list of entries")],
    by: ByOption,
    reason: ReasonOption,
    business_date: DateOption = None,
) -> None:
    """Post a compensating journal for JOURNAL_ID (entries given as JSON)."""
    cli, ledger = _settings(ctx)
    try:
        entries = parse_entries(entries_json)
    except (ValueError, KeyError, TypeError) as exc:
        _rejected({"outcome": "Rejected", "reason": "bad_entries", "detail": str(exc)[:300]})
    with ledger_transaction(cli.database_url.reveal(), ledger) as store:
        outcome = compensate_journal(
            store,
            journal_id,
            entries,
            key=key,
            action_id=new_event_id(),
            operator=by,
            reason=reason,
            business_date=_today(ledger, business_date),
            allowed_currencies=ledger.allowed_currencies,
        )
    _correction_result(outcome)


def parse_entries(text: str) -> tuple[Entry, ...]:
    """``[{"account": "psp_fees", "currency": "EUR", "holder": "", "direction": "debit",
    "amount_minor": 12}, ...]``; amounts are integers of minor units."""
    raw = json.loads(text)
    if not isinstance(raw, list) or len(raw) > 100:
        raise ValueError("entries is a JSON list of at most 100 objects")
    entries = []
    for item in raw:
        amount = item["amount_minor"]
        if type(amount) is not int:
            raise ValueError("amount_minor must be an integer of minor units")
        key = AccountKey(str(item["account"]), str(item["currency"]), str(item.get("holder", "")))
        entries.append(Entry(key, Direction(item["direction"]), amount))
    return tuple(entries)


def _correction_result(outcome: Any) -> None:
    if isinstance(outcome, Posted):
        journal = outcome.journal
        _done(
            {"outcome": "Posted", "journal_id": journal.journal_id, "reference": journal.draft.reference},
            ok=True,
        )
        return
    _done(outcome, isinstance(outcome, AlreadyPosted))


@app.command(name="migrate")
def migrate_command(
    ctx: typer.Context, url: Annotated[str, typer.Option("--url", help="the owner role's URL")]
) -> None:
    """Apply the backbone's and the ledger's migrations (as the owner role)."""
    _environ(ctx)
    applied = migrate(url, [backbone_source(), MigrationSource(SERVICE_NAME, MIGRATIONS)])
    _print({"applied": applied})


@app.command(name="provision-role")
def provision_role(
    ctx: typer.Context,
    admin_url: Annotated[str, typer.Option("--admin-url", help="a superuser's URL")],
    database: Annotated[
        str | None, typer.Option("--database", help="the ledger's database (default: the URL's)")
    ] = None,
    role: Annotated[str, typer.Option("--role", help="the runtime role")] = "ledger_app",
    password_env: Annotated[
        str, typer.Option("--password-env", help="env var holding the password")
    ] = "LEDGER_APP_PASSWORD",  # noqa: S107 - the variable's name, not a password
) -> None:
    """Create the runtime role if missing and grant it what it needs, no more (idempotent)."""
    password = env_value(password_env, _environ(ctx))
    if not password:
        console(stderr=True).print(f"{password_env} is required but not set")
        raise typer.Exit(2)
    if database:
        params = conninfo_to_dict(admin_url)
        params["dbname"] = database
        admin_url = make_conninfo(**params)  # type: ignore[arg-type]
    created = provision_runtime_role(admin_url, role, password)
    _print({"role": role, "created": created, "granted": True})
