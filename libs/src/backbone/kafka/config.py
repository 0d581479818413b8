"""librdkafka configuration for producers and consumers, every safety-relevant option explained.

These dictionaries are the single place where the backbone's delivery guarantees meet Kafka; a
service never builds its own producer or consumer config for money-carrying topics.

librdkafka's own log goes through the structured logger (``librdkafka``, JSON like every other
line, card data redacted), rate-limited per kind of message: while a broker is away librdkafka
reports every reconnect attempt, and a 24 s outage would otherwise write hundreds of raw lines.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any, Final

KAFKA_LOGGER: Final = "librdkafka"
LOG_REPEAT_INTERVAL_S: Final = 30.0
_VARYING: Final = re.compile(r"[0-9]+")


class RepeatFilter(logging.Filter):
    """Lets a kind of message through once per ``interval_s``; the next one that passes carries how
    many were held back (``suppressed``). A kind is the message with its numbers taken out (timings,
    counts and ports vary between repeats of one problem)."""

    def __init__(self, interval_s: float = LOG_REPEAT_INTERVAL_S, kinds_max: int = 1000) -> None:
        super().__init__()
        self._interval_s, self._kinds_max = interval_s, kinds_max
        self._lock = threading.Lock()
        self._kinds: dict[str, tuple[float, int]] = {}  # kind -> (last passed at, held back since)

    def filter(self, record: logging.LogRecord) -> bool:
        kind = _VARYING.sub("#", record.getMessage())
        now = time.monotonic()
        with self._lock:
            passed_at, held = self._kinds.get(kind, (-self._interval_s, 0))
            if now - passed_at < self._interval_s:
                self._kinds[kind] = (passed_at, held + 1)
                return False
            if len(self._kinds) >= self._kinds_max:
                self._kinds.clear()  # bounded: forgetting only lets one extra line through per kind
            self._kinds[kind] = (now, 0)
        if held:
            fields = getattr(record, "fields", None) or {}
            record.fields = {**fields, "suppressed": held}
        return True


def kafka_logger() -> logging.Logger:
    """The logger librdkafka writes to (``"logger"`` in every config below), filtered once."""
    logger = logging.getLogger(KAFKA_LOGGER)
    if not any(isinstance(f, RepeatFilter) for f in logger.filters):
        logger.addFilter(RepeatFilter())
    return logger


def producer_config(bootstrap_servers: str, client_id: str, *, delivery_timeout_ms: int) -> dict[str, Any]:
    """An idempotent, ordered, durable producer for the outbox relay."""
    return {
        "bootstrap.servers": bootstrap_servers,
        "client.id": client_id,
        # Retries inside librdkafka must never duplicate or reorder a partition's messages.
        "enable.idempotence": True,
        # A message counts as delivered only once every in-sync replica has it.
        "acks": "all",
        # librdkafka's default (CRC32 consistent_random) places keys differently from the Java
        # client and Faust; murmur2 keeps one payment_id on one partition whoever produces it.
        "partitioner": "murmur2_random",
        # Upper bound for a delivery report; the relay waits for every report before marking rows.
        "message.timeout.ms": delivery_timeout_ms,
        # Batching is what makes 10k events/s possible; 5 ms adds little latency.
        "linger.ms": 5,
        "batch.num.messages": 10_000,
        "compression.type": "lz4",
        "queue.buffering.max.messages": 200_000,
        "socket.keepalive.enable": True,
        "reconnect.backoff.max.ms": 5_000,
        "logger": kafka_logger(),
        "log.connection.close": False,  # an idle broker closing a connection is not news
    }


def consumer_config(
    bootstrap_servers: str,
    group_id: str,
    client_id: str,
    *,
    session_timeout_ms: int,
    max_poll_interval_ms: int,
    instance_id: str | None = None,
    statistics_interval_ms: int = 0,
    fetch_wait_max_ms: int = 500,
) -> dict[str, Any]:
    """An at-least-once consumer whose offsets move only after the database commit.

    ``instance_id`` makes the consumer a static member of its group (KIP-345): a process restarted
    in the same slot (same id) takes its partitions back at once, with no rebalance, instead of
    waiting ``session_timeout_ms`` for its dead predecessor to be noticed. Two live processes must
    never share an id (the broker fences the older one). The price: a static member does not leave
    the group when it stops, so a slot shut down for good holds its partitions until the session
    times out. Without an id the member is dynamic and leaves at once on a clean stop.
    """
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap_servers,
        "group.id": group_id,
        "client.id": client_id,
        # Offsets are committed explicitly, after the batch's database transaction committed.
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        # A new group starts at the beginning: skipping unread history would lose events.
        "auto.offset.reset": "earliest",
        # Rebalances move only the partitions that change owner; the loop handles incremental
        # assign/revoke/lost callbacks.
        "partition.assignment.strategy": "cooperative-sticky",
        "session.timeout.ms": session_timeout_ms,
        # Longer than the longest gap between two polls the loop allows itself (ConsumerSettings
        # explains the bound); exceeding it means a wedged handler, and the member is dropped so
        # that its partitions move on (the liveness check restarts the process too).
        "max.poll.interval.ms": max_poll_interval_ms,
        # Never read what a (future) transactional producer aborted.
        "isolation.level": "read_committed",
        "enable.partition.eof": False,
        # How long the broker holds a fetch that finds nothing new. It answers as soon as any message
        # arrives (fetch.min.bytes is 1), so this bounds only the idle polling: each consumer asks
        # 1000 / fetch_wait_max_ms times a second per broker while nothing happens (at 50 ms, three
        # idle consumers cost the broker ~60 fetch requests a second).
        "fetch.wait.max.ms": fetch_wait_max_ms,
        "socket.keepalive.enable": True,
        "reconnect.backoff.max.ms": 5_000,
        "logger": kafka_logger(),
        "log.connection.close": False,
    }
    if instance_id:
        config["group.instance.id"] = instance_id
    if statistics_interval_ms:
        # Statistics tell the loop when a broker is reachable again (librdkafka reports errors, not
        # recoveries); served by the loop's own polls.
        config["statistics.interval.ms"] = statistics_interval_ms
    return config
