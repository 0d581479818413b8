"""Benchmark: outbox -> relay -> Kafka -> idempotent consumer, on the real local stack.

Two phases on a fresh database and a fresh 12-partition topic, with the probe service (a real
consumer process whose handler COPYs one effect row per event, and a real relay process):

1. saturation: the writer commits BENCH_EVENTS events as fast as it can (batches of
   BENCH_BATCH per transaction); ``events_per_s`` = events / (first commit -> last effect).
2. paced: the writer offers BENCH_PACED_RATE events/s for BENCH_PACED_S seconds; commit-to-
   consumed latency per event = effect row's insert time - the writer's commit time.

Commits are durable: the script checks fsync and synchronous_commit are on and prints them.
The last line is one JSON object. This is a benchmark, never a test: figures vary with the
machine's load; compare ratios within one run.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from tempfile import mkdtemp

from backbone.avro import AvroCodec, SchemaCatalogue
from backbone.outbox import OutboxWriter
from backbone.postgres import connect
from backbone.testing import databases, probe
from backbone.testing import kafka as test_kafka
from backbone.testing.harness import EVENTS, Probe
from backbone.testing.processes import wait_until
from backbone.testing.stack import discover

EVENTS_TOTAL = int(os.environ.get("BENCH_EVENTS", "200000"))
BATCH = int(os.environ.get("BENCH_BATCH", "1000"))
PARTITIONS = int(os.environ.get("BENCH_PARTITIONS", "12"))
PACED_RATE = int(os.environ.get("BENCH_PACED_RATE", "2000"))
PACED_S = int(os.environ.get("BENCH_PACED_S", "20"))
KEYS = 5000


def write(service: Probe, count: int, seq_start: int, rate_per_s: float | None) -> dict[int, float]:
    """Commit ``count`` events in batches; returns seq -> commit time (epoch ms)."""
    codec = AvroCodec(SchemaCatalogue.default())
    outbox = OutboxWriter(codec, test_kafka.probe_catalogue(service.topic, PARTITIONS, EVENTS), "bench")
    committed: dict[int, float] = {}
    batch = BATCH if rate_per_s is None else max(1, int(rate_per_s / 100))  # paced: 100 commits/s
    started = time.monotonic()
    with connect(service.db_url) as conn:
        for first in range(seq_start, seq_start + count, batch):
            seqs = range(first, min(first + batch, seq_start + count))
            messages = [
                outbox.event(service.topic, probe.EVENT_TYPE, f"pay-{s % KEYS}", probe.captured_body(s))
                for s in seqs
            ]
            if rate_per_s is not None:  # wait for this batch's slot in the schedule
                delay = started + (first - seq_start) / rate_per_s - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            with conn.transaction():
                outbox.write(conn, messages)
            now_ms = time.time() * 1000
            committed.update(dict.fromkeys(seqs, now_ms))
    return committed


def latencies_ms(service: Probe, committed: dict[int, float]) -> list[float]:
    rows = service.query(
        "SELECT seq, extract(epoch FROM applied_at) * 1000 FROM probe_effects WHERE seq >= %s", min(committed)
    )
    return [float(applied) - committed[int(seq)] for seq, applied in rows if int(seq) in committed]


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of these processes so far (Linux /proc), in seconds."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / ticks


def process_groups(service: Probe) -> dict[str, list[int]]:
    """The processes the pipeline runs on: ours, the probe's, the broker's and the database's."""
    by_name: dict[str, list[int]] = {"writer": [os.getpid()], "kafka": [], "postgres": []}
    for proc in service.procs:
        by_name.setdefault("relay" if "relay" in str(proc.log_path) else "consumer", []).append(
            proc.popen.pid
        )
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"kafka.Kafka" in cmdline:
                by_name["kafka"].append(int(entry.name))
            elif cmdline.startswith(b"postgres"):
                by_name["postgres"].append(int(entry.name))
    return by_name


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    stack = discover()
    db_url = databases.create_database(stack.pg_admin_url, [probe.MIGRATIONS], prefix="bench")
    topic = test_kafka.unique_topic("bench")
    test_kafka.create_topics(stack.kafka_bootstrap, test_kafka.probe_catalogue(topic, PARTITIONS, EVENTS))
    service = Probe(stack, db_url, topic, topic, Path(mkdtemp(prefix="bench-backbone-")))
    with connect(db_url) as conn:
        durability = {k: conn.execute(f"SHOW {k}").fetchone()[0] for k in ("fsync", "synchronous_commit")}  # type: ignore[index]
    if durability != {"fsync": "on", "synchronous_commit": "on"}:
        print(f"bench: commits are not durable: {durability}", file=sys.stderr)
        return 1
    settings = {
        "PROBE_PARTITIONS": str(PARTITIONS),
        "CONSUMER_BATCH_SIZE_MAX": "2000",
        "OUTBOX_BATCH_SIZE_MAX": "5000",
    }
    try:
        service.start("relay", **settings).wait_for_log("relay.leader")
        service.start("consume", **settings).wait_for_log("consumer.assigned")
        # warm-up: the first batch of each partition takes the careful path
        service.write(2000, keys=KEYS, seq_start=10_000_000)
        wait_until(lambda: service.effects() >= 2000, 60, "warm-up")

        groups = process_groups(service)
        cpu_before = {name: cpu_seconds(pids) for name, pids in groups.items()}
        committed = write(service, EVENTS_TOTAL, 1, None)
        wait_until(
            lambda: service.effects() >= 2000 + EVENTS_TOTAL, 600, "saturation phase consumed", interval_s=0.5
        )
        groups = process_groups(service)  # postgres backends come and go; take the ones alive now too
        cpu_us_per_event = {
            name: round((cpu_seconds(pids) - cpu_before.get(name, 0.0)) / EVENTS_TOTAL * 1e6, 1)
            for name, pids in groups.items()
        }
        last_applied_ms = float(
            service.scalar("SELECT extract(epoch FROM max(applied_at)) * 1000 FROM probe_effects")
        )
        elapsed_s = (last_applied_ms - min(committed.values())) / 1000
        saturated = latencies_ms(service, committed)

        paced_start = EVENTS_TOTAL + 1
        paced = write(service, PACED_RATE * PACED_S, paced_start, PACED_RATE)
        wait_until(lambda: service.effects() >= 2000 + EVENTS_TOTAL + len(paced), 300, "paced phase consumed")
        paced_latency = latencies_ms(service, paced)
        doubles = service.scalar("SELECT count(*) - count(DISTINCT event_id) FROM probe_effects")
    finally:
        for proc in service.procs:
            proc.terminate()
        databases.drop_database(stack.pg_admin_url, db_url)
        test_kafka.delete_topics(stack.kafka_bootstrap, [topic])
    result = {
        "events": EVENTS_TOTAL,
        "events_per_s": round(EVENTS_TOTAL / elapsed_s),
        "p99_ms": round(percentile(paced_latency, 0.99), 1),
        "p50_ms": round(statistics.median(paced_latency), 1),
        "paced_rate_per_s": PACED_RATE,
        "saturated_p50_ms": round(statistics.median(saturated), 1),
        "saturated_p99_ms": round(percentile(saturated, 0.99), 1),
        "partitions": PARTITIONS,
        "write_batch": BATCH,
        "double_applications": int(doubles),
        "cpu_us_per_event": cpu_us_per_event,
        **durability,
    }
    print(
        f"bench-backbone: {EVENTS_TOTAL} events in {elapsed_s:.1f}s at saturation; "
        f"paced {PACED_RATE}/s for {PACED_S}s: p50 {result['p50_ms']} ms, p99 {result['p99_ms']} ms"
    )
    print(json.dumps(result))
    return 0 if doubles == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
