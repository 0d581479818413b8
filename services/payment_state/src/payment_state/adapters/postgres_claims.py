"""The executor's bookkeeping on PostgreSQL: claims and leases, calls in flight, attempts, the next
attempt's time, and the open-operation figures (``PgPaymentStore``'s part of ``PaymentStore`` that
``save`` never writes).

- ``claim_due`` takes open operations whose next attempt is due and whose claim (lease) is free or
  expired, with ``FOR UPDATE SKIP LOCKED`` inside one atomic UPDATE: two executors never take the
  same operation at the same time; a dead executor's claim expires after the lease;
- ``start_call`` is committed *before* the provider is called, so a worker dying mid-call leaves
  ``call_in_flight`` behind and the next claimer knows the outcome is unknown;
- the other statements only act while the caller still holds the claim (``claimed_by``), so a
  worker that lost its lease cannot reschedule someone else's attempt (``mark_unknown`` only moves
  an open operation, whoever asks).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import psycopg
from backbone import tracing
from backbone.invariants import invariant

from payment_state.adapters import pg_reads
from payment_state.adapters.pg_reads import OPERATION_COLUMNS
from payment_state.application.ports import OpenOperations
from payment_state.domain.model import Operation

# The picks are a MATERIALIZED CTE, run once: as ``WHERE id IN (SELECT … LIMIT n FOR UPDATE SKIP
# LOCKED)`` a plan that re-ran the subquery would skip the rows this statement just claimed and claim
# more than ``n`` (mt5-credit's store contract suite caught exactly that in its claim).
_CLAIM_DUE: Final = f"""
WITH picked AS MATERIALIZED (
  SELECT operation_id FROM payment_operations
  WHERE status IN ('PENDING', 'UNKNOWN') AND next_attempt_at <= now()
    AND (claimed_until IS NULL OR claimed_until < now())
  ORDER BY next_attempt_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
UPDATE payment_operations o SET claimed_by = %(worker)s,
  claimed_until = now() + make_interval(secs => %(lease_ms)s / 1000.0), updated_at = now()
FROM picked WHERE o.operation_id = picked.operation_id AND o.status IN ('PENDING', 'UNKNOWN')
RETURNING {OPERATION_COLUMNS}, o.next_attempt_at
"""


class PgOperationClaims:
    """The executor's statements, on the store's connection (inside its open transaction)."""

    _conn: psycopg.Connection

    def claim_due(self, worker: str, limit: int, lease_ms: int) -> list[Operation]:
        """``FOR UPDATE SKIP LOCKED`` inside one atomic UPDATE: two executors never take the same
        operation at the same time; a dead executor's claim expires after the lease."""
        invariant(0 < limit <= 1000 and lease_ms > 0, "claim bounds")
        params = {"worker": worker, "lease_ms": lease_ms, "limit": limit}
        rows = self._conn.execute(_CLAIM_DUE, params).fetchall()
        rows.sort(key=lambda r: r[-1])  # earliest due first (RETURNING keeps no order)
        operations = [pg_reads.operation(r[:-1]) for r in rows]
        tracing.recall(
            self._conn, [op.payment_id for op in operations]
        )  # each call joins its deposit's trace
        return operations

    def start_call(self, operation_id: str, worker: str) -> bool:
        return bool(
            self._conn.execute(
                "UPDATE payment_operations SET call_in_flight = true, attempts = attempts + 1,"
                " updated_at = now() WHERE operation_id = %s AND claimed_by = %s"
                " AND status IN ('PENDING', 'UNKNOWN')",
                (operation_id, worker),
            ).rowcount
        )

    def start_calls(self, operation_ids: Sequence[str], worker: str) -> set[str]:
        if not operation_ids:
            return set()
        rows = self._conn.execute(
            "UPDATE payment_operations SET call_in_flight = true, attempts = attempts + 1,"
            " updated_at = now() WHERE operation_id = ANY(%s) AND claimed_by = %s"
            " AND status IN ('PENDING', 'UNKNOWN') RETURNING operation_id",
            (list(operation_ids), worker),
        ).fetchall()
        return {str(r[0]) for r in rows}

    def count_lookup(self, operation_id: str, worker: str) -> bool:
        return bool(
            self._conn.execute(
                "UPDATE payment_operations SET attempts = attempts + 1, updated_at = now()"
                " WHERE operation_id = %s AND claimed_by = %s",
                (operation_id, worker),
            ).rowcount
        )

    def mark_unknown(self, operation_id: str, reason: str) -> None:
        """Only an open operation changes (a webhook may already have resolved it), and never back
        to PENDING: from UNKNOWN only a fact leads on."""
        self._conn.execute(
            "UPDATE payment_operations SET status = 'UNKNOWN', unknown_reason = %s,"
            " unknown_since = coalesce(unknown_since, now()), call_in_flight = false, updated_at = now()"
            " WHERE operation_id = %s AND status IN ('PENDING', 'UNKNOWN')",
            (reason[:200], operation_id),
        )

    def release(self, operation_id: str, worker: str, delay_ms: int) -> None:
        self._conn.execute(
            "UPDATE payment_operations SET call_in_flight = false, claimed_by = NULL, claimed_until = NULL,"
            " next_attempt_at = now() + make_interval(secs => %s / 1000.0), updated_at = now()"
            " WHERE operation_id = %s AND claimed_by = %s",
            (max(delay_ms, 0), operation_id, worker),
        )

    def open_operations(self) -> OpenOperations:
        row = self._conn.execute(
            "SELECT count(*) FILTER (WHERE status = 'PENDING'), count(*) FILTER (WHERE status = 'UNKNOWN'),"
            " coalesce(extract(epoch FROM now() - min(unknown_since) FILTER (WHERE status = 'UNKNOWN')), 0)"
            " FROM payment_operations WHERE status IN ('PENDING', 'UNKNOWN')"
        ).fetchone()
        assert row is not None
        return OpenOperations(int(row[0]), int(row[1]), float(row[2]))
