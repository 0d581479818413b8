"""The resolver: find out what happened to ``unknown`` rows by looking the deal up (seed 000 step 4).

A row is looked up only once its last call is surely dead (call timeout + margin after the claim),
over a window on the MT5 server's clock starting before the first claim. Found: done with the
ticket. Absent after a complete answer: pending again (the same comment goes out on the next
attempt). Conflict: stays unknown, a case. No answer: stays unknown, an alert, backoff; after a
bound, a case too. Never a money correction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass

from backbone.lane import Lane, LaneConfig, Send
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


@dataclass(frozen=True)
class _Due:
    """An unknown row due for its lookup, with the clocks read once for its batch."""

    row: CreditRow
    server_now_ms: int | None
    db_now_ms: int


class Resolver:
    """Looks up the batch's unknown rows one at a time, on the backbone's lane."""

    name = "mt5_credit.resolver"

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
        # One MT5 session per worker lane; each lookup may take a whole call budget (progress beats).
        self._lane = Lane(self, LaneConfig(batch_size_max), progress=progress)

    def run_once(self) -> int:
        return self._lane.run_once()

    # -- the lane's strategy -----------------------------------------------------------------------

    def claim(self, limit: int) -> Sequence[_Due]:
        dead_after_ms = self._timing.call_timeout_ms + self._timing.dead_margin_ms
        # One UPDATE statement: atomic on its own, no explicit transaction (the common case finds nothing).
        rows = self._store.due_unknown(limit, dead_after_ms, self._timing.backoff_cap_ms)
        if not rows:
            return []
        server_now_ms = self._mt5.server_time_ms()
        db_now_ms = self._store.now_ms()
        return [_Due(row, server_now_ms, db_now_ms) for row in rows]

    def plan(self, claimed: Sequence[_Due]) -> Sequence[Send[_Due]]:
        return [Send(due) for due in claimed]

    def ready(self, due: _Due, waited_s: float) -> Send[_Due]:
        return Send(due)  # a lookup never moves money: nothing to re-check before it

    def send(self, due: _Due) -> DealLookup:
        row = due.row
        if due.server_now_ms is None:
            return NoAnswer("MT5 server time unavailable")
        first_claim_ms = row.first_claimed_at_ms if row.first_claimed_at_ms is not None else due.db_now_ms
        from_ms, to_ms = lookup_window_ms(
            min(first_claim_ms, due.db_now_ms), due.db_now_ms, due.server_now_ms, self._timing
        )
        return self._mt5.find_balance_deal(
            row.mt5_login,
            row.comment,
            signed_amount_minor(row.kind, row.amount_minor),
            row.currency,
            from_ms,
            to_ms,
        )

    def traced(self, due: _Due) -> AbstractContextManager[object]:
        return nullcontext()

    def alone(self, due: _Due) -> None:
        raise AssertionError(f"credit {due.row.id}: every due row is looked up")

    @contextmanager
    def transaction(self) -> Iterator[CreditStore]:
        with self._store.transaction():
            yield self._store

    def label(self, due: _Due) -> dict[str, object]:
        return {"credit_id": due.row.id, "payment_id": due.row.payment_id}

    def record(self, store: CreditStore, due: _Due, lookup: DealLookup) -> Callable[[], None] | None:
        """Apply the lookup's verdict in the group's transaction; what is logged and observed waits
        for the commit."""
        row = due.row
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
        no_answer = kind is LookupKind.NO_ANSWER
        verdict = after_lookup(kind, row.silent_lookups + (1 if no_answer else 0), self._timing)
        reason = f"{verdict.reason}: {detail}"
        target = CreditStatus(verdict.target)
        ticket = lookup.ticket if isinstance(lookup, Found) else None
        delay_ms = backoff_ms(row.silent_lookups + 1, self._timing) if no_answer else 0
        moved = store.resolve(
            row, target, reason, ticket=ticket, needs_person=verdict.stop_looking, no_answer=no_answer,
            next_lookup_ms=delay_ms,
        )  # fmt: skip  # packed: a few items a line read better than one each
        if not moved:
            return None
        if ticket is not None:
            store.publish(row, events.done_event(row, ticket))
            outcomes.answer(store, row, "executed", f"MT5 applied it ({reason})", ticket)
            withdrawal_steps.row_done(store, row, ticket)
        if verdict.needs_person and store.open_case(
            f"credit:{row.id}", kind.value, reason, credit_id=row.id, deposit_reference=row.deposit_reference
        ):
            store.publish(row, events.needs_attention(row, "unknown", reason))
            outcomes.answer(store, row, "unknown", f"a person must look: {reason}")

        def committed() -> None:
            if ticket is not None and target is CreditStatus.DONE:
                metrics.observe_done(row)
            log_fn = log.error if verdict.alert or verdict.needs_person else log.info
            log_fn(
                "unknown_looked_up",
                credit_id=row.id,
                outcome=kind.value,
                target=target.value,
                reason=reason,
                kind=row.kind.value if row.kind is CreditKind.DEBIT else "credit",
            )

        return committed
