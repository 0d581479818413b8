"""The process's tracer provider: where its spans go, and whether they are recorded at all (ADR 0012).

``configure_tracing`` (called by ``backbone.logs.configure_logging``, so every process that logs
also traces) installs it once. Spans always have ids (the logs and the W3C context carry them);
they are exported only when asked: OTLP over HTTP when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set, JSON
lines to a file when ``TRACING_FILE`` is set (tests, the demo). Spans are *recorded* (attributes,
events, end time) only while something exports them (``RecordWhileExported``): with no exporter a
span is its ids only, since recording it cost ~10 % of the product's Python CPU per deposit for
nothing (docs/operations/cost-per-deposit.md). A process that exports records every span whatever
its parent's sampled flag, so a caller that does not export never hides a callee's.

What spans are made, and how a payment's trace travels, is ``backbone.tracing``'s.
"""

from __future__ import annotations

import atexit
import json
import threading
from collections.abc import Mapping, Sequence
from typing import IO, Any, Final

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, Sampler, SamplingResult
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, TraceFlags

from backbone.invariants import invariant
from backbone.settings import TracingSettings, load_settings_or_exit

_NOT_SAMPLED: Final = TraceFlags(TraceFlags.DEFAULT)
_FALLBACK_IDS: Final = RandomIdGenerator()  # before configure_tracing (unit tests)
_provider: TracerProvider | None = None
_tracer: tuple[object, trace.Tracer] | None = None  # (the provider it came from, the tracer)


class JsonLinesSpanExporter(SpanExporter):
    """Writes each finished span as one JSON line (ids in hex) to a file, appending; for tests and
    the demo, where every process of a run writes its own file."""

    def __init__(self, path: str) -> None:
        self._file: IO[str] = open(path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - lives as long as the exporter
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = [json.dumps(span_record(s), separators=(",", ":"), default=str) for s in spans]
        with self._lock:
            for line in lines:
                self._file.write(line + "\n")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        with self._lock:
            self._file.close()


def span_record(span: ReadableSpan) -> dict[str, Any]:
    """A finished span as plain data: what the file exporter writes and the tests read."""
    ctx = span.get_span_context()
    assert ctx is not None
    return {
        "name": span.name,
        "service": span.resource.attributes.get("service.name"),
        "kind": span.kind.name,
        "trace_id": f"{ctx.trace_id:032x}",
        "span_id": f"{ctx.span_id:016x}",
        "parent_span_id": f"{span.parent.span_id:016x}" if span.parent is not None else None,
        "links": [f"{link.context.trace_id:032x}" for link in span.links],
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
        "start_ns": span.start_time,
        "end_ns": span.end_time,
    }


class RecordWhileExported(Sampler):
    """Records and samples every span once something exports spans (``add_span_processor``), parent's
    flag or not; until then drops every span, which keeps its ids (a non-recording span)."""

    def __init__(self) -> None:
        self.exporting = False

    def should_sample(self, *args: Any, **kwargs: Any) -> SamplingResult:
        return (ALWAYS_ON if self.exporting else ALWAYS_OFF).should_sample(*args, **kwargs)

    def get_description(self) -> str:
        return f"RecordWhileExported{{{self.exporting}}}"


SAMPLER: Final = RecordWhileExported()  # the process's one sampler


def exporting() -> bool:
    """True once spans are recorded (something exports them): callers skip building attributes
    that a span with ids only would drop."""
    return SAMPLER.exporting


def add_span_processor(processor: Any) -> None:
    """Export this process's spans through ``processor`` too, and record spans from now on."""
    invariant(_provider is not None, "configure_tracing first")
    assert _provider is not None
    _provider.add_span_processor(processor)
    SAMPLER.exporting = True


def configure_tracing(service: str, environ: Mapping[str, str] | None = None) -> None:
    """Install the process's tracer provider once (later calls keep the first): exporters from the
    environment (see the module docstring)."""
    global _provider  # noqa: PLW0603 - one tracer provider per process, like logging's root
    if _provider is not None:
        return
    exports = load_settings_or_exit(TracingSettings, environ)
    provider = TracerProvider(resource=Resource.create({"service.name": service}), sampler=SAMPLER)
    trace.set_tracer_provider(provider)
    _provider = provider
    if exports.otlp_endpoint:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415 - only when used
            OTLPSpanExporter,
        )

        # Batched and in the background: the hot path only queues the span (bounded queue, drops
        # when full rather than slowing the work down).
        add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    if exports.tracing_file:
        # Synchronous, so a process killed by a test has written every span it finished.
        add_span_processor(SimpleSpanProcessor(JsonLinesSpanExporter(exports.tracing_file)))
    atexit.register(provider.shutdown)  # flushes the batch exporter on a clean exit (SIGTERM)


def tracer() -> trace.Tracer:
    """The process's tracer, fetched once per tracer provider: ``get_tracer`` builds a new tracer
    and instrumentation scope on every call, which cost ~5 % of an API's CPU per request."""
    global _tracer  # noqa: PLW0603 - a cache of the one provider's tracer
    current = trace.get_tracer_provider()
    if _tracer is None or _tracer[0] is not current:
        _tracer = (current, trace.get_tracer("backbone"))
    return _tracer[1]


def ids_only_span(parent: Context) -> Span:
    """The span the SDK would start under ``parent`` with nothing exporting: its ids only (the
    parent's trace, or a new one; a new span id; not sampled; the parent's trace state). Built
    here because the SDK's sampler, attribute and link handling for a span it then drops cost more
    than the consumer's own work per message."""
    ctx = trace.get_current_span(parent).get_span_context()
    ids = _provider.id_generator if _provider is not None else _FALLBACK_IDS
    return NonRecordingSpan(
        SpanContext(
            ctx.trace_id if ctx.is_valid else ids.generate_trace_id(),
            ids.generate_span_id(),
            is_remote=False,
            trace_flags=_NOT_SAMPLED,
            trace_state=ctx.trace_state if ctx.is_valid else None,
        )
    )
