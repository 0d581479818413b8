"""The HTTP API (aiohttp): account mapping (admin), deposit intents (server callers), credit status;
for operators (``backbone.tokens``): a login's deposits, withdrawals, dead letters.

Callers authenticate with bearer tokens from settings; a merchant sees only its own intents and
credits (404 otherwise). Card data anywhere in a request is refused before any handler runs
(``backbone.http``). Bodies are size-limited, strictly typed, and carry no free-form login: a
login is accepted only as the ``mt5_login`` of an intent, checked against the mapping. Database
work runs in a worker thread so the event loop never blocks.
"""

from __future__ import annotations

import asyncio
import hmac
import re
from collections.abc import Awaitable, Callable
from decimal import Decimal
from pathlib import Path
from typing import Any, Final, assert_never

from aiohttp import web
from backbone.bodies import json_body
from backbone.changes import ChangeFeed, conditional_read, read_tag
from backbone.consumer import dlq_http
from backbone.consumer.dlq import ReplayContext
from backbone.consumer.messages import per_event
from backbone.health import Health, aiohttp_routes
from backbone.http import service_app, watch
from backbone.kafka.topics import TopicCatalogue
from backbone.logs import configure_logging, get_logger
from backbone.money import AmountRefused, currency_exponent, request_amount
from backbone.outage import Dependency
from backbone.outbox.writer import OutboxWriter
from backbone.postgres import make_async_pool, make_pool
from backbone.settings import load_settings_or_exit
from backbone.tokens import Caller, Tokens
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from mt5_credit import bootstrap
from mt5_credit.adapters import pg_reads
from mt5_credit.adapters.mt5 import GatewayMt5
from mt5_credit.adapters.pg_withdrawals import Accepted, DeskConfig, PgWithdrawalDesk, TradeStatePort
from mt5_credit.adapters.postgres_store import PgCreditStore
from mt5_credit.application.intake import Intake
from mt5_credit.application.intents import Created, IntentRefused, IntentRequest, create_intent
from mt5_credit.domain.intake import Account
from mt5_credit.domain.withdrawals import Refusal, WithdrawalRequest, WithdrawalStatus
from mt5_credit.settings import SERVICE_NAME, HttpSettings

log = get_logger("mt5_credit.http")
_KEY_RE: Final = re.compile(r"^[A-Za-z0-9_.:-]{8,128}$")
_ID_RE: Final = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
_INT_MAX: Final = 2**63 - 1
POOL_TIMEOUT_S: Final = 5.0  # a request waits this long for a connection, then 503 + Retry-After

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=status)


OPERATOR_PERMISSIONS: Final = (
    frozenset({"deposits:view", "withdrawals:view", "withdrawals:prepare", "withdrawals:approve"})
    | dlq_http.PERMISSIONS
)
_WID_RE: Final = re.compile(r"^wd_[0-9a-f]{32}$")
_TOKEN_RE: Final = re.compile(r"^[A-Za-z0-9_]{3,128}$")
_DIGEST_RE: Final = re.compile(r"^[0-9a-f]{64}$")
LIST_LIMIT_MAX: Final = 500
CHANGES_CHANNEL: Final = "mt5_credit_intents"  # migration 0007


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
        self._tokens = _parse_tokens(settings.api_tokens.reveal())
        self._admin = settings.admin_token.reveal()
        self._operators = (
            Tokens.load(Path(settings.operators_file), OPERATOR_PERMISSIONS)
            if settings.operators_file
            else None
        )
        self._mt5 = mt5
        self._outbox = outbox
        self._desk_config = DeskConfig(
            settings.withdrawal_approval_above_minor, Decimal(settings.withdrawal_margin_level_floor_pct)
        )

    def app(self) -> web.Application:
        app = service_app(client_max_size=self._settings.body_bytes_max, database=self._database)
        app.add_routes(
            [
                web.put("/accounts/{login}", self.put_account),
                web.post("/deposit-intents", self.post_intent),
                web.get("/deposit-intents/{ref}", self.get_intent),
                web.get("/credits/{credit_id}", self.get_credit),
                web.get("/v1/deposits", self.deposits_on_login),
                web.post("/v1/withdrawals", self.post_withdrawal),
                web.get("/v1/withdrawals", self.list_withdrawals),
                web.get("/v1/withdrawals/{wid}", self.get_withdrawal),
                web.post("/v1/withdrawals/{wid}/prepare", self.prepare_withdrawal),
                web.post("/v1/withdrawals/{wid}/approve", self.approve_withdrawal),
                web.post("/v1/withdrawals/{wid}/reject", self.reject_withdrawal),
                *aiohttp_routes(self._health),
            ]
        )
        if self._operators is not None:  # operators (the console) also see the consumer's dead letters
            source = dlq_http.DeadLetterSource(
                self._settings.consumer_name,
                self._settings.database_url.reveal(),
                self._replay,
            )
            app.add_routes(dlq_http.dead_letter_routes(self._operators, [source], service=SERVICE_NAME))
        return app

    def _replay(self) -> ReplayContext:
        """The consumer's own handler (``entrypoints.consumer.build``), for a dead letter's replay."""
        avro = bootstrap.codec()
        intake = Intake(self._rates, bootstrap.store_for)
        name = self._settings.consumer_name
        return ReplayContext(
            name, per_event(intake.handle), avro, TopicCatalogue.default(), bootstrap.outbox_writer(avro)
        )

    def _merchant(self, request: web.Request) -> str | None:
        token = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        for known, merchant in self._tokens:
            if hmac.compare_digest(token.encode(), known.encode()):
                return merchant
        return None

    def _amount(self, body: dict[str, Any]) -> int | web.Response:
        """The request's amount: an integer within the ceiling (``backbone.amounts``), or its 400."""
        amount = request_amount(body.get("amount_minor"), body.get("currency"), self._settings.amount_limit)
        match amount:
            case int():
                return amount
            case AmountRefused(code="amount_too_large", message=message):
                return _error(400, "amount_too_large", message)
            case AmountRefused(message=message):
                return _error(400, "invalid_amount", message)

    async def _json(self, request: web.Request) -> dict[str, Any] | web.Response:
        body = json_body(request)  # read, bounded and screened by backbone.http's guard
        if not isinstance(body, dict):
            return _error(400, "malformed_json", "body must be a JSON object")
        return body

    async def put_account(self, request: web.Request) -> web.Response:
        token = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(token.encode(), self._admin.encode()):
            return _error(401, "unauthorized", "admin token required")
        body = await self._json(request)
        if isinstance(body, web.Response):
            return body
        try:
            login = _positive_int(request.match_info["login"])
            account = Account(
                mt5_login=login,
                customer_id=_text(body, "customer_id"),
                currency=_currency(body, "currency"),
                enabled=_bool(body, "enabled"),
            )
        except ValueError as exc:
            return _error(400, "invalid_request", str(exc))
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
        merchant = self._merchant(request)
        if merchant is None:
            return _error(401, "unauthorized", "bearer token required")
        key = request.headers.get("Idempotency-Key", "")
        if not _KEY_RE.match(key):
            return _error(
                400, "idempotency_key_required", "Idempotency-Key header (8-128 safe chars) required"
            )
        body = await self._json(request)
        if isinstance(body, web.Response):
            return body
        unknown = set(body) - {"customer_id", "mt5_login", "amount_minor", "currency"}
        if unknown:
            return _error(400, "unknown_fields", f"unknown fields: {sorted(unknown)}")
        amount = self._amount(body)
        if isinstance(amount, web.Response):
            return amount
        try:
            req = IntentRequest(
                merchant_id=merchant,
                customer_id=_text(body, "customer_id"),
                mt5_login=_positive_int(body.get("mt5_login")),
                amount_minor=amount,
                currency=_currency(body, "currency"),
            )
        except ValueError as exc:
            return _error(400, "invalid_request", str(exc))
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
                return _error(status, code, message)
            case _:
                assert_never(result)

    async def get_intent(self, request: web.Request) -> web.Response:
        merchant = self._merchant(request)
        if merchant is None:
            return _error(401, "unauthorized", "bearer token required")
        ref = request.match_info["ref"]
        if not _ID_RE.match(ref):
            return _error(404, "not_found", "no such deposit intent")

        async def read() -> web.Response:
            if self._reads is not None:
                async with self._reads.connection() as conn:
                    found = await pg_reads.intent_view_async(conn, ref, merchant)
            else:
                found = await asyncio.to_thread(
                    self._with_conn, lambda store: pg_reads.intent_view(store, ref, merchant)
                )
            if found is None:
                return _error(404, "not_found", "no such deposit intent")
            return web.json_response(found)

        # ETag, If-None-Match (304) and Prefer: wait (the broker waits for its credit, not polls)
        return await conditional_read(request, read, feed=self._changes, key=ref)

    async def get_credit(self, request: web.Request) -> web.Response:
        merchant = self._merchant(request)
        if merchant is None:
            return _error(401, "unauthorized", "bearer token required")
        try:
            credit_id = _positive_int(request.match_info["credit_id"])
        except ValueError:
            return _error(404, "not_found", "no such credit")
        found = await asyncio.to_thread(
            self._with_conn, lambda store: pg_reads.credit_view(store.conn, credit_id, merchant)
        )
        if found is None:
            return _error(404, "not_found", "no such credit")
        return web.json_response(found)

    async def deposits_on_login(self, request: web.Request) -> web.Response:
        """``GET /v1/deposits?mt5_login=N[&limit=]`` (operators, ``deposits:view``): the newest
        deposits on one login with their credit rows, of the operator's merchants only."""
        caller = self._caller(request, "deposits:view")
        if isinstance(caller, web.Response):
            return caller
        unknown = set(request.query) - {"mt5_login", "limit"}
        try:
            if unknown:
                raise ValueError(f"unknown parameter(s): {', '.join(sorted(unknown))}")
            login = _positive_int(request.query.get("mt5_login"))
            limit = _positive_int(request.query.get("limit", "20"))
            if limit > pg_reads.ON_LOGIN_LIMIT_MAX:
                raise ValueError(f"limit is at most {pg_reads.ON_LOGIN_LIMIT_MAX}")
        except ValueError as exc:
            detail = "mt5_login must be a positive integer (the MT5 account number), limit 1-100"
            return _error(400, "invalid_request", f"{detail}: {exc}")
        rows = await asyncio.to_thread(
            self._with_conn,
            lambda store: pg_reads.deposits_on_login(store.conn, login, caller.merchants, limit),
        )
        return web.json_response({"mt5_login": login, "deposits": rows})

    # -- withdrawals (docs/adr/0008) -----------------------------------------------------------------

    def _caller(self, request: web.Request, permission: str) -> Caller | web.Response:
        """The operator calling (a person's token, or the console acting for one), or the refusal."""
        if self._operators is None:
            return _error(401, "unauthorized", "no operators are configured (MT5_CREDIT_OPERATORS_FILE)")
        caller = self._operators.authenticate(request.headers)
        if caller is None:
            return _error(401, "unauthorized", "operator token required")
        if permission not in caller.permissions:
            return _error(403, "forbidden", f"operator {caller.principal} lacks {permission}")
        return caller

    def _desk(self, work: Callable[[PgWithdrawalDesk], Any]) -> Any:
        if self._mt5 is None:
            raise RuntimeError("the API was started without an MT5 connection")
        with self._pool.connection() as conn:
            return work(PgWithdrawalDesk(conn, self._outbox, self._mt5, self._desk_config))

    async def post_withdrawal(self, request: web.Request) -> web.Response:  # noqa: PLR0911 - one per refusal
        merchant = self._merchant(request)
        if merchant is None:
            return _error(401, "unauthorized", "valid bearer token required")
        key = request.headers.get("Idempotency-Key", "")
        if not _KEY_RE.match(key):
            return _error(400, "invalid_idempotency_key", "Idempotency-Key header (8-128 chars) is required")
        body = await self._json(request)
        if isinstance(body, web.Response):
            return body
        unknown = set(body) - {"customer_id", "mt5_login", "amount_minor", "currency", "destination_token"}
        if unknown:
            return _error(400, "invalid_request", f"unknown field(s): {', '.join(sorted(unknown))}")
        amount = self._amount(body)
        if isinstance(amount, web.Response):
            return amount
        try:
            req = WithdrawalRequest(
                merchant_id=merchant,
                customer_id=_text(body, "customer_id"),
                mt5_login=_positive_int(body.get("mt5_login")),
                amount_minor=amount,
                currency=_currency(body, "currency"),
                destination_token=_token(body, "destination_token"),
            )
        except ValueError as exc:
            return _error(400, "invalid_request", str(exc))
        result = await asyncio.to_thread(self._desk, lambda desk: desk.request(req, key))
        match result:
            case Accepted(view=view, replayed=replayed):
                log.info("withdrawal_requested", withdrawal_id=view["withdrawal_id"], replayed=replayed)
                return web.json_response(view, status=200 if replayed else 201)
            case Refusal(status=status, code=code, message=message):
                log.info("withdrawal_refused", code=code, mt5_login=req.mt5_login)
                return _error(status, code, message)
            case _:
                assert_never(result)

    async def get_withdrawal(self, request: web.Request) -> web.Response:
        wid = request.match_info["wid"]
        if not _WID_RE.match(wid):
            return _error(404, "not_found", "no such withdrawal")
        merchant = self._merchant(request)
        caller: Caller | None = None
        if merchant is None:  # not a server caller: an operator with view permission
            operator = self._caller(request, "withdrawals:view")
            if isinstance(operator, web.Response):
                return operator
            caller = operator
        view = await asyncio.to_thread(self._desk, lambda desk: desk.view(wid, merchant))
        if view is None or (caller is not None and not caller.sees(view["merchant_id"])):
            return _error(404, "not_found", "no such withdrawal")  # another merchant's: as if unknown
        return web.json_response(view)

    async def list_withdrawals(self, request: web.Request) -> web.Response:
        caller = self._caller(request, "withdrawals:view")
        if isinstance(caller, web.Response):
            return caller
        unknown = set(request.query) - {"status", "limit"}
        if unknown:
            return _error(400, "invalid_request", f"unknown parameter(s): {', '.join(sorted(unknown))}")
        try:
            raw = request.query.get("status")
            status = None if raw is None else WithdrawalStatus(raw)
            limit = _positive_int(request.query.get("limit", "100"))
        except ValueError:
            return _error(
                400, "invalid_request", "status must be a withdrawal status, limit a positive integer"
            )
        if limit > LIST_LIMIT_MAX:
            return _error(400, "invalid_request", f"limit is at most {LIST_LIMIT_MAX}")
        rows = await asyncio.to_thread(self._desk, lambda desk: desk.list(status, limit, caller.merchants))
        return web.json_response({"withdrawals": rows})

    async def _operator_act(  # noqa: PLR0911 - one per refusal
        self,
        request: web.Request,
        permission: str,
        act: Callable[[PgWithdrawalDesk, str, str, dict[str, Any]], Any],
    ) -> web.Response:
        caller = self._caller(request, permission)
        if isinstance(caller, web.Response):
            return caller
        who = caller.principal
        wid = request.match_info["wid"]
        if not _WID_RE.match(wid):
            return _error(404, "not_found", "no such withdrawal")
        owner = await asyncio.to_thread(self._desk, lambda desk: desk.merchant_of(wid))
        if owner is None or not caller.sees(owner):  # another merchant's: as if unknown, nothing done
            return _error(404, "not_found", "no such withdrawal")
        body = await self._json(request)
        if isinstance(body, web.Response):
            return body
        reason = body.get("reason")
        if not isinstance(reason, str) or not 1 <= len(reason.strip()) <= 500:
            return _error(400, "invalid_request", "reason (1-500 characters) is required: every act says why")
        try:
            result = await asyncio.to_thread(self._desk, lambda desk: act(desk, wid, who, body))
        except ValueError as exc:
            return _error(400, "invalid_request", str(exc))
        if isinstance(result, Refusal):
            log.warning("withdrawal_act_refused", withdrawal_id=wid, operator=who, code=result.code)
            return _error(result.status, result.code, result.message)
        log.info("withdrawal_act", withdrawal_id=wid, operator=who, permission=permission)
        return web.json_response(result)

    async def prepare_withdrawal(self, request: web.Request) -> web.Response:
        return await self._operator_act(
            request,
            "withdrawals:prepare",
            lambda desk, wid, who, body: desk.prepare(wid, who, body["reason"]),
        )

    async def approve_withdrawal(self, request: web.Request) -> web.Response:
        def act(desk: PgWithdrawalDesk, wid: str, who: str, body: dict[str, Any]) -> Any:
            digest = body.get("command_digest")
            if not isinstance(digest, str) or not _DIGEST_RE.match(digest):
                raise ValueError("command_digest (64 hex digits, from the prepared withdrawal) is required")
            return desk.approve(wid, who, digest, body["reason"])

        return await self._operator_act(request, "withdrawals:approve", act)

    async def reject_withdrawal(self, request: web.Request) -> web.Response:
        return await self._operator_act(
            request, "withdrawals:prepare", lambda desk, wid, who, body: desk.reject(wid, who, body["reason"])
        )

    def _with_conn(self, work: Callable[[PgCreditStore], Any]) -> Any:
        with self._pool.connection() as conn:
            return work(PgCreditStore(conn))

    def _in_tx(self, work: Callable[[PgCreditStore], Any]) -> Any:
        with self._pool.connection() as conn:
            store = PgCreditStore(conn)
            with store.transaction():
                return work(store)


def _parse_tokens(spec: str) -> list[tuple[str, str]]:
    pairs = []
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        token, sep, merchant = part.partition("=")
        if not sep or len(token) < 16 or not merchant:
            raise ValueError("MT5_CREDIT_API_TOKENS: expected token=merchant_id pairs, tokens >= 16 chars")
        pairs.append((token, merchant))
    return pairs


def _text(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not _ID_RE.match(value):
        raise ValueError(f"{name} must be a short identifier")
    return value


def _token(body: dict[str, Any], name: str) -> str:
    """A payment method token (letters, digits, underscores); a card number is refused before this."""
    value = body.get(name)
    if not isinstance(value, str) or not _TOKEN_RE.match(value) or value.isdigit():
        raise ValueError(f"{name} must be a payment method token like pm_card_visa, never a card number")
    return value


def _positive_int(value: object) -> int:
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if type(value) is not int or not 0 < value <= _INT_MAX:
        raise ValueError("must be a positive integer")
    return value


def _currency(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not re.fullmatch(r"[A-Z]{3}", value):
        raise ValueError(f"{name} must be an ISO 4217 code like USD")
    try:
        currency_exponent(value)
    except ValueError as exc:
        raise ValueError(f"{name}: unknown currency {value}") from exc
    return value


def _bool(body: dict[str, Any], name: str) -> bool:
    value = body.get(name)
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false")
    return value


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
