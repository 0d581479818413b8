"""The HTTP surface: ``POST /providers/{provider}/webhooks`` plus /healthz, /readyz, /metrics (and,
with a tokens file, the operators' ``GET /v1/receipts``: ``entrypoints.reads``).

Order of checks, cheapest and safest first: unknown provider (404, body never read) -> body size
(413 as soon as the declared or the read length passes the limit; the rest is never read and the
connection is closed) -> signature over the raw bytes (400) -> minimal parse (400) -> store (200 once
committed, 503 when the database cannot answer). Every answer carries ``X-Request-Id``; errors are
``{"error": {"code": …, "message": …}, "request_id": …}`` with a code from ``ERRORS``.

Logs never carry the body, the secrets or the signature; a rejected delivery is logged with its
reason and request id only.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, assert_never

from aiohttp import web
from aiohttp.client_exceptions import ClientPayloadError
from backbone.carddata import CARD_DATA_CODE
from backbone.health import Health, aiohttp_routes
from backbone.http import route_name, service_app
from backbone.ids import new_id
from backbone.invariants import invariant
from backbone.logs import get_logger
from backbone.outage import Dependency
from backbone.psp.signature import SignatureInvalid

from webhook_gateway import metrics
from webhook_gateway.application.ingest import (
    Duplicate,
    EventRejected,
    IngestResult,
    IngestWebhook,
    Stored,
    StoreRejected,
    StoreUnavailable,
    WebhookDelivery,
)
from webhook_gateway.domain.providers import ProviderConfig
from webhook_gateway.domain.redaction import UNREDACTABLE

WEBHOOK_PATH: Final = "/providers/{provider}/webhooks"
REQUEST_ID_HEADER: Final = "X-Request-Id"
_REQUEST_ID: Final = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_UNKNOWN: Final = "unknown"
RETRY_AFTER_S: Final = "5"

# Every error the endpoint can answer: code -> (HTTP status, metrics outcome, message). The codes
# are the contract with operators and the PSP's dashboard; README.md lists them.
ERRORS: Final[Mapping[str, tuple[int, str, str]]] = {
    "unknown_provider": (404, "unknown_provider", "no such provider"),
    "body_too_large": (413, "body_too_large", "request body exceeds the size limit"),
    "body_incomplete": (400, "body_incomplete", "the request body ended early"),
    "body_timeout": (408, "body_timeout", "the request body did not arrive in time"),
    "signature_header_missing": (400, "signature_rejected", "signature header missing"),
    "signature_header_malformed": (400, "signature_rejected", "signature header malformed"),
    "signature_mismatch": (400, "signature_rejected", "no signature matches"),
    "signature_timestamp_outside_tolerance": (
        400,
        "signature_rejected",
        "signature timestamp outside the tolerance",
    ),
    "event_not_json": (400, "event_rejected", "body is not UTF-8 JSON"),
    "event_not_an_object": (400, "event_rejected", "body is not a JSON object"),
    "event_id_missing": (400, "event_rejected", "event id missing or invalid"),
    "event_type_missing": (400, "event_rejected", "event type missing or invalid"),
    CARD_DATA_CODE: (
        400,
        "card_data_forbidden",
        "the event's identifiers carry card data: it cannot be stored",
    ),
    "store_unavailable": (503, "store_unavailable", "the webhook could not be stored; retry later"),
    "internal_error": (500, "internal_error", "the webhook could not be stored (a defect); see the logs"),
}
log = get_logger(__name__)


class BodyTooLarge(Exception):
    """The declared or the received body length passed the limit."""


@dataclass(frozen=True, slots=True)
class BodyLimits:
    max_bytes: int
    timeout_s: float  # a body trickling in slower than this holds a handler no longer

    def __post_init__(self) -> None:
        invariant(self.max_bytes > 0 and self.timeout_s > 0, "body limits must be positive")


def make_app(
    ingest: IngestWebhook,
    providers: Mapping[str, ProviderConfig],
    health: Health,
    *,
    body: BodyLimits,
    database: Dependency | None = None,
    reads: Sequence[web.RouteDef] = (),
) -> web.Application:
    """The aiohttp application (routes only; the server entrypoint runs it); ``reads``: the
    operators' read API (``entrypoints.reads``), when the gateway has a tokens file."""
    # Card data in the path, the query or a header is refused like everywhere; the webhook's body is
    # screened by the ingest use case instead, which redacts it (refusing would lose it: ADR 0004).
    app = service_app(client_max_size=body.max_bytes, screen_body=_not_a_webhook, database=database)
    endpoint = WebhookEndpoint(ingest, providers, body, database)
    app[ENDPOINT] = endpoint
    app.add_routes([web.post(WEBHOOK_PATH, endpoint.handle), *reads, *aiohttp_routes(health)])
    return app


class WebhookEndpoint:
    def __init__(
        self,
        ingest: IngestWebhook,
        providers: Mapping[str, ProviderConfig],
        body: BodyLimits,
        database: Dependency | None = None,
    ) -> None:
        self._ingest = ingest
        self._providers = providers
        self._body = body
        self._database = database
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    async def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no webhook is being handled (bodies still arriving included); False on timeout."""
        try:
            async with asyncio.timeout(timeout_s):
                await self._idle.wait()
        except TimeoutError:
            return False
        return True

    async def handle(self, request: web.Request) -> web.Response:
        self._in_flight += 1
        self._idle.clear()
        try:
            return await self._handle(request)
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()

    async def _handle(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        request_id = request_id_of(request)
        config = self._providers.get(request.match_info["provider"])
        if config is None:
            log.warning("webhook.unknown_provider", request_id=request_id)
            return _error("unknown_provider", request_id, _UNKNOWN, started)
        provider = config.provider.name
        raw_body = await self._read_body(request, provider, request_id)
        if isinstance(raw_body, str):
            return _error(raw_body, request_id, provider, started)
        delivery = WebhookDelivery(config, raw_body, request.headers, request_id)
        try:
            result = await self._ingest(delivery)
        except StoreUnavailable as exc:
            if self._database is not None:
                self._database.failed(exc)  # one warning per outage, not one per webhook
            return _error("store_unavailable", request_id, provider, started)
        except StoreRejected as exc:
            log.error("webhook.store_rejected", provider=provider, request_id=request_id, error=str(exc))
            return _error("internal_error", request_id, provider, started)
        return _answer(result, provider, request_id, started)

    async def _read_body(self, request: web.Request, provider: str, request_id: str) -> bytes | str:
        """The body, or the error code that refuses it (too large, too slow, cut short)."""
        try:
            async with asyncio.timeout(self._body.timeout_s):
                return await read_body(request, self._body.max_bytes)
        except TimeoutError:
            code = "body_timeout"
        except BodyTooLarge:
            code = "body_too_large"
        except (ClientPayloadError, ConnectionResetError):
            code = "body_incomplete"
        log.warning(f"webhook.{code}", provider=provider, request_id=request_id)
        return code


ENDPOINT: Final = web.AppKey("webhook_endpoint", WebhookEndpoint)


def _not_a_webhook(request: web.Request) -> bool:
    return route_name(request) != WEBHOOK_PATH


async def read_body(request: web.Request, limit_bytes: int) -> bytes:
    """The whole body, or BodyTooLarge as soon as it is known to exceed ``limit_bytes`` (declared
    Content-Length first, then the bytes actually read); never buffers more than limit + one chunk."""
    declared = request.content_length
    if declared is not None and declared > limit_bytes:
        raise BodyTooLarge
    body = bytearray()
    while True:
        chunk = await request.content.readany()
        if not chunk:
            return bytes(body)
        if len(body) + len(chunk) > limit_bytes:
            raise BodyTooLarge
        body += chunk


def request_id_of(request: web.Request) -> str:
    """The caller's X-Request-Id when it is a sane token, else a new ``req_…`` id."""
    given = request.headers.get(REQUEST_ID_HEADER)
    if given is not None and _REQUEST_ID.fullmatch(given):
        return given
    return new_id("req")


def _answer(result: IngestResult, provider: str, request_id: str, started: float) -> web.Response:
    match result:
        case Stored():
            _on_stored(result, provider, request_id)
            body = {"received": True, "duplicate": False, "receipt_id": result.receipt_id}
            return _ok(body, request_id, provider, "stored", started)
        case Duplicate():
            _on_duplicate(result, provider, request_id)
            body = {"received": True, "duplicate": True, "receipt_id": result.receipt_id}
            return _ok(body, request_id, provider, "duplicate", started)
        case SignatureInvalid(reason=reason):
            metrics.WEBHOOK_SIGNATURE_FAILURES.labels(provider, reason).inc()
            log.warning("webhook.signature_rejected", provider=provider, reason=reason, request_id=request_id)
            return _error(f"signature_{reason}", request_id, provider, started)
        case EventRejected(reason=reason):
            log.warning("webhook.event_rejected", provider=provider, reason=reason, request_id=request_id)
            return _error(
                CARD_DATA_CODE if reason == UNREDACTABLE else f"event_{reason}", request_id, provider, started
            )
        case _:
            assert_never(result)


def _on_stored(stored: Stored, provider: str, request_id: str) -> None:
    metrics.WEBHOOK_SECRET_USED.labels(provider, stored.secret).inc()
    if stored.card_data_redacted:
        metrics.WEBHOOK_CARD_DATA_REDACTED.labels(provider).inc()
        log.warning(
            "webhook.card_data_redacted",
            provider=provider,
            provider_event_id=stored.event.event_id,
            receipt_id=stored.receipt_id,
            request_id=request_id,
        )
    if stored.event.created_s is not None:
        delay_s = max(0.0, stored.received_at_ms / 1000 - stored.event.created_s)
        metrics.WEBHOOK_EVENT_DELAY_SECONDS.labels(provider).observe(delay_s)
    log.info(
        "webhook.stored",
        provider=provider,
        provider_event_id=stored.event.event_id,
        provider_event_type=stored.event.event_type,
        receipt_id=stored.receipt_id,
        request_id=request_id,
    )


def _on_duplicate(duplicate: Duplicate, provider: str, request_id: str) -> None:
    fields = {
        "provider": provider,
        "provider_event_id": duplicate.event.event_id,
        "receipt_id": duplicate.receipt_id,
        "request_id": request_id,
    }
    if not duplicate.same_body:
        metrics.WEBHOOK_DUPLICATE_BODY_DIFFERS.labels(provider).inc()
        log.warning("webhook.duplicate_body_differs", **fields)
    log.info("webhook.duplicate", **fields)


def _ok(body: dict[str, Any], request_id: str, provider: str, outcome: str, started: float) -> web.Response:
    _count(provider, outcome, started)
    return web.Response(
        status=200,
        body=json.dumps(body).encode(),
        content_type="application/json",
        headers={REQUEST_ID_HEADER: request_id},
    )


def _error(code: str, request_id: str, provider: str, started: float) -> web.Response:
    status, outcome, message = ERRORS[code]
    _count(provider, outcome, started)
    body = {"error": {"code": code, "message": message}, "request_id": request_id}
    headers = {REQUEST_ID_HEADER: request_id}
    if status == 503:
        headers["Retry-After"] = RETRY_AFTER_S  # the PSP retries anyway; this says "soon is fine"
    return web.Response(
        status=status, body=json.dumps(body).encode(), content_type="application/json", headers=headers
    )


def _count(provider: str, outcome: str, started: float) -> None:
    requests, seconds = metrics.request_metrics(provider, outcome)
    requests.inc()
    seconds.observe(time.perf_counter() - started)
