"""Writing events to the outbox inside the caller's business transaction.

Invariants kept here:
- a row is written only inside an open transaction (an autocommit write would publish an event
  for a change that may still roll back);
- every event is Avro-encoded with its envelope before it is stored, so a malformed event fails
  the business transaction instead of a consumer later;
- an event type may only go to a topic that the catalogue says carries it;
- the Kafka key is the payment_id from the envelope;
- the row's headers carry the W3C trace context it was written in (``traceparent``, ``tracestate``;
  inside a consumer batch, that of the payment's own message), and the relay copies every header
  onto the Kafka message, so the consumer continues the trace (ADR 0012).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from backbone import tracing
from backbone.avro import AvroCodec
from backbone.ids import new_event_id
from backbone.invariants import invariant
from backbone.kafka.topics import TopicCatalogue


@dataclass(frozen=True)
class OutboxMessage:
    """One encoded message ready for the outbox table."""

    event_id: str
    event_type: str
    topic: str
    key: str
    payload: bytes
    headers: Mapping[str, str] = field(default_factory=dict)


class OutboxWriter:
    """Encodes events and appends them to the outbox with the caller's connection."""

    def __init__(self, codec: AvroCodec, catalogue: TopicCatalogue, producer: str) -> None:
        self._codec = codec
        self._catalogue = catalogue
        self._producer = producer

    def event(
        self,
        topic: str,
        event_type: str,
        payment_id: str,
        body: Mapping[str, Any],
        *,
        occurred_at_ms: int | None = None,
        event_id: str | None = None,
        causation_id: str | None = None,
        correlation_id: str | None = None,
    ) -> OutboxMessage:
        """Build and encode one event (envelope included). Raises ValueError on a bad event."""
        self._catalogue.check_event(topic, event_type)
        # The codec checks every envelope rule on encode; building the dict here (rather than
        # through new_envelope, which checks too) keeps this hot path to one check.
        envelope_event_id = new_event_id() if event_id is None else event_id
        envelope: dict[str, Any] = {
            "event_id": envelope_event_id,
            "event_type": event_type,
            "payment_id": payment_id,
            "occurred_at_ms": time.time_ns() // 1_000_000 if occurred_at_ms is None else occurred_at_ms,
            "producer": self._producer,
            "schema_version": self._codec.catalogue.latest_version(event_type),
            "causation_id": causation_id,
            "correlation_id": correlation_id,
        }
        payload = self._codec.encode(event_type, {"envelope": envelope, **body})
        headers = {"event_type": event_type, "event_id": envelope_event_id, "producer": self._producer}
        tracing.inject(headers, payment_id)
        return OutboxMessage(envelope_event_id, event_type, topic, payment_id, payload, headers)

    def write(self, conn: psycopg.Connection, messages: Sequence[OutboxMessage]) -> None:
        """Append ``messages`` to the outbox in the caller's open transaction (one INSERT, or one COPY)."""
        invariant(
            conn.info.transaction_status == TransactionStatus.INTRANS,
            "outbox rows must be written inside the business transaction",
        )
        if not messages:
            return
        if len(messages) == 1:  # one prepared INSERT costs less than a COPY's start + data + end
            m = messages[0]
            conn.execute(
                "INSERT INTO outbox (event_id, event_type, topic, message_key, payload, headers)"
                " VALUES (%s, %s, %s, %s, %s, %s)",
                (m.event_id, m.event_type, m.topic, m.key, m.payload, json.dumps(dict(m.headers))),
            )
            return
        with (
            conn.cursor() as cur,
            cur.copy(
                "COPY outbox (event_id, event_type, topic, message_key, payload, headers) FROM STDIN"
            ) as copy,
        ):
            for m in messages:
                copy.write_row(
                    (m.event_id, m.event_type, m.topic, m.key, m.payload, json.dumps(dict(m.headers)))
                )

    def add(
        self,
        conn: psycopg.Connection,
        topic: str,
        event_type: str,
        payment_id: str,
        body: Mapping[str, Any],
        **envelope_fields: Any,
    ) -> str:
        """Encode one event and append it; returns its event_id."""
        message = self.event(topic, event_type, payment_id, body, **envelope_fields)
        self.write(conn, [message])
        return message.event_id


def write_raw(
    conn: psycopg.Connection,
    *,
    event_id: str,
    event_type: str,
    topic: str,
    key: str,
    payload: bytes,
    headers: Mapping[str, str],
) -> None:
    """Append already-encoded bytes (dead letters, replays) in the caller's open transaction."""
    invariant(
        conn.info.transaction_status == TransactionStatus.INTRANS,
        "outbox rows must be written inside a transaction",
    )
    conn.execute(
        "INSERT INTO outbox (event_id, event_type, topic, message_key, payload, headers)"
        " VALUES (%s, %s, %s, %s, %s, %s)",
        (event_id, event_type, topic, key, payload, json.dumps(dict(headers))),
    )
