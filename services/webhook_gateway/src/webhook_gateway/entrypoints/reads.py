"""The gateway's read API for operators (the ops console): the receipts of one PSP payment.

    GET /v1/receipts?provider=simpsp&provider_payment_id=pi_…[&limit=]      receipts:view

Callers authenticate with ``backbone.tokens`` (a tokens file of hashes, ``GATEWAY_API_TOKENS_FILE``;
the console acts for the operator it names). A receipt is shown by provider, event id and type,
the PSP payment, the signature's result and which secret verified it, whether card data was
redacted, when it was received and the request id; never the raw body, its digest, the audit
headers or any secret. A bad query is 400 and reads nothing. Card data anywhere in the request is
refused before this (``backbone.http``).
"""

from __future__ import annotations

import re
from typing import Any, Final

from aiohttp import web
from backbone.logs import get_logger
from backbone.tokens import Tokens
from psycopg_pool import AsyncConnectionPool

from webhook_gateway.adapters.pg_reads import RECEIPTS_LIMIT_MAX, receipts_of_payment

VIEW: Final = "receipts:view"
PERMISSIONS: Final = frozenset({VIEW})
_PROVIDER_RE: Final = re.compile(r"[a-z][a-z0-9_]{0,63}")
_PAYMENT_RE: Final = re.compile(r"[A-Za-z0-9_-]{1,255}")
_PARAMS: Final = frozenset({"provider", "provider_payment_id", "limit"})
log = get_logger(__name__)


def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=status)


class ReceiptReads:
    def __init__(self, tokens: Tokens, pool: AsyncConnectionPool[Any]) -> None:
        self._tokens, self._pool = tokens, pool

    async def receipts(self, request: web.Request) -> web.Response:
        caller = self._tokens.authenticate(request.headers)
        if caller is None:
            return _error(401, "unauthorized", "a valid bearer token is required")
        if VIEW not in caller.permissions:
            log.warning("receipts.refused", principal=caller.principal, needs=VIEW)
            return _error(403, "forbidden", f"needs the {VIEW} permission")
        query = _query(request)
        if isinstance(query, web.Response):
            return query
        provider, payment, limit = query
        async with self._pool.connection() as conn:
            found = await receipts_of_payment(conn, provider, payment, limit)
        return web.json_response({"provider": provider, "provider_payment_id": payment, "receipts": found})


def _query(request: web.Request) -> tuple[str, str, int] | web.Response:
    q = request.query
    unknown = sorted(set(q) - _PARAMS)
    repeated = [name for name in _PARAMS if len(q.getall(name, [])) > 1]
    provider, payment, limit = q.get("provider", ""), q.get("provider_payment_id", ""), q.get("limit", "50")
    if (
        unknown
        or repeated
        or _PROVIDER_RE.fullmatch(provider) is None
        or _PAYMENT_RE.fullmatch(payment) is None
        or not (limit.isascii() and limit.isdigit())  # "¹" is a digit to str.isdigit, not to int()
        or not 1 <= int(limit) <= RECEIPTS_LIMIT_MAX
    ):
        return _error(
            400,
            "invalid_query",
            "provider (a provider's name), provider_payment_id (the PSP's payment id: letters, digits,"
            f" _ -) once each, limit 1-{RECEIPTS_LIMIT_MAX}; nothing else",
        )
    return provider, payment, int(limit)


def receipt_routes(tokens: Tokens, pool: AsyncConnectionPool[Any]) -> list[web.RouteDef]:
    """The routes to add to the gateway's app (``backbone.http.service_app``)."""
    return [web.get("/v1/receipts", ReceiptReads(tokens, pool).receipts)]
