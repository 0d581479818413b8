"""``python -m webhook_gateway api|relay|catch-up|migrate`` (default ``api``; ``serve`` is the old name).

- ``api``: the HTTP server (port 8081 by default), see ``entrypoints/server.py``;
- ``relay``: the outbox relay to ``psp.provider-events``, see ``entrypoints/relay.py``;
- ``catch-up``: stores the PSP events whose webhooks never came, see ``entrypoints/catch_up.py``;
- ``migrate``: apply the backbone's and the gateway's migrations to ``DATABASE_URL``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Final

from backbone.cli import dispatch, migrate_command

MIGRATIONS: Final = Path(__file__).resolve().parents[2] / "migrations"


def _api(_: list[str]) -> int:
    from webhook_gateway.entrypoints.server import main as serve  # noqa: PLC0415 - import what runs

    return serve()


def _relay(_: list[str]) -> int:
    from webhook_gateway.entrypoints.relay import main as relay  # noqa: PLC0415 - only what runs

    return relay()


def _catch_up(_: list[str]) -> int:
    from webhook_gateway.entrypoints.catch_up import main as catch_up  # noqa: PLC0415 - only what runs

    return catch_up()


def main(argv: list[str]) -> int:
    commands = {
        "api": _api,
        "relay": _relay,
        "catch-up": _catch_up,
        "migrate": migrate_command("webhook_gateway", MIGRATIONS),
    }
    return dispatch("webhook_gateway", argv, commands, aliases={"serve": "api"}, default="api")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
