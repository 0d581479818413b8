"""The gateway's HTTP server process: settings, wiring, a database probe, graceful SIGTERM.

On SIGTERM (or SIGINT): /readyz turns 503 at once, the listening socket closes, requests already
being handled (a webhook whose body is still arriving included) finish within ``SHUTDOWN_GRACE_MS``
and are answered, idle keep-alive connections close, then the pool closes. A request cut off by the
grace period was not acknowledged; whatever it committed, the PSP's retry is deduplicated.
"""

from __future__ import annotations

import asyncio
import signal
import sys

from aiohttp import web
from backbone.health import Health
from backbone.logs import configure_logging, get_logger
from backbone.settings import SettingsError

from webhook_gateway.bootstrap import SERVICE_NAME, Gateway, bootstrap
from webhook_gateway.entrypoints.http import ENDPOINT
from webhook_gateway.settings import GatewaySettings, load_gateway_settings

_CLEANUP_TIMEOUT_S = 1.0
log = get_logger(__name__)


async def serve(settings: GatewaySettings) -> None:
    """Run until SIGTERM/SIGINT; the only unbounded loop of the process is waiting for it."""
    health = Health.configured()
    gateway = await bootstrap(settings, health)
    try:
        await _run(settings, gateway, health)
    finally:
        await gateway.close()
        log.info("gateway.stopped")


async def _run(settings: GatewaySettings, gateway: Gateway, health: Health) -> None:
    grace_s = settings.shutdown_grace_ms / 1000
    runner = web.AppRunner(
        gateway.app,
        handle_signals=False,
        access_log=None,  # one structured line per webhook comes from the endpoint instead
        shutdown_timeout=_CLEANUP_TIMEOUT_S,  # the grace is spent in wait_idle below
        lingering_time=0,  # never read (and discard) a body we refused: close the connection
        auto_decompress=False,  # verify the bytes as sent; no decompression bomb can get in
        max_headers=64,
    )
    await runner.setup()  # starts the health watch (backbone.http.watch): readiness follows the database
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    site = web.TCPSite(runner, settings.http_host, settings.http_port, reuse_port=settings.http_reuse_port)
    try:
        await site.start()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        health.set("accepting", True)
        log.info("gateway.listening", host=settings.http_host, port=settings.http_port)
        await stop.wait()
        log.info("gateway.stopping", grace_ms=settings.shutdown_grace_ms)
        health.set("accepting", False, "shutting down")
        await site.stop()  # no new connections; open ones keep being read
        # aiohttp's own shutdown stops reading open connections at once, which would starve a
        # webhook whose body is still arriving: let in-flight webhooks finish first (bounded).
        if not await gateway.app[ENDPOINT].wait_idle(grace_s):
            log.warning("gateway.grace_expired_with_requests_in_flight")
    finally:
        health.set("accepting", False, "shutting down")
        await runner.cleanup()  # close keep-alive connections; cut what is left after the grace
        stop.set()


def main() -> int:
    try:
        settings = load_gateway_settings()
    except SettingsError as exc:
        print(exc, file=sys.stderr)  # before logging is configured; names variables, never values
        return 2
    configure_logging(SERVICE_NAME, settings.log_level)
    try:
        asyncio.run(serve(settings))
    except Exception:
        log.exception("gateway.crashed")
        return 1
    return 0
