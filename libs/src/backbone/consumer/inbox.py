"""SQL of the idempotent consumer: dedup rows, attempt counters and dead letters.

Every function takes the caller's connection; the caller decides the transaction. The dedup
insert is one statement per batch (``unnest`` of sorted ids: a fixed lock order, so two zombie
consumers on overlapping batches wait for each other instead of deadlocking).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import psycopg
from psycopg.pq import TransactionStatus

from backbone.ids import new_event_id
from backbone.invariants import invariant
from backbone.outbox.writer import write_raw

ERROR_TEXT_MAX: Final = 2000


def claim_events(conn: psycopg.Connection, consumer: str, event_ids: Sequence[str]) -> set[str]:
    """Insert dedup rows; returns the ids that were NOT processed before (to apply now)."""
    if not event_ids:
        return set()
    rows = conn.execute(
        "INSERT INTO processed_events (consumer, event_id)"
        " SELECT %s, x FROM unnest(%s::uuid[]) AS x ON CONFLICT DO NOTHING RETURNING event_id",
        (consumer, sorted(set(event_ids))),
    ).fetchall()
    return {str(row[0]) for row in rows}


TopicPartitionKey = tuple[str, int]


def mark_in_flight(
    conn: psycopg.Connection, consumer: str, ranges: dict[TopicPartitionKey, tuple[int, int]]
) -> None:
    """Record the offsets about to be applied, committed on its own before the batch.

    ``synchronous_commit = off``: the marker must survive *our* process dying (the server keeps
    it), not the server's machine failing; an asynchronous commit costs no fsync. One statement
    in autocommit: ``set_config(..., true)`` sets it for that statement's own transaction only (one
    round trip instead of BEGIN, SET LOCAL, INSERT, COMMIT); never inside an open transaction,
    whose commit it would make asynchronous too.
    """
    if not ranges:
        return
    invariant(
        conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE,
        "the in-flight marker commits on its own, outside any transaction",
    )
    topics, partitions, firsts, lasts = zip(
        *((t, p, f, last) for (t, p), (f, last) in ranges.items()), strict=True
    )
    conn.execute(
        "WITH asynchronous AS (SELECT set_config('synchronous_commit', 'off', true))"
        " INSERT INTO consumer_in_flight (consumer, topic, kafka_partition, first_offset, last_offset)"
        " SELECT %s, m.* FROM asynchronous,"
        " unnest(%s::text[], %s::int[], %s::bigint[], %s::bigint[]) AS m"
        " ON CONFLICT (consumer, topic, kafka_partition) DO UPDATE"
        " SET first_offset = EXCLUDED.first_offset,"
        " last_offset = EXCLUDED.last_offset, started_at = now()",
        (consumer, list(topics), list(partitions), list(firsts), list(lasts)),
    )


def claim_events_arming(
    conn: psycopg.Connection,
    consumer: str,
    event_ids: Sequence[str],
    arms: Mapping[TopicPartitionKey, tuple[int, int]],
) -> set[str]:
    """``claim_events`` and the markers for the *next* batch in one statement, inside the batch
    transaction: each partition's marker becomes ``arms[tp]`` (the offsets the next batch may hold)
    exactly when this batch commits, so the next batch needs no marker of its own (a data-modifying
    ``WITH`` runs whether or not its result is read)."""
    if not arms:
        return claim_events(conn, consumer, event_ids)
    topics, partitions, firsts, lasts = zip(
        *((t, p, f, last) for (t, p), (f, last) in arms.items()), strict=True
    )
    rows = conn.execute(
        "WITH armed AS (INSERT INTO consumer_in_flight"
        " (consumer, topic, kafka_partition, first_offset, last_offset)"
        " SELECT %s, m.* FROM unnest(%s::text[], %s::int[], %s::bigint[], %s::bigint[]) AS m"
        " ON CONFLICT (consumer, topic, kafka_partition) DO UPDATE"
        " SET first_offset = EXCLUDED.first_offset, last_offset = EXCLUDED.last_offset, started_at = now())"
        " INSERT INTO processed_events (consumer, event_id)"
        " SELECT %s, x FROM unnest(%s::uuid[]) AS x ON CONFLICT DO NOTHING RETURNING event_id",
        (
            consumer,
            list(topics),
            list(partitions),
            list(firsts),
            list(lasts),
            consumer,
            sorted(set(event_ids)),
        ),
    ).fetchall()
    return {str(row[0]) for row in rows}


def clear_in_flight(conn: psycopg.Connection, consumer: str, tps: set[TopicPartitionKey]) -> None:
    """Delete the markers of these partitions: settled after a careful pass, or given up by this
    process (revoked, or a clean stop)."""
    if not tps:
        return
    topics, partitions = zip(*tps, strict=True)
    conn.execute(
        "DELETE FROM consumer_in_flight WHERE consumer = %s AND (topic, kafka_partition) IN"
        " (SELECT * FROM unnest(%s::text[], %s::int[]))",
        (consumer, list(topics), list(partitions)),
    )


def load_in_flight(
    conn: psycopg.Connection, consumer: str, tps: set[TopicPartitionKey]
) -> dict[TopicPartitionKey, int]:
    """Markers left behind (a process that died mid-batch, or while armed for its next batch):
    partition -> the last offset it may have been applying."""
    if not tps:
        return {}
    topics, partitions = zip(*tps, strict=True)
    rows = conn.execute(
        "SELECT topic, kafka_partition, last_offset FROM consumer_in_flight WHERE consumer = %s"
        " AND (topic, kafka_partition) IN (SELECT * FROM unnest(%s::text[], %s::int[]))",
        (consumer, list(topics), list(partitions)),
    ).fetchall()
    return {(str(t), int(p)): int(last) for t, p, last in rows}


def record_attempt(
    conn: psycopg.Connection, consumer: str, topic: str, partition: int, offset: int, error: str
) -> int:
    """Count one attempt at a message, committed on its own so that it survives the failed
    transaction and a crashed process (asynchronous commit, as for ``mark_in_flight``)."""
    with conn.transaction():
        conn.execute("SET LOCAL synchronous_commit = off")
        row = conn.execute(
            "INSERT INTO consumer_attempts AS a"
            " (consumer, topic, kafka_partition, kafka_offset, attempts, last_error)"
            " VALUES (%s, %s, %s, %s, 1, %s)"
            " ON CONFLICT (consumer, topic, kafka_partition, kafka_offset) DO UPDATE"
            " SET attempts = a.attempts + 1, last_error = EXCLUDED.last_error, updated_at = now()"
            " RETURNING attempts",
            (consumer, topic, partition, offset, error[:ERROR_TEXT_MAX]),
        ).fetchone()
    assert row is not None
    return int(row[0])


def note_error(
    conn: psycopg.Connection, consumer: str, topic: str, partition: int, offset: int, error: str
) -> None:
    """Keep the latest error of a counted attempt, for operators and the dead letter's reason."""
    conn.execute(
        "UPDATE consumer_attempts SET last_error = %s, updated_at = now() WHERE consumer = %s AND topic = %s"
        " AND kafka_partition = %s AND kafka_offset = %s",
        (error[:ERROR_TEXT_MAX], consumer, topic, partition, offset),
    )


def uncount_attempt(
    conn: psycopg.Connection, consumer: str, topic: str, partition: int, offset: int, note: str
) -> int:
    """Take back the attempt just counted (the message waited, it did not fail); the attempts left."""
    with conn.transaction():
        row = conn.execute(
            "UPDATE consumer_attempts SET attempts = attempts - 1, last_error = %s, updated_at = now()"
            " WHERE consumer = %s AND topic = %s AND kafka_partition = %s AND kafka_offset = %s"
            " RETURNING attempts",
            (note[:ERROR_TEXT_MAX], consumer, topic, partition, offset),
        ).fetchone()
    return 0 if row is None else int(row[0])


def clear_attempts(conn: psycopg.Connection, consumer: str, topic: str, partition: int, offset: int) -> None:
    conn.execute(
        "DELETE FROM consumer_attempts WHERE consumer = %s AND topic = %s AND kafka_partition = %s"
        " AND kafka_offset = %s",
        (consumer, topic, partition, offset),
    )


@dataclass(frozen=True)
class DeadLetter:
    """A message the consumer gives up on, with why."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    payload: bytes | None
    headers: Mapping[str, str]
    error_class: str
    reason: str
    attempts: int
    event_id: str | None = None
    event_type: str | None = None


def insert_dead_letter(
    conn: psycopg.Connection, consumer: str, letter: DeadLetter, dlq_topic: str | None
) -> int | None:
    """Record a dead letter and queue it for the DLQ topic (via the outbox) in the caller's transaction.

    Idempotent per (consumer, topic, partition, offset): a redelivered poison message is recorded
    once. Returns the new dead letter's id, or None if it was already recorded.
    """
    row = conn.execute(
        "INSERT INTO dead_letters (consumer, topic, kafka_partition, kafka_offset, message_key, payload,"
        " headers, event_id, event_type, error_class, reason, attempts)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
        " ON CONFLICT (consumer, topic, kafka_partition, kafka_offset) DO NOTHING RETURNING id",
        (
            consumer,
            letter.topic,
            letter.partition,
            letter.offset,
            letter.key,
            letter.payload,
            json.dumps(dict(letter.headers)),
            letter.event_id,
            letter.event_type,
            letter.error_class,
            letter.reason[:ERROR_TEXT_MAX],
            letter.attempts,
        ),
    ).fetchone()
    if row is None:
        return None
    dead_letter_id = int(row[0])
    clear_attempts(conn, consumer, letter.topic, letter.partition, letter.offset)
    if dlq_topic is not None:
        headers = {
            **letter.headers,
            "x-dlq-consumer": consumer,
            "x-dlq-id": str(dead_letter_id),
            "x-dlq-error-class": letter.error_class,
            "x-dlq-reason": letter.reason[:500],
            "x-dlq-source": f"{letter.topic}/{letter.partition}/{letter.offset}",
        }
        key = (
            letter.key.decode("utf-8", "replace") if letter.key else f"dlq:{letter.topic}:{letter.partition}"
        )
        write_raw(
            conn,
            event_id=new_event_id(),
            event_type="DeadLetter",
            topic=dlq_topic,
            key=key,
            payload=letter.payload or b"",
            headers=headers,
        )
    return dead_letter_id
