"""Who calls the HTTP API: a server caller (a merchant's bearer token from settings), the admin
(the one admin token, for the account mapping), or an operator (``backbone.tokens``: a person's
token, or the console acting for one) holding a route's permission. Tokens compare in constant
time; an unknown caller is 401, an operator without the permission 403.
"""

from __future__ import annotations

import hmac
from pathlib import Path
from typing import Final

from aiohttp import web
from backbone.consumer import dlq_http
from backbone.tokens import Caller, Tokens

from mt5_credit.entrypoints.http_input import error_response
from mt5_credit.settings import HttpSettings

OPERATOR_PERMISSIONS: Final = (
    frozenset({"deposits:view", "withdrawals:view", "withdrawals:prepare", "withdrawals:approve"})
    | dlq_http.PERMISSIONS
)


class Callers:
    def __init__(self, settings: HttpSettings) -> None:
        self._tokens = parse_tokens(settings.api_tokens.reveal())
        self._admin = settings.admin_token.reveal()
        self.operators = (
            Tokens.load(Path(settings.operators_file), OPERATOR_PERMISSIONS)
            if settings.operators_file
            else None
        )

    def merchant(self, request: web.Request) -> str | None:
        """The merchant whose server calls, or None (no known bearer token)."""
        token = _bearer(request)
        for known, merchant in self._tokens:
            if hmac.compare_digest(token.encode(), known.encode()):
                return merchant
        return None

    def is_admin(self, request: web.Request) -> bool:
        return hmac.compare_digest(_bearer(request).encode(), self._admin.encode())

    def operator(self, request: web.Request, permission: str) -> Caller | web.Response:
        """The operator calling (a person's token, or the console acting for one), or the refusal."""
        if self.operators is None:
            return error_response(
                401, "unauthorized", "no operators are configured (MT5_CREDIT_OPERATORS_FILE)"
            )
        caller = self.operators.authenticate(request.headers)
        if caller is None:
            return error_response(401, "unauthorized", "operator token required")
        if permission not in caller.permissions:
            return error_response(403, "forbidden", f"operator {caller.principal} lacks {permission}")
        return caller


def _bearer(request: web.Request) -> str:
    return request.headers.get("Authorization", "").removeprefix("Bearer ").strip()


def parse_tokens(spec: str) -> list[tuple[str, str]]:
    pairs = []
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        token, sep, merchant = part.partition("=")
        if not sep or len(token) < 16 or not merchant:
            raise ValueError("MT5_CREDIT_API_TOKENS: expected token=merchant_id pairs, tokens >= 16 chars")
        pairs.append((token, merchant))
    return pairs
