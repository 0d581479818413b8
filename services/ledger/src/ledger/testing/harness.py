"""The ledger as real processes (consumer, relay, API) on a throwaway database and topics, for
end-to-end tests and the benchmark."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backbone.postgres import connect
from backbone.testing.processes import Proc
from backbone.testing.stack import Stack
from confluent_kafka import Consumer, TopicPartition

from ledger.testing.database import LedgerDatabase
from ledger.testing.kafka import LedgerTopics


@dataclass
class LedgerService:
    stack: Stack
    db: LedgerDatabase
    topics: LedgerTopics
    logs_dir: Path
    procs: list[Proc] = field(default_factory=list)
    _counter: itertools.count[int] = field(default_factory=itertools.count)

    @property
    def consumer_name(self) -> str:
        return f"ledger-{self.topics.payments}"

    def env(self, **overrides: str) -> dict[str, str]:
        base = {
            "DATABASE_URL": self.db.app_url,
            "KAFKA_BOOTSTRAP_SERVERS": self.stack.kafka_bootstrap,
            "SERVICE_NAME": "ledger",
            "CONSUMER_NAME": self.consumer_name,
            "CONSUMER_SESSION_TIMEOUT_MS": "6000",
            "CONSUMER_RETRY_BACKOFF_MS": "100",
            "OUTBOX_POLL_INTERVAL_MS": "200",
            "OUTBOX_DELIVERY_TIMEOUT_MS": "5000",
            "OUTBOX_STANDBY_RETRY_MS": "200",
            "BACKBONE_FAILPOINTS": "",
            **self.topics.env(),
        }
        return {**base, **overrides}

    def start(self, command: str, **overrides: str) -> Proc:
        n = next(self._counter)
        proc = Proc(["-m", "ledger", command], self.env(**overrides), self.logs_dir / f"{command}-{n}.log")
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.procs:
            proc.kill()

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with connect(self.db.admin_url) as conn:
            return conn.execute(sql.encode(), params).fetchall()

    def scalar(self, sql: str, *params: Any) -> Any:
        return self.query(sql, *params)[0][0]

    def journals(self) -> int:
        return int(self.scalar("SELECT count(*) FROM journals"))

    def committed_offsets(self, topic: str) -> dict[int, int]:
        consumer = Consumer({"bootstrap.servers": self.stack.kafka_bootstrap, "group.id": self.consumer_name})
        try:
            parts = [TopicPartition(topic, p) for p in range(self.topics.partitions)]
            return {tp.partition: tp.offset for tp in consumer.committed(parts, timeout=10)}
        finally:
            consumer.close()
