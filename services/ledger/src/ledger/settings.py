"""The ledger's settings, from the environment, parsed once, failing fast with the variable's name.

``LedgerSettings`` is what every ledger process shares (posting policy, topic names); each process
adds its own: the consumer the backbone's ``ConsumerSettings``, the relay ``RelaySettings``, the
HTTP API ``ApiSettings``, the command line ``CliSettings``. README "Configuration" lists them all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from backbone.kafka.topics import topic_name
from backbone.settings import Secret, SettingsError, load_settings, setting

from ledger.domain.accounts import currency_problem
from ledger.domain.rule_base import PostingPolicy

T = TypeVar("T")
SERVICE_NAME: Final = "ledger"


@dataclass(frozen=True)
class LedgerSettings:
    business_timezone: str = setting(
        "LEDGER_BUSINESS_TIMEZONE", "UTC", doc="IANA zone that turns event times into business dates"
    )
    currencies: tuple[str, ...] = setting(
        "LEDGER_CURRENCIES",
        (),
        doc="comma-separated allowlist; empty: every ISO-4217 code backbone.money knows",
    )
    payments_topic: str = setting(
        "LEDGER_PAYMENTS_TOPIC", topic_name("payments.events"), doc="payment-state's facts"
    )
    mt5_topic: str = setting("LEDGER_MT5_TOPIC", topic_name("mt5.credit-events"), doc="mt5-credit's facts")
    repairs_topic: str = setting(
        "LEDGER_REPAIRS_TOPIC",
        topic_name("recon.repair-commands"),
        doc="approved repairs from the reconciler (ExecuteRepair)",
    )
    repair_outcomes_topic: str = setting(
        "LEDGER_REPAIR_OUTCOMES_TOPIC",
        topic_name("recon.repair-outcomes"),
        doc="where the ledger answers each repair (RepairOutcome)",
    )
    events_topic: str = setting(
        "LEDGER_EVENTS_TOPIC", topic_name("ledger.events"), doc="where JournalPosted goes"
    )

    def problems(self) -> list[str]:
        found = []
        try:
            ZoneInfo(self.business_timezone)
        except (ZoneInfoNotFoundError, ValueError):
            found.append(f"LEDGER_BUSINESS_TIMEZONE={self.business_timezone!r} is not an IANA time zone")
        found.extend(
            f"LEDGER_CURRENCIES: {problem}" for c in self.currencies if (problem := currency_problem(c, None))
        )
        return found

    @property
    def allowed_currencies(self) -> frozenset[str] | None:
        return frozenset(self.currencies) if self.currencies else None

    def policy(self) -> PostingPolicy:
        return PostingPolicy(ZoneInfo(self.business_timezone), self.allowed_currencies)


@dataclass(frozen=True)
class ApiSettings:
    database_url: Secret = setting("DATABASE_URL", secret=True, doc="runtime role (ledger_app)")
    tokens_file: Path = setting(
        "LEDGER_API_TOKENS_FILE", doc="lines '<principal> <permission,...> sha256:<hex of the token>'"
    )
    http_host: str = setting("LEDGER_HTTP_HOST", "0.0.0.0", doc="listen address")  # noqa: S104 - a server
    http_port: int = setting("LEDGER_HTTP_PORT", 8084)
    pool_size_max: int = setting("LEDGER_DB_POOL_SIZE_MAX", 4, doc="database connections of the API")
    page_size_max: int = setting("LEDGER_PAGE_SIZE_MAX", 500, doc="largest page of journals or entries")
    body_max_bytes: int = setting("LEDGER_HTTP_BODY_MAX_BYTES", 16 * 1024 * 1024, doc="settlement upload")
    statement_timeout_ms: int = setting("LEDGER_STATEMENT_TIMEOUT_MS", 10_000, doc="per API query")
    consumer_name: str = setting(
        "CONSUMER_NAME", SERVICE_NAME, doc="the consumer whose dead letters the API lists and replays"
    )


@dataclass(frozen=True)
class CliSettings:
    database_url: Secret = setting("DATABASE_URL", secret=True, doc="runtime role (ledger_app)")


def load_together(environ: Mapping[str, str] | None, *classes: type[Any]) -> list[Any]:
    """Load several settings classes from one environment (None: the process's); one SettingsError
    names every problem."""
    loaded, problems = [], []
    for cls in classes:
        try:
            loaded.append(load_settings(cls, environ))
        except SettingsError as exc:
            problems.extend(exc.problems)
    for item in loaded:
        if isinstance(item, LedgerSettings):
            problems.extend(item.problems())
    if problems:
        raise SettingsError(problems)
    return loaded
