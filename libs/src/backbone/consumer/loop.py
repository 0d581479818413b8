"""The idempotent consumer loop: exactly-once *effects* from at-least-once Kafka delivery.

Per batch, in ONE database transaction: insert ``(consumer, event_id)`` dedup rows, apply the
handler's effects for the events not seen before, write outbox rows; commit; only then commit the
Kafka offsets. A crash anywhere before the offset commit means redelivery, which the dedup rows
absorb. Auto-commit is off. Offsets go to Kafka at most once per ``commit_interval_ms`` while
messages keep coming, and at once when the consumer idles, on revoke and at shutdown: a synchronous
commit per batch cost a broker round trip (and a write to ``__consumer_offsets``) for every batch,
and what a crash re-reads because of the interval is absorbed like any redelivery.

Failures:
- bytes that do not decode (not Avro, unknown schema, bad envelope, key != payment_id) are
  dead-lettered at once with the reason: retrying cannot fix them;
- a handler that raises ``Refuse`` for a message (it can never succeed) has that message
  dead-lettered at once as ``refused``, without attempts; the batch is re-applied without it, so the
  rest of the batch is not held back and a refusal is never retried;
- a handler that raises ``NotYet`` for a message (it waits for a fact on another partition) has the
  batch re-run message by message; that message holds back its partition, others move on, and it is
  asked again after ``retry_backoff_ms`` without counting an attempt, until ``wait_max_ms`` have
  passed since its first wait in this process: then it is dead-lettered as ``waited``;
- any other handler exception rolls the batch back and the batch is re-run message by message; the
  failing message is retried (its partition waits, others move on) and after ``max_attempts``
  it is dead-lettered: a ``dead_letters`` row plus a copy on ``<topic>.dlq`` through the outbox.
  The partition then moves on. Nothing is dropped silently;
- a message that kills the whole process is caught too: a committed in-flight marker covers
  every fast batch before it runs (armed by the partition's previous batch commit, or committed
  on its own first; ``backbone.consumer.markers``). A marker that survives shows the range a
  process may have died applying; the next owner applies that range on the careful path, where
  each attempt is counted *before* the handler runs, so the killer is dead-lettered after N
  counted restarts;
- so a message is tried at most ``max_attempts + 1`` times: once inside its batch (a failure
  there cannot be pinned on one message) and ``max_attempts`` times alone;
- the database or Kafka failing is not the message's fault: the batch is rewound (seek) and
  retried after a backoff, without counting attempts.

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

import psycopg
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from backbone import failpoints, tracing, tracing_setup
from backbone.avro import AvroCodec
from backbone.backoff import exponential_ms
from backbone.consumer.inbox import (
    DeadLetter,
    TopicPartitionKey,
    claim_events,
    clear_attempts,
    insert_dead_letter,
    note_error,
    record_attempt,
    uncount_attempt,
)
from backbone.consumer.lag import lags_of, publish_lags
from backbone.consumer.markers import InFlightMarkers
from backbone.consumer.messages import (
    REFUSED,
    WAITED,
    BatchHandler,
    InboundEvent,
    Item,
    NotYet,
    Polled,
    Refuse,
    Rejection,
    UnitOfWork,
    dead_letter_for,
    decode_inbound,
    first_occurrences,
    first_offsets,
    offset_ranges,
)
from backbone.consumer.settings import ConsumerSettings
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
from backbone.outage import Dependency
from backbone.outbox.writer import OutboxWriter
from backbone.postgres import connect, is_infrastructure_error
from backbone.runtime import health_for, stop_on_signals
from backbone.settings import load_settings_or_exit

log = get_logger(__name__)
_INFRA_BACKOFF_MAX_MS: Final = 10_000  # and 400 ms after the first failure, doubling
STATISTICS_INTERVAL_MS: Final = 5_000  # how soon a consumer notices Kafka is back


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
        # Outages are logged as state changes (one line each way); readiness follows them.
        self._kafka = Dependency("kafka", settings.consumer_name, self._health, up=False)
        self._database = Dependency("database", settings.consumer_name, self._health, up=False)
        self._stop = threading.Event()
        self._fatal: KafkaError | None = None  # librdkafka gave up on this consumer instance
        self._conn: psycopg.Connection | None = None
        self._markers = InFlightMarkers(settings.consumer_name, settings.batch_size_max)
        self._waiting: dict[tuple[str, int, int], float] = {}  # (topic, partition, offset) -> since (NotYet)
        self._pending_commits: dict[TopicPartitionKey, int] = {}
        self._last_commit_s = -float("inf")  # monotonic time of the last offset commit tried
        self._commit_in_flight = False
        self._infra_failures = 0
        self._next_reach = 0.0
        self._last_prune = time.monotonic()
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
        self._reach_database()
        try:
            while not self._stop.is_set():
                self._health.beat()
                self.poll_once()
        finally:
            if self._fatal is None:
                self._flush_commits(set(self._pending_commits), wait=True)
                self._release_markers(self._markers.armed_partitions())
                self._consumer.close()  # leaves the group: partitions move at once, not after a timeout
            self._close_connection()
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
            self._flush_commits(set(self._pending_commits))  # idle: what was applied goes to Kafka now
            if not self._database.up:
                self._reach_database()  # readiness tells the truth while idle too
            self._maybe_prune()
            return 0
        batch = self._batch_after(first, busy=waited_s * 1000 < self._s.batch_linger_ms)
        items = [self._decode(Polled.of(m)) for m in batch if self._usable(m)]
        if items:
            self._apply(items)
        self._maybe_prune()
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
            self._apply_batch(items)
            self._infra_failures = 0
            self._database.ok()
            self._kafka.ok()  # messages arrived: the broker answers
        except _RewindBatch as rewind:
            self._rewind_after_infra_failure(rewind)
        except Exception as exc:
            if not is_infrastructure_error(exc):
                raise
            self._rewind_after_infra_failure(_RewindBatch(first_offsets(items), exc))
        finally:
            CONSUMER_BATCH_SECONDS.labels(self._name).observe(time.monotonic() - started)

    def _apply_batch(self, items: list[Item]) -> None:
        if self._needs_care(items):
            self._apply_carefully(items)
            return
        for _ in range(len(items) + 1):  # bounded: each pass takes one refused message out
            try:
                self._apply_fast(items)
                return
            except Refuse as refusal:
                refused = self._refused_item(items, refusal)
                if refused is None:  # a refusal that names no message of this batch: one by one
                    self._apply_carefully(items)
                    return
                items = [refused if item.message is refused.message else item for item in items]
            except NotYet as wait:  # one message waits: the others of the batch go on without it
                log.info("consumer.batch_waits_one_by_one", consumer=self._name, reason=wait.reason)
                self._apply_carefully(items)
                return
            except Exception as exc:
                if is_infrastructure_error(exc):
                    raise
                log.warning("consumer.batch_failed_retrying_one_by_one", consumer=self._name, error=repr(exc))
                self._apply_carefully(items)
                return

    @staticmethod
    def _refused_item(items: list[Item], refusal: Refuse) -> Item | None:
        """The item ``refusal`` names, turned into its dead letter (never retried: it cannot succeed)."""
        for item in items:
            if item.inbound is not None and item.inbound.event_id == refusal.event_id:
                letter = dead_letter_for(item.message, REFUSED, refusal.reason, item.inbound.event)
                return Item(item.message, None, letter)
        return None

    def _needs_care(self, items: list[Item]) -> bool:
        """True if the batch reaches into a range that a process died applying (or a held message)."""
        offsets = [(item.tp, item.message.offset) for item in items]
        return self._markers.needs_care(self._connection(), offsets, self._high_watermark)

    def _apply_fast(self, items: list[Item]) -> None:
        """The common case: the whole batch in one transaction, then one offset commit."""
        conn = self._connection()
        ranges = offset_ranges(items)
        self._markers.before_fast(conn, ranges)
        inbound = first_occurrences([i.inbound for i in items if i.inbound is not None])
        with conn.transaction():
            # The batch's commit also arms the markers for the next batch (its first statement).
            fresh_ids = self._markers.claim_and_arm(conn, [e.event_id for e in inbound], ranges)
            fresh = [e for e in inbound if e.event_id in fresh_ids]
            if fresh:
                with tracing.consuming(conn, self._name, _traced(self._name, fresh)):
                    self._handler(UnitOfWork(conn, self._outbox, self._name), fresh)
            letters = [i.letter for i in items if i.letter is not None]
            for letter in letters:
                self._dead_letter(conn, letter)
            failpoints.hit("consumer.before_db_commit")  # tests: a kill here commits nothing
        self._markers.committed(ranges)
        failpoints.hit("consumer.after_db_commit")
        self._count(applied=len(fresh), duplicate=len(items) - len(fresh) - len(letters), dead=len(letters))
        self._commit_offsets({tp: last + 1 for tp, (_, last) in ranges.items()})

    def _apply_carefully(self, items: list[Item]) -> None:
        """Message by message, attempts counted first; a failing message holds back its partition."""
        conn = self._connection()
        first = first_offsets(items)
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
        self._markers.after_care(conn, offset_ranges(items), next_offset, held)
        self._commit_offsets({tp: o for tp, o in next_offset.items() if o > first[tp]})
        for tp in held:
            self._seek(tp, next_offset[tp])  # redeliver the failed message after a pause
        if held:
            self._stop.wait(self._s.retry_backoff_ms / 1000)

    def _apply_one(self, conn: psycopg.Connection, item: Item) -> bool:  # noqa: PLR0911 - one per outcome
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
                    with tracing.consuming(conn, self._name, _traced(self._name, [item.inbound])):
                        self._handler(UnitOfWork(conn, self._outbox, self._name), [item.inbound])
                clear_attempts(conn, self._name, *coords)
        except Refuse as refusal:  # it can never succeed: no further attempts
            return self._give_up(conn, item, attempts, refusal.reason, REFUSED)
        except NotYet as wait:  # not a failure: it waits for a fact on another partition
            return self._wait(conn, item, wait.reason)
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
        self._waiting.pop(coords, None)
        self._count(applied=len(fresh), duplicate=1 - len(fresh))
        return True

    def _wait(self, conn: psycopg.Connection, item: Item, reason: str) -> bool:
        """Hold the message back without counting the attempt; dead-letter it once it has waited
        ``wait_max_ms`` (False: "not settled, ask again later")."""
        message = item.message
        coords = (message.topic, message.partition, message.offset)
        since = self._waiting.setdefault(coords, time.monotonic())
        attempts = uncount_attempt(conn, self._name, *coords, f"waiting: {reason}")
        waited_ms = int((time.monotonic() - since) * 1000)
        if waited_ms >= self._s.wait_max_ms:
            self._waiting.pop(coords, None)
            return self._give_up(conn, item, attempts, f"waited {waited_ms} ms: {reason}", WAITED)
        assert item.inbound is not None
        log.info(
            "consumer.waiting",
            consumer=self._name,
            reason=reason,
            waited_ms=waited_ms,
            event_id=item.inbound.event_id,
            source=f"{coords[0]}/{coords[1]}/{coords[2]}",
        )
        return False

    def _give_up(
        self,
        conn: psycopg.Connection,
        item: Item,
        attempts: int,
        error: str,
        error_class: str = "handler_failed",
    ) -> bool:
        invariant(item.inbound is not None, "only decoded events are retried")
        assert item.inbound is not None
        self._waiting.pop((item.message.topic, item.message.partition, item.message.offset), None)
        letter = dead_letter_for(item.message, error_class, error, item.inbound.event, attempts)
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
        if time.monotonic() - self._last_commit_s >= self._s.commit_interval_ms / 1000:
            self._flush_commits(set(self._pending_commits))

    def _flush_commits(self, tps: set[TopicPartitionKey], *, wait: bool = False) -> None:
        """From the loop, asynchronously (one commit in flight, answered in ``_on_commit``): a
        synchronous commit waits without bound for the group's coordinator, and while the group
        rejoins, for an assignment only this thread can serve. ``wait`` in a revoke callback and at
        shutdown, where the positions must reach Kafka before the partitions move."""
        pending = {tp: self._pending_commits[tp] for tp in tps if tp in self._pending_commits}
        if not pending or (self._commit_in_flight and not wait):
            return
        offsets = [TopicPartition(tp[0], tp[1], offset) for tp, offset in pending.items()]
        self._last_commit_s = time.monotonic()
        try:
            if wait:
                self._on_commit(None, self._consumer.commit(offsets=offsets, asynchronous=False))
            else:
                self._consumer.commit(offsets=offsets, asynchronous=True)
                self._commit_in_flight = True
        except KafkaException as exc:
            log.warning("consumer.offset_commit_failed", consumer=self._name, error=str(exc))

    def _on_commit(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        self._commit_in_flight = False
        if error is not None:
            log.warning("consumer.offset_commit_failed", consumer=self._name, error=error.str())
            return
        for p in partitions:
            tp = (p.topic, p.partition)
            if p.error is None and tp in self._pending_commits and self._pending_commits[tp] <= p.offset:
                del self._pending_commits[tp]  # a later position, applied meanwhile, stays pending

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
        delay_s = exponential_ms(self._infra_failures + 1, base_ms=200, cap_ms=_INFRA_BACKOFF_MAX_MS) / 1000
        self._database.failed(rewind)
        self._close_connection()
        for tp, offset in rewind.positions.items():
            self._seek(tp, offset)
        self._stop.wait(delay_s)

    def _on_assign(self, _: Consumer, partitions: list[TopicPartition]) -> None:
        self._health.set("group", True)  # joined (an assignment may be empty: more members than partitions)
        self._markers.assigned((p.topic, p.partition) for p in partitions)
        log.info("consumer.assigned", consumer=self._name, partitions=_names(partitions))

    def _on_revoke(self, _: Consumer, partitions: list[TopicPartition]) -> None:
        revoked = {(p.topic, p.partition) for p in partitions}
        self._flush_commits(revoked, wait=True)  # still ours during the callback: exact positions
        self._release_markers(revoked)
        self._forget(revoked)
        log.info("consumer.revoked", consumer=self._name, partitions=_names(partitions))

    def _on_lost(self, _: Consumer, partitions: list[TopicPartition]) -> None:
        lost = {(p.topic, p.partition) for p in partitions}
        self._forget(lost)  # not ours any more: the new owner re-reads, dedup absorbs
        log.warning("consumer.partitions_lost", consumer=self._name, partitions=_names(partitions))

    def _forget(self, tps: set[TopicPartitionKey]) -> None:
        self._markers.forget(tps)
        for tp in tps:
            self._pending_commits.pop(tp, None)

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

    def _high_watermark(self, tp: TopicPartitionKey) -> int | None:
        """The partition's end as the last fetch saw it (no broker round trip), or None."""
        try:
            _, high = self._consumer.get_watermark_offsets(TopicPartition(tp[0], tp[1]), cached=True)
        except KafkaException:
            return None
        return int(high) if high is not None and high >= 0 else None

    # -- database ------------------------------------------------------------------------------------

    def _release_markers(self, tps: set[TopicPartitionKey]) -> None:
        """Delete the armed markers of partitions given up; if the database is away they stay, and
        the next owner only goes carefully over what had arrived."""
        if not tps or self._conn is None or self._conn.closed:
            return
        try:
            self._markers.release(self._conn, tps)
        except Exception as exc:
            if not is_infrastructure_error(exc):
                raise
            self._close_connection()

    def _connection(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            self._conn = connect(self._s.database_url.reveal(), autocommit=True, application_name=self._name)
            self._database.ok()
        return self._conn

    def _reach_database(self) -> None:
        """Connect now (readiness), without failing the loop if the database is away; at most once
        per ``retry_backoff_ms`` while it stays away."""
        if time.monotonic() < self._next_reach:
            return
        self._next_reach = time.monotonic() + self._s.retry_backoff_ms / 1000
        try:
            self._connection()
        except Exception as exc:
            if not is_infrastructure_error(exc):
                raise
            self._database.failed(exc)
            self._close_connection()

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


def _traced(consumer: str, events: list[InboundEvent]) -> list[tracing.Consumed]:
    """The events as tracing sees them: one CONSUMER span each, named ``<consumer> <event type>``
    (attributes only when spans are recorded: a span with ids only drops them)."""
    if not tracing_setup.exporting():
        return [tracing.Consumed("", e.event.envelope.payment_id, e.trace_headers, {}) for e in events]
    return [
        tracing.Consumed(
            f"{consumer} {e.event_type}",
            e.event.envelope.payment_id,
            e.trace_headers,
            {
                "messaging.system": "kafka",
                "messaging.destination.name": e.topic,
                "messaging.kafka.offset": e.offset,
                "messaging.destination.partition.id": str(e.partition),
                "messaging.message.id": e.event_id,
                "event.type": e.event_type,
            },
        )
        for e in events
    ]


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
