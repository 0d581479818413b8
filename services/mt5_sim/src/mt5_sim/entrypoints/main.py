"""``python -m mt5_sim``: migrate, serve the Web API and the control API, stop cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from typing import Final

from backbone.health import Health
from backbone.logs import configure_logging, get_logger
from backbone.postgres import is_infrastructure_error
from backbone.postgres.migrations import MigrationSource, migrate
from backbone.settings import load_settings_or_exit

from mt5_sim.bootstrap import Simulator, start_simulator
from mt5_sim.settings import SimSettings

HEARTBEAT_S: Final = 1.0
DB_CHECK_EVERY: Final = 5  # heartbeats
log = get_logger("mt5_sim")


async def _watch(sim: Simulator) -> None:
    """Beat the liveness heartbeat; check the database now and then for readiness."""
    beats = 0
    while True:
        sim.health.beat()
        beats += 1
        if beats % DB_CHECK_EVERY == 0:
            try:
                await sim.store.ping()
                sim.health.set("database", True)
            except Exception as exc:
                sim.health.set("database", False, type(exc).__name__)
        await asyncio.sleep(HEARTBEAT_S)


async def run(settings: SimSettings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    sim = await start_simulator(settings, Health())
    log.info(
        "mt5_sim.ready",
        port=settings.port,
        control_port=settings.control_port,
        tls=settings.tls_cert_file is not None,
        manager_login=settings.manager_login,
    )
    watcher = asyncio.create_task(_watch(sim))
    await stop.wait()
    log.info("mt5_sim.stopping")
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watcher
    await sim.stop()
    log.info("mt5_sim.stopped")


def main() -> int:
    settings = load_settings_or_exit(SimSettings)
    configure_logging("mt5_sim", settings.log_level)
    try:
        applied = migrate(
            settings.database_url.reveal(), [MigrationSource("mt5_sim", settings.migrations_dir)]
        )
    except Exception as exc:
        if not is_infrastructure_error(exc):
            raise
        log.error("mt5_sim.database_unreachable", error=type(exc).__name__)
        return 1
    log.info("mt5_sim.migrated", applied=len(applied))
    asyncio.run(run(settings))
    return 0
