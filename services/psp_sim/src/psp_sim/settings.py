"""Settings of the PSP simulator, from the environment, parsed once at start (fail fast, secrets hidden).

Values marked "control" are the start values of what the control API can change at run time; a change
made there is persisted in the database and wins over the environment until ``POST /control/reset``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from backbone.settings import Secret, setting

MIGRATIONS: Final = Path(__file__).resolve().parents[2] / "migrations"


@dataclass(frozen=True)
class SimSettings:
    database_url: Secret = setting("DATABASE_URL", secret=True, doc="PostgreSQL database psp_sim")
    api_key: Secret = setting("PSP_SIM_API_KEY", secret=True, doc="bearer key clients must present")
    webhook_secret: Secret = setting("PSP_SIM_WEBHOOK_SECRET", secret=True, doc="current signing secret")
    webhook_secret_previous: Secret | None = setting(
        "PSP_SIM_WEBHOOK_SECRET_PREVIOUS", None, secret=True, doc="previous secret (rotation): also signs"
    )
    webhook_url: str = setting("PSP_SIM_WEBHOOK_URL", "", doc="control: where webhooks go (empty: held)")
    api_host: str = setting("PSP_SIM_API_HOST", "0.0.0.0", doc="PSP API bind address")  # noqa: S104 - server
    api_port: int = setting("PSP_SIM_API_PORT", 17101, doc="PSP API (and /healthz /readyz /metrics)")
    control_host: str = setting("PSP_SIM_CONTROL_HOST", "127.0.0.1", doc="control API bind address")
    control_port: int = setting("PSP_SIM_CONTROL_PORT", 17102, doc="control API port")
    idempotency_ttl_s: int = setting("PSP_SIM_IDEMPOTENCY_TTL_S", 86_400, doc="control: key lifetime")
    webhook_attempts_max: int = setting("PSP_SIM_WEBHOOK_ATTEMPTS_MAX", 8, doc="control: attempts per copy")
    webhook_backoff_initial_ms: int = setting("PSP_SIM_WEBHOOK_BACKOFF_INITIAL_MS", 1000, doc="control")
    webhook_backoff_max_ms: int = setting("PSP_SIM_WEBHOOK_BACKOFF_MAX_MS", 60_000, doc="control")
    webhook_timeout_ms: int = setting("PSP_SIM_WEBHOOK_TIMEOUT_MS", 5000, doc="one delivery attempt")
    webhook_concurrency: int = setting("PSP_SIM_WEBHOOK_CONCURRENCY", 8, doc="parallel delivery lanes")
    webhook_batch_max: int = setting("PSP_SIM_WEBHOOK_BATCH_MAX", 200, doc="deliveries claimed per pass")
    webhook_poll_interval_ms: int = setting("PSP_SIM_WEBHOOK_POLL_INTERVAL_MS", 250, doc="fallback poll")
    fee_percent_bp: int = setting("PSP_SIM_FEE_PERCENT_BP", 290, doc="charge fee, basis points")
    fee_fixed_minor: int = setting("PSP_SIM_FEE_FIXED_MINOR", 30, doc="charge fee, fixed part")
    dispute_fee_minor: int = setting("PSP_SIM_DISPUTE_FEE_MINOR", 1500, doc="fee per dispute")
    seed: str = setting("PSP_SIM_SEED", "simpsp", doc="makes payout batch ids and report faults reproducible")
    payout_batch_size_max: int = setting("PSP_SIM_PAYOUT_BATCH_SIZE_MAX", 500, doc="rows per payout batch")
    payout_delay_days: int = setting("PSP_SIM_PAYOUT_DELAY_DAYS", 2, doc="bank value date = date + days")
    payout_settle_delay_ms: int = setting(
        "PSP_SIM_PAYOUT_SETTLE_DELAY_MS", 1000, doc="control: pending payout -> paid|failed after; 0: at once"
    )
    db_pool_size_max: int = setting("PSP_SIM_DB_POOL_SIZE_MAX", 10, doc="database connections")
    request_body_max_bytes: int = setting("PSP_SIM_REQUEST_BODY_MAX_BYTES", 65_536, doc="larger: 413")
    shutdown_grace_ms: int = setting("PSP_SIM_SHUTDOWN_GRACE_MS", 5000, doc="SIGTERM: in-flight bound")
    log_level: str = setting("LOG_LEVEL", "INFO")


_RANGES: Final = {
    "api_port": ("PSP_SIM_API_PORT", 1, 65_535),
    "control_port": ("PSP_SIM_CONTROL_PORT", 1, 65_535),
    "idempotency_ttl_s": ("PSP_SIM_IDEMPOTENCY_TTL_S", 1, 30 * 86_400),
    "webhook_attempts_max": ("PSP_SIM_WEBHOOK_ATTEMPTS_MAX", 1, 100),
    "webhook_backoff_initial_ms": ("PSP_SIM_WEBHOOK_BACKOFF_INITIAL_MS", 1, 3_600_000),
    "webhook_backoff_max_ms": ("PSP_SIM_WEBHOOK_BACKOFF_MAX_MS", 1, 3_600_000),
    "webhook_timeout_ms": ("PSP_SIM_WEBHOOK_TIMEOUT_MS", 100, 60_000),
    "webhook_concurrency": ("PSP_SIM_WEBHOOK_CONCURRENCY", 1, 64),
    "webhook_batch_max": ("PSP_SIM_WEBHOOK_BATCH_MAX", 1, 10_000),
    "webhook_poll_interval_ms": ("PSP_SIM_WEBHOOK_POLL_INTERVAL_MS", 10, 60_000),
    "fee_percent_bp": ("PSP_SIM_FEE_PERCENT_BP", 0, 10_000),
    "fee_fixed_minor": ("PSP_SIM_FEE_FIXED_MINOR", 0, 1_000_000),
    "dispute_fee_minor": ("PSP_SIM_DISPUTE_FEE_MINOR", 0, 1_000_000),
    "payout_batch_size_max": ("PSP_SIM_PAYOUT_BATCH_SIZE_MAX", 1, 1_000_000),
    "payout_delay_days": ("PSP_SIM_PAYOUT_DELAY_DAYS", 0, 30),
    "payout_settle_delay_ms": ("PSP_SIM_PAYOUT_SETTLE_DELAY_MS", 0, 30 * 86_400_000),
    "db_pool_size_max": ("PSP_SIM_DB_POOL_SIZE_MAX", 2, 100),
    "request_body_max_bytes": ("PSP_SIM_REQUEST_BODY_MAX_BYTES", 1024, 10 * 1024 * 1024),
    "shutdown_grace_ms": ("PSP_SIM_SHUTDOWN_GRACE_MS", 0, 120_000),
}
SECRET_LENGTH_MIN: Final = 16


def problems(s: SimSettings) -> list[str]:
    """Range checks the types cannot express, each naming its variable (never a secret's value)."""
    found = [
        f"{env}={getattr(s, name)} is out of range {low}..{high}"
        for name, (env, low, high) in _RANGES.items()
        if not low <= getattr(s, name) <= high
    ]
    if s.webhook_backoff_initial_ms > s.webhook_backoff_max_ms:
        found.append("PSP_SIM_WEBHOOK_BACKOFF_INITIAL_MS must not exceed PSP_SIM_WEBHOOK_BACKOFF_MAX_MS")
    for env, secret in (
        ("PSP_SIM_WEBHOOK_SECRET", s.webhook_secret),
        ("PSP_SIM_WEBHOOK_SECRET_PREVIOUS", s.webhook_secret_previous),
    ):
        if secret is not None and len(secret.reveal()) < SECRET_LENGTH_MIN:
            found.append(f"{env} must have at least {SECRET_LENGTH_MIN} characters")
    if len(s.api_key.reveal()) < 8:
        found.append("PSP_SIM_API_KEY must have at least 8 characters")
    return found
