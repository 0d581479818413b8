"""``python -m payment_state api``: the HTTP API process (graceful on SIGTERM: in-flight requests
finish, then the pools close)."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web
from backbone.changes import ChangeFeed
from backbone.consumer import dlq_http
from backbone.health import Health
from backbone.http import Probe, watch
from backbone.logs import configure_logging, get_logger
from backbone.outage import Dependency
from backbone.outbox.writer import OutboxWriter
from backbone.settings import SettingsError, load_settings_or_exit
from backbone.tokens import TokenFileError, Tokens
from psycopg_pool import AsyncConnectionPool

from payment_state import bootstrap
from payment_state.entrypoints.http import Api, DbLane, build_app
from payment_state.entrypoints.inbound import replay_context
from payment_state.settings import DEFAULT_EVENTS_TOPIC, ApiSettings, ReplaySettings, parse_api_tokens

log = get_logger(__name__)
CHANGES_CHANNEL = "payment_state_payments"  # migration 0004


def _probe(reads: AsyncConnectionPool) -> Probe:
    async def select_one() -> None:
        async with reads.connection() as conn:
            await conn.execute("SELECT 1")

    return select_one


def _lane(url: str, size: int, name: str, outbox: OutboxWriter) -> DbLane:
    """All connections opened at start: a burst must not wait for new connections to be made."""
    pool = bootstrap.pool(url, size, name, size_min=size)
    transaction = bootstrap.transactions(pool, outbox, DEFAULT_EVENTS_TOPIC)
    return DbLane(pool, ThreadPoolExecutor(size, thread_name_prefix=name), transaction)


def operator_routes(settings: ApiSettings) -> list[web.RouteDef]:
    """The consumer's dead letters for operators, when ``PAYMENT_STATE_OPERATORS_FILE`` is set (the
    file and the consumer's settings are read now: a bad one stops the process at start)."""
    if settings.operators_file is None:
        return []
    try:
        operators = Tokens.load(settings.operators_file, dlq_http.PERMISSIONS)
    except (OSError, TokenFileError) as exc:
        raise SettingsError([f"PAYMENT_STATE_OPERATORS_FILE: {exc}"]) from None
    replay = load_settings_or_exit(ReplaySettings)
    source = dlq_http.DeadLetterSource(
        replay.consumer_name, settings.database_url.reveal(), lambda: replay_context(replay)
    )
    return dlq_http.dead_letter_routes(operators, [source], service="payment-state")


def main() -> None:
    settings = load_settings_or_exit(ApiSettings)
    configure_logging("payment_state-api")
    try:
        tokens = parse_api_tokens(settings.api_tokens)
        operators = operator_routes(settings)
    except SettingsError as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(2) from None
    url = settings.database_url.reveal()
    outbox = bootstrap.outbox_writer(bootstrap.topic_catalogue(), bootstrap.codec())
    writes = _lane(url, settings.db_pool_size_max, "payment-state-api-writes", outbox)
    reads = bootstrap.async_pool(url, settings.read_pool_size_max, "payment-state-api-reads")
    ctx = bootstrap.context(settings.provider, settings.merchant_providers, settings.amount_limit)
    health = Health.configured()
    database = Dependency("database", "payment_state-api", health, up=False)
    changes = ChangeFeed(url, CHANGES_CHANNEL, name="payment-state-api")
    api = Api(writes, reads, ctx, tokens, changes)
    app = build_app(api, health, settings.body_max_bytes, database, operators)

    async def start(_: web.Application) -> None:
        await reads.open(wait=False)  # the pool fills in the background; readiness says when
        await changes.start()

    async def close(_: web.Application) -> None:
        await changes.stop()
        await reads.close()
        writes.close()
        log.info("api.stopped")

    app.on_startup.append(start)
    watch(app, health, _probe(reads), database)
    app.on_cleanup.append(close)
    log.info("api.starting", port=settings.http_port, merchants=len(set(tokens.values())))
    web.run_app(app, host=settings.http_host, port=settings.http_port, print=None, access_log=None)
