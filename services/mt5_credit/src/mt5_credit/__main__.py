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

from backbone.cli import dispatch, migrate_command

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


def _dlq(argv: list[str]) -> int:
    from mt5_credit.entrypoints import consumer  # noqa: PLC0415 - only what runs

    return consumer.dlq(argv)


def _withdrawals(argv: list[str]) -> int:
    from mt5_credit.entrypoints.withdrawals_cli import app  # noqa: PLC0415 - only what runs

    try:
        app(argv, prog_name="python -m mt5_credit withdrawals")  # click exits with the command's code
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else (0 if done.code is None else 2)
    return 0


def main(argv: list[str]) -> int:
    commands = {
        "api": _api,
        "consume": _consume,
        "worker": _worker,
        "relay": _relay,
        "migrate": migrate_command("mt5_credit", MIGRATIONS),
        "dlq": _dlq,
        "withdrawals": _withdrawals,
    }
    return dispatch("mt5_credit", argv, commands, aliases={"http": "api"})


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
