"""The simulator's settings, from the environment, parsed once at start (fail fast, secrets hidden)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from backbone.settings import Secret, SettingsError, setting

MIGRATIONS_DIR: Final = Path(__file__).resolve().parents[2] / "migrations"
_PORT_MAX: Final = 65_535


@dataclass(frozen=True)
class SimSettings:
    database_url: Secret = setting("DATABASE_URL", secret=True, doc="PostgreSQL URL of the mt5_sim database")
    host: str = setting("MT5_SIM_HOST", "127.0.0.1", doc="address both listeners bind")
    port: int = setting("MT5_SIM_PORT", 17001, doc="Web API port (HTTP, or HTTPS with the TLS files)")
    control_port: int = setting("MT5_SIM_CONTROL_PORT", 17002, doc="control API + /healthz /readyz /metrics")
    manager_login: int = setting("MT5_SIM_MANAGER_LOGIN", 1000, doc="the manager account that may log in")
    manager_password: Secret = setting(
        "MT5_SIM_MANAGER_PASSWORD",
        Secret("sim-manager-pw"),
        secret=True,
        doc="its API password (dev default)",
    )
    auth_window_ms: int = setting("MT5_SIM_AUTH_WINDOW_MS", 10_000, doc="auth/start → auth/answer limit")
    idle_timeout_ms: int = setting("MT5_SIM_IDLE_TIMEOUT_MS", 180_000, doc="drop a silent connection after")
    tls_cert_file: Path | None = setting("MT5_SIM_TLS_CERT_FILE", None, doc="PEM certificate: serve HTTPS")
    tls_key_file: Path | None = setting(
        "MT5_SIM_TLS_KEY_FILE", None, doc="PEM private key for the certificate"
    )
    db_pool_size: int = setting("MT5_SIM_DB_POOL_SIZE", 4, doc="PostgreSQL connections")
    synchronous_commit: bool = setting(
        "MT5_SIM_SYNCHRONOUS_COMMIT", True, doc="off: faster, a PG crash may lose deals"
    )
    stop_grace_ms: int = setting("MT5_SIM_STOP_GRACE_MS", 5_000, doc="SIGTERM: wait for busy requests up to")
    migrations_dir: Path = setting("MT5_SIM_MIGRATIONS_DIR", MIGRATIONS_DIR, doc="applied at start")
    log_level: str = setting("LOG_LEVEL", "INFO")

    def __post_init__(self) -> None:
        problems = []
        for name, port in (("MT5_SIM_PORT", self.port), ("MT5_SIM_CONTROL_PORT", self.control_port)):
            if not 0 <= port <= _PORT_MAX:
                problems.append(f"{name}={port} is not a TCP port")
        for name, value in (
            ("MT5_SIM_AUTH_WINDOW_MS", self.auth_window_ms),
            ("MT5_SIM_IDLE_TIMEOUT_MS", self.idle_timeout_ms),
            ("MT5_SIM_DB_POOL_SIZE", self.db_pool_size),
        ):
            if value <= 0:
                problems.append(f"{name}={value} must be positive")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            problems.append("MT5_SIM_TLS_CERT_FILE and MT5_SIM_TLS_KEY_FILE go together")
        if problems:
            raise SettingsError(problems)
