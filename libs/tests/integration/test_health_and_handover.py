"""Health that tells the truth, and a fast handover, for the two loops every service runs (the
idempotent consumer and the outbox relay), as real processes on real Kafka and PostgreSQL.

- Idle and under load, /healthz stays 200 for many liveness periods and /readyz says why it is
  ready (database, kafka, group / role); when the loop is stuck (a failpoint hangs it right after a
  batch committed) /healthz turns 503 while the health server still answers, naming the loop.
- A consumer SIGKILLed and restarted in the same slot (``CONSUMER_INSTANCE_ID``: static membership)
  takes its partitions back at once, long before the session timeout that a dynamic member's
  replacement would wait for.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from typing import Any

from backbone.testing.harness import Probe
from backbone.testing.processes import Proc, wait_until
from backbone.testing.stack import free_port

LIVENESS_MS = 2500


def _get(port: int, path: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _green_for(port: int, seconds: float) -> list[int]:
    """Every /healthz status seen over ``seconds`` (probed every 100 ms)."""
    statuses, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        statuses.append(_get(port, "/healthz")[0])
        time.sleep(0.1)
    return statuses


def _start(service: Probe, command: str, **env: str) -> tuple[Proc, int]:
    port = free_port()
    proc = service.start(command, HEALTH_PORT=str(port), HEALTH_LIVENESS_TIMEOUT_MS=str(LIVENESS_MS), **env)
    wait_until(
        lambda: _answers(port), 30, f"{command}'s health server", alive=lambda: proc.popen.poll() is None
    )
    return proc, port


def _answers(port: int) -> bool:
    try:
        _get(port, "/healthz")
    except OSError:
        return False
    return True


def test_consumer_health_is_green_idle_and_busy_and_red_when_its_loop_is_stuck(probe_service: Probe) -> None:
    """A consumer idle for 4 liveness periods, then consuming 300 events, is alive all along and
    ready (database, kafka, group); stuck after a batch (failpoint ``hang``), /healthz turns 503
    within a couple of periods, naming the main loop's age."""
    probe_service.start("relay")  # publishes what the test writes to the outbox
    consumer, port = _start(probe_service, "consume")
    wait_until(lambda: _get(port, "/readyz")[0] == 200, 30, "the consumer ready")
    ready = _get(port, "/readyz")[1]
    assert {name for name in ready if name != "ok"} >= {"database", "kafka", "group"}
    assert set(_green_for(port, 4 * LIVENESS_MS / 1000)) == {200}
    probe_service.write(300)
    busy = _green_for(port, 3)
    wait_until(lambda: probe_service.effects() == 300, 30, "the events applied")
    assert set(busy) == {200}
    consumer.kill()

    stuck, port = _start(probe_service, "consume", BACKBONE_FAILPOINTS="consumer.after_db_commit=hang")
    probe_service.write(5, seq_start=1000)
    wait_until(lambda: _get(port, "/healthz")[0] == 503, 4 * LIVENESS_MS / 1000 + 10, "liveness to fail")
    status, body = _get(port, "/healthz")
    assert status == 503 and body["loops"]["main"] >= LIVENESS_MS
    assert stuck.popen.poll() is None  # alive, answering, and reporting itself wedged


def test_relay_health_is_green_idle_and_busy_and_red_when_its_loop_is_stuck(probe_service: Probe) -> None:
    """The same for the relay: green idle and while publishing, ready as leader; stuck right after
    a delivery, /healthz turns 503."""
    relay, port = _start(probe_service, "relay")
    wait_until(lambda: _get(port, "/readyz")[0] == 200, 30, "the relay ready")
    assert _get(port, "/readyz")[1]["role"] == {"ready": True, "detail": "leader"}
    assert set(_green_for(port, 4 * LIVENESS_MS / 1000)) == {200}
    probe_service.write(300)
    assert set(_green_for(port, 3)) == {200}
    wait_until(
        lambda: probe_service.scalar("SELECT count(*) FROM outbox WHERE published_at IS NULL") == 0,
        30,
        "published",
    )
    relay.kill()

    _, port = _start(probe_service, "relay", BACKBONE_FAILPOINTS="relay.after_delivery=hang")
    probe_service.write(5, seq_start=1000)
    wait_until(lambda: _get(port, "/healthz")[0] == 503, 4 * LIVENESS_MS / 1000 + 10, "liveness to fail")


def test_a_consumer_restarted_in_its_slot_takes_its_partitions_back_at_once(probe_service: Probe) -> None:
    """Static membership: with a 30 s session timeout, a dynamic member's replacement would sit idle
    for 30 s waiting for its SIGKILLed predecessor to be noticed; the same slot (same instance id)
    restarted consumes new events within a few seconds, each applied once."""
    slot = {"CONSUMER_INSTANCE_ID": f"{probe_service.topic}-slot-1", "CONSUMER_SESSION_TIMEOUT_MS": "30000"}
    probe_service.start("relay")
    first = probe_service.start("consume", **slot)
    ids = probe_service.write(20)
    wait_until(lambda: probe_service.effects() == 20, 60, "the first events")
    first.kill()

    restarted_at = time.monotonic()
    probe_service.start("consume", **slot)
    ids += probe_service.write(20, seq_start=100)
    wait_until(
        lambda: probe_service.effects() == 40,
        28,
        "the restarted slot to consume (before the session timeout)",
    )
    assert time.monotonic() - restarted_at < 28
    per_event = probe_service.applications_per_event()
    assert sorted(per_event) == sorted(ids) and set(per_event.values()) == {1}


def _lags(port: int, consumer: str) -> dict[str, float]:
    """partition -> consumer_lag_messages of ``consumer`` as its /metrics shows it."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    pattern = rf'^consumer_lag_messages\{{consumer="{consumer}",partition="(\d+)",topic="[^"]+"\}} (\S+)$'
    return {p: float(v) for p, v in re.findall(pattern, text, re.M)}


def test_a_real_consumer_exports_its_lag_per_partition_and_it_falls_to_zero(probe_service: Probe) -> None:
    """librdkafka's statistics reach consumer_lag_messages: a running consumer exports one lag per
    assigned partition, and after it applied every written event the lags are all 0."""
    probe_service.write(40)
    probe_service.start("relay")
    _, port = _start(probe_service, "consume")
    consumer = f"probe-{probe_service.topic}"
    wait_until(lambda: probe_service.effects() >= 40, 60, "40 effects")
    wait_until(lambda: bool(_lags(port, consumer)), 30, "lag exported")
    wait_until(lambda: set(_lags(port, consumer).values()) == {0.0}, 30, "lag back to 0")
