"""The console's web application (aiohttp + aiohttp-jinja2, server-rendered, no scripts) and the one
gate every request passes.

The gate (``Console._gate``) checks, in this order: card data anywhere in a request is refused
before all of it (``backbone.http``, outermost); public routes (``/login``, ``/static``, ``/healthz``
``/readyz`` ``/metrics``) pass, ``POST /login`` with its double-submit token; any other route needs
an open session (a page redirects to ``/login``, anything else is 401); every POST must carry the
session's CSRF token, else 403 and nothing happens; the route's permission (``needs``) is checked,
and a refusal is a 403 page *and* an audit entry; security headers go on every answer. The pages
live by area, each in its own module, and are mounted here in one list:

    login_pages         GET /, GET|POST /login, POST /logout
    deposit_pages       /search, POST /payments/{id}/refund
    case_pages          /cases, /cases/{id}, its acts, POST /repairs/{id}/approve|reject
    withdrawal_pages    /withdrawals, /withdrawals/{wid}, its acts
    report_pages        /unknowns, /runs, /audit
    dead_letter_pages   /deadletters, /deadletters/{service}/{consumer}/{id}, replay, discard

Templates autoescape everything; forms' bad values are shown back with the reason and change
nothing; a service's refusal is shown as the service said it.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from datetime import time
from pathlib import Path
from typing import Final
from zoneinfo import ZoneInfo

import aiohttp_jinja2
import jinja2
from aiohttp import web
from backbone import bodies
from backbone.bodies import form_body
from backbone.health import Health, aiohttp_routes
from backbone.http import service_app, watch
from backbone.logs import get_logger
from backbone.outage import Dependency
from backbone.postgres import is_infrastructure_error

from ops_console.adapters.pg_store import PgConsoleStore
from ops_console.application import acts, auth
from ops_console.application.ports import OperatorApi, Payments
from ops_console.domain import display
from ops_console.entrypoints.case_pages import CasePages
from ops_console.entrypoints.dead_letter_pages import DeadLetterPages
from ops_console.entrypoints.deposit_pages import DepositPages
from ops_console.entrypoints.login_pages import COOKIE, LOGIN_CSRF, LoginPages
from ops_console.entrypoints.pages import SESSION, Parts, page
from ops_console.entrypoints.report_pages import ReportPages
from ops_console.entrypoints.withdrawal_pages import WithdrawalPages
from ops_console.settings import SERVICE_NAME, ConsoleSettings

__all__ = ["COOKIE", "Console", "serve"]

log = get_logger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
HERE: Final = Path(__file__).resolve().parents[1]
PUBLIC: Final = ("/login", "/static/", "/healthz", "/readyz", "/metrics", "/favicon.ico")
FORM_MAX: Final = 64 * 1024
HEADERS: Final = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self';"
    " frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class Console:
    def __init__(
        self,
        settings: ConsoleSettings,
        store: PgConsoleStore,
        reconciler: OperatorApi,
        payments: Payments | None,
        health: Health,
        credit: OperatorApi | None = None,
        ledger: OperatorApi | None = None,
        *,
        gateway: OperatorApi | None = None,
        payment_ops: OperatorApi | None = None,
    ) -> None:
        self._s, self._store, self._health = settings, store, health
        clock = display.Clock(ZoneInfo(settings.timezone), time.fromisoformat(settings.business_cutoff))
        parts = Parts(settings, store, clock, reconciler, payments, credit, ledger, gateway, payment_ops)
        self._login = LoginPages(parts)
        self._areas = (
            self._login,
            DepositPages(parts),
            CasePages(parts),
            WithdrawalPages(parts),
            ReportPages(parts),
            DeadLetterPages(parts),
        )
        self._clock = clock
        self._database = Dependency("database", SERVICE_NAME, health, up=False)

    def app(self) -> web.Application:
        app = service_app(
            middlewares=[self._gate],
            client_max_size=FORM_MAX,
            body_types=bodies.FORM_TYPES,
            database=self._database,
        )
        env = aiohttp_jinja2.setup(
            app,
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=jinja2.select_autoescape(default=True, default_for_string=True),
            undefined=jinja2.StrictUndefined,
        )
        env.filters["money"] = display.money
        env.filters["major"] = display.major
        env.filters["when"] = self._clock.show
        env.filters["tone"] = display.tone
        env.globals["timezone"] = self._s.timezone
        app.add_routes(aiohttp_routes(self._health))
        app.router.add_static("/static/", HERE / "static")
        app.add_routes([route for area in self._areas for route in area.routes()])
        watch(app, self._health, self._ping, self._database)
        return app

    async def _ping(self) -> None:
        await self._store.ping()

    # -- the one gate --------------------------------------------------------------------------------

    @web.middleware
    async def _gate(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            response = await self._checked(request, handler)
        except web.HTTPException as exc:
            if exc.status < 400:  # a redirect: the same headers
                for name, value in HEADERS.items():
                    exc.headers.setdefault(name, value)
                raise
            heading = {404: "Not found", 400: "Bad request"}.get(exc.status, "Refused")
            response = page(
                request, "refused.html", {"why": exc.text or exc.reason, "heading": heading}, exc.status
            )
        except Exception as exc:  # a page, not JSON, for a person; the traceback goes to the log
            if is_infrastructure_error(exc) or isinstance(exc, TimeoutError):
                raise  # backbone.http maps it to 503 and marks the database down
            incident = secrets.token_hex(6)
            log.exception("console.page_failed", path=request.path, incident=incident)
            why = f"The console could not show this page (incident {incident}, in its log)."
            response = page(request, "refused.html", {"why": why, "heading": "Something failed"}, 500)
        for name, value in HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    async def _checked(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.startswith(PUBLIC) or request.path in PUBLIC:
            if request.method == "POST" and request.path == "/login":
                form = form_body(request)
                sent = form.get("csrf")
                if not isinstance(sent, str) or not secrets.compare_digest(
                    sent.encode(), request.cookies.get(LOGIN_CSRF, "-").encode()
                ):
                    return await self._login.form(request, "The form expired: please try again.", 403)
            return await handler(request)
        session = await auth.current(self._store, request.cookies.get(COOKIE))
        if session is None:
            if request.method == "GET":
                raise web.HTTPSeeOther("/login")
            return web.Response(status=401, text="log in first")
        request[SESSION] = session
        if request.method == "POST":
            form = form_body(request)
            sent = form.get("csrf")
            if not auth.csrf_matches(session, sent if isinstance(sent, str) else None):
                why = "the form's CSRF token is wrong"
                await acts.record(self._store, session, "csrf", request.path, "refused", why)
                return page(request, "refused.html", {"why": "The form is stale or forged."}, 403)
        permission = getattr(request.match_info.handler, "permission", None)
        if permission is not None and not session.operator.may(permission):
            needed = f"needs {permission.value}"
            await acts.record(self._store, session, "forbidden", request.path, "refused", needed)
            why = f"You need the {permission.value} permission."
            return page(request, "refused.html", {"why": why}, 403)
        return await handler(request)


def serve(app: web.Application, settings: ConsoleSettings) -> None:
    """Run until SIGTERM/SIGINT (aiohttp finishes the requests in flight)."""
    log.info("console.starting", host=settings.http_host, port=settings.http_port)
    web.run_app(app, host=settings.http_host, port=settings.http_port, access_log=None, print=None)
