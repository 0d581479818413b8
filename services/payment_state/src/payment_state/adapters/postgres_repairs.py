"""Repair requests on PostgreSQL (``repair_requests``, migration 0002): ``PgPaymentStore``'s part of
``PaymentStore`` for repairs, on the store's connection inside its open transaction.

- ``record_repair`` inserts once per repair id (``ON CONFLICT DO NOTHING``): a redelivery or a
  second event id of the same repair records nothing;
- ``claim_repairs`` is the operations' claim again (``FOR UPDATE SKIP LOCKED`` in one UPDATE, a
  lease), so two workers never look the same repair up at once and a dead worker's claim expires;
- ``finish_repair`` moves ``requested`` to its outcome with one conditional UPDATE and writes the
  ``RepairOutcome`` to the outbox only when that UPDATE took: one outcome per repair, whoever asks.
"""

from __future__ import annotations

from typing import Any, Final

import psycopg
from backbone.invariants import invariant
from backbone.outbox.writer import OutboxWriter

from payment_state.application.ports import StoredRepair
from payment_state.domain.repairs import RepairOutcome, RepairRequest, outcome_body

_REQUEST_COLUMNS: Final = (
    "repair_id, case_id, repair_type, source_key, payment_id, requested_by, approved_by, amount_minor,"
    " currency, reason, fact_type, fact_json, command_digest, command_event_id"
)
_CLAIM_REPAIRS: Final = """
WITH picked AS MATERIALIZED (
  SELECT repair_id FROM repair_requests
  WHERE status = 'requested' AND next_attempt_at <= now()
    AND (claimed_until IS NULL OR claimed_until < now())
  ORDER BY next_attempt_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
UPDATE repair_requests r SET claimed_by = %(worker)s,
  claimed_until = now() + make_interval(secs => %(lease_ms)s / 1000.0)
FROM picked WHERE r.repair_id = picked.repair_id AND r.status = 'requested'
RETURNING r.repair_id, r.next_attempt_at
"""


class PgRepairs:
    """The repair statements, on the store's connection and outbox."""

    _conn: psycopg.Connection
    _outbox: OutboxWriter | None
    _outcomes_topic: str | None

    def record_repair(self, request: RepairRequest) -> bool:
        r = request
        values = (
            r.repair_id, r.case_id, r.repair_type, r.source_key, r.payment_id, r.requested_by, r.approved_by,
            r.amount_minor, r.currency, r.reason, r.fact_type, r.fact_json, r.command_digest,
            r.command_event_id,
        )  # fmt: skip  # packed: a few items a line read better than one each
        return bool(
            self._conn.execute(
                f"INSERT INTO repair_requests ({_REQUEST_COLUMNS}) VALUES"
                " (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                values,
            ).rowcount
        )

    def claim_repairs(self, worker: str, limit: int, lease_ms: int) -> list[int]:
        invariant(0 < limit <= 1000 and lease_ms > 0, "claim bounds")
        params = {"worker": worker, "lease_ms": lease_ms, "limit": limit}
        rows = self._conn.execute(_CLAIM_REPAIRS, params).fetchall()
        return [int(r[0]) for r in sorted(rows, key=lambda r: (r[1], r[0]))]

    def load_repair(self, repair_id: int, *, for_update: bool = False) -> StoredRepair | None:
        row = self._conn.execute(
            f"SELECT {_REQUEST_COLUMNS}, status, attempts, claimed_by FROM repair_requests"
            " WHERE repair_id = %s" + (" FOR UPDATE" if for_update else ""),
            (repair_id,),
        ).fetchone()
        return None if row is None else _stored(row)

    def count_repair_lookup(self, repair_id: int, worker: str) -> int | None:
        row = self._conn.execute(
            "UPDATE repair_requests SET attempts = attempts + 1"
            " WHERE repair_id = %s AND claimed_by = %s AND status = 'requested' RETURNING attempts",
            (repair_id, worker),
        ).fetchone()
        return None if row is None else int(row[0])

    def release_repair(self, repair_id: int, worker: str, delay_ms: int) -> None:
        self._conn.execute(
            "UPDATE repair_requests SET claimed_by = NULL, claimed_until = NULL,"
            " next_attempt_at = now() + make_interval(secs => %s / 1000.0)"
            " WHERE repair_id = %s AND claimed_by = %s",
            (max(delay_ms, 0), repair_id, worker),
        )

    def finish_repair(self, repair_id: int, outcome: RepairOutcome, worker: str | None) -> bool:
        invariant(self._outbox is not None and self._outcomes_topic is not None, "repairs need the outbox")
        assert self._outbox is not None and self._outcomes_topic is not None
        row = self._conn.execute(
            "UPDATE repair_requests SET status = %s, detail = %s, reference = %s, decided_at = now(),"
            " claimed_by = NULL, claimed_until = NULL"
            " WHERE repair_id = %s AND status = 'requested' AND (%s::text IS NULL OR claimed_by = %s)"
            f" RETURNING {_REQUEST_COLUMNS}",
            (outcome.outcome, outcome.detail, outcome.reference, repair_id, worker, worker),
        ).fetchone()
        if row is None:
            return False
        request = _request(row)
        message = self._outbox.event(
            self._outcomes_topic,
            "RepairOutcome",
            request.payment_id,
            outcome_body(request, outcome),
            causation_id=request.command_event_id,
        )
        self._outbox.write(self._conn, [message])
        return True


def _request(row: tuple[Any, ...]) -> RepairRequest:
    return RepairRequest(
        int(row[0]), int(row[1]), row[2], row[3], row[4], row[5], row[6],
        None if row[7] is None else int(row[7]), row[8], row[9], row[10], row[11], row[12], row[13],
    )  # fmt: skip  # packed: a few items a line read better than one each


def _stored(row: tuple[Any, ...]) -> StoredRepair:
    return StoredRepair(_request(row[:14]), str(row[14]), int(row[15]), row[16])
