"""Benchmark: journals posted per second through the ledger's real consumer, durable commits.

On a fresh ledger database (runtime role) and fresh 12-partition topics: BENCH_LEDGER_PAYMENTS
deposits (capture + MT5 credit, every tenth refunded: refund + MT5 debit) are produced to Kafka
first; then the real consumer process (``python -m ledger consume``) and the real relay (publishing
every JournalPosted) run until every journal is posted and announced.

``journals_per_s`` = journals / (first journal's posted_at -> last journal's posted_at), both read
from the database clock. ``published_per_s`` is the same for the relay's JournalPosted. Commits are
durable: the script refuses to run unless fsync and synchronous_commit are on. CPU microseconds per
journal per process group show what dominates. The last line is one JSON object. A benchmark, never
a test: figures vary with the shared machine's load.

    make bench-ledger   (or: PG_ADMIN_URL=... python services/ledger/bench/bench_ledger.py)
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from tempfile import mkdtemp
from typing import Any

from backbone.avro import AvroCodec, SchemaCatalogue
from backbone.postgres import connect
from backbone.testing.processes import wait_until
from backbone.testing.stack import discover
from ledger.testing.database import create_ledger_database
from ledger.testing.facts import Fact, deposit
from ledger.testing.harness import LedgerService
from ledger.testing.kafka import LedgerTopics, produce

PAYMENTS = int(os.environ.get("BENCH_LEDGER_PAYMENTS", "40000"))
BATCH = os.environ.get("BENCH_LEDGER_BATCH", "2000")
PARTITIONS = int(os.environ.get("BENCH_LEDGER_PARTITIONS", "12"))
CONSUMERS = int(os.environ.get("BENCH_LEDGER_CONSUMERS", "1"))
WARMUP_PAYMENTS = 2000
LOGINS = 5000


def facts(first: int, count: int) -> list[Fact]:
    out: list[Fact] = []
    for n in range(first, first + count):
        ending = "refunded" if n % 10 == 0 else "credited"
        out += deposit(n, amount_minor=1000 + n % 9000, login=1 + n % LOGINS, ending=ending)  # type: ignore[arg-type]
    return out


def cpu_by_pid(pids: list[int]) -> dict[int, float]:
    """User + system CPU seconds of each process still alive (Linux /proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    found = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        found[pid] = (int(fields[11]) + int(fields[12])) / ticks
    return found


def cpu_used(before: dict[str, dict[int, float]], after: dict[str, dict[int, float]]) -> dict[str, float]:
    """CPU seconds per group between two snapshots; a process that exited in between is lost (its
    share is missing, never negative), one that started counts whole."""
    return {
        name: sum(seconds - before.get(name, {}).get(pid, 0.0) for pid, seconds in pids.items())
        for name, pids in after.items()
    }


def process_groups(service: LedgerService) -> dict[str, list[int]]:
    """Our processes, the broker, and PostgreSQL: the backends of this database by who uses them
    (consumer, relay) and the server's shared processes (WAL writer, checkpointer, other people's
    backends on this shared machine) apart."""
    groups: dict[str, list[int]] = {"kafka": [], "pg_shared": []}
    for proc in service.procs:
        name = "relay" if "relay" in str(proc.log_path) else "consumer"
        groups.setdefault(name, []).append(proc.popen.pid)
    roles = {service.consumer_name: "pg_consumer", "outbox-relay": "pg_relay"}
    backends = {
        int(pid): roles.get(app, "pg_shared")
        for pid, app in query(
            service.db.admin_url,
            "SELECT pid, application_name FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid()",
        )
    }
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        pid = int(entry.name)
        if b"kafka.Kafka" in cmdline:
            groups["kafka"].append(pid)
        elif cmdline.startswith(b"postgres"):
            groups.setdefault(backends.get(pid, "pg_shared"), []).append(pid)
    return groups


def query(url: str, sql: str) -> list[tuple[Any, ...]]:
    with connect(url) as conn:
        return conn.execute(sql.encode()).fetchall()


def scalar(url: str, sql: str) -> Any:
    with connect(url) as conn:
        row = conn.execute(sql.encode()).fetchone()
        assert row is not None
        return row[0]


def main() -> int:
    stack = discover()
    db = create_ledger_database(stack.pg_admin_url, prefix="bench_ledger")
    topics = LedgerTopics.unique(PARTITIONS)
    topics.create(stack.kafka_bootstrap)
    service = LedgerService(stack, db, topics, Path(mkdtemp(prefix="bench-ledger-")))
    codec = AvroCodec(SchemaCatalogue.default())
    durability = {k: scalar(db.app_url, f"SHOW {k}") for k in ("fsync", "synchronous_commit")}
    if durability != {"fsync": "on", "synchronous_commit": "on"}:
        print(f"bench-ledger: commits are not durable: {durability}", file=sys.stderr)
        return 1
    settings = {"CONSUMER_BATCH_SIZE_MAX": BATCH, "OUTBOX_BATCH_SIZE_MAX": "5000"}
    try:
        warmup, load = facts(1, WARMUP_PAYMENTS), facts(WARMUP_PAYMENTS + 1, PAYMENTS)
        produced_started = time.monotonic()
        produce(stack.kafka_bootstrap, topics, warmup + load, codec)
        produce_s = time.monotonic() - produced_started
        service.start("relay", **settings).wait_for_log("relay.leader", 60)
        for _ in range(CONSUMERS):
            service.start("consume", **settings)
        # The first journals (as many as the warm-up's facts) are the warm-up: process start, group
        # join, first batches. Measure the rest.
        warm = len(warmup)
        wait_until(lambda: service.journals() >= warm, 120, "warm-up", interval_s=0.05)
        cpu_before = {name: cpu_by_pid(pids) for name, pids in process_groups(service).items()}
        measured_from = service.journals()
        total = len(warmup) + len(load)
        wait_until(lambda: service.journals() >= total, 1800, "load posted", interval_s=0.5)
        cpu = cpu_used(cpu_before, {name: cpu_by_pid(pids) for name, pids in process_groups(service).items()})
        wait_until(
            lambda: scalar(db.admin_url, "SELECT count(*) FROM outbox WHERE published_at IS NULL") == 0,
            600,
            "JournalPosted published",
            interval_s=0.5,
        )
        posted_s = float(
            scalar(
                db.admin_url,
                f"SELECT extract(epoch FROM max(posted_at) - min(posted_at)) FROM journals WHERE id > {warm}",
            )
        )
        published_s = float(
            scalar(
                db.admin_url,
                f"SELECT extract(epoch FROM max(o.published_at) - (SELECT"
                f" min(posted_at) FROM journals WHERE id > {warm})) FROM outbox o"
                " WHERE o.event_type = 'JournalPosted'",
            )
        )
        batches = int(
            scalar(db.admin_url, f"SELECT count(DISTINCT posted_at) FROM journals WHERE id > {warm}")
        )
        verified = service.start("verify").wait_exit(600) == 0
        doubles = int(scalar(db.admin_url, "SELECT count(*) - count(DISTINCT reference) FROM journals"))
        measured = total - warm
        cpu_journals = total - measured_from
    finally:
        service.stop_all()
        db.drop(stack.pg_admin_url)
        topics.delete(stack.kafka_bootstrap)
    result = {
        "journals": measured,
        "journals_per_s": round(measured / posted_s),
        "published_per_s": round(measured / published_s),
        "mean_batch_journals": round(measured / max(batches, 1), 1),
        "consumer_batch_size_max": int(BATCH),
        "partitions": PARTITIONS,
        "consumers": CONSUMERS,
        "produce_s": round(produce_s, 1),
        "cpu_us_per_journal": {name: round(seconds / cpu_journals * 1e6, 1) for name, seconds in cpu.items()},
        "verify_ok": verified,
        "double_postings": doubles,
        **durability,
    }
    cpu_us = result["cpu_us_per_journal"]
    assert isinstance(cpu_us, dict)
    # One consumer is one thread: its own CPU plus its database backend's is its critical path.
    critical_us = cpu_us.get("consumer", 0.0) + cpu_us.get("pg_consumer", 0.0)
    result["critical_path_us_per_journal"] = round(critical_us, 1)
    result["uncontended_ceiling_per_s"] = round(1e6 / critical_us) if critical_us else None
    result["load_average_1m"] = os.getloadavg()[0]
    print(
        f"bench-ledger: {measured} journals posted in {posted_s:.1f}s through the consumer "
        f"({result['journals_per_s']}/s, mean batch {result['mean_batch_journals']}); "
        f"CPU us/journal {result['cpu_us_per_journal']}; verify {'ok' if verified else 'FAILED'}"
    )
    print(json.dumps(result))
    return 0 if verified and doubles == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
