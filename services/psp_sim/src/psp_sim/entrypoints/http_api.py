"""The PSP API over HTTP (aiohttp): authentication, card-data refusal, idempotency keys, and what a
call fault does to the answer after the commit.

Every POST needs ``Authorization: Bearer <key>`` and an ``Idempotency-Key``; the raw body is checked
for card data before it is parsed (and is never logged). The request digest is SHA-256 over
``METHOD path`` and the body's canonical JSON (sorted keys), so whitespace or key order never turn
one request into two. Those checks are ``http_input``'s; the report runs are ``http_reports``'.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

from aiohttp import web
from backbone.health import Health, aiohttp_routes
from backbone.logs import get_logger

from psp_sim.adapters import store
from psp_sim.adapters.delivery import WebhookDeliverer
from psp_sim.application.answers import Outcome, Response
from psp_sim.application.service import PspService
from psp_sim.domain import requests as req
from psp_sim.entrypoints.http_input import (
    IDEMPOTENCY_KEY_LENGTH_MAX,
    error_response,
    has_nul,
    natural,
    nul_refusal,
    prepare_body,
    request_digest,
    valid_key,
)
from psp_sim.entrypoints.http_reports import ReportFiles, ReportRuns
from psp_sim.metrics import FAULTS_APPLIED, REQUEST_SECONDS, REQUESTS

log = get_logger(__name__)
_OPEN_PATHS: Final = frozenset({"/healthz", "/readyz", "/metrics"})
_EVENT_PARAMS: Final = frozenset({"created[gte]", "created[lte]", "limit", "starting_after"})


def _json(response: Response) -> web.Response:
    return web.Response(status=response.status, body=response.body, content_type="application/json")


class ApiHandlers:
    def __init__(
        self,
        service: PspService,
        deliverer: WebhookDeliverer,
        api_key: str,
        reports: ReportFiles | None = None,
    ) -> None:
        self._service, self._deliverer, self._api_key = service, deliverer, api_key.encode()
        self.reports = ReportRuns(reports)

    @web.middleware
    async def middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.path in _OPEN_PATHS:
            return await handler(request)
        route = (
            request.match_info.route.resource.canonical if request.match_info.route.resource else "unmatched"
        )
        started = time.perf_counter()
        response = await self._guarded(request, handler)
        REQUESTS.labels(route, str(response.status)).inc()
        REQUEST_SECONDS.labels(route).observe(time.perf_counter() - started)
        return response

    async def _guarded(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        auth = request.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ").encode() if auth.startswith("Bearer ") else b""
        if not hmac.compare_digest(token, self._api_key):
            return error_response(
                401, "authentication_error", "invalid_api_key", "Invalid or missing API key."
            )
        if has_nul(request.query):
            return nul_refusal()
        try:
            return await handler(request)
        except web.HTTPRequestEntityTooLarge:
            return error_response(
                413, "invalid_request_error", "body_too_large", "The request body is too large."
            )
        except web.HTTPNotFound:
            return error_response(404, "invalid_request_error", "unknown_route", "Unrecognized request URL.")
        except web.HTTPMethodNotAllowed:
            return error_response(405, "invalid_request_error", "method_not_allowed", "Method not allowed.")

    async def _finish(self, outcome: Outcome) -> web.StreamResponse:
        """Answer, after doing what the call fault (if any) asks."""
        fault = outcome.fault
        if fault is None:
            return _json(outcome.response)
        FAULTS_APPLIED.labels(fault.kind).inc()
        log.info("fault.applied", fault_id=fault.id, kind=fault.kind)
        match fault.kind:
            case "fail_without_apply" | "apply_then_fail":
                return error_response(
                    fault.status, "api_error", "simulated_failure", "Simulated server error."
                )
            case "hang_without_apply" | "apply_then_hang":
                await asyncio.sleep(fault.hang_ms / 1000)
                return error_response(504, "api_error", "simulated_timeout", "Simulated hang.")
            case "webhook_before_response":
                await self._deliverer.deliver_now(outcome.sync_deliveries)
        return _json(outcome.response)

    async def _write(
        self,
        request: web.Request,
        parse: Callable[[dict[str, Any]], Any],
        call: Callable[[str, bytes, Any], Awaitable[Outcome]],
    ) -> web.StreamResponse:
        raw = await request.read()
        key = request.headers.get("Idempotency-Key")
        if not valid_key(key) or key is None:
            return error_response(
                400,
                "invalid_request_error",
                "idempotency_key_required",
                f"An Idempotency-Key header of 1..{IDEMPOTENCY_KEY_LENGTH_MAX} visible ASCII "
                "characters is required on every write.",
            )
        document = prepare_body(raw, request.content_type)
        if isinstance(document, web.Response):
            return document
        command = parse(document)
        if isinstance(command, req.Invalid):
            return error_response(
                400, "invalid_request_error", command.code, command.message, param=command.param
            )
        digest = request_digest(request.method, request.path, document)
        return await self._finish(await call(key, digest, command))

    # -- routes ------------------------------------------------------------------------------------------

    async def create_intent(self, request: web.Request) -> web.StreamResponse:
        return await self._write(request, req.parse_create, self._service.create_intent)

    async def confirm_intent(self, request: web.Request) -> web.StreamResponse:
        intent_id = request.match_info["id"]
        return await self._write(
            request, req.parse_confirm, lambda k, d, c: self._service.confirm_intent(k, d, intent_id, c)
        )

    async def capture_intent(self, request: web.Request) -> web.StreamResponse:
        intent_id = request.match_info["id"]
        return await self._write(
            request, req.parse_capture, lambda k, d, c: self._service.capture_intent(k, d, intent_id, c)
        )

    async def cancel_intent(self, request: web.Request) -> web.StreamResponse:
        intent_id = request.match_info["id"]
        return await self._write(
            request, req.parse_cancel, lambda k, d, c: self._service.cancel_intent(k, d, intent_id, c)
        )

    async def complete_action(self, request: web.Request) -> web.StreamResponse:
        intent_id = request.match_info["id"]
        return await self._write(
            request,
            req.parse_complete_action,
            lambda k, d, c: self._service.complete_action(k, d, intent_id, c),
        )

    async def create_refund(self, request: web.Request) -> web.StreamResponse:
        return await self._write(request, req.parse_refund, self._service.create_refund)

    async def create_payout(self, request: web.Request) -> web.StreamResponse:
        return await self._write(request, req.parse_payout, self._service.create_payout)

    async def retrieve_payout(self, request: web.Request) -> web.StreamResponse:
        return await self._finish(await self._service.reads.retrieve_payout(request.match_info["id"]))

    async def list_payouts(self, request: web.Request) -> web.StreamResponse:
        reference = request.query.get("reference")
        if not reference:
            return error_response(
                400,
                "invalid_request_error",
                "parameter_missing",
                "Listing payouts needs ?reference=.",
                param="reference",
            )
        return await self._finish(await self._service.reads.payouts_by_reference(reference))

    async def retrieve_intent(self, request: web.Request) -> web.StreamResponse:
        return await self._finish(await self._service.reads.retrieve_intent(request.match_info["id"]))

    async def list_intents(self, request: web.Request) -> web.StreamResponse:
        reference = request.query.get("reference")
        if not reference:
            return error_response(
                400,
                "invalid_request_error",
                "parameter_missing",
                "Listing payment intents needs ?reference=.",
                param="reference",
            )
        return await self._finish(await self._service.reads.intents_by_reference(reference))

    async def retrieve_refund(self, request: web.Request) -> web.StreamResponse:
        return await self._finish(await self._service.reads.retrieve_refund(request.match_info["id"]))

    async def list_refunds(self, request: web.Request) -> web.StreamResponse:
        reference, intent_id = request.query.get("reference"), request.query.get("payment_intent")
        if not reference and not intent_id:
            return error_response(
                400,
                "invalid_request_error",
                "parameter_missing",
                "Listing refunds needs ?reference= or ?payment_intent=.",
            )
        return await self._finish(
            await self._service.reads.refunds_where(reference=reference or None, intent_id=intent_id)
        )

    async def list_events(self, request: web.Request) -> web.StreamResponse:
        """``GET /v1/events`` as Stripe answers it: newest first; ``limit`` 1-100 (10 by default),
        ``starting_after`` (the last event of the previous page), ``created[gte]``/``created[lte]``
        (Unix seconds). Any other parameter, or a bad value, is 400 and lists nothing."""
        query = request.query
        unknown = sorted(set(query) - _EVENT_PARAMS)
        if unknown:
            return error_response(
                400, "invalid_request_error", "parameter_unknown", f"Received unknown parameter: {unknown[0]}"
            )
        bounds: dict[str, int] = {}
        for name, default in (("created[gte]", 0), ("created[lte]", 2**62), ("limit", 10)):
            raw = query.get(name)
            value = default if raw is None else natural(raw)
            if value is None or (name == "limit" and not 1 <= value <= store.EVENTS_PAGE_MAX):
                return error_response(
                    400,
                    "invalid_request_error",
                    "parameter_invalid",
                    f"{name} must be a whole number" + (" from 1 to 100." if name == "limit" else "."),
                    param=name,
                )
            bounds[name] = value
        after = query.get("starting_after")
        return await self._finish(
            await self._service.reads.events_page(
                created_gte=bounds["created[gte]"],
                created_lte=bounds["created[lte]"],
                starting_after=after or None,
                limit=bounds["limit"],
            )
        )


def api_app(handlers: ApiHandlers, health: Health, body_max_bytes: int) -> web.Application:
    app = web.Application(client_max_size=body_max_bytes, middlewares=[handlers.middleware])
    h = handlers
    app.add_routes(
        [
            web.post("/v1/payment_intents", h.create_intent),
            web.get("/v1/payment_intents", h.list_intents),
            web.get("/v1/payment_intents/{id}", h.retrieve_intent),
            web.post("/v1/payment_intents/{id}/confirm", h.confirm_intent),
            web.post("/v1/payment_intents/{id}/capture", h.capture_intent),
            web.post("/v1/payment_intents/{id}/cancel", h.cancel_intent),
            web.post("/v1/test_helpers/payment_intents/{id}/complete_action", h.complete_action),
            web.post("/v1/refunds", h.create_refund),
            web.get("/v1/refunds", h.list_refunds),
            web.get("/v1/refunds/{id}", h.retrieve_refund),
            web.post("/v1/payouts", h.create_payout),
            web.get("/v1/payouts", h.list_payouts),
            web.get("/v1/payouts/{id}", h.retrieve_payout),
            web.get("/v1/events", h.list_events),
            web.post("/v1/reporting/report_runs", h.reports.create_report_run),
            web.get("/v1/reporting/report_runs/{id}", h.reports.retrieve_report_run),
            web.get("/v1/files/{id}/contents", h.reports.file_contents),
            *aiohttp_routes(health),
        ]
    )
    return app
