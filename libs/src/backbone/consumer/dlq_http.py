"""The dead letters of a service's consumers over HTTP, for operators (the ops console): the same
acts as ``<service> dlq`` (``backbone.consumer.dlq``), behind ``backbone.tokens``.

Every service that runs an idempotent consumer mounts ``dead_letter_routes`` on its API once:

    GET  /v1/dead-letters[?consumer=&include_resolved=true&limit=]     deadletters:view
    GET  /v1/dead-letters/{consumer}/{id}                               deadletters:view
    POST /v1/dead-letters/{consumer}/{id}/replay   {"reason": "why"}   deadletters:replay
    POST /v1/dead-letters/{consumer}/{id}/discard  {"reason": "why"}   deadletters:replay

The operator is the caller's principal (for the console: the person named in ``X-Operator``);
who and why are kept on the dead letter itself (``resolved_by``, ``resolution_note``), in the same
transaction as the replay's effects. Replay is safe to repeat: the row is locked and must still be
open, and the consumer's dedup row (``processed_events``) is claimed in the same transaction, so an
event applied meanwhile is not applied again (``applied: false``). A payload is shown decoded when
it still decodes, else as escaped text, and card numbers are redacted either way: an answer never
carries card data (a card-data dead letter only ever kept a redacted copy).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, assert_never

from aiohttp import web

from backbone.bodies import json_body
from backbone.carddata import redact_card_numbers, redact_document
from backbone.consumer.dlq import (
    AlreadyResolved,
    Discarded,
    DiscardOutcome,
    NotFound,
    ReplayContext,
    Replayed,
    ReplayOutcome,
    StillFailing,
    discard_dead_letter,
    list_dead_letters,
    replay_dead_letter,
)
from backbone.logs import get_logger
from backbone.postgres import connect
from backbone.tokens import Caller, Tokens

log = get_logger(__name__)
VIEW: Final = "deadletters:view"
REPLAY: Final = "deadletters:replay"
PERMISSIONS: Final = frozenset({VIEW, REPLAY})
REASON_MAX: Final = 500
LIMIT_MAX: Final = 500
PAYLOAD_SHOWN_MAX: Final = 16 * 1024  # bytes of an undecodable payload shown as text
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_CONTROL: Final = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # shown as \xNN: a person sees every byte


@dataclass(frozen=True)
class DeadLetterSource:
    """One consumer of the service: its name (the dead letters' ``consumer``), its database and
    how to build its replay parts (the consumer's own handler; built on first replay)."""

    consumer: str
    database_url: str
    build: Callable[[], ReplayContext]


class _Refused(Exception):
    def __init__(self, status: int, error: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.error, self.detail = status, error, detail


def _json(status: int, body: Any) -> web.Response:
    return web.json_response(body, status=status, dumps=lambda v: json.dumps(v, default=str))


class _DeadLetters:
    def __init__(self, tokens: Tokens, sources: Sequence[DeadLetterSource], service: str) -> None:
        assert sources, "a service without consumers has no dead letters to serve"
        self._tokens, self._service = tokens, service
        self._sources = {s.consumer: s for s in sources}
        self._contexts: dict[str, ReplayContext] = {}

    def guard(self, permission: str, handler: Callable[[web.Request, Caller], Awaitable[Any]]) -> Handler:
        async def guarded(request: web.Request) -> web.StreamResponse:
            caller = self._tokens.authenticate(request.headers)
            try:
                if caller is None:
                    raise _Refused(401, "unauthorized", "a valid bearer token is required")
                if permission not in caller.permissions:
                    raise _Refused(403, "forbidden", f"needs the {permission} permission")
                status, body = await handler(request, caller)
            except _Refused as exc:
                log.warning(
                    "deadletters.refused",
                    path=request.path,
                    method=request.method,
                    principal=caller.principal if caller else None,
                    status=exc.status,
                    error=exc.error,
                )
                return _json(exc.status, {"error": exc.error, "detail": exc.detail})
            return _json(status, body)

        return guarded

    def _source(self, name: str) -> DeadLetterSource:
        source = self._sources.get(name)
        if source is None:
            raise _Refused(404, "not_found", f"no consumer {name[:64]!r} here")
        return source

    async def listing(self, request: web.Request, _: Caller) -> tuple[int, Any]:
        wanted = request.query.get("consumer")
        names = [self._source(wanted).consumer] if wanted else sorted(self._sources)
        resolved = request.query.get("include_resolved", "false")
        if resolved not in ("true", "false"):
            raise _Refused(400, "bad_query", "include_resolved: true or false")
        raw_limit = request.query.get("limit", "100")
        if not raw_limit.isdigit() or not 1 <= int(raw_limit) <= LIMIT_MAX:
            raise _Refused(400, "bad_query", f"limit: 1-{LIMIT_MAX}")
        rows: list[dict[str, Any]] = []
        for name in names:
            found = await asyncio.to_thread(
                self._list_one, self._sources[name], resolved == "true", int(raw_limit)
            )
            rows += [{"consumer": name, **_safe_row(r)} for r in found]
        return 200, {"service": self._service, "consumers": sorted(self._sources), "dead_letters": rows}

    @staticmethod
    def _list_one(source: DeadLetterSource, include_resolved: bool, limit: int) -> list[dict[str, Any]]:
        with connect(source.database_url, autocommit=True, application_name="dead-letters-api") as conn:
            return list_dead_letters(conn, source.consumer, include_resolved=include_resolved, limit=limit)

    async def show(self, request: web.Request, _: Caller) -> tuple[int, Any]:
        source, letter_id = self._source(request.match_info["consumer"]), _letter_id(request)
        found = await asyncio.to_thread(self._show_one, source, letter_id)
        if found is None:
            raise _Refused(404, "not_found", "no such dead letter")
        return 200, {"service": self._service, **found}

    def _show_one(self, source: DeadLetterSource, letter_id: int) -> dict[str, Any] | None:
        with connect(source.database_url, autocommit=True, application_name="dead-letters-api") as conn:
            cur = conn.execute(
                "SELECT id, consumer, topic, kafka_partition, kafka_offset, message_key, payload, headers,"
                " event_id, event_type, error_class, reason, attempts, dead_lettered_at, resolution,"
                " resolved_at, resolved_by, resolution_note FROM dead_letters"
                " WHERE id = %s AND consumer = %s",
                (letter_id, source.consumer),
            )
            row = cur.fetchone()
            names = [d.name for d in cur.description or []]
        if row is None:
            return None
        letter = dict(zip(names, row, strict=True))
        key, payload = letter.pop("message_key"), letter.pop("payload")
        letter["message_key"] = _text(key)
        letter["headers"] = redact_document(letter["headers"] or {})[0]
        letter["payload"] = self._payload(source, payload)
        return _safe_row(letter)

    def _payload(self, source: DeadLetterSource, payload: bytes | None) -> dict[str, Any]:
        """The payload as a person can read it: the decoded document, or escaped text."""
        raw = bytes(payload or b"")
        try:
            event = self._context(source).codec.decode(raw)
        except Exception:  # whatever made it undecodable is its dead letter's reason
            return {"decoded": False, "size_bytes": len(raw), "text": _text(raw[:PAYLOAD_SHOWN_MAX])}
        return {
            "decoded": True,
            "size_bytes": len(raw),
            "event_type": event.event_type,
            "document": redact_document(event.body)[0],
        }

    def _context(self, source: DeadLetterSource) -> ReplayContext:
        if source.consumer not in self._contexts:
            self._contexts[source.consumer] = source.build()
        return self._contexts[source.consumer]

    async def replay(self, request: web.Request, caller: Caller) -> tuple[int, Any]:
        source, letter_id = self._source(request.match_info["consumer"]), _letter_id(request)
        reason = _reason(request)

        def act() -> ReplayOutcome:
            with connect(source.database_url, autocommit=True, application_name="dead-letters-api") as conn:
                return replay_dead_letter(
                    conn, self._context(source), letter_id, operator=caller.principal, note=reason
                )

        outcome = await asyncio.to_thread(act)
        log.info("deadletters.replay", consumer=source.consumer, id=letter_id, by=caller.principal,
                 outcome=type(outcome).__name__)  # fmt: skip  # continuation aligned under its bracket
        match outcome:
            case Replayed(applied=applied):
                return 200, {"id": letter_id, "outcome": "replayed", "applied": applied}
            case StillFailing(reason=why):
                raise _Refused(422, "still_failing", redact_card_numbers(why)[:2000])
            case NotFound():
                raise _Refused(404, "not_found", "no such dead letter")
            case AlreadyResolved(resolution=resolution):
                raise _Refused(409, "already_resolved", f"this dead letter was already {resolution}")
            case _:
                assert_never(outcome)

    async def discard(self, request: web.Request, caller: Caller) -> tuple[int, Any]:
        source, letter_id = self._source(request.match_info["consumer"]), _letter_id(request)
        reason = _reason(request)

        def act() -> DiscardOutcome:
            with connect(source.database_url, autocommit=True, application_name="dead-letters-api") as conn:
                return discard_dead_letter(
                    conn, source.consumer, letter_id, operator=caller.principal, note=reason
                )

        outcome = await asyncio.to_thread(act)
        log.info("deadletters.discard", consumer=source.consumer, id=letter_id, by=caller.principal,
                 outcome=type(outcome).__name__)  # fmt: skip  # continuation aligned under its bracket
        match outcome:
            case Discarded():
                return 200, {"id": letter_id, "outcome": "discarded"}
            case NotFound():
                raise _Refused(404, "not_found", "no such dead letter")
            case AlreadyResolved(resolution=resolution):
                raise _Refused(409, "already_resolved", f"this dead letter was already {resolution}")
            case _:
                assert_never(outcome)


def dead_letter_routes(
    tokens: Tokens, sources: Sequence[DeadLetterSource], *, service: str
) -> list[web.RouteDef]:
    """The routes to add to a service's app (``backbone.http.service_app``: card data in a request
    is refused before these handlers). ``tokens`` must know ``PERMISSIONS``."""
    api = _DeadLetters(tokens, sources, service)
    return [
        web.get("/v1/dead-letters", api.guard(VIEW, api.listing)),
        web.get("/v1/dead-letters/{consumer}/{id}", api.guard(VIEW, api.show)),
        web.post("/v1/dead-letters/{consumer}/{id}/replay", api.guard(REPLAY, api.replay)),
        web.post("/v1/dead-letters/{consumer}/{id}/discard", api.guard(REPLAY, api.discard)),
    ]


def _letter_id(request: web.Request) -> int:
    raw = request.match_info["id"]
    if not raw.isdigit() or len(raw) > 18 or int(raw) < 1:
        raise _Refused(400, "bad_path", "a dead letter id is a positive whole number")
    return int(raw)


def _reason(request: web.Request) -> str:
    body = json_body(request)  # read, bounded and screened by backbone.http's guard
    reason = body.get("reason") if isinstance(body, dict) else None
    if not isinstance(reason, str) or not reason.strip() or len(reason) > REASON_MAX:
        raise _Refused(400, "bad_body", f"reason: say why, 1-{REASON_MAX} characters")
    return reason.strip()


def _text(raw: bytes | memoryview | None) -> str | None:
    """Bytes as text a person can read (undecodable bytes escaped), card numbers redacted."""
    if raw is None:
        return None
    text = bytes(raw).decode("utf-8", "backslashreplace")
    return redact_card_numbers(_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text))


def _safe_row(row: dict[str, Any]) -> dict[str, Any]:
    """Free text columns (reason, note) redacted: the last line of defence, as in the logs."""
    return {k: redact_card_numbers(v) if isinstance(v, str) else v for k, v in row.items()}
