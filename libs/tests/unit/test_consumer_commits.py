"""The consumer's loop never waits on an offset commit: a real librdkafka consumer with no broker."""

from __future__ import annotations

import threading

import pytest
from backbone.consumer.loop import IdempotentConsumer
from backbone.consumer.settings import ConsumerSettings
from backbone.settings import load_settings
from backbone.testing import probe
from confluent_kafka import KafkaError, TopicPartition


def _consumer(monkeypatch: pytest.MonkeyPatch) -> IdempotentConsumer:
    monkeypatch.setenv("PROBE_TOPIC", "t-commit")
    settings = load_settings(
        ConsumerSettings,
        {
            "CONSUMER_NAME": "commit-test",
            "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
            "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",  # nobody: the group never finds a coordinator
            "CONSUMER_TOPICS": "t-commit",
            "CONSUMER_SESSION_TIMEOUT_MS": "1000",  # bounds the teardown with a commit in flight
        },
    )
    handler, codec, catalogue, outbox = probe.build_consumer(settings)
    return IdempotentConsumer(settings, handler, codec, catalogue, outbox)


def test_the_loop_commits_without_waiting_for_a_coordinator(monkeypatch: pytest.MonkeyPatch) -> None:
    """A synchronous commit waits without bound for the group's coordinator, and while the group
    rejoins, for the assignment that only the waiting thread could serve: a drill saw a consumer go
    silent after a broker restart (partitions lost, never taken back, no poll, no log line). With
    no broker at all, flushing applied positions from the loop returns at once, keeps one commit in
    flight (not one per idle poll), and a position stays pending until Kafka confirms it."""
    consumer = _consumer(monkeypatch)
    positions = consumer._positions
    positions.pending = {("t-commit", 0): 5, ("t-commit", 1): 7}
    flush = threading.Thread(target=positions.flush, args=({("t-commit", 0), ("t-commit", 1)},))
    flush.start()
    flush.join(5)
    assert not flush.is_alive(), "the loop waited on a commit with no coordinator"
    assert _in_flight(consumer)

    positions.pending[("t-commit", 0)] = 9  # applied meanwhile: a later position
    consumer._on_commit(None, [TopicPartition("t-commit", 0, 5), TopicPartition("t-commit", 1, 7)])
    assert positions.pending == {("t-commit", 0): 9}
    assert not _in_flight(consumer)

    consumer._on_commit(KafkaError(KafkaError.REBALANCE_IN_PROGRESS), [TopicPartition("t-commit", 0, 9)])
    assert positions.pending == {("t-commit", 0): 9}, "a failed commit is tried again later"


def _in_flight(consumer: IdempotentConsumer) -> bool:
    return consumer._positions.in_flight


class _Buffered:
    """A consumer's local queue: ``consume`` hands out what is buffered and records its timeouts."""

    def __init__(self, buffered: int) -> None:
        self.buffered = buffered
        self.timeouts: list[float] = []

    def consume(self, num_messages: int, timeout: float) -> list[str]:
        self.timeouts.append(timeout)
        taken = min(num_messages, self.buffered)
        self.buffered -= taken
        return ["m"] * taken


def test_an_idle_consumer_does_not_linger_and_a_busy_one_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batching must not cost an idle system its latency: a lone message after a quiet spell is
    applied without the linger; when more was already waiting, or the first message came at once
    (load), the batch also takes what arrives within the linger."""
    consumer = _consumer(monkeypatch)
    idle = _Buffered(0)
    consumer._consumer = idle  # type: ignore[assignment]
    assert consumer._batch_after("first", busy=False) == ["first"]  # type: ignore[arg-type]
    assert idle.timeouts == [0]
    stream = _Buffered(0)
    consumer._consumer = stream  # type: ignore[assignment]
    assert consumer._batch_after("first", busy=True) == ["first"]  # type: ignore[arg-type]
    assert stream.timeouts == [0, consumer._s.batch_linger_ms / 1000]
    busy = _Buffered(3)
    consumer._consumer = busy  # type: ignore[assignment]
    assert len(consumer._batch_after("first", busy=False)) == 4  # type: ignore[arg-type]
    assert busy.timeouts == [0, consumer._s.batch_linger_ms / 1000]
