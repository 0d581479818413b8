"""Unit tests of backbone.health: readiness checks, the liveness heartbeat and the HTTP endpoints.

Orchestrators restart a process on a failing /healthz and route work away on a failing /readyz;
both wrong answers are outages. These tests prove the readiness and liveness rules on ``Health``,
then the status codes and bodies served by ``serve_health`` on an ephemeral local port.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer

import backbone.metrics  # noqa: F401 - registers the backbone metrics in the default registry
import pytest
from backbone.health import Health, serve_health
from prometheus_client import REGISTRY, CollectorRegistry, Counter

# --- Health -------------------------------------------------------------------------------------


def test_not_ready_without_checks() -> None:
    """A process that registered no check is not ready: nothing says its dependencies are up."""
    ready, body = Health().readiness()
    assert ready is False
    assert body == {}


def test_ready_only_when_every_check_is_ready() -> None:
    """One failing check makes the process not ready; it becomes ready again when that check
    recovers; the body shows each check with its detail."""
    health = Health()
    health.set("database", True)
    assert health.readiness()[0] is True
    health.set("kafka", False, "broker down")
    ready, body = health.readiness()
    assert ready is False
    assert body == {
        "database": {"ready": True, "detail": ""},
        "kafka": {"ready": False, "detail": "broker down"},
    }
    health.set("kafka", True)
    assert health.readiness()[0] is True


def test_alive_after_a_recent_beat_and_dead_after_the_timeout() -> None:
    """Liveness holds within liveness_timeout_ms of the last beat, fails after it, recovers on beat()."""
    health = Health(liveness_timeout_ms=30)
    alive, body = health.liveness()
    assert alive is True
    assert body["last_beat_age_ms"] < 30
    time.sleep(0.06)
    alive, body = health.liveness()
    assert alive is False
    assert body["last_beat_age_ms"] >= 30
    health.beat()
    assert health.liveness()[0] is True


# --- HTTP ---------------------------------------------------------------------------------------

Get = Callable[[str], tuple[int, bytes, str]]


def _get(base_url: str, path: str) -> tuple[int, bytes, str]:
    try:
        with urllib.request.urlopen(base_url + path, timeout=5) as response:
            return response.status, response.read(), response.headers["Content-Type"]
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read(), error.headers["Content-Type"]


@pytest.fixture(scope="module")
def served() -> Iterator[Callable[..., Get]]:
    """Start health servers on ephemeral ports; shut them all down after the module.

    ``shutdown()`` waits for serve_forever's 0.5 s poll; stopping the servers in parallel keeps
    the module fast.
    """
    servers: list[ThreadingHTTPServer] = []

    def start(health: Health, registry: CollectorRegistry | None = None) -> Get:
        server = serve_health(health, "127.0.0.1", 0, registry or REGISTRY)
        servers.append(server)
        host, port = server.server_address[:2]
        base_url = f"http://{host!s}:{port}"
        return lambda path: _get(base_url, path)

    yield start
    stoppers = [threading.Thread(target=server.shutdown) for server in servers]
    for stopper in stoppers:
        stopper.start()
    for stopper in stoppers:
        stopper.join(timeout=5)
    for server in servers:
        server.server_close()
    assert not any(stopper.is_alive() for stopper in stoppers), "a health server did not shut down"


def test_healthz_200_while_beating_503_when_stale(served: Callable[..., Get]) -> None:
    """/healthz answers 200 with ok=true after a beat, 503 with ok=false once the beat is too old."""
    health = Health(liveness_timeout_ms=50)
    get = served(health)
    status, body, content_type = get("/healthz")
    assert (status, content_type) == (200, "application/json")
    assert json.loads(body)["ok"] is True
    time.sleep(0.1)
    status, body, _ = get("/healthz")
    assert status == 503
    assert json.loads(body)["ok"] is False
    assert json.loads(body)["last_beat_age_ms"] >= 50
    health.beat()
    assert get("/healthz")[0] == 200


def test_readyz_503_until_every_check_is_ready(served: Callable[..., Get]) -> None:
    """/readyz is 503 with no checks and with a failing one, 200 when all are ready, with details."""
    health = Health()
    get = served(health)
    status, body, _ = get("/readyz")
    assert (status, json.loads(body)) == (503, {"ok": False})
    health.set("database", True)
    health.set("kafka", False, "no broker")
    status, body, _ = get("/readyz")
    assert status == 503
    assert json.loads(body)["kafka"] == {"ready": False, "detail": "no broker"}
    health.set("kafka", True)
    status, body, _ = get("/readyz")
    assert status == 200
    assert json.loads(body)["ok"] is True


def test_metrics_serves_the_default_registry_as_prometheus_text(served: Callable[..., Get]) -> None:
    """/metrics is Prometheus text format and includes the backbone's metrics once imported."""
    status, body, content_type = served(Health())("/metrics")
    assert status == 200
    assert content_type.startswith("text/plain")
    text = body.decode()
    assert "# TYPE outbox_published_total counter" in text
    assert "consumer_messages_total" in text


def test_metrics_serves_the_registry_it_is_given(served: Callable[..., Get]) -> None:
    """A custom registry is served instead of the default one (so tests and embedders can isolate)."""
    registry = CollectorRegistry()
    Counter("probe_widgets_total", "widgets", registry=registry).inc(3)
    text = served(Health(), registry)("/metrics")[1].decode()
    assert "probe_widgets_total 3.0" in text
    assert "outbox_published_total" not in text


@pytest.mark.parametrize("path", ["/", "/health", "/healthz/", "/readyz/extra", "/metricsz"])
def test_other_paths_are_404(served: Callable[..., Get], path: str) -> None:
    """Anything but the three endpoints is 404, not a default 200."""
    health = Health()
    health.set("database", True)
    status, body, _ = served(health)(path)
    assert status == 404
    assert json.loads(body) == {"error": "not found"}


@pytest.mark.parametrize(
    "path",
    [
        "/healthz?ref=4000056655665556",
        "/4000-0566-5566-5556",
        "/metrics?x=4000+0566+5566+5556",
        "/readyz?cvv=1",
    ],
)
def test_card_data_in_a_probe_request_is_refused(served: Callable[..., Get], path: str) -> None:
    """The synchronous processes' health server refuses card data like every other HTTP server."""
    status, body, _ = served(Health())(path)
    assert status == 400
    assert json.loads(body)["error"]["code"] == "card_data_forbidden"
