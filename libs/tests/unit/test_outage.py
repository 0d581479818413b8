"""Outages as state changes (backbone.outage.Dependency) and librdkafka's log rate limit
(backbone.kafka.config.RepeatFilter): one warning when a dependency goes, one info when it comes
back, counts in between, readiness kept in step; a repeated kind of message passes once per
interval and the next one says how many were held back."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from backbone import logs
from backbone.health import Health
from backbone.kafka.config import RepeatFilter
from backbone.logs import configure_logging
from backbone.outage import DEPENDENCY_FAILURES, Dependency


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level, service = list(root.handlers), root.level, logs._service_name
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logs._service_name = service


def _events(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in capsys.readouterr().err.splitlines()]


def test_a_flapping_dependency_logs_each_change_once(capsys: pytest.CaptureFixture[str]) -> None:
    """100 failures are one warning (with the first error), the recovery one info with the count
    and the time away; readiness follows; successes while up log nothing."""
    configure_logging("svc")
    health = Health()
    kafka = Dependency("kafka", "svc-test", health)
    before = DEPENDENCY_FAILURES.labels("svc-test", "kafka")._value.get()
    for n in range(100):
        kafka.failed(f"connection refused #{n}")
    assert health.readiness() == (False, {"kafka": {"ready": False, "detail": "connection refused #0"}})
    for _ in range(10):
        kafka.ok()
    assert health.readiness()[0] is True
    events = _events(capsys)
    assert [(e["event"], e["dependency"]) for e in events] == [
        ("dependency.down", "kafka"),
        ("dependency.up", "kafka"),
    ]
    assert events[0]["error"] == "connection refused #0" and events[1]["failures"] == 100
    assert DEPENDENCY_FAILURES.labels("svc-test", "kafka")._value.get() - before == 100


def test_a_dependency_away_from_the_start_warns_once_then_says_when_it_came(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Started down (never reached yet): not ready, the first failure warns once, the first
    success says it is up."""
    configure_logging("svc")
    health = Health()
    database = Dependency("database", "svc-start", health, up=False)
    assert health.readiness()[0] is False
    database.failed("refused")
    database.failed("refused")
    database.ok()
    assert [e["event"] for e in _events(capsys)] == ["dependency.down", "dependency.up"]


def _record(message: str) -> logging.LogRecord:
    return logging.LogRecord("librdkafka", logging.ERROR, __file__, 1, "%s", (message,), None)


def test_repeat_filter_passes_a_kind_once_per_interval_and_counts_the_rest() -> None:
    """Messages that differ only in numbers are one kind; held back until the interval passed,
    then the next carries ``suppressed``; other kinds are not held back by it."""
    clock = [0.0]
    repeat = RepeatFilter(interval_s=30)
    from backbone.kafka import config  # noqa: PLC0415 - patch the module's clock

    original = config.time.monotonic
    config.time.monotonic = lambda: clock[0]  # type: ignore[assignment]
    try:
        first = _record("Connect to ipv4#127.0.0.1:9092 failed (after 0ms)")
        assert repeat.filter(first)
        assert not any(
            repeat.filter(_record(f"Connect to ipv4#127.0.0.1:9092 failed (after {n}ms)")) for n in range(50)
        )
        assert repeat.filter(_record("Group coordinator lost"))
        clock[0] = 31.0
        later = _record("Connect to ipv4#127.0.0.1:9092 failed (after 7ms)")
        assert repeat.filter(later)
        assert later.fields == {"suppressed": 50}  # type: ignore[attr-defined]
    finally:
        config.time.monotonic = original  # type: ignore[assignment]


def test_liveness_needs_every_loop() -> None:
    """One loop silent past the timeout makes the process dead though another beats; forgetting a
    loop that ended on purpose makes it alive again."""
    clockless = Health(liveness_timeout_ms=50)
    clockless.beat("lane-0")
    clockless.beat("lane-1")
    import time  # noqa: PLC0415 - only this test

    time.sleep(0.08)
    clockless.beat("lane-0")
    alive, body = clockless.liveness()
    assert alive is False and body["loops"]["lane-1"] >= 50 and body["loops"]["lane-0"] < 50
    clockless.forget("lane-1")
    assert clockless.liveness()[0] is True
