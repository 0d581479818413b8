"""Benchmark: webhook ingest through the real gateway process (HTTP, aiohttp) into real PostgreSQL.

Setup: a fresh database (backbone + gateway migrations), one gateway process (``python -m
webhook_gateway``), and this script as the PSP: BENCH_CONNECTIONS keep-alive HTTP/1.1 connections,
each sending its share of BENCH_REQUESTS distinct signed webhooks back to back (closed loop). The
client is a minimal raw-socket HTTP client with every request pre-built and pre-signed, so that the
machine's cores go to the gateway and PostgreSQL, not to the load generator.

Phases: warm-up (not measured), ``new`` (every webhook distinct: receipt + outbox row each), then
``duplicate`` (redeliveries of already stored events: the answer without a write).

Figures: webhooks/s and latency percentiles per phase (request written -> response read), CPU
seconds of the gateway process, of the database backends serving it and of this client, so that
"what dominates" is a measurement. Every commit is durable (fsync and synchronous_commit are
printed). The last line is one JSON object. A benchmark, never a test: figures vary with the load
of this shared machine.

    PG_ADMIN_URL=... .venv/bin/python services/webhook_gateway/bench/bench_webhooks.py
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from backbone.postgres import connect
from backbone.testing import databases
from backbone.testing.stack import discover, free_port
from webhook_gateway.testing import psp_signature

REQUESTS = int(os.environ.get("BENCH_REQUESTS", "20000"))
DUPLICATES = int(os.environ.get("BENCH_DUPLICATES", "5000"))
CONNECTIONS = int(os.environ.get("BENCH_CONNECTIONS", "16"))
WARMUP = int(os.environ.get("BENCH_WARMUP", "1000"))
POOL_SIZE = int(os.environ.get("BENCH_DB_POOL_SIZE", "0"))  # 0: writers + 1
GATEWAYS = int(os.environ.get("BENCH_GATEWAYS", "1"))  # >1: processes sharing the port (SO_REUSEPORT)
WRITERS = int(os.environ.get("BENCH_DB_WRITERS", "2"))  # the service default
LOG_LEVEL = os.environ.get("BENCH_LOG_LEVEL", "INFO")  # production default: one line per webhook
SECRET = "whsec_bench_0123456789abcdef"  # noqa: S105 - a throwaway secret for a throwaway database
MIGRATIONS = Path(__file__).resolve().parents[1] / "migrations"
PATH = "/providers/simpsp/webhooks"


def webhook_body(n: int, created_s: int) -> bytes:
    """A realistic payment_intent.succeeded event (~700 bytes)."""
    intent = {
        "id": f"pi_bench{n:010d}",
        "object": "payment_intent",
        "amount": 10_000 + n % 5000,
        "amount_received": 10_000 + n % 5000,
        "currency": "usd",
        "status": "succeeded",
        "capture_method": "manual",
        "created": created_s - 5,
        "metadata": {"payment_id": f"pay_bench{n:010d}", "deposit_reference": f"dep_{n:012d}"},
        "latest_charge": f"ch_bench{n:010d}",
        "payment_method": f"pm_bench{n:010d}",
        "livemode": False,
    }
    event = {
        "id": f"evt_bench{n:010d}",
        "object": "event",
        "api_version": "2024-06-20",
        "type": "payment_intent.succeeded",
        "created": created_s,
        "data": {"object": intent},
        "livemode": False,
        "pending_webhooks": 1,
        "request": {"id": None, "idempotency_key": f"op_{n:012d}"},
    }
    return json.dumps(event, separators=(",", ":")).encode()


def build_request(n: int, now_s: int) -> bytes:
    body = webhook_body(n, now_s)
    header = psp_signature(SECRET, body, now_s)
    head = (
        f"POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: simpsp-bench/1\r\n"
        f"Content-Type: application/json\r\nSimpsp-Signature: {header}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def one_connection(port: int, requests: list[bytes], latencies_ms: list[float]) -> int:
    """Send ``requests`` one after the other on one keep-alive connection; returns the 200 count."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    ok = 0
    try:
        for request in requests:
            started = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await reader.readexactly(length)
            latencies_ms.append((time.perf_counter() - started) * 1000)
            ok += status == 200
    finally:
        writer.close()
    return ok


async def run_phase(port: int, requests: list[bytes]) -> tuple[float, list[float], int]:
    """(seconds, latencies, 200 answers) for ``requests`` spread over CONNECTIONS connections."""
    shares = [requests[i::CONNECTIONS] for i in range(CONNECTIONS)]
    latencies: list[float] = []
    started = time.perf_counter()
    oks = await asyncio.gather(*(one_connection(port, share, latencies) for share in shares))
    return time.perf_counter() - started, latencies, sum(oks)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def cpu_seconds(pids: list[int]) -> float:
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, IndexError, ValueError):
            continue
    return total / ticks


def machine_busy_seconds() -> float:
    """CPU seconds every core of the machine spent busy so far (all processes, all users)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def backend_pids(db_url: str) -> list[int]:
    with connect(db_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'webhook-gateway'"
            " AND datname = current_database()"
        ).fetchall()
    return [int(r[0]) for r in rows]


def batch_totals(port: int) -> tuple[float, float]:
    """(receipts, batches) written so far, from the gateway's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    values = {}
    for line in text.splitlines():
        if line.startswith(("webhook_store_batch_size_sum", "webhook_store_batch_size_count")):
            name, value = line.split()
            values[name] = float(value)
    return values.get("webhook_store_batch_size_sum", 0.0), values.get("webhook_store_batch_size_count", 0.0)


def wait_ready(port: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError("gateway not ready")


def phase_figures(
    name: str, seconds: float, latencies: list[float], oks: int, count: int
) -> dict[str, float]:
    rate = count / seconds
    figures = {
        f"{name}_per_s": round(rate, 1),
        f"{name}_p50_ms": round(statistics.median(latencies), 2),
        f"{name}_p99_ms": round(percentile(latencies, 0.99), 2),
        f"{name}_max_ms": round(max(latencies), 2),
    }
    print(
        f"{name:>9}: {count} webhooks in {seconds:.2f}s = {rate:,.0f}/s; latency p50 "
        f"{figures[f'{name}_p50_ms']} ms, p99 {figures[f'{name}_p99_ms']} ms,"
        f" max {figures[f'{name}_max_ms']} ms;"
        f" {oks} answered 200"
    )
    return figures


def main() -> int:
    stack = discover()
    db_url = databases.create_database(stack.pg_admin_url, [MIGRATIONS], prefix="bench_wh")
    port = free_port()
    logs = Path(tempfile.mkdtemp(prefix="bench-wh-"))
    env = {
        **os.environ,
        "DATABASE_URL": db_url,
        "SIMPSP_WEBHOOK_SECRET": SECRET,
        "HTTP_PORT": str(port),
        "HTTP_HOST": "127.0.0.1",
        "HTTP_REUSE_PORT": "true" if GATEWAYS > 1 else "false",
        "DB_WRITERS": str(WRITERS),
        "DB_POOL_SIZE_MIN": str(POOL_SIZE or WRITERS + 1),
        "DB_POOL_SIZE_MAX": str(POOL_SIZE or WRITERS + 1),
        "LOG_LEVEL": LOG_LEVEL,
    }
    gateways = []
    for n in range(GATEWAYS):
        with (logs / f"gateway-{n}.log").open("wb") as log:
            gateways.append(
                subprocess.Popen(
                    [sys.executable, "-m", "webhook_gateway"], env=env, stdout=log, stderr=subprocess.STDOUT
                )
            )
    try:
        return run(stack.pg_admin_url, db_url, port, [g.pid for g in gateways], logs)
    finally:
        for gateway in gateways:
            gateway.terminate()
        for gateway in gateways:
            gateway.wait(30)
        databases.drop_database(stack.pg_admin_url, db_url)


def run(admin_url: str, db_url: str, port: int, gateway_pids: list[int], logs: Path) -> int:
    wait_ready(port)
    deadline = time.monotonic() + 30
    while sum("gateway.listening" in p.read_text() for p in logs.glob("gateway-*.log")) < GATEWAYS:
        if time.monotonic() > deadline:
            raise RuntimeError("not every gateway process started")
        time.sleep(0.2)
    with connect(admin_url, autocommit=True) as conn:
        durability = {
            name: str(conn.execute(f"SHOW {name}").fetchone()[0])  # type: ignore[index]
            for name in ("fsync", "synchronous_commit")
        }
    now_s = int(time.time())
    print(f"building {WARMUP + REQUESTS} signed webhooks ...")
    warmup = [build_request(n, now_s) for n in range(WARMUP)]
    new = [build_request(n, now_s) for n in range(WARMUP, WARMUP + REQUESTS)]
    duplicates = new[:DUPLICATES]
    print(
        f"{GATEWAYS} gateway process(es), {CONNECTIONS} connections, {WRITERS} writers each, log level"
        f" {LOG_LEVEL}, durability {durability}, cores {os.cpu_count()}, logs {logs}"
    )
    asyncio.run(run_phase(port, warmup))
    pids = backend_pids(db_url)
    cpu_before = (cpu_seconds(gateway_pids), cpu_seconds(pids), own_cpu_seconds(), machine_busy_seconds())
    batches_before = batch_totals(port)
    seconds, latencies, oks = asyncio.run(run_phase(port, new))
    cpu_after = (cpu_seconds(gateway_pids), cpu_seconds(pids), own_cpu_seconds(), machine_busy_seconds())
    batches_after = batch_totals(port)
    batch_mean = (batches_after[0] - batches_before[0]) / max(1.0, batches_after[1] - batches_before[1])
    figures = phase_figures("webhook", seconds, latencies, oks, len(new))
    dup_seconds, dup_latencies, dup_oks = asyncio.run(run_phase(port, duplicates))
    figures |= phase_figures("duplicate", dup_seconds, dup_latencies, dup_oks, len(duplicates))
    cpu = [after - before for before, after in zip(cpu_before, cpu_after, strict=True)]
    per_req_us = [round(c / len(new) * 1e6) for c in cpu[:3]]
    others_s = max(0.0, cpu[3] - sum(cpu[:3]))
    ceiling = 1e6 / max(1, per_req_us[0]) * GATEWAYS
    print(
        f"CPU during 'new' ({seconds:.2f}s wall x {os.cpu_count()} cores): gateway {cpu[0]:.2f}s"
        f" ({per_req_us[0]} us/webhook), postgres backends {cpu[1]:.2f}s ({per_req_us[1]} us/webhook),"
        f" bench client {cpu[2]:.2f}s ({per_req_us[2]} us/webhook);"
        f" everything else on the machine (WAL writer, Kafka, other users' tests) {others_s:.2f}s"
    )
    print(
        f"machine busy {cpu[3]:.2f} of {seconds * (os.cpu_count() or 1):.2f} CPU-seconds available;"
        f" {GATEWAYS} gateway process(es), one core each at most: their CPU cost alone caps them at"
        f" ~{ceiling:,.0f} webhooks/s"
    )
    print(f"mean batch (receipts per database statement) during 'new': {batch_mean:.1f}, {WRITERS} writers")
    with connect(db_url, autocommit=True) as conn:
        receipts = conn.execute("SELECT count(*) FROM provider_events").fetchone()[0]  # type: ignore[index]
        outbox = conn.execute("SELECT count(*) FROM outbox").fetchone()[0]  # type: ignore[index]
    expected = WARMUP + REQUESTS
    print(f"stored: {receipts} receipts, {outbox} outbox rows (expected {expected} each)")
    result = {
        **figures,
        "webhook_target_per_s": 2000,
        "webhook_p99_target_ms": 50,
        "connections": CONNECTIONS,
        "gateway_processes": GATEWAYS,
        "db_writers": WRITERS,
        "batch_mean": round(batch_mean, 1),
        "requests": REQUESTS,
        "gateway_cpu_us_per_webhook": per_req_us[0],
        "postgres_cpu_us_per_webhook": per_req_us[1],
        "client_cpu_us_per_webhook": per_req_us[2],
        "other_cpu_s_during_run": round(others_s, 2),
        "gateway_cpu_ceiling_per_s": round(ceiling),
        "log_level": LOG_LEVEL,
        "receipts_ok": receipts == expected and outbox == expected,
        **durability,
    }
    print(json.dumps(result))
    return 0 if result["receipts_ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
