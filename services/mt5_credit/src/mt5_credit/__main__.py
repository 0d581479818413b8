"""``python -m mt5_credit consume|worker|relay|http|migrate``: one process kind per command."""

from __future__ import annotations

import os
import sys
from pathlib import Path

MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"
USAGE = "usage: python -m mt5_credit consume|worker|relay|http|migrate"


def main(argv: list[str]) -> int:
    command = argv[0] if argv else ""
    if command == "consume":
        from mt5_credit.entrypoints import consumer  # noqa: PLC0415 - import only what the process runs

        consumer.main()
    elif command == "worker":
        from mt5_credit.entrypoints import worker  # noqa: PLC0415

        worker.main()
    elif command == "http":
        from mt5_credit.entrypoints import http  # noqa: PLC0415

        http.main()
    elif command == "relay":
        from backbone.outbox.relay import run_relay_from_env  # noqa: PLC0415

        os.environ.setdefault("SERVICE_NAME", "mt5_credit")
        run_relay_from_env()
    elif command == "migrate":
        from backbone.postgres.migrations import MigrationSource, backbone_source, migrate  # noqa: PLC0415

        for name in migrate(
            os.environ["DATABASE_URL"], [backbone_source(), MigrationSource("mt5_credit", MIGRATIONS)]
        ):
            print(f"applied {name}")
    else:
        print(USAGE, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
