"""The HTTP API (aiohttp): create, capture, cancel, refund, get, find by the PSP's payment id;
plus /healthz /readyz /metrics; with an operators file, the consumer's dead letters for operators
(``backbone.consumer.dlq_http``: ``GET /v1/dead-letters``, replay, discard).

Order of checks on a money-moving call, each failing with a 4xx and a machine-readable code and
changing nothing: card data anywhere in the request (400 ``card_data_forbidden``, ``backbone.http``,
before anything else sees it) → bearer token (401) → body size (413) → JSON (400
``malformed_json``) → MT5 login and fields (400, see ``domain.validation``) → ``Idempotency-Key``
(400) → the handler (404 for a payment the merchant cannot see, 409/422 for refusals, replays of
earlier answers).
Money-moving calls run their database work on a bounded thread pool (the handlers are shared with
the synchronous commands consumer); status reads run on the event loop with their own small async
pool, so they never queue behind creates waiting for their commit.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from aiohttp import web
from aiohttp.typedefs import Middleware
from backbone.bodies import json_body
from backbone.changes import ChangeFeed, conditional_read, read_tag
from backbone.health import Health, aiohttp_routes
from backbone.http import service_app, unavailable
from backbone.logs import get_logger
from backbone.outage import Dependency
from backbone.postgres import is_infrastructure_error
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from payment_state.adapters.pg_reads import find_by_provider_payment_async, load_state_async
from payment_state.adapters.postgres_payouts import load_payout_async
from payment_state.application import metrics
from payment_state.application.context import Context
from payment_state.application.handlers import Contention, Reply, handle, rejection_reply
from payment_state.application.ports import Transactions
from payment_state.application.views import error_body, payment_view, payout_view
from payment_state.domain.commands import PaymentRequest, Rejection
from payment_state.domain.validation import (
    check_idempotency_key,
    parse_cancel,
    parse_capture,
    parse_create,
    parse_refund,
    valid_payment_id,
    valid_provider_payment_id,
)
from payment_state.settings import PROVIDERS

log = get_logger(__name__)
T = TypeVar("T")
_JSON: Final = "application/json"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, body=json.dumps(body).encode(), content_type=_JSON, headers=headers)


def _error(status: int, code: str, message: str) -> web.Response:
    return _json(status, error_body(code, message))


@dataclass(frozen=True)
class DbLane:
    """A connection pool with the threads that use it and the store's transactions on it
    (money-moving calls: their handlers are the synchronous ones the commands consumer shares)."""

    pool: ConnectionPool
    threads: ThreadPoolExecutor
    transaction: Transactions

    async def run(self, work: Callable[[Transactions], T]) -> T:
        # The request's context (its trace, its payment) goes with the work into the thread.
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(
            self.threads, context.run, work, self.transaction
        )

    def close(self) -> None:
        self.threads.shutdown(wait=True)
        self.pool.close()


class Api:
    """Status reads run on the event loop with their own async pool: they never queue behind
    creates waiting for their commit, and never hop threads."""

    def __init__(
        self,
        writes: DbLane,
        reads: AsyncConnectionPool,
        ctx: Context,
        tokens: dict[str, str],
        changes: ChangeFeed | None = None,
    ) -> None:
        self._writes = writes
        self._reads = reads
        # a status read may wait for the payment to change (``backbone.changes``): the API's
        # LISTEN on migration 0004's notifications; None: reads answer at once (304 or 200)
        self._changes = changes
        self._ctx = ctx
        self._tokens = tokens

    # -- routes ------------------------------------------------------------------------------------

    async def create(self, request: web.Request) -> web.StreamResponse:
        limit = self._ctx.amount_limit
        return await self._money_call(request, lambda body: parse_create(body, limit=limit), tag_created=True)

    async def capture(self, request: web.Request) -> web.StreamResponse:
        return await self._money_call(
            request,
            lambda body: parse_capture(request.match_info["payment_id"], body, limit=self._ctx.amount_limit),
        )

    async def cancel(self, request: web.Request) -> web.StreamResponse:
        return await self._money_call(
            request, lambda body: parse_cancel(request.match_info["payment_id"], body)
        )

    async def refund(self, request: web.Request) -> web.StreamResponse:
        return await self._money_call(
            request,
            lambda body: parse_refund(request.match_info["payment_id"], body, limit=self._ctx.amount_limit),
        )

    async def get(self, request: web.Request) -> web.StreamResponse:
        merchant_id = self._merchant(request)
        if merchant_id is None:
            return _unauthenticated()
        payment_id = request.match_info["payment_id"]
        if not valid_payment_id(payment_id):
            return _error(404, "payment_not_found", "no such payment")

        async def read() -> web.Response:
            async with self._reads.connection() as conn:
                state = await load_state_async(conn, payment_id, merchant_id=merchant_id)
            if state is None:
                return _error(404, "payment_not_found", "no such payment")
            return _json(200, {"payment": payment_view(state)})

        # ETag, If-None-Match (304) and Prefer: wait (a client waits for the change, not polls)
        return await conditional_read(request, read, feed=self._changes, key=payment_id)

    async def find(self, request: web.Request) -> web.StreamResponse:
        """``GET /payments?provider_payment_id=pi_…``: the merchant's payments of one PSP reference
        (an operator pastes the PSP's id): ``{"payments": [...]}``, empty when none is the
        merchant's. A missing, unknown or malformed parameter is 400 and reads nothing."""
        merchant_id = self._merchant(request)
        if merchant_id is None:
            return _unauthenticated()
        unknown = sorted(set(request.query) - {"provider_payment_id"})
        reference = request.query.getall("provider_payment_id", [])
        if unknown or len(reference) != 1 or not valid_provider_payment_id(reference[0]):
            return _error(
                400,
                "invalid_query",
                "search with one provider_payment_id (the PSP's payment id: letters, digits, _ -, 1-255)",
            )
        async with self._reads.connection() as conn:
            found = await find_by_provider_payment_async(
                conn, sorted(PROVIDERS), reference[0], merchant_id=merchant_id
            )
        return _json(200, {"payments": [payment_view(state) for state in found]})

    async def get_payout(self, request: web.Request) -> web.StreamResponse:
        """A payout, for its merchant only (another merchant's is 404, as a payment's)."""
        merchant_id = self._merchant(request)
        if merchant_id is None:
            return _unauthenticated()
        withdrawal_id = request.match_info["withdrawal_id"]
        if not valid_payment_id(withdrawal_id):
            return _error(404, "payout_not_found", "no such payout")
        async with self._reads.connection() as conn:
            state = await load_payout_async(conn, withdrawal_id, merchant_id=merchant_id)
        if state is None:
            return _error(404, "payout_not_found", "no such payout")
        return _json(200, {"payout": payout_view(state)})

    # -- the shared path of money-moving calls ---------------------------------------------------

    async def _money_call(
        self,
        request: web.Request,
        parse: Callable[[object], PaymentRequest | Rejection],
        *,
        tag_created: bool = False,
    ) -> web.StreamResponse:
        merchant_id = self._merchant(request)
        if merchant_id is None:
            return _unauthenticated()
        payment_id = request.match_info.get("payment_id")
        if payment_id is not None and not valid_payment_id(payment_id):
            return _error(404, "payment_not_found", "no such payment")
        body = json_body(request)  # read, bounded and screened by backbone.http's guard
        parsed = parse({} if body is None else body)
        key = request.headers.get("Idempotency-Key")
        problem = parsed if isinstance(parsed, Rejection) else check_idempotency_key(key)
        if problem is not None:
            return _reply(rejection_reply(problem))
        assert key is not None and not isinstance(parsed, Rejection)
        reply = await self._writes.run(lambda tx: self._handle(tx, merchant_id, key, parsed))
        if reply.replayed:
            metrics.IDEMPOTENT_REPLAYS.labels(request.method + " " + _route(request)).inc()
        response = _reply(reply)
        if tag_created and reply.status == 201 and not reply.replayed:
            # a new payment's body is ``{"payment": view}``, the status read's own representation: its
            # tag lets the client's first read wait for a change (``If-None-Match`` + ``Prefer: wait``).
            # A replay carries none: the payment may have moved on since its first answer.
            response.headers["ETag"] = read_tag(reply.body)
        return response

    def _handle(
        self, transaction: Transactions, merchant_id: str, key: str, request: PaymentRequest
    ) -> Reply:
        with transaction() as store:
            return handle(store, self._ctx, merchant_id, key, request)

    def _merchant(self, request: web.Request) -> str | None:
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        return self._tokens.get(token.strip()) if scheme.lower() == "bearer" else None


def _unauthenticated() -> web.Response:
    body = error_body("unauthenticated", "send Authorization: Bearer <token>")
    return _json(401, body, {"WWW-Authenticate": "Bearer"})


def _reply(reply: Reply) -> web.Response:
    headers = {"Idempotent-Replayed": "true"} if reply.replayed else None
    return _json(reply.status, reply.body, headers)


def _route(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


def _observing(database: Dependency | None) -> Middleware:
    @web.middleware
    async def observe(request: web.Request, handler: Handler) -> web.StreamResponse:
        """Metrics per route with the answer's status: outages and defects are mapped here (as
        ``backbone.http.errors`` would) so that they are counted with their route."""
        route = _route(request)
        with metrics.HTTP_SECONDS.labels(route).time():
            try:
                response = await handler(request)
            except web.HTTPException as exc:  # unmatched route (404), wrong method (405)
                code = "not_found" if exc.status == 404 else "http_error"
                response = _error(exc.status, code, exc.reason)
            except Contention:
                response = _error(503, "busy", "the payment is changing quickly; retry with the same key")
                response.headers["Retry-After"] = "1"
            except Exception as exc:
                if not is_infrastructure_error(exc):
                    log.exception("http.internal_error", route=route)
                    response = _error(500, "internal_error", "internal error")
                else:
                    if database is not None:
                        database.failed(exc)
                    response = unavailable()
        metrics.HTTP_REQUESTS.labels(route, str(response.status)).inc()
        return response

    return observe


def build_app(
    api: Api,
    health: Health,
    body_max_bytes: int,
    database: Dependency | None = None,
    operator_routes: Sequence[web.RouteDef] = (),
) -> web.Application:
    """The API; ``operator_routes``: the consumer's dead letters for operators (``backbone.consumer.
    dlq_http``), when an operators file is configured."""
    app = service_app(client_max_size=body_max_bytes, middlewares=[_observing(database)], database=database)
    app.add_routes(
        [
            web.post("/payments", api.create),
            web.get("/payments", api.find),
            web.post("/payments/{payment_id}/capture", api.capture),
            web.post("/payments/{payment_id}/cancel", api.cancel),
            web.post("/payments/{payment_id}/refunds", api.refund),
            web.get("/payments/{payment_id}", api.get),
            web.get("/payouts/{withdrawal_id}", api.get_payout),
            *operator_routes,
            *aiohttp_routes(health),
        ]
    )
    return app
