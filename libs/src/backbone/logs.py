"""Structured JSON logs on the standard library.

One JSON object per line on stderr: ``ts``, ``level``, ``service``, ``logger``, ``event`` plus the
fields passed to the call. Usage::

    log = get_logger(__name__)
    log.info("relay.published", count=120, topic="payments.events")

Never pass payloads, card data or secrets as fields: logs are read by many people. As a last line
of defence the formatter redacts card data from every line it writes (``backbone.carddata``'s rules,
which leave ids, UUIDs and timestamps alone): a card number in the message, in any field (at any
depth, in keys too), or in a traceback becomes ``[redacted]``, and so does the value of a field
named like card data (``cvv``, ``card_number``, ...).

Every line written inside a span carries ``trace_id`` and ``span_id`` (W3C hex), and ``payment_id``
whenever the work is bound to a payment (``backbone.tracing.bind_payment``: the HTTP middleware, the
consumer loop, the workers); a field passed to the call wins over the bound one. ``configure_logging``
also sets up the process's tracing (ADR 0012).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, Final

from backbone import tracing, tracing_setup
from backbone.carddata import REDACTED, find_card_number, is_card_field, redact_card_numbers

_DEPTH_MAX: Final = 8
_service_name = "unknown"


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON line; extra fields come from ``record.fields``."""

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "service": _service_name,
            "logger": record.name,
            "event": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            for key, value in fields.items():
                payload.setdefault(key, value)
        payment_id = tracing.bound_payment_id()
        if payment_id is not None:
            payload.setdefault("payment_id", payment_id)
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        if _carries_card_data(payload):
            payload = _scrub(payload)
        ids = tracing.current_ids()
        if ids is not None:  # after the scrub: random hex of our own, never card data, never mangled
            payload.setdefault("trace_id", ids[0])
            payload.setdefault("span_id", ids[1])
        try:
            return json.dumps(payload, default=str, separators=(",", ":"), allow_nan=False)
        except (ValueError, TypeError):
            # NaN/Infinity (not JSON) or keys json cannot write: fall back to text for every
            # field rather than lose the line or break "one JSON object per line".
            return json.dumps({k: _plain(v) for k, v in payload.items()}, separators=(",", ":"))


def _carries_card_data(payload: dict[str, Any]) -> bool:
    """Whether ``_scrub`` would change anything: every text it would read, gathered the way it reads
    them and scanned once, joined by newlines (which end a card number as a letter would), or a field
    named like card data. Almost every line has neither, and one scan costs a fraction of one per
    field; a line that has either is scrubbed field by field as before."""
    texts: list[str] = []
    stack: list[tuple[Any, int]] = [(payload, 0)]
    while stack:
        value, depth = stack.pop()
        if value is None or isinstance(value, bool | float):
            continue
        if isinstance(value, str):
            texts.append(value)
        elif isinstance(value, int):
            texts.append(str(value))
        elif depth < _DEPTH_MAX and isinstance(value, dict):
            for key, item in value.items():
                name = str(key)
                if is_card_field(name):
                    return True
                texts.append(name)
                stack.append((item, depth + 1))
        elif depth < _DEPTH_MAX and isinstance(value, list | tuple):
            stack.extend((item, depth + 1) for item in value)
        else:
            texts.append(str(value))
    return find_card_number("\n".join(texts))


def _scrub(value: Any, depth: int = 0) -> Any:
    """``value`` with card data redacted; containers are copied, anything else becomes its text."""
    if value is None or isinstance(value, bool | float):
        return value
    if isinstance(value, str):
        return redact_card_numbers(value)
    if isinstance(value, int):
        return REDACTED if find_card_number(str(value)) else value
    if depth < _DEPTH_MAX and isinstance(value, dict):
        return {
            redact_card_numbers(str(k)): REDACTED if is_card_field(str(k)) else _scrub(v, depth + 1)
            for k, v in value.items()
        }
    if depth < _DEPTH_MAX and isinstance(value, list | tuple):
        return [_scrub(item, depth + 1) for item in value]
    return redact_card_numbers(str(value))


def _plain(value: Any) -> Any:
    return value if isinstance(value, str | int | bool) or value is None else str(value)


class Logger:
    """A thin wrapper that turns keyword arguments into structured fields."""

    def __init__(self, name: str) -> None:
        self._logger = logging.getLogger(name)

    def debug(self, event: str, **fields: Any) -> None:
        self._log(logging.DEBUG, event, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._log(logging.INFO, event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._log(logging.WARNING, event, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._log(logging.ERROR, event, fields)

    def exception(self, event: str, **fields: Any) -> None:
        self._logger.error(event, exc_info=True, extra={"fields": fields}, stacklevel=2)

    def _log(self, level: int, event: str, fields: dict[str, Any]) -> None:
        if self._logger.isEnabledFor(level):
            self._logger.log(level, event, extra={"fields": fields}, stacklevel=3)


def get_logger(name: str) -> Logger:
    return Logger(name)


def configure_logging(service: str, level: str = "INFO") -> None:
    """Route all logging to stderr as JSON lines, tagged with the service name, and set up tracing
    for the process under the same name. Call once at start."""
    global _service_name  # noqa: PLW0603 - process-wide logging setup is global by nature
    _service_name = service
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # The JSON lines carry none of these, so the records need not gather them: the caller's frame
    # (a walk up the stack on every call), thread, process and task names (the logging HOWTO's
    # "Optimization" section).
    logging._srcfile = None  # the documented switch for the caller lookup
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    tracing_setup.configure_tracing(service)
