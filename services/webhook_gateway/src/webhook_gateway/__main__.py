"""``python -m webhook_gateway [serve|relay|migrate]`` (default ``serve``).

- ``serve``: the HTTP server (port 8081 by default), see ``entrypoints/server.py``;
- ``relay``: the outbox relay to ``psp.provider-events``, see ``entrypoints/relay.py``;
- ``migrate``: apply the backbone's and the gateway's migrations to ``DATABASE_URL``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Final

MIGRATIONS: Final = Path(__file__).resolve().parents[2] / "migrations"
USAGE: Final = "usage: python -m webhook_gateway [serve|relay|migrate]"


def migrate() -> int:
    from backbone.postgres.migrations import MigrationSource, backbone_source  # noqa: PLC0415
    from backbone.postgres.migrations import migrate as apply  # noqa: PLC0415

    url = os.environ.get("DATABASE_URL")
    if not url:
        print("DATABASE_URL is required but not set", file=sys.stderr)
        return 2
    applied = apply(url, [backbone_source(), MigrationSource("webhook_gateway", MIGRATIONS)])
    print(f"migrations: {len(applied)} applied")
    return 0


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "serve"
    if command == "serve":
        from webhook_gateway.entrypoints.server import main as serve  # noqa: PLC0415

        return serve()
    if command == "relay":
        from webhook_gateway.entrypoints.relay import main as relay  # noqa: PLC0415

        return relay()
    if command == "migrate":
        return migrate()
    print(USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
