"""``python -m payment_state api``: the HTTP API process (graceful on SIGTERM: in-flight requests
finish, then the pools close)."""

from __future__ import annotations

import asyncio
import sys
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web
from backbone.health import Health
from backbone.logs import configure_logging, get_logger
from backbone.settings import SettingsError, load_settings_or_exit
from psycopg_pool import AsyncConnectionPool

from payment_state import bootstrap
from payment_state.entrypoints.http import Api, DbLane, build_app
from payment_state.settings import DEFAULT_EVENTS_TOPIC, ApiSettings, parse_api_tokens

log = get_logger(__name__)
_DB_CHECK_INTERVAL_S = 5.0


async def _watch_database(health: Health, reads: AsyncConnectionPool) -> None:
    """Readiness follows the database; the heartbeat shows the event loop is alive."""
    while True:
        health.beat()
        try:
            async with reads.connection(timeout=5) as conn:
                await conn.execute("SELECT 1")
            health.set("database", True)
        except Exception as exc:
            health.set("database", False, str(exc)[:200])
        await asyncio.sleep(_DB_CHECK_INTERVAL_S)


def _lane(url: str, size: int, name: str) -> DbLane:
    """All connections opened at start: a burst must not wait for new connections to be made."""
    return DbLane(
        bootstrap.pool(url, size, name, size_min=size), ThreadPoolExecutor(size, thread_name_prefix=name)
    )


def main() -> None:
    settings = load_settings_or_exit(ApiSettings)
    configure_logging("payment_state-api")
    try:
        tokens = parse_api_tokens(settings.api_tokens)
    except SettingsError as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(2) from None
    url = settings.database_url.reveal()
    writes = _lane(url, settings.db_pool_size_max, "payment-state-api-writes")
    reads = bootstrap.async_pool(url, settings.read_pool_size_max, "payment-state-api-reads")
    ctx = bootstrap.context(
        settings.provider, DEFAULT_EVENTS_TOPIC, bootstrap.topic_catalogue(), bootstrap.codec()
    )
    health = Health()
    app = build_app(Api(writes, reads, ctx, tokens), health, settings.body_max_bytes)
    watch: list[asyncio.Task[None]] = []

    async def start(_: web.Application) -> None:
        await reads.open(wait=True)
        watch.append(asyncio.create_task(_watch_database(health, reads)))

    async def close(_: web.Application) -> None:
        for task in watch:
            task.cancel()
        await reads.close()
        writes.close()
        log.info("api.stopped")

    app.on_startup.append(start)
    app.on_cleanup.append(close)
    log.info("api.starting", port=settings.http_port, merchants=len(set(tokens.values())))
    web.run_app(app, host=settings.http_host, port=settings.http_port, print=None, access_log=None)
