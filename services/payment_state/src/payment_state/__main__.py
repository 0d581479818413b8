"""``python -m payment_state api|worker|consume|relay|migrate|dlq ...``: payment-state's processes.

- ``api``: the HTTP API (port ``PAYMENT_STATE_HTTP_PORT``, default 8082);
- ``worker``: calls the PSP for open operations and resolves unknown outcomes (old name ``executor``);
- ``consume``: consumes payments.commands and psp.provider-events (old name ``inbound``);
- ``relay``: publishes the outbox to Kafka (``SERVICE_NAME`` defaults to ``payment_state``);
- ``migrate``: applies the backbone's and payment-state's migrations to ``DATABASE_URL``;
- ``dlq list|replay|discard``: the consumer's dead letters (operators; audited).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Final

import typer
from backbone.cli import ROLES, Command, Group, dispatch, migrate_command

MIGRATIONS: Final = Path(__file__).resolve().parents[2] / "migrations"


def _api(_: list[str]) -> None:
    from payment_state.entrypoints import api  # noqa: PLC0415 - each process imports what it runs

    api.main()


def _worker(_: list[str]) -> None:
    from payment_state.entrypoints import executor  # noqa: PLC0415 - only what runs

    executor.main()


def _consume(_: list[str]) -> None:
    from payment_state.entrypoints import inbound  # noqa: PLC0415 - only what runs

    inbound.main()


def _relay(_: list[str]) -> None:
    from backbone.outbox.relay import run_relay_from_env  # noqa: PLC0415 - only what runs

    run_relay_from_env("payment_state")


def _dlq() -> typer.Typer:
    from payment_state.entrypoints import dlq  # noqa: PLC0415 - only what runs

    return dlq.app()


def main(argv: list[str]) -> int:
    commands: dict[str, Command | Group] = {
        "api": _api,
        "worker": _worker,
        "consume": _consume,
        "relay": _relay,
        "migrate": migrate_command("payment_state", MIGRATIONS),
        "dlq": Group(ROLES["dlq"], _dlq),
    }
    return dispatch("payment_state", argv, commands, aliases={"executor": "worker", "inbound": "consume"})


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
