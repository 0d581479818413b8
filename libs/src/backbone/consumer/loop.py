"""The idempotent consumer loop: exactly-once *effects* from at-least-once Kafka delivery.

Per batch, in ONE database transaction: insert ``(consumer, event_id)`` dedup rows, apply the
handler's effects for the events not seen before, write outbox rows; commit; only then commit the
Kafka offsets. A crash anywhere before the offset commit means redelivery, which the dedup rows
absorb. Auto-commit is off.

Failures:
- bytes that do not decode (not Avro, unknown schema, bad envelope, key != payment_id) are
  dead-lettered at once with the reason: retrying cannot fix them;
- a handler exception rolls the batch back and the batch is re-run message by message; the
  failing message is retried (its partition waits, others move on) and after ``max_attempts``
  it is dead-lettered: a ``dead_letters`` row plus a copy on ``<topic>.dlq`` through the outbox.
  The partition then moves on. Nothing is dropped silently;
- a message that kills the whole process is caught too: before a fast batch, an in-flight
  marker (partition, first..last offset) is committed on its own and it is deleted inside the
  batch transaction. A marker that survives shows the range a process died applying; the next
  owner applies exactly that range on the careful path, where each attempt is counted *before*
  the handler runs, so the killer is dead-lettered after N counted restarts;
- so a message is tried at most ``max_attempts + 1`` times: once inside its batch (a failure
  there cannot be pinned on one message) and ``max_attempts`` times alone;
- the database or Kafka failing is not the message's fault: the batch is rewound (seek) and
  retried after a backoff, without counting attempts.

Rebalances: callbacks run inside ``consume()`` on this thread, between batches, so no batch is
ever half-applied when partitions move; the new owner re-reads from the committed offset and the
dedup rows make any overlap harmless (also for a zombie that still commits a late batch).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import psycopg
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from backbone import failpoints
from backbone.avro import AvroCodec, DecodedEvent, DecodeError, InvalidEnvelope, MalformedDatum, UnknownSchema
from backbone.consumer.inbox import (
    DeadLetter,
    claim_events,
    clear_attempts,
    clear_in_flight,
    insert_dead_letter,
    load_in_flight,
    mark_in_flight,
    note_error,
    record_attempt,
)
from backbone.health import Health
from backbone.invariants import invariant
from backbone.kafka.config import consumer_config
from backbone.kafka.topics import TopicCatalogue
from backbone.logs import configure_logging, get_logger
from backbone.metrics import (
    CONSUMER_BATCH_SECONDS,
    CONSUMER_FAILURES,
    CONSUMER_INFRA_ERRORS,
    CONSUMER_MESSAGES,
)
from backbone.outbox.writer import OutboxWriter
from backbone.postgres import connect, is_infrastructure_error
from backbone.runtime import health_for, stop_on_signals
from backbone.settings import Secret, load_settings_or_exit, setting

log = get_logger(__name__)
_INFRA_BACKOFF_MAX_S: Final = 10.0

TopicPartitionKey = tuple[str, int]


@dataclass(frozen=True)
class ConsumerSettings:
    consumer_name: str = setting("CONSUMER_NAME", doc="consumer group id and dedup namespace")
    database_url: Secret = setting("DATABASE_URL", secret=True)
    kafka_bootstrap_servers: str = setting("KAFKA_BOOTSTRAP_SERVERS")
    topics: tuple[str, ...] = setting("CONSUMER_TOPICS", doc="comma-separated topics")
    batch_size_max: int = setting("CONSUMER_BATCH_SIZE_MAX", 500)
    poll_timeout_ms: int = setting("CONSUMER_POLL_TIMEOUT_MS", 500, doc="wait for the first message")
    batch_linger_ms: int = setting("CONSUMER_BATCH_LINGER_MS", 10, doc="extra wait to fill a batch")
    max_attempts: int = setting("CONSUMER_MAX_ATTEMPTS", 5, doc="failures before a message is dead-lettered")
    retry_backoff_ms: int = setting("CONSUMER_RETRY_BACKOFF_MS", 500, doc="pause before retrying a failure")
    session_timeout_ms: int = setting("CONSUMER_SESSION_TIMEOUT_MS", 10_000)
    max_poll_interval_ms: int = setting("CONSUMER_MAX_POLL_INTERVAL_MS", 300_000)
    processed_retention_s: int = setting(
        "CONSUMER_PROCESSED_RETENTION_S", 30 * 24 * 3600, doc="keep dedup rows longer than topic retention"
    )
    prune_interval_s: int = setting("CONSUMER_PRUNE_INTERVAL_S", 300)
    health_port: int = setting("HEALTH_PORT", 0)
    group_id: str | None = setting(
        "CONSUMER_GROUP_ID", None, doc="Kafka group id; defaults to CONSUMER_NAME (the dedup namespace)"
    )


@dataclass(frozen=True)
class InboundEvent:
    """A decoded event with where it came from."""

    event: DecodedEvent
    topic: str
    partition: int
    offset: int

    @property
    def event_id(self) -> str:
        return self.event.envelope.event_id

    @property
    def event_type(self) -> str:
        return self.event.event_type


@dataclass(frozen=True)
class UnitOfWork:
    """What a handler works with: the batch's connection inside its open transaction, the outbox."""

    conn: psycopg.Connection
    outbox: OutboxWriter | None
    consumer: str


BatchHandler = Callable[[UnitOfWork, Sequence[InboundEvent]], None]


def per_event(handler: Callable[[UnitOfWork, InboundEvent], None]) -> BatchHandler:
    """Adapt a one-event handler to the batch interface."""

    def handle(uow: UnitOfWork, events: Sequence[InboundEvent]) -> None:
        for event in events:
            handler(uow, event)

    return handle


@dataclass(frozen=True)
class Polled:
    """A consumed Kafka message with its coordinates checked once (librdkafka types them optional).

    Headers stay as librdkafka gave them until someone asks (dead letters do): converting them
    for every message cost as much as half an Avro decode.
    """

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    raw_headers: Any = None

    @classmethod
    def of(cls, message: Message) -> Polled:
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        has_coordinates = topic is not None and partition is not None and offset is not None
        invariant(has_coordinates, "a consumed message without topic/partition/offset")
        assert topic is not None and partition is not None and offset is not None
        return cls(
            topic, partition, offset, _as_bytes(message.key()), _as_bytes(message.value()), message.headers()
        )

    @property
    def headers(self) -> dict[str, str]:
        raw = self.raw_headers or []
        pairs = raw.items() if isinstance(raw, dict) else raw
        return {k: _text(v) for k, v in pairs if v is not None}


def _text(value: str | bytes) -> str:
    return value if isinstance(value, str) else value.decode("utf-8", "replace")


def _as_bytes(value: str | bytes | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


@dataclass(frozen=True)
class _Item:
    """One polled message: decoded, or the dead letter it turns into."""

    message: Polled
    inbound: InboundEvent | None
    letter: DeadLetter | None

    @property
    def tp(self) -> TopicPartitionKey:
        return (self.message.topic, self.message.partition)


class _RewindBatch(Exception):
    """Infrastructure failed mid-batch; rewind these partitions to these offsets."""

    def __init__(self, positions: dict[TopicPartitionKey, int], cause: BaseException) -> None:
        super().__init__(str(cause))
        self.positions = positions


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
        self._handler = handler
        self._codec = codec
        self._catalogue = catalogue
        self._outbox = outbox
        self._health = health or Health()
        self._stop = threading.Event()
        self._conn: psycopg.Connection | None = None
        self._unchecked: set[TopicPartitionKey] = set()  # assigned, in-flight marker not looked at
        self._suspect: dict[TopicPartitionKey, int] = {}  # partition -> last offset to apply carefully
        self._pending_commits: dict[TopicPartitionKey, int] = {}
        self._infra_failures = 0
        self._last_prune = time.monotonic()
        config = consumer_config(
            settings.kafka_bootstrap_servers,
            settings.group_id or settings.consumer_name,
            f"{settings.consumer_name}-{id(self):x}",
            session_timeout_ms=settings.session_timeout_ms,
            max_poll_interval_ms=settings.max_poll_interval_ms,
        )
        config["error_cb"] = self._on_kafka_error
        self._consumer = Consumer(config)

    # -- lifecycle ---------------------------------------------------------------------------

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        """Consume until ``stop()``; the consumer's only unbounded loop."""
        self._consumer.subscribe(
            list(self._s.topics), on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )
        log.info("consumer.started", consumer=self._name, topics=list(self._s.topics))
        try:
            while not self._stop.is_set():
                self._health.beat()
                self.poll_once()
        finally:
            self._flush_commits(set(self._pending_commits))
            self._consumer.close()  # leaves the group: partitions move at once, not after a timeout
            self._close_connection()
            log.info("consumer.stopped", consumer=self._name)

    def poll_once(self) -> int:
        """Consume and apply one batch; returns the number of messages taken from Kafka.

        ``consume(n, timeout)`` alone waits until n messages arrived or the timeout passed, which
        at moderate rates turns the poll timeout into latency. So: block for the first message
        only, then take what is buffered, lingering at most ``batch_linger_ms`` to fill the batch.
        """
        first = self._consumer.poll(self._s.poll_timeout_ms / 1000)
        if first is None:
            self._maybe_prune()
            return 0
        rest = self._consumer.consume(
            num_messages=self._s.batch_size_max - 1, timeout=self._s.batch_linger_ms / 1000
        )
        items = [self._decode(Polled.of(m)) for m in [first, *rest] if self._usable(m)]
        if items:
            self._apply(items)
        self._maybe_prune()
        return len(items)

    # -- decoding ------------------------------------------------------------------------------

    def _usable(self, message: Message) -> bool:
        error = message.error()
        if error is None:
            return True
        if error.fatal():
            raise KafkaException(error)
        log.warning("consumer.kafka_message_error", error=str(error))
        return False

    def _decode(self, message: Polled) -> _Item:
        decoded = decode_inbound(self._codec, self._catalogue, message.topic, message.key, message.value)
        if isinstance(decoded, Rejection):
            return _Item(message, None, _letter(message, decoded.error_class, decoded.reason, decoded.event))
        inbound = InboundEvent(decoded, message.topic, message.partition, message.offset)
        return _Item(message, inbound, None)

    # -- applying --------------------------------------------------------------------------------

    def _apply(self, items: list[_Item]) -> None:
        started = time.monotonic()
        try:
            self._apply_batch(items)
            self._infra_failures = 0
        except _RewindBatch as rewind:
            self._rewind_after_infra_failure(rewind)
        except Exception as exc:
            if not is_infrastructure_error(exc):
                raise
            self._rewind_after_infra_failure(_RewindBatch(_first_offsets(items), exc))
        finally:
            CONSUMER_BATCH_SECONDS.labels(self._name).observe(time.monotonic() - started)

    def _apply_batch(self, items: list[_Item]) -> None:
        if self._needs_care(items):
            self._apply_carefully(items)
            return
        try:
            self._apply_fast(items)
        except Exception as exc:
            if is_infrastructure_error(exc):
                raise
            log.warning("consumer.batch_failed_retrying_one_by_one", consumer=self._name, error=repr(exc))
            self._apply_carefully(items)

    def _needs_care(self, items: list[_Item]) -> bool:
        """True if the batch reaches into a range that a process died applying (or a held message).

        A newly assigned partition is checked once for an in-flight marker left behind.
        """
        unchecked = {item.tp for item in items} & self._unchecked
        if unchecked:
            self._suspect.update(load_in_flight(self._connection(), self._name, unchecked))
            self._unchecked -= unchecked
        return any(item.message.offset <= self._suspect.get(item.tp, -1) for item in items)

    def _apply_fast(self, items: list[_Item]) -> None:
        """The common case: the whole batch in one transaction, then one offset commit."""
        conn = self._connection()
        ranges = _offset_ranges(items)
        mark_in_flight(conn, self._name, ranges)
        inbound = _first_occurrences([i.inbound for i in items if i.inbound is not None])
        with conn.transaction():
            fresh_ids = claim_events(conn, self._name, [e.event_id for e in inbound])
            fresh = [e for e in inbound if e.event_id in fresh_ids]
            if fresh:
                self._handler(UnitOfWork(conn, self._outbox, self._name), fresh)
            letters = [i.letter for i in items if i.letter is not None]
            for letter in letters:
                self._dead_letter(conn, letter)
            clear_in_flight(conn, self._name, set(ranges))
        failpoints.hit("consumer.after_db_commit")
        self._count(applied=len(fresh), duplicate=len(items) - len(fresh) - len(letters), dead=len(letters))
        self._commit_offsets({tp: last + 1 for tp, (_, last) in ranges.items()})

    def _apply_carefully(self, items: list[_Item]) -> None:
        """Message by message, attempts counted first; a failing message holds back its partition."""
        conn = self._connection()
        first = _first_offsets(items)
        next_offset = dict(first)  # per partition: the next message not yet settled
        held: set[TopicPartitionKey] = set()
        for item in items:
            if item.tp in held:
                continue
            try:
                settled = self._apply_one(conn, item)
            except Exception as exc:
                if not is_infrastructure_error(exc):
                    raise
                self._commit_offsets({tp: o for tp, o in next_offset.items() if o > first[tp]})
                raise _RewindBatch(next_offset, exc) from exc
            if settled:
                next_offset[item.tp] = item.message.offset + 1
            else:
                held.add(item.tp)
        failpoints.hit("consumer.after_db_commit")
        self._settle_care(conn, items, next_offset, held)
        self._commit_offsets({tp: o for tp, o in next_offset.items() if o > first[tp]})
        for tp in held:
            self._seek(tp, next_offset[tp])  # redeliver the failed message after a pause
        if held:
            self._stop.wait(self._s.retry_backoff_ms / 1000)

    def _settle_care(
        self,
        conn: psycopg.Connection,
        items: list[_Item],
        next_offset: dict[TopicPartitionKey, int],
        held: set[TopicPartitionKey],
    ) -> None:
        """After a careful pass: partitions past their suspect range go back to the fast path
        (marker deleted); a held partition stays careful up to the end of this batch."""
        cleared = set()
        for tp, position in next_offset.items():
            if tp in held:
                continue
            if position > self._suspect.get(tp, -1):
                self._suspect.pop(tp, None)
                cleared.add(tp)
        with conn.transaction():
            clear_in_flight(conn, self._name, cleared)
        for tp, (_, last) in _offset_ranges(items).items():
            if tp in held:
                self._suspect[tp] = max(last, self._suspect.get(tp, -1))

    def _apply_one(self, conn: psycopg.Connection, item: _Item) -> bool:
        """Apply or dead-letter one message; False means "failed, retry it later"."""
        message = item.message
        if item.letter is not None:
            with conn.transaction():
                self._dead_letter(conn, item.letter)
            self._count(dead=1)
            return True
        invariant(item.inbound is not None, "an item is either decoded or a dead letter")
        assert item.inbound is not None
        coords = (message.topic, message.partition, message.offset)
        attempts = record_attempt(conn, self._name, *coords, "attempt started")
        if attempts > self._s.max_attempts:
            return self._give_up(conn, item, attempts - 1, "crashed or failed on every attempt")
        try:
            with conn.transaction():
                fresh = claim_events(conn, self._name, [item.inbound.event_id])
                if fresh:
                    self._handler(UnitOfWork(conn, self._outbox, self._name), [item.inbound])
                clear_attempts(conn, self._name, *coords)
        except Exception as exc:
            if is_infrastructure_error(exc):
                raise
            CONSUMER_FAILURES.labels(self._name).inc()
            error = f"{type(exc).__name__}: {exc}"
            note_error(conn, self._name, *coords, error)
            log.warning(
                "consumer.handler_failed",
                consumer=self._name,
                attempt=attempts,
                error=error,
                event_id=item.inbound.event_id,
                source=f"{coords[0]}/{coords[1]}/{coords[2]}",
            )
            if attempts >= self._s.max_attempts:
                return self._give_up(conn, item, attempts, error)
            return False
        self._count(applied=len(fresh), duplicate=1 - len(fresh))
        return True

    def _give_up(self, conn: psycopg.Connection, item: _Item, attempts: int, error: str) -> bool:
        invariant(item.inbound is not None, "only decoded events are retried")
        assert item.inbound is not None
        letter = _letter(item.message, "handler_failed", error, item.inbound.event, attempts)
        with conn.transaction():
            self._dead_letter(conn, letter)
        self._count(dead=1)
        return True

    def _dead_letter(self, conn: psycopg.Connection, letter: DeadLetter) -> None:
        dlq_topic = self._catalogue.dead_letter_topic(letter.topic)
        dead_letter_id = insert_dead_letter(conn, self._name, letter, dlq_topic)
        if dead_letter_id is not None:
            log.error(
                "consumer.dead_lettered",
                consumer=self._name,
                dead_letter_id=dead_letter_id,
                error_class=letter.error_class,
                reason=letter.reason,
                topic=letter.topic,
                partition=letter.partition,
                offset=letter.offset,
                event_id=letter.event_id,
            )

    def _count(self, *, applied: int = 0, duplicate: int = 0, dead: int = 0) -> None:
        for outcome, n in (("applied", applied), ("duplicate", duplicate), ("dead_lettered", dead)):
            if n:
                CONSUMER_MESSAGES.labels(self._name, outcome).inc(n)

    # -- kafka offsets and positions ---------------------------------------------------------------

    def _commit_offsets(self, positions: dict[TopicPartitionKey, int]) -> None:
        """Commit positions whose effects are in the database; a failed commit is retried later.

        A commit fails mostly during a rebalance (ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS).
        Nothing is lost either way: the database has the effects and the dedup rows, so a
        redelivery changes nothing. Retrying (next batch, on revoke, at shutdown) only saves the
        next owner from re-reading.
        """
        for tp, offset in positions.items():
            self._pending_commits[tp] = max(offset, self._pending_commits.get(tp, 0))
        self._flush_commits(set(self._pending_commits))

    def _flush_commits(self, tps: set[TopicPartitionKey]) -> None:
        pending = {tp: self._pending_commits[tp] for tp in tps if tp in self._pending_commits}
        if not pending:
            return
        offsets = [TopicPartition(tp[0], tp[1], offset) for tp, offset in pending.items()]
        try:
            self._consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            log.warning("consumer.offset_commit_failed", consumer=self._name, error=str(exc))
            return
        for tp, offset in pending.items():
            if self._pending_commits.get(tp) == offset:
                del self._pending_commits[tp]

    def _seek(self, tp: TopicPartitionKey, offset: int) -> None:
        try:
            self._consumer.seek(TopicPartition(tp[0], tp[1], offset))
        except KafkaException as exc:
            log.warning(
                "consumer.seek_failed", consumer=self._name, topic=tp[0], partition=tp[1], error=str(exc)
            )

    def _rewind_after_infra_failure(self, rewind: _RewindBatch) -> None:
        CONSUMER_INFRA_ERRORS.labels(self._name).inc()
        self._infra_failures += 1
        delay_s = min(_INFRA_BACKOFF_MAX_S, 0.2 * 2 ** min(self._infra_failures, 10))
        log.warning(
            "consumer.infrastructure_failure", consumer=self._name, error=str(rewind), backoff_s=delay_s
        )
        self._close_connection()
        self._health.set("database", False, str(rewind)[:200])
        for tp, offset in rewind.positions.items():
            self._seek(tp, offset)
        self._stop.wait(delay_s)

    def _on_assign(self, _: Consumer, partitions: list[TopicPartition]) -> None:
        self._unchecked |= {(p.topic, p.partition) for p in partitions}
        log.info("consumer.assigned", consumer=self._name, partitions=_names(partitions))

    def _on_revoke(self, _: Consumer, partitions: list[TopicPartition]) -> None:
        revoked = {(p.topic, p.partition) for p in partitions}
        self._flush_commits(revoked)  # still ours during the callback: hand over exact positions
        self._forget(revoked)
        log.info("consumer.revoked", consumer=self._name, partitions=_names(partitions))

    def _on_lost(self, _: Consumer, partitions: list[TopicPartition]) -> None:
        lost = {(p.topic, p.partition) for p in partitions}
        self._forget(lost)  # not ours any more: the new owner re-reads, dedup absorbs
        log.warning("consumer.partitions_lost", consumer=self._name, partitions=_names(partitions))

    def _forget(self, tps: set[TopicPartitionKey]) -> None:
        self._unchecked -= tps
        for tp in tps:
            self._suspect.pop(tp, None)
            self._pending_commits.pop(tp, None)

    def _on_kafka_error(self, error: KafkaError) -> None:
        self._health.set("kafka", not error.fatal(), str(error))
        log.warning("consumer.kafka_error", consumer=self._name, error=str(error), fatal=error.fatal())

    # -- database ------------------------------------------------------------------------------------

    def _connection(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            self._conn = connect(self._s.database_url.reveal(), autocommit=True, application_name=self._name)
            self._health.set("database", True)
        return self._conn

    def _close_connection(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None

    def _maybe_prune(self) -> None:
        """Drop dedup rows older than the retention (longer than any topic's retention)."""
        if time.monotonic() - self._last_prune < self._s.prune_interval_s:
            return
        self._last_prune = time.monotonic()
        try:
            self._connection().execute(
                "DELETE FROM processed_events WHERE ctid IN (SELECT ctid FROM processed_events"
                " WHERE consumer = %s AND processed_at < now() - make_interval(secs => %s) LIMIT 10000)",
                (self._name, self._s.processed_retention_s),
            )
        except Exception as exc:
            if not is_infrastructure_error(exc):
                raise
            self._close_connection()


@dataclass(frozen=True)
class Rejection:
    """Why a message cannot be applied, whatever the handler: it goes straight to the dead letters."""

    error_class: str
    reason: str
    event: DecodedEvent | None = None


def decode_inbound(
    codec: AvroCodec, catalogue: TopicCatalogue, topic: str, key: bytes | None, value: bytes | None
) -> DecodedEvent | Rejection:
    """Decode and check one message against the contract: Avro + envelope, key, topic's event types."""
    try:
        event = codec.decode(value or b"")
    except UnknownSchema as exc:
        return Rejection("unknown_schema", exc.reason)
    except DecodeError as exc:
        return Rejection(_decode_error_class(exc), exc.reason)
    if key is None or key.decode("utf-8", "replace") != event.envelope.payment_id:
        reason = "Kafka key does not equal the envelope's payment_id: per-payment order is not guaranteed"
        return Rejection("key_mismatch", reason, event)
    try:
        catalogue.check_event(topic, event.event_type)
    except ValueError as exc:
        return Rejection("unexpected_event_type", str(exc), event)
    return event


def _letter(
    message: Polled, error_class: str, reason: str, event: DecodedEvent | None = None, attempts: int = 1
) -> DeadLetter:
    return DeadLetter(
        topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        key=message.key,
        payload=message.value,
        headers=message.headers,
        error_class=error_class,
        reason=reason,
        attempts=attempts,
        event_id=event.envelope.event_id if event else None,
        event_type=event.event_type if event else None,
    )


def _decode_error_class(exc: DecodeError) -> str:
    if isinstance(exc, InvalidEnvelope):
        return "invalid_envelope"
    if isinstance(exc, MalformedDatum):
        return "malformed_datum"
    return "undecodable"


def _first_occurrences(events: list[InboundEvent]) -> list[InboundEvent]:
    """Drop repeats of an event_id within one batch (a relay republished it): apply the first."""
    seen: set[str] = set()
    unique = []
    for event in events:
        if event.event_id not in seen:
            seen.add(event.event_id)
            unique.append(event)
    return unique


def _offset_ranges(items: list[_Item]) -> dict[TopicPartitionKey, tuple[int, int]]:
    """Per partition, the first and last offset in the batch."""
    ranges: dict[TopicPartitionKey, tuple[int, int]] = {}
    for item in items:
        first, _ = ranges.get(item.tp, (item.message.offset, item.message.offset))
        ranges[item.tp] = (first, item.message.offset)
    return ranges


def _first_offsets(items: list[_Item]) -> dict[TopicPartitionKey, int]:
    positions: dict[TopicPartitionKey, int] = {}
    for item in items:
        positions.setdefault(item.tp, item.message.offset)
    return positions


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
