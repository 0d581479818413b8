"""Settings of an MT5 gateway (environment variables, parsed once by the service that owns it)."""

from __future__ import annotations

from dataclasses import dataclass

from backbone.settings import Secret, SettingsError, setting


@dataclass(frozen=True)
class Mt5GatewaySettings:
    url: str = setting("MT5_WEBAPI_URL", doc="http(s)://host:port of the MT5 Web API (access server)")
    manager_login: int = setting("MT5_MANAGER_LOGIN", doc="manager account (needs the Accountant right)")
    manager_password: Secret = setting("MT5_MANAGER_PASSWORD", secret=True, doc="its API password")
    tls_ca_file: str | None = setting("MT5_TLS_CA_FILE", None, doc="CA bundle for https (default: system)")
    connect_timeout_ms: int = setting("MT5_CONNECT_TIMEOUT_MS", 3_000, doc="TCP/TLS connect bound")
    call_timeout_ms: int = setting("MT5_CALL_TIMEOUT_MS", 10_000, doc="each socket read/write of a call")
    lock_timeout_ms: int = setting("MT5_LOCK_TIMEOUT_MS", 15_000, doc="wait for the session before giving up")
    ping_interval_ms: int = setting(
        "MT5_PING_INTERVAL_MS", 20_000, doc="/api/test/access when idle this long"
    )
    reconnect_backoff_max_ms: int = setting("MT5_RECONNECT_BACKOFF_MAX_MS", 30_000, doc="keeper's retry cap")
    account_cache_ttl_ms: int = setting("MT5_ACCOUNT_CACHE_TTL_MS", 30_000, doc="login→group and group facts")
    account_cache_size_max: int = setting("MT5_ACCOUNT_CACHE_SIZE_MAX", 10_000, doc="entries per cache")
    lookup_pages_max: int = setting("MT5_LOOKUP_PAGES_MAX", 100, doc="deal pages (100 each) per lookup")
    agent: str = setting("MT5_AGENT", "backbone", doc="agent name sent at auth (no spaces)")

    def __post_init__(self) -> None:
        problems = [
            f"{name}={value} must be positive"
            for name, value in (
                ("MT5_MANAGER_LOGIN", self.manager_login),
                ("MT5_CONNECT_TIMEOUT_MS", self.connect_timeout_ms),
                ("MT5_CALL_TIMEOUT_MS", self.call_timeout_ms),
                ("MT5_LOCK_TIMEOUT_MS", self.lock_timeout_ms),
                ("MT5_PING_INTERVAL_MS", self.ping_interval_ms),
                ("MT5_RECONNECT_BACKOFF_MAX_MS", self.reconnect_backoff_max_ms),
                ("MT5_ACCOUNT_CACHE_SIZE_MAX", self.account_cache_size_max),
                ("MT5_LOOKUP_PAGES_MAX", self.lookup_pages_max),
            )
            if value <= 0
        ]
        if not self.agent or " " in self.agent:
            problems.append("MT5_AGENT must be non-empty without spaces")
        if not self.url.startswith(("http://", "https://")):
            problems.append("MT5_WEBAPI_URL must start with http:// or https://")
        if problems:
            raise SettingsError(problems)
