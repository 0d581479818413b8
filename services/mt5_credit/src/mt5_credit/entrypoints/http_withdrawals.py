"""The HTTP API's withdrawal routes (docs/adr/0008): a server caller requests a withdrawal and reads
its own; operators list them and prepare, approve or reject one, each act with its reason.

Every route works through ``adapters.pg_withdrawals.PgWithdrawalDesk`` in a worker thread so the
event loop never blocks. A withdrawal of a merchant the caller does not see is answered as if it
did not exist (404), and nothing is done to it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any, Final, assert_never

from aiohttp import web
from backbone.logs import get_logger
from backbone.outbox.writer import OutboxWriter
from backbone.tokens import Caller
from psycopg_pool import ConnectionPool

from mt5_credit.adapters.pg_withdrawals import Accepted, DeskConfig, PgWithdrawalDesk, TradeStatePort
from mt5_credit.domain.withdrawals import Refusal, WithdrawalRequest, WithdrawalStatus
from mt5_credit.entrypoints.http_callers import Callers
from mt5_credit.entrypoints.http_input import (
    KEY_RE,
    currency,
    error_response,
    json_object,
    parse_amount,
    positive_int,
    text,
    token,
)
from mt5_credit.settings import HttpSettings

log = get_logger("mt5_credit.http")
_WID_RE: Final = re.compile(r"^wd_[0-9a-f]{32}$")
_DIGEST_RE: Final = re.compile(r"^[0-9a-f]{64}$")
LIST_LIMIT_MAX: Final = 500
_FIELDS: Final = frozenset({"customer_id", "mt5_login", "amount_minor", "currency", "destination_token"})

Act = Callable[[PgWithdrawalDesk, str, str, dict[str, Any]], Any]


class Withdrawals:
    def __init__(
        self,
        settings: HttpSettings,
        callers: Callers,
        pool: ConnectionPool,
        mt5: TradeStatePort | None,
        outbox: OutboxWriter | None,
    ) -> None:
        self._settings = settings
        self._callers = callers
        self._pool = pool
        self._mt5 = mt5
        self._outbox = outbox
        self._config = DeskConfig(
            settings.withdrawal_approval_above_minor, Decimal(settings.withdrawal_margin_level_floor_pct)
        )

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/v1/withdrawals", self.post_withdrawal),
            web.get("/v1/withdrawals", self.list_withdrawals),
            web.get("/v1/withdrawals/{wid}", self.get_withdrawal),
            web.post("/v1/withdrawals/{wid}/prepare", self.prepare_withdrawal),
            web.post("/v1/withdrawals/{wid}/approve", self.approve_withdrawal),
            web.post("/v1/withdrawals/{wid}/reject", self.reject_withdrawal),
        ]

    def _desk(self, work: Callable[[PgWithdrawalDesk], Any]) -> Any:
        if self._mt5 is None:
            raise RuntimeError("the API was started without an MT5 connection")
        with self._pool.connection() as conn:
            return work(PgWithdrawalDesk(conn, self._outbox, self._mt5, self._config))

    async def post_withdrawal(self, request: web.Request) -> web.Response:  # noqa: PLR0911 - one per refusal
        merchant = self._callers.merchant(request)
        if merchant is None:
            return error_response(401, "unauthorized", "valid bearer token required")
        key = request.headers.get("Idempotency-Key", "")
        if not KEY_RE.match(key):
            return error_response(
                400, "invalid_idempotency_key", "Idempotency-Key header (8-128 chars) is required"
            )
        body = json_object(request)
        if isinstance(body, web.Response):
            return body
        unknown = set(body) - _FIELDS
        if unknown:
            return error_response(400, "invalid_request", f"unknown field(s): {', '.join(sorted(unknown))}")
        amount = parse_amount(body, self._settings.amount_limit)
        if isinstance(amount, web.Response):
            return amount
        try:
            req = WithdrawalRequest(
                merchant_id=merchant,
                customer_id=text(body, "customer_id"),
                mt5_login=positive_int(body.get("mt5_login")),
                amount_minor=amount,
                currency=currency(body, "currency"),
                destination_token=token(body, "destination_token"),
            )
        except ValueError as exc:
            return error_response(400, "invalid_request", str(exc))
        result = await asyncio.to_thread(self._desk, lambda desk: desk.request(req, key))
        match result:
            case Accepted(view=view, replayed=replayed):
                log.info("withdrawal_requested", withdrawal_id=view["withdrawal_id"], replayed=replayed)
                return web.json_response(view, status=200 if replayed else 201)
            case Refusal(status=status, code=code, message=message):
                log.info("withdrawal_refused", code=code, mt5_login=req.mt5_login)
                return error_response(status, code, message)
            case _:
                assert_never(result)

    async def get_withdrawal(self, request: web.Request) -> web.Response:
        wid = request.match_info["wid"]
        if not _WID_RE.match(wid):
            return error_response(404, "not_found", "no such withdrawal")
        merchant = self._callers.merchant(request)
        caller: Caller | None = None
        if merchant is None:  # not a server caller: an operator with view permission
            operator = self._callers.operator(request, "withdrawals:view")
            if isinstance(operator, web.Response):
                return operator
            caller = operator
        view = await asyncio.to_thread(self._desk, lambda desk: desk.view(wid, merchant))
        if view is None or (caller is not None and not caller.sees(view["merchant_id"])):
            return error_response(404, "not_found", "no such withdrawal")  # another merchant's: as if unknown
        return web.json_response(view)

    async def list_withdrawals(self, request: web.Request) -> web.Response:
        caller = self._callers.operator(request, "withdrawals:view")
        if isinstance(caller, web.Response):
            return caller
        unknown = set(request.query) - {"status", "limit"}
        if unknown:
            return error_response(
                400, "invalid_request", f"unknown parameter(s): {', '.join(sorted(unknown))}"
            )
        try:
            raw = request.query.get("status")
            status = None if raw is None else WithdrawalStatus(raw)
            limit = positive_int(request.query.get("limit", "100"))
        except ValueError:
            return error_response(
                400, "invalid_request", "status must be a withdrawal status, limit a positive integer"
            )
        if limit > LIST_LIMIT_MAX:
            return error_response(400, "invalid_request", f"limit is at most {LIST_LIMIT_MAX}")
        rows = await asyncio.to_thread(self._desk, lambda desk: desk.list(status, limit, caller.merchants))
        return web.json_response({"withdrawals": rows})

    async def _operator_act(  # noqa: PLR0911 - one per refusal
        self, request: web.Request, permission: str, act: Act
    ) -> web.Response:
        caller = self._callers.operator(request, permission)
        if isinstance(caller, web.Response):
            return caller
        who = caller.principal
        wid = request.match_info["wid"]
        if not _WID_RE.match(wid):
            return error_response(404, "not_found", "no such withdrawal")
        owner = await asyncio.to_thread(self._desk, lambda desk: desk.merchant_of(wid))
        if owner is None or not caller.sees(owner):  # another merchant's: as if unknown, nothing done
            return error_response(404, "not_found", "no such withdrawal")
        body = json_object(request)
        if isinstance(body, web.Response):
            return body
        reason = body.get("reason")
        if not isinstance(reason, str) or not 1 <= len(reason.strip()) <= 500:
            return error_response(
                400, "invalid_request", "reason (1-500 characters) is required: every act says why"
            )
        try:
            result = await asyncio.to_thread(self._desk, lambda desk: act(desk, wid, who, body))
        except ValueError as exc:
            return error_response(400, "invalid_request", str(exc))
        if isinstance(result, Refusal):
            log.warning("withdrawal_act_refused", withdrawal_id=wid, operator=who, code=result.code)
            return error_response(result.status, result.code, result.message)
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
