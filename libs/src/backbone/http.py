"""Every service's aiohttp application is made here, so that what every request must pass is in one
place: ``service_app`` puts the card-data guard in front of the service's own middlewares and routes.

The guard (DESIGN §9, ADR 0004) checks the request's decoded path, its query string (names and
values), every header (names and values) and its body, before any handler, store or log of the
service sees them; a request that carries a card number or a card-data field is answered

    400 {"error": {"code": "card_data_forbidden", "message": "…"}}

and changes nothing. Its log line names the route's pattern and the part of the request, never a
value. It also runs for routes that do not exist (a 404 would otherwise log or echo the path).
The body is read once, by ``backbone.bodies`` (size, media type, syntax, nesting; a 4xx before
any handler), and screened as the handler will read it: a JSON document's keys and values, a
form's decoded fields (``card+4242+4242…`` is ``card 4242 4242…``). Handlers take it with
``bodies.json_body``/``form_body``/``text_body`` and never parse it again. An error answer's text
is redacted on the way out, a second line behind the guard. A NUL character in the path, the
query or the body is refused (400 ``nul_character``): no database of ours can store one.

Before both, ``traced`` opens the request's SERVER span, continuing the caller's W3C trace context
(``traceparent``/``tracestate``) or starting a new trace, and binds the route's ``payment_id`` for
the logs (ADR 0012). Health, readiness and metrics are not traced.

One body is not screened here: a provider's signed webhook (``screen_body`` says which), because
refusing it would lose it; the webhook gateway redacts it instead (ADR 0004).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Final, assert_never
from urllib.parse import unquote_plus

from aiohttp import web
from aiohttp.typedefs import Middleware
from opentelemetry.trace import SpanKind
from prometheus_client import Counter

from backbone import bodies, failpoints, tracing, tracing_setup
from backbone.carddata import (
    CARD_DATA_CODE,
    CARD_DATA_MESSAGE,
    find_card_data,
    find_card_number,
    find_in_body,
    find_in_request,
    find_in_text_pairs,
    redact_card_numbers,
)
from backbone.health import Health
from backbone.logs import get_logger
from backbone.outage import Dependency
from backbone.postgres import is_infrastructure_error

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
log = get_logger(__name__)

RETRY_AFTER_S: Final = 2
HEALTH_ROUTES: Final = frozenset({"/healthz", "/readyz", "/metrics"})
HTTP_LOOP: Final = "http"
_NUL: Final = "\x00"
CARD_DATA_REFUSED: Final = Counter(
    "http_card_data_refused_total",
    "HTTP requests refused because they carried card data, by the part that carried it",
    ["where"],
)


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> web.Response:
    """The error shape every service answers with: ``{"error": {"code": …, "message": …}}``."""
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    return web.Response(status=status, body=body, content_type="application/json", headers=headers)


def unavailable(
    message: str = "temporarily unavailable; retry (with the same Idempotency-Key)",
) -> web.Response:
    """503 with ``Retry-After``: the answer to every outage of a dependency."""
    return error_response(503, "unavailable", message, {"Retry-After": str(RETRY_AFTER_S)})


def route_name(request: web.Request) -> str:
    """The matched route's pattern (``/payments/{payment_id}``), never the path with its values."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


def _every_request(_: web.Request) -> bool:
    return True


def card_data_guard(
    body_max_bytes: int,
    screen_body: Callable[[web.Request], bool] = _every_request,
    body_types: frozenset[str] = bodies.JSON_TYPES,
) -> Middleware:
    """The middleware that reads every body once (``backbone.bodies``: size, media type, syntax,
    nesting) and refuses card data anywhere in a request, as its handler will read it (see the
    module docstring); an error answer's text is redacted on the way out."""

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        where = find_in_request(request.path, _query(request), request.headers.items(), None)
        refused: bodies.Refusal | None = None
        if where is None and screen_body(request):
            body = await bodies.read(request, body_types, body_max_bytes)
            if isinstance(body, bodies.Refusal):
                refused = body
                if body.status != 413 and _refused_body_carries_card_data(await request.read()):
                    where = "body"  # card data in a body we would refuse anyway: the graver reason
            elif _carries_card_data(body):
                where = "body"
        if where is None and refused is None and _nul_in(request):
            refused = bodies.NUL_REFUSAL  # PostgreSQL's text cannot hold one: refused at the door
        if where is not None:
            CARD_DATA_REFUSED.labels(where).inc()
            log.warning(
                "http.card_data_forbidden", method=request.method, route=route_name(request), where=where
            )
            return error_response(
                400, CARD_DATA_CODE, f"{CARD_DATA_MESSAGE} (found in the request's {where})"
            )
        match refused:
            case None:
                return _redacted(await handler(request))
            case bodies.Refusal(status=status, code=code, message=message):
                log.info("http.body_refused", method=request.method, route=route_name(request), code=code)
                return error_response(status, code, message)

    return guard


def _nul_in(request: web.Request) -> bool:
    """A NUL character in the decoded path or in a query name or value."""
    return _NUL in request.path or any(_NUL in k or _NUL in v for k, v in request.query.items())


def _carries_card_data(body: bodies.Body) -> bool:
    match body.kind:
        case "empty":
            return False
        case "json":
            return find_card_number(body.text) or find_card_data(body.document)
        case "form":
            return find_in_text_pairs(body.form) or find_card_number(body.text)
        case "text":
            return find_in_body(body.raw)
        case _:
            assert_never(body.kind)


def _refused_body_carries_card_data(raw: bytes) -> bool:
    """A body the reader refused, read every way a handler might have read it: as text and JSON,
    and as a form (``card+4242+4242…``), so that the answer names card data when it is there."""
    if find_in_body(raw):
        return True
    form = bodies.parse(raw, bodies.URLENCODED, None, frozenset({bodies.URLENCODED}))
    return isinstance(form, bodies.Body) and find_in_text_pairs(form.form)


def _redacted(response: web.StreamResponse) -> web.StreamResponse:
    """An error answer with any card number in its text replaced: a second line behind the guard,
    for a refusal that quotes what some other party sent (a service's answer, a stored value)."""
    if response.status < 400 or not isinstance(response, web.Response):
        return response
    if not isinstance(response.body, bytes):
        return response
    text = response.body.decode("utf-8", "replace")
    if find_card_number(text):
        response.body = redact_card_numbers(text).encode()
    return response


@web.middleware
async def traced(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The request's SERVER span (see the module docstring); the response's status is its attribute."""
    route = route_name(request)
    if route in HEALTH_ROUTES:
        return await handler(request)
    attributes = {"http.request.method": request.method, "http.route": route}
    with tracing_setup.tracer().start_as_current_span(
        f"{request.method} {route}",
        context=tracing.extract(request.headers),
        kind=SpanKind.SERVER,
        attributes=attributes,
    ) as span:
        token = tracing.payment_scope(request.match_info.get("payment_id"))
        try:
            response = await handler(request)
        finally:
            tracing.end_payment_scope(token)
        span.set_attribute("http.response.status_code", response.status)
        return response


def errors(dependency: Dependency | None) -> Middleware:
    """The middleware that maps outages to 503 and defects to 500 (see the module docstring)."""

    @web.middleware
    async def mapped(request: web.Request, handler: Handler) -> web.StreamResponse:
        if route_name(request) not in HEALTH_ROUTES:
            failpoints.hit("http.request")  # tests: "hang" blocks the event loop, as a wedged handler would
        try:
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            code = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}.get(exc.status)
            return error_response(exc.status, code or "http_error", exc.reason)
        except Exception as exc:
            if is_infrastructure_error(exc) or isinstance(exc, TimeoutError):
                if dependency is not None:
                    dependency.failed(exc)
                return unavailable()
            log.exception("http.internal_error", method=request.method, route=route_name(request))
            return error_response(500, "internal_error", "internal error; see the service's logs")

    return mapped


def _query(request: web.Request) -> Iterable[tuple[str, str]]:
    """The query as the handler will read it, and the whole raw string decoded once more (a
    separator aiohttp does not split on must not hide a number)."""
    yield from request.query.items()
    if request.query_string:
        yield "", unquote_plus(request.query_string)


def service_app(
    *,
    client_max_size: int,
    middlewares: Sequence[Middleware] = (),
    screen_body: Callable[[web.Request], bool] = _every_request,
    body_types: frozenset[str] = bodies.JSON_TYPES,
    database: Dependency | None = None,
    **kwargs: Any,
) -> web.Application:
    """An aiohttp application whose first middleware opens the request's span, then the body reader
    and card-data guard (bodies of ``body_types`` only), the outage mapping (reporting to
    ``database``), then the service's own."""
    guard = card_data_guard(client_max_size, screen_body, body_types)
    return web.Application(
        client_max_size=client_max_size,
        middlewares=[traced, guard, errors(database), *middlewares],
        **kwargs,
    )


Probe = Callable[[], Awaitable[object]]


def watch(
    app: web.Application, health: Health, probe: Probe, database: Dependency, *, interval_s: float = 2.0
) -> None:
    """Run the health task for the lifetime of ``app``: beat the ``http`` loop, probe the database
    (bounded by ``interval_s``), report the probe's outcome to ``database`` (and readiness). The
    beat comes at least three times per liveness period, whatever ``interval_s`` says."""
    interval_s = min(interval_s, health.liveness_timeout_s / 3)

    async def run() -> None:
        while True:  # the task lives as long as the server; cleanup cancels it
            health.beat(HTTP_LOOP)
            try:
                async with asyncio.timeout(interval_s):
                    await probe()
                database.ok()
            except Exception as exc:
                database.failed(exc)
            await asyncio.sleep(interval_s)

    async def start(app: web.Application) -> None:
        app[_WATCH] = asyncio.get_running_loop().create_task(run())

    async def stop(app: web.Application) -> None:
        app[_WATCH].cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await app[_WATCH]

    app.on_startup.append(start)
    app.on_cleanup.append(stop)


_WATCH: Final = web.AppKey("health_watch", asyncio.Task[None])


def is_guarded(app: web.Application) -> bool:
    """True if ``app`` was made by ``service_app`` (the guard comes first after the tracing span); the
    route walk test asserts it for every service."""
    names = [getattr(m, "__qualname__", "") for m in app.middlewares]
    return names[:2] == ["traced", "card_data_guard.<locals>.guard"]
