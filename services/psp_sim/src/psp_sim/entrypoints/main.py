"""``python -m psp_sim``: migrate, then serve the PSP API and the control API and deliver webhooks until
SIGTERM/SIGINT. On a signal: stop accepting, let in-flight requests finish (bounded by
``PSP_SIM_SHUTDOWN_GRACE_MS``), let the webhook worker finish its current attempts, close the pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys

from aiohttp import web
from backbone.health import Health
from backbone.logs import configure_logging, get_logger
from backbone.settings import load_settings_or_exit

from psp_sim.application.service import SETTLE_BATCH_MAX
from psp_sim.bootstrap import Simulator, apply_migrations, build
from psp_sim.metrics import WEBHOOK_BACKLOG
from psp_sim.settings import SimSettings, problems

log = get_logger("psp_sim")
_WATCH_INTERVAL_S = 5.0
_SETTLE_INTERVAL_S = 0.1
_SETTLE_RETRY_S = 1.0


async def _settle_payouts(sim: Simulator, stop: asyncio.Event) -> None:
    """Pending payouts become paid or failed when their time comes (the payout delay). A batch that
    was full is followed at once by the next; a database error waits one interval and tries again."""
    while not stop.is_set():
        settled, wait_s = 0, _SETTLE_INTERVAL_S
        try:
            settled = await sim.service.settle_due()
        except Exception as exc:  # the database is down or busy: retry later, never a crash
            log.warning("payouts.settle_failed", error=type(exc).__name__)
            wait_s = _SETTLE_RETRY_S
        if settled < SETTLE_BATCH_MAX:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait_s)


async def _watch(sim: Simulator, stop: asyncio.Event) -> None:
    """Every few seconds: beat (the event loop is alive), sample the webhook backlog, and mark the
    database ready or not by whether that query worked."""
    while not stop.is_set():
        sim.health.beat()
        try:
            WEBHOOK_BACKLOG.set(await sim.control.backlog())
            sim.health.set("database", True)
        except Exception as exc:  # any failure of the probe query means "not ready", never a crash
            sim.health.set("database", False, type(exc).__name__)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), _WATCH_INTERVAL_S)


async def _site(app: web.Application, host: str, port: int, grace_s: float) -> web.AppRunner:
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, host, port, shutdown_timeout=grace_s).start()
    return runner


async def serve(settings: SimSettings) -> None:
    health = Health()
    sim = await build(settings, health)
    health.set("database", True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    grace_s = settings.shutdown_grace_ms / 1000
    worker = asyncio.create_task(sim.deliverer.run(health))
    watcher = asyncio.create_task(_watch(sim, stop))
    settler = asyncio.create_task(_settle_payouts(sim, stop))
    runners = [
        await _site(sim.api, settings.api_host, settings.api_port, grace_s),
        await _site(sim.control_api, settings.control_host, settings.control_port, grace_s),
    ]
    log.info("psp_sim.started", api_port=settings.api_port, control_port=settings.control_port)
    await stop.wait()
    log.info("psp_sim.stopping")
    for runner in runners:
        await runner.cleanup()
    sim.deliverer.stop()
    await asyncio.wait_for(worker, timeout=settings.webhook_timeout_ms / 1000 + grace_s)
    await watcher
    await settler
    await sim.pool.close()
    log.info("psp_sim.stopped")


def main() -> None:
    settings = load_settings_or_exit(SimSettings)
    bad = problems(settings)
    if bad:
        print("invalid configuration: " + "; ".join(bad), file=sys.stderr)
        raise SystemExit(2)
    configure_logging("psp_sim", settings.log_level)
    applied = apply_migrations(settings)
    log.info("psp_sim.migrated", applied=len(applied))
    asyncio.run(serve(settings))
