"""Unit tests of backbone.logs: one JSON object per line on stderr, with the structured fields.

Operators and log shippers parse these lines; these tests prove the shape of every line, the
fields passed as keywords, exception tracebacks, level filtering, and that an odd field value
never turns a log call into a crash.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from backbone import logs
from backbone.logs import configure_logging, get_logger
from hypothesis import given
from hypothesis import strategies as st

_TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """configure_logging changes process-wide state: put it back after each test."""
    root = logging.getLogger()
    handlers, level, service = list(root.handlers), root.level, logs._service_name
    switches = (logging._srcfile, logging.logThreads, logging.logProcesses, logging.logMultiprocessing)
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logs._service_name = service
    logging._srcfile, logging.logThreads, logging.logProcesses, logging.logMultiprocessing = switches


def _lines(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    captured = capsys.readouterr()
    assert captured.out == ""
    return [json.loads(line) for line in captured.err.splitlines()]


def test_a_line_has_the_standard_keys_and_the_keyword_fields(capsys: pytest.CaptureFixture[str]) -> None:
    """An info call writes one JSON object with ts, level, service, logger, event and each keyword."""
    configure_logging("relay")
    get_logger("backbone.outbox.relay").info("relay.published", count=120, topic="payments.events")
    [line] = _lines(capsys)
    assert set(line) == {"ts", "level", "service", "logger", "event", "count", "topic"}
    assert _TS.fullmatch(line["ts"])
    assert line["level"] == "info"
    assert line["service"] == "relay"
    assert line["logger"] == "backbone.outbox.relay"
    assert line["event"] == "relay.published"
    assert line["count"] == 120
    assert line["topic"] == "payments.events"


def test_timestamp_is_utc_now(capsys: pytest.CaptureFixture[str]) -> None:
    """ts is the current UTC time (within a few seconds), not local time."""
    configure_logging("svc")
    get_logger("t").info("tick")
    [line] = _lines(capsys)
    logged = dt.datetime.strptime(line["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC)
    assert abs((dt.datetime.now(dt.UTC) - logged).total_seconds()) < 5


def test_one_object_per_line_even_with_newlines_in_values(capsys: pytest.CaptureFixture[str]) -> None:
    """Each call is exactly one line; a newline inside a value is escaped, not a line break."""
    configure_logging("svc")
    log = get_logger("t")
    log.info("first", note="two\nlines")
    log.warning("second")
    log.error("third")
    lines = _lines(capsys)
    assert [(line["event"], line["level"]) for line in lines] == [
        ("first", "info"),
        ("second", "warning"),
        ("third", "error"),
    ]
    assert lines[0]["note"] == "two\nlines"


def test_level_filters_lower_levels(capsys: pytest.CaptureFixture[str]) -> None:
    """With level WARNING, debug and info calls write nothing; with DEBUG, debug is written."""
    configure_logging("svc", "warning")
    log = get_logger("t")
    log.debug("hidden.debug")
    log.info("hidden.info")
    log.warning("shown")
    assert [line["event"] for line in _lines(capsys)] == ["shown"]
    configure_logging("svc", "DEBUG")
    log.debug("now.shown")
    assert [line["event"] for line in _lines(capsys)] == ["now.shown"]


def test_exception_includes_the_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    """log.exception inside an except block logs at error level with the traceback under "exc"."""
    configure_logging("svc")
    try:
        _ = 1 // 0
    except ZeroDivisionError:
        get_logger("t").exception("batch.failed", batch=7)
    [line] = _lines(capsys)
    assert line["level"] == "error"
    assert line["event"] == "batch.failed"
    assert line["batch"] == 7
    assert "Traceback" in line["exc"]
    assert "ZeroDivisionError" in line["exc"]


def test_non_json_values_are_logged_as_text(capsys: pytest.CaptureFixture[str]) -> None:
    """Decimal, datetime, bytes, sets and arbitrary objects do not crash the call: they become str()."""

    class Opaque:
        def __str__(self) -> str:
            return "opaque-thing"

    when = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    configure_logging("svc")
    get_logger("t").info("odd", amount=Decimal("12.34"), when=when, raw=b"\x00", tags={"a"}, obj=Opaque())
    [line] = _lines(capsys)
    assert line["amount"] == "12.34"
    assert line["when"] == str(when)
    assert line["raw"] == str(b"\x00")
    assert line["tags"] == "{'a'}"
    assert line["obj"] == "opaque-thing"


def test_fields_cannot_overwrite_the_standard_keys(capsys: pytest.CaptureFixture[str]) -> None:
    """A keyword named like a standard key (level, service) does not forge that key."""
    configure_logging("svc")
    get_logger("t").info("real.event", level="debug", service="someone-else")
    [line] = _lines(capsys)
    assert line["level"] == "info"
    assert line["service"] == "svc"
    assert line["event"] == "real.event"


def test_nan_field_still_yields_strict_json(capsys: pytest.CaptureFixture[str]) -> None:
    """A float NaN field value (e.g. a rate with zero samples) still gives a parseable JSON line."""

    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    configure_logging("svc")
    get_logger("t").info("rate", per_second=float("nan"))
    [line] = capsys.readouterr().err.splitlines()
    json.loads(line, parse_constant=refuse)


def test_card_numbers_are_redacted_from_every_part_of_a_line(capsys: pytest.CaptureFixture[str]) -> None:
    """The last line of defence: a card number in the message, a field, a nested field, a key, an
    integer, a traceback, or under a card-data field name, never reaches the log; ids, UUIDs and
    timestamps next to it are kept as they were."""
    configure_logging("svc")
    log = get_logger("t")
    ids = {
        "event_id": "0b7c9a4e-5a51-4c59-8a5e-2f9c1d3b7a10",
        "payment_id": "pay_01JXK4242",
        "at_ms": 1796055528000,
    }
    log.warning("path /accounts/4242424242424242", note="card 4242 4242 4242 4242", **ids)
    log.info(
        "nested", doc={"a": [{"b": "5555-5555-5555-4444"}], "4000056655665556": 1}, number=378282246310005
    )
    log.info("by name", cvv="123", card_number="x")
    try:
        raise ValueError("bad value 6011111111111117")
    except ValueError:
        log.exception("failed")
    captured = capsys.readouterr().err
    for pan in (
        "4242424242424242",
        "4242 4242",
        "5555-5555",
        "4000056655665556",
        "378282246310005",
        "6011111111111117",
    ):
        assert pan not in captured
    first, nested, named, failed = (json.loads(line) for line in captured.splitlines())
    assert first["event"] == "path /accounts/[redacted]" and first["note"] == "card [redacted]"
    assert {k: first[k] for k in ids} == ids
    assert nested["doc"] == {"a": [{"b": "[redacted]"}], "[redacted]": 1} and nested["number"] == "[redacted]"
    assert named["cvv"] == "[redacted]" and named["card_number"] == "[redacted]"
    assert "bad value [redacted]" in failed["exc"]


_CARD_ISH = st.sampled_from(
    ["4242424242424242", "4242 4242 4242 4242", "5555-5555-5555-4444", "378282246310005", "42424242"]
)
_TEXT = st.one_of(st.text(alphabet="0123456789 -ab\n", max_size=30), _CARD_ISH)
_NAMES = st.one_of(st.sampled_from(["cvv", "card_number", "pan", "amount_minor", "note"]), _TEXT)
_LEAF = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), _TEXT)
_PAYLOADS = st.dictionaries(
    _NAMES,
    st.recursive(
        _LEAF, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_NAMES, inner, max_size=3)
    ),
    max_size=5,
)


@given(_PAYLOADS)
def test_the_one_scan_never_lets_through_what_the_field_scrub_would_change(payload: dict[str, Any]) -> None:
    """The formatter skips the field-by-field scrub when one scan of every text finds no card data:
    for any payload (card numbers with spaces or dashes, in keys, values, lists, at depth, card-data
    field names, numbers), whenever that scan says "nothing", the scrub changes nothing either."""
    if not logs._carries_card_data(payload):
        assert json.dumps(logs._scrub(payload), default=str) == json.dumps(payload, default=str)


def test_a_card_number_in_a_list_is_still_redacted(capsys: pytest.CaptureFixture[str]) -> None:
    """With the one scan in front, a card number inside a list is still redacted on the line, and
    the fields around it (digits that only together look like one) are written as they are."""
    configure_logging("svc")
    get_logger("t").info("e", a="4242 4242", b="4242 4242", c=["x 4242424242424242 y"])
    (line,) = _lines(capsys)
    assert (line["a"], line["b"], line["c"]) == ("4242 4242", "4242 4242", [f"x {logs.REDACTED} y"])
