"""Every service's command line (backbone.cli.dispatch): the command runs with its arguments, an old
name runs under the new one and says so once, an unknown command gets the usage and exit 2, and a
card number anywhere in the arguments is refused before anything runs."""

from __future__ import annotations

import pytest
from backbone.cli import dispatch


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
