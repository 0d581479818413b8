"""Benchmark: card deposits end to end through the whole product, driven from outside over HTTP.

What runs: the harness (``backbone.testing.System``) starts every process of the deposit flow as
real processes on fresh databases and a fresh topic namespace: both simulators, the webhook gateway
(api + relay), payment-state (api, worker, consumer, relay), mt5-credit (api, consumer, worker,
relay) and the ledger (consumer, relay, api). Everything that polls while idle (relays, consumers,
mt5-credit's worker, the PSP simulator's webhook queue) runs at the product's own default
(``product_polling``); BENCH_E2E_TIMINGS=harness keeps the harness's short test timings instead (the
idle product then costs several times more). Leases and call budgets stay the harness's.

One deposit, as the broker's server drives it (``backbone.testing.load``): deposit intent ->
payment -> poll until AUTHORIZED -> capture -> poll until the credit is ``done``. Phases:

0. warm-up: BENCH_E2E_WARMUP deposits (not counted).
1. durable-commit ceiling: single-row INSERT + COMMIT on one connection for BENCH_E2E_CEILING_S
   seconds (fsync and synchronous_commit on, checked) in a database of its own: commits/s.
   Then the idle cost (BENCH_E2E_IDLE_S) and the price of one status poll.
2. low: BENCH_E2E_LOW_DEPOSITS (200) deposits offered open-loop at BENCH_E2E_LOW_RATE (10)/s: the
   latency of a nearly idle system (the JSON's ``capture_to_credited_p50_ms``/``p99``).
   steady: BENCH_E2E_DEPOSITS (900) deposits offered open-loop at BENCH_E2E_RATE (30)/s by up to
   BENCH_E2E_THREADS (192) client threads; ``steady_kept_up`` says whether 95 % of it was met.
3. saturation: BENCH_E2E_SAT_DEPOSITS (900) deposits, at most BENCH_E2E_CONCURRENCY (160) in
   flight. A closed loop is latency-bound (Little: rate <= concurrency / end-to-end latency):
   raise the concurrency if the machine is not busy and the rate is at that bound.

The client waits for a status as a broker's client should: each read after the first sends the
last ETag with ``Prefer: wait=BENCH_E2E_WAIT_S`` (10), and the API answers when the payment or the
credit changes (``backbone.changes``). BENCH_E2E_WAIT_S=0 polls instead, backing off from 50 ms to
BENCH_E2E_POLL_MAX_S (1 s). Every read counts in ``polls_per_deposit``. The client keeps one persistent
connection per thread and service, as a broker's pooled HTTP client does (``KeepAliveHttp``);
BENCH_E2E_KEEP_ALIVE=0 opens a new connection per request instead (each request then also pays a
TCP connect at the server: ~40 % of an API's CPU per status poll, measured 2026-12-06).

Per phase: deposits/s = (deposits - 1) / (first credit done -> last credit done), the completion
rate (also first started -> last done, which includes one latency);
capture -> credited = the client's POST /capture to the credit's ``done`` transition, and
webhook -> credited = the gateway's receipt of the capture webhook (payment_intent.succeeded) to
the same; both read, for measurement only, from the bench's own fresh databases after the phase
(mt5_credit_transitions.at, provider_events.received_at: the database's clock, the same host's as
the client's). The worker may credit from the PSP's synchronous capture answer before the webhook
arrives, so webhook -> credited can be small or negative: that is the product working, not noise.

CPU per deposit: user + system time (Linux /proc) of every harness process and its children, of
the MT5 simulator, of the Kafka broker (the process listening on the bootstrap port) and of
PostgreSQL (the postmaster listening on the cluster's port: its backends serving the bench's
databases as ``postgres-backends``; the postmaster, WAL writer, checkpointer and other helpers as
``postgres-shared``; other users' backends are not counted), sampled before and after each phase
(``e2e_sampling``). The figure of record (ADR 0013) is ``product``: the product's processes, the
backends of its databases and the broker. The simulators are shown beside it (``simulators``), the
client too (``bench-client``); ``total`` is everything but the client. Two corrections are printed
beside, never subtracted silently: the client's status reads (``polls_per_deposit``), each priced
beforehand with sequential reads (``cpu_ms_per_poll``) -> ``product_cpu_ms_per_deposit_net_of_polls``;
and the product's cost doing nothing (its fallback polls and heartbeats, measured for
BENCH_E2E_IDLE_S before the phases) spread over the phase -> ``idle_cpu_ms_per_deposit``, which
shrinks as throughput grows. Under a loaded machine the CPU time per operation also grows
(contention, cache misses): compare runs at similar load averages (printed).

PostgreSQL: commits per deposit = xact_commit delta (pg_stat_database) summed over the product's
databases (the simulators' are shown per service, not summed); statements per deposit from
pg_stat_statements (calls, all statements including BEGIN/COMMIT, and without them) when the
cluster preloads it; otherwise null with a note (deploy/postgres/pg.sh preloads it from its next
restart). ``idle_pg_commits_per_deposit`` is the part of the commits the idle product would have
made anyway (its pollers' transactions). Both are also given per service (its database). Kafka:
messages written per deposit to each topic of the run's namespace (partitions' high watermarks).
HTTP requests per deposit are known for the client only (``polls_per_deposit`` and the five calls
of a deposit); the services do not count theirs.

Correctness: at the end every deposit must have exactly one credit row (done), exactly one MT5
deal with its comment on its login, and two journals; otherwise the bench fails (exit 1).

The last line is one JSON object. A benchmark, never a test: figures vary with the machine's load
(2 shared cores here); read them as ratios to the commit ceiling measured in the same run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from tempfile import mkdtemp
from typing import Any

import psycopg
from backbone.consumer.settings import ConsumerSettings
from backbone.outbox.relay import RelaySettings
from backbone.postgres import connect
from backbone.testing import databases
from backbone.testing.load import (
    Deposit,
    DepositDriver,
    KeepAliveHttp,
    cpu_deltas_ms,
    per_deposit,
    percentile,
    rate_per_s,
    run_closed_loop,
    run_open_loop,
)
from backbone.testing.processes import wait_until
from backbone.testing.stack import discover
from backbone.testing.system import System
from backbone.testing.system_config import CREDIT_TOKEN, MERCHANT_TOKEN
from e2e_sampling import (
    STATS_FLUSH_S,
    Roots,
    by_service,
    cpu_sample,
    db_names,
    has_statements,
    kafka_sample,
    pg_sample,
    totals,
)
from rich.console import Console
from rich.table import Table

DEPOSITS = int(os.environ.get("BENCH_E2E_DEPOSITS", "900"))
RATE = float(os.environ.get("BENCH_E2E_RATE", "30"))
LOW_DEPOSITS = int(os.environ.get("BENCH_E2E_LOW_DEPOSITS", "200"))
LOW_RATE = float(os.environ.get("BENCH_E2E_LOW_RATE", "10"))  # a quiet system's latency
SAT_DEPOSITS = int(os.environ.get("BENCH_E2E_SAT_DEPOSITS", "900"))
CONCURRENCY = int(os.environ.get("BENCH_E2E_CONCURRENCY", "160"))
WARMUP = int(os.environ.get("BENCH_E2E_WARMUP", "30"))
CEILING_S = float(os.environ.get("BENCH_E2E_CEILING_S", "5"))
ACCOUNTS = int(os.environ.get("BENCH_E2E_ACCOUNTS", "50"))
THREADS = int(os.environ.get("BENCH_E2E_THREADS", "192"))  # the open loop's client threads
PARTITIONS = int(os.environ.get("BENCH_E2E_PARTITIONS", "3"))
IDLE_S = float(os.environ.get("BENCH_E2E_IDLE_S", "5"))
POLL_CALIBRATION = 200  # status reads timed to price one poll
POLL_MAX_S = float(os.environ.get("BENCH_E2E_POLL_MAX_S", "1.0"))
KEEP_ALIVE = os.environ.get("BENCH_E2E_KEEP_ALIVE", "1") == "1"
# a status read after the first waits up to this long for a change (ETag + ``Prefer: wait``,
# backbone.changes) instead of polling; 0: poll as before 2026-12-06
WAIT_S = float(os.environ.get("BENCH_E2E_WAIT_S", "10"))
# "product": every idle poller at the product's own default (what a deployment runs); "harness": the
# harness's short test timings (tests resolve faults in seconds, and the idle product costs more)
TIMINGS = os.environ.get("BENCH_E2E_TIMINGS", "product")
NOISE_NOTE = (
    "the PostgreSQL cluster and Kafka broker are shared with other users of this machine: their work"
    " is in the postgres and kafka CPU figures"
)


def _show(conn: psycopg.Connection, setting: str) -> str:
    row = conn.execute(f"SHOW {setting}").fetchone()
    assert row is not None, setting
    return str(row[0])


def commit_ceiling(admin_url: str, seconds: float) -> tuple[float, dict[str, str]]:
    """Durable single-row commits per second on one connection, in a database of its own."""
    url = databases.create_database(admin_url, [], prefix="bench_ceiling")
    try:
        with connect(url, autocommit=True) as conn:
            settings = {k: _show(conn, k) for k in ("fsync", "synchronous_commit")}
            conn.execute("CREATE TABLE ceiling (id bigint PRIMARY KEY, at timestamptz DEFAULT now())")
            count, deadline = 0, time.monotonic() + seconds
            started = time.monotonic()
            while time.monotonic() < deadline:
                count += 1
                conn.execute("INSERT INTO ceiling (id) VALUES (%s)", (count,))  # autocommit: one commit each
            return count / (time.monotonic() - started), settings
    finally:
        databases.drop_database(admin_url, url)


# --- latencies from the bench's own databases (measurement only) --------------------------------


def credited_times(system: System) -> dict[str, tuple[float, str]]:
    """deposit_reference -> (epoch s of the credit's done transition, provider payment id)."""
    with connect(system.dbs["mt5_credit"]) as conn:
        rows = conn.execute(
            "SELECT c.deposit_reference, extract(epoch FROM min(t.at)), c.provider_payment_id"
            " FROM mt5_credits c JOIN mt5_credit_transitions t ON t.credit_id = c.id"
            " WHERE c.kind = 'credit' AND t.to_status = 'done' GROUP BY c.id"
        ).fetchall()
    return {str(ref): (float(at), str(ppid)) for ref, at, ppid in rows}


def webhook_times(system: System) -> dict[str, float]:
    """provider payment id -> epoch s of the gateway's first receipt of its capture webhook."""
    with connect(system.dbs["webhook_gateway"]) as conn:
        rows = conn.execute(
            "SELECT provider_payment_id, extract(epoch FROM min(received_at)) FROM provider_events"
            " WHERE provider_event_type = 'payment_intent.succeeded' GROUP BY provider_payment_id"
        ).fetchall()
    return {str(ppid): float(at) for ppid, at in rows}


def captured_times(system: System) -> dict[str, float]:
    """payment_id -> epoch s at which payment-state resolved its capture operation SUCCEEDED."""
    with connect(system.dbs["payment_state"]) as conn:
        rows = conn.execute(
            "SELECT payment_id, extract(epoch FROM min(resolved_at)) FROM payment_operations"
            " WHERE operation_type = 'capture' AND status = 'SUCCEEDED' GROUP BY payment_id"
        ).fetchall()
    return {str(pid): float(at) for pid, at in rows if at is not None}


def phase_figures(system: System, deposits: list[Deposit]) -> dict[str, Any]:
    """Throughput and latencies of one phase, from the services' own records of when things happened."""
    credited, webhooks, captured = credited_times(system), webhook_times(system), captured_times(system)
    capture_ms, webhook_ms, to_webhook_ms, to_captured_ms = [], [], [], []
    for d in deposits:
        done_at, ppid = credited[d.deposit_reference]
        capture_ms.append((done_at - d.capture_sent_at) * 1000)
        if d.payment_id in captured:
            to_captured_ms.append((captured[d.payment_id] - d.capture_sent_at) * 1000)
        if ppid in webhooks:
            webhook_ms.append((done_at - webhooks[ppid]) * 1000)
            to_webhook_ms.append((webhooks[ppid] - d.capture_sent_at) * 1000)
    first = min(d.started_at for d in deposits)
    done = sorted(credited[d.deposit_reference][0] for d in deposits)
    last = done[-1]
    return {
        "deposits": len(deposits),
        # the rate credits completed at, first to last: the latency of the first one is not in it
        "deposits_per_s": round(rate_per_s(len(done) - 1, done[0], last), 1),
        "first_started_to_last_credited_per_s": round(rate_per_s(len(deposits), first, last), 1),
        "capture_to_credited_p50_ms": round(percentile(capture_ms, 0.5), 1),
        "capture_to_credited_p99_ms": round(percentile(capture_ms, 0.99), 1),
        "webhook_to_credited_p50_ms": round(percentile(webhook_ms, 0.5), 1) if webhook_ms else None,
        "webhook_to_credited_p99_ms": round(percentile(webhook_ms, 0.99), 1) if webhook_ms else None,
        "capture_to_captured_p50_ms": round(percentile(to_captured_ms, 0.5), 1) if to_captured_ms else None,
        "capture_to_webhook_p50_ms": round(percentile(to_webhook_ms, 0.5), 1) if to_webhook_ms else None,
        "webhooks_seen": len(webhook_ms),
        "polls_per_deposit": round(per_deposit(sum(d.polls for d in deposits), len(deposits)), 1),
        "retries_per_deposit": round(per_deposit(sum(d.retries for d in deposits), len(deposits)), 2),
        "span_s": round(last - first, 1),
    }


# --- one phase ----------------------------------------------------------------------------------


def poll_cost_ms(
    system: System, roots: Roots, idle: Idle, deposits: list[Deposit], polls: int, keep_alive: bool
) -> float:
    """CPU ms the product spends answering one status poll (what the client's polling adds to every
    deposit's figures): ``polls`` sequential reads of warm-up deposits' status, less idle cost, over
    the same kind of connection as the phases' (persistent or not)."""
    send = KeepAliveHttp() if keep_alive else system.http
    before, started = cpu_sample(roots), time.monotonic()
    for i in range(polls):
        d = deposits[i % len(deposits)]
        if i % 2:  # an overloaded API's 503 costs it too: the answer is not judged here
            send("GET", f"{system.urls.mt5_credit}/deposit-intents/{d.deposit_reference}", token=CREDIT_TOKEN)
        else:
            send("GET", f"{system.urls.payment_state}/payments/{d.payment_id}", token=MERCHANT_TOKEN)
    after, elapsed_s = cpu_sample(roots), time.monotonic() - started
    spent_ms = totals(cpu_deltas_ms(before, after))["product"] - idle.cpu_ms_per_s["product"] * elapsed_s
    return max(0.0, spent_ms / polls)


@dataclass(frozen=True)
class Idle:
    """What the product costs doing nothing: CPU ms per second per group, commits per second."""

    cpu_ms_per_s: dict[str, float]
    commits_per_s: float


def idle_cost(system: System, roots: Roots, statements: bool, seconds: float) -> Idle:
    admin, names = system.stack.pg_admin_url, db_names(system)
    pg_before = pg_sample(admin, names, statements)
    cpu_before, started = cpu_sample(roots), time.monotonic()
    time.sleep(seconds)
    cpu_after, elapsed_s = cpu_sample(roots), time.monotonic() - started
    pg_after = pg_sample(admin, names, statements)
    cpu = {k: round(v / elapsed_s, 1) for k, v in sorted(cpu_deltas_ms(cpu_before, cpu_after).items())}
    cpu.update(totals(cpu))
    commits_s = (pg_after["commits"] - pg_before["commits"]) / (elapsed_s + STATS_FLUSH_S)
    return Idle(cpu, round(commits_s, 1))


def measured(
    system: System,
    roots: Roots,
    statements: bool,
    idle: Idle,
    poll_ms: float,
    run: Callable[[], list[Deposit]],
) -> tuple[list[Deposit], dict[str, Any]]:
    """Run one phase between CPU, PostgreSQL and Kafka samples; its figures, per deposit."""
    admin, names = system.stack.pg_admin_url, db_names(system)
    pg_before = pg_sample(admin, names, statements)
    kafka_before = kafka_sample(system.stack.kafka_bootstrap, system.prefix)
    cpu_before, started = cpu_sample(roots), time.monotonic()
    deposits = run()
    cpu_after, elapsed_s = cpu_sample(roots), time.monotonic() - started
    pg_after = pg_sample(admin, names, statements)  # after the flush wait: the phase's commits are in
    kafka_after = kafka_sample(system.stack.kafka_bootstrap, system.prefix)
    failed = [d for d in deposits if not d.ok]
    if failed:
        raise AssertionError(f"{len(failed)} deposits failed, first: {failed[0]}")
    n = len(deposits)
    figures = phase_figures(system, deposits)
    deltas = sorted(cpu_deltas_ms(cpu_before, cpu_after).items())
    cpu_ms = {k: round(per_deposit(v, n), 2) for k, v in deltas}
    cpu_ms.update(totals(cpu_ms))
    figures["cpu_ms_per_deposit"] = cpu_ms
    figures["product_cpu_ms_per_deposit"] = cpu_ms["product"]
    # less what the client's status polls cost the product (priced beforehand, one poll at a time)
    net_ms = cpu_ms["product"] - figures["polls_per_deposit"] * poll_ms
    figures["product_cpu_ms_per_deposit_net_of_polls"] = round(net_ms, 2)
    # the part of it the product would have spent idling anyway (its own fallback polls, heartbeats)
    figures["idle_cpu_ms_per_deposit"] = round(per_deposit(idle.cpu_ms_per_s["product"] * elapsed_s, n), 2)
    figures["pg_commits_per_deposit"] = round(per_deposit(pg_after["commits"] - pg_before["commits"], n), 2)
    figures["idle_pg_commits_per_deposit"] = round(per_deposit(idle.commits_per_s * elapsed_s, n), 2)
    for key in ("statements", "statements_no_txn"):
        delta = pg_after[key] - pg_before[key] if statements else None
        figures[f"pg_{key}_per_deposit"] = None if delta is None else round(per_deposit(delta, n), 2)
    figures["pg_commits_per_deposit_by_service"] = by_service(pg_before, pg_after, "commits", n)
    figures["pg_statements_per_deposit_by_service"] = by_service(pg_before, pg_after, "statements", n)
    figures["kafka_messages_per_deposit_by_topic"] = {
        topic: round((count - kafka_before.get(topic, 0.0)) / n, 2)
        for topic, count in sorted(kafka_after.items())
        if count > kafka_before.get(topic, 0.0)
    }
    return deposits, figures


def check_exactly_once(system: System, deposits: list[Deposit]) -> list[str]:
    """One done credit per deposit, one MT5 deal per credit (its comment, its login), two journals."""
    problems: list[str] = []
    with connect(system.dbs["mt5_credit"]) as conn:
        rows = conn.execute(
            "SELECT deposit_reference, id, status FROM mt5_credits WHERE kind = 'credit'"
        ).fetchall()
    credits = Counter(str(r[0]) for r in rows)
    status = {str(r[0]): (int(r[1]), str(r[2])) for r in rows}
    with connect(system.dbs["mt5_sim"]) as conn:
        deals = Counter(
            (str(c), int(login))
            for c, login in conn.execute("SELECT comment, login FROM mt5_deals").fetchall()
        )
    for d in deposits:
        ref = d.deposit_reference
        if credits[ref] != 1 or status[ref][1] != "done":
            problems.append(f"{ref}: {credits[ref]} credits {status.get(ref)}")
            continue
        key = (f"dep:{status[ref][0]}", d.login)
        if deals[key] != 1:
            problems.append(f"{ref}: {deals[key]} deals {key}")
    if sum(deals.values()) != len(deposits):
        problems.append(f"{sum(deals.values())} MT5 deals for {len(deposits)} deposits")

    def journals() -> int:
        with connect(system.dbs["ledger"]) as conn:
            row = conn.execute("SELECT count(*) FROM journals").fetchone()
        return int(row[0]) if row else 0

    with contextlib.suppress(AssertionError):  # judged just below, with the count in the message
        wait_until(lambda: journals() >= 2 * len(deposits), 120, "two journals per deposit")
    if journals() != 2 * len(deposits):
        problems.append(f"{journals()} journals for {len(deposits)} deposits (want 2 each)")
    return problems


# --- output -------------------------------------------------------------------------------------


def print_table(result: dict[str, Any]) -> None:
    console = Console(stderr=False)
    table = Table(title="bench-e2e: card deposits end to end (noisy: shared 2-core machine)")
    table.add_column("figure")
    phases = result["phases"]
    for phase in phases:
        table.add_column(phase, justify="right")
    first = next(iter(phases.values()))
    for key, value in first.items():
        if not isinstance(value, dict):
            table.add_row(key, *(str(figures.get(key)) for figures in phases.values()))
            continue
        for inner in sorted({k for figures in phases.values() for k in figures.get(key, {})}):
            table.add_row(
                f"{key}: {inner}", *(str(figures.get(key, {}).get(inner)) for figures in phases.values())
            )
    console.print(table)
    console.print(
        f"offered {result['offered_rate']}/s; durable-commit ceiling {result['commit_ceiling_per_s']}/s "
        f"(one connection, fsync={result['fsync']}, synchronous_commit={result['synchronous_commit']}); "
        f"idle product: {result['idle_cpu_ms_per_s']['product']} CPU ms/s, "
        f"{result['idle_pg_commits_per_s']} commits/s; load average {result['load_average']}; "
        f"{result['notes']}"
    )


def _default(settings: type, env: str) -> str:
    """The documented default of the setting read from ``env`` in a settings dataclass."""
    for f in dataclasses.fields(settings):
        if f.metadata.get("env") == env:
            return str(f.default)
    raise LookupError(f"{settings.__name__} has no setting {env}")


def product_polling() -> dict[str, dict[str, str]]:
    """Per process type, the product's own defaults for what polls while nothing happens: relays'
    fallback polls, consumers' first-message wait and linger, mt5-credit's worker passes, the PSP
    simulator's webhook queue, the gateway's catch-up passes. The harness shortens all of them for
    tests; leases, call budgets and backoffs stay the harness's (they cost nothing while idle)."""
    from mt5_credit.settings import WorkerSettings  # noqa: PLC0415 - the bench's own choice only
    from psp_sim.settings import SimSettings  # noqa: PLC0415 - the bench's own choice only

    relay = {"OUTBOX_POLL_INTERVAL_MS": _default(RelaySettings, "OUTBOX_POLL_INTERVAL_MS")}
    consumer = {
        env: _default(ConsumerSettings, env)
        for env in ("CONSUMER_POLL_TIMEOUT_MS", "CONSUMER_BATCH_LINGER_MS")
    }
    polling = {f"{service}-relay": relay for service in ("gateway", "payment_state", "mt5_credit", "ledger")}
    polling |= {f"{service}-consume": consumer for service in ("payment_state", "mt5_credit", "ledger")}
    polling["mt5_credit-worker"] = {
        "CREDIT_POLL_INTERVAL_MS": _default(WorkerSettings, "CREDIT_POLL_INTERVAL_MS")
    }
    from webhook_gateway.settings import CatchUpSettings  # noqa: PLC0415 - the bench's own choice only

    polling["gateway-catch-up"] = {"CATCH_UP_INTERVAL_MS": _default(CatchUpSettings, "CATCH_UP_INTERVAL_MS")}
    webhook_poll = "PSP_SIM_WEBHOOK_POLL_INTERVAL_MS"
    polling["psp_sim"] = {webhook_poll: _default(SimSettings, webhook_poll)}
    return polling


def main() -> int:
    stack = discover()
    statements = has_statements(stack.pg_admin_url)
    workdir = Path(mkdtemp(prefix="bench-e2e-"))
    notes = [NOISE_NOTE]
    if not statements:
        notes.append("pg_stat_statements is not preloaded on this cluster: statements per deposit unknown")
    extra_env = product_polling() if TIMINGS == "product" else {}
    with System(stack, workdir, partitions=PARTITIONS, extra_env=extra_env).start() as system:
        roots = Roots.of(system)
        logins = [900_000 + i for i in range(ACCOUNTS)]
        driver = DepositDriver(
            system, logins, poll_interval_max_s=POLL_MAX_S, keep_alive=KEEP_ALIVE, wait_s=WAIT_S
        )
        driver.open_accounts()
        run_closed_loop(driver, WARMUP, min(CONCURRENCY, WARMUP))
        ceiling, durability = commit_ceiling(stack.pg_admin_url, CEILING_S)
        if durability != {"fsync": "on", "synchronous_commit": "on"}:
            print(f"bench-e2e: commits are not durable: {durability}", file=sys.stderr)
            return 1
        idle = idle_cost(system, roots, statements, IDLE_S)
        poll_ms = poll_cost_ms(system, roots, idle, list(driver.history), POLL_CALIBRATION, KEEP_ALIVE)
        low, low_fig = measured(
            system,
            roots,
            statements,
            idle,
            poll_ms,
            lambda: run_open_loop(driver, LOW_DEPOSITS, LOW_RATE, THREADS),
        )
        steady, steady_fig = measured(
            system, roots, statements, idle, poll_ms, lambda: run_open_loop(driver, DEPOSITS, RATE, THREADS)
        )
        sat, sat_fig = measured(
            system,
            roots,
            statements,
            idle,
            poll_ms,
            lambda: run_closed_loop(driver, SAT_DEPOSITS, CONCURRENCY),
        )
        problems = check_exactly_once(system, driver.history)
    result: dict[str, Any] = {
        "deposits": len(low) + len(steady) + len(sat),
        "product_cpu_ms_per_deposit": sat_fig["product_cpu_ms_per_deposit"],
        "pg_statements_per_deposit": sat_fig["pg_statements_per_deposit"],
        "pg_commits_per_deposit": sat_fig["pg_commits_per_deposit"],
        "saturation_deposits_per_s": sat_fig["deposits_per_s"],
        # at the low offered rate: what batching must not take from an idle system
        "capture_to_credited_p50_ms": low_fig["capture_to_credited_p50_ms"],
        "capture_to_credited_p99_ms": low_fig["capture_to_credited_p99_ms"],
        "low_rate": LOW_RATE,
        "offered_rate": RATE,
        "concurrency": CONCURRENCY,
        "keep_alive": KEEP_ALIVE,
        "wait_s": WAIT_S,
        "timings": TIMINGS,
        "steady_deposits_per_s": steady_fig["deposits_per_s"],
        "steady_kept_up": steady_fig["deposits_per_s"] >= 0.95 * RATE,
        "steady_capture_to_credited_p50_ms": steady_fig["capture_to_credited_p50_ms"],
        "steady_capture_to_credited_p99_ms": steady_fig["capture_to_credited_p99_ms"],
        "webhook_to_credited_p50_ms": steady_fig["webhook_to_credited_p50_ms"],
        "webhook_to_credited_p99_ms": steady_fig["webhook_to_credited_p99_ms"],
        "cpu_ms_per_deposit": sat_fig["cpu_ms_per_deposit"],
        "commit_ceiling_per_s": round(ceiling),
        "saturation_to_ceiling": round(sat_fig["deposits_per_s"] / ceiling, 4),
        "product_cpu_ms_per_deposit_net_of_polls": sat_fig["product_cpu_ms_per_deposit_net_of_polls"],
        "cpu_ms_per_poll": round(poll_ms, 2),
        "idle_cpu_ms_per_s": idle.cpu_ms_per_s,
        "idle_pg_commits_per_s": idle.commits_per_s,
        "phases": {"low": low_fig, "steady": steady_fig, "saturation": sat_fig},
        "exactly_once_problems": len(problems),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        **durability,
        "notes": "; ".join(notes),
    }
    print_table(result)
    for problem in problems[:20]:
        print(f"bench-e2e: NOT EXACTLY ONCE: {problem}", file=sys.stderr)
    print(json.dumps(result))
    return 0 if not problems else 1


if __name__ == "__main__":
    raise SystemExit(main())
