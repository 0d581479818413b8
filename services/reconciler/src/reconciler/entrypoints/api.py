"""The reconciler's HTTP API (aiohttp, port 8085): runs and cases for people and the console, and
the gauges the alerts read. Every ``/v1`` route needs ``Authorization: Bearer <token>`` with a
permission: ``recon:read`` to view, ``recon:work`` to acknowledge a case. Card data anywhere in a
request is refused before any handler sees it (``backbone.http``); bad input gets a 4xx with a
reason and changes nothing. ``/healthz``, ``/readyz`` and ``/metrics`` are open.

    GET  /v1/runs[?date=YYYY-MM-DD&limit=]
    GET  /v1/runs/{run_id}
    GET  /v1/cases[?date=&status=open|acknowledged|resolved&class=&limit=]
    GET  /v1/cases/{case_id}                (evidence side by side, history)
    POST /v1/cases/{case_id}/acknowledge    {"note": "why"}  (recon:work)

Metrics (refreshed every ``RECON_METRICS_INTERVAL_S`` from the database, seed 002 §6.1):
``recon_open_cases{case_class,severity}``, ``recon_oldest_open_case_age_seconds``,
``recon_last_successful_run_timestamp_seconds{business_date}``,
``recon_last_run_duration_seconds{business_date}``, ``recon_incomplete_runs{business_date}`` (runs
started in the last 7 days).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from datetime import date
from typing import Any, Final

from aiohttp import web
from backbone.health import Health, aiohttp_routes
from backbone.http import service_app, watch
from backbone.logs import configure_logging, get_logger
from backbone.outage import Dependency
from backbone.tokens import Caller, Tokens
from prometheus_client import Gauge

from reconciler.adapters.pg_store import PgReconStore
from reconciler.settings import SERVICE_NAME, ApiSettings

log = get_logger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
PERMISSIONS: Final = frozenset({"recon:read", "recon:work"})
STATUSES: Final = frozenset({"open", "acknowledged", "resolved"})
NOTE_MAX: Final = 500

OPEN_CASES = Gauge("recon_open_cases", "open or acknowledged cases", ["case_class", "severity"])
OLDEST_OPEN = Gauge("recon_oldest_open_case_age_seconds", "age of the oldest open or acknowledged case")
LAST_SUCCESS = Gauge(
    "recon_last_successful_run_timestamp_seconds", "last clean/discrepancies run", ["business_date"]
)
LAST_DURATION = Gauge("recon_last_run_duration_seconds", "the date's last finished run", ["business_date"])
INCOMPLETE = Gauge("recon_incomplete_runs", "incomplete or failed runs of the date", ["business_date"])


class BadRequest(Exception):
    def __init__(self, status: int, error: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.error, self.detail = status, error, detail


def _json(status: int, body: Any) -> web.Response:
    return web.json_response(body, status=status, dumps=lambda o: json.dumps(o, default=str))


def publish_gauges(snapshot: dict[str, Any]) -> None:
    for gauge in (OPEN_CASES, LAST_SUCCESS, LAST_DURATION, INCOMPLETE):
        gauge.clear()
    for case_class, severity, n in snapshot["open"]:
        OPEN_CASES.labels(case_class, severity).set(n)
    OLDEST_OPEN.set(snapshot["oldest_open_s"])
    for day, ok_at, bad in snapshot["dates"]:
        if ok_at is not None:
            LAST_SUCCESS.labels(day).set(ok_at)
        INCOMPLETE.labels(day).set(bad)
    for day, seconds in snapshot["durations"]:
        LAST_DURATION.labels(day).set(seconds)


class ReconApi:
    def __init__(self, settings: ApiSettings, store: PgReconStore, tokens: Tokens, health: Health) -> None:
        self._s, self._store, self._tokens, self._health = settings, store, tokens, health
        self._database = Dependency("database", "reconciler-api", health, up=False)
        self._gauges_at = 0.0

    def app(self) -> web.Application:
        app = service_app(middlewares=[self._middleware], client_max_size=64 * 1024, database=self._database)
        app.add_routes(aiohttp_routes(self._health))
        read, work = self._guard("recon:read"), self._guard("recon:work")
        app.add_routes(
            [
                web.get("/v1/runs", read(self.runs)),
                web.get("/v1/runs/{run_id}", read(self.run)),
                web.get("/v1/cases", read(self.cases)),
                web.get("/v1/cases/{case_id}", read(self.case)),
                web.post("/v1/cases/{case_id}/acknowledge", work(self.acknowledge)),
            ]
        )
        watch(app, self._health, self._probe, self._database)
        return app

    async def _probe(self) -> None:
        """The database is there; the gauges are refreshed every metrics interval."""
        if time.monotonic() - self._gauges_at >= self._s.metrics_interval_s:
            publish_gauges(await asyncio.to_thread(self._store.gauges))
            self._gauges_at = time.monotonic()
        else:
            await asyncio.to_thread(self._store.ping)

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            response = await handler(request)
        except BadRequest as exc:
            response = _json(exc.status, {"error": exc.error, "detail": exc.detail})
        if request.path.startswith("/v1/"):
            log.info(
                "api.request",
                method=request.method,
                path=request.path,
                status=response.status,
                principal=request.get("principal"),
            )
        return response

    def _guard(
        self, permission: str
    ) -> Callable[[Callable[[web.Request, Caller], Awaitable[web.Response]]], Handler]:
        def wrap(handler: Callable[[web.Request, Caller], Awaitable[web.Response]]) -> Handler:
            async def guarded(request: web.Request) -> web.StreamResponse:
                scheme, _, token = request.headers.get("Authorization", "").partition(" ")
                caller = self._tokens.caller(token.strip()) if scheme.lower() == "bearer" and token else None
                if caller is None:
                    return _json(401, {"error": "unauthorized", "detail": "a valid bearer token is required"})
                if permission not in caller.permissions:
                    return _json(403, {"error": "forbidden", "detail": f"needs the {permission} permission"})
                request["principal"] = caller.principal
                return await handler(request, caller)

            return guarded

        return wrap

    # -- handlers ------------------------------------------------------------------------------------

    async def runs(self, request: web.Request, _: Caller) -> web.Response:
        day = _date(request.query.get("date"))
        limit = _limit(request.query.get("limit"), self._s.page_size_max)
        return _json(200, {"runs": await asyncio.to_thread(self._store.runs_of, day, limit)})

    async def run(self, request: web.Request, _: Caller) -> web.Response:
        found = await asyncio.to_thread(self._store.run, _id(request, "run_id"))
        if found is None:
            raise BadRequest(404, "not_found", "no such run")
        return _json(200, found)

    async def cases(self, request: web.Request, _: Caller) -> web.Response:
        status = request.query.get("status")
        if status is not None and status not in STATUSES:
            raise BadRequest(400, "bad_query", f"status must be one of {', '.join(sorted(STATUSES))}")
        rows = await asyncio.to_thread(
            lambda: self._store.cases_where(
                business_date=_date(request.query.get("date")),
                status=status,
                case_class=request.query.get("class"),
                limit=_limit(request.query.get("limit"), self._s.page_size_max),
            )
        )
        return _json(200, {"cases": rows})

    async def case(self, request: web.Request, _: Caller) -> web.Response:
        found = await asyncio.to_thread(self._store.case, _id(request, "case_id"))
        if found is None:
            raise BadRequest(404, "not_found", "no such case")
        return _json(200, found)

    async def acknowledge(self, request: web.Request, caller: Caller) -> web.Response:
        case_id = _id(request, "case_id")
        try:
            body = await request.json()
        except ValueError:
            raise BadRequest(400, "bad_body", 'the body must be JSON: {"note": "why"}') from None
        note = body.get("note") if isinstance(body, dict) else None
        if not isinstance(note, str) or not note.strip() or len(note) > NOTE_MAX:
            raise BadRequest(400, "bad_body", f"note: why, 1-{NOTE_MAX} characters")
        status = await asyncio.to_thread(self._store.acknowledge, case_id, caller.principal, note.strip())
        if status is None:
            raise BadRequest(404, "not_found", "no such case")
        return _json(200, {"case_id": case_id, "status": status})


def _id(request: web.Request, name: str) -> int:
    raw = request.match_info[name]
    if not raw.isdigit() or len(raw) > 18:
        raise BadRequest(400, "bad_path", f"{name} must be a positive integer")
    return int(raw)


def _date(raw: str | None) -> date | None:
    if raw is None:
        return None
    try:
        return date.fromisoformat(raw)
    except ValueError:
        raise BadRequest(400, "bad_query", "date must be YYYY-MM-DD") from None


def _limit(raw: str | None, maximum: int) -> int:
    if raw is None:
        return min(100, maximum)
    if not raw.isdigit() or not 1 <= int(raw) <= maximum:
        raise BadRequest(400, "bad_query", f"limit must be an integer 1..{maximum}")
    return int(raw)


def serve(settings: ApiSettings, store: PgReconStore) -> None:
    """Run until SIGTERM/SIGINT (aiohttp finishes the requests in flight)."""
    configure_logging(f"{SERVICE_NAME}-api")
    health = Health.configured()
    api = ReconApi(settings, store, Tokens.load(settings.tokens_file, PERMISSIONS), health)
    log.info("api.starting", host=settings.http_host, port=settings.http_port)
    web.run_app(api.app(), host=settings.http_host, port=settings.http_port, access_log=None, print=None)
