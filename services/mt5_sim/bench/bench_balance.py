"""Throughput of the simulator's balance operation, over 3 client connections (prints figures).

Two loads, each for ``--seconds``, against a fresh simulator on a throwaway database:
- ``raw``: 3 processes, each one keep-alive connection sending ``/api/trade/balance`` back to back
  (what the simulator itself can take);
- ``gateway``: 3 processes, each one ``backbone.mt5.Mt5Gateway`` calling ``balance()`` (the trade
  call plus the deal read-back that verifies it: two requests per credit).

    PG_ADMIN_URL=$(bash deploy/postgres/pg.sh url admin) \\
        .venv/bin/python services/mt5_sim/bench/bench_balance.py [--seconds 10]
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

from backbone.mt5 import Applied, DealType, Mt5Gateway
from backbone.mt5.auth import password_hash, rand_answer
from backbone.mt5.testing import MANAGER_LOGIN, MANAGER_PASSWORD, SimulatorProcess, running_simulator

CONNECTIONS = 3
LOGINS = (9001, 9002, 9003)


def _raw_worker(port: int, login: int, seconds: float, out: multiprocessing.Queue[tuple[int, float]]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)

    def call(path: str, **params: object) -> dict[str, object]:
        conn.request("GET", f"/api/{path}?{urlencode(params)}")
        body: dict[str, object] = json.loads(conn.getresponse().read())
        return body

    srv_rand = str(
        call("auth/start", version=484, agent="bench", login=MANAGER_LOGIN, type="manager")["srv_rand"]
    )
    call(
        "auth/answer",
        srv_rand_answer=rand_answer(password_hash(MANAGER_PASSWORD), srv_rand),
        cli_rand=os.urandom(16).hex(),
    )
    done, started = 0, time.monotonic()
    while time.monotonic() < started + seconds:
        assert (
            call("trade/balance", login=login, type=2, balance="0.01", comment=f"raw:{done}")["retcode"]
            == "0 Done"
        )
        done += 1
    out.put((done, time.monotonic() - started))


def _gateway_worker(
    url: str, login: int, seconds: float, out: multiprocessing.Queue[tuple[int, float]]
) -> None:
    sim = SimulatorProcess.__new__(SimulatorProcess)
    sim.env, sim.port = {}, int(url.rsplit(":", 1)[1])
    with Mt5Gateway(sim.gateway_settings(call_timeout_ms=10_000)) as mt5:
        mt5.account(login)  # session and caches warm: measure credits only
        done, started = 0, time.monotonic()
        while time.monotonic() < started + seconds:
            result = mt5.balance(
                login, 1, "USD", DealType.BALANCE, f"gw:{os.getpid()}:{done}", check_margin=False
            )
            assert isinstance(result, Applied), result
            done += 1
        out.put((done, time.monotonic() - started))


def _run(target: object, args: tuple[object, ...], seconds: float) -> float:
    queue: multiprocessing.Queue[tuple[int, float]] = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=target, args=(*args, login, seconds, queue)) for login in LOGINS]  # type: ignore[arg-type]
    for proc in procs:
        proc.start()
    results = [queue.get(timeout=seconds + 60) for _ in procs]
    for proc in procs:
        proc.join(30)
    return sum(done / elapsed_s for done, elapsed_s in results)  # the connections ran side by side


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    with running_simulator(os.environ["PG_ADMIN_URL"], Path(tempfile.mkdtemp())) as sim:
        sim.control.create_group("bench\\usd", "USD", 2)
        for login in LOGINS:
            sim.control.create_account(login, "bench\\usd", balance="0")
        raw = _run(_raw_worker, (sim.port,), args.seconds)
        print(f"raw trade/balance, {CONNECTIONS} connections: {raw:,.0f} balance operations/s")
        verified = _run(_gateway_worker, (sim.url,), args.seconds)
        print(f"gateway balance() (trade + read-back), {CONNECTIONS} gateways: {verified:,.0f} credits/s")
        deals = sum(len(sim.control.deals(login=login, limit=10_000)) for login in LOGINS)
        print(f"deals written: {deals:,}")


if __name__ == "__main__":
    main()
