"""Rough throughput of ``POST /v1/payment_intents`` (no confirm) against a real simulator process.

    PG_ADMIN_URL="$(bash deploy/postgres/pg.sh url admin)" \
        .venv/bin/python services/psp_sim/bench/bench_creates.py [--requests 6000] [--concurrency 32]

Starts ``python -m psp_sim`` on a throwaway database and free ports, sends creates over keep-alive
connections (aiohttp), prints one JSON line: rate, p50/p99 latency, and the simulator's CPU ms per create.
The load generator runs on the same machine and takes CPU too: the figure is a floor, not a ceiling.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp
from backbone.testing import databases
from psp_sim.testing import API_KEY, SimProcess


async def _worker(session: aiohttp.ClientSession, url: str, count: int, latencies: list[float]) -> int:
    ok = 0
    for i in range(count):
        body = {"amount_minor": 1000 + i, "currency": "EUR", "payment_method": "pm_card_visa",
                "reference": f"pay_{uuid.uuid4().hex}"}  # fmt: skip  # continuation aligned under its bracket
        headers = {"Authorization": f"Bearer {API_KEY}", "Idempotency-Key": uuid.uuid4().hex}
        started = time.perf_counter()
        async with session.post(url, json=body, headers=headers) as response:
            await response.read()
            ok += response.status == 200
        latencies.append(time.perf_counter() - started)
    return ok


async def _load(api_url: str, requests: int, concurrency: int) -> dict[str, float]:
    latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        started = time.perf_counter()
        url = api_url + "/v1/payment_intents"
        per = requests // concurrency
        oks = await asyncio.gather(*(_worker(session, url, per, latencies) for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    latencies.sort()
    return {"requests": len(latencies), "ok": sum(oks), "seconds": round(elapsed, 2),
            "creates_per_s": round(len(latencies) / elapsed),
            "p50_ms": round(latencies[len(latencies) // 2] * 1000, 1),
            "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 1)}  # fmt: skip  # aligned


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=6000)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    admin_url = os.environ["PG_ADMIN_URL"]
    db_url = databases.create_database(admin_url, [], prefix="pspbench")
    sim = SimProcess(db_url, Path(tempfile.mkdtemp(prefix="pspbench")), PSP_SIM_DB_POOL_SIZE_MAX="10")
    try:
        sim.start()
        assert sim.proc is not None
        pid = sim.proc.popen.pid
        before = _cpu_ticks(pid)
        result = asyncio.run(_load(sim.api_url, args.requests, args.concurrency))
        cpu_ms = (_cpu_ticks(pid) - before) * 1000 / os.sysconf("SC_CLK_TCK")
        result["sim_cpu_ms_per_create"] = round(cpu_ms / max(result["requests"], 1), 3)
        result["load_average_1m"] = round(os.getloadavg()[0], 2)
        print(json.dumps(result))
    finally:
        sim.kill()
        databases.drop_database(admin_url, db_url)


if __name__ == "__main__":
    main()
