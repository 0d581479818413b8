"""PostgreSQL restarted like a crash (``pg_ctl -m immediate``) under load, on a private cluster so
that the rest of the suite keeps its own: every API of the product (payment-state, mt5-credit, the
ledger, the webhook gateway) answers each request during the outage with a clean 503 and
``Retry-After`` or not at all, never a 500 or a traceback, and once the database accepts
connections again no request is refused: the pools hand out no dead connection.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from backbone.testing import databases
from backbone.testing.processes import Proc, wait_until
from backbone.testing.stack import REPO_ROOT, free_port

pytestmark = pytest.mark.integration

PG_SH = str(REPO_ROOT / "deploy/postgres/pg.sh")
TOKEN = "restart-test-token-0123456789"
ADMIN_TOKEN = "restart-test-admin-0123456789"
SECRET = "whsec_restart_test_0123456789abcdef"


class PrivatePostgres:
    """A second cluster through the project's own script, on its own port and home. The home is
    under /var/tmp: as root the server runs as ``postgres``, who cannot enter pytest's 0700 dirs."""

    def __init__(self) -> None:
        self.home = Path(f"/var/tmp/deposits-pg-restart-{uuid.uuid4().hex[:8]}")  # noqa: S108 - throwaway
        self.env = {**os.environ, "PGPORT": str(free_port()), "PG_HOME_DIR": str(self.home)}

    def run(self, *command: str, **extra: str) -> str:
        done = subprocess.run(
            ["bash", PG_SH, *command], env={**self.env, **extra}, capture_output=True, text=True,
            timeout=240, check=False,
        )  # fmt: skip  # packed: a few items a line read better than one each
        assert done.returncode == 0, f"pg.sh {command}: {done.stderr[-2000:]}"
        return done.stdout.strip()


@pytest.fixture(scope="module")
def cluster() -> Iterator[PrivatePostgres]:
    pg = PrivatePostgres()
    pg.run("start")
    try:
        yield pg
    finally:
        pg.run("stop")
        shutil.rmtree(pg.home, ignore_errors=True)


@dataclass
class Api:
    name: str
    url: str
    call: Callable[[str], tuple[str, str, bytes | None, dict[str, str]]]  # n -> method, path, body, headers
    seen: list[tuple[float, float, int]] = field(default_factory=list)  # (started, ended, status or 0)


def _request(api: Api, n: int) -> None:
    method, path, body, headers = api.call(str(n))
    started = time.monotonic()
    request = urllib.request.Request(api.url + path, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
        if status == 503:
            assert error.headers.get("Retry-After"), f"{api.name}: 503 without Retry-After"
    except OSError:
        status, raw = 0, b""  # no answer (the server is alive: asserted after the run)
    api.seen.append((started, time.monotonic(), status))
    assert b"Traceback" not in raw, f"{api.name} leaked a traceback"


def _signed(raw: bytes) -> dict[str, str]:
    t = int(time.time())
    digest = hmac.new(SECRET.encode(), f"{t}.".encode() + raw, hashlib.sha256).hexdigest()
    return {"Simpsp-Signature": f"t={t},v1={digest}", "Content-Type": "application/json"}


def _webhook(n: str) -> tuple[str, str, bytes | None, dict[str, str]]:
    raw = json.dumps(
        {"id": f"evt_{uuid.uuid4().hex}", "type": "customer.updated", "created": 1, "n": n}
    ).encode()
    return "POST", "/providers/simpsp/webhooks", raw, _signed(raw)


def _payment(n: str) -> tuple[str, str, bytes | None, dict[str, str]]:
    body = {"amount_minor": 1000, "currency": "USD", "payment_method_token": "pm_card_visa"}
    headers = {
        "Authorization": f"Bearer {TOKEN}",
        "Idempotency-Key": f"k-{uuid.uuid4().hex}",
        "Content-Type": "application/json",
    }
    if int(n) % 2:
        return "GET", f"/payments/pay_missing_{n}", None, {"Authorization": f"Bearer {TOKEN}"}
    return "POST", "/payments", json.dumps(body).encode(), headers


def _account(n: str) -> tuple[str, str, bytes | None, dict[str, str]]:
    if int(n) % 2:
        return "GET", f"/credits/{n}", None, {"Authorization": f"Bearer {TOKEN}"}
    body = json.dumps({"customer_id": f"c-{n}", "currency": "USD", "enabled": True}).encode()
    return "PUT", f"/accounts/{9000 + int(n)}", body, {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def _journals(n: str) -> tuple[str, str, bytes | None, dict[str, str]]:
    return "GET", f"/v1/journals?reference=capture:pay_{n}", None, {"Authorization": f"Bearer {TOKEN}"}


def _start_apis(cluster: PrivatePostgres, workdir: Path) -> tuple[list[Proc], list[Api]]:
    admin = cluster.run("url", "admin")
    service_dirs = REPO_ROOT / "services"
    db = {name: databases.create_database(admin, [service_dirs / name / "migrations"], prefix=f"rs_{name}")
          for name in ("payment_state", "mt5_credit", "ledger", "webhook_gateway")}  # fmt: skip  # aligned
    tokens = workdir / "ledger-tokens"
    tokens.write_text(f"restart ledger:read sha256:{hashlib.sha256(TOKEN.encode()).hexdigest()}\n")
    ports = {name: free_port() for name in db}
    fast = {"HEALTH_LIVENESS_TIMEOUT_MS": "60000"}
    specs = [
        ("payment_state", ["-m", "payment_state", "api"], {"PAYMENT_STATE_API_TOKENS": f"{TOKEN}=m1",
         "PAYMENT_STATE_HTTP_PORT": str(ports["payment_state"])}, _payment),
        ("mt5_credit", ["-m", "mt5_credit", "api"], {"MT5_CREDIT_API_TOKENS": f"{TOKEN}=m1",
         "MT5_CREDIT_ADMIN_TOKEN": ADMIN_TOKEN, "HTTP_PORT": str(ports["mt5_credit"]),
         # withdrawals read MT5's free margin; none are asked here, so nothing need listen
         "MT5_WEBAPI_URL": "http://127.0.0.1:1", "MT5_MANAGER_LOGIN": "1000",
         "MT5_MANAGER_PASSWORD": "unused-here"}, _account),
        ("ledger", ["-m", "ledger", "api"], {"LEDGER_API_TOKENS_FILE": str(tokens),
         "LEDGER_HTTP_PORT": str(ports["ledger"]), "LEDGER_HTTP_HOST": "127.0.0.1"}, _journals),
        ("webhook_gateway", ["-m", "webhook_gateway", "api"], {"SIMPSP_WEBHOOK_SECRET": SECRET,
         "HTTP_PORT": str(ports["webhook_gateway"]), "HTTP_HOST": "127.0.0.1"}, _webhook),
    ]  # fmt: skip  # packed: a few items a line read better than one each
    procs, apis = [], []
    for name, args, env, call in specs:
        procs.append(Proc(args, {"DATABASE_URL": db[name], **fast, **env}, workdir / f"{name}.log"))
        apis.append(Api(name, f"http://127.0.0.1:{ports[name]}", call))
    for proc, api in zip(procs, apis, strict=True):
        wait_until(
            lambda api=api: _ready(api.url),
            60,
            f"{api.name} ready",
            alive=lambda p=proc: p.popen.poll() is None,
        )
    return procs, apis


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/readyz", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def test_an_immediate_database_restart_under_load_is_503_then_nothing(
    cluster: PrivatePostgres, tmp_path: Path
) -> None:
    """Load on four APIs; the database crashes and comes back; no 5xx but 503 (with Retry-After)
    while it is away, no 503 once it accepts connections again, every API alive and ready after."""
    procs, apis = _start_apis(cluster, tmp_path)
    stop = threading.Event()

    def load(api: Api) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            _request(api, n)
            time.sleep(0.02)

    threads = [threading.Thread(target=load, args=(api,), daemon=True) for api in apis]
    try:
        for thread in threads:
            thread.start()
        time.sleep(3)
        cluster.run("stop", PG_STOP_MODE="immediate")
        time.sleep(3)
        cluster.run("start")  # returns once the cluster accepts connections
        back_at = time.monotonic()
        time.sleep(6)
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    for api, proc in zip(apis, procs, strict=True):
        assert proc.popen.poll() is None, f"{api.name} died; logs in {proc.log_path}"
        statuses = {status for _, _, status in api.seen}
        assert not any(s >= 500 and s != 503 for s in statuses), (api.name, statuses)
        after = [status for started, _, status in api.seen if started >= back_at]
        assert after and 503 not in after and 0 not in after, (api.name, after[:20])
        during = [status for started, _, status in api.seen if started < back_at]
        assert 503 in during, f"{api.name} never noticed the outage: {set(during)}"
        assert _ready(api.url)
        log = proc.logs()
        assert "Traceback" not in log, f"{api.name} logged a traceback: {proc.log_path}"
        assert log.count('"dependency.down"') >= 1 and log.count('"dependency.up"') >= 1, api.name
    for proc in procs:
        proc.kill()
