"""The read-only reports: what no resolver could settle, the reconciliation runs, and the console's
own audit of every act and refusal. Nothing here acts; a service that does not answer is said on the
page, and a bad filter is a 400 with the reason.

    GET  /unknowns                                               view
    GET  /runs?date=                                             view
    GET  /audit?operator=&target=                                view
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

from aiohttp import web

from ops_console.application.ports import ServiceError, Session
from ops_console.domain import display
from ops_console.domain.permissions import Permission
from ops_console.entrypoints import forms
from ops_console.entrypoints.forms import FormError
from ops_console.entrypoints.pages import SESSION, Pages, needs, page

# layer 1 (ADR 0006): what a service's resolver could not settle (UNKNOWN operations and credits)
UNKNOWN_CLASSES: Final = ("stale_operation", "stale_mt5_operation", "needs_attention")
AUDIT_FILTER_CHARS_MAX: Final = 200


class ReportPages(Pages):
    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/unknowns", self.unknowns),
            web.get("/runs", self.runs),
            web.get("/audit", self.audit),
        ]

    @needs(Permission.VIEW)
    async def unknowns(self, request: web.Request) -> web.StreamResponse:
        """Operations and credits no resolver could settle (UNKNOWN, a conflict), oldest first: the
        reconciler's layer-1 cases that are not resolved, with how long each has been waiting."""
        session: Session = request[SESSION]
        rows: list[dict[str, Any]] = []
        error = ""
        try:
            for klass in UNKNOWN_CLASSES:
                for status in ("open", "acknowledged"):
                    query = {"class": klass, "status": status, "limit": "200"}
                    rows += (await self._parts.reconciler.get(session.operator, "/v1/cases", query))["cases"]
        except ServiceError as exc:
            error = exc.said()
        # the reconciler answers for the operator's merchants; a page never relies on one place
        rows = [row for row in rows if session.operator.sees(row.get("merchant_id"))]
        now = datetime.now(UTC)
        for row in rows:
            opened = display.as_datetime(row.get("opened_at"))
            row["age"] = display.age(now - opened) if opened else ""
        rows.sort(key=lambda r: str(r.get("opened_at", "")))
        return page(request, "unknowns.html", {"rows": rows, "error": error})

    @needs(Permission.VIEW)
    async def runs(self, request: web.Request) -> web.StreamResponse:
        session: Session = request[SESSION]
        day, error, rows = request.query.get("date", ""), "", []
        try:
            query = {"date": forms.day(day)} if day else {}
            rows = (await self._parts.reconciler.get(session.operator, "/v1/runs", query))["runs"]
        except FormError as exc:
            error = str(exc)
        except ServiceError as exc:
            error = exc.said()
        context = {"runs": rows, "day": day, "error": error}
        return page(request, "runs.html", context, 400 if error.startswith("date") else 200)

    @needs(Permission.VIEW)
    async def audit(self, request: web.Request) -> web.StreamResponse:
        operator = request.query.get("operator") or None
        target = request.query.get("target") or None
        for value in (operator, target):
            if value is not None and len(value) > AUDIT_FILTER_CHARS_MAX:
                why = f"operator and target: up to {AUDIT_FILTER_CHARS_MAX} characters"
                return page(request, "refused.html", {"why": why}, 400)
        entries = await self._parts.store.audit_entries(operator=operator, target=target, limit=200)
        context = {"entries": entries, "operator": operator or "", "target": target or ""}
        return page(request, "audit.html", context)
