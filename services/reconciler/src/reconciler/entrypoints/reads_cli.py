"""Runs and cases read from a terminal (``runs list|show``, ``cases list|show``): straight from the
reconciler's database, as tables or JSON. The database's own reader sees every merchant's cases;
operators' acts on cases go through the API instead (``operator_cli``)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from reconciler.bootstrap import recon_store
from reconciler.domain.merchants import EVERY_MERCHANT
from reconciler.entrypoints.cli_common import (
    STATUS_STYLE,
    JsonOption,
    err,
    out,
    parse_date,
    print_json,
    recon_settings,
)


def runs_list(
    date_: Annotated[str | None, typer.Option("--date")] = None, as_json: JsonOption = False
) -> None:
    """The latest runs (of one date)."""
    rows = recon_store(recon_settings()).runs_of(parse_date(date_) if date_ else None)
    if as_json:
        print_json({"runs": rows})
        return
    table = Table(title="runs")
    for column in ("id", "date", "status", "started", "finished", "findings", "problems"):
        table.add_column(column)
    for r in rows:
        style = STATUS_STYLE.get(r["status"], "white")
        table.add_row(
            str(r["id"]),
            str(r["business_date"]),
            f"[{style}]{r['status']}[/{style}]",
            str(r["started_at"])[:19],
            str(r["finished_at"] or "")[:19],
            str((r["summary"] or {}).get("findings", "")),
            "; ".join(r["problems"]),
        )
    out.print(table)


def runs_show(run_id: int) -> None:
    """One run with its counts and problems (JSON)."""
    found = recon_store(recon_settings()).run(run_id)
    if found is None:
        err.print(f"no run {run_id}")
        raise typer.Exit(2)
    print_json(found)


def cases_list(
    date_: Annotated[str | None, typer.Option("--date")] = None,
    status: Annotated[str | None, typer.Option("--status", help="open | acknowledged | resolved")] = None,
    case_class: Annotated[str | None, typer.Option("--class")] = None,
    as_json: JsonOption = False,
) -> None:
    """Cases, oldest first."""
    day = parse_date(date_) if date_ else None  # the database's own reader: every merchant's cases
    rows = recon_store(recon_settings()).cases_where(
        business_date=day, status=status, case_class=case_class, scope=EVERY_MERCHANT
    )
    if as_json:
        print_json({"cases": rows})
        return
    table = Table(title="cases")
    for column in ("id", "date", "class", "severity", "status", "summary"):
        table.add_column(column)
    for r in rows:
        table.add_row(
            str(r["id"]), str(r["business_date"]), r["case_class"], r["severity"], r["status"], r["summary"]
        )
    out.print(table)


def cases_show(case_id: int) -> None:
    """One case with its evidence side by side and its history (JSON)."""
    found = recon_store(recon_settings()).case(case_id, scope=EVERY_MERCHANT)
    if found is None:
        err.print(f"no case {case_id}")
        raise typer.Exit(2)
    print_json(found)
