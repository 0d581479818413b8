"""The worker process: executor and resolver passes in one loop, on one connection and one MT5 session.

Between passes with nothing to do a lane waits on its own listening connection: a new pending row
wakes it at once (the NOTIFY of migrations 0001 and 0005), and CREDIT_POLL_INTERVAL_MS bounds the
wait for what no insert announces (a lease running out, an unknown row due for its lookup); under
load those two recovery steps run once per CREDIT_POLL_INTERVAL_MS, not on every pass.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Final

import psycopg
from backbone.health import Health
from backbone.invariants import InvariantViolation
from backbone.logs import configure_logging, get_logger
from backbone.mt5 import Mt5GatewaySettings
from backbone.outage import Dependency
from backbone.postgres import connect, is_infrastructure_error
from backbone.runtime import health_for, stop_on_signals
from backbone.settings import load_settings_or_exit

from mt5_credit import bootstrap
from mt5_credit.adapters.mt5 import call_budget_ms
from mt5_credit.adapters.postgres_store import PgCreditStore
from mt5_credit.application import metrics
from mt5_credit.application.executor import Executor, ExecutorConfig
from mt5_credit.application.ports import CreditStore, Mt5Port
from mt5_credit.application.resolver import Resolver
from mt5_credit.domain.resolve import ResolveTiming
from mt5_credit.settings import WorkerSettings

log = get_logger("mt5_credit.worker")
GAUGE_INTERVAL_S: Final = 5.0
RECONNECT_PAUSE_S: Final = 1.0
NOTIFY_CHANNEL: Final = "mt5_credits_pending"  # migrations 0001 and 0005


def executor_config(settings: WorkerSettings, call_budget_ms: int) -> ExecutorConfig:
    return ExecutorConfig(
        batch_size_max=settings.batch_size_max,
        lease_ms=settings.lease_ms,
        call_timeout_ms=call_budget_ms,
        lease_margin_ms=settings.lease_margin_ms,
    )


def resolve_timing(settings: WorkerSettings, call_budget_ms: int) -> ResolveTiming:
    return ResolveTiming(
        call_timeout_ms=call_budget_ms,
        dead_margin_ms=settings.dead_margin_ms,
        lookback_ms=settings.lookback_ms,
        backoff_base_ms=settings.backoff_base_ms,
        backoff_cap_ms=settings.backoff_cap_ms,
        no_answer_attempts_max=settings.no_answer_attempts_max,
    )


class Worker:
    """One process, ``len(lanes)`` lanes: each lane is a thread with its own database connection and
    its own MT5 manager session (calls on a session stay serialized), claiming like a separate worker.
    """

    def __init__(
        self,
        settings: WorkerSettings,
        lanes: list[Mt5Port],
        call_budget_ms: int,
        health: Health | None = None,
    ) -> None:
        self._settings = settings
        self._lanes = lanes
        self._config = executor_config(settings, call_budget_ms)  # lease >= budget + margin, or no start
        self._timing = resolve_timing(settings, call_budget_ms)
        self._outbox = bootstrap.outbox_writer()
        self._stopping = threading.Event()
        self._health = health
        self._database = Dependency("database", "mt5_credit-worker", health, up=False)

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        threads = [
            threading.Thread(target=self._run_lane, args=(n, mt5), name=f"lane-{n}", daemon=True)
            for n, mt5 in enumerate(self._lanes)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _run_lane(self, lane: int, mt5: Mt5Port) -> None:
        try:
            self._connected(lane, mt5)
        except Exception as exc:  # a bug: stop the whole process rather than run with fewer lanes
            log.error("lane_crashed", lane=lane, error=repr(exc))
            self._stopping.set()
            raise
        finally:
            if self._health is not None:
                self._health.forget(_loop_name(lane))

    def _connected(self, lane: int, mt5: Mt5Port) -> None:
        while not self._stopping.is_set():
            try:
                url = self._settings.database_url.reveal()
                with (
                    connect(url, autocommit=True, application_name="mt5_credit-worker") as conn,
                    connect(url, autocommit=True, application_name="mt5_credit-worker-listen") as listen,
                ):
                    listen.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    self._loop(conn, listen, lane, mt5)
            except psycopg.Error as exc:
                if not is_infrastructure_error(exc):
                    raise
                self._database.failed(exc)
                self._beat(lane)  # waiting for the database is not being stuck
                self._stopping.wait(RECONNECT_PAUSE_S)

    def _loop(self, conn: psycopg.Connection, listen: psycopg.Connection, lane: int, mt5: Mt5Port) -> None:
        store = PgCreditStore(conn, self._outbox)
        executor = Executor(store, mt5, self._config, progress=lambda: self._beat(lane))
        resolver = Resolver(
            store, mt5, self._timing, self._settings.batch_size_max, progress=lambda: self._beat(lane)
        )
        next_gauges = next_recovery = 0.0
        recovery_interval_s = self._settings.poll_interval_ms / 1000
        while not self._stopping.is_set():
            for _ in listen.notifies(timeout=0):  # drain: the pass below sees what they announced
                pass
            # Lease expiry and due lookups are recovery: under load they run once per poll interval,
            # not on every pass (two statements a pass, most of them finding nothing); a pass that
            # resolved something runs them again at once.
            recover = time.monotonic() >= next_recovery
            worked = executor.run_once(expire_leases=recover)
            resolved = resolver.run_once() if recover else 0
            worked += resolved
            if recover and resolved == 0:
                next_recovery = time.monotonic() + recovery_interval_s
            self._beat(lane)
            self._database.ok()
            if lane == 0 and time.monotonic() >= next_gauges:
                _update_gauges(store)
                next_gauges = time.monotonic() + GAUGE_INTERVAL_S
            if worked == 0:
                for _ in listen.notifies(timeout=self._settings.poll_interval_ms / 1000, stop_after=1):
                    break

    def _beat(self, lane: int) -> None:
        """Each lane beats for itself: one stuck lane makes the process unhealthy even while the
        others work."""
        if self._health is not None:
            self._health.beat(_loop_name(lane))


def _loop_name(lane: int) -> str:
    return f"lane-{lane}"


def _update_gauges(store: CreditStore) -> None:
    counts = store.count_by_status()
    for status in ("pending", "claimed", "unknown", "done", "failed"):
        metrics.CREDITS_BY_STATE.labels(status).set(counts.get(status, 0))
    metrics.UNKNOWN_OLDEST_AGE.set(store.oldest_unknown_age_s())


def main() -> None:
    settings = load_settings_or_exit(WorkerSettings)
    configure_logging("mt5_credit-worker")
    health = health_for(settings.health_port)
    gateway_settings = load_settings_or_exit(Mt5GatewaySettings)
    budget_ms = call_budget_ms(gateway_settings)
    try:
        executor_config(settings, budget_ms)
    except InvariantViolation as exc:
        print(f"mt5_credit worker: refusing to start: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
    lanes = bootstrap.mt5_lanes(gateway_settings, settings.lanes)
    worker = Worker(settings, list(lanes), budget_ms, health)
    stop_on_signals(worker.stop, "worker")
    try:
        worker.run()
    finally:
        for mt5 in lanes:
            mt5.close()
