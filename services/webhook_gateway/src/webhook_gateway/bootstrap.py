"""Wiring: real adapters for production (``bootstrap``); tests pass their own store to ``build_app``."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from backbone.avro import AvroCodec, SchemaCatalogue
from backbone.health import Health
from backbone.http import Probe, watch
from backbone.kafka.topics import TopicCatalogue
from backbone.outage import Dependency
from backbone.outbox import OutboxWriter
from backbone.postgres import make_async_pool
from backbone.tokens import Tokens
from psycopg_pool import AsyncConnectionPool

from webhook_gateway.adapters.postgres_store import BATCH_BYTES_MAX, BatchLimits, PostgresReceiptStore
from webhook_gateway.application.ingest import IngestWebhook, ReceiptStore
from webhook_gateway.domain.providers import ProviderConfig
from webhook_gateway.entrypoints.http import BodyLimits, make_app
from webhook_gateway.entrypoints.reads import PERMISSIONS as READ_PERMISSIONS
from webhook_gateway.entrypoints.reads import receipt_routes
from webhook_gateway.settings import GatewaySettings

SERVICE_NAME = "webhook_gateway"  # as in schemas/topics.toml (the producer of psp.provider-events)


@dataclass
class Gateway:
    """Everything the server entrypoint runs and closes."""

    app: web.Application
    pool: AsyncConnectionPool[Any]
    store: PostgresReceiptStore
    health: Health

    async def close(self) -> None:
        """After the HTTP server stopped: writers first (no request waits on them any more)."""
        await self.store.close()
        await self.pool.close(timeout=5)


def outbox_writer() -> OutboxWriter:
    return OutboxWriter(AvroCodec(SchemaCatalogue.default()), TopicCatalogue.default(), SERVICE_NAME)


def make_pool(settings: GatewaySettings) -> AsyncConnectionPool[Any]:
    """An unopened async pool whose connections are checked when handed out: autocommit (each
    statement is its own transaction, see the store), bounded acquisition and statement times."""
    return make_async_pool(
        settings.database_url.reveal(),
        size_min=settings.db_pool_size_min,
        size_max=settings.db_pool_size_max,
        name="webhook-gateway",
        autocommit=True,
        timeout_s=settings.db_timeout_ms / 1000,
        statement_timeout_ms=settings.db_timeout_ms,
    )


def build_app(
    settings: GatewaySettings,
    store: ReceiptStore,
    health: Health,
    *,
    clock: Callable[[], float] = time.time,
    providers: Mapping[str, ProviderConfig] | None = None,
    database: Dependency | None = None,
    reads: Sequence[web.RouteDef] = (),
) -> web.Application:
    ingest = IngestWebhook(store, clock=clock, tolerance_s=settings.tolerance_s)
    return make_app(
        ingest,
        settings.providers() if providers is None else providers,
        health,
        body=BodyLimits(settings.body_max_bytes, settings.body_timeout_ms / 1000),
        database=database,
        reads=reads,
    )


def _probe(pool: AsyncConnectionPool[Any]) -> Probe:
    async def select_one() -> None:
        async with pool.connection() as conn:
            await conn.execute("SELECT 1")

    return select_one


async def bootstrap(settings: GatewaySettings, health: Health) -> Gateway:
    """Open the pool without waiting for the database (the service starts, unready, while it is
    down) and build the application on the PostgreSQL store."""
    limits = BatchLimits(
        writers=settings.db_writers,
        batch_size_max=settings.db_batch_size_max,
        queue_max=settings.queue_max,
        batch_bytes_max=max(BATCH_BYTES_MAX, settings.body_max_bytes),
    )
    pool = make_pool(settings)
    timeout_s = settings.db_timeout_ms / 1000
    store = PostgresReceiptStore(pool, outbox_writer(), timeout_s=timeout_s, limits=limits)
    database = Dependency("database", SERVICE_NAME, health, up=False)  # not ready before the first probe
    reads = (
        receipt_routes(Tokens.load(settings.api_tokens_file, READ_PERMISSIONS), pool)
        if settings.api_tokens_file is not None
        else []
    )
    app = build_app(settings, store, health, database=database, reads=reads)
    watch(app, health, _probe(pool), database, interval_s=settings.db_probe_interval_ms / 1000)
    await pool.open(wait=False)
    store.start()
    return Gateway(app, pool, store, health)
