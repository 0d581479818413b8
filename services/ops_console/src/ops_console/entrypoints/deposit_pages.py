"""A deposit found under the operator's merchants, its story side by side, and its refund form.

The search box (``domain.search``) takes our payment id, a deposit reference, the PSP's payment id
or an MT5 login; the story is assembled by ``application.deposits`` through the services' APIs. A
refund is made at payment-state with the merchant's token under an idempotency key derived from the
form (``domain.refunds``): the form carries a nonce drawn with the page, so a double submit is one
refund, and a form drawn again after no answer keeps its nonce (sending it again cannot make a
second one). A bad value is shown on the deposit's page and nothing is sent; every outcome is
audited (``application.acts``). Another merchant's payment is never even asked for (404).

    GET  /search?q=<payment id|deposit reference|PSP reference|MT5 login>   view
    POST /payments/{id}/refund     merchant amount reason nonce  refund
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, assert_never

from aiohttp import web
from backbone.bodies import form_body

from ops_console.application import acts, deposits
from ops_console.application.ports import Refunded, ServiceError, Session
from ops_console.domain import display, refunds
from ops_console.domain import search as search_query
from ops_console.domain.permissions import Permission
from ops_console.entrypoints import forms
from ops_console.entrypoints.forms import FormError
from ops_console.entrypoints.pages import SESSION, Pages, Parts, done, needs, page

PAYMENT_ID_RE: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")  # payment-state's own rule
SEND_AGAIN: Final = (
    "Send this same form again (it is the same refund, never a second) or look at the payment."
)


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


class DepositPages(Pages):
    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        self._deposits = (
            None
            if parts.payments is None
            else deposits.DepositApis(
                parts.payments, parts.credit, parts.ledger, gateway=parts.gateway, reconciler=parts.reconciler
            )
        )

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/search", self.search),
            web.post("/payments/{payment_id}/refund", self.refund),
        ]

    @needs(Permission.VIEW)
    async def search(self, request: web.Request) -> web.StreamResponse:
        """One deposit (or a login's deposits) side by side, under the operator's merchants only."""
        return await self._search_page(request, request.query.get("q", "").strip())

    async def _search_page(
        self, request: web.Request, q: str, refund: RefundForm | None = None, status: int = 200
    ) -> web.StreamResponse:
        """The search's answer for ``q``; ``refund``: a refund form to show again with its error."""
        session: Session = request[SESSION]
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
            "done": done(request),
        }
        return page(request, "search.html", context, status)

    @needs(Permission.REFUND)
    async def refund(self, request: web.Request) -> web.StreamResponse:
        """A refund of a deposit, at payment-state with the merchant's token, under an idempotency
        key derived from the form (``domain.refunds``): a double submit is one refund. A bad amount
        or reason is shown on the deposit's page and nothing is sent; every outcome is audited."""
        session: Session = request[SESSION]
        payment_id, form = _payment_id(request), form_body(request)
        merchant = str(form.get("merchant", ""))
        payment = await self._refundable(request, merchant, payment_id)
        payments = self._parts.payments
        assert payments is not None
        sent = RefundForm(
            payment_id,
            str(form.get("amount", "")).strip()[:40],
            str(form.get("reason", ""))[: forms.NOTE_MAX],
        )
        try:
            reason, key, body = _refund_request(form, session.operator.username, merchant, payment, sent)
        except (FormError, refunds.BadNonce) as exc:
            await self.record(request, "refund", f"payment:{payment_id}", "refused", str(exc))
            return await self._search_page(request, payment_id, sent.failed(str(exc)), 400)
        outcome = await acts.refund(
            self._parts.store, session, payments, merchant, payment_id, key, body, reason
        )
        return await self._refund_answer(request, sent, form.get("nonce"), outcome)

    async def _refund_answer(
        self, request: web.Request, sent: RefundForm, nonce: object, outcome: Refunded | acts.NotDone
    ) -> web.StreamResponse:
        """Done: back to the deposit with what happened; refused: the form again with the service's
        words; no answer: the same form, with the same nonce (the same key), and why that is safe."""
        match outcome:
            case Refunded(replayed=replayed):
                done_key = "refund_replayed" if replayed else "refunded"
                raise web.HTTPSeeOther(f"/search?q={sent.payment_id}&done={done_key}")
            case acts.NotDone(error=refused) if refused.status < 500:
                return await self._search_page(
                    request, sent.payment_id, sent.failed(refused.said()), refused.status
                )
            case acts.NotDone(error=lost):
                # no answer: it may have landed; the same form (same nonce, same key) is the same refund
                unknown = (
                    f"The {lost.service} did not answer ({lost.detail or lost.error}): the refund may have"
                    f" been made. {SEND_AGAIN}"
                )
                return await self._search_page(request, sent.payment_id, sent.failed(unknown, nonce), 502)
            case never:
                assert_never(never)

    async def _refundable(self, request: web.Request, merchant: str, payment_id: str) -> dict[str, Any]:
        """The payment under one of the operator's merchants, else 404 (audited)."""
        session: Session = request[SESSION]
        try:
            payment = await acts.refundable(
                self._parts.store, session, self._parts.payments, merchant, payment_id
            )
        except ServiceError as exc:
            raise web.HTTPBadGateway(text=exc.said()) from None
        if payment is None:
            raise web.HTTPNotFound(text="no such payment under your merchants")
        return payment


def _payment_id(request: web.Request) -> str:
    raw = request.match_info["payment_id"]
    if PAYMENT_ID_RE.fullmatch(raw) is None:
        raise web.HTTPBadRequest(text="a payment id is letters, digits, _ and - (1-64)")
    return raw


def _refund_request(
    form: Mapping[str, object], who: str, merchant: str, payment: dict[str, Any], sent: RefundForm
) -> tuple[str, str, dict[str, Any]]:
    """The operator's reason, the idempotency key and payment-state's body for the refund form;
    ``FormError`` or ``refunds.BadNonce`` when it cannot be sent."""
    currency = str(payment["currency"])
    reason = forms.reason(form.get("reason"), "reason")
    amount_minor = _refund_amount(sent.amount, currency, payment.get("refundable_minor"))
    key = refunds.idempotency_key(who, merchant, sent.payment_id, str(form.get("nonce")))
    body = {
        "amount_minor": amount_minor,
        "currency": currency,
        "reason": refunds.reason_for_payment_state(who, reason),
    }
    return reason, key, body


def _refund_amount(amount: str, currency: str, refundable: object) -> int:
    """What the operator typed, in the payment's currency, no more than payment-state says is left."""
    amount_minor = forms.amount_minor(amount, currency)
    left = refundable if isinstance(refundable, int) and not isinstance(refundable, bool) else 0
    if amount_minor > left:
        raise FormError(f"amount: at most {display.money(left, currency)} can be refunded")
    return amount_minor
