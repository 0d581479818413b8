"""``python -m ops_console serve|migrate|users ...``: the console's process and commands, through
``backbone.cli.dispatch``.

- ``serve``: the web application (its name since the start; the console is a web site, not an API);
- ``migrate``: the backbone's and the console's migrations on ``DATABASE_URL``;
- ``users add|list|disable``: local operators (entrypoints/cli.py).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Final

import typer
from backbone.cli import dispatch, migrate_command

MIGRATIONS: Final = Path(__file__).resolve().parents[2] / "migrations"


def _console() -> typer.Typer:
    from ops_console.entrypoints.cli import app  # noqa: PLC0415 - import only what runs

    return app


def main(argv: list[str]) -> int:
    return dispatch(
        "ops_console", argv, {"migrate": migrate_command("ops_console", MIGRATIONS)}, app=_console
    )


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
