"""Operators' acts from a terminal: ``repairs …``, ``audit …``, ``cases acknowledge``.

These commands are clients of the reconciler's HTTP API, never of its database: the operator is
whoever the token belongs to (``RECON_API_URL``, ``RECON_OPERATOR_TOKEN`` or
``RECON_OPERATOR_TOKEN_FILE``), and maker-checker, permissions and the audit are the server's, the
same as for the console. A refusal prints the server's reason and exits 1; bad input or a missing
setting exits 2; the API unreachable exits 3.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Annotated, Any, Final

import typer
from backbone.settings import SettingsError, load_settings, terminal_token
from rich.console import Console
from rich.table import Table

from reconciler.settings import OperatorCliSettings

repairs_app = typer.Typer(no_args_is_help=True, help="Repairs of cases (maker-checker, through the API).")
audit_app = typer.Typer(no_args_is_help=True, help="The audit of every operator act (through the API).")
out = Console()
err = Console(stderr=True)
TIMEOUT_S: Final = 30
JsonOption = Annotated[bool, typer.Option("--json", help="one JSON object instead of tables")]


def _token() -> str:
    try:
        token = terminal_token("RECON_OPERATOR_TOKEN")
    except SettingsError as exc:
        err.print("; ".join(exc.problems))
        raise typer.Exit(2) from None
    if not token:
        err.print("set RECON_OPERATOR_TOKEN or RECON_OPERATOR_TOKEN_FILE: your own operator token")
        raise typer.Exit(2)
    return token


def call(method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    """One API call as the operator; exits with the server's reason when it refuses."""
    data = json.dumps(body).encode() if body is not None else None
    return json.loads(call_raw(method, path, data, "application/json") or b"{}")


def call_raw(method: str, path: str, data: bytes | None, content_type: str) -> bytes:
    """One API call as the operator with a body of its own type; the answer's bytes."""
    try:
        base = load_settings(OperatorCliSettings).api_url.rstrip("/")
    except SettingsError as exc:  # names RECON_API_URL when it is not an http(s) URL
        err.print(str(exc))
        raise typer.Exit(2) from None
    request = urllib.request.Request(base + path, data=data, method=method)  # noqa: S310 - the setting is http(s)
    request.add_header("Authorization", f"Bearer {_token()}")
    request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:  # noqa: S310 - http(s) setting
            return bytes(response.read())
    except urllib.error.HTTPError as refused:
        try:
            reason = json.loads(refused.read())
        except ValueError:
            reason = {"error": f"http_{refused.code}", "detail": refused.reason}
        err.print(f"refused ({refused.code} {reason.get('error')}): {reason.get('detail')}")
        raise typer.Exit(1) from None
    except (urllib.error.URLError, OSError) as down:
        err.print(f"the reconciler API at {base} is unreachable: {down}")
        raise typer.Exit(3) from None


def _print(payload: Any) -> None:
    print(json.dumps(payload, default=str, sort_keys=True))


@repairs_app.command(name="propose")
def propose(
    case_id: int,
    repair_type: Annotated[
        str,
        typer.Option("--type", help="close | post_journal | mt5_credit | mt5_debit | apply_provider_fact"),
    ],
    reason: Annotated[str, typer.Option("--reason", help="why")],
    amount_minor: Annotated[
        int | None, typer.Option("--amount-minor", help="default: what the case explains")
    ] = None,
    currency: Annotated[str | None, typer.Option("--currency")] = None,
    mt5_login: Annotated[
        int | None, typer.Option("--login", help="the MT5 account of an mt5_* repair")
    ] = None,
) -> None:
    """Propose (or amend) a repair of a case; prints its id and the digest a checker approves."""
    body: dict[str, Any] = {"repair_type": repair_type, "reason": reason}
    for name, value in (("amount_minor", amount_minor), ("currency", currency), ("mt5_login", mt5_login)):
        if value is not None:
            body[name] = value
    _print(call("POST", f"/v1/cases/{case_id}/repairs", body))


@repairs_app.command(name="approve")
def approve(
    repair_id: int,
    digest: Annotated[str, typer.Option("--digest", help="the command digest you reviewed (repairs show)")],
) -> None:
    """Approve exactly the command you reviewed (never your own)."""
    _print(call("POST", f"/v1/repairs/{repair_id}/approve", {"command_digest": digest}))


@repairs_app.command(name="reject")
def reject(repair_id: int, reason: Annotated[str, typer.Option("--reason", help="why")]) -> None:
    """Reject a proposed repair, with a reason (the maker may amend it)."""
    _print(call("POST", f"/v1/repairs/{repair_id}/reject", {"reason": reason}))


@repairs_app.command(name="show")
def show(repair_id: int) -> None:
    """One repair: its exact command, digest, who proposed and approved it, its outcome (JSON)."""
    _print(call("GET", f"/v1/repairs/{repair_id}"))


@repairs_app.command(name="list")
def list_(
    case_id: Annotated[int | None, typer.Option("--case")] = None,
    status: Annotated[str | None, typer.Option("--status")] = None,
    as_json: JsonOption = False,
) -> None:
    """Repairs, newest first."""
    query = "&".join(f"{k}={v}" for k, v in (("case_id", case_id), ("status", status)) if v is not None)
    rows = call("GET", "/v1/repairs" + (f"?{query}" if query else ""))["repairs"]
    if as_json:
        _print({"repairs": rows})
        return
    table = Table(title="repairs")
    for column in ("id", "case", "type", "status", "amount", "proposed by", "approved by", "digest"):
        table.add_column(column)
    for r in rows:
        command = r["command"]
        amount = "" if command["amount_minor"] is None else f"{command['amount_minor']} {command['currency']}"
        table.add_row(
            str(r["id"]),
            str(r["case_id"]),
            r["repair_type"],
            r["status"],
            amount,
            r["proposed_by"],
            r["approved_by"] or "",
            r["command_digest"][:12] + "…",
        )
    out.print(table)


@audit_app.command(name="list")
def audit_list(
    target: Annotated[str | None, typer.Option("--target", help="case:N or repair:N")] = None,
    operator: Annotated[str | None, typer.Option("--operator")] = None,
    as_json: JsonOption = False,
) -> None:
    """Every operator act, done or refused, newest first."""
    query = "&".join(f"{k}={v}" for k, v in (("target", target), ("operator", operator)) if v is not None)
    rows = call("GET", "/v1/audit" + (f"?{query}" if query else ""))["audit"]
    if as_json:
        _print({"audit": rows})
        return
    table = Table(title="audit")
    for column in ("at", "operator", "action", "target", "outcome", "reason"):
        table.add_column(column)
    for a in rows:
        style = "green" if a["outcome"] == "done" else "red"
        table.add_row(
            str(a["at"])[:19],
            a["operator"],
            a["action"],
            a["target"],
            f"[{style}]{a['outcome']}[/{style}]",
            a["reason"] or "",
        )
    out.print(table)


def acknowledge(case_id: int, note: Annotated[str, typer.Option("--note", help="why")]) -> None:
    """Acknowledge a case (someone is on it), through the API."""
    _print(call("POST", f"/v1/cases/{case_id}/acknowledge", {"note": note}))


def reopen(case_id: int, reason: Annotated[str, typer.Option("--reason", help="why")]) -> None:
    """Open a resolved case again, with why."""
    _print(call("POST", f"/v1/cases/{case_id}/reopen", {"reason": reason}))


def export(
    out_file: Annotated[Path, typer.Option("--out", help="where the CSV goes")],
    date_: Annotated[str | None, typer.Option("--date")] = None,
    status: Annotated[str | None, typer.Option("--status")] = None,
    case_class: Annotated[str | None, typer.Option("--class")] = None,
) -> None:
    """A selection of cases as CSV, with empty decision columns to fill in (then `cases decide`)."""
    query = urllib.parse.urlencode(
        {k: v for k, v in (("date", date_), ("status", status), ("class", case_class)) if v is not None}
        | {"limit": "5000"}
    )
    out_file.write_bytes(call_raw("GET", f"/v1/cases.csv?{query}", None, "application/json"))
    lines = out_file.read_text().count("\n") - 1
    err.print(
        f"{lines} case(s) written to {out_file}: fill in decision, repair_type, reason, then `cases decide`"
    )


def decide(decisions_file: Path) -> None:
    """Apply a filled-in export: each line its own act (a bad line refuses the whole file)."""
    try:
        data = decisions_file.read_bytes()
    except OSError as exc:
        err.print(f"cannot read {decisions_file}: {exc.strerror}")
        raise typer.Exit(2) from None
    results = json.loads(call_raw("POST", "/v1/decisions", data, "text/csv"))["results"]
    table = Table(title="decisions")
    for column in ("line", "case", "decision", "outcome", "detail", "repair"):
        table.add_column(column)
    for r in results:
        style = "green" if r["outcome"] == "done" else "red"
        table.add_row(
            str(r["line"]),
            str(r["case_id"]),
            r["action"],
            f"[{style}]{r['outcome']}[/{style}]",
            r["detail"],
            "" if r["repair_id"] is None else f"{r['repair_id']} ({str(r['command_digest'])[:12]}…)",
        )
    out.print(table)
    if any(r["outcome"] != "done" for r in results):
        raise typer.Exit(1)
