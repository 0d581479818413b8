"""make profile-e2e: where one card deposit's CPU and SQL go, process by process (issue 17 item 3).

A tool for guiding work on the cost per deposit, never a test and not a benchmark of record (that
is ``make bench-e2e``). It starts the whole product with the harness exactly as bench-e2e does (the
product's idle polling, the client's persistent connections, status polls backing off to 1 s),
warms up, then runs PROFILE_DEPOSITS (600) deposits closed-loop at PROFILE_CONCURRENCY (64) while

- ``py-spy record`` samples every Python process of the product (both simulators included) at
  PROFILE_RATE_HZ (250) without stopping it (``--nonblocking``), only the thread holding the GIL
  (``--gil``: Python running, not waiting on a socket or the database), and
- ``pg_stat_statements`` is reset before and read after, per database of the run, and once over
  PROFILE_IDLE_S (10) seconds of the product doing nothing, so that the statements can also be
  shown net of the idle pollers'.

``PROFILE_WEBHOOKS=0`` is an experiment, never a way to run the product: the PSP simulator drops
every webhook (a ``webhook_drop`` fault rule), so each deposit moves on the PSP's synchronous answers
alone, and the difference to a normal run is what the webhook path costs (the PSP's deliveries, the
gateway, its relay, Kafka, payment-state's consumer).

Printed: CPU ms per deposit per process (as bench-e2e counts it), each process's top functions by
own samples and by samples under them (cumulative), and per database the statements that ran most
per deposit, with calls and execution ms per deposit. The raw py-spy stacks (collapsed format,
flamegraph-ready) stay in the work directory printed at the end.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from tempfile import mkdtemp

import psycopg
from backbone.testing.load import DepositDriver, run_closed_loop
from backbone.testing.stack import discover
from backbone.testing.system import System
from bench_e2e import WAIT_S, product_polling
from e2e_sampling import Roots, cpu_sample, has_statements, totals

DEPOSITS = int(os.environ.get("PROFILE_DEPOSITS", "600"))
CONCURRENCY = int(os.environ.get("PROFILE_CONCURRENCY", "64"))
RATE_HZ = int(os.environ.get("PROFILE_RATE_HZ", "250"))
WARMUP = int(os.environ.get("PROFILE_WARMUP", "30"))
TOP = int(os.environ.get("PROFILE_TOP", "12"))
PARTITIONS = int(os.environ.get("PROFILE_PARTITIONS", "3"))
IDLE_S = float(os.environ.get("PROFILE_IDLE_S", "10"))
KEEP_ALIVE = os.environ.get("PROFILE_KEEP_ALIVE", "1") == "1"  # the client's persistent connections
TIMINGS = os.environ.get("PROFILE_TIMINGS", "product")  # as bench-e2e's BENCH_E2E_TIMINGS
POLL_MAX_S = float(os.environ.get("PROFILE_POLL_MAX_S", "1.0"))  # as bench-e2e's
SECONDS_MAX = 600  # py-spy's recording is bounded; the phase must end before it


def _spy(pid: int, out: Path) -> subprocess.Popen[bytes]:
    py_spy = Path(sys.executable).with_name("py-spy")
    return subprocess.Popen(
        [
            *(str(py_spy), "record", "--pid", str(pid), "--rate", str(RATE_HZ), "--nonblocking", "--gil"),
            *("--format", "raw", "--duration", str(SECONDS_MAX), "--output", str(out)),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _frames(raw: Path) -> tuple[Counter[str], Counter[str], int]:
    """(own samples, cumulative samples, all samples) per function from py-spy's collapsed stacks."""
    own: Counter[str] = Counter()
    cumulative: Counter[str] = Counter()
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [f.split(" (")[0] + " (" + f.split(" (")[-1].split("/")[-1] for f in stack.split(";")]
        own[frames[-1]] += n
        for f in set(frames):
            cumulative[f] += n
    return own, cumulative, total


def _statements(admin_url: str, databases: list[str]) -> list[tuple[str, str, int, float]]:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT d.datname, s.query, s.calls::bigint, s.total_exec_time FROM pg_stat_statements s"
            " JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = ANY(%s)",
            (databases,),
        ).fetchall()
    return [(str(a), str(b), int(c), float(e)) for a, b, c, e in rows]


def _reset_statements(admin_url: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_statements_reset()")


def _db_names(system: System) -> list[str]:
    return [str(psycopg.conninfo.conninfo_to_dict(url)["dbname"]) for url in system.dbs.values()]


def _print_profiles(spies: dict[str, Path], deposits: int) -> None:
    for name, raw in sorted(spies.items()):
        if not raw.exists():
            print(f"\n== {name}: no profile")
            continue
        own, cumulative, total = _frames(raw)
        ms = 1000.0 / RATE_HZ / deposits
        print(f"\n== {name}: {total} samples, ~{total * ms:.2f} ms of running Python per deposit")
        print("   own                                          | cumulative")
        left = own.most_common(TOP)
        right = [c for c in cumulative.most_common(TOP * 3) if c[1] < total][:TOP]
        for i in range(TOP):
            a = f"{left[i][1] * ms:6.2f} {left[i][0][:60]}" if i < len(left) else ""
            b = f"{right[i][1] * ms:6.2f} {right[i][0][:70]}" if i < len(right) else ""
            print(f"   {a:<68} | {b}")


def _net_of_idle(
    rows: list[tuple[str, str, int, float]], idle: list[tuple[str, str, int, float]], idle_scale: float
) -> list[tuple[str, str, int, float]]:
    """Each statement's calls less what the idle product would have run in the same time (its
    pollers), so that what is left is the deposits' own work."""
    idle_calls = {(db, q): c for db, q, c, _ in idle}
    return [(db, q, max(0, round(c - idle_calls.get((db, q), 0) * idle_scale)), e) for db, q, c, e in rows]


def _print_statements(rows: list[tuple[str, str, int, float]], deposits: int) -> None:
    by_db: dict[str, list[tuple[str, int, float]]] = {}
    for db, query, calls, exec_ms in rows:
        by_db.setdefault(db.split("_")[1] if db.startswith("sys_") else db, []).append(
            (query, calls, exec_ms)
        )
    grand_calls = sum(c for _, _, c, _ in rows)
    print(f"\n== PostgreSQL: {grand_calls / deposits:.1f} statements per deposit")
    for db, stmts in sorted(by_db.items(), key=lambda kv: -sum(c for _, c, _ in kv[1])):
        calls = sum(c for _, c, _ in stmts)
        ms = sum(e for _, _, e in stmts)
        print(f"\n-- {db}: {calls / deposits:.1f} statements, {ms / deposits:.2f} ms executing per deposit")
        for query, c, e in sorted(stmts, key=lambda s: -s[1])[:TOP]:
            text = " ".join(query.split())[:110]
            print(f"   {c / deposits:6.2f} x {e / max(c, 1):6.3f} ms  {text}")


def main() -> int:
    stack = discover()
    if not has_statements(stack.pg_admin_url):
        print(
            "profile-e2e: pg_stat_statements is not preloaded (deploy/postgres/pg.sh restart)",
            file=sys.stderr,
        )
        return 1
    workdir = Path(mkdtemp(prefix="profile-e2e-"))
    extra_env = product_polling() if TIMINGS == "product" else {}
    with System(stack, workdir, partitions=PARTITIONS, extra_env=extra_env).start() as system:
        roots = Roots.of(system)
        driver = DepositDriver(
            system,
            [910_000 + i for i in range(50)],
            poll_interval_max_s=POLL_MAX_S,
            keep_alive=KEEP_ALIVE,
            wait_s=WAIT_S,  # BENCH_E2E_WAIT_S: the client waits for changes (0: polls)
        )
        driver.open_accounts()
        if os.environ.get("PROFILE_WEBHOOKS", "1") == "0":
            system.psp_fault(kind="webhook_drop")
        run_closed_loop(driver, WARMUP, min(WARMUP, CONCURRENCY))
        spies: dict[str, Path] = {}
        procs = []
        for name, pid in roots.pids.items():
            if name in ("kafka", "postgres", "bench-client"):
                continue
            spies[name] = workdir / f"{name}.spy.txt"
            procs.append(_spy(pid, spies[name]))
        _reset_statements(stack.pg_admin_url)
        time.sleep(IDLE_S)  # the idle product's own statements (its pollers), for the net figures
        idle = _statements(stack.pg_admin_url, _db_names(system))
        _reset_statements(stack.pg_admin_url)
        before = cpu_sample(roots)
        started = time.monotonic()
        done = run_closed_loop(driver, DEPOSITS, CONCURRENCY)
        elapsed = time.monotonic() - started
        after = cpu_sample(roots)
        rows = _statements(stack.pg_admin_url, _db_names(system))
        for p in procs:
            p.send_signal(2)  # SIGINT: py-spy writes what it has and exits
        for p in procs:
            p.wait(timeout=60)
        failed = sum(1 for d in done if not d.ok)
    cpu = {k: (after.get(k, 0.0) - before.get(k, 0.0)) * 1000.0 / DEPOSITS for k in after}
    cpu = {k: round(v, 2) for k, v in cpu.items()}
    cpu.update(totals(cpu))
    print(f"{DEPOSITS} deposits in {elapsed:.1f} s ({DEPOSITS / elapsed:.1f}/s), {failed} not ok")
    print(
        "CPU ms per deposit: " + ", ".join(f"{k} {v}" for k, v in sorted(cpu.items(), key=lambda kv: -kv[1]))
    )
    _print_profiles(spies, DEPOSITS)
    _print_statements(rows, DEPOSITS)
    print(f"\n== the same, net of the idle product's statements ({IDLE_S:.0f} s idle, scaled to the phase)")
    _print_statements(_net_of_idle(rows, idle, elapsed / IDLE_S), DEPOSITS)
    print(f"\nraw stacks (collapsed, flamegraph-ready): {workdir}/*.spy.txt")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
