"""What every reconciler command of ``entrypoints.cli`` shares: its consoles (output on stdout,
progress and refusals on stderr), the settings loaded or exit 2, ``--date`` parsed or exit 2, and
``--json``'s one object."""

from __future__ import annotations

import json
from datetime import date
from typing import Annotated, Any, Final

import typer
from backbone.settings import SettingsError, load_settings
from rich.console import Console

from reconciler.settings import ReconSettings

out = Console()
err = Console(stderr=True)
STATUS_STYLE: Final = {"clean": "green", "discrepancies": "red", "incomplete": "yellow", "failed": "red"}

DateOption = Annotated[str, typer.Option("--date", help="business date YYYY-MM-DD")]
JsonOption = Annotated[bool, typer.Option("--json", help="one JSON object instead of tables")]


def recon_settings() -> ReconSettings:
    try:
        return load_settings(ReconSettings)
    except SettingsError as exc:
        err.print(str(exc))
        raise typer.Exit(2) from None


def parse_date(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        err.print(f"--date {text!r} is not a date YYYY-MM-DD")
        raise typer.Exit(2) from None


def print_json(payload: Any) -> None:
    print(json.dumps(payload, default=str, sort_keys=True))
