"""What every long-running process does at start: health endpoints and graceful stop on signals."""

from __future__ import annotations

import signal
from collections.abc import Callable
from types import FrameType

from backbone.health import Health, serve_health
from backbone.logs import get_logger

log = get_logger(__name__)


def health_for(port: int) -> Health:
    """A Health (liveness timeout from ``HEALTH_LIVENESS_TIMEOUT_MS``); served on ``port``
    (/healthz, /readyz, /metrics) unless the port is 0."""
    health = Health.configured()
    if port:
        serve_health(health, "0.0.0.0", port)  # noqa: S104 - probes come from outside the host
    return health


def stop_on_signals(stop: Callable[[], None], process: str) -> None:
    """SIGTERM and SIGINT call ``stop`` (finish the current batch, then leave); nothing is cut short."""

    def on_signal(signum: int, _: FrameType | None) -> None:
        log.info(f"{process}.signal", signal=signum)
        stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
