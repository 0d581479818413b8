"""The reconciler's settings, from the environment, parsed once, failing fast with the variable's name.

``ReconSettings`` is what every reconciler process shares (calendar, grace, topics, provider);
``RunSettings`` adds what a run needs to fetch its inputs (the PSP's report API, MT5's Web API).
With ``RECON_PROVIDER=stripe`` the settlement comes from Stripe's API, with the Stripe settings of
``backbone.psp.stripe_settings`` (``STRIPE_API_KEY`` or ``STRIPE_API_KEY_FILE``, ``STRIPE_API_BASE``,
timeouts), and ``RECON_PSP_API_URL`` / ``RECON_PSP_API_KEY`` (simpsp's report API) must be unset.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final
from zoneinfo import ZoneInfo

from backbone.kafka.topics import topic_name
from backbone.settings import Secret, http_url, iana_zone, setting

from reconciler.domain.dates import BusinessCalendar, parse_cutoff

SERVICE_NAME: Final = "reconciler"


def _cutoff(value: str) -> None:
    if parse_cutoff(value) is None:
        raise ValueError("not HH:MM (24 h)")


def _grace(value: int) -> None:
    if not 0 <= value <= 7 * 86400:
        raise ValueError("not between 0 and 604800 seconds")


def _horizon(value: int) -> None:
    if not 0 <= value <= 31:
        raise ValueError("not between 0 and 31 days")


@dataclass(frozen=True)
class ReconSettings:
    database_url: str = setting("DATABASE_URL", doc="the reconciler's own database")
    business_timezone: str = setting(
        "RECON_BUSINESS_TIMEZONE", "UTC", doc="IANA zone of the business day", check=iana_zone
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
    monitor_topic: str = setting(
        "RECON_MONITOR_TOPIC", topic_name("recon.monitor-events"), doc="the streaming monitor's alerts"
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
    stripe_payout_horizon_days: int = setting(
        "RECON_STRIPE_PAYOUT_HORIZON_DAYS",
        10,
        doc="RECON_PROVIDER=stripe: a date's transactions are looked for in the payouts created up to"
        " this many days after it (the account's payout delay, with margin)",
        check=_horizon,
    )
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
    http_host: str = setting("RECON_HTTP_HOST", "0.0.0.0", doc="listen address")  # noqa: S104 - a server
    http_port: int = setting("RECON_HTTP_PORT", 8085)
    page_size_max: int = setting("RECON_PAGE_SIZE_MAX", 500, doc="largest page of runs or cases")
    metrics_interval_s: int = setting("RECON_METRICS_INTERVAL_S", 15, doc="how often the gauges are read")
    consumer_name: str = setting(
        "CONSUMER_NAME", SERVICE_NAME, doc="the consumer whose dead letters the API lists and replays"
    )


@dataclass(frozen=True)
class OperatorCliSettings:
    """``python -m reconciler repairs|audit|cases acknowledge …``, clients of the HTTP API (the
    operator's token is read per command: ``backbone.settings.terminal_token``)."""

    api_url: str = setting(
        "RECON_API_URL", "http://127.0.0.1:8085", check=http_url, doc="the reconciler API they call"
    )


def _positive(value: int) -> None:
    if value <= 0:
        raise ValueError("not a positive number")


def _partitions(value: int) -> None:
    if value < 0:
        raise ValueError("not 0 (the catalogue's) or a partition count")


@dataclass(frozen=True)
class MonitorSettings:
    """The streaming monitor (``python -m reconciler monitor``): no database, Kafka only."""

    kafka_bootstrap_servers: str = setting("KAFKA_BOOTSTRAP_SERVERS", doc="host:port[,host:port...]")
    payments_topic: str = setting("RECON_PAYMENTS_TOPIC", topic_name("payments.events"), doc="captures")
    mt5_topic: str = setting("RECON_MT5_TOPIC", topic_name("mt5.credit-events"), doc="MT5 credits")
    ledger_topic: str = setting("RECON_LEDGER_TOPIC", topic_name("ledger.events"), doc="journals")
    monitor_topic: str = setting(
        "RECON_MONITOR_TOPIC", topic_name("recon.monitor-events"), doc="where MonitorAlert goes"
    )
    credit_after_s: int = setting(
        "RECON_MONITOR_CREDIT_AFTER_S",
        600,
        doc="a captured deposit without Mt5Credited this long after it was seen: captured_not_credited",
        check=_positive,
    )
    journal_after_s: int = setting(
        "RECON_MONITOR_JOURNAL_AFTER_S",
        600,
        doc="an Mt5Credited without its journal mt5-credit:<id> this long: credited_not_booked",
        check=_positive,
    )
    retain_s: int = setting(
        "RECON_MONITOR_RETAIN_S",
        86400,
        doc="a payment with nothing due is forgotten this long after its last event",
        check=_positive,
    )
    check_interval_ms: int = setting(
        "RECON_MONITOR_CHECK_INTERVAL_MS",
        5000,
        doc="how often overdue entries are looked for",
        check=_positive,
    )
    metrics_port: int = setting("RECON_MONITOR_METRICS_PORT", 8086, doc="/metrics, /healthz, /readyz")
    app_id: str = setting(
        "RECON_MONITOR_APP_ID",
        topic_name("reconciler-monitor"),
        doc="faust app id: the consumer group and the prefix of its changelog topic",
    )
    data_dir: str = setting(
        "RECON_MONITOR_DATA_DIR",
        "",
        doc="faust's data directory (its tables live in memory; faust still creates it); empty:"
        " '<app id>-data' in the working directory",
    )
    partitions: int = setting(
        "RECON_MONITOR_PARTITIONS",
        0,
        doc="partitions of the three source topics (and so of the changelog); 0: the catalogue's",
        check=_partitions,
    )
