"""The idempotent consumer loop: exactly-once *effects* from at-least-once Kafka delivery.

Per batch, in ONE database transaction: insert ``(consumer, event_id)`` dedup rows, apply the
handler's effects for the events not seen before, write outbox rows; commit; only then commit the
Kafka offsets. A crash anywhere before the offset commit means redelivery, which the dedup rows
absorb. Auto-commit is off. Offsets go to Kafka at most once per ``commit_interval_ms`` while
messages keep coming, and at once when the consumer idles, on revoke and at shutdown: a synchronous
commit per batch cost a broker round trip (and a write to ``__consumer_offsets``) for every batch,
and what a crash re-reads because of the interval is absorbed like any redelivery.

This module polls, decodes and owns the Kafka consumer and its callbacks; applying a batch and
what becomes of a failing message is ``applier``'s, the offsets ``positions``'. When the database or
Kafka fails mid-batch, the batch is rewound (seek) and retried after a backoff, without counting
attempts.

Rebalances: callbacks run inside ``consume()`` on this thread, between batches, so no batch is
ever half-applied when partitions move; the new owner re-reads from the committed offset and the
dedup rows make any overlap harmless (also for a zombie that still commits a late batch).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Final

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from backbone.avro import AvroCodec
from backbone.backoff import exponential_ms
from backbone.consumer.applier import BatchApplier, RewindBatch
from backbone.consumer.inbox import TopicPartitionKey
from backbone.consumer.lag import lags_of, publish_lags
from backbone.consumer.markers import InFlightMarkers
from backbone.consumer.messages import (
    BatchHandler,
    InboundEvent,
    Item,
    Polled,
    Rejection,
    dead_letter_for,
    decode_inbound,
    first_offsets,
)
from backbone.consumer.positions import KafkaPositions
from backbone.consumer.settings import ConsumerSettings
from backbone.health import Health
from backbone.invariants import invariant
from backbone.kafka.config import consumer_config
from backbone.kafka.topics import TopicCatalogue
from backbone.logs import configure_logging, get_logger
from backbone.metrics import CONSUMER_BATCH_SECONDS, CONSUMER_INFRA_ERRORS
from backbone.outage import Dependency
from backbone.outbox.writer import OutboxWriter
from backbone.postgres import is_infrastructure_error
from backbone.runtime import health_for, stop_on_signals
from backbone.settings import load_settings_or_exit

log = get_logger(__name__)
_INFRA_BACKOFF_MAX_MS: Final = 10_000  # and 400 ms after the first failure, doubling
STATISTICS_INTERVAL_MS: Final = 5_000  # how soon a consumer notices Kafka is back


class IdempotentConsumer:
    """One consumer process (a member of the ``consumer_name`` group)."""

    def __init__(
        self,
        settings: ConsumerSettings,
        handler: BatchHandler,
        codec: AvroCodec,
        catalogue: TopicCatalogue,
        outbox: OutboxWriter | None = None,
        health: Health | None = None,
    ) -> None:
        invariant(settings.max_attempts >= 1, "max_attempts must be >= 1")
        invariant(settings.batch_size_max >= 1, "batch_size_max must be >= 1")
        for topic in settings.topics:
            catalogue.dead_letter_topic(topic)  # declared, with its dead-letter twin: fail at start
        self._s = settings
        self._name = settings.consumer_name
        self._codec = codec
        self._catalogue = catalogue
        self._health = health or Health()
        # Outages are logged as state changes (one line each way); readiness follows them.
        self._kafka = Dependency("kafka", settings.consumer_name, self._health, up=False)
        self._database = Dependency("database", settings.consumer_name, self._health, up=False)
        self._stop = threading.Event()
        self._fatal: KafkaError | None = None  # librdkafka gave up on this consumer instance
        self._markers = InFlightMarkers(settings.consumer_name, settings.batch_size_max)
        self._infra_failures = 0
        self._lag_partitions: set[tuple[str, int]] = set()
        config = consumer_config(
            settings.kafka_bootstrap_servers,
            settings.group_id or settings.consumer_name,
            f"{settings.consumer_name}-{id(self):x}",
            session_timeout_ms=settings.session_timeout_ms,
            max_poll_interval_ms=settings.max_poll_interval_ms,
            instance_id=settings.instance_id,
            statistics_interval_ms=STATISTICS_INTERVAL_MS,
            fetch_wait_max_ms=settings.fetch_wait_max_ms,
        )
        config["error_cb"] = self._on_kafka_error
        config["stats_cb"] = self._on_statistics
        config["on_commit"] = self._on_commit
        self._consumer = Consumer(config)
        self._positions = KafkaPositions(self._consumer, settings.consumer_name, settings.commit_interval_ms)
        self._applier = BatchApplier(
            settings, handler, catalogue, outbox, self._markers, self._positions, self._database, self._stop
        )

    # -- lifecycle ---------------------------------------------------------------------------

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        """Consume until ``stop()``; the consumer's only unbounded loop."""
        self._consumer.subscribe(
            list(self._s.topics), on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )
        log.info(
            "consumer.started",
            consumer=self._name,
            topics=list(self._s.topics),
            instance_id=self._s.instance_id,
        )
        self._applier.reach_database()
        try:
            while not self._stop.is_set():
                self._health.beat()
                self.poll_once()
        finally:
            if self._fatal is None:
                self._positions.flush(set(self._positions.pending), wait=True)
                self._applier.release_markers(self._markers.armed_partitions())
                self._consumer.close()  # leaves the group: partitions move at once, not after a timeout
            self._applier.close_connection()
            log.info("consumer.stopped", consumer=self._name)

    def poll_once(self) -> int:
        """Consume and apply one batch; returns the number of messages taken from Kafka.

        ``consume(n, timeout)`` alone waits until n messages arrived or the timeout passed, which
        at moderate rates turns the poll timeout into latency. So: block for the first message
        only, then take what is buffered (``_batch_after``).
        """
        if self._fatal is not None:
            # A fatal error leaves the instance unusable: its polls return nothing ever after
            # (a drill saw "static consumer fenced" after a broker crash, then silence with the
            # process alive). Leave, so that what runs the process starts a fresh consumer.
            raise KafkaException(self._fatal)
        polled_at = time.monotonic()
        first = self._consumer.poll(self._s.poll_timeout_ms / 1000)
        waited_s = time.monotonic() - polled_at
        if first is None:
            self._positions.flush(set(self._positions.pending))  # idle: what was applied goes to Kafka now
            if not self._database.up:
                self._applier.reach_database()  # readiness tells the truth while idle too
            self._applier.maybe_prune()
            return 0
        batch = self._batch_after(first, busy=waited_s * 1000 < self._s.batch_linger_ms)
        items = [self._decode(Polled.of(m)) for m in batch if self._usable(m)]
        if items:
            self._apply(items)
        self._applier.maybe_prune()
        return len(items)

    def _batch_after(self, first: Message, *, busy: bool) -> list[Message]:
        """``first`` and what is already fetched; under load also what arrives within
        ``batch_linger_ms``. Load shows as messages waiting, or as a first message that came
        sooner than the linger (``busy``): then lingering fills the batch. A first message after a
        quiet spell is applied at once: an idle system pays no linger at each hop."""
        room = self._s.batch_size_max - 1
        rest = self._consumer.consume(num_messages=room, timeout=0) if room else []
        if (rest or busy) and len(rest) < room and self._s.batch_linger_ms > 0:
            rest += self._consumer.consume(
                num_messages=room - len(rest), timeout=self._s.batch_linger_ms / 1000
            )
        return [first, *rest]

    # -- decoding ------------------------------------------------------------------------------

    def _usable(self, message: Message) -> bool:
        error = message.error()
        if error is None:
            return True
        if error.fatal() or error.code() == KafkaError._FATAL:
            # librdkafka hands a high-level consumer its fatal error ("static consumer fenced by
            # other consumer with same group.instance.id" after a broker restart) as a message
            # error with code _FATAL and no fatal flag, never through error_cb (a drill saw it)
            log.error("consumer.kafka_fatal", consumer=self._name, error=error.str(), action="exit")
            self._fatal = error
            raise KafkaException(error)
        self._kafka.failed(error.str())
        return False

    def _decode(self, message: Polled) -> Item:
        decoded = decode_inbound(
            self._codec, self._catalogue, message.topic, message.key, message.value, lambda: message.headers
        )
        if isinstance(decoded, Rejection):
            letter = dead_letter_for(
                message, decoded.error_class, decoded.reason, decoded.event, redacted=decoded.redacted
            )
            return Item(message, None, letter)
        inbound = InboundEvent(
            decoded, message.topic, message.partition, message.offset, message.trace_headers
        )
        return Item(message, inbound, None)

    # -- applying --------------------------------------------------------------------------------

    def _apply(self, items: list[Item]) -> None:
        started = time.monotonic()
        try:
            self._applier.apply(items)
            self._infra_failures = 0
            self._database.ok()
            self._kafka.ok()  # messages arrived: the broker answers
        except RewindBatch as rewind:
            self._rewind_after_infra_failure(rewind)
        except Exception as exc:
            if not is_infrastructure_error(exc):
                raise
            self._rewind_after_infra_failure(RewindBatch(first_offsets(items), exc))
        finally:
            CONSUMER_BATCH_SECONDS.labels(self._name).observe(time.monotonic() - started)

    def _rewind_after_infra_failure(self, rewind: RewindBatch) -> None:
        CONSUMER_INFRA_ERRORS.labels(self._name).inc()
        self._infra_failures += 1
        delay_s = exponential_ms(self._infra_failures + 1, base_ms=200, cap_ms=_INFRA_BACKOFF_MAX_MS) / 1000
        self._database.failed(rewind)
        self._applier.close_connection()
        for tp, offset in rewind.positions.items():
            self._positions.seek(tp, offset)
        self._stop.wait(delay_s)

    # -- kafka's callbacks -----------------------------------------------------------------------

    def _on_assign(self, _: Consumer, partitions: list[TopicPartition]) -> None:
        self._health.set("group", True)  # joined (an assignment may be empty: more members than partitions)
        self._markers.assigned((p.topic, p.partition) for p in partitions)
        log.info("consumer.assigned", consumer=self._name, partitions=_names(partitions))

    def _on_revoke(self, _: Consumer, partitions: list[TopicPartition]) -> None:
        revoked = {(p.topic, p.partition) for p in partitions}
        self._positions.flush(revoked, wait=True)  # still ours during the callback: exact positions
        self._applier.release_markers(revoked)
        self._forget(revoked)
        log.info("consumer.revoked", consumer=self._name, partitions=_names(partitions))

    def _on_lost(self, _: Consumer, partitions: list[TopicPartition]) -> None:
        lost = {(p.topic, p.partition) for p in partitions}
        self._forget(lost)  # not ours any more: the new owner re-reads, dedup absorbs
        log.warning("consumer.partitions_lost", consumer=self._name, partitions=_names(partitions))

    def _forget(self, tps: set[TopicPartitionKey]) -> None:
        self._markers.forget(tps)
        self._positions.forget(tps)

    def _on_commit(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        self._positions.committed(error, partitions)

    def _on_kafka_error(self, error: KafkaError) -> None:
        if error.fatal():
            log.error("consumer.kafka_fatal", consumer=self._name, error=error.str(), action="exit")
            self._fatal = error
        self._kafka.failed(error.str())

    def _on_statistics(self, raw: str) -> None:
        """Publish the partitions' lag; a broker (not the bootstrap placeholder) in state UP: Kafka
        answers again."""
        try:
            stats = json.loads(raw)
        except ValueError:
            return
        self._lag_partitions = publish_lags(self._name, lags_of(stats), self._lag_partitions)
        if self._kafka.up:
            return
        brokers = stats.get("brokers", {})
        if any(b.get("nodeid", -1) >= 0 and b.get("state") == "UP" for b in brokers.values()):
            self._kafka.ok()


def _names(partitions: list[TopicPartition]) -> list[str]:
    return [f"{p.topic}/{p.partition}" for p in partitions]


def run_consumer_from_env(
    build: Callable[[ConsumerSettings], tuple[BatchHandler, AvroCodec, TopicCatalogue, OutboxWriter | None]],
    settings_cls: type[ConsumerSettings] = ConsumerSettings,
) -> None:
    """Entrypoint body for a consumer process: settings from env, SIGTERM finishes the batch and leaves."""
    settings = load_settings_or_exit(settings_cls)
    configure_logging(settings.consumer_name)
    health = health_for(settings.health_port)
    handler, codec, catalogue, outbox = build(settings)
    consumer = IdempotentConsumer(settings, handler, codec, catalogue, outbox, health)
    stop_on_signals(consumer.stop, "consumer")
    consumer.run()
