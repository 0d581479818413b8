"""Payouts on PostgreSQL (``PgPaymentStore``'s part of ``PaymentStore`` for ``payouts`` and
``payout_operations``): the insert once per withdrawal, the versioned save, and the executor's
bookkeeping of payout operations with exactly the rules of ``postgres_claims`` (a lease taken with
``FOR UPDATE SKIP LOCKED`` in one atomic UPDATE, ``call_in_flight`` committed before the call, the
other statements acting only while the caller holds the claim).
"""

from __future__ import annotations

from typing import Any, Final

import psycopg
from backbone.invariants import invariant

from payment_state.application.ports import OpenOperations
from payment_state.domain.model import OperationStatus
from payment_state.domain.payouts import Payout, PayoutOperation, PayoutState, PayoutStatus

# In the order of ``Payout``'s fields (built positionally).
PAYOUT_FIELDS: Final = (
    "withdrawal_id", "merchant_id", "provider", "amount_minor", "currency", "destination_token",
    "source_payment_id", "mt5_login", "mt5_debit_id", "request_digest", "status", "provider_payout_id",
    "failure_code", "failure_message", "version",
)  # fmt: skip  # packed: a few items a line read better than one each
# In the order of ``PayoutOperation``'s fields, its creation time last (alias ``o``).
PAYOUT_OPERATION_COLUMNS: Final = (
    "o.operation_id, o.withdrawal_id, o.status, o.attempts, o.call_in_flight, o.unknown_reason,"
    " (extract(epoch FROM o.created_at) * 1000)::bigint"
)
LOAD_PAYOUT: Final = (
    "SELECT " + ", ".join(f"p.{c}" for c in PAYOUT_FIELDS) + ", " + PAYOUT_OPERATION_COLUMNS
    + " FROM payouts p JOIN payout_operations o ON o.withdrawal_id = p.withdrawal_id"
    " WHERE p.withdrawal_id = %s AND (%s::text IS NULL OR p.merchant_id = %s)"
)  # fmt: skip  # packed: a few items a line read better than one each
_INSERT_PAYOUT: Final = f"""
WITH p AS (
    INSERT INTO payouts ({", ".join(PAYOUT_FIELDS)})
    VALUES ({", ".join(["%s"] * len(PAYOUT_FIELDS))})
    ON CONFLICT (withdrawal_id) DO NOTHING RETURNING withdrawal_id
)
INSERT INTO payout_operations (operation_id, withdrawal_id, status, provider, created_at)
SELECT %s, withdrawal_id, 'PENDING', %s, to_timestamp(%s / 1000.0) FROM p
"""
_SAVE_PAYOUT: Final = (
    "UPDATE payouts SET status = %s, provider_payout_id = %s, failure_code = %s, failure_message = %s,"
    " version = %s, updated_at = now() WHERE withdrawal_id = %s AND version = %s"
)
_SAVE_OPERATION: Final = (
    "UPDATE payout_operations SET status = %s,"
    " unknown_reason = CASE WHEN %s THEN NULL ELSE unknown_reason END,"
    " resolved_at = CASE WHEN %s THEN coalesce(resolved_at, now()) END,"
    # a resolved operation is never claimed again: a dead worker's call marker means nothing now
    " call_in_flight = call_in_flight AND NOT %s,"
    " updated_at = now()"
    " WHERE operation_id = %s"
)
_CLAIM_DUE: Final = f"""
WITH picked AS MATERIALIZED (
  SELECT operation_id FROM payout_operations
  WHERE status IN ('PENDING', 'UNKNOWN') AND next_attempt_at <= now()
    AND (claimed_until IS NULL OR claimed_until < now())
  ORDER BY next_attempt_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
UPDATE payout_operations o SET claimed_by = %(worker)s,
  claimed_until = now() + make_interval(secs => %(lease_ms)s / 1000.0), updated_at = now()
FROM picked WHERE o.operation_id = picked.operation_id AND o.status IN ('PENDING', 'UNKNOWN')
RETURNING {PAYOUT_OPERATION_COLUMNS}, o.next_attempt_at
"""


def payout_operation(row: tuple[Any, ...]) -> PayoutOperation:
    values = list(row)
    values[2] = OperationStatus(values[2])
    return PayoutOperation(*values)


def payout_state(row: tuple[Any, ...] | None) -> PayoutState | None:
    """A ``LOAD_PAYOUT`` row to the state."""
    if row is None:
        return None
    split = len(PAYOUT_FIELDS)
    values = list(row[:split])
    values[10] = PayoutStatus(values[10])
    return PayoutState(Payout(*values), payout_operation(row[split:]))


async def load_payout_async(
    conn: psycopg.AsyncConnection, withdrawal_id: str, *, merchant_id: str
) -> PayoutState | None:
    """``PaymentStore.load_payout`` for the HTTP API's event loop (status reads)."""
    cursor = await conn.execute(LOAD_PAYOUT, (withdrawal_id, merchant_id, merchant_id))
    return payout_state(await cursor.fetchone())


class PgPayouts:
    """The payout statements, on the store's connection (inside its open transaction)."""

    _conn: psycopg.Connection

    def create_payout(self, state: PayoutState) -> bool:
        p, op = state.payout, state.operation
        values = [getattr(p, c) for c in PAYOUT_FIELDS]
        values[10] = str(p.status)
        params = (*values, op.operation_id, p.provider, op.created_at_ms)
        return bool(self._conn.execute(_INSERT_PAYOUT, params).rowcount)

    def load_payout(
        self, withdrawal_id: str, *, merchant_id: str | None = None, for_update: bool = False
    ) -> PayoutState | None:
        sql = LOAD_PAYOUT + (" FOR NO KEY UPDATE OF p" if for_update else "")
        return payout_state(self._conn.execute(sql, (withdrawal_id, merchant_id, merchant_id)).fetchone())

    def save_payout(self, before: PayoutState, after: PayoutState) -> bool:
        b, a = before.payout, after.payout
        invariant(b.withdrawal_id == a.withdrawal_id and a.version == b.version + 1, "save the next version")
        params = (str(a.status), a.provider_payout_id, a.failure_code, a.failure_message, a.version,
                  a.withdrawal_id, b.version)  # fmt: skip  # continuation aligned under its bracket
        if not self._conn.execute(_SAVE_PAYOUT, params).rowcount:
            return False
        op = after.operation
        if op != before.operation:
            resolved = op.is_terminal
            cleared = op.unknown_reason is None
            op_params = (str(op.status), cleared, resolved, resolved, op.operation_id)
            self._conn.execute(_SAVE_OPERATION, op_params)
        return True

    def withdrawal_id_by_provider_payout(self, provider: str, provider_payout_id: str) -> str | None:
        row = self._conn.execute(
            "SELECT withdrawal_id FROM payouts WHERE provider = %s AND provider_payout_id = %s",
            (provider, provider_payout_id),
        ).fetchone()
        return None if row is None else str(row[0])

    # -- the executor's bookkeeping ------------------------------------------------------------------

    def claim_due_payouts(self, worker: str, limit: int, lease_ms: int) -> list[PayoutOperation]:
        invariant(0 < limit <= 1000 and lease_ms > 0, "claim bounds")
        params = {"worker": worker, "lease_ms": lease_ms, "limit": limit}
        rows = self._conn.execute(_CLAIM_DUE, params).fetchall()
        rows.sort(key=lambda r: r[-1])  # earliest due first (RETURNING keeps no order)
        return [payout_operation(r[:-1]) for r in rows]

    def start_payout_call(self, operation_id: str, worker: str) -> bool:
        return bool(
            self._conn.execute(
                "UPDATE payout_operations SET call_in_flight = true, attempts = attempts + 1,"
                " updated_at = now() WHERE operation_id = %s AND claimed_by = %s"
                " AND status IN ('PENDING', 'UNKNOWN')",
                (operation_id, worker),
            ).rowcount
        )

    def count_payout_lookup(self, operation_id: str, worker: str) -> bool:
        return bool(
            self._conn.execute(
                "UPDATE payout_operations SET attempts = attempts + 1, updated_at = now()"
                " WHERE operation_id = %s AND claimed_by = %s",
                (operation_id, worker),
            ).rowcount
        )

    def mark_payout_unknown(self, operation_id: str, reason: str) -> None:
        self._conn.execute(
            "UPDATE payout_operations SET status = 'UNKNOWN', unknown_reason = %s,"
            " unknown_since = coalesce(unknown_since, now()), call_in_flight = false, updated_at = now()"
            " WHERE operation_id = %s AND status IN ('PENDING', 'UNKNOWN')",
            (reason[:200], operation_id),
        )

    def open_payout_operations(self) -> OpenOperations:
        row = self._conn.execute(
            "SELECT count(*) FILTER (WHERE status = 'PENDING'), count(*) FILTER (WHERE status = 'UNKNOWN'),"
            " coalesce(extract(epoch FROM now() - min(unknown_since) FILTER (WHERE status = 'UNKNOWN')), 0)"
            " FROM payout_operations WHERE status IN ('PENDING', 'UNKNOWN')"
        ).fetchone()
        assert row is not None
        return OpenOperations(int(row[0]), int(row[1]), float(row[2]))

    def release_payout(self, operation_id: str, worker: str, delay_ms: int) -> None:
        self._conn.execute(
            "UPDATE payout_operations SET call_in_flight = false, claimed_by = NULL, claimed_until = NULL,"
            " next_attempt_at = now() + make_interval(secs => %s / 1000.0), updated_at = now()"
            " WHERE operation_id = %s AND claimed_by = %s",
            (max(delay_ms, 0), operation_id, worker),
        )
