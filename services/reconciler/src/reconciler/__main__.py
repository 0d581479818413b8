"""``python -m reconciler <command>``: the reconciler's processes and operator tools, through
``backbone.cli.dispatch``.

- ``api``: the HTTP API (port 8085): runs, cases, acknowledge, repairs, audit, gauges;
- ``consume``: the idempotent consumer feeding the read models;
- ``relay``: the outbox relay (CaseOpened / CaseResolved, approved repairs);
- ``monitor``: the streaming monitor (faust): MonitorAlert within minutes, port 8086;
- ``migrate``: the backbone's and the reconciler's migrations on ``DATABASE_URL``;
- ``dlq list|replay|discard``: the consumer's dead letters;
- ``run``, ``import-settlement``, ``import-bank``, ``runs``, ``cases``, ``repairs``, ``audit``: the
  operator commands (entrypoints/cli.py; exit codes there).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Final

import typer
from backbone.cli import ROLES, Command, Group, dispatch, migrate_command

MIGRATIONS: Final = Path(__file__).resolve().parents[2] / "migrations"


def _api(_: list[str]) -> None:
    from reconciler.entrypoints import processes  # noqa: PLC0415 - import only what the process runs

    processes.api()


def _consume(_: list[str]) -> None:
    from reconciler.entrypoints.consumer import run_consumer  # noqa: PLC0415 - only what runs

    run_consumer()


def _relay(_: list[str]) -> None:
    from backbone.outbox.relay import run_relay_from_env  # noqa: PLC0415 - only what runs

    run_relay_from_env("reconciler")


def _monitor(_: list[str]) -> None:
    """The streaming monitor: captured not credited, credited not booked, within minutes."""
    from reconciler.entrypoints import processes  # noqa: PLC0415 - only what runs

    processes.monitor()


def _dlq() -> typer.Typer:
    from backbone.consumer.dlq import dlq_app  # noqa: PLC0415 - only what runs

    from reconciler.entrypoints.processes import dead_letters  # noqa: PLC0415 - only what runs

    return dlq_app(dead_letters)


def _operators() -> typer.Typer:
    from reconciler.entrypoints.cli import app  # noqa: PLC0415 - only what runs

    return app


def main(argv: list[str]) -> int:
    commands: dict[str, Command | Group] = {
        "api": _api,
        "consume": _consume,
        "relay": _relay,
        "monitor": _monitor,
        "migrate": migrate_command("reconciler", MIGRATIONS),
        "dlq": Group(ROLES["dlq"], _dlq),
    }
    return dispatch("reconciler", argv, commands, app=_operators)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
