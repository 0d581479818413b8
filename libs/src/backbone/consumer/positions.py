"""Where an idempotent consumer stands in its partitions, as Kafka sees it.

Offsets go to Kafka only for what the database already holds, at most once per
``commit_interval_ms`` while messages keep coming, and at once when the consumer idles, on revoke
and at shutdown. A commit from the loop is asynchronous with one in flight; a position stays pending
until Kafka confirms it. Seeks rewind a partition to redeliver what was not settled.
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from backbone.consumer.inbox import TopicPartitionKey
from backbone.logs import get_logger

log = get_logger(__name__)


class KafkaPositions:
    """The positions applied and not yet committed, the commits that take them to Kafka, seeks back
    and the partitions' ends, on ``consumer``."""

    def __init__(self, consumer: Consumer, consumer_name: str, commit_interval_ms: int) -> None:
        self._consumer = consumer
        self._name = consumer_name
        self._commit_interval_ms = commit_interval_ms
        self.pending: dict[TopicPartitionKey, int] = {}
        self._last_commit_s = -float("inf")  # monotonic time of the last offset commit tried
        self.in_flight = False

    def commit(self, positions: dict[TopicPartitionKey, int]) -> None:
        """Commit positions whose effects are in the database; a failed commit is retried later.

        A commit fails mostly during a rebalance (ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS).
        Nothing is lost either way: the database has the effects and the dedup rows, so a
        redelivery changes nothing. Retrying (next batch, on revoke, at shutdown) only saves the
        next owner from re-reading.
        """
        for tp, offset in positions.items():
            self.pending[tp] = max(offset, self.pending.get(tp, 0))
        if time.monotonic() - self._last_commit_s >= self._commit_interval_ms / 1000:
            self.flush(set(self.pending))

    def flush(self, tps: set[TopicPartitionKey], *, wait: bool = False) -> None:
        """From the loop, asynchronously (one commit in flight, answered in ``committed``): a
        synchronous commit waits without bound for the group's coordinator, and while the group
        rejoins, for an assignment only this thread can serve. ``wait`` in a revoke callback and at
        shutdown, where the positions must reach Kafka before the partitions move."""
        pending = {tp: self.pending[tp] for tp in tps if tp in self.pending}
        if not pending or (self.in_flight and not wait):
            return
        offsets = [TopicPartition(tp[0], tp[1], offset) for tp, offset in pending.items()]
        self._last_commit_s = time.monotonic()
        try:
            if wait:
                self.committed(None, self._consumer.commit(offsets=offsets, asynchronous=False))
            else:
                self._consumer.commit(offsets=offsets, asynchronous=True)
                self.in_flight = True
        except KafkaException as exc:
            log.warning("consumer.offset_commit_failed", consumer=self._name, error=str(exc))

    def committed(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """Kafka's answer to a commit (librdkafka's ``on_commit``, or a synchronous commit's)."""
        self.in_flight = False
        if error is not None:
            log.warning("consumer.offset_commit_failed", consumer=self._name, error=error.str())
            return
        for p in partitions:
            tp = (p.topic, p.partition)
            if p.error is None and tp in self.pending and self.pending[tp] <= p.offset:
                del self.pending[tp]  # a later position, applied meanwhile, stays pending

    def forget(self, tps: set[TopicPartitionKey]) -> None:
        for tp in tps:
            self.pending.pop(tp, None)

    def seek(self, tp: TopicPartitionKey, offset: int) -> None:
        try:
            self._consumer.seek(TopicPartition(tp[0], tp[1], offset))
        except KafkaException as exc:
            log.warning(
                "consumer.seek_failed", consumer=self._name, topic=tp[0], partition=tp[1], error=str(exc)
            )

    def high_watermark(self, tp: TopicPartitionKey) -> int | None:
        """The partition's end as the last fetch saw it (no broker round trip), or None."""
        try:
            _, high = self._consumer.get_watermark_offsets(TopicPartition(tp[0], tp[1]), cached=True)
        except KafkaException:
            return None
        return int(high) if high is not None and high >= 0 else None
