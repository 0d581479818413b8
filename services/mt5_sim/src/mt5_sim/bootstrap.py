"""Wires the simulator: PostgreSQL store, fault book, clock, Web API listener, control API."""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from aiohttp import web
from backbone.health import Health
from backbone.logs import get_logger

from mt5_sim.adapters.store import PgStore
from mt5_sim.application.webapi import ControlState, SimClock, WebApi
from mt5_sim.domain.auth import password_hash
from mt5_sim.domain.faults import FaultBook
from mt5_sim.entrypoints.control import BODY_MAX_BYTES, ControlApi
from mt5_sim.entrypoints.webapi_server import WebApiServer
from mt5_sim.settings import SimSettings

log = get_logger(__name__)


@dataclass
class Simulator:
    settings: SimSettings
    store: PgStore
    health: Health
    webapi: WebApiServer
    control: web.AppRunner

    async def stop(self) -> None:
        self.health.set("webapi", False, "stopping")
        await self.webapi.stop(self.settings.stop_grace_ms / 1000)
        await self.control.cleanup()
        await self.store.close()


def tls_context(settings: SimSettings) -> ssl.SSLContext | None:
    if settings.tls_cert_file is None or settings.tls_key_file is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
    return context


async def start_simulator(settings: SimSettings, health: Health) -> Simulator:
    """Open the store, then both listeners; the caller has already applied the migrations."""
    store = PgStore(
        settings.database_url.reveal(),
        pool_size=settings.db_pool_size,
        synchronous_commit=settings.synchronous_commit,
    )
    await store.open()
    health.set("database", True)
    faults, clock = FaultBook(), SimClock()
    control = ControlState(store, faults, clock)
    if await control.load():
        log.info(
            "mt5_sim.control_state_restored", faults=len(faults.describe()), clock_offset_s=clock.offset_s
        )
    managers = {settings.manager_login: password_hash(settings.manager_password.reveal())}
    api = WebApi(store, faults, clock, managers, settings.auth_window_ms, control=control)
    server = WebApiServer(
        api, settings.host, settings.port, idle_timeout_ms=settings.idle_timeout_ms, tls=tls_context(settings)
    )
    await server.start()
    app = web.Application(client_max_size=BODY_MAX_BYTES)
    app.add_routes(ControlApi(store, faults, clock, server, control).routes(health))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, settings.host, settings.control_port, reuse_address=True).start()
    health.set("webapi", True)
    return Simulator(settings, store, health, server, runner)
