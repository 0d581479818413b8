"""The reconciler's case queue and repairs (ADR 0006, 0007), read and acted on for the operator.

A case's page shows its records side by side with the fields that differ marked, its repairs and
their audit. Acts go to the reconciler, which keeps maker-checker: a repair's approval names the
command digest the approver saw, and the reconciler refuses the proposer (the page says so). A bad
form value is shown on the case's page (400) and nothing is sent; every act is audited.

The reconciler answers for the operator's merchants only (a case of no merchant only for an
operator of every merchant); each page checks every case's merchant again, as the withdrawal pages
do: a case it should not have been given is not listed, and its page is 404.

    GET  /cases?status=&date=&class=                             view
    GET  /cases/{id}                                             view
    POST /cases/{id}/acknowledge   note                          case_work
    POST /cases/{id}/repairs       repair_type reason [amount currency mt5_login]   repair_propose
    POST /repairs/{id}/approve     case_id command_digest        repair_approve
    POST /repairs/{id}/reject      case_id reason                repair_approve
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final

from aiohttp import web
from backbone.bodies import form_body

from ops_console.application.ports import ServiceError, Session
from ops_console.domain import display
from ops_console.domain.permissions import Permission
from ops_console.entrypoints import forms
from ops_console.entrypoints.forms import FormError
from ops_console.entrypoints.pages import SESSION, Pages, done, needs, page

REPAIR_TYPES: Final = ("close", "post_journal", "mt5_credit", "mt5_debit", "apply_provider_fact")
CASE_STATUSES: Final = ("open", "acknowledged", "resolved")


class CasePages(Pages):
    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/cases", self.cases),
            web.get("/cases/{case_id}", self.case),
            web.post("/cases/{case_id}/acknowledge", self.acknowledge),
            web.post("/cases/{case_id}/repairs", self.propose),
            web.post("/repairs/{repair_id}/approve", self.approve),
            web.post("/repairs/{repair_id}/reject", self.reject),
        ]

    @needs(Permission.VIEW)
    async def cases(self, request: web.Request) -> web.StreamResponse:
        session: Session = request[SESSION]
        status, day, klass = (request.query.get(k, "") for k in ("status", "date", "class"))
        error, rows = "", []
        try:
            query = _case_query(status, day, klass)
            rows = (await self._parts.reconciler.get(session.operator, "/v1/cases", query))["cases"]
            rows = [row for row in rows if session.operator.sees(row.get("merchant_id"))]
        except FormError as exc:
            error = str(exc)
        except ServiceError as exc:
            error = exc.said()
        context = {
            "cases": rows,
            "status": status,
            "day": day,
            "klass": klass,
            "error": error,
            "statuses": CASE_STATUSES,
        }
        bad = error.startswith(("status", "date", "class"))
        return page(request, "cases.html", context, 400 if bad else 200)

    @needs(Permission.VIEW)
    async def case(self, request: web.Request) -> web.StreamResponse:
        return await self._case_page(request, forms.path_id(request, "case_id"))

    async def _case_page(
        self, request: web.Request, case_id: int, error: str = "", status: int = 200
    ) -> web.StreamResponse:
        session: Session = request[SESSION]
        recon = self._parts.reconciler
        try:
            found = await recon.get(session.operator, f"/v1/cases/{case_id}")
            if not session.operator.sees(found.get("merchant_id")):
                raise web.HTTPNotFound(text="no such case")
            targets = [f"case:{case_id}", *(f"repair:{r['id']}" for r in found.get("repairs", []))]
            audit = []
            for target in targets:
                audit += (await recon.get(session.operator, "/v1/audit", {"target": target}))["audit"]
        except ServiceError as exc:
            if exc.status == 404:
                raise web.HTTPNotFound(text="no such case") from None
            return page(request, "refused.html", {"why": exc.said()}, exc.status)
        audit.sort(key=lambda a: a.get("id", 0))
        context = {
            "case": found,
            "grid": display.side_by_side(found.get("evidence") or {}, self._parts.clock),
            "audit": audit,
            "repair_types": REPAIR_TYPES,
            "error": error,
            "done": done(request),
        }
        return page(request, "case.html", context, status)

    @needs(Permission.CASE_WORK)
    async def acknowledge(self, request: web.Request) -> web.StreamResponse:
        case_id, form = forms.path_id(request, "case_id"), form_body(request)
        return await self._case_act(
            request,
            case_id,
            ("acknowledge", f"case:{case_id}"),
            lambda: {"note": forms.reason(form.get("note"), "note")},
            f"/v1/cases/{case_id}/acknowledge",
            "acknowledged",
        )

    @needs(Permission.REPAIR_PROPOSE)
    async def propose(self, request: web.Request) -> web.StreamResponse:
        case_id, form = forms.path_id(request, "case_id"), form_body(request)
        return await self._case_act(
            request,
            case_id,
            ("propose_repair", f"case:{case_id}"),
            lambda: _repair(form),
            f"/v1/cases/{case_id}/repairs",
            "proposed",
        )

    @needs(Permission.REPAIR_APPROVE)
    async def approve(self, request: web.Request) -> web.StreamResponse:
        repair_id, form = forms.path_id(request, "repair_id"), form_body(request)
        return await self._case_act(
            request,
            forms.form_id(form.get("case_id")),
            ("approve_repair", f"repair:{repair_id}"),
            lambda: {"command_digest": forms.digest(form.get("command_digest", ""), "command's")},
            f"/v1/repairs/{repair_id}/approve",
            "approved",
        )

    @needs(Permission.REPAIR_APPROVE)
    async def reject(self, request: web.Request) -> web.StreamResponse:
        repair_id, form = forms.path_id(request, "repair_id"), form_body(request)
        return await self._case_act(
            request,
            forms.form_id(form.get("case_id")),
            ("reject_repair", f"repair:{repair_id}"),
            forms.reason_only(form),
            f"/v1/repairs/{repair_id}/reject",
            "rejected",
        )

    async def _case_act(
        self,
        request: web.Request,
        case_id: int,
        audited: tuple[str, str],
        body: Callable[[], dict[str, Any]],
        path: str,
        done_key: str,
    ) -> web.StreamResponse:
        """An act on a case or its repair, at the reconciler; the case's page shows the outcome.
        ``audited``: the audit entry's action and target."""
        action, target = audited
        return await self.act(
            request,
            self._parts.reconciler,
            action,
            target,
            body,
            path,
            lambda error, status: self._case_page(request, case_id, error, status),
            f"/cases/{case_id}?done={done_key}",
        )


def _case_query(status: str, day: str, klass: str) -> dict[str, str]:
    """The reconciler's ``/v1/cases`` query for the list's filters; ``FormError`` for a bad one."""
    query: dict[str, str] = {"limit": "200"}
    if status:
        if status not in CASE_STATUSES:
            raise FormError(f"status must be one of {', '.join(CASE_STATUSES)}")
        query["status"] = status
    if day:
        query["date"] = forms.day(day)
    if klass:
        if re.fullmatch(r"[a-z_]{1,60}", klass) is None:
            raise FormError("class: a case class such as internal_only")
        query["class"] = klass
    return query


def _repair(form: Mapping[str, object]) -> dict[str, Any]:
    """A proposed repair's command: its type and reason, an amount with its currency, an MT5 login."""
    kind = str(form.get("repair_type", ""))
    if kind not in REPAIR_TYPES:
        raise FormError(f"repair type must be one of {', '.join(REPAIR_TYPES)}")
    out: dict[str, Any] = {"repair_type": kind, "reason": forms.reason(form.get("reason"), "reason")}
    amount, currency = str(form.get("amount", "")).strip(), str(form.get("currency", "")).strip().upper()
    if amount or currency:
        out["currency"] = currency
        out["amount_minor"] = forms.amount_minor(amount, currency)
    login = str(form.get("mt5_login", "")).strip()
    if login:
        if re.fullmatch(r"[1-9][0-9]{0,18}", login) is None:
            raise FormError("MT5 login: a positive whole number")
        out["mt5_login"] = int(login)
    return out
