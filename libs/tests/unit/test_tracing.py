"""Tracing (backbone.tracing, ADR 0012), without infrastructure: W3C context survives inject/extract;
an outbox row written inside a span carries it in its headers, and those headers, as Kafka delivers
them, put the consumer's span in the same trace; a payment's stored trace wins over a message's own
(linked), messages without headers still work; inside a batch each payment's outbox rows carry that
payment's trace; log lines carry trace_id, span_id and payment_id and still redact card data; the
HTTP edge continues the caller's trace; a PSP call carries its client span's traceparent."""

from __future__ import annotations

import asyncio
import http.server
import json
import logging
import threading
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web
from backbone import tracing, tracing_setup
from backbone.avro import AvroCodec, SchemaCatalogue
from backbone.carddata import find_in_text_pairs, luhn_valid
from backbone.consumer.messages import Polled
from backbone.http import service_app
from backbone.kafka.topics import TopicCatalogue
from backbone.logs import JsonFormatter
from backbone.outbox.writer import OutboxWriter
from backbone.psp.transport import HttpPool, TransportSettings
from backbone.testing.stack import free_port
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

CODEC = AvroCodec(SchemaCatalogue.default())
TOPICS = TopicCatalogue.default()
PAN = "4000056655665556"
FOREIGN = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture(scope="module")
def exporter() -> InMemorySpanExporter:
    tracing_setup.configure_tracing("tracing-test")
    assert isinstance(trace.get_tracer_provider(), TracerProvider)
    memory = InMemorySpanExporter()
    tracing_setup.add_span_processor(SimpleSpanProcessor(memory))
    return memory


@pytest.fixture
def spans(exporter: InMemorySpanExporter) -> Iterator[InMemorySpanExporter]:
    exporter.clear()
    yield exporter
    exporter.clear()


class FakeConn:
    """Answers ``recall``'s SELECT from ``stored`` and records ``remember``'s INSERTs."""

    def __init__(self, stored: dict[str, str] | None = None) -> None:
        self.stored = dict(stored or {})
        self.remembered: dict[str, str] = {}

    def execute(self, sql: str, params: tuple[Any, ...]) -> FakeConn:
        if sql.startswith("SELECT"):
            self._rows = [(p, self.stored[p]) for p in params[0] if p in self.stored]
        else:
            self.remembered.update(zip(params[0], params[1], strict=True))
        return self

    def fetchall(self) -> list[tuple[str, str]]:
        return self._rows


def _ids(span: ReadableSpan) -> tuple[str, str]:
    ctx = span.get_span_context()
    assert ctx is not None
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


def _writer() -> OutboxWriter:
    return OutboxWriter(CODEC, TOPICS, "tracing-test")


def _command(writer: OutboxWriter, payment_id: str) -> dict[str, str]:
    body = {
        "merchant_id": "m1", "idempotency_key": "k-1", "amount_minor": 1000, "currency": "EUR",
        "payment_method_token": "pm_tok_1", "capture_method": "manual", "deposit_reference": None,
    }  # fmt: skip  # packed: a few items a line read better than one each
    return dict(writer.event("payments.commands", "CreatePayment", payment_id, body).headers)


def _consumed(payment_id: str, headers: dict[str, str]) -> tracing.Consumed:
    as_kafka = [(k, v.encode()) for k, v in headers.items()]  # what confluent-kafka hands a consumer
    polled = Polled("payments.commands", 0, 7, payment_id.encode(), b"", as_kafka)
    return tracing.Consumed("test-consumer CreatePayment", payment_id, polled.trace_headers, {})


def test_inject_then_extract_continues_the_same_trace(spans: InMemorySpanExporter) -> None:
    """The traceparent injected inside a span names that span; extracting it gives a context whose
    child span has the same trace id and the span as its parent."""
    with tracing_setup.tracer().start_as_current_span("producer") as producer:
        carrier: dict[str, str] = {}
        tracing.inject(carrier)
    with tracing_setup.tracer().start_as_current_span("consumer", context=tracing.extract(carrier)) as child:
        pass
    assert carrier["traceparent"] == tracing.traceparent_of(producer)
    assert child.get_span_context().trace_id == producer.get_span_context().trace_id
    (_, consumer_span) = spans.get_finished_spans()
    assert consumer_span.parent is not None
    assert consumer_span.parent.span_id == producer.get_span_context().span_id


def test_a_malformed_or_missing_traceparent_starts_a_new_trace(spans: InMemorySpanExporter) -> None:
    """Garbage in ``traceparent`` is ignored, not an error: the work starts a trace of its own."""
    for carrier in ({"traceparent": "not-a-traceparent"}, {}):
        with tracing_setup.tracer().start_as_current_span("x", context=tracing.extract(carrier)) as span:
            assert span.get_span_context().is_valid
    assert all(s.parent is None for s in spans.get_finished_spans())


def test_outbox_row_to_kafka_headers_to_consumer_span_is_one_trace(spans: InMemorySpanExporter) -> None:
    """An event written to the outbox inside a span carries its traceparent in the row's headers; the
    same headers as Kafka bytes put the consumer's span in that trace, as the producer's child, and
    the payment's trace is stored for later work; outside any span a row carries no traceparent."""
    writer = _writer()
    assert "traceparent" not in _command(writer, "pay_none")
    with tracing_setup.tracer().start_as_current_span("http") as producer:
        headers = _command(writer, "pay_1")
    assert headers["traceparent"] == tracing.traceparent_of(producer)
    conn = FakeConn()
    with tracing.consuming(conn, "test-consumer", [_consumed("pay_1", headers)]):  # type: ignore[arg-type]
        assert tracing.current_ids() is not None
        assert tracing.bound_payment_id() == "pay_1"
    consumer_span = spans.get_finished_spans()[-1]
    assert consumer_span.kind is trace.SpanKind.CONSUMER
    assert _ids(consumer_span)[0] == _ids(producer)[0]  # type: ignore[arg-type]
    assert (
        consumer_span.parent is not None
        and consumer_span.parent.span_id == producer.get_span_context().span_id
    )
    (stored,) = conn.remembered.values()
    assert list(conn.remembered) == ["pay_1"] and stored.startswith(
        f"00-{_ids(consumer_span)[0]}-{_ids(consumer_span)[1]}-"
    )
    assert tracing.bound_payment_id() is None  # the binding ends with the batch


def test_a_stored_payment_trace_wins_and_links_the_message_trace(spans: InMemorySpanExporter) -> None:
    """A webhook's event arrives in a trace of its own (the PSP started it); the service has the
    deposit's trace stored for that payment: the consumer span joins the deposit's trace, links the
    webhook's, and stores nothing new (first writer wins)."""
    deposit = "00-11111111111111111111111111111111-2222222222222222-01"
    conn = FakeConn({"pi_1": deposit})
    with tracing.consuming(conn, "c", [_consumed("pi_1", {"traceparent": FOREIGN})]):  # type: ignore[arg-type]
        pass
    (span,) = spans.get_finished_spans()
    assert _ids(span)[0] == "1" * 32
    assert [f"{link.context.trace_id:032x}" for link in span.links] == [FOREIGN.split("-")[1]]
    assert conn.remembered == {}


def test_a_message_without_headers_is_consumed_in_a_new_trace(spans: InMemorySpanExporter) -> None:
    """Older producers sent no trace headers: the handler still runs, in a span of a new trace."""
    ran = []
    with tracing.consuming(FakeConn(), "c", [_consumed("pay_old", {})]):  # type: ignore[arg-type]
        ran.append(True)
    (span,) = spans.get_finished_spans()
    assert ran and span.parent is None and span.get_span_context().is_valid


def test_in_a_batch_each_payment_outbox_rows_carry_its_own_trace(spans: InMemorySpanExporter) -> None:
    """Two payments from two traces in one batch: a batch span is current, and the event written for
    each payment carries its own message's trace, not the batch's; a failure marks every span."""
    writer = _writer()
    traces = {
        "pay_a": "00-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-1111111111111111-01",
        "pay_b": "00-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-1111111111111111-01",
    }
    messages = [_consumed(pid, {"traceparent": tp}) for pid, tp in traces.items()]
    with tracing.consuming(FakeConn(), "c", messages):  # type: ignore[arg-type]
        written = {pid: _command(writer, pid)["traceparent"].split("-")[1] for pid in traces}
    assert written == {"pay_a": "a" * 32, "pay_b": "b" * 32}
    assert [s.name for s in spans.get_finished_spans()].count("c batch") == 1
    spans.clear()
    with pytest.raises(RuntimeError), tracing.consuming(FakeConn(), "c", messages):  # type: ignore[arg-type]
        raise RuntimeError("handler failed")
    assert {s.status.status_code for s in spans.get_finished_spans() if s.name != "c batch"} == {
        trace.StatusCode.ERROR
    }


def _line(message: str, **fields: Any) -> dict[str, Any]:
    record = logging.LogRecord("t", logging.INFO, __file__, 1, message, None, None)
    record.fields = fields
    parsed: dict[str, Any] = json.loads(JsonFormatter().format(record))
    return parsed


def test_log_lines_carry_trace_span_and_payment_and_still_redact(spans: InMemorySpanExporter) -> None:
    """Inside a span bound to a payment a line carries trace_id, span_id and payment_id; a field
    passed to the call wins; a card number is still redacted; outside a span no trace fields."""
    assert "trace_id" not in _line("outside")
    with tracing_setup.tracer().start_as_current_span("work") as span, tracing.bind_payment("pay_9"):
        line = _line(f"card {PAN}", note=PAN)
        explicit = _line("other", payment_id="pay_other")
    trace_id, span_id = f"{span.get_span_context().trace_id:032x}", f"{span.get_span_context().span_id:016x}"
    assert (line["trace_id"], line["span_id"], line["payment_id"]) == (trace_id, span_id, "pay_9")
    assert PAN not in json.dumps(line) and "[redacted]" in line["event"]
    assert explicit["payment_id"] == "pay_other"


def _serve(app: web.Application) -> tuple[str, asyncio.AbstractEventLoop, web.AppRunner]:
    port, ready, loop = free_port(), threading.Event(), asyncio.new_event_loop()
    runner = web.AppRunner(app, access_log=None)

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
        ready.set()
        loop.run_forever()

    threading.Thread(target=serve, daemon=True).start()
    assert ready.wait(10)
    return f"http://127.0.0.1:{port}", loop, runner


def test_the_http_edge_continues_the_callers_trace(spans: InMemorySpanExporter) -> None:
    """A request with a traceparent is served in a SERVER span of that trace, named by its route
    pattern (never the path's values), with the route's payment id bound for the handler's logs; a
    request without one starts a new trace."""
    seen: list[tuple[str | None, str | None]] = []

    async def handler(request: web.Request) -> web.Response:
        ids = tracing.current_ids()
        seen.append((ids[0] if ids else None, tracing.bound_payment_id()))
        return web.json_response({})

    app = service_app(client_max_size=1024)
    app.add_routes([web.get("/payments/{payment_id}", handler)])
    base, loop, runner = _serve(app)
    try:
        for headers in ({"traceparent": FOREIGN}, {}):
            request = urllib.request.Request(base + "/payments/pay_5", headers=headers)
            with urllib.request.urlopen(request, timeout=10) as response:
                assert response.status == 200
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
    server_spans = [s for s in spans.get_finished_spans() if s.kind is trace.SpanKind.SERVER]
    assert [s.name for s in server_spans] == ["GET /payments/{payment_id}"] * 2
    assert seen[0] == (FOREIGN.split("-")[1], "pay_5")
    assert seen[1][0] not in (None, FOREIGN.split("-")[1]) and seen[1][1] == "pay_5"
    assert server_spans[0].attributes is not None
    assert server_spans[0].attributes["http.response.status_code"] == 200


def test_a_psp_call_sends_its_client_span_as_traceparent(spans: InMemorySpanExporter) -> None:
    """The PSP transport wraps a request in a CLIENT span and sends that span's traceparent, so the
    provider (the simulator) sees the deposit's trace; a failed call marks the span as an error."""
    received: list[str | None] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            received.append(self.headers.get("traceparent"))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        transport = HttpPool(f"http://127.0.0.1:{server.server_port}", TransportSettings())
        with tracing_setup.tracer().start_as_current_span("worker") as worker:
            transport.request("GET", "/v1/payment_intents/pi_1", None, {})
        transport.close()
    finally:
        server.shutdown()
    client = next(s for s in spans.get_finished_spans() if s.kind is trace.SpanKind.CLIENT)
    assert client.name == "psp GET /v1"
    assert [r.rsplit("-", 1)[0] if r else r for r in received] == [f"00-{_ids(client)[0]}-{_ids(client)[1]}"]
    assert _ids(client)[0] == f"{worker.get_span_context().trace_id:032x}"
    refused = HttpPool(f"http://127.0.0.1:{free_port()}", TransportSettings())
    refused.request("GET", "/v1/x", None, {})
    failed = [s for s in spans.get_finished_spans() if s.kind is trace.SpanKind.CLIENT][-1]
    assert failed.status.status_code is trace.StatusCode.ERROR


def test_a_traceparent_with_an_all_digit_span_id_is_not_card_data() -> None:
    """A random span id can be all digits and Luhn-valid (about 1 request in 40 000): such a
    traceparent header (HTTP or Kafka) is not refused as card data, while the same digits in any
    other header, or a traceparent of another shape, still are."""
    digits = "4000056655665556"
    assert luhn_valid(digits)
    honest = f"00-{'a' * 32}-{digits}-01"
    assert not find_in_text_pairs([("traceparent", honest)])
    assert find_in_text_pairs([("x-note", honest)])
    assert find_in_text_pairs([("traceparent", f"00-{digits}-01")])


def test_a_traceparent_whose_span_id_reads_as_a_card_number_is_not_continued() -> None:
    """The card-data guard lets a well-formed traceparent through whatever its hex ids spell
    (ADR 0012); one whose parent span id reads as a card number is not continued (a new trace
    starts), so it is never exported as a span's parent. An ordinary one is continued."""
    smuggled = "00-4bf92f3577b34da6a3ce929d0e0e4736-4111111111111111-01"
    assert not trace.get_current_span(tracing.extract({"traceparent": smuggled})).get_span_context().is_valid
    ordinary = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    context = trace.get_current_span(tracing.extract({"traceparent": ordinary})).get_span_context()
    assert context.is_valid and f"{context.trace_id:032x}" == "4bf92f3577b34da6a3ce929d0e0e4736"


def test_the_tracer_is_fetched_once() -> None:
    """``tracer()`` hands out the same tracer on every call (building one per request cost ~5 % of
    an API's CPU), and it is the current provider's."""
    assert tracing_setup.tracer() is tracing_setup.tracer()


def test_spans_are_recorded_only_while_something_exports_them_and_keep_their_ids_either_way() -> None:
    """With no exporter a span is not recorded (recording cost ~10 % of the product's Python CPU for
    nothing) yet has valid ids, which its traceparent carries on; a process that exports records its
    span under that unsampled parent, in the same trace."""
    sampler = tracing_setup.RecordWhileExported()
    quiet = TracerProvider(sampler=sampler).get_tracer("quiet")
    with quiet.start_as_current_span("caller") as caller:
        ctx = caller.get_span_context()
        assert not caller.is_recording() and ctx.is_valid and not ctx.trace_flags.sampled
        carrier: dict[str, str] = {}
        tracing.inject(carrier)
    _version, trace_id, span_id, flags = carrier["traceparent"].split("-")
    assert (trace_id, span_id) == (f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}") and not int(flags, 16) & 1
    sampler.exporting = True
    with quiet.start_as_current_span("callee", context=tracing.extract(carrier)) as callee:
        assert callee.is_recording()
        assert callee.get_span_context().trace_id == ctx.trace_id
        assert callee.get_span_context().trace_flags.sampled


def test_with_nothing_exporting_a_batch_continues_each_payments_trace_by_ids_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The consumer's ids-only spans (nothing exports) do what the SDK's dropped spans did: a stored
    trace wins, a message's own trace is continued with its trace state, a message without headers
    starts a new trace; each payment's outbox row carries its own span, not sampled, and payments seen
    first are remembered with that same span."""
    monkeypatch.setattr(tracing_setup.SAMPLER, "exporting", False)
    writer = _writer()
    deposit = "00-11111111111111111111111111111111-2222222222222222-01"
    conn = FakeConn({"pay_stored": deposit})
    messages = [
        _consumed("pay_stored", {"traceparent": FOREIGN}),
        _consumed("pay_new", {"traceparent": FOREIGN, "tracestate": "vendor=x"}),
        _consumed("pay_bare", {}),
    ]
    with tracing.consuming(conn, "c", messages):  # type: ignore[arg-type]
        written = {m.payment_id: _command(writer, m.payment_id) for m in messages}
    parts = {pid: headers["traceparent"].split("-") for pid, headers in written.items()}
    assert parts["pay_stored"][1] == "1" * 32 and parts["pay_new"][1] == FOREIGN.split("-")[1]
    assert parts["pay_bare"][1] != "0" * 32 and parts["pay_bare"][1] not in ("1" * 32, FOREIGN.split("-")[1])
    assert all(
        p[3] == "00" and p[2] not in ("2222222222222222", FOREIGN.split("-")[2]) for p in parts.values()
    )
    assert written["pay_new"].get("tracestate") == "vendor=x"
    assert conn.remembered == {pid: written[pid]["traceparent"] for pid in ("pay_new", "pay_bare")}
    sdk = TracerProvider(sampler=tracing_setup.RecordWhileExported()).get_tracer("sdk")
    dropped = sdk.start_span("x", context=tracing.extract({"traceparent": FOREIGN, "tracestate": "vendor=x"}))
    ours = tracing_setup.ids_only_span(tracing.extract({"traceparent": FOREIGN, "tracestate": "vendor=x"}))
    a, b = dropped.get_span_context(), ours.get_span_context()
    assert (a.trace_id, a.trace_flags, a.trace_state) == (b.trace_id, b.trace_flags, b.trace_state)
    assert not ours.is_recording() and b.is_valid
