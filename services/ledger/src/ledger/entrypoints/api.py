"""The ledger's HTTP API (aiohttp, port 8084): balances, journals and entries to read, and the
settlement import. Every ``/v1`` route needs ``Authorization: Bearer <token>`` with a permission:
``ledger:read`` for reads, ``ledger:import`` for ``POST /v1/settlements``. Card data anywhere in a
request is refused before any handler or log sees it (``backbone.http``). Bad input gets a 4xx
with a reason and changes nothing. ``/healthz``, ``/readyz`` and ``/metrics`` are open.

    GET  /v1/accounts/{code}/{currency}/balance[?holder=&as_of=<RFC 3339>]
    GET  /v1/accounts/{code}/{currency}/entries[?holder=&after=<journal_id>.<line>&limit=]
    GET  /v1/journals/{journal_id}
    GET  /v1/journals?reference=<ref> | ?payment_id=<id>[&after=<journal_id>&limit=]
    POST /v1/settlements            (body: a normalized settlement batch, README "Settlement import")
    GET  /v1/dead-letters, GET /v1/dead-letters/{consumer}/{id}                 (deadletters:view)
    POST /v1/dead-letters/{consumer}/{id}/replay|discard {"reason"}   (deadletters:replay)
                                    the consumer's dead letters (backbone.consumer.dlq_http)
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Final, assert_never

import psycopg
from aiohttp import web
from backbone.bodies import json_body
from backbone.consumer import dlq_http
from backbone.health import Health, aiohttp_routes
from backbone.http import route_name, service_app, unavailable, watch
from backbone.ids import new_event_id
from backbone.logs import configure_logging, get_logger
from backbone.outage import Dependency
from backbone.postgres import is_infrastructure_error, make_pool
from prometheus_client import Gauge

from ledger.adapters import pg_reads
from ledger.adapters.pg_reads import negative_balances
from ledger.adapters.postgres_store import PgLedgerStore
from ledger.application.settlement import (
    AlreadyImported,
    ImportConflict,
    Imported,
    ImportRejected,
    NothingToImport,
    import_settlement,
)
from ledger.bootstrap import outbox_writer, replay_context
from ledger.domain.accounts import CHART, AccountKey
from ledger.entrypoints.auth import PERMISSIONS, Caller, Tokens
from ledger.settings import SERVICE_NAME, ApiSettings, LedgerSettings

log = get_logger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_PAGE_DEFAULT: Final = 100
GAUGE_INTERVAL_S: Final = 15.0  # how often the API refreshes the negative-balance gauge
NEGATIVE_BALANCES: Final = Gauge(
    "ledger_negative_balance_accounts",
    "Accounts whose balance (on the account's normal side) is below zero, by account code",
    ["code"],
)
POOL_TIMEOUT_S: Final = 5.0  # a request waits this long for a connection, then 503 + Retry-After


class BadRequest(Exception):
    def __init__(self, status: int, error: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.error, self.detail = status, error, detail


def _json(status: int, body: dict[str, Any]) -> web.Response:
    return web.json_response(body, status=status, dumps=lambda o: json.dumps(o, default=str))


class LedgerApi:
    def __init__(self, api: ApiSettings, ledger: LedgerSettings, tokens: Tokens, health: Health) -> None:
        self._api, self._ledger, self._tokens, self._health = api, ledger, tokens, health
        self._database = Dependency("database", "ledger-api", health, up=False)
        self._outbox = outbox_writer(ledger)[2]
        self._pool = make_pool(
            api.database_url.reveal(),
            size_min=1,
            size_max=api.pool_size_max,
            name="ledger-api",
            timeout_s=POOL_TIMEOUT_S,
            statement_timeout_ms=api.statement_timeout_ms,
            open=False,
        )
        self._gauges_at = 0.0

    def app(self) -> web.Application:
        app = service_app(
            middlewares=[self._middleware], client_max_size=self._api.body_max_bytes, database=self._database
        )
        app.add_routes(aiohttp_routes(self._health))
        read, write = self._guard("ledger:read"), self._guard("ledger:import")
        app.add_routes(
            [
                web.get("/v1/accounts/{code}/{currency}/balance", read(self.balance)),
                web.get("/v1/accounts/{code}/{currency}/entries", read(self.entries)),
                web.get("/v1/journals/{journal_id}", read(self.journal)),
                web.get("/v1/journals", read(self.journals)),
                web.post("/v1/settlements", write(self.import_settlement)),
            ]
        )
        consumer = self._api.consumer_name
        source = dlq_http.DeadLetterSource(
            consumer, self._api.database_url.reveal(), lambda: replay_context(consumer, self._ledger)
        )
        app.add_routes(dlq_http.dead_letter_routes(self._tokens, [source], service=SERVICE_NAME))
        app.on_startup.append(self._start)
        watch(app, self._health, self._probe, self._database)
        app.on_cleanup.append(self._stop)
        return app

    async def _probe(self) -> None:
        """The database is there; every ``GAUGE_INTERVAL_S`` the negative-balance gauge is refreshed
        (a read of the partial index ``balances_negative_idx``, empty while the books are healthy)."""
        if time.monotonic() - self._gauges_at < GAUGE_INTERVAL_S:
            await self._db(lambda conn: conn.execute("SELECT 1"))
            return
        counts = await self._db(negative_balances)
        NEGATIVE_BALANCES.clear()
        for code in CHART:
            NEGATIVE_BALANCES.labels(code).set(counts.get(code, 0))
        self._gauges_at = time.monotonic()

    async def _start(self, _: web.Application) -> None:
        await asyncio.to_thread(self._pool.open, wait=False)  # fills in the background; /readyz says when

    async def _stop(self, _: web.Application) -> None:
        await asyncio.to_thread(self._pool.close)

    # -- middleware: errors as JSON, one structured log line per request -----------------------------

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.monotonic()
        try:
            response = await handler(request)
        except BadRequest as exc:
            response = _json(exc.status, {"error": exc.error, "detail": exc.detail})
        except web.HTTPException as exc:
            response = _json(exc.status, {"error": exc.reason.lower().replace(" ", "_"), "detail": exc.text})
        except Exception as exc:
            if not is_infrastructure_error(exc):
                log.exception("api.failed", route=route_name(request))
                response = _json(500, {"error": "internal", "detail": "see the service logs"})
            else:
                self._database.failed(exc)
                response = unavailable()
        if request.path.startswith("/v1/"):
            log.info(
                "api.request",
                method=request.method,
                path=request.path,
                status=response.status,
                principal=request.get("principal"),
                duration_ms=round((time.monotonic() - started) * 1000, 1),
            )
        return response

    def _guard(
        self, permission: str
    ) -> Callable[[Callable[[web.Request, Caller], Awaitable[web.Response]]], Handler]:
        def wrap(handler: Callable[[web.Request, Caller], Awaitable[web.Response]]) -> Handler:
            async def guarded(request: web.Request) -> web.StreamResponse:
                caller = self._tokens.authenticate(request.headers)
                if caller is None:
                    raise BadRequest(401, "unauthenticated", "send Authorization: Bearer <token>")
                request["principal"] = caller.principal
                if permission not in caller.permissions:
                    raise BadRequest(403, "forbidden", f"needs the {permission} permission")
                return await handler(request, caller)

            return guarded

        return wrap

    async def _db(self, work: Callable[[psycopg.Connection], Any]) -> Any:
        def run() -> Any:
            with self._pool.connection() as conn:
                return work(conn)

        result = await asyncio.to_thread(run)
        self._database.ok()
        return result

    # -- reads -----------------------------------------------------------------------------------------

    async def balance(self, request: web.Request, _: Caller) -> web.Response:
        code, currency = _account_path(request)
        holder = request.query.get("holder") or None
        as_of = _moment(request.query.get("as_of"))
        if holder is not None:
            _check_key(AccountKey(code, currency, holder))

        def read(conn: psycopg.Connection) -> dict[str, Any]:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            return pg_reads.balance(conn, code, currency, holder, as_of)

        return _json(200, await self._db(read))

    async def entries(self, request: web.Request, _: Caller) -> web.Response:
        code, currency = _account_path(request)
        key = AccountKey(code, currency, request.query.get("holder", ""))
        _check_key(key)
        after, limit = _entry_cursor(request.query.get("after")), self._limit(request)
        rows = await self._db(lambda conn: pg_reads.entries(conn, key, after=after, limit=limit))
        next_after = f"{rows[-1]['journal_id']}.{rows[-1]['line']}" if len(rows) == limit else None
        return _json(200, {"account": str(key), "entries": rows, "next_after": next_after})

    async def journal(self, request: web.Request, _: Caller) -> web.Response:
        journal_id = _int(request.match_info["journal_id"], "journal_id", minimum=1)
        rows = await self._db(
            lambda conn: pg_reads.journals(conn, where="id = %s", params=(journal_id,), after_id=0, limit=1)
        )
        if not rows:
            raise BadRequest(404, "not_found", f"no journal {journal_id}")
        return _json(200, rows[0])

    async def journals(self, request: web.Request, _: Caller) -> web.Response:
        reference, payment_id = request.query.get("reference"), request.query.get("payment_id")
        if (reference is None) == (payment_id is None):
            raise BadRequest(400, "bad_query", "give exactly one of reference= or payment_id=")
        where, value = (
            ("reference = %s", reference) if reference is not None else ("payment_id = %s", payment_id)
        )
        after = _int(request.query.get("after", "0"), "after", minimum=0)
        limit = self._limit(request)
        rows = await self._db(
            lambda conn: pg_reads.journals(conn, where=where, params=(value,), after_id=after, limit=limit)
        )
        next_after = rows[-1]["journal_id"] if len(rows) == limit else None
        return _json(200, {"journals": rows, "next_after": next_after})

    def _limit(self, request: web.Request) -> int:
        default = str(min(_PAGE_DEFAULT, self._api.page_size_max))
        limit = _int(request.query.get("limit", default), "limit", minimum=1)
        if limit > self._api.page_size_max:
            raise BadRequest(400, "bad_query", f"limit is at most {self._api.page_size_max}")
        return limit

    # -- settlement import ---------------------------------------------------------------------------------

    async def import_settlement(self, request: web.Request, caller: Caller) -> web.Response:
        doc = json_body(request)  # read, bounded and screened by backbone.http's guard
        if doc is None:
            raise BadRequest(400, "bad_json", "the body is a JSON settlement report")
        import_id = new_event_id()

        def run(conn: psycopg.Connection) -> Any:
            with conn.transaction():
                store = PgLedgerStore(conn, self._outbox, self._ledger.events_topic)
                return import_settlement(
                    store,
                    doc,
                    import_id=import_id,
                    imported_by=caller.principal,
                    source_name=request.query.get("source_name", "http"),
                    allowed_currencies=self._ledger.allowed_currencies,
                )

        outcome = await self._db(run)
        log.info("api.settlement_import", principal=caller.principal, outcome=type(outcome).__name__)
        match outcome:
            case Imported(reference=ref, journal_id=jid):
                return _json(201, {"outcome": "imported", "reference": ref, "journal_id": jid})
            case AlreadyImported(reference=ref, journal_id=jid):
                return _json(200, {"outcome": "already_imported", "reference": ref, "journal_id": jid})
            case NothingToImport(reference=ref):
                return _json(200, {"outcome": "nothing_to_import", "reference": ref, "journal_id": None})
            case ImportConflict(reference=ref, journal_id=jid):
                detail = f"{ref} was imported as journal {jid} with other amounts"
                return _json(409, {"outcome": "conflict", "error": "conflict", "detail": detail})
            case ImportRejected(reason=reason, detail=detail):
                return _json(422, {"outcome": "rejected", "error": reason, "detail": detail})
            case _:
                assert_never(outcome)


def _account_path(request: web.Request) -> tuple[str, str]:
    code, currency = request.match_info["code"], request.match_info["currency"]
    if code not in CHART:
        raise BadRequest(404, "unknown_account", f"no account code {code[:64]!r} in the chart")
    _check_key(AccountKey(code, currency, "x" if CHART[code].per_holder else ""))
    return code, currency


def _check_key(key: AccountKey) -> None:
    problem = pg_reads.key_problem(key)
    if problem is not None:
        raise BadRequest(400, "bad_account", problem)


def _int(raw: str, name: str, *, minimum: int) -> int:
    if not raw.isdigit() or len(raw) > 18 or int(raw) < minimum:
        raise BadRequest(400, "bad_query", f"{name} must be an integer >= {minimum}")
    return int(raw)


def _entry_cursor(raw: str | None) -> tuple[int, int]:
    if raw is None:
        return 0, 0
    journal_id, _, line = raw.partition(".")
    return _int(journal_id, "after (journal id)", minimum=0), _int(line or "0", "after (line)", minimum=0)


def _moment(raw: str | None) -> datetime | None:
    if raw is None:
        return None
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError as exc:
        raise BadRequest(400, "bad_query", "as_of must be RFC 3339, e.g. 2026-11-30T00:00:00Z") from exc
    if moment.tzinfo is None:
        raise BadRequest(400, "bad_query", "as_of needs a time zone (Z or +hh:mm)")
    return moment


def serve(api: ApiSettings, ledger: LedgerSettings) -> None:
    """Run until SIGTERM/SIGINT (aiohttp finishes the requests in flight, then the pool closes)."""
    configure_logging(SERVICE_NAME)
    health = Health.configured()
    service = LedgerApi(api, ledger, Tokens.load(api.tokens_file, PERMISSIONS), health)
    log.info("api.starting", host=api.http_host, port=api.http_port)
    web.run_app(service.app(), host=api.http_host, port=api.http_port, access_log=None, print=None)
