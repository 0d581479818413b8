"""The receipt store on PostgreSQL: ``provider_events`` plus the backbone's ``outbox``, atomically.

How receipts are written. Concurrent requests queue their receipt; a few writer tasks each take
what is queued (up to ``batch_size_max`` receipts / ``batch_bytes_max`` bytes) and write it with two
round trips, no explicit transaction:
1. ``nextval(…)`` for every receipt and ``now()``: the receipt ids and the database's clock travel
   inside the Avro-encoded outbox events, so they must be known before the events are encoded;
2. ONE statement inserts the receipts (``ON CONFLICT (provider, provider_event_id) DO NOTHING``)
   and, in a data-modifying CTE, one outbox row for each receipt it actually inserted. A statement
   is atomic on its own: a receipt and its outbox row commit together or not at all, and a
   duplicate (of a stored receipt, or of another receipt in the same batch) inserts neither.
A third round trip reads the stored originals of duplicates, when there are any. Batching is group
commit: one fsync and two round trips serve every webhook that arrived while the previous batch was
being written, which is what makes thousands of webhooks per second possible on two cores.

Concurrency: PostgreSQL makes every concurrent inserter of a key wait for the first one's
transaction; if it commits the others see the conflict and insert nothing, if it aborts one of them
inserts. A duplicate is reported only once its original is committed.

Failure: a lost connection, a pool or statement timeout, a full queue or the overall ``timeout_s``
raises ``StoreUnavailable`` in ``save``. The write may or may not have committed; the PSP's retry
settles it. A batch that fails for any other reason (a bug, a constraint) is retried receipt by
receipt, so one bad receipt cannot fail the others; that one gets ``StoreRejected``, whose message
(like the log line) names the error class and SQLSTATE only: PostgreSQL's own message may quote the
row, payload included.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import psycopg
from backbone.invariants import invariant, unreachable
from backbone.kafka.topics import topic_name
from backbone.logs import get_logger
from backbone.outbox import OutboxMessage, OutboxWriter
from psycopg.rows import TupleRow
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from webhook_gateway.application.ingest import (
    AlreadyStored,
    Saved,
    SaveOutcome,
    StoreRejected,
    StoreUnavailable,
)
from webhook_gateway.domain.receipts import (
    EVENT_TYPE,
    TOPIC,
    NewReceipt,
    outbox_key,
    provenance_result,
    provider_event_received,
)
from webhook_gateway.metrics import WEBHOOK_STORE_BATCH_SECONDS, WEBHOOK_STORE_BATCH_SIZE

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_ALLOCATE: Final = "SELECT array_agg(nextval('provider_events_id_seq')), now() FROM generate_series(1, %s)"
_INSERT: Final = """
WITH input AS (
    SELECT * FROM unnest(
        %(id)b::bigint[], %(provider)b::text[], %(event_id)b::text[], %(event_type)b::text[],
        %(payment_id)b::text[], %(raw_body)b::bytea[], %(body_sha256)b::bytea[],
        %(audit_headers)b::jsonb[], %(secret)b::text[], %(signature_timestamp_s)b::bigint[],
        %(request_id)b::text[], %(outbox_event_id)b::uuid[], %(message_key)b::text[],
        %(payload)b::bytea[], %(headers)b::jsonb[], %(card_data_redacted)b::boolean[],
        %(signature_result)b::text[]
    ) AS i(id, provider, provider_event_id, provider_event_type, provider_payment_id, raw_body,
           body_sha256, audit_headers, signature_secret, signature_timestamp_s, request_id,
           outbox_event_id, message_key, payload, headers, card_data_redacted, signature_result)
), receipt AS (
    INSERT INTO provider_events (
        id, provider, provider_event_id, provider_event_type, provider_payment_id, raw_body,
        body_sha256, audit_headers, signature_result, signature_secret, signature_timestamp_s,
        request_id, outbox_event_id, received_at, card_data_redacted)
    SELECT id, provider, provider_event_id, provider_event_type, provider_payment_id, raw_body,
           body_sha256, audit_headers, signature_result, signature_secret, signature_timestamp_s,
           request_id, outbox_event_id, %(received_at)s::timestamptz, card_data_redacted
    FROM input ORDER BY id
    ON CONFLICT (provider, provider_event_id) DO NOTHING
    RETURNING id
)
INSERT INTO outbox (event_id, event_type, topic, message_key, payload, headers)
SELECT i.outbox_event_id, %(outbox_event_type)s::text, %(topic)s::text, i.message_key, i.payload, i.headers
FROM input i JOIN receipt r USING (id)
ORDER BY i.id
RETURNING event_id::text
"""
_EXISTING: Final = """
SELECT e.provider, e.provider_event_id, e.id, e.body_sha256
FROM provider_events e
JOIN unnest(%b::text[], %b::text[]) AS k(provider, provider_event_id) USING (provider, provider_event_id)
"""
BATCH_BYTES_MAX: Final = 2 * 1024 * 1024
_INFRASTRUCTURE_ERRORS: Final = (psycopg.OperationalError, psycopg.InterfaceError, TimeoutError)
log = get_logger(__name__)


def to_epoch_ms(moment: datetime) -> int:
    """Exact milliseconds since the epoch (no float rounding)."""
    return (moment - _EPOCH) // timedelta(milliseconds=1)


@dataclass(frozen=True, slots=True)
class BatchLimits:
    writers: int = 2  # concurrent batches in flight (each holds one pool connection)
    batch_size_max: int = 64
    batch_bytes_max: int = BATCH_BYTES_MAX  # raw bodies per batch; one receipt always fits
    queue_max: int = 2000  # receipts waiting for a writer; beyond it: 503 (load shedding)

    def __post_init__(self) -> None:
        invariant(self.writers > 0 and self.batch_size_max > 0, "batch limits must be positive")
        invariant(self.batch_bytes_max > 0 and self.queue_max > 0, "batch limits must be positive")


@dataclass(frozen=True, slots=True)
class _Pending:
    receipt: NewReceipt
    future: asyncio.Future[SaveOutcome]
    # The request's context (its trace): the writer task encodes the receipt's event in it, so the
    # event's traceparent is the webhook request's (ADR 0012).
    context: contextvars.Context = field(default_factory=contextvars.copy_context)


class PostgresReceiptStore:
    """``ReceiptStore`` on an async psycopg pool in autocommit mode. ``start()`` before use,
    ``close()`` after the last ``save`` (the server does both)."""

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        outbox: OutboxWriter,
        *,
        timeout_s: float,
        limits: BatchLimits | None = None,
    ) -> None:
        invariant(timeout_s > 0, "store timeout must be positive")
        self._pool = pool
        self._outbox = outbox
        self._timeout_s = timeout_s
        self._limits = limits or BatchLimits()
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue(self._limits.queue_max)
        self._writers: list[asyncio.Task[None]] = []

    def start(self) -> None:
        invariant(not self._writers, "store already started")
        loop = asyncio.get_running_loop()
        self._writers = [loop.create_task(self._writer()) for _ in range(self._limits.writers)]

    async def close(self) -> None:
        """Stop the writers. Receipts still queued belong to requests that already got a 503."""
        for task in self._writers:
            task.cancel()
        for task in self._writers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._writers = []

    async def save(self, receipt: NewReceipt) -> SaveOutcome:
        invariant(bool(self._writers), "store not started")
        future: asyncio.Future[SaveOutcome] = asyncio.get_running_loop().create_future()
        try:
            self._queue.put_nowait(_Pending(receipt, future))
        except asyncio.QueueFull:
            raise StoreUnavailable("write queue full") from None
        try:
            async with asyncio.timeout(self._timeout_s):
                return await future  # a timeout cancels the future: the writer skips it
        except TimeoutError:
            raise StoreUnavailable(f"not stored within {self._timeout_s}s") from None

    # -- writers -----------------------------------------------------------------------------

    async def _writer(self) -> None:
        carry: _Pending | None = None
        while True:  # a writer lives as long as the store; close() cancels it
            batch, carry = await self._next_batch(carry)
            live = [p for p in batch if not p.future.done()]  # skip requests that timed out
            try:
                if live:
                    await self._write(live)
            except Exception as exc:  # a bug here must fail these requests, not kill the writer
                log.exception("store.writer_error")
                _fail(live, exc)

    async def _next_batch(self, carry: _Pending | None) -> tuple[list[_Pending], _Pending | None]:
        """Wait for one receipt (or start with the carried one), then take whatever else is queued,
        within the batch limits; a receipt that would pass the byte limit is carried to the next."""
        batch = [carry if carry is not None else await self._queue.get()]
        size_bytes = len(batch[0].receipt.raw_body)
        while len(batch) < self._limits.batch_size_max and not self._queue.empty():
            following = self._queue.get_nowait()
            size_bytes += len(following.receipt.raw_body)
            if size_bytes > self._limits.batch_bytes_max:
                return batch, following
            batch.append(following)
        return batch, None

    async def _write(self, batch: list[_Pending]) -> None:
        WEBHOOK_STORE_BATCH_SIZE.observe(len(batch))
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self._timeout_s), self._pool.connection() as conn:
                outcomes = await write_batch(
                    conn, self._outbox, [p.receipt for p in batch], [p.context for p in batch]
                )
        except _INFRASTRUCTURE_ERRORS as exc:
            # A database restart kills every pooled connection: the pool's check finds the dead
            # ones when they are handed out and sweeps the rest (backbone.postgres.make_async_pool).
            _fail(batch, StoreUnavailable(f"{type(exc).__name__}: {exc}"))
            return
        except Exception as exc:
            if len(batch) == 1:
                # The database's message may quote the row (DETAIL: Failing row contains ...):
                # log and pass on the error class and SQLSTATE only, never the payload.
                sqlstate = getattr(exc, "sqlstate", None)
                log.error(
                    "store.receipt_rejected",
                    request_id=batch[0].receipt.request_id,
                    error=type(exc).__name__,
                    sqlstate=sqlstate,
                )
                _fail(batch, StoreRejected(f"{type(exc).__name__} (sqlstate {sqlstate})"))
                return
            log.warning("store.batch_failed_retrying_one_by_one", size=len(batch), error=type(exc).__name__)
            for pending in batch:
                await self._write([pending])
            return
        WEBHOOK_STORE_BATCH_SECONDS.observe(time.perf_counter() - started)
        for pending, outcome in zip(batch, outcomes, strict=True):
            if not pending.future.done():
                pending.future.set_result(outcome)


def _fail(batch: Sequence[_Pending], exc: BaseException) -> None:
    for pending in batch:
        if not pending.future.done():
            pending.future.set_exception(exc)


async def write_batch(
    conn: psycopg.AsyncConnection[TupleRow],
    outbox: OutboxWriter,
    receipts: Sequence[NewReceipt],
    contexts: Sequence[contextvars.Context] | None = None,
) -> list[SaveOutcome]:
    """Store ``receipts`` (autocommit connection); one outcome per receipt, in order. Each receipt's
    event is encoded in its request's context (``contexts``, one per receipt) when given."""
    invariant(bool(receipts), "empty batch")
    allocated = await (await conn.execute(_ALLOCATE, (len(receipts),))).fetchone()
    if allocated is None:
        unreachable("nextval/now returned no row")
    receipt_ids, received_at = sorted(int(i) for i in allocated[0]), allocated[1]
    invariant(len(receipt_ids) == len(receipts), "one receipt id per receipt")
    received_at_ms = to_epoch_ms(received_at)
    messages = [
        _event(outbox, receipt, receipt_id, received_at_ms)
        if contexts is None
        else contexts[i].run(_event, outbox, receipt, receipt_id, received_at_ms)
        for i, (receipt, receipt_id) in enumerate(zip(receipts, receipt_ids, strict=True))
    ]
    params = _insert_params(receipts, receipt_ids, messages)
    params["received_at"] = received_at
    inserted = {str(row[0]) for row in await (await conn.execute(_INSERT, params)).fetchall()}
    missing = [r for r, m in zip(receipts, messages, strict=True) if m.event_id not in inserted]
    existing = await _existing(conn, missing) if missing else {}
    outcomes: list[SaveOutcome] = []
    for receipt, receipt_id, message in zip(receipts, receipt_ids, messages, strict=True):
        if message.event_id in inserted:
            outcomes.append(Saved(receipt_id, received_at_ms))
            continue
        original = existing.get((receipt.provider, receipt.event.event_id))
        if original is None:
            unreachable("a conflicting receipt must exist after ON CONFLICT DO NOTHING")
        outcomes.append(AlreadyStored(original[0], original[1] == receipt.body_sha256))
    return outcomes


def _event(outbox: OutboxWriter, receipt: NewReceipt, receipt_id: int, received_at_ms: int) -> OutboxMessage:
    return outbox.event(
        topic_name(TOPIC),
        EVENT_TYPE,
        outbox_key(receipt.provider, receipt.event),
        provider_event_received(receipt, receipt_id, received_at_ms),
        occurred_at_ms=received_at_ms,
        correlation_id=receipt.request_id,
    )


def _insert_params(
    receipts: Sequence[NewReceipt], receipt_ids: Sequence[int], messages: Sequence[OutboxMessage]
) -> dict[str, Any]:
    """Column arrays for ``unnest``: one element per receipt, in the same order."""
    return {
        "id": list(receipt_ids),
        "provider": [r.provider for r in receipts],
        "event_id": [r.event.event_id for r in receipts],
        "event_type": [r.event.event_type for r in receipts],
        "payment_id": [r.event.payment_id for r in receipts],
        "raw_body": [r.raw_body for r in receipts],
        "body_sha256": [r.body_sha256 for r in receipts],
        "audit_headers": [Jsonb(dict(r.audit_headers)) for r in receipts],
        "secret": [r.signature.secret for r in receipts],
        "signature_timestamp_s": [r.signature.timestamp_s for r in receipts],
        "request_id": [r.request_id for r in receipts],
        "outbox_event_id": [m.event_id for m in messages],
        "message_key": [m.key for m in messages],
        "payload": [m.payload for m in messages],
        "headers": [Jsonb(dict(m.headers)) for m in messages],
        "card_data_redacted": [r.card_data_redacted for r in receipts],
        "signature_result": [provenance_result(r.signature) for r in receipts],
        "outbox_event_type": EVENT_TYPE,
        "topic": topic_name(TOPIC),
    }


async def _existing(
    conn: psycopg.AsyncConnection[TupleRow], receipts: Sequence[NewReceipt]
) -> dict[tuple[str, str], tuple[int, bytes]]:
    """The stored (id, body_sha256) of each receipt's (provider, provider_event_id)."""
    # The conflicting rows are committed (ON CONFLICT waited for them), so this statement sees them.
    rows = await (
        await conn.execute(_EXISTING, ([r.provider for r in receipts], [r.event.event_id for r in receipts]))
    ).fetchall()
    return {(str(p), str(e)): (int(i), bytes(h)) for p, e, i, h in rows}
