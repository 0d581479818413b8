"""mt5-credit's processes start only with settings that keep money safe, and stop cleanly: a lease
shorter than the MT5 call budget plus margin, or a missing variable, refuses to start (exit 2, naming
the problem, never a secret); SIGTERM lets a worker finish and exit 0."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from backbone.testing.processes import Proc, wait_until
from backbone.testing.stack import Stack
from mt5_credit.testing import credit_database

MT5 = {
    "MT5_WEBAPI_URL": "http://127.0.0.1:1",
    "MT5_MANAGER_LOGIN": "1000",
    "MT5_MANAGER_PASSWORD": "pw-secret-1",
}


@pytest.fixture
def db_url(stack: Stack) -> Iterator[str]:
    with credit_database(stack.pg_admin_url) as url:
        yield url


def test_a_lease_shorter_than_the_call_budget_refuses_to_start(db_url: str, tmp_path: Path) -> None:
    """Call budget = lock 1 s + connect 1 s + 4 x 1 s = 6 s; a 5 s lease could expire mid-call: exit 2."""
    env = {
        "DATABASE_URL": db_url,
        **MT5,
        "MT5_CALL_TIMEOUT_MS": "1000",
        "MT5_LOCK_TIMEOUT_MS": "1000",
        "MT5_CONNECT_TIMEOUT_MS": "1000",
        "CREDIT_LEASE_MS": "5000",
        "CREDIT_LEASE_MARGIN_MS": "1000",
    }
    proc = Proc(["-m", "mt5_credit", "worker"], env, tmp_path / "worker.log")
    assert proc.popen.wait(30) == 2
    assert "must outlast the MT5 call timeout" in proc.logs()
    assert "pw-secret-1" not in proc.logs()


def test_missing_settings_refuse_to_start_and_name_the_variable(db_url: str, tmp_path: Path) -> None:
    """The HTTP API without its tokens, the worker without its MT5 password: exit 2, variable named."""
    http = Proc(
        ["-m", "mt5_credit", "api"],
        {"DATABASE_URL": db_url, "MT5_CREDIT_API_TOKENS": "", "MT5_CREDIT_ADMIN_TOKEN": ""},
        tmp_path / "http.log",
    )
    assert http.popen.wait(30) == 2
    env = {"DATABASE_URL": db_url, "MT5_WEBAPI_URL": "http://127.0.0.1:1", "MT5_MANAGER_LOGIN": "1000"}
    worker = Proc(["-m", "mt5_credit", "worker"], env, tmp_path / "worker.log")
    assert worker.popen.wait(30) == 2
    assert "MT5_MANAGER_PASSWORD" in worker.logs()


def test_sigterm_stops_a_worker_cleanly(db_url: str, tmp_path: Path) -> None:
    """A running worker (MT5 unreachable: it keeps polling) exits 0 on SIGTERM."""
    env = {"DATABASE_URL": db_url, **MT5, "MT5_CONNECT_TIMEOUT_MS": "200", "CREDIT_POLL_INTERVAL_MS": "50"}
    proc = Proc(["-m", "mt5_credit", "worker"], env, tmp_path / "worker.log")
    # running: its loop reached the database (its SIGTERM handler is in place before that; a loaded
    # machine once took more than 2 s to get there, and the signal found Python's default action)
    wait_until(
        lambda: '"dependency.up"' in proc.logs(),
        60,
        "the worker's loop",
        alive=lambda: proc.popen.poll() is None,
    )
    with pytest.raises(subprocess.TimeoutExpired):
        proc.popen.wait(2)  # still running: it keeps polling while MT5 is away
    proc.popen.send_signal(signal.SIGTERM)
    assert proc.popen.wait(30) == 0, proc.logs()[-2000:]
