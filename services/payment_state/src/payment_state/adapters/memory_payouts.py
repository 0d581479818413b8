"""Payouts in memory: the twin of ``adapters/postgres_payouts.py`` (one payout per withdrawal, the
versioned save, a unique provider payout id, and the payout operations' claims with the rules of
``memory_claims``), on the store's clock."""

from __future__ import annotations

from dataclasses import replace

from backbone.invariants import invariant

from payment_state.adapters.memory_tables import OPEN, PayoutRow, Tables, UniqueViolation
from payment_state.application.ports import OpenOperations
from payment_state.domain.model import OperationStatus
from payment_state.domain.payouts import PayoutOperation, PayoutState


class InMemoryPayouts:
    """``InMemoryPaymentStore``'s payout part."""

    _t: Tables
    _now_ms: int

    def create_payout(self, state: PayoutState) -> bool:
        if state.payout.withdrawal_id in self._t.payouts:
            return False
        seq = len(self._t.payouts) + 1
        self._t.payouts[state.payout.withdrawal_id] = PayoutRow(state, seq, self._now_ms)
        return True

    def load_payout(
        self, withdrawal_id: str, *, merchant_id: str | None = None, for_update: bool = False
    ) -> PayoutState | None:
        row = self._t.payouts.get(withdrawal_id)
        if row is None or (merchant_id is not None and row.state.payout.merchant_id != merchant_id):
            return None
        return row.state

    def save_payout(self, before: PayoutState, after: PayoutState) -> bool:
        b, a = before.payout, after.payout
        invariant(b.withdrawal_id == a.withdrawal_id and a.version == b.version + 1, "save the next version")
        row = self._t.payouts.get(b.withdrawal_id)
        if row is None or row.state.payout.version != b.version:
            return False
        if a.provider_payout_id is not None:
            other = self.withdrawal_id_by_provider_payout(a.provider, a.provider_payout_id)
            if other not in (None, a.withdrawal_id):
                raise UniqueViolation("payouts_provider_payout_idx")
        # The bookkeeping fields are the store's: keep them, take the domain's status.
        op = replace(
            row.state.operation, status=after.operation.status, unknown_reason=after.operation.unknown_reason
        )
        if op.is_terminal:  # never claimed again: a dead worker's call marker means nothing now
            op = replace(op, call_in_flight=False)
        row.state = PayoutState(a, op)
        return True

    def withdrawal_id_by_provider_payout(self, provider: str, provider_payout_id: str) -> str | None:
        for row in self._t.payouts.values():
            p = row.state.payout
            if (p.provider, p.provider_payout_id) == (provider, provider_payout_id):
                return p.withdrawal_id
        return None

    def _row_of(self, operation_id: str) -> PayoutRow | None:
        for row in self._t.payouts.values():
            if row.state.operation.operation_id == operation_id:
                return row
        return None

    def _set_op(self, row: PayoutRow, op: PayoutOperation) -> None:
        row.state = PayoutState(row.state.payout, op)

    def claim_due_payouts(self, worker: str, limit: int, lease_ms: int) -> list[PayoutOperation]:
        invariant(0 < limit <= 1000 and lease_ms > 0, "claim bounds")
        now = self._now_ms
        due = sorted(
            (r for r in self._t.payouts.values()
             if r.state.operation.status in OPEN and r.next_attempt_at_ms <= now
             and (r.claimed_until_ms is None or r.claimed_until_ms < now)),
            key=lambda r: (r.next_attempt_at_ms, r.seq),
        )[:limit]  # fmt: skip  # packed: a few items a line read better than one each
        for r in due:
            r.claimed_by, r.claimed_until_ms = worker, now + lease_ms
        return [r.state.operation for r in due]

    def _claimed_payout(self, operation_id: str, worker: str) -> PayoutRow | None:
        row = self._row_of(operation_id)
        return row if row is not None and row.claimed_by == worker else None

    def start_payout_call(self, operation_id: str, worker: str) -> bool:
        row = self._claimed_payout(operation_id, worker)
        if row is None or row.state.operation.status not in OPEN:
            return False
        op = row.state.operation
        self._set_op(row, replace(op, call_in_flight=True, attempts=op.attempts + 1))
        return True

    def count_payout_lookup(self, operation_id: str, worker: str) -> bool:
        row = self._claimed_payout(operation_id, worker)
        if row is None:
            return False
        self._set_op(row, replace(row.state.operation, attempts=row.state.operation.attempts + 1))
        return True

    def mark_payout_unknown(self, operation_id: str, reason: str) -> None:
        row = self._row_of(operation_id)
        if row is None or row.state.operation.status not in OPEN:
            return
        op = replace(row.state.operation, status=OperationStatus.UNKNOWN, unknown_reason=reason[:200])
        row.unknown_since_ms = self._now_ms if row.unknown_since_ms is None else row.unknown_since_ms
        self._set_op(row, replace(op, call_in_flight=False))

    def open_payout_operations(self) -> OpenOperations:
        ops = [r.state.operation for r in self._t.payouts.values()]
        pending = sum(1 for op in ops if op.status == OperationStatus.PENDING)
        unknown = [r for r in self._t.payouts.values() if r.state.operation.status == OperationStatus.UNKNOWN]
        since = [r.unknown_since_ms for r in unknown if r.unknown_since_ms is not None]
        oldest_s = 0.0 if not since else (self._now_ms - min(since)) / 1000
        return OpenOperations(pending, len(unknown), oldest_s)

    def release_payout(self, operation_id: str, worker: str, delay_ms: int) -> None:
        row = self._claimed_payout(operation_id, worker)
        if row is None:
            return
        self._set_op(row, replace(row.state.operation, call_in_flight=False))
        row.claimed_by = row.claimed_until_ms = None
        row.next_attempt_at_ms = self._now_ms + max(delay_ms, 0)
