"""A fatal librdkafka error ends the consumer instead of leaving it alive and deaf."""

from __future__ import annotations

import pytest
from backbone.consumer.loop import IdempotentConsumer
from backbone.consumer.settings import ConsumerSettings
from backbone.settings import load_settings
from backbone.testing import probe
from confluent_kafka import KafkaError, KafkaException


def test_a_fatal_kafka_error_makes_the_consumer_leave_instead_of_polling_silently(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fatal error (as "static consumer fenced by other consumer with same group.instance.id"
    after a broker crash, seen in a fault drill) leaves a librdkafka consumer unusable: its polls
    return nothing ever after. The error callback marks it and the next poll raises, so the process
    exits and what runs it starts a fresh consumer, which takes its partitions back by its slot id."""
    monkeypatch.setenv("PROBE_TOPIC", "t-fatal")
    settings = load_settings(
        ConsumerSettings,
        {
            "CONSUMER_NAME": "fatal-test",
            "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
            "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
            "CONSUMER_TOPICS": "t-fatal",
            "CONSUMER_POLL_TIMEOUT_MS": "50",
        },
    )
    handler, codec, catalogue, outbox = probe.build_consumer(settings)
    consumer = IdempotentConsumer(settings, handler, codec, catalogue, outbox)
    consumer._on_kafka_error(KafkaError(KafkaError._TRANSPORT, "broker down"))  # not fatal: polls go on
    assert consumer.poll_once() == 0
    consumer._on_kafka_error(KafkaError(KafkaError.FENCED_INSTANCE_ID, "fenced", fatal=True))
    with pytest.raises(KafkaException, match="fenced"):
        consumer.poll_once()


class _FencedConsumer:
    """What librdkafka's high-level consumer gives after a fatal error: a consumer error whose code
    is _FATAL, without the fatal flag (rdkafka.c: "for the high-level consumer we propagate the
    error as a consumer error so it is returned from consumer_poll()", not through error_cb)."""

    class Message:
        def error(self) -> KafkaError:
            return KafkaError(KafkaError._FATAL, "Fatal error: Broker: Static consumer fenced")

    def poll(self, timeout: float) -> Message:
        return self.Message()

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        return []


def test_a_fatal_error_polled_as_a_message_makes_the_consumer_leave_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fatal error of a fenced static member arrives from poll() as a message error with code
    _FATAL and no fatal flag (a drill saw the ledger's consumer log it, then stay alive and deaf
    for minutes, its journals missing): poll_once raises, and every later poll too."""
    monkeypatch.setenv("PROBE_TOPIC", "t-fatal")
    settings = load_settings(
        ConsumerSettings,
        {
            "CONSUMER_NAME": "fatal-test",
            "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
            "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
            "CONSUMER_TOPICS": "t-fatal",
        },
    )
    handler, codec, catalogue, outbox = probe.build_consumer(settings)
    consumer = IdempotentConsumer(settings, handler, codec, catalogue, outbox)
    consumer._consumer = _FencedConsumer()  # type: ignore[assignment]
    assert not KafkaError(KafkaError._FATAL, "x").fatal()  # the flag alone would not catch it
    for _ in range(2):
        with pytest.raises(KafkaException, match="fenced"):
            consumer.poll_once()
