"""PostgreSQL access to payouts: by id, by our reference, the due pending ones (locked, skipping rows
another transaction holds), and upserts of their status. Every function takes the caller's connection
(the application decides the transaction); values are always parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, cast

from psycopg.types.json import Jsonb

from psp_sim.adapters.store import LIST_LIMIT, Conn
from psp_sim.domain.payouts import Payout

_PAYOUT_COLUMNS: Final = (
    "id, status, amount_minor, currency, destination, reference, metadata, created_s, settle_at_ms,"
    " forced_failure_code, failure_code, failure_message, paid_s, failed_s, returned_s"
)


def _payout(row: Sequence[Any]) -> Payout:
    return Payout(*row)


async def get_payout(conn: Conn, payout_id: str, *, lock: bool = False) -> Payout | None:
    suffix = " FOR UPDATE" if lock else ""
    cur = await conn.execute(f"SELECT {_PAYOUT_COLUMNS} FROM payouts WHERE id = %s{suffix}", (payout_id,))
    row = await cur.fetchone()
    return None if row is None else _payout(row)


async def payouts_by_reference(conn: Conn, reference: str) -> list[Payout]:
    cur = await conn.execute(
        f"SELECT {_PAYOUT_COLUMNS} FROM payouts WHERE reference = %s ORDER BY created_s, id LIMIT %s",
        (reference, LIST_LIMIT),
    )
    return [_payout(row) for row in await cur.fetchall()]


async def count_payouts(conn: Conn, reference: str) -> int:
    cur = await conn.execute("SELECT count(*) FROM payouts WHERE reference = %s", (reference,))
    row = await cur.fetchone()
    return int(cast(tuple[int], row)[0])


async def due_payouts(conn: Conn, now_ms: int, limit: int) -> list[Payout]:
    """Pending payouts whose settle time has come, locked (another transaction skips them)."""
    cur = await conn.execute(
        f"SELECT {_PAYOUT_COLUMNS} FROM payouts WHERE status = 'pending' AND settle_at_ms <= %s"
        " ORDER BY settle_at_ms, id LIMIT %s FOR UPDATE SKIP LOCKED",
        (now_ms, limit),
    )
    return [_payout(row) for row in await cur.fetchall()]


async def save_payout(conn: Conn, p: Payout) -> None:
    await conn.execute(
        f"INSERT INTO payouts ({_PAYOUT_COLUMNS})"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
        " ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, failure_code = EXCLUDED.failure_code,"
        " failure_message = EXCLUDED.failure_message, paid_s = EXCLUDED.paid_s,"
        " failed_s = EXCLUDED.failed_s, returned_s = EXCLUDED.returned_s",
        (
            p.id,
            p.status,
            p.amount_minor,
            p.currency,
            p.destination,
            p.reference,
            Jsonb(p.metadata),
            p.created_s,
            p.settle_at_ms,
            p.forced_failure_code,
            p.failure_code,
            p.failure_message,
            p.paid_s,
            p.failed_s,
            p.returned_s,
        ),
    )
