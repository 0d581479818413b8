"""Every service's command line (backbone.cli.dispatch): the command runs with its arguments, an old
name runs under the new one and says so once, an unknown command gets the usage and exit 2, and a
card number anywhere in the arguments is refused before anything runs; the service's own typer
commands and groups run beside the roles, with typer's usage errors and help."""

from __future__ import annotations

import json
from typing import Annotated

import pytest
import typer
from backbone.cli import Group, console, dispatch, run_app


def _commands(ran: list[tuple[str, list[str]]]) -> dict[str, object]:
    def api(args: list[str]) -> None:
        ran.append(("api", args))

    def relay(args: list[str]) -> int:
        ran.append(("relay", args))
        return 3

    return {"api": api, "relay": relay}


def test_a_command_runs_with_its_arguments_and_its_exit_status() -> None:
    """None means 0; an int is the exit status."""
    ran: list[tuple[str, list[str]]] = []
    assert dispatch("svc", ["api", "--x"], _commands(ran)) == 0  # type: ignore[arg-type]
    assert dispatch("svc", ["relay"], _commands(ran)) == 3  # type: ignore[arg-type]
    assert ran == [("api", ["--x"]), ("relay", [])]


def test_an_old_name_runs_the_new_command_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    """``serve`` -> ``api`` for one release, with one line on stderr; no arguments -> the default."""
    ran: list[tuple[str, list[str]]] = []
    assert dispatch("svc", ["serve"], _commands(ran), aliases={"serve": "api"}) == 0  # type: ignore[arg-type]
    assert dispatch("svc", [], _commands(ran), default="api") == 0  # type: ignore[arg-type]
    assert ran == [("api", []), ("api", [])]
    assert "'serve' is now 'api'" in capsys.readouterr().err


def test_unknown_commands_and_card_data_exit_2_running_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown command prints the usage; a card number in any argument is refused first."""
    ran: list[tuple[str, list[str]]] = []
    assert dispatch("svc", ["nope"], _commands(ran)) == 2  # type: ignore[arg-type]
    assert "usage: python -m svc api|relay" in capsys.readouterr().err
    assert dispatch("svc", ["api", "--note", "4000 0566 5566 5556"], _commands(ran)) == 2  # type: ignore[arg-type]
    assert "card_data_forbidden" in capsys.readouterr().err
    assert ran == []


def _operators() -> typer.Typer:
    app = typer.Typer()

    @app.command()
    def verify(ctx: typer.Context, times: Annotated[int, typer.Option("--times")] = 1) -> None:
        """Check the chain."""
        print(json.dumps({"env": ctx.obj, "times": times}))
        raise typer.Exit(1)

    @app.command()
    def rebuild() -> None:
        """Rebuild the projections."""

    return app


def _dead_letters() -> typer.Typer:
    app = typer.Typer()

    @app.command(name="list")
    def list_(include: Annotated[bool, typer.Option("--all")] = False) -> None:
        print(json.dumps({"all": include}))

    @app.command()
    def replay(dead_letter_id: int, by: Annotated[str, typer.Option("--by")]) -> None:
        print(json.dumps({"id": dead_letter_id, "by": by}))

    return app


def test_typed_commands_and_groups_run_through_typer(capsys: pytest.CaptureFixture[str]) -> None:
    """The service's own typer app (``app``) and a ``Group`` (loaded only when it runs) answer
    beside the roles: their options typed, ``obj`` in the context, their exit status kept."""
    loaded: list[str] = []

    def group() -> typer.Typer:
        loaded.append("dlq")
        return _dead_letters()

    commands = {"dlq": Group("dead letters", group)}
    assert dispatch("svc", ["verify", "--times", "3"], commands, app=_operators, obj={"A": "1"}) == 1
    assert json.loads(capsys.readouterr().out) == {"env": {"A": "1"}, "times": 3}
    assert loaded == []
    assert dispatch("svc", ["dlq", "replay", "7", "--by", "ann"], commands, app=_operators) == 0
    assert json.loads(capsys.readouterr().out) == {"id": 7, "by": "ann"}
    assert dispatch("svc", ["dlq", "list", "--all"], commands) == 0
    assert json.loads(capsys.readouterr().out) == {"all": True}
    assert loaded == ["dlq", "dlq"]


def test_usage_errors_exit_2_and_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    """A bad option or value, a missing one, a group without its subcommand: 2 with the usage on
    stderr. ``--help`` lists every command (roles, groups, the app's) with its help: 0."""
    commands = {**_commands([]), "dlq": Group("dead letters", _dead_letters)}
    for argv in (["verify", "--nope"], ["dlq", "replay", "x", "--by", "a"], ["dlq", "replay", "1"], ["dlq"]):
        assert dispatch("svc", argv, commands, app=_operators) == 2, argv  # type: ignore[arg-type]
        assert "Usage: python -m svc" in capsys.readouterr().err
    assert dispatch("svc", ["--help"], commands, app=_operators) == 0  # type: ignore[arg-type]
    listed = capsys.readouterr().out
    assert all(name in listed for name in ("api", "relay", "dead letters", "verify", "Check the chain"))
    assert dispatch("svc", ["nope"], commands, app=_operators) == 2  # type: ignore[arg-type]
    assert "usage: python -m svc api|relay|dlq|verify|rebuild" in capsys.readouterr().err


def test_run_app_refuses_card_data_and_keeps_the_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    """An operator's app outside a service (the schema lock, the topics) is run the same way."""
    assert run_app(_operators(), ["verify"], prog="tool", obj=None) == 1
    assert run_app(_operators(), ["verify", "--times", "4111 1111 1111 1111"], prog="tool") == 2
    assert "card_data_forbidden" in capsys.readouterr().err


def test_the_console_neither_wraps_nor_reads_markup(capsys: pytest.CaptureFixture[str]) -> None:
    """A long line printed for people stays one line, and brackets or colons in a value stay."""
    line = "problem [bold]x[/bold] :smile: " + "y" * 300
    console(stderr=True).print(line)
    assert capsys.readouterr().err == line + "\n"
