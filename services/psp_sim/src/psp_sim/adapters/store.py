"""PostgreSQL access of the simulator: intents, refunds, disputes, balance transactions, idempotency
records, configuration overrides, report discrepancies (the webhook queue is in ``queue``, payouts
in ``payout_store``).

Every function takes the caller's connection: the application decides the transaction (one per API
write: effect + idempotency record + webhook rows commit together). Values are always parameters.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, cast

from psycopg import AsyncConnection
from psycopg.rows import TupleRow
from psycopg.types.json import Jsonb

from psp_sim.domain.intents import Intent, PaymentError, Refund
from psp_sim.domain.reports import BalanceTxn, Discrepancy
from psp_sim.domain.wire import Dispute

Conn = AsyncConnection[TupleRow]
LIST_LIMIT: Final = 100

_INTENT_COLUMNS: Final = (
    "id, reference, status, amount_minor, amount_capturable_minor, amount_received_minor,"
    " amount_refunded_minor, amount_refund_pending_minor, amount_disputed_minor, currency, capture_method,"
    " payment_method, metadata, last_payment_error, next_action, cancellation_reason, latest_charge,"
    " created_s, canceled_s, captured_s"
)
_INTENT_UPDATE: Final = ", ".join(
    f"{c.strip()} = EXCLUDED.{c.strip()}" for c in _INTENT_COLUMNS.split(",")[1:] if c.strip() != "created_s"
)
_REFUND_COLUMNS: Final = (
    "id, payment_intent_id, reference, amount_minor, currency, status, reason, failure_reason, metadata,"
    " created_s"
)


def _intent(row: Sequence[Any]) -> Intent:
    error = row[13]
    return Intent(
        id=row[0],
        reference=row[1],
        status=row[2],
        amount_minor=row[3],
        amount_capturable_minor=row[4],
        amount_received_minor=row[5],
        amount_refunded_minor=row[6],
        amount_refund_pending_minor=row[7],
        amount_disputed_minor=row[8],
        currency=row[9],
        capture_method=row[10],
        payment_method=row[11],
        metadata=row[12],
        last_payment_error=None
        if error is None
        else PaymentError(error["code"], error["decline_code"], error["message"]),
        next_action_url=None if row[14] is None else row[14]["url"],
        cancellation_reason=row[15],
        latest_charge=row[16],
        created_s=row[17],
        canceled_s=row[18],
        captured_s=row[19],
    )


def _intent_params(i: Intent) -> tuple[Any, ...]:
    error = i.last_payment_error
    return (
        i.id,
        i.reference,
        i.status,
        i.amount_minor,
        i.amount_capturable_minor,
        i.amount_received_minor,
        i.amount_refunded_minor,
        i.amount_refund_pending_minor,
        i.amount_disputed_minor,
        i.currency,
        i.capture_method,
        i.payment_method,
        Jsonb(i.metadata),
        None
        if error is None
        else Jsonb({"code": error.code, "decline_code": error.decline_code, "message": error.message}),
        None if i.next_action_url is None else Jsonb({"url": i.next_action_url}),
        i.cancellation_reason,
        i.latest_charge,
        i.created_s,
        i.canceled_s,
        i.captured_s,
    )


def _refund(row: Sequence[Any]) -> Refund:
    return Refund(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8], row[9])


# -- intents, refunds, disputes ---------------------------------------------------------------------


async def get_intent(conn: Conn, intent_id: str, *, lock: bool = False) -> Intent | None:
    suffix = " FOR UPDATE" if lock else ""
    cur = await conn.execute(
        f"SELECT {_INTENT_COLUMNS} FROM payment_intents WHERE id = %s{suffix}", (intent_id,)
    )
    row = await cur.fetchone()
    return None if row is None else _intent(row)


async def intents_by_reference(conn: Conn, reference: str) -> list[Intent]:
    cur = await conn.execute(
        f"SELECT {_INTENT_COLUMNS} FROM payment_intents WHERE reference = %s ORDER BY created_s, id LIMIT %s",
        (reference, LIST_LIMIT),
    )
    return [_intent(row) for row in await cur.fetchall()]


async def save_intent(conn: Conn, intent: Intent) -> None:
    placeholders = ", ".join(["%s"] * 20)
    await conn.execute(
        f"INSERT INTO payment_intents ({_INTENT_COLUMNS}) VALUES ({placeholders})"
        f" ON CONFLICT (id) DO UPDATE SET {_INTENT_UPDATE}",
        _intent_params(intent),
    )


async def get_refund(conn: Conn, refund_id: str, *, lock: bool = False) -> Refund | None:
    suffix = " FOR UPDATE" if lock else ""
    cur = await conn.execute(f"SELECT {_REFUND_COLUMNS} FROM refunds WHERE id = %s{suffix}", (refund_id,))
    row = await cur.fetchone()
    return None if row is None else _refund(row)


async def refunds_where(conn: Conn, *, reference: str | None, intent_id: str | None) -> list[Refund]:
    column, value = ("reference", reference) if reference is not None else ("payment_intent_id", intent_id)
    cur = await conn.execute(
        f"SELECT {_REFUND_COLUMNS} FROM refunds WHERE {column} = %s ORDER BY created_s, id LIMIT %s",
        (value, LIST_LIMIT),
    )
    return [_refund(row) for row in await cur.fetchall()]


async def save_refund(conn: Conn, r: Refund) -> None:
    await conn.execute(
        f"INSERT INTO refunds ({_REFUND_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
        " ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, failure_reason = EXCLUDED.failure_reason",
        (
            r.id,
            r.payment_intent_id,
            r.reference,
            r.amount_minor,
            r.currency,
            r.status,
            r.reason,
            r.failure_reason,
            Jsonb(r.metadata),
            r.created_s,
        ),
    )


async def insert_dispute(conn: Conn, d: Dispute) -> None:
    await conn.execute(
        "INSERT INTO disputes (id, payment_intent_id, amount_minor, currency, reason, status, created_s)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s)",
        (d.id, d.payment_intent_id, d.amount_minor, d.currency, d.reason, d.status, d.created_s),
    )


# -- balance transactions and reports --------------------------------------------------------------


async def insert_balance_txn(conn: Conn, t: BalanceTxn, business_date: dt.date) -> None:
    await conn.execute(
        "INSERT INTO balance_transactions (id, type, source_id, payment_intent_id, reference,"
        " source_reference,"
        " currency, gross_minor, fee_minor, net_minor, business_date, created_s)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (
            t.id,
            t.type,
            t.source_id,
            t.payment_intent_id,
            t.reference,
            t.source_reference,
            t.currency,
            t.gross_minor,
            t.fee_minor,
            t.net_minor,
            business_date,
            t.created_s,
        ),
    )


_TXN_COLUMNS: Final = (
    "id, type, source_id, payment_intent_id, reference, source_reference, currency, gross_minor, fee_minor,"
    " net_minor, created_s"
)


async def balance_txns_of_date(conn: Conn, business_date: dt.date) -> list[BalanceTxn]:
    cur = await conn.execute(
        f"SELECT {_TXN_COLUMNS} FROM balance_transactions WHERE business_date = %s ORDER BY seq",
        (business_date,),
    )
    return [BalanceTxn(*row) for row in await cur.fetchall()]


async def balance_txns_where(
    conn: Conn, *, intent_id: str | None, reference: str | None
) -> list[tuple[BalanceTxn, dt.date]]:
    column, value = ("payment_intent_id", intent_id) if intent_id is not None else ("reference", reference)
    cur = await conn.execute(
        f"SELECT {_TXN_COLUMNS}, business_date FROM balance_transactions WHERE {column} = %s ORDER BY seq"
        " LIMIT %s",
        (value, LIST_LIMIT),
    )
    return [(BalanceTxn(*row[:11]), row[11]) for row in await cur.fetchall()]


async def add_discrepancy(
    conn: Conn,
    business_date: dt.date,
    kind: str,
    reference: str | None,
    delta: int,
    currency: str | None,
    now_s: int,
) -> int:
    cur = await conn.execute(
        "INSERT INTO report_discrepancies"
        " (business_date, kind, reference, amount_delta_minor, currency, created_s)"
        " VALUES (%s, %s, %s, %s, %s, %s) RETURNING id",
        (business_date, kind, reference, delta, currency, now_s),
    )
    row = await cur.fetchone()
    return int(cast(tuple[int], row)[0])


async def discrepancies_of_date(conn: Conn, business_date: dt.date) -> list[Discrepancy]:
    cur = await conn.execute(
        "SELECT id, kind, reference, amount_delta_minor, currency FROM report_discrepancies"
        " WHERE business_date = %s ORDER BY id",
        (business_date,),
    )
    return [Discrepancy(*row) for row in await cur.fetchall()]


async def clear_discrepancies(conn: Conn) -> None:
    await conn.execute("DELETE FROM report_discrepancies")


# -- idempotency --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoredResponse:
    digest: bytes
    status: int
    body: bytes


async def claim_key(
    conn: Conn, key: str, digest: bytes, status: int, body: bytes, now_ms: int, ttl_ms: int
) -> bool:
    """Record the key with its response; True if this call owns it (new, or the old one had expired).

    A concurrent call with the same key blocks on the primary key until this transaction ends, then
    sees the committed record: one execution per key.
    """
    cur = await conn.execute(
        "INSERT INTO idempotency_keys (idem_key, request_digest, response_status, response_body, created_ms,"
        " expires_ms) VALUES (%s, %s, %s, %s, %s, %s)"
        " ON CONFLICT (idem_key) DO UPDATE SET request_digest = EXCLUDED.request_digest,"
        " response_status = EXCLUDED.response_status, response_body = EXCLUDED.response_body,"
        " created_ms = EXCLUDED.created_ms, expires_ms = EXCLUDED.expires_ms"
        " WHERE idempotency_keys.expires_ms <= EXCLUDED.created_ms RETURNING 1",
        (key, digest, status, body, now_ms, now_ms + ttl_ms),
    )
    return await cur.fetchone() is not None


async def key_is_live(conn: Conn, key: str, now_ms: int) -> bool:
    """Whether ``key`` is recorded and not expired (committed rows only: a concurrent first call with
    the key is still found by ``claim_key``, which waits for it)."""
    cur = await conn.execute(
        "SELECT 1 FROM idempotency_keys WHERE idem_key = %s AND expires_ms > %s", (key, now_ms)
    )
    return await cur.fetchone() is not None


async def load_key(conn: Conn, key: str) -> StoredResponse | None:
    cur = await conn.execute(
        "SELECT request_digest, response_status, response_body FROM idempotency_keys WHERE idem_key = %s",
        (key,),
    )
    row = await cur.fetchone()
    return None if row is None else StoredResponse(bytes(row[0]), row[1], bytes(row[2]))


# -- configuration and reset ---------------------------------------------------------------------------


async def load_overrides(conn: Conn) -> dict[str, Any]:
    cur = await conn.execute("SELECT value FROM sim_config WHERE key = 'overrides'")
    row = await cur.fetchone()
    return {} if row is None else dict(row[0])


async def save_overrides(conn: Conn, overrides: dict[str, Any]) -> None:
    await conn.execute(
        "INSERT INTO sim_config (key, value) VALUES ('overrides', %s)"
        " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
        (Jsonb(overrides),),
    )


async def load_faults(conn: Conn) -> dict[str, Any] | None:
    cur = await conn.execute("SELECT value FROM sim_config WHERE key = 'faults'")
    row = await cur.fetchone()
    return None if row is None else dict(row[0])


async def save_faults(conn: Conn, snapshot: dict[str, Any]) -> None:
    """Keep the fault book; a snapshot older than the stored one (transactions commit out of
    order) changes nothing."""
    await conn.execute(
        "INSERT INTO sim_config (key, value) VALUES ('faults', %s) ON CONFLICT (key) DO UPDATE"
        " SET value = EXCLUDED.value"
        " WHERE (sim_config.value->>'version')::bigint < (EXCLUDED.value->>'version')::bigint",
        (Jsonb(snapshot),),
    )


async def reset(conn: Conn) -> None:
    await conn.execute(
        "TRUNCATE webhook_attempts, webhook_deliveries, webhook_events, balance_transactions, disputes,"
        " refunds, payouts,"
        " payment_intents, idempotency_keys, report_discrepancies, sim_config RESTART IDENTITY"
    )


EVENTS_PAGE_MAX: Final = 100  # Stripe's limit on one page of a list


class UnknownCursor(Exception):
    """``starting_after`` names no event."""


async def events_page(
    conn: Conn, *, created_gte: int, created_lte: int, starting_after: str | None, limit: int
) -> tuple[list[bytes], bool]:
    """Events created in ``[created_gte, created_lte]`` (seconds), newest first (``created_s``, then
    ``id``, both descending), after the event ``starting_after`` when given: their exact bodies (the
    bytes every webhook copy carried) and whether more follow."""
    assert 0 < limit <= EVENTS_PAGE_MAX, "a bounded page"
    cursor: tuple[int, str] | None = None
    if starting_after is not None:
        cur = await conn.execute("SELECT created_s, id FROM webhook_events WHERE id = %s", (starting_after,))
        row = await cur.fetchone()
        if row is None:
            raise UnknownCursor(starting_after)
        cursor = (int(row[0]), str(row[1]))
    cur = await conn.execute(
        "SELECT body FROM webhook_events WHERE created_s BETWEEN %s AND %s"
        " AND (%s::bigint IS NULL OR (created_s, id) < (%s::bigint, %s::text))"
        " ORDER BY created_s DESC, id DESC LIMIT %s",
        (
            created_gte,
            created_lte,
            None if cursor is None else cursor[0],
            None if cursor is None else cursor[0],
            None if cursor is None else cursor[1],
            limit + 1,
        ),
    )
    bodies = [bytes(row[0]) for row in await cur.fetchall()]
    return bodies[:limit], len(bodies) > limit
