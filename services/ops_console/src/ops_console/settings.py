"""The console's settings, from the environment (every NAME may come from NAME_FILE), parsed once,
failing fast with the variable's name. README "Configuration" lists them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import time
from pathlib import Path
from typing import Final

from backbone.settings import Secret, iana_zone, positive, setting

SERVICE_NAME: Final = "ops-console"


def _cutoff(value: str) -> None:
    time.fromisoformat(value)


@dataclass(frozen=True)
class ConsoleSettings:
    database_url: Secret = setting("DATABASE_URL", secret=True, doc="the console's own database")
    reconciler_url: str = setting("CONSOLE_RECONCILER_URL", doc="the reconciler's API")
    reconciler_token: Secret = setting(
        "CONSOLE_RECONCILER_TOKEN",
        secret=True,
        doc="the console's token at the reconciler (granted operators:assert and what it may pass on)",
    )
    http_host: str = setting("CONSOLE_HTTP_HOST", "0.0.0.0", doc="listen address")  # noqa: S104 - a server
    http_port: int = setting("CONSOLE_HTTP_PORT", 8087)
    mt5_credit_url: str | None = setting(
        "CONSOLE_MT5_CREDIT_URL",
        None,
        doc="mt5-credit's API (withdrawal approval); unset: no withdrawal pages",
    )
    mt5_credit_token: Secret | None = setting(
        "CONSOLE_MT5_CREDIT_TOKEN",
        None,
        secret=True,
        doc="the console's token at mt5-credit (operators:assert + withdrawals:view,prepare,approve)",
    )
    credit_merchant_tokens_file: Path | None = setting(
        "CONSOLE_CREDIT_MERCHANT_TOKENS_FILE",
        None,
        doc="lines '<merchant_id> <token>' for mt5-credit's deposit intents (a deposit's credits)",
    )
    ledger_url: str | None = setting(
        "CONSOLE_LEDGER_URL", None, doc="the ledger's API (a deposit's journals)"
    )
    ledger_token: Secret | None = setting(
        "CONSOLE_LEDGER_TOKEN",
        None,
        secret=True,
        doc="the console's token at the ledger (operators:assert + ledger:read)",
    )
    gateway_url: str | None = setting(
        "CONSOLE_GATEWAY_URL", None, doc="the webhook gateway's API (a deposit's webhooks)"
    )
    gateway_token: Secret | None = setting(
        "CONSOLE_GATEWAY_TOKEN",
        None,
        secret=True,
        doc="the console's token at the gateway (operators:assert + receipts:view)",
    )
    payment_state_url: str | None = setting(
        "CONSOLE_PAYMENT_STATE_URL", None, doc="payment-state's API; unset: no deposit search"
    )
    payment_state_token: Secret | None = setting(
        "CONSOLE_PAYMENT_STATE_TOKEN",
        None,
        secret=True,
        doc="the console's token at payment-state's operator API (operators:assert + deadletters:*);"
        " unset: no payment-state dead letters",
    )
    merchant_tokens_file: Path | None = setting(
        "CONSOLE_MERCHANT_TOKENS_FILE", None, doc="lines '<merchant_id> <token>' for payment-state"
    )
    timezone: str = setting("CONSOLE_TIMEZONE", "UTC", doc="every time on every page", check=iana_zone)
    business_cutoff: str = setting(
        "CONSOLE_BUSINESS_CUTOFF",
        "00:00",
        doc="HH:MM local: later belongs to the next business day",
        check=_cutoff,
    )
    session_ttl_s: int = setting(
        "CONSOLE_SESSION_TTL_S", 8 * 3600, doc="a login lasts this long", check=positive
    )
    cookie_secure: bool = setting(
        "CONSOLE_COOKIE_SECURE", True, doc="Secure cookies (HTTPS); false only for http://127.0.0.1 in dev"
    )
    service_timeout_s: int = setting(
        "CONSOLE_SERVICE_TIMEOUT_S", 10, doc="bound on one call to a service", check=positive
    )
    pool_size_max: int = setting("CONSOLE_DB_POOL_SIZE_MAX", 4, doc="database connections")


@dataclass(frozen=True)
class CliSettings:
    database_url: Secret = setting("DATABASE_URL", secret=True, doc="the console's own database")
