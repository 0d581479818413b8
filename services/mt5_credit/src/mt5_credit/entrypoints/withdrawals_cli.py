"""``python -m mt5_credit withdrawals …``: withdrawals from a terminal, as a client of the HTTP API.

Never the database: who acts is whoever the token belongs to, and every rule (ownership, free
margin, maker-checker, single-use approvals, the audit) is the server's, as for the console.
- the broker's server: ``request`` (``MT5_CREDIT_SERVER_TOKEN``);
- operators: ``list``, ``show``, ``prepare``, ``approve``, ``reject`` (``MT5_CREDIT_OPERATOR_TOKEN``
  or ``MT5_CREDIT_OPERATOR_TOKEN_FILE``: your own token).
``MT5_CREDIT_API_URL`` (default http://127.0.0.1:8083). A refusal prints the server's reason and
exits 1; bad input or a missing setting exits 2; the API unreachable exits 3.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Annotated, Any, Final

import typer
from backbone.settings import SettingsError, load_settings, terminal_token
from rich.console import Console
from rich.table import Table

from mt5_credit.settings import WithdrawalsCliSettings

app = typer.Typer(no_args_is_help=True, help="Withdrawals: request, review, approve (through the API).")
out = Console()
err = Console(stderr=True)
TIMEOUT_S: Final = 30
JsonOption = Annotated[bool, typer.Option("--json", help="one JSON object instead of a table")]
ReasonOption = Annotated[str, typer.Option("--reason", help="why (recorded in the audit)")]


def _secret(name: str) -> str:
    try:
        token = terminal_token(name)
    except SettingsError as exc:
        err.print("; ".join(exc.problems))
        raise typer.Exit(2) from None
    if not token:
        err.print(f"set {name} or {name}_FILE")
        raise typer.Exit(2)
    return token


def call(method: str, path: str, body: dict[str, Any] | None, token: str, key: str | None = None) -> Any:
    try:
        base = load_settings(WithdrawalsCliSettings).api_url.rstrip("/")
    except SettingsError as exc:  # names MT5_CREDIT_API_URL when it is not an http(s) URL
        err.print(str(exc))
        raise typer.Exit(2) from None
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method)  # noqa: S310 - the setting is http(s)
    request.add_header("Authorization", f"Bearer {token}")
    request.add_header("Content-Type", "application/json")
    if key:
        request.add_header("Idempotency-Key", key)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:  # noqa: S310 - http(s) setting
            return json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as refused:
        try:
            problem = json.loads(refused.read()).get("error", {})
        except ValueError:
            problem = {"code": f"http_{refused.code}", "message": refused.reason}
        err.print(f"refused ({refused.code} {problem.get('code')}): {problem.get('message')}")
        raise typer.Exit(1) from None
    except (urllib.error.URLError, OSError) as down:
        err.print(f"the mt5-credit API at {base} is unreachable: {down}")
        raise typer.Exit(3) from None


def _operator(method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    return call(method, path, body, _secret("MT5_CREDIT_OPERATOR_TOKEN"))


def _show(view: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(view, sort_keys=True, default=str))
        return
    table = Table(title=f"withdrawal {view['withdrawal_id']}", show_header=False)
    for name in (
        "status", "customer_id", "mt5_login", "amount_minor", "currency", "held_minor", "destination_token",
        "approval_required", "prepared_by", "approved_by", "command_digest", "last_reason",
    ):  # fmt: skip  # packed: a few items a line read better than one each
        table.add_row(name, str(view.get(name)))
    for row in ("debit", "give_back"):
        if view.get(row):
            r = view[row]
            table.add_row(
                row, f"{r['comment']} {r['status']} deal {r['deal_ticket']} ({r['attempts']} attempts)"
            )
    out.print(table)
    if view.get("audit"):
        trail = Table("at", "who", "act", "outcome", "reason", title="audit")
        for a in view["audit"]:
            trail.add_row(a["at"], a["actor"], a["action"], a["outcome"], a["reason"] or "")
        out.print(trail)


@app.command(name="request")
def request_(
    customer: Annotated[str, typer.Option("--customer")],
    login: Annotated[int, typer.Option("--login")],
    amount_minor: Annotated[int, typer.Option("--amount-minor")],
    currency: Annotated[str, typer.Option("--currency")],
    destination: Annotated[str, typer.Option("--destination", help="the card token of an earlier deposit")],
    key: Annotated[str | None, typer.Option("--key", help="Idempotency-Key (default: a new one)")] = None,
    as_json: JsonOption = False,
) -> None:
    """Request a withdrawal for a customer (the broker's server; checked and held by the server)."""
    body = {
        "customer_id": customer,
        "mt5_login": login,
        "amount_minor": amount_minor,
        "currency": currency,
        "destination_token": destination,
    }
    view = call(
        "POST", "/v1/withdrawals", body, _secret("MT5_CREDIT_SERVER_TOKEN"), key or f"cli-{uuid.uuid4()}"
    )
    _show(view, as_json)


@app.command(name="list")
def list_(
    status: Annotated[str | None, typer.Option("--status", help="e.g. held, prepared, paid_out")] = None,
    limit: Annotated[int, typer.Option("--limit")] = 100,
    as_json: JsonOption = False,
) -> None:
    """Withdrawals, newest first."""
    query = urllib.parse.urlencode({k: v for k, v in (("status", status), ("limit", limit)) if v is not None})
    rows = _operator("GET", f"/v1/withdrawals?{query}")["withdrawals"]
    if as_json:
        print(json.dumps(rows, sort_keys=True))
        return
    table = Table("withdrawal", "status", "login", "amount", "prepared by", "approved by")
    for w in rows:
        amount = f"{w['amount_minor']} {w['currency']}"
        table.add_row(w["withdrawal_id"], w["status"], str(w["mt5_login"]), amount,
                      w["prepared_by"] or "", w["approved_by"] or "")  # fmt: skip  # aligned
    out.print(table)


@app.command(name="show")
def show(withdrawal_id: str, as_json: JsonOption = False) -> None:
    """One withdrawal, its MT5 rows and its audit trail."""
    _show(_operator("GET", f"/v1/withdrawals/{withdrawal_id}"), as_json)


@app.command(name="prepare")
def prepare(withdrawal_id: str, reason: ReasonOption, as_json: JsonOption = False) -> None:
    """Maker: bind the exact withdrawal (prints the digest the checker approves)."""
    _show(_operator("POST", f"/v1/withdrawals/{withdrawal_id}/prepare", {"reason": reason}), as_json)


@app.command(name="approve")
def approve(
    withdrawal_id: str,
    digest: Annotated[str, typer.Option("--digest", help="the command digest you reviewed (show)")],
    reason: ReasonOption,
    as_json: JsonOption = False,
) -> None:
    """Checker: approve exactly what you reviewed (never one you prepared). MT5 is debited next."""
    body = {"command_digest": digest, "reason": reason}
    _show(_operator("POST", f"/v1/withdrawals/{withdrawal_id}/approve", body), as_json)


@app.command(name="reject")
def reject(withdrawal_id: str, reason: ReasonOption, as_json: JsonOption = False) -> None:
    """Refuse a withdrawal before any money moved; the hold is released."""
    _show(_operator("POST", f"/v1/withdrawals/{withdrawal_id}/reject", {"reason": reason}), as_json)
