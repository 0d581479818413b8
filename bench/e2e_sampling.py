"""What bench-e2e and profile-e2e sample around a phase: CPU of every process, PostgreSQL's commits
and statements per database (one database per service), and Kafka messages per topic.

The figure of record (ADR 0013) is the product's own CPU per deposit, ``product``: every process of
the product, the PostgreSQL backends serving its databases and the Kafka broker. The simulators (PSP,
MT5) are someone else's machines in production and the client is the broker's: they are printed
beside it, and ``total`` (everything but the client) is kept as before.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from backbone.postgres import connect
from backbone.testing.system import System
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from psycopg.conninfo import conninfo_to_dict

STATS_FLUSH_S = 1.5  # PostgreSQL 15 flushes backends' counters at most once a second
CLIENT = "bench-client"  # the driver: the broker's cost, not the product's
SIMULATOR_SERVICES = frozenset({"psp_sim", "mt5_sim"})  # stand-ins for the PSP's and MT5's machines
# their processes, and the PostgreSQL backends serving their databases
SIMULATORS = SIMULATOR_SERVICES | {"postgres-simulators"}
SHARED = frozenset({"kafka", "postgres-shared"})  # partly other users' work on this machine
NOT_PRODUCT = SIMULATORS | {CLIENT, "postgres-shared"}


# --- CPU of processes (Linux /proc) --------------------------------------------------------------


def _proc_table() -> dict[int, tuple[int, bytes, float]]:
    """pid -> (parent pid, cmdline, user + system CPU seconds) of every process we may read."""
    ticks = os.sysconf("SC_CLK_TCK")
    table: dict[int, tuple[int, bytes, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        table[int(entry.name)] = (int(fields[1]), cmdline, (int(fields[11]) + int(fields[12])) / ticks)
    return table


def _descendants(table: dict[int, tuple[int, bytes, float]], root: int) -> list[int]:
    found, frontier = [root], [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, (ppid, _, _) in table.items() if ppid == parent]
        found += children
        frontier += children
    return [pid for pid in found if pid in table]


def listener_pid(port: int) -> int | None:
    """The process listening on TCP ``port`` (the broker, the postmaster), from /proc/net and fds."""
    inodes: set[str] = set()
    for name in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{name}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(f"socket:[{fields[9]}]")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in inodes for fd in (entry / "fd").iterdir()):
                return int(entry.name)
        except OSError:
            continue
    return None


@dataclass(frozen=True)
class Roots:
    """The processes whose CPU is counted, by group name -> root pid (children included)."""

    pids: dict[str, int]
    databases: frozenset[str]  # PostgreSQL backends of these databases count as "postgres-backends"
    simulator_databases: frozenset[str]  # and of these as "postgres-simulators"

    @staticmethod
    def of(system: System) -> Roots:
        pids = {name: proc.popen.pid for name, proc in system.procs.items()}
        if system.mt5 is not None and system.mt5.proc is not None:
            pids["mt5_sim"] = system.mt5.proc.popen.pid
        pids[CLIENT] = os.getpid()
        kafka_port = int(system.stack.kafka_bootstrap.split(",")[0].rsplit(":", 1)[1])
        pg_port = int(conninfo_to_dict(system.stack.pg_admin_url).get("port") or 5432)
        for name, port in (("kafka", kafka_port), ("postgres", pg_port)):
            pid = listener_pid(port)
            if pid is None:
                raise AssertionError(f"no process listens on port {port} ({name}): cannot count its CPU")
            pids[name] = pid
        names = db_names(system)
        simulated = frozenset(n for n, service in names.items() if service in SIMULATOR_SERVICES)
        return Roots(pids, frozenset(names) - simulated, simulated)


def cpu_sample(roots: Roots) -> dict[str, float]:
    """CPU seconds so far per group: the root process and every descendant alive now (the bench's
    own processes never exit mid-phase; a PostgreSQL backend that did takes its time with it).
    PostgreSQL is split: the backends serving the bench's databases ("postgres: user db host
    state"), and the server's shared processes (postmaster, WAL writer, checkpointer, ...) whose work
    is partly other users'; other users' backends are not counted."""
    table = _proc_table()
    own = os.getpid()
    sample: dict[str, float] = {}
    for name, pid in roots.pids.items():
        if pid == own:
            sample[name] = table[own][2] if own in table else 0.0
        elif name == "postgres":
            ours = simulated = shared = 0.0
            for p in _descendants(table, pid):
                words = table[p][1].decode(errors="replace").split()
                client = words[3] if len(words) >= 4 else ""  # "host(port)" over TCP, "[local]" over a socket
                if words[:1] == ["postgres:"] and ("(" in client or client == "[local]"):
                    ours += table[p][2] if words[2] in roots.databases else 0.0
                    simulated += table[p][2] if words[2] in roots.simulator_databases else 0.0
                else:
                    shared += table[p][2]
            sample["postgres-backends"], sample["postgres-shared"] = ours, shared
            sample["postgres-simulators"] = simulated
        else:
            sample[name] = sum(table[p][2] for p in _descendants(table, pid))
    return sample


# --- PostgreSQL counters, per database ----------------------------------------------------------


def db_names(system: System) -> dict[str, str]:
    """Database name -> the service that owns it."""
    return {str(conninfo_to_dict(url)["dbname"]): service for service, url in system.dbs.items()}


def has_statements(admin_url: str) -> bool:
    with connect(admin_url) as conn:
        row = conn.execute("SHOW shared_preload_libraries").fetchone()
        if row is None or "pg_stat_statements" not in str(row[0]):
            return False
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    return True


def pg_sample(admin_url: str, names: Mapping[str, str], statements: bool) -> dict[str, float]:
    """Commits and statement calls so far in the bench's databases: the product's sums (``commits``,
    ``statements``, ``statements_no_txn``: the simulators' databases are not in them) and per service
    (``commits:<service>``, ``statements:<service>``, the simulators' too)."""
    time.sleep(STATS_FLUSH_S)
    result: dict[str, float] = {"commits": 0.0}
    with connect(admin_url) as conn:
        rows = conn.execute(
            "SELECT datname, xact_commit FROM pg_stat_database WHERE datname = ANY(%s)", (list(names),)
        ).fetchall()
        for name, commits in rows:
            service = names[str(name)]
            result["commits"] += 0.0 if service in SIMULATOR_SERVICES else float(commits)
            result[f"commits:{service}"] = float(commits)
        if not statements:
            return result
        rows = conn.execute(
            "SELECT d.datname, coalesce(sum(s.calls), 0),"
            " coalesce(sum(s.calls) FILTER (WHERE s.query !~* '^\\s*(begin|commit|rollback|start)'), 0)"
            " FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = ANY(%s)"
            " GROUP BY d.datname",
            (list(names),),
        ).fetchall()
    result["statements"] = result["statements_no_txn"] = 0.0
    for name, calls, no_txn in rows:
        service = names[str(name)]
        if service not in SIMULATOR_SERVICES:
            result["statements"] += float(calls)
            result["statements_no_txn"] += float(no_txn)
        result[f"statements:{service}"] = float(calls)
    return result


# --- Kafka messages, per topic ---------------------------------------------------------------------


def kafka_sample(bootstrap: str, prefix: str) -> dict[str, float]:
    """Messages written so far to each topic of the run's namespace (sum of partitions' high
    watermarks; the namespace is fresh, so nothing else writes there)."""
    topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-e2e-watermarks"})
    try:
        counts: dict[str, float] = {}
        for name, meta in topics.items():
            if prefix and name.startswith(prefix):
                counts[name[len(prefix) :]] = float(
                    sum(
                        reader.get_watermark_offsets(TopicPartition(name, p), timeout=10)[1]
                        for p in meta.partitions
                    )
                )
        return counts
    finally:
        reader.close()


# --- the figures ------------------------------------------------------------------------------------


def totals(cpu: dict[str, float]) -> dict[str, float]:
    """``product`` (the figure of record, see the module docstring); ``simulators`` beside it;
    ``total``: everything but the client, as before; ``total_own``: without the shared processes
    (Kafka, PostgreSQL's postmaster and helpers)."""
    total = sum(v for k, v in cpu.items() if k != CLIENT)
    return {
        "product": round(sum(v for k, v in cpu.items() if k not in NOT_PRODUCT), 2),
        "simulators": round(sum(v for k, v in cpu.items() if k in SIMULATORS), 2),
        "total": round(total, 2),
        "total_own": round(sum(v for k, v in cpu.items() if k not in SHARED | {CLIENT}), 2),
    }


def by_service(
    before: Mapping[str, float], after: Mapping[str, float], what: str, n: int
) -> dict[str, float]:
    """``what`` (commits, statements) per deposit for each service's database."""
    prefix = f"{what}:"
    return {
        key[len(prefix) :]: round((after[key] - before.get(key, 0.0)) / n, 2)
        for key in sorted(after)
        if key.startswith(prefix)
    }
