"""``python -m ledger consume|relay|api|dlq|migrate|provision-role|verify|...``: the ledger's processes
and operator tools, through ``backbone.cli.dispatch``.

- ``consume``: the idempotent consumer (payments.events + mt5.credit-events + repair commands);
- ``relay``: the outbox relay (JournalPosted, dead-letter copies);
- ``api``: the HTTP API (port 8084);
- ``dlq list|replay|discard``: the consumer's dead letters, replayed through its handler;
- ``migrate --url URL``, ``provision-role``, ``verify``, ``check-balances``, ``rebuild-balances``,
  ``import-settlement``, ``reverse``, ``compensate``: the operator commands (entrypoints/cli.py).

A missing or malformed setting exits 2, naming it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

import typer
from backbone.cli import ROLES, Command, Group, console, dispatch
from backbone.settings import SettingsError

Environ = Mapping[str, str] | None  # None: the process's (tests pass their own)


def _consume(environ: Environ) -> None:
    from ledger.entrypoints.consumer import run_consumer  # noqa: PLC0415 - import only what runs

    run_consumer(environ)


def _relay(_: list[str]) -> None:
    from backbone.outbox.relay import run_relay_from_env  # noqa: PLC0415 - only what runs

    from ledger.settings import SERVICE_NAME  # noqa: PLC0415 - only what runs

    run_relay_from_env(SERVICE_NAME)


def _api(environ: Environ) -> None:
    from ledger.entrypoints.api import serve  # noqa: PLC0415 - aiohttp only for this process
    from ledger.settings import ApiSettings, LedgerSettings, load_together  # noqa: PLC0415 - only what runs

    api, ledger = load_together(environ, ApiSettings, LedgerSettings)
    serve(api, ledger)


def _dlq(environ: Environ) -> typer.Typer:
    from backbone.consumer.dlq import dlq_app  # noqa: PLC0415 - only what runs

    from ledger.entrypoints.consumer import dead_letters  # noqa: PLC0415 - only what runs

    return dlq_app(lambda: dead_letters(environ))


def _operators() -> typer.Typer:
    from ledger.entrypoints.cli import app  # noqa: PLC0415 - only what runs

    return app


def main(argv: list[str], environ: Environ = None) -> int:
    commands: dict[str, Command | Group] = {
        "consume": lambda _: _consume(environ),
        "relay": _relay,
        "api": lambda _: _api(environ),
        "dlq": Group(ROLES["dlq"], lambda: _dlq(environ)),
    }
    try:
        return dispatch("ledger", argv, commands, app=_operators, obj=environ)
    except SettingsError as exc:
        console(stderr=True).print(str(exc))
        return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
