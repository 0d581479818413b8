"""Every service's command line: the same command names for the same roles (``dispatch``), and what
every operator command does before it acts: refuse card data (DESIGN §9).

An operator's ``--reason``, a file to import or a reference typed by hand is stored and read by many
people; a card number in any of them is refused with a one-line JSON error on stderr that names no
value, and the command exits 2 having changed nothing.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Final

from backbone.carddata import CARD_DATA_CODE, CARD_DATA_MESSAGE, find_card_number, find_in_body


def refuse_card_data(arguments: Iterable[str], files: Iterable[bytes] = ()) -> bool:
    """True (after writing the error) if an argument or a file's content carries card data."""
    if not any(find_card_number(arg) for arg in arguments) and not any(find_in_body(f) for f in files):
        return False
    print(json.dumps({"error": {"code": CARD_DATA_CODE, "message": CARD_DATA_MESSAGE}}), file=sys.stderr)
    return True


# -- one process skeleton: the same command names for the same roles in every service ----------------

ROLES: Final = {
    "api": "the HTTP API",
    "consume": "the idempotent consumer of the service's input topics",
    "worker": "drives outgoing calls (the PSP, MT5) and resolves unknown outcomes",
    "relay": "publishes the service's outbox to Kafka",
    "migrate": "applies the backbone's and the service's migrations to DATABASE_URL",
    "dlq": "the consumer's dead letters: list | replay ID | discard ID --by --reason",
}
Command = Callable[[list[str]], "int | None"]


def dispatch(
    prog: str,
    argv: Sequence[str],
    commands: Mapping[str, Command],
    *,
    aliases: Mapping[str, str] | None = None,
    default: str | None = None,
) -> int:
    """``python -m <service> <command> ...`` for every service: card data refused first, an old
    name (``aliases``, kept for one release) said once on stderr and run under its new one, an
    unknown command answered with the usage (exit 2)."""
    args = list(argv)
    if refuse_card_data(args):
        return 2
    name = args[0] if args else default
    old = name
    if name is not None and aliases and name in aliases:
        name = aliases[name]
        print(f"{prog}: '{old}' is now '{name}' (the old name goes in the next release)", file=sys.stderr)
    if name is None or name not in commands:
        usage = "|".join(commands)
        print(f"usage: python -m {prog} {usage}", file=sys.stderr)
        return 2
    result = commands[name](args[1:])
    return 0 if result is None else int(result)


def migrate_command(service: str, migrations_dir: Path) -> Command:
    """The ``migrate`` command: the backbone's migrations, then the service's, on ``DATABASE_URL``."""

    def run(_: list[str]) -> int:
        from backbone.postgres.migrations import MigrationSource, backbone_source, migrate  # noqa: PLC0415 - migrate only
        from backbone.settings import SettingsError, env_value  # noqa: PLC0415 - migrate only

        try:
            url = env_value("DATABASE_URL")
        except SettingsError as exc:
            print(exc, file=sys.stderr)
            return 2
        if not url:
            print("DATABASE_URL is required but not set", file=sys.stderr)
            return 2
        applied = migrate(url, [backbone_source(), MigrationSource(service, migrations_dir)])
        print(json.dumps({"applied": applied}))
        return 0

    return run
