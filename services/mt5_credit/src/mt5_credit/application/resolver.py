"""The resolver: find out what happened to ``unknown`` rows by looking the deal up (seed 000 step 4).

A row is looked up only once its last call is surely dead (call timeout + margin after the claim),
over a window on the MT5 server's clock starting before the first claim. Found: done with the
ticket. Absent after a complete answer: pending again (the same comment goes out on the next
attempt). Conflict: stays unknown, a case. No answer: stays unknown, an alert, backoff; after a
bound, a case too. Never a money correction.
"""

from __future__ import annotations

from collections.abc import Callable

from backbone.logs import get_logger

from mt5_credit.application import events, metrics, outcomes, withdrawal_steps
from mt5_credit.application.ports import (
    Absent,
    Conflict,
    CreditStore,
    DealLookup,
    Found,
    Mt5Port,
    NoAnswer,
)
from mt5_credit.domain.model import CreditKind, CreditRow, CreditStatus, signed_amount_minor
from mt5_credit.domain.resolve import LookupKind, ResolveTiming, after_lookup, backoff_ms, lookup_window_ms

log = get_logger("mt5_credit.resolver")


class Resolver:
    def __init__(
        self,
        store: CreditStore,
        mt5: Mt5Port,
        timing: ResolveTiming,
        batch_size_max: int,
        *,
        progress: Callable[[], None] = lambda: None,
    ) -> None:
        self._store = store
        self._mt5 = mt5
        self._timing = timing
        self._batch_size_max = batch_size_max
        self._progress = progress  # called before each lookup (each may take a whole call budget)

    def run_once(self) -> int:
        dead_after_ms = self._timing.call_timeout_ms + self._timing.dead_margin_ms
        # One UPDATE statement: atomic on its own, no explicit transaction (the common case finds nothing).
        rows = self._store.due_unknown(self._batch_size_max, dead_after_ms, self._timing.backoff_cap_ms)
        if not rows:
            return 0
        server_now_ms = self._mt5.server_time_ms()
        db_now_ms = self._store.now_ms()
        for row in rows:
            self._progress()
            self._resolve(row, self._lookup(row, server_now_ms, db_now_ms))
        return len(rows)

    def _lookup(self, row: CreditRow, server_now_ms: int | None, db_now_ms: int) -> DealLookup:
        if server_now_ms is None:
            return NoAnswer("MT5 server time unavailable")
        first_claim_ms = row.first_claimed_at_ms if row.first_claimed_at_ms is not None else db_now_ms
        from_ms, to_ms = lookup_window_ms(
            min(first_claim_ms, db_now_ms), db_now_ms, server_now_ms, self._timing
        )
        return self._mt5.find_balance_deal(
            row.mt5_login,
            row.comment,
            signed_amount_minor(row.kind, row.amount_minor),
            row.currency,
            from_ms,
            to_ms,
        )

    def _resolve(self, row: CreditRow, lookup: DealLookup) -> None:
        match lookup:
            case Found():
                kind, detail = LookupKind.FOUND, f"ticket {lookup.ticket}"
            case Absent():
                kind, detail = LookupKind.ABSENT, "complete answer"
            case Conflict():
                kind, detail = LookupKind.CONFLICT, f"{lookup.reason}; tickets {list(lookup.tickets)}"
            case NoAnswer():
                kind, detail = LookupKind.NO_ANSWER, lookup.reason
        metrics.LOOKUP_OUTCOMES.labels(kind.value).inc()
        silent = kind is LookupKind.NO_ANSWER
        verdict = after_lookup(kind, row.silent_lookups + (1 if silent else 0), self._timing)
        reason = f"{verdict.reason}: {detail}"
        target = CreditStatus(verdict.target)
        ticket = lookup.ticket if isinstance(lookup, Found) else None
        delay_ms = backoff_ms(row.silent_lookups + 1, self._timing) if silent else 0
        with self._store.transaction():
            moved = self._store.resolve(
                row,
                target,
                reason,
                ticket=ticket,
                needs_person=verdict.stop_looking,
                silent=silent,
                next_lookup_ms=delay_ms,
            )
            if not moved:
                return
            if ticket is not None:
                self._store.publish(row, events.done_event(row, ticket))
                outcomes.answer(self._store, row, "executed", f"MT5 applied it ({reason})", ticket)
                withdrawal_steps.row_done(self._store, row, ticket)
            if verdict.needs_person and self._store.open_case(
                f"credit:{row.id}",
                kind.value,
                reason,
                credit_id=row.id,
                deposit_reference=row.deposit_reference,
            ):
                self._store.publish(row, events.needs_attention(row, "unknown", reason))
                outcomes.answer(self._store, row, "unknown", f"a person must look: {reason}")
        if ticket is not None and target is CreditStatus.DONE:
            metrics.observe_done(row)  # committed: the block above returned when nothing moved
        log_fn = log.error if verdict.alert or verdict.needs_person else log.info
        log_fn(
            "unknown_looked_up",
            credit_id=row.id,
            outcome=kind.value,
            target=target.value,
            reason=reason,
            kind=row.kind.value if row.kind is CreditKind.DEBIT else "credit",
        )
