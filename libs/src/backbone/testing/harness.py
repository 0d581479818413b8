"""The probe service under test: its database, its topics, and its processes (relay, consumer).

Integration tests of the backbone and the benchmarks drive the probe through this class.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from backbone.postgres import connect
from backbone.testing import probe
from backbone.testing.processes import Proc
from backbone.testing.stack import Stack

EVENTS = frozenset({probe.EVENT_TYPE})
PARTITIONS = 3


@dataclass
class Probe:
    """One test's probe service: its database, its topics, and its processes."""

    stack: Stack
    db_url: str
    topic: str
    emit_topic: str
    logs_dir: Path
    procs: list[Proc] = field(default_factory=list)
    _counter: itertools.count[int] = field(default_factory=itertools.count)

    def env(self, **overrides: str) -> dict[str, str]:
        base = {
            "DATABASE_URL": self.db_url,
            "KAFKA_BOOTSTRAP_SERVERS": self.stack.kafka_bootstrap,
            "SERVICE_NAME": "probe",
            "PROBE_TOPIC": self.topic,
            "PROBE_PARTITIONS": str(PARTITIONS),
            "CONSUMER_NAME": f"probe-{self.topic}",
            "CONSUMER_TOPICS": self.topic,
            "CONSUMER_SESSION_TIMEOUT_MS": "6000",
            "CONSUMER_RETRY_BACKOFF_MS": "100",
            "OUTBOX_POLL_INTERVAL_MS": "200",
            "OUTBOX_DELIVERY_TIMEOUT_MS": "5000",
            "OUTBOX_STANDBY_RETRY_MS": "200",
            "BACKBONE_FAILPOINTS": "",
        }
        return {**base, **overrides}

    def start(self, command: str, **overrides: str) -> Proc:
        n = next(self._counter)
        proc = Proc(["-m", "backbone.testing.probe", command], self.env(**overrides),
                    self.logs_dir / f"{command}-{n}.log")  # fmt: skip  # aligned under its bracket
        self.procs.append(proc)
        return proc

    def write(self, count: int, keys: int = 10, **kwargs: Any) -> list[str]:
        return probe.write_events(self.db_url, self.topic, count=count, keys=keys, **kwargs)

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with connect(self.db_url) as conn:
            return conn.execute(sql.encode(), params).fetchall()

    def scalar(self, sql: str, *params: Any) -> Any:
        return self.query(sql, *params)[0][0]

    def effects(self) -> int:
        return int(self.scalar("SELECT count(*) FROM probe_effects"))

    def applications_per_event(self) -> dict[str, int]:
        rows = self.query("SELECT event_id::text, count(*) FROM probe_effects GROUP BY event_id")
        return {event_id: n for event_id, n in rows}

    def committed_offsets(self, group: str | None = None) -> dict[int, int]:
        consumer = Consumer({"bootstrap.servers": self.stack.kafka_bootstrap,
                             "group.id": group or f"probe-{self.topic}"})  # fmt: skip  # aligned
        try:
            parts = consumer.committed([TopicPartition(self.topic, p) for p in range(PARTITIONS)], timeout=10)
            return {tp.partition: tp.offset for tp in parts}
        finally:
            consumer.close()

    def end_offsets(self, topic: str | None = None) -> dict[int, int]:
        consumer = Consumer({"bootstrap.servers": self.stack.kafka_bootstrap, "group.id": "watermarks"})
        try:
            return {
                p: consumer.get_watermark_offsets(TopicPartition(topic or self.topic, p), timeout=10)[1]
                for p in range(PARTITIONS)
            }
        finally:
            consumer.close()
