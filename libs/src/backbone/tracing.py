"""Tracing: one deposit is one trace, across HTTP, the outbox, Kafka and the MT5 and PSP calls (ADR 0012).

What this module owns (the process's tracer provider and exporters are ``backbone.tracing_setup``'s):
- W3C trace context in and out (``inject`` / ``extract``): ``traceparent`` and ``tracestate`` on HTTP
  requests and on Kafka headers (through the outbox's ``headers`` column, which the relay copies);
- the payment a piece of work is for (``bind_payment``), which every log line carries as ``payment_id``;
- the payment's trace, stored once per service (``payment_traces``, backbone migration 0004): the first
  context a service sees for a payment is remembered, and later work for that payment in that service
  (a consumer handler, a worker's PSP or MT5 call) continues it. That is how a PSP webhook, which
  arrives as a new trace, still ends up in the deposit's trace (linked to the webhook's own).

Invariants: tracing never fails the work it observes (a malformed ``traceparent`` is ignored, a failing
exporter drops spans); a payment's stored trace is written once (first writer wins) and never changed.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any, Final

import psycopg
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from backbone.carddata import find_card_number
from backbone.tracing_setup import SAMPLER, ids_only_span, tracer

TRACE_HEADERS: Final = ("traceparent", "tracestate")
KNOWN_PAYMENTS_MAX: Final = 10_000  # payment -> trace entries a process keeps for its workers
BATCH_LINKS_MAX: Final = 32  # a batch span links at most this many of its messages' spans

_PROPAGATOR: Final = TraceContextTextMapPropagator()
_payment_id: ContextVar[str | None] = ContextVar("backbone_payment_id", default=None)
# Inside a consumer batch: each payment's own consumer span, so the outbox rows a handler writes for
# that payment continue that payment's trace, not the batch's.
_payment_contexts: ContextVar[Mapping[str, Context] | None] = ContextVar(
    "backbone_payment_contexts", default=None
)
_known: OrderedDict[str, str] = OrderedDict()  # payment_id -> traceparent, read by workers
_read: OrderedDict[tuple[str, str], str] = OrderedDict()  # (database, payment_id) -> stored traceparent
_known_lock = threading.Lock()


# -- propagation ------------------------------------------------------------------------------------


def extract(carrier: Mapping[str, str]) -> Context:
    """The context a request or message carries (``traceparent``/``tracestate``); an empty one if it
    carries none or a malformed one (then the work starts a new trace). The card-data guard lets a
    well-formed ``traceparent`` through (ADR 0012): its 32-hex trace id can never hold a bounded
    card number, but its 16-hex parent span id can be all digits, and it would be exported as our
    span's parent; such a one is not continued (about 1 in 20,000 random ids: a new trace)."""
    parts = (carrier.get("traceparent", "") or "").split("-")
    if any(part.isdigit() and find_card_number(part) for part in parts[1:3]):  # hex letters: never
        return Context()
    return _PROPAGATOR.extract(carrier)


def inject(carrier: MutableMapping[str, str], payment_id: str | None = None) -> None:
    """Put the current trace context into ``carrier``; inside a consumer batch, the context of
    ``payment_id``'s own message span."""
    contexts = _payment_contexts.get()
    context = contexts.get(payment_id) if contexts is not None and payment_id is not None else None
    _PROPAGATOR.inject(carrier, context=context)


def trace_headers(raw: Iterable[tuple[str, str | bytes | None]] | None) -> dict[str, str]:
    """The trace headers among a Kafka message's headers (others are not decoded)."""
    found: dict[str, str] = {}
    for key, value in raw or ():
        if key in TRACE_HEADERS and value is not None:
            found[key] = value.decode("ascii", "replace") if isinstance(value, bytes) else value
    return found


def traceparent_of(span: Span) -> str | None:
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get("traceparent")


# -- what the logs read -------------------------------------------------------------------------------


def bound_payment_id() -> str | None:
    return _payment_id.get()


def current_ids() -> tuple[str, str] | None:
    """(trace_id, span_id) of the current span in hex, or None outside any span."""
    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


@contextmanager
def bind_payment(payment_id: str | None) -> Iterator[None]:
    """Log lines inside carry ``payment_id``; the current span gets the ``payment.id`` attribute."""
    if payment_id is None:
        yield
        return
    trace.get_current_span().set_attribute("payment.id", payment_id)
    token = _payment_id.set(payment_id)
    try:
        yield
    finally:
        _payment_id.reset(token)


def set_payment(payment_id: str) -> None:
    """Bind ``payment_id`` for the rest of the current task or request (a handler that learns the id
    late, such as a create); the HTTP middleware resets it when the request ends."""
    trace.get_current_span().set_attribute("payment.id", payment_id)
    _payment_id.set(payment_id)


def payment_scope(payment_id: str | None) -> Token[str | None]:
    """Start a scope (a request) bound to ``payment_id`` (None: not yet known; ``set_payment`` may
    bind it later); ``end_payment_scope`` restores what was bound before."""
    if payment_id is not None:
        trace.get_current_span().set_attribute("payment.id", payment_id)
    return _payment_id.set(payment_id)


def end_payment_scope(token: Token[str | None]) -> None:
    _payment_id.reset(token)


# -- spans ----------------------------------------------------------------------------------------------


@contextmanager
def client_span(name: str, attributes: Mapping[str, str | int]) -> Iterator[dict[str, str]]:
    """A CLIENT span around one outbound call; yields the headers that carry it (``traceparent``)."""
    with tracer().start_as_current_span(name, kind=SpanKind.CLIENT, attributes=dict(attributes)):
        headers: dict[str, str] = {}
        _PROPAGATOR.inject(headers)
        yield headers


def note_failure(reason: str) -> None:
    """The current (client) span's call failed: no usable answer."""
    span = trace.get_current_span()
    span.set_attribute("call.failure", reason)
    span.set_status(Status(StatusCode.ERROR, reason))


def note_status(status: int) -> None:
    trace.get_current_span().set_attribute("http.response.status_code", status)


@contextmanager
def for_payment(payment_id: str, name: str) -> Iterator[Span]:
    """A span for a worker's step on ``payment_id``, in the payment's stored trace when this process
    has read it (``recall``), else under the current context; log lines inside carry the payment."""
    with _known_lock:
        traceparent = _known.get(payment_id)
    context = extract({"traceparent": traceparent}) if traceparent else None
    with (
        tracer().start_as_current_span(name, context=context, attributes={"payment.id": payment_id}) as span,
        bind_payment(payment_id),
    ):
        yield span


@dataclass(frozen=True, slots=True)
class Resumable:
    """A span's context and its payment, captured to write later what happened inside it."""

    context: Context
    payment_id: str | None


def capture() -> Resumable:
    return Resumable(otel_context.get_current(), _payment_id.get())


@contextmanager
def resumed(captured: Resumable) -> Iterator[None]:
    """Run under a context captured earlier: an answer recorded after its call's span ended is
    published in the call's trace, and its log lines carry the payment."""
    token = otel_context.attach(captured.context)
    bound = _payment_id.set(captured.payment_id)
    try:
        yield
    finally:
        _payment_id.reset(bound)
        otel_context.detach(token)


# -- the payment's stored trace ---------------------------------------------------------------------------


def remember(conn: psycopg.Connection, traceparents: Mapping[str, str]) -> None:
    """Store each payment's trace unless the service already has one (first writer wins), in the
    caller's transaction."""
    if not traceparents:
        return
    conn.execute(
        "INSERT INTO payment_traces (payment_id, traceparent)"
        " SELECT * FROM unnest(%s::text[], %s::text[]) ON CONFLICT (payment_id) DO NOTHING",
        (list(traceparents), list(traceparents.values())),
    )
    _note(traceparents.items())


def current_traceparent() -> str | None:
    """The current span's ``traceparent`` (to store with a payment's creation), or None outside any."""
    return traceparent_of(trace.get_current_span())


def remember_current(conn: psycopg.Connection, payment_id: str) -> None:
    """Store the current span's context as ``payment_id``'s trace (a payment's creation)."""
    traceparent = traceparent_of(trace.get_current_span())
    if traceparent is not None:
        remember(conn, {payment_id: traceparent})


def recall(conn: psycopg.Connection, payment_ids: Sequence[str]) -> dict[str, str]:
    """The stored traces of these payments (``traceparent`` by payment_id); also kept in memory for
    ``for_payment``. A trace once read from a database is not read from it again: a stored trace is
    never changed or deleted, so a consumer batch whose payments were all seen before costs no
    statement (only rows read are kept, never rows this process wrote in a transaction that may
    still roll back)."""
    if not payment_ids:
        return {}
    database = _database_of(conn)
    found: dict[str, str] = {}
    if database is not None:
        with _known_lock:
            for payment_id in payment_ids:
                traceparent = _read.get((database, payment_id))
                if traceparent is not None:
                    found[payment_id] = traceparent
    missing = [p for p in payment_ids if p not in found]
    if missing:
        rows = conn.execute(
            "SELECT payment_id, traceparent FROM payment_traces WHERE payment_id = ANY(%s)", (missing,)
        ).fetchall()
        read = {str(pid): str(tp) for pid, tp in rows}
        found.update(read)
        if database is not None:
            with _known_lock:
                _read.update(((database, pid), tp) for pid, tp in read.items())
                while len(_read) > KNOWN_PAYMENTS_MAX:
                    _read.popitem(last=False)
    _note(found.items())
    return found


def _database_of(conn: psycopg.Connection) -> str | None:
    """The database ``conn`` is connected to (traces are per service database), or None when it is
    not a real connection (then nothing is kept)."""
    info = getattr(conn, "info", None)
    return None if info is None else f"{info.host}:{info.port}/{info.dbname}"


def _note(items: Iterable[tuple[str, str]]) -> None:
    with _known_lock:
        for payment_id, traceparent in items:
            _known[payment_id] = traceparent
            _known.move_to_end(payment_id)
        while len(_known) > KNOWN_PAYMENTS_MAX:
            _known.popitem(last=False)


# -- consumers ----------------------------------------------------------------------------------------------


class Consumed:
    """One message a consumer is about to apply, as tracing sees it."""

    __slots__ = ("attributes", "carrier", "name", "payment_id")

    def __init__(self, name: str, payment_id: str, carrier: Mapping[str, str], attributes: dict[str, Any]):
        self.name = name
        self.payment_id = payment_id
        self.carrier = carrier
        self.attributes = attributes


@contextmanager
def consuming(conn: psycopg.Connection, consumer: str, messages: Sequence[Consumed]) -> Iterator[None]:
    """Run a batch handler inside spans: one CONSUMER span per message, in the payment's stored trace
    if this service has one (linked to the message's own trace when that differs), else continuing
    the message's trace; payments seen for the first time get it stored, after the handler ran (see
    below). With one message its span is current; with several, a batch span linking them is, and
    each payment's outbox rows still carry their own message's span (``inject``).

    Why after: a message's key can be another service's key too (a webhook's is the PSP's payment id,
    which payment-state files the payment's trace under, as an alias, while it holds the payment's
    row lock). Stored first, the key's new row would be held, uncommitted, while the handler waits
    for that same payment's row lock, and the lock's holder would wait for the key: a deadlock
    (bench-e2e saw one to four per 1,800 deposits: each a 1 s wait, then a consumer batch or a PSP
    answer rolled back and done again)."""
    stored = recall(conn, sorted({m.payment_id for m in messages}))
    spans: list[Span] = []
    contexts: dict[str, Context] = {}
    first: dict[str, str] = {}
    for m in messages:
        span = _message_span(m, stored.get(m.payment_id))
        spans.append(span)
        contexts[m.payment_id] = trace.set_span_in_context(span)
        if m.payment_id not in stored and m.payment_id not in first:
            traceparent = traceparent_of(span)
            if traceparent is not None:
                first[m.payment_id] = traceparent
    token = _payment_contexts.set(contexts)
    scope = _payment_id.set(None)  # whatever a handler binds ends with the batch
    try:
        if len(spans) == 1:
            with trace.use_span(spans[0], end_on_exit=False), bind_payment(messages[0].payment_id):
                yield
        else:
            links = [Link(s.get_span_context()) for s in spans[:BATCH_LINKS_MAX]]
            attributes = {"messaging.batch.message_count": len(spans)}
            with tracer().start_as_current_span(f"{consumer} batch", links=links, attributes=attributes):
                yield
        remember(conn, first)  # last: the handler's locks come before this batch's new keys
    except BaseException as exc:
        for span in spans:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
        raise
    finally:
        _payment_id.reset(scope)
        _payment_contexts.reset(token)
        for span in spans:
            span.end()


def _message_span(message: Consumed, stored: str | None) -> Span:
    if not SAMPLER.exporting:
        return ids_only_span(extract({"traceparent": stored} if stored is not None else message.carrier))
    incoming = extract(message.carrier)
    incoming_ctx = trace.get_current_span(incoming).get_span_context()
    links: list[Link] = []
    parent = incoming
    if stored is not None:
        parent = extract({"traceparent": stored})
        stored_ctx = trace.get_current_span(parent).get_span_context()
        if incoming_ctx.is_valid and incoming_ctx.trace_id != stored_ctx.trace_id:
            links.append(Link(incoming_ctx, {"link.reason": "message_trace"}))
    attributes = {"payment.id": message.payment_id, **message.attributes}
    return tracer().start_span(
        message.name, context=parent, kind=SpanKind.CONSUMER, links=links, attributes=attributes
    )
