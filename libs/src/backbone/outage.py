"""A dependency's availability as a state, not a stream of errors (Kafka, the database, the PSP).

While a dependency is away, every poll, request and retry fails; logging each failure turns a 24 s
broker outage into a thousand lines per process and hides everything else. ``Dependency`` logs the
change instead: one warning when it goes away (with the first error), one info when it is back
(with how long it was away and how many failures were seen), and in between only counts:
``dependency_failures_total{process, dependency}`` and ``dependency_up{process, dependency}`` (1/0).
It also keeps the process's readiness check of the same name.

Thread-safe: librdkafka's callbacks, a worker's lanes and an HTTP server's requests may report at once.
"""

from __future__ import annotations

import threading
import time
from typing import Final

from prometheus_client import Counter, Gauge

from backbone.health import Health
from backbone.logs import get_logger

log = get_logger(__name__)
DETAIL_CHARS_MAX: Final = 200

DEPENDENCY_UP: Final = Gauge(
    "dependency_up", "1 while the dependency answers, 0 while it is away", ["process", "dependency"]
)
DEPENDENCY_FAILURES: Final = Counter(
    "dependency_failures_total", "Failures seen while talking to a dependency", ["process", "dependency"]
)


class Dependency:
    """One dependency of one process: ``failed(error)`` on every failure, ``ok()`` on every success."""

    def __init__(self, name: str, process: str, health: Health | None = None, *, up: bool = True) -> None:
        self._name, self._process, self._health = name, process, health
        self._lock = threading.Lock()
        self._up = up
        self._warned = False  # the warning of this down period is written (a start without it too)
        self._since = time.monotonic()
        self._failures = 0
        DEPENDENCY_UP.labels(process, name).set(1 if up else 0)
        if health is not None:
            health.set(name, up, "" if up else "not reached yet")

    @property
    def up(self) -> bool:
        return self._up

    def failed(self, error: BaseException | str) -> None:
        detail = str(error)[:DETAIL_CHARS_MAX]
        DEPENDENCY_FAILURES.labels(self._process, self._name).inc()
        with self._lock:
            self._failures += 1
            if not self._up and self._warned:
                return
            if self._up:
                self._up, self._since, self._failures = False, time.monotonic(), 1
            self._warned = True
        DEPENDENCY_UP.labels(self._process, self._name).set(0)
        if self._health is not None:
            self._health.set(self._name, False, detail)
        log.warning("dependency.down", dependency=self._name, process=self._process, error=detail)

    def ok(self) -> None:
        if self._up:  # the common case, without the lock: a stale read only delays the info by one call
            return
        with self._lock:
            came_back = not self._up
            down_ms = int((time.monotonic() - self._since) * 1000)
            failures = self._failures
            self._up, self._since, self._warned = True, time.monotonic(), False
        if not came_back:
            return
        DEPENDENCY_UP.labels(self._process, self._name).set(1)
        if self._health is not None:
            self._health.set(self._name, True)
        log.info(
            "dependency.up", dependency=self._name, process=self._process, down_ms=down_ms, failures=failures
        )
