"""Every service's command line: the same command names for the same roles (``dispatch``), one way
to run an operator's typer app (``run_app``), and what every operator command does before it acts:
refuse card data (DESIGN §9).

An operator's ``--reason``, a file to import or a reference typed by hand is stored and read by many
people; a card number in any of them is refused with a one-line JSON error on stderr that names no
value, and the command exits 2 having changed nothing. The refusal comes before typer reads the
arguments: its errors quote the values they refuse.

Commands are typer (click) commands: ``--help`` works at every level, a usage error exits 2. Output a
script reads (JSON lines) is printed as it is; what a person reads (tables, errors) goes through
``console``.
"""

from __future__ import annotations

import inspect
import json
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Final

import typer

from backbone.carddata import CARD_DATA_CODE, CARD_DATA_MESSAGE, find_card_number, find_in_body

if TYPE_CHECKING:
    from rich.console import Console


def refuse_card_data(arguments: Iterable[str], files: Iterable[bytes] = ()) -> bool:
    """True (after writing the error) if an argument or a file's content carries card data."""
    if not any(find_card_number(arg) for arg in arguments) and not any(find_in_body(f) for f in files):
        return False
    print(json.dumps({"error": {"code": CARD_DATA_CODE, "message": CARD_DATA_MESSAGE}}), file=sys.stderr)
    return True


@cache
def console(*, stderr: bool = False) -> Console:
    """A rich console for people (tables, messages, errors). Lines are never wrapped (a log or a grep
    reads them whole), and nothing in a printed value is read as markup, emoji or highlighting: style
    is given with ``style=``. JSON lines for scripts are printed with ``print``, never here."""
    from rich.console import Console  # noqa: PLC0415 - rich only when a person is told something

    return Console(stderr=stderr, soft_wrap=True, markup=False, emoji=False, highlight=False)


# -- one process skeleton: the same command names for the same roles in every service ----------------

ROLES: Final = {
    "api": "the HTTP API",
    "consume": "the idempotent consumer of the service's input topics",
    "worker": "drives outgoing calls (the PSP, MT5) and resolves unknown outcomes",
    "relay": "publishes the service's outbox to Kafka",
    "migrate": "applies the backbone's and the service's migrations to DATABASE_URL",
    "dlq": "the consumer's dead letters: list | replay ID | discard ID --by --reason",
}
Command = Callable[[list[str]], "int | None"]  # the rest of the command line, as it was typed
_PASS_THROUGH: Final = {"allow_extra_args": True, "ignore_unknown_options": True}


@dataclass(frozen=True)
class Group:
    """A command with subcommands of its own (``dlq list|replay|discard``): ``load`` builds its typer
    app when the command runs (or its help is asked for), so a process imports only what it runs."""

    help: str
    load: Callable[[], typer.Typer]


def dispatch(
    prog: str,
    argv: Sequence[str],
    commands: Mapping[str, Command | Group],
    *,
    aliases: Mapping[str, str] | None = None,
    default: str | None = None,
    app: Callable[[], typer.Typer] | None = None,
    obj: object = None,
) -> int:
    """``python -m <service> <command> ...`` for every service: card data refused first, an old
    name (``aliases``, kept for one release) said once on stderr and run under its new one, an
    unknown command answered with the usage (exit 2).

    ``commands`` are the process roles (``ROLES``) and the service's other commands run the same
    way; ``app`` builds the service's own typer app (its operator commands, with typed options),
    called only when the command is not one of ``commands``; ``obj`` is what its commands find in
    ``typer.Context.obj`` (tests give their own environment that way)."""
    args = list(argv)
    if refuse_card_data(args):
        return 2
    name = args[0] if args else default
    old = name
    if name is not None and aliases and name in aliases:
        name = aliases[name]
        print(f"{prog}: '{old}' is now '{name}' (the old name goes in the next release)", file=sys.stderr)
    root = typer.Typer(add_completion=False)
    for command_name, entry in commands.items():
        _add(root, command_name, entry, args[1:] if command_name == name else None)
    if app is not None and (name not in commands or name == "--help"):
        root.add_typer(app())  # no name: its commands join the roles at the top
    group = typer.main.get_group(root)
    if name != "--help" and (name is None or name not in group.commands):
        print(f"usage: python -m {prog} {'|'.join(group.commands)}", file=sys.stderr)
        return 2
    return _run(group.main, [name, *args[1:]], f"python -m {prog}", obj)


def run_app(app: typer.Typer, argv: Sequence[str] | None, *, prog: str, obj: object = None) -> int:
    """An operator's typer app as a command (``argv`` None: the process's): card data refused
    first, then the app's exit status (a usage error: 2, with the usage on stderr)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if refuse_card_data(args):
        return 2
    return _run(typer.main.get_command(app).main, args, prog, obj)


def _add(root: typer.Typer, name: str, entry: Command | Group, rest: list[str] | None) -> None:
    """``entry`` as the command ``name`` of ``root``; ``rest``: the rest of the command line when it
    is the command to run (a Group is loaded then only; otherwise it is listed in the help)."""
    if isinstance(entry, Group):
        if rest is not None:
            root.add_typer(entry.load(), name=name, help=entry.help)
        else:
            root.command(name=name, help=entry.help)(_listed)
        return
    doc = (inspect.getdoc(entry) or "").split("\n\n")[0]
    run = _pass_through(entry, rest or [])
    root.command(name=name, help=ROLES.get(name, doc), context_settings=_PASS_THROUGH)(run)


def _pass_through(command: Command, rest: list[str]) -> Callable[[], None]:
    """A typer command that hands ``command`` the rest of the command line exactly as it was typed
    (typer reads it only for ``--help``)."""

    def run() -> None:
        code = command(rest)
        if code:
            raise typer.Exit(int(code))

    return run


def _listed() -> None:
    """A Group's place in the help of the whole command line: the Group runs loaded, never this."""


def _run(main: Callable[..., object], args: list[str], prog: str, obj: object) -> int:
    """Run a typer command's ``main`` as the process would (usage errors printed, exit 2), returning
    its exit status instead of leaving; a SystemExit with a message is left to Python."""
    try:
        main(args, prog_name=prog, standalone_mode=True, obj=obj)
    except SystemExit as done:
        if done.code is None or isinstance(done.code, int):
            return done.code or 0
        raise
    return 0  # standalone, it always leaves with SystemExit


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
