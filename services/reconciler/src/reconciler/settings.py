"""The reconciler's settings, from the environment, parsed once, failing fast with the variable's name.

``ReconSettings`` is what every reconciler process shares (calendar, grace, topics, provider);
``RunSettings`` adds what a run needs to fetch its inputs (the PSP's report API, MT5's Web API).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from backbone.kafka.topics import topic_name
from backbone.settings import Secret, setting

from reconciler.domain.dates import BusinessCalendar, parse_cutoff

SERVICE_NAME: Final = "reconciler"


def _zone(value: str) -> None:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError("not an IANA time zone") from None


def _cutoff(value: str) -> None:
    if parse_cutoff(value) is None:
        raise ValueError("not HH:MM (24 h)")


def _grace(value: int) -> None:
    if not 0 <= value <= 7 * 86400:
        raise ValueError("not between 0 and 604800 seconds")


@dataclass(frozen=True)
class ReconSettings:
    database_url: str = setting("DATABASE_URL", doc="the reconciler's own database")
    business_timezone: str = setting(
        "RECON_BUSINESS_TIMEZONE", "UTC", doc="IANA zone of the business day", check=_zone
    )
    cutoff: str = setting(
        "RECON_CUTOFF", "00:00", doc="HH:MM local time at which a business day starts", check=_cutoff
    )
    grace_s: int = setting(
        "RECON_GRACE_S",
        3600,
        doc="a record younger than this at run time is still in flight, not a discrepancy",
        check=_grace,
    )
    provider: str = setting("RECON_PROVIDER", "simpsp", doc="the PSP whose reports are reconciled")
    payments_topic: str = setting("RECON_PAYMENTS_TOPIC", topic_name("payments.events"), doc="payment facts")
    mt5_topic: str = setting("RECON_MT5_TOPIC", topic_name("mt5.credit-events"), doc="MT5 operations")
    ledger_topic: str = setting("RECON_LEDGER_TOPIC", topic_name("ledger.events"), doc="journals")
    events_topic: str = setting("RECON_EVENTS_TOPIC", topic_name("recon.events"), doc="CaseOpened/Resolved")
    repairs_topic: str = setting(
        "RECON_REPAIRS_TOPIC", topic_name("recon.repair-commands"), doc="approved repairs (ExecuteRepair)"
    )
    outcomes_topic: str = setting(
        "RECON_REPAIR_OUTCOMES_TOPIC",
        topic_name("recon.repair-outcomes"),
        doc="what the executing services did with them (RepairOutcome)",
    )

    def calendar(self) -> BusinessCalendar:
        cutoff = parse_cutoff(self.cutoff)
        if cutoff is None:  # refused at load by its check
            raise ValueError(f"RECON_CUTOFF={self.cutoff!r} is not HH:MM")
        return BusinessCalendar(ZoneInfo(self.business_timezone), cutoff)


@dataclass(frozen=True)
class RunSettings:
    psp_api_url: str | None = setting(
        "RECON_PSP_API_URL", None, doc="the PSP's API (reports); unset: only imported files are matched"
    )
    psp_api_key: Secret | None = setting("RECON_PSP_API_KEY", None, secret=True, doc="its API key")
    psp_timeout_s: int = setting("RECON_PSP_TIMEOUT_S", 120, doc="bound on fetching one report")
    mt5_groups: str = setting("RECON_MT5_GROUPS", "*", doc="MT5 group mask whose deals are read")
    require_bank: bool = setting(
        "RECON_REQUIRE_BANK", True, doc="a run without the bank-deposit file is incomplete"
    )


@dataclass(frozen=True)
class ApiSettings:
    tokens_file: Path = setting(
        "RECON_API_TOKENS_FILE",
        doc="lines '<operator> <permission,...> sha256:<hex of the token>', one per operator: cases:view,"
        " cases:work, repairs:propose, repairs:approve",
    )
    http_host: str = setting("RECON_HTTP_HOST", "0.0.0.0", doc="listen address")  # noqa: S104
    http_port: int = setting("RECON_HTTP_PORT", 8085)
    page_size_max: int = setting("RECON_PAGE_SIZE_MAX", 500, doc="largest page of runs or cases")
    metrics_interval_s: int = setting("RECON_METRICS_INTERVAL_S", 15, doc="how often the gauges are read")
