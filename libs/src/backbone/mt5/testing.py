"""Test support (never production): the MT5 simulator as a real process, and its control API.

Used by this package's integration tests and by services that talk to MT5 (mt5-credit, reconciler)::

    sim = SimulatorProcess(db_url, tmp_path).start()      # python -m mt5_sim on free ports
    sim.control.create_group("real\\\\usd", "USD", 2)
    sim.control.create_account(7001, "real\\\\usd", balance="0.00")
    sim.control.arm_fault(kind="hang_after_apply", endpoint="trade/balance", count=1, delay_ms=3000)
    with Mt5Gateway(sim.gateway_settings(call_timeout_ms=1000)) as mt5: ...
    sim.kill()                                             # SIGKILL; start() again on the same database

The database must exist (``backbone.testing.databases.create_database(admin_url, [])``); the
simulator applies its own migrations at start.
"""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

from backbone.mt5.settings import Mt5GatewaySettings
from backbone.settings import Secret
from backbone.testing.databases import create_database, drop_database
from backbone.testing.processes import Proc
from backbone.testing.stack import free_port

MANAGER_LOGIN: Final = 1000
MANAGER_PASSWORD: Final = "Password1"  # noqa: S105 - the reference's test password, for the simulator
CONTROL_TIMEOUT_S: Final = 30.0


class ControlError(RuntimeError):
    """The control API refused a request; the message carries its status and error text."""


class SimControl:
    """A thin JSON client for the simulator's control API."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(  # noqa: S310 - a local http:// test URL built by this class
            self.base_url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=CONTROL_TIMEOUT_S) as resp:  # noqa: S310 - local test URL
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise ControlError(f"{method} {path}: {exc.code} {exc.read().decode(errors='replace')}") from exc

    def create_group(self, group: str, currency: str, digits: int) -> None:
        self.request("POST", "/control/groups", {"group": group, "currency": currency, "digits": digits})

    def create_account(self, login: int, group: str, balance: str = "0", **extra: Any) -> dict[str, Any]:
        account: dict[str, Any] = self.request(
            "POST", "/control/accounts", {"login": login, "group": group, "balance": balance, **extra}
        )
        return account

    def account(self, login: int) -> dict[str, Any]:
        account: dict[str, Any] = self.request("GET", f"/control/accounts/{login}")
        return account

    def update_account(self, login: int, **fields: Any) -> dict[str, Any]:
        account: dict[str, Any] = self.request("PATCH", f"/control/accounts/{login}", fields)
        return account

    def arm_fault(self, **spec: Any) -> dict[str, Any]:
        fault: dict[str, Any] = self.request("POST", "/control/faults", spec)["fault"]
        return fault

    def faults(self) -> list[dict[str, Any]]:
        faults: list[dict[str, Any]] = self.request("GET", "/control/faults")["faults"]
        return faults

    def clear_faults(self) -> None:
        self.request("DELETE", "/control/faults")

    def set_clock_offset(self, offset_s: int) -> None:
        self.request("PUT", "/control/clock", {"offset_s": offset_s})

    def add_deals(self, login: int, amount: str, comment: str, **extra: Any) -> list[int]:
        tickets: list[int] = self.request(
            "POST", "/control/deals", {"login": login, "amount": amount, "comment": comment, **extra}
        )["tickets"]
        return tickets

    def deals(self, **query: Any) -> list[dict[str, Any]]:
        params = urllib.parse.urlencode({k: str(v) for k, v in query.items()})
        deals: list[dict[str, Any]] = self.request("GET", f"/control/deals?{params}")["deals"]
        return deals

    def sessions(self) -> list[dict[str, Any]]:
        sessions: list[dict[str, Any]] = self.request("GET", "/control/sessions")["sessions"]
        return sessions

    def disconnect(self) -> int:
        return int(self.request("POST", "/control/disconnect", {})["disconnected"])

    def reset(self) -> None:
        self.request("POST", "/control/reset", {})


class SimulatorProcess:
    """``python -m mt5_sim`` on free ports against ``db_url``; keeps its ports across restarts."""

    def __init__(self, db_url: str, logs_dir: Path, **env: str) -> None:
        self.db_url, self.logs_dir = db_url, logs_dir
        self.port, self.control_port = free_port(), free_port()
        self.env = {
            "DATABASE_URL": db_url,
            "MT5_SIM_PORT": str(self.port),
            "MT5_SIM_CONTROL_PORT": str(self.control_port),
            "MT5_SIM_MANAGER_LOGIN": str(MANAGER_LOGIN),
            "MT5_SIM_MANAGER_PASSWORD": MANAGER_PASSWORD,
            "MT5_SIM_DB_POOL_SIZE": "3",
            **env,
        }
        self.control = SimControl(f"http://127.0.0.1:{self.control_port}")
        self.proc: Proc | None = None
        self._starts = 0

    @property
    def url(self) -> str:
        scheme = "https" if "MT5_SIM_TLS_CERT_FILE" in self.env else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> SimulatorProcess:
        self._starts += 1
        log_path = self.logs_dir / f"mt5_sim-{self.control_port}-{self._starts}.log"
        self.proc = Proc(["-m", "mt5_sim"], self.env, log_path)
        self.proc.wait_for_log('"mt5_sim.ready"', timeout_s)
        return self

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()

    def terminate(self) -> int:
        return self.proc.terminate() if self.proc is not None else 0

    def logs(self) -> str:
        return self.proc.logs() if self.proc is not None else ""

    def gateway_settings(self, **overrides: Any) -> Mt5GatewaySettings:
        """Gateway settings for this simulator, with short test timeouts unless overridden."""
        base = Mt5GatewaySettings(
            url=self.url,
            manager_login=MANAGER_LOGIN,
            manager_password=Secret(MANAGER_PASSWORD),
            connect_timeout_ms=2_000,
            call_timeout_ms=2_000,
            lock_timeout_ms=5_000,
        )
        return replace(base, **overrides)


@contextlib.contextmanager
def running_simulator(admin_url: str, logs_dir: Path, **env: str) -> Iterator[SimulatorProcess]:
    """A fresh database and a simulator on it; both gone afterwards (the process is SIGKILLed)."""
    db_url = create_database(admin_url, [], prefix="mt5sim")
    sim = SimulatorProcess(db_url, logs_dir, **env)
    try:
        yield sim.start()
    finally:
        sim.kill()
        drop_database(admin_url, db_url)
