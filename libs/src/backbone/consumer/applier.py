"""Applying a decoded batch in the consumer's database: exactly-once effects, and every failure
either retried or dead-lettered, never dropped (the loop around it is ``loop``).

The fast path applies the whole batch in ONE transaction: ``(consumer, event_id)`` dedup rows, the
handler's effects for the events not seen before, outbox rows, dead letters for what did not decode.
The careful path applies message by message, each attempt counted first. Failures:
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
- the database or Kafka failing is not the message's fault: ``RewindBatch`` (or the error itself)
  reaches the loop, which rewinds the batch and retries it after a backoff, without counting
  attempts.
"""

from __future__ import annotations

import threading
import time

import psycopg

from backbone import failpoints, tracing, tracing_setup
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
from backbone.consumer.markers import InFlightMarkers
from backbone.consumer.messages import (
    REFUSED,
    WAITED,
    BatchHandler,
    InboundEvent,
    Item,
    NotYet,
    Refuse,
    UnitOfWork,
    dead_letter_for,
    first_occurrences,
    first_offsets,
    offset_ranges,
)
from backbone.consumer.positions import KafkaPositions
from backbone.consumer.settings import ConsumerSettings
from backbone.invariants import invariant
from backbone.kafka.topics import TopicCatalogue
from backbone.logs import get_logger
from backbone.metrics import CONSUMER_FAILURES, CONSUMER_MESSAGES
from backbone.outage import Dependency
from backbone.outbox.writer import OutboxWriter
from backbone.postgres import connect, is_infrastructure_error

log = get_logger(__name__)


class RewindBatch(Exception):
    """Infrastructure failed mid-batch; rewind these partitions to these offsets."""

    def __init__(self, positions: dict[TopicPartitionKey, int], cause: BaseException) -> None:
        super().__init__(str(cause))
        self.positions = positions


class BatchApplier:
    """Applies a consumer's decoded batches in its database, on the connection it keeps."""

    def __init__(
        self,
        settings: ConsumerSettings,
        handler: BatchHandler,
        catalogue: TopicCatalogue,
        outbox: OutboxWriter | None,
        markers: InFlightMarkers,
        positions: KafkaPositions,
        database: Dependency,
        stop: threading.Event,
    ) -> None:
        self._s = settings
        self._name = settings.consumer_name
        self._handler = handler
        self._catalogue = catalogue
        self._outbox = outbox
        self._markers = markers
        self._positions = positions
        self._database = database
        self._stop = stop
        self._conn: psycopg.Connection | None = None
        self._waiting: dict[tuple[str, int, int], float] = {}  # (topic, partition, offset) -> since (NotYet)
        self._next_reach = 0.0
        self._last_prune = time.monotonic()

    # -- applying --------------------------------------------------------------------------------

    def apply(self, items: list[Item]) -> None:
        """Apply ``items`` (a batch in Kafka's order); raises ``RewindBatch`` (where to resume) or an
        infrastructure error when the database or Kafka failed."""
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
        return self._markers.needs_care(self.connection(), offsets, self._positions.high_watermark)

    def _apply_fast(self, items: list[Item]) -> None:
        """The common case: the whole batch in one transaction, then one offset commit."""
        conn = self.connection()
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
        self._positions.commit({tp: last + 1 for tp, (_, last) in ranges.items()})

    def _apply_carefully(self, items: list[Item]) -> None:
        """Message by message, attempts counted first; a failing message holds back its partition."""
        conn = self.connection()
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
                self._positions.commit({tp: o for tp, o in next_offset.items() if o > first[tp]})
                raise RewindBatch(next_offset, exc) from exc
            if settled:
                next_offset[item.tp] = item.message.offset + 1
            else:
                held.add(item.tp)
        failpoints.hit("consumer.after_db_commit")
        self._markers.after_care(conn, offset_ranges(items), next_offset, held)
        self._positions.commit({tp: o for tp, o in next_offset.items() if o > first[tp]})
        for tp in held:
            self._positions.seek(tp, next_offset[tp])  # redeliver the failed message after a pause
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

    # -- its connection ------------------------------------------------------------------------------

    def release_markers(self, tps: set[TopicPartitionKey]) -> None:
        """Delete the armed markers of partitions given up; if the database is away they stay, and
        the next owner only goes carefully over what had arrived."""
        if not tps or self._conn is None or self._conn.closed:
            return
        try:
            self._markers.release(self._conn, tps)
        except Exception as exc:
            if not is_infrastructure_error(exc):
                raise
            self.close_connection()

    def connection(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            self._conn = connect(self._s.database_url.reveal(), autocommit=True, application_name=self._name)
            self._database.ok()
        return self._conn

    def reach_database(self) -> None:
        """Connect now (readiness), without failing the loop if the database is away; at most once
        per ``retry_backoff_ms`` while it stays away."""
        if time.monotonic() < self._next_reach:
            return
        self._next_reach = time.monotonic() + self._s.retry_backoff_ms / 1000
        try:
            self.connection()
        except Exception as exc:
            if not is_infrastructure_error(exc):
                raise
            self._database.failed(exc)
            self.close_connection()

    def close_connection(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None

    def maybe_prune(self) -> None:
        """Drop dedup rows older than the retention (longer than any topic's retention)."""
        if time.monotonic() - self._last_prune < self._s.prune_interval_s:
            return
        self._last_prune = time.monotonic()
        try:
            self.connection().execute(
                "DELETE FROM processed_events WHERE ctid IN (SELECT ctid FROM processed_events"
                " WHERE consumer = %s AND processed_at < now() - make_interval(secs => %s) LIMIT 10000)",
                (self._name, self._s.processed_retention_s),
            )
        except Exception as exc:
            if not is_infrastructure_error(exc):
                raise
            self.close_connection()


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
