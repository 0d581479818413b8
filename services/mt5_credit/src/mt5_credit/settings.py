"""mt5-credit's settings: one frozen object per process kind, parsed once from env, failing fast.

Every timing that protects money is related to the others and checked at start: the claim lease
must outlast the MT5 call timeout plus a margin, and the resolver waits at least as long before it
looks a deal up (the original call must surely be dead).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Final

from backbone.consumer.settings import ConsumerSettings
from backbone.kafka.topics import topic_name
from backbone.settings import AmountSettings, Secret, http_url, setting

from mt5_credit.adapters.rates import FixedRates

SERVICE_NAME: Final = "mt5_credit"  # as in schemas/topics.toml (the producer of mt5.credit-events)
CONSUMED_TOPIC: Final = "payments.events"  # logical name; topic_name() adds the namespace
REPAIRS_TOPIC: Final = "recon.repair-commands"  # approved repairs from the reconciler
FX_DOC = "fixed FX table like EUR:USD=1.0835,GBP:USD=1.2710 (units of the second per one of the first)"


def _not_negative(value: int) -> None:
    if value < 0:
        raise ValueError("must not be negative")


def _percent(value: str) -> None:
    try:
        parsed = Decimal(value)
    except InvalidOperation as exc:
        raise ValueError("not a decimal number") from exc
    if not parsed.is_finite() or parsed < 0:
        raise ValueError("must be a non-negative decimal")


@dataclass(frozen=True)
class WorkerSettings:
    """The executor + resolver process (``python -m mt5_credit worker``).

    The MT5 connection itself is configured by backbone's ``Mt5GatewaySettings`` (``MT5_WEBAPI_URL``,
    ``MT5_MANAGER_LOGIN``, ``MT5_MANAGER_PASSWORD``, ``MT5_*_TIMEOUT_MS``); the call budget derived
    from those timeouts is what the lease and the resolver's wait are checked against.
    """

    database_url: Secret = setting("DATABASE_URL", secret=True, doc="mt5_credit's database")
    lease_ms: int = setting("CREDIT_LEASE_MS", 120_000, doc="claim lease; >= MT5 call budget + margin")
    lease_margin_ms: int = setting("CREDIT_LEASE_MARGIN_MS", 30_000, doc="lease beyond the MT5 call budget")
    lanes: int = setting("CREDIT_LANES", 4, doc="threads, each with a DB connection and an MT5 session")
    batch_size_max: int = setting("CREDIT_BATCH_SIZE_MAX", 25, doc="rows claimed per pass and lane")
    # New pending rows wake the worker (NOTIFY); this bounds only the wait for leases running out and
    # unknown rows coming due, whose own timings are seconds (RESOLVE_BACKOFF_BASE_MS) and minutes.
    poll_interval_ms: int = setting(
        "CREDIT_POLL_INTERVAL_MS", 1000, doc="longest idle wait between passes (new rows wake it at once)"
    )
    dead_margin_ms: int = setting("RESOLVE_DEAD_MARGIN_MS", 15_000, doc="wait beyond the MT5 call budget")
    lookback_ms: int = setting(
        "RESOLVE_LOOKBACK_MS", 15 * 60_000, doc="lookup window before the first claim and after now"
    )
    backoff_base_ms: int = setting(
        "RESOLVE_BACKOFF_BASE_MS", 5_000, doc="first wait after a lookup with no answer"
    )
    backoff_cap_ms: int = setting("RESOLVE_BACKOFF_CAP_MS", 300_000, doc="longest wait between lookups")
    no_answer_attempts_max: int = setting(
        "RESOLVE_NO_ANSWER_MAX", 5, doc="lookups with no answer before a case"
    )
    health_port: int = setting("HEALTH_PORT", 0, doc="0 disables /healthz, /readyz, /metrics")


@dataclass(frozen=True)
class HttpSettings(AmountSettings):
    """The HTTP API (``python -m mt5_credit http``): accounts, deposit intents, credit status."""

    database_url: Secret = setting("DATABASE_URL", secret=True, doc="mt5_credit's database")
    api_tokens: Secret = setting(
        "MT5_CREDIT_API_TOKENS", secret=True, doc="comma-separated token=merchant_id for server callers"
    )
    admin_token: Secret = setting("MT5_CREDIT_ADMIN_TOKEN", secret=True, doc="token for account mapping")
    host: str = setting("HTTP_HOST", "127.0.0.1")
    port: int = setting("HTTP_PORT", 8083)
    fx_rates: str = setting("FX_RATES", "", doc=FX_DOC, check=FixedRates.parse)
    body_bytes_max: int = setting("HTTP_BODY_BYTES_MAX", 16_384)
    operators_file: str = setting(
        "MT5_CREDIT_OPERATORS_FILE",
        "",
        doc="lines '<operator> <permission,...> sha256:<hex of the token>' (backbone.tokens), permissions"
        " withdrawals:view, withdrawals:prepare, withdrawals:approve; empty: no operator endpoints",
    )
    withdrawal_approval_above_minor: int = setting(
        "WITHDRAWAL_APPROVAL_ABOVE_MINOR",
        0,
        doc="withdrawals above this amount (minor units) need two operators; 0: every withdrawal",
        check=_not_negative,
    )
    withdrawal_margin_level_floor_pct: str = setting(
        "WITHDRAWAL_MARGIN_LEVEL_FLOOR_PCT",
        "100",
        doc="the margin level (%) an account with margin in use must keep after a withdrawal",
        check=_percent,
    )
    consumer_name: str = setting(
        "CONSUMER_NAME", SERVICE_NAME, doc="the consumer whose dead letters operators list and replay"
    )


@dataclass(frozen=True)
class WithdrawalsCliSettings:
    """``python -m mt5_credit withdrawals``, a client of the HTTP API (its tokens, which name the
    caller, are read per command: ``backbone.settings.terminal_token``)."""

    api_url: str = setting(
        "MT5_CREDIT_API_URL", "http://127.0.0.1:8083", check=http_url, doc="the mt5-credit API it calls"
    )


# kw_only: the two backbone settings given defaults here come before required ones in the base class.
@dataclass(frozen=True, kw_only=True)
class ConsumeSettings(ConsumerSettings):
    """The consumer (``python -m mt5_credit consume``, and its ``dlq``): the backbone's consumer
    settings, with this service's defaults for the name and the topic, plus the FX table a deposit
    in another currency is converted with (the same table as the HTTP API's)."""

    consumer_name: str = setting("CONSUMER_NAME", SERVICE_NAME, doc="consumer group id and dedup namespace")
    topics: tuple[str, ...] = setting(
        "CONSUMER_TOPICS",
        (),
        doc="comma-separated topics; default: payments.events and recon.repair-commands in the namespace",
    )
    fx_rates: str = setting("FX_RATES", "", doc=FX_DOC, check=FixedRates.parse)

    def __post_init__(self) -> None:
        # In the topic namespace of the moment the settings are loaded (KAFKA_TOPIC_PREFIX), as the
        # process starts; frozen afterwards, as every settings object.
        if not self.topics:
            object.__setattr__(self, "topics", (topic_name(CONSUMED_TOPIC), topic_name(REPAIRS_TOPIC)))
