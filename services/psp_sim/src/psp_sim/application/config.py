"""The run-time configuration the control API can change: webhook URL, signing secrets, idempotency TTL,
the webhook retry policy and how long a payout stays pending. Start values come from the environment;
changes are persisted (table ``sim_config``) as overrides, so a restart keeps them; ``reset`` drops
the overrides.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Final
from urllib.parse import urlsplit

from psp_sim.domain.webhooks import RetryPolicy

SECRET_LENGTH_MIN: Final = 16
TTL_S_MAX: Final = 30 * 86_400
PAYOUT_SETTLE_DELAY_MS_DEFAULT: Final = 1000
PAYOUT_SETTLE_DELAY_MS_MAX: Final = 30 * 86_400_000


class ConfigError(ValueError):
    """A configuration change is malformed; the message names the field (never a secret's value)."""


@dataclass(frozen=True, slots=True)
class SimConfig:
    webhook_url: str
    secrets: tuple[str, ...]  # current first; two during a rotation
    idempotency_ttl_s: int
    retry: RetryPolicy
    payout_settle_delay_ms: int = PAYOUT_SETTLE_DELAY_MS_DEFAULT  # 0: a payout settles at create

    def public_json(self) -> dict[str, Any]:
        """For GET /control/config: secrets are never shown, only how many are active."""
        return {
            "webhook_url": self.webhook_url or None,
            "signing_secrets_active": len(self.secrets),
            "idempotency_ttl_s": self.idempotency_ttl_s,
            "webhook_attempts_max": self.retry.attempts_max,
            "webhook_backoff_initial_ms": self.retry.backoff_initial_ms,
            "webhook_backoff_max_ms": self.retry.backoff_max_ms,
            "payout_settle_delay_ms": self.payout_settle_delay_ms,
        }


class ConfigHolder:
    """The current run-time configuration; replaced whole (never mutated) by the control API."""

    def __init__(self, config: SimConfig) -> None:
        self.current = config


def _check_url(url: str) -> str:
    if url == "":
        return url
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError("webhook_url must be an http(s) URL")
    return url


def _int(value: Any, name: str, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise ConfigError(f"{name} must be an integer {low}..{high}")
    return value


def apply_overrides(base: SimConfig, overrides: dict[str, Any]) -> SimConfig:
    """``base`` with the control API's overrides; raises ConfigError naming a bad field."""
    config = base
    retry = {
        "webhook_attempts_max": base.retry.attempts_max,
        "webhook_backoff_initial_ms": base.retry.backoff_initial_ms,
        "webhook_backoff_max_ms": base.retry.backoff_max_ms,
    }
    for name, value in overrides.items():
        if name == "webhook_url":
            if not isinstance(value, str):
                raise ConfigError("webhook_url must be a string ('' to stop delivering)")
            config = replace(config, webhook_url=_check_url(value))
        elif name == "secrets":
            config = replace(config, secrets=check_secrets(value))
        elif name == "idempotency_ttl_s":
            config = replace(config, idempotency_ttl_s=_int(value, name, 1, TTL_S_MAX))
        elif name == "payout_settle_delay_ms":
            delay_ms = _int(value, name, 0, PAYOUT_SETTLE_DELAY_MS_MAX)
            config = replace(config, payout_settle_delay_ms=delay_ms)
        elif name == "webhook_attempts_max":
            retry[name] = _int(value, name, 1, 100)
        elif name in ("webhook_backoff_initial_ms", "webhook_backoff_max_ms"):
            retry[name] = _int(value, name, 1, 3_600_000)
        else:
            raise ConfigError(f"unknown configuration field {name!r}")
    if retry["webhook_backoff_initial_ms"] > retry["webhook_backoff_max_ms"]:
        raise ConfigError("webhook_backoff_initial_ms must not exceed webhook_backoff_max_ms")
    policy = RetryPolicy(
        retry["webhook_attempts_max"], retry["webhook_backoff_initial_ms"], retry["webhook_backoff_max_ms"]
    )
    return replace(config, retry=policy)


def check_secrets(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not 1 <= len(value) <= 2:
        raise ConfigError("secrets: one or two signing secrets")
    for secret in value:
        if not isinstance(secret, str) or len(secret) < SECRET_LENGTH_MIN or not secret.isprintable():
            raise ConfigError(
                f"each signing secret must be a printable string of >= {SECRET_LENGTH_MIN} chars"
            )
    return tuple(value)
