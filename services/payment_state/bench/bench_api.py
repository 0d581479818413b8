"""Benchmark of payment-state's HTTP API: creates at a fixed rate, status reads alongside.

Starts the real API process (``python -m payment_state api``) on a throwaway database of the shared
PostgreSQL, then drives it open-loop: create number i is due_seconds at ``start + i / rate`` whatever the
earlier answers did (no coordinated omission: latency counts from the due_seconds time, so a stalled server
shows up as latency, not as a lower rate). Status reads (GET /payments/{id} of recent payments) run
at their own rate during the same window. Each create uses a fresh Idempotency-Key.

    PG_ADMIN_URL=... python services/payment_state/bench/bench_api.py [--rate 500] [--duration-s 60]

Prints figures, then one JSON line (the last line). Targets: create p99 < 100 ms with no error,
status p99 < 20 ms. Only the API runs (no executor, no PSP): it measures the request path.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
from backbone.testing import databases
from backbone.testing.processes import Proc, wait_until
from backbone.testing.stack import free_port

SERVICE = Path(__file__).resolve().parents[1]
TOKEN = "bench-token-0123456789abcdef"  # noqa: S105 - a throwaway token of the benchmark's own API
CONNECTIONS_MAX = 128


def percentile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Recorder:
    def __init__(self) -> None:
        self.latencies_ms: list[float] = []
        self.service_ms: list[float] = []
        self.errors: dict[str, int] = {}

    def ok(self, due_seconds: float, sent_seconds: float, done_seconds: float) -> None:
        self.latencies_ms.append((done_seconds - due_seconds) * 1000)
        self.service_ms.append((done_seconds - sent_seconds) * 1000)

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1

    def summary(self) -> dict[str, Any]:
        return {
            "count": len(self.latencies_ms),
            "errors": sum(self.errors.values()),
            "error_kinds": self.errors,
            "p50_ms": round(percentile(self.latencies_ms, 0.50), 2),
            "p90_ms": round(percentile(self.latencies_ms, 0.90), 2),
            "p99_ms": round(percentile(self.latencies_ms, 0.99), 2),
            "max_ms": round(max(self.latencies_ms, default=float("nan")), 2),
            "service_p99_ms": round(percentile(self.service_ms, 0.99), 2),
        }


async def create_one(session: aiohttp.ClientSession, base: str, n: int, due_seconds: float, rec: Recorder,
                     created: list[str]) -> None:  # fmt: skip  # continuation aligned under its bracket
    body = {"amount_minor": 1000 + n % 5000, "currency": "EUR", "payment_method_token": "pm_card_visa",
            "deposit_reference": f"dep_{n}"}  # fmt: skip  # continuation aligned under its bracket
    headers = {"Authorization": f"Bearer {TOKEN}", "Idempotency-Key": f"bench-{n}"}
    sent_seconds = time.perf_counter()
    try:
        async with session.post(f"{base}/payments", json=body, headers=headers) as response:
            payload = await response.json()
            if response.status != 201:
                rec.error(f"http_{response.status}")
                return
        rec.ok(due_seconds, sent_seconds, time.perf_counter())
        created.append(payload["payment"]["payment_id"])
    except (aiohttp.ClientError, TimeoutError) as exc:
        rec.error(type(exc).__name__)


async def status_one(
    session: aiohttp.ClientSession, base: str, payment_id: str, due_seconds: float, rec: Recorder
) -> None:
    sent_seconds = time.perf_counter()
    try:
        async with session.get(
            f"{base}/payments/{payment_id}", headers={"Authorization": f"Bearer {TOKEN}"}
        ) as r:
            await r.read()
            if r.status != 200:
                rec.error(f"http_{r.status}")
                return
        rec.ok(due_seconds, sent_seconds, time.perf_counter())
    except (aiohttp.ClientError, TimeoutError) as exc:
        rec.error(type(exc).__name__)


async def drive(
    base: str, rate: float, status_rate: float, duration_s: float
) -> tuple[Recorder, Recorder, float]:
    creates, statuses, created = Recorder(), Recorder(), ["seed"]
    connector = aiohttp.TCPConnector(limit=CONNECTIONS_MAX)
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        seed = Recorder()
        await create_one(session, base, -1, time.perf_counter(), seed, created)
        created.remove("seed")
        tasks: set[asyncio.Task[None]] = set()
        start = time.perf_counter()
        total_creates, total_status = int(rate * duration_s), int(status_rate * duration_s)
        schedule = sorted(
            [(start + i / rate, "c", i) for i in range(total_creates)]
            + [(start + i / status_rate, "s", i) for i in range(total_status)]
        )
        for due_seconds, kind, n in schedule:
            delay = due_seconds - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if kind == "c":
                task = asyncio.create_task(create_one(session, base, n, due_seconds, creates, created))
            else:
                target = random.choice(created[-500:])
                task = asyncio.create_task(status_one(session, base, target, due_seconds, statuses))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - start
    return creates, statuses, elapsed


def start_api(db_url: str, port: int, log_dir: Path) -> Proc:
    env = {
        "DATABASE_URL": db_url,
        "PAYMENT_STATE_API_TOKENS": f"{TOKEN}=bench_merchant",
        "PAYMENT_STATE_HTTP_PORT": str(port),
        "PAYMENT_STATE_HTTP_HOST": "127.0.0.1",
        "KAFKA_BOOTSTRAP_SERVERS": os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"),
    }
    proc = Proc(["-m", "payment_state", "api"], env, log_dir / "bench-api.log")
    base = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            with urllib.request.urlopen(f"{base}/healthz", timeout=2) as response:  # noqa: S310 - our own URL
                return bool(response.status == 200)
        except OSError:
            return False

    wait_until(answers, 60, "the API to answer", alive=lambda: proc.popen.poll() is None)
    return proc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=500.0, help="creates per second")
    parser.add_argument("--status-rate", type=float, default=100.0, help="status reads per second")
    parser.add_argument("--duration-s", type=float, default=60.0)
    args = parser.parse_args()
    admin_url = (
        os.environ.get("PG_ADMIN_URL")
        or subprocess.run(
            ["bash", "deploy/postgres/pg.sh", "url", "admin"],  # noqa: S607 - the repository's own script
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    db_url = databases.create_database(admin_url, [SERVICE / "migrations"], prefix="psbench")
    log_dir = Path(os.environ.get("BENCH_LOG_DIR", tempfile.gettempdir()))
    port = free_port()
    proc = start_api(db_url, port, log_dir)
    try:
        base = f"http://127.0.0.1:{port}"
        creates, statuses, elapsed = asyncio.run(drive(base, args.rate, args.status_rate, args.duration_s))
    finally:
        proc.terminate()
        databases.drop_database(admin_url, db_url)
    c, s = creates.summary(), statuses.summary()
    print(f"creates: {c['count']} in {elapsed:.1f}s ({c['count'] / elapsed:.0f}/s target {args.rate:.0f}/s), "
          f"errors {c['errors']} {c['error_kinds']}")  # fmt: skip  # continuation aligned under its bracket
    print(f"  latency from due_seconds time ms: p50 {c['p50_ms']} p90 {c['p90_ms']} p99 {c['p99_ms']}"
          f" max {c['max_ms']} (from send: p99 {c['service_p99_ms']})")  # fmt: skip  # aligned
    print(f"status reads: {s['count']} ({args.status_rate:.0f}/s), errors {s['errors']}")
    print(f"  latency ms: p50 {s['p50_ms']} p90 {s['p90_ms']} p99 {s['p99_ms']} max {s['max_ms']}")
    result = {
        "rate_per_s": args.rate,
        "duration_s": args.duration_s,
        "achieved_creates_per_s": round(c["count"] / elapsed, 1),
        "create_p50_ms": c["p50_ms"],
        "create_p99_ms": c["p99_ms"],
        "create_max_ms": c["max_ms"],
        "create_errors": c["errors"],
        "status_p50_ms": s["p50_ms"],
        "status_p99_ms": s["p99_ms"],
        "status_errors": s["errors"],
        "create_p99_ok": c["p99_ms"] < 100 and c["errors"] == 0,
        "status_p99_ok": s["p99_ms"] < 20 and s["errors"] == 0,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
