"""The executor: claim pending rows, re-check, call MT5 once, record the outcome (seed 000 steps 2-3).

Only a worker whose claim UPDATE returned the row calls MT5. There is no retry anywhere in this
path: a timeout, a disconnect, a crash or a failed DB write after the call all end in ``unknown``
(directly, or through the lease running out), and only the resolver's lookup moves it on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

from backbone import failpoints, tracing
from backbone.invariants import invariant
from backbone.lane import Lane, LaneConfig, Send, Settle
from backbone.logs import get_logger

from mt5_credit.application import events, metrics, outcomes, withdrawal_steps
from mt5_credit.application.ports import Applied, BalanceResult, CreditStore, Mt5Port, NoAnswer, Refused
from mt5_credit.domain.intake import Account, precheck
from mt5_credit.domain.model import CreditKind, CreditRow, CreditStatus, signed_amount_minor

log = get_logger("mt5_credit.executor")

# Margin check decided on purpose (issue 5): on for debits, so a refund never drives the client's
# free margin below zero (MT5 answers 10019 and a person decides); also on for credits, where
# adding money cannot fail it, so the flag is the same everywhere and never left to a default.
CHECK_MARGIN_CREDIT = True
CHECK_MARGIN_DEBIT = True
# How old the account mapping read with a claim may be and still count as the re-check before a call.
PRECHECK_FRESH_S = 1.0


@dataclass(frozen=True)
class ExecutorConfig:
    batch_size_max: int
    lease_ms: int
    call_timeout_ms: int
    lease_margin_ms: int
    # Answers are written together at most this long after the first of them arrived: fewer
    # commits under load, and a quiet system's single answer is written at once.
    record_window_ms: int = 20

    def __post_init__(self) -> None:
        invariant(self.batch_size_max >= 1, "batch size must be positive")
        invariant(
            self.lease_ms >= self.call_timeout_ms + self.lease_margin_ms,
            f"lease {self.lease_ms} ms must outlast the MT5 call timeout {self.call_timeout_ms} ms"
            f" plus margin {self.lease_margin_ms} ms",
        )


@dataclass(frozen=True)
class _Called:
    """MT5's answer to a row's balance call, and when the call started (monotonic)."""

    outcome: BalanceResult
    started: float


@dataclass(frozen=True)
class _Prechecked:
    """The re-check before the call refused the row: no call, failed with a case."""

    problem: str


_Answer = _Called | _Prechecked


class Executor:
    """Claims pending rows in batches and calls MT5 once for each, on the backbone's lane."""

    name = "mt5_credit.executor"

    def __init__(
        self,
        store: CreditStore,
        mt5: Mt5Port,
        config: ExecutorConfig,
        *,
        progress: Callable[[], None] = lambda: None,
    ) -> None:
        self._store = store  # transactions are explicit (store.transaction()): the state change + its events
        self._mt5 = mt5
        self._config = config
        self._accounts: dict[int, Account] = {}  # the mapping read with the batch's claim
        # One MT5 session per worker lane: its calls stay serialized, so one call at a time.
        lane = LaneConfig(config.batch_size_max, record_window_s=config.record_window_ms / 1000)
        self._lane = Lane(self, lane, progress=progress)

    def run_once(self, *, expire_leases: bool = True) -> int:
        """Expire old leases (unless told not to this pass), claim a batch, execute it. Returns how
        many rows were claimed. The claim is one atomic statement and the accounts are read after
        it, outside any transaction: the re-check reads them only as a cache (``PRECHECK_FRESH_S``)."""
        if expire_leases:
            expired = self._store.expire_leases(self._config.batch_size_max)  # one statement
            for row in expired:
                metrics.LEASES_EXPIRED.inc()
                log.warning("lease_expired", credit_id=row.id, attempts=row.attempts)
        return self._lane.run_once()

    def execute_claimed(
        self,
        claimed: CreditRow,
        claimed_mono: float | None = None,
        accounts: dict[int, Account] | None = None,
    ) -> None:
        """One claimed row through the lane's steps on its own: ready, call, record.

        ``accounts`` is the mapping read with the claim; it stands in for the re-check only while it is
        younger than ``PRECHECK_FRESH_S``, otherwise the row's account is read again.
        """
        self._accounts = accounts or {}
        waited_s = float("inf") if claimed_mono is None else time.monotonic() - claimed_mono
        step = self.ready(claimed, waited_s)
        if step is None:
            return
        with self.traced(step.work):
            answer = step.answer if isinstance(step, Settle) else self.send(step.work)
            with self.transaction() as store:
                after = self.record(store, step.work, answer)
        if after is not None:
            after()

    # -- the lane's strategy -----------------------------------------------------------------------

    def claim(self, limit: int) -> Sequence[CreditRow]:
        claimed = self._store.claim(limit, self._config.lease_ms)
        self._accounts = self._store.load_accounts([r.mt5_login for r in claimed]) if claimed else {}
        return claimed

    def plan(self, claimed: Sequence[CreditRow]) -> Sequence[Send[CreditRow]]:
        return [Send(row) for row in claimed]

    def ready(
        self, claimed: CreditRow, waited_s: float
    ) -> Send[CreditRow] | Settle[CreditRow, _Answer] | None:
        """The row to call, re-checked and with a lease that outlasts the call; a pre-check refusal;
        or None (no call).

        A batch is claimed at once and called one row at a time. While the claim's lease still covers
        a whole call plus the margin, the row goes as claimed; otherwise the claim is *armed* first
        (confirmed ours and its lease restarted, committed): a row that waited too long in a slow
        batch may already have expired, been looked up and been credited elsewhere, and must then
        not be sent from here.
        """
        budget_ms = self._config.call_timeout_ms + self._config.lease_margin_ms
        if waited_s * 1000 <= self._config.lease_ms - budget_ms:
            row: CreditRow | None = claimed
            recent = waited_s <= PRECHECK_FRESH_S and claimed.mt5_login in self._accounts
            # The mapping read with the claim, or one autocommit read (nothing to write: no transaction).
            account = (
                self._accounts[claimed.mt5_login] if recent else self._store.load_account(claimed.mt5_login)
            )
        else:
            with self._store.transaction():
                row = self._store.arm(claimed, self._config.lease_ms)
                account = None if row is None else self._store.load_account(row.mt5_login)
        if row is None:
            return None
        problem = precheck(row.mt5_login, row.customer_id, row.currency, account)
        if problem is not None:
            metrics.PRECHECK_REFUSALS.inc()
            return Settle(row, _Prechecked(problem))
        return Send(row)

    def send(self, row: CreditRow) -> _Answer:
        """The balance call itself, outside any transaction."""
        failpoints.hit("mt5_credit.after_claim")
        check_margin = CHECK_MARGIN_CREDIT if row.kind is CreditKind.CREDIT else CHECK_MARGIN_DEBIT
        started = time.monotonic()  # the call's start: the resolver's "surely dead" wait counts from it
        outcome = self._mt5.balance(
            row.mt5_login,
            signed_amount_minor(row.kind, row.amount_minor),
            row.currency,
            row.comment,
            check_margin=check_margin,
        )
        failpoints.hit("mt5_credit.after_mt5_call")
        label = type(outcome).__name__.lower()
        metrics.BALANCE_SECONDS.labels(label).observe(time.monotonic() - started)
        metrics.BALANCE_OUTCOMES.labels(row.kind.value, label).inc()
        return _Called(outcome, started)

    def traced(self, row: CreditRow) -> AbstractContextManager[object]:
        # In the payment's stored trace: the MT5 call's span is the deposit's (ADR 0012).
        return tracing.for_payment(row.payment_id, f"mt5_credit.execute {row.kind.value}")

    def alone(self, row: CreditRow) -> None:
        raise AssertionError(f"credit {row.id}: every claimed row is sent")

    @contextmanager
    def transaction(self) -> Iterator[CreditStore]:
        with self._store.transaction():
            yield self._store

    def record(self, store: CreditStore, row: CreditRow, answer: _Answer) -> Callable[[], None] | None:
        """What MT5 (or the re-check) said, inside the group's transaction; the callable returned
        observes the credit's timing once that transaction committed."""
        failpoints.hit("mt5_credit.before_record_outcome")
        if isinstance(answer, _Prechecked):
            self._fail(store, row, None, answer.problem, case_class="precheck")
            return None
        started_ago_ms = int((time.monotonic() - answer.started) * 1000) + 1
        match answer.outcome:
            case Applied(ticket=ticket):
                done = store.finish(
                    row, CreditStatus.DONE, "MT5 applied", ticket=ticket, call_started_ago_ms=started_ago_ms
                )
                if done:  # the gateway logged the call and its ticket already
                    store.publish(row, events.done_event(row, ticket))
                    outcomes.answer(store, row, "executed", "MT5 applied it", ticket)
                    withdrawal_steps.row_done(store, row, ticket)
                    return lambda: metrics.observe_done(row)
            case Refused(retcode=retcode, reason=reason):
                self._fail(
                    store, row, None if retcode is None else str(retcode), reason, case_class="rejected"
                )
            case NoAnswer(reason=why, sent=sent):
                reason = why if sent else f"{why} (not sent)"
                store.finish(
                    row, CreditStatus.UNKNOWN, f"no answer: {reason}", call_started_ago_ms=started_ago_ms
                )
                log.warning("mt5_no_answer", credit_id=row.id, reason=reason, comment=row.comment)
        return None

    def label(self, row: CreditRow) -> dict[str, object]:
        return {"credit_id": row.id, "payment_id": row.payment_id}

    @staticmethod
    def _fail(
        store: CreditStore, row: CreditRow, retcode: str | None, reason: str, *, case_class: str
    ) -> None:
        """Inside the caller's transaction: failed, a case, and the event a person will see."""
        if not store.finish(row, CreditStatus.FAILED, reason, retcode=retcode):
            return
        outcomes.answer(store, row, "refused", f"MT5 or its pre-check refused it: {reason}")
        withdrawal_steps.row_failed(store, row, reason)
        store.open_case(
            f"credit:{row.id}",
            case_class,
            reason,
            credit_id=row.id,
            deposit_reference=row.deposit_reference,
        )
        if row.kind is CreditKind.CREDIT:
            store.publish(row, events.failed(row, retcode, reason))
        else:  # a failed debit (e.g. the money is no longer on the account): a person decides
            store.publish(row, events.needs_attention(row, "failed", reason))
        log.error("credit_failed", credit_id=row.id, retcode=retcode, reason=reason, kind=row.kind.value)
