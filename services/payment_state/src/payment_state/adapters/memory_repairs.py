"""Repair requests in memory: the twin of ``adapters/postgres_repairs.py`` (one row per repair id;
a claim only of a requested, due repair whose lease is free or expired, earliest due first, up to
the limit; lookups counted and releases made only under the caller's claim; decided once, its
outcome in the outbox only then), on the store's clock."""

from __future__ import annotations

from backbone.avro.envelope import is_canonical_uuid
from backbone.invariants import invariant

from payment_state.adapters.memory_tables import RepairRow, Tables
from payment_state.application.ports import StoredRepair
from payment_state.domain.repairs import RepairOutcome, RepairRequest, outcome_body


class InMemoryRepairs:
    """``InMemoryPaymentStore``'s part of ``PaymentStore`` for repairs."""

    _t: Tables
    _now_ms: int

    def record_repair(self, request: RepairRequest) -> bool:
        if request.repair_id in self._t.repairs:
            return False
        self._t.repairs[request.repair_id] = RepairRow(request, self._now_ms)
        return True

    def claim_repairs(self, worker: str, limit: int, lease_ms: int) -> list[int]:
        invariant(0 < limit <= 1000 and lease_ms > 0, "claim bounds")
        now = self._now_ms
        due = sorted(
            (r for r in self._t.repairs.values()
             if r.status == "requested" and r.next_attempt_at_ms <= now
             and (r.claimed_until_ms is None or r.claimed_until_ms < now)),
            key=lambda r: (r.next_attempt_at_ms, r.request.repair_id),
        )[:limit]  # fmt: skip  # packed: a few items a line read better than one each
        for r in due:
            r.claimed_by, r.claimed_until_ms = worker, now + lease_ms
        return [r.request.repair_id for r in due]

    def load_repair(self, repair_id: int, *, for_update: bool = False) -> StoredRepair | None:
        row = self._t.repairs.get(repair_id)
        return None if row is None else StoredRepair(row.request, row.status, row.attempts, row.claimed_by)

    def count_repair_lookup(self, repair_id: int, worker: str) -> int | None:
        row = self._t.repairs.get(repair_id)
        if row is None or row.status != "requested" or row.claimed_by != worker:
            return None
        row.attempts += 1
        return row.attempts

    def release_repair(self, repair_id: int, worker: str, delay_ms: int) -> None:
        row = self._t.repairs.get(repair_id)
        if row is None or row.claimed_by != worker:
            return
        row.claimed_by = row.claimed_until_ms = None
        row.next_attempt_at_ms = self._now_ms + max(delay_ms, 0)

    def finish_repair(self, repair_id: int, outcome: RepairOutcome, worker: str | None) -> bool:
        row = self._t.repairs.get(repair_id)
        if row is None or row.status != "requested" or (worker is not None and row.claimed_by != worker):
            return False
        # The outbox's encoder refuses a causation id that is not an event id (a canonical UUID).
        invariant(is_canonical_uuid(row.request.command_event_id), "the command's event id is a UUID")
        row.status, row.detail, row.reference = outcome.outcome, outcome.detail, outcome.reference
        row.claimed_by = row.claimed_until_ms = None
        body = outcome_body(row.request, outcome)
        self._t.events.append((row.request.payment_id, "RepairOutcome", body, row.request.command_event_id))
        return True
