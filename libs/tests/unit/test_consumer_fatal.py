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
