"""librdkafka configuration for producers and consumers, every safety-relevant option explained.

These dictionaries are the single place where the backbone's delivery guarantees meet Kafka; a
service never builds its own producer or consumer config for money-carrying topics.
"""

from __future__ import annotations

from typing import Any


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
    }


def consumer_config(
    bootstrap_servers: str,
    group_id: str,
    client_id: str,
    *,
    session_timeout_ms: int,
    max_poll_interval_ms: int,
) -> dict[str, Any]:
    """An at-least-once consumer whose offsets move only after the database commit."""
    return {
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
        # The loop's per-batch work is bounded well below this; exceeding it means a wedged worker.
        "max.poll.interval.ms": max_poll_interval_ms,
        # Never read what a (future) transactional producer aborted.
        "isolation.level": "read_committed",
        "enable.partition.eof": False,
        "fetch.wait.max.ms": 50,
        "socket.keepalive.enable": True,
    }
