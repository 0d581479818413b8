"""The console's commands (typer + rich), run by ``python -m ops_console`` (``__main__.py``, through
``backbone.cli.dispatch``) beside ``migrate``.

serve                         the web application (CONSOLE_* settings, README)
users add NAME --permissions view,repair_propose [--merchant m1 ...] [--display-name ...]
                              the password from standard input (one line), never an argument
users list | users disable NAME
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from backbone.health import Health
from backbone.logs import configure_logging
from backbone.settings import Secret, SettingsError, load_settings
from psycopg_pool import AsyncConnectionPool
from rich.console import Console as Rich
from rich.table import Table

from ops_console.adapters.pg_store import PgConsoleStore
from ops_console.adapters.services_http import OperatorClient, PaymentsClient, parse_merchant_tokens
from ops_console.domain import permissions
from ops_console.domain.operators import BadOperator, Operator, check_merchants, check_username, hash_password
from ops_console.domain.permissions import Permission
from ops_console.entrypoints.web import Console
from ops_console.entrypoints.web import serve as run
from ops_console.settings import SERVICE_NAME, CliSettings, ConsoleSettings

T = TypeVar("T")
app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
users = typer.Typer(no_args_is_help=True, help="local operators (development; production: SSO)")
app.add_typer(users, name="users")
out, err = Rich(), Rich(stderr=True)


def _load(cls: type[T]) -> T:
    try:
        return load_settings(cls)
    except SettingsError as exc:
        err.print(str(exc))
        raise typer.Exit(2) from None


@app.command()
def serve() -> None:
    """The web application, until SIGTERM."""
    settings = _load(ConsoleSettings)
    try:
        merchant_tokens = _merchant_tokens(settings.merchant_tokens_file, "CONSOLE_MERCHANT_TOKENS_FILE")
        credit_tokens = _merchant_tokens(
            settings.credit_merchant_tokens_file, "CONSOLE_CREDIT_MERCHANT_TOKENS_FILE"
        )
    except ValueError as exc:
        err.print(str(exc))
        raise typer.Exit(2) from None
    configure_logging(SERVICE_NAME)
    pool = AsyncConnectionPool(
        settings.database_url.reveal(), min_size=1, max_size=settings.pool_size_max, open=False
    )
    clients = _service_clients(settings, merchant_tokens, credit_tokens)
    web_app = Console(
        settings,
        PgConsoleStore(pool),
        clients.recon,
        clients.payments,
        Health.configured(),
        clients.credit,
        clients.ledger,
        gateway=clients.gateway,
        payment_ops=clients.payment_ops,
    ).app()

    async def start(_: object) -> None:
        await pool.open(wait=False)  # fills in the background; /readyz says when
        for client in clients.configured():
            await client.start()

    async def stop(_: object) -> None:
        for client in clients.configured():
            await client.close()
        await pool.close()

    web_app.on_startup.append(start)
    web_app.on_cleanup.append(stop)
    run(web_app, settings)


@dataclass(frozen=True)
class _Clients:
    """The services the console calls; None: not configured (its pages then say so)."""

    recon: OperatorClient
    credit: OperatorClient | None
    payments: PaymentsClient | None
    ledger: OperatorClient | None
    gateway: OperatorClient | None
    payment_ops: OperatorClient | None

    def configured(self) -> list[OperatorClient | PaymentsClient]:
        every = (self.recon, self.credit, self.ledger, self.gateway, self.payment_ops, self.payments)
        return [c for c in every if c is not None]


def _service_clients(
    settings: ConsoleSettings, merchant_tokens: dict[str, str], credit_tokens: dict[str, str]
) -> _Clients:
    timeout = float(settings.service_timeout_s)
    recon = OperatorClient(
        "reconciler",
        settings.reconciler_url,
        settings.reconciler_token.reveal(),
        permissions.RECONCILER,
        timeout,
    )
    credit = _operator_client(
        "mt5-credit", settings.mt5_credit_url, settings.mt5_credit_token, permissions.MT5_CREDIT, timeout
    )
    payments = (
        PaymentsClient(
            settings.payment_state_url, merchant_tokens, timeout, settings.mt5_credit_url, credit_tokens
        )
        if settings.payment_state_url
        else None
    )
    ledger = _operator_client(
        "ledger", settings.ledger_url, settings.ledger_token, permissions.LEDGER, timeout
    )
    gateway = _operator_client(
        "webhook gateway", settings.gateway_url, settings.gateway_token, permissions.GATEWAY, timeout
    )
    payment_ops = _operator_client(
        "payment-state",
        settings.payment_state_url,
        settings.payment_state_token,
        permissions.PAYMENT_STATE,
        timeout,
    )
    return _Clients(recon, credit, payments, ledger, gateway, payment_ops)


def _operator_client(
    name: str,
    url: str | None,
    token: Secret | None,
    grants: dict[Permission, tuple[str, ...]],
    timeout_s: float,
) -> OperatorClient | None:
    """The client of one service the console acts on for operators; None when it is not configured
    (its pages then say so)."""
    if not url or token is None:
        return None
    return OperatorClient(name, url, token.reveal(), grants, timeout_s)


def _merchant_tokens(path: Path | None, name: str) -> dict[str, str]:
    if path is None:
        return {}
    try:
        return parse_merchant_tokens(path.read_text(), str(path))
    except OSError as exc:
        raise ValueError(f"{name}: {exc}") from None
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


def _store_call(fn_name: str, *args: object) -> object:
    settings = _load(CliSettings)

    async def go() -> object:
        async with AsyncConnectionPool(settings.database_url.reveal(), min_size=1, max_size=1) as pool:
            store = PgConsoleStore(pool)
            if fn_name == "add_operator":
                operator, hashed, replace = args
                return await store.add_operator(operator, hashed, replace=bool(replace))  # type: ignore[arg-type]
            return await getattr(store, fn_name)(*args)

    return asyncio.run(go())


@users.command("add")
def users_add(
    name: str,
    permission_list: Annotated[
        str, typer.Option("--permissions", help="comma-separated: " + ",".join(sorted(permissions.ALL)))
    ],
    merchant: Annotated[
        list[str] | None,
        typer.Option("--merchant", help="a merchant whose records they may see; '*' alone: every merchant"),
    ] = None,
    display_name: Annotated[str | None, typer.Option(help="shown in the console")] = None,
    if_new: Annotated[bool, typer.Option("--if-new", help="leave an existing operator as it is")] = False,
) -> None:
    """Add an operator, or replace one's password, permissions and merchants (password on stdin)."""
    password = sys.stdin.readline().rstrip("\n")
    try:
        username = check_username(name)
        granted = permissions.parse(permission_list)
        merchants = check_merchants(merchant or ())
        hashed = hash_password(password)
    except (BadOperator, permissions.UnknownPermission) as exc:
        err.print(str(exc))
        raise typer.Exit(2) from None
    operator = Operator(username, display_name or username, granted, merchants)
    if not _store_call("add_operator", operator, hashed, not if_new):
        out.print(f"operator {username} exists: left as it is (--if-new)")
        return
    out.print(f"operator {username}: {', '.join(sorted(granted)) or 'no permissions'}")


@users.command("list")
def users_list() -> None:
    """Every operator who may log in, with their permissions."""
    table = Table("name", "display name", "permissions", "merchants")
    found = _store_call("operators")
    assert isinstance(found, list)
    for op in found:
        table.add_row(
            op.username, op.display_name, ", ".join(sorted(op.permissions)), ", ".join(op.merchants)
        )
    out.print(table)


@users.command("disable")
def users_disable(name: str) -> None:
    """Disable an operator and close their sessions at once."""
    if not _store_call("disable", name):
        err.print(f"no operator {name}")
        raise typer.Exit(1)
    out.print(f"operator {name} disabled; their sessions are closed")
