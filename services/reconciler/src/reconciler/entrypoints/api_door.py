"""The door every ``/v1`` route of the reconciler's API passes (``Door.guard``): who the caller is
(``backbone.tokens``: an operator's own token, or the console's acting for the operator it names),
whether they hold the route's permission, and which merchants' cases they see.

The scope (``SCOPE`` on the request, ``domain.merchants.Scope``) is the caller's merchants: the
ones the console names for its operator (``X-Operator-Merchants``; ``*`` alone is every merchant),
or every merchant for an operator's own token, which is not merchant-scoped. Every case route hands
it to the one place it reaches cases: the reads' SQL (``adapters.pg_scope``) and the acts'
``application.repairs._case``; a case of another merchant is then one that does not exist.

A request refused at the door (no valid token: 401; no permission: 403) changes nothing; a refused
write is audited with who tried what (reads are not audited).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Final

from aiohttp import web
from backbone.tokens import Caller, Tokens

from reconciler.adapters.pg_repairs import PgRepairDesk
from reconciler.domain.merchants import Scope
from reconciler.entrypoints.api_input import json_response

ANONYMOUS: Final = "(no valid token)"
SCOPE: Final = web.RequestKey("scope", Scope)  # the merchants whose cases the caller sees
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
CallerHandler = Callable[[web.Request, Caller], Awaitable[web.Response]]


class Door:
    def __init__(self, tokens: Tokens, desk: PgRepairDesk) -> None:
        self._tokens, self._desk = tokens, desk

    def guard(self, permission: str) -> Callable[[CallerHandler], Handler]:
        def wrap(handler: CallerHandler) -> Handler:
            async def guarded(request: web.Request) -> web.StreamResponse:
                caller = self._tokens.authenticate(request.headers)
                if caller is None:
                    await self.refused(request, ANONYMOUS, "unauthorized: no valid bearer token")
                    return json_response(
                        401, {"error": "unauthorized", "detail": "a valid bearer token is required"}
                    )
                if permission not in caller.permissions:
                    await self.refused(request, caller.principal, f"forbidden: needs {permission}")
                    return json_response(
                        403, {"error": "forbidden", "detail": f"needs the {permission} permission"}
                    )
                request["principal"] = caller.principal
                request[SCOPE] = Scope(caller.merchants)
                return await handler(request, caller)

            return guarded

        return wrap

    async def refused(self, request: web.Request, operator: str, reason: str) -> None:
        """A write refused at the door is an audited attempt (reads are not audited)."""
        if request.method == "GET":
            return
        target = request.path.removeprefix("/v1/")
        action = target.rsplit("/", 1)[-1]
        await asyncio.to_thread(self._desk.audit_refused, operator, action, target, reason, {})
