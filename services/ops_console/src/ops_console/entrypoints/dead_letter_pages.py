"""Dead letters of every consumer the console can reach, each at its own service's HTTP API
(``backbone.consumer.dlq_http``): payment-state, the reconciler, mt5-credit and the ledger.

A letter is shown beside its payload, decoded with the consumer's codec or as escaped text; card
numbers are redacted by the service and again here (a page never relies on one place alone). A
replay or a discard is made by the owning service for the operator, with their reason, and
audited; a service that does not answer the list is a note, the others are still listed.

    GET  /deadletters?service=&include_resolved=true             view
    GET  /deadletters/{service}/{consumer}/{id}                  view
    POST /deadletters/{service}/{consumer}/{id}/replay   reason  deadletter_replay
    POST /deadletters/{service}/{consumer}/{id}/discard  reason  deadletter_replay
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from aiohttp import web
from backbone.bodies import form_body
from backbone.carddata import redact_document

from ops_console.application.ports import OperatorApi, ServiceError, Session
from ops_console.domain.permissions import Permission
from ops_console.entrypoints import forms
from ops_console.entrypoints.pages import SESSION, Pages, done, needs, page

CONSUMER_RE: Final = re.compile(r"[A-Za-z0-9_.-]{1,100}")
LETTERS_MAX: Final = "200"  # per service and page


class DeadLetterPages(Pages):
    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/deadletters", self.dead_letters),
            web.get("/deadletters/{service}/{consumer}/{id}", self.dead_letter),
            web.post("/deadletters/{service}/{consumer}/{id}/replay", self.replay_dead_letter),
            web.post("/deadletters/{service}/{consumer}/{id}/discard", self.discard_dead_letter),
        ]

    def _apis(self) -> dict[str, OperatorApi]:
        """The services that run consumers and that the console is configured to call."""
        apis: dict[str, OperatorApi | None] = {
            "payment-state": self._parts.payment_ops,
            "reconciler": self._parts.reconciler,
            "mt5-credit": self._parts.credit,
            "ledger": self._parts.ledger,
        }
        return {name: api for name, api in apis.items() if api is not None}

    def _letter_target(self, request: web.Request) -> tuple[str, OperatorApi, str, int]:
        service, consumer = request.match_info["service"], request.match_info["consumer"]
        api = self._apis().get(service)
        if api is None:
            raise web.HTTPNotFound(text="no such service here")
        if CONSUMER_RE.fullmatch(consumer) is None:
            raise web.HTTPBadRequest(text="a consumer name is letters, digits and _ . - only")
        return service, api, consumer, forms.path_id(request, "id")

    @needs(Permission.VIEW)
    async def dead_letters(self, request: web.Request) -> web.StreamResponse:
        session: Session = request[SESSION]
        apis = self._apis()
        service = request.query.get("service", "")
        include_resolved = request.query.get("include_resolved", "") == "true"
        letters: list[dict[str, Any]] = []
        notes: list[str] = []
        error = f"service must be one of {', '.join(apis)}" if service and service not in apis else ""
        query = {"include_resolved": "true" if include_resolved else "false", "limit": LETTERS_MAX}
        for name, api in apis.items():
            if error or (service and name != service):
                continue
            try:
                answer = await api.get(session.operator, "/v1/dead-letters", query)
            except ServiceError as exc:
                notes.append(exc.said())
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
        return page(request, "deadletters.html", context, 400 if error else 200)

    @needs(Permission.VIEW)
    async def dead_letter(self, request: web.Request) -> web.StreamResponse:
        return await self._dead_letter_page(request, *self._letter_target(request))

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
        session: Session = request[SESSION]
        try:
            found = _card_safe(await api.get(session.operator, f"/v1/dead-letters/{consumer}/{letter_id}"))
        except ServiceError as exc:
            if exc.status == 404:
                raise web.HTTPNotFound(text="no such dead letter") from None
            return page(request, "refused.html", {"why": exc.said()}, exc.status)
        payload = found.get("payload") or {}
        shown = payload.get("document") if payload.get("decoded") else payload.get("text")
        context = {
            "d": found,
            "service": service,
            "payload_text": json.dumps(shown, indent=2, sort_keys=True) if payload.get("decoded") else shown,
            "error": error,
            "done": done(request),
        }
        return page(request, "deadletter.html", context, status)

    @needs(Permission.DEADLETTER_REPLAY)
    async def replay_dead_letter(self, request: web.Request) -> web.StreamResponse:
        return await self._dead_letter_act(request, "replay", "dl_replayed")

    @needs(Permission.DEADLETTER_REPLAY)
    async def discard_dead_letter(self, request: web.Request) -> web.StreamResponse:
        return await self._dead_letter_act(request, "discard", "dl_discarded")

    async def _dead_letter_act(self, request: web.Request, verb: str, done_key: str) -> web.StreamResponse:
        """Replay or discard at the owning service, for the operator, with their reason."""
        service, api, consumer, letter_id = letter = self._letter_target(request)
        form = form_body(request)
        return await self.act(
            request,
            api,
            f"{verb}_dead_letter",
            f"deadletter:{service}/{consumer}/{letter_id}",
            forms.reason_only(form),
            f"/v1/dead-letters/{consumer}/{letter_id}/{verb}",
            lambda error, status: self._dead_letter_page(request, *letter, error, status),
            f"/deadletters/{service}/{consumer}/{letter_id}?done={done_key}",
        )


def _card_safe(answer: Any) -> Any:
    """A service's answer with any card number redacted once more before it is shown (the service
    already redacts; a page never relies on one place alone)."""
    return redact_document(answer)[0]
