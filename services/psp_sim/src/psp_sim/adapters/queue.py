"""The durable webhook queue: events (exact body bytes) and their delivery rows and attempts.

An event and its delivery rows are written in the transaction of the change that caused them; the
worker (``delivery``) claims due rows with a lease and records every attempt. See the migration for the
delivery states.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, cast

from psp_sim.adapters.store import Conn
from psp_sim.domain.webhooks import DeliveryPlan


@dataclass(frozen=True, slots=True)
class NewEvent:
    id: str
    type: str
    object_id: str
    intent_id: str
    reference: str | None
    body: bytes
    created_s: int


_INSERT_EVENT_SQL: Final = """
WITH e AS (
    INSERT INTO webhook_events (id, type, object_id, intent_id, reference, body, created_s)
    VALUES (%(id)s, %(type)s, %(object_id)s, %(intent_id)s, %(reference)s, %(body)s, %(created_s)s)
    RETURNING id
)
INSERT INTO webhook_deliveries (event_id, state, signing, signing_age_s, next_attempt_ms, lease_until_ms,
    hold_group, created_s)
SELECT e.id, %(state)s, %(signing)s, %(signing_age_s)s, %(next_attempt_ms)s, %(lease_until_ms)s,
    %(hold_group)s, %(created_s)s
FROM e, generate_series(1, %(copies)s)
RETURNING id
"""


async def insert_event(
    conn: Conn, event: NewEvent, plan: DeliveryPlan, now_ms: int, lease_until_ms: int
) -> list[int]:
    """The event and its delivery rows (one per copy), in one statement; returns the delivery ids."""
    state = "dropped" if plan.dropped else ("held" if plan.hold_group else "pending")
    params = {
        "id": event.id, "type": event.type, "object_id": event.object_id, "intent_id": event.intent_id,
        "reference": event.reference, "body": event.body, "created_s": event.created_s, "state": state,
        "signing": plan.signing, "signing_age_s": plan.signing_age_s,
        "next_attempt_ms": now_ms + plan.delay_ms,
        "lease_until_ms": lease_until_ms, "hold_group": plan.hold_group,
        "copies": 1 if plan.dropped else plan.copies,
    }  # fmt: skip  # packed: a few items a line read better than one each
    cur = await conn.execute(_INSERT_EVENT_SQL, params)
    return [int(row[0]) for row in await cur.fetchall()]


async def release_held(conn: Conn, now_ms: int, group: str | None) -> int:
    """Make held deliveries due now, newest first (order_key = -id): the reorder fault."""
    cur = await conn.execute(
        "UPDATE webhook_deliveries SET state = 'pending', next_attempt_ms = %s, order_key = -id"
        " WHERE state = 'held' AND (%s::text IS NULL OR hold_group = %s)",
        (now_ms, group, group),
    )
    return cur.rowcount


@dataclass(frozen=True, slots=True)
class DueDelivery:
    id: int
    event_id: str
    signing: str
    signing_age_s: int
    attempts: int
    body: bytes
    lane: str


_CLAIM_SQL: Final = """
WITH due AS (
    SELECT id FROM webhook_deliveries
    WHERE state = 'pending' AND next_attempt_ms <= %(now)s AND lease_until_ms <= %(now)s
    ORDER BY next_attempt_ms, order_key, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE webhook_deliveries d SET lease_until_ms = %(lease)s FROM due WHERE d.id = due.id
    RETURNING d.id, d.event_id, d.signing, d.signing_age_s, d.attempts, d.next_attempt_ms, d.order_key
)
SELECT c.id, c.event_id, c.signing, c.signing_age_s, c.attempts, e.body, e.intent_id
FROM claimed c JOIN webhook_events e ON e.id = c.event_id
ORDER BY c.next_attempt_ms, c.order_key, c.id
"""


async def claim_due(conn: Conn, now_ms: int, lease_until_ms: int, limit: int) -> list[DueDelivery]:
    params = {"now": now_ms, "lease": lease_until_ms, "limit": limit}
    cur = await conn.execute(_CLAIM_SQL, params)
    return [DueDelivery(r[0], r[1], r[2], r[3], r[4], bytes(r[5]), r[6]) for r in await cur.fetchall()]


async def load_claimed(conn: Conn, ids: Sequence[int]) -> list[DueDelivery]:
    """Deliveries this process claimed at insert (webhook before response), with their bodies."""
    cur = await conn.execute(
        "SELECT d.id, d.event_id, d.signing, d.signing_age_s, d.attempts, e.body, e.intent_id"
        " FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id"
        " WHERE d.id = ANY(%s) AND d.state = 'pending' ORDER BY d.id",
        (list(ids),),
    )
    return [DueDelivery(r[0], r[1], r[2], r[3], r[4], bytes(r[5]), r[6]) for r in await cur.fetchall()]


async def release_leases(conn: Conn, ids: Sequence[int]) -> None:
    """Give claimed deliveries back to the worker (nothing to send them to yet)."""
    await conn.execute("UPDATE webhook_deliveries SET lease_until_ms = 0 WHERE id = ANY(%s)", (list(ids),))


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    delivery_id: int
    attempt_no: int
    url: str
    started_ms: int
    duration_ms: int
    status_code: int | None
    error: str | None
    next_state: str  # pending | delivered | failed
    next_attempt_ms: int
    now_s: int


_RECORD_ATTEMPT_SQL: Final = """
WITH d AS (
    UPDATE webhook_deliveries SET attempts = %(attempt_no)s, state = %(state)s, next_attempt_ms = %(next_ms)s,
        lease_until_ms = 0,
        delivered_s = CASE WHEN %(state)s = 'delivered' THEN %(now_s)s ELSE delivered_s END,
        last_error = %(error)s
    WHERE id = %(id)s
    RETURNING id
)
INSERT INTO webhook_attempts (delivery_id, attempt_no, url, started_ms, duration_ms, status_code, error)
SELECT d.id, %(attempt_no)s, %(url)s, %(started_ms)s, %(duration_ms)s, %(status_code)s, %(error)s FROM d
ON CONFLICT DO NOTHING
"""


async def record_attempt(conn: Conn, a: AttemptRecord) -> None:
    """The attempt and the delivery's next state, in one statement (atomic without a transaction).
    The delivery row is gone only after a control reset during the attempt: then nothing is written."""
    params = {
        "id": a.delivery_id, "attempt_no": a.attempt_no, "url": a.url, "started_ms": a.started_ms,
        "duration_ms": a.duration_ms, "status_code": a.status_code, "error": a.error, "state": a.next_state,
        "next_ms": a.next_attempt_ms, "now_s": a.now_s,
    }  # fmt: skip  # packed: a few items a line read better than one each
    await conn.execute(_RECORD_ATTEMPT_SQL, params)


async def list_deliveries(conn: Conn, filters: dict[str, str], limit: int) -> list[dict[str, Any]]:
    """Deliveries with their event and attempts, oldest first.

    Filters: event_type, reference, intent, state, event_id.
    """
    clauses, params = ["TRUE"], []
    for name, column in (
        ("event_type", "e.type"),
        ("reference", "e.reference"),
        ("intent", "e.intent_id"),
        ("state", "d.state"),
        ("event_id", "e.id"),
    ):
        if name in filters:
            clauses.append(f"{column} = %s")
            params.append(filters[name])
    cur = await conn.execute(
        "SELECT d.id, e.id, e.type, e.intent_id, e.reference, d.state, d.signing, d.attempts, d.hold_group,"
        " d.next_attempt_ms, d.created_s, d.delivered_s, d.last_error,"
        " coalesce((SELECT json_agg(json_build_object('attempt', a.attempt_no, 'url', a.url, 'started_ms',"
        " a.started_ms, 'duration_ms', a.duration_ms, 'status_code', a.status_code, 'error', a.error)"
        " ORDER BY a.attempt_no) FROM webhook_attempts a WHERE a.delivery_id = d.id), '[]')"
        f" FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id WHERE {' AND '.join(clauses)}"
        " ORDER BY d.id LIMIT %s",
        (*params, limit),
    )
    names = (
        "delivery_id",
        "event_id",
        "event_type",
        "payment_intent",
        "reference",
        "state",
        "signing",
        "attempts",
        "hold_group",
        "next_attempt_ms",
        "created",
        "delivered_at",
        "last_error",
        "attempt_log",
    )
    return [dict(zip(names, row, strict=True)) for row in await cur.fetchall()]


async def pending_deliveries(conn: Conn) -> int:
    cur = await conn.execute("SELECT count(*) FROM webhook_deliveries WHERE state IN ('pending', 'held')")
    row = await cur.fetchone()
    return int(cast(tuple[int], row)[0])
