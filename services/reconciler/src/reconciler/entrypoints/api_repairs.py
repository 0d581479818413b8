"""The reconciler API's repair routes: a case's repair proposed or amended (``repairs:propose``),
repairs listed and read (``cases:view``), one approved with the digest of the command the approver
saw, or rejected (``repairs:approve``). Maker-checker and the audit are the application's
(``application.repairs``); a repair of a case of another merchant is one that does not exist.
"""

from __future__ import annotations

import asyncio
from typing import Final

from aiohttp import web
from backbone.tokens import Caller

from reconciler.adapters.pg_repairs import PgRepairDesk
from reconciler.application import repairs as acts
from reconciler.domain.repairs import RepairStatus, RepairType
from reconciler.entrypoints.api_door import SCOPE
from reconciler.entrypoints.api_input import BadRequest, json_body, json_response, path_id, query_limit

REPAIR_STATUSES: Final = frozenset(s.value for s in RepairStatus)
_FIELDS: Final = frozenset({"repair_type", "reason", "amount_minor", "currency", "mt5_login"})


class RepairRoutes:
    """The handlers of ``/v1/cases/{case_id}/repairs`` and ``/v1/repairs…`` (``ReconApi`` guards
    and routes them)."""

    def __init__(self, desk: PgRepairDesk, page_size_max: int) -> None:
        self._desk, self._page_size_max = desk, page_size_max

    async def propose(self, request: web.Request, caller: Caller) -> web.Response:
        case_id = path_id(request, "case_id")
        body = await json_body(request)
        raw_type = body.get("repair_type")
        try:
            repair_type = RepairType(str(raw_type))
        except ValueError:
            kinds = ", ".join(t.value for t in RepairType)
            raise BadRequest(400, "bad_body", f"repair_type must be one of {kinds}") from None
        reason = body.get("reason")
        if not isinstance(reason, str):
            raise BadRequest(400, "bad_body", "reason: why, a string")
        amount, currency, login = body.get("amount_minor"), body.get("currency"), body.get("mt5_login")
        for name, value, kind in (
            ("amount_minor", amount, int),
            ("currency", currency, str),
            ("mt5_login", login, int),
        ):
            if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
                raise BadRequest(
                    400, "bad_body", f"{name} must be {'an integer' if kind is int else 'a string'}"
                )
        extra = set(body) - _FIELDS
        if extra:
            raise BadRequest(400, "bad_body", f"unknown field(s): {', '.join(sorted(extra))}")
        proposed = await asyncio.to_thread(
            lambda: acts.propose(
                self._desk,
                caller.principal,
                case_id,
                repair_type,
                reason=reason,
                amount_minor=amount,
                currency=currency,
                mt5_login=login,
                scope=request[SCOPE],
            )
        )
        return json_response(
            201 if proposed.changed else 200,
            {
                "repair_id": proposed.repair_id,
                "status": proposed.status.value,
                "command_digest": proposed.command_digest,
                "revision": proposed.revision,
                "changed": proposed.changed,
            },
        )

    async def repairs(self, request: web.Request, _: Caller) -> web.Response:
        status = request.query.get("status")
        if status is not None and status not in REPAIR_STATUSES:
            raise BadRequest(400, "bad_query", f"status must be one of {', '.join(sorted(REPAIR_STATUSES))}")
        raw_case = request.query.get("case_id")
        if raw_case is not None and (not raw_case.isdigit() or len(raw_case) > 18):
            raise BadRequest(400, "bad_query", "case_id must be a positive integer")
        rows = await asyncio.to_thread(
            lambda: self._desk.repairs_where(
                case_id=int(raw_case) if raw_case is not None else None,
                status=status,
                limit=query_limit(request.query.get("limit"), self._page_size_max),
                scope=request[SCOPE],
            )
        )
        return json_response(200, {"repairs": rows})

    async def repair(self, request: web.Request, _: Caller) -> web.Response:
        repair_id = path_id(request, "repair_id")
        found = await asyncio.to_thread(lambda: self._desk.repair(repair_id, scope=request[SCOPE]))
        if found is None:
            raise BadRequest(404, "not_found", "no such repair")
        return json_response(200, found)

    async def approve(self, request: web.Request, caller: Caller) -> web.Response:
        repair_id = path_id(request, "repair_id")
        body = await json_body(request)
        digest = body.get("command_digest")
        if not isinstance(digest, str) or len(digest) != 64:
            raise BadRequest(400, "bad_body", "command_digest: the 64-hex digest of the command you approve")
        status = await asyncio.to_thread(
            lambda: acts.approve(self._desk, caller.principal, repair_id, digest, scope=request[SCOPE])
        )
        return json_response(200, {"repair_id": repair_id, "status": status.value})

    async def reject(self, request: web.Request, caller: Caller) -> web.Response:
        repair_id = path_id(request, "repair_id")
        reason = (await json_body(request)).get("reason")
        if not isinstance(reason, str):
            raise BadRequest(400, "bad_body", "reason: why, a string")
        await asyncio.to_thread(
            lambda: acts.reject(self._desk, caller.principal, repair_id, reason, scope=request[SCOPE])
        )
        return json_response(200, {"repair_id": repair_id, "status": RepairStatus.REJECTED.value})
