"""Withdrawals at mt5-credit (ADR 0008): listed, shown and acted on under maker-checker.

mt5-credit answers for the operator's merchants only (``X-Operator-Merchants``), and each page
checks the merchant again: a page never relies on one place alone. The maker prepares (binds the
exact withdrawal) or rejects it before money moves; the checker approves the digest shown, and
mt5-credit refuses the preparer (the page says so). Every act is audited. Without
``CONSOLE_MT5_CREDIT_URL`` there are no withdrawal pages (404).

    GET  /withdrawals?status=                                     view
    GET  /withdrawals/{wid}                                       view
    POST /withdrawals/{wid}/prepare   reason                      withdrawal_prepare
    POST /withdrawals/{wid}/approve   command_digest reason       withdrawal_approve
    POST /withdrawals/{wid}/reject    reason                      withdrawal_prepare
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

from aiohttp import web
from backbone.bodies import form_body

from ops_console.application.ports import OperatorApi, ServiceError, Session
from ops_console.domain.permissions import Permission
from ops_console.entrypoints import forms
from ops_console.entrypoints.pages import SESSION, Pages, done, needs, page

WITHDRAWAL_STATUSES: Final = (
    "held",
    "prepared",
    "approved",
    "paid_out",
    "paid",
    "returning",
    "returned",
    "rejected",
    "refused",
)
WID_RE: Final = re.compile(r"wd_[0-9a-f]{32}")


class WithdrawalPages(Pages):
    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/withdrawals", self.withdrawals),
            web.get("/withdrawals/{wid}", self.withdrawal),
            web.post("/withdrawals/{wid}/prepare", self.prepare_withdrawal),
            web.post("/withdrawals/{wid}/approve", self.approve_withdrawal),
            web.post("/withdrawals/{wid}/reject", self.reject_withdrawal),
        ]

    def _credit_api(self) -> OperatorApi:
        if self._parts.credit is None:
            raise web.HTTPNotFound(text="withdrawals are not configured (CONSOLE_MT5_CREDIT_URL)")
        return self._parts.credit

    @needs(Permission.VIEW)
    async def withdrawals(self, request: web.Request) -> web.StreamResponse:
        session: Session = request[SESSION]
        status, error, rows = request.query.get("status", ""), "", []
        if status and status not in WITHDRAWAL_STATUSES:
            error = f"status must be one of {', '.join(WITHDRAWAL_STATUSES)}"
        else:
            try:
                query = {"status": status} if status else {}
                listed = await self._credit_api().get(session.operator, "/v1/withdrawals", query)
                # mt5-credit answers for the operator's merchants; a page never relies on one place
                rows = [w for w in listed["withdrawals"] if session.operator.sees(w.get("merchant_id"))]
            except ServiceError as exc:
                error = exc.said()
        context = {"withdrawals": rows, "status": status, "statuses": WITHDRAWAL_STATUSES, "error": error}
        return page(request, "withdrawals.html", context, 400 if error.startswith("status") else 200)

    @needs(Permission.VIEW)
    async def withdrawal(self, request: web.Request) -> web.StreamResponse:
        return await self._withdrawal_page(request, _wid(request))

    async def _withdrawal_page(
        self, request: web.Request, wid: str, error: str = "", status: int = 200
    ) -> web.StreamResponse:
        session: Session = request[SESSION]
        try:
            found = await self._credit_api().get(session.operator, f"/v1/withdrawals/{wid}")
        except ServiceError as exc:
            if exc.status == 404:
                raise web.HTTPNotFound(text="no such withdrawal") from None
            return page(request, "refused.html", {"why": exc.said()}, exc.status)
        if not session.operator.sees(found.get("merchant_id")):  # mt5-credit scoped it too
            raise web.HTTPNotFound(text="no such withdrawal")
        context = {"w": found, "error": error, "done": done(request)}
        return page(request, "withdrawal.html", context, status)

    @needs(Permission.WITHDRAWAL_PREPARE)
    async def prepare_withdrawal(self, request: web.Request) -> web.StreamResponse:
        wid, form = _wid(request), form_body(request)
        body = forms.reason_only(form)
        return await self._withdrawal_act(request, wid, "prepare_withdrawal", body, "prepare", "prepared")

    @needs(Permission.WITHDRAWAL_APPROVE)
    async def approve_withdrawal(self, request: web.Request) -> web.StreamResponse:
        wid, form = _wid(request), form_body(request)

        def body() -> dict[str, Any]:
            digest = forms.digest(form.get("command_digest", ""), "prepared withdrawal's")
            return {"command_digest": digest, "reason": forms.reason(form.get("reason"), "reason")}

        return await self._withdrawal_act(request, wid, "approve_withdrawal", body, "approve", "w_approved")

    @needs(Permission.WITHDRAWAL_PREPARE)
    async def reject_withdrawal(self, request: web.Request) -> web.StreamResponse:
        wid, form = _wid(request), form_body(request)
        body = forms.reason_only(form)
        return await self._withdrawal_act(request, wid, "reject_withdrawal", body, "reject", "w_rejected")

    async def _withdrawal_act(
        self,
        request: web.Request,
        wid: str,
        action: str,
        body: Callable[[], dict[str, Any]],
        verb: str,
        done_key: str,
    ) -> web.StreamResponse:
        """An act on a withdrawal, at mt5-credit; the withdrawal's page shows the outcome."""
        return await self.act(
            request,
            self._credit_api(),
            action,
            f"withdrawal:{wid}",
            body,
            f"/v1/withdrawals/{wid}/{verb}",
            lambda error, status: self._withdrawal_page(request, wid, error, status),
            f"/withdrawals/{wid}?done={done_key}",
        )


def _wid(request: web.Request) -> str:
    raw = request.match_info["wid"]
    if WID_RE.fullmatch(raw) is None:
        raise web.HTTPBadRequest(text="a withdrawal id is wd_ and 32 hex digits")
    return raw
