"""SQL of the operation executor's bookkeeping: claims, calls in flight, attempts, scheduling.

- ``claim_due`` takes open operations whose next attempt is due and whose claim (lease) is free
  or expired, with ``FOR UPDATE SKIP LOCKED`` inside one atomic UPDATE: two executors never take
  the same operation at the same time; a dead executor's claim expires after the lease.
- ``start_call`` is committed *before* the provider is called, so a worker dying mid-call leaves
  ``call_in_flight`` behind and the next claimer knows the outcome is unknown.
- the other statements only act while the caller still holds the claim (``claimed_by``), so a
  worker that lost its lease cannot reschedule someone else's attempt.
"""

from __future__ import annotations

import psycopg
from backbone.invariants import invariant


def claim_due(conn: psycopg.Connection, worker: str, limit: int, lease_ms: int) -> list[tuple[str, str]]:
    """Claim up to ``limit`` due operations; returns (operation_id, payment_id) pairs."""
    invariant(0 < limit <= 1000 and lease_ms > 0, "claim bounds")
    rows = conn.execute(
        "UPDATE payment_operations SET claimed_by = %s,"
        " claimed_until = now() + make_interval(secs => %s / 1000.0), updated_at = now()"
        " WHERE operation_id IN (SELECT operation_id FROM payment_operations"
        "   WHERE status IN ('PENDING', 'UNKNOWN') AND next_attempt_at <= now()"
        "   AND (claimed_until IS NULL OR claimed_until < now())"
        "   ORDER BY next_attempt_at LIMIT %s FOR UPDATE SKIP LOCKED)"
        " RETURNING operation_id, payment_id",
        (worker, lease_ms, limit),
    ).fetchall()
    return [(str(op), str(payment)) for op, payment in rows]


def start_call(conn: psycopg.Connection, operation_id: str, worker: str) -> bool:
    """Record that a call is about to be made (commit before calling); False if the claim was lost."""
    return bool(
        conn.execute(
            "UPDATE payment_operations SET call_in_flight = true, attempts = attempts + 1, updated_at = now()"
            " WHERE operation_id = %s AND claimed_by = %s AND status IN ('PENDING', 'UNKNOWN')",
            (operation_id, worker),
        ).rowcount
    )


def count_lookup(conn: psycopg.Connection, operation_id: str, worker: str) -> bool:
    return bool(
        conn.execute(
            "UPDATE payment_operations SET attempts = attempts + 1, updated_at = now()"
            " WHERE operation_id = %s AND claimed_by = %s",
            (operation_id, worker),
        ).rowcount
    )


def mark_unknown(conn: psycopg.Connection, operation_id: str, reason: str) -> None:
    """The outcome of a call is not known (timeout, 5xx, lost answer, worker died): UNKNOWN.

    Only an open operation changes (a webhook may already have resolved it), and never back to
    PENDING: from UNKNOWN only a fact leads on.
    """
    conn.execute(
        "UPDATE payment_operations SET status = 'UNKNOWN', unknown_reason = %s,"
        " unknown_since = coalesce(unknown_since, now()), call_in_flight = false, updated_at = now()"
        " WHERE operation_id = %s AND status IN ('PENDING', 'UNKNOWN')",
        (reason[:200], operation_id),
    )


def release(conn: psycopg.Connection, operation_id: str, worker: str, delay_ms: int) -> None:
    """End this attempt: clear the call marker and the claim, schedule the next attempt."""
    conn.execute(
        "UPDATE payment_operations SET call_in_flight = false, claimed_by = NULL, claimed_until = NULL,"
        " next_attempt_at = now() + make_interval(secs => %s / 1000.0), updated_at = now()"
        " WHERE operation_id = %s AND claimed_by = %s",
        (max(delay_ms, 0), operation_id, worker),
    )


def open_operation_stats(conn: psycopg.Connection) -> tuple[int, int, float]:
    """(pending, unknown, age in seconds of the oldest unknown) for the metrics."""
    row = conn.execute(
        "SELECT count(*) FILTER (WHERE status = 'PENDING'), count(*) FILTER (WHERE status = 'UNKNOWN'),"
        " coalesce(extract(epoch FROM now() - min(unknown_since) FILTER (WHERE status = 'UNKNOWN')), 0)"
        " FROM payment_operations WHERE status IN ('PENDING', 'UNKNOWN')"
    ).fetchone()
    assert row is not None
    oldest_unknown_seconds = float(row[2])
    return int(row[0]), int(row[1]), oldest_unknown_seconds
