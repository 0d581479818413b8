"""The reconciler's HTTP API (aiohttp, port 8085): runs, cases and repairs for people and the
console, and the gauges the alerts read. Every ``/v1`` route needs ``Authorization: Bearer <token>``
of one operator (``backbone.tokens``: the principal is the operator) with a permission:
``cases:view`` to read, ``cases:work`` to acknowledge, ``repairs:propose`` to propose or amend a
repair, ``repairs:approve`` to approve or reject one. Maker-checker is the application's rule, not a
permission: the proposer never approves, whatever they hold. Card data anywhere in a request is
refused before any handler sees it (``backbone.http``); bad input gets a 4xx with a reason and
changes nothing; a refused act (including a missing token or permission on a POST) is audited.
Cases, their repairs and their audit are the caller's merchants' only (``api_door``): another
merchant's case answers as one that does not exist (404, absent from lists; a refused act audited).
``/healthz``, ``/readyz`` and ``/metrics`` are open. The repair routes' handlers are ``api_repairs``'.

    GET  /v1/runs[?date=YYYY-MM-DD&limit=]
    GET  /v1/runs/{run_id}
    GET  /v1/cases[?date=&status=open|acknowledged|resolved&class=&limit=
                   &payment_id=&provider_payment_id=]   (cases whose records name that payment)
    GET  /v1/cases/{case_id}                (evidence side by side, history, repairs)
    POST /v1/cases/{case_id}/acknowledge    {"note": "why"}                       (cases:work)
    POST /v1/cases/{case_id}/repairs        {"repair_type", "reason", "amount_minor"?, "currency"?,
                                             "mt5_login"?}                         (repairs:propose)
    GET  /v1/repairs[?case_id=&status=&limit=], GET /v1/repairs/{repair_id}
    POST /v1/repairs/{repair_id}/approve    {"command_digest": "<the digest you saw>"} (repairs:approve)
    POST /v1/repairs/{repair_id}/reject     {"reason": "why"}                     (repairs:approve)
    GET  /v1/audit[?target=case:N|repair:N&operator=&limit=]
    GET  /v1/dead-letters, GET /v1/dead-letters/{consumer}/{id}          (deadletters:view)
    POST /v1/dead-letters/{consumer}/{id}/replay|discard {"reason"}      (deadletters:replay)
                                            the consumer's dead letters (backbone.consumer.dlq_http)
    POST /v1/cases/{case_id}/reopen         {"reason": "why"}                     (cases:work)
    GET  /v1/cases.csv[?date=&status=&class=&limit=]   the selection, with empty decision columns
    POST /v1/decisions                      that CSV filled in (text/csv), or JSON {"case_ids": [..],
                                            "decision", "reason", "repair_type"?, ...}: each line its
                                            own act (cases:work to acknowledge or reopen,
                                            repairs:propose to propose); a bad line refuses it all

Metrics (refreshed every ``RECON_METRICS_INTERVAL_S`` from the database, seed 002 §6.1):
``recon_open_cases{case_class,severity}``, ``recon_oldest_open_case_age_seconds``,
``recon_last_successful_run_timestamp_seconds{business_date}``,
``recon_last_run_duration_seconds{business_date}``, ``recon_incomplete_runs{business_date}`` (runs
started in the last 7 days).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence
from typing import Any, Final

from aiohttp import web
from backbone import bodies
from backbone.consumer import dlq_http
from backbone.health import Health, aiohttp_routes
from backbone.http import service_app, watch
from backbone.logs import configure_logging, get_logger
from backbone.outage import Dependency
from backbone.tokens import Caller, Tokens
from prometheus_client import Gauge

from reconciler.adapters.pg_repairs import PgRepairDesk
from reconciler.adapters.pg_store import PgReconStore
from reconciler.application import repairs as acts
from reconciler.domain.decisions import (
    PERMISSION_OF,
    ROWS_MAX,
    DecisionsRefused,
    export_csv,
    parse_decisions,
)
from reconciler.domain.repairs import RepairRefused
from reconciler.entrypoints.api_door import SCOPE, Door, Handler
from reconciler.entrypoints.api_input import (
    BadRequest,
    bulk,
    json_body,
    json_response,
    path_id,
    payment_refs,
    query_date,
    query_limit,
)
from reconciler.entrypoints.api_repairs import RepairRoutes
from reconciler.settings import SERVICE_NAME, ApiSettings

log = get_logger(__name__)
VIEW, WORK, PROPOSE, APPROVE = "cases:view", "cases:work", "repairs:propose", "repairs:approve"
PERMISSIONS: Final = frozenset({VIEW, WORK, PROPOSE, APPROVE}) | dlq_http.PERMISSIONS
STATUSES: Final = frozenset({"open", "acknowledged", "resolved"})
NOTE_MAX: Final = 500
BODY_MAX: Final = 2 * 1024 * 1024  # a decisions file of ROWS_MAX cases

OPEN_CASES = Gauge("recon_open_cases", "open or acknowledged cases", ["case_class", "severity"])
OLDEST_OPEN = Gauge("recon_oldest_open_case_age_seconds", "age of the oldest open or acknowledged case")
LAST_SUCCESS = Gauge(
    "recon_last_successful_run_timestamp_seconds", "last clean/discrepancies run", ["business_date"]
)
LAST_DURATION = Gauge("recon_last_run_duration_seconds", "the date's last finished run", ["business_date"])
INCOMPLETE = Gauge("recon_incomplete_runs", "incomplete or failed runs of the date", ["business_date"])


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
    def __init__(
        self,
        settings: ApiSettings,
        store: PgReconStore,
        desk: PgRepairDesk,
        tokens: Tokens,
        health: Health,
        dead_letters: Sequence[dlq_http.DeadLetterSource] = (),
    ) -> None:
        self._s, self._store, self._desk, self._tokens, self._health = settings, store, desk, tokens, health
        self._dead_letters = dead_letters
        self._door = Door(tokens, desk)
        self._database = Dependency("database", "reconciler-api", health, up=False)
        self._gauges_at = 0.0

    def app(self) -> web.Application:
        app = service_app(
            middlewares=[self._middleware],
            client_max_size=BODY_MAX,
            body_types=bodies.JSON_TYPES | {bodies.CSV},
            database=self._database,
        )
        app.add_routes(aiohttp_routes(self._health))
        view, work = self._door.guard(VIEW), self._door.guard(WORK)
        propose, approve = self._door.guard(PROPOSE), self._door.guard(APPROVE)
        repairs = RepairRoutes(self._desk, self._s.page_size_max)
        app.add_routes(
            [
                web.get("/v1/runs", view(self.runs)),
                web.get("/v1/runs/{run_id}", view(self.run)),
                web.get("/v1/cases", view(self.cases)),
                web.get("/v1/cases.csv", view(self.export)),
                web.post("/v1/decisions", view(self.decisions)),
                web.post("/v1/cases/{case_id}/reopen", work(self.reopen)),
                web.get("/v1/cases/{case_id}", view(self.case)),
                web.post("/v1/cases/{case_id}/acknowledge", work(self.acknowledge)),
                web.post("/v1/cases/{case_id}/repairs", propose(repairs.propose)),
                web.get("/v1/repairs", view(repairs.repairs)),
                web.get("/v1/repairs/{repair_id}", view(repairs.repair)),
                web.post("/v1/repairs/{repair_id}/approve", approve(repairs.approve)),
                web.post("/v1/repairs/{repair_id}/reject", approve(repairs.reject)),
                web.get("/v1/audit", view(self.audit)),
            ]
        )
        if self._dead_letters:
            routes = dlq_http.dead_letter_routes(self._tokens, self._dead_letters, service=SERVICE_NAME)
            app.add_routes(routes)
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
        except (BadRequest, RepairRefused) as exc:
            response = json_response(exc.status, {"error": exc.error, "detail": exc.detail})
        if request.path.startswith("/v1/"):
            log.info(
                "api.request",
                method=request.method,
                path=request.path,
                status=response.status,
                principal=request.get("principal"),
            )
        return response

    # -- handlers ------------------------------------------------------------------------------------

    async def runs(self, request: web.Request, _: Caller) -> web.Response:
        day = query_date(request.query.get("date"))
        limit = query_limit(request.query.get("limit"), self._s.page_size_max)
        return json_response(200, {"runs": await asyncio.to_thread(self._store.runs_of, day, limit)})

    async def run(self, request: web.Request, _: Caller) -> web.Response:
        found = await asyncio.to_thread(self._store.run, path_id(request, "run_id"))
        if found is None:
            raise BadRequest(404, "not_found", "no such run")
        return json_response(200, found)

    async def cases(self, request: web.Request, _: Caller) -> web.Response:
        status = request.query.get("status")
        if status is not None and status not in STATUSES:
            raise BadRequest(400, "bad_query", f"status must be one of {', '.join(sorted(STATUSES))}")
        refs = payment_refs(request.query)
        rows = await asyncio.to_thread(
            lambda: self._store.cases_where(
                business_date=query_date(request.query.get("date")),
                status=status,
                case_class=request.query.get("class"),
                limit=query_limit(request.query.get("limit"), self._s.page_size_max),
                payment_refs=refs,
                scope=request[SCOPE],
            )
        )
        return json_response(200, {"cases": rows})

    async def case(self, request: web.Request, _: Caller) -> web.Response:
        case_id, scope = path_id(request, "case_id"), request[SCOPE]
        found = await asyncio.to_thread(lambda: self._store.case(case_id, scope=scope))
        if found is None:
            raise BadRequest(404, "not_found", "no such case")
        repairs = await asyncio.to_thread(lambda: self._desk.repairs_where(case_id=case_id, scope=scope))
        found["repairs"] = repairs
        return json_response(200, found)

    async def acknowledge(self, request: web.Request, caller: Caller) -> web.Response:
        case_id = path_id(request, "case_id")
        body = bodies.json_body(request)
        note = body.get("note") if isinstance(body, dict) else None
        if not isinstance(note, str) or not note.strip() or len(note) > NOTE_MAX:
            raise BadRequest(400, "bad_body", f"note: why, 1-{NOTE_MAX} characters")
        why, scope = note.strip(), request[SCOPE]
        status = await asyncio.to_thread(
            lambda: acts.acknowledge(self._desk, caller.principal, case_id, why, scope=scope)
        )
        return json_response(200, {"case_id": case_id, "status": status.value})

    async def reopen(self, request: web.Request, caller: Caller) -> web.Response:
        case_id = path_id(request, "case_id")
        reason = (await json_body(request)).get("reason")
        if not isinstance(reason, str):
            raise BadRequest(400, "bad_body", "reason: why, a string")
        status = await asyncio.to_thread(
            lambda: acts.reopen(self._desk, caller.principal, case_id, reason, scope=request[SCOPE])
        )
        return json_response(200, {"case_id": case_id, "status": status.value})

    async def export(self, request: web.Request, _: Caller) -> web.Response:
        status = request.query.get("status")
        if status is not None and status not in STATUSES:
            raise BadRequest(400, "bad_query", f"status must be one of {', '.join(sorted(STATUSES))}")
        rows = await asyncio.to_thread(
            lambda: self._store.cases_where(
                business_date=query_date(request.query.get("date")),
                status=status,
                case_class=request.query.get("class"),
                limit=query_limit(request.query.get("limit"), ROWS_MAX),
                scope=request[SCOPE],
            )
        )
        return web.Response(text=export_csv(rows), content_type="text/csv")

    async def decisions(self, request: web.Request, caller: Caller) -> web.Response:
        if request.content_type == "text/csv":
            try:
                decisions = parse_decisions(bodies.text_body(request))
            except DecisionsRefused as refused:
                raise BadRequest(400, "bad_decisions", str(refused)) from None
        else:
            decisions = bulk(await json_body(request))
        needed = sorted({PERMISSION_OF[d.action] for d in decisions} - caller.permissions)
        if needed:
            await asyncio.to_thread(
                self._desk.audit_refused, caller.principal, "decisions", "decisions", f"needs {needed}", {}
            )
            raise BadRequest(403, "forbidden", f"these decisions need {', '.join(needed)}")
        results = await asyncio.to_thread(
            lambda: acts.decide(self._desk, caller.principal, decisions, scope=request[SCOPE])
        )
        return json_response(200, {"results": [dataclasses.asdict(r) for r in results]})

    async def audit(self, request: web.Request, _: Caller) -> web.Response:
        rows = await asyncio.to_thread(
            lambda: self._desk.audit_where(
                target=request.query.get("target"),
                operator=request.query.get("operator"),
                limit=query_limit(request.query.get("limit"), self._s.page_size_max),
                scope=request[SCOPE],
            )
        )
        return json_response(200, {"audit": rows})


def serve(
    settings: ApiSettings,
    store: PgReconStore,
    desk: PgRepairDesk,
    dead_letters: Sequence[dlq_http.DeadLetterSource] = (),
) -> None:
    """Run until SIGTERM/SIGINT (aiohttp finishes the requests in flight)."""
    configure_logging(f"{SERVICE_NAME}-api")
    health = Health.configured()
    tokens = Tokens.load(settings.tokens_file, PERMISSIONS)
    api = ReconApi(settings, store, desk, tokens, health, dead_letters)
    log.info("api.starting", host=settings.http_host, port=settings.http_port)
    web.run_app(api.app(), host=settings.http_host, port=settings.http_port, access_log=None, print=None)
