"""The console's web application (aiohttp + aiohttp-jinja2, server-rendered, no scripts).

Every request passes one middleware (``_gate``), in this order: security headers on every answer;
public routes (``/login``, ``/static``, ``/healthz`` ``/readyz`` ``/metrics``) pass; any other
route needs an open session (a page redirects to ``/login``, anything else is 401); every POST must
carry the session's CSRF token (the login form its own double-submit token), else 403 and nothing
happens; the route's permission (``needs``) is checked, and a refusal is a 403 page *and* an audit
entry. Card data anywhere in a request is refused before all of it (``backbone.http``).
Templates autoescape everything; forms' bad values are shown back with the reason and change
nothing; a service's refusal is shown as the service said it.

    GET  /login, POST /login, POST /logout
    GET  /search?q=<payment id|deposit reference|PSP reference|MT5 login>   view
    POST /payments/{id}/refund     merchant amount reason nonce  refund
    GET  /cases?status=&date=&class=                             view
    GET  /cases/{id}                                             view
    POST /cases/{id}/acknowledge   note                          case_work
    POST /cases/{id}/repairs       repair_type reason [amount currency mt5_login]   repair_propose
    POST /repairs/{id}/approve     case_id command_digest        repair_approve
    POST /repairs/{id}/reject      case_id reason                repair_approve
    GET  /runs?date=                                             view
    GET  /audit?operator=&target=                                view
    GET  /deadletters?service=&include_resolved=true             view
    GET  /deadletters/{service}/{consumer}/{id}                  view
    POST /deadletters/{service}/{consumer}/{id}/replay   reason  deadletter_replay
    POST /deadletters/{service}/{consumer}/{id}/discard  reason  deadletter_replay
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Final, TypeVar
from zoneinfo import ZoneInfo

import aiohttp_jinja2
import jinja2
from aiohttp import web
from backbone.carddata import redact_document
from backbone.health import Health, aiohttp_routes
from backbone.http import service_app, watch
from backbone.logs import get_logger
from backbone.money import MoneyError, currency_exponent, from_decimal
from backbone.outage import Dependency
from backbone.postgres import is_infrastructure_error

from ops_console.adapters.pg_store import PgConsoleStore
from ops_console.application import auth, deposits
from ops_console.application.ports import OperatorApi, Payments, ServiceError, Session
from ops_console.domain import display, refunds
from ops_console.domain import search as search_query
from ops_console.domain.permissions import Permission
from ops_console.settings import SERVICE_NAME, ConsoleSettings

log = get_logger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
HERE: Final = Path(__file__).resolve().parents[1]
COOKIE: Final = "console_session"
LOGIN_CSRF: Final = "console_login_csrf"
PUBLIC: Final = ("/login", "/static/", "/healthz", "/readyz", "/metrics", "/favicon.ico")
FORM_MAX: Final = 64 * 1024
NOTE_MAX: Final = 500
REPAIR_TYPES: Final = ("close", "post_journal", "mt5_credit", "mt5_debit", "apply_provider_fact")
CASE_STATUSES: Final = ("open", "acknowledged", "resolved")
# layer 1 (ADR 0006): what a service's resolver could not settle (UNKNOWN operations and credits)
UNKNOWN_CLASSES: Final = ("stale_operation", "stale_mt5_operation", "needs_attention")
ID_RE: Final = re.compile(r"[1-9][0-9]{0,17}")
DONE: Final = {  # the only texts a redirect may ask a page to show
    "acknowledged": "Case acknowledged.",
    "proposed": "Repair proposed: a second operator must approve it.",
    "approved": "Repair approved and sent.",
    "rejected": "Repair rejected.",
    "prepared": "Withdrawal prepared: a second operator must approve it.",
    "w_approved": "Withdrawal approved: MT5 is debited first, then the payout is made.",
    "w_rejected": "Withdrawal rejected: the hold is released, nothing moved.",
    "dl_replayed": "Dead letter replayed through the consumer's handler.",
    "refunded": "Refund asked for: payment-state refunds at the PSP, then MT5 is debited the normal way.",
    "refund_replayed": "This refund had already been asked for with this form: it was not asked for again.",
    "dl_discarded": "Dead letter discarded: it was never applied.",
}
CONSUMER_RE: Final = re.compile(r"[A-Za-z0-9_.-]{1,100}")
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
PAYMENT_ID_RE: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")  # payment-state's own rule
SEND_AGAIN: Final = (
    "Send this same form again (it is the same refund, never a second) or look at the payment."
)
HEADERS: Final = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self';"
    " frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class FormError(Exception):
    """A form's value is wrong: shown next to the form, nothing sent anywhere."""


@dataclass(frozen=True)
class RefundForm:
    """A deposit's refund form as drawn: a new nonce each time, unless it is drawn again after no
    answer (then the same, so sending it again is the same refund); what was typed, and why not."""

    payment_id: str
    amount: str = ""
    reason: str = ""
    error: str = ""
    nonce: str = field(default_factory=lambda: secrets.token_hex(16))

    def failed(self, error: str, keep_nonce: object = None) -> RefundForm:
        kept = keep_nonce if isinstance(keep_nonce, str) and refunds.NONCE_RE.fullmatch(keep_nonce) else None
        return RefundForm(self.payment_id, self.amount, self.reason, error, kept or secrets.token_hex(16))


F = TypeVar("F", bound=Callable[..., Any])


def needs(permission: Permission) -> Callable[[F], F]:
    """Mark a handler with the permission it needs; the gate checks it before the handler runs."""

    def mark(handler: F) -> F:
        handler.__dict__["permission"] = permission
        return handler

    return mark


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
        self._s, self._store, self._recon, self._payments, self._health = (
            settings,
            store,
            reconciler,
            payments,
            health,
        )
        self._credit, self._ledger = credit, ledger
        self._payment_ops = payment_ops  # payment-state's operator API (its consumer's dead letters)
        self._deposits = (
            None
            if payments is None
            else deposits.DepositApis(payments, credit, ledger, gateway=gateway, reconciler=reconciler)
        )
        self._clock = display.Clock(ZoneInfo(settings.timezone), time.fromisoformat(settings.business_cutoff))
        self._database = Dependency("database", SERVICE_NAME, health, up=False)

    def app(self) -> web.Application:
        app = service_app(middlewares=[self._gate], client_max_size=FORM_MAX, database=self._database)
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
        app.add_routes(
            [
                web.get("/", self.home),
                web.get("/login", self.login_page),
                web.post("/login", self.login),
                web.post("/logout", self.logout),
                web.get("/search", self.search),
                web.post("/payments/{payment_id}/refund", self.refund),
                web.get("/cases", self.cases),
                web.get("/cases/{case_id}", self.case),
                web.post("/cases/{case_id}/acknowledge", self.acknowledge),
                web.post("/cases/{case_id}/repairs", self.propose),
                web.post("/repairs/{repair_id}/approve", self.approve),
                web.post("/repairs/{repair_id}/reject", self.reject),
                web.get("/withdrawals", self.withdrawals),
                web.get("/withdrawals/{wid}", self.withdrawal),
                web.post("/withdrawals/{wid}/prepare", self.prepare_withdrawal),
                web.post("/withdrawals/{wid}/approve", self.approve_withdrawal),
                web.post("/withdrawals/{wid}/reject", self.reject_withdrawal),
                web.get("/unknowns", self.unknowns),
                web.get("/runs", self.runs),
                web.get("/audit", self.audit),
                web.get("/deadletters", self.dead_letters),
                web.get("/deadletters/{service}/{consumer}/{id}", self.dead_letter),
                web.post("/deadletters/{service}/{consumer}/{id}/replay", self.replay_dead_letter),
                web.post("/deadletters/{service}/{consumer}/{id}/discard", self.discard_dead_letter),
            ]
        )
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
            response = self._page(
                request, "refused.html", {"why": exc.text or exc.reason, "heading": heading}, exc.status
            )
        except Exception as exc:  # a page, not JSON, for a person; the traceback goes to the log
            if is_infrastructure_error(exc) or isinstance(exc, TimeoutError):
                raise  # backbone.http maps it to 503 and marks the database down
            incident = secrets.token_hex(6)
            log.exception("console.page_failed", path=request.path, incident=incident)
            why = f"The console could not show this page (incident {incident}, in its log)."
            response = self._page(request, "refused.html", {"why": why, "heading": "Something failed"}, 500)
        for name, value in HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    async def _checked(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.startswith(PUBLIC) or request.path in PUBLIC:
            if request.method == "POST" and request.path == "/login":
                form = await request.post()
                sent = form.get("csrf")
                if not isinstance(sent, str) or not secrets.compare_digest(
                    sent.encode(), request.cookies.get(LOGIN_CSRF, "-").encode()
                ):
                    return await self._login_form(request, "The form expired: please try again.", 403)
            return await handler(request)
        session = await auth.current(self._store, request.cookies.get(COOKIE))
        if session is None:
            if request.method == "GET":
                raise web.HTTPSeeOther("/login")
            return web.Response(status=401, text="log in first")
        request["session"] = session
        if request.method == "POST":
            form = await request.post()
            sent = form.get("csrf")
            if not auth.csrf_matches(session, sent if isinstance(sent, str) else None):
                await self._audit(session, "csrf", request.path, "refused", "the form's CSRF token is wrong")
                return self._page(request, "refused.html", {"why": "The form is stale or forged."}, 403)
        permission = getattr(request.match_info.handler, "permission", None)
        if permission is not None and not session.operator.may(permission):
            await self._audit(session, "forbidden", request.path, "refused", f"needs {permission.value}")
            return self._page(
                request, "refused.html", {"why": f"You need the {permission.value} permission."}, 403
            )
        return await handler(request)

    def _page(
        self, request: web.Request, template: str, context: dict[str, Any], status: int = 200
    ) -> web.Response:
        session: Session | None = request.get("session")
        base = {"me": session.operator if session else None, "csrf": session.csrf_token if session else ""}
        return aiohttp_jinja2.render_template(template, request, {**base, **context}, status=status)

    async def _audit(
        self, session: Session, action: str, target: str, outcome: str, reason: str = "", **detail: Any
    ) -> None:
        await self._store.audit(session.operator.username, action, target, reason, outcome, detail)

    # -- login ---------------------------------------------------------------------------------------

    async def home(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPSeeOther("/cases")

    async def login_page(self, request: web.Request) -> web.StreamResponse:
        return await self._login_form(request, "", 200)

    async def _login_form(self, request: web.Request, error: str, status: int) -> web.Response:
        # one token per browser until it logs in: a second tab (or the browser's own favicon
        # request landing here) must not invalidate the form already on screen
        kept = request.cookies.get(LOGIN_CSRF, "")
        token = kept if re.fullmatch(r"[A-Za-z0-9_-]{32}", kept) else secrets.token_urlsafe(24)
        response = self._page(request, "login.html", {"error": error, "login_csrf": token}, status)
        response.set_cookie(
            LOGIN_CSRF, token, httponly=True, samesite="Strict", secure=self._s.cookie_secure, max_age=1800
        )
        return response

    async def login(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        username, password = str(form.get("username", "")), str(form.get("password", ""))
        try:
            logged = (
                await auth.login(self._store, username, password, self._s.session_ttl_s)
                if username and password
                else None
            )
        except auth.Locked:
            wait = auth.FAILURE_WINDOW_S // 60
            return await self._login_form(request, f"Too many failed logins: wait up to {wait} minutes.", 429)
        if logged is None:
            return await self._login_form(request, "Wrong name or password.", 401)
        response = web.HTTPSeeOther("/cases")
        response.set_cookie(
            COOKIE,
            logged.cookie,
            httponly=True,
            samesite="Strict",
            secure=self._s.cookie_secure,
            max_age=self._s.session_ttl_s,
        )
        response.del_cookie(LOGIN_CSRF)
        return response

    async def logout(self, request: web.Request) -> web.StreamResponse:
        session: Session = request["session"]
        await auth.logout(self._store, request.cookies[COOKIE], session.operator.username)
        response = web.HTTPSeeOther("/login")
        response.del_cookie(COOKIE)
        return response

    # -- pages ---------------------------------------------------------------------------------------

    @needs(Permission.VIEW)
    async def search(self, request: web.Request) -> web.StreamResponse:
        """One deposit (or a login's deposits) side by side, under the operator's merchants only."""
        return await self._search_page(request, request.query.get("q", "").strip())

    async def _search_page(
        self, request: web.Request, q: str, refund: RefundForm | None = None, status: int = 200
    ) -> web.StreamResponse:
        """The search's answer for ``q``; ``refund``: a refund form to show again with its error."""
        session: Session = request["session"]
        found, error = deposits.Found(), ""
        query = search_query.classify(q) if q else None
        if isinstance(query, search_query.Malformed):
            error, status = query.reason, 400
        elif query is not None and self._deposits is None:
            error = "Deposit search is not configured (CONSOLE_PAYMENT_STATE_URL)."
        elif query is not None and self._deposits is not None:
            try:
                found = await deposits.find(self._deposits, session.operator, query)
            except ServiceError as exc:
                error = f"{exc.service} did not answer: {exc.detail or exc.error}"
            if not (found.stories or found.waiting or found.notes or error):
                mine = ", ".join(session.operator.merchants) or "none"
                what = "deposit on MT5 login" if isinstance(query, search_query.Login) else "deposit named"
                error = f"No {what} {q} under your merchants ({mine})."
        for told in found.stories:  # each refund form its own nonce: posted twice, one refund
            again = refund is not None and refund.payment_id == told["payment"].get("payment_id")
            told["refund"] = refund if again else RefundForm(str(told["payment"].get("payment_id")))
        context = {
            "q": q,
            "found": found.stories,
            "waiting": found.waiting,
            "notes": found.notes,
            "error": error,
            "done": DONE.get(request.query.get("done", ""), ""),
        }
        return self._page(request, "search.html", context, status)

    @needs(Permission.REFUND)
    async def refund(self, request: web.Request) -> web.StreamResponse:
        """A refund of a deposit, at payment-state with the merchant's token, under an idempotency
        key derived from the form (``domain.refunds``): a double submit is one refund. A bad amount
        or reason is shown on the deposit's page and nothing is sent; every outcome is audited."""
        session: Session = request["session"]
        payment_id, form = _payment_id(request), await request.post()
        merchant, target = str(form.get("merchant", "")), f"payment:{payment_id}"
        payment = await self._refundable(session, merchant, payment_id, target)
        assert self._payments is not None
        sent = RefundForm(
            payment_id, str(form.get("amount", "")).strip()[:40], str(form.get("reason", ""))[:NOTE_MAX]
        )
        currency, who = str(payment["currency"]), session.operator.username
        try:
            reason = _reason(form.get("reason"), "reason")
            amount_minor = _refund_amount(sent.amount, currency, payment.get("refundable_minor"))
            key = refunds.idempotency_key(who, merchant, payment_id, str(form.get("nonce")))
        except (FormError, refunds.BadNonce) as exc:
            await self._audit(session, "refund", target, "refused", str(exc))
            return await self._search_page(request, payment_id, sent.failed(str(exc)), 400)
        body = {"amount_minor": amount_minor, "currency": currency,
                "reason": refunds.reason_for_payment_state(who, reason)}  # fmt: skip
        detail = {
            "merchant": merchant,
            "amount_minor": amount_minor,
            "currency": currency,
            "idempotency_key": key,
        }
        try:
            done = await self._payments.refund(merchant, payment_id, key, body)
        except ServiceError as exc:
            outcome = "failed" if exc.status >= 500 else "refused"
            said = f"{exc.service}: {exc.detail or exc.error}"
            await self._audit(
                session, "refund", target, outcome, f"{reason} | {said}", service_error=exc.error, **detail
            )
            if exc.status < 500:
                return await self._search_page(request, payment_id, sent.failed(_said(exc)), exc.status)
            # no answer: it may have landed; the same form (same nonce, same key) is the same refund
            unknown = (
                f"The {exc.service} did not answer ({exc.detail or exc.error}): the refund may have been"
                f" made. {SEND_AGAIN}"
            )
            return await self._search_page(request, payment_id, sent.failed(unknown, form.get("nonce")), 502)
        await self._audit(session, "refund", target, "ok", reason, replayed=done.replayed, **detail)
        done_key = "refund_replayed" if done.replayed else "refunded"
        raise web.HTTPSeeOther(f"/search?q={payment_id}&done={done_key}")

    async def _refundable(
        self, session: Session, merchant: str, payment_id: str, target: str
    ) -> dict[str, Any]:
        """The payment, asked for with its merchant's token, when the merchant is the operator's;
        else 404 (audited): another merchant's payment is never even asked for."""
        payment = None
        try:
            if self._payments is not None and merchant in session.operator.merchants:
                payment = await self._payments.payment(merchant, payment_id)
        except ServiceError as exc:
            raise web.HTTPBadGateway(text=_said(exc)) from None
        if payment is None:
            await self._audit(session, "refund", target, "refused", "no such payment under your merchants")
            raise web.HTTPNotFound(text="no such payment under your merchants")
        return payment

    @needs(Permission.VIEW)
    async def cases(self, request: web.Request) -> web.StreamResponse:
        session: Session = request["session"]
        status, day, klass = (request.query.get(k, "") for k in ("status", "date", "class"))
        error, rows = "", []
        query: dict[str, str] = {"limit": "200"}
        try:
            if status:
                if status not in CASE_STATUSES:
                    raise FormError(f"status must be one of {', '.join(CASE_STATUSES)}")
                query["status"] = status
            if day:
                query["date"] = _date(day)
            if klass:
                if re.fullmatch(r"[a-z_]{1,60}", klass) is None:
                    raise FormError("class: a case class such as internal_only")
                query["class"] = klass
            rows = (await self._recon.get(session.operator, "/v1/cases", query))["cases"]
        except FormError as exc:
            error = str(exc)
        except ServiceError as exc:
            error = _said(exc)
        context = {
            "cases": rows,
            "status": status,
            "day": day,
            "klass": klass,
            "error": error,
            "statuses": CASE_STATUSES,
        }
        return self._page(
            request, "cases.html", context, 400 if error.startswith(("status", "date", "class")) else 200
        )

    @needs(Permission.VIEW)
    async def case(self, request: web.Request) -> web.StreamResponse:
        return await self._case_page(request, _path_id(request, "case_id"))

    async def _case_page(
        self, request: web.Request, case_id: int, error: str = "", status: int = 200
    ) -> web.StreamResponse:
        session: Session = request["session"]
        try:
            found = await self._recon.get(session.operator, f"/v1/cases/{case_id}")
            audit = (await self._recon.get(session.operator, "/v1/audit", {"target": f"case:{case_id}"}))[
                "audit"
            ]
            for repair in found.get("repairs", []):
                audit += (
                    await self._recon.get(session.operator, "/v1/audit", {"target": f"repair:{repair['id']}"})
                )["audit"]
        except ServiceError as exc:
            if exc.status == 404:
                raise web.HTTPNotFound(text="no such case") from None
            return self._page(request, "refused.html", {"why": _said(exc)}, exc.status)
        audit.sort(key=lambda a: a.get("id", 0))
        context = {
            "case": found,
            "grid": display.side_by_side(found.get("evidence") or {}, self._clock),
            "audit": audit,
            "repair_types": REPAIR_TYPES,
            "error": error,
            "done": DONE.get(request.query.get("done", ""), ""),
        }
        return self._page(request, "case.html", context, status)

    @needs(Permission.VIEW)
    async def unknowns(self, request: web.Request) -> web.StreamResponse:
        """Operations and credits no resolver could settle (UNKNOWN, a conflict), oldest first: the
        reconciler's layer-1 cases that are not resolved, with how long each has been waiting."""
        session: Session = request["session"]
        rows: list[dict[str, Any]] = []
        error = ""
        try:
            for klass in UNKNOWN_CLASSES:
                for status in ("open", "acknowledged"):
                    query = {"class": klass, "status": status, "limit": "200"}
                    rows += (await self._recon.get(session.operator, "/v1/cases", query))["cases"]
        except ServiceError as exc:
            error = _said(exc)
        now = datetime.now(UTC)
        for row in rows:
            opened = display.as_datetime(row.get("opened_at"))
            row["age"] = display.age(now - opened) if opened else ""
        rows.sort(key=lambda r: str(r.get("opened_at", "")))
        return self._page(request, "unknowns.html", {"rows": rows, "error": error})

    @needs(Permission.VIEW)
    async def runs(self, request: web.Request) -> web.StreamResponse:
        session: Session = request["session"]
        day, error, rows = request.query.get("date", ""), "", []
        try:
            rows = (await self._recon.get(session.operator, "/v1/runs", {"date": _date(day)} if day else {}))[
                "runs"
            ]
        except FormError as exc:
            error = str(exc)
        except ServiceError as exc:
            error = _said(exc)
        return self._page(
            request,
            "runs.html",
            {"runs": rows, "day": day, "error": error},
            400 if error.startswith("date") else 200,
        )

    @needs(Permission.VIEW)
    async def audit(self, request: web.Request) -> web.StreamResponse:
        operator = request.query.get("operator") or None
        target = request.query.get("target") or None
        for value in (operator, target):
            if value is not None and len(value) > 200:
                return self._page(
                    request, "refused.html", {"why": "operator and target: up to 200 characters"}, 400
                )
        entries = await self._store.audit_entries(operator=operator, target=target, limit=200)
        return self._page(
            request, "audit.html", {"entries": entries, "operator": operator or "", "target": target or ""}
        )

    # -- acts ----------------------------------------------------------------------------------------

    @needs(Permission.CASE_WORK)
    async def acknowledge(self, request: web.Request) -> web.StreamResponse:
        case_id = _path_id(request, "case_id")
        form = await request.post()
        return await self._case_act(
            request,
            case_id,
            "acknowledge",
            f"case:{case_id}",
            lambda: {"note": _reason(form.get("note"), "note")},
            f"/v1/cases/{case_id}/acknowledge",
            "acknowledged",
        )

    @needs(Permission.REPAIR_PROPOSE)
    async def propose(self, request: web.Request) -> web.StreamResponse:
        case_id = _path_id(request, "case_id")
        form = await request.post()

        def body() -> dict[str, Any]:
            kind = str(form.get("repair_type", ""))
            if kind not in REPAIR_TYPES:
                raise FormError(f"repair type must be one of {', '.join(REPAIR_TYPES)}")
            out: dict[str, Any] = {"repair_type": kind, "reason": _reason(form.get("reason"), "reason")}
            amount, currency = (
                str(form.get("amount", "")).strip(),
                str(form.get("currency", "")).strip().upper(),
            )
            if amount or currency:
                out["currency"] = currency
                out["amount_minor"] = _amount_minor(amount, currency)
            login = str(form.get("mt5_login", "")).strip()
            if login:
                if re.fullmatch(r"[1-9][0-9]{0,18}", login) is None:
                    raise FormError("MT5 login: a positive whole number")
                out["mt5_login"] = int(login)
            return out

        return await self._case_act(
            request,
            case_id,
            "propose_repair",
            f"case:{case_id}",
            body,
            f"/v1/cases/{case_id}/repairs",
            "proposed",
        )

    @needs(Permission.REPAIR_APPROVE)
    async def approve(self, request: web.Request) -> web.StreamResponse:
        repair_id = _path_id(request, "repair_id")
        form = await request.post()
        case_id = _form_id(form.get("case_id"))

        def body() -> dict[str, Any]:
            digest = str(form.get("command_digest", ""))
            if re.fullmatch(r"[0-9a-f]{64}", digest) is None:
                raise FormError("the approval must name the command's digest you saw")
            return {"command_digest": digest}

        return await self._case_act(
            request,
            case_id,
            "approve_repair",
            f"repair:{repair_id}",
            body,
            f"/v1/repairs/{repair_id}/approve",
            "approved",
        )

    @needs(Permission.REPAIR_APPROVE)
    async def reject(self, request: web.Request) -> web.StreamResponse:
        repair_id = _path_id(request, "repair_id")
        form = await request.post()
        case_id = _form_id(form.get("case_id"))
        return await self._case_act(
            request,
            case_id,
            "reject_repair",
            f"repair:{repair_id}",
            lambda: {"reason": _reason(form.get("reason"), "reason")},
            f"/v1/repairs/{repair_id}/reject",
            "rejected",
        )

    # -- withdrawals (mt5-credit's maker-checker, ADR 0008) --------------------------------------------

    def _credit_api(self) -> OperatorApi:
        if self._credit is None:
            raise web.HTTPNotFound(text="withdrawals are not configured (CONSOLE_MT5_CREDIT_URL)")
        return self._credit

    @needs(Permission.VIEW)
    async def withdrawals(self, request: web.Request) -> web.StreamResponse:
        session: Session = request["session"]
        status, error, rows = request.query.get("status", ""), "", []
        if status and status not in WITHDRAWAL_STATUSES:
            error = f"status must be one of {', '.join(WITHDRAWAL_STATUSES)}"
        else:
            try:
                query = {"status": status} if status else {}
                listed = (await self._credit_api().get(session.operator, "/v1/withdrawals", query))[
                    "withdrawals"
                ]
                # mt5-credit answers for the operator's merchants; a page never relies on one place
                rows = [w for w in listed if w.get("merchant_id") in session.operator.merchants]
            except ServiceError as exc:
                error = _said(exc)
        context = {"withdrawals": rows, "status": status, "statuses": WITHDRAWAL_STATUSES, "error": error}
        return self._page(request, "withdrawals.html", context, 400 if error.startswith("status") else 200)

    @needs(Permission.VIEW)
    async def withdrawal(self, request: web.Request) -> web.StreamResponse:
        return await self._withdrawal_page(request, _wid(request))

    async def _withdrawal_page(
        self, request: web.Request, wid: str, error: str = "", status: int = 200
    ) -> web.StreamResponse:
        session: Session = request["session"]
        try:
            found = await self._credit_api().get(session.operator, f"/v1/withdrawals/{wid}")
        except ServiceError as exc:
            if exc.status == 404:
                raise web.HTTPNotFound(text="no such withdrawal") from None
            return self._page(request, "refused.html", {"why": _said(exc)}, exc.status)
        if found.get("merchant_id") not in session.operator.merchants:  # mt5-credit scoped it too
            raise web.HTTPNotFound(text="no such withdrawal")
        context = {"w": found, "error": error, "done": DONE.get(request.query.get("done", ""), "")}
        return self._page(request, "withdrawal.html", context, status)

    @needs(Permission.WITHDRAWAL_PREPARE)
    async def prepare_withdrawal(self, request: web.Request) -> web.StreamResponse:
        wid, form = _wid(request), await request.post()
        return await self._withdrawal_act(
            request,
            wid,
            "prepare_withdrawal",
            lambda: {"reason": _reason(form.get("reason"), "reason")},
            "prepare",
            "prepared",
        )

    @needs(Permission.WITHDRAWAL_APPROVE)
    async def approve_withdrawal(self, request: web.Request) -> web.StreamResponse:
        wid, form = _wid(request), await request.post()

        def body() -> dict[str, Any]:
            digest = str(form.get("command_digest", ""))
            if re.fullmatch(r"[0-9a-f]{64}", digest) is None:
                raise FormError("the approval must name the prepared withdrawal's digest you saw")
            return {"command_digest": digest, "reason": _reason(form.get("reason"), "reason")}

        return await self._withdrawal_act(request, wid, "approve_withdrawal", body, "approve", "w_approved")

    @needs(Permission.WITHDRAWAL_PREPARE)
    async def reject_withdrawal(self, request: web.Request) -> web.StreamResponse:
        wid, form = _wid(request), await request.post()
        return await self._withdrawal_act(
            request,
            wid,
            "reject_withdrawal",
            lambda: {"reason": _reason(form.get("reason"), "reason")},
            "reject",
            "w_rejected",
        )

    async def _act(
        self,
        request: web.Request,
        api: OperatorApi,
        action: str,
        target: str,
        body: Callable[[], dict[str, Any]],
        path: str,
        page: Callable[[str, int], Awaitable[web.StreamResponse]],
        done_url: str,
    ) -> web.StreamResponse:
        """Every operator act: validate the form, call the service for the operator, audit what
        happened (ok, refused by the form, refused or failed at the service) and either show the
        page again with the reason (``page(error, status)``) or redirect to ``done_url``."""
        session: Session = request["session"]
        try:
            payload = body()
        except FormError as exc:
            await self._audit(session, action, target, "refused", str(exc))
            return await page(str(exc), 400)
        reason = str(payload.get("reason") or payload.get("note") or "")
        try:
            answer = await api.post(session.operator, path, payload)
        except ServiceError as exc:
            outcome = "failed" if exc.status >= 500 else "refused"
            said = f"{exc.service}: {exc.detail or exc.error}"
            why = f"{reason} | {said}" if reason else said
            await self._audit(session, action, target, outcome, why, service_error=exc.error)
            return await page(_said(exc), exc.status if exc.status < 500 else 502)
        await self._audit(session, action, target, "ok", reason, answer=answer)
        raise web.HTTPSeeOther(done_url)

    async def _case_act(
        self,
        request: web.Request,
        case_id: int,
        action: str,
        target: str,
        body: Callable[[], dict[str, Any]],
        path: str,
        done: str,
    ) -> web.StreamResponse:
        """An act on a case or its repair, at the reconciler; the case's page shows the outcome."""
        return await self._act(
            request,
            self._recon,
            action,
            target,
            body,
            path,
            lambda error, status: self._case_page(request, case_id, error, status),
            f"/cases/{case_id}?done={done}",
        )

    async def _withdrawal_act(
        self,
        request: web.Request,
        wid: str,
        action: str,
        body: Callable[[], dict[str, Any]],
        verb: str,
        done: str,
    ) -> web.StreamResponse:
        """An act on a withdrawal, at mt5-credit; the withdrawal's page shows the outcome."""
        return await self._act(
            request,
            self._credit_api(),
            action,
            f"withdrawal:{wid}",
            body,
            f"/v1/withdrawals/{wid}/{verb}",
            lambda error, status: self._withdrawal_page(request, wid, error, status),
            f"/withdrawals/{wid}?done={done}",
        )

    # -- dead letters (each consuming service's own, backbone.consumer.dlq_http) -----------------------

    def _dead_letter_apis(self) -> dict[str, OperatorApi]:
        """The services that run consumers and that the console is configured to call."""
        apis: dict[str, OperatorApi | None] = {
            "payment-state": self._payment_ops,
            "reconciler": self._recon,
            "mt5-credit": self._credit,
            "ledger": self._ledger,
        }
        return {name: api for name, api in apis.items() if api is not None}

    def _letter_target(self, request: web.Request) -> tuple[str, OperatorApi, str, int]:
        service, consumer = request.match_info["service"], request.match_info["consumer"]
        api = self._dead_letter_apis().get(service)
        if api is None:
            raise web.HTTPNotFound(text="no such service here")
        if CONSUMER_RE.fullmatch(consumer) is None:
            raise web.HTTPBadRequest(text="a consumer name is letters, digits and _ . - only")
        return service, api, consumer, _path_id(request, "id")

    @needs(Permission.VIEW)
    async def dead_letters(self, request: web.Request) -> web.StreamResponse:
        session: Session = request["session"]
        apis = self._dead_letter_apis()
        service = request.query.get("service", "")
        include_resolved = request.query.get("include_resolved", "") == "true"
        letters: list[dict[str, Any]] = []
        notes: list[str] = []
        error = ""
        if service and service not in apis:
            error = f"service must be one of {', '.join(apis)}"
        for name, api in apis.items():
            if error or (service and name != service):
                continue
            query = {"include_resolved": "true" if include_resolved else "false", "limit": "200"}
            try:
                answer = await api.get(session.operator, "/v1/dead-letters", query)
            except ServiceError as exc:
                notes.append(_said(exc))
                continue
            letters += [{**_card_safe(row), "service": name} for row in answer.get("dead_letters", [])]
        context = {
            "letters": letters,
            "services": list(apis),
            "service": service,
            "include_resolved": include_resolved,
            "error": error,
            "notes": notes,
        }
        return self._page(request, "deadletters.html", context, 400 if error else 200)

    @needs(Permission.VIEW)
    async def dead_letter(self, request: web.Request) -> web.StreamResponse:
        service, api, consumer, letter_id = self._letter_target(request)
        return await self._dead_letter_page(request, service, api, consumer, letter_id)

    async def _dead_letter_page(
        self,
        request: web.Request,
        service: str,
        api: OperatorApi,
        consumer: str,
        letter_id: int,
        error: str = "",
        status: int = 200,
    ) -> web.StreamResponse:
        session: Session = request["session"]
        try:
            found = _card_safe(await api.get(session.operator, f"/v1/dead-letters/{consumer}/{letter_id}"))
        except ServiceError as exc:
            if exc.status == 404:
                raise web.HTTPNotFound(text="no such dead letter") from None
            return self._page(request, "refused.html", {"why": _said(exc)}, exc.status)
        payload = found.get("payload") or {}
        shown = payload.get("document") if payload.get("decoded") else payload.get("text")
        context = {
            "d": found,
            "service": service,
            "payload_text": json.dumps(shown, indent=2, sort_keys=True) if payload.get("decoded") else shown,
            "error": error,
            "done": DONE.get(request.query.get("done", ""), ""),
        }
        return self._page(request, "deadletter.html", context, status)

    @needs(Permission.DEADLETTER_REPLAY)
    async def replay_dead_letter(self, request: web.Request) -> web.StreamResponse:
        return await self._dead_letter_act(request, "replay", "dl_replayed")

    @needs(Permission.DEADLETTER_REPLAY)
    async def discard_dead_letter(self, request: web.Request) -> web.StreamResponse:
        return await self._dead_letter_act(request, "discard", "dl_discarded")

    async def _dead_letter_act(self, request: web.Request, verb: str, done: str) -> web.StreamResponse:
        """Replay or discard at the owning service, for the operator, with their reason."""
        service, api, consumer, letter_id = self._letter_target(request)
        form = await request.post()
        path = f"/deadletters/{service}/{consumer}/{letter_id}"
        return await self._act(
            request,
            api,
            f"{verb}_dead_letter",
            f"deadletter:{service}/{consumer}/{letter_id}",
            lambda: {"reason": _reason(form.get("reason"), "reason")},
            f"/v1/dead-letters/{consumer}/{letter_id}/{verb}",
            lambda error, status: self._dead_letter_page(
                request, service, api, consumer, letter_id, error, status
            ),
            f"{path}?done={done}",
        )


def _card_safe(answer: Any) -> Any:
    """A service's answer with any card number redacted once more before it is shown (the service
    already redacts; a page never relies on one place alone)."""
    return redact_document(answer)[0]


def _said(exc: ServiceError) -> str:
    return exc.said()


def _path_id(request: web.Request, name: str) -> int:
    raw = request.match_info[name]
    if ID_RE.fullmatch(raw) is None:
        raise web.HTTPBadRequest(text=f"{name} must be a positive whole number")
    return int(raw)


def _payment_id(request: web.Request) -> str:
    raw = request.match_info["payment_id"]
    if PAYMENT_ID_RE.fullmatch(raw) is None:
        raise web.HTTPBadRequest(text="a payment id is letters, digits, _ and - (1-64)")
    return raw


def _refund_amount(amount: str, currency: str, refundable: object) -> int:
    """What the operator typed, in the payment's currency, no more than payment-state says is left."""
    amount_minor = _amount_minor(amount, currency)
    left = refundable if isinstance(refundable, int) and not isinstance(refundable, bool) else 0
    if amount_minor > left:
        raise FormError(f"amount: at most {display.money(left, currency)} can be refunded")
    return amount_minor


def _wid(request: web.Request) -> str:
    raw = request.match_info["wid"]
    if WID_RE.fullmatch(raw) is None:
        raise web.HTTPBadRequest(text="a withdrawal id is wd_ and 32 hex digits")
    return raw


def _form_id(value: object) -> int:
    if not isinstance(value, str) or ID_RE.fullmatch(value) is None:
        raise web.HTTPBadRequest(text="case_id must be a positive whole number")
    return int(value)


def _date(value: str) -> str:
    try:
        return date.fromisoformat(value).isoformat()
    except ValueError:
        raise FormError("date must be YYYY-MM-DD") from None


def _reason(value: object, name: str) -> str:
    text = value.strip() if isinstance(value, str) else ""
    if not text or len(text) > NOTE_MAX:
        raise FormError(f"{name}: say why, 1-{NOTE_MAX} characters")
    return text


def _amount_minor(amount: str, currency: str) -> int:
    """``500.00`` in ``USD`` → 50000: what a person types, in the currency's own digits."""
    try:
        digits = currency_exponent(currency)
    except MoneyError:
        raise FormError(f"currency: an ISO 4217 code such as USD (got {currency[:10]!r})") from None
    try:
        value = Decimal(amount)
    except InvalidOperation:
        raise FormError("amount: a number such as 500.00") from None
    if not value.is_finite() or value <= 0:
        raise FormError("amount: more than zero")
    try:
        return from_decimal(value, digits)
    except MoneyError as exc:
        raise FormError(f"amount: {exc}") from None


def serve(app: web.Application, settings: ConsoleSettings) -> None:
    """Run until SIGTERM/SIGINT (aiohttp finishes the requests in flight)."""
    log.info("console.starting", host=settings.http_host, port=settings.http_port)
    web.run_app(app, host=settings.http_host, port=settings.http_port, access_log=None, print=None)
