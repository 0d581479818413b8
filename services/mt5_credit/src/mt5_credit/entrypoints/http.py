"""The HTTP API (aiohttp): account mapping (admin), deposit intents (server callers), credit status;
for operators (``backbone.tokens``): a login's deposits, withdrawals, dead letters.

Callers authenticate with bearer tokens from settings; a merchant sees only its own intents and
credits (404 otherwise). Card data anywhere in a request is refused before any handler runs
(``backbone.http``). Bodies are size-limited, strictly typed, and carry no free-form login: a
login is accepted only as the ``mt5_login`` of an intent, checked against the mapping. Database
work runs in a worker thread so the event loop never blocks.

Who may call is ``http_callers``'; how a value is read, ``http_input``'; the withdrawal routes are
``http_withdrawals``'.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Final, assert_never

from aiohttp import web
from backbone.changes import ChangeFeed, conditional_read, read_tag
from backbone.consumer import dlq_http
from backbone.consumer.dlq import ReplayContext
from backbone.consumer.messages import per_event
from backbone.health import Health, aiohttp_routes
from backbone.http import service_app, watch
from backbone.kafka.topics import TopicCatalogue
from backbone.logs import configure_logging, get_logger
from backbone.outage import Dependency
from backbone.outbox.writer import OutboxWriter
from backbone.postgres import make_async_pool, make_pool
from backbone.settings import load_settings_or_exit
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from mt5_credit import bootstrap
from mt5_credit.adapters import pg_reads
from mt5_credit.adapters.mt5 import GatewayMt5
from mt5_credit.adapters.pg_withdrawals import TradeStatePort
from mt5_credit.adapters.postgres_store import PgCreditStore
from mt5_credit.application.intake import Intake
from mt5_credit.application.intents import Created, IntentRefused, IntentRequest, create_intent
from mt5_credit.domain.intake import Account
from mt5_credit.entrypoints.http_callers import Callers
from mt5_credit.entrypoints.http_input import (
    ID_RE,
    KEY_RE,
    boolean,
    currency,
    error_response,
    json_object,
    parse_amount,
    positive_int,
    text,
)
from mt5_credit.entrypoints.http_withdrawals import Withdrawals
from mt5_credit.settings import SERVICE_NAME, HttpSettings

log = get_logger("mt5_credit.http")
POOL_TIMEOUT_S: Final = 5.0  # a request waits this long for a connection, then 503 + Retry-After
CHANGES_CHANNEL: Final = "mt5_credit_intents"  # migration 0007
_INTENT_FIELDS: Final = frozenset({"customer_id", "mt5_login", "amount_minor", "currency"})


class Api:
    def __init__(
        self,
        settings: HttpSettings,
        pool: ConnectionPool,
        health: Health,
        database: Dependency | None = None,
        *,
        mt5: TradeStatePort | None = None,
        outbox: OutboxWriter | None = None,
        reads: AsyncConnectionPool | None = None,
        changes: ChangeFeed | None = None,
    ) -> None:
        self._settings = settings
        self._pool = pool
        # The broker's polls of its deposit (``GET /deposit-intents/{ref}``) read on the event loop:
        # a thread hop per poll cost about a fifth of this API's CPU (measured 2026-12-06).
        self._reads = reads
        # the broker may wait for its credit instead of polling (``backbone.changes``): the API's
        # LISTEN on migration 0007's notifications; None: reads answer at once (304 or 200)
        self._changes = changes
        self._health = health
        self._database = database
        self._rates = bootstrap.rates(settings.fx_rates)
        self._callers = Callers(settings)
        self._withdrawals = Withdrawals(settings, self._callers, pool, mt5, outbox)

    def app(self) -> web.Application:
        app = service_app(client_max_size=self._settings.body_bytes_max, database=self._database)
        app.add_routes(
            [
                web.put("/accounts/{login}", self.put_account),
                web.post("/deposit-intents", self.post_intent),
                web.get("/deposit-intents/{ref}", self.get_intent),
                web.get("/credits/{credit_id}", self.get_credit),
                web.get("/v1/deposits", self.deposits_on_login),
                *self._withdrawals.routes(),
                *aiohttp_routes(self._health),
            ]
        )
        operators = self._callers.operators
        if operators is not None:  # operators (the console) also see the consumer's dead letters
            source = dlq_http.DeadLetterSource(
                self._settings.consumer_name,
                self._settings.database_url.reveal(),
                self._replay,
            )
            app.add_routes(dlq_http.dead_letter_routes(operators, [source], service=SERVICE_NAME))
        return app

    def _replay(self) -> ReplayContext:
        """The consumer's own handler (``entrypoints.consumer.build``), for a dead letter's replay."""
        avro = bootstrap.codec()
        intake = Intake(self._rates, bootstrap.store_for)
        name = self._settings.consumer_name
        return ReplayContext(
            name, per_event(intake.handle), avro, TopicCatalogue.default(), bootstrap.outbox_writer(avro)
        )

    async def put_account(self, request: web.Request) -> web.Response:
        if not self._callers.is_admin(request):
            return error_response(401, "unauthorized", "admin token required")
        body = json_object(request)
        if isinstance(body, web.Response):
            return body
        try:
            login = positive_int(request.match_info["login"])
            account = Account(
                mt5_login=login,
                customer_id=text(body, "customer_id"),
                currency=currency(body, "currency"),
                enabled=boolean(body, "enabled"),
            )
        except ValueError as exc:
            return error_response(400, "invalid_request", str(exc))
        await asyncio.to_thread(self._in_tx, lambda store: store.upsert_account(account))
        log.info("account_mapped", mt5_login=login, customer_id=account.customer_id, enabled=account.enabled)
        return web.json_response(
            {
                "mt5_login": login,
                "customer_id": account.customer_id,
                "currency": account.currency,
                "enabled": account.enabled,
            }
        )

    async def post_intent(self, request: web.Request) -> web.Response:  # noqa: PLR0911 - one per refusal
        merchant = self._callers.merchant(request)
        if merchant is None:
            return error_response(401, "unauthorized", "bearer token required")
        key = request.headers.get("Idempotency-Key", "")
        if not KEY_RE.match(key):
            return error_response(
                400, "idempotency_key_required", "Idempotency-Key header (8-128 safe chars) required"
            )
        body = json_object(request)
        if isinstance(body, web.Response):
            return body
        unknown = set(body) - {"customer_id", "mt5_login", "amount_minor", "currency"}
        if unknown:
            return error_response(400, "unknown_fields", f"unknown fields: {sorted(unknown)}")
        amount = parse_amount(body, self._settings.amount_limit)
        if isinstance(amount, web.Response):
            return amount
        try:
            req = IntentRequest(
                merchant_id=merchant,
                customer_id=text(body, "customer_id"),
                mt5_login=positive_int(body.get("mt5_login")),
                amount_minor=amount,
                currency=currency(body, "currency"),
            )
        except ValueError as exc:
            return error_response(400, "invalid_request", str(exc))
        result = await asyncio.to_thread(
            self._with_conn, lambda store: create_intent(store, req, key, self._rates)
        )
        match result:
            case Created(intent=intent, replayed=replayed):
                log.info("intent_created", deposit_reference=intent.deposit_reference, replayed=replayed)
                created = pg_reads.intent_json(intent.__dict__)
                if replayed:  # no tag: its credits may have come since
                    return web.json_response(created, status=200)
                # the tag of the status read of a new intent (no credit can exist yet): the broker's
                # first read of it can wait for its credit at once (``If-None-Match`` + ``Prefer: wait``)
                tag = read_tag({**created, "credits": []})
                return web.json_response(created, status=201, headers={"ETag": tag})
            case IntentRefused(code=code, message=message):
                status = 409 if code == "idempotency_key_reused" else 422
                return error_response(status, code, message)
            case _:
                assert_never(result)

    async def get_intent(self, request: web.Request) -> web.Response:
        merchant = self._callers.merchant(request)
        if merchant is None:
            return error_response(401, "unauthorized", "bearer token required")
        ref = request.match_info["ref"]
        if not ID_RE.match(ref):
            return error_response(404, "not_found", "no such deposit intent")

        async def read() -> web.Response:
            if self._reads is not None:
                async with self._reads.connection() as conn:
                    found = await pg_reads.intent_view_async(conn, ref, merchant)
            else:
                found = await asyncio.to_thread(
                    self._with_conn, lambda store: pg_reads.intent_view(store, ref, merchant)
                )
            if found is None:
                return error_response(404, "not_found", "no such deposit intent")
            return web.json_response(found)

        # ETag, If-None-Match (304) and Prefer: wait (the broker waits for its credit, not polls)
        return await conditional_read(request, read, feed=self._changes, key=ref)

    async def get_credit(self, request: web.Request) -> web.Response:
        merchant = self._callers.merchant(request)
        if merchant is None:
            return error_response(401, "unauthorized", "bearer token required")
        try:
            credit_id = positive_int(request.match_info["credit_id"])
        except ValueError:
            return error_response(404, "not_found", "no such credit")
        found = await asyncio.to_thread(
            self._with_conn, lambda store: pg_reads.credit_view(store.conn, credit_id, merchant)
        )
        if found is None:
            return error_response(404, "not_found", "no such credit")
        return web.json_response(found)

    async def deposits_on_login(self, request: web.Request) -> web.Response:
        """``GET /v1/deposits?mt5_login=N[&limit=]`` (operators, ``deposits:view``): the newest
        deposits on one login with their credit rows, of the operator's merchants only."""
        caller = self._callers.operator(request, "deposits:view")
        if isinstance(caller, web.Response):
            return caller
        unknown = set(request.query) - {"mt5_login", "limit"}
        try:
            if unknown:
                raise ValueError(f"unknown parameter(s): {', '.join(sorted(unknown))}")
            login = positive_int(request.query.get("mt5_login"))
            limit = positive_int(request.query.get("limit", "20"))
            if limit > pg_reads.ON_LOGIN_LIMIT_MAX:
                raise ValueError(f"limit is at most {pg_reads.ON_LOGIN_LIMIT_MAX}")
        except ValueError as exc:
            detail = "mt5_login must be a positive integer (the MT5 account number), limit 1-100"
            return error_response(400, "invalid_request", f"{detail}: {exc}")
        rows = await asyncio.to_thread(
            self._with_conn,
            lambda store: pg_reads.deposits_on_login(store.conn, login, caller.merchants, limit),
        )
        return web.json_response({"mt5_login": login, "deposits": rows})

    def _with_conn(self, work: Callable[[PgCreditStore], Any]) -> Any:
        with self._pool.connection() as conn:
            return work(PgCreditStore(conn))

    def _in_tx(self, work: Callable[[PgCreditStore], Any]) -> Any:
        with self._pool.connection() as conn:
            store = PgCreditStore(conn)
            with store.transaction():
                return work(store)


def _probe(pool: ConnectionPool) -> Callable[[], Awaitable[object]]:
    def select_one() -> None:
        with pool.connection() as conn:
            conn.execute("SELECT 1")

    return lambda: asyncio.to_thread(select_one)


def main() -> None:
    settings = load_settings_or_exit(HttpSettings)
    configure_logging("mt5_credit-api")
    health = Health.configured()
    database = Dependency("database", "mt5_credit-api", health, up=False)
    pool = make_pool(
        settings.database_url.reveal(),
        size_min=1,
        size_max=4,
        name="mt5_credit-api",
        autocommit=True,
        timeout_s=POOL_TIMEOUT_S,
    )
    reads = make_async_pool(
        settings.database_url.reveal(),
        size_min=2,
        size_max=2,
        name="mt5_credit-api-reads",
        autocommit=True,
        timeout_s=POOL_TIMEOUT_S,
    )
    mt5 = GatewayMt5.from_settings()
    changes = ChangeFeed(settings.database_url.reveal(), CHANGES_CHANNEL, name="mt5_credit-api")
    outbox = bootstrap.outbox_writer()
    app = Api(settings, pool, health, database, mt5=mt5, outbox=outbox, reads=reads, changes=changes).app()

    async def open_reads(_: web.Application) -> None:
        await reads.open(wait=False)  # fills in the background; a poll waits at most POOL_TIMEOUT_S
        await changes.start()

    app.on_startup.append(open_reads)
    app.on_cleanup.append(changes.stop)
    app.on_cleanup.append(lambda _: reads.close())
    app.on_cleanup.append(lambda _: asyncio.to_thread(mt5.close))
    watch(app, health, _probe(pool), database)
    app.on_cleanup.append(lambda _: asyncio.to_thread(pool.close))
    web.run_app(app, host=settings.host, port=settings.port, print=None, access_log=None)
