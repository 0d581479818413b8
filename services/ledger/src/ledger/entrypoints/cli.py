"""``python -m ledger <command>``: every process and operator tool of the ledger.

    consume                  the idempotent consumer (payments.events + mt5.credit-events)
    relay                    the outbox relay (JournalPosted, dead-letter copies)
    api                      the HTTP API (port 8084)
    migrate --url URL        apply the backbone's and the ledger's migrations (as the owner role)
    provision-role --admin-url URL [--database ledger] [--role ledger_app] [--password-env VAR]
                             create the runtime role if missing and grant it what it needs, no more
    verify                   check the hash chain; prints the first broken link; exit 1 if broken
    check-balances           rebuild balances from entries and compare with the projections
    rebuild-balances         the same, and overwrite projections that drifted (chain locked)
    import-settlement FILE --by WHO
    reverse JOURNAL_ID --by WHO --reason WHY [--business-date YYYY-MM-DD]
    compensate JOURNAL_ID --key KEY --entries JSON --by WHO --reason WHY [--business-date ...]
    dlq list|replay|discard  dead letters of the consumer (backbone.consumer.dlq)

Outputs are one JSON object per line on stdout; logs go to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, is_dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any, Final

from backbone.cli import refuse_card_data
from backbone.consumer.dlq import dlq_main
from backbone.consumer.settings import ConsumerSettings
from backbone.ids import new_event_id
from backbone.logs import configure_logging
from backbone.outbox.relay import run_relay_from_env
from backbone.postgres.migrations import MigrationSource, backbone_source, migrate
from backbone.settings import SettingsError, env_value
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ledger.adapters.roles import provision_runtime_role
from ledger.application.corrections import compensate_journal, reverse_journal
from ledger.application.settlement import import_settlement
from ledger.application.verification import check_balances, rebuild_balances, verify_chain
from ledger.bootstrap import ledger_transaction, replay_context
from ledger.domain.accounts import AccountKey, Direction
from ledger.domain.journals import Entry
from ledger.domain.posting import AlreadyPosted, Posted
from ledger.entrypoints.api import serve
from ledger.entrypoints.consumer import consumer_environ, run_consumer
from ledger.settings import SERVICE_NAME, ApiSettings, CliSettings, LedgerSettings, load_together

MIGRATIONS: Final = Path(__file__).resolve().parents[3] / "migrations"
Environ = Mapping[str, str] | None  # None: the process's (tests pass their own)


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


def _settings(environ: Environ) -> tuple[CliSettings, LedgerSettings]:
    cli, ledger = load_together(environ, CliSettings, LedgerSettings)
    return cli, ledger


def _today(ledger: LedgerSettings, given: str | None) -> date:
    return date.fromisoformat(given) if given else datetime.now(ledger.policy().business_tz).date()


def cmd_verify(_: argparse.Namespace, env: Environ) -> int:
    cli, ledger = _settings(env)
    with ledger_transaction(cli.database_url.reveal(), ledger, snapshot=True) as store:
        report = verify_chain(store)
    _print(report)
    return 0 if report.ok else 1


def cmd_balances(args: argparse.Namespace, env: Environ) -> int:
    cli, ledger = _settings(env)
    rebuild = args.command == "rebuild-balances"
    with ledger_transaction(cli.database_url.reveal(), ledger, snapshot=not rebuild) as store:
        report = rebuild_balances(store) if rebuild else check_balances(store)
    _print(report)
    return 0 if report.ok or report.overwritten else 1


def cmd_import(args: argparse.Namespace, env: Environ) -> int:
    cli, ledger = _settings(env)
    path = Path(args.file)
    try:
        raw = path.read_bytes()
        if refuse_card_data((), [raw]):
            return 2
        doc = json.loads(raw)
    except (OSError, ValueError) as exc:
        _print({"outcome": "ImportRejected", "reason": "bad_json", "detail": f"{path}: {type(exc).__name__}"})
        return 1
    with ledger_transaction(cli.database_url.reveal(), ledger) as store:
        outcome = import_settlement(
            store,
            doc,
            import_id=new_event_id(),
            imported_by=args.by,
            source_name=path.name,
            allowed_currencies=ledger.allowed_currencies,
        )
    _print(outcome)
    return 0 if type(outcome).__name__ in {"Imported", "AlreadyImported", "NothingToImport"} else 1


def cmd_reverse(args: argparse.Namespace, env: Environ) -> int:
    cli, ledger = _settings(env)
    with ledger_transaction(cli.database_url.reveal(), ledger) as store:
        outcome = reverse_journal(
            store,
            args.journal_id,
            action_id=new_event_id(),
            operator=args.by,
            reason=args.reason,
            business_date=_today(ledger, args.business_date),
        )
    return _correction_result(outcome)


def cmd_compensate(args: argparse.Namespace, env: Environ) -> int:
    cli, ledger = _settings(env)
    try:
        entries = parse_entries(args.entries)
    except (ValueError, KeyError, TypeError) as exc:
        _print({"outcome": "Rejected", "reason": "bad_entries", "detail": str(exc)[:300]})
        return 1
    with ledger_transaction(cli.database_url.reveal(), ledger) as store:
        outcome = compensate_journal(
            store,
            args.journal_id,
            entries,
            key=args.key,
            action_id=new_event_id(),
            operator=args.by,
            reason=args.reason,
            business_date=_today(ledger, args.business_date),
            allowed_currencies=ledger.allowed_currencies,
        )
    return _correction_result(outcome)


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


def _correction_result(outcome: Any) -> int:
    if isinstance(outcome, Posted):
        _print(
            {
                "outcome": "Posted",
                "journal_id": outcome.journal.journal_id,
                "reference": outcome.journal.draft.reference,
            }
        )
        return 0
    _print(outcome)
    return 0 if isinstance(outcome, AlreadyPosted) else 1


def cmd_migrate(args: argparse.Namespace, _: Environ) -> int:
    applied = migrate(args.url, [backbone_source(), MigrationSource(SERVICE_NAME, MIGRATIONS)])
    _print({"applied": applied})
    return 0


def cmd_provision(args: argparse.Namespace, env: Environ) -> int:
    password = env_value(args.password_env, env)
    if not password:
        print(f"{args.password_env} is required but not set", file=sys.stderr)
        return 2
    admin_url = args.admin_url
    if args.database:
        params = conninfo_to_dict(admin_url)
        params["dbname"] = args.database
        admin_url = make_conninfo(**params)  # type: ignore[arg-type]
    created = provision_runtime_role(admin_url, args.role, password)
    _print({"role": args.role, "created": created, "granted": True})
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ledger", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("consume", "relay", "api", "verify", "check-balances", "rebuild-balances"):
        sub.add_parser(name)
    sub.add_parser("migrate").add_argument("--url", required=True, help="owner role's URL")
    prov = sub.add_parser("provision-role")
    prov.add_argument("--admin-url", required=True, help="a superuser's URL")
    prov.add_argument("--database", default=None, help="the ledger's database (default: the URL's)")
    prov.add_argument("--role", default="ledger_app")
    prov.add_argument("--password-env", default="LEDGER_APP_PASSWORD", help="env var holding the password")
    imp = sub.add_parser("import-settlement")
    imp.add_argument("file")
    imp.add_argument("--by", required=True, help="who imports (recorded on the journal)")
    for name in ("reverse", "compensate"):
        cmd = sub.add_parser(name)
        cmd.add_argument("journal_id", type=int)
        cmd.add_argument("--by", required=True, help="who (audited)")
        cmd.add_argument("--reason", required=True, help="why (audited)")
        cmd.add_argument("--business-date", default=None, help="YYYY-MM-DD (default: today)")
        if name == "compensate":
            cmd.add_argument("--key", required=True, help="the repair's id: reference compensation:<key>")
            cmd.add_argument("--entries", required=True, help="JSON list of entries")
    return parser


_COMMANDS: Final[dict[str, Callable[[argparse.Namespace, Environ], int]]] = {
    "verify": cmd_verify,
    "check-balances": cmd_balances,
    "rebuild-balances": cmd_balances,
    "import-settlement": cmd_import,
    "reverse": cmd_reverse,
    "compensate": cmd_compensate,
    "migrate": cmd_migrate,
    "provision-role": cmd_provision,
}


def main(argv: list[str] | None = None, environ: Environ = None) -> int:  # noqa: PLR0911 - exit per outcome
    args_list = sys.argv[1:] if argv is None else argv
    if refuse_card_data(args_list):
        return 2
    if args_list[:1] == ["dlq"]:
        return _dlq(args_list[1:], environ)
    args = _parser().parse_args(args_list)
    try:
        if args.command == "consume":
            run_consumer(environ)
            return 0
        if args.command == "relay":
            run_relay_from_env(SERVICE_NAME)
            return 0
        if args.command == "api":
            api, ledger = load_together(environ, ApiSettings, LedgerSettings)
            serve(api, ledger)
            return 0
        configure_logging(SERVICE_NAME)
        return _COMMANDS[args.command](args, environ)
    except SettingsError as exc:
        print(str(exc), file=sys.stderr)
        return 2


def _dlq(argv: list[str], env: Environ) -> int:
    try:
        consumer, ledger = load_together(consumer_environ(env), ConsumerSettings, LedgerSettings)
    except SettingsError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    configure_logging(SERVICE_NAME)
    return dlq_main(
        argv, consumer.database_url.reveal(), lambda: replay_context(consumer.consumer_name, ledger)
    )
