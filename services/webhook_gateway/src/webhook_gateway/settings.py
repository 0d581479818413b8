"""The gateway's settings: one frozen object parsed from the environment at start.

Secrets (the database URL, webhook secrets) are ``Secret`` values: they never print. Beyond types,
``load_gateway_settings`` checks the rules a type cannot say (ranges, secret length, distinct
secrets) and names every bad variable at once, like ``backbone.settings.load_settings``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from backbone.psp.signature import SigningSecrets
from backbone.settings import Secret, SettingsError, load_settings, setting

from webhook_gateway.domain.providers import SIMPSP, STRIPE, ProviderConfig

SECRET_LENGTH_MIN: Final = 16


@dataclass(frozen=True)
class GatewaySettings:
    database_url: Secret = setting("DATABASE_URL", secret=True, doc="the gateway's database (owner role)")
    simpsp_secret: Secret = setting(
        "SIMPSP_WEBHOOK_SECRET", secret=True, doc="current webhook signing secret of provider simpsp"
    )
    simpsp_secret_previous: Secret | None = setting(
        "SIMPSP_WEBHOOK_SECRET_PREVIOUS",
        None,
        secret=True,
        doc="previous simpsp secret, still accepted during a rotation; unset when the rotation is over",
    )
    stripe_secret: Secret | None = setting(
        "STRIPE_WEBHOOK_SECRET",
        None,
        secret=True,
        doc="signing secret (whsec_…) of our Stripe webhook endpoint; unset: /providers/stripe/… is 404",
    )
    stripe_secret_previous: Secret | None = setting(
        "STRIPE_WEBHOOK_SECRET_PREVIOUS",
        None,
        secret=True,
        doc="the endpoint's previous secret while Stripe rolls it (up to 24 h); then unset",
    )
    http_host: str = setting("HTTP_HOST", "0.0.0.0", doc="listen address")  # noqa: S104 - a server
    http_port: int = setting("HTTP_PORT", 8081, doc="webhooks, /healthz, /readyz, /metrics")
    http_reuse_port: bool = setting("HTTP_REUSE_PORT", False, doc="SO_REUSEPORT: several processes, one port")
    tolerance_s: int = setting("WEBHOOK_TOLERANCE_S", 300, doc="max |now - t| of a signature, seconds")
    body_max_bytes: int = setting("WEBHOOK_BODY_MAX_BYTES", 262_144, doc="larger bodies get 413 unread")
    body_timeout_ms: int = setting("WEBHOOK_BODY_TIMEOUT_MS", 10_000, doc="a slower body gets 408")
    db_writers: int = setting("DB_WRITERS", 2, doc="batches written concurrently (group commit)")
    db_batch_size_max: int = setting("DB_BATCH_SIZE_MAX", 64, doc="webhooks per batch (one statement)")
    queue_max: int = setting("WEBHOOK_QUEUE_MAX", 2000, doc="webhooks waiting for a writer; beyond: 503")
    db_pool_size_min: int = setting("DB_POOL_SIZE_MIN", 2)
    db_pool_size_max: int = setting("DB_POOL_SIZE_MAX", 4, doc="at least DB_WRITERS + 1 (readiness probe)")
    db_timeout_ms: int = setting(
        "DB_TIMEOUT_MS", 5000, doc="bound on storing one webhook (pool wait + statements); then 503"
    )
    db_probe_interval_ms: int = setting("DB_PROBE_INTERVAL_MS", 2000, doc="readiness probe of the database")
    shutdown_grace_ms: int = setting(
        "SHUTDOWN_GRACE_MS", 10_000, doc="on SIGTERM, how long in-flight requests may take to finish"
    )
    log_level: str = setting("LOG_LEVEL", "INFO")
    api_tokens_file: Path | None = setting(
        "GATEWAY_API_TOKENS_FILE",
        None,
        doc="lines '<principal> <permission,...> sha256:<hex>' (backbone.tokens): receipts:view reads"
        " a payment's receipts (GET /v1/receipts); unset: no read API",
    )

    def providers(self) -> dict[str, ProviderConfig]:
        """Every provider with its secrets, by name (the ``{provider}`` path segment)."""
        previous = self.simpsp_secret_previous
        secrets = SigningSecrets(
            self.simpsp_secret.reveal().encode(), previous.reveal().encode() if previous else None
        )
        configs = {SIMPSP.name: ProviderConfig(SIMPSP, secrets)}
        if self.stripe_secret is not None:
            stripe_previous = self.stripe_secret_previous
            configs[STRIPE.name] = ProviderConfig(
                STRIPE,
                SigningSecrets(
                    self.stripe_secret.reveal().encode(),
                    stripe_previous.reveal().encode() if stripe_previous else None,
                ),
            )
        return configs


@dataclass(frozen=True)
class CatchUpSettings:
    """``python -m webhook_gateway catch-up``: the PSP client's settings are ``backbone.psp``'s
    (PSP_BASE_URL, PSP_API_KEY, PSP_TIMEOUT_MS, ...)."""

    database_url: Secret = setting("DATABASE_URL", secret=True, doc="the gateway's database")
    provider: str = setting("CATCH_UP_PROVIDER", "simpsp", doc="whose events list is read (simpsp)")
    interval_ms: int = setting("CATCH_UP_INTERVAL_MS", 60_000, doc="one pass every this many milliseconds")
    settle_s: int = setting(
        "CATCH_UP_SETTLE_S", 300, doc="events younger than this are left to their webhooks (retries)"
    )
    overlap_s: int = setting("CATCH_UP_OVERLAP_S", 120, doc="each pass re-reads this much before its cursor")
    first_window_s: int = setting(
        "CATCH_UP_FIRST_WINDOW_S", 86_400, doc="with no cursor yet, how far back the first pass reads"
    )
    health_port: int = setting("HEALTH_PORT", 9111, doc="/healthz /readyz /metrics; 0: none")


def load_gateway_settings(environ: Mapping[str, str] | None = None) -> GatewaySettings:
    """Parse and check; raises SettingsError naming every problem (secrets by name only)."""
    settings = load_settings(GatewaySettings, environ)
    problems = [p for p in _problems(settings) if p]
    if problems:
        raise SettingsError(problems)
    return settings


def _problems(s: GatewaySettings) -> list[str | None]:
    def at_least(name: str, value: int, low: int) -> str | None:
        return f"{name}={value} is invalid: must be >= {low}" if value < low else None

    previous = s.simpsp_secret_previous
    return [
        _secret_problem("SIMPSP_WEBHOOK_SECRET", s.simpsp_secret),
        _secret_problem("SIMPSP_WEBHOOK_SECRET_PREVIOUS", previous) if previous else None,
        "SIMPSP_WEBHOOK_SECRET_PREVIOUS must differ from SIMPSP_WEBHOOK_SECRET"
        if previous and previous.reveal() == s.simpsp_secret.reveal()
        else None,
        *_stripe_problems(s),
        at_least("HTTP_PORT", s.http_port, 0),
        at_least("WEBHOOK_TOLERANCE_S", s.tolerance_s, 1),
        at_least("WEBHOOK_BODY_MAX_BYTES", s.body_max_bytes, 1024),
        at_least("WEBHOOK_BODY_TIMEOUT_MS", s.body_timeout_ms, 100),
        at_least("DB_WRITERS", s.db_writers, 1),
        at_least("DB_BATCH_SIZE_MAX", s.db_batch_size_max, 1),
        at_least("WEBHOOK_QUEUE_MAX", s.queue_max, 1),
        at_least("DB_POOL_SIZE_MIN", s.db_pool_size_min, 1),
        at_least("DB_POOL_SIZE_MAX", s.db_pool_size_max, max(s.db_pool_size_min, s.db_writers + 1)),
        at_least("DB_TIMEOUT_MS", s.db_timeout_ms, 100),
        at_least("DB_PROBE_INTERVAL_MS", s.db_probe_interval_ms, 100),
        at_least("SHUTDOWN_GRACE_MS", s.shutdown_grace_ms, 0),
    ]


def _stripe_problems(s: GatewaySettings) -> list[str | None]:
    current, previous = s.stripe_secret, s.stripe_secret_previous
    if current is None:
        return ["STRIPE_WEBHOOK_SECRET_PREVIOUS is set without STRIPE_WEBHOOK_SECRET" if previous else None]
    return [
        _secret_problem("STRIPE_WEBHOOK_SECRET", current),
        _secret_problem("STRIPE_WEBHOOK_SECRET_PREVIOUS", previous) if previous else None,
        "STRIPE_WEBHOOK_SECRET_PREVIOUS must differ from STRIPE_WEBHOOK_SECRET"
        if previous and previous.reveal() == current.reveal()
        else None,
    ]


def _secret_problem(name: str, secret: Secret) -> str | None:
    if len(secret.reveal().encode()) < SECRET_LENGTH_MIN:
        return f"{name}=<secret> is invalid: shorter than {SECRET_LENGTH_MIN} bytes"
    return None
