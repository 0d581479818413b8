"""The executor's bookkeeping in memory: the twin of ``adapters/postgres_claims.py`` (a claim only of
a due operation whose lease is free or expired, earliest due first, up to the limit; calls, lookups
and releases only under the caller's claim; UNKNOWN only for an open operation), on the store's
clock."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from backbone.invariants import invariant

from payment_state.adapters.memory_tables import OPEN, OperationRow, Tables
from payment_state.application.ports import OpenOperations
from payment_state.domain.model import Operation, OperationStatus


class InMemoryOperationClaims:
    """``InMemoryPaymentStore``'s part of ``PaymentStore`` that ``save`` never writes."""

    _t: Tables
    _now_ms: int

    def claim_due(self, worker: str, limit: int, lease_ms: int) -> list[Operation]:
        invariant(0 < limit <= 1000 and lease_ms > 0, "claim bounds")
        now = self._now_ms
        due = sorted(
            (r for r in self._t.operations.values()
             if r.op.status in OPEN and r.next_attempt_at_ms <= now
             and (r.claimed_until_ms is None or r.claimed_until_ms < now)),
            key=lambda r: (r.next_attempt_at_ms, r.seq),
        )[:limit]  # fmt: skip  # packed: a few items a line read better than one each
        for r in due:
            r.claimed_by, r.claimed_until_ms = worker, now + lease_ms
        return [r.op for r in due]

    def _claimed(self, operation_id: str, worker: str) -> OperationRow | None:
        row = self._t.operations.get(operation_id)
        return row if row is not None and row.claimed_by == worker else None

    def start_call(self, operation_id: str, worker: str) -> bool:
        row = self._claimed(operation_id, worker)
        if row is None or row.op.status not in OPEN:
            return False
        row.op = replace(row.op, call_in_flight=True, attempts=row.op.attempts + 1)
        return True

    def start_calls(self, operation_ids: Sequence[str], worker: str) -> set[str]:
        return {op_id for op_id in dict.fromkeys(operation_ids) if self.start_call(op_id, worker)}

    def count_lookup(self, operation_id: str, worker: str) -> bool:
        row = self._claimed(operation_id, worker)
        if row is None:
            return False
        row.op = replace(row.op, attempts=row.op.attempts + 1)
        return True

    def mark_unknown(self, operation_id: str, reason: str) -> None:
        row = self._t.operations.get(operation_id)
        if row is None or row.op.status not in OPEN:
            return
        row.op = replace(
            row.op, status=OperationStatus.UNKNOWN, unknown_reason=reason[:200], call_in_flight=False
        )
        row.unknown_since_ms = self._now_ms if row.unknown_since_ms is None else row.unknown_since_ms

    def release(self, operation_id: str, worker: str, delay_ms: int) -> None:
        row = self._claimed(operation_id, worker)
        if row is None:
            return
        row.op = replace(row.op, call_in_flight=False)
        row.claimed_by = row.claimed_until_ms = None
        row.next_attempt_at_ms = self._now_ms + max(delay_ms, 0)

    def open_operations(self) -> OpenOperations:
        rows = self._t.operations.values()
        pending = sum(1 for r in rows if r.op.status == OperationStatus.PENDING)
        unknown = [r for r in rows if r.op.status == OperationStatus.UNKNOWN]
        since = [r.unknown_since_ms for r in unknown if r.unknown_since_ms is not None]
        oldest_s = 0.0 if not since else (self._now_ms - min(since)) / 1000
        return OpenOperations(pending, len(unknown), oldest_s)
