"""``python -m mt5_credit api|consume|worker|relay|migrate|dlq ...``: one process kind per command.

- ``api``: the HTTP API (accounts, deposit intents, credit status; old name ``http``);
- ``consume``: payments.events become credit/debit rows (or cases);
- ``worker``: claim -> MT5 -> resolve, in lanes;
- ``relay``: publishes the outbox to Kafka;
- ``migrate``: applies the backbone's and mt5-credit's migrations to ``DATABASE_URL``;
- ``dlq list|replay|discard``: the consumer's dead letters (operators; audited);
- ``withdrawals request|list|show|prepare|approve|reject``: withdrawals through the HTTP API.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Final

import typer
from backbone.cli import ROLES, Command, Group, dispatch, migrate_command

MIGRATIONS: Final = Path(__file__).resolve().parents[2] / "migrations"


def _api(_: list[str]) -> None:
    from mt5_credit.entrypoints import http  # noqa: PLC0415 - import only what the process runs

    http.main()


def _consume(_: list[str]) -> None:
    from mt5_credit.entrypoints import consumer  # noqa: PLC0415 - only what runs

    consumer.main()


def _worker(_: list[str]) -> None:
    from mt5_credit.entrypoints import worker  # noqa: PLC0415 - only what runs

    worker.main()


def _relay(_: list[str]) -> None:
    from backbone.outbox.relay import run_relay_from_env  # noqa: PLC0415 - only what runs

    run_relay_from_env("mt5_credit")


def _dlq() -> typer.Typer:
    from mt5_credit.entrypoints import consumer  # noqa: PLC0415 - only what runs

    return consumer.dlq()


def _withdrawals() -> typer.Typer:
    from mt5_credit.entrypoints.withdrawals_cli import app  # noqa: PLC0415 - only what runs

    return app


def main(argv: list[str]) -> int:
    commands: dict[str, Command | Group] = {
        "api": _api,
        "consume": _consume,
        "worker": _worker,
        "relay": _relay,
        "migrate": migrate_command("mt5_credit", MIGRATIONS),
        "dlq": Group(ROLES["dlq"], _dlq),
        "withdrawals": Group(
            "withdrawals through the HTTP API: request|list|show|prepare|approve|reject", _withdrawals
        ),
    }
    return dispatch("mt5_credit", argv, commands, aliases={"http": "api"})


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
