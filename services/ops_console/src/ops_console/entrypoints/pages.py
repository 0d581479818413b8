"""What every page and form of the console shares, below the one gate (``web.py``).

``Parts`` are the ports a page calls. ``Pages`` is the base of each area's pages (login, deposits,
cases, withdrawals, reports, dead letters): it makes an operator's act at a service through
``application.acts`` (audited whatever happens) and then shows the page again with the reason, or
redirects (303) to one of the fixed done-messages (``DONE``: a redirect can never make a page show
text of its own). ``page`` draws a template with the operator and their CSRF token; ``needs`` marks
a handler with the permission the gate checks before the handler runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar, assert_never

import aiohttp_jinja2
from aiohttp import web

from ops_console.application import acts
from ops_console.application.ports import ConsoleStore, OperatorApi, Payments, Session
from ops_console.domain import display
from ops_console.domain.permissions import Permission
from ops_console.entrypoints.forms import FormError
from ops_console.settings import ConsoleSettings

# The logged-in session, set by the console's middleware on every request past the login pages.
SESSION: Final = web.RequestKey("session", Session)

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

F = TypeVar("F", bound=Callable[..., Any])
ShowAgain = Callable[[str, int], Awaitable[web.StreamResponse]]  # the form's page: (error, status)


def needs(permission: Permission) -> Callable[[F], F]:
    """Mark a handler with the permission it needs; the gate checks it before the handler runs."""

    def mark(handler: F) -> F:
        handler.__dict__["permission"] = permission
        return handler

    return mark


def page(request: web.Request, template: str, context: dict[str, Any], status: int = 200) -> web.Response:
    """``template`` drawn for the session's operator (none on the login page) with their CSRF token."""
    session: Session | None = request.get(SESSION)
    base = {"me": session.operator if session else None, "csrf": session.csrf_token if session else ""}
    return aiohttp_jinja2.render_template(template, request, {**base, **context}, status=status)


def done(request: web.Request) -> str:
    """The done-message the redirect asked for: one of ours, or none."""
    return DONE.get(request.query.get("done", ""), "")


@dataclass(frozen=True)
class Parts:
    """The console's ports: its own store and the services' APIs (an unset one is not configured)."""

    settings: ConsoleSettings
    store: ConsoleStore
    clock: display.Clock
    reconciler: OperatorApi
    payments: Payments | None = None
    credit: OperatorApi | None = None
    ledger: OperatorApi | None = None
    gateway: OperatorApi | None = None
    payment_ops: OperatorApi | None = None  # payment-state's operator API (its consumer's dead letters)


class Pages:
    """The base of one area's pages: its handlers are methods, listed by ``routes``."""

    def __init__(self, parts: Parts) -> None:
        self._parts = parts

    async def record(
        self, request: web.Request, action: str, target: str, outcome: str, reason: str = "", **detail: Any
    ) -> None:
        await acts.record(self._parts.store, request[SESSION], action, target, outcome, reason, **detail)

    async def act(
        self,
        request: web.Request,
        api: OperatorApi,
        action: str,
        target: str,
        body: Callable[[], dict[str, Any]],
        path: str,
        show_again: ShowAgain,
        done_url: str,
    ) -> web.StreamResponse:
        """Every operator act: read the form (``body``), call the service for the operator, audit what
        happened (ok, refused by the form, refused or failed at the service) and either show the
        page again with the reason (``show_again(error, status)``) or redirect to ``done_url``."""
        try:
            payload = body()
        except FormError as exc:
            await self.record(request, action, target, "refused", str(exc))
            return await show_again(str(exc), 400)
        match await acts.act(self._parts.store, request[SESSION], api, action, target, path, payload):
            case acts.Done():
                raise web.HTTPSeeOther(done_url)
            case acts.NotDone(error=said):
                return await show_again(said.said(), said.status if said.status < 500 else 502)
            case never:
                assert_never(never)
