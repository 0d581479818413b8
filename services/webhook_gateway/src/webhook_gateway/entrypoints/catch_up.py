"""``python -m webhook_gateway catch-up``: store the PSP events whose webhooks never came
(``application.catch_up``), one pass every ``CATCH_UP_INTERVAL_MS``.

One instance is active at a time: it holds a PostgreSQL advisory lock on a connection of its own; the
others stand by and take over when that connection goes (scaling "leader"). Two active ones would
still be safe (receipts are unique by event id), only wasteful. Readiness names the two dependencies,
``database`` and ``psp``, each as the last pass found it; liveness beats once per loop. SIGTERM ends
the current pass, then the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import signal
import sys
import time
from typing import Any, Final

import psycopg
from backbone.health import Health
from backbone.logs import configure_logging, get_logger
from backbone.outage import Dependency
from backbone.postgres import is_infrastructure_error, make_async_pool
from backbone.psp.client import PspClient, PspClientSettings
from backbone.runtime import health_for
from backbone.settings import SettingsError, load_settings

from webhook_gateway.adapters.catch_up import PgCatchUpState, PspEventSource
from webhook_gateway.adapters.postgres_store import PostgresReceiptStore
from webhook_gateway.application.catch_up import CatchUp, SourceUnavailable, Window
from webhook_gateway.application.ingest import StoreRejected, StoreUnavailable
from webhook_gateway.bootstrap import outbox_writer
from webhook_gateway.metrics import CATCH_UP_CAUGHT_UP_TO, CATCH_UP_PASSES, EVENTS_CAUGHT_UP
from webhook_gateway.settings import CatchUpSettings

log = get_logger(__name__)
LOCK_KEY: Final = 0x6777_6361_7463_6875  # "gwcatchu": one active catch-up per database
STORE_TIMEOUT_S: Final = 10.0
PROCESS: Final = "webhook_gateway-catch-up"


Lock = psycopg.AsyncConnection[Any]


async def _leader(conninfo: str, held: Lock | None) -> Lock | None:
    """The connection that holds the advisory lock, or None while another process holds it."""
    if held is not None and not held.closed:
        try:
            await held.execute("SELECT 1")
            return held
        except psycopg.Error:
            await held.close()
    conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True, connect_timeout=5)
    row = await (await conn.execute("SELECT pg_try_advisory_lock(%s)", (LOCK_KEY,))).fetchone()
    if row is not None and row[0]:
        log.info("catch_up.leading")
        return conn
    await conn.close()
    return None


class _Passes:
    """One pass at a time: lead (or stand by), catch up, and tell readiness which dependency failed."""

    def __init__(self, settings: CatchUpSettings, catch_up: CatchUp, health: Health) -> None:
        self._settings, self._catch_up = settings, catch_up
        self._database = Dependency("database", PROCESS, health, up=False)
        self._provider = Dependency("psp", PROCESS, health, up=False)
        self.lock: Lock | None = None

    async def one(self) -> None:
        name, provider = self._settings.provider, self._provider
        try:
            self.lock = await _leader(self._settings.database_url.reveal(), self.lock)
            self._database.ok()
            if self.lock is None:
                provider.ok()  # standing by: another catch-up is active, and it reads the PSP
                return
            result = await self._catch_up.run_once(int(time.time()))
            EVENTS_CAUGHT_UP.labels(name).inc(result.caught_up)
            CATCH_UP_PASSES.labels(name, "ok").inc()
            CATCH_UP_CAUGHT_UP_TO.labels(name).set(result.up_to_s)
            provider.ok()
            if result.listed:
                log.info("catch_up.pass", provider=name, **dataclasses.asdict(result))
        except SourceUnavailable as exc:
            CATCH_UP_PASSES.labels(name, "failed").inc()
            provider.failed(exc)
        except StoreUnavailable as exc:
            CATCH_UP_PASSES.labels(name, "failed").inc()
            self._database.failed(exc)
        except StoreRejected as exc:  # not an outage: the pass fails (the alert) and moves nothing
            CATCH_UP_PASSES.labels(name, "failed").inc()
            log.error("catch_up.pass_rejected", provider=name, error=str(exc))
        except Exception as exc:
            if not is_infrastructure_error(exc):
                raise
            CATCH_UP_PASSES.labels(name, "failed").inc()
            self._database.failed(exc)
            self.lock = None


async def run(settings: CatchUpSettings, psp: PspClient) -> None:
    health = health_for(settings.health_port)
    pool = make_async_pool(
        settings.database_url.reveal(),
        size_min=1,
        size_max=2,
        name="webhook-gateway-catch-up",
        autocommit=True,
    )
    await pool.open(wait=False)
    store = PostgresReceiptStore(pool, outbox_writer(), timeout_s=STORE_TIMEOUT_S)
    store.start()
    window = Window(settings.settle_s, settings.overlap_s, settings.first_window_s)
    catch_up = CatchUp(settings.provider, PspEventSource(psp), PgCatchUpState(pool), store, window)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    passes = _Passes(settings, catch_up, health)
    try:
        while not stop.is_set():
            health.beat()
            await passes.one()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), settings.interval_ms / 1000)
    finally:
        if passes.lock is not None:
            await passes.lock.close()
        await store.close()
        await pool.close(timeout=5)
        log.info("catch_up.stopped")


def main() -> int:
    configure_logging("webhook_gateway-catch-up")
    try:
        settings = load_settings(CatchUpSettings)
        psp_settings = load_settings(PspClientSettings)
    except SettingsError as exc:
        print(exc, file=sys.stderr)
        return 2
    with PspClient.from_settings(psp_settings) as psp:
        asyncio.run(run(settings, psp))
    return 0
