"""(f) Kafka down for a while: a private broker (so other tests keep theirs) is stopped while the
service keeps committing events; the relay backs off, nothing is lost, and it catches up."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from backbone.testing import databases, probe
from backbone.testing import kafka as test_kafka
from backbone.testing.harness import EVENTS, PARTITIONS, Probe
from backbone.testing.processes import Proc, wait_until
from backbone.testing.stack import REPO_ROOT, Stack, free_port
from confluent_kafka.admin import AdminClient

KAFKA_SH = str(REPO_ROOT / "deploy/kafka/kafka.sh")


class PrivateBroker:
    """A second Kafka instance with its own ports and data directory."""

    def __init__(self, home: Path) -> None:
        self.port, self.controller_port = free_port(), free_port()
        self.env = {
            **os.environ,
            "KAFKA_PORT": str(self.port),
            "KAFKA_CONTROLLER_PORT": str(self.controller_port),
            "KAFKA_HOME_DIR": str(home),
        }
        self.bootstrap = f"127.0.0.1:{self.port}"

    def run(self, command: str) -> None:
        result = subprocess.run(
            ["bash", KAFKA_SH, command],
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
            timeout=180,
        )
        assert result.returncode == 0, f"kafka.sh {command}: {result.stdout}\n{result.stderr}"


@pytest.fixture
def private_broker(tmp_path: Path) -> Iterator[PrivateBroker]:
    broker = PrivateBroker(tmp_path / "kafka")
    broker.run("start")
    yield broker
    broker.run("stop")


def _lines(proc: Proc) -> list[str]:
    return proc.logs().splitlines()


def _dependency_events(proc: Proc, event: str, after_line: int = 0) -> list[dict[str, object]]:
    found = [json.loads(line) for line in _lines(proc)[after_line:]]
    return [e for e in found if e.get("event") == event and e.get("dependency") == "kafka"]


def test_kafka_down_for_a_while_nothing_lost_and_the_relay_catches_up(
    stack: Stack, private_broker: PrivateBroker, tmp_path: Path
) -> None:
    """Events committed before, during and after a broker outage all reach the consumer exactly
    once; during the outage they wait in the outbox. The outage is logged as a state change, not a
    stream: the relay and the consumer each write one "kafka down" warning and one "kafka up" info
    for it;
    every line they write is JSON (librdkafka's own lines included, through the structured logger);
    an outage of ~10 s costs each of them a handful of lines, where it used to cost hundreds."""
    own_stack = Stack(private_broker.bootstrap, stack.pg_admin_url, "private")
    db_url = databases.create_database(stack.pg_admin_url, [probe.MIGRATIONS])
    topic = test_kafka.unique_topic("outage")
    test_kafka.create_topics(private_broker.bootstrap, test_kafka.probe_catalogue(topic, PARTITIONS, EVENTS))
    service = Probe(own_stack, db_url, topic, topic, tmp_path)
    try:
        relay = service.start("relay", OUTBOX_DELIVERY_TIMEOUT_MS="3000", OUTBOX_BACKOFF_MAX_MS="2000")
        consumer = service.start("consume")
        ids = service.write(100)
        wait_until(lambda: service.effects() == 100, 60, "events before the outage")
        # The consumer says kafka is up once at its start (the relay assumes it): wait for that line.
        wait_until(lambda: _dependency_events(consumer, "dependency.up"), 30, "the consumer's kafka up")

        before = {"relay": len(_lines(relay)), "consumer": len(_lines(consumer))}
        private_broker.run("stop")
        ids += service.write(200, seq_start=101)
        wait_until(lambda: _dependency_events(relay, "dependency.down"), 60, "the relay noticing the outage")
        wait_until(lambda: _dependency_events(consumer, "dependency.down"), 60, "the consumer noticing it")
        time.sleep(5)  # an outage that lasts past several reconnect backoffs (capped at 5 s)
        assert service.scalar("SELECT count(*) FROM outbox WHERE published_at IS NULL") == 200
        assert service.effects() == 100
        during = {
            "relay": len(_lines(relay)) - before["relay"],
            "consumer": len(_lines(consumer)) - before["consumer"],
        }

        private_broker.run("start")
        ids += service.write(100, seq_start=301)
        wait_until(lambda: service.effects() >= 400, 120, "catching up after the outage")
        wait_until(lambda: _dependency_events(relay, "dependency.up"), 60, "the relay saying kafka is back")
        wait_until(lambda: _dependency_events(consumer, "dependency.up"), 60, "the consumer saying so")
        per_event = service.applications_per_event()
        assert sorted(per_event) == sorted(ids)
        assert set(per_event.values()) == {1}
        for name, proc in (("relay", relay), ("consumer", consumer)):
            assert len(_dependency_events(proc, "dependency.down", before[name])) == 1
            assert len(_dependency_events(proc, "dependency.up", before[name])) == 1
        assert max(during.values()) <= 25, during
    finally:
        for proc in service.procs:
            proc.kill()
        databases.drop_database(stack.pg_admin_url, db_url)
        AdminClient({"bootstrap.servers": private_broker.bootstrap}).delete_topics([topic, topic + ".dlq"])
